/*
 * transport_stdio: line transport on the event loop (see transport_stdio.h).
 * Trust: input is untrusted and only reaches the caller through the line framer, which bounds
 * memory by the cap. Output is a queue of whole lines written as the fd accepts them.
 */
#include "transport_stdio.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "transport_frame.h"

/* Output backpressure: a client that writes but never reads must not grow our memory without
 * bound. Above HIGH_WATER queued bytes we stop reading input until the queue drains below
 * LOW_WATER. */
#define HIGH_WATER (32u * 1024u * 1024u)
#define LOW_WATER  (1u * 1024u * 1024u)

struct cs_stdio {
    struct cs_loop *loop;
    int in_fd, out_fd;
    struct cs_loop_fd *in_w, *out_w;
    struct cs_lineframe fr;
    struct cs_stdio_callbacks cb;
    bool eof;
    bool broken;   /* writing failed: drop further output */
    bool pollable; /* in_fd works with epoll (else pump() reads it from deferred calls) */
    bool paused;   /* input paused for backpressure */
    bool flushing; /* a deferred drain() is pending: one turn's lines leave in one write */
    int in_flags, out_flags; /* the descriptions' flags before we set O_NONBLOCK */
    char *out;               /* queued output */
    size_t out_len, out_off, out_cap;
};

static int line_cb(void *arg, const uint8_t *data, size_t len)
{
    struct cs_stdio *io = arg;
    io->cb.on_line(io->cb.arg, data, len);
    return 0;
}

static int overlong_cb(void *arg)
{
    struct cs_stdio *io = arg;
    io->cb.on_overlong(io->cb.arg);
    return 0;
}

/* Sets O_NONBLOCK and returns the previous flags (-1 if unknown), to restore at the end: the
 * open file description may be shared (a terminal, stderr). */
static int set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    return fl;
}

static void pump(void *arg);

static void at_eof(struct cs_stdio *io)
{
    if (io->eof)
        return;
    io->eof = true;
    cs_loop_fd_del(io->in_w);
    io->in_w = NULL;
    cs_loop_defer_cancel(io->loop, pump, io);
    bool partial = false;
    cs_lineframe_finish(&io->fr, &partial); /* delivers a last unterminated line */
    io->cb.on_eof(io->cb.arg);
}

static void on_input(void *arg, int fd, unsigned events)
{
    struct cs_stdio *io = arg;
    (void)events;
    uint8_t buf[65536];
    /* A bounded number of reads per turn keeps other work (timers, HTTP) moving. */
    for (int round = 0; round < 16 && !io->eof && !io->paused; round++) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n > 0) {
            if (cs_lineframe_feed(&io->fr, buf, (size_t)n, NULL) != CS_FRAME_OK) {
                at_eof(io); /* out of memory in the framer: stop reading */
                return;
            }
            /* A short read drained the pipe: the level-triggered loop calls again when more
             * comes (a regular file's pump, next turn), so no read is spent on EAGAIN. */
            if ((size_t)n < sizeof buf)
                return;
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        at_eof(io); /* 0: EOF; other errors end the input as well */
        return;
    }
}

static void on_output(void *arg, int fd, unsigned events);

/* Input that epoll cannot watch (a regular file): read some now, come back next turn. */
static void pump(void *arg)
{
    struct cs_stdio *io = arg;
    on_input(io, io->in_fd, CS_LOOP_READ);
    if (!io->eof && !io->paused && cs_loop_defer(io->loop, pump, io) != 0)
        at_eof(io); /* out of memory: stop reading rather than hang */
}

/* Stops or restarts reading input for backpressure. */
static void pause_input(struct cs_stdio *io, bool pause)
{
    if (io->eof || io->paused == pause)
        return;
    io->paused = pause;
    if (pause) {
        cs_loop_fd_del(io->in_w);
        io->in_w = NULL;
        cs_loop_defer_cancel(io->loop, pump, io);
        return;
    }
    if (io->pollable)
        io->in_w = cs_loop_fd_add(io->loop, io->in_fd, CS_LOOP_READ, on_input, io);
    if (!io->pollable || !io->in_w) {
        if (io->pollable || cs_loop_defer(io->loop, pump, io) != 0)
            at_eof(io);
    }
}

