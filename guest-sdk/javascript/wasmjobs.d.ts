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
   * Stages a child job, published only if this job is acknowledged. Throws a RangeError
   * naming the problem for a bad queue name or delay, a queue the manifest does not
   * allow, or one past the child-job or payload limit.
   */
  enqueue(queue: string, payload: string | Uint8Array, options?: { delay?: number }): void;
}

/** The default export of a handler's entry file. */
export type Handler = (job: Job) => void | Promise<void>;

/** Thrown to settle a job other than by acknowledging it. */
export class Outcome extends Error {
  readonly kind: "retry" | "defer" | "dead_letter";
}

/** Another attempt after options.delay ms, or after the queue's backoff. */
export function retry(reason: string, options?: { delay?: number }): Outcome;
/** Back at the front of the queue after ms; the attempt is not used. */
export function deferFor(ms: number, reason?: string): Outcome;
/** To the queue's dead letters with the reason. */
export function deadLetter(reason: string): Outcome;

/** Status codes of ABI v1. */
export const Status: {
  readonly OK: 0;
  readonly NOT_FOUND: -1;
  readonly BAD_ARGUMENT: -2;
  readonly LIMIT_EXCEEDED: -3;
  readonly NOT_PERMITTED: -4;
};
