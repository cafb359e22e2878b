// wasmjobs-sdk: write wasmjobs job handlers in AssemblyScript (guest ABI v1).
//
//   import { Job, Outcome, handle, retry } from "wasmjobs-sdk";
//   export { wasmjobs_abi_v1, wasmjobs_handle, wasmjobs_serve } from "wasmjobs-sdk";
//
//   handle((job: Job): Outcome => {
//     job.output("Hello, " + job.text() + "!");
//     return Outcome.Ack;
//   });
//
// Build: npx asc handler.ts -o handler.wasm --optimize --runtime incremental

@external("wasmjobs", "payload_len") declare function payload_len(): i32;
@external("wasmjobs", "next_job") declare function next_job(outcome: i32): i32;
@external("wasmjobs", "payload_read") declare function payload_read(buf: usize, len: i32): i32;
@external("wasmjobs", "meta_read") declare function meta_read(key: i32, buf: usize, len: i32): i32;
@external("wasmjobs", "attempt") declare function attempt_(): i32;
@external("wasmjobs", "max_attempts") declare function max_attempts_(): i32;
@external("wasmjobs", "header_read") declare function header_read(key: usize, keyLen: i32, buf: usize, len: i32): i32;
@external("wasmjobs", "log") declare function log_(level: i32, msg: usize, len: i32): void;
@external("wasmjobs", "set_reason") declare function set_reason(msg: usize, len: i32): void;
@external("wasmjobs", "set_delay_ms") declare function set_delay_ms(ms: i64): void;
@external("wasmjobs", "output_write") declare function output_write(buf: usize, len: i32): i32;
@external("wasmjobs", "enqueue") declare function enqueue_(queue: usize, queueLen: i32, payload: usize, payloadLen: i32, delayMs: i64): i32;
// Fan-out and fan-in: the compiler imports only what a module calls.
@external("wasmjobs", "enqueue_awaited") declare function enqueue_awaited(queue: usize, queueLen: i32, payload: usize, payloadLen: i32, delayMs: i64): i32;
@external("wasmjobs", "round") declare function round_(): i32;
@external("wasmjobs", "children_len") declare function children_len(): i32;
@external("wasmjobs", "child_read") declare function child_read(index: i32, field: i32, buf: usize, len: i32): i32;

/** How a job is settled: the result of a handler. */
export enum Outcome {
  /** Done: children are published, the job acknowledged. */
  Ack = 0,
  /** Run again after the staged delay, else the queue's backoff. */
  Retry = 1,
  /** Run again after the staged delay, ahead of the queue, without using an attempt. */
  Defer = 2,
  /** To the dead letters, with the staged reason. */
  DeadLetter = 3,
  /** Children published; the job runs again, at the same attempt, once the awaited
   * ones have ended (waitForChildren). */
  Wait = 4,
}

/** How one child that the job's last wait awaited ended. */
export class Child {
  id: string = "";
  queue: string = "";
  /** succeeded, dead, cancelled, or unfinished when the wait timed out first. */
  state: string = "";
  /** Why it did not succeed; "" when it did. */
  reason: string = "";
  /** Its last run's output, up to 16 KiB; truncated says it was cut. */
  output: ArrayBuffer = new ArrayBuffer(0);
  truncated: bool = false;
}

/** Statuses of the host functions. */
export enum Status {
  Ok = 0,
  NotFound = -1,
  BadArgument = -2,
  LimitExceeded = -3,
  NotPermitted = -4,
}

/** Log levels. */
export enum Level {
  Debug = 0,
  Info = 1,
  Warn = 2,
  Error = 3,
}

function utf8(s: string): ArrayBuffer {
  return String.UTF8.encode(s);
}

/** Reads a variable-size value: sizes first, then a copy into a big enough buffer. */
function readVar(read: (buf: usize, len: i32) => i32): ArrayBuffer | null {
  let buf = new ArrayBuffer(64);
  while (true) {
    const n = read(changetype<usize>(buf), buf.byteLength);
    if (n < 0) return null;
    if (n <= buf.byteLength) return buf.slice(0, n);
    buf = new ArrayBuffer(n);
  }
}

