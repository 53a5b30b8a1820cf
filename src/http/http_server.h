/*
 * http_server: the MCP Streamable HTTP transport (docs/contract/runtime.md §3) on libmicrohttpd,
 * driven from the event loop: MHD runs in external epoll mode, its epoll fd is watched by the loop
 * and a loop timer follows MHD_get_timeout. No MHD thread exists; every callback (MHD's, the MCP
 * core's, the tool handlers') runs on the loop's thread. See docs/http.md.
 *
 * Trust: everything from the network is untrusted: the request line, headers and bodies. Host and
 * Origin are checked before anything else (DNS rebinding), then the bearer token, then the rest.
 * Bodies are buffered up to a hard cap (max_body); message texts are handed to the MCP core.
 *
 * Also GET /metrics when the caller supplies the page (cs_http_options.metrics).
 *
 * Entry points: cs_http_start (bind and register with the loop), cs_http_port, cs_http_stop.
 */
#ifndef CS_HTTP_SERVER_H
#define CS_HTTP_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "base_diag.h"

struct cs_loop;
struct cs_mcp;
struct cs_http;

/* Defaults applied when a field of struct cs_http_options is 0. */
#define CS_HTTP_DEFAULT_MAX_BODY        ((size_t)16 * 1024 * 1024)
#define CS_HTTP_DEFAULT_BODY_BUDGET     ((size_t)64 * 1024 * 1024)
#define CS_HTTP_DEFAULT_MAX_CONNECTIONS 1024u
#define CS_HTTP_DEFAULT_PER_IP          64u
#define CS_HTTP_DEFAULT_TIMEOUT_S       30u
#define CS_HTTP_DEFAULT_REQUEST_S       5u
/* Descriptors kept for everything but HTTP connections (workers, pipes, files, the ledger) when
 * the connection limit is sized from RLIMIT_NOFILE. */
#define CS_HTTP_FD_RESERVE             256u
#define CS_HTTP_DEFAULT_MAX_SESSIONS   1024u
#define CS_HTTP_DEFAULT_SESSION_IDLE_S 1800u

/*
 * A log sink for the transport's own events (rejections, sessions, MHD's diagnostics). level is
 * "debug", "info", "warn" or "error"; event is a short static name; detail is a short text that
 * never contains the token, an Authorization header or a session id. All three are borrowed for
 * the call only.
 */
typedef void (*cs_http_log_fn)(void *arg, const char *level, const char *event, const char *detail);

/* The metrics page: a new malloc'd text in the Prometheus text format (version 0.0.4) with
 * its length in *len, or NULL when out of memory (500). Runs on the loop. */
typedef char *(*cs_http_metrics_fn)(void *arg, size_t *len);

struct cs_http_options {
    const char *host;  /* bind address ("127.0.0.1", "::1", "0.0.0.0", a name) */
    uint16_t port;     /* 0: an ephemeral port (tests); see cs_http_port */
    const char *token; /* NULL or "": no bearer check */
    size_t max_body;   /* 0: CS_HTTP_DEFAULT_MAX_BODY */
    /* Total of the bodies being received at once (each charged its Content-Length when the
     * headers are in, a chunked one as its buffer grows); a body that would pass it gets 503
     * with Retry-After. 0: CS_HTTP_DEFAULT_BODY_BUDGET. At least max_body. */
    size_t body_budget;
    /* Connections at once; 0: CS_HTTP_DEFAULT_MAX_CONNECTIONS. Lowered at start when
     * RLIMIT_NOFILE (raised towards its hard limit first) cannot hold it plus
     * CS_HTTP_FD_RESERVE. Near the limit, and past per_ip_connections for one address, a new
     * connection evicts the oldest connection waiting for a request (docs/http.md). */
    unsigned max_connections;
    unsigned per_ip_connections;   /* 0: CS_HTTP_DEFAULT_PER_IP */
    unsigned connection_timeout_s; /* idle timeout; 0: CS_HTTP_DEFAULT_TIMEOUT_S */
    /* Absolute time allowed to receive one request: its head from the connection's accept (on
     * keep-alive: from the end of the previous response plus the idle timeout, since the first
     * byte of the next request cannot be told from idling), its body from the end of its head;
     * then the connection is closed. Not applied while the request waits for its reply or while
     * the reply is written. 0: CS_HTTP_DEFAULT_REQUEST_S. */
    unsigned request_timeout_s;
    /* 0: CS_HTTP_DEFAULT_MAX_SESSIONS. At the cap, initialize evicts the least recently used
     * session that has no request in flight; 503 only when every session has one. */
    unsigned max_sessions;
    /* A session with no request in flight for this long is ended.
     * 0: CS_HTTP_DEFAULT_SESSION_IDLE_S. */
    unsigned session_idle_timeout_s;
    cs_http_log_fn log; /* optional */
    void *log_arg;
    /* GET /metrics (docs/operations.md, "Metrics"), behind the same Host/Origin and bearer
     * checks as /mcp; NULL: the path is unknown (404). */
    cs_http_metrics_fn metrics;
    void *metrics_arg;
};

/*
 * Binds opt->host:opt->port and starts serving /mcp on loop with the MCP core srv (both borrowed:
 * they must outlive the server). opt and its strings are copied. Returns the server, or NULL with
 * a one-line reason in err (may be NULL; it never contains the token).
 */
struct cs_http *cs_http_start(struct cs_loop *loop, struct cs_mcp *srv,
                              const struct cs_http_options *opt, struct cs_diag *err);
/* The bound port (the ephemeral one when opt->port was 0). */
uint16_t cs_http_port(const struct cs_http *h);
/* Abandons every pending exchange, closes every connection, frees every session (managed
 * processes are not the transport's: they are not stopped), unregisters from the loop and frees
 * h. Accepts NULL. Must not be called from inside a callback of this server. */
void cs_http_stop(struct cs_http *h);

#endif
