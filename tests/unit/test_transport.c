/*
 * Unit tests for the transport framing parsers (src/transport/transport_frame.h): whole and
 * split feeds (every split point, one byte at a time), fatal lengths, the cap checked before any
 * allocation, callback stops, EOF handling, over-long lines, allocation failures.
 * Trust: test inputs are fixed; the parsers are the code under test.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "transport_frame.h"

/* ---- an event log shared by both parsers ---- */

#define LOG_SIZE 16384

struct log {
    uint8_t buf[LOG_SIZE]; /* events: tag, 4-byte length, bytes */
    size_t used;
    size_t events;
    size_t overlong;
    size_t stop_at;                /* 1-based event that returns non-zero; 0 = never */
    const struct cs_lineframe *lf; /* if set, its buffer is checked against its cap */
    const struct cs_lenframe *len; /* if set, its buffer is checked against its cap */
};

static int log_add(struct log *lg, uint8_t tag, const uint8_t *data, size_t n)
{
    assert_true(n <= UINT32_MAX);
    assert_true(lg->used + 5 + n <= LOG_SIZE);
    lg->buf[lg->used++] = tag;
    uint32_t n32 = (uint32_t)n;
    memcpy(lg->buf + lg->used, &n32, 4);
    lg->used += 4;
    if (n > 0)
        memcpy(lg->buf + lg->used, data, n);
    lg->used += n;
    lg->events++;
    if (lg->lf != NULL)
        assert_true(lg->lf->buf_cap <= lg->lf->cap);
    if (lg->len != NULL)
        assert_true(lg->len->buf_cap <= lg->len->cap);
    return lg->stop_at != 0 && lg->events == lg->stop_at;
}

static int on_msg(void *arg, const uint8_t *data, size_t n)
{
    assert_non_null(data);
    assert_true(n > 0);
    return log_add(arg, 'M', data, n);
}

static int on_overlong(void *arg)
{
    struct log *lg = arg;
    lg->overlong++;
    return log_add(lg, 'O', NULL, 0);
}

static void expect_msg(struct log *lg, const char *s)
{
    log_add(lg, 'M', (const uint8_t *)s, strlen(s));
}

static void expect_overlong(struct log *lg)
{
    log_add(lg, 'O', NULL, 0);
}

static void assert_same_log(const struct log *got, const struct log *want)
{
    assert_int_equal(got->events, want->events);
    assert_int_equal(got->used, want->used);
    assert_memory_equal(got->buf, want->buf, want->used);
}

static struct log *log_new(void)
{
    struct log *lg = calloc(1, sizeof *lg);
    assert_non_null(lg);
    return lg;
}

/* ---- allocator seams ---- */

static size_t alloc_calls;

static void *counting_realloc(void *ptr, size_t size)
{
    alloc_calls++;
    return realloc(ptr, size);
}

static void *failing_realloc(void *ptr, size_t size)
{
    (void)ptr;
    (void)size;
    alloc_calls++;
    return NULL;
}

/* ---- lenframe helpers ---- */

/* Appends one frame (header + body) to a stream buffer. */
static size_t put_frame(uint8_t *out, size_t at, const void *body, size_t n)
{
    assert_int_equal(cs_lenframe_encode_header(out + at, n, CS_FRAME_DEFAULT_CAP), CS_FRAME_OK);
    memcpy(out + at + CS_LENFRAME_HEADER_SIZE, body, n);
    return at + CS_LENFRAME_HEADER_SIZE + n;
}

/* Feeds n bytes, resuming after every CS_FRAME_STOPPED; returns the last other status. */
static enum cs_frame_status len_feed_all(struct cs_lenframe *fr, const uint8_t *data, size_t n)
{
    for (;;) {
        size_t used = 99;
        enum cs_frame_status st = cs_lenframe_feed(fr, data, n, &used);
        if (st != CS_FRAME_STOPPED) {
            if (st == CS_FRAME_OK)
                assert_int_equal(used, n);
            return st;
        }
        assert_true(used <= n);
        assert_true(cs_lenframe_at_boundary(fr));
        data += used;
        n -= used;
    }
}

static enum cs_frame_status line_feed_all(struct cs_lineframe *fr, const uint8_t *data, size_t n)
{
    for (;;) {
        size_t used = 99;
        enum cs_frame_status st = cs_lineframe_feed(fr, data, n, &used);
        assert_true(fr->buf_cap <= fr->cap);
        if (st != CS_FRAME_STOPPED) {
            if (st == CS_FRAME_OK)
                assert_int_equal(used, n);
            return st;
        }
        assert_true(used <= n);
        data += used;
        n -= used;
    }
}

/* A stream of four frames; the 300-byte one outgrows the smallest body buffer. */
static size_t len_sample(uint8_t *out, size_t *bounds, size_t *nbounds)
{
    static const char *const bodies[] = {"a", "hello", NULL, "{\"protocol\":5}"};
    char big[300];
    for (size_t i = 0; i < sizeof big; i++)
        big[i] = (char)('A' + i % 26);
    size_t at = 0;
    *nbounds = 0;
    bounds[(*nbounds)++] = 0;
    for (size_t i = 0; i < 4; i++) {
        if (bodies[i] != NULL)
            at = put_frame(out, at, bodies[i], strlen(bodies[i]));
        else
            at = put_frame(out, at, big, sizeof big);
        bounds[(*nbounds)++] = at;
    }
    return at;
}

