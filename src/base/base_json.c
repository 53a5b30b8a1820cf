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
 * Also here: cs_json_clamp_numbers, for a message jansson refuses only because a number in it is
 * out of its range (a request must still be answered under its id; see mcp_server.c).
 * Entry points: cs_json_quote, cs_json_escape, cs_json_escaped_len, cs_json_clamp_numbers.
 */
#include "base_json.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
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

/* Whether any byte of the eight in v needs an escape: under 0x20, '"' or '\\'. Exact as a
 * yes or no (the classic has-less and has-byte word tests: a borrow only runs on from a byte
 * that matched), whatever the byte order. */
static inline bool word_needs_escape(uint64_t v)
{
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    uint64_t q = v ^ (ones * '"'), b = v ^ (ones * '\\');
    return (((v - ones * 0x20) & ~v) | ((q - ones) & ~q) | ((b - ones) & ~b)) & highs;
}

/* The index of the first byte at or after i (below n) that needs an escape, or n. Eight bytes at
 * a time: a block that needs nothing (most of a text) is skipped with one test. */
static inline size_t next_escape(const unsigned char *u, size_t i, size_t n)
{
    while (i < n) {
        if (n - i >= 8) {
            uint64_t v;
            memcpy(&v, u + i, sizeof v);
            if (!word_needs_escape(v)) {
                i += 8;
                continue;
            }
        }
        size_t end = n - i >= 8 ? i + 8 : n;
        for (; i < end; i++)
            if (esc[u[i]] != 0)
                return i;
    }
    return n;
}

