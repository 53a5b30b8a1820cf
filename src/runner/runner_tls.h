/*
 * runner_tls: the network leg of the remote runner (docs/scale-out.md). The framed wire code
 * (runner_conn.c) never sees TCP or TLS: a *pump* thread moves bytes between the network stream
 * (OpenSSL TLS 1.3, or plain TCP when the operator asks for it) and one end of a local stream
 * socket, and the loop reads and writes the other end exactly as it does the uds runner's socket.
 *
 *   - gateway side (cs_tls_link_start): a thread connects to HOST:PORT, does the TLS handshake,
 *     authenticates the worker (its certificate pin, or the pre-shared key), and only then
 *     pumps. Any failure closes the local end: the loop sees the stream end before a single
 *     frame went out.
 *   - worker side (cs_tls_front_start): a thread accepts on HOST:PORT and holds each connection,
 *     without a thread, until its first flight shows a ClientHello worth a handshake (garbage,
 *     silence for 2 s, another identity are closed at once); then a thread does the handshake
 *     (5 s after the accept at most), authenticates the gateway the same way, and only then
 *     hands the worker's loop one end of a new socketpair (cs_tls_front_accept) and pumps to
 *     the other. Handshakes are bounded in total (16) and per source address (4), and one slot
 *     is kept for a valid ClientHello (docs/scale-out.md, "Before authentication"). An
 *     unauthenticated or wrong peer never reaches the loop, so no frame of it is ever read.
 *     Each authenticated connection has its own bridge and socketpair (several gateways at
 *     once, at most BRIDGE_MAX; one more is refused, none is shut down for it). Nothing has a
 *     name in the file system, so nothing is left behind however the process ends.
 *
 * Authentication is mutual, in one of two modes (never both):
 *   - certificates, pinned: each side has its own certificate and key (PEM files) and the SHA-256
 *     of the peer's certificate (DER), a worker up to CS_TLS_PINS_MAX of them (one per gateway);
 *     the chain is not consulted, the pin is the trust;
 *   - a pre-shared key (TLS 1.3 external PSK, RFC 8446 section 2.2, with (EC)DHE for forward
 *     secrecy): both sides hold the same key and identity; no certificate is sent or accepted.
 *     A worker may hold several identities, each with its own key (one per gateway), reloaded
 *     by cs_tls_front_reload; a gateway holds one.
 *     A peer with another key fails the PSK binder; one with another identity finds no key; a
 *     handshake that did not use our PSK is refused after the fact too.
 * No other TLS version than 1.3 is accepted.
 *
 * Threads: the pump threads touch only their own descriptors and SSL objects, and the shared
 * SSL_CTX (read-only after creation, as OpenSSL allows). They never touch the loop.
 * Entry points: cs_tls_ctx_new/free/plaintext/auth, cs_tls_psk_load, cs_tls_link_*,
 * cs_tls_front_* (the address and pin parsers are base_remote.h's).
 */
#ifndef CS_RUNNER_TLS_H
#define CS_RUNNER_TLS_H

#include <stdbool.h>
#include <stddef.h>

#include "base_remote.h"

#define CS_TLS_PSK_KEYS_MAX 64 /* identities a worker holds */
#define CS_TLS_PINS_MAX     16 /* certificate pins a worker holds */

/* One side's TLS settings. plaintext: no TLS at all (the rest ignored). Certificate mode: cert,
 * key and peer_pin (a worker: and more_pins). PSK mode (psk_file or psk_keys_file set):
 * psk_file with psk_identity, and (a worker only) psk_keys_file; no cert or key. */
struct cs_tls_config {
    bool plaintext;
    const char *cert, *key; /* PEM files */
    unsigned char peer_pin[CS_TLS_PIN_SIZE];
    const unsigned char (*more_pins)[CS_TLS_PIN_SIZE]; /* a worker's other pins */
    size_t n_more_pins;                                /* < CS_TLS_PINS_MAX */
    const char *psk_file;      /* the key as hex (cs_tls_psk_parse); not readable by others */
    const char *psk_identity;  /* cs_tls_psk_identity_ok */
    const char *psk_keys_file; /* a worker: `IDENTITY:HEXKEY` lines; not readable by others */
};

