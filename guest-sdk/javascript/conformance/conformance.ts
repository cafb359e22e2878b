// The conformance handler in TypeScript: its payload names a case of the
// cross-language table (internal/rigs/abitest/sdk.go, and sdk_http.go for the HTTP cases).
import { type Job, retry, deferFor, deadLetter, retryAfter, isFetchError, HTTPStatus, waitForChildren } from "../wasmjobs.js";

// httpCase runs an HTTP case of internal/rigs/abitest/sdk_http.go.
async function httpCase(job: Job, kind: string, url: string): Promise<void> {
  if (kind === "retry-after") {
    const res = await fetch(url);
    if (res.status === 429 || res.status === 503) throw retryAfter(res);
    job.output(String(res.status));
    return;
  }
  const init: RequestInit = kind === "post"
    ? { method: "POST", body: "ping", headers: { "X-Conformance": "yes", "Content-Type": "text/plain" } }
    : kind === "inject" ? { headers: { "X-Inject": "a\nX-Evil: 1" } } : { headers: { "X-Conformance": "yes" } };
  let res: Response;
  try {
    res = await fetch(url, init);
  } catch (e) {
    // Headers refuses a value holding CR, LF or NUL with a TypeError, before fetch
    // reaches the host: the case's BAD_ARGUMENT.
    if (kind === "inject" && e instanceof TypeError && !isFetchError(e)) {
      job.output(`error ${HTTPStatus.BAD_ARGUMENT}`);
      return;
    }
    if (!isFetchError(e)) throw e;
    job.output(`error ${e.code}`);
    return;
  }
  // Headers.get joins a repeated header's values with ", ", as the Fetch standard does.
  const reply = (res.headers.get("X-Reply") ?? "").split(", ").join(",");
  job.output(`${res.status}\n${reply}\n${await res.text()}`);
}

// spins counts the case "spin"'s turns, so that its loop does something.
let spins = 0;

export default async function handle(job: Job): Promise<void> {
  const p = job.text;
  if (p === "ack") return;
  if (p === "retry") throw retry("asked to retry", { delay: 1500 });
  if (p === "defer") throw deferFor(2000, "asked to defer");
  if (p === "dead") throw deadLetter("asked to die");
  if (p === "meta") {
    const h = job.header("X-Test");
    job.output(`${job.id}\n${job.queue}\n${job.module}\n${job.attempt}\n${job.maxAttempts}\n${h ?? "-"}\n`);
    return;
  }
  if (p === "trace") {
    job.output(`${job.traceId}\n${job.spanId}\n`);
    return;
  }
  if (p === "spin") { // until the host stops it (its interrupt check)
    for (;;) spins++;
  }
  if (p === "children") {
    job.enqueue("child", "c1");
    // An await on the way: the host runs the VM's pending jobs until the promise settles.
    await Promise.resolve();
    job.enqueue("child", "c2", { delay: 250 });
    return;
  }
  if (p === "fanout") {
    job.output(`${job.round()} ${job.children().length}\n`);
    job.enqueue("child", "c1", { await: true });
    job.enqueue("child", "c2", { delay: 250 });
    job.enqueue("child", "c3", { await: true });
    throw waitForChildren();
  }
  if (p === "fanin") {
    const done = job.children();
    job.output(`${job.round()} ${done.length}\n`);
    for (const c of done) job.output(`${c.id}|${c.queue}|${c.state}|${c.reason}|${c.output}|${c.truncated}\n`);
    return;
  }
  if (p === "log") {
    job.log.info("conformance log line");
    job.log.warn(`second line, attempt ${job.attempt}`);
    return;
  }
  if (p === "trap") throw new Error("unreachable");
  const http = /^http-(get|post|retry-after|inject):(.*)$/s.exec(p);
  if (http) return httpCase(job, http[1], http[2]);
  if (p.startsWith("echo:")) {
    job.output(job.payload.subarray(5));
    return;
  }
  throw deadLetter("unknown case");
}
