/*
 * base_json_budget: the parse budget (security-model.md M8). A message of 16 MiB of `[],` is 5.6
 * million jansson arrays of 128 bytes each: 700 MB from one request, before anything can look at
 * it. This pre-pass walks the raw text once, counting the tokens jansson would turn into values
 * and what each costs, and refuses the text before jansson is called when the total would pass
 * the budget.
 *
 * Costs, jansson 2.14 on 64-bit glibc, as malloc chunk sizes (the request plus 8, rounded up to
 * 16, at least 32), measured by counting jansson's allocations for a million of each shape:
 *
 *   array      json_array_t (48) + its first table of 8 slots (80)            128
 *   object     json_object_t + its first 8 hash buckets                       232
 *   number     json_integer_t / json_real_t                                    32
 *   string     json_string_t (48) + the value (len + 1, at least 32)           80 + len
 *   member     the hash pair with the key inline (80 + len) + bucket slack    112 + len
 *   literal    true, false, null are shared singletons                          0
 *   slot       every value's pointer in its parent's table (arrays) or
 *              bucket (objects); tables double, and the old one is live
 *              while it is copied: at worst 24 bytes a value                   24
 *   lexer      the raw text of the longest token (a buffer that doubles to 2^k,
 *              the old half live while it is copied), plus a key's decoded
 *              copy while the member is inserted         1.5 x 2^k - longest + longest key
 *
 * The pass is a tokenizer, not a validator: invalid text is counted as far as it goes (a run of
 * other bytes is one number, a string runs to its closing quote or the end), which is never less
 * than what jansson builds before it gives up on the same text.
 *
 * Trust: the input is a peer's, any bytes. Nothing is allocated; the scan is O(n), O(1) space.
 * Entry points: cs_json_budget_check, cs_json_budget_gate, cs_json_loadb_budget (base_json.h).
 */
#include "base_json.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define COST_BASE   256u /* the lexer's own buffers, the error struct's bits */
#define COST_SLOT   24u
#define COST_ARRAY  128u
#define COST_OBJECT 232u
#define COST_NUMBER 32u
#define COST_STRING 80u
#define COST_MEMBER 112u

static bool delimiter(unsigned char c)
{
    switch (c) {
    case ' ':
    case '\t':
    case '\n':
    case '\r':
    case '[':
    case ']':
    case '{':
    case '}':
    case ',':
    case ':':
    case '"':
        return true;
    default:
        return false;
    }
}

static size_t pow2_at_least(size_t n)
{
    size_t p = 16; /* jansson's strbuffer starts at 16 bytes */
    while (p < n && p <= SIZE_MAX / 2)
        p *= 2;
    return p;
}

/* The bytes of v equal to c, as the high bit of each: exact from the lowest byte up to the first
 * match (a borrow can only mark bytes above a true match), so its lowest set bit is the first. */
static inline uint64_t word_eq(uint64_t v, unsigned char c)
{
    const uint64_t ones = 0x0101010101010101ull;
    uint64_t x = v ^ (ones * c);
    return (x - ones) & ~x & (ones * 0x80);
}

/*
 * The index of the quote that closes the string whose text starts at s[i], or n when the text
 * ends first: a backslash escapes the byte after it, whatever it is (*escapes is set). Eight
 * bytes at a time (little-endian words; most of a message is strings), the last few one by one.
 */
static size_t string_end(const unsigned char *s, size_t i, size_t n, bool *escapes)
{
    while (i < n) {
        if (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ && n - i >= 8) {
            uint64_t v;
            memcpy(&v, s + i, sizeof v);
            uint64_t hit = word_eq(v, '"') | word_eq(v, '\\');
            if (!hit) {
                i += 8;
                continue;
            }
            i += (size_t)__builtin_ctzll(hit) / 8;
        } else if (s[i] != '"' && s[i] != '\\') {
            i++;
            continue;
        }
        if (s[i] == '"')
            return i;
        *escapes = true;
        i += 2; /* the backslash and the byte it escapes */
    }
    return n;
}