// The key of the current metadata or header read (AssemblyScript has no closures).
let readKey: i32 = 0;
let readIndex: i32 = 0;
let readName: ArrayBuffer = new ArrayBuffer(0);

/** The job being handled. */
export class Job {
  /** The payload's bytes. */
  payload(): ArrayBuffer {
    const n = payload_len();
    const buf = new ArrayBuffer(n);
    const got = payload_read(changetype<usize>(buf), n);
    return buf.slice(0, got);
  }
  /** The payload as text. */
  text(): string {
    return String.UTF8.decode(this.payload());
  }
  private meta(key: i32): string {
    readKey = key;
    const v = readVar((buf: usize, len: i32): i32 => meta_read(readKey, buf, len));
    return v == null ? "" : String.UTF8.decode(v);
  }
  /** The job's id. */
  id(): string { return this.meta(0); }
  /** The job's queue. */
  queue(): string { return this.meta(1); }
  /** The running module's name. */
  module(): string { return this.meta(2); }
  /** The running module's version (sha256). */
  version(): string { return this.meta(3); }
  /** The trace id of the host's span the job runs in (32 lowercase hex digits), for the
   * handler's own telemetry or logs to join the host's trace; "" when the host traces
   * nothing. */
  traceId(): string { return this.meta(4); }
  /** The span id of the host's span the job runs in (16 lowercase hex digits): the parent
   * of any span the handler reports; "" when the host traces nothing. */
  spanId(): string { return this.meta(5); }
  /** The 1-based number of this execution. */
  attempt(): i32 { return attempt_(); }
  /** How many executions are allowed. */
  maxAttempts(): i32 { return max_attempts_(); }
  /** A job header, or null; keys are exact bytes. */
  header(key: string): string | null {
    readName = utf8(key);
    const v = readVar((buf: usize, len: i32): i32 =>
      header_read(changetype<usize>(readName), readName.byteLength, buf, len));
    return v == null ? null : String.UTF8.decode(v);
  }
  /** Logs a message. */
  log(level: Level, msg: string): void {
    const b = utf8(msg);
    log_(level, changetype<usize>(b), b.byteLength);
  }
  info(msg: string): void { this.log(Level.Info, msg); }
  warn(msg: string): void { this.log(Level.Warn, msg); }
  /** Appends text to the job's output. */
  output(text: string): Status {
    const b = utf8(text);
    return <Status>output_write(changetype<usize>(b), b.byteLength);
  }
  /** Appends bytes to the job's output. */
  outputBytes(b: ArrayBuffer): Status {
    const s = output_write(changetype<usize>(b), b.byteLength);
    return s < 0 ? <Status>s : Status.Ok;
  }
  /** Stages a child job, as enqueue does, that waitForChildren waits for. A module that
   * calls it loads only on a host whose backend keeps waiting jobs. */
  enqueueAwaited(queue: string, payload: string, delayMs: i64 = 0): Status {
    const q = utf8(queue);
    const p = utf8(payload);
    return <Status>enqueue_awaited(changetype<usize>(q), q.byteLength, changetype<usize>(p), p.byteLength, delayMs);
  }
  /** 0 on a first run; n on the run after the job's n-th wait. */
  round(): i32 { return round_(); }
  private childField(index: i32, field: i32): ArrayBuffer {
    readIndex = index;
    readKey = field;
    const v = readVar((buf: usize, len: i32): i32 => child_read(readIndex, readKey, buf, len));
    return v == null ? new ArrayBuffer(0) : v;
  }
  /** How each child the last wait awaited ended, in the order they were staged; empty
   * on a first run. */
  children(): Child[] {
    const n = children_len();
    const out = new Array<Child>();
    for (let i = 0; i < n; i++) {
      const c = new Child();
      c.id = String.UTF8.decode(this.childField(i, 0));
      c.queue = String.UTF8.decode(this.childField(i, 1));
      c.state = String.UTF8.decode(this.childField(i, 2));
      c.reason = String.UTF8.decode(this.childField(i, 3));
      c.output = this.childField(i, 4);
      const t = this.childField(i, 5);
      c.truncated = t.byteLength == 1 && load<u8>(changetype<usize>(t)) == 1;
      out.push(c);
    }
    return out;
  }
  /** Stages a child job, published after delayMs if this job acks. */
  enqueue(queue: string, payload: string, delayMs: i64 = 0): Status {
    const q = utf8(queue);
    const p = utf8(payload);
    return <Status>enqueue_(changetype<usize>(q), q.byteLength, changetype<usize>(p), p.byteLength, delayMs);
  }
}

