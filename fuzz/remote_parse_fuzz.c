/*
 * Fuzz harness for the remote runner's two operator texts (src/base/base_remote.c,
 * docs/scale-out.md): the runner address "tcp://HOST:PORT" and a certificate pin. Input: the
 * bytes as one NUL-terminated string (inputs holding a NUL are cut there). The harness aborts
 * unless:
 *   - an accepted address gives a host of 1..255 bytes of [A-Za-z0-9._-] (':' too for a
 *     bracketed IPv6 host) and a port of 1..65535 in decimal without a leading zero, and
 *     printing them back ("tcp://" host ":" port, brackets around a host with ':') parses to the
 *     same host and port;
 *   - an accepted pin gives 32 bytes that print back (lower-case hex, no colons) to a text that
 *     parses to the same bytes, and the input was 64 or 95 characters long.
 * Trust: the input is arbitrary. Entry point: LLVMFuzzerTestOneInput.
 */
#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base_remote.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096)
        return 0;
    char *in = malloc(size + 1);
    if (!in)
        return 0;
    memcpy(in, data, size);
    in[size] = '\0';
    char host[CS_RUNNER_URL_HOST_MAX], port[CS_RUNNER_URL_PORT_MAX];
    if (cs_runner_url_parse(in, host, port) == 0) {
        size_t hn = strlen(host);
        assert(hn >= 1 && hn < CS_RUNNER_URL_HOST_MAX);
        int colon = strchr(host, ':') != NULL;
        for (size_t i = 0; i < hn; i++) {
            char c = host[i];
            assert((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                   c == '.' || c == '-' || c == '_' || c == ':');
        }
        long p = strtol(port, NULL, 10);
        assert(p >= 1 && p <= 65535 && port[0] != '0');
        char again[300], h2[CS_RUNNER_URL_HOST_MAX], p2[CS_RUNNER_URL_PORT_MAX];
        snprintf(again, sizeof again, colon ? "tcp://[%s]:%s" : "tcp://%s:%s", host, port);
        assert(cs_runner_url_parse(again, h2, p2) == 0 && "printed address must parse");
        assert(strcmp(h2, host) == 0 && strcmp(p2, port) == 0);
    }
    unsigned char pin[CS_TLS_PIN_SIZE], pin2[CS_TLS_PIN_SIZE];
    if (cs_tls_pin_parse(in, pin) == 0) {
        size_t len = strlen(in); /* a C string: the bytes after a NUL are not part of it */
        assert(len == 64 || len == 95);
        char hex[2 * CS_TLS_PIN_SIZE + 1];
        for (size_t i = 0; i < CS_TLS_PIN_SIZE; i++)
            snprintf(hex + 2 * i, 3, "%02x", pin[i]);
        assert(cs_tls_pin_parse(hex, pin2) == 0 && "printed pin must parse");
        assert(memcmp(pin, pin2, sizeof pin) == 0);
    }
    free(in);
    return 0;
}
