/*
 * wasmjobs.h: write wasmjobs job handlers in C. Header-only; no allocation unless you
 * ask for it. The ABI is abi/SPEC.md in the wasmjobs repository.
 *
 *   #include "wasmjobs.h"
 *
 *   static wasmjobs_outcome handle(void) {
 *       char name[64];
 *       int n = wasmjobs_payload_read(name, sizeof name);
 *       wasmjobs_output("Hello, ", 7);
 *       wasmjobs_output(name, n);
 *       return WASMJOBS_ACK;
 *   }
 *   WASMJOBS_HANDLER(handle)
 *
 * Build a WASI reactor:
 *   clang --target=wasm32-wasi -mexec-model=reactor -O2 -o hello.wasm hello.c
 */
#ifndef WASMJOBS_H
#define WASMJOBS_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* How a job is settled: the result of the handler. */
typedef enum {
    WASMJOBS_ACK = 0,         /* done: children are published, the job acknowledged */
    WASMJOBS_RETRY = 1,       /* again after the staged delay, else the queue's backoff */
    WASMJOBS_DEFER = 2,       /* again after the staged delay, ahead of the queue; needs a delay */
    WASMJOBS_DEAD_LETTER = 3  /* to the dead letters, with the staged reason */
} wasmjobs_outcome;

/* Statuses of the host functions: >= 0 success. */
enum {
    WASMJOBS_NOT_FOUND = -1,
    WASMJOBS_BAD_ARGUMENT = -2,
    WASMJOBS_LIMIT_EXCEEDED = -3,
    WASMJOBS_NOT_PERMITTED = -4
};

/* Metadata keys of wasmjobs_meta. */
typedef enum {
    WASMJOBS_META_JOB_ID = 0,
    WASMJOBS_META_QUEUE = 1,
    WASMJOBS_META_MODULE = 2,
    WASMJOBS_META_VERSION = 3
} wasmjobs_meta_key;

/* Log levels. */
typedef enum {
    WASMJOBS_DEBUG = 0,
    WASMJOBS_INFO = 1,
    WASMJOBS_WARN = 2,
    WASMJOBS_ERROR = 3
} wasmjobs_level;

#define WASMJOBS_IMPORT(name) __attribute__((import_module("wasmjobs"), import_name(#name)))

WASMJOBS_IMPORT(payload_len) int32_t wasmjobs__payload_len(void);
WASMJOBS_IMPORT(payload_read) int32_t wasmjobs__payload_read(void *buf, int32_t len);
WASMJOBS_IMPORT(meta_read) int32_t wasmjobs__meta_read(int32_t key, void *buf, int32_t len);
WASMJOBS_IMPORT(attempt) int32_t wasmjobs__attempt(void);
WASMJOBS_IMPORT(max_attempts) int32_t wasmjobs__max_attempts(void);
WASMJOBS_IMPORT(header_read) int32_t wasmjobs__header_read(const void *key, int32_t key_len, void *buf, int32_t len);
WASMJOBS_IMPORT(log) void wasmjobs__log(int32_t level, const void *msg, int32_t len);
WASMJOBS_IMPORT(set_reason) void wasmjobs__set_reason(const void *msg, int32_t len);
WASMJOBS_IMPORT(set_delay_ms) void wasmjobs__set_delay_ms(int64_t ms);
WASMJOBS_IMPORT(output_write) int32_t wasmjobs__output_write(const void *buf, int32_t len);
WASMJOBS_IMPORT(enqueue) int32_t wasmjobs__enqueue(const void *queue, int32_t queue_len, const void *payload, int32_t payload_len, int64_t delay_ms);

/* The payload's length in bytes. */
static inline int32_t wasmjobs_payload_len(void) { return wasmjobs__payload_len(); }

/* Copies up to len bytes of the payload to buf; returns how many it copied. */
static inline int32_t wasmjobs_payload_read(void *buf, size_t len) { return wasmjobs__payload_read(buf, (int32_t)len); }