/** Stages reason and delay and returns Retry (delayMs 0: the queue's backoff). */
export function retry(reason: string, delayMs: i64 = 0): Outcome {
  const b = utf8(reason);
  set_reason(changetype<usize>(b), b.byteLength);
  if (delayMs > 0) set_delay_ms(delayMs);
  return Outcome.Retry;
}

/** Stages delay and reason and returns Defer. */
export function defer(delayMs: i64, reason: string): Outcome {
  const b = utf8(reason);
  set_reason(changetype<usize>(b), b.byteLength);
  set_delay_ms(delayMs);
  return Outcome.Defer;
}

/** Stages the reason and returns DeadLetter. */
export function deadLetter(reason: string): Outcome {
  const b = utf8(reason);
  set_reason(changetype<usize>(b), b.byteLength);
  return Outcome.DeadLetter;
}

/** Returns Wait: the children staged with enqueueAwaited are published, and once every
 * one has ended the job runs again at the same attempt, round() one higher, children()
 * saying how each ended. Without an awaited child it is a failure. */
export function waitForChildren(): Outcome {
  return Outcome.Wait;
}

/** Fails the job at once with a trap ("trap: unreachable"). */
export function trap(): void {
  unreachable();
}

// ---- Outbound HTTP (abi/SPEC.md, "Outbound HTTP (added)"), under the module's [http] grant.

@external("wasmjobs", "http_start") declare function http_start(method: usize, methodLen: i32, url: usize, urlLen: i32, headers: usize, headersLen: i32, body: usize, bodyLen: i32): i32;
@external("wasmjobs", "http_status") declare function http_status(handle: i32): i32;
@external("wasmjobs", "http_error_read") declare function http_error_read(handle: i32, buf: usize, len: i32): i32;
@external("wasmjobs", "http_headers_read") declare function http_headers_read(handle: i32, buf: usize, len: i32): i32;
@external("wasmjobs", "http_url_read") declare function http_url_read(handle: i32, buf: usize, len: i32): i32;
@external("wasmjobs", "http_body_read") declare function http_body_read(handle: i32, buf: usize, len: i32): i32;
@external("wasmjobs", "http_close") declare function http_close(handle: i32): i32;
@external("wasmjobs", "http_wait") declare function http_wait(handles: usize, n: i32, timeoutMs: i64): i32;
@external("wasi_snapshot_preview1", "clock_time_get") declare function clock_time_get(id: u32, precision: u64, time: usize): u16;

/** The failures of a request: the ABI's statuses. */
export enum HttpErrorCode {
  /** The handle is unknown or closed. */
  Closed = -1,
  /** A bad method, URL or header. */
  BadArgument = -2,
  /** Request headers or body past the limits. */
  LimitExceeded = -3,
  /** The module has no [http] grant. */
  NotPermitted = -4,
  /** The URL, or a redirect hop's, is outside the grant; nothing was sent to it. */
  Denied = -10,
  /** The name resolved only to addresses a name grant does not reach. */
  Blocked = -11,
  /** The name did not resolve. */
  Dns = -12,
  /** The connection was refused. */
  Refused = -13,
  /** The TLS handshake failed. */
  Tls = -14,
  /** The grant's timeout or the job's deadline passed. */
  Timeout = -15,
  /** The body passed max_response, or the caller's bound. */
  TooLarge = -16,
  /** The call already started max_requests requests. */
  TooManyRequests = -17,
  /** A wait for [http.limits] would pass the deadline. */
  RateLimited = -18,
  /** The destination's circuit breaker is open. */
  CircuitOpen = -19,
  /** The connection failed otherwise. */
  Connection = -20,
  /** More than 5 redirects. */
  TooManyRedirects = -21,
}

