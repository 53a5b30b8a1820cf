/*
 * Fuzz harness for a TLS peer's first flight (cs_tls_first_flight, src/base/base_remote.c): the
 * bytes anyone who reaches a remote worker's port sends before authentication
 * (docs/scale-out.md, "Before authentication"; docs/security-model.md R19). Input: the bytes as
 * they came, judged in PSK mode (the one known identity is "gw") and in certificate mode. The
 * harness aborts unless, in both modes:
 *   - the verdict is one of the four, a refusal says why, and "more" asks for more bytes than
 *     it was given and no more than one whole record (5 + 16384);
 *   - the parser never reads outside the input (an identity handed to the lookup lies inside
 *     it; ASan checks every other read);
 *   - a verdict other than "more" stands when bytes are added after the input, and the first 4
 *     bytes of an input judged valid or ordinary are "more";
 *   - PSK mode is valid only when the lookup accepted an identity the ClientHello offers, and a
 *     ClientHello valid in PSK mode is valid in certificate mode too.
 * Trust: the input is arbitrary. Entry point: LLVMFuzzerTestOneInput.
 */
#include <assert.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base_remote.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct probe {
    const unsigned char *b;
    size_t n;
    int accepted;
};

static bool known(void *arg, const unsigned char *id, size_t idn)
{
    struct probe *p = arg;
    assert(id >= p->b && idn <= p->n && (size_t)(id - p->b) <= p->n - idn);
    bool ok = idn == 2 && memcmp(id, "gw", 2) == 0;
    p->accepted += ok;
    return ok;
}

static enum cs_tls_flight judge(const unsigned char *b, size_t n, bool psk, int *accepted)
{
    struct probe p = {b, n, 0};
    size_t need = 0;
    const char *why = NULL;
    enum cs_tls_flight f = cs_tls_first_flight(b, n, psk, known, &p, &need, &why);
    assert(f == CS_TLS_FLIGHT_MORE || f == CS_TLS_FLIGHT_VALID || f == CS_TLS_FLIGHT_ORDINARY ||
           f == CS_TLS_FLIGHT_REFUSE);
    if (f == CS_TLS_FLIGHT_MORE)
        assert(need > n && need <= 5 + 16384);
    if (f == CS_TLS_FLIGHT_REFUSE)
        assert(why && why[0]);
    if (accepted)
        *accepted = p.accepted;
    return f;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 5 + 16384 + 64)
        return 0;
    /* A copy of exactly size bytes, so ASan sees a read past the end. */
    unsigned char *b = malloc(size ? size : 1), *more = malloc(size + 16);
    if (!b || !more) {
        free(b);
        free(more);
        return 0;
    }
    memcpy(b, data, size);
    memcpy(more, data, size);
    memset(more + size, 0xa5, 16);
    enum cs_tls_flight cert = judge(b, size, false, NULL);
    int accepted = 0;
    enum cs_tls_flight psk = judge(b, size, true, &accepted);
    if (psk == CS_TLS_FLIGHT_VALID) {
        assert(accepted > 0);
        assert(cert == CS_TLS_FLIGHT_VALID);
    }
    if (cert != CS_TLS_FLIGHT_MORE)
        assert(judge(more, size + 16, false, NULL) == cert);
    if (psk != CS_TLS_FLIGHT_MORE)
        assert(judge(more, size + 16, true, NULL) == psk);
    if (cert == CS_TLS_FLIGHT_VALID || cert == CS_TLS_FLIGHT_ORDINARY)
        for (size_t k = 0; k < 5 && k < size; k++)
            assert(judge(b, k, false, NULL) == CS_TLS_FLIGHT_MORE);
    free(b);
    free(more);
    return 0;
}