/* Writes what the fd accepts now; watches the fd for writability while output remains. */
static void drain(struct cs_stdio *io)
{
    while (io->out_off < io->out_len && !io->broken) {
        ssize_t n = write(io->out_fd, io->out + io->out_off, io->out_len - io->out_off);
        if (n > 0) {
            io->out_off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            break;
        io->broken = true; /* EPIPE and friends: the client is gone */
    }
    if (io->out_off == io->out_len || io->broken)
        io->out_off = io->out_len = 0;
    size_t pending = io->out_len - io->out_off;
    if (io->broken)
        at_eof(io); /* the client stopped reading for good: treat it as gone */
    else if (pending > HIGH_WATER)
        pause_input(io, true);
    else if (pending < LOW_WATER)
        pause_input(io, false);
    bool want = pending > 0;
    if (want && !io->out_w)
        io->out_w = cs_loop_fd_add(io->loop, io->out_fd, CS_LOOP_WRITE, on_output, io);
    if (!want && io->out_w) {
        cs_loop_fd_del(io->out_w);
        io->out_w = NULL;
    }
}

static void deferred_drain(void *arg)
{
    struct cs_stdio *io = arg;
    io->flushing = false;
    drain(io);
}

static void on_output(void *arg, int fd, unsigned events)
{
    struct cs_stdio *io = arg;
    (void)fd;
    if (events & CS_LOOP_ERROR)
        io->broken = true;
    drain(io);
}

int cs_stdio_write_line(struct cs_stdio *io, const char *data, size_t len)
{
    if (io->broken)
        return -1;
    if (io->out_off > 0 && io->out_off == io->out_len)
        io->out_off = io->out_len = 0;
    size_t need = io->out_len + len + 1;
    if (need < len)
        return -1;
    if (need > io->out_cap) {
        /* Compact first: bytes before out_off are written already. */
        if (io->out_off > 0) {
            memmove(io->out, io->out + io->out_off, io->out_len - io->out_off);
            io->out_len -= io->out_off;
            io->out_off = 0;
            need = io->out_len + len + 1;
        }
        if (need > io->out_cap) {
            size_t cap = io->out_cap ? io->out_cap : 65536;
            while (cap < need)
                cap *= 2;
            char *nb = realloc(io->out, cap);
            if (!nb)
                return -1;
            io->out = nb;
            io->out_cap = cap;
        }
    }
    memcpy(io->out + io->out_len, data, len);
    io->out[io->out_len + len] = '\n';
    io->out_len += len + 1;
    /* Write at the end of this loop turn, so the replies to every request read in one turn
     * leave in one write(2); when the fd is full, on_output drains instead. */
    if (!io->flushing && !io->out_w) {
        if (cs_loop_defer(io->loop, deferred_drain, io) == 0)
            io->flushing = true;
        else
            drain(io);
    }
    return io->broken ? -1 : 0;
}

size_t cs_stdio_pending_output(const struct cs_stdio *io)
{
    return io->out_len - io->out_off;
}

int cs_stdio_flush(struct cs_stdio *io, int timeout_ms)
{
    int64_t until = cs_loop_now_ms() + timeout_ms;
    while (cs_stdio_pending_output(io) > 0 && !io->broken) {
        int64_t left = until - cs_loop_now_ms();
        if (left <= 0)
            return -1;
        struct pollfd p = {.fd = io->out_fd, .events = POLLOUT};
        if (poll(&p, 1, (int)left) < 0 && errno != EINTR)
            return -1;
        drain(io);
    }
    return cs_stdio_pending_output(io) == 0 && !io->broken ? 0 : -1;
}

struct cs_stdio *cs_stdio_new(struct cs_loop *loop, int in_fd, int out_fd, size_t cap,
                              const struct cs_stdio_callbacks *cb)
{
    struct cs_stdio *io = calloc(1, sizeof *io);
    if (!io)
        return NULL;
    io->loop = loop;
    io->in_fd = in_fd;
    io->out_fd = out_fd;
    io->cb = *cb;
    if (cs_lineframe_init(&io->fr, cap, line_cb, overlong_cb, io) != CS_FRAME_OK) {
        free(io);
        return NULL;
    }
    io->in_flags = set_nonblock(in_fd);
    io->out_flags = set_nonblock(out_fd);
    io->pollable = true;
    io->in_w = cs_loop_fd_add(loop, in_fd, CS_LOOP_READ, on_input, io);
    if (!io->in_w) {
        /* A regular file or /dev/null cannot be polled (EPERM): it never blocks, so pump it
         * from deferred calls instead, a bounded amount per turn. */
        io->pollable = false;
        if (errno != EPERM || cs_loop_defer(loop, pump, io) != 0) {
            cs_stdio_free(io);
            return NULL;
        }
    }
    return io;
}

void cs_stdio_free(struct cs_stdio *io)
{
    if (!io)
        return;
    cs_loop_fd_del(io->in_w);
    cs_loop_fd_del(io->out_w);
    cs_loop_defer_cancel(io->loop, pump, io);
    cs_loop_defer_cancel(io->loop, deferred_drain, io);
    cs_lineframe_fini(&io->fr);
    /* Give the shared open file descriptions back as we found them. */
    if (io->in_flags >= 0)
        fcntl(io->in_fd, F_SETFL, io->in_flags);
    if (io->out_flags >= 0)
        fcntl(io->out_fd, F_SETFL, io->out_flags);
    free(io->out);
    free(io);
}
