/*
 * Transport framing: two resumable parsers (Ragel state machines) that cut a byte stream into
 * messages, plus the header encoder for the length-prefixed form.
 *   - lenframe: a 4-byte big-endian length, then that many bytes (runner wire protocol,
 *     docs/contract/runtime.md §4). A length of 0 or over the cap is a fatal stream error.
 *   - lineframe: newline-delimited lines (stdio JSON-RPC, docs/contract/runtime.md §3). An
 *     over-long line is reported once, skipped up to its newline without being buffered, and
 *     parsing goes on.
 * Trust: every input byte comes from an untrusted peer. Lengths are checked against the cap set
 * at init before anything is allocated; buffers never grow past the cap; bad input is a status
 * code, never an abort. The parsers do not validate UTF-8 or JSON: that is the caller's job.
 * Entry points: cs_lenframe_init/feed/finish/fini, cs_lenframe_encode_header,
 * cs_lineframe_init/feed/finish/fini, cs_frame_status_str. The state machines are described in
 * docs/transport.md.
 *
 * The structs are public so callers can embed them; their fields belong to the parser. A parser
 * is not thread-safe and its callbacks must not feed, finish or free the parser that calls them.
 */
#ifndef CS_TRANSPORT_FRAME_H
#define CS_TRANSPORT_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The default cap for one frame or line: 16 MiB (docs/contract/runtime.md sections 3 and 4). */
#define CS_FRAME_DEFAULT_CAP ((uint32_t)16777216)

/* Size of the length prefix of a lenframe frame. */
#define CS_LENFRAME_HEADER_SIZE 4

enum cs_frame_status {
    CS_FRAME_OK = 0,
    /* A callback returned non-zero. Not an error: the parser can be fed the rest. */
    CS_FRAME_STOPPED,
    /* Fatal: a length prefix of 0. */
    CS_FRAME_ERR_ZERO,
    /* Fatal: a length prefix over the cap (or, for the encoder, a length over the cap). */
    CS_FRAME_ERR_TOO_LARGE,
    /* Fatal: an allocation failed; the stream cannot be resynchronised. */
    CS_FRAME_ERR_NOMEM,
    /* The stream ended inside a frame (lenframe only). */
    CS_FRAME_ERR_TRUNCATED,
    /* Programmer error: an invalid argument (cap 0, missing callback). */
    CS_FRAME_ERR_ARG,
};

/* Returns a short English message for st: a static string, never NULL. */
const char *cs_frame_status_str(enum cs_frame_status st);

/*
 * Callbacks (the on_frame and on_line fields below) are called once per complete frame or line.
 * data is borrowed and valid only until the callback returns (it points into the parser's buffer
 * or into the caller's input); len is 1..cap. Return 0 to go on, non-zero to make the feed stop
 * right after this message with CS_FRAME_STOPPED. on_overlong (lineframe) works the same way.
 */

/* ---- lenframe: u32 big-endian length prefix ---- */

struct cs_lenframe {
    int cs;                   /* Ragel state */
    uint32_t cap;             /* largest accepted length */
    uint32_t len;             /* length prefix being read, then the current frame's length */
    uint32_t got;             /* body bytes buffered so far */
    uint8_t *buf;             /* body buffer: allocated only when a frame spans feeds */
    size_t buf_cap;           /* allocated size of buf, never more than cap */
    bool busy;                /* inside a callback (re-entry is a programmer error) */
    enum cs_frame_status err; /* sticky fatal error, CS_FRAME_OK while healthy */
    int (*on_frame)(void *arg, const uint8_t *data, size_t len);
    void *arg;
    /* Allocator seam: realloc by default; tests swap it (after init) to inject failures. It must
     * return memory that free() releases. */
    void *(*realloc_fn)(void *ptr, size_t size);
};

/*
 * Prepares fr to parse a new stream. cap is the largest frame length accepted (1..UINT32_MAX;
 * use CS_FRAME_DEFAULT_CAP). on_frame (required) gets every complete frame along with arg.
 * Allocates nothing. Returns CS_FRAME_OK, or CS_FRAME_ERR_ARG (fr is then untouched).
 * Release with cs_lenframe_fini().
 */
enum cs_frame_status cs_lenframe_init(struct cs_lenframe *fr, uint32_t cap,
                                      int (*on_frame)(void *arg, const uint8_t *data, size_t len),
                                      void *arg);

/* Frees the buffer of fr. Accepts NULL and a parser in any state; fr may be re-initialised. */
void cs_lenframe_fini(struct cs_lenframe *fr);

