// Tests the AssemblyScript SDK in Node.js: runs the conformance module (built by
// `make guests`) against a stand-in host written here, and checks what each case
// stages. Usage: node test/run.mjs path/to/assemblyscript-conformance.wasm
import { readFileSync } from "node:fs";
import assert from "node:assert/strict";

const bytes = readFileSync(process.argv[2]);
const enc = new TextEncoder();
const dec = new TextDecoder();

// The stand-in clock: Sun, 06 Nov 1994 08:49:37 GMT.
const NOW_MS = 784111777000n;

// run runs one job; responses are the stand-in host's answers to the job's requests,
// in order: { status, error, headers, url, body, chunk, bodyError }.
// serve runs the job through wasmjobs_serve instead: next_job hands it over once, and
// the outcome passed back is its code.
function run(payload, headers = {}, responses = [], round = 0, awaited = [], serve = false) {
  const job = { payload: enc.encode(payload), meta: ["01JOB", "conformance", "conformance", "v", "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"], headers, awaitedIdx: [],
    logs: [], reason: null, delay: null, output: [], children: [], requests: [], closed: [], nexts: [] };
  let mem;
  const bytesAt = (p, n) => new Uint8Array(mem.buffer, p, n);
  const copyOut = (src, p, n) => { bytesAt(p, Math.min(n, src.length)).set(src.subarray(0, Math.min(n, src.length))); };
  const wasmjobs = {
    payload_len: () => job.payload.length,
    payload_read: (p, n) => { copyOut(job.payload, p, n); return Math.min(n, job.payload.length); },
    meta_read: (k, p, n) => { if (k < 0 || k >= job.meta.length) return -1; const v = enc.encode(job.meta[k]); copyOut(v, p, n); return v.length; },
    attempt: () => 2,
    max_attempts: () => 5,
    header_read: (kp, kn, p, n) => {
      const key = dec.decode(bytesAt(kp, kn));
      if (!(key in job.headers)) return -1;
      const v = enc.encode(job.headers[key]); copyOut(v, p, n); return v.length;
    },
    log: (level, p, n) => { job.logs.push([level, dec.decode(bytesAt(p, n))]); },
    set_reason: (p, n) => { job.reason = dec.decode(bytesAt(p, n)); },
    set_delay_ms: (ms) => { if (ms >= 0n) job.delay = Number(ms); },
    output_write: (p, n) => { job.output.push(bytesAt(p, n).slice()); return n; },
    enqueue: (qp, qn, pp, pn, d) => { job.children.push([dec.decode(bytesAt(qp, qn)), dec.decode(bytesAt(pp, pn)), Number(d)]); return 0; },
    enqueue_awaited: (qp, qn, pp, pn, d) => { wasmjobs.enqueue(qp, qn, pp, pn, d); job.awaitedIdx.push(job.children.length - 1); return 0; },
    round: () => round,
    // A loop of one job: the outcome comes back with the second call, which ends it.
    next_job: (outcome) => { job.nexts.push(outcome); return job.nexts.length === 1 ? 1 : 0; },
    children_len: () => awaited.length,
    // awaited: per child [id, queue, state, reason, output, truncated (0 or 1)].
    child_read: (i, f, p, n) => {
      if (i < 0 || i >= awaited.length) return -1;
      if (f < 0 || f > 5) return -2;
      const v = f === 5 ? new Uint8Array([awaited[i][5]]) : enc.encode(awaited[i][f]);
      copyOut(v, p, n);
      return v.length;
    },
  };
  const fake = (h) => (h >= 0 && h < job.requests.length && !job.closed.includes(h) ? responses[h] : null);
  const out = (v, p, n) => { const b = enc.encode(v); copyOut(b, p, n); return b.length; };
  Object.assign(wasmjobs, {
    http_start: (mp, mn, up, un, hp, hn, bp, bn) => {
      job.requests.push([dec.decode(bytesAt(mp, mn)), dec.decode(bytesAt(up, un)), dec.decode(bytesAt(hp, hn)), dec.decode(bytesAt(bp, bn))]);
      return job.requests.length - 1;
    },
    http_status: (h) => fake(h)?.status ?? -1,
    http_error_read: (h, p, n) => (fake(h)?.error != null ? out(fake(h).error, p, n) : -1),
    http_headers_read: (h, p, n) => { const f = fake(h); return !f ? -1 : f.status < 0 ? f.status : out(f.headers ?? "", p, n); },
    http_url_read: (h, p, n) => { const f = fake(h); return !f ? -1 : f.status < 0 ? f.status : out(f.url ?? "", p, n); },
    http_body_read: (h, p, n) => {
      const f = fake(h);
      if (!f) return -1;
      if (f.status < 0) return f.status;
      const body = typeof f.body === "string" ? enc.encode(f.body) : (f.body ?? new Uint8Array());
      f.pos ??= 0;
      const c = Math.min(n, body.length - f.pos, f.chunk ?? Infinity);
      if (c === 0) return f.bodyError ?? 0;
      bytesAt(p, c).set(body.subarray(f.pos, f.pos + c));
      f.pos += c;
      return c;
    },
    http_close: (h) => { if (!fake(h)) return -1; job.closed.push(h); return 0; },
    http_wait: () => -1,
  });
  const wasi_snapshot_preview1 = {
    clock_time_get: (id, precision, p) => { new DataView(mem.buffer).setBigUint64(p, NOW_MS * 1000000n, true); return 0; },
  };
  const env = { abort: () => { throw new Error("abort"); }, trace: () => {}, seed: () => Math.random() };
  const inst = new WebAssembly.Instance(new WebAssembly.Module(bytes), { wasmjobs, env, wasi_snapshot_preview1 });
  mem = inst.exports.memory;
  try {
    if (serve) {
      inst.exports.wasmjobs_serve();
      assert.equal(job.nexts.length, 2, "wasmjobs_serve asked for a job after the end");
      job.code = job.nexts[1];
    } else {
      job.code = inst.exports.wasmjobs_handle();
    }
  } catch (e) {
    job.trap = String(e);
  }
  job.text = dec.decode(Buffer.concat(job.output));
  return job;
}

