/*
 * http_guard: the pure checks the HTTP transport makes on a request's headers before it reads a
 * body or touches a session (docs/http.md, "Request handling"): Host and Origin against DNS
 * rebinding, the bearer token, Content-Type and Content-Length. No I/O, no allocation, no
 * libmicrohttpd: the server (http_server.c) collects the headers and calls these, so the
 * decisions can be unit-tested and fuzzed (fuzz/http_guard_fuzz.c).
 *
 * Trust: every header value is untrusted and arrives as a pointer and a length (it may contain
 * any byte, NUL included); nothing is read past the length. The configuration (allowed host,
 * port, token) is the operator's.
 *
 * Entry points: cs_http_guard_check (Host, Origin, token, in that order), cs_http_guard_single
 * (headers that may appear once), cs_http_guard_body (a POST's Content-Type, then Content-Length),
 * cs_http_host_ok, cs_http_origin_ok, cs_http_content_type_ok, cs_http_content_length,
 * cs_http_accepts_event_stream, cs_http_ct_equal.
 */
#ifndef CS_HTTP_GUARD_H
#define CS_HTTP_GUARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The operator's side of the checks; all borrowed for the call. */
struct cs_http_guard {
    const char *host;  /* the configured host as it appears in Host ("[::1]" for IPv6), NUL-ended */
    uint16_t port;     /* the bound port */
    const char *token; /* NULL: no bearer check; else token_len bytes */
    size_t token_len;
};

/* One header as the request carried it: count is how many times it appeared; value/len is the
 * one looked up (NULL when absent or when it holds a NUL byte: such a value is never valid). */
struct cs_http_guard_header {
    unsigned count;
    const char *value;
    size_t len;
};

enum cs_http_guard_verdict {
    CS_HTTP_GUARD_OK,
    CS_HTTP_GUARD_BAD_HOST,   /* 403 */
    CS_HTTP_GUARD_BAD_ORIGIN, /* 403 */
    CS_HTTP_GUARD_BAD_TOKEN,  /* 401 */
};

/* Host (exactly one, allowed), Origin (at most one, allowed), then, with a token, exactly one
 * "Authorization: Bearer <token>" compared in constant time. Returns the first failure, or
 * CS_HTTP_GUARD_OK. */
enum cs_http_guard_verdict cs_http_guard_check(const struct cs_http_guard *g,
                                               const struct cs_http_guard_header *host,
                                               const struct cs_http_guard_header *origin,
                                               const struct cs_http_guard_header *auth);

enum cs_http_body_verdict {
    CS_HTTP_BODY_OK,
    CS_HTTP_BODY_BAD_TYPE,  /* 415 */
    CS_HTTP_BODY_TOO_LARGE, /* 413 */
};

/* How many times the request carried each header whose meaning is one value, besides Host,
 * Origin, Authorization and Content-Type (which the checks above count themselves). */
struct cs_http_guard_single {
    unsigned method;   /* Mcp-Method */
    unsigned name;     /* Mcp-Name */
    unsigned version;  /* MCP-Protocol-Version */
    unsigned session;  /* Mcp-Session-Id */
    unsigned length;   /* Content-Length */
    unsigned transfer; /* Transfer-Encoding (a list: repeats are its own business) */
};

enum cs_http_single_verdict {
    CS_HTTP_SINGLE_OK,
    CS_HTTP_SINGLE_LENGTH,          /* two or more Content-Length, equal or not: 400 */
    CS_HTTP_SINGLE_LENGTH_TRANSFER, /* Content-Length with Transfer-Encoding: 400 */
    CS_HTTP_SINGLE_VERSION,         /* two or more MCP-Protocol-Version: 400 */
    CS_HTTP_SINGLE_METHOD,          /* two or more Mcp-Method: 400 */
    CS_HTTP_SINGLE_NAME,            /* two or more Mcp-Name: 400 */
    CS_HTTP_SINGLE_SESSION,         /* two or more Mcp-Session-Id: 400 */
};

/* Every request, once cs_http_guard_check passed and before anything is read or run: a header
 * whose meaning is one value may appear at most once, whatever the values (docs/http.md,
 * "Request handling"); Content-Length and Transfer-Encoding together are refused too (RFC 9112
 * section 6.3: the framing would be ambiguous). Returns the first failure in the order of the
 * enum, or CS_HTTP_SINGLE_OK. */
enum cs_http_single_verdict cs_http_guard_single(const struct cs_http_guard_single *c);

/* A POST's body headers, once cs_http_guard_check passed. Content-Type: absent is tolerated
 * (clients differ), else exactly one, which cs_http_content_type_ok takes (a value holding a NUL
 * byte is refused). Then Content-Length: over cap is refused; absent, holding a NUL byte or
 * malformed counts as absent (libmicrohttpd refused a malformed one already and frames the body
 * itself), which is a chunked body, announced as 0. Writes *announced: the length for
 * CS_HTTP_BODY_OK, else 0. Returns the first failure, or CS_HTTP_BODY_OK. */
enum cs_http_body_verdict cs_http_guard_body(const struct cs_http_guard_header *ctype,
                                             const struct cs_http_guard_header *clen, uint64_t cap,
                                             uint64_t *announced);

/* Host: a loopback name (localhost, 127.0.0.1, [::1]) with any port or none, or g->host alone
 * or with g->port; case-insensitive. */
bool cs_http_host_ok(const struct cs_http_guard *g, const char *v, size_t n);
/* Origin: http:// or https://, then a host cs_http_host_ok would take with any port, nothing
 * after. */
bool cs_http_origin_ok(const struct cs_http_guard *g, const char *v, size_t n);
/* Content-Type: application/json, optionally followed by parameters. (Absent is the caller's
 * call: the server tolerates it.) */
bool cs_http_content_type_ok(const char *v, size_t n);

enum cs_http_length {
    CS_HTTP_LENGTH_OK,        /* *len is the value, at most cap */
    CS_HTTP_LENGTH_OVER,      /* digits only, more than cap */
    CS_HTTP_LENGTH_MALFORMED, /* empty or not all digits */
};
/* Reads a Content-Length value (decimal digits only, any number of leading zeros). Writes *len
 * only for CS_HTTP_LENGTH_OK. Never overflows, whatever the number of digits. */
enum cs_http_length cs_http_content_length(const char *v, size_t n, uint64_t cap, uint64_t *len);

/* Accept: whether the list names text/event-stream (case-insensitive, parameters allowed) with a
 * q other than zero. Wildcard ranges (any type, any text type) do not count: the stream is sent
 * only to a client that asks for it by name, as Streamable HTTP clients do. v NULL (absent) is
 * false. */
bool cs_http_accepts_event_stream(const char *v, size_t n);
/* Equality whose time depends on the lengths only, never on where the bytes differ. */
bool cs_http_ct_equal(const char *a, size_t alen, const char *b, size_t blen);

#endif
