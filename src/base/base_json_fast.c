/*
 * base_json_fast: the runner wire's frames parsed by yajl's lexer into jansson's tree.
 *
 * Why: jansson's loader reads its input one byte at a time through a stream callback and copies
 * every string twice; a worker's answer to a 1 KiB `read` (1.3 KB of frame, the file's text one
 * JSON string) costs it about 14 us on a 2-vCPU guest, the largest piece of code on the uds hop
 * (bench/README.md, issue 33). Debian's libyajl2 lexes the same frame and this file builds the
 * same tree from its callbacks in about 2 us.
 *
 * jansson stays the authority on what a text means. The fast path only ever answers a text it
 * builds completely; everything else goes to json_loadb, which decides, builds and words the
 * error as it always did:
 *   - a text holding "\u" anywhere (yajl's \u decoding differs from jansson's: a lone surrogate
 *     becomes '?' or bytes that are not UTF-8, and \u0000 is jansson's JSON_ALLOW_NUL question),
 *     or a form feed or vertical tab byte anywhere (whitespace to yajl, not to JSON or jansson);
 *   - a number that is not a plain integer (reals: jansson parses them locale-independently), or
 *     an integer out of range;
 *   - a string or key jansson's own UTF-8 check refuses (json_stringn, json_object_setn_new);
 *   - a top-level value that is not an object or array, a nesting deeper than FAST_DEPTH, a key
 *     of more than 128 bytes, any flag other than JSON_ALLOW_NUL and JSON_DECODE_ANY;
 *   - anything yajl refuses (its strict defaults: no comments, no trailing text, one value), and
 *     anything but whitespace after the root's closing bracket (yajl 2.1 takes `{}"abc`, a
 *     complete value and an unterminated string, as complete).
 * The fuzz harness fuzz/json_fast_fuzz.c holds the fast path to json_loadb's tree, byte for byte
 * once dumped, on every text the fast path accepts, and to json_loadb's verdict on every text.
 *
 * Trust: the input is a peer's frame, any bytes (the caller has run the parse budget on it).
 * Entry points: cs_json_loadb_fast, cs_json_loadb_peer (base_json_fast.h).
 */
#include "base_json_fast.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yajl/yajl_parse.h>

/* Open containers the fast path follows; deeper text goes to jansson (wire frames nest < 10). */
#define FAST_DEPTH 64
/* Longer texts go to jansson: yajl's buffers count in size_t, but not every release's sums were
 * checked (CVE-2022-24795); the wire's frames are at most 16 MiB. */
#define FAST_MAX_BYTES ((size_t)64 * 1024 * 1024)

struct build {
    yajl_handle h;
    json_t *root;
    size_t end;               /* the root's closing bracket's end in the text (0: not closed yet) */
    json_t *open[FAST_DEPTH]; /* the containers entered and not yet left, innermost last */
    int depth;
    /* The key the next value goes under (the innermost container is an object), copied: yajl's
     * pointer is good for the callback only. A longer key sends the text to jansson. */
    char key[128];
    size_t key_len;
    bool have_key;
};

/* Puts v (a new reference, NULL when it could not be made) where the text has it. 1, or 0 to
 * stop the parse (yajl_status_client_canceled). */
static int put(struct build *b, json_t *v)
{
    if (!v)
        return 0;
    if (b->depth == 0) {
        /* A scalar text (JSON_DECODE_ANY) is jansson's: only a container's closing bracket
         * (on_end) tells where the root ends, which the check of the text's tail needs. */
        if (b->root || (!json_is_object(v) && !json_is_array(v))) {
            json_decref(v);
            return 0;
        }
        b->root = v; /* the tree owns everything from here; a failure frees it whole */
        return 1;
    }
    json_t *parent = b->open[b->depth - 1];
    if (json_is_array(parent))
        return json_array_append_new(parent, v) == 0;
    if (!b->have_key) {
        json_decref(v);
        return 0;
    }
    /* Checks the key's UTF-8 as jansson's loader does; steals v even when it fails. */
    b->have_key = false;
    return json_object_setn_new(parent, b->key, b->key_len, v) == 0;
}

static int on_null(void *ctx)
{
    return put(ctx, json_null());
}

static int on_boolean(void *ctx, int value)
{
    return put(ctx, json_boolean(value));
}

/* yajl hands the number's text as written (its grammar is JSON's). A plain integer is read here
 * as jansson reads it (strtoll, out of range refused); a fraction or exponent goes to jansson. */
