/*
 * wasmjobs.h: write wasmjobs job handlers in C. Header-only; no allocation (but for a
 * header looked up in a response head past 4 KiB, freed before the call returns). The
 * ABI is abi/SPEC.md in the wasmjobs repository.
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
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* How a job is settled: the result of the handler. */
typedef enum {
    WASMJOBS_ACK = 0,         /* done: children are published, the job acknowledged */
    WASMJOBS_RETRY = 1,       /* again after the staged delay, else the queue's backoff */
    WASMJOBS_DEFER = 2,       /* again after the staged delay, ahead of the queue; needs a delay */
    WASMJOBS_DEAD_LETTER = 3, /* to the dead letters, with the staged reason */
    WASMJOBS_WAIT = 4         /* children published, the job run again once the awaited ones have ended */
} wasmjobs_outcome;

/* Statuses of the host functions: >= 0 success. */
enum {
    WASMJOBS_NOT_FOUND = -1,
    WASMJOBS_BAD_ARGUMENT = -2,
    WASMJOBS_LIMIT_EXCEEDED = -3,
    WASMJOBS_NOT_PERMITTED = -4
};

/* Metadata keys of wasmjobs_meta. The trace id (32 lowercase hex digits) and span id
 * (16) are those of the host's span the job runs in, for the handler's own telemetry or
 * logs to join the host's trace; both are empty (length 0) when the host traces nothing. */
typedef enum {
    WASMJOBS_META_JOB_ID = 0,
    WASMJOBS_META_QUEUE = 1,
    WASMJOBS_META_MODULE = 2,
    WASMJOBS_META_VERSION = 3,
    WASMJOBS_META_TRACE_ID = 4,
    WASMJOBS_META_SPAN_ID = 5
} wasmjobs_meta_key;

/* Fields of wasmjobs_child_read: how one awaited child of the last wait ended. */
typedef enum {
    WASMJOBS_CHILD_ID = 0,
    WASMJOBS_CHILD_QUEUE = 1,
    WASMJOBS_CHILD_STATE = 2,     /* succeeded, dead, cancelled, or unfinished (the wait timed out) */
    WASMJOBS_CHILD_REASON = 3,    /* empty when it succeeded */
    WASMJOBS_CHILD_OUTPUT = 4,    /* its last run's output, up to 16 KiB */
    WASMJOBS_CHILD_TRUNCATED = 5  /* one byte: 1 when the output was cut, else 0 */
} wasmjobs_child_field;

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
/* Fan-out and fan-in: a module imports these only if it calls them, and then loads
 * only on a host whose backend keeps waiting jobs. */
WASMJOBS_IMPORT(enqueue_awaited) int32_t wasmjobs__enqueue_awaited(const void *queue, int32_t queue_len, const void *payload, int32_t payload_len, int64_t delay_ms);
WASMJOBS_IMPORT(round) int32_t wasmjobs__round(void);
WASMJOBS_IMPORT(next_job) int32_t wasmjobs__next_job(int32_t outcome);
WASMJOBS_IMPORT(children_len) int32_t wasmjobs__children_len(void);
WASMJOBS_IMPORT(child_read) int32_t wasmjobs__child_read(int32_t index, int32_t field, void *buf, int32_t len);

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

/* Stages a child job that wasmjobs_wait_for_children waits for (published as
 * wasmjobs_enqueue's are if the job acks instead); the statuses of wasmjobs_enqueue. */
static inline int32_t wasmjobs_enqueue_awaited(const char *queue, const void *payload, size_t len, int64_t delay_ms) {
    return wasmjobs__enqueue_awaited(queue, (int32_t)strlen(queue), payload, (int32_t)len, delay_ms);
}
/* 0 on a first run; n on the run after the job's n-th wait. */
static inline int32_t wasmjobs_round(void) { return wasmjobs__round(); }
/* How many children the last wait awaited: 0 on a first run. */
static inline int32_t wasmjobs_children_len(void) { return wasmjobs__children_len(); }
/* Copies a field of awaited child index and returns its full length; WASMJOBS_NOT_FOUND
 * for an index past the last, WASMJOBS_BAD_ARGUMENT for an unknown field. */
