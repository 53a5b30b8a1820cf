/*
 * sandbox_proxy_parse: the proxy's request-head parser (docs/contract/sandbox.md §4). Pure, no I/O:
 * fuzz/sandbox_proxy_fuzz.c drives it. The authority and the network_allow rules are
 * src/base/base_netallow.c (one parser for the configuration load, the plan and the proxy).
 *
 * Trust: the request head comes from the sandboxed command and is hostile. Every length is
 * checked before a copy; the head is bounded by CS_SBX_HEAD_MAX.
 *
 * Entry points: cs_sbx_parse_request.
 */
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
        if (cs_netallow_authority_parse(tgt, tl, req->host, &req->port, 0, true) < 0)
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
        if (cs_netallow_authority_parse(a, al, req->host, &req->port, 80, false) < 0)
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
        if (pl > 0) /* an empty path may be NULL */
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