static void len_sample_expect(struct log *lg)
{
    char big[301];
    for (size_t i = 0; i < 300; i++)
        big[i] = (char)('A' + i % 26);
    big[300] = '\0';
    expect_msg(lg, "a");
    expect_msg(lg, "hello");
    expect_msg(lg, big);
    expect_msg(lg, "{\"protocol\":5}");
}

/* ---- lenframe tests ---- */

static void len_whole(void **state)
{
    (void)state;
    uint8_t s[512];
    size_t bounds[8], nb;
    size_t n = len_sample(s, bounds, &nb);
    struct log *got = log_new(), *want = log_new();
    len_sample_expect(want);

    struct cs_lenframe fr;
    assert_int_equal(cs_lenframe_init(&fr, CS_FRAME_DEFAULT_CAP, on_msg, got), CS_FRAME_OK);
    fr.realloc_fn = counting_realloc;
    alloc_calls = 0;
    size_t used = 0;
    assert_int_equal(cs_lenframe_feed(&fr, s, n, &used), CS_FRAME_OK);
    assert_int_equal(used, n);
    assert_same_log(got, want);
    /* Every frame was whole in the input: delivered from it, nothing allocated. */
    assert_int_equal(alloc_calls, 0);
    assert_true(cs_lenframe_at_boundary(&fr));
    assert_int_equal(cs_lenframe_finish(&fr), CS_FRAME_OK);
    /* An empty feed is a no-op. */
    assert_int_equal(cs_lenframe_feed(&fr, NULL, 0, NULL), CS_FRAME_OK);
    cs_lenframe_fini(&fr);
    free(got);
    free(want);
}

static void len_split_everywhere(void **state)
{
    (void)state;
    uint8_t s[512];
    size_t bounds[8], nb;
    size_t n = len_sample(s, bounds, &nb);
    struct log *want = log_new();
    len_sample_expect(want);

    for (size_t k = 0; k <= n; k++) {
        struct log *got = log_new();
        struct cs_lenframe fr;
        assert_int_equal(cs_lenframe_init(&fr, CS_FRAME_DEFAULT_CAP, on_msg, got), CS_FRAME_OK);
        got->len = &fr;
        assert_int_equal(cs_lenframe_feed(&fr, s, k, NULL), CS_FRAME_OK);
        assert_int_equal(cs_lenframe_feed(&fr, s + k, n - k, NULL), CS_FRAME_OK);
        assert_same_log(got, want);
        assert_true(cs_lenframe_at_boundary(&fr));
        cs_lenframe_fini(&fr);
        free(got);
    }

    /* One byte at a time: at_boundary holds exactly at the frame boundaries. */
    struct log *got = log_new();
    struct cs_lenframe fr;
    assert_int_equal(cs_lenframe_init(&fr, CS_FRAME_DEFAULT_CAP, on_msg, got), CS_FRAME_OK);
    got->len = &fr;
    size_t bi = 0;
    for (size_t i = 0; i <= n; i++) {
        bool boundary = bi < nb && bounds[bi] == i;
        if (boundary)
            bi++;
        assert_int_equal(cs_lenframe_at_boundary(&fr), boundary);
        assert_int_equal(cs_lenframe_finish(&fr), boundary ? CS_FRAME_OK : CS_FRAME_ERR_TRUNCATED);
        if (i < n)
            assert_int_equal(cs_lenframe_feed(&fr, s + i, 1, NULL), CS_FRAME_OK);
    }
    assert_int_equal(bi, nb);
    assert_same_log(got, want);
    assert_true(fr.buf_cap >= 300 && fr.buf_cap <= 512);
    cs_lenframe_fini(&fr);
    free(got);
    free(want);
}

static void len_zero_is_fatal_and_sticky(void **state)
{
    (void)state;
    uint8_t s[64];
    size_t n = put_frame(s, 0, "ok", 2);
    memset(s + n, 0, 4); /* a zero length */
    n += 4;
    n = put_frame(s, n, "never", 5);
    struct log *got = log_new(), *want = log_new();
    expect_msg(want, "ok");

    struct cs_lenframe fr;
    assert_int_equal(cs_lenframe_init(&fr, CS_FRAME_DEFAULT_CAP, on_msg, got), CS_FRAME_OK);
    assert_int_equal(cs_lenframe_feed(&fr, s, n, NULL), CS_FRAME_ERR_ZERO);
    assert_same_log(got, want);
    assert_false(cs_lenframe_at_boundary(&fr));
    assert_int_equal(cs_lenframe_finish(&fr), CS_FRAME_ERR_ZERO);
    /* Sticky: a valid frame fed afterwards is not parsed. */
    uint8_t ok[8];
    size_t okn = put_frame(ok, 0, "x", 1);
    size_t used = 99;
    assert_int_equal(cs_lenframe_feed(&fr, ok, okn, &used), CS_FRAME_ERR_ZERO);
    assert_int_equal(used, 0);
    assert_int_equal(cs_lenframe_feed(&fr, NULL, 0, NULL), CS_FRAME_ERR_ZERO);
    assert_same_log(got, want);
    cs_lenframe_fini(&fr);
    free(got);
    free(want);
}

