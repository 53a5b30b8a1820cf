/*
 * supervisor_ring: the output ring of one managed process (see supervisor_ring.h): a buffer that
 * grows by doubling to its cap and then wraps, positions counted over the process's whole life.
 *
 * Trust: bytes are opaque; cursors are clamped before use. Entry points: supervisor_ring.h.
 */
#include "supervisor_ring.h"

#include <stdlib.h>
#include <string.h>

/* The first allocation; it doubles from there up to the cap. */
#define RING_FIRST_ALLOC 16384

void cs__ring_init(struct cs_ring *r, size_t cap)
{
    memset(r, 0, sizeof *r);
    r->cap = cap;
}

void cs__ring_fini(struct cs_ring *r)
{
    free(r->buf);
    r->buf = NULL;
    r->alloc = 0;
    r->total = 0;
    r->linear = false;
    r->base = 0;
}

uint64_t cs__ring_retained_from(const struct cs_ring *r)
{
    if (r->linear)
        return r->base;
    return r->total > r->cap ? r->total - r->cap : 0;
}

uint64_t cs__ring_start(const struct cs_ring *r, int64_t cursor)
{
    uint64_t from = cs__ring_retained_from(r);
    uint64_t start = (uint64_t)cursor > from ? (uint64_t)cursor : from;
    return start > r->total ? r->total : start;
}

void cs__ring_copy(const struct cs_ring *r, uint64_t from, uint64_t to, uint8_t *dst)
{
    if (r->linear) {
        memcpy(dst, r->buf + (from - r->base), (size_t)(to - from));
        return;
    }
    while (from < to) {
        size_t at = r->alloc < r->cap ? (size_t)from : (size_t)(from % r->cap);
        size_t run = (r->alloc < r->cap ? r->alloc : r->cap) - at;
        if (run > to - from)
            run = (size_t)(to - from);
        memcpy(dst, r->buf + at, run);
        dst += run;
        from += run;
    }
}

uint8_t *cs__ring_space(struct cs_ring *r, size_t *space)
{
    if (r->alloc < r->cap) {
        if (r->total == r->alloc) {
            size_t n = r->alloc ? r->alloc * 2 : RING_FIRST_ALLOC;
            if (n > r->cap)
                n = r->cap;
            uint8_t *nb = realloc(r->buf, n);
            if (!nb)
                return NULL;
            r->buf = nb;
            r->alloc = n;
        }
        if (r->alloc < r->cap) {
            *space = r->alloc - (size_t)r->total;
            return r->buf + r->total;
        }
    }
    size_t at = (size_t)(r->total % r->cap);
    *space = r->cap - at;
    return r->buf + at;
}

void cs__ring_commit(struct cs_ring *r, size_t n)
{
    r->total += (uint64_t)n;
}

size_t cs__ring_append(struct cs_ring *r, const void *data, size_t n)
{
    const uint8_t *p = data;
    size_t done = 0;
    while (done < n) {
        size_t space = 0;
        uint8_t *dst = cs__ring_space(r, &space);
        if (!dst)
            break;
        if (space > n - done)
            space = n - done;
        memcpy(dst, p + done, space);
        cs__ring_commit(r, space);
        done += space;
    }
    return done;
}

void cs__ring_compact(struct cs_ring *r)
{
    uint64_t from = cs__ring_retained_from(r);
    size_t n = (size_t)(r->total - from);
    uint8_t *nb = malloc(n ? n : 1);
    if (!nb)
        return;
    cs__ring_copy(r, from, r->total, nb);
    free(r->buf);
    r->buf = nb;
    r->alloc = n;
    r->linear = true;
    r->base = from;
}
