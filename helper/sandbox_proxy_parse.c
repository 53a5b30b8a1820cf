/*
 * sandbox_proxy_parse: the proxy's request-head parser and the network_allow rules
 * (sandbox.md section 4). Pure functions, no I/O: fuzz/sandbox_proxy_fuzz.c drives them.
 *
 * Trust: the request head comes from the sandboxed command and is hostile; network_allow comes
 * from the operator's registry through the plan (validated with cs_sbx_allow_parse). Every
 * length is checked before a copy; the head is bounded by CS_SBX_HEAD_MAX.
 *
 * Entry points: cs_sbx_parse_request, cs_sbx_allow_parse, cs_sbx_host_normalize,
 * cs_sbx_allow_match, cs_sbx_allow_address, cs_sbx_addr_is_internal.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "sandbox.h"

#define MAX_HEADERS 100

static bool is_tchar(unsigned char c)
{
    return isalnum(c) || (c && strchr("!#$%&'*+-.^_`|~", c));
}

static bool is_hostchar(unsigned char c)
{
    return isalnum(c) || c == '-' || c == '.' || c == '_';
}

int cs_sbx_host_normalize(char *host)
{
    size_t n = strlen(host);
    if (n > 0 && host[n - 1] == '.')
        host[--n] = '\0';
    if (n == 0 || n > 253)
        return -1;
    /* no empty label: ".a", "a..b" and "a.." are not names (an IPv6 literal has no dots
     * at its ends) */
    if (host[0] == '.' || host[n - 1] == '.' || strstr(host, ".."))
        return -1;
    for (size_t i = 0; i < n; i++)
        host[i] = (char)tolower((unsigned char)host[i]);
    return 0;
}

/* Parses an IP literal (no brackets) into ss. */
static bool parse_ip(const char *s, struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof *ss);
    struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET, s, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        return true;
    }
    if (inet_pton(AF_INET6, s, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        return true;
    }
    return false;
}

static bool parse_port(const char *s, size_t n, uint16_t *port)
{
    if (n == 0 || n > 5)
        return false;
    unsigned v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (unsigned)(s[i] - '0');
    }
    if (v == 0 || v > 65535)
        return false;
    *port = (uint16_t)v;
    return true;
}

/* Splits an authority "host[:port]" / "[v6][:port]" into a normalized host (brackets removed)
 * and port (def when absent). Returns false when malformed. */
static bool parse_authority(const char *s, size_t n, char *host, uint16_t *port, uint16_t def,
                            bool port_required)
{
    const char *h;
    size_t hl;
    const char *rest;
    size_t rl;
    if (n > 0 && s[0] == '[') {
        const char *close = memchr(s, ']', n);
        if (!close)
            return false;
        h = s + 1;
        hl = (size_t)(close - h);
        rest = close + 1;
        rl = n - (size_t)(rest - s);
        if (hl == 0 || hl > 45)
            return false;
        memcpy(host, h, hl);
        host[hl] = '\0';
        struct sockaddr_storage ss;
        if (!parse_ip(host, &ss) || ss.ss_family != AF_INET6)
            return false;
    } else {
        const char *colon = memchr(s, ':', n);
        h = s;
        hl = colon ? (size_t)(colon - s) : n;
        rest = s + hl;
        rl = n - hl;
        if (hl == 0 || hl > CS_SBX_HOST_MAX)
            return false;
        for (size_t i = 0; i < hl; i++)
            if (!is_hostchar((unsigned char)h[i]))
                return false;
        memcpy(host, h, hl);
        host[hl] = '\0';
    }
    if (rl == 0) {
        if (port_required)
            return false;
        *port = def;
    } else {
        if (rest[0] != ':' || !parse_port(rest + 1, rl - 1, port))
            return false;
    }
    return cs_sbx_host_normalize(host) == 0;
}

/* Headers dropped from a forwarded absolute-form request: hop-by-hop and proxy-only ones. */
static bool drop_header(const char *name, size_t n)
{
    static const char *const drop[] = {"proxy-connection", "proxy-authorization", "connection",
                                       "keep-alive"};
    for (size_t i = 0; i < sizeof drop / sizeof *drop; i++)
        if (strlen(drop[i]) == n && strncasecmp(name, drop[i], n) == 0)
            return true;
    return false;
}

