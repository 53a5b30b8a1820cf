/*
 * Fuzz harness for the parse budget's pre-pass (cs_json_budget_check, src/base/base_json_budget.c),
 * differential against jansson (invariant M8).
 * Input: arbitrary bytes, taken as a message text. The harness runs the pre-pass, then jansson on
 * the same bytes with allocation functions that count malloc chunk sizes as glibc makes them,
 * and aborts
 *   - if jansson's peak allocation ever passes the pre-pass's estimate (valid or invalid text:
 *     whatever jansson builds before it stops was counted);
 *   - for text jansson parses (without duplicate keys), unless the pre-pass's values, containers,
 * members and depth equal a walk of jansson's tree, and unless a reported top-level id is the
 * tree's "id" member. Trust: the input is arbitrary. Entry point: LLVMFuzzerTestOneInput.
 */
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base_json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t live, peak;

/* glibc's chunk for a request of n bytes: n + 8, rounded up to 16, at least 32. */
static size_t chunk(size_t n)
{
    size_t c = (n + 8 + 15) & ~(size_t)15;
    return c < 32 ? 32 : c;
}

static void *count_malloc(size_t n)
{
    unsigned char *p = malloc(n + 16);
    if (!p)
        return NULL;
    memcpy(p, &n, sizeof n);
    live += chunk(n);
    if (live > peak)
        peak = live;
    return p + 16;
}

static void count_free(void *q)
{
    if (!q)
        return;
    unsigned char *p = (unsigned char *)q - 16;
    size_t n;
    memcpy(&n, p, sizeof n);
    live -= chunk(n);
    free(p);
}

struct walk {
    size_t values, containers, members, depth;
};

static void walk(const json_t *v, size_t depth, struct walk *w)
{
    w->values++;
    if (json_is_array(v) || json_is_object(v)) {
        w->containers++;
        if (depth + 1 > w->depth)
            w->depth = depth + 1;
    }
    if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++)
            walk(json_array_get(v, i), depth + 1, w);
    } else if (json_is_object(v)) {
        const char *k;
        json_t *m;
        json_object_foreach((json_t *)v, k, m)
        {
            w->members++;
            walk(m, depth + 1, w);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool set;
    if (!set) {
        json_set_alloc_funcs(count_malloc, count_free);
        set = true;
    }
    if (size > 1 << 20)
        return 0;
    const char *text = (const char *)data;
    struct cs_json_budget b = {.max_depth = SIZE_MAX, .max_bytes = SIZE_MAX};
    char why[160];
    if (cs_json_budget_check(text, size, &b, why, sizeof why) != 0)
        abort(); /* nothing is over unlimited limits */
    struct cs_json_budget d = {0};
    int rc = cs_json_budget_check(text, size, &d, why, sizeof why);
    if ((rc == 0) != (d.bytes <= CS_JSON_BUDGET_BYTES(size) && d.depth <= CS_JSON_BUDGET_DEPTH))
        abort(); /* the default limits are the documented ones */
    live = peak = 0;
    json_error_t err;
    json_t *j = json_loadb(text, size, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
    if (peak > b.bytes)
        abort(); /* jansson took more than the estimate */
    /* Duplicate keys collapse in the tree: the counts are compared on text without them. */
    json_t *u =
        j ? json_loadb(text, size, JSON_DECODE_ANY | JSON_ALLOW_NUL | JSON_REJECT_DUPLICATES, &err)
          : NULL;
    bool nodup = u != NULL;
    json_decref(u);
    if (j && nodup) {
        struct walk w = {0};
        walk(j, 0, &w);
        if (w.values != b.values || w.containers != b.containers || w.members != b.members ||
            w.depth != b.depth)
            abort();
        json_t *id = json_is_object(j) ? json_object_get(j, "id") : NULL;
        if (b.id_len > 0) {
            json_t *got = json_loadb(text + b.id_off, b.id_len, JSON_DECODE_ANY, NULL);
            if (id && !json_is_object(id) && !json_is_array(id) && (!got || !json_equal(got, id)))
                abort();
            json_decref(got);
        }
    }
    json_decref(j);
    json_t *k = cs_json_loadb_budget(text, size, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
    if (k && rc != 0)
        abort(); /* the bounded loader never parses what the pre-pass refuses */
    json_decref(k);
    return 0;
}
