/*
 * patch internals shared by patch_parse.rl and patch_apply.c: quoting of patch and file bytes
 * for messages (which cs_diag_set then formats), valid UTF-8 whatever bytes they hold.
 * Trust: the quoted bytes are untrusted; the format strings are ours.
 * Entry points: cs__patch_quote, cs__patch_escape.
 */
#ifndef CS_PATCH_INTERNAL_H
#define CS_PATCH_INTERNAL_H

#include <stddef.h>

/* Room for one quoted excerpt: CS__PATCH_QUOTE_MAX source bytes escaped at most 4 times, the
 * quotes, "..." and the NUL. */
#define CS__PATCH_QUOTE_MAX 80
#define CS__PATCH_QUOTE_CAP (4 * CS__PATCH_QUOTE_MAX + 8)

/*
 * Writes the n bytes at s into dst (CS__PATCH_QUOTE_CAP bytes) as a double-quoted excerpt that is
 * valid UTF-8 and printable: well-formed UTF-8 is kept, '"' and '\' are backslash-escaped,
 * control bytes and ill-formed bytes become \xNN, and more than CS__PATCH_QUOTE_MAX bytes end in
 * "...". Returns dst.
 */
const char *cs__patch_quote(char *dst, const char *s, size_t n);

/* Like cs__patch_quote without the surrounding quotes (for paths in running text). */
const char *cs__patch_escape(char *dst, const char *s, size_t n);

#endif
