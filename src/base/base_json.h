/*
 * base_json: a JSON string literal written fast (see base_json.c).
 */
#ifndef CS_BASE_JSON_H
#define CS_BASE_JSON_H

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

#endif
