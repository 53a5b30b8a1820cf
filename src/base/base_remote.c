/*
 * base_remote: parsing a remote runner's address, a certificate pin, a pre-shared key and its
 * identity. See base_remote.h.
 */
#include "base_remote.h"
#include "base_json.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

int cs_runner_url_parse(const char *url, char host[CS_RUNNER_URL_HOST_MAX],
                        char port[CS_RUNNER_URL_PORT_MAX])
{
    static const char scheme[] = "tcp://";
    if (!url || strncmp(url, scheme, sizeof scheme - 1) != 0)
        return -1;
    const char *h = url + sizeof scheme - 1, *hend, *p;
    if (*h == '[') {
        h++;
        hend = strchr(h, ']');
        if (!hend || hend[1] != ':')
            return -1;
        p = hend + 2;
    } else {
        hend = strrchr(h, ':');
        if (!hend)
            return -1;
        p = hend + 1;
    }
    size_t hn = (size_t)(hend - h);
    if (hn == 0 || hn >= CS_RUNNER_URL_HOST_MAX)
        return -1;
    bool bracket = h > url + sizeof scheme - 1 && h[-1] == '[';
    for (size_t i = 0; i < hn; i++) {
        char c = h[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '-' || c == '_' || (bracket && c == ':');
        if (!ok)
            return -1;
    }
    size_t pn = strlen(p);
    if (pn == 0 || pn > 5 || p[0] == '0')
        return -1;
    long v = 0;
    for (size_t i = 0; i < pn; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        v = v * 10 + (p[i] - '0');
    }
    if (v < 1 || v > 65535)
        return -1;
    memcpy(host, h, hn);
    host[hn] = '\0';
    memcpy(port, p, pn + 1);
    return 0;
}

/* The byte two hex digits at p spell, or -1. */
static int hex_byte(const char *p)
{
    int hi = cs_hexval(p[0]), lo = hi < 0 ? -1 : cs_hexval(p[1]);
    return lo < 0 ? -1 : hi << 4 | lo;
}

int cs_tls_pin_parse(const char *text, unsigned char out[CS_TLS_PIN_SIZE])
{
    if (!text)
        return -1;
    size_t n = strlen(text);
    bool colons = n == CS_TLS_PIN_SIZE * 3 - 1;
    if (!colons && n != CS_TLS_PIN_SIZE * 2)
        return -1;
    const char *p = text;
    for (size_t i = 0; i < CS_TLS_PIN_SIZE; i++) {
        int v = hex_byte(p);
        if (v < 0)
            return -1;
        out[i] = (unsigned char)v;
        p += 2;
        if (colons && i + 1 < CS_TLS_PIN_SIZE) {
            if (*p != ':')
                return -1;
            p++;
        }
    }
    return *p == '\0' ? 0 : -1;
}

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

int cs_tls_psk_parse(const char *text, size_t n, unsigned char out[CS_TLS_PSK_MAX], size_t *len)
{
    if (!text)
        return -1;
    size_t b = 0, e = n;
    while (b < e && is_space(text[b]))
        b++;
    while (e > b && is_space(text[e - 1]))
        e--;
    size_t digits = e - b;
    if (digits % 2 != 0)
        return -1;
    for (size_t i = b; i < e; i++)
        if (cs_hexval(text[i]) < 0)
            return -1;
    if (digits / 2 < CS_TLS_PSK_MIN)
        return -2;
    if (digits / 2 > CS_TLS_PSK_MAX)
        return -3;
    for (size_t i = 0; i < digits / 2; i++)
        out[i] = (unsigned char)hex_byte(text + b + 2 * i); /* every digit checked above */
    *len = digits / 2;
    return 0;
}

bool cs_tls_psk_identity_ok(const char *id)
{
    if (!id)
        return false;
    size_t n = strlen(id);
    if (n == 0 || n > CS_TLS_PSK_ID_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = id[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_' || c == ':' || c == '@' || c == '-';
        if (!ok)
            return false;
    }
    return true;
}

/* ---- a TLS peer's first flight ---- */

/* A cursor over [p, end); a read past the end marks it bad and reads zeros. */
struct cur {
    const unsigned char *p, *end;
    bool bad;
};

static size_t take(struct cur *c, size_t n)
{
    size_t v = 0;
    if (c->bad || (size_t)(c->end - c->p) < n) {
        c->bad = true;
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        v = v << 8 | c->p[i];
    c->p += n;
    return v;
}

static struct cur sub(struct cur *c, size_t n)
{
    struct cur s = {c->p, c->p, true};
    if (c->bad || (size_t)(c->end - c->p) < n) {
        c->bad = true;
        return s;
    }
    s.end = c->p + n;
    s.bad = false;
    c->p += n;
    return s;
}

static bool whole(const struct cur *c)
{
    return !c->bad && c->p == c->end;
}

enum cs_tls_flight cs_tls_first_flight(const unsigned char *b, size_t n, bool psk,
                                       bool (*known)(void *arg, const unsigned char *id,
                                                     size_t idn),
                                       void *arg, size_t *need, const char **why)
{
    /* Refused as soon as a byte is wrong, not only once a record header is in. */
    if ((n >= 1 && b[0] != 22) || (n >= 2 && b[1] != 3) || (n >= 3 && b[2] > 4)) {
        *why = "TLS handshake failed: the peer's first bytes are not a TLS handshake record";
        return CS_TLS_FLIGHT_REFUSE;
    }
    if (n < 5) {
        *need = 5;
        return CS_TLS_FLIGHT_MORE;
    }
    size_t rlen = (size_t)b[3] << 8 | b[4];
    if (rlen < 4 || rlen > 16384) {
        *why = "TLS handshake failed: the peer's first TLS record has a bad length";
        return CS_TLS_FLIGHT_REFUSE;
    }
    if (n < 5 + rlen) {
        *need = 5 + rlen;
        return CS_TLS_FLIGHT_MORE;
    }
    struct cur r = {b + 5, b + 5 + rlen, false};
    if (take(&r, 1) != 1) {
        *why = "TLS handshake failed: the peer's first message is not a ClientHello";
        return CS_TLS_FLIGHT_REFUSE;
    }
    size_t hlen = take(&r, 3);
    if (hlen > (size_t)(r.end - r.p))
        return CS_TLS_FLIGHT_ORDINARY; /* spans records: OpenSSL judges it, in a general slot */
    struct cur h = sub(&r, hlen);
    take(&h, 2 + 32); /* legacy_version, random */
    size_t sid = take(&h, 1);
    sub(&h, sid);
    size_t suites = take(&h, 2);
    sub(&h, suites);
    size_t comp = take(&h, 1);
    sub(&h, comp);
    struct cur exts = sub(&h, take(&h, 2));
    bool malformed = !whole(&h) || sid > 32 || suites < 2 || suites % 2 || comp < 1;
    bool tls13 = false, offered = false, ours = false;
    while (!malformed && exts.p < exts.end) {
        size_t type = take(&exts, 2);
        struct cur e = sub(&exts, take(&exts, 2));
        if (exts.bad || offered) { /* pre_shared_key must be the last extension */
            malformed = true;
            break;
        }
        if (type == 43) { /* supported_versions */
            struct cur v = sub(&e, take(&e, 1));
            while (!v.bad && v.p < v.end)
                tls13 |= take(&v, 2) == 0x0304;
            malformed = v.bad || !whole(&e);
        } else if (type == 41) { /* pre_shared_key: identities, then binders */
            offered = true;
            struct cur ids = sub(&e, take(&e, 2));
            while (!ids.bad && ids.p < ids.end) {
                size_t il = take(&ids, 2);
                struct cur id = sub(&ids, il);
                take(&ids, 4); /* obfuscated_ticket_age */
                if (!ids.bad && psk && known(arg, id.p, il))
                    ours = true;
            }
            sub(&e, take(&e, 2));
            malformed = ids.bad || !whole(&e);
        }
    }
    if (malformed || !whole(&exts)) {
        *why = "TLS handshake failed: the peer sent a malformed ClientHello";
        return CS_TLS_FLIGHT_REFUSE;
    }
    if (!tls13) {
        *why = "TLS handshake failed: the peer does not offer TLS 1.3";
        return CS_TLS_FLIGHT_REFUSE;
    }
    if (psk && !offered) {
        *why = "TLS handshake failed: the peer offered no pre-shared key (a certificate-mode "
               "peer?)";
        return CS_TLS_FLIGHT_REFUSE;
    }
    if (psk && !ours) {
        *why = "TLS handshake failed: the peer named another pre-shared key identity";
        return CS_TLS_FLIGHT_REFUSE;
    }
    return CS_TLS_FLIGHT_VALID;
}