/** The name of a failure status, as the ABI's table spells it. */
export function httpErrorName(code: i32): string {
  switch (code) {
    case -1: return "closed";
    case -2: return "bad argument";
    case -3: return "limit exceeded";
    case -4: return "not permitted";
    case -10: return "denied";
    case -11: return "blocked address";
    case -12: return "dns";
    case -13: return "refused";
    case -14: return "tls";
    case -15: return "timeout";
    case -16: return "too large";
    case -17: return "too many requests";
    case -18: return "rate limited";
    case -19: return "circuit open";
    case -20: return "connection";
    case -21: return "too many redirects";
  }
  return "unknown";
}

/** A request's failure: the ABI's status (an HttpErrorCode) and the host's message. */
export class HttpError {
  constructor(public code: i32, public message: string) {}
  /** The failure's name ("denied", "timeout", ...). */
  kind(): string { return httpErrorName(this.code); }
  /** "http error CODE: MESSAGE" (the host's message starts with the kind's name). */
  toString(): string { return "http error " + this.code.toString() + ": " + this.message; }
}

// What readHead reads (AssemblyScript has no closures).
const HEAD_HEADERS = 0;
const HEAD_URL = 1;
const HEAD_ERROR = 2;
let headCode: i32 = 0;

/** Reads a variable-size part of a request's head, sizes first; null (the status in headCode) on a failure. */
function readHead(what: i32, h: i32): string | null {
  let buf = new ArrayBuffer(512);
  while (true) {
    const p = changetype<usize>(buf);
    const n = what == HEAD_HEADERS ? http_headers_read(h, p, buf.byteLength)
      : what == HEAD_URL ? http_url_read(h, p, buf.byteLength) : http_error_read(h, p, buf.byteLength);
    if (n < 0) { headCode = n; return null; }
    if (n <= buf.byteLength) return String.UTF8.decode(buf.slice(0, n));
    buf = new ArrayBuffer(n);
  }
}

/** An outbound HTTP request, built then sent (or started):
 *
 *   const res = Request.post("https://api.example.com/v1/mail")
 *     .header("Content-Type", "application/json").bodyText(json).send();
 *   if (res.error != null) return retry(res.error!.toString());
 *   if (res.status == 429 || res.status == 503) { const o = retryAfter(res); res.close(); return o; }
 *   const body = res.text(1 << 20);  // null on a failure, res.error says why
 *   res.close();
 */
export class Request {
  private names: string[] = [];
  private values: string[] = [];
  private body: ArrayBuffer = new ArrayBuffer(0);
  /** A request with a method ("": GET) and an absolute URL. */
  constructor(public method: string, public url: string) {}
  /** A GET request. */
  static get(url: string): Request { return new Request("GET", url); }
  /** A POST request. */
  static post(url: string): Request { return new Request("POST", url); }
  /** Adds a header; a name may be added more than once. */
  header(name: string, value: string): Request {
    this.names.push(name);
    this.values.push(value);
    return this;
  }
  /** Sets the body's bytes. */
  bodyBytes(b: ArrayBuffer): Request { this.body = b; return this; }
  /** Sets the body to text, as UTF-8. */
  bodyText(s: string): Request { this.body = String.UTF8.encode(s); return this; }
  /** Starts the request, which runs in the background; see waitAny. A failed start
   *  gives a response with its error set: among them, before anything reaches the
   *  host, a bad argument (-2) for a header name outside RFC 9110's token characters
   *  or a value holding CR, LF or NUL (the host reads headers as lines, so a line feed
   *  in a value would add a header). */
  start(): Response {
    let lines = "";
    for (let i = 0; i < this.names.length; i++) {
      if (!headerNameOk(this.names[i])) return failedStart("bad argument: header name " + this.names[i]);
      if (!headerValueOk(this.values[i])) return failedStart("bad argument: header " + this.names[i] + ": a value holding CR, LF or NUL");
      lines += this.names[i] + ": " + this.values[i] + "\n";
    }
    const m = utf8(this.method), u = utf8(this.url), hd = utf8(lines);
    const h = http_start(changetype<usize>(m), m.byteLength, changetype<usize>(u), u.byteLength,
      changetype<usize>(hd), hd.byteLength, changetype<usize>(this.body), this.body.byteLength);
    const res = new Response(h < 0 ? -1 : h);
    if (h < 0) res.fail(h, httpErrorName(h));
    return res;
  }
  /** Sends the request and waits for the response's head; check the response's error. */
  send(): Response {
    const res = this.start();
    res.wait();
    return res;
  }
}