static void len_too_large_before_alloc(void **state)
{
    (void)state;
    struct log *got = log_new();
    struct cs_lenframe fr;

    /* cap 16, length 17: only the 4 header bytes are fed; rejected on the 4th. */
    static const uint8_t h17[] = {0, 0, 0, 17};
    assert_int_equal(cs_lenframe_init(&fr, 16, on_msg, got), CS_FRAME_OK);
    fr.realloc_fn = counting_realloc;
    alloc_calls = 0;
    assert_int_equal(cs_lenframe_feed(&fr, h17, 3, NULL), CS_FRAME_OK);
    assert_false(cs_lenframe_at_boundary(&fr));
    assert_int_equal(cs_lenframe_feed(&fr, h17 + 3, 1, NULL), CS_FRAME_ERR_TOO_LARGE);
    assert_int_equal(alloc_calls, 0);
    assert_null(fr.buf);
    assert_int_equal(fr.buf_cap, 0);
    /* Sticky, and still nothing allocated when body bytes follow. */
    assert_int_equal(cs_lenframe_feed(&fr, (const uint8_t *)"abcdefgh", 8, NULL),
                     CS_FRAME_ERR_TOO_LARGE);
    assert_int_equal(cs_lenframe_finish(&fr), CS_FRAME_ERR_TOO_LARGE);
    assert_int_equal(alloc_calls, 0);
    cs_lenframe_fini(&fr);

    /* The largest length a peer can send, against the default cap, with body bytes after it. */
    static const uint8_t hmax[] = {0xff, 0xff, 0xff, 0xff, 'x', 'y'};
    assert_int_equal(cs_lenframe_init(&fr, CS_FRAME_DEFAULT_CAP, on_msg, got), CS_FRAME_OK);
    fr.realloc_fn = counting_realloc;
    assert_int_equal(cs_lenframe_feed(&fr, hmax, sizeof hmax, NULL), CS_FRAME_ERR_TOO_LARGE);
    assert_int_equal(alloc_calls, 0);
    assert_null(fr.buf);
    cs_lenframe_fini(&fr);

    /* The default cap itself: 16 MiB is a valid header, 16 MiB + 1 is not. */
    static const uint8_t hcap[] = {0x01, 0x00, 0x00, 0x00};
    static const uint8_t hcap1[] = {0x01, 0x00, 0x00, 0x01};
    assert_int_equal(cs_lenframe_init(&fr, CS_FRAME_DEFAULT_CAP, on_msg, got), CS_FRAME_OK);
    fr.realloc_fn = counting_realloc;
    assert_int_equal(cs_lenframe_feed(&fr, hcap, 4, NULL), CS_FRAME_OK);
    assert_false(cs_lenframe_at_boundary(&fr));
    assert_int_equal(cs_lenframe_finish(&fr), CS_FRAME_ERR_TRUNCATED);
    cs_lenframe_fini(&fr);
    assert_int_equal(cs_lenframe_init(&fr, CS_FRAME_DEFAULT_CAP, on_msg, got), CS_FRAME_OK);
    fr.realloc_fn = counting_realloc;
    assert_int_equal(cs_lenframe_feed(&fr, hcap1, 4, NULL), CS_FRAME_ERR_TOO_LARGE);
    cs_lenframe_fini(&fr);
    assert_int_equal(alloc_calls, 0);
    assert_int_equal(got->events, 0);
    free(got);
}

static void len_exact_cap(void **state)
{
    (void)state;
    uint8_t body[17];
    memset(body, 'z', sizeof body);
    uint8_t s[64];
    size_t n = put_frame(s, 0, body, 16);
    struct log *want = log_new();
    expect_msg(want, "zzzzzzzzzzzzzzzz");

    /* Whole, and split in the body so the buffered path is used too. */
    for (size_t k = 0; k <= n; k += n / 2 + 1) {
        struct log *got = log_new();
        struct cs_lenframe fr;
        assert_int_equal(cs_lenframe_init(&fr, 16, on_msg, got), CS_FRAME_OK);
        got->len = &fr;
        assert_int_equal(cs_lenframe_feed(&fr, s, k, NULL), CS_FRAME_OK);
        assert_int_equal(cs_lenframe_feed(&fr, s + k, n - k, NULL), CS_FRAME_OK);
        assert_same_log(got, want);
        assert_true(fr.buf_cap <= 16);
        cs_lenframe_fini(&fr);
        free(got);
    }
    free(want);
}

