// The conformance handler in TypeScript: its payload names a case of the
// cross-language table (internal/abitest/sdk.go).
import { type Job, retry, deferFor, deadLetter } from "../wasmjobs.js";

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
  if (p === "children") {
    job.enqueue("child", "c1");
    // An await on the way: the host runs the VM's pending jobs until the promise settles.
    await Promise.resolve();
    job.enqueue("child", "c2", { delay: 250 });
    return;
  }
  if (p === "log") {
    job.log.info("conformance log line");
    job.log.warn(`second line, attempt ${job.attempt}`);
    return;
  }
  if (p === "trap") throw new Error("unreachable");
  if (p.startsWith("echo:")) {
    job.output(job.payload.subarray(5));
    return;
  }
  throw deadLetter("unknown case");
}
