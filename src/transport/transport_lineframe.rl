/*
 * Newline-delimited framing for stdio JSON-RPC (docs/contract/runtime.md §3): a message a line, the
 * line being the bytes before "\n" minus one trailing "\r"; empty lines are skipped. The Ragel
 * grammar below is turned into transport_lineframe.c in the build tree by ragel -G2.
 * Trust: every byte comes from an untrusted peer. A line is buffered only up to the cap set at
 * init; the byte that would take it past the cap makes it over-long, which is reported once and
 * then discarded unbuffered up to its newline, so memory stays bounded by the cap whatever the
 * peer sends.
 * Entry points: cs_lineframe_* (see transport_frame.h).
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "transport_frame.h"

/* Smallest line buffer; it then doubles up to the cap. */
#define LINEFRAME_MIN_BUF 256
/* A buffer grown past this for one line is freed once the line is handled. */
#define LINEFRAME_KEEP_BUF ((size_t)1024 * 1024)

/*
 * States: main is a two-state chart. In start, runs of text are appended to the line (one action
 * per run, not per byte), "\n" ends the line and "\r" moves to cr, which holds that "\r" back:
 * if "\n" follows, the line ends without it; anything else appends it and goes on. The held "\r"
 * is never counted against the cap, so a line of exactly cap bytes is accepted with "\n" or
 * "\r\n". skip discards an over-long line up to its "\n", then returns to main.
 */
%%{
    machine lineframe;
    alphtype unsigned char;
    access fr->;

    action run {
        size_t take = text_span(fpc, pe);
        int r = append(fr, fpc, take);
        fexec fpc + take;
        if (r < 0) {
            fr->err = CS_FRAME_ERR_NOMEM;
            fbreak;
        }
        if (r > 0) {
            fnext skip;
            if (overlong(fr) != 0) {
                stopped = true;
                fbreak;
            }
        }
    }

    action add_cr {
        /* The held "\r" is not at the end of the line after all: it is text. */
        static const uint8_t cr = '\r';
        int r = append(fr, &cr, 1);
        if (r < 0) {
            fr->err = CS_FRAME_ERR_NOMEM;
            fbreak;
        }
        if (r > 0) {
            /* Jump now: the run action that may follow on this transition must not run. */
            if (overlong(fr) != 0) {
                stopped = true;
                fnext skip;
                fbreak;
            }
            fgoto skip;
        }
    }

    action eol {
        if (fr->len > 0) {
            size_t len = fr->len;
            fr->len = 0;
            if (deliver(fr, len) != 0) {
                stopped = true;
                fbreak;
            }
        }
    }

    action skip_run {
        /* Over-long: discard everything up to the newline without buffering it. */
        const uint8_t *nl = memchr(fpc, '\n', (size_t)(pe - fpc));
        fexec nl != NULL ? nl : pe;
    }

    action skip_end {
        fnext main;
    }

    text = any - [\r\n];

    main := (
        start: (
            text @run -> start |
            '\r' -> cr |
            '\n' @eol -> start
        ),
        cr: (
            text @add_cr @run -> start |
            '\r' @add_cr -> cr |
            '\n' @eol -> start
        )
    );

    skip := ( (any - '\n') @skip_run )* '\n' @skip_end;
}%%

%% write data;

/* Returns the number of bytes from p before the first "\r" or "\n" (or pe). */
static size_t text_span(const uint8_t *p, const uint8_t *pe)
{
    size_t n = (size_t)(pe - p);
    const uint8_t *nl = memchr(p, '\n', n);
    if (nl != NULL)
        n = (size_t)(nl - p);
    const uint8_t *cr = memchr(p, '\r', n);
    if (cr != NULL)
        n = (size_t)(cr - p);
    return n;
}

/*
 * Appends n bytes to the line. Returns 0, 1 if the line would exceed the cap (then the line is
 * dropped and nothing is copied), or -1 if the allocation failed.
 */
