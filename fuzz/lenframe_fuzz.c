/*
 * Fuzz harness for the length-prefixed framing parser (cs_lenframe_*, src/transport/).
 * Input: byte 0 picks how the stream is cut into chunks (bits 0-1 the pattern, bits 2-7 its
 * parameter), byte 1 picks the cap (bits 0-1: 1, 16, 255 or 4096) and how often the callback
 * asks to stop (bits 2-4: every Nth frame, 0 = never); the rest is the stream.
 * Trust: the input is arbitrary. The harness feeds the stream whole and in chunks, resuming
 * after every stop, and aborts unless both give the same frames and final status as a direct
 * reading of the stream; it also checks the parser's invariants (frame length 1..cap, buffer
 * never over the cap, errors sticky, at_boundary after a stop).
 * Entry point: LLVMFuzzerTestOneInput.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "transport_frame.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const uint32_t caps[4] = {1, 16, 255, 4096};

struct trace {
    uint8_t *buf; /* frames: 4-byte length, then the bytes */
    size_t used;
    size_t size;
    size_t frames;
    unsigned stop_every;
    const struct cs_lenframe *fr;
};

static void check(bool ok)
{
    if (!ok)
        abort();
}

static void trace_add(struct trace *t, const uint8_t *frame, size_t len)
{
    if (t->buf == NULL || t->size - t->used < len + 4) {
        size_t size = t->size ? t->size : 256;
        while (size - t->used < len + 4)
            size *= 2;
        uint8_t *nb = realloc(t->buf, size);
        check(nb != NULL);
        t->buf = nb;
        t->size = size;
    }
    uint32_t len32 = (uint32_t)len;
    memcpy(t->buf + t->used, &len32, 4);
    memcpy(t->buf + t->used + 4, frame, len);
    t->used += len + 4;
    t->frames++;
}

static int on_frame(void *arg, const uint8_t *frame, size_t len)
{
    struct trace *t = arg;
    check(t->fr->busy);
    check(len >= 1 && len <= t->fr->cap);
    check(t->fr->buf_cap <= t->fr->cap);
    trace_add(t, frame, len);
    return t->stop_every != 0 && t->frames % t->stop_every == 0;
}

/* Feeds one chunk, resuming after every stop. Returns OK or the fatal error. */
static enum cs_frame_status feed_chunk(struct cs_lenframe *fr, const uint8_t *p, size_t n)
{
    for (;;) {
        size_t used = (size_t)-1;
        enum cs_frame_status st = cs_lenframe_feed(fr, p, n, &used);
        check(fr->buf_cap <= fr->cap);
        switch (st) {
        case CS_FRAME_OK:
            check(used == n);
            return st;
        case CS_FRAME_STOPPED:
            check(used >= 1 && used <= n);
            check(cs_lenframe_at_boundary(fr));
            p += used;
            n -= used;
            break;
        case CS_FRAME_ERR_ZERO:
        case CS_FRAME_ERR_TOO_LARGE:
            check(!cs_lenframe_at_boundary(fr));
            return st;
        case CS_FRAME_ERR_NOMEM:
        case CS_FRAME_ERR_TRUNCATED:
        case CS_FRAME_ERR_ARG:
            abort(); /* never returned by feed here */
        }
    }
}

static uint64_t xorshift(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Size of the next chunk at offset at (0: an empty feed, then one byte); at most what is left. */
static size_t next_chunk(uint8_t sel, const uint8_t *s, size_t n, size_t at, uint64_t *rng)
{
    size_t param = sel >> 2;
    size_t c;
    switch (sel & 3) {
    case 0:
        c = 1;
        break;
    case 1:
        c = param + 1;
        break;
    case 2:
        c = (size_t)(xorshift(rng) % (param * 8 + 2));
        break;
    default:
        c = s[at] % (param + 2);
        break;
    }
    return c < n - at ? c : n - at;
}

static enum cs_frame_status run(const uint8_t *s, size_t n, uint8_t sel, uint8_t opt, bool split,
                                struct trace *t)
{
    struct cs_lenframe fr;
    check(cs_lenframe_init(&fr, caps[opt & 3], on_frame, t) == CS_FRAME_OK);
    t->fr = &fr;
    t->stop_every = (opt >> 2) & 7;
    uint64_t rng = 0x9e3779b97f4a7c15U ^ ((uint64_t)sel << 32) ^ n;
    enum cs_frame_status st = CS_FRAME_OK;
    size_t at = 0;
    while (at < n && st == CS_FRAME_OK) {
        size_t c = split ? next_chunk(sel, s, n, at, &rng) : n - at;
        if (c == 0) {
            /* An empty feed changes nothing; then take one byte so the loop moves on. */
            check(cs_lenframe_feed(&fr, s + at, 0, NULL) == CS_FRAME_OK);
            c = 1;
        }
        st = feed_chunk(&fr, s + at, c);
        at += c;
    }
    if (st == CS_FRAME_OK) {
        st = cs_lenframe_finish(&fr);
        check(cs_lenframe_at_boundary(&fr) == (st == CS_FRAME_OK));
    } else {
        /* Fatal errors are sticky. */
        size_t used = 1;
        check(cs_lenframe_feed(&fr, s, n, &used) == st && used == 0);
        check(cs_lenframe_finish(&fr) == st);
        check(!cs_lenframe_at_boundary(&fr));
    }
    cs_lenframe_fini(&fr);
    t->fr = NULL;
    return st;
}

/* The stream read directly: what the parser must deliver, and the final status. */
static enum cs_frame_status model(const uint8_t *s, size_t n, uint32_t cap, struct trace *t)
{
    size_t at = 0;
    while (n - at >= 4) {
        uint32_t len = (uint32_t)s[at] << 24 | (uint32_t)s[at + 1] << 16 |
                       (uint32_t)s[at + 2] << 8 | (uint32_t)s[at + 3];
        if (len == 0)
            return CS_FRAME_ERR_ZERO;
        if (len > cap)
            return CS_FRAME_ERR_TOO_LARGE;
        if (n - at - 4 < len)
            return CS_FRAME_ERR_TRUNCATED;
        uint8_t hdr[CS_LENFRAME_HEADER_SIZE];
        check(cs_lenframe_encode_header(hdr, len, cap) == CS_FRAME_OK);
        check(memcmp(hdr, s + at, 4) == 0);
        trace_add(t, s + at + 4, len);
        at += 4 + (size_t)len;
    }
    return at == n ? CS_FRAME_OK : CS_FRAME_ERR_TRUNCATED;
}

static bool same(const struct trace *a, const struct trace *b)
{
    return a->frames == b->frames && a->used == b->used &&
           (a->used == 0 || memcmp(a->buf, b->buf, a->used) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t sel = size > 0 ? data[0] : 0;
    uint8_t opt = size > 1 ? data[1] : 0;
    const uint8_t *s = size > 2 ? data + 2 : data;
    size_t n = size > 2 ? size - 2 : 0;

    struct trace whole = {0}, split = {0}, want = {0};
    enum cs_frame_status st_whole = run(s, n, sel, opt, false, &whole);
    enum cs_frame_status st_split = run(s, n, sel, opt, true, &split);
    enum cs_frame_status st_want = model(s, n, caps[opt & 3], &want);
    check(st_whole == st_split && st_whole == st_want);
    check(same(&whole, &split) && same(&whole, &want));
    free(whole.buf);
    free(split.buf);
    free(want.buf);
    return 0;
}
