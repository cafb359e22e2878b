/* The conformance handler in C: its payload names a case of the cross-language table
 * (internal/abitest/sdk.go). */
#include <stdio.h>
#include <string.h>

#include "../wasmjobs.h"

static char payload[4096];

static void line(const char *s, int n) {
    wasmjobs_output(s, n < 0 ? 0 : (size_t)n);
    wasmjobs_output("\n", 1);
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
    if (strcmp(payload, "children") == 0) {
        wasmjobs_enqueue("child", "c1", 2, 0);
        wasmjobs_enqueue("child", "c2", 2, 250);
        return WASMJOBS_ACK;
    }
    if (strcmp(payload, "log") == 0) {
        wasmjobs_log(WASMJOBS_INFO, "conformance log line");
        wasmjobs_logf(WASMJOBS_WARN, "second line, attempt %d", (int)wasmjobs_attempt());
        return WASMJOBS_ACK;
    }
    if (strcmp(payload, "trap") == 0) wasmjobs_trap();
    return wasmjobs_dead_letter("unknown case");
}

WASMJOBS_HANDLER(handle)
