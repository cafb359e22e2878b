// The JSON handler of `make bench`: parses an order, checks its fields, and writes a
// one-line summary; no child job, so that the benchmark's queue is all it needs.
import { type Job, deadLetter } from "../wasmjobs.js";

interface Order {
  id: string;
  items: { sku: string; qty: number; cents: number }[];
}

export default async function handle(job: Job): Promise<void> {
  const o = job.json<Order>();
  if (typeof o?.id !== "string" || !Array.isArray(o.items)) throw deadLetter("not an order");
  let total = 0;
  for (const it of o.items) {
    if (!Number.isInteger(it.qty) || !Number.isInteger(it.cents)) throw deadLetter("bad item " + JSON.stringify(it));
    total += it.qty * it.cents;
  }
  job.output(JSON.stringify({ id: o.id, items: o.items.length, total }));
}
