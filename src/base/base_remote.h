/*
 * base_remote: the two texts an operator writes to reach a remote runner (docs/scale-out.md):
 * its address, "tcp://HOST:PORT", and a certificate pin, a SHA-256 in hex. Pure functions, shared
 * by the registry loader (src/policy), the gateway's tcp runner and the worker (src/runner,
 * src/runtime), and fuzzed (fuzz/fuzz_remote.c).
 * Trust: both texts come from the operator (flags, variables, the registry file), never from a
 * client; still parsed strictly, with no allocation.
 * Entry points: cs_runner_url_parse, cs_tls_pin_parse.
 */
#ifndef CS_BASE_REMOTE_H
#define CS_BASE_REMOTE_H

#include <stddef.h>

#define CS_TLS_PIN_SIZE        32 /* SHA-256 */
#define CS_RUNNER_URL_HOST_MAX 256
#define CS_RUNNER_URL_PORT_MAX 8

/* "tcp://HOST:PORT": HOST a name or IPv4 literal ([...] for IPv6), 1..255 bytes of
 * [A-Za-z0-9.-_:] (':' only inside brackets); PORT 1..65535 in decimal without leading zeros.
 * Writes host (without brackets) and port as NUL-terminated strings. Returns 0 or -1. */
int cs_runner_url_parse(const char *url, char host[CS_RUNNER_URL_HOST_MAX],
                        char port[CS_RUNNER_URL_PORT_MAX]);

/* A SHA-256 fingerprint: 64 hex digits, optionally in pairs separated by ':' (openssl x509
 * -fingerprint prints it so). Case-insensitive. Returns 0 or -1. */
int cs_tls_pin_parse(const char *text, unsigned char out[CS_TLS_PIN_SIZE]);

#endif