/** Whether name is an RFC 9110 token, as a header name must be. */
function headerNameOk(name: string): bool {
  if (name.length == 0) return false;
  for (let i = 0; i < name.length; i++) {
    const c = name.charCodeAt(i);
    const alnum = (c >= 48 && c <= 57) || (c >= 65 && c <= 90) || (c >= 97 && c <= 122);
    if (!alnum && "!#$%&'*+-.^_`|~".indexOf(String.fromCharCode(c)) < 0) return false;
  }
  return true;
}

/** Whether value holds no CR, LF or NUL. */
function headerValueOk(value: string): bool {
  for (let i = 0; i < value.length; i++) {
    const c = value.charCodeAt(i);
    if (c == 13 || c == 10 || c == 0) return false;
  }
  return true;
}

/** A response whose start was refused by the SDK itself, as bad argument (-2). */
function failedStart(message: string): Response {
  const res = new Response(-1);
  res.fail(-2, message);
  return res;
}

/** A request started, and its response: status, headers and final URL once its head is
 *  in, and its body read whole or in pieces. Close it when done. */
export class Response {
  /** The HTTP status (200-599); 0 until the head is in or when the request failed. */
  status: i32 = 0;
  /** The request's failure, or null. */
  error: HttpError | null = null;
  private names: string[] = [];
  private values: string[] = [];
  private finalURL: string = "";
  constructor(public handle: i32) {}
  /** @internal Records a failure. */
  fail(code: i32, message: string): void {
    if (this.error == null) this.error = new HttpError(code, message);
  }
  private failFromHost(code: i32): void {
    const m = readHead(HEAD_ERROR, this.handle);
    this.fail(code, m == null ? httpErrorName(code) : m);
  }
  /** Waits for the head (at most until the job's deadline); true when it is in, false
   *  when the request failed (error says why). */
  wait(): bool {
    if (this.error != null) return false;
    if (this.status != 0) return true;
    const s = http_status(this.handle);
    if (s < 0) { this.failFromHost(s); return false; }
    const lines = readHead(HEAD_HEADERS, this.handle);
    const url = readHead(HEAD_URL, this.handle);
    if (lines == null || url == null) { this.failFromHost(headCode); return false; }
    const ls = lines.split("\n");
    for (let i = 0; i < ls.length; i++) {
      const c = ls[i].indexOf(":");
      if (c < 0) continue;
      this.names.push(ls[i].substring(0, c).toLowerCase());
      this.values.push(ls[i].substring(c + 1).trim());
    }
    this.finalURL = url;
    this.status = s;
    return true;
  }
  /** The first value of a header, or null; names match case-insensitively. */
  header(name: string): string | null {
    this.wait();
    const n = name.toLowerCase();
    for (let i = 0; i < this.names.length; i++) if (this.names[i] == n) return this.values[i];
    return null;
  }
  /** Every value of a header, in the order received. */
  headerAll(name: string): string[] {
    this.wait();
    const n = name.toLowerCase();
    const out: string[] = [];
    for (let i = 0; i < this.names.length; i++) if (this.names[i] == n) out.push(this.values[i]);
    return out;
  }
  /** The final URL, after redirects. */
  url(): string {
    this.wait();
    return this.finalURL;
  }
  /** Reads the next bytes of the body into buf; returns how many, 0 at the end, or the
   *  failure's status (error says why). */
  read(buf: ArrayBuffer): i32 {
    if (!this.wait()) return this.error!.code;
    if (buf.byteLength == 0) return 0;
    const n = http_body_read(this.handle, changetype<usize>(buf), buf.byteLength);
    if (n < 0) this.failFromHost(n);
    return n;
  }
  /** Reads the rest of the body whole, or null on a failure (error says why); a body
   *  longer than limit bytes fails as TooLarge. */
  bytes(limit: i32): ArrayBuffer | null {
    // Grown as the body comes, so that a generous bound costs nothing for a short body.
    let out = new Uint8Array(min(limit, 16384));
    let got = 0;
    const chunk = new ArrayBuffer(16384);
    while (true) {
      // One byte past the bound tells a body of exactly limit bytes from a longer one.
      const want = <i32>min(<i64>chunk.byteLength, <i64>limit + 1 - got);
      const part = want == chunk.byteLength ? chunk : new ArrayBuffer(want);
      const n = this.read(part);
      if (n < 0) return null;
      if (n == 0) return out.buffer.slice(0, got);
      if (got + n > limit) {
        this.fail(HttpErrorCode.TooLarge, "the body is longer than the caller's bound of " + limit.toString() + " bytes");
        return null;
      }
      if (got + n > out.length) {
        const grown = new Uint8Array(<i32>min(<i64>limit, max(<i64>out.length * 2, <i64>got + n)));
        grown.set(out.subarray(0, got));
        out = grown;
      }
      out.set(Uint8Array.wrap(part, 0, n), got);
      got += n;
    }
  }
  /** Reads the rest of the body whole as text, or null; see bytes. */
  text(limit: i32): string | null {
    const b = this.bytes(limit);
    return b == null ? null : String.UTF8.decode(b);
  }
  /** Ends the request (cancelled if still running) and frees its handle. */
  close(): void {
    if (this.handle >= 0) http_close(this.handle);
    this.handle = -1;
  }
}

