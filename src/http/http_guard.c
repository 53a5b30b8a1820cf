/*
 * http_guard: Host, Origin, bearer token, single-valued headers, Content-Type and Content-Length
 * checks (see http_guard.h). Pure functions over (pointer, length) spans; every value is untrusted.
 * Every decision about a request's headers is made here; http_server.c only collects them.
 */
#include "http_guard.h"

#include <string.h>
#include <strings.h>

bool cs_http_ct_equal(const char *a, size_t alen, const char *b, size_t blen)
{
    size_t n = alen > blen ? alen : blen;
    volatile unsigned acc = alen != blen;
    for (size_t i = 0; i < n; i++) {
        unsigned x = i < alen ? (unsigned char)a[i] : 0u;
        unsigned y = i < blen ? (unsigned char)b[i] : 0u;
        acc |= x ^ y;
    }
    return acc == 0;
}

static bool span_ieq(const char *s, size_t n, const char *lit)
{
    return strlen(lit) == n && strncasecmp(s, lit, n) == 0;
}

/* Splits an authority "host[:port]" or "[v6][:port]". The host keeps its brackets. *port is -1
 * when absent. Returns false when malformed. */
static bool split_authority(const char *s, size_t n, size_t *hlen, long *port)
{
    size_t i;
    if (n == 0)
        return false;
    if (s[0] == '[') {
        const char *close = memchr(s, ']', n);
        if (!close)
            return false;
        i = (size_t)(close - s) + 1;
    } else {
        for (i = 0; i < n && s[i] != ':'; i++) {
            if (s[i] == '[' || s[i] == ']' || s[i] == '/' || s[i] == '@')
                return false;
        }
    }
    *hlen = i;
    *port = -1;
    if (i == n)
        return i > 0;
    if (s[i] != ':' || n - i - 1 < 1 || n - i - 1 > 5)
        return false;
    long p = 0;
    for (size_t k = i + 1; k < n; k++) {
        if (s[k] < '0' || s[k] > '9')
            return false;
        p = p * 10 + (s[k] - '0');
    }
    if (p > 65535)
        return false;
    *port = p;
    return i > 0;
}

static bool loopback_name(const char *s, size_t n)
{
    return span_ieq(s, n, "localhost") || span_ieq(s, n, "127.0.0.1") || span_ieq(s, n, "[::1]");
}

bool cs_http_host_ok(const struct cs_http_guard *g, const char *v, size_t n)
{
    size_t hlen;
    long port;
    if (!v || !split_authority(v, n, &hlen, &port))
        return false;
    if (loopback_name(v, hlen))
        return true;
    return span_ieq(v, hlen, g->host) && (port < 0 || port == g->port);
}

bool cs_http_origin_ok(const struct cs_http_guard *g, const char *v, size_t n)
{
    size_t skip, hlen;
    long port;
    if (!v)
        return false;
    if (n > 7 && strncasecmp(v, "http://", 7) == 0)
        skip = 7;
    else if (n > 8 && strncasecmp(v, "https://", 8) == 0)
        skip = 8;
    else
        return false;
    v += skip;
    n -= skip;
    if (!split_authority(v, n, &hlen, &port))
        return false;
    return loopback_name(v, hlen) || span_ieq(v, hlen, g->host);
}

enum cs_http_guard_verdict cs_http_guard_check(const struct cs_http_guard *g,
                                               const struct cs_http_guard_header *host,
                                               const struct cs_http_guard_header *origin,
                                               const struct cs_http_guard_header *auth)
{
    /* A request without Host (HTTP/1.0, or HTTP/1.1 that MHD 0.9.75 lets through) or with two
     * cannot be checked against DNS rebinding, so it is refused like a wrong one. */
    if (host->count != 1 || !cs_http_host_ok(g, host->value, host->len))
        return CS_HTTP_GUARD_BAD_HOST;
    if (origin->count > 1 ||
        (origin->count == 1 && !cs_http_origin_ok(g, origin->value, origin->len)))
        return CS_HTTP_GUARD_BAD_ORIGIN;
    if (!g->token)
        return CS_HTTP_GUARD_OK;
    /* Exactly one "Authorization: Bearer <token>"; the scheme is case-insensitive (RFC 7235). */
    const char *v = auth->value;
    size_t n = auth->len;
    if (auth->count != 1 || !v || n <= 7 || strncasecmp(v, "Bearer ", 7) != 0)
        return CS_HTTP_GUARD_BAD_TOKEN;
    if (!cs_http_ct_equal(v + 7, n - 7, g->token, g->token_len))
        return CS_HTTP_GUARD_BAD_TOKEN;
    return CS_HTTP_GUARD_OK;
}

