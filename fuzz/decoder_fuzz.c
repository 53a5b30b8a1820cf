/*
 * libFuzzer harness for one generated decoder, compiled once per top-level schema type with
 * -DCS_FUZZ_TYPE=csw_<type> (fuzz/CMakeLists.txt). Input: arbitrary bytes, parsed as JSON the
 * way the servers parse peer input (JSON_ALLOW_NUL, so NUL-carrying strings reach the decoder).
 *
 * Invariants asserted (docs/security-model.md, wire invariants): decoding never crashes or
 * leaks; a successful decode re-encodes; the encoding decodes again; and encode(decode(encode(x)))
 * is the same JSON as encode(x) (round trip is stable); the text encoder writes byte for byte
 * what json_dumps(JSON_COMPACT) writes for the tree encoder's value (differential). Failures
 * carry a non-empty diagnostic.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "csw.h"

#define CAT_(a, b) a##b
#define CAT(a, b)  CAT_(a, b)
#define TYPE_DESC  CAT(CS_FUZZ_TYPE, _type)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_error_t jerr;
    json_t *j = json_loadb((const char *)data, size, JSON_ALLOW_NUL | JSON_DECODE_ANY, &jerr);
    if (!j)
        return 0;
    const struct cs_wire_type *t = &TYPE_DESC;
    void *a = malloc(t->size);
    void *b = malloc(t->size);
    if (!a || !b)
        abort();
    struct cs_wire_diag diag;
    enum cs_wire_status st = cs_wire_decode(t, j, a, &diag);
    if (st != CS_WIRE_OK) {
        if (diag.text[0] == '\0')
            abort(); /* every rejection says why */
        goto out;
    }
    json_t *e1 = NULL, *e2 = NULL;
    if (cs_wire_encode(t, a, &e1, &diag) != CS_WIRE_OK)
        abort(); /* what decoded satisfies the schema, so its encoding cannot be refused */
    if (cs_wire_decode(t, e1, b, &diag) != CS_WIRE_OK)
        abort(); /* our own encoding must satisfy our own schema */
    if (cs_wire_encode(t, b, &e2, &diag) != CS_WIRE_OK || !json_equal(e1, e2))
        abort();
    char *dumped = json_dumps(e1, JSON_COMPACT | JSON_ENCODE_ANY);
    char *text = NULL;
    size_t text_n = 0;
    if (!dumped || cs_wire_encode_text(t, a, &text, &text_n, &diag) != CS_WIRE_OK ||
        text_n != strlen(dumped) || memcmp(text, dumped, text_n) != 0 || text[text_n] != '\0')
        abort(); /* the two encoders disagree */
    cs_wire_release(text);
    free(dumped);
    json_decref(e2);
    json_decref(e1);
    cs_wire_free(t, b);
    cs_wire_free(t, a);
out:
    free(a);
    free(b);
    json_decref(j);
    return 0;
}