/** Waits until the head of one of the started responses is in (or its request failed)
 *  and returns its index; -1 when none is within timeoutMs (0 polls; < 0 waits until
 *  the job's deadline), -2 for an empty list. */
export function waitAny(list: Response[], timeoutMs: i64 = -1): i32 {
  if (list.length == 0) return -2;
  const hs = new Int32Array(list.length);
  for (let i = 0; i < list.length; i++) hs[i] = list[i].handle;
  return http_wait(hs.dataStart, list.length, timeoutMs);
}

/** The longest delay retryAfter stages: 24 hours. */
export const RETRY_AFTER_CAP_MS: i64 = 24 * 3600 * 1000;

function nowUnixMs(): i64 {
  const t = new ArrayBuffer(8);
  // Clock 0 is CLOCK_REALTIME.
  if (clock_time_get(0, 1000000, changetype<usize>(t)) != 0) return 0;
  return <i64>(load<u64>(changetype<usize>(t)) / 1000000);
}

function digits(s: string, at: i32, n: i32): i64 {
  let v: i64 = 0;
  for (let i = at; i < at + n; i++) {
    const c = s.charCodeAt(i);
    if (c < 48 || c > 57) return -1;
    v = v * 10 + (c - 48);
  }
  return v;
}

/** Parses an IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT") into Unix milliseconds, or -1. */
export function parseHTTPDate(v: string): i64 {
  if (v.length != 29 || v.substring(3, 5) != ", " || v.charAt(7) != " " || v.charAt(11) != " " || v.charAt(16) != " " ||
    v.charAt(19) != ":" || v.charAt(22) != ":" || v.substring(25) != " GMT") return -1;
  const dow = "MonTueWedThuFriSatSun".indexOf(v.substring(0, 3));
  const mi = "JanFebMarAprMayJunJulAugSepOctNovDec".indexOf(v.substring(8, 11));
  if (dow < 0 || dow % 3 != 0 || mi < 0 || mi % 3 != 0) return -1;
  const month: i64 = mi / 3 + 1;
  const day = digits(v, 5, 2), year = digits(v, 12, 4), hh = digits(v, 17, 2), mm = digits(v, 20, 2), ss = digits(v, 23, 2);
  if (day < 0 || year < 0 || hh < 0 || mm < 0 || ss < 0) return -1;
  const leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
  const mdays: i64[] = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
  if (day < 1 || day > mdays[<i32>month - 1] || hh > 23 || mm > 59 || ss > 60) return -1;
  // Days from the civil date (Howard Hinnant's algorithm); year >= 0 here.
  const y = month <= 2 ? year - 1 : year;
  const era = (y >= 0 ? y : y - 399) / 400, yoe = y - era * 400, mp = (month + 9) % 12;
  const doe = yoe * 365 + yoe / 4 - yoe / 100 + (153 * mp + 2) / 5 + day - 1;
  return ((era * 146097 + doe - 719468) * 86400 + hh * 3600 + mm * 60 + ss) * 1000;
}

