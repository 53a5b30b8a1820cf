/*
 * Error message helpers for the patch module: quoting of untrusted bytes (patch lines, paths,
 * file lines) so every message is valid, printable UTF-8 that can go into a JSON error body as is
 * (the messages themselves are formatted by cs_diag_set, base_diag.h).
 * Trust: the quoted bytes are untrusted; the format strings are ours.
 * Entry points: cs__patch_quote, cs__patch_escape (patch_internal.h), cs_patch_rc_error
 * (patch.h).
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "patch.h"
#include "patch_internal.h"

/* Length of the well-formed UTF-8 sequence at s (at most n bytes), or 0 if it is ill-formed
 * (overlong forms, surrogates and code points above U+10FFFF are ill-formed). */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    if (c < 0x80)
        return 1;
    size_t k;
    uint32_t lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
        k = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        k = 3;
        if (c == 0xE0)
            lo = 0xA0;
        else if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        k = 4;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F;
    } else {
        return 0;
    }
    if (n < k)
        return 0;
    if (s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < k; i++) {
        if (s[i] < 0x80 || s[i] > 0xBF)
            return 0;
    }
    return k;
}

static const char *escape(char *dst, const char *s, size_t n, bool quotes)
{
    static const char hex[] = "0123456789ABCDEF";
    const unsigned char *u = (const unsigned char *)s;
    size_t o = 0;
    bool cut = n > CS__PATCH_QUOTE_MAX;
    if (cut)
        n = CS__PATCH_QUOTE_MAX;
    if (quotes)
        dst[o++] = '"';
    for (size_t i = 0; i < n;) {
        unsigned char c = u[i];
        size_t k = utf8_seq(u + i, n - i);
        if (c == '"' || c == '\\') {
            dst[o++] = '\\';
            dst[o++] = (char)c;
            i++;
        } else if (k == 0 || c < 0x20 || c == 0x7F) {
            /* A sequence cut by the excerpt's end is escaped byte by byte too. */
            dst[o++] = '\\';
            dst[o++] = 'x';
            dst[o++] = hex[c >> 4];
            dst[o++] = hex[c & 0xF];
            i++;
        } else {
            memcpy(dst + o, u + i, k);
            o += k;
            i += k;
        }
    }
    if (cut) {
        memcpy(dst + o, "...", 3);
        o += 3;
    }
    if (quotes)
        dst[o++] = '"';
    dst[o] = '\0';
    return dst;
}

const char *cs__patch_quote(char *dst, const char *s, size_t n)
{
    return escape(dst, s, n, true);
}

const char *cs__patch_escape(char *dst, const char *s, size_t n)
{
    return escape(dst, s, n, false);
}

int cs_patch_rc_error(int rc)
{
    switch (rc) {
    case CS_PATCH_OK:
        return 0;
    case CS_PATCH_ERR_INVALID:
        return CSW_ERROR_INVALID_PATCH;
    default:
        return CSW_ERROR_INTERNAL;
    }
}
