// The conformance handler in AssemblyScript: its payload names a case of the
// cross-language table (internal/abitest/sdk.go).
import { Job, Level, Outcome, handle, retry, defer, deadLetter, trap } from "../assembly/index";
export { wasmjobs_abi_v1, wasmjobs_handle } from "../assembly/index";

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
  if (p == "children") {
    job.enqueue("child", "c1", 0);
    job.enqueue("child", "c2", 250);
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
  return deadLetter("unknown case");
});
