/* Tests wasmjobs.h natively: the host functions are defined here as a stand-in host, so
 * that the header's helpers run under the machine's C compiler. make guests runs it:
 *   clang -Wno-unknown-attributes -I.. -o sdk_test sdk_test.c && ./sdk_test */
#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "wasmjobs.h"

static const char *payload = "hello";
static const char *header_key = "Trace-Id", *header_value = "0123456789abcdef";
static char reason[256], output[256], logs[256], children[256];
static int64_t delay = -1;
static int output_len;

int32_t wasmjobs__payload_len(void) { return (int32_t)strlen(payload); }
int32_t wasmjobs__payload_read(void *buf, int32_t len) {
    int32_t n = (int32_t)strlen(payload) < len ? (int32_t)strlen(payload) : len;
    memcpy(buf, payload, (size_t)n);
    return n;
}
int32_t wasmjobs__meta_read(int32_t key, void *buf, int32_t len) {
    const char *v = key == 0 ? "01J" : key == 1 ? "mail" : key == 2 ? "m" : key == 3 ? "abc" : NULL;
    if (!v) return WASMJOBS_NOT_FOUND;
    memcpy(buf, v, strlen(v) < (size_t)len ? strlen(v) : (size_t)len);
    return (int32_t)strlen(v);
}
int32_t wasmjobs__attempt(void) { return 2; }
int32_t wasmjobs__max_attempts(void) { return 5; }
int32_t wasmjobs__header_read(const void *key, int32_t key_len, void *buf, int32_t len) {
    if ((size_t)key_len != strlen(header_key) || memcmp(key, header_key, (size_t)key_len) != 0) return WASMJOBS_NOT_FOUND;
    size_t n = strlen(header_value);
    memcpy(buf, header_value, n < (size_t)len ? n : (size_t)len);
    return (int32_t)n;
}
void wasmjobs__log(int32_t level, const void *msg, int32_t len) {
    snprintf(logs + strlen(logs), sizeof logs - strlen(logs), "%d:%.*s;", (int)level, (int)len, (const char *)msg);
}
void wasmjobs__set_reason(const void *msg, int32_t len) { snprintf(reason, sizeof reason, "%.*s", (int)len, (const char *)msg); }
void wasmjobs__set_delay_ms(int64_t ms) { delay = ms; }
int32_t wasmjobs__output_write(const void *buf, int32_t len) {
    memcpy(output + output_len, buf, (size_t)len);
    output_len += len;
    return len;
}
int32_t wasmjobs__enqueue(const void *q, int32_t ql, const void *p, int32_t pl, int64_t d) {
    if (ql == 0 || d < 0) return WASMJOBS_BAD_ARGUMENT;
    snprintf(children + strlen(children), sizeof children - strlen(children), "%.*s=%.*s@%lld;", (int)ql, (const char *)q, (int)pl, (const char *)p, (long long)d);
    return 0;
}

static wasmjobs_outcome handle(void) { return WASMJOBS_ACK; }
WASMJOBS_HANDLER(handle)

int main(void) {
    char buf[8];
    assert(wasmjobs_payload_len() == 5);
    assert(wasmjobs_payload_read(buf, 3) == 3 && memcmp(buf, "hel", 3) == 0);
    assert(wasmjobs_meta(WASMJOBS_META_QUEUE, buf, sizeof buf) == 4 && memcmp(buf, "mail", 4) == 0);
    /* sizes first: a small buffer gets a prefix and the full length */
    assert(wasmjobs_header("Trace-Id", buf, 4) == 16 && memcmp(buf, "0123", 4) == 0);
    assert(wasmjobs_header("trace-id", buf, sizeof buf) == WASMJOBS_NOT_FOUND);
    assert(wasmjobs_attempt() == 2 && wasmjobs_max_attempts() == 5);

    assert(wasmjobs_retry("later", 1500) == WASMJOBS_RETRY && strcmp(reason, "later") == 0 && delay == 1500);
    delay = -1;
    assert(wasmjobs_retry("again", 0) == WASMJOBS_RETRY && delay == -1);
    assert(wasmjobs_defer(2000, "busy") == WASMJOBS_DEFER && strcmp(reason, "busy") == 0 && delay == 2000);
    assert(wasmjobs_dead_letter("bad") == WASMJOBS_DEAD_LETTER && strcmp(reason, "bad") == 0);

    wasmjobs_output_str("out");
    wasmjobs_logf(WASMJOBS_WARN, "n=%d", 7);
    assert(wasmjobs_enqueue("child", "c", 1, 250) == 0);
    assert(wasmjobs_enqueue("", "c", 1, 0) == WASMJOBS_BAD_ARGUMENT);
    assert(output_len == 3 && memcmp(output, "out", 3) == 0);
    assert(strcmp(logs, "2:n=7;") == 0);
    assert(strcmp(children, "child=c@250;") == 0);
    assert(wasmjobs_handle_export() == WASMJOBS_ACK);
    puts("C SDK: 17 checks passed");
    return 0;
}