static void len_stop(void **state)
{
    (void)state;
    uint8_t s[512];
    size_t bounds[8], nb;
    size_t n = len_sample(s, bounds, &nb);
    struct log *want = log_new();
    len_sample_expect(want);

    /* Stop on the first frame: consumed is exactly that frame; the rest resumes. */
    struct log *got = log_new();
    got->stop_at = 1;
    struct cs_lenframe fr;
    assert_int_equal(cs_lenframe_init(&fr, CS_FRAME_DEFAULT_CAP, on_msg, got), CS_FRAME_OK);
    size_t used = 0;
    assert_int_equal(cs_lenframe_feed(&fr, s, n, &used), CS_FRAME_STOPPED);
    assert_int_equal(used, bounds[1]);
    assert_int_equal(got->events, 1);
    assert_true(cs_lenframe_at_boundary(&fr));
    assert_int_equal(cs_lenframe_feed(&fr, s + used, n - used, &used), CS_FRAME_OK);
    assert_same_log(got, want);
    cs_lenframe_fini(&fr);

    /* Stop on every frame, with the stream split at every point. */
    for (size_t k = 0; k <= n; k++) {
        for (size_t stop = 1; stop <= 4; stop++) {
            memset(got, 0, sizeof *got);
            got->stop_at = stop;
            assert_int_equal(cs_lenframe_init(&fr, CS_FRAME_DEFAULT_CAP, on_msg, got), CS_FRAME_OK);
            assert_int_equal(len_feed_all(&fr, s, k), CS_FRAME_OK);
            assert_int_equal(len_feed_all(&fr, s + k, n - k), CS_FRAME_OK);
            assert_same_log(got, want);
            cs_lenframe_fini(&fr);
        }
    }
    free(got);
    free(want);
}

static void len_boundary(void **state)
{
    (void)state;
    uint8_t s[16];
    size_t n = put_frame(s, 0, "abcd", 4);
    struct log *got = log_new();
    struct cs_lenframe fr;
    assert_int_equal(cs_lenframe_init(&fr, CS_FRAME_DEFAULT_CAP, on_msg, got), CS_FRAME_OK);
    assert_true(cs_lenframe_at_boundary(&fr));
    assert_int_equal(cs_lenframe_finish(&fr), CS_FRAME_OK);
    assert_int_equal(cs_lenframe_feed(&fr, s, 2, NULL), CS_FRAME_OK); /* mid header */
    assert_false(cs_lenframe_at_boundary(&fr));
    assert_int_equal(cs_lenframe_finish(&fr), CS_FRAME_ERR_TRUNCATED);
    assert_int_equal(cs_lenframe_feed(&fr, s + 2, 2, NULL), CS_FRAME_OK); /* header done */
    assert_false(cs_lenframe_at_boundary(&fr));
    assert_int_equal(cs_lenframe_feed(&fr, s + 4, 3, NULL), CS_FRAME_OK); /* mid body */
    assert_false(cs_lenframe_at_boundary(&fr));
    assert_int_equal(cs_lenframe_finish(&fr), CS_FRAME_ERR_TRUNCATED);
    assert_int_equal(got->events, 0);
    assert_int_equal(cs_lenframe_feed(&fr, s + 7, n - 7, NULL), CS_FRAME_OK);
    assert_int_equal(got->events, 1);
    assert_true(cs_lenframe_at_boundary(&fr));
    assert_int_equal(cs_lenframe_finish(&fr), CS_FRAME_OK);
    cs_lenframe_fini(&fr);
    free(got);
}

static void len_encode_header(void **state)
{
    (void)state;
    uint8_t out[4] = {9, 9, 9, 9};
    assert_int_equal(cs_lenframe_encode_header(out, 1, 16), CS_FRAME_OK);
    assert_memory_equal(out, ((const uint8_t[]){0, 0, 0, 1}), 4);
    assert_int_equal(cs_lenframe_encode_header(out, 0x01020304, UINT32_MAX), CS_FRAME_OK);
    assert_memory_equal(out, ((const uint8_t[]){1, 2, 3, 4}), 4);
    assert_int_equal(cs_lenframe_encode_header(out, CS_FRAME_DEFAULT_CAP, CS_FRAME_DEFAULT_CAP),
                     CS_FRAME_OK);
    assert_memory_equal(out, ((const uint8_t[]){1, 0, 0, 0}), 4);
    /* Failures leave out alone. */
    assert_int_equal(cs_lenframe_encode_header(out, 0, 16), CS_FRAME_ERR_ZERO);
    assert_int_equal(cs_lenframe_encode_header(out, 17, 16), CS_FRAME_ERR_TOO_LARGE);
    assert_int_equal(cs_lenframe_encode_header(out, (size_t)UINT32_MAX + 1, UINT32_MAX),
                     CS_FRAME_ERR_TOO_LARGE);
    assert_memory_equal(out, ((const uint8_t[]){1, 0, 0, 0}), 4);
    /* Round trip: an encoded header at exactly the cap parses. */
    uint8_t s[20];
    assert_int_equal(cs_lenframe_encode_header(s, 16, 16), CS_FRAME_OK);
    memset(s + 4, 'q', 16);
    struct log *got = log_new(), *want = log_new();
    expect_msg(want, "qqqqqqqqqqqqqqqq");
    struct cs_lenframe fr;
    assert_int_equal(cs_lenframe_init(&fr, 16, on_msg, got), CS_FRAME_OK);
    assert_int_equal(cs_lenframe_feed(&fr, s, sizeof s, NULL), CS_FRAME_OK);
    assert_same_log(got, want);
    cs_lenframe_fini(&fr);
    free(got);
    free(want);
}

