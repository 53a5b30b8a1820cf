/*
 * libFuzzer harness for the runner wire protocol as its two peers read it (docs/contract/runtime.md
 * §4): frames in, frames out. Input: a byte stream, cut by the u32 big-endian length-prefix framer
 * (cs_lenframe, cap 16 MiB) exactly as the gateway and codespace-runtime cut their socket
 * streams. Each frame is parsed as JSON (JSON_ALLOW_NUL, as the servers parse) and decoded with
 * the generated envelope decoder (csw_runner_wire, discriminated by "kind"); what decodes is
 * re-encoded with the text encoder the peers send with (csw_runner_wire_encode_text) and framed
 * again into an output stream, which is then cut by a second framer in small input-chosen chunks
 * and decoded again, parsed as the peers parse a frame (cs_json_loadb_peer: the parse budget,
 * then the fast path of base_json_fast.c), which must give jansson's own tree.
 * Trust: the input is arbitrary. Invariants asserted (docs/security-model.md, wire and framing
 * invariants): nothing crashes or leaks; every rejection carries a diagnostic; the envelope
 * decoder agrees with the per-kind decoders (runner_request / runner_response / runner_event:
 * exactly the branch it picked decodes, none when it refuses) and both encode the same JSON;
 * the text encoder writes byte for byte json_dumps(JSON_COMPACT) of the tree encoder's value;
 * what decodes re-encodes and frames (length 1..cap); the output stream parses into exactly
 * as many frames, each decoding to the same JSON (round trip is stable), with a clean end.
 * Entry point: LLVMFuzzerTestOneInput.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base_json_fast.h"
#include "csw.h"
#include "transport_frame.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(bool ok)
{
    if (!ok)
        abort();
}

struct out_stream {
    uint8_t *buf; /* re-framed output: header + compact JSON, frame after frame */
    size_t used;
    size_t size;
    json_t *encoded; /* array: the encoding of every frame that decoded, in order */
    size_t frames_in;
    size_t checked; /* second pass: frames compared so far */
};

static void out_append(struct out_stream *o, const void *p, size_t n)
{
    if (o->size - o->used < n) {
        size_t size = o->size ? o->size : 512;
        while (size - o->used < n)
            size *= 2;
        uint8_t *nb = realloc(o->buf, size);
        check(nb != NULL);
        o->buf = nb;
        o->size = size;
    }
    memcpy(o->buf + o->used, p, n);
    o->used += n;
}

/* The per-kind decoders, in the order of enum csw_runner_wire_tag. */
static const struct cs_wire_type *const kinds[3] = {
    &csw_runner_request_type,
    &csw_runner_response_type,
    &csw_runner_event_type,
};

/* Decodes j as the envelope; on success returns its encoding (new reference) and its text
 * encoding in *text (release with cs_wire_release), else NULL. Checks that the per-kind decoders
 * agree with the envelope decoder and the text encoder with json_dumps. */
static json_t *decode_encode(const json_t *j, char **text, size_t *text_n)
{
    *text = NULL;
    *text_n = 0;
    struct csw_runner_wire w;
    struct cs_wire_diag diag;
    memset(&diag, 0, sizeof diag);
    enum cs_wire_status st = csw_runner_wire_decode(j, &w, &diag);
    check(st == CS_WIRE_OK || st == CS_WIRE_INVALID);
    if (st != CS_WIRE_OK)
        check(diag.text[0] != '\0'); /* every rejection says why */

    json_t *enc = NULL;
    if (st == CS_WIRE_OK) {
        check(csw_runner_wire_encode(&w, &enc, &diag) == CS_WIRE_OK);
        check(enc != NULL && json_is_object(enc));
        char *dumped = json_dumps(enc, JSON_COMPACT);
        check(dumped != NULL);
        check(csw_runner_wire_encode_text(&w, text, text_n, &diag) == CS_WIRE_OK);
        check(*text_n == strlen(dumped) && memcmp(*text, dumped, *text_n) == 0);
        free(dumped);
    }
    for (size_t k = 0; k < 3; k++) {
        const struct cs_wire_type *t = kinds[k];
        void *v = malloc(t->size);
        check(v != NULL);
        struct cs_wire_diag d2;
        memset(&d2, 0, sizeof d2);
        enum cs_wire_status sk = cs_wire_decode(t, j, v, &d2);
        bool picked = st == CS_WIRE_OK && (size_t)w.tag == k;
        check((sk == CS_WIRE_OK) == picked);
        if (sk == CS_WIRE_OK) {
            json_t *e2 = NULL;
            check(cs_wire_encode(t, v, &e2, &d2) == CS_WIRE_OK);
            check(json_equal(enc, e2));
            json_decref(e2);
            cs_wire_free(t, v);
        } else {
            check(d2.text[0] != '\0');
        }
        free(v);
    }
    if (st == CS_WIRE_OK)
        csw_runner_wire_free(&w);
    return enc;
}

