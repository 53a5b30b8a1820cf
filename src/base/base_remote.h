/*
 * base_remote: the texts an operator writes to reach a remote runner (docs/scale-out.md): its
 * address, "tcp://HOST:PORT", a certificate pin (a SHA-256 in hex), and in PSK mode the
 * pre-shared key file's content (hex) and the key's identity. Pure functions, shared
 * by the registry loader (src/policy), the gateway's tcp runner and the worker (src/runner,
 * src/runtime), and fuzzed (fuzz/fuzz_remote.c).
 * Trust: both texts come from the operator (flags, variables, the registry file), never from a
 * client; still parsed strictly, with no allocation.
 * Also the first flight of a TLS peer (cs_tls_first_flight): bytes from anyone who can reach
 * a worker's port, before authentication; parsed with no allocation, never reading past n.
 * Entry points: cs_runner_url_parse, cs_tls_pin_parse, cs_tls_psk_parse, cs_tls_psk_identity_ok,
 * cs_tls_first_flight.
 */
#ifndef CS_BASE_REMOTE_H
#define CS_BASE_REMOTE_H

#include <stdbool.h>
#include <stddef.h>

#define CS_TLS_PIN_SIZE        32 /* SHA-256 */
#define CS_RUNNER_URL_HOST_MAX 256
#define CS_RUNNER_URL_PORT_MAX 8
#define CS_TLS_PSK_MIN         32 /* bytes of key: 256 bits at least */
#define CS_TLS_PSK_MAX         64
#define CS_TLS_PSK_ID_MAX      128 /* bytes of identity */

/* "tcp://HOST:PORT": HOST a name or IPv4 literal ([...] for IPv6), 1..255 bytes of
 * [A-Za-z0-9.-_:] (':' only inside brackets); PORT 1..65535 in decimal without leading zeros.
 * Writes host (without brackets) and port as NUL-terminated strings. Returns 0 or -1. */
int cs_runner_url_parse(const char *url, char host[CS_RUNNER_URL_HOST_MAX],
                        char port[CS_RUNNER_URL_PORT_MAX]);

/* A SHA-256 fingerprint: 64 hex digits, optionally in pairs separated by ':' (openssl x509
 * -fingerprint prints it so). Case-insensitive. Returns 0 or -1. */
int cs_tls_pin_parse(const char *text, unsigned char out[CS_TLS_PIN_SIZE]);

/* A pre-shared key file's n bytes: CS_TLS_PSK_MIN..CS_TLS_PSK_MAX bytes of key as an even number
 * of hex digits (either case, no separators; `openssl rand -hex 32` writes one), with nothing
 * around them but ASCII whitespace (a final newline, usually). Writes the key and *len. Returns
 * 0, -1 when the text is not hex as said, -2 when the key is shorter than CS_TLS_PSK_MIN bytes,
 * -3 when it is longer than CS_TLS_PSK_MAX. */
int cs_tls_psk_parse(const char *text, size_t n, unsigned char out[CS_TLS_PSK_MAX], size_t *len);

/* A PSK identity: 1..CS_TLS_PSK_ID_MAX bytes of [A-Za-z0-9._:@-]. Not a secret: it names the
 * key, it travels in clear in the handshake, and workspace_info reports it. */
bool cs_tls_psk_identity_ok(const char *id);

/* What a peer's first bytes are, judged before any handshake (runner_tls.c's worker side). */
enum cs_tls_flight {
    CS_TLS_FLIGHT_MORE,     /* not all in yet: *need bytes are needed (need > n) */
    CS_TLS_FLIGHT_VALID,    /* a ClientHello for one of our identities (PSK mode: known said
                             * yes for one it offers) or a well-formed TLS 1.3 one (certificates) */
    CS_TLS_FLIGHT_ORDINARY, /* a ClientHello spanning records: OpenSSL judges it */
    CS_TLS_FLIGHT_REFUSE,   /* *why (static text) says what is wrong */
};

/* Judges the first n bytes a peer sent: one TLS record (at most 16 KiB) holding a ClientHello
 * that offers TLS 1.3 and, when psk, a pre_shared_key extension (the last one) naming an
 * identity known(arg, id, idn) accepts. Bytes after the record are not looked at. */
enum cs_tls_flight cs_tls_first_flight(const unsigned char *b, size_t n, bool psk,
                                       bool (*known)(void *arg, const unsigned char *id,
                                                     size_t idn),
                                       void *arg, size_t *need, const char **why);

#endif
