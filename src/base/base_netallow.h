/*
 * base_netallow: the network_allow rules (docs/contract/sandbox.md §4, docs/contract/runtime.md §2)
 * as pure functions, shared by the configuration load (policy), the sandbox helper's prepare and
 * plan validation, and the helper's proxy: one entry parser, one reading of numeric host text, one
 * address classifier, one admission rule. See base_netallow.c.
 */
#ifndef CS_BASE_NETALLOW_H
#define CS_BASE_NETALLOW_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define CS_NETALLOW_HOST_MAX 255 /* a host buffer holds this many bytes plus the NUL */

enum cs_netallow_kind {
    CS_NETALLOW_KIND_HOST,   /* an exact name */
    CS_NETALLOW_KIND_SUFFIX, /* "*.domain": strict subdomains of host */
    CS_NETALLOW_KIND_IP,     /* an IP literal */
};

/* One network_allow entry, parsed. */
struct cs_netallow_entry {
    enum cs_netallow_kind kind;
    char host[CS_NETALLOW_HOST_MAX + 1]; /* HOST: name; SUFFIX: domain without "*."; IP: text */
    struct sockaddr_storage ip;          /* IP only: the address, v4-mapped stored as IPv4 */
    uint16_t port;                       /* 0: any port */
};

/*
 * Parses one entry: a host name, "*.domain" or an IP literal ("1.2.3.4", "::1", "[::1]"), with
 * an optional ":port" (1-65535; not after a bare IPv6 literal). Names are lower-cased and lose
 * one trailing dot; labels are 1-63 letters, digits, '-' or '_' (no '-' at either end), 253
 * bytes at most. An IPv4 literal must be a dotted quad: text a resolver would read as an
 * address in another spelling ("0x7f.1", "2130706433", "127.1") is refused. Returns 0 with
 * *out filled, or -1 with out zeroed and *why (if why is not NULL) a static reason.
 */
int cs_netallow_entry_parse(const char *s, size_t n, struct cs_netallow_entry *out,
                            const char **why);

/* Lower-cases host in place and strips one trailing dot. Returns 0, or -1 when the result is
 * empty, longer than 253 bytes or has an empty label. */
int cs_netallow_host_normalize(char *host);

/*
 * Splits an authority "host[:port]" or "[v6][:port]" (s[0..n), untrusted) into host (a buffer
 * of CS_NETALLOW_HOST_MAX + 1 bytes: normalized, brackets removed) and *port (def when absent,
 * refused when port_required). Host bytes must be letters, digits, '-', '.', '_'; a bracketed
 * host must be an IPv6 literal. Returns 0 or -1 (malformed).
 */
int cs_netallow_authority_parse(const char *s, size_t n, char *host, uint16_t *port, uint16_t def,
                                bool port_required);

enum cs_netallow_numeric {
    CS_NETALLOW_NAME = 0,        /* a host name: only a resolver can say where it points */
    CS_NETALLOW_NUMERIC = 1,     /* an address, in *out */
    CS_NETALLOW_BAD_NUMERIC = -1 /* looks numeric (ends in a number, or holds ':') but is none */
};

/*
 * How a resolver reads host (normalized, NUL-terminated): IPv6 text (inet_pton), or any of the
 * inet_aton IPv4 spellings (1 to 4 parts, each decimal, octal with a leading 0, or hex with
 * 0x; the last part fills the remaining bytes: "127.1", "0x7f000001", "017700000001"). A host
 * whose last label is all digits or 0x-hex must be such an address: anything else is
 * BAD_NUMERIC, never a name. On NUMERIC, *out holds the address normalized (v4-mapped as IPv4,
 * port 0).
 */
enum cs_netallow_numeric cs_netallow_host_numeric(const char *host, struct sockaddr_storage *out);

/* Copies sa (AF_INET or AF_INET6) into *out with an IPv4-mapped IPv6 address turned into IPv4
 * and the port kept; the IPv6 scope and flow label are dropped. Other families: out zeroed. */
void cs_netallow_addr_normalize(const struct sockaddr *sa, struct sockaddr_storage *out);

/* Sets the port (host order) of an AF_INET or AF_INET6 address; other families unchanged. */
void cs_netallow_addr_set_port(struct sockaddr_storage *ss, uint16_t port);

/* Whether two addresses are the same after normalization (ports ignored). */
bool cs_netallow_addr_equal(const struct sockaddr *a, const struct sockaddr *b);

/*
 * Whether sa is not a public destination: loopback, link-local, private (RFC 1918, ULA),
 * CGNAT, unspecified, multicast, broadcast, reserved and the IETF/benchmark blocks, including
 * IPv6 addresses that embed such an IPv4 address (mapped, compatible, SIIT, NAT64 64:ff9b::/96,
 * 6to4 2002::/16, Teredo). Unknown families count as internal.
 */
bool cs_netallow_addr_internal(const struct sockaddr *sa);

/* What the proxy enforces. Borrowed pointers, alive as long as the policy is used. */
struct cs_netallow_policy {
    bool has_list; /* false: no network_allow (public only); true: only entries (none if n == 0) */
    const struct cs_netallow_entry *entries;
    size_t n;
    const struct sockaddr_storage *own; /* the host's own addresses, refused unless listed */
    size_t n_own;
};

/*
 * The rule on the requested host text (normalized) and port, before any resolution. With a
 * list: some entry must match (exact name, strict subdomain, or an IP entry equal to the
 * host's numeric reading, in whatever spelling; the entry's port if it has one); an empty list
 * matches nothing. Without a list: "localhost" and "*.localhost" are refused, a numeric host
 * must pass cs_netallow_admit_addr. A BAD_NUMERIC host is refused. Returns true when admitted;
 * otherwise *why (if not NULL) is a short static reason.
 */
bool cs_netallow_admit_host(const struct cs_netallow_policy *p, const char *host, uint16_t port,
                            const char **why);

/*
 * The rule on the address the proxy is about to connect to (after resolution): an internal
 * address (cs_netallow_addr_internal) or one of the host's own is admitted only when an IP
 * entry lists it (port matching); a public one unless the list is empty. Returns true when
 * admitted; otherwise *why (if not NULL) is a short static reason.
 */
bool cs_netallow_admit_addr(const struct cs_netallow_policy *p, const struct sockaddr *sa,
                            uint16_t port, const char **why);

#endif
