// The conformance handler in AssemblyScript: its payload names a case of the
// cross-language table (internal/rigs/abitest/sdk.go, and sdk_http.go for the HTTP cases).
import { Job, Level, Outcome, Request, handle, retry, defer, deadLetter, trap, retryAfter, waitForChildren } from "../assembly/index";
export { wasmjobs_abi_v1, wasmjobs_handle, wasmjobs_serve } from "../assembly/index";

/** Sends req and acks with "STATUS\nX-REPLY\nBODY", or "error CODE" on a failure. */
// spins counts the case "spin"'s turns, so that its loop does something.
let spins: i32 = 0;

function http(job: Job, req: Request): Outcome {
  const res = req.send();
  const body = res.text(1 << 20);
  res.close();
  if (body == null) {
    job.output("error " + res.error!.code.toString());
  } else {
    job.output(res.status.toString() + "\n" + res.headerAll("x-reply").join(",") + "\n" + body);
  }
  return Outcome.Ack;
}

handle((job: Job): Outcome => {
  const p = job.text();
  if (p == "ack") return Outcome.Ack;
  if (p == "retry") return retry("asked to retry", 1500);
  if (p == "defer") return defer(2000, "asked to defer");
  if (p == "dead") return deadLetter("asked to die");
  if (p == "meta") {
    const h = job.header("X-Test");
    job.output(job.id() + "\n" + job.queue() + "\n" + job.module() + "\n" + job.attempt().toString() + "\n" +
      job.maxAttempts().toString() + "\n" + (h == null ? "-" : <string>h) + "\n");
    return Outcome.Ack;
  }
  if (p == "trace") {
    job.output(job.traceId() + "\n" + job.spanId() + "\n");
    return Outcome.Ack;
  }
  if (p == "spin") { // until the host stops it
    while (true) spins++;
  }
  if (p == "children") {
    job.enqueue("child", "c1", 0);
    job.enqueue("child", "c2", 250);
    return Outcome.Ack;
  }
  if (p == "fanout") {
    job.output(job.round().toString() + " " + job.children().length.toString() + "\n");
    job.enqueueAwaited("child", "c1", 0);
    job.enqueue("child", "c2", 250);
    job.enqueueAwaited("child", "c3", 0);
    return waitForChildren();
  }
  if (p == "fanin") {
    const done = job.children();
    let out = job.round().toString() + " " + done.length.toString() + "\n";
    for (let i = 0; i < done.length; i++) {
      const c = done[i];
      out += c.id + "|" + c.queue + "|" + c.state + "|" + c.reason + "|" + String.UTF8.decode(c.output) + "|" + (c.truncated ? "true" : "false") + "\n";
    }
    job.output(out);
    return Outcome.Ack;
  }
  if (p == "log") {
    job.info("conformance log line");
    job.log(Level.Warn, "second line, attempt " + job.attempt().toString());
    return Outcome.Ack;
  }
  if (p == "trap") trap();
  if (p.startsWith("echo:")) {
    job.outputBytes(job.payload().slice(5));
    return Outcome.Ack;
  }
  if (p.startsWith("http-get:")) return http(job, Request.get(p.substring(9)).header("X-Conformance", "yes"));
  if (p.startsWith("http-post:")) {
    return http(job, Request.post(p.substring(10)).header("X-Conformance", "yes").header("Content-Type", "text/plain").bodyText("ping"));
  }
  if (p.startsWith("http-inject:")) return http(job, Request.get(p.substring(12)).header("X-Inject", "a\nX-Evil: 1"));
  if (p.startsWith("http-retry-after:")) {
    const res = Request.get(p.substring(17)).send();
    let o = Outcome.Ack;
    if (res.error != null) job.output("error " + res.error!.code.toString());
    else if (res.status == 429 || res.status == 503) o = retryAfter(res);
    else job.output(res.status.toString());
    res.close();
    return o;
  }
  return deadLetter("unknown case");
});