struct cs_diag;
struct cs_tls_ctx;

/* Loads cert and key (checked against each other), or the pre-shared key file, for a server or a
 * client. plaintext gives a context that does no TLS. Returns NULL with err set (never holding
 * the key). */
struct cs_tls_ctx *cs_tls_ctx_new(const struct cs_tls_config *cfg, bool server,
                                  struct cs_diag *err);
void cs_tls_ctx_free(struct cs_tls_ctx *c);
bool cs_tls_ctx_plaintext(const struct cs_tls_ctx *c);
/* How the context authenticates, for log lines: "plaintext", "certificate" or "psk". */
const char *cs_tls_ctx_auth(const struct cs_tls_ctx *c);
/* A worker's PSK context: reads its key files again and, when they are good, replaces its
 * identities (*n: how many now); handshakes after it use the new set. Returns 0, or -1 with err
 * set and the old set kept. */
int cs_tls_ctx_reload(struct cs_tls_ctx *c, size_t *n, struct cs_diag *err);
/* Reads a pre-shared key file (regular, at most 4 KiB, no permission for others) into out.
 * Returns 0, or -1 with err naming the file and the fault (never its content). */
int cs_tls_psk_load(const char *path, unsigned char out[CS_TLS_PSK_MAX], size_t *len,
                    struct cs_diag *err);

/* ---- gateway side ---- */

struct cs_tls_link;

/* Starts a thread that connects to host:port and authenticates within timeout_ms; *fd is the
 * loop's end of the stream (non-blocking, close-on-exec; the caller owns it). Returns NULL with
 * err set when nothing could start. ctx is borrowed and must outlive the link. */
struct cs_tls_link *cs_tls_link_start(struct cs_tls_ctx *ctx, const char *host, const char *port,
                                      int timeout_ms, int *fd, struct cs_diag *err);
/* Why the link ended (empty while it runs, or when it ended cleanly). */
void cs_tls_link_why(struct cs_tls_link *l, char *buf, size_t cap);
/* Stops the thread (the network connection is closed) and frees. Accepts NULL. */
void cs_tls_link_free(struct cs_tls_link *l);

/* ---- worker side ---- */

struct cs_tls_front;

/* Listens on host:port and bridges each authenticated connection to one end of a new socketpair
 * whose other end goes to the loop over handoff: one end of a SOCK_SEQPACKET socketpair, whose
 * other end the loop reads with cs_tls_front_accept. The front keeps a duplicate of handoff
 * (the caller may close its own); ctx is borrowed. Returns NULL with err set. */
struct cs_tls_front *cs_tls_front_start(struct cs_tls_ctx *ctx, const char *host, const char *port,
                                        int handoff, struct cs_diag *err);
/* On fd, the loop's end of the handoff pair (non-blocking): the next connection a front handed
 * over, close-on-exec, or -1 with errno EAGAIN (none waiting), EPIPE (every front's end is
 * closed) or EPROTO (a message that did not carry exactly one descriptor). */
int cs_tls_front_accept(int fd);
/* cs_tls_ctx_reload, then every bridged connection whose identity is gone is ended. */
int cs_tls_front_reload(struct cs_tls_front *f, size_t *n, struct cs_diag *err);
/* The port really bound (when 0 was asked for). */
int cs_tls_front_port(const struct cs_tls_front *f);
/* Stops accepting. Connections already bridged end with the process. Accepts NULL. */
void cs_tls_front_stop(struct cs_tls_front *f);
/* Stops accepting, stops every connection, waits for their threads and frees (the ctx may be
 * freed after it). Accepts NULL. */
void cs_tls_front_free(struct cs_tls_front *f);

#endif
