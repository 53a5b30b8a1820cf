/*
 * libFuzzer harness for the sandbox proxy's request parser (helper/sandbox_proxy_parse.c) and
 * the network_allow rules it enforces (src/base/base_netallow.c, shared with the configuration
 * load). Input: "<allow entries, one per line>\0<request bytes>": with a NUL the list is given
 * (no entry before it: network_allow: []); without one the whole input is the request and
 * network_allow is absent.
 *
 * Invariants asserted (docs/security-model.md, S-invariants): parsing never crashes or reads
 * past the input; a refused entry has a reason and leaves the output zeroed; an admitted entry
 * has a host, an IP entry a normalized address, a name entry no numeric reading; a parsed
 * request has a non-empty lower-case host without a trailing dot, a non-zero port and a head
 * inside the input; a rewritten head is one HTTP head ending in a blank line with "Connection:
 * close"; a strict prefix of a complete head is never complete (parsing does not depend on how
 * the bytes arrive); the host's numeric reading agrees with the C library's (inet_aton,
 * inet_pton), so no spelling is read as a name; an empty list admits nothing; an internal
 * address (of the host's text, or of the first 16 input bytes) is admitted only when an IP
 * entry names it (S13, S15, S16).
 */
#include <arpa/inet.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sandbox.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Whether some IP entry names sa for port. */
static bool listed(const struct cs_netallow_policy *p, const struct sockaddr *sa, uint16_t port)
{
    for (size_t i = 0; p->has_list && i < p->n; i++)
        if (p->entries[i].kind == CS_NETALLOW_KIND_IP &&
            (p->entries[i].port == 0 || p->entries[i].port == port) &&
            cs_netallow_addr_equal(sa, (const struct sockaddr *)&p->entries[i].ip))
            return true;
    return false;
}

static void check_addr(const struct cs_netallow_policy *p, const struct sockaddr *sa, uint16_t port)
{
    const char *why = NULL;
    bool ok = cs_netallow_admit_addr(p, sa, port, &why);
    if (!ok && !why)
        abort();
    if (ok && p->has_list && p->n == 0)
        abort(); /* network_allow: [] admits nothing */
    if (ok && cs_netallow_addr_internal(sa) && !listed(p, sa, port))
        abort(); /* an internal address admitted without an IP entry naming it */
}

static void check_entry(const char *s, size_t n, struct cs_netallow_entry *e, bool *ok)
{
    const char *why = NULL;
    *ok = cs_netallow_entry_parse(s, n, e, &why) == 0;
    if (!*ok) {
        static const struct cs_netallow_entry zero;
        if (!why || memcmp(e, &zero, sizeof zero) != 0)
            abort();
        return;
    }
    size_t hl = strnlen(e->host, sizeof e->host);
    if (hl == 0 || hl >= sizeof e->host)
        abort();
    struct sockaddr_storage ip;
    enum cs_netallow_numeric num = cs_netallow_host_numeric(e->host, &ip);
    if (e->kind == CS_NETALLOW_KIND_IP) {
        if (num != CS_NETALLOW_NUMERIC ||
            !cs_netallow_addr_equal((struct sockaddr *)&ip, (struct sockaddr *)&e->ip))
            abort();
        struct sockaddr_in6 a6;
        memcpy(&a6, &e->ip, sizeof a6);
        if (e->ip.ss_family == AF_INET6 && IN6_IS_ADDR_V4MAPPED(&a6.sin6_addr))
            abort();
    } else if (num != CS_NETALLOW_NAME) {
        abort(); /* a name entry a resolver would read as an address */
    }
}

/* The host's numeric reading against the C library's: what inet_aton (getaddrinfo's numeric
 * IPv4 path) or inet_pton reads as an address, base_netallow reads as the same address. */
