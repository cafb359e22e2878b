// The wasmjobs SDK for JavaScript and TypeScript handlers (guest ABI v1, through the
// host's JS adapter; see abi/SPEC.md, "JavaScript handlers").
//
// A handler is the default export of the entry file:
//
//   import { deadLetter } from "./wasmjobs.js";
//   export default async function handle(job) {
//     const order = job.json();
//     if (!order.id) throw deadLetter("no order id");
//     job.output(`order ${order.id}`);
//   }
//
// Returning acknowledges the job. Throwing what retry, deferFor or deadLetter return
// settles it that way; any other thrown value is a failure, retried with the queue's
// backoff. The job object itself is made by the host (host/jsruntime/prelude.js).

// OUTCOME is the property the host's runtime looks for on a thrown value: a registered
// symbol, so that this file and the host's prelude agree without sharing code.
const OUTCOME = Symbol.for("wasmjobs.outcome");

/** An Outcome is thrown to settle a job other than by acknowledging it. */
export class Outcome extends Error {
  constructor(kind, code, reason, delayMs) {
    super(reason || kind);
    this.name = "Outcome";
    this.kind = kind;
    this[OUTCOME] = { code, reason: reason ?? "", delayMs: delayMs ?? -1 };
  }
}

function delayOf(options) {
  if (options == null || options.delay == null) return -1;
  const d = Number(options.delay);
  if (!Number.isFinite(d) || d < 0) throw new RangeError(`delay must be a non-negative number of milliseconds, got ${options.delay}`);
  return Math.floor(d);
}

/** retry asks for another attempt, after options.delay ms or the queue's backoff. */
export function retry(reason, options) {
  return new Outcome("retry", 1, String(reason ?? ""), delayOf(options));
}

/** deferFor puts the job back at the front of its queue after ms, without using an attempt. */
export function deferFor(ms, reason) {
  return new Outcome("defer", 2, String(reason ?? ""), delayOf({ delay: ms }));
}

/** deadLetter moves the job to its queue's dead letters with the reason. */
export function deadLetter(reason) {
  return new Outcome("dead_letter", 3, String(reason ?? ""), -1);
}

/** waitForChildren, thrown, waits for the children enqueued with {await: true}; the job
 * then runs again at the same attempt, job.round() one higher, job.children() saying
 * how each ended. */
export function waitForChildren() {
  return new Outcome("wait", 4, "", -1);
}

/** The status codes of ABI v1. job.output returns false when it fails (past the output
 * limit); job.enqueue throws a RangeError naming the status (bad argument, not permitted,
 * limit exceeded). Neither returns a code. */
export const Status = Object.freeze({ OK: 0, NOT_FOUND: -1, BAD_ARGUMENT: -2, LIMIT_EXCEEDED: -3, NOT_PERMITTED: -4 });

/** The ABI's statuses of outbound HTTP: a FetchError's code (abi/SPEC.md, "Outbound HTTP
 * (added)"); its kind names it. */
export const HTTPStatus = Object.freeze({
  BAD_ARGUMENT: -2, LIMIT_EXCEEDED: -3, NOT_PERMITTED: -4,
  DENIED: -10, BLOCKED: -11, DNS: -12, REFUSED: -13, TLS: -14, TIMEOUT: -15, TOO_LARGE: -16,
  TOO_MANY_REQUESTS: -17, RATE_LIMITED: -18, CIRCUIT_OPEN: -19, CONNECTION: -20, TOO_MANY_REDIRECTS: -21,
});

/** isFetchError reports whether e is what fetch rejects with when the host could not
 * make the request (a TypeError with the ABI's status as code). */
export function isFetchError(e) {
  return e instanceof TypeError && typeof e.code === "number" && typeof e.kind === "string";
}

/** The longest delay retryAfter stages: a larger Retry-After is capped to it (24 h). */
export const RETRY_AFTER_CAP_MS = 24 * 3600 * 1000;

const MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
const IMF_FIXDATE = /^(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), (\d\d) (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) (\d{4}) (\d\d):(\d\d):(\d\d) GMT$/;

// retryDelayMs reads a Retry-After value at nowMs: delay-seconds or an IMF-fixdate, as
// the other SDKs do (Date.parse would take "-5" or "soon-ish" dates of its own), the
// delay clamped to [1 ms, RETRY_AFTER_CAP_MS]: a deferral of 0 would be a failure
// (DEFER without a delay), spending the attempt. undefined when it is neither.
function retryDelayMs(value, nowMs = Date.now()) {
  const v = value.replace(/^[ \t]+|[ \t]+$/g, "");
  let ms;
  if (/^\d+$/.test(v)) {
    ms = Number(v) * 1000;
  } else {
    const m = IMF_FIXDATE.exec(v);
    if (!m) return undefined;
    const [day, year, hh, mm, ss] = [m[1], m[3], m[4], m[5], m[6]].map(Number);
    const month = MONTHS.indexOf(m[2]);
    const at = Date.UTC(year, month, day, hh, mm, Math.min(ss, 59));
    // Date.UTC rolls 31 Feb over into March: such a date is no date.
    if (hh > 23 || mm > 59 || ss > 60 || new Date(at).getUTCDate() !== day) return undefined;
    ms = at - nowMs;
  }
  return Math.min(Math.max(ms, 1), RETRY_AFTER_CAP_MS);
}

/**
 * retryAfter settles a job after a 429 or 503 (or any answer asking to come back):
 * `throw retryAfter(res)` defers the job by the response's Retry-After header
 * (delay-seconds or an IMF-fixdate HTTP date; at least 1 ms, at most
 * RETRY_AFTER_CAP_MS, and the queue's limits cap it) without spending an attempt, with the
 * reason "http STATUS: Retry-After VALUE"; without a header it can read, it asks for a
 * retry with the queue's backoff, reason "http STATUS".
 */
export function retryAfter(res) {
  const value = res.headers.get("retry-after");
  const ms = value == null ? undefined : retryDelayMs(value);
  if (ms === undefined) return retry(`http ${res.status}`);
  return deferFor(ms, `http ${res.status}: Retry-After ${value}`);
}
