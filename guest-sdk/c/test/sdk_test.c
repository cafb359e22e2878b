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
    const char *v = key == 0 ? "01J" : key == 1 ? "mail" : key == 2 ? "m" : key == 3 ? "abc"
                  : key == 4 ? "4bf92f3577b34da6a3ce929d0e0e4736" : key == 5 ? "00f067aa0ba902b7" : NULL;
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

int32_t wasmjobs__enqueue_awaited(const void *q, int32_t ql, const void *p, int32_t pl, int64_t d) {
    int32_t s = wasmjobs__enqueue(q, ql, p, pl, d);
    if (s == 0) children[strlen(children) - 1] = '!'; /* awaited: ends in ! */
    return s;
}
/* The stand-in host's last wait: two children. */
static const char *awaited[2][5] = {{"01JA", "render", "succeeded", "", "page one"}, {"01JB", "render", "dead", "no page", ""}};
int32_t wasmjobs__round(void) { return 1; }
/* The stand-in host's serve loop: two jobs, then the end; it keeps the outcomes passed. */
static int32_t next_calls, next_outcomes[3];
int32_t wasmjobs__next_job(int32_t outcome) {
    next_outcomes[next_calls] = outcome;
    return ++next_calls <= 2;
}
int32_t wasmjobs__children_len(void) { return 2; }
int32_t wasmjobs__child_read(int32_t index, int32_t field, void *buf, int32_t len) {
    if (index < 0 || index >= 2) return WASMJOBS_NOT_FOUND;
    if (field == WASMJOBS_CHILD_TRUNCATED) {
        if (len > 0) *(unsigned char *)buf = (unsigned char)index; /* the second was cut */
        return 1;
    }
    if (field < 0 || field > WASMJOBS_CHILD_TRUNCATED) return WASMJOBS_BAD_ARGUMENT;
    size_t n = strlen(awaited[index][field]);
    memcpy(buf, awaited[index][field], n < (size_t)len ? n : (size_t)len);
    return (int32_t)n;
}

/* The stand-in host's requests: the handle of the n-th request started is n. */
static struct fake {
    int32_t status;
    const char *error, *headers, *url, *body;
    int32_t chunk, body_error; /* bytes per read at most (0: all); a failure after the body */
    size_t pos;
    int closed;
} fakes[16];
#define NFAKES (int)(sizeof fakes / sizeof fakes[0])
static int started, start_status, ready = -1;
static char sent[512];

static int32_t copy(const char *src, void *buf, int32_t len) {
    size_t n = strlen(src);
    memcpy(buf, src, n < (size_t)len ? n : (size_t)len);
    return (int32_t)n;
}
static struct fake *fake(int32_t h) { return h >= 0 && h < started && !fakes[h].closed ? &fakes[h] : NULL; }
int32_t wasmjobs__http_start(const void *m, int32_t ml, const void *u, int32_t ul, const void *hd, int32_t hl, const void *b, int32_t bl) {
    if (start_status < 0) return start_status;
    assert(started < NFAKES); /* the tests set up at most NFAKES requests */
    snprintf(sent, sizeof sent, "%.*s %.*s\n%.*s[%.*s]", (int)ml, (const char *)m, (int)ul, (const char *)u, (int)hl, (const char *)hd, (int)bl, (const char *)b);
    return started++;
}
int32_t wasmjobs__http_status(int32_t h) { return fake(h) ? fake(h)->status : -1; }
int32_t wasmjobs__http_error_read(int32_t h, void *buf, int32_t len) { return fake(h) && fake(h)->error ? copy(fake(h)->error, buf, len) : -1; }
int32_t wasmjobs__http_headers_read(int32_t h, void *buf, int32_t len) {
    if (!fake(h)) return -1;
    return fake(h)->status < 0 ? fake(h)->status : copy(fake(h)->headers ? fake(h)->headers : "", buf, len);
}
int32_t wasmjobs__http_url_read(int32_t h, void *buf, int32_t len) {
    if (!fake(h)) return -1;
    return fake(h)->status < 0 ? fake(h)->status : copy(fake(h)->url ? fake(h)->url : "", buf, len);
}
int32_t wasmjobs__http_body_read(int32_t h, void *buf, int32_t len) {
    struct fake *f = fake(h);
    if (!f) return -1;
    if (f->status < 0) return f->status;
    const char *b = f->body ? f->body : "";
    size_t rest = strlen(b) - f->pos, n = rest < (size_t)len ? rest : (size_t)len;
    if (f->chunk > 0 && n > (size_t)f->chunk) n = (size_t)f->chunk;
    if (n == 0) return f->body_error;
    memcpy(buf, b + f->pos, n);
    f->pos += n;
    return (int32_t)n;
}
int32_t wasmjobs__http_close(int32_t h) {
    if (!fake(h)) return -1;
    fakes[h].closed = 1;
    return 0;
}
int32_t wasmjobs__http_wait(const int32_t *hs, int32_t n, int64_t timeout_ms) {
    (void)timeout_ms;
    for (int32_t i = 0; i < n; i++) if (hs[i] == ready) return i;
    return -1;
}

