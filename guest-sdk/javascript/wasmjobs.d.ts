// Types of the wasmjobs SDK for JavaScript and TypeScript handlers (guest ABI v1).

/** What a handler is given: one job, its payload, metadata and what it can stage. */
export interface Job {
  /** The job's id. */
  readonly id: string;
  /** The queue it came from. */
  readonly queue: string;
  /** The module's name and version (sha256 of the .wasm). */
  readonly module: string;
  readonly version: string;
  /** The trace id (32 lowercase hex digits) and span id (16) of the host's span the job
   * runs in, for the handler's own telemetry or logs to join the host's trace; both ""
   * when the host traces nothing. */
  readonly traceId: string;
  readonly spanId: string;
  /** 1-based number of this execution. */
  readonly attempt: number;
  /** Executions allowed before the job is dead-lettered. */
  readonly maxAttempts: number;
  /** The payload's bytes. */
  readonly payload: Uint8Array;
  /** The payload as UTF-8 text (invalid sequences read as U+FFFD). */
  readonly text: string;
  /** The payload parsed as JSON; throws a SyntaxError on bad JSON. */
  json<T = unknown>(): T;
  /** A header's value, or undefined when absent; keys are exact. */
  header(key: string): string | undefined;
  /** Appends to the job's output; returns false when it would pass the output limit. */
  output(data: string | Uint8Array): boolean;
  /** Logs a line tagged with the job. */
  readonly log: {
    debug(...msg: unknown[]): void;
    info(...msg: unknown[]): void;
    warn(...msg: unknown[]): void;
    error(...msg: unknown[]): void;
  };
  /**
   * Stages a child job, published only if this job is acknowledged or waits. With
   * {await: true} the child is one that waitForChildren() waits for. Throws a RangeError
   * naming the problem for a bad queue name or delay, a queue the manifest does not
   * allow, one past the child-job or payload limit, or an awaited child on a host whose
   * backend keeps no waiting jobs ("not permitted"), and a TypeError for an await
   * option that is not a boolean.
   */
  enqueue(queue: string, payload: string | Uint8Array, options?: { delay?: number; await?: boolean }): void;
  /** 0 on a first run; n on the run after the job's n-th wait (throw waitForChildren()). */
  round(): number;
  /** How each child the job's last wait awaited ended, in the order they were enqueued;
   * [] on a first run. */
  children(): readonly Child[];
}

/** How one awaited child ended, as a resumed job reads it (job.children()). */
export interface Child {
  readonly id: string;
  readonly queue: string;
  /** succeeded, dead, cancelled, or unfinished when the wait timed out first. */
  readonly state: "succeeded" | "dead" | "cancelled" | "unfinished";
  /** Why it did not succeed; "" when it did. */
  readonly reason: string;
  /** Its last run's output as text (invalid UTF-8 replaced), up to 16 KiB. */
  readonly output: string;
  /** The output was cut at 16 KiB. */
  readonly truncated: boolean;
}

/** The default export of a handler's entry file. */
export type Handler = (job: Job) => void | Promise<void>;

/** Thrown to settle a job other than by acknowledging it. */
export class Outcome extends Error {
  readonly kind: "retry" | "defer" | "dead_letter" | "wait";
}

/** Another attempt after options.delay ms, or after the queue's backoff. */
export function retry(reason: string, options?: { delay?: number }): Outcome;
/** Back at the front of the queue after ms; the attempt is not used. */
export function deferFor(ms: number, reason?: string): Outcome;
/** To the queue's dead letters with the reason. */
export function deadLetter(reason: string): Outcome;
/** Throw it to wait for the children enqueued with {await: true}: they are published
 * with the settle, and once every one has ended the job runs again at the same
 * attempt, job.round() one higher, job.children() saying how each ended. Throwing it
 * without an awaited child is a failure; so is it on a host whose backend keeps no
 * waiting jobs (RabbitMQ), where enqueue with {await: true} throws "not permitted". */
export function waitForChildren(): Outcome;

/** Status codes of ABI v1. */
export const Status: {
  readonly OK: 0;
  readonly NOT_FOUND: -1;
  readonly BAD_ARGUMENT: -2;
  readonly LIMIT_EXCEEDED: -3;
  readonly NOT_PERMITTED: -4;
};

/** The ABI's statuses of outbound HTTP, a FetchError's code. */
export const HTTPStatus: {
  readonly BAD_ARGUMENT: -2;
  readonly LIMIT_EXCEEDED: -3;
  readonly NOT_PERMITTED: -4;
  readonly DENIED: -10;
  readonly BLOCKED: -11;
  readonly DNS: -12;
  readonly REFUSED: -13;
  readonly TLS: -14;
  readonly TIMEOUT: -15;
  readonly TOO_LARGE: -16;
  readonly TOO_MANY_REQUESTS: -17;
  readonly RATE_LIMITED: -18;
  readonly CIRCUIT_OPEN: -19;
  readonly CONNECTION: -20;
  readonly TOO_MANY_REDIRECTS: -21;
};

/**
 * The kind of a FetchError, one per status: "bad_argument" (-2: a malformed request,
 * such as a URL that is not absolute http or https, or a header the transport owns),
 * "limit_exceeded" (-3: headers or body too large), "not_permitted" (-4: the manifest
 * has no [http] grant), "denied" (-10: the URL or a redirect hop is outside the grant),
 * "blocked" (-11: the name resolved to addresses a name grant does not reach), "dns"
 * (-12), "refused" (-13), "tls" (-14), "timeout" (-15: the grant's timeout or the
 * job's deadline), "too_large" (-16: the body passed max_response), "too_many_requests"
 * (-17: past max_requests for this run), "rate_limited" (-18), "circuit_open" (-19),
 * "connection" (-20), "too_many_redirects" (-21).
 */
