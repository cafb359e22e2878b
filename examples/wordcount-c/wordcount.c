/* wordcount-c: counts the lines, words and bytes of a text job and writes them as JSON,
 * e.g. {"lines":2,"words":5,"bytes":27}. An empty text is dead-lettered; a text that is
 * not UTF-8 too. Texts over 1 MiB are refused by the manifest's max_payload. */
#include <stdio.h>
#include <stdlib.h>

#include "wasmjobs.h"

static int valid_utf8(const unsigned char *s, int n) {
    for (int i = 0; i < n;) {
        int len = s[i] < 0x80 ? 1 : (s[i] >> 5) == 6 ? 2 : (s[i] >> 4) == 14 ? 3 : (s[i] >> 3) == 30 ? 4 : 0;
        if (len == 0 || i + len > n) return 0;
        for (int k = 1; k < len; k++) if ((s[i + k] & 0xC0) != 0x80) return 0;
        i += len;
    }
    return 1;
}

static wasmjobs_outcome count(void) {
    int n = wasmjobs_payload_len();
    if (n == 0) return wasmjobs_dead_letter("empty text: nothing to count");
    unsigned char *text = malloc((size_t)n);
    if (!text) return wasmjobs_retry("out of memory", 0);
    wasmjobs_payload_read(text, (size_t)n);
    if (!valid_utf8(text, n)) {
        free(text);
        return wasmjobs_dead_letter("the text is not UTF-8");
    }
    long lines = 0, words = 0;
    int in_word = 0;
    for (int i = 0; i < n; i++) {
        unsigned char c = text[i];
        if (c == '\n') lines++;
        int space = c == ' ' || c == '\n' || c == '\t' || c == '\r';
        if (!space && !in_word) words++;
        in_word = !space;
    }
    if (text[n - 1] != '\n') lines++;
    free(text);
    char out[128];
    int len = snprintf(out, sizeof out, "{\"lines\":%ld,\"words\":%ld,\"bytes\":%d}", lines, words, n);
    wasmjobs_output(out, (size_t)len);
    wasmjobs_logf(WASMJOBS_INFO, "counted %ld words in %d bytes", words, n);
    return WASMJOBS_ACK;
}

WASMJOBS_HANDLER(count)