/* Copies a metadata value to buf (up to len bytes) and returns its full length, or
 * WASMJOBS_NOT_FOUND. The value is not NUL-terminated. */
static inline int32_t wasmjobs_meta(wasmjobs_meta_key key, char *buf, size_t len) {
    return wasmjobs__meta_read((int32_t)key, buf, (int32_t)len);
}

/* The 1-based number of this execution, and how many are allowed. */
static inline int32_t wasmjobs_attempt(void) { return wasmjobs__attempt(); }
static inline int32_t wasmjobs_max_attempts(void) { return wasmjobs__max_attempts(); }

/* Copies the job header key's value (up to len bytes) and returns its full length, or
 * WASMJOBS_NOT_FOUND. Keys are exact bytes. */
static inline int32_t wasmjobs_header(const char *key, char *buf, size_t len) {
    return wasmjobs__header_read(key, (int32_t)strlen(key), buf, (int32_t)len);
}

/* Logs a message at level. */
static inline void wasmjobs_log(wasmjobs_level level, const char *msg) {
    wasmjobs__log((int32_t)level, msg, (int32_t)strlen(msg));
}

/* Logs a formatted message (up to 1 KiB) at level. */
static inline void wasmjobs_logf(wasmjobs_level level, const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    wasmjobs__log((int32_t)level, buf, n < (int)sizeof buf ? n : (int)sizeof buf - 1);
}

/* Stages the reason recorded with a retry, defer or dead letter. */
static inline void wasmjobs_set_reason(const char *reason) { wasmjobs__set_reason(reason, (int32_t)strlen(reason)); }

/* Stages the delay of a retry or defer. */
static inline void wasmjobs_set_delay_ms(int64_t ms) { wasmjobs__set_delay_ms(ms); }

/* Appends to the job's output; returns len, or WASMJOBS_LIMIT_EXCEEDED. */
static inline int32_t wasmjobs_output(const void *buf, size_t len) { return wasmjobs__output_write(buf, (int32_t)len); }
static inline int32_t wasmjobs_output_str(const char *s) { return wasmjobs_output(s, strlen(s)); }

/* Stages a child job, published after delay_ms if this job acks. Returns 0 or a status. */
static inline int32_t wasmjobs_enqueue(const char *queue, const void *payload, size_t len, int64_t delay_ms) {
    return wasmjobs__enqueue(queue, (int32_t)strlen(queue), payload, (int32_t)len, delay_ms);
}

/* Settle helpers: stage, then return the outcome. */
static inline wasmjobs_outcome wasmjobs_retry(const char *reason, int64_t delay_ms) {
    if (reason) wasmjobs_set_reason(reason);
    if (delay_ms > 0) wasmjobs_set_delay_ms(delay_ms);
    return WASMJOBS_RETRY;
}
static inline wasmjobs_outcome wasmjobs_defer(int64_t delay_ms, const char *reason) {
    if (reason) wasmjobs_set_reason(reason);
    wasmjobs_set_delay_ms(delay_ms);
    return WASMJOBS_DEFER;
}
static inline wasmjobs_outcome wasmjobs_dead_letter(const char *reason) {
    wasmjobs_set_reason(reason);
    return WASMJOBS_DEAD_LETTER;
}

/* Fails the job at once with a trap ("trap: unreachable"); the instance is discarded. */
static inline void wasmjobs_trap(void) { __builtin_trap(); }

/* Registers fn, a function (void) -> wasmjobs_outcome, as the module's handler and
 * exports what ABI v1 requires. Use it once, at file scope. */
#define WASMJOBS_HANDLER(fn)                                                            \
    __attribute__((export_name("wasmjobs_abi_v1"))) void wasmjobs_abi_v1_marker(void) {} \
    __attribute__((export_name("wasmjobs_handle"))) int32_t wasmjobs_handle_export(void) { return (int32_t)(fn)(); }

#endif /* WASMJOBS_H */
