/*
 * Fuzz harness for the remote runner's operator texts (src/base/base_remote.c,
 * docs/scale-out.md): the runner address "tcp://HOST:PORT", a certificate pin, a pre-shared key
 * file's content and a PSK identity. Input: the bytes as one NUL-terminated string (inputs
 * holding a NUL are cut there), and for the key file all the bytes as they are. The harness
 * aborts unless:
 *   - an accepted address gives a host of 1..255 bytes of [A-Za-z0-9._-] (':' too for a
 *     bracketed IPv6 host) and a port of 1..65535 in decimal without a leading zero, and
 *     printing them back ("tcp://" host ":" port, brackets around a host with ':') parses to the
 *     same host and port;
 *   - an accepted pin gives 32 bytes that print back (lower-case hex, no colons) to a text that
 *     parses to the same bytes, and the input was 64 or 95 characters long;
 *   - an accepted key file gives 32..64 bytes that print back (hex, a newline after) to a text
 *     that parses to the same key; a refusal for length (-2 short, -3 long) comes only for a
 *     text of hex digits with whitespace around, and the lengths agree with the code;
 *   - an accepted identity is 1..128 bytes of [A-Za-z0-9._:@-].
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
    unsigned char key[CS_TLS_PSK_MAX], key2[CS_TLS_PSK_MAX];
    size_t klen = 0, klen2 = 0;
    int kr = cs_tls_psk_parse((const char *)data, size, key, &klen);
    assert(kr == 0 || kr == -1 || kr == -2 || kr == -3);
    if (kr == 0) {
        assert(klen >= CS_TLS_PSK_MIN && klen <= CS_TLS_PSK_MAX);
        char hex[2 * CS_TLS_PSK_MAX + 2];
        for (size_t i = 0; i < klen; i++)
            snprintf(hex + 2 * i, 3, "%02x", key[i]);
        hex[2 * klen] = '\n';
        assert(cs_tls_psk_parse(hex, 2 * klen + 1, key2, &klen2) == 0 && "printed key must parse");
        assert(klen2 == klen && memcmp(key, key2, klen) == 0);
    } else if (kr == -2 || kr == -3) {
        size_t digits = 0;
        for (size_t i = 0; i < size; i++) {
            char c = (char)data[i];
            if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))
                digits++;
            else
                assert(c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f');
        }
        assert(digits % 2 == 0);
        assert(kr == -2 ? digits / 2 < CS_TLS_PSK_MIN : digits / 2 > CS_TLS_PSK_MAX);
    }
    if (cs_tls_psk_identity_ok(in)) {
        size_t n = strlen(in);
        assert(n >= 1 && n <= CS_TLS_PSK_ID_MAX);
        for (size_t i = 0; i < n; i++) {
            char c = in[i];
            assert((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                   c == '.' || c == '_' || c == ':' || c == '@' || c == '-');
        }
    }
    free(in);
    return 0;
}
