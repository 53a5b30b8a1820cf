/*
 * Fuzz harness for the runner wire's fast JSON path (src/base/base_json_fast.c), differential
 * against jansson's json_loadb.
 * Input: one byte of flags (bit 0: JSON_ALLOW_NUL, bit 1: JSON_DECODE_ANY), then any bytes as
 * the text. The harness aborts
 *   - if the fast path alone (cs_json_loadb_yajl) builds a tree for a text json_loadb refuses,
 *     or a tree that is not json_loadb's: json_equal, and json_dumps of both byte for byte (key
 *     order, integer spelling);
 *   - unless cs_json_loadb_fast gives json_loadb's verdict on every text, on a refusal
 *     json_loadb's error text, position and code, and on a success its position and source.
 * Trust: the input is arbitrary. Entry point: LLVMFuzzerTestOneInput.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base_json_fast.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void same_tree(json_t *a, json_t *b)
{
    if (!json_equal(a, b))
        abort();
    char *x = json_dumps(a, JSON_ENCODE_ANY | JSON_COMPACT);
    char *y = json_dumps(b, JSON_ENCODE_ANY | JSON_COMPACT);
    if (!x || !y || strcmp(x, y) != 0)
        abort();
    free(x);
    free(y);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t flags = ((data[0] & 1) ? JSON_ALLOW_NUL : 0) | ((data[0] & 2) ? JSON_DECODE_ANY : 0);
    const char *text = (const char *)data + 1;
    size_t n = size - 1;

    json_error_t want_err;
    json_t *want = json_loadb(text, n, flags, &want_err);
    json_t *fast = cs_json_loadb_yajl(text, n, flags);
    if (fast) {
        if (!want)
            abort(); /* the fast path took a text jansson refuses */
        same_tree(fast, want);
        json_decref(fast);
    }

    json_error_t got_err;
    json_t *got = cs_json_loadb_fast(text, n, flags, &got_err);
    if (!got != !want)
        abort();
    if (got) {
        same_tree(got, want);
        if (got_err.position != want_err.position || strcmp(got_err.source, want_err.source) != 0)
            abort();
    } else if (strcmp(got_err.text, want_err.text) != 0 || got_err.position != want_err.position ||
               json_error_code(&got_err) != json_error_code(&want_err))
        abort();
    json_decref(got);
    json_decref(want);
    return 0;
}
