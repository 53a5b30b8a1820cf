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

#endif