static int append(struct cs_lineframe *fr, const uint8_t *src, size_t n)
{
    if (n > fr->cap - fr->len) {
        fr->len = 0;
        return 1;
    }
    size_t need = fr->len + n;
    if (need > fr->buf_cap) {
        size_t size = fr->buf_cap ? fr->buf_cap : LINEFRAME_MIN_BUF;
        while (size < need && size <= fr->cap / 2)
            size *= 2;
        if (size < need || size > fr->cap)
            size = fr->cap;
        uint8_t *nb = fr->realloc_fn(fr->buf, size);
        if (nb == NULL)
            return -1;
        fr->buf = nb;
        fr->buf_cap = size;
    }
    memcpy(fr->buf + fr->len, src, n);
    fr->len = need;
    return 0;
}

/* Hands the first len bytes of the buffer to on_line. */
static int deliver(struct cs_lineframe *fr, size_t len)
{
    fr->busy = true;
    int rc = fr->on_line(fr->arg, fr->buf, len);
    fr->busy = false;
    if (fr->buf_cap > LINEFRAME_KEEP_BUF && fr->len == 0) {
        /* One large line must not keep its buffer (up to the cap) resident for good. */
        free(fr->buf);
        fr->buf = NULL;
        fr->buf_cap = 0;
    }
    return rc;
}

static int overlong(struct cs_lineframe *fr)
{
    fr->busy = true;
    int rc = fr->on_overlong(fr->arg);
    fr->busy = false;
    return rc;
}

enum cs_frame_status cs_lineframe_init(struct cs_lineframe *fr, size_t cap,
                                       int (*on_line)(void *arg, const uint8_t *data, size_t len),
                                       int (*on_overlong)(void *arg), void *arg)
{
    if (fr == NULL || cap == 0 || cap > SIZE_MAX / 2 || on_line == NULL || on_overlong == NULL)
        return CS_FRAME_ERR_ARG;
    memset(fr, 0, sizeof *fr);
    fr->cap = cap;
    fr->on_line = on_line;
    fr->on_overlong = on_overlong;
    fr->arg = arg;
    fr->realloc_fn = realloc;
    fr->err = CS_FRAME_OK;
    %% write init;
    return CS_FRAME_OK;
}

void cs_lineframe_fini(struct cs_lineframe *fr)
{
    if (fr == NULL)
        return;
    free(fr->buf);
    fr->buf = NULL;
    fr->buf_cap = 0;
    fr->len = 0;
}

enum cs_frame_status cs_lineframe_feed(struct cs_lineframe *fr, const uint8_t *data, size_t n,
                                       size_t *consumed)
{
    assert(fr != NULL);
    assert(!fr->busy); /* a callback fed its own parser */
    if (consumed != NULL)
        *consumed = 0;
    if (fr->err != CS_FRAME_OK)
        return fr->err;
    if (n == 0)
        return CS_FRAME_OK;
    assert(data != NULL);

    const uint8_t *p = data;
    const uint8_t *pe = data + n;
    bool stopped = false;
    %% write exec;

    if (consumed != NULL)
        *consumed = (size_t)(p - data);
    if (fr->err != CS_FRAME_OK) {
        /* Fatal: park the machine in Ragel's error state so nothing resumes. */
        fr->cs = lineframe_error;
        return fr->err;
    }
    return stopped ? CS_FRAME_STOPPED : CS_FRAME_OK;
}

enum cs_frame_status cs_lineframe_finish(struct cs_lineframe *fr, bool *had_partial)
{
    assert(fr != NULL);
    assert(!fr->busy); /* a callback finished its own parser */
    if (fr->err != CS_FRAME_OK)
        return fr->err;
    /* In start or cr the line so far is buf[0..len) (a held "\r" is dropped); in skip it was
     * over-long and has been reported already. */
    bool partial = fr->cs != lineframe_start || fr->len > 0;
    size_t len = fr->cs == lineframe_en_skip ? 0 : fr->len;
    fr->len = 0;
    fr->cs = lineframe_start;
    if (had_partial != NULL)
        *had_partial = partial;
    if (len > 0 && deliver(fr, len) != 0)
        return CS_FRAME_STOPPED;
    return CS_FRAME_OK;
}
