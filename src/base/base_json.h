/*
 * base_json: a JSON string literal written fast (see base_json.c).
 */
#ifndef CS_BASE_JSON_H
#define CS_BASE_JSON_H

#include <stdbool.h>
#include <jansson.h>
#include <stddef.h>

/* The most bytes cs_json_quote writes for n bytes of input (every byte \u00XX, two quotes). */
#define CS_JSON_QUOTE_MAX(n) (6 * (n) + 2)

/*
 * Writes the n bytes at s, which must be valid UTF-8 (jansson's own output, a decoded string),
 * to out as a JSON string literal with its quotes, byte for byte what jansson's json_dumps writes
 * for that string without JSON_ENSURE_ASCII or JSON_ESCAPE_SLASH. out has room for
 * CS_JSON_QUOTE_MAX(n) bytes; nothing is NUL-terminated. Returns the bytes written.
 */
size_t cs_json_quote(const char *s, size_t n, char *out);

/* The inside of cs_json_quote: the escaped bytes without the quotes, at most 6 * n of them. The
 * escapes are per byte, so a string may be escaped in pieces split anywhere. */
size_t cs_json_escape(const char *s, size_t n, char *out);

/* How many bytes cs_json_escape writes for the n bytes at s (one read of them, no writes): a
 * writer reserves exactly that much at once instead of growing its buffer on the way. */
size_t cs_json_escaped_len(const char *s, size_t n);

/*
 * A copy of the JSON text s (n bytes) in which every number jansson cannot hold is clamped: an
 * integer beyond int64 becomes INT64_MAX or INT64_MIN, a real beyond double becomes +/-DBL_MAX
 * (1.7976931348623157e308). Strings are copied untouched; nothing else is checked (an invalid
 * text stays invalid). Returns the malloc'd copy (NUL-terminated, *out_n bytes before the NUL), or
 * NULL when nothing needed clamping or memory ran out.
 */
char *cs_json_clamp_numbers(const char *s, size_t n, size_t *out_n);

/*
 * The raw token of a member of a JSON object text, for replies that must echo a request's "id"
 * exactly as written (numbers beyond 64 bits, -0, escapes): s (n bytes) is one JSON value with
 * optional whitespace around it. When it is an object with a member named key (NUL-terminated,
 * ASCII; escapes in the member name are decoded before comparing), sets *off and *len to the
 * span of that member's value token (a string keeps its quotes) and returns 0. first: take the
 * first occurrence (our own replies); otherwise the last one, the one jansson keeps. Returns -1
 * when s is not an object, has no such member, or is malformed where the scan went (the scanner
 * checks structure only, never reads past n, and never recurses; feed it text jansson accepted).
 */
int cs_json_member_span(const char *s, size_t n, const char *key, bool first, size_t *off,
                        size_t *len);

/*
 * The element spans of the top-level JSON array text s (n bytes): up to max elements into offs
 * and lens. Returns the number of elements, or -1 when s is not an array, is malformed where the
 * scan went, or has more than max elements.
 */
int cs_json_array_spans(const char *s, size_t n, size_t max, size_t *offs, size_t *lens);

/* True when the token t (n bytes) is a JSON integer literal: an optional minus, then 0 or a
 * digit string without a leading zero; no fraction, no exponent. */
bool cs_json_is_integer_token(const char *t, size_t n);

/*
 * The parse budget (security-model.md M8): a pre-pass over raw JSON text, before jansson builds
 * a tree of it, that counts what jansson would allocate and refuses text whose tree would cost
 * more than a budget. It is a tokenizer, not a validator: whatever jansson could build from the
 * text, valid or not, up to the point where it stops, is made of tokens counted here, so the
 * estimate bounds jansson's allocations also for text it refuses half way.
 *
 * The costs are jansson 2.14's on 64-bit glibc, measured as malloc chunk sizes (see the comment
 * in base_json_budget.c); the fuzz harness json_budget_fuzz checks them against jansson's real
 * allocations for every input it parses.
 */