size_t cs_json_escape(const char *s, size_t n, char *out)
{
    static const char hexd[] = "0123456789ABCDEF"; /* jansson writes \u%04X */
    const unsigned char *u = (const unsigned char *)s;
    char *o = out;
    size_t run = 0; /* start of the bytes not yet copied */
    for (size_t i = next_escape(u, 0, n); i < n; i = next_escape(u, i + 1, n)) {
        char e = esc[u[i]];
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
    return (size_t)(o - out);
}

size_t cs_json_escaped_len(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t len = n;
    for (size_t i = next_escape(u, 0, n); i < n; i = next_escape(u, i + 1, n))
        len += esc[u[i]] == 'u' ? 5 : 1;
    return len;
}

size_t cs_json_quote(const char *s, size_t n, char *out)
{
    out[0] = '"';
    size_t len = 1 + cs_json_escape(s, n, out + 1);
    out[len] = '"';
    return len + 1;
}

/* The clamped text of the number token t (n bytes), or NULL when jansson can hold it. */
static const char *clamped(const char *t, size_t n)
{
    char buf[64];
    char *tok = n < sizeof buf ? buf : malloc(n + 1);
    if (!tok)
        return NULL;
    memcpy(tok, t, n);
    tok[n] = '\0';
    bool integer = strpbrk(tok, ".eE") == NULL;
    bool negative = tok[0] == '-';
    const char *out = NULL;
    errno = 0;
    if (integer) {
        (void)strtoll(tok, NULL, 10);
        if (errno == ERANGE)
            out = negative ? "-9223372036854775808" : "9223372036854775807";
    } else {
        double d = strtod(tok, NULL);
        if (errno == ERANGE && (d > 1.0 || d < -1.0)) /* overflow, not underflow */
            out = negative ? "-1.7976931348623157e308" : "1.7976931348623157e308";
    }
    if (tok != buf)
        free(tok);
    return out;
}

char *cs_json_clamp_numbers(const char *s, size_t n, size_t *out_n)
{
    /* Each clamped token is at most 24 bytes; the copy grows as needed. */
    size_t cap = n + 64, used = 0;
    char *out = malloc(cap);
    bool changed = false, in_string = false;
    if (!out)
        return NULL;
    for (size_t i = 0; i < n;) {
        size_t start = i;
        const char *rep = NULL;
        if (in_string) {
            if (s[i] == '\\' && i + 1 < n)
                i += 2;
            else
                in_string = s[i++] != '"';
        } else if (s[i] == '"') {
            in_string = true;
            i++;
        } else if (s[i] == '-' || (s[i] >= '0' && s[i] <= '9')) {
            /* One number as JSON (and jansson's lexer) reads it:
             * -?digits(.digits)?([eE][+-]?digits)? so "0-9e999" is two, as jansson sees it. */
            i += s[i] == '-';
            if (i < n && s[i] == '0')
                i++; /* a leading zero is the whole integer part ("01" is "0" then "1") */
            else
                while (i < n && s[i] >= '0' && s[i] <= '9')
                    i++;
            if (i < n && s[i] == '.')
                for (i++; i < n && s[i] >= '0' && s[i] <= '9'; i++)
                    ;
            if (i < n && (s[i] == 'e' || s[i] == 'E')) {
                i++;
                i += i < n && (s[i] == '+' || s[i] == '-');
                while (i < n && s[i] >= '0' && s[i] <= '9')
                    i++;
            }
            rep = clamped(s + start, i - start);
        } else {
            i++;
        }
        const char *src = rep ? rep : s + start;
        size_t len = rep ? strlen(rep) : i - start;
        if (used + len + 1 > cap) {
            size_t nc = cap * 2 + len;
            char *no = realloc(out, nc);
            if (!no) {
                free(out);
                return NULL;
            }
            out = no;
            cap = nc;
        }
        memcpy(out + used, src, len);
        used += len;
        changed = changed || rep != NULL;
    }
    if (!changed) {
        free(out);
        return NULL;
    }
    out[used] = '\0';
    *out_n = used;
    return out;
}

/* ---- member spans (the raw "id" of a request) ---- */

static size_t skip_ws(const char *s, size_t n, size_t i)
{
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r'))
        i++;
    return i;
}

/* s[i] is '"': the index just past the closing quote, or SIZE_MAX when the string is cut. */
static size_t skip_string(const char *s, size_t n, size_t i)
{
    for (i++; i < n; i++) {
        if (s[i] == '\\')
            i++; /* the escaped byte; \uXXXX's hex digits are ordinary bytes */
        else if (s[i] == '"')
            return i + 1;
    }
    return SIZE_MAX;
}

/* The index just past the value that starts at s[i], or SIZE_MAX. Nesting is counted, not
 * recursed into, so a deep input costs no stack. */
static size_t skip_value(const char *s, size_t n, size_t i)
{
    if (i >= n)
        return SIZE_MAX;
    if (s[i] == '"')
        return skip_string(s, n, i);
    if (s[i] == '{' || s[i] == '[') {
        size_t depth = 0;
        while (i < n) {
            char c = s[i];
            if (c == '"') {
                i = skip_string(s, n, i);
                if (i == SIZE_MAX)
                    return SIZE_MAX;
                continue;
            }
            if (c == '{' || c == '[') {
                depth++;
            } else if (c == '}' || c == ']') {
                if (--depth == 0)
                    return i + 1;
            }
            i++;
        }
        return SIZE_MAX;
    }
    size_t start = i;
    while (i < n && s[i] != ',' && s[i] != '}' && s[i] != ']' && s[i] != ' ' && s[i] != '\t' &&
           s[i] != '\n' && s[i] != '\r' && s[i] != ':' && s[i] != '"' && s[i] != '{' && s[i] != '[')
        i++;
    return i > start ? i : SIZE_MAX;
}

/* Whether the string literal body s[a..b) (between the quotes) decodes to key (ASCII). */
static bool key_eq(const char *s, size_t a, size_t b, const char *key)
{
    size_t k = 0;
    for (size_t i = a; i < b; i++) {
        unsigned c = (unsigned char)s[i];
        if (c == '\\') {
            if (++i >= b)
                return false;
            switch (s[i]) {
            case 'u': {
                if (b - i < 5)
                    return false;
                unsigned v = 0;
                for (size_t j = 1; j <= 4; j++) {
                    int h = cs_hexval(s[i + j]);
                    if (h < 0)
                        return false;
                    v = v * 16 + (unsigned)h;
                }
                i += 4;
                c = v; /* a non-ASCII code point never equals an ASCII key byte */
                break;
            }
            case 'b':
                c = '\b';
                break;
            case 'f':
                c = '\f';
                break;
            case 'n':
                c = '\n';
                break;
            case 'r':
                c = '\r';
                break;
            case 't':
                c = '\t';
                break;
            default:
                c = (unsigned char)s[i]; /* \" \\ \/ */
                break;
            }
        }
        if (key[k] == '\0' || c == 0 || c != (unsigned char)key[k])
            return false;
        k++;
    }
    return key[k] == '\0';
}

int cs_json_member_span(const char *s, size_t n, const char *key, bool first, size_t *off,
                        size_t *len)
{
    size_t i = skip_ws(s, n, 0);
    bool found = false;
    if (i >= n || s[i] != '{')
        return -1;
    i = skip_ws(s, n, i + 1);
    if (i < n && s[i] == '}')
        return -1;
    while (i < n) {
        if (s[i] != '"')
            return -1;
        size_t kend = skip_string(s, n, i);
        if (kend == SIZE_MAX)
            return -1;
        bool match = key_eq(s, i + 1, kend - 1, key);
        i = skip_ws(s, n, kend);
        if (i >= n || s[i] != ':')
            return -1;
        i = skip_ws(s, n, i + 1);
        size_t vend = skip_value(s, n, i);
        if (vend == SIZE_MAX)
            return -1;
        if (match) {
            *off = i;
            *len = vend - i;
            found = true;
            if (first)
                return 0;
        }
        i = skip_ws(s, n, vend);
        if (i < n && s[i] == '}')
            return found ? 0 : -1;
        if (i >= n || s[i] != ',')
            return -1;
        i = skip_ws(s, n, i + 1);
    }
    return -1;
}

int cs_json_array_spans(const char *s, size_t n, size_t max, size_t *offs, size_t *lens)
{
    size_t i = skip_ws(s, n, 0);
    size_t count = 0;
    if (i >= n || s[i] != '[')
        return -1;
    i = skip_ws(s, n, i + 1);
    if (i < n && s[i] == ']')
        return 0;
    while (i < n) {
        size_t vend = skip_value(s, n, i);
        if (vend == SIZE_MAX || count >= max || count >= (size_t)INT32_MAX)
            return -1;
        offs[count] = i;
        lens[count] = vend - i;
        count++;
        i = skip_ws(s, n, vend);
        if (i < n && s[i] == ']')
            return (int)count;
        if (i >= n || s[i] != ',')
            return -1;
        i = skip_ws(s, n, i + 1);
    }
    return -1;
}

bool cs_json_is_integer_token(const char *t, size_t n)
{
    size_t i = 0;
    if (i < n && t[i] == '-')
        i++;
    if (i >= n)
        return false;
    if (t[i] == '0')
        return i + 1 == n;
    for (; i < n; i++)
        if (t[i] < '0' || t[i] > '9')
            return false;
    return true;
}
