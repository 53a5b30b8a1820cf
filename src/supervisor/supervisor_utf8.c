/*
 * supervisor_utf8: process output as lossy UTF-8 (contract.md section 3, read_process.chunk).
 * Every ill-formed sequence becomes one U+FFFD per maximal subpart (Unicode's recommended
 * practice), so the result is always valid UTF-8 that JSON can carry.
 *
 * Trust: the bytes are arbitrary process output.
 * Entry points: cs_supervisor_utf8_lossy.
 */
#include "supervisor.h"

#include <string.h>

static const char replacement[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

size_t cs_supervisor_utf8_lossy(const uint8_t *in, size_t n, bool hold_tail, char *out,
                                size_t *used)
{
    size_t i = 0, o = 0;
    while (i < n) {
        uint8_t c = in[i];
        if (c < 0x80) {
            out[o++] = (char)c;
            i++;
            continue;
        }
        size_t len;
        uint8_t lo = 0x80, hi = 0xBF; /* the range of the second byte */
        if (c >= 0xC2 && c <= 0xDF) {
            len = 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            if (c == 0xE0)
                lo = 0xA0; /* no overlong forms */
            else if (c == 0xED)
                hi = 0x9F; /* no surrogates */
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            if (c == 0xF0)
                lo = 0x90;
            else if (c == 0xF4)
                hi = 0x8F; /* nothing above U+10FFFF */
        } else {
            memcpy(out + o, replacement, sizeof replacement);
            o += sizeof replacement;
            i++;
            continue;
        }
        size_t k = 1;
        bool bad = false;
        for (; k < len; k++) {
            if (i + k >= n)
                break;
            uint8_t d = in[i + k];
            uint8_t l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
            if (d < l || d > h) {
                bad = true;
                break;
            }
        }
        if (k == len) {
            memcpy(out + o, in + i, len);
            o += len;
            i += len;
            continue;
        }
        if (!bad && hold_tail)
            break; /* a prefix the next bytes may complete: keep it for the next read */
        memcpy(out + o, replacement, sizeof replacement);
        o += sizeof replacement;
        i += k;
    }
    out[o] = '\0';
    *used = i;
    return o;
}