static void check_numeric(const char *host, enum cs_netallow_numeric num,
                          const struct sockaddr_storage *ip)
{
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_aton(host, &a4) == 1) {
        struct sockaddr_in mine;
        memcpy(&mine, ip, sizeof mine);
        if (num != CS_NETALLOW_NUMERIC || ip->ss_family != AF_INET ||
            mine.sin_addr.s_addr != a4.s_addr)
            abort();
    } else if (inet_pton(AF_INET6, host, &a6) == 1) {
        if (num != CS_NETALLOW_NUMERIC)
            abort();
    } else if (num == CS_NETALLOW_NUMERIC && ip->ss_family == AF_INET) {
        abort(); /* an IPv4 reading the C library does not share */
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *in = (const char *)data;
    const char *nul = memchr(in, '\0', size);
    struct cs_netallow_entry allow[16];
    struct cs_netallow_policy pol = {.has_list = nul != NULL, .entries = allow};
    const char *req = in;
    size_t rn = size;
    if (nul) {
        const char *p = in;
        while (p < nul && pol.n < 16) {
            const char *e = memchr(p, '\n', (size_t)(nul - p));
            size_t l = e ? (size_t)(e - p) : (size_t)(nul - p);
            /* a copy of exactly l bytes, so ASan sees any over-read */
            char *ent = malloc(l ? l : 1);
            if (!ent)
                abort();
            memcpy(ent, p, l);
            bool ok;
            check_entry(ent, l, &allow[pol.n], &ok);
            free(ent);
            if (ok)
                pol.n++;
            p += l + 1;
        }
        req = nul + 1;
        rn = size - (size_t)(req - in);
    }
    /* one host address of the machine, as the helper enumerates them */
    struct sockaddr_storage own;
    struct sockaddr_in own4;
    memset(&own4, 0, sizeof own4);
    own4.sin_family = AF_INET;
    own4.sin_addr.s_addr = htonl(0x08080808u);
    cs_netallow_addr_normalize((struct sockaddr *)&own4, &own);
    pol.own = &own;
    pol.n_own = 1;

    /* the address rule on raw bytes: the first 16 as an IPv6 address, the first 4 as IPv4 */
    if (size >= 16) {
        struct sockaddr_in6 a6;
        memset(&a6, 0, sizeof a6);
        a6.sin6_family = AF_INET6;
        memcpy(&a6.sin6_addr, data, 16);
        check_addr(&pol, (struct sockaddr *)&a6, 80);
        struct sockaddr_in a4;
        memset(&a4, 0, sizeof a4);
        a4.sin_family = AF_INET;
        memcpy(&a4.sin_addr, data, 4);
        check_addr(&pol, (struct sockaddr *)&a4, 443);
    }

    /* a copy of exactly rn bytes, so ASan sees any over-read */
    char *buf = malloc(rn ? rn : 1);
    if (!buf)
        abort();
    memcpy(buf, req, rn);
    struct cs_sbx_request r;
    enum cs_sbx_parse st = cs_sbx_parse_request(buf, rn, &r);
    if (st == CS_SBX_PARSE_BAD && !r.reason)
        abort();
    if (st == CS_SBX_PARSE_MORE && rn >= CS_SBX_HEAD_MAX)
        abort();
    if (st == CS_SBX_PARSE_OK) {
        size_t hl = strlen(r.host);
        if (hl == 0 || r.host[hl - 1] == '.' || r.port == 0 || r.head_len > rn ||
            r.head_len > CS_SBX_HEAD_MAX)
            abort();
        for (size_t i = 0; i < hl; i++)
            if (r.host[i] >= 'A' && r.host[i] <= 'Z')
                abort();
        if (r.connect != (r.rewritten == NULL))
            abort();
        if (r.rewritten) {
            if (r.rewritten_len < 4 || memcmp(r.rewritten + r.rewritten_len - 4, "\r\n\r\n", 4) ||
                !strstr(r.rewritten, "Connection: close\r\n") ||
                strlen(r.rewritten) != r.rewritten_len)
                abort();
            struct cs_sbx_request again;
            /* the rewritten head is origin-form: the proxy never re-parses it as a request */
            (void)cs_sbx_parse_request(r.rewritten, r.rewritten_len, &again);
            free(again.rewritten);
        }
        struct cs_sbx_request pre;
        if (cs_sbx_parse_request(buf, r.head_len - 1, &pre) != CS_SBX_PARSE_MORE)
            abort();
        free(pre.rewritten);

        /* the host rule, and the address rule on the host's numeric reading */
        struct sockaddr_storage ip;
        enum cs_netallow_numeric num = cs_netallow_host_numeric(r.host, &ip);
        check_numeric(r.host, num, &ip);
        const char *why = NULL;
        bool admitted = cs_netallow_admit_host(&pol, r.host, r.port, &why);
        if (!admitted && !why)
            abort();
        if (admitted && (num == CS_NETALLOW_BAD_NUMERIC || (pol.has_list && pol.n == 0)))
            abort();
        if (num == CS_NETALLOW_NUMERIC) {
            if (admitted && cs_netallow_addr_internal((struct sockaddr *)&ip) &&
                !listed(&pol, (struct sockaddr *)&ip, r.port))
                abort();
            check_addr(&pol, (struct sockaddr *)&ip, r.port);
        }
        free(r.rewritten);
    }
    free(buf);
    return 0;
}
