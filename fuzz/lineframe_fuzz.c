/*
 * Fuzz harness for the newline-delimited framing parser (cs_lineframe_*, src/transport/).
 * Input: byte 0 picks how the stream is cut into chunks (bits 0-1 the pattern, bits 2-7 its
 * parameter), byte 1 picks the cap (bits 0-1: 1, 16, 255 or 4096) and how often a callback asks
 * to stop (bits 2-4: every Nth event, 0 = never); the rest is the stream.
 * Trust: the input is arbitrary. The harness feeds the stream whole and in chunks, resuming
 * after every stop, then finishes; it aborts unless both give the same lines, over-long reports
 * and final status as a direct reading of the stream (split on "\n", strip one "\r", skip empty
 * lines, report lines over the cap). It also checks the invariants: lines are 1..cap bytes with
 * no "\n" and no trailing "\r", and the buffer never grows past the cap.
 * Entry point: LLVMFuzzerTestOneInput.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "transport_frame.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const size_t caps[4] = {1, 16, 255, 4096};

struct trace {
    uint8_t *buf; /* events: tag 'L' or 'O', 4-byte length, the line's bytes */
    size_t used;
    size_t size;
    size_t events;
    unsigned stop_every;
    const struct cs_lineframe *fr;
};

static void check(bool ok)
{
    if (!ok)
        abort();
}

static int trace_add(struct trace *t, uint8_t tag, const uint8_t *line, size_t len)
{
    if (t->buf == NULL || t->size - t->used < len + 5) {
        size_t size = t->size ? t->size : 256;
        while (size - t->used < len + 5)
            size *= 2;
        uint8_t *nb = realloc(t->buf, size);
        check(nb != NULL);
        t->buf = nb;
        t->size = size;
    }
    uint32_t len32 = (uint32_t)len;
    t->buf[t->used] = tag;
    memcpy(t->buf + t->used + 1, &len32, 4);
    if (len > 0)
        memcpy(t->buf + t->used + 5, line, len);
    t->used += len + 5;
    t->events++;
    return t->stop_every != 0 && t->events % t->stop_every == 0;
}

static int on_line(void *arg, const uint8_t *line, size_t len)
{
    struct trace *t = arg;
    check(t->fr->busy);
    check(len >= 1 && len <= t->fr->cap);
    check(memchr(line, '\n', len) == NULL);
    check(t->fr->buf_cap <= t->fr->cap);
    return trace_add(t, 'L', line, len);
}

static int on_overlong(void *arg)
{
    struct trace *t = arg;
    check(t->fr->busy);
    check(t->fr->len == 0);
    check(t->fr->buf_cap <= t->fr->cap);
    return trace_add(t, 'O', NULL, 0);
}

/* Feeds one chunk, resuming after every stop. Returns OK or the fatal error. */
static enum cs_frame_status feed_chunk(struct cs_lineframe *fr, const uint8_t *p, size_t n)
{
    for (;;) {
        size_t used = (size_t)-1;
        enum cs_frame_status st = cs_lineframe_feed(fr, p, n, &used);
        check(fr->buf_cap <= fr->cap && fr->len <= fr->cap);
        switch (st) {
        case CS_FRAME_OK:
            check(used == n);
            return st;
        case CS_FRAME_STOPPED:
            check(used >= 1 && used <= n);
            p += used;
            n -= used;
            break;
        case CS_FRAME_ERR_NOMEM:
            return st;
        case CS_FRAME_ERR_ZERO:
        case CS_FRAME_ERR_TOO_LARGE:
        case CS_FRAME_ERR_TRUNCATED:
        case CS_FRAME_ERR_ARG:
            abort(); /* never returned by the line parser's feed */
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
                                struct trace *t, bool *partial)
{
    struct cs_lineframe fr;
    check(cs_lineframe_init(&fr, caps[opt & 3], on_line, on_overlong, t) == CS_FRAME_OK);
    t->fr = &fr;
    t->stop_every = (opt >> 2) & 7;
    uint64_t rng = 0x9e3779b97f4a7c15U ^ ((uint64_t)sel << 32) ^ n;
    enum cs_frame_status st = CS_FRAME_OK;
    size_t at = 0;
    while (at < n && st == CS_FRAME_OK) {
        size_t c = split ? next_chunk(sel, s, n, at, &rng) : n - at;
        if (c == 0) {
            /* An empty feed changes nothing; then take one byte so the loop moves on. */
            check(cs_lineframe_feed(&fr, s + at, 0, NULL) == CS_FRAME_OK);
            c = 1;
        }
        st = feed_chunk(&fr, s + at, c);
        at += c;
    }
    if (st == CS_FRAME_OK) {
        st = cs_lineframe_finish(&fr, partial);
        check(st == CS_FRAME_OK || st == CS_FRAME_STOPPED);
        /* finish resets the parser: a second one has nothing pending. */
        bool again = true;
        check(cs_lineframe_finish(&fr, &again) == CS_FRAME_OK && !again);
    }
    cs_lineframe_fini(&fr);
    t->fr = NULL;
    return st;
}

/*
 * The stream read directly, into t. Returns whether bytes followed the last newline; sets
 * *at_finish to whether the last event is a line only finish can deliver.
 */
static bool model(const uint8_t *s, size_t n, size_t cap, struct trace *t, bool *at_finish)
{
    *at_finish = false;
    size_t at = 0;
    while (at < n) {
        const uint8_t *nl = memchr(s + at, '\n', n - at);
        size_t raw = nl != NULL ? (size_t)(nl - (s + at)) : n - at;
        size_t len = raw;
        if (len > 0 && s[at + len - 1] == '\r')
            len--;
        if (len > cap)
            trace_add(t, 'O', NULL, 0);
        else if (len > 0)
            trace_add(t, 'L', s + at, len);
        if (nl == NULL) {
            *at_finish = len > 0 && len <= cap;
            return raw > 0;
        }
        at += raw + 1;
    }
    return false;
}

static bool same(const struct trace *a, const struct trace *b)
{
    return a->events == b->events && a->used == b->used &&
           (a->used == 0 || memcmp(a->buf, b->buf, a->used) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t sel = size > 0 ? data[0] : 0;
    uint8_t opt = size > 1 ? data[1] : 0;
    const uint8_t *s = size > 2 ? data + 2 : data;
    size_t n = size > 2 ? size - 2 : 0;

    struct trace whole = {0}, split = {0}, want = {0};
    bool p_whole = false, p_split = false;
    enum cs_frame_status st_whole = run(s, n, sel, opt, false, &whole, &p_whole);
    enum cs_frame_status st_split = run(s, n, sel, opt, true, &split, &p_split);
    bool at_finish = false;
    bool p_want = model(s, n, caps[opt & 3], &want, &at_finish);
    /* finish returns STOPPED only when the final line's callback asked to stop. */
    unsigned every = (opt >> 2) & 7;
    bool stop = at_finish && every != 0 && want.events % every == 0;
    check(st_whole == st_split && st_whole == (stop ? CS_FRAME_STOPPED : CS_FRAME_OK));
    check(same(&whole, &split) && same(&whole, &want));
    check(p_whole == p_split && p_whole == p_want);
    free(whole.buf);
    free(split.buf);
    free(want.buf);
    return 0;
}
