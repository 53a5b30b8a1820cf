/*
 * base_diag: the one formatter for failure messages (see base_diag.h).
 *
 * Trust: format arguments are often peer-controlled (paths, patch text, header values), so the
 * formatted bytes are treated as arbitrary: they are re-read with the strict UTF-8 decoder and
 * every control byte and ill-formed byte is spelled \xHH. Output is bounded by the caller's
 * buffer; nothing is allocated.
 * Entry points: cs_diag_set, cs_diag_vset, cs_diag_format, cs_diag_vformat, cs_diag_clear,
 * cs_diag_failed, cs_diag_clean, cs_diag_wire_error.
 */
#include "base_diag.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base_utf8.h"

void cs_diag_clear(struct cs_diag *d)
{
    if (d == NULL)
        return;
    d->code = CSW_ERROR_INTERNAL;
    d->set = false;
    d->text[0] = '\0';
}

bool cs_diag_failed(const struct cs_diag *d)
{
    return d != NULL && d->set;
}

size_t cs_diag_clean(char *out, size_t cap, const char *s, size_t n, bool cut)
{
    static const char hex[] = "0123456789ABCDEF";
    const unsigned char *u = (const unsigned char *)s;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        bool valid;
        size_t k = cs_utf8_step(u + i, n - i, &cp, &valid);
        if (valid && u[i] >= 0x20 && u[i] != 0x7F) {
            if (o + k >= cap)
                break;
            memcpy(out + o, u + i, k);
            o += k;
            i += k;
            continue;
        }
        /* A sequence the bound cut short is dropped: the rest of it was never formatted. */
        if (!valid && cut && i + k == n && u[i] >= 0xC2 && u[i] <= 0xF4)
            break;
        /* A control byte, or an ill-formed subpart spelled byte by byte. */
        if (o + 4 >= cap)
            break;
        out[o++] = '\\';
        out[o++] = 'x';
        out[o++] = hex[u[i] >> 4];
        out[o++] = hex[u[i] & 0xF];
        i++;
    }
    out[o] = '\0';
    return o;
}

size_t cs_diag_vformat(char *out, size_t cap, const char *fmt, va_list ap)
{
    if (out == NULL || cap == 0)
        return 0;
    char raw[CS_DIAG_FORMAT_MAX];
    int r = vsnprintf(raw, sizeof raw, fmt, ap);
    size_t n = r < 0 ? 0 : strnlen(raw, sizeof raw);
    return cs_diag_clean(out, cap, raw, n, r >= (int)sizeof raw);
}

size_t cs_diag_format(char *out, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t n = cs_diag_vformat(out, cap, fmt, ap);
    va_end(ap);
    return n;
}

int cs_diag_vset(struct cs_diag *d, enum csw_error code, const char *fmt, va_list ap)
{
    if (d == NULL)
        return (int)code;
    d->code = code;
    d->set = true;
    cs_diag_vformat(d->text, sizeof d->text, fmt, ap);
    return (int)code;
}

int cs_diag_set(struct cs_diag *d, enum csw_error code, const char *fmt, ...)
{
    if (d == NULL)
        return (int)code;
    va_list ap;
    va_start(ap, fmt);
    int rc = cs_diag_vset(d, code, fmt, ap);
    va_end(ap);
    return rc;
}

int cs_diag_wire_error(enum cs_wire_status st, enum csw_error invalid)
{
    switch (st) {
    case CS_WIRE_OK:
        return 0;
    case CS_WIRE_INVALID:
        return (int)invalid;
    case CS_WIRE_NOMEM:
        break;
    }
    return CSW_ERROR_INTERNAL;
}