static void len_nomem(void **state)
{
    (void)state;
    uint8_t s[16];
    size_t n = put_frame(s, 0, "abcd", 4);
    struct log *got = log_new();
    struct cs_lenframe fr;
    assert_int_equal(cs_lenframe_init(&fr, CS_FRAME_DEFAULT_CAP, on_msg, got), CS_FRAME_OK);
    fr.realloc_fn = failing_realloc;
    /* Whole in one feed: no allocation needed, so it works. */
    assert_int_equal(cs_lenframe_feed(&fr, s, n, NULL), CS_FRAME_OK);
    assert_int_equal(got->events, 1);
    /* Split: the body must be buffered and the allocation fails: fatal and sticky. */
    assert_int_equal(cs_lenframe_feed(&fr, s, 6, NULL), CS_FRAME_ERR_NOMEM);
    assert_int_equal(cs_lenframe_feed(&fr, s + 6, n - 6, NULL), CS_FRAME_ERR_NOMEM);
    assert_int_equal(cs_lenframe_finish(&fr), CS_FRAME_ERR_NOMEM);
    assert_false(cs_lenframe_at_boundary(&fr));
    assert_int_equal(got->events, 1);
    assert_null(fr.buf);
    cs_lenframe_fini(&fr);
    free(got);
}

static void len_init_args(void **state)
{
    (void)state;
    struct cs_lenframe fr, before;
    memset(&fr, 0x5a, sizeof fr);
    memcpy(&before, &fr, sizeof fr);
    assert_int_equal(cs_lenframe_init(&fr, 0, on_msg, NULL), CS_FRAME_ERR_ARG);
    assert_int_equal(cs_lenframe_init(&fr, 16, NULL, NULL), CS_FRAME_ERR_ARG);
    assert_int_equal(cs_lenframe_init(NULL, 16, on_msg, NULL), CS_FRAME_ERR_ARG);
    assert_memory_equal(&fr, &before, sizeof fr); /* untouched */
    cs_lenframe_fini(NULL);
    assert_int_equal(cs_lenframe_init(&fr, UINT32_MAX, on_msg, NULL), CS_FRAME_OK);
    cs_lenframe_fini(&fr);
    cs_lenframe_fini(&fr); /* twice is fine */
}

static void status_strings(void **state)
{
    (void)state;
    static const enum cs_frame_status all[] = {
        CS_FRAME_OK,        CS_FRAME_STOPPED,       CS_FRAME_ERR_ZERO, CS_FRAME_ERR_TOO_LARGE,
        CS_FRAME_ERR_NOMEM, CS_FRAME_ERR_TRUNCATED, CS_FRAME_ERR_ARG,
    };
    size_t n = sizeof all / sizeof all[0];
    for (size_t i = 0; i < n; i++) {
        const char *s = cs_frame_status_str(all[i]);
        assert_non_null(s);
        assert_true(strlen(s) > 0);
        for (size_t j = 0; j < i; j++)
            assert_string_not_equal(s, cs_frame_status_str(all[j]));
    }
    assert_non_null(cs_frame_status_str((enum cs_frame_status)1000));
}

/* ---- lineframe tests ---- */

static struct cs_lineframe *line_new(size_t cap, struct log *lg)
{
    struct cs_lineframe *fr = malloc(sizeof *fr);
    assert_non_null(fr);
    assert_int_equal(cs_lineframe_init(fr, cap, on_msg, on_overlong, lg), CS_FRAME_OK);
    lg->lf = fr;
    return fr;
}

static void line_free(struct cs_lineframe *fr)
{
    cs_lineframe_fini(fr);
    free(fr);
}