let r = run("ack");
assert.equal(r.code, 0);
r = run("retry");
assert.deepEqual([r.code, r.reason, r.delay], [1, "asked to retry", 1500]);
r = run("defer");
assert.deepEqual([r.code, r.reason, r.delay], [2, "asked to defer", 2000]);
r = run("dead");
assert.deepEqual([r.code, r.reason], [3, "asked to die"]);
r = run("echo:héllo");
assert.deepEqual([r.code, r.text], [0, "héllo"]);
r = run("meta", { "X-Test": "x".repeat(100) });
assert.equal(r.text, `01JOB\nconformance\nconformance\n2\n5\n${"x".repeat(100)}\n`, "a header longer than the first buffer is read whole");
r = run("meta");
assert.ok(r.text.endsWith("\n-\n"), "an absent header reads as null");
r = run("trace");
assert.equal(r.text, "4bf92f3577b34da6a3ce929d0e0e4736\n00f067aa0ba902b7\n");
r = run("children");
assert.deepEqual(r.children, [["child", "c1", 0], ["child", "c2", 250]]);
r = run("fanout");
assert.deepEqual([r.code, r.text, r.children, r.awaitedIdx], [4, "0 0\n", [["child", "c1", 0], ["child", "c2", 250], ["child", "c3", 0]], [0, 2]]);
r = run("fanin", {}, [], 1, [["01JA", "child", "succeeded", "", "o".repeat(100), 0], ["01JB", "child", "dead", "no page", "", 1]]);
assert.deepEqual([r.code, r.text], [0, `1 2\n01JA|child|succeeded||${"o".repeat(100)}|false\n01JB|child|dead|no page||true\n`],
  "an output longer than the first buffer is read whole");
r = run("log");
assert.deepEqual(r.logs, [[1, "conformance log line"], [2, "second line, attempt 2"]]);
r = run("trap");
assert.match(r.trap, /unreachable/);
r = run("nonsense");
assert.deepEqual([r.code, r.reason], [3, "unknown case"]);

