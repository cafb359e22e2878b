// receipt-ts: validates an order given as JSON and renders its receipt as text, then
// stages the email that sends it. A payload that is not a valid order is dead-lettered
// with every problem found, since retrying it could not help.
import { type Job, deadLetter } from "../../guest-sdk/javascript/wasmjobs.js";

interface Item {
  sku: string;
  name: string;
  qty: number;
  cents: number;
}

interface Order {
  id: string;
  email: string;
  name: string;
  currency: "EUR" | "USD" | "GBP";
  items: Item[];
}

const symbols: Record<Order["currency"], string> = { EUR: "€", USD: "$", GBP: "£" };

// validate returns the problems of a parsed payload, or none for a valid Order.
function validate(v: unknown): string[] {
  const problems: string[] = [];
  if (typeof v !== "object" || v === null || Array.isArray(v)) return ["the payload is not a JSON object"];
  const o = v as Record<string, unknown>;
  if (typeof o.id !== "string" || o.id === "") problems.push("id: want a non-empty string");
  if (typeof o.email !== "string" || !/^[^@\s]+@[^@\s]+\.[^@\s]+$/.test(o.email)) problems.push("email: want an address");
  if (typeof o.name !== "string" || o.name.trim() === "") problems.push("name: want a non-empty string");
  if (typeof o.currency !== "string" || !(o.currency in symbols)) problems.push("currency: want EUR, USD or GBP");
  if (!Array.isArray(o.items) || o.items.length === 0) {
    problems.push("items: want a non-empty list");
  } else {
    o.items.forEach((it: any, i: number) => {
      if (typeof it !== "object" || it === null) return problems.push(`items[${i}]: want an object`);
      if (typeof it.sku !== "string" || it.sku === "") problems.push(`items[${i}].sku: want a non-empty string`);
      if (typeof it.name !== "string") problems.push(`items[${i}].name: want a string`);
      if (!Number.isInteger(it.qty) || it.qty < 1) problems.push(`items[${i}].qty: want a whole number >= 1`);
      if (!Number.isInteger(it.cents) || it.cents < 0) problems.push(`items[${i}].cents: want whole cents >= 0`);
    });
  }
  return problems;
}

function money(cents: number, currency: Order["currency"]): string {
  return `${symbols[currency]}${Math.floor(cents / 100)}.${String(cents % 100).padStart(2, "0")}`;
}

// render lays the receipt out in columns: item, quantity, amount.
export function render(o: Order): string {
  const rows = o.items.map((it) => [`${it.name} (${it.sku})`, `${it.qty} x ${money(it.cents, o.currency)}`, money(it.qty * it.cents, o.currency)]);
  const total = o.items.reduce((sum, it) => sum + it.qty * it.cents, 0);
  const w0 = Math.max(...rows.map((r) => r[0].length), "Total".length);
  const w1 = Math.max(...rows.map((r) => r[1].length));
  const w2 = Math.max(...rows.map((r) => r[2].length), money(total, o.currency).length);
  const line = (a: string, b: string, c: string) => `${a.padEnd(w0)}  ${b.padStart(w1)}  ${c.padStart(w2)}`;
  return [
    `Receipt for order ${o.id}`,
    `Dear ${o.name},`,
    "",
    ...rows.map((r) => line(r[0], r[1], r[2])),
    "-".repeat(w0 + w1 + w2 + 4),
    line("Total", "", money(total, o.currency)),
    "",
  ].join("\n");
}

export default async function handle(job: Job): Promise<void> {
  let parsed: unknown;
  try {
    parsed = job.json();
  } catch (e) {
    throw deadLetter(`the payload is not JSON: ${(e as Error).message}`);
  }
  const problems = validate(parsed);
  if (problems.length > 0) throw deadLetter(`invalid order: ${problems.join("; ")}`);
  const order = parsed as Order;
  const text = render(order);
  job.output(text);
  job.enqueue("send-email", JSON.stringify({ to: order.email, subject: `Your receipt for order ${order.id}`, body: text }));
  job.log.info(`rendered the receipt of order ${order.id} (${order.items.length} items)`);
}