static void line_whole(void **state)
{
    (void)state;
    static const char s[] = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\nbc\n{\"x\":1}\n";
    struct log *got = log_new(), *want = log_new();
    expect_msg(want, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}");
    expect_msg(want, "bc");
    expect_msg(want, "{\"x\":1}");
    struct cs_lineframe *fr = line_new(CS_FRAME_DEFAULT_CAP, got);
    size_t used = 0;
    assert_int_equal(cs_lineframe_feed(fr, (const uint8_t *)s, strlen(s), &used), CS_FRAME_OK);
    assert_int_equal(used, strlen(s));
    assert_same_log(got, want);
    bool partial = true;
    assert_int_equal(cs_lineframe_finish(fr, &partial), CS_FRAME_OK);
    assert_false(partial);
    assert_same_log(got, want);
    line_free(fr);
    free(got);
    free(want);
}

/* A stream with every feature, for cap 16: CRLF, a lone CR inside, blank lines, over-long
 * lines (plain, with CRs, and one that is over-long only by a held CR), lines at the cap. */
static const char line_mix[] = "a\n"
                               "\r\n"
                               "bc\r\n"
                               "\n"
                               "d\re\n"
                               "f\r\r\n"
                               "0123456789abcdef\n"           /* exactly the cap */
                               "0123456789abcdef\r\n"         /* the cap, CRLF */
                               "0123456789abcdefg\n"          /* one over */
                               "0123456789abcdef\rx\n"        /* over by a CR that is text */
                               "xxxxxxxxxxxxxxxxxxxxxxxx\r\n" /* over, CRLF */
                               "\r\rxxxxxxxxxxxxxxxxxxx\n"    /* over, starting with CRs */
                               "after\n"
                               "\n\n"
                               "tail";

static void line_mix_expect(struct log *lg)
{
    expect_msg(lg, "a");
    expect_msg(lg, "bc");
    expect_msg(lg, "d\re");
    expect_msg(lg, "f\r");
    expect_msg(lg, "0123456789abcdef");
    expect_msg(lg, "0123456789abcdef");
    expect_overlong(lg);
    expect_overlong(lg);
    expect_overlong(lg);
    expect_overlong(lg);
    expect_msg(lg, "after");
    expect_msg(lg, "tail"); /* at finish */
}

static void line_split_everywhere(void **state)
{
    (void)state;
    const uint8_t *s = (const uint8_t *)line_mix;
    size_t n = strlen(line_mix);
    struct log *want = log_new();
    line_mix_expect(want);

    for (size_t k = 0; k <= n; k++) {
        struct log *got = log_new();
        struct cs_lineframe *fr = line_new(16, got);
        assert_int_equal(cs_lineframe_feed(fr, s, k, NULL), CS_FRAME_OK);
        assert_true(fr->buf_cap <= 16);
        assert_int_equal(cs_lineframe_feed(fr, s + k, n - k, NULL), CS_FRAME_OK);
        assert_true(fr->buf_cap <= 16);
        bool partial = false;
        assert_int_equal(cs_lineframe_finish(fr, &partial), CS_FRAME_OK);
        assert_true(partial);
        assert_same_log(got, want);
        line_free(fr);
        free(got);
    }

    struct log *got = log_new();
    struct cs_lineframe *fr = line_new(16, got);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(cs_lineframe_feed(fr, s + i, 1, NULL), CS_FRAME_OK);
        assert_true(fr->buf_cap <= 16);
    }
    assert_int_equal(cs_lineframe_finish(fr, NULL), CS_FRAME_OK);
    assert_same_log(got, want);
    line_free(fr);
    free(got);
    free(want);
}

static void line_crlf(void **state)
{
    (void)state;
    static const char s[] = "a\r\nb\r\n\r\nc\r\r\nd\re\n";
    struct log *got = log_new(), *want = log_new();
    expect_msg(want, "a");
    expect_msg(want, "b");
    expect_msg(want, "c\r"); /* only one trailing CR is stripped */
    expect_msg(want, "d\re");
    struct cs_lineframe *fr = line_new(CS_FRAME_DEFAULT_CAP, got);
    assert_int_equal(cs_lineframe_feed(fr, (const uint8_t *)s, strlen(s), NULL), CS_FRAME_OK);
    assert_same_log(got, want);
    line_free(fr);
    free(got);
    free(want);
}

static void line_finish(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        const char *line; /* delivered at finish, or NULL */
        bool partial;
    } cases[] = {
        {"", NULL, false},          {"x\n", NULL, false}, {"abc", "abc", true},
        {"x\nabc\r", "abc", true},  {"\r", NULL, true},   {"ab\r\r", "ab\r", true},
        {"x\r\n\r\n", NULL, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct log *got = log_new();
        struct cs_lineframe *fr = line_new(CS_FRAME_DEFAULT_CAP, got);
        const char *in = cases[i].in;
        assert_int_equal(cs_lineframe_feed(fr, (const uint8_t *)in, strlen(in), NULL), CS_FRAME_OK);
        size_t before = got->events;
        bool partial = !cases[i].partial;
        assert_int_equal(cs_lineframe_finish(fr, &partial), CS_FRAME_OK);
        assert_int_equal(partial, cases[i].partial);
        if (cases[i].line != NULL) {
            struct log *want = log_new();
            memcpy(want, got, sizeof *want);
            want->events = before;
            want->used = got->used - (5 + strlen(cases[i].line));
            expect_msg(want, cases[i].line);
            assert_same_log(got, want);
            free(want);
        } else {
            assert_int_equal(got->events, before);
        }
        /* finish resets: the parser is at the start of a new stream. */
        assert_int_equal(cs_lineframe_finish(fr, &partial), CS_FRAME_OK);
        assert_false(partial);
        line_free(fr);
        free(got);
    }
}