/** The delay in ms a Retry-After value asks for at nowMs (Unix milliseconds):
 *  delay-seconds or an IMF-fixdate HTTP date; at least 1, at most RETRY_AFTER_CAP_MS;
 *  -1 when the value is neither. */
export function retryAfterDelay(value: string, nowMs: i64): i64 {
  const v = value.trim();
  if (v.length == 0) return -1;
  let ms: i64 = 0;
  let i = 0;
  for (; i < v.length; i++) {
    const c = v.charCodeAt(i);
    if (c < 48 || c > 57) break;
    // Stop growing at the cap: a huge number never overflows.
    if (ms < RETRY_AFTER_CAP_MS) ms = ms * 10 + <i64>(c - 48) * 1000;
  }
  if (i < v.length) {
    const at = parseHTTPDate(v);
    if (at < 0) return -1;
    ms = at - nowMs;
  }
  return ms < 1 ? 1 : ms > RETRY_AFTER_CAP_MS ? RETRY_AFTER_CAP_MS : ms;
}

/** Settles the job after a response such as a 429 or 503, staging reason and delay:
 *  with a Retry-After header (delay-seconds, or an HTTP date: the delay until then, at
 *  least 1 ms, at most RETRY_AFTER_CAP_MS) Defer by that delay (no attempt spent) with
 *  the reason "http STATUS: Retry-After VALUE"; without a header it can parse, Retry
 *  with the queue's backoff and the reason "http STATUS". */
export function retryAfter(res: Response): Outcome {
  const v = res.header("Retry-After");
  const status = res.status.toString();
  if (v != null) {
    const d = retryAfterDelay(v, nowUnixMs());
    if (d > 0) return defer(d, "http " + status + ": Retry-After " + v);
  }
  return retry("http " + status);
}

let handler: ((job: Job) => Outcome) | null = null;

/** Registers the module's handler; call it at the top level of the entry file. */
export function handle(h: (job: Job) => Outcome): void {
  handler = h;
}

/** The ABI v1 marker: re-export it from the entry file. */
export function wasmjobs_abi_v1(): void {}

/** Runs one job: re-export it from the entry file. */
export function wasmjobs_handle(): i32 {
  const h = handler;
  if (h == null) {
    return deadLetter("no handler registered: call handle() at the top level");
  }
  return h(new Job());
}

/** Runs the jobs a host hands a pooled instance in one call, each as wasmjobs_handle
 * does: re-export it too, and the host may serve the module instead of calling it once
 * a job (a handler cannot tell which). */
export function wasmjobs_serve(): void {
  let outcome: i32 = 0;
  while (next_job(outcome) != 0) {
    outcome = wasmjobs_handle();
  }
}
