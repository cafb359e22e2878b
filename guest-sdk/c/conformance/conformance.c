/* The conformance handler in C: its payload names a case of the cross-language table
 * (internal/rigs/abitest/sdk.go, and sdk_http.go for the HTTP cases). */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../wasmjobs.h"

static char payload[4096];

static void line(const char *s, int n) {
    wasmjobs_output(s, n < 0 ? 0 : (size_t)n);
    wasmjobs_output("\n", 1);
}

static char body[1 << 16], out[(1 << 16) + 1024];

/* Sends req and acks with "STATUS\nX-REPLY\nBODY", or "error CODE" on a failure. */
static wasmjobs_outcome http(const wasmjobs_http_request *req) {
    wasmjobs_http_response res;
    int32_t n = wasmjobs_http_send(req, &res);
    if (n >= 0) n = wasmjobs_http_body(&res, body, sizeof body);
    if (n < 0) {
        wasmjobs_http_close(&res);
        wasmjobs_output(out, (size_t)snprintf(out, sizeof out, "error %d", (int)n));
        return WASMJOBS_ACK;
    }
    int len = snprintf(out, sizeof out, "%d\n", (int)res.status);
    char v[256];
    for (size_t i = 0; wasmjobs_http_header(&res, "x-reply", i, v, sizeof v) >= 0; i++) {
        len += snprintf(out + len, sizeof out - (size_t)len, "%s%s", i ? "," : "", v);
    }
    len += snprintf(out + len, sizeof out - (size_t)len, "\n%.*s", (int)n, body);
    wasmjobs_http_close(&res);
    wasmjobs_output(out, (size_t)len);
    return WASMJOBS_ACK;
}

static wasmjobs_outcome handle(void) {
    int n = wasmjobs_payload_read(payload, sizeof payload - 1);
    payload[n] = 0;
    if (strcmp(payload, "ack") == 0) return WASMJOBS_ACK;
    if (strcmp(payload, "retry") == 0) return wasmjobs_retry("asked to retry", 1500);
    if (strcmp(payload, "defer") == 0) return wasmjobs_defer(2000, "asked to defer");
    if (strcmp(payload, "dead") == 0) return wasmjobs_dead_letter("asked to die");
    if (strncmp(payload, "echo:", 5) == 0) {
        wasmjobs_output(payload + 5, (size_t)n - 5);
        return WASMJOBS_ACK;
    }
    if (strcmp(payload, "meta") == 0) {
        char buf[256], num[16];
        for (int key = WASMJOBS_META_JOB_ID; key <= WASMJOBS_META_MODULE; key++) {
            line(buf, wasmjobs_meta((wasmjobs_meta_key)key, buf, sizeof buf));
        }
        line(num, snprintf(num, sizeof num, "%d", (int)wasmjobs_attempt()));
        line(num, snprintf(num, sizeof num, "%d", (int)wasmjobs_max_attempts()));
        int h = wasmjobs_header("X-Test", buf, sizeof buf);
        if (h < 0) line("-", 1); else line(buf, h);
        return WASMJOBS_ACK;
    }
    if (strcmp(payload, "trace") == 0) {
        char buf[64];
        line(buf, wasmjobs_meta(WASMJOBS_META_TRACE_ID, buf, sizeof buf));
        line(buf, wasmjobs_meta(WASMJOBS_META_SPAN_ID, buf, sizeof buf));
        return WASMJOBS_ACK;
    }
    if (strcmp(payload, "spin") == 0) { /* until the host stops it */
        volatile unsigned spins = 0;
        for (;;) spins++;
    }
    if (strcmp(payload, "sleep") == 0) { /* an hour in a WASI sleep, until the host stops it */
        sleep(3600);
        return WASMJOBS_ACK;
    }
    if (strcmp(payload, "children") == 0) {
        wasmjobs_enqueue("child", "c1", 2, 0);
        wasmjobs_enqueue("child", "c2", 2, 250);
        return WASMJOBS_ACK;
    }
    if (strcmp(payload, "fanout") == 0) {
        char num[32];
        wasmjobs_output(num, (size_t)snprintf(num, sizeof num, "%d %d\n", (int)wasmjobs_round(), (int)wasmjobs_children_len()));
        wasmjobs_enqueue_awaited("child", "c1", 2, 0);
        wasmjobs_enqueue("child", "c2", 2, 250);
        wasmjobs_enqueue_awaited("child", "c3", 2, 0);
        return wasmjobs_wait_for_children();
    }
    if (strcmp(payload, "fanin") == 0) {
        int32_t n = wasmjobs_children_len();
        int len = snprintf(out, sizeof out, "%d %d\n", (int)wasmjobs_round(), (int)n);
        for (int32_t i = 0; i < n; i++) {
            for (int f = WASMJOBS_CHILD_ID; f <= WASMJOBS_CHILD_OUTPUT; f++) {
                int32_t m = wasmjobs_child_read(i, (wasmjobs_child_field)f, body, sizeof body);
                len += snprintf(out + len, sizeof out - (size_t)len, "%.*s|", m < 0 ? 0 : (int)m, body);
            }
            len += snprintf(out + len, sizeof out - (size_t)len, "%s\n", wasmjobs_child_truncated(i) == 1 ? "true" : "false");
        }
        wasmjobs_output(out, (size_t)len);
        return WASMJOBS_ACK;
    }
    if (strcmp(payload, "log") == 0) {
        wasmjobs_log(WASMJOBS_INFO, "conformance log line");
        wasmjobs_logf(WASMJOBS_WARN, "second line, attempt %d", (int)wasmjobs_attempt());
        return WASMJOBS_ACK;
    }
    if (strcmp(payload, "trap") == 0) wasmjobs_trap();
    if (strncmp(payload, "http-get:", 9) == 0) {
        wasmjobs_http_request req = {.url = payload + 9, .headers = "X-Conformance: yes\n"};
        return http(&req);
    }
    if (strncmp(payload, "http-post:", 10) == 0) {
        wasmjobs_http_request req = {.method = "POST", .url = payload + 10,
            .headers = "X-Conformance: yes\nContent-Type: text/plain\n", .body = "ping", .body_len = 4};
        return http(&req);
    }
    if (strncmp(payload, "http-inject:", 12) == 0) {
        static char headers[256];
        int32_t s = wasmjobs_http_add_header(headers, sizeof headers, "X-Inject", "a\nX-Evil: 1");
        if (s < 0) {
            wasmjobs_output(out, (size_t)snprintf(out, sizeof out, "error %d", (int)s));
            return WASMJOBS_ACK;
        }
        wasmjobs_http_request req = {.url = payload + 12, .headers = headers};
        return http(&req);
    }
    if (strncmp(payload, "http-retry-after:", 17) == 0) {
        wasmjobs_http_request req = {.url = payload + 17};
        wasmjobs_http_response res;
        int32_t s = wasmjobs_http_send(&req, &res);
        wasmjobs_outcome o = WASMJOBS_ACK;
        if (s == 429 || s == 503) {
            o = wasmjobs_retry_after(&res);
        } else if (s < 0) {
            wasmjobs_output(out, (size_t)snprintf(out, sizeof out, "error %d", (int)s));
        } else {
            wasmjobs_output(out, (size_t)snprintf(out, sizeof out, "%d", (int)s));
        }
        wasmjobs_http_close(&res);
        return o;
    }
    return wasmjobs_dead_letter("unknown case");
}

WASMJOBS_HANDLER(handle)