static enum cs_sbx_parse bad(struct cs_sbx_request *req, const char *why)
{
    free(req->rewritten);
    req->rewritten = NULL;
    req->reason = why;
    return CS_SBX_PARSE_BAD;
}

enum cs_sbx_parse cs_sbx_parse_request(const char *buf, size_t n, struct cs_sbx_request *req)
{
    memset(req, 0, sizeof *req);
    size_t lim = n < CS_SBX_HEAD_MAX ? n : CS_SBX_HEAD_MAX;
    size_t end = 0;
    for (size_t i = 0; i + 3 < lim; i++)
        if (buf[i] == '\r' && buf[i + 1] == '\n' && buf[i + 2] == '\r' && buf[i + 3] == '\n') {
            end = i + 4;
            break;
        }
    if (end == 0) {
        req->reason = "request head too large";
        return n >= CS_SBX_HEAD_MAX ? CS_SBX_PARSE_BAD : CS_SBX_PARSE_MORE;
    }
    req->head_len = end;

    /* request line: method SP target SP HTTP/1.x CRLF */
    const char *line_end = NULL;
    for (size_t i = 0; i + 1 < end; i++)
        if (buf[i] == '\r' && buf[i + 1] == '\n') {
            line_end = buf + i;
            break;
        }
    const char *p = buf;
    const char *sp1 = memchr(p, ' ', (size_t)(line_end - p));
    if (!sp1 || sp1 == p || sp1 - p > 32)
        return bad(req, "malformed request line");
    for (const char *q = p; q < sp1; q++)
        if (!is_tchar((unsigned char)*q))
            return bad(req, "malformed method");
    const char *tgt = sp1 + 1;
    const char *sp2 = memchr(tgt, ' ', (size_t)(line_end - tgt));
    if (!sp2 || sp2 == tgt)
        return bad(req, "malformed request line");
    const char *ver = sp2 + 1;
    size_t vl = (size_t)(line_end - ver);
    if (vl != 8 || (memcmp(ver, "HTTP/1.1", 8) != 0 && memcmp(ver, "HTTP/1.0", 8) != 0))
        return bad(req, "unsupported HTTP version");
    size_t ml = (size_t)(sp1 - p), tl = (size_t)(sp2 - tgt);
    for (size_t i = 0; i < tl; i++)
        if ((unsigned char)tgt[i] <= 0x20 || tgt[i] == 0x7f)
            return bad(req, "malformed request target");

    const char *path = NULL;
    size_t pl = 0;
    if (ml == 7 && memcmp(p, "CONNECT", 7) == 0) {
        req->connect = true;
        if (!parse_authority(tgt, tl, req->host, &req->port, 0, true))
            return bad(req, "malformed CONNECT authority");
    } else {
        if (tl < 7 || strncasecmp(tgt, "http://", 7) != 0)
            return bad(req, "only absolute-form http:// requests and CONNECT are proxied");
        const char *a = tgt + 7;
        size_t al = 0;
        while (a + al < tgt + tl && a[al] != '/' && a[al] != '?' && a[al] != '#')
            al++;
        if (memchr(a, '@', al))
            return bad(req, "credentials in the request target");
        if (!parse_authority(a, al, req->host, &req->port, 80, false))
            return bad(req, "malformed request authority");
        path = a + al;
        pl = (size_t)(tgt + tl - path);
    }

