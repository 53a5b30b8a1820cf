/*
 * base_id: random ids (see base_id.c).
 */
#ifndef CS_BASE_ID_H
#define CS_BASE_ID_H

#include <stddef.h>

/* Writes prefix + a uuid v4 (36 characters) + NUL into out (cap bytes, at least
 * strlen(prefix) + 37) from getrandom(2). Returns 0, or -1 (cap too small, getrandom failed). */
int cs_id_new(const char *prefix, char *out, size_t cap);

#endif