// Outbound HTTP: a response's status, headers (by name case-insensitively, every value of
// a repeated name), and body read in pieces; the request's method, URL, headers and body.
const echo = { status: 201, headers: "Content-Type: text/plain\nX-Reply: a\nX-Reply:  b \n", url: "http://h/echo", body: "hello, world", chunk: 5 };
r = run("http-post:http://h/echo", {}, [{ ...echo }]);
assert.deepEqual([r.code, r.text], [0, "201\na,b\nhello, world"]);
assert.deepEqual(r.requests, [["POST", "http://h/echo", "X-Conformance: yes\nContent-Type: text/plain\n", "ping"]]);
assert.deepEqual(r.closed, [0], "the handler's close reaches the host");
r = run("http-get:http://h/echo", {}, [{ ...echo, body: new Uint8Array(1 << 20).fill(65) }]);
assert.ok(r.text === "201\na,b\n" + "A".repeat(1 << 20), `a body of exactly the caller's bound is whole: ${r.trap} ${r.text.length}`);
r = run("http-get:http://h/echo", {}, [{ ...echo, body: new Uint8Array((1 << 20) + 1) }]);
assert.equal(r.text, "error -16", "a body past the caller's bound fails as TooLarge");
// A header value with a line feed (one header that would be two on the host) is
// refused before anything reaches the host.
r = run("http-inject:http://h/echo", {}, [{ ...echo }]);
assert.equal(r.requests.length, 0, "an injected header reached the host");
assert.equal(r.text, "error -2");
r = run("http-get:http://x/", {}, [{ status: -10, error: "http://x/ is outside the grant" }]);
assert.deepEqual([r.code, r.text], [0, "error -10"]);
r = run("http-get:http://h/echo", {}, [{ ...echo, body: "01", bodyError: -20, error: "cut short" }]);
assert.equal(r.text, "error -20", "a failed body read is the failure");

// The Retry-After helper, at the stand-in clock.
for (const [value, kind, reason, delay] of [
  ["2", 2, "http 429: Retry-After 2", 2000],
  [" 120 ", 2, "http 429: Retry-After 120", 120000],
  ["0", 2, "http 429: Retry-After 0", 1],
  ["86401", 2, "http 429: Retry-After 86401", 86400000],
  ["99999999999999999999999999", 2, "http 429: Retry-After 99999999999999999999999999", 86400000],
  ["Sun, 06 Nov 1994 08:49:40 GMT", 2, "http 429: Retry-After Sun, 06 Nov 1994 08:49:40 GMT", 3000],
  ["Sat, 05 Nov 1994 08:49:37 GMT", 2, "http 429: Retry-After Sat, 05 Nov 1994 08:49:37 GMT", 1],
  ["Mon, 07 Nov 1994 08:49:37 GMT", 2, "http 429: Retry-After Mon, 07 Nov 1994 08:49:37 GMT", 86400000],
  ["Tue, 29 Feb 2000 23:59:59 GMT", 2, "http 429: Retry-After Tue, 29 Feb 2000 23:59:59 GMT", 86400000],
  [null, 1, "http 429", null],
  ["soon", 1, "http 429", null],
  ["-5", 1, "http 429", null],
  ["1.5", 1, "http 429", null],
  ["Sun, 06 Nov 1994 08:49:40 UTC", 1, "http 429", null],
  ["Sunday, 06-Nov-94 08:49:40 GMT", 1, "http 429", null],
  ["Sun, 31 Feb 1994 08:49:40 GMT", 1, "http 429", null],
  ["Sun, 06 Xyz 1994 08:49:40 GMT", 1, "http 429", null],
]) {
  r = run("http-retry-after:http://h/limited", {}, [{ status: 429, headers: value == null ? "" : `Retry-After: ${value}\n` }]);
  assert.deepEqual([r.code, r.reason, r.delay], [kind, reason, delay], `Retry-After ${value}`);
}
r = run("http-retry-after:http://h/echo", {}, [{ ...echo }]);
assert.deepEqual([r.code, r.text], [0, "201"]);
for (const [payload, code] of [["ack", 0], ["retry", 1]]) {
  r = run(payload, {}, [], 0, [], true);
  assert.equal(r.code, code, `served ${payload}`);
}
console.log("AssemblyScript SDK: all checks passed");