static inline int32_t wasmjobs_child_read(int32_t index, wasmjobs_child_field field, void *buf, size_t len) {
    return wasmjobs__child_read(index, (int32_t)field, buf, (int32_t)len);
}
/* 1 when awaited child index's output was cut at 16 KiB, 0 if not, or a status < 0. */
static inline int32_t wasmjobs_child_truncated(int32_t index) {
    unsigned char b = 0;
    int32_t n = wasmjobs__child_read(index, WASMJOBS_CHILD_TRUNCATED, &b, 1);
    return n < 0 ? n : b;
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
/* Waits for the children staged with wasmjobs_enqueue_awaited: once every one has ended
 * the job runs again at the same attempt, wasmjobs_round one higher. Without an awaited
 * child it is a failure. */
static inline wasmjobs_outcome wasmjobs_wait_for_children(void) { return WASMJOBS_WAIT; }

/* ---- Outbound HTTP (abi/SPEC.md, "Outbound HTTP (added)"), under the module's [http] grant.
 *
 *   wasmjobs_http_request req = {.method = "POST", .url = "https://api.example.com/v1/mail",
 *       .headers = "Content-Type: application/json\n", .body = json, .body_len = strlen(json)};
 *   wasmjobs_http_response res;
 *   if (wasmjobs_http_send(&req, &res) < 0) {           // res.status is WASMJOBS_HTTP_DENIED...
 *       wasmjobs_logf(WASMJOBS_WARN, "%s: %s", wasmjobs_http_error_name(res.status), res.error);
 *       wasmjobs_http_close(&res);
 *       return wasmjobs_retry(res.error, 0);
 *   }
 *   if (res.status == 429 || res.status == 503) { wasmjobs_outcome o = wasmjobs_retry_after(&res); wasmjobs_http_close(&res); return o; }
 *   int32_t n = wasmjobs_http_body(&res, buf, sizeof buf);  // or wasmjobs_http_read in pieces
 *   wasmjobs_http_close(&res);
 */

/* The failures of a request (the ABI's statuses); WASMJOBS_NOT_FOUND (-1) is an unknown
 * or closed handle, WASMJOBS_BAD_ARGUMENT, WASMJOBS_LIMIT_EXCEEDED and
 * WASMJOBS_NOT_PERMITTED (no grant) come from the start. */
#define WASMJOBS_HTTP_DENIED -10            /* the URL or a redirect hop is outside the grant */
#define WASMJOBS_HTTP_BLOCKED -11           /* the name resolved only to addresses a name grant does not reach */
#define WASMJOBS_HTTP_DNS -12               /* the name did not resolve */
#define WASMJOBS_HTTP_REFUSED -13           /* the connection was refused */
#define WASMJOBS_HTTP_TLS -14               /* the TLS handshake failed */
#define WASMJOBS_HTTP_TIMEOUT -15           /* the grant's timeout or the job's deadline passed */
#define WASMJOBS_HTTP_TOO_LARGE -16         /* the body passed max_response (or the caller's bound) */
#define WASMJOBS_HTTP_TOO_MANY_REQUESTS -17 /* the call already started max_requests requests */
#define WASMJOBS_HTTP_RATE_LIMITED -18      /* a wait for [http.limits] would pass the deadline */
#define WASMJOBS_HTTP_CIRCUIT_OPEN -19      /* the destination's circuit breaker is open */
#define WASMJOBS_HTTP_CONNECTION -20        /* the connection failed otherwise */
#define WASMJOBS_HTTP_TOO_MANY_REDIRECTS -21 /* more than 5 redirects */

/* The longest delay wasmjobs_retry_after stages: 24 hours. */
#define WASMJOBS_RETRY_AFTER_CAP_MS ((int64_t)24 * 3600 * 1000)

WASMJOBS_IMPORT(http_start) int32_t wasmjobs__http_start(const void *method, int32_t method_len, const void *url, int32_t url_len, const void *headers, int32_t headers_len, const void *body, int32_t body_len);
WASMJOBS_IMPORT(http_status) int32_t wasmjobs__http_status(int32_t handle);
WASMJOBS_IMPORT(http_error_read) int32_t wasmjobs__http_error_read(int32_t handle, void *buf, int32_t len);
WASMJOBS_IMPORT(http_headers_read) int32_t wasmjobs__http_headers_read(int32_t handle, void *buf, int32_t len);
WASMJOBS_IMPORT(http_url_read) int32_t wasmjobs__http_url_read(int32_t handle, void *buf, int32_t len);
WASMJOBS_IMPORT(http_body_read) int32_t wasmjobs__http_body_read(int32_t handle, void *buf, int32_t len);
WASMJOBS_IMPORT(http_close) int32_t wasmjobs__http_close(int32_t handle);
WASMJOBS_IMPORT(http_wait) int32_t wasmjobs__http_wait(const int32_t *handles, int32_t n, int64_t timeout_ms);

/* A request: method (NULL or "": GET), absolute URL, headers as "Name: value\n" lines
 * (a name may repeat; NULL for none; build them with wasmjobs_http_add_header, which
 * refuses a value that would split into two lines) and body bytes. */
typedef struct {
    const char *method;
    const char *url;
    const char *headers;
    const void *body;
    size_t body_len;
} wasmjobs_http_request;

/* A request started, and its response. status is 0 until the head is in, then the HTTP
 * status (200-599) or the failure (< 0), whose message is in error. */
typedef struct {
    int32_t handle; /* -1 when the start failed or once closed */
    int32_t status;
    char error[256]; /* the host's message of the failure, NUL-terminated (truncated) */
} wasmjobs_http_response;

/* The name of a failure status, as the ABI's table spells it. */
static inline const char *wasmjobs_http_error_name(int32_t code) {
    switch (code) {
    case WASMJOBS_NOT_FOUND: return "closed";
    case WASMJOBS_BAD_ARGUMENT: return "bad argument";
    case WASMJOBS_LIMIT_EXCEEDED: return "limit exceeded";
    case WASMJOBS_NOT_PERMITTED: return "not permitted";
    case WASMJOBS_HTTP_DENIED: return "denied";
    case WASMJOBS_HTTP_BLOCKED: return "blocked address";
    case WASMJOBS_HTTP_DNS: return "dns";
    case WASMJOBS_HTTP_REFUSED: return "refused";
    case WASMJOBS_HTTP_TLS: return "tls";
    case WASMJOBS_HTTP_TIMEOUT: return "timeout";
    case WASMJOBS_HTTP_TOO_LARGE: return "too large";
    case WASMJOBS_HTTP_TOO_MANY_REQUESTS: return "too many requests";
    case WASMJOBS_HTTP_RATE_LIMITED: return "rate limited";
    case WASMJOBS_HTTP_CIRCUIT_OPEN: return "circuit open";
    case WASMJOBS_HTTP_CONNECTION: return "connection";
    case WASMJOBS_HTTP_TOO_MANY_REDIRECTS: return "too many redirects";
    default: return "unknown";
    }
}

/* Records a failure in res: the host's message, else the status's name. Returns code. */
static inline int32_t wasmjobs__http_fail(wasmjobs_http_response *res, int32_t code) {
    int32_t n = res->handle >= 0 ? wasmjobs__http_error_read(res->handle, res->error, (int32_t)sizeof res->error - 1) : -1;
    if (n < 0) {
        snprintf(res->error, sizeof res->error, "%s", wasmjobs_http_error_name(code));
    } else {
        res->error[n < (int32_t)sizeof res->error - 1 ? n : (int32_t)sizeof res->error - 1] = 0;
    }
    res->status = code;
    return code;
}

/* Whether c may be in a header name (RFC 9110's token). */
static inline int wasmjobs__tchar(unsigned char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* Whether name is a header name and value a header value without CR or LF (a NUL ends a
 * C string), so that "name: value\n" is one header line. */
static inline int wasmjobs__header_ok(const char *name, size_t name_len, const char *value, size_t value_len) {
    if (name_len == 0) return 0;
    for (size_t i = 0; i < name_len; i++) if (!wasmjobs__tchar((unsigned char)name[i])) return 0;
    for (size_t i = 0; i < value_len; i++) if (value[i] == '\r' || value[i] == '\n') return 0;
    return 1;
}

/* Appends the line "name: value\n" to lines, a NUL-terminated string in a buffer of
 * cap bytes. Returns 0; WASMJOBS_BAD_ARGUMENT for a name outside RFC 9110's token
 * characters or a value holding CR or LF (such a value would become two headers on the
 * host); WASMJOBS_LIMIT_EXCEEDED when the line does not fit. lines is unchanged on a
 * failure. */
static inline int32_t wasmjobs_http_add_header(char *lines, size_t cap, const char *name, const char *value) {
    size_t used = strlen(lines), nl = strlen(name), vl = strlen(value);
    if (!wasmjobs__header_ok(name, nl, value, vl)) return WASMJOBS_BAD_ARGUMENT;
    if (used + nl + vl + 4 > cap) return WASMJOBS_LIMIT_EXCEEDED;
    snprintf(lines + used, cap - used, "%s: %s\n", name, value);
    return 0;
}

/* Whether headers is "Name: value" lines, each ended by LF (the last may be unended):
 * a name of token characters and a value without CR; empty lines are allowed. */
static inline int wasmjobs__header_lines_ok(const char *h) {
    while (*h) {
        const char *eol = strchr(h, '\n');
        size_t len = eol ? (size_t)(eol - h) : strlen(h);
        const char *colon = memchr(h, ':', len);
        if (len > 0 && (!colon || !wasmjobs__header_ok(h, (size_t)(colon - h), colon + 1, len - (size_t)(colon - h) - 1))) return 0;
        h += len + (eol ? 1 : 0);
    }
    return 1;
}

/* Starts req, which runs in the background; returns 0, or the failure (also in res):
 * WASMJOBS_BAD_ARGUMENT, before anything reaches the host, for headers that are not
 * "Name: value" lines (a name outside the token characters, a CR in a value). */
static inline int32_t wasmjobs_http_start(const wasmjobs_http_request *req, wasmjobs_http_response *res) {
    const char *m = req->method ? req->method : "";
    const char *h = req->headers ? req->headers : "";
    res->status = 0;
    res->error[0] = 0;
    if (!wasmjobs__header_lines_ok(h)) {
        res->handle = -1;
        return wasmjobs__http_fail(res, WASMJOBS_BAD_ARGUMENT);
    }
    res->handle = wasmjobs__http_start(m, (int32_t)strlen(m), req->url, (int32_t)strlen(req->url), h, (int32_t)strlen(h), req->body, (int32_t)req->body_len);
    if (res->handle < 0) {
        int32_t code = res->handle;
        res->handle = -1;
        return wasmjobs__http_fail(res, code);
    }
    return 0;
}

/* Waits for the head of a started request (at most until the job's deadline); returns
 * the HTTP status, or the failure. */
static inline int32_t wasmjobs_http_status(wasmjobs_http_response *res) {
    if (res->status != 0) return res->status;
    int32_t s = wasmjobs__http_status(res->handle);
    if (s < 0) return wasmjobs__http_fail(res, s);
    return res->status = s;
}

/* Sends req and waits for the head: wasmjobs_http_start, then wasmjobs_http_status.
 * Close res afterwards, whatever the result. */
static inline int32_t wasmjobs_http_send(const wasmjobs_http_request *req, wasmjobs_http_response *res) {
    int32_t s = wasmjobs_http_start(req, res);
    return s < 0 ? s : wasmjobs_http_status(res);
}

/* The most requests wasmjobs_http_wait waits on at once. */
#define WASMJOBS_HTTP_WAIT_MAX 1024

/* Waits until the head of one of n started requests is in (or its request failed) and
 * returns its index; -1 when none is within timeout_ms (0 polls; < 0 waits until the
 * job's deadline), WASMJOBS_BAD_ARGUMENT for n 0, past WASMJOBS_HTTP_WAIT_MAX or past
 * the grant's max_requests. */
static inline int32_t wasmjobs_http_wait(const wasmjobs_http_response *res, size_t n, int64_t timeout_ms) {
    if (n == 0 || n > WASMJOBS_HTTP_WAIT_MAX) return WASMJOBS_BAD_ARGUMENT;
    /* Static, not on the stack: a guest's stack is small (64 KiB by default), and a
     * Wasm guest runs one handler at a time. */
    static int32_t handles[WASMJOBS_HTTP_WAIT_MAX];
    for (size_t i = 0; i < n; i++) handles[i] = res[i].handle;
    return wasmjobs__http_wait(handles, (int32_t)n, timeout_ms);
}

/* Copies the response headers as "Name: value\n" lines (canonical names, sorted; a
 * repeated name once per value) and returns their full length, or the failure. */
static inline int32_t wasmjobs_http_headers(const wasmjobs_http_response *res, char *buf, size_t len) {
    return wasmjobs__http_headers_read(res->handle, buf, (int32_t)len);
}

static inline int wasmjobs__lower(int c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

/* Finds the index-th value (0 the first) of the header name, matched case-insensitively,
 * in len bytes of "Name: value\n" lines; returns it (not NUL-terminated) and its length
 * in *value_len, or NULL. */
static inline const char *wasmjobs_http_header_find(const char *lines, size_t len, const char *name, size_t index, size_t *value_len) {
    size_t nl = strlen(name);
    const char *p = lines, *end = lines + len;
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol) eol = end;
        const char *colon = memchr(p, ':', (size_t)(eol - p));
        int match = colon && (size_t)(colon - p) == nl;
        for (size_t i = 0; match && i < nl; i++) match = wasmjobs__lower((unsigned char)p[i]) == wasmjobs__lower((unsigned char)name[i]);
        if (match && index-- == 0) {
            const char *v = colon + 1, *ve = eol;
            while (v < ve && (*v == ' ' || *v == '\t')) v++;
            while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t' || ve[-1] == '\r')) ve--;
            *value_len = (size_t)(ve - v);
            return v;
        }
        p = eol + 1;
    }
    return NULL;
}

/* Copies the index-th value (0 the first) of the response header name, matched
 * case-insensitively, as snprintf does (at most len-1 bytes and a NUL), and returns its
 * full length; WASMJOBS_NOT_FOUND when absent, or the failure. A head past 4 KiB is read
 * into memory from malloc, freed before it returns. */
static inline int32_t wasmjobs_http_header(const wasmjobs_http_response *res, const char *name, size_t index, char *buf, size_t len) {
    char small[4096], *lines = small;
    int32_t n = wasmjobs_http_headers(res, small, sizeof small);
    if (n > (int32_t)sizeof small) {
        lines = malloc((size_t)n);
        if (!lines) return WASMJOBS_LIMIT_EXCEEDED;
        n = wasmjobs_http_headers(res, lines, (size_t)n);
    }
    int32_t out = WASMJOBS_NOT_FOUND;
    size_t vl;
    const char *v = n < 0 ? NULL : wasmjobs_http_header_find(lines, (size_t)n, name, index, &vl);
    if (n < 0) out = n;
    if (v) {
        if (len > 0) {
            size_t c = vl < len - 1 ? vl : len - 1;
            memcpy(buf, v, c);
            buf[c] = 0;
        }
        out = (int32_t)vl;
    }
    if (lines != small) free(lines);
    return out;
}

/* Copies the final URL, after redirects, as snprintf does, and returns its full length,
 * or the failure. */
static inline int32_t wasmjobs_http_url(const wasmjobs_http_response *res, char *buf, size_t len) {
    if (len == 0) return wasmjobs__http_url_read(res->handle, buf, 0);
    int32_t n = wasmjobs__http_url_read(res->handle, buf, (int32_t)len - 1);
    if (n >= 0) buf[(size_t)n < len - 1 ? (size_t)n : len - 1] = 0;
    return n;
}

/* Reads the next bytes of the body into buf (up to len); returns how many, 0 at the
 * end, or the failure (also in res). */
static inline int32_t wasmjobs_http_read(wasmjobs_http_response *res, void *buf, size_t len) {
    if (len == 0) return 0;
    int32_t n = wasmjobs__http_body_read(res->handle, buf, (int32_t)len);
    return n < 0 ? wasmjobs__http_fail(res, n) : n;
}

/* Reads the rest of the body whole into buf and returns its length; a body longer than
 * max fails as WASMJOBS_HTTP_TOO_LARGE (buf then holds its first max bytes). */
static inline int32_t wasmjobs_http_body(wasmjobs_http_response *res, void *buf, size_t max) {
    size_t got = 0;
    for (;;) {
        int32_t n;
        if (got == max) {
            char probe; /* one byte past the bound tells a body of max bytes from a longer one */
            n = wasmjobs_http_read(res, &probe, 1);
            if (n > 0) {
                snprintf(res->error, sizeof res->error, "the body is longer than the caller's bound of %zu bytes", max);
                return res->status = WASMJOBS_HTTP_TOO_LARGE;
            }
        } else {
            n = wasmjobs_http_read(res, (char *)buf + got, max - got);
        }
        if (n < 0) return n;
        if (n == 0) return (int32_t)got;
        got += (size_t)n;
    }
}

/* Ends the request (cancelled if still running) and frees its handle. */
static inline void wasmjobs_http_close(wasmjobs_http_response *res) {
    if (res->handle >= 0) wasmjobs__http_close(res->handle);
    res->handle = -1;
}

/* Parses an IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT") into *ms since the Unix
 * epoch; returns 0, or -1 for anything else. */
static inline int wasmjobs__http_date(const char *v, size_t len, int64_t *ms) {
    static const char days[] = "MonTueWedThuFriSatSun", months[] = "JanFebMarAprMayJunJulAugSepOctNovDec";
    if (len != 29 || memcmp(v + 3, ", ", 2) || v[7] != ' ' || v[11] != ' ' || v[16] != ' ' || v[19] != ':' || v[22] != ':' || memcmp(v + 25, " GMT", 4)) return -1;
    int dow = -1, mon = -1;
    for (int i = 0; i < 7; i++) if (!memcmp(v, days + 3 * i, 3)) dow = i;
    for (int i = 0; i < 12; i++) if (!memcmp(v + 8, months + 3 * i, 3)) mon = i + 1;
    if (dow < 0 || mon < 0) return -1;
    int64_t f[5];
    const int at[5] = {5, 12, 17, 20, 23}, width[5] = {2, 4, 2, 2, 2};
    for (int i = 0; i < 5; i++) {
        f[i] = 0;
        for (int j = 0; j < width[i]; j++) {
            char c = v[at[i] + j];
            if (c < '0' || c > '9') return -1;
            f[i] = f[i] * 10 + (c - '0');
        }
    }
    int64_t day = f[0], year = f[1];
    int leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    const int mdays[12] = {31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (day < 1 || day > mdays[mon - 1] || f[2] > 23 || f[3] > 59 || f[4] > 60) return -1;
    /* Days from the civil date (Howard Hinnant's algorithm); year >= 0 here. */
    int64_t y = mon <= 2 ? year - 1 : year;
    int64_t era = (y >= 0 ? y : y - 399) / 400, yoe = y - era * 400, mp = (mon + 9) % 12;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + (153 * mp + 2) / 5 + day - 1;
    *ms = ((era * 146097 + doe - 719468) * 86400 + f[2] * 3600 + f[3] * 60 + f[4]) * 1000;
    return 0;
}

/* The delay in ms a Retry-After value of len bytes asks for at now_ms (since the Unix
 * epoch): delay-seconds or an IMF-fixdate HTTP date; at least 1, at most
 * WASMJOBS_RETRY_AFTER_CAP_MS; -1 when the value is neither. */
static inline int64_t wasmjobs_retry_after_delay(const char *v, size_t len, int64_t now_ms) {
    while (len > 0 && (*v == ' ' || *v == '\t')) v++, len--;
    while (len > 0 && (v[len - 1] == ' ' || v[len - 1] == '\t')) len--;
    if (len == 0) return -1;
    int64_t ms = 0;
    size_t i = 0;
    while (i < len && v[i] >= '0' && v[i] <= '9') {
        /* Stop growing at the cap: a huge number never overflows. */
        if (ms < WASMJOBS_RETRY_AFTER_CAP_MS) ms = ms * 10 + (v[i] - '0') * 1000;
        i++;
    }
    if (i < len) {
        int64_t at;
        if (wasmjobs__http_date(v, len, &at) < 0) return -1;
        ms = at - now_ms;
    }
    return ms < 1 ? 1 : ms > WASMJOBS_RETRY_AFTER_CAP_MS ? WASMJOBS_RETRY_AFTER_CAP_MS : ms;
}

/* Settles the job after a response such as a 429 or 503, staging reason and delay: with
 * a Retry-After header (delay-seconds, or an HTTP date: the delay until then, at least
 * 1 ms, at most WASMJOBS_RETRY_AFTER_CAP_MS) it returns WASMJOBS_DEFER with that delay
 * (no attempt spent) and the reason "http STATUS: Retry-After VALUE"; without a header
 * it can parse, WASMJOBS_RETRY with the queue's backoff and the reason "http STATUS". */
static inline wasmjobs_outcome wasmjobs_retry_after(const wasmjobs_http_response *res) {
    char value[256], reason[320];
    int32_t n = wasmjobs_http_header(res, "Retry-After", 0, value, sizeof value);
    if (n >= 0 && n < (int32_t)sizeof value) {
        struct timespec ts;
        int64_t now = clock_gettime(CLOCK_REALTIME, &ts) == 0 ? (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 : 0;
        int64_t delay = wasmjobs_retry_after_delay(value, (size_t)n, now);
        if (delay > 0) {
            snprintf(reason, sizeof reason, "http %d: Retry-After %s", (int)res->status, value);
            return wasmjobs_defer(delay, reason);
        }
    }
    snprintf(reason, sizeof reason, "http %d", (int)res->status);
    return wasmjobs_retry(reason, 0);
}

/* Fails the job at once with a trap ("trap: unreachable"); the instance is discarded. */
static inline void wasmjobs_trap(void) { __builtin_trap(); }

/* Registers fn, a function (void) -> wasmjobs_outcome, as the module's handler and
 * exports what ABI v1 requires, with wasmjobs_serve: the loop in which a host may run
 * a pooled instance's jobs in one call instead of calling wasmjobs_handle once a job
 * (fn cannot tell which). Use it once, at file scope. */
#define WASMJOBS_HANDLER(fn)                                                            \
    __attribute__((export_name("wasmjobs_abi_v1"))) void wasmjobs_abi_v1_marker(void) {} \
    __attribute__((export_name("wasmjobs_handle"))) int32_t wasmjobs_handle_export(void) { return (int32_t)(fn)(); } \
    __attribute__((export_name("wasmjobs_serve"))) void wasmjobs_serve_export(void) {   \
        int32_t outcome = 0;                                                            \
        while (wasmjobs__next_job(outcome) != 0) outcome = (int32_t)(fn)();             \
    }

#endif /* WASMJOBS_H */