static void http_tests(void) {
    wasmjobs_http_response res;
    char buf[64];
    /* A response: status, headers by name case-insensitively with repeated values, URL, body. */
    fakes[0] = (struct fake){.status = 201, .headers = "Content-Type: text/plain\nX-Reply: a\nX-Reply:  b \n",
        .url = "http://127.0.0.1:9/final", .body = "hello, world", .chunk = 5};
    wasmjobs_http_request req = {.method = "POST", .url = "http://127.0.0.1:9/echo",
        .headers = "X-A: 1\nX-A: 2\n", .body = "ping", .body_len = 4};
    assert(wasmjobs_http_send(&req, &res) == 201 && res.status == 201);
    assert(strcmp(sent, "POST http://127.0.0.1:9/echo\nX-A: 1\nX-A: 2\n[ping]") == 0);
    assert(wasmjobs_http_header(&res, "content-TYPE", 0, buf, sizeof buf) == 10 && strcmp(buf, "text/plain") == 0);
    assert(wasmjobs_http_header(&res, "x-reply", 1, buf, sizeof buf) == 1 && strcmp(buf, "b") == 0);
    assert(wasmjobs_http_header(&res, "X-Reply", 2, buf, sizeof buf) == WASMJOBS_NOT_FOUND);
    assert(wasmjobs_http_header(&res, "X-Repl", 0, buf, sizeof buf) == WASMJOBS_NOT_FOUND);
    assert(wasmjobs_http_header(&res, "Content-Type", 0, buf, 5) == 10 && strcmp(buf, "text") == 0);
    assert(wasmjobs_http_url(&res, buf, sizeof buf) == 24 && strcmp(buf, "http://127.0.0.1:9/final") == 0);
    assert(wasmjobs_http_read(&res, buf, 3) == 3 && memcmp(buf, "hel", 3) == 0);
    assert(wasmjobs_http_body(&res, buf, 9) == 9 && memcmp(buf, "lo, world", 9) == 0);
    wasmjobs_http_close(&res);
    assert(fakes[0].closed && res.handle == -1);

    /* Failures: the status, the host's message, the name. */
    fakes[1] = (struct fake){.status = WASMJOBS_HTTP_DENIED, .error = "http://x/ is outside the grant"};
    req = (wasmjobs_http_request){.url = "http://x/"};
    assert(wasmjobs_http_send(&req, &res) == WASMJOBS_HTTP_DENIED && res.status == WASMJOBS_HTTP_DENIED);
    assert(strcmp(res.error, "http://x/ is outside the grant") == 0);
    assert(strcmp(wasmjobs_http_error_name(res.status), "denied") == 0);
    wasmjobs_http_close(&res);
    fakes[2] = (struct fake){.status = 200, .body = "0123456789"};
    assert(wasmjobs_http_send(&req, &res) == 200 && wasmjobs_http_body(&res, buf, 9) == WASMJOBS_HTTP_TOO_LARGE);
    assert(strstr(res.error, "bound of 9 bytes") != NULL);
    wasmjobs_http_close(&res);
    fakes[3] = (struct fake){.status = 200, .body = "01", .body_error = WASMJOBS_HTTP_TOO_LARGE, .error = "past max_response"};
    assert(wasmjobs_http_send(&req, &res) == 200 && wasmjobs_http_body(&res, buf, sizeof buf) == WASMJOBS_HTTP_TOO_LARGE);
    assert(strcmp(res.error, "past max_response") == 0);
    wasmjobs_http_close(&res);
    start_status = WASMJOBS_NOT_PERMITTED;
    assert(wasmjobs_http_send(&req, &res) == WASMJOBS_NOT_PERMITTED && res.handle == -1 && strcmp(res.error, "not permitted") == 0);
    start_status = 0;

    /* Several in flight: the first ready. */
    wasmjobs_http_response many[3];
    for (int i = 0; i < 3; i++) fakes[started] = (struct fake){.status = 200}, wasmjobs_http_start(&req, &many[i]);
    assert(wasmjobs_http_wait(many, 3, 0) == -1);
    ready = many[1].handle;
    assert(wasmjobs_http_wait(many, 3, -1) == 1 && wasmjobs_http_status(&many[1]) == 200);
    assert(wasmjobs_http_wait(many, 0, -1) == WASMJOBS_BAD_ARGUMENT);
    /* Past the bound: refused before any buffer is filled (a guest's stack is small). */
    assert(wasmjobs_http_wait(many, WASMJOBS_HTTP_WAIT_MAX + 1, -1) == WASMJOBS_BAD_ARGUMENT);
    for (int i = 0; i < 3; i++) wasmjobs_http_close(&many[i]);

    /* Headers: wasmjobs_http_add_header refuses a name outside the token characters and
     * a value with CR or LF (it would be two headers on the host); a start refuses
     * header lines that are not "Name: value", and nothing reaches the host. */
    char lines[64] = "";
    assert(wasmjobs_http_add_header(lines, sizeof lines, "X-A", "1 2") == 0);
    assert(wasmjobs_http_add_header(lines, sizeof lines, "X-Inject", "a\nIdempotency-Key: fixed") == WASMJOBS_BAD_ARGUMENT);
    assert(wasmjobs_http_add_header(lines, sizeof lines, "X-Inject", "a\rb") == WASMJOBS_BAD_ARGUMENT);
    assert(wasmjobs_http_add_header(lines, sizeof lines, "X Inject", "a") == WASMJOBS_BAD_ARGUMENT);
    assert(wasmjobs_http_add_header(lines, sizeof lines, "X-Inject:", "a") == WASMJOBS_BAD_ARGUMENT);
    assert(wasmjobs_http_add_header(lines, sizeof lines, "", "a") == WASMJOBS_BAD_ARGUMENT);
    assert(wasmjobs_http_add_header(lines, sizeof lines, "X-Long", "0123456789012345678901234567890123456789012345678901") == WASMJOBS_LIMIT_EXCEEDED);
    assert(strcmp(lines, "X-A: 1 2\n") == 0);
    int before = started;
    const char *bad[] = {"X-A: 1\r\n", "no colon\n", "X A: 1\n", ": empty name\n", "X-A: 1\nX-B\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        req = (wasmjobs_http_request){.url = "http://x/", .headers = bad[i]};
        assert(wasmjobs_http_start(&req, &res) == WASMJOBS_BAD_ARGUMENT && res.handle == -1);
    }
    assert(started == before);
    fakes[started] = (struct fake){.status = 200};
    req = (wasmjobs_http_request){.url = "http://x/", .headers = "X-A: 1\n\nX-B:2"};
    assert(wasmjobs_http_send(&req, &res) == 200);
    wasmjobs_http_close(&res);
    req = (wasmjobs_http_request){.url = "http://x/"};

    /* Retry-After values, at Sun, 06 Nov 1994 08:49:37 GMT. */
    const int64_t now = 784111777000LL;
    static const struct { const char *v; int64_t want; } cases[] = {
        {"2", 2000}, {" 120 ", 120000}, {"0", 1}, {"86401", 86400000}, {"99999999999999999999999999", 86400000},
        {"Sun, 06 Nov 1994 08:49:40 GMT", 3000}, {"Sun, 06 Nov 1994 08:49:37 GMT", 1},
        {"Sat, 05 Nov 1994 08:49:37 GMT", 1}, {"Mon, 07 Nov 1994 08:49:37 GMT", 86400000},
        {"Fri, 31 Dec 9999 23:59:59 GMT", 86400000},
        {"", -1}, {"soon", -1}, {"-5", -1}, {"1.5", -1}, {"2s", -1}, {"Sun, 06 Nov 1994 08:49:40 UTC", -1},
        {"Sunday, 06-Nov-94 08:49:40 GMT", -1}, {"Sun, 31 Feb 1994 08:49:40 GMT", -1},
        {"Sun, 06 Nov 1994 24:49:40 GMT", -1}, {"Sun, 06 Xyz 1994 08:49:40 GMT", -1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t got = wasmjobs_retry_after_delay(cases[i].v, strlen(cases[i].v), now);
        if (got != cases[i].want) {
            fprintf(stderr, "retry-after %s: %lld, want %lld\n", cases[i].v, (long long)got, (long long)cases[i].want);
            assert(0);
        }
    }
    int64_t ms;
    assert(wasmjobs__http_date("Tue, 29 Feb 2000 23:59:59 GMT", 29, &ms) == 0 && ms == 951868799000LL);
    assert(wasmjobs__http_date("Mon, 01 Mar 2100 00:00:00 GMT", 29, &ms) == 0 && ms == 4107542400000LL);
    assert(wasmjobs__http_date("Mon, 29 Feb 2100 00:00:00 GMT", 29, &ms) == -1);

    /* The helper: defer by the header's delay, else retry with the queue's backoff. */
    int h = started;
    assert(h + 2 < NFAKES);
    fakes[h] = (struct fake){.status = 429, .headers = "Retry-After: 2\n"};
    fakes[h + 1] = (struct fake){.status = 503};
    fakes[h + 2] = (struct fake){.status = 429, .headers = "Retry-After: later\n"};
    delay = -1;
    assert(wasmjobs_http_send(&req, &res) == 429 && wasmjobs_retry_after(&res) == WASMJOBS_DEFER);
    assert(delay == 2000 && strcmp(reason, "http 429: Retry-After 2") == 0);
    delay = -1;
    assert(wasmjobs_http_send(&req, &res) == 503 && wasmjobs_retry_after(&res) == WASMJOBS_RETRY);
    assert(delay == -1 && strcmp(reason, "http 503") == 0);
    assert(wasmjobs_http_send(&req, &res) == 429 && wasmjobs_retry_after(&res) == WASMJOBS_RETRY);
    assert(delay == -1 && strcmp(reason, "http 429") == 0);
}

static int handled;
static wasmjobs_outcome handle(void) { return ++handled == 1 ? WASMJOBS_RETRY : WASMJOBS_ACK; }
WASMJOBS_HANDLER(handle)

/* wasmjobs_serve runs a job each time next_job returns 1, passing its outcome on with
 * the next call, and returns at 0. */
static void test_serve(void) {
    wasmjobs_serve_export();
    assert(handled == 2 && next_calls == 3);
    assert(next_outcomes[1] == WASMJOBS_RETRY && next_outcomes[2] == WASMJOBS_ACK);
}

int main(void) {
    char buf[8];
    test_serve();
    assert(wasmjobs_payload_len() == 5);
    assert(wasmjobs_payload_read(buf, 3) == 3 && memcmp(buf, "hel", 3) == 0);
    assert(wasmjobs_meta(WASMJOBS_META_QUEUE, buf, sizeof buf) == 4 && memcmp(buf, "mail", 4) == 0);
    assert(wasmjobs_meta(WASMJOBS_META_TRACE_ID, buf, sizeof buf) == 32 && memcmp(buf, "4bf92f35", 8) == 0);
    assert(wasmjobs_meta(WASMJOBS_META_SPAN_ID, buf, sizeof buf) == 16 && memcmp(buf, "00f067aa", 8) == 0);
    assert(wasmjobs_meta((wasmjobs_meta_key)6, buf, sizeof buf) == WASMJOBS_NOT_FOUND);
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
    assert(wasmjobs_enqueue_awaited("render", "p", 1, 0) == 0 && strcmp(children, "child=c@250;render=p@0!") == 0);
    assert(wasmjobs_enqueue_awaited("", "p", 1, 0) == WASMJOBS_BAD_ARGUMENT);
    assert(wasmjobs_wait_for_children() == WASMJOBS_WAIT && WASMJOBS_WAIT == 4);
    assert(wasmjobs_round() == 1 && wasmjobs_children_len() == 2);
    assert(wasmjobs_child_read(0, WASMJOBS_CHILD_OUTPUT, buf, 4) == 8 && memcmp(buf, "page", 4) == 0);
    assert(wasmjobs_child_read(1, WASMJOBS_CHILD_REASON, buf, sizeof buf) == 7 && memcmp(buf, "no page", 7) == 0);
    assert(wasmjobs_child_read(2, WASMJOBS_CHILD_ID, buf, sizeof buf) == WASMJOBS_NOT_FOUND);
    assert(wasmjobs_child_read(0, (wasmjobs_child_field)9, buf, sizeof buf) == WASMJOBS_BAD_ARGUMENT);
    assert(wasmjobs_child_truncated(0) == 0 && wasmjobs_child_truncated(1) == 1 && wasmjobs_child_truncated(5) == WASMJOBS_NOT_FOUND);
    assert(wasmjobs_handle_export() == WASMJOBS_ACK);
    http_tests();
    puts("C SDK: all checks passed");
    return 0;
}
