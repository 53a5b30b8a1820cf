/*
 * runner_conn: the runner wire protocol's transport on the loop: frames in through the Ragel
 * length-prefix framer (a length of 0 or over 16 MiB is fatal), each frame parsed as JSON and
 * decoded by the generated csw_runner_wire decoder; frames out queued and written as the socket
 * accepts them.
 *
 * Trust: every byte read comes from the peer. The framer checks lengths before allocating, and
 * a frame that is not a valid message is reported (bad) and ends the connection.
 * Entry points: runner.h (cs_runner_conn_*).
 */
#include "runner.h"

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base_json.h"
#include "base_json_fast.h"
#include "transport_frame.h"

/* After a frame this large, free memory is handed back (malloc_trim). */
#define TRIM_AFTER ((size_t)1024 * 1024)

struct cs_runner_conn {
    struct cs_loop *loop;
    int fd;
    struct cs_loop_fd *w;
    struct cs_lenframe fr;
    struct cs_runner_conn_callbacks cb;
    uint8_t *out;
    size_t out_n, out_off, out_cap;
    bool closing, closed_reported, in_frame, flush_queued, busy_poll, expect_answer;
    char *why; /* the close reason, whole (owned); NULL before the close or on OOM */
};

static void flush_turn(void *arg);
static void sent_all(struct cs_runner_conn *c);

static void report_closed(void *arg)
{
    struct cs_runner_conn *c = arg;
    if (c->closed_reported)
        return;
    c->closed_reported = true;
    c->cb.closed(c->cb.arg, c->why ? c->why : "closed (no memory for the reason)");
}

void cs_runner_conn_close(struct cs_runner_conn *c, const char *why)
{
    if (c->closing)
        return;
    c->closing = true;
    /* A copy, not a fixed buffer: the reasons composed here (a decoder diagnostic is up to
     * 514 bytes) and by callers are reported whole, never cut. */
    c->why = strdup(why);
    cs_loop_fd_del(c->w);
    c->w = NULL;
    if (cs_loop_defer(c->loop, report_closed, c) != 0)
        report_closed(c);
}

static int on_frame(void *arg, const uint8_t *data, size_t len)
{
    struct cs_runner_conn *c = arg;
    if (c->closing)
        return 1;
    json_error_t jerr;
    /* The peer's frame is parsed within the parse budget (M8): a frame of a million empty
     * arrays is a bad frame, not 130 MB of tree. */
    json_t *j = cs_json_loadb_peer((const char *)data, len, JSON_ALLOW_NUL, &jerr);
    if (!j) {
        char why[CS_DIAG_TEXT_SIZE];
        cs_diag_format(why, sizeof why, "frame is not JSON: %s", jerr.text);
        c->cb.bad(c->cb.arg, NULL, why);
        cs_runner_conn_close(c, why);
        return 1;
    }
    struct csw_runner_wire msg;
    struct cs_wire_diag diag;
    if (csw_runner_wire_decode(j, &msg, &diag) != CS_WIRE_OK) {
        char why[CS_DIAG_TEXT_SIZE];
        cs_diag_format(why, sizeof why, "%s: %s", diag.pointer[0] ? diag.pointer : "/", diag.text);
        c->cb.bad(c->cb.arg, j, why);
        json_decref(j);
        cs_runner_conn_close(c, why);
        return 1;
    }
    json_decref(j);
    c->cb.message(c->cb.arg, &msg);
    csw_runner_wire_free(&msg);
    if (len >= TRIM_AFTER)
        (void)malloc_trim(0); /* a large frame's tree goes back to the system */
    return c->closing ? 1 : 0;
}

static int write_some(struct cs_runner_conn *c)
{
    while (c->out_off < c->out_n) {
        ssize_t w = write(c->fd, c->out + c->out_off, c->out_n - c->out_off);
        if (w > 0) {
            c->out_off += (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN)
            return 0;
        return -1;
    }
    c->out_n = c->out_off = 0;
    return 0;
}

static void on_ready(void *arg, int fd, unsigned events)
{
    struct cs_runner_conn *c = arg;
    if (events & CS_LOOP_WRITE) {
        if (write_some(c) != 0) {
            cs_runner_conn_close(c, "write to the peer failed");
            return;
        }
        if (c->out_n == 0 && c->w) {
            cs_loop_fd_mod(c->w, CS_LOOP_READ);
            sent_all(c);
        }
    }
    if (!(events & (CS_LOOP_READ | CS_LOOP_ERROR)))
        return;
    uint8_t buf[65536];
    for (int i = 0; i < 16 && !c->closing; i++) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n > 0) {
            enum cs_frame_status st = cs_lenframe_feed(&c->fr, buf, (size_t)n, NULL);
            if (st != CS_FRAME_OK && st != CS_FRAME_STOPPED) {
                char why[CS_DIAG_TEXT_SIZE];
                cs_diag_format(why, sizeof why, "bad frame: %s", cs_frame_status_str(st));
                c->cb.bad(c->cb.arg, NULL, why);
                cs_runner_conn_close(c, why);
            }
            /* A short read drained the socket: the level-triggered loop calls again when more
             * arrives, so no read is spent on EAGAIN. */
            if ((size_t)n < sizeof buf)
                return;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return;
        enum cs_frame_status st = cs_lenframe_finish(&c->fr);
        cs_runner_conn_close(c, n == 0 && st == CS_FRAME_OK ? "closed by the peer"
                                : n == 0                    ? "the peer closed inside a frame"
                                                            : "read from the peer failed");
        return;
    }
}

