/*
 * transport_stdio: newline-delimited messages on a pair of file descriptors, on the event loop
 * (docs/contract/runtime.md §3, stdio). Input is cut into lines by the Ragel line framer; an
 * over-long line is reported and skipped without being buffered. Output lines are queued and
 * written without blocking the loop; nothing but what the caller queues is ever written to out_fd.
 * Backpressure: while more than 32 MiB of output waits, input is not read.
 *
 * Trust: input bytes come from the client and are untrusted; they only pass through the framer.
 * Entry points: cs_stdio_new, cs_stdio_write_line, cs_stdio_free.
 */
#ifndef CS_TRANSPORT_STDIO_H
#define CS_TRANSPORT_STDIO_H

#include <stddef.h>
#include <stdint.h>

#include "base_loop.h"

struct cs_stdio;

struct cs_stdio_callbacks {
    /* One complete line (without its newline), borrowed for the duration of the call. */
    void (*on_line)(void *arg, const uint8_t *data, size_t len);
    /* A line over the cap was seen and is being skipped. */
    void (*on_overlong)(void *arg);
    /* Input reached EOF or failed, or the output is broken (the client stopped reading): the
     * peer is gone. Called once, after the last on_line; it must not free the transport. */
    void (*on_eof)(void *arg);
    void *arg;
};

/* Starts reading in_fd and writing out_fd (both borrowed; set non-blocking). cap: the line
 * cap (16 MiB in the server). Returns NULL on failure. */
struct cs_stdio *cs_stdio_new(struct cs_loop *loop, int in_fd, int out_fd, size_t cap,
                              const struct cs_stdio_callbacks *cb);

/* Queues len bytes (which must not contain a newline) plus a newline. Returns 0, or -1 when
 * out of memory or the output is broken (the line is dropped). */
int cs_stdio_write_line(struct cs_stdio *io, const char *data, size_t len);

/* Bytes queued and not yet written. */
size_t cs_stdio_pending_output(const struct cs_stdio *io);

/* Stops watching both fds and frees io (queued output that could not be written is dropped;
 * call cs_stdio_flush first to write it). Accepts NULL. */
void cs_stdio_free(struct cs_stdio *io);

/* Writes queued output, blocking up to timeout_ms. Returns 0 when everything was written. */
int cs_stdio_flush(struct cs_stdio *io, int timeout_ms);

#endif
