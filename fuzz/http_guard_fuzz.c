/*
 * Fuzz harness for the HTTP request guard (src/http/http_guard.c): Host, Origin, bearer token,
 * the single-valued headers, Content-Type and Content-Length, the checks every HTTP request meets
 * before its body is read, and Accept (whether a reply may be an SSE stream). Input: byte 0 holds
 * flags (bit 0: a token is configured; bits 1-2: the Host header count, bits 3-4 the Origin count,
 * bits 5-6 the Authorization count, bit 7: a second Content-Type); the rest is split on 0xff into
 * the Host, Origin, Authorization, Content-Type and Content-Length values (a missing field is
 * absent), then a sixth field whose bytes 0-5 give (low two bits) how many times Mcp-Method,
 * Mcp-Name, MCP-Protocol-Version, Mcp-Session-Id, Content-Length and Transfer-Encoding appeared
 * (a missing byte: 0), for cs_http_guard_single. Trust: the input is arbitrary.
 * Each function is checked against an independent model written from docs/http.md (the
 * authority grammar, the allowed names, the ports, the Bearer scheme, the media type, decimal
 * comparison without arithmetic), and cs_http_guard_check and cs_http_guard_body against their
 * parts and their order.
 * Any disagreement aborts. Entry point: LLVMFuzzerTestOneInput.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http_guard.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(bool ok)
{
    if (!ok)
        abort();
}

static char lower(char c)
{
    return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

/* v[0..n) starts with lit, case-insensitively. */
static bool iprefix(const char *v, size_t n, const char *lit)
{
    size_t k = strlen(lit);
    if (n < k)
        return false;
    for (size_t i = 0; i < k; i++) {
        if (lower(v[i]) != lower(lit[i]))
            return false;
    }
    return true;
}

/* 1..5 digits, value at most 65535; *port gets it. */
static bool model_port(const char *v, size_t n, long *port)
{
    if (n < 1 || n > 5)
        return false;
    long p = 0;
    for (size_t i = 0; i < n; i++) {
        if (v[i] < '0' || v[i] > '9')
            return false;
        p = p * 10 + (v[i] - '0');
    }
    *port = p;
    return p <= 65535;
}

/* v is `name` or `name:port` (case-insensitive name); *port -1 when absent. */
static bool model_authority(const char *v, size_t n, const char *name, long *port)
{
    size_t k = strlen(name);
    *port = -1;
    if (!iprefix(v, n, name))
        return false;
    if (n == k)
        return true;
    return v[k] == ':' && model_port(v + k + 1, n - k - 1, port);
}

static const char *const loopbacks[] = {"localhost", "127.0.0.1", "[::1]"};

static bool model_host(const struct cs_http_guard *g, const char *v, size_t n)
{
    long port;
    for (size_t i = 0; i < 3; i++) {
        if (model_authority(v, n, loopbacks[i], &port))
            return true;
    }
    return model_authority(v, n, g->host, &port) && (port < 0 || port == g->port);
}

static bool model_origin(const struct cs_http_guard *g, const char *v, size_t n)
{
    size_t skip = iprefix(v, n, "http://") ? 7 : iprefix(v, n, "https://") ? 8 : 0;
    long port;
    if (skip == 0)
        return false;
    for (size_t i = 0; i < 3; i++) {
        if (model_authority(v + skip, n - skip, loopbacks[i], &port))
            return true;
    }
    return model_authority(v + skip, n - skip, g->host, &port);
}

static bool model_content_type(const char *v, size_t n)
{
    size_t i = 0;
    while (i < n && (v[i] == ' ' || v[i] == '\t'))
        i++;
    if (!iprefix(v + i, n - i, "application/json"))
        return false;
    for (i += strlen("application/json"); i < n && (v[i] == ' ' || v[i] == '\t'); i++)
        ;
    return i == n || v[i] == ';';
}

static bool ows(char c)
{
    return c == ' ' || c == '\t';
}

/* v[a..b) trimmed of OWS on both sides, written back into *a, *b. */
static void trim(const char *v, size_t *a, size_t *b)
{
    while (*a < *b && ows(v[*a]))
        (*a)++;
    while (*b > *a && ows(v[*b - 1]))
        (*b)--;
}

/* Accept names text/event-stream (docs/http.md, "Request handling"): some comma-separated range
 * whose type, trimmed, is that name in any case, without a q parameter whose value is 0, 0. or
 * 0 followed by a point and zeros. */
