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

  // The job object. A pooled VM runs many jobs, and a promise or callback the handler
  // left behind must not act on a later job through a stale object: every member
  // checks that its job is the one running (current; null between jobs). Made per
  // job, an object of its own seventeen properties, each a closure, was most of a
  // no-op job's time in the engine; so the job object is a frozen object of its own
  // with nothing of its own, its members accessors of one prototype made once, and a
  // method (a function the handler may take away and call later) is made for its job
  // the first time it is read. The caches below are the running job's.
  let current = null;
  let payload, textValue, children, log, fJson, fHeader, fOutput, fEnqueue, fRound, fChildren;
  // Taken now, as stringify: a handler may replace the globals.
  const apply = Reflect.apply, create = Object.create, freeze = Object.freeze, protoOf = Object.getPrototypeOf;
  function staleError() {
    return new Error("this job has settled: its job object cannot be used in a later job (nor can a Proxy of the job object: use the object itself)");
  }
  // mine reports whether o is the running job's object (or made from it, as
  // Object.create(job) is).
  function mine(o) {
    for (; current !== null && o !== null && (typeof o === "object" || typeof o === "function"); o = protoOf(o)) {
      if (o === current) return true;
    }
    return false;
  }
  function check(o) {
    if (!mine(o)) throw staleError();
  }
  // A method read from a settled job's object: calling it throws, as before.
  const staleMethod = function () { throw staleError(); };
  // bound makes f the running job's method: it throws once that job has settled.
  function bound(f) {
    const j = current;
    return function () {
      if (j !== current) throw staleError();
      return apply(f, undefined, arguments);
    };
  }
  function getText() { return textValue === undefined ? (textValue = host(2)) : textValue; }
  function logAt(level) {
    return bound(function () { host(7, level, text(arguments)); });
  }
  function enqueueJob(queue, data, options) {
    let delay = 0;
    if (options != null && options.delay != null) {
      delay = Number(options.delay);
      if (!Number.isFinite(delay) || delay < 0) throw new RangeError("enqueue: delay must be a non-negative number of milliseconds, got " + options.delay);
      delay = Math.floor(delay);
    }
    // A truthy non-boolean would otherwise stage a plain child, and the job would
    // fail only later, at its WAIT, far from the mistake.
    let awaited = 0;
    if (options != null && options.await != null) {
      if (typeof options.await !== "boolean") throw new TypeError("enqueue: the await option must be a boolean, got a " + typeof options.await);
      awaited = options.await ? 1 : 0;
    }
    const st = host(9, String(queue), bytesOf(data), delay, awaited);
    if (st < 0) throw new RangeError("enqueue into " + stringify(String(queue)) + ": " + (statusNames[st] || "status " + st));
  }
  const jobKeys = ["id", "queue", "module", "version", "traceId", "spanId", "attempt", "maxAttempts", "payload", "text", "log"];
  const JobProto = {
    get id() { check(this); return host(3, 0); },
    get queue() { check(this); return host(3, 1); },
    get module() { check(this); return host(3, 2); },
    get version() { check(this); return host(3, 3); },
    // The host's span the job runs in, as lowercase hex; "" with tracing off.
    get traceId() { check(this); return host(3, 4); },
    get spanId() { check(this); return host(3, 5); },
    get attempt() { check(this); return host(4); },
    get maxAttempts() { check(this); return host(5); },
    get payload() { check(this); return payload === undefined ? (payload = host(1)) : payload; },
    get text() { check(this); return getText(); },
    get json() {
      return !mine(this) ? staleMethod : fJson || (fJson = bound(function () { return JSON.parse(getText()); }));
    },
    get header() {
      return !mine(this) ? staleMethod : fHeader || (fHeader = bound(function (key) { return host(6, String(key)); }));
    },
    get output() {
      return !mine(this) ? staleMethod : fOutput || (fOutput = bound(function (data) { return host(8, bytesOf(data)) >= 0; }));
    },
    get log() {
      check(this);
      return log || (log = freeze({ debug: logAt(0), info: logAt(1), warn: logAt(2), error: logAt(3) }));
    },
    get enqueue() {
      return !mine(this) ? staleMethod : fEnqueue || (fEnqueue = bound(enqueueJob));
    },
    // round is 0 on a first run, n on the run after the job's n-th wait.
    get round() {
      return !mine(this) ? staleMethod : fRound || (fRound = bound(function () { return host(22); }));
    },
    // children are how the children the last wait awaited ended, in the order they
    // were enqueued: [] on a first run.
    get children() {
      return !mine(this) ? staleMethod : fChildren || (fChildren = bound(function () {
        if (children === undefined) children = freeze(JSON.parse(host(23)).map(function (c) { return freeze(c); }));
        return children;
      }));
    },
  };
  // JSON.stringify(job) gives the job's values, as it did when they were its own.
  Object.defineProperty(JobProto, "toJSON", {
    value: function () {
      check(this);
      const o = {};
      for (let i = 0; i < jobKeys.length; i++) o[jobKeys[i]] = this[jobKeys[i]];
      return o;
    },
  });
  freeze(JobProto);

  // startJob makes the job object of a new job, and endJob ends its life.
  function startJob() {
    payload = textValue = children = log = fJson = fHeader = fOutput = fEnqueue = fRound = fChildren = undefined;
    current = freeze(create(JobProto));
    return current;
  }
  function endJob() {
    current = null;
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
    if (o && typeof o === "object" && (o.code === 1 || o.code === 2 || o.code === 3 || o.code === 4)) {
      host(10, o.code, String(o.reason), typeof o.delayMs === "number" ? o.delayMs : -1);
      return;
    }
    host(10, -1, describe(e), -1);
  }

  // ---- The web APIs of outbound HTTP: fetch, Response, Headers, URL, AbortController,
  // AbortSignal, DOMException, setTimeout/clearTimeout, TextEncoder/TextDecoder. The
  // engine's own extension modules are side modules the host cannot load, so these
  // are written here, small: enough of each standard for a handler that calls APIs.

  // epoch counts jobs: an object of an earlier job (a Response, an AbortController
  // held in a global) must not act on this job's request of the same handle number.
  let epoch = 0;
  const KEY = Symbol("wasmjobs.internal");
  const defineGlobal = function (name, value) {
    Object.defineProperty(globalThis, name, { value: value, writable: true, configurable: true, enumerable: false });
  };

  // UTF-8, through the host: it has the codec (lone surrogates encode as U+FFFD, as
  // TextEncoder's do; invalid bytes decode as U+FFFD unless fatal).
  function bufferOf(data, what) {
    if (data instanceof ArrayBuffer) return data;
    if (ArrayBuffer.isView(data)) return data.buffer.slice(data.byteOffset, data.byteOffset + data.byteLength);
    throw new TypeError(what + ": want an ArrayBuffer or a typed array, got " + (data === null ? "null" : typeof data));
  }
  class TextEncoder {
    get encoding() { return "utf-8"; }
    encode(input) { return hostFn(20, input === undefined ? "" : String(input)); }
  }
  class TextDecoder {
    #fatal; #ignoreBOM;
    constructor(label, options) {
      const l = label === undefined ? "utf-8" : String(label).trim().toLowerCase();
      if (l !== "utf-8" && l !== "utf8" && l !== "unicode-1-1-utf-8") throw new RangeError("TextDecoder: only utf-8 is supported, not " + stringify(l));
      this.#fatal = !!(options && options.fatal);
      this.#ignoreBOM = !!(options && options.ignoreBOM);
    }
    get encoding() { return "utf-8"; }
    get fatal() { return this.#fatal; }
    get ignoreBOM() { return this.#ignoreBOM; }
    decode(input) {
      if (input === undefined) return "";
      const s = hostFn(21, bufferOf(input, "TextDecoder.decode"), this.#fatal ? 1 : 0);
      if (s === undefined) throw new TypeError("TextDecoder.decode: the data is not valid UTF-8");
      return !this.#ignoreBOM && s.charCodeAt(0) === 0xfeff ? s.slice(1) : s;
    }
  }
  const utf8 = new TextDecoder();

  const ExceptionCodes = { AbortError: 20, TimeoutError: 23 };
  class DOMException extends Error {
    constructor(message, name) {
      super(message === undefined ? "" : String(message));
      Object.defineProperty(this, "name", { value: name === undefined ? "Error" : String(name), writable: true, configurable: true });
    }
    get code() { return ExceptionCodes[this.name] || 0; }
  }
  const DOMEx = typeof globalThis.DOMException === "function" ? globalThis.DOMException : DOMException;

  // Timers: the host keeps each one's due time and resolves its promise then, from
  // the drive loop; a timer still waiting when its job settles never fires. A callback
  // that throws fails the job, as an uncaught exception would end a process.
  let timerSeq = 0;
  const timers = new Set();
  function setTimeout(callback, ms) {
    if (typeof callback !== "function") throw new TypeError("setTimeout: the callback must be a function");
    const args = Array.prototype.slice.call(arguments, 2);
    const id = ++timerSeq;
    const p = hostFn(18, id, Math.max(0, Number(ms) || 0));
    if (p === undefined) throw new RangeError("setTimeout: too many timers waiting (at most 1000)");
    timers.add(id);
    p.then(function () {
      if (!timers.delete(id)) return;
      try { callback.apply(undefined, args); } catch (e) { settleError(e); }
    });
    return id;
  }
  function clearTimeout(id) {
    if (timers.delete(id)) hostFn(19, id);
  }

  let signalAbort;
  class AbortSignal {
    #aborted = false; #reason = undefined; #listeners = [];
    constructor(key) {
      if (key !== KEY) throw new TypeError("AbortSignal: use an AbortController, AbortSignal.abort() or AbortSignal.timeout()");
      this.onabort = null;
    }
    get aborted() { return this.#aborted; }
    get reason() { return this.#reason; }
    throwIfAborted() { if (this.#aborted) throw this.#reason; }
    addEventListener(type, listener, options) {
      if (type !== "abort" || typeof listener !== "function" || this.#listeners.some(function (l) { return l.fn === listener; })) return;
      this.#listeners.push({ fn: listener, once: !!(options && options.once) });
    }
    removeEventListener(type, listener) {
      if (type === "abort") this.#listeners = this.#listeners.filter(function (l) { return l.fn !== listener; });
    }
    static abort(reason) { const s = new AbortSignal(KEY); signalAbort(s, reason); return s; }
    static timeout(ms) {
      const d = Number(ms);
      if (!Number.isFinite(d) || d < 0) throw new TypeError("AbortSignal.timeout: want a non-negative number of milliseconds, got " + ms);
      const s = new AbortSignal(KEY);
      setTimeout(function () { signalAbort(s, new DOMEx("The operation timed out.", "TimeoutError")); }, d);
      return s;
    }
    static any(signals) {
      const s = new AbortSignal(KEY);
      for (const other of signals) {
        if (other.aborted) { signalAbort(s, other.reason); break; }
        other.addEventListener("abort", function () { signalAbort(s, other.reason); }, { once: true });
      }
      return s;
    }
    static {
      signalAbort = function (s, reason) {
        if (s.#aborted) return;
        s.#aborted = true;
        s.#reason = reason === undefined ? new DOMEx("This operation was aborted", "AbortError") : reason;
        const listeners = s.#listeners;
        s.#listeners = [];
        const event = { type: "abort", target: s };
        const all = typeof s.onabort === "function" ? [{ fn: s.onabort }].concat(listeners) : listeners;
        for (const l of all) {
          // A listener that throws does not keep the others from running: its error
          // fails the job (as a timer's does).
          try { l.fn.call(s, event); } catch (e) { settleError(e); }
        }
      };
    }
  }
  class AbortController {
    #signal = new AbortSignal(KEY);
    get signal() { return this.#signal; }
    abort(reason) { signalAbort(this.#signal, reason); }
  }

  // Headers keeps every value of a repeated name (get joins them with ", ", as the
  // Fetch standard does; getSetCookie keeps Set-Cookie's apart).
  const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
  function headerName(n) {
    n = String(n);
    if (!TOKEN.test(n)) throw new TypeError("Headers: " + stringify(n) + " is not a header name");
    return n.toLowerCase();
  }
  function headerValue(v) {
    v = String(v).replace(/^[\t\n\r ]+|[\t\n\r ]+$/g, "");
    if (/[\0\r\n]/.test(v)) throw new TypeError("Headers: a header value may not hold CR, LF or NUL");
    return v;
  }
  let headerList;
  class Headers {
    #list = []; // [lower-case name, value], in the order given
    constructor(init) {
      if (init == null) return;
      if (init instanceof Headers) { for (const e of init.#list) this.#list.push([e[0], e[1]]); return; }
      if (typeof init !== "object") throw new TypeError("Headers: want an object, an array of pairs or a Headers");
      if (typeof init[Symbol.iterator] === "function") {
        for (const pair of init) {
          const a = Array.from(pair);
          if (a.length !== 2) throw new TypeError("Headers: each pair must be [name, value]");
          this.append(a[0], a[1]);
        }
        return;
      }
      for (const k of Object.keys(init)) this.append(k, init[k]);
    }
    append(name, value) { this.#list.push([headerName(name), headerValue(value)]); }
    set(name, value) {
      const n = headerName(name), v = headerValue(value);
      const i = this.#list.findIndex(function (e) { return e[0] === n; });
      if (i < 0) { this.#list.push([n, v]); return; }
      this.#list[i][1] = v;
      this.#list = this.#list.filter(function (e, j) { return j <= i || e[0] !== n; });
    }
    get(name) {
      const n = headerName(name);
      const vs = this.#list.filter(function (e) { return e[0] === n; }).map(function (e) { return e[1]; });
      return vs.length ? vs.join(", ") : null;
    }
    getSetCookie() { return this.#list.filter(function (e) { return e[0] === "set-cookie"; }).map(function (e) { return e[1]; }); }
    has(name) { const n = headerName(name); return this.#list.some(function (e) { return e[0] === n; }); }
    delete(name) { const n = headerName(name); this.#list = this.#list.filter(function (e) { return e[0] !== n; }); }
    forEach(callback, thisArg) { for (const [k, v] of this) callback.call(thisArg, v, k, this); }
    *entries() {
      const names = Array.from(new Set(this.#list.map(function (e) { return e[0]; }))).sort();
      for (const n of names) {
        if (n === "set-cookie") { for (const v of this.getSetCookie()) yield [n, v]; }
        else yield [n, this.get(n)];
      }
    }
    *keys() { for (const e of this.entries()) yield e[0]; }
    *values() { for (const e of this.entries()) yield e[1]; }
    [Symbol.iterator]() { return this.entries(); }
    static { headerList = function (h) { return h.#list; }; }
  }

  // URL: enough of the URL standard to take an absolute http or https URL apart, and
  // to resolve a relative one against a base.
  const URL_RE = /^([A-Za-z][A-Za-z0-9+.\-]*):\/\/(?:([^:@\/?#]*)(?::([^@\/?#]*))?@)?(\[[0-9A-Fa-f:.]+\]|[^:\/?#\[\]]*)(?::(\d*))?([^?#]*)(\?[^#]*)?(#.*)?$/;
  const DEFAULT_PORTS = { "http:": "80", "https:": "443", "ws:": "80", "wss:": "443", "ftp:": "21" };
  class URL {
    constructor(input, base) {
      let s = String(input).replace(/^[\0- ]+|[\0- ]+$/g, "").replace(/[\t\n\r]/g, "");
      let m = URL_RE.exec(s);
      if (!m && base !== undefined) {
        const b = base instanceof URL ? base : new URL(base);
        const root = b.protocol + "//" + (b.username ? b.username + (b.password ? ":" + b.password : "") + "@" : "") + b.host;
        if (s.startsWith("//")) s = b.protocol + s;
        else if (s.startsWith("/")) s = root + s;
        else if (s.startsWith("?")) s = root + b.pathname + s;
        else if (s.startsWith("#")) s = root + b.pathname + b.search + s;
        else if (s === "") s = root + b.pathname + b.search;
        else s = root + b.pathname.slice(0, b.pathname.lastIndexOf("/") + 1) + s;
        m = URL_RE.exec(s);
      }
      if (!m || m[4] === "") throw new TypeError("Invalid URL: " + stringify(String(input)));
      this.protocol = m[1].toLowerCase() + ":";
      this.username = m[2] || "";
      this.password = m[3] || "";
      this.hostname = m[4].toLowerCase();
      const port = m[5] === undefined || m[5] === "" ? "" : String(Number(m[5]));
      if (port !== "" && Number(port) > 65535) throw new TypeError("Invalid URL: " + stringify(String(input)) + " (port " + port + ")");
      this.port = port === DEFAULT_PORTS[this.protocol] ? "" : port;
      this.pathname = dotSegments(m[6] || "/");
      this.search = m[7] && m[7] !== "?" ? m[7] : "";
      this.hash = m[8] && m[8] !== "#" ? m[8] : "";
    }
    get host() { return this.hostname + (this.port ? ":" + this.port : ""); }
    get origin() { return this.protocol + "//" + this.host; }
    get href() {
      const auth = this.username ? this.username + (this.password ? ":" + this.password : "") + "@" : "";
      return this.protocol + "//" + auth + this.host + this.pathname + this.search + this.hash;
    }
    toString() { return this.href; }
    toJSON() { return this.href; }
    static canParse(input, base) { try { new URL(input, base); return true; } catch (_) { return false; } }
  }
  function dotSegments(path) {
    const out = [];
    const parts = path.split("/");
    for (let i = 1; i < parts.length; i++) {
      const p = parts[i];
      if (p === "..") { if (out.length) out.pop(); if (i === parts.length - 1) out.push(""); }
      else if (p === ".") { if (i === parts.length - 1) out.push(""); }
      else out.push(p);
    }
    return "/" + out.join("/");
  }

  // FetchError is what fetch rejects with when the host could not make a request: a
  // TypeError, as the Fetch standard's, with the ABI's status (code) and its name
  // (kind), and the host's message.
  const KINDS = {
    "-2": "bad_argument", "-3": "limit_exceeded", "-4": "not_permitted",
    "-10": "denied", "-11": "blocked", "-12": "dns", "-13": "refused", "-14": "tls", "-15": "timeout",
    "-16": "too_large", "-17": "too_many_requests", "-18": "rate_limited", "-19": "circuit_open",
    "-20": "connection", "-21": "too_many_redirects",
  };
  class FetchError extends TypeError {
    constructor(code, message) {
      super(message);
      this.code = code;
      this.kind = KINDS[code] || "status " + code;
    }
  }
  function fetchError(code, handle) {
    const msg = hostFn(14, handle);
    return new FetchError(code, typeof msg === "string" && msg !== "" ? msg : KINDS[code] || "status " + code);
  }

  // listening holds this job's abort listeners of fetch, each { signal, fn }: a signal
  // may outlive its fetches (an AbortController in a global), and must not keep a
  // listener of each for the VM's life. One is removed when its body is read, its
  // head fails or it fires, and the rest when the next job begins.
  const listening = new Set();
  function unlisten(l) {
    if (l !== undefined && listening.delete(l)) l.signal.removeEventListener("abort", l.fn);
  }

  // yieldToHost resolves on the drive loop's next turn, after the timers already due
  // (a timer due now: the host fires timers in the order of their due time), with
  // false when no timer can be set (at most 1,000).
  function yieldToHost() {
    return new Promise(function (resolve) {
      const p = hostFn(18, 0, 0); // id 0: no setTimeout's, so clearTimeout never drops it
      if (p === undefined) resolve(false);
      else p.then(function () { resolve(true); });
    });
  }

  class Response {
    #handle; #epoch; #signal; #release; #used = false;
    constructor(key, o) {
      if (key !== KEY) throw new TypeError("Response: only fetch makes a Response here");
      this.#handle = o.handle; this.#epoch = o.epoch; this.#signal = o.signal; this.#release = o.release;
      this.status = o.status; this.statusText = o.statusText; this.ok = o.status >= 200 && o.status <= 299;
      this.headers = o.headers; this.url = o.url; this.redirected = o.redirected; this.type = "basic";
      Object.freeze(this);
    }
    get bodyUsed() { return this.#used; }
    // bytes reads the body whole (up to max_response and the request's timeout),
    // then closes the request. The host reads it until a timer is due (or a head the
    // job waits on comes in), then answers 1: the read yields to the drive loop, which
    // fires the timer (an abort closes the request), and goes on.
    async bytes() {
      if (this.#used) throw new TypeError("Response: the body was already read");
      this.#used = true;
      if (this.#epoch !== epoch) throw new TypeError("Response: this response belongs to an earlier job");
      try {
        if (this.#signal && this.#signal.aborted) throw this.#signal.reason;
        let b, bound = 1;
        for (;;) {
          b = hostFn(16, this.#handle, bound);
          if (b !== 1) break;
          bound = (await yieldToHost()) ? 1 : 0;
          if (this.#signal && this.#signal.aborted) throw this.#signal.reason;
        }
        if (typeof b === "number") throw fetchError(b, this.#handle);
        return b;
      } finally {
        hostFn(17, this.#handle);
        this.#release();
      }
    }
    async arrayBuffer() { return (await this.bytes()).buffer; }
    async text() { return utf8.decode(await this.bytes()); }
    async json() { return JSON.parse(await this.text()); }
  }

  const NORMAL_METHODS = ["DELETE", "GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH"];
  function fetch(input, init) {
    return new Promise(function (resolve, reject) {
      const my = epoch;
      init = init == null ? {} : init;
      const raw = input instanceof URL ? input.href : input !== null && typeof input === "object" && typeof input.url === "string" ? input.url : String(input);
      let u;
      try { u = new URL(raw); } catch (_) { reject(new FetchError(-2, "fetch: " + stringify(raw) + " is not an absolute URL")); return; }
      if (u.protocol !== "http:" && u.protocol !== "https:") { reject(new FetchError(-2, "fetch: " + u.href + " is not an http or https URL")); return; }
      let method = init.method === undefined ? "GET" : String(init.method);
      if (NORMAL_METHODS.includes(method.toUpperCase())) method = method.toUpperCase();
      const headers = new Headers(init.headers);
      let body = "";
      if (init.body != null) {
        if (method === "GET" || method === "HEAD") { reject(new TypeError("fetch: a " + method + " request cannot have a body")); return; }
        if (typeof init.body === "string") {
          body = init.body;
          if (!headers.has("content-type")) headers.set("content-type", "text/plain;charset=UTF-8");
        } else if (init.body instanceof ArrayBuffer || ArrayBuffer.isView(init.body)) {
          body = bufferOf(init.body, "fetch");
        } else {
          reject(new TypeError("fetch: the body must be a string, an ArrayBuffer or a Uint8Array")); return;
        }
      }
      if (init.redirect !== undefined && String(init.redirect) !== "follow") {
        reject(new FetchError(-2, "fetch: redirect " + stringify(String(init.redirect)) + " is not supported: the host follows redirects (at most 5)"));
        return;
      }
      const signal = init.signal == null ? undefined : init.signal;
      if (signal !== undefined && !(signal instanceof AbortSignal)) { reject(new TypeError("fetch: signal must be an AbortSignal")); return; }
      if (signal && signal.aborted) { reject(signal.reason); return; }
      const lines = headerList(headers).map(function (e) { return e[0] + ": " + e[1] + "\n"; }).join("");
      const h = hostFn(12, method, u.href, lines, body);
      if (typeof h !== "number" || h < 0) { reject(fetchError(typeof h === "number" ? h : -2, -1)); return; }
      let settled = false, listener;
      const onAbort = function () {
        listening.delete(listener);
        // Close on the host: the request is cancelled, its connection dropped.
        if (my === epoch) hostFn(17, h);
        if (!settled) { settled = true; reject(signal.reason); }
      };
      if (signal) {
        listener = { signal: signal, fn: onAbort };
        listening.add(listener);
        signal.addEventListener("abort", onAbort, { once: true });
      }
      const head = hostFn(13, h);
      if (head === undefined) { unlisten(listener); reject(new FetchError(-2, "fetch: the request was closed")); return; }
      head.then(function (status) {
        if (settled || my !== epoch) return;
        settled = true;
        if (status < 0) {
          const err = fetchError(status, h);
          hostFn(17, h);
          unlisten(listener);
          reject(err);
          return;
        }
        const info = hostFn(15, h);
        const lf = [info.indexOf("\n")];
        lf.push(info.indexOf("\n", lf[0] + 1));
        lf.push(info.indexOf("\n", lf[1] + 1));
        const rh = new Headers();
        for (const line of info.slice(lf[2] + 1).split("\n")) {
          const c = line.indexOf(":");
          if (c > 0) headerList(rh).push([line.slice(0, c).toLowerCase(), line.slice(c + 1).trim()]);
        }
        resolve(new Response(KEY, {
          handle: h, epoch: my, signal: signal, release: function () { unlisten(listener); }, status: status, statusText: info.slice(0, lf[0]),
          redirected: info.slice(lf[0] + 1, lf[1]) === "1", url: info.slice(lf[1] + 1, lf[2]), headers: rh,
        }));
      });
    });
  }

  const web = { fetch, Response, Headers, URL, AbortController, AbortSignal, TextEncoder, TextDecoder, setTimeout, clearTimeout, FetchError };
  for (const name of Object.keys(web)) {
    if (name === "URL" || name === "TextEncoder" || name === "TextDecoder") {
      if (typeof globalThis[name] === "function") continue; // the engine's own, if it has one
    }
    defineGlobal(name, web[name]);
  }
  if (DOMEx === DOMException) defineGlobal("DOMException", DOMException);

  // Math.random, seeded for each VM from the host's randomness (xoshiro128**, which is
  // not a cryptographic generator, as QuickJS's own is not). QuickJS
  // seeds its own from the clock when the VM starts, and fresh VMs start from one copy
  // of a VM's memory taken after its set-up: every one of them would draw the same
  // numbers. The seed is drawn at the VM's first call in a job: __wasmjobs_load forgets
  // the one the bundle's top level may have used.
  const imul = Math.imul;
  let s0 = 0, s1 = 0, s2 = 0, s3 = 0, seeded = false;
  function rotl(x, k) { return (x << k) | (x >>> (32 - k)); }
  function next() {
    const r = imul(rotl(imul(s1, 5), 7), 9) >>> 0;
    const t = s1 << 9;
    s2 ^= s0; s3 ^= s1; s1 ^= s2; s0 ^= s3; s2 ^= t; s3 = rotl(s3, 11);
    return r;
  }
  function seed() {
    const b = host(24);
    s0 = b[0] | (b[1] << 8) | (b[2] << 16) | (b[3] << 24);
    s1 = b[4] | (b[5] << 8) | (b[6] << 16) | (b[7] << 24);
    s2 = b[8] | (b[9] << 8) | (b[10] << 16) | (b[11] << 24);
    s3 = b[12] | (b[13] << 8) | (b[14] << 16) | (b[15] << 24);
    if ((s0 | s1 | s2 | s3) === 0) s0 = 1; // the one state the generator cannot leave
    seeded = true;
  }
  // A method, as the built-in is: not a constructor, no prototype.
  Math.random = ({
    random() {
      if (!seeded) seed();
      // 53 bits: 27 of one draw and 26 of the next, as a double in [0, 1).
      return ((next() >>> 5) * 67108864 + (next() >>> 6)) / 9007199254740992;
    },
  }).random;

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
    seeded = false;
  };

  // A plain ack is op 10 alone (host/jsguest.go): the code, reason and delay of the
  // other outcomes would be three values more to read.
  function settleOk() { endJob(); host(10); }
  function settleFailed(e) { endJob(); settleError(e); }

  // __wasmjobs_run runs one job; the host then runs the pending jobs of the VM until
  // the handler's promise settles, and reads the outcome it was given through op 10.
  // While the promise waits on a fetch or a timer, the host waits on them (the drive
  // loop of host/jsguest.go) and resolves the one that is ready.
  globalThis.__wasmjobs_run = function () {
    // The requests and timers of an earlier job were dropped by the host when it
    // settled: a handle number now names this job's request, never that one.
    epoch++;
    if (timers.size !== 0) timers.clear();
    if (listening.size !== 0) for (const l of Array.from(listening)) unlisten(l);
    const job = startJob();
    let p;
    try {
      p = handler(job);
    } catch (e) {
      settleFailed(e);
      return;
    }
    if (p !== null && typeof p === "object" && typeof p.then === "function") {
      // Only this job's reactions can run: a VM whose handler left its promise
      // unsettled, or promise work queued, is not given another job.
      Promise.resolve(p).then(settleOk, settleFailed);
    } else {
      settleOk();
    }
  };
})();