enum cs_http_single_verdict cs_http_guard_single(const struct cs_http_guard_single *c)
{
    /* Two lengths, or a length beside a chunked framing, let two readers of the same bytes
     * disagree on where the body ends (request smuggling): refused even when the values agree. */
    if (c->length > 1)
        return CS_HTTP_SINGLE_LENGTH;
    if (c->length > 0 && c->transfer > 0)
        return CS_HTTP_SINGLE_LENGTH_TRANSFER;
    /* The MCP headers are read by a lookup that answers the first one: a second would be
     * ignored by the server but may be the one a proxy in front of it judged. */
    if (c->version > 1)
        return CS_HTTP_SINGLE_VERSION;
    if (c->method > 1)
        return CS_HTTP_SINGLE_METHOD;
    if (c->name > 1)
        return CS_HTTP_SINGLE_NAME;
    if (c->session > 1)
        return CS_HTTP_SINGLE_SESSION;
    return CS_HTTP_SINGLE_OK;
}

bool cs_http_content_type_ok(const char *v, size_t n)
{
    if (!v)
        return false;
    while (n > 0 && (*v == ' ' || *v == '\t')) {
        v++;
        n--;
    }
    const size_t k = strlen("application/json");
    if (n < k || strncasecmp(v, "application/json", k) != 0)
        return false;
    for (size_t i = k; i < n; i++) {
        if (v[i] == ';')
            return true;
        if (v[i] != ' ' && v[i] != '\t')
            return false;
    }
    return true;
}

static bool ows_char(char c)
{
    return c == ' ' || c == '\t';
}

/* Whether the parameters of one media range, v[0..n) (from its first ';' on), hold a q of zero
 * (q=0, q=0., q=0.000): the client refuses that type. */
static bool q_zero(const char *v, size_t n)
{
    size_t i = 0;
    while (i < n) {
        size_t end = i + 1;
        while (end < n && v[end] != ';')
            end++;
        size_t a = i + 1; /* past the ';' */
        while (a < end && ows_char(v[a]))
            a++;
        if (end - a >= 2 && (v[a] == 'q' || v[a] == 'Q') && v[a + 1] == '=') {
            size_t b = a + 2, e = end;
            while (e > b && ows_char(v[e - 1]))
                e--;
            bool zero = e > b && v[b] == '0';
            for (size_t k = b + 1; k < e && zero; k++)
                zero = (k == b + 1 && v[k] == '.') || (k > b + 1 && v[k] == '0');
            return zero;
        }
        i = end;
    }
    return false;
}

bool cs_http_accepts_event_stream(const char *v, size_t n)
{
    static const char want[] = "text/event-stream";
    const size_t k = sizeof want - 1;
    if (!v)
        return false;
    for (size_t i = 0; i < n;) {
        size_t end = i;
        while (end < n && v[end] != ',')
            end++;
        size_t a = i;
        while (a < end && ows_char(v[a]))
            a++;
        size_t t = a;
        while (t < end && v[t] != ';')
            t++;
        size_t te = t;
        while (te > a && ows_char(v[te - 1]))
            te--;
        if (te - a == k && strncasecmp(v + a, want, k) == 0 && !q_zero(v + t, end - t))
            return true;
        i = end + 1;
    }
    return false;
}

enum cs_http_length cs_http_content_length(const char *v, size_t n, uint64_t cap, uint64_t *len)
{
    if (!v || n == 0)
        return CS_HTTP_LENGTH_MALFORMED;
    uint64_t x = 0;
    bool over = false;
    for (size_t i = 0; i < n; i++) {
        if (v[i] < '0' || v[i] > '9')
            return CS_HTTP_LENGTH_MALFORMED;
        /* Once over the cap it stays over: stop accumulating so nothing can wrap. */
        if (over)
            continue;
        uint64_t d = (uint64_t)(v[i] - '0');
        if (x > (UINT64_MAX - d) / 10) { /* past UINT64_MAX, so past any cap */
            over = true;
            continue;
        }
        x = x * 10 + d;
        over = x > cap;
    }
    if (over)
        return CS_HTTP_LENGTH_OVER;
    *len = x;
    return CS_HTTP_LENGTH_OK;
}

enum cs_http_body_verdict cs_http_guard_body(const struct cs_http_guard_header *ctype,
                                             const struct cs_http_guard_header *clen, uint64_t cap,
                                             uint64_t *announced)
{
    *announced = 0;
    /* Content-Type is a singleton field (RFC 9110 section 5.3): two of them are refused rather
     * than judged by whichever one a lookup happens to return. */
    if (ctype->count > 1 ||
        (ctype->count == 1 && !cs_http_content_type_ok(ctype->value, ctype->len)))
        return CS_HTTP_BODY_BAD_TYPE;
    uint64_t len = 0;
    if (clen->count == 0 || !clen->value)
        return CS_HTTP_BODY_OK;
    switch (cs_http_content_length(clen->value, clen->len, cap, &len)) {
    case CS_HTTP_LENGTH_OK:
        *announced = len;
        return CS_HTTP_BODY_OK;
    case CS_HTTP_LENGTH_OVER:
        return CS_HTTP_BODY_TOO_LARGE;
    case CS_HTTP_LENGTH_MALFORMED:
        break;
    }
    return CS_HTTP_BODY_OK;
}