static bool model_accepts_sse(const char *v, size_t n)
{
    static const char want[] = "text/event-stream";
    if (!v)
        return false;
    for (size_t i = 0; i <= n;) {
        size_t j = i, semi, a = i, b;
        while (j < n && v[j] != ',')
            j++;
        for (semi = i; semi < j && v[semi] != ';'; semi++)
            ;
        b = semi;
        trim(v, &a, &b);
        bool match = b - a == sizeof want - 1;
        for (size_t k = 0; match && k < sizeof want - 1; k++)
            match = lower(v[a + k]) == want[k];
        bool refused = false;
        for (size_t p = semi; match && p < j;) {
            size_t e = p + 1, x = p + 1;
            while (e < j && v[e] != ';')
                e++;
            size_t y = e;
            trim(v, &x, &y);
            if (y - x >= 2 && lower(v[x]) == 'q' && v[x + 1] == '=') {
                const char *q = v + x + 2;
                size_t qn = y - x - 2;
                refused = qn >= 1 && q[0] == '0' && (qn == 1 || q[1] == '.');
                for (size_t k = 2; refused && k < qn; k++)
                    refused = q[k] == '0';
                break;
            }
            p = e;
        }
        if (match && !refused)
            return true;
        i = j + 1;
    }
    return false;
}

/* Compares the decimal digits v[0..n) with cap as decimal strings: -1, 0, 1. */
static int model_cmp(const char *v, size_t n, uint64_t cap)
{
    char c[24];
    size_t cn = 0;
    do {
        c[cn++] = (char)('0' + cap % 10);
        cap /= 10;
    } while (cap);
    while (n > 1 && v[0] == '0') {
        v++;
        n--;
    }
    if (n != cn)
        return n < cn ? -1 : 1;
    for (size_t i = 0; i < n; i++) {
        char d = c[cn - 1 - i];
        if (v[i] != d)
            return v[i] < d ? -1 : 1;
    }
    return 0;
}

