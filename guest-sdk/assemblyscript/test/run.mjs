// Tests the AssemblyScript SDK in Node.js: runs the conformance module (built by
// `make guests`) against a stand-in host written here, and checks what each case
// stages. Usage: node test/run.mjs path/to/assemblyscript-conformance.wasm
import { readFileSync } from "node:fs";
import assert from "node:assert/strict";

const bytes = readFileSync(process.argv[2]);
const enc = new TextEncoder();
const dec = new TextDecoder();

function run(payload, headers = {}) {
  const job = { payload: enc.encode(payload), meta: ["01JOB", "conformance", "conformance", "v"], headers,
    logs: [], reason: null, delay: null, output: [], children: [] };
  let mem;
  const bytesAt = (p, n) => new Uint8Array(mem.buffer, p, n);
  const copyOut = (src, p, n) => { bytesAt(p, Math.min(n, src.length)).set(src.subarray(0, Math.min(n, src.length))); };
  const wasmjobs = {
    payload_len: () => job.payload.length,
    payload_read: (p, n) => { copyOut(job.payload, p, n); return Math.min(n, job.payload.length); },
    meta_read: (k, p, n) => { if (k < 0 || k > 3) return -1; const v = enc.encode(job.meta[k]); copyOut(v, p, n); return v.length; },
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
    output_write: (p, n) => { job.output.push(...bytesAt(p, n)); return n; },
    enqueue: (qp, qn, pp, pn, d) => { job.children.push([dec.decode(bytesAt(qp, qn)), dec.decode(bytesAt(pp, pn)), Number(d)]); return 0; },
  };
  const env = { abort: () => { throw new Error("abort"); }, trace: () => {}, seed: () => Math.random() };
  const inst = new WebAssembly.Instance(new WebAssembly.Module(bytes), { wasmjobs, env });
  mem = inst.exports.memory;
  try {
    job.code = inst.exports.wasmjobs_handle();
  } catch (e) {
    job.trap = String(e);
  }
  job.text = dec.decode(new Uint8Array(job.output));
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
r = run("children");
assert.deepEqual(r.children, [["child", "c1", 0], ["child", "c2", 250]]);
r = run("log");
assert.deepEqual(r.logs, [[1, "conformance log line"], [2, "second line, attempt 2"]]);
r = run("trap");
assert.match(r.trap, /unreachable/);
r = run("nonsense");
assert.deepEqual([r.code, r.reason], [3, "unknown case"]);
console.log("AssemblyScript SDK: 11 checks passed");