/* Defaults: the deepest nesting of arrays and objects, and the budget of a message of n bytes
 * (a fixed floor, for small messages, plus twice the text: with the text itself and the reply
 * a message then costs at most about 4x its size). */
#define CS_JSON_BUDGET_DEPTH    128
#define CS_JSON_BUDGET_FLOOR    ((size_t)4 * 1024 * 1024)
#define CS_JSON_BUDGET_BYTES(n) (CS_JSON_BUDGET_FLOOR + 2 * (size_t)(n))
/* The longest top-level "id" value cs_json_budget_check reports (longer ones are unreadable). */
#define CS_JSON_BUDGET_ID_MAX 1024

struct cs_json_budget {
    /* limits, set by the caller */
    size_t max_depth;  /* 0: CS_JSON_BUDGET_DEPTH */
    size_t max_bytes;  /* 0: CS_JSON_BUDGET_BYTES(n) */
    const char *watch; /* a key to look out for (NUL-terminated), or NULL */
    /* counts, written by cs_json_budget_check (for valid JSON exactly what a jansson walk of
     * the tree finds) */
    size_t values;     /* every value: containers, strings, numbers, true/false/null */
    size_t containers; /* arrays and objects */
    size_t members;    /* object members (their keys are not values) */
    size_t depth;      /* deepest nesting of containers (a scalar alone: 0) */
    size_t bytes;      /* the estimated peak bytes jansson allocates parsing the text */
    /* Where the top-level object's "id" member's value is, when it is a scalar token of at
     * most CS_JSON_BUDGET_ID_MAX bytes (spelt "id" without escapes): id_len is 0 otherwise. */
    size_t id_off, id_len;
    /* The same for the top-level "method" member's value (its token as written, quotes too). */
    size_t method_off, method_len;
    bool escapes;    /* some string (key or value) holds a backslash */
    bool watch_seen; /* an object at any depth has the key watch, spelt without escapes */
};

/*
 * Scans the n bytes at buf (any bytes; NUL allowed) and fills the counts of b. Returns 0 when
 * the text is within b's limits, -1 when not, with a one-line reason in why (cap bytes, may be
 * 0). Reads only buf[0..n), allocates nothing, runs in O(n) time and O(1) space: the whole text
 * is always scanned, so the counts and the id are complete even when it is refused.
 */
int cs_json_budget_check(const char *buf, size_t n, struct cs_json_budget *b, char *why,
                         size_t cap);

/* json_loadb behind cs_json_budget_check with the default limits: NULL when the text is over
 * budget (error->text says why, error->position is 0) or jansson refuses it. For every parse of
 * peer text. */
json_t *cs_json_loadb_budget(const char *buf, size_t n, size_t flags, json_error_t *error);
/* Its first half: calls the large-text hook, runs cs_json_budget_check with the default limits.
 * 0 when the text may be parsed; -1 when over budget, error (may be NULL) filled as above. */
int cs_json_budget_gate(const char *buf, size_t n, json_error_t *error);

/* Texts of at least this many bytes are "large": their tree, once freed, should be handed back
 * to the system (malloc_trim), which the caller of a parse cannot do before it frees the tree. */
#define CS_JSON_LARGE ((size_t)1024 * 1024)
/* Sets the function cs_json_loadb_budget calls (with arg) before parsing a large text: main
 * arms a short timer that trims. Set once, before serving; NULL: none. Not thread-safe: call
 * cs_json_loadb_budget for large texts from one thread (the loop) only. */
void cs_json_set_large_hook(void (*fn)(void *arg), void *arg);
/* Calls that hook: a large text (n bytes, at least CS_JSON_LARGE) was made, a reply for one
 * (its buffers are freed by then, or soon). The loop thread only. */
void cs_json_large_made(size_t n);

/* The value of one hexadecimal digit (either case), or -1. */
static inline int cs_hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

#endif