static int on_number(void *ctx, const char *s, size_t n)
{
    char text[24]; /* "-9223372036854775808" is 20 bytes; longer is out of range or a real */
    if (n == 0 || n >= sizeof text || memchr(s, '.', n) || memchr(s, 'e', n) || memchr(s, 'E', n))
        return 0;
    memcpy(text, s, n);
    text[n] = '\0';
    errno = 0;
    char *end;
    long long v = strtoll(text, &end, 10);
    if (errno != 0 || *end != '\0')
        return 0;
    return put(ctx, json_integer((json_int_t)v));
}

static int on_string(void *ctx, const unsigned char *s, size_t n)
{
    /* json_stringn checks the UTF-8 as jansson's loader does (NULL: refused). */
    return put(ctx, json_stringn((const char *)s, n));
}

static int on_key(void *ctx, const unsigned char *s, size_t n)
{
    struct build *b = ctx;
    if (n > sizeof b->key)
        return 0;
    memcpy(b->key, s, n);
    b->key_len = n;
    b->have_key = true;
    return 1;
}

static int enter(struct build *b, json_t *c)
{
    if (!c || b->depth == FAST_DEPTH) {
        json_decref(c);
        return 0;
    }
    json_incref(c); /* put's reference goes to the parent; this one keeps c while it is open */
    if (!put(b, c)) {
        json_decref(c);
        return 0;
    }
    b->open[b->depth++] = c;
    json_decref(c); /* the parent (or root) holds it now */
    return 1;
}

static int on_start_map(void *ctx)
{
    return enter(ctx, json_object());
}

static int on_start_array(void *ctx)
{
    return enter(ctx, json_array());
}

static int on_end(void *ctx)
{
    struct build *b = ctx;
    if (b->depth == 0)
        return 0;
    if (--b->depth == 0)
        b->end = yajl_get_bytes_consumed(b->h); /* the offset just past this bracket */
    return 1;
}

static const yajl_callbacks callbacks = {
    .yajl_null = on_null,
    .yajl_boolean = on_boolean,
    .yajl_number = on_number,
    .yajl_string = on_string,
    .yajl_start_map = on_start_map,
    .yajl_map_key = on_key,
    .yajl_end_map = on_end,
    .yajl_start_array = on_start_array,
    .yajl_end_array = on_end,
};

json_t *cs_json_loadb_yajl(const char *buf, size_t n, size_t flags)
{
    if (n == 0 || n > FAST_MAX_BYTES || (flags & ~(size_t)(JSON_ALLOW_NUL | JSON_DECODE_ANY)) ||
        memmem(buf, n, "\\u", 2) || memchr(buf, '\f', n) || memchr(buf, '\v', n))
        return NULL;
    struct build b = {0};
    yajl_handle h = yajl_alloc(&callbacks, NULL, &b);
    if (!h)
        return NULL;
    b.h = h;
    yajl_status st = yajl_parse(h, (const unsigned char *)buf, n);
    if (st == yajl_status_ok)
        st = yajl_complete_parse(h);
    yajl_free(h);
    /* yajl takes a complete value followed by an unterminated string (`{}"abc`) as complete:
     * only whitespace may follow the root's closing bracket. */
    bool tail_ok = b.root && b.depth == 0 && b.end > 0 && b.end <= n;
    for (size_t i = b.end; tail_ok && i < n; i++)
        tail_ok = buf[i] == ' ' || buf[i] == '\t' || buf[i] == '\n' || buf[i] == '\r';
    if (st != yajl_status_ok || !tail_ok) {
        json_decref(b.root);
        return NULL;
    }
    return b.root;
}

json_t *cs_json_loadb_fast(const char *buf, size_t n, size_t flags, json_error_t *error)
{
    json_t *j = cs_json_loadb_yajl(buf, n, flags);
    if (!j)
        return json_loadb(buf, n, flags, error);
    if (error) { /* as json_loadb leaves it after a success: the whole text read */
        memset(error, 0, sizeof *error);
        error->line = -1;
        error->column = -1;
        error->position = (int)n;
        snprintf(error->source, sizeof error->source, "<buffer>");
    }
    return j;
}

json_t *cs_json_loadb_peer(const char *buf, size_t n, size_t flags, json_error_t *error)
{
    if (cs_json_budget_gate(buf, n, error) != 0)
        return NULL;
    return cs_json_loadb_fast(buf, n, flags, error);
}
