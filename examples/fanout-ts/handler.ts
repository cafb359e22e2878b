// fanout-ts: fan-out and fan-in in one handler. The first run stages one awaited
// "render" job per page of the document given as JSON ({"pages": ["...", ...]}) and
// waits for them; the run resumed once every page has ended joins their outputs.
import { type Job, waitForChildren } from "../../guest-sdk/javascript/wasmjobs.js";

function pagesOf(doc: { pages?: unknown }): string[] {
  return Array.isArray(doc.pages) ? doc.pages.map(String) : [];
}

export default async function handle(job: Job) {
  if (job.round() === 0) {                     // the first run: fan out
    for (const page of pagesOf(job.json())) job.enqueue("render", page, { await: true });
    throw waitForChildren();
  }
  job.output(job.children().map((c) => c.output).join("\n"));
}
