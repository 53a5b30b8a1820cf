/*
 * base_json: a JSON string literal written fast (see base_json.c).
 */
#ifndef CS_BASE_JSON_H
#define CS_BASE_JSON_H

#include <stdbool.h>
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

#endif
