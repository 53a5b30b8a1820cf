/*
 * base_utf8: UTF-8 decoding shared by the file tools (paths, globs, file windows) and the process
 * output (read_process chunks): strict decoding of one sequence, and lossy conversion that
 * replaces every maximal ill-formed subpart (Unicode chapter 3, "U+FFFD substitution of maximal
 * subparts"; the WHATWG decoder) by U+FFFD.
 *
 * Trust: the bytes are arbitrary (file contents, process output, client strings).
 * Entry points: cs_utf8_step, cs_utf8_lossy.
 */
#include "base_utf8.h"

#include <stdint.h>
#include <string.h>

size_t cs_utf8_step(const unsigned char *s, size_t n, uint32_t *cp, bool *valid)
{
    unsigned char b = s[0];
    if (b < 0x80) {
        *cp = b;
        *valid = true;
        return 1;
    }
    size_t need;
    uint32_t v;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) {
        need = 1;
        v = b & 0x1Fu;
    } else if (b >= 0xE0 && b <= 0xEF) {
        need = 2;
        v = b & 0x0Fu;
        if (b == 0xE0)
            lo = 0xA0; /* no overlong forms */
        else if (b == 0xED)
            hi = 0x9F; /* no surrogates */
    } else if (b >= 0xF0 && b <= 0xF4) {
        need = 3;
        v = b & 0x07u;
        if (b == 0xF0)
            lo = 0x90; /* no overlong forms */
        else if (b == 0xF4)
            hi = 0x8F; /* nothing above U+10FFFF */
    } else {
        /* 0x80..0xC1 and 0xF5..0xFF never start a sequence. */
        *cp = 0xFFFD;
        *valid = false;
        return 1;
    }
    size_t i = 1;
    for (; i <= need; i++) {
        if (i >= n || s[i] < lo || s[i] > hi) {
            /* The maximal subpart ends before s[i], which is decoded afresh. */
            *cp = 0xFFFD;
            *valid = false;
            return i;
        }
        v = (v << 6) | (s[i] & 0x3Fu);
        lo = 0x80;
        hi = 0xBF;
    }
    *cp = v;
    *valid = true;
    return i;
}

size_t cs_utf8_lossy(const unsigned char *s, size_t n, bool hold_tail, char *out, size_t *used,
                     bool *lossy)
{
    size_t o = 0, at = 0;
    bool bad = false;
    while (at < n) {
        /* ASCII runs are the common case: copy them without decoding, eight bytes at a time
         * while no byte of the eight has its high bit set. */
        while (n - at >= 8) {
            uint64_t v;
            memcpy(&v, s + at, sizeof v);
            if (v & 0x8080808080808080ull)
                break;
            memcpy(out + o, &v, sizeof v);
            o += 8;
            at += 8;
        }
        if (at >= n)
            break;
        if (s[at] < 0x80) {
            out[o++] = (char)s[at++];
            continue;
        }
        uint32_t cp;
        bool valid;
        size_t k = cs_utf8_step(s + at, n - at, &cp, &valid);
        if (valid) {
            memcpy(out + o, s + at, k);
            o += k;
        } else {
            /* Cut by the end of the input after a lead byte: the next bytes may complete it. */
            if (hold_tail && at + k == n && s[at] >= 0xC2 && s[at] <= 0xF4)
                break;
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            bad = true;
        }
        at += k;
    }
    out[o] = '\0';
    *used = at;
    if (lossy)
        *lossy = bad;
    return o;
}
