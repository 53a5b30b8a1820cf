/*
 * base_utf8: strict and lossy UTF-8 decoding (see base_utf8.c).
 */
#ifndef CS_BASE_UTF8_H
#define CS_BASE_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Decodes one sequence at s (n >= 1 bytes). Returns the bytes it spans: the whole sequence when
 * *valid, else the maximal ill-formed subpart (at least 1; *cp is then U+FFFD). */
size_t cs_utf8_step(const unsigned char *s, size_t n, uint32_t *cp, bool *valid);

/*
 * Decodes the n bytes at s into out (at least 3 * n + 1 bytes; NUL-terminated) with every
 * maximal ill-formed subpart, including a sequence cut by the end of the input, replaced by
 * U+FFFD, unless hold_tail is set: then a sequence cut by the end is left out (the next bytes
 * may complete it). Returns the length written; *used is the input consumed; *lossy (may be
 * NULL) says whether anything was replaced.
 */
size_t cs_utf8_lossy(const unsigned char *s, size_t n, bool hold_tail, char *out, size_t *used,
                     bool *lossy);

#endif
