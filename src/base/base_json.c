/*
 * base_json: a JSON string literal written fast. jansson's dump walks a string code point by
 * code point through a callback (about 150 MB/s here); a tool answer quotes its own serialized
 * structuredContent as the text item, a megabyte for a full read window, so the MCP layer quotes
 * that text here instead (bench/README.md, files.py, has the figures). The output is byte for byte
 * jansson's (a unit test and the json_quote fuzz harness compare the two), so which writer made
 * a reply is invisible.
 *
 * Trust: the input is valid UTF-8 by contract (the caller's own JSON text); bytes >= 0x80 are
 * copied as they are, so invalid input gives invalid output, never an overrun.
 * Entry point: cs_json_quote.
 */
#include "base_json.h"

#include <stdint.h>
#include <string.h>

/* 0: copied as is; else the escape's second character ('u' for \u00XX). */
static const char esc[256] = {
    ['\b'] = 'b', ['\t'] = 't', ['\n'] = 'n', ['\f'] = 'f',  ['\r'] = 'r', [0x00] = 'u',
    [0x01] = 'u', [0x02] = 'u', [0x03] = 'u', [0x04] = 'u',  [0x05] = 'u', [0x06] = 'u',
    [0x07] = 'u', [0x0b] = 'u', [0x0e] = 'u', [0x0f] = 'u',  [0x10] = 'u', [0x11] = 'u',
    [0x12] = 'u', [0x13] = 'u', [0x14] = 'u', [0x15] = 'u',  [0x16] = 'u', [0x17] = 'u',
    [0x18] = 'u', [0x19] = 'u', [0x1a] = 'u', [0x1b] = 'u',  [0x1c] = 'u', [0x1d] = 'u',
    [0x1e] = 'u', [0x1f] = 'u', ['"'] = '"',  ['\\'] = '\\',
};

size_t cs_json_quote(const char *s, size_t n, char *out)
{
    static const char hexd[] = "0123456789ABCDEF"; /* jansson writes \u%04X */
    const unsigned char *u = (const unsigned char *)s;
    char *o = out;
    *o++ = '"';
    size_t run = 0; /* start of the bytes not yet copied */
    for (size_t i = 0; i < n; i++) {
        char e = esc[u[i]];
        if (e == 0)
            continue;
        memcpy(o, s + run, i - run);
        o += i - run;
        run = i + 1;
        *o++ = '\\';
        *o++ = e;
        if (e == 'u') {
            *o++ = '0';
            *o++ = '0';
            *o++ = hexd[u[i] >> 4];
            *o++ = hexd[u[i] & 15];
        }
    }
    memcpy(o, s + run, n - run);
    o += n - run;
    *o++ = '"';
    return (size_t)(o - out);
}
