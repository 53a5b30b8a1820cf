/*
 * base_remote: parsing a remote runner's address, a certificate pin, a pre-shared key and its
 * identity. See base_remote.h.
 */
#include "base_remote.h"
#include "base_json.h"

#include <stdbool.h>
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