    /* headers */
    const char *h = line_end + 2;
    const char *hend = buf + end - 2; /* the final CRLF */
    size_t nh = 0;
    bool has_host = false;
    /* rewritten head: at most the original head plus the added lines */
    size_t cap = end + 64 + CS_SBX_HOST_MAX + 32;
    char *out = NULL;
    size_t o = 0;
    if (!req->connect) {
        out = malloc(cap);
        if (!out)
            return bad(req, "out of memory");
        req->rewritten = out;
        memcpy(out, p, ml + 1);
        o = ml + 1;
        if (pl == 0 || path[0] != '/')
            out[o++] = '/';
        memcpy(out + o, path, pl);
        o += pl;
        out[o++] = ' ';
        memcpy(out + o, ver, 8);
        o += 8;
        out[o++] = '\r';
        out[o++] = '\n';
    }
    while (h < hend) {
        const char *le = NULL;
        for (const char *q = h; q + 1 < buf + end; q++)
            if (q[0] == '\r' && q[1] == '\n') {
                le = q;
                break;
            }
        if (!le)
            return bad(req, "malformed header");
        if (++nh > MAX_HEADERS)
            return bad(req, "too many headers");
        const char *colon = memchr(h, ':', (size_t)(le - h));
        if (!colon || colon == h)
            return bad(req, "malformed header");
        for (const char *q = h; q < colon; q++)
            if (!is_tchar((unsigned char)*q))
                return bad(req, "malformed header name");
        for (const char *q = colon + 1; q < le; q++)
            if (((unsigned char)*q < 0x20 && *q != '\t') || *q == 0x7f)
                return bad(req, "control character in a header");
        size_t nl = (size_t)(colon - h);
        if (nl == 4 && strncasecmp(h, "host", 4) == 0)
            has_host = true;
        if (out && !drop_header(h, nl)) {
            memcpy(out + o, h, (size_t)(le + 2 - h));
            o += (size_t)(le + 2 - h);
        }
        h = le + 2;
    }
    if (out) {
        int k;
        if (!has_host) {
            bool v6 = strchr(req->host, ':') != NULL;
            k = snprintf(out + o, cap - o, "Host: %s%s%s:%u\r\n", v6 ? "[" : "", req->host,
                         v6 ? "]" : "", req->port);
            if (k < 0 || (size_t)k >= cap - o)
                return bad(req, "request head too large");
            o += (size_t)k;
        }
        k = snprintf(out + o, cap - o, "Connection: close\r\n\r\n");
        if (k < 0 || (size_t)k >= cap - o)
            return bad(req, "request head too large");
        o += (size_t)k;
        req->rewritten_len = o;
    }
    return CS_SBX_PARSE_OK;
}

int cs_sbx_allow_parse(const char *s, size_t n, struct cs_sbx_allow *out)
{
    memset(out, 0, sizeof *out);
    if (n == 0 || n > CS_SBX_HOST_MAX + 8 || memchr(s, '\0', n))
        return -1;
    char buf[CS_SBX_HOST_MAX + 16];
    memcpy(buf, s, n);
    buf[n] = '\0';
    size_t colons = 0;
    for (size_t i = 0; i < n; i++)
        colons += buf[i] == ':';
    if (buf[0] != '[' && colons >= 2) { /* a bare IPv6 literal, no port */
        if (!parse_ip(buf, &out->ip) || out->ip.ss_family != AF_INET6)
            return -1;
        out->kind = CS_SBX_ALLOW_IP;
        memcpy(out->host, buf, n + 1); /* n <= 45 here: inet_pton accepted it */
        return 0;
    }
    const char *h = buf;
    size_t hl = n;
    bool suffix = false;
    if (n > 2 && buf[0] == '*' && buf[1] == '.') {
        suffix = true;
        h += 2;
        hl -= 2;
    }
    uint16_t port = 0;
    if (!parse_authority(h, hl, out->host, &port, 0, false))
        return -1;
    out->port = port;
    if (suffix) {
        if (parse_ip(out->host, &out->ip))
            return -1;
        out->kind = CS_SBX_ALLOW_SUFFIX;
        return 0;
    }
    out->kind = parse_ip(out->host, &out->ip) ? CS_SBX_ALLOW_IP : CS_SBX_ALLOW_HOST;
    if (out->kind == CS_SBX_ALLOW_HOST && strchr(out->host, '*'))
        return -1;
    return 0;
}

/* Unmaps ::ffff:a.b.c.d into an IPv4 address, so both spellings compare equal. */
static void canon(const struct sockaddr *sa, struct sockaddr_storage *out)
{
    memset(out, 0, sizeof *out);
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *a6 = (const struct sockaddr_in6 *)sa;
        if (IN6_IS_ADDR_V4MAPPED(&a6->sin6_addr)) {
            struct sockaddr_in *a4 = (struct sockaddr_in *)out;
            a4->sin_family = AF_INET;
            memcpy(&a4->sin_addr, a6->sin6_addr.s6_addr + 12, 4);
            return;
        }
        struct sockaddr_in6 *o6 = (struct sockaddr_in6 *)out;
        o6->sin6_family = AF_INET6;
        o6->sin6_addr = a6->sin6_addr;
    } else if (sa->sa_family == AF_INET) {
        struct sockaddr_in *o4 = (struct sockaddr_in *)out;
        o4->sin_family = AF_INET;
        o4->sin_addr = ((const struct sockaddr_in *)sa)->sin_addr;
    }
}