export type FetchErrorKind =
  | "bad_argument" | "limit_exceeded" | "not_permitted" | "denied" | "blocked" | "dns" | "refused" | "tls"
  | "timeout" | "too_large" | "too_many_requests" | "rate_limited" | "circuit_open" | "connection" | "too_many_redirects";

/** What fetch (and a Response's body methods) reject with when the host could not make
 * the request: a TypeError, with the ABI's status and its kind; the message is the
 * host's ("denied: ..."). An abort rejects with the signal's reason instead: a
 * DOMException named "AbortError", or "TimeoutError" for AbortSignal.timeout. */
export interface FetchError extends TypeError {
  readonly code: number;
  readonly kind: FetchErrorKind;
}

/** Whether e is a FetchError. */
export function isFetchError(e: unknown): e is FetchError;

/**
 * Settles a job after a 429 or 503: `throw retryAfter(res)` defers it by the
 * Retry-After header (delay-seconds or an IMF-fixdate HTTP date; at least 1 ms, at most
 * RETRY_AFTER_CAP_MS) without spending an attempt, reason "http STATUS: Retry-After
 * VALUE"; without the header (or one it cannot read) it retries with the queue's
 * backoff, reason "http STATUS".
 */
export function retryAfter(res: Response): Outcome;

/** The longest delay retryAfter stages: 24 hours, in ms. */
export const RETRY_AFTER_CAP_MS: number;

// The globals the host's runtime gives a handler (host/jsruntime/prelude.js): the part
// of the web platform that outbound HTTP needs. The handler is type-checked against
// the ES library only, so they are declared here.
declare global {
  type HeadersInit = Headers | Record<string, string> | Iterable<readonly [string, string]> | Iterable<readonly string[]>;
  type BodyInit = string | ArrayBuffer | ArrayBufferView;

  class Headers implements Iterable<[string, string]> {
    constructor(init?: HeadersInit);
    append(name: string, value: string): void;
    set(name: string, value: string): void;
    /** Every value of the name, joined by ", "; null when absent. */
    get(name: string): string | null;
    getSetCookie(): string[];
    has(name: string): boolean;
    delete(name: string): void;
    forEach(callback: (value: string, name: string, headers: Headers) => void, thisArg?: unknown): void;
    /** Lower-case names, sorted. */
    entries(): IterableIterator<[string, string]>;
    keys(): IterableIterator<string>;
    values(): IterableIterator<string>;
    [Symbol.iterator](): IterableIterator<[string, string]>;
  }

  interface RequestInit {
    method?: string;
    headers?: HeadersInit;
    body?: BodyInit | null;
    signal?: AbortSignal | null;
    /** Only "follow" (the default): the host follows redirects, at most 5; another value rejects (-2). */
    redirect?: "follow";
  }

  /** A response whose head is in; its body is read whole by bytes, arrayBuffer, text or json (once). */
  class Response {
    private constructor();
    readonly status: number;
    readonly statusText: string;
    readonly ok: boolean;
    readonly headers: Headers;
    /** The final URL, after redirects. */
    readonly url: string;
    readonly redirected: boolean;
    readonly type: "basic";
    readonly bodyUsed: boolean;
    bytes(): Promise<Uint8Array>;
    arrayBuffer(): Promise<ArrayBuffer>;
    text(): Promise<string>;
    json(): Promise<any>;
  }

  /** Starts the request on the host at once; several run at the same time. Rejects with a FetchError, or an abort's reason. */
  function fetch(input: string | URL | { url: string }, init?: RequestInit): Promise<Response>;

  class URL {
    constructor(url: string | URL, base?: string | URL);
    protocol: string;
    username: string;
    password: string;
    hostname: string;
    port: string;
    pathname: string;
    search: string;
    hash: string;
    readonly host: string;
    readonly origin: string;
    readonly href: string;
    toString(): string;
    toJSON(): string;
    static canParse(url: string | URL, base?: string | URL): boolean;
  }

  class DOMException extends Error {
    constructor(message?: string, name?: string);
    readonly code: number;
  }

  class AbortSignal {
    private constructor();
    readonly aborted: boolean;
    readonly reason: any;
    onabort: ((this: AbortSignal, ev: { type: "abort"; target: AbortSignal }) => unknown) | null;
    throwIfAborted(): void;
    addEventListener(type: "abort", listener: (ev: { type: "abort"; target: AbortSignal }) => unknown, options?: { once?: boolean }): void;
    removeEventListener(type: "abort", listener: (ev: { type: "abort"; target: AbortSignal }) => unknown): void;
    static abort(reason?: unknown): AbortSignal;
    /** Aborts after ms with a DOMException named "TimeoutError". */
    static timeout(ms: number): AbortSignal;
    static any(signals: Iterable<AbortSignal>): AbortSignal;
  }

  class AbortController {
    readonly signal: AbortSignal;
    /** Aborts the signal: a request in flight is closed on the host, and its fetch rejects with reason (an "AbortError" DOMException by default). */
    abort(reason?: unknown): void;
  }

  class TextEncoder {
    readonly encoding: "utf-8";
    encode(input?: string): Uint8Array;
  }

  class TextDecoder {
    constructor(label?: string, options?: { fatal?: boolean; ignoreBOM?: boolean });
    readonly encoding: "utf-8";
    readonly fatal: boolean;
    readonly ignoreBOM: boolean;
    decode(input?: ArrayBuffer | ArrayBufferView): string;
  }

  /** Runs callback after ms, while the job runs; a timer still waiting when its job settles never fires. */
  function setTimeout<A extends unknown[]>(callback: (...args: A) => void, ms?: number, ...args: A): number;
  function clearTimeout(id: number | undefined): void;
}
