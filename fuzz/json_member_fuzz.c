/*
 * Fuzz harness for the raw-id scanner (cs_json_member_span, cs_json_array_spans in
 * src/base/base_json.c), differential against jansson: for any input jansson accepts as an
 * object with an "id" member, the span the scanner finds must parse (alone) to a value equal to
 * that member (the last occurrence, as jansson keeps); for an array, the scanner must find as
 * many elements as jansson, each parsing to the same value. On any input, spans stay inside it.
 * Trust: the input is arbitrary. Entry point: LLVMFuzzerTestOneInput.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base_json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_ELEMS 64

/* Aborts unless the text s[off..off+len) is a value equal to want (NULL: anything parses). */
static void same_value(const char *s, size_t size, size_t off, size_t len, const json_t *want)
{
    if (off > size || len > size - off || len == 0)
        abort();
    json_error_t err;
    json_t *got = json_loadb(s + off, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
    if (want && (!got || !json_equal(got, (json_t *)want)))
        abort();
    json_decref(got);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data;
    if (size > 1 << 16)
        return 0;
    json_error_t err;
    json_t *whole = json_loadb(s, size, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
    size_t off = 0, len = 0;
    int rc = cs_json_member_span(s, size, "id", false, &off, &len);
    if (rc == 0)
        same_value(s, size, off, len, NULL);
    if (json_is_object(whole)) {
        const json_t *id = json_object_get(whole, "id");
        if ((id != NULL) != (rc == 0))
            abort(); /* jansson sees an "id" member and the scanner does not, or the reverse */
        if (id)
            same_value(s, size, off, len, id);
        /* The first occurrence exists whenever the last does. */
        if (rc == 0 && cs_json_member_span(s, size, "id", true, &off, &len) != 0)
            abort();
    }
    size_t offs[MAX_ELEMS], lens[MAX_ELEMS];
    int k = cs_json_array_spans(s, size, MAX_ELEMS, offs, lens);
    for (int i = 0; i < k; i++)
        same_value(s, size, offs[i], lens[i], NULL);
    if (json_is_array(whole) && json_array_size(whole) <= MAX_ELEMS) {
        if (k < 0 || (size_t)k != json_array_size(whole))
            abort();
        for (size_t i = 0; i < (size_t)k; i++)
            same_value(s, size, offs[i], lens[i], json_array_get(whole, i));
    }
    if (rc == 0 && cs_json_is_integer_token(s + off, len)) {
        /* An integer token is what jansson reads as an integer (when in its range). */
        json_t *v = json_loadb(s + off, len, JSON_DECODE_ANY, &err);
        if (v && !json_is_integer(v))
            abort();
        json_decref(v);
    }
    json_decref(whole);
    return 0;
}