static bool same_ip(const struct sockaddr *a, const struct sockaddr *b)
{
    struct sockaddr_storage x, y;
    canon(a, &x);
    canon(b, &y);
    if (x.ss_family != y.ss_family)
        return false;
    if (x.ss_family == AF_INET)
        return ((struct sockaddr_in *)&x)->sin_addr.s_addr ==
               ((struct sockaddr_in *)&y)->sin_addr.s_addr;
    if (x.ss_family == AF_INET6)
        return memcmp(&((struct sockaddr_in6 *)&x)->sin6_addr,
                      &((struct sockaddr_in6 *)&y)->sin6_addr, 16) == 0;
    return false;
}

bool cs_sbx_allow_match(const struct cs_sbx_allow *list, size_t n, const char *host, uint16_t port)
{
    if (n == 0)
        return true;
    struct sockaddr_storage ip;
    bool literal = parse_ip(host, &ip);
    size_t hl = strlen(host);
    for (size_t i = 0; i < n; i++) {
        const struct cs_sbx_allow *a = &list[i];
        if (a->port && a->port != port)
            continue;
        switch (a->kind) {
        case CS_SBX_ALLOW_IP:
            if (literal && same_ip((const struct sockaddr *)&ip, (const struct sockaddr *)&a->ip))
                return true;
            break;
        case CS_SBX_ALLOW_HOST:
            if (!literal && strcmp(host, a->host) == 0)
                return true;
            break;
        case CS_SBX_ALLOW_SUFFIX: {
            size_t dl = strlen(a->host);
            if (!literal && hl > dl + 1 && host[hl - dl - 1] == '.' &&
                strcmp(host + hl - dl, a->host) == 0)
                return true;
            break;
        }
        }
    }
    return false;
}

bool cs_sbx_addr_is_internal(const struct sockaddr *sa)
{
    struct sockaddr_storage c;
    canon(sa, &c);
    if (c.ss_family == AF_INET) {
        uint32_t a = ntohl(((struct sockaddr_in *)&c)->sin_addr.s_addr);
        return (a >> 24) == 0 || (a >> 24) == 10 || (a >> 24) == 127 ||
               (a >> 16) == 0xa9fe ||              /* 169.254/16 link-local */
               (a >> 20) == 0xac1 ||               /* 172.16/12 */
               (a >> 16) == 0xc0a8 ||              /* 192.168/16 */
               (a >> 22) == (0x64400000u >> 22) || /* 100.64/10 CGNAT */
               (a >> 28) >= 0xe;                   /* multicast, reserved, broadcast */
    }
    if (c.ss_family == AF_INET6) {
        const uint8_t *b = ((struct sockaddr_in6 *)&c)->sin6_addr.s6_addr;
        static const uint8_t zero[16];
        if (memcmp(b, zero, 15) == 0 && (b[15] == 0 || b[15] == 1))
            return true;                                  /* :: and ::1 */
        return (b[0] == 0xfe && (b[1] & 0xc0) == 0x80) || /* fe80::/10 link-local */
               (b[0] & 0xfe) == 0xfc ||                   /* fc00::/7 ULA */
               b[0] == 0xff;                              /* multicast */
    }
    return true;
}

bool cs_sbx_allow_address(const struct cs_sbx_allow *list, size_t n, const struct sockaddr *sa,
                          uint16_t port)
{
    if (n == 0 || !cs_sbx_addr_is_internal(sa))
        return true;
    for (size_t i = 0; i < n; i++)
        if (list[i].kind == CS_SBX_ALLOW_IP && (!list[i].port || list[i].port == port) &&
            same_ip(sa, (const struct sockaddr *)&list[i].ip))
            return true;
    return false;
}
