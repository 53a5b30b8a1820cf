/*
 * base_netallow: network_allow entries and the proxy's destination rules (docs/contract/sandbox.md
 * section 4). Pure functions, no I/O, no allocation, so the policy module (the load-time check),
 * the sandbox helper (prepare, plan validation, proxy) and the fuzz harness all run the same code.
 *
 * Trust: entries come from the operator's registry and again through the helper's plan, which
 * is untrusted at the parser; hosts come from the sandboxed command's proxy requests and are
 * hostile. Every copy is length-checked against CS_NETALLOW_HOST_MAX first.
 *
 * Fail-closed by construction: a host is judged by the address it means (any numeric spelling
 * is read as the address a resolver would read, text that looks numeric but is no address is
 * refused), and the final decision is always on the address the proxy connects to.
 *
 * Entry points: cs_netallow_entry_parse, cs_netallow_host_normalize,
 * cs_netallow_authority_parse, cs_netallow_host_numeric, cs_netallow_addr_normalize,
 * cs_netallow_addr_equal, cs_netallow_addr_internal, cs_netallow_admit_host,
 * cs_netallow_admit_addr.
 */
#include "base_netallow.h"

#include <arpa/inet.h>
#include <string.h>

static bool is_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

static bool is_alpha(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static bool is_xdigit(unsigned char c)
{
    return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static bool is_hostchar(unsigned char c)
{
    return is_alpha(c) || is_digit(c) || c == '-' || c == '.' || c == '_';
}

static char lower(char c)
{
    return (char)(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
}

int cs_netallow_host_normalize(char *host)
{
    size_t n = strlen(host);
    if (n > 0 && host[n - 1] == '.')
        host[--n] = '\0';
    if (n == 0 || n > 253)
        return -1;
    /* no empty label: ".a", "a..b" and "a.." are not names (an IPv6 literal has no dots at its
     * ends) */
    if (host[0] == '.' || host[n - 1] == '.' || strstr(host, ".."))
        return -1;
    for (size_t i = 0; i < n; i++)
        host[i] = lower(host[i]);
    return 0;
}

/* Socket addresses are copied in and out of typed locals with memcpy, never read through a
 * pointer of another struct type: GCC's alias analysis at -O2 may otherwise read a field the
 * code just wrote through a sockaddr_in as the zero a memset left there. */
static sa_family_t family_of(const void *sa)
{
    sa_family_t f;
    memcpy(&f, (const char *)sa + offsetof(struct sockaddr, sa_family), sizeof f);
    return f;
}

void cs_netallow_addr_normalize(const struct sockaddr *sa, struct sockaddr_storage *out)
{
    memset(out, 0, sizeof *out);
    sa_family_t f = family_of(sa);
    if (f == AF_INET6) {
        struct sockaddr_in6 a6;
        memcpy(&a6, sa, sizeof a6);
        if (IN6_IS_ADDR_V4MAPPED(&a6.sin6_addr)) {
            struct sockaddr_in o4;
            memset(&o4, 0, sizeof o4);
            o4.sin_family = AF_INET;
            o4.sin_port = a6.sin6_port;
            memcpy(&o4.sin_addr, a6.sin6_addr.s6_addr + 12, 4);
            memcpy(out, &o4, sizeof o4);
            return;
        }
        struct sockaddr_in6 o6;
        memset(&o6, 0, sizeof o6);
        o6.sin6_family = AF_INET6;
        o6.sin6_port = a6.sin6_port;
        o6.sin6_addr = a6.sin6_addr;
        memcpy(out, &o6, sizeof o6);
    } else if (f == AF_INET) {
        struct sockaddr_in a4, o4;
        memcpy(&a4, sa, sizeof a4);
        memset(&o4, 0, sizeof o4);
        o4.sin_family = AF_INET;
        o4.sin_port = a4.sin_port;
        o4.sin_addr = a4.sin_addr;
        memcpy(out, &o4, sizeof o4);
    }
}

void cs_netallow_addr_set_port(struct sockaddr_storage *ss, uint16_t port)
{
    uint16_t be = htons(port);
    if (ss->ss_family == AF_INET)
        memcpy((char *)ss + offsetof(struct sockaddr_in, sin_port), &be, sizeof be);
    else if (ss->ss_family == AF_INET6)
        memcpy((char *)ss + offsetof(struct sockaddr_in6, sin6_port), &be, sizeof be);
}

/* The normalized address's bytes: 4 for IPv4, 16 for IPv6; 0 for another family. */
static size_t addr_bytes(const struct sockaddr *sa, uint8_t b[16])
{
    struct sockaddr_storage c;
    cs_netallow_addr_normalize(sa, &c);
    if (c.ss_family == AF_INET) {
        struct sockaddr_in a4;
        memcpy(&a4, &c, sizeof a4);
        memcpy(b, &a4.sin_addr, 4);
        return 4;
    }
    if (c.ss_family == AF_INET6) {
        struct sockaddr_in6 a6;
        memcpy(&a6, &c, sizeof a6);
        memcpy(b, &a6.sin6_addr, 16);
        return 16;
    }
    return 0;
}

bool cs_netallow_addr_equal(const struct sockaddr *a, const struct sockaddr *b)
{
    uint8_t x[16], y[16];
    size_t nx = addr_bytes(a, x), ny = addr_bytes(b, y);
    return nx != 0 && nx == ny && memcmp(x, y, nx) == 0;
}

static void set_v4(struct sockaddr_storage *out, uint32_t host_order)
{
    struct sockaddr_in a4;
    memset(&a4, 0, sizeof a4);
    a4.sin_family = AF_INET;
    a4.sin_addr.s_addr = htonl(host_order);
    memset(out, 0, sizeof *out);
    memcpy(out, &a4, sizeof a4);
}

/* One inet_aton part, as glibc reads it: decimal, octal after a leading 0, hex after 0x (at
 * least one digit). Returns false when malformed or over 2^32 - 1. */
static bool aton_part(const char *s, size_t n, uint64_t *v)
{
    unsigned base = 10;
    size_t i = 0;
    if (n == 0)
        return false;
    if (n >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
        base = 16;
        i = 2;
        if (n == 2)
            return false;
    } else if (n >= 2 && s[0] == '0') {
        base = 8;
        i = 1;
    }
    uint64_t x = 0;
    for (; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        unsigned d;
        if (is_digit(c))
            d = (unsigned)(c - '0');
        else if (base == 16 && is_xdigit(c))
            d = (unsigned)(lower((char)c) - 'a' + 10);
        else
            return false;
        if (d >= base)
            return false;
        x = x * base + d;
        if (x > 0xffffffffu)
            return false;
    }
    *v = x;
    return true;
}

/* The inet_aton reading of s (1 to 4 dot-separated parts). */
static bool parse_aton(const char *s, uint32_t *out)
{
    uint64_t part[4];
    size_t np = 0;
    const char *p = s;
    for (;;) {
        const char *dot = strchr(p, '.');
        size_t l = dot ? (size_t)(dot - p) : strlen(p);
        if (np == 4 || !aton_part(p, l, &part[np]))
            return false;
        np++;
        if (!dot)
            break;
        p = dot + 1;
    }
    uint64_t v = 0;
    for (size_t i = 0; i + 1 < np; i++) {
        if (part[i] > 255)
            return false;
        v |= part[i] << (8 * (3 - i));
    }
    uint64_t last = part[np - 1];
    uint64_t room = np == 1 ? 0xffffffffu : (1u << (8 * (4 - (np - 1)))) - 1u;
    if (last > room)
        return false;
    *out = (uint32_t)(v | last);
    return true;
}

/* Whether the last label is all digits or 0x-hex: the WHATWG URL "ends in a number" test, the
 * text every resolver reads as an IPv4 address or refuses. */
static bool ends_in_number(const char *host)
{
    const char *last = strrchr(host, '.');
    last = last ? last + 1 : host;
    size_t n = strlen(last);
    if (n == 0)
        return false;
    bool digits = true;
    for (size_t i = 0; i < n; i++)
        digits &= is_digit((unsigned char)last[i]);
    if (digits)
        return true;
    if (n >= 2 && last[0] == '0' && (last[1] == 'x' || last[1] == 'X')) {
        for (size_t i = 2; i < n; i++)
            if (!is_xdigit((unsigned char)last[i]))
                return false;
        return true;
    }
    return false;
}

enum cs_netallow_numeric cs_netallow_host_numeric(const char *host, struct sockaddr_storage *out)
{
    memset(out, 0, sizeof *out);
    if (strchr(host, ':')) {
        struct sockaddr_in6 a6;
        memset(&a6, 0, sizeof a6);
        if (inet_pton(AF_INET6, host, &a6.sin6_addr) != 1)
            return CS_NETALLOW_BAD_NUMERIC;
        a6.sin6_family = AF_INET6;
        cs_netallow_addr_normalize((const struct sockaddr *)&a6, out);
        return CS_NETALLOW_NUMERIC;
    }
    uint32_t v;
    if (parse_aton(host, &v)) {
        set_v4(out, v);
        return CS_NETALLOW_NUMERIC;
    }
    return ends_in_number(host) ? CS_NETALLOW_BAD_NUMERIC : CS_NETALLOW_NAME;
}

static bool parse_port(const char *s, size_t n, uint16_t *port)
{
    if (n == 0 || n > 5)
        return false;
    unsigned v = 0;
    for (size_t i = 0; i < n; i++) {
        if (!is_digit((unsigned char)s[i]))
            return false;
        v = v * 10 + (unsigned)(s[i] - '0');
    }
    if (v == 0 || v > 65535)
        return false;
    *port = (uint16_t)v;
    return true;
}

int cs_netallow_authority_parse(const char *s, size_t n, char *host, uint16_t *port, uint16_t def,
                                bool port_required)
{
    const char *rest;
    size_t rl, hl;
    if (n > 0 && s[0] == '[') {
        const char *close = memchr(s, ']', n);
        if (!close)
            return -1;
        hl = (size_t)(close - (s + 1));
        if (hl == 0 || hl > 45)
            return -1;
        memcpy(host, s + 1, hl);
        host[hl] = '\0';
        struct in6_addr a6;
        if (inet_pton(AF_INET6, host, &a6) != 1)
            return -1;
        rest = close + 1;
        rl = n - (size_t)(rest - s);
    } else {
        const char *colon = memchr(s, ':', n);
        hl = colon ? (size_t)(colon - s) : n;
        if (hl == 0 || hl > CS_NETALLOW_HOST_MAX)
            return -1;
        for (size_t i = 0; i < hl; i++)
            if (!is_hostchar((unsigned char)s[i]))
                return -1;
        memcpy(host, s, hl);
        host[hl] = '\0';
        rest = s + hl;
        rl = n - hl;
    }
    if (rl == 0) {
        if (port_required)
            return -1;
        *port = def;
    } else if (rest[0] != ':' || !parse_port(rest + 1, rl - 1, port)) {
        return -1;
    }
    return cs_netallow_host_normalize(host);
}

/* A host name as an entry may spell it: labels of 1-63 letters, digits, '-' or '_', no '-' at
 * either end of a label. host is normalized. */
static bool valid_name(const char *host)
{
    size_t label = 0;
    for (const char *p = host;; p++) {
        if (*p == '.' || *p == '\0') {
            if (label == 0 || label > 63 || p[-1] == '-' || p[-(ptrdiff_t)label] == '-')
                return false;
            if (*p == '\0')
                return true;
            label = 0;
            continue;
        }
        unsigned char c = (unsigned char)*p;
        if (!is_alpha(c) && !is_digit(c) && c != '-' && c != '_')
            return false;
        label++;
    }
}

static int refuse(struct cs_netallow_entry *out, const char **why, const char *reason)
{
    memset(out, 0, sizeof *out);
    if (why)
        *why = reason;
    return -1;
}

int cs_netallow_entry_parse(const char *s, size_t n, struct cs_netallow_entry *out,
                            const char **why)
{
    memset(out, 0, sizeof *out);
    if (why)
        *why = NULL;
    if (n == 0)
        return refuse(out, why, "empty");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= 0x20 || c >= 0x7f)
            return refuse(out, why, "holds a space, a control or a non-ASCII character");
    }
    if (n > CS_NETALLOW_HOST_MAX + 8)
        return refuse(out, why, "too long");
    for (size_t i = 0; i + 2 < n; i++)
        if (s[i] == ':' && s[i + 1] == '/' && s[i + 2] == '/')
            return refuse(out, why, "a URL scheme is not allowed");
    if (memchr(s, '/', n))
        return refuse(out, why, "a path is not allowed");
    if (memchr(s, '@', n))
        return refuse(out, why, "user information is not allowed");
    char buf[CS_NETALLOW_HOST_MAX + 16];
    memcpy(buf, s, n);
    buf[n] = '\0';

    size_t colons = 0;
    for (size_t i = 0; i < n; i++)
        colons += buf[i] == ':';
    if (buf[0] != '[' && colons >= 2) { /* a bare IPv6 literal, no port */
        struct in6_addr a6;
        if (n > 45 || inet_pton(AF_INET6, buf, &a6) != 1)
            return refuse(out, why,
                          "not an IPv6 literal (write [v6]:port to give an IPv6 address a port)");
        if (cs_netallow_host_numeric(buf, &out->ip) != CS_NETALLOW_NUMERIC)
            return refuse(out, why, "not an IPv6 literal");
        out->kind = CS_NETALLOW_KIND_IP;
        memcpy(out->host, buf, n + 1);
        (void)cs_netallow_host_normalize(out->host);
        return 0;
    }
    const char *h = buf;
    size_t hl = n;
    bool suffix = false;
    if (buf[0] == '*') {
        if (n == 1)
            return refuse(out, why,
                          "a lone * is not allowed (omit network_allow to admit "
                          "public destinations)");
        if (buf[1] != '.' || n == 2 || buf[2] == ':')
            return refuse(out, why, "* is only allowed as a leading \"*.\" before a domain");
        suffix = true;
        h += 2;
        hl -= 2;
    }
    uint16_t port = 0;
    char host[CS_NETALLOW_HOST_MAX + 1];
    if (hl > 0 && h[0] != '[') {
        const char *colon = memchr(h, ':', hl);
        if (colon) {
            if (!parse_port(colon + 1, hl - (size_t)(colon + 1 - h), &port))
                return refuse(out, why, "the port must be a number from 1 to 65535");
        }
    }
    if (cs_netallow_authority_parse(h, hl, host, &port, 0, false) < 0)
        return refuse(out, why, "not a host name, *.domain or IP literal");
    out->port = port;
    memcpy(out->host, host, strlen(host) + 1);
    if (h[0] == '[') {
        if (suffix || cs_netallow_host_numeric(host, &out->ip) != CS_NETALLOW_NUMERIC)
            return refuse(out, why, "not an IPv6 literal");
        out->kind = CS_NETALLOW_KIND_IP;
        return 0;
    }
    struct sockaddr_storage ss;
    enum cs_netallow_numeric num = cs_netallow_host_numeric(host, &ss);
    if (num == CS_NETALLOW_BAD_NUMERIC)
        return refuse(out, why, "ends in a number but is not an IPv4 address");
    if (num == CS_NETALLOW_NUMERIC) {
        struct in_addr a4;
        if (suffix)
            return refuse(out, why, "\"*.\" needs a domain name, not an address");
        /* one spelling only: an operator reading the file sees the address it admits */
        if (inet_pton(AF_INET, host, &a4) != 1)
            return refuse(out, why, "write an IPv4 address as a dotted quad (a.b.c.d)");
        out->ip = ss;
        out->kind = CS_NETALLOW_KIND_IP;
        return 0;
    }
    if (!valid_name(host))
        return refuse(out, why,
                      "not a host name (labels of 1-63 letters, digits, '-' or '_', separated "
                      "by single dots)");
    out->kind = suffix ? CS_NETALLOW_KIND_SUFFIX : CS_NETALLOW_KIND_HOST;
    return 0;
}

/* Whether the IPv4 address (host order) is not a public destination. */
static bool v4_internal(uint32_t a)
{
    return (a >> 24) == 0 ||                   /* 0/8 "this network", unspecified */
           (a >> 24) == 10 ||                  /* 10/8 private */
           (a >> 22) == (0x64400000u >> 22) || /* 100.64/10 CGNAT */
           (a >> 24) == 127 ||                 /* 127/8 loopback */
           (a >> 16) == 0xa9fe ||              /* 169.254/16 link-local, cloud metadata */
           (a >> 20) == 0xac1 ||               /* 172.16/12 private */
           (a >> 8) == 0xc00000 ||             /* 192.0.0/24 IETF assignments */
           (a >> 16) == 0xc0a8 ||              /* 192.168/16 private */
           (a >> 17) == (0xc6120000u >> 17) || /* 198.18/15 benchmarking */
           (a >> 28) >= 0xe;                   /* 224/4 multicast, 240/4, 255.255.255.255 */
}

static uint32_t be32(const uint8_t *b)
{
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

bool cs_netallow_addr_internal(const struct sockaddr *sa)
{
    uint8_t b[16];
    size_t n = addr_bytes(sa, b);
    if (n == 4)
        return v4_internal(be32(b));
    if (n != 16)
        return true;
    static const uint8_t zero[16];
    static const uint8_t nat64[12] = {0, 0x64, 0xff, 0x9b};
    static const uint8_t siit[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0};
    if (memcmp(b, zero, 12) == 0)
        return true; /* ::, ::1 and IPv4-compatible ::a.b.c.d (deprecated, never public) */
    if (memcmp(b, siit, 12) == 0 || memcmp(b, nat64, 12) == 0)
        return v4_internal(be32(b + 12)); /* ::ffff:0:a.b.c.d, 64:ff9b::a.b.c.d */
    if (b[0] == 0 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b && b[4] == 0 && b[5] == 1)
        return true; /* 64:ff9b:1::/48, local-use NAT64 */
    if (b[0] == 0x20 && b[1] == 0x02)
        return v4_internal(be32(b + 2));                        /* 2002::/16 6to4 */
    if (b[0] == 0x20 && b[1] == 0x01 && b[2] == 0 && b[3] == 0) /* 2001::/32 Teredo */
        return v4_internal(be32(b + 4)) || v4_internal(~be32(b + 12));
    if (b[0] == 0x01 && b[1] == 0 && memcmp(b + 2, zero, 6) == 0)
        return true;                          /* 100::/64 discard-only */
    return (b[0] == 0xfe && (b[1] & 0x80)) || /* fe80::/10 link-local, fec0::/10 site-local */
           (b[0] & 0xfe) == 0xfc ||           /* fc00::/7 ULA */
           b[0] == 0xff;                      /* ff00::/8 multicast */
}

static bool port_ok(const struct cs_netallow_entry *e, uint16_t port)
{
    return e->port == 0 || e->port == port;
}

bool cs_netallow_admit_host(const struct cs_netallow_policy *p, const char *host, uint16_t port,
                            const char **why)
{
    const char *dummy;
    if (!why)
        why = &dummy;
    struct sockaddr_storage ip;
    enum cs_netallow_numeric num = cs_netallow_host_numeric(host, &ip);
    if (num == CS_NETALLOW_BAD_NUMERIC) {
        *why = "the host ends in a number but is not an IP address";
        return false;
    }
    if (!p->has_list) {
        size_t hl = strlen(host);
        if (num == CS_NETALLOW_NAME && (strcmp(host, "localhost") == 0 ||
                                        (hl > 10 && strcmp(host + hl - 10, ".localhost") == 0))) {
            *why = "destination is the host itself (localhost)";
            return false;
        }
        if (num == CS_NETALLOW_NUMERIC)
            return cs_netallow_admit_addr(p, (const struct sockaddr *)&ip, port, why);
        return true;
    }
    if (p->n == 0) {
        *why = "network_allow is empty: no destination is admitted";
        return false;
    }
    size_t hl = strlen(host);
    for (size_t i = 0; i < p->n; i++) {
        const struct cs_netallow_entry *e = &p->entries[i];
        if (!port_ok(e, port))
            continue;
        switch (e->kind) {
        case CS_NETALLOW_KIND_IP:
            if (num == CS_NETALLOW_NUMERIC &&
                cs_netallow_addr_equal((const struct sockaddr *)&ip,
                                       (const struct sockaddr *)&e->ip))
                return true;
            break;
        case CS_NETALLOW_KIND_HOST:
            if (num == CS_NETALLOW_NAME && strcmp(host, e->host) == 0)
                return true;
            break;
        case CS_NETALLOW_KIND_SUFFIX: {
            size_t dl = strlen(e->host);
            if (num == CS_NETALLOW_NAME && hl > dl + 1 && host[hl - dl - 1] == '.' &&
                strcmp(host + hl - dl, e->host) == 0)
                return true;
            break;
        }
        }
    }
    *why = "destination not in network_allow";
    return false;
}

bool cs_netallow_admit_addr(const struct cs_netallow_policy *p, const struct sockaddr *sa,
                            uint16_t port, const char **why)
{
    const char *dummy;
    if (!why)
        why = &dummy;
    if (p->has_list && p->n == 0) {
        *why = "network_allow is empty: no destination is admitted";
        return false;
    }
    bool own = false;
    for (size_t i = 0; i < p->n_own && !own; i++)
        own = cs_netallow_addr_equal(sa, (const struct sockaddr *)&p->own[i]);
    bool internal = cs_netallow_addr_internal(sa);
    if (!internal && !own)
        return true;
    for (size_t i = 0; p->has_list && i < p->n; i++) {
        const struct cs_netallow_entry *e = &p->entries[i];
        if (e->kind == CS_NETALLOW_KIND_IP && port_ok(e, port) &&
            cs_netallow_addr_equal(sa, (const struct sockaddr *)&e->ip))
            return true;
    }
    *why = internal ? "destination is a loopback, link-local, private or other internal address"
                    : "destination is an address of the host itself";
    return false;
}