struct cs_runner_conn *cs_runner_conn_new(struct cs_loop *loop, int fd,
                                          const struct cs_runner_conn_callbacks *cb)
{
    struct cs_runner_conn *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->loop = loop;
    c->fd = fd;
    c->cb = *cb;
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0 ||
        cs_lenframe_init(&c->fr, CS_FRAME_DEFAULT_CAP, on_frame, c) != CS_FRAME_OK) {
        free(c);
        return NULL;
    }
    c->w = cs_loop_fd_add(loop, fd, CS_LOOP_READ, on_ready, c);
    if (!c->w) {
        cs_lenframe_fini(&c->fr);
        free(c);
        return NULL;
    }
    return c;
}

void cs_runner_conn_busy_poll(struct cs_runner_conn *c, bool on)
{
    c->busy_poll = on;
}

void cs_runner_conn_expect_answer(struct cs_runner_conn *c)
{
    c->expect_answer = true;
}

void cs_runner_conn_free(struct cs_runner_conn *c)
{
    if (!c)
        return;
    cs_loop_defer_cancel(c->loop, report_closed, c);
    cs_loop_defer_cancel(c->loop, flush_turn, c);
    cs_loop_fd_del(c->w);
    cs_lenframe_fini(&c->fr);
    close(c->fd);
    free(c->out);
    free(c->why);
    free(c);
}

/* The end of a loop turn: everything queued during it leaves in one write (a response and the
 * event before it, several answers), so the peer wakes once. */
/* Everything queued has left: the peer answers a quick request within microseconds, and a
 * gateway sends its next one as soon as its client does, so the loop polls for it before it
 * sleeps (base_loop.h). The flag is the request's just written, never a later one's. */
static void sent_all(struct cs_runner_conn *c)
{
    if (c->busy_poll || c->expect_answer)
        cs_loop_expect(c->loop);
    c->expect_answer = false;
}

static void flush_turn(void *arg)
{
    struct cs_runner_conn *c = arg;
    c->flush_queued = false;
    if (c->closing || c->out_n == c->out_off) {
        c->expect_answer = false;
        return;
    }
    if (write_some(c) != 0) {
        cs_runner_conn_close(c, "write to the peer failed");
        return;
    }
    if (c->out_n > 0 && c->w)
        cs_loop_fd_mod(c->w, CS_LOOP_READ | CS_LOOP_WRITE);
    else
        sent_all(c);
}

int cs_runner_conn_send_text(struct cs_runner_conn *c, const char *text, size_t len)
{
    uint8_t hdr[CS_LENFRAME_HEADER_SIZE];
    if (c->closing || cs_lenframe_encode_header(hdr, len, CS_FRAME_DEFAULT_CAP) != CS_FRAME_OK)
        return -1;
    size_t need = c->out_n + sizeof hdr + len;
    if (need > c->out_cap) {
        size_t cap = c->out_cap ? c->out_cap : 4096;
        while (cap < need)
            cap *= 2;
        uint8_t *nb = realloc(c->out, cap);
        if (!nb)
            return -1;
        c->out = nb;
        c->out_cap = cap;
    }
    bool was_empty = c->out_n == c->out_off;
    memcpy(c->out + c->out_n, hdr, sizeof hdr);
    memcpy(c->out + c->out_n + sizeof hdr, text, len);
    c->out_n += sizeof hdr + len;
    if (was_empty && !c->flush_queued) {
        if (cs_loop_defer(c->loop, flush_turn, c) == 0)
            c->flush_queued = true;
        else
            flush_turn(c); /* no memory to defer: write now */
    }
    return 0;
}

int cs_runner_conn_send(struct cs_runner_conn *c, const struct csw_runner_wire *msg)
{
    char *text = NULL;
    size_t n = 0;
    struct cs_wire_diag diag;
    if (csw_runner_wire_encode_text(msg, &text, &n, &diag) != CS_WIRE_OK)
        return -1;
    int rc = cs_runner_conn_send_text(c, text, n);
    cs_wire_release(text);
    return rc;
}

int cs_runner_conn_flush(struct cs_runner_conn *c, int ms)
{
    int64_t end = cs_loop_now_ms() + ms;
    while (c->out_n > c->out_off) {
        if (write_some(c) != 0)
            return -1;
        if (c->out_n == 0)
            break;
        int64_t left = end - cs_loop_now_ms();
        if (left <= 0)
            return -1;
        struct pollfd p = {.fd = c->fd, .events = POLLOUT};
        (void)poll(&p, 1, (int)left);
    }
    return 0;
}