/* First pass: every frame of the input. */
static int on_frame_in(void *arg, const uint8_t *frame, size_t len)
{
    struct out_stream *o = arg;
    check(len >= 1 && len <= CS_FRAME_DEFAULT_CAP);
    o->frames_in++;
    json_error_t jerr;
    json_t *j = json_loadb((const char *)frame, len, JSON_ALLOW_NUL | JSON_DECODE_ANY, &jerr);
    if (!j)
        return 0; /* the peer answers "undecodable" and closes; nothing to re-frame */
    char *text;
    size_t n; /* strings with NUL are escaped as \u0000: no raw NUL in the text */
    json_t *enc = decode_encode(j, &text, &n);
    json_decref(j);
    if (!enc)
        return 0;
    uint8_t hdr[CS_LENFRAME_HEADER_SIZE];
    if (cs_lenframe_encode_header(hdr, n, CS_FRAME_DEFAULT_CAP) != CS_FRAME_OK) {
        /* Only an output over the cap is refused, and libFuzzer inputs are far smaller. */
        check(n > CS_FRAME_DEFAULT_CAP);
        cs_wire_release(text);
        json_decref(enc);
        return 0;
    }
    out_append(o, hdr, sizeof hdr);
    out_append(o, text, n);
    cs_wire_release(text);
    check(json_array_append_new(o->encoded, enc) == 0);
    return 0;
}

/* Second pass: the re-framed stream; each frame must decode to the same encoding. */
static int on_frame_out(void *arg, const uint8_t *frame, size_t len)
{
    struct out_stream *o = arg;
    check(o->checked < json_array_size(o->encoded));
    json_error_t jerr;
    /* Parsed as the peers parse it (the budget, then the fast path: base_json_fast.c), and it
     * must be jansson's own tree. */
    json_t *j = cs_json_loadb_peer((const char *)frame, len, JSON_ALLOW_NUL, &jerr);
    check(j != NULL); /* our own serialisation always parses */
    json_t *ref = json_loadb((const char *)frame, len, JSON_ALLOW_NUL, &jerr);
    check(ref != NULL && json_equal(j, ref));
    json_decref(ref);
    char *text;
    size_t n;
    json_t *enc = decode_encode(j, &text, &n);
    check(enc != NULL); /* our own encoding always satisfies our own schema */
    check(n == len && memcmp(text, frame, len) == 0); /* and writes the same text again */
    cs_wire_release(text);
    check(json_equal(enc, json_array_get(o->encoded, o->checked)));
    json_decref(enc);
    json_decref(j);
    o->checked++;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct out_stream o = {0};
    o.encoded = json_array();
    check(o.encoded != NULL);

    /* Frames in: the whole input through one framer, as one read. */
    struct cs_lenframe fr;
    check(cs_lenframe_init(&fr, CS_FRAME_DEFAULT_CAP, on_frame_in, &o) == CS_FRAME_OK);
    size_t used = 0;
    enum cs_frame_status st = cs_lenframe_feed(&fr, data, size, &used);
    check(st == CS_FRAME_OK || st == CS_FRAME_ERR_ZERO || st == CS_FRAME_ERR_TOO_LARGE);
    if (st == CS_FRAME_OK)
        check(used == size);
    enum cs_frame_status fin = cs_lenframe_finish(&fr);
    if (st == CS_FRAME_OK)
        check(fin == CS_FRAME_OK || fin == CS_FRAME_ERR_TRUNCATED);
    else
        check(fin == st); /* fatal errors are sticky */
    cs_lenframe_fini(&fr);

    /* Frames out: the re-framed stream, cut in chunks of 1..16 bytes chosen by the input size, so
     * the framer's resumption between reads is on the path too. */
    struct cs_lenframe fr2;
    check(cs_lenframe_init(&fr2, CS_FRAME_DEFAULT_CAP, on_frame_out, &o) == CS_FRAME_OK);
    size_t chunk = size % 16 + 1;
    for (size_t at = 0; at < o.used; at += chunk) {
        size_t n = o.used - at < chunk ? o.used - at : chunk;
        check(cs_lenframe_feed(&fr2, o.buf + at, n, NULL) == CS_FRAME_OK);
    }
    check(cs_lenframe_finish(&fr2) == CS_FRAME_OK);
    check(cs_lenframe_at_boundary(&fr2));
    check(o.checked == json_array_size(o.encoded));
    check(o.checked <= o.frames_in);
    cs_lenframe_fini(&fr2);

    json_decref(o.encoded);
    free(o.buf);
    return 0;
}