static void line_overlong(void **state)
{
    (void)state;
    struct log *got = log_new(), *want = log_new();
    expect_overlong(want);
    expect_msg(want, "ok");
    struct cs_lineframe *fr = line_new(16, got);
    /* 16 bytes: still a candidate line. */
    assert_int_equal(cs_lineframe_feed(fr, (const uint8_t *)"0123456789abcdef", 16, NULL),
                     CS_FRAME_OK);
    assert_int_equal(got->overlong, 0);
    /* The 17th byte makes it over-long, reported at once. */
    assert_int_equal(cs_lineframe_feed(fr, (const uint8_t *)"g", 1, NULL), CS_FRAME_OK);
    assert_int_equal(got->overlong, 1);
    assert_int_equal(fr->len, 0);
    assert_int_equal(cs_lineframe_feed(fr, (const uint8_t *)"hij\r\nok\n", 8, NULL), CS_FRAME_OK);
    assert_same_log(got, want);
    assert_true(fr->buf_cap <= 16);
    /* An over-long final line is not delivered at finish, but it was pending. */
    assert_int_equal(cs_lineframe_feed(fr, (const uint8_t *)"0123456789abcdefXYZ", 19, NULL),
                     CS_FRAME_OK);
    expect_overlong(want);
    bool partial = false;
    assert_int_equal(cs_lineframe_finish(fr, &partial), CS_FRAME_OK);
    assert_true(partial);
    assert_same_log(got, want);
    line_free(fr);
    free(got);
    free(want);
}

static void line_overlong_many_chunks(void **state)
{
    (void)state;
    enum { BIG = 100000 };
    uint8_t *big = malloc(BIG);
    assert_non_null(big);
    for (size_t i = 0; i < BIG; i++)
        big[i] = (i % 97 == 0) ? '\r' : (uint8_t)('a' + i % 26); /* stray CRs too */
    struct log *got = log_new(), *want = log_new();
    expect_msg(want, "before");
    expect_overlong(want);
    expect_msg(want, "next");
    struct cs_lineframe *fr = line_new(16, got);
    fr->realloc_fn = counting_realloc;
    alloc_calls = 0;
    assert_int_equal(cs_lineframe_feed(fr, (const uint8_t *)"before\n", 7, NULL), CS_FRAME_OK);
    for (size_t at = 0, step = 1; at < BIG; at += step, step = step % 13 + 1) {
        size_t n = at + step <= BIG ? step : BIG - at;
        assert_int_equal(cs_lineframe_feed(fr, big + at, n, NULL), CS_FRAME_OK);
        assert_true(fr->buf_cap <= 16);
        assert_true(fr->len <= 16);
    }
    assert_int_equal(got->overlong, 1);
    assert_int_equal(cs_lineframe_feed(fr, (const uint8_t *)"\r\nnext\n", 7, NULL), CS_FRAME_OK);
    assert_same_log(got, want);
    /* Bounded memory: one allocation of at most the cap, however long the line. */
    assert_true(alloc_calls <= 1);
    assert_true(fr->buf_cap <= 16);
    line_free(fr);
    free(got);
    free(want);
    free(big);
}

static void line_blank_skipped(void **state)
{
    (void)state;
    static const char s[] = "\n\n\r\n\na\n\n\r\n";
    struct log *got = log_new(), *want = log_new();
    expect_msg(want, "a");
    struct cs_lineframe *fr = line_new(CS_FRAME_DEFAULT_CAP, got);
    assert_int_equal(cs_lineframe_feed(fr, (const uint8_t *)s, strlen(s), NULL), CS_FRAME_OK);
    /* A line of one space is not blank. */
    assert_int_equal(cs_lineframe_feed(fr, (const uint8_t *)" \n", 2, NULL), CS_FRAME_OK);
    expect_msg(want, " ");
    assert_same_log(got, want);
    line_free(fr);
    free(got);
    free(want);
}

static void line_exact_cap(void **state)
{
    (void)state;
    static const char *const ins[] = {"0123456789abcdef\n", "0123456789abcdef\r\n",
                                      "0123456789abcdef"};
    for (size_t i = 0; i < 3; i++) {
        struct log *got = log_new(), *want = log_new();
        expect_msg(want, "0123456789abcdef");
        struct cs_lineframe *fr = line_new(16, got);
        assert_int_equal(cs_lineframe_feed(fr, (const uint8_t *)ins[i], strlen(ins[i]), NULL),
                         CS_FRAME_OK);
        assert_int_equal(cs_lineframe_finish(fr, NULL), CS_FRAME_OK);
        assert_same_log(got, want);
        assert_int_equal(got->overlong, 0);
        assert_int_equal(fr->buf_cap, 16);
        line_free(fr);
        free(got);
        free(want);
    }
}

static void line_stop(void **state)
{
    (void)state;
    const uint8_t *s = (const uint8_t *)line_mix;
    size_t n = strlen(line_mix);
    struct log *want = log_new();
    line_mix_expect(want);

    /* Stop on the first line: consumed ends right after its newline. */
    struct log *got = log_new();
    got->stop_at = 1;
    struct cs_lineframe *fr = line_new(16, got);
    size_t used = 0;
    assert_int_equal(cs_lineframe_feed(fr, s, n, &used), CS_FRAME_STOPPED);
    assert_int_equal(used, 2);
    line_free(fr);

    /* Stop on each event (lines and over-long reports), at every split point. */
    for (size_t k = 0; k <= n; k++) {
        for (size_t stop = 1; stop <= want->events; stop++) {
            memset(got, 0, sizeof *got);
            got->stop_at = stop;
            fr = line_new(16, got);
            assert_int_equal(line_feed_all(fr, s, k), CS_FRAME_OK);
            assert_int_equal(line_feed_all(fr, s + k, n - k), CS_FRAME_OK);
            enum cs_frame_status st = cs_lineframe_finish(fr, NULL);
            assert_int_equal(st, stop == want->events ? CS_FRAME_STOPPED : CS_FRAME_OK);
            assert_same_log(got, want);
            line_free(fr);
        }
    }
    free(got);
    free(want);
}

