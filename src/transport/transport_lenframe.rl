/*
 * Length-prefixed framing for the runner wire protocol (docs/contract/runtime.md §4): a 4-byte
 * big-endian length, then that many bytes. The Ragel grammar below is turned into
 * transport_lenframe.c in the build tree by ragel -G2 (never checked in).
 * Trust: every byte comes from an untrusted peer. A length is checked (1..cap) as soon as its
 * 4th byte arrives, before the body buffer is touched; the buffer grows with the bytes actually
 * received (doubling, never past cap) so a peer cannot make us reserve memory it does not send.
 * Entry points: cs_lenframe_* and cs_frame_status_str (see transport_frame.h).
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "transport_frame.h"

/* Smallest body buffer; it then doubles up to the cap. */
#define LENFRAME_MIN_BUF 256

/*
 * States: main reads the 4 header bytes into fr->len and checks the length; body takes the
 * body in runs (one action per feed, not per byte) and delivers the frame, then goes back to
 * main. EOF is clean only in main's start state (cs_lenframe_at_boundary).
 */
%%{
    machine lenframe;
    alphtype unsigned char;
    access fr->;

    action hdr_byte {
        fr->len = (fr->len << 8) | (uint32_t)fc;
    }

    action hdr_done {
        /* Checked here, on the 4th header byte: nothing has been allocated for this frame. */
        if (fr->len == 0) {
            fr->err = CS_FRAME_ERR_ZERO;
            fbreak;
        }
        if (fr->len > fr->cap) {
            fr->err = CS_FRAME_ERR_TOO_LARGE;
            fbreak;
        }
        fr->got = 0;
        fnext body;
    }

    action body_run {
        /* Take as much of the body as this input holds, then skip past it. */
        size_t need = (size_t)(fr->len - fr->got);
        size_t avail = (size_t)(pe - fpc);
        size_t take = need < avail ? need : avail;
        const uint8_t *frame = NULL;
        if (fr->got == 0 && take == need) {
            /* The whole body is in this input: deliver it from there, without a copy. */
            frame = fpc;
        } else {
            if (reserve(fr, (size_t)fr->got + take) != 0) {
                fr->err = CS_FRAME_ERR_NOMEM;
                fbreak;
            }
            memcpy(fr->buf + fr->got, fpc, take);
            fr->got += (uint32_t)take;
            if (fr->got == fr->len)
                frame = fr->buf;
        }
        fexec fpc + take;
        if (frame != NULL) {
            size_t flen = fr->len;
            fr->len = 0;
            fr->got = 0;
            fnext main;
            if (deliver(fr, frame, flen) != 0) {
                stopped = true;
                fbreak;
            }
        }
    }

    main := any{4} $hdr_byte @hdr_done;
    body := ( any @body_run )*;
}%%

%% write data;

const char *cs_frame_status_str(enum cs_frame_status st)
{
    switch (st) {
    case CS_FRAME_OK:
        return "ok";
    case CS_FRAME_STOPPED:
        return "stopped by the callback";
    case CS_FRAME_ERR_ZERO:
        return "frame length is zero";
    case CS_FRAME_ERR_TOO_LARGE:
        return "frame length exceeds the cap";
    case CS_FRAME_ERR_NOMEM:
        return "out of memory";
    case CS_FRAME_ERR_TRUNCATED:
        return "stream ended inside a frame";
    case CS_FRAME_ERR_ARG:
        return "invalid argument";
    }
    return "unknown frame status";
}

/* Makes room for need body bytes (need <= cap). Returns 0, or -1 if the allocation failed. */
static int reserve(struct cs_lenframe *fr, size_t need)
{
    if (need <= fr->buf_cap)
        return 0;
    size_t cap = fr->cap;
    size_t size = fr->buf_cap ? fr->buf_cap : LENFRAME_MIN_BUF;
    while (size < need && size <= cap / 2)
        size *= 2;
    if (size < need || size > cap)
        size = cap;
    uint8_t *nb = fr->realloc_fn(fr->buf, size);
    if (nb == NULL)
        return -1;
    fr->buf = nb;
    fr->buf_cap = size;
    return 0;
}

static int deliver(struct cs_lenframe *fr, const uint8_t *frame, size_t len)
{
    fr->busy = true;
    int rc = fr->on_frame(fr->arg, frame, len);
    fr->busy = false;
    return rc;
}

enum cs_frame_status cs_lenframe_init(struct cs_lenframe *fr, uint32_t cap,
                                      int (*on_frame)(void *arg, const uint8_t *data, size_t len),
                                      void *arg)
{
    if (fr == NULL || cap == 0 || on_frame == NULL)
        return CS_FRAME_ERR_ARG;
    memset(fr, 0, sizeof *fr);
    fr->cap = cap;
    fr->on_frame = on_frame;
    fr->arg = arg;
    fr->realloc_fn = realloc;
    fr->err = CS_FRAME_OK;
    %% write init;
    return CS_FRAME_OK;
}

void cs_lenframe_fini(struct cs_lenframe *fr)
{
    if (fr == NULL)
        return;
    free(fr->buf);
    fr->buf = NULL;
    fr->buf_cap = 0;
}

enum cs_frame_status cs_lenframe_feed(struct cs_lenframe *fr, const uint8_t *data, size_t n,
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
        fr->cs = lenframe_error;
        return fr->err;
    }
    return stopped ? CS_FRAME_STOPPED : CS_FRAME_OK;
}

bool cs_lenframe_at_boundary(const struct cs_lenframe *fr)
{
    return fr->err == CS_FRAME_OK && fr->cs == lenframe_start;
}

enum cs_frame_status cs_lenframe_finish(const struct cs_lenframe *fr)
{
    if (fr->err != CS_FRAME_OK)
        return fr->err;
    return fr->cs == lenframe_start ? CS_FRAME_OK : CS_FRAME_ERR_TRUNCATED;
}

enum cs_frame_status cs_lenframe_encode_header(uint8_t out[static CS_LENFRAME_HEADER_SIZE],
                                               size_t len, uint32_t cap)
{
    if (len == 0)
        return CS_FRAME_ERR_ZERO;
    if (len > cap)
        return CS_FRAME_ERR_TOO_LARGE;
    out[0] = (uint8_t)(len >> 24);
    out[1] = (uint8_t)(len >> 16);
    out[2] = (uint8_t)(len >> 8);
    out[3] = (uint8_t)len;
    return CS_FRAME_OK;
}
