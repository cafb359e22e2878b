// wasmjobs-sdk: write wasmjobs job handlers in AssemblyScript (guest ABI v1).
//
//   import { Job, Outcome, handle, retry } from "wasmjobs-sdk";
//   export { wasmjobs_abi_v1, wasmjobs_handle } from "wasmjobs-sdk";
//
//   handle((job: Job): Outcome => {
//     job.output("Hello, " + job.text() + "!");
//     return Outcome.Ack;
//   });
//
// Build: npx asc handler.ts -o handler.wasm --optimize --runtime incremental

@external("wasmjobs", "payload_len") declare function payload_len(): i32;
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

/** Fails the job at once with a trap ("trap: unreachable"). */
export function trap(): void {
  unreachable();
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