static void line_buffer_grows(void **state)
{
    (void)state;
    char line[1001];
    for (size_t i = 0; i < 1000; i++)
        line[i] = (char)('a' + i % 26);
    line[1000] = '\0';
    struct log *got = log_new(), *want = log_new();
    expect_msg(want, line);
    struct cs_lineframe *fr = line_new(CS_FRAME_DEFAULT_CAP, got);
    /* Buffered across three feeds: the buffer doubles from its minimum to fit. */
    assert_int_equal(cs_lineframe_feed(fr, (const uint8_t *)line, 100, NULL), CS_FRAME_OK);
    assert_int_equal(cs_lineframe_feed(fr, (const uint8_t *)line + 100, 900, NULL), CS_FRAME_OK);
    assert_int_equal(cs_lineframe_feed(fr, (const uint8_t *)"\n", 1, NULL), CS_FRAME_OK);
    assert_same_log(got, want);
    assert_int_equal(fr->buf_cap, 1024);
    line_free(fr);
    free(got);
    free(want);
}

static void line_nomem(void **state)
{
    (void)state;
    struct log *got = log_new();
    struct cs_lineframe *fr = line_new(16, got);
    fr->realloc_fn = failing_realloc;
    /* Blank lines need no buffer. */
    assert_int_equal(cs_lineframe_feed(fr, (const uint8_t *)"\n\r\n", 3, NULL), CS_FRAME_OK);
    assert_int_equal(cs_lineframe_feed(fr, (const uint8_t *)"ab\n", 3, NULL), CS_FRAME_ERR_NOMEM);
    assert_int_equal(cs_lineframe_feed(fr, (const uint8_t *)"cd\n", 3, NULL), CS_FRAME_ERR_NOMEM);
    bool partial = false;
    assert_int_equal(cs_lineframe_finish(fr, &partial), CS_FRAME_ERR_NOMEM);
    assert_int_equal(got->events, 0);
    line_free(fr);

    /* A lone CR that turns out to be text needs the buffer too. */
    fr = line_new(16, got);
    fr->realloc_fn = failing_realloc;
    assert_int_equal(cs_lineframe_feed(fr, (const uint8_t *)"\r\r", 2, NULL), CS_FRAME_ERR_NOMEM);
    line_free(fr);
    free(got);
}

static void line_init_args(void **state)
{
    (void)state;
    struct cs_lineframe fr, before;
    memset(&fr, 0x5a, sizeof fr);
    memcpy(&before, &fr, sizeof fr);
    assert_int_equal(cs_lineframe_init(&fr, 0, on_msg, on_overlong, NULL), CS_FRAME_ERR_ARG);
    assert_int_equal(cs_lineframe_init(&fr, SIZE_MAX, on_msg, on_overlong, NULL), CS_FRAME_ERR_ARG);
    assert_int_equal(cs_lineframe_init(&fr, 16, NULL, on_overlong, NULL), CS_FRAME_ERR_ARG);
    assert_int_equal(cs_lineframe_init(&fr, 16, on_msg, NULL, NULL), CS_FRAME_ERR_ARG);
    assert_int_equal(cs_lineframe_init(NULL, 16, on_msg, on_overlong, NULL), CS_FRAME_ERR_ARG);
    assert_memory_equal(&fr, &before, sizeof fr); /* untouched */
    cs_lineframe_fini(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(len_whole),
        cmocka_unit_test(len_split_everywhere),
        cmocka_unit_test(len_zero_is_fatal_and_sticky),
        cmocka_unit_test(len_too_large_before_alloc),
        cmocka_unit_test(len_exact_cap),
        cmocka_unit_test(len_stop),
        cmocka_unit_test(len_boundary),
        cmocka_unit_test(len_encode_header),
        cmocka_unit_test(len_nomem),
        cmocka_unit_test(len_init_args),
        cmocka_unit_test(status_strings),
        cmocka_unit_test(line_whole),
        cmocka_unit_test(line_split_everywhere),
        cmocka_unit_test(line_crlf),
        cmocka_unit_test(line_finish),
        cmocka_unit_test(line_overlong),
        cmocka_unit_test(line_overlong_many_chunks),
        cmocka_unit_test(line_blank_skipped),
        cmocka_unit_test(line_exact_cap),
        cmocka_unit_test(line_stop),
        cmocka_unit_test(line_buffer_grows),
        cmocka_unit_test(line_nomem),
        cmocka_unit_test(line_init_args),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