int cs_json_budget_check(const char *buf, size_t n, struct cs_json_budget *b, char *why, size_t cap)
{
    const unsigned char *s = (const unsigned char *)buf;
    size_t max_depth = b->max_depth ? b->max_depth : CS_JSON_BUDGET_DEPTH;
    size_t max_bytes = b->max_bytes ? b->max_bytes : CS_JSON_BUDGET_BYTES(n);
    size_t values = 0, containers = 0, members = 0, depth = 0, deepest = 0;
    size_t bytes = COST_BASE, longest = 0, longest_run = 0, longest_key = 0, id_off = 0, id_len = 0;
    bool seen_top = false, top_object = false;
    /* The last token, so that a ':' can turn the string just counted as a value into a key. */
    bool last_string = false, escapes = false, seen = false;
    enum { WANT_NONE, WANT_ID, WANT_METHOD } want = WANT_NONE; /* the value of a top-level key */
    size_t method_off = 0, method_len = 0;
    size_t last_len = 0, last_start = 0, watch_len = b->watch ? strlen(b->watch) : 0;
    size_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        size_t start = i;
        switch (c) {
        case ' ':
        case '\t':
        case '\n':
        case '\r':
            i++;
            continue;
        case '[':
        case '{':
            if (!seen_top)
                top_object = c == '{';
            seen_top = true;
            values++;
            containers++;
            bytes += COST_SLOT + (c == '[' ? COST_ARRAY : COST_OBJECT);
            if (++depth > deepest)
                deepest = depth;
            last_string = false;
            want = WANT_NONE;
            i++;
            continue;
        case ']':
        case '}':
            if (depth > 0)
                depth--;
            last_string = false;
            want = WANT_NONE;
            i++;
            continue;
        case ',':
            last_string = false;
            want = WANT_NONE;
            i++;
            continue;
        case ':':
            if (last_string) {
                /* The string was a key: no value of its own, a member instead. */
                values--;
                members++;
                bytes -= COST_SLOT + COST_STRING + last_len;
                bytes += COST_MEMBER + last_len;
                if (last_len > longest_key)
                    longest_key = last_len;
                if (watch_len && last_len == watch_len &&
                    memcmp(s + last_start + 1, b->watch, watch_len) == 0)
                    seen = true;
            }
            /* The key was "id" or "method", a member of the top-level object. */
            want = WANT_NONE;
            if (last_string && depth == 1 && top_object) {
                if (last_len == 2 && memcmp(s + last_start + 1, "id", 2) == 0)
                    want = WANT_ID;
                else if (last_len == 6 && memcmp(s + last_start + 1, "method", 6) == 0)
                    want = WANT_METHOD;
            }
            last_string = false;
            i++;
            continue;
        case '"':
            i = string_end(s, i + 1, n, &escapes);
            last_len = i - start - 1;
            last_start = start;
            if (i < n)
                i++; /* the closing quote */
            values++;
            bytes += COST_SLOT + COST_STRING + last_len;
            if (last_len > longest)
                longest = last_len;
            last_string = true;
            break;
        default:
            /* A number or a literal (or junk jansson stops at): one run of bytes. */
            while (i < n && !delimiter(s[i]))
                i++;
            values++;
            bytes += COST_SLOT;
            if (i - start > longest_run)
                longest_run = i - start; /* the lexer keeps the run's text too */
            if (!((i - start == 4 &&
                   (memcmp(s + start, "true", 4) == 0 || memcmp(s + start, "null", 4) == 0)) ||
                  (i - start == 5 && memcmp(s + start, "false", 5) == 0)))
                bytes += COST_NUMBER;
            last_string = false;
            break;
        }
        /* A scalar token ends here (start..i). */
        seen_top = true;
        if (want != WANT_NONE && i - start <= CS_JSON_BUDGET_ID_MAX) {
            if (want == WANT_ID) {
                id_off = start;
                id_len = i - start;
            } else {
                method_off = start;
                method_len = i - start;
            }
        }
        want = WANT_NONE;
    }
    {
        /* The lexer's buffer grows by doubling, the old one live while it is copied: cap + cap/2
         * at the last growth; after it, cap + the decoded string, whose bytes the sum holds. */
        size_t top = longest > longest_run ? longest : longest_run;
        size_t cap_ = pow2_at_least(top + 2); /* the opening quote and a NUL too */
        size_t half = cap_ / 2 > longest ? cap_ / 2 - longest : 0;
        bytes += cap_ + half + longest_key + 64;
    }
    b->values = values;
    b->containers = containers;
    b->members = members;
    b->depth = deepest;
    b->bytes = bytes;
    b->id_off = id_off;
    b->id_len = id_len;
    b->method_off = method_off;
    b->method_len = method_len;
    b->escapes = escapes;
    b->watch_seen = seen;
    if (deepest > max_depth) {
        if (cap)
            snprintf(why, cap, "nested %zu deep, more than %zu", deepest, max_depth);
        return -1;
    }
    if (bytes > max_bytes) {
        if (cap)
            snprintf(why, cap,
                     "%zu values would take about %zu MiB to parse, more than the %zu MiB "
                     "allowed for %zu bytes",
                     values, (bytes + (1u << 20) - 1) >> 20, max_bytes >> 20, n);
        return -1;
    }
    return 0;
}

static void (*large_hook)(void *arg);
static void *large_arg;

void cs_json_set_large_hook(void (*fn)(void *arg), void *arg)
{
    large_hook = fn;
    large_arg = arg;
}

void cs_json_large_made(size_t n)
{
    if (n >= CS_JSON_LARGE && large_hook)
        large_hook(large_arg);
}

int cs_json_budget_gate(const char *buf, size_t n, json_error_t *error)
{
    if (n >= CS_JSON_LARGE && large_hook)
        large_hook(large_arg);
    struct cs_json_budget b = {0};
    char why[160];
    if (cs_json_budget_check(buf, n, &b, why, sizeof why) != 0) {
        if (error) {
            memset(error, 0, sizeof *error);
            snprintf(error->text, sizeof error->text, "%s", why);
            snprintf(error->source, sizeof error->source, "<budget>");
        }
        return -1;
    }
    return 0;
}

json_t *cs_json_loadb_budget(const char *buf, size_t n, size_t flags, json_error_t *error)
{
    if (cs_json_budget_gate(buf, n, error) != 0)
        return NULL;
    return json_loadb(buf, n, flags, error);
}
