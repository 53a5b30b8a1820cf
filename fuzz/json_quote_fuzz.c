/*
 * Fuzz harness for cs_json_quote (src/base/base_json.c), differential against jansson.
 * Input: arbitrary bytes. The harness makes them valid UTF-8 the way the tools do
 * (cs_utf8_lossy), quotes the result with cs_json_quote and with jansson's json_dumps, and aborts
 * unless the two are byte for byte the same and within CS_JSON_QUOTE_MAX. It also parses the
 * quoted text back with jansson and aborts unless it is the same string.
 * When the raw bytes parse, the tree is written by cs_wire_json_text (the writer of every reply)
 * and by json_dumps: the harness aborts unless the texts are byte for byte the same.
 * The raw bytes also go through cs_json_clamp_numbers: a text jansson parses must come back
 * unchanged (NULL), and a clamped text must never fail for a number out of range again.
 * Trust: the input is arbitrary. Entry point: LLVMFuzzerTestOneInput.
 */
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base_json.h"
#include "base_utf8.h"
#include "base_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1 << 16)
        return 0;
    char *text = malloc(3 * size + 1);
    char *out = malloc(CS_JSON_QUOTE_MAX(3 * size + 1));
    if (!text || !out)
        abort();
    size_t used;
    size_t n = cs_utf8_lossy(data, size, false, text, &used, NULL);
    size_t q = cs_json_quote(text, n, out);
    if (q > CS_JSON_QUOTE_MAX(n))
        abort();
    json_t *s = json_stringn(text, n);
    char *want = s ? json_dumps(s, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
    if (!want || strlen(want) != q || memcmp(want, out, q) != 0)
        abort();
    json_error_t err;
    json_t *back = json_loadb(out, q, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
    if (!back || !json_is_string(back) || json_string_length(back) != n ||
        memcmp(json_string_value(back), text, n) != 0)
        abort();
    json_decref(back);
    json_decref(s);

    json_t *whole = json_loadb((const char *)data, size, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
    if (whole) {
        size_t wn = 0;
        char *mine = cs_wire_json_text(whole, &wn);
        char *theirs = json_dumps(whole, JSON_ENCODE_ANY | JSON_COMPACT);
        if (!mine || !theirs || strlen(theirs) != wn || memcmp(mine, theirs, wn) != 0)
            abort();
        free(mine);
        free(theirs);
    }
    size_t cn = 0;
    char *clamped = cs_json_clamp_numbers((const char *)data, size, &cn);
    if (whole && clamped)
        abort(); /* jansson could hold every number, yet something was clamped */
    json_decref(whole);
    if (clamped) {
        json_t *again = json_loadb(clamped, cn, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
        if (!again && json_error_code(&err) == json_error_numeric_overflow)
            abort(); /* (the code, not the text: the text quotes the input) */
        json_decref(again);
        free(clamped);
    }
    free(want);
    free(out);
    free(text);
    return 0;
}