/*
 * Parses the next n bytes of the stream (any split is fine: state carries over between calls).
 * Delivers each complete frame to on_frame before returning. data is only read during the call.
 * Returns:
 *   CS_FRAME_OK       all n bytes consumed;
 *   CS_FRAME_STOPPED  on_frame returned non-zero; the bytes up to and including that frame
 *                     were consumed and the rest should be fed again later;
 *   CS_FRAME_ERR_ZERO, _TOO_LARGE, _NOMEM: fatal and sticky, every later feed returns it too.
 *                     A bad length is detected from the 4 header bytes, before any allocation.
 * If consumed is not NULL it receives the number of bytes used (n unless STOPPED; unspecified
 * after an error).
 */
enum cs_frame_status cs_lenframe_feed(struct cs_lenframe *fr, const uint8_t *data, size_t n,
                                      size_t *consumed);

/*
 * True when fr is between frames (no header or body byte pending) and has no error: EOF here is
 * a clean close.
 */
bool cs_lenframe_at_boundary(const struct cs_lenframe *fr);

/*
 * For EOF: returns CS_FRAME_OK when fr is between frames, CS_FRAME_ERR_TRUNCATED when the stream
 * ended inside a header or body, or the sticky error. Does not change fr.
 */
enum cs_frame_status cs_lenframe_finish(const struct cs_lenframe *fr);

/*
 * Writes the big-endian length prefix for a frame of len bytes into out. Returns CS_FRAME_OK, or
 * CS_FRAME_ERR_ZERO (len 0) or CS_FRAME_ERR_TOO_LARGE (len > cap); out is written only on
 * success.
 */
enum cs_frame_status cs_lenframe_encode_header(uint8_t out[static CS_LENFRAME_HEADER_SIZE],
                                               size_t len, uint32_t cap);

/* ---- lineframe: newline-delimited lines ---- */

struct cs_lineframe {
    int cs;                   /* Ragel state */
    size_t cap;               /* longest line accepted, without its "\n" or "\r\n" */
    uint8_t *buf;             /* the line being assembled */
    size_t len;               /* bytes in buf */
    size_t buf_cap;           /* allocated size of buf, never more than cap */
    bool busy;                /* inside a callback (re-entry is a programmer error) */
    enum cs_frame_status err; /* sticky fatal error, CS_FRAME_OK while healthy */
    int (*on_line)(void *arg, const uint8_t *data, size_t len);
    int (*on_overlong)(void *arg);
    void *arg;
    /* Allocator seam: realloc by default; tests swap it (after init) to inject failures. It must
     * return memory that free() releases. */
    void *(*realloc_fn)(void *ptr, size_t size);
};

/*
 * Prepares fr to parse a new stream of lines. A line is the bytes before a "\n", minus one
 * trailing "\r". Lines of up to cap bytes (1..SIZE_MAX/2; use CS_FRAME_DEFAULT_CAP) go to
 * on_line; empty lines (including a lone "\r") are skipped, never delivered. A longer line is
 * reported once to on_overlong as soon as its cap+1-th byte arrives; the rest of it is discarded
 * unbuffered up to its newline and parsing resumes after it. Both callbacks are required and get
 * arg. Allocates nothing. Returns CS_FRAME_OK or CS_FRAME_ERR_ARG (fr is then untouched).
 * Release with cs_lineframe_fini().
 */
enum cs_frame_status cs_lineframe_init(struct cs_lineframe *fr, size_t cap,
                                       int (*on_line)(void *arg, const uint8_t *data, size_t len),
                                       int (*on_overlong)(void *arg), void *arg);

/* Frees the buffer of fr. Accepts NULL and a parser in any state; fr may be re-initialised. */
void cs_lineframe_fini(struct cs_lineframe *fr);

/*
 * Parses the next n bytes of the stream (any split is fine). Delivers complete lines and
 * over-long reports before returning. data is only read during the call. Returns:
 *   CS_FRAME_OK       all n bytes consumed;
 *   CS_FRAME_STOPPED  a callback returned non-zero; the bytes up to and including the newline
 *                     of that line (or the byte that made a line over-long) were consumed and
 *                     the rest should be fed again later;
 *   CS_FRAME_ERR_NOMEM: fatal and sticky, every later feed returns it too.
 * If consumed is not NULL it receives the number of bytes used (n unless STOPPED; unspecified
 * after an error).
 */
enum cs_frame_status cs_lineframe_feed(struct cs_lineframe *fr, const uint8_t *data, size_t n,
                                       size_t *consumed);

/*
 * For EOF: delivers a final unterminated line, if any (not if it is empty or over-long), then
 * resets fr to the start of a new stream. If had_partial is not NULL it is set to whether any
 * bytes followed the last newline. Returns CS_FRAME_OK, CS_FRAME_STOPPED (on_line returned
 * non-zero for the final line) or the sticky error (nothing is delivered then).
 */
enum cs_frame_status cs_lineframe_finish(struct cs_lineframe *fr, bool *had_partial);

#endif