static void check_length(const char *v, size_t n, uint64_t cap)
{
    uint64_t len = 12345;
    enum cs_http_length rc = cs_http_content_length(v, n, cap, &len);
    bool digits = n > 0;
    for (size_t i = 0; i < n; i++)
        digits = digits && v[i] >= '0' && v[i] <= '9';
    if (!digits) {
        check(rc == CS_HTTP_LENGTH_MALFORMED && len == 12345);
        return;
    }
    int cmp = model_cmp(v, n, cap);
    check(rc == (cmp <= 0 ? CS_HTTP_LENGTH_OK : CS_HTTP_LENGTH_OVER));
    if (rc == CS_HTTP_LENGTH_OK) {
        check(len <= cap);
        check(cmp < 0 || len == cap);
    } else {
        check(len == 12345);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t flags = data[0];
    const char *f[6] = {NULL, NULL, NULL, NULL, NULL, NULL};
    size_t fn[6] = {0, 0, 0, 0, 0, 0};
    const char *p = (const char *)data + 1, *end = (const char *)data + size;
    for (size_t i = 0; i < 6 && p <= end; i++) {
        const char *sep = memchr(p, 0xff, (size_t)(end - p));
        f[i] = p;
        fn[i] = (size_t)((sep ? sep : end) - p);
        p = sep ? sep + 1 : end + 1;
    }
    const struct cs_http_guard g = {"myhost.example", 8787, (flags & 1) ? "s3cret" : NULL,
                                    (flags & 1) ? 6 : 0};
    const struct cs_http_guard g6 = {"[fe80::1]", 443, NULL, 0};

    for (size_t i = 0; i < 5; i++) {
        if (!f[i])
            continue;
        check(cs_http_host_ok(&g, f[i], fn[i]) == model_host(&g, f[i], fn[i]));
        check(cs_http_host_ok(&g6, f[i], fn[i]) == model_host(&g6, f[i], fn[i]));
        check(cs_http_origin_ok(&g, f[i], fn[i]) == model_origin(&g, f[i], fn[i]));
        check(cs_http_origin_ok(&g6, f[i], fn[i]) == model_origin(&g6, f[i], fn[i]));
        check(cs_http_content_type_ok(f[i], fn[i]) == model_content_type(f[i], fn[i]));
        check(cs_http_accepts_event_stream(f[i], fn[i]) == model_accepts_sse(f[i], fn[i]));
        check_length(f[i], fn[i], 16u * 1024 * 1024);
        check_length(f[i], fn[i], UINT64_MAX);
        check_length(f[i], fn[i], 0);
    }

    /* The whole check: Host, then Origin, then the token, each as its parts decide. */
    struct cs_http_guard_header host = {(flags >> 1) & 3, f[0], fn[0]};
    struct cs_http_guard_header origin = {(flags >> 3) & 3, f[1], fn[1]};
    struct cs_http_guard_header auth = {(flags >> 5) & 3, f[2], fn[2]};
    enum cs_http_guard_verdict want = CS_HTTP_GUARD_OK;
    if (host.count != 1 || !host.value || !model_host(&g, host.value, host.len))
        want = CS_HTTP_GUARD_BAD_HOST;
    else if (origin.count > 1 ||
             (origin.count == 1 && (!origin.value || !model_origin(&g, origin.value, origin.len))))
        want = CS_HTTP_GUARD_BAD_ORIGIN;
    else if (g.token && !(auth.count == 1 && auth.value && auth.len == 7 + g.token_len &&
                          iprefix(auth.value, auth.len, "bearer ") &&
                          memcmp(auth.value + 7, g.token, g.token_len) == 0))
        want = CS_HTTP_GUARD_BAD_TOKEN;
    check(cs_http_guard_check(&g, &host, &origin, &auth) == want);

    /* A POST's body headers: Content-Type (at most one, absent tolerated), then Content-Length
     * (over the cap refused; absent or malformed announces nothing). */
    const uint64_t cap = 16u * 1024 * 1024;
    struct cs_http_guard_header ctype = {f[3] ? 1u + (flags >> 7) : 0u, f[3], fn[3]};
    struct cs_http_guard_header clen = {f[4] ? 1u : 0u, f[4], fn[4]};
    enum cs_http_body_verdict bwant = CS_HTTP_BODY_OK;
    uint64_t bwant_len = 0, blen = 12345;
    bool cdigits = clen.count == 1 && fn[4] > 0;
    for (size_t i = 0; cdigits && i < fn[4]; i++)
        cdigits = f[4][i] >= '0' && f[4][i] <= '9';
    if (ctype.count > 1 || (ctype.count == 1 && !model_content_type(f[3], fn[3])))
        bwant = CS_HTTP_BODY_BAD_TYPE;
    else if (cdigits && model_cmp(f[4], fn[4], cap) > 0)
        bwant = CS_HTTP_BODY_TOO_LARGE;
    else if (cdigits)
        (void)cs_http_content_length(f[4], fn[4], cap, &bwant_len);
    check(cs_http_guard_body(&ctype, &clen, cap, &blen) == bwant);
    check(blen == bwant_len);

    /* Headers whose meaning is one value (docs/http.md): any of them twice is refused, and so is
     * Content-Length beside Transfer-Encoding; the framing headers are judged first. */
    unsigned n6[6] = {0, 0, 0, 0, 0, 0};
    for (size_t i = 0; f[5] && i < 6 && i < fn[5]; i++)
        n6[i] = (unsigned char)f[5][i] & 3u;
    const struct cs_http_guard_single single = {n6[0], n6[1], n6[2], n6[3], n6[4], n6[5]};
    enum cs_http_single_verdict swant = CS_HTTP_SINGLE_OK;
    if (n6[4] >= 2)
        swant = CS_HTTP_SINGLE_LENGTH;
    else if (n6[4] == 1 && n6[5] >= 1)
        swant = CS_HTTP_SINGLE_LENGTH_TRANSFER;
    else if (n6[2] >= 2)
        swant = CS_HTTP_SINGLE_VERSION;
    else if (n6[0] >= 2)
        swant = CS_HTTP_SINGLE_METHOD;
    else if (n6[1] >= 2)
        swant = CS_HTTP_SINGLE_NAME;
    else if (n6[3] >= 2)
        swant = CS_HTTP_SINGLE_SESSION;
    check(cs_http_guard_single(&single) == swant);

    /* Constant-time equality is plain equality. */
    check(cs_http_ct_equal(f[0] ? f[0] : "", fn[0], f[1] ? f[1] : "", fn[1]) ==
          (fn[0] == fn[1] && (fn[0] == 0 || memcmp(f[0], f[1], fn[0]) == 0)));
    return 0;
}
