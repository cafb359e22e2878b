// sync-contact-ts: upserts a contact into a CRM's HTTP API with fetch. The payload
// names the CRM (one per tenant, each reachable only where the manifest's [http]
// grant allows) and the contact; the output is the CRM's answer, as JSON. A 429 or
// 503 defers the job by the CRM's Retry-After without spending an attempt; a refusal
// of the contact itself (another 4xx), or a CRM outside the grant, is dead-lettered,
// since retrying could not help; anything else (a 5xx, a timeout, a refused
// connection) is retried with the queue's backoff.
import { type Job, deadLetter, retry, retryAfter, isFetchError } from "../../guest-sdk/javascript/wasmjobs.js";

interface Task {
  crm: string; // the CRM's base URL, such as https://crm.example.com
  contact: { email: string; name: string };
}

interface Synced {
  email: string;
  contactId: string;
  created: boolean;
}

function parse(job: Job): Task {
  let v: unknown;
  try {
    v = job.json();
  } catch {
    throw deadLetter("the payload is not JSON");
  }
  const t = v as Partial<Task> | null;
  if (t === null || typeof t !== "object" || typeof t.crm !== "string" || !URL.canParse(t.crm)) {
    throw deadLetter("crm: want the CRM's base URL");
  }
  const c = t.contact;
  if (!c || typeof c.email !== "string" || !/^[^@\s]+@[^@\s]+\.[^@\s]+$/.test(c.email) || typeof c.name !== "string") {
    throw deadLetter("contact: want {email, name}");
  }
  return { crm: t.crm, contact: { email: c.email, name: c.name } };
}

export default async function handle(job: Job): Promise<void> {
  const task = parse(job);
  const url = new URL("/v1/contacts", task.crm).href;
  let res: Response;
  try {
    res = await fetch(url, {
      method: "PUT",
      headers: { "Content-Type": "application/json", Accept: "application/json" },
      body: JSON.stringify(task.contact),
      // The grant's timeout bounds a request too; this one says how long this call
      // may take within the job.
      signal: AbortSignal.timeout(5000),
    });
  } catch (e) {
    if (isFetchError(e) && (e.kind === "denied" || e.kind === "not_permitted")) {
      throw deadLetter(`${url} is outside the manifest's [http] grant: ${e.message}`);
    }
    throw e; // a timeout, a refused connection...: retried with backoff
  }
  if (res.status === 429 || res.status === 503) throw retryAfter(res);
  if (res.status >= 500) throw retry(`the CRM answered ${res.status} ${res.statusText}`);
  if (!res.ok) throw deadLetter(`the CRM refused the contact: ${res.status} ${await res.text()}`);
  const body = (await res.json()) as { id?: unknown };
  if (typeof body.id !== "string") throw retry("the CRM's answer has no contact id");
  const out: Synced = { email: task.contact.email, contactId: body.id, created: res.status === 201 };
  job.output(JSON.stringify(out));
  job.log.info(`contact ${out.email} is ${out.contactId} (${out.created ? "created" : "updated"})`);
}
