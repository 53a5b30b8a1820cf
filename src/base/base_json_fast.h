/*
 * base_json_fast: peer JSON (the runner wire's frames) parsed by yajl's lexer into a jansson
 * tree, jansson's own loader deciding every text the fast path does not build (base_json_fast.c).
 * A library of its own (cs_json_fast), so only what parses frames links libyajl.
 */
#ifndef CS_BASE_JSON_FAST_H
#define CS_BASE_JSON_FAST_H

#include <jansson.h>
#include <stddef.h>

#include "base_json.h"

/* The fast path alone: the tree json_loadb(buf, n, flags) would build, or NULL when this path
 * does not build it (the text is refused, or is one of the cases it leaves to jansson). For the
 * fuzz harness and tests; callers want cs_json_loadb_fast. */
json_t *cs_json_loadb_yajl(const char *buf, size_t n, size_t flags);

/* json_loadb(buf, n, flags, error), the same tree or the same refusal and error, faster for the
 * texts the fast path takes. flags: JSON_ALLOW_NUL, JSON_DECODE_ANY (others: jansson only). */
json_t *cs_json_loadb_fast(const char *buf, size_t n, size_t flags, json_error_t *error);

/* cs_json_loadb_budget with the fast path: the parse budget first, then cs_json_loadb_fast. For
 * every parse of a wire frame. */
json_t *cs_json_loadb_peer(const char *buf, size_t n, size_t flags, json_error_t *error);

#endif
