// The host's side of a JavaScript handler, evaluated in each QuickJS VM before the
// handler's bundle (host/jsguest.go). It turns the one host function the adapter
// registers, __wasmjobs_host(op, ...args), into the Job object of the SDK's types
// (guest-sdk/javascript/wasmjobs.d.ts) and settles each job through it. The op numbers
// are jsOp* in host/jsguest.go.
(function () {
  "use strict";
  const hostFn = globalThis.__wasmjobs_host;
  const host = hostFn;
  delete globalThis.__wasmjobs_host;
  const OUTCOME = Symbol.for("wasmjobs.outcome");
  // Taken now: a handler may replace the global JSON (hostile "tamper").
  const stringify = JSON.stringify;

  function bytesOf(data) {
    if (typeof data === "string") return data;
    if (data instanceof Uint8Array) return data.buffer.slice(data.byteOffset, data.byteOffset + data.byteLength);
    if (data instanceof ArrayBuffer) return data;
    throw new TypeError("want a string or a Uint8Array, got " + (data === null ? "null" : typeof data));
  }

  function text(args) {
    let s = "";
    for (let i = 0; i < args.length; i++) {
      const a = args[i];
      if (i > 0) s += " ";
      if (typeof a === "string") s += a;
      else if (a instanceof Error) s += a.stack ? String(a) + "\n" + a.stack : String(a);
      else {
        try { s += typeof a === "object" && a !== null ? stringify(a) : String(a); } catch (e) { s += String(a); }
      }
    }
    return s;
  }

  const statusNames = { "-2": "bad argument", "-3": "limit exceeded", "-4": "not permitted" };

  // makeJob returns the job object of one job and the function that ends its life: a
  // pooled VM runs many jobs, and a promise or callback the handler left behind must
  // not act on a later job through a stale object.
  function makeJob() {
    let payload, textValue, live = true;
    const host = function () {
      if (!live) throw new Error("this job has settled: its job object cannot be used in a later job");
      return hostFn.apply(undefined, arguments);
    };
    const getText = function () { return textValue === undefined ? (textValue = host(2)) : textValue; };
    const log = {
      debug: function () { host(7, 0, text(arguments)); },
      info: function () { host(7, 1, text(arguments)); },
      warn: function () { host(7, 2, text(arguments)); },
      error: function () { host(7, 3, text(arguments)); },
    };
    const job = Object.freeze({
      get id() { return host(3, 0); },
      get queue() { return host(3, 1); },
      get module() { return host(3, 2); },
      get version() { return host(3, 3); },
      get attempt() { return host(4); },
      get maxAttempts() { return host(5); },
      get payload() { return payload === undefined ? (payload = host(1)) : payload; },
      get text() { return getText(); },
      json: function () { return JSON.parse(getText()); },
      header: function (key) { return host(6, String(key)); },
      output: function (data) { return host(8, bytesOf(data)) >= 0; },
      log: Object.freeze(log),
      enqueue: function (queue, data, options) {
        let delay = 0;
        if (options != null && options.delay != null) {
          delay = Number(options.delay);
          if (!Number.isFinite(delay) || delay < 0) throw new RangeError("enqueue: delay must be a non-negative number of milliseconds, got " + options.delay);
          delay = Math.floor(delay);
        }
        const st = host(9, String(queue), bytesOf(data), delay);
        if (st < 0) throw new RangeError("enqueue into " + stringify(String(queue)) + ": " + (statusNames[st] || "status " + st));
      },
    });
    return { job: job, end: function () { live = false; } };
  }

  // describe turns a thrown value into the reason of a failure: "unreachable" for
  // new Error("unreachable"), "TypeError: x is not a function" for a TypeError.
  function describe(e) {
    try {
      if (e instanceof Error) {
        const name = e.name || "Error";
        return name === "Error" ? String(e.message) : name + ": " + e.message;
      }
      return "uncaught " + (typeof e === "string" ? stringify(e) : String(e));
    } catch (_) {
      return "uncaught exception";
    }
  }

  function settleError(e) {
    const o = e !== null && (typeof e === "object" || typeof e === "function") ? e[OUTCOME] : undefined;
    if (o && typeof o === "object" && (o.code === 1 || o.code === 2 || o.code === 3)) {
      host(10, o.code, String(o.reason), typeof o.delayMs === "number" ? o.delayMs : -1);
      return;
    }
    host(10, -1, describe(e), -1);
  }

  let handler;

  // __wasmjobs_load evaluates the handler's bundle (an IIFE that sets the global
  // __wasmjobs_handler to its exports) and checks its default export.
  globalThis.__wasmjobs_load = function (source) {
    try {
      (0, eval)(source);
      const exports = globalThis.__wasmjobs_handler;
      handler = exports && exports.default;
      if (typeof handler !== "function") {
        host(11, "the bundle's default export is not a function (export default async function handle(job) { ... })");
      }
    } catch (e) {
      host(11, "evaluating the handler: " + describe(e));
    }
  };

  // __wasmjobs_run runs one job; the host then runs the pending jobs of the VM until
  // the handler's promise settles, and reads the outcome it was given through op 10.
  globalThis.__wasmjobs_run = function () {
    const j = makeJob();
    let p;
    try {
      p = handler(j.job);
    } catch (e) {
      j.end();
      settleError(e);
      return;
    }
    if (p !== null && typeof p === "object" && typeof p.then === "function") {
      Promise.resolve(p).then(function () { j.end(); host(10, 0, "", -1); }, function (e) { j.end(); settleError(e); });
    } else {
      j.end();
      host(10, 0, "", -1);
    }
  };
})();
