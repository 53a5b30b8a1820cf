/*
 * http_server: MCP Streamable HTTP on libmicrohttpd, driven from the event loop (see
 * http_server.h and docs/http.md).
 *
 * Trust: request lines, headers and bodies are untrusted. The order of checks is fixed: Host and
 * Origin (403), the bearer token (401), then path, method, headers, body size, the body budget
 * (503) and session; the header decisions are http_guard.c's. Bodies are buffered up to
 * max_body and never further, and all bodies in flight together up to body_budget (M9). Slow
 * or idle connections are cut by the request deadline or evicted for new ones. Session ids are
 * compared in constant time; the token is never logged, echoed or copied anywhere but h->token.
 *
 * Entry points: cs_http_start, cs_http_port, cs_http_stop. Everything else runs from MHD_run
 * (called by the loop when MHD's epoll fd is readable or its timer expires) or from the MCP
 * core's reply callback.
 *
 * Lifetimes: a struct req lives from the first access-handler call of a request to MHD's
 * request-completed callback; a struct conn from MHD's connection-started notification to its
 * connection-closed one (MHD closes the socket after that). A pending exchange (req->x) is
 * abandoned before its req or its session is freed, so the core never calls back into freed memory.
 * A suspended connection is resumed before anything that would need MHD to close it (client gone,
 * cs_http_stop). A loop watcher on an fd is always removed before the fd can be closed.
 */
#include "http_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <jansson.h>

#include "base_diag.h"
#include "base_loop.h"
#include "base_wire.h"
#include "http_guard.h"
#include "http_mhd.h"
#include "jsonrpc.h"
#include "mcp_server.h"

#define SESSION_ID_BYTES ((size_t)16)
#define SESSION_ID_LEN   (2 * SESSION_ID_BYTES)
#define BODY_FIRST_CAP   ((size_t)4096)
#define TIMER_MAX_MS     ((int64_t)3600 * 1000)
#define SWEEP_MIN_MS     ((int64_t)1000) /* the sweep timer fires at most once a second */

/* Error bodies. 401's is fixed (docs/contract/runtime.md §3); MCP-level ones are JSON-RPC. */
#define BODY_UNAUTHORIZED "{\"error\":\"unauthorized\"}"
#define BODY_FORBIDDEN    "{\"error\":\"forbidden\"}"
#define BODY_NOT_FOUND    "{\"error\":\"not found\"}"
#define BODY_NOT_ALLOWED  "{\"error\":\"method not allowed\"}"
#define RPC_ERROR(code, m)                                                                         \
    "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":" code ",\"message\":\"" m "\"}}"
#define BODY_NO_SESSION  RPC_ERROR("-32600", "missing Mcp-Session-Id")
#define BODY_BAD_SESSION RPC_ERROR("-32001", "session not found")
#define BODY_BAD_VERSION RPC_ERROR("-32600", "unsupported MCP-Protocol-Version")
#define BODY_TOO_LARGE   RPC_ERROR("-32600", "request body too large")
#define BODY_MEDIA_TYPE  RPC_ERROR("-32600", "Content-Type must be application/json")
#define BODY_TOO_MANY    RPC_ERROR("-32000", "too many sessions")
#define BODY_BUSY        RPC_ERROR("-32000", "server busy: request body budget in use, retry")
#define RETRY_AFTER_S    "1" /* every 503: the budget frees as uploads end (within seconds) */
#define BODY_INTERNAL    RPC_ERROR("-32603", "internal error")
#define BODY_REPEATED(h) RPC_ERROR("-32600", "repeated header: " h " may appear once")

struct sess {
    char id[SESSION_ID_LEN + 1];
    struct cs_mcp_session *mcp; /* owned */
    unsigned busy;   /* live requests that named this session (uploading, waiting, answering) */
    uint64_t seq;    /* h->seq at the last use: the least recently used session has the lowest */
    int64_t used_ms; /* monotonic time of the last use; the idle timeout counts from it */
};

/* One TCP connection, from MHD's connection-started notification to its connection-closed one. */
struct conn {
    struct MHD_Connection *mc;
    struct conn *prev, *next; /* h->conns */
    int64_t deadline;         /* ms: the request being received must be in by then; 0: none */
    /* Eviction order: while deadline is set (waiting for or receiving a request, never while a
     * reply is pending or being written) the connection may be evicted; those that never
     * completed a request go first, then the one waiting longest (lowest since). */
    int64_t since;
    uint64_t served;
    bool evicted;                 /* shut down already; MHD closes it on its next run */
    struct sockaddr_storage addr; /* the peer (family 0 when unknown) */
};

enum req_state {
    REQ_HEADERS, /* a request without a body: checked on the second call (keeps keep-alive) */
    REQ_BODY,    /* POST body being read */
    REQ_DISCARD, /* chunked body over the cap: discarding the rest, then 413 (or 500 on OOM) */
    REQ_WAITING, /* exchange pending in the core, connection suspended */
    REQ_REPLIED, /* the reply arrived (req->reply); the handler queues it */
    REQ_ENDED,   /* the session was deleted while the exchange was pending: answer 404 */
    REQ_CLOSE,   /* the client went away or the server is stopping: close, no answer */
    REQ_DONE,    /* a response is queued */
    REQ_STREAM,  /* an SSE response is queued: notifications, then the reply (docs/http.md) */
};

/* The request headers the server reads. They are collected in one pass over the request's
 * headers when it starts (read_headers) and looked up by index afterwards. */
enum hdr {
    H_HOST,
    H_ORIGIN,
    H_AUTH,
    H_CTYPE,
    H_CLEN,
    H_TRANSFER,
    H_VERSION,
    H_METHOD,
    H_NAME,
    H_SESSION,
    H_ACCEPT,
    H_COUNT
};

#define HDR_NAME(s)                                                                                \
    {                                                                                              \
        s, sizeof(s) - 1                                                                           \
    }
static const struct {
    const char *name;
    size_t len;
} hdr_names[H_COUNT] = {
    [H_HOST] = HDR_NAME(MHD_HTTP_HEADER_HOST),
    [H_ORIGIN] = HDR_NAME(MHD_HTTP_HEADER_ORIGIN),
    [H_AUTH] = HDR_NAME(MHD_HTTP_HEADER_AUTHORIZATION),
    [H_CTYPE] = HDR_NAME(MHD_HTTP_HEADER_CONTENT_TYPE),
    [H_CLEN] = HDR_NAME(MHD_HTTP_HEADER_CONTENT_LENGTH),
    [H_TRANSFER] = HDR_NAME(MHD_HTTP_HEADER_TRANSFER_ENCODING),
    [H_VERSION] = HDR_NAME("MCP-Protocol-Version"),
    [H_METHOD] = HDR_NAME("Mcp-Method"),
    [H_NAME] = HDR_NAME("Mcp-Name"),
    [H_SESSION] = HDR_NAME("Mcp-Session-Id"),
    [H_ACCEPT] = HDR_NAME(MHD_HTTP_HEADER_ACCEPT),
};
#undef HDR_NAME

/* Every occurrence is counted; the first one's value is kept (MHD's lookup also answers the
 * first). A value holding a NUL byte is kept as bad: present, but never read. Values point into
 * MHD's connection pool and stay valid until the request completes. */
struct hdr_slot {
    unsigned count;
    bool bad;
    const char *value;
    size_t len;
};

struct hdrs {
    struct hdr_slot slot[H_COUNT];
};

struct req {
    struct cs_http *h;
    struct MHD_Connection *conn;
    struct req *prev, *next; /* h->reqs */
    enum req_state state;
    struct sess *sess;  /* borrowed from h->sessions, or owned while new_sess */
    bool new_sess;      /* sess is being created by this initialize request */
    bool named_session; /* the request carried Mcp-Session-Id */
    bool modern;        /* a 2026-07-28 request: stateless, statuses of docs/protocol.md */
    bool suspended;
    char *body;       /* owned, at most h->max_body bytes */
    char *reply_text; /* owned: the reply as the core serialized it */
    size_t len, cap;
    size_t discarded;          /* REQ_DISCARD: bytes thrown away so far */
    size_t announced;          /* Content-Length (0: none, chunked) */
    size_t charged;            /* bytes of h->body_budget this request holds */
    unsigned discard_status;   /* REQ_DISCARD: the answer once the body ends */
    struct cs_mcp_exchange *x; /* pending exchange, or NULL */
    json_t *reply;             /* owned once state is REQ_REPLIED; NULL means 202 */
    struct cs_loop_fd *watch;  /* peer hang-up watch while suspended */
    struct hdrs hdrs;          /* read when the request starts */
    /* REQ_STREAM: the events not yet handed to MHD (sse[sse_off..sse_len)), and whether the last
     * one (the reply) is in: then the stream ends once they are written. */
    char *sse;
    size_t sse_len, sse_off, sse_cap;
    bool sse_end;
};

struct cs_http {
    struct cs_loop *loop;
    struct cs_mcp *srv;
    struct MHD_Daemon *d;
    struct cs_loop_fd *mhd_watch;
    struct cs_loop_timer *timer;
    bool in_run, kicked;
    bool stopping;               /* cs_http_stop is running: arm no more sweeps */
    struct cs_loop_timer *sweep; /* request deadlines and session idle timeouts */
    int64_t sweep_at;            /* when sweep fires (valid while sweep is non-NULL) */
    int64_t request_ms;          /* time allowed to receive one request */
    int64_t idle_ms;             /* session idle timeout */
    int64_t idle_ms_conn;        /* MHD's connection idle timeout */
    char *host;  /* configured host as it appears in a Host header ("[::1]" for IPv6) */
    char *token; /* NULL: no bearer check */
    size_t token_len;
    size_t max_body;
    size_t body_budget, body_used; /* the total for bodies being received, and what is held */
    unsigned nconns, max_conns, evict_at, per_ip;
    uint16_t port;
    struct sess **sessions; /* max_sessions slots, nsessions used */
    /* The core session 2026-07-28 requests run in: they need no session and get none, so this
     * one is never initialized and never named to a client. */
    struct cs_mcp_session *stateless;
    size_t nsessions, nnew, max_sessions;
    uint64_t seq;       /* session use counter (LRU order) */
    struct req *reqs;   /* every live request */
    struct conn *conns; /* every open connection MHD told us about */
    cs_http_log_fn log;
    void *log_arg;
    cs_http_metrics_fn metrics; /* NULL: no /metrics */
    void *metrics_arg;
};

/* ---- logging (through the caller's sink only; never the token, a session id or a header) ---- */

static void emit(struct cs_http *h, const char *level, const char *event, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void emit(struct cs_http *h, const char *level, const char *event, const char *fmt, ...)
{
    if (!h->log)
        return;
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    cs_diag_vformat(buf, sizeof buf, fmt, ap);
    va_end(ap);
    h->log(h->log_arg, level, event, buf);
}

/* MHD's own diagnostics. They never carry header values in 0.9.75, but a message that happens to
 * contain the token is redacted anyway. */
static void mhd_log(void *cls, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    struct cs_http *h = cls;
    char buf[256];
    if (!h->log)
        return;
    /* MHD ends its lines with "\n", which the formatter spells out: drop the spelling. */
    size_t n = cs_diag_vformat(buf, sizeof buf, fmt, ap);
    while (n >= 4 && (memcmp(buf + n - 4, "\\x0A", 4) == 0 || memcmp(buf + n - 4, "\\x0D", 4) == 0))
        buf[n -= 4] = '\0';
    if (h->token && strstr(buf, h->token))
        snprintf(buf, sizeof buf, "(message redacted)");
    h->log(h->log_arg, "warn", "mhd", buf);
}

static const char *peer_text(struct MHD_Connection *c, char *buf, size_t cap)
{
    const union MHD_ConnectionInfo *ci =
        cs_mhd.MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    snprintf(buf, cap, "?");
    if (!ci || !ci->client_addr)
        return buf;
    const struct sockaddr *sa = ci->client_addr;
    if (sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, buf,
                  (socklen_t)cap);
    else if (sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, buf,
                  (socklen_t)cap);
    return buf;
}

/* ---- driving MHD from the loop ---- */

static void run(struct cs_http *h);

static void on_timer(void *arg)
{
    struct cs_http *h = arg;
    h->timer = NULL; /* fired: never cancel it again */
    run(h);
}

static void arm(struct cs_http *h, int64_t ms)
{
    if (h->timer)
        cs_loop_timer_cancel(h->timer);
    /* On OOM there is no timer; MHD's epoll fd (its ITC included) still wakes us. */
    h->timer = cs_loop_timer_add(h->loop, ms, on_timer, h);
}

/* Re-arms the timer from MHD_get_timeout: MHD must run again within that time even if no fd is
 * ready (connection timeouts, data MHD has buffered but not processed). */
static void rearm(struct cs_http *h)
{
    MHD_UNSIGNED_LONG_LONG t = 0;
    if (h->kicked) {
        h->kicked = false;
        arm(h, 0);
    } else if (cs_mhd.MHD_get_timeout(h->d, &t) == MHD_YES) {
        arm(h, t > (MHD_UNSIGNED_LONG_LONG)TIMER_MAX_MS ? TIMER_MAX_MS : (int64_t)t);
    } else if (h->timer) {
        cs_loop_timer_cancel(h->timer);
        h->timer = NULL;
    }
}

static void run(struct cs_http *h)
{
    h->in_run = true;
    h->kicked = false;
    cs_mhd.MHD_run(h->d);
    h->in_run = false;
    rearm(h);
}

/* Makes MHD run on the next loop turn (after a resume: MHD needs a run to notice it). */
static void kick(struct cs_http *h)
{
    h->kicked = true;
    if (!h->in_run)
        arm(h, 0);
}

static void on_mhd_ready(void *arg, int fd, unsigned events)
{
    (void)fd;
    (void)events;
    run(arg);
}

/* ---- requests ---- */

static void unwatch(struct req *r)
{
    cs_loop_fd_del(r->watch);
    r->watch = NULL;
}

static void resume(struct req *r)
{
    if (!r->suspended)
        return;
    unwatch(r); /* before MHD may close the fd */
    r->suspended = false;
    cs_mhd.MHD_resume_connection(r->conn);
    kick(r->h);
}

static void abandon(struct req *r)
{
    if (r->x) {
        cs_mcp_exchange_abandon(r->x);
        r->x = NULL;
    }
}

static void sess_free(struct sess *s)
{
    if (!s)
        return;
    cs_mcp_session_free(s->mcp);
    free(s);
}

/* The peer hung up while its request was suspended (MHD does not poll suspended connections).
 * Abandon the exchange and let MHD close the connection. EOF counts as a hang-up, like an error
 * or a reset: a client that closed its socket sends the same FIN as one that only shut down its
 * sending side, and treating EOF as "maybe still there" would let a call run on for every client
 * that gave up. A half-closing client therefore loses a reply that had to wait (docs/http.md). */
static void client_gone(struct req *r)
{
    char peer[INET6_ADDRSTRLEN];
    emit(r->h, "info", "client_gone", "peer=%s: request abandoned",
         peer_text(r->conn, peer, sizeof peer));
    abandon(r);
    r->state = REQ_CLOSE;
    resume(r);
}

static void on_peer(void *arg, int fd, unsigned events)
{
    struct req *r = arg;
    char b;
    (void)events;
    ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) {
        /* Pipelined bytes: a hang-up can no longer be told apart; stop watching. */
        unwatch(r);
        return;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    client_gone(r);
}

static void watch_peer(struct req *r)
{
    const union MHD_ConnectionInfo *ci =
        cs_mhd.MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci)
        return;
    /* On failure the hang-up is noticed only when the reply is written. */
    r->watch = cs_loop_fd_add(r->h->loop, ci->connect_fd, CS_LOOP_READ, on_peer, r);
}

/* Queues a response of type ctype (when len > 0). body is copied unless owned is non-NULL (then
 * it is the buffer, freed by MHD with jansson's free function). hname/hvalue: one optional extra
 * header. */
static enum MHD_Result respond_typed(struct req *r, unsigned status, const char *ctype,
                                     const char *body, size_t len, char *owned, const char *hname,
                                     const char *hvalue)
{
    struct MHD_Response *resp;
    enum MHD_Result rc = MHD_NO;
    if (owned) {
        json_malloc_t m;
        json_free_t f;
        json_get_alloc_funcs(&m, &f);
        resp = cs_mhd.MHD_create_response_from_buffer_with_free_callback(len, owned, f);
        if (!resp)
            f(owned);
    } else {
        resp = cs_mhd.MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    }
    if (!resp)
        goto out;
    if (len > 0 &&
        cs_mhd.MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype) != MHD_YES)
        goto out;
    if (hname && cs_mhd.MHD_add_response_header(resp, hname, hvalue) != MHD_YES)
        goto out;
    rc = cs_mhd.MHD_queue_response(r->conn, status, resp);
    if (rc == MHD_YES)
        r->state = REQ_DONE;
out:
    if (resp)
        cs_mhd.MHD_destroy_response(resp); /* the queue holds its own reference */
    return rc;
}

/* respond_typed with a JSON body (every answer but /metrics). */
static enum MHD_Result respond(struct req *r, unsigned status, const char *body, size_t len,
                               char *owned, const char *hname, const char *hvalue)
{
    return respond_typed(r, status, "application/json", body, len, owned, hname, hvalue);
}

static enum MHD_Result reject(struct req *r, unsigned status, const char *body, const char *why)
{
    char peer[INET6_ADDRSTRLEN];
    const char *level = "debug";
    if (status == MHD_HTTP_INTERNAL_SERVER_ERROR)
        level = "error";
    else if (status == MHD_HTTP_FORBIDDEN || status == MHD_HTTP_UNAUTHORIZED ||
             status == MHD_HTTP_CONTENT_TOO_LARGE || status == MHD_HTTP_SERVICE_UNAVAILABLE)
        level = "warn";
    emit(r->h, level, "http_rejected", "%u %s (peer=%s)", status, why,
         peer_text(r->conn, peer, sizeof peer));
    const char *hname = NULL, *hvalue = NULL;
    if (status == MHD_HTTP_UNAUTHORIZED) {
        hname = MHD_HTTP_HEADER_WWW_AUTHENTICATE;
        hvalue = "Bearer";
    } else if (status == MHD_HTTP_METHOD_NOT_ALLOWED) {
        hname = MHD_HTTP_HEADER_ALLOW;
        hvalue = "POST, DELETE";
    } else if (status == MHD_HTTP_SERVICE_UNAVAILABLE) {
        hname = MHD_HTTP_HEADER_RETRY_AFTER;
        hvalue = RETRY_AFTER_S;
    }
    return respond(r, status, body, strlen(body), NULL, hname, hvalue);
}

/* ---- header checks (the decisions are http_guard.c's) ---- */

static enum MHD_Result collect_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                      size_t key_size, const char *value, size_t value_size)
{
    struct hdrs *hs = cls;
    (void)kind;
    for (size_t i = 0; i < H_COUNT; i++) {
        if (hdr_names[i].len != key_size || strcasecmp(key, hdr_names[i].name) != 0)
            continue;
        struct hdr_slot *s = &hs->slot[i];
        if (s->count++ == 0) {
            s->bad = !value || strlen(value) != value_size;
            s->value = value;
            s->len = value_size;
        }
        break;
    }
    return MHD_YES;
}

static void read_headers(struct MHD_Connection *c, struct hdrs *hs)
{
    memset(hs, 0, sizeof *hs);
    cs_mhd.MHD_get_connection_values_n(c, MHD_HEADER_KIND, collect_header, hs);
}

/* Looks a collected header up; *v is NUL-terminated. Returns 1 when found, 0 when absent, -1 for
 * a value with an embedded NUL (absent-and-bad). */
static int header(const struct hdrs *hs, enum hdr which, const char **v, size_t *n)
{
    const struct hdr_slot *s = &hs->slot[which];
    if (s->count == 0)
        return 0;
    if (s->bad)
        return -1;
    *v = s->value;
    *n = s->len;
    return 1;
}

/* One header for the guard: value NULL when absent or holding a NUL byte. */
static void guard_header(const struct hdrs *hs, enum hdr which, struct cs_http_guard_header *out)
{
    out->count = hs->slot[which].count;
    out->value = NULL;
    out->len = 0;
    if (header(hs, which, &out->value, &out->len) != 1) {
        out->value = NULL;
        out->len = 0;
    }
}

/* Returns the rejection status, or 0 when the request may go on. */
static unsigned check_origin_and_auth(struct cs_http *h, const struct hdrs *hs, const char **why)
{
    struct cs_http_guard_header host, origin, auth;
    guard_header(hs, H_HOST, &host);
    guard_header(hs, H_ORIGIN, &origin);
    guard_header(hs, H_AUTH, &auth);
    const struct cs_http_guard g = {h->host, h->port, h->token, h->token_len};
    switch (cs_http_guard_check(&g, &host, &origin, &auth)) {
    case CS_HTTP_GUARD_OK:
        return 0;
    case CS_HTTP_GUARD_BAD_HOST:
        *why = "Host not allowed";
        return MHD_HTTP_FORBIDDEN;
    case CS_HTTP_GUARD_BAD_ORIGIN:
        *why = "Origin not allowed";
        return MHD_HTTP_FORBIDDEN;
    case CS_HTTP_GUARD_BAD_TOKEN:
        break;
    }
    *why = "bad or missing bearer token";
    return MHD_HTTP_UNAUTHORIZED;
}

/* The headers whose meaning is one value, each at most once (and no Content-Length beside
 * Transfer-Encoding). Returns 0 when the request may go on, else 400 with *body and *why set. */
static unsigned check_single(const struct hdrs *hs, const char **body, const char **why)
{
    const struct cs_http_guard_single c = {
        .method = hs->slot[H_METHOD].count,
        .name = hs->slot[H_NAME].count,
        .version = hs->slot[H_VERSION].count,
        .session = hs->slot[H_SESSION].count,
        .length = hs->slot[H_CLEN].count,
        .transfer = hs->slot[H_TRANSFER].count,
    };
    switch (cs_http_guard_single(&c)) {
    case CS_HTTP_SINGLE_OK:
        return 0;
    case CS_HTTP_SINGLE_LENGTH:
        *body = BODY_REPEATED("Content-Length");
        *why = "repeated Content-Length";
        break;
    case CS_HTTP_SINGLE_LENGTH_TRANSFER:
        *body = RPC_ERROR("-32600", "Content-Length and Transfer-Encoding may not both appear");
        *why = "Content-Length with Transfer-Encoding";
        break;
    case CS_HTTP_SINGLE_VERSION:
        *body = BODY_REPEATED("MCP-Protocol-Version");
        *why = "repeated MCP-Protocol-Version";
        break;
    case CS_HTTP_SINGLE_METHOD:
        *body = BODY_REPEATED("Mcp-Method");
        *why = "repeated Mcp-Method";
        break;
    case CS_HTTP_SINGLE_NAME:
        *body = BODY_REPEATED("Mcp-Name");
        *why = "repeated Mcp-Name";
        break;
    case CS_HTTP_SINGLE_SESSION:
        *body = BODY_REPEATED("Mcp-Session-Id");
        *why = "repeated Mcp-Session-Id";
        break;
    }
    return MHD_HTTP_BAD_REQUEST;
}

/* A POST's Content-Type and Content-Length: *announced is the body size it announces (0 when
 * there is no Content-Length: chunked). */
static enum cs_http_body_verdict check_body_headers(const struct hdrs *hs, size_t cap,
                                                    size_t *announced)
{
    struct cs_http_guard_header ctype, clen;
    guard_header(hs, H_CTYPE, &ctype);
    guard_header(hs, H_CLEN, &clen);
    uint64_t len = 0;
    enum cs_http_body_verdict v = cs_http_guard_body(&ctype, &clen, cap, &len);
    *announced = (size_t)len; /* at most cap */
    return v;
}

/* ---- sessions ---- */

static struct sess *sess_find(struct cs_http *h, const char *id, size_t n)
{
    struct sess *found = NULL;
    if (n != SESSION_ID_LEN)
        return NULL;
    /* Every slot is compared in full so the time says nothing about how close a guess was. */
    for (size_t i = 0; i < h->nsessions; i++) {
        if (cs_http_ct_equal(id, n, h->sessions[i]->id, SESSION_ID_LEN))
            found = h->sessions[i];
    }
    return found;
}

static int sess_make_id(struct sess *s)
{
    unsigned char raw[SESSION_ID_BYTES];
    static const char hex[] = "0123456789abcdef";
    size_t got = 0;
    while (got < sizeof raw) {
        ssize_t n = getrandom(raw + got, sizeof raw - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        got += (size_t)n;
    }
    for (size_t i = 0; i < sizeof raw; i++) {
        s->id[2 * i] = hex[raw[i] >> 4];
        s->id[2 * i + 1] = hex[raw[i] & 0xf];
    }
    s->id[SESSION_ID_LEN] = '\0';
    return 0;
}

/* Ends s: every exchange still pending on it is abandoned first (its request answers 404 or, if
 * still uploading, will), then the core session is freed. */
static void sess_end(struct cs_http *h, struct sess *s)
{
    for (struct req *r = h->reqs; r; r = r->next) {
        if (r->sess != s || r->new_sess)
            continue;
        abandon(r);
        r->sess = NULL;
        if (r->state == REQ_WAITING) {
            r->state = REQ_ENDED;
            resume(r);
        } else if (r->state == REQ_STREAM && !r->sse_end) {
            r->sse_end = true; /* no reply will come: the stream ends with what it holds */
            resume(r);         /* MHD takes it on its next run */
        }
    }
    for (size_t i = 0; i < h->nsessions; i++) {
        if (h->sessions[i] == s) {
            h->sessions[i] = h->sessions[--h->nsessions];
            break;
        }
    }
    sess_free(s);
}

/* ---- deadlines: one timer for request receive deadlines and session idle timeouts ---- */

static void on_sweep(void *arg);

/* Makes the sweep run at or before `at` (monotonic ms). */
static void sweep_at(struct cs_http *h, int64_t at)
{
    if (h->stopping || (h->sweep && h->sweep_at <= at))
        return;
    if (h->sweep)
        cs_loop_timer_cancel(h->sweep);
    int64_t ms = at - cs_loop_now_ms();
    ms = ms < 0 ? 0 : ms > TIMER_MAX_MS ? TIMER_MAX_MS : ms;
    /* On OOM there is no sweep until the next deadline is set: deadlines are late, not lost. */
    h->sweep = cs_loop_timer_add(h->loop, ms, on_sweep, h);
    h->sweep_at = at;
}

static void sess_touch(struct cs_http *h, struct sess *s)
{
    s->seq = ++h->seq;
    s->used_ms = cs_loop_now_ms();
}

/* r names s (a live session): s is busy, so neither the idle timeout nor eviction ends it. */
static void sess_attach(struct cs_http *h, struct req *r, struct sess *s)
{
    r->sess = s;
    s->busy++;
    sess_touch(h, s);
}

static void sess_detach(struct cs_http *h, struct req *r)
{
    struct sess *s = r->sess;
    r->sess = NULL;
    if (!s)
        return;
    s->busy--;
    sess_touch(h, s);
    if (s->busy == 0)
        sweep_at(h, s->used_ms + h->idle_ms);
}

/* The least recently used session with no request in flight, or NULL. */
static struct sess *sess_lru(struct cs_http *h)
{
    struct sess *lru = NULL;
    for (size_t i = 0; i < h->nsessions; i++) {
        struct sess *s = h->sessions[i];
        if (s->busy == 0 && (!lru || s->seq < lru->seq))
            lru = s;
    }
    return lru;
}

static struct conn *conn_of(struct MHD_Connection *mc)
{
    const union MHD_ConnectionInfo *ci =
        cs_mhd.MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* The next request on mc must be received within request_ms from now: on a fresh connection
 * the client has just connected to send it; on keep-alive (after a response) it may first idle
 * up to the idle timeout, since MHD reads the first byte of the next request unseen by us. */
static void conn_expect_request(struct cs_http *h, struct MHD_Connection *mc, bool keepalive)
{
    struct conn *c = conn_of(mc);
    if (!c || h->stopping)
        return;
    int64_t now = cs_loop_now_ms();
    if (keepalive)
        c->served++;
    c->since = now;
    c->deadline = now + h->request_ms + (keepalive ? h->idle_ms_conn : 0);
    sweep_at(h, c->deadline);
}

/* The head of the request on mc is in and a body follows: it must be in within request_ms. */
static void conn_body_deadline(struct cs_http *h, struct MHD_Connection *mc)
{
    struct conn *c = conn_of(mc);
    int64_t at = cs_loop_now_ms() + h->request_ms;
    if (!c || h->stopping || c->deadline == 0)
        return;
    c->deadline = at;
    sweep_at(h, at);
}

/* The request on mc is fully received: no deadline until the next one. */
static void conn_received(struct MHD_Connection *mc)
{
    struct conn *c = conn_of(mc);
    if (c)
        c->deadline = 0;
}

/* Closes c: shutting the socket down wakes MHD, which reads EOF and closes the connection
 * through its usual path; the fd stays open (and ours to touch) until MHD's connection-closed
 * notification. */
static void conn_shut(struct cs_http *h, struct conn *c)
{
    const union MHD_ConnectionInfo *ci =
        cs_mhd.MHD_get_connection_info(c->mc, MHD_CONNECTION_INFO_CONNECTION_FD);
    c->deadline = 0;
    c->evicted = true;
    if (ci)
        shutdown(ci->connect_fd, SHUT_RDWR);
    kick(h);
}

/* A request was not received in time (a slow or stalled sender: MHD's own timeout counts idle
 * time only). */
static void conn_expire(struct cs_http *h, struct conn *c)
{
    char peer[INET6_ADDRSTRLEN];
    emit(h, "warn", "http_timeout", "peer=%s: request not received within its deadline",
         peer_text(c->mc, peer, sizeof peer));
    conn_shut(h, c);
}

static bool same_addr(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    if (a->ss_family != b->ss_family)
        return false;
    if (a->ss_family == AF_INET)
        return memcmp(&((const struct sockaddr_in *)(const void *)a)->sin_addr,
                      &((const struct sockaddr_in *)(const void *)b)->sin_addr,
                      sizeof(struct in_addr)) == 0;
    if (a->ss_family == AF_INET6)
        return memcmp(&((const struct sockaddr_in6 *)(const void *)a)->sin6_addr,
                      &((const struct sockaddr_in6 *)(const void *)b)->sin6_addr,
                      sizeof(struct in6_addr)) == 0;
    return false;
}

/* The connection to give up for `fresh` (not itself): one waiting for or receiving a request
 * (never one whose reply is pending or being written), from fresh's address only when
 * same_peer; those that never completed a request first, then the one waiting longest. NULL
 * when there is none. */
static struct conn *conn_victim(struct cs_http *h, const struct conn *fresh, bool same_peer)
{
    struct conn *best = NULL;
    for (struct conn *c = h->conns; c; c = c->next) {
        if (c == fresh || c->evicted || c->deadline == 0)
            continue;
        if (same_peer && !same_addr(&c->addr, &fresh->addr))
            continue;
        if (!best || (c->served == 0) > (best->served == 0) ||
            ((c->served == 0) == (best->served == 0) && c->since < best->since))
            best = c;
    }
    return best;
}

/* A connection was accepted: keep room for the next one. Over the per-address limit, the
 * address's own oldest waiting connection goes (or, if it has none, the new one: the address
 * holds that many busy connections); near the global limit, the oldest waiting one of any
 * address. MHD's own limit is the hard stop (new connections then wait in the listen backlog),
 * so eviction starts a little below it: a slot is always free for the next accept. Slow or idle
 * clients therefore cannot keep a new one out, whatever address they share with it. */
static void conn_make_room(struct cs_http *h, struct conn *fresh)
{
    char peer[INET6_ADDRSTRLEN];
    unsigned same = 0;
    for (struct conn *c = h->conns; c; c = c->next)
        same += !c->evicted && same_addr(&c->addr, &fresh->addr);
    if (fresh->addr.ss_family != 0 && same > h->per_ip) {
        struct conn *v = conn_victim(h, fresh, true);
        emit(h, "info", "http_evicted", "peer=%s: per-address limit (%u), %s",
             peer_text(fresh->mc, peer, sizeof peer), h->per_ip,
             v ? "oldest waiting connection closed" : "every other one busy: new one closed");
        conn_shut(h, v ? v : fresh);
        return;
    }
    if (h->nconns > h->evict_at) {
        struct conn *v = conn_victim(h, fresh, false);
        if (!v)
            return;
        emit(h, "info", "http_evicted", "peer=%s: connection limit (%u), oldest waiting closed",
             peer_text(v->mc, peer, sizeof peer), h->max_conns);
        conn_shut(h, v);
    }
}

static void on_sweep(void *arg)
{
    struct cs_http *h = arg;
    int64_t now = cs_loop_now_ms(), next = INT64_MAX;
    bool expired = false;
    h->sweep = NULL; /* fired: never cancel it again */
    for (struct conn *c = h->conns; c; c = c->next) {
        if (c->deadline == 0)
            continue;
        if (c->deadline > now) {
            next = c->deadline < next ? c->deadline : next;
            continue;
        }
        conn_expire(h, c);
        expired = true;
    }
    /* Backwards: sess_end moves the last session into the freed slot, one already looked at. */
    for (size_t i = h->nsessions; i-- > 0;) {
        struct sess *s = h->sessions[i];
        if (s->busy > 0)
            continue;
        if (now - s->used_ms < h->idle_ms) {
            next = s->used_ms + h->idle_ms < next ? s->used_ms + h->idle_ms : next;
            continue;
        }
        sess_end(h, s);
        emit(h, "info", "session_ended", "idle timeout, %zu open", h->nsessions);
    }
    if (expired)
        kick(h);
    if (next != INT64_MAX)
        sweep_at(h, next < now + SWEEP_MIN_MS ? now + SWEEP_MIN_MS : next);
}

/* MHD_OPTION_NOTIFY_CONNECTION: tracks every connection so that its requests get a deadline from
 * the moment it is accepted (headers included: the access handler only sees complete headers). */
static void on_connection(void *cls, struct MHD_Connection *mc, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    struct cs_http *h = cls;
    struct conn *c = *socket_context;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        c = calloc(1, sizeof *c);
        if (!c)
            return; /* on_request refuses the connection's requests */
        c->mc = mc;
        const union MHD_ConnectionInfo *ci =
            cs_mhd.MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        if (ci && ci->client_addr &&
            (ci->client_addr->sa_family == AF_INET || ci->client_addr->sa_family == AF_INET6))
            memcpy(&c->addr, ci->client_addr,
                   ci->client_addr->sa_family == AF_INET ? sizeof(struct sockaddr_in)
                                                         : sizeof(struct sockaddr_in6));
        c->next = h->conns;
        if (h->conns)
            h->conns->prev = c;
        h->conns = c;
        h->nconns++;
        *socket_context = c;
        conn_expect_request(h, mc, false);
        if (!h->stopping)
            conn_make_room(h, c);
        return;
    }
    if (!c) /* MHD_CONNECTION_NOTIFY_CLOSED; MHD closes the fd after this returns */
        return;
    *socket_context = NULL;
    h->nconns--;
    if (c->prev)
        c->prev->next = c->next;
    else
        h->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    free(c);
}

/* ---- the exchange ---- */

/* Takes n more bytes of the body budget for r. Returns false (nothing taken) when the total
 * would pass it. */
static bool budget_take(struct cs_http *h, struct req *r, size_t n)
{
    if (n > h->body_budget - h->body_used)
        return false;
    h->body_used += n;
    r->charged += n;
    return true;
}

static void budget_release(struct cs_http *h, struct req *r)
{
    h->body_used -= r->charged;
    r->charged = 0;
}

/* ---- the SSE stream (docs/http.md, "Progress") ---- */

/* Appends one SSE event carrying the JSON-RPC message text[0..n) (compact JSON: no newline).
 * Returns false when out of memory (the event is lost). */
static bool sse_append(struct req *r, const char *text, size_t n)
{
    static const char head[] = "event: message\ndata: ", tail[] = "\n\n";
    size_t need = sizeof head - 1 + n + sizeof tail - 1;
    if (r->sse_off == r->sse_len)
        r->sse_off = r->sse_len = 0; /* everything was handed to MHD: start over */
    if (need > r->sse_cap - r->sse_len) {
        size_t cap = r->sse_cap ? r->sse_cap : 1024;
        while (cap - r->sse_len < need)
            cap *= 2;
        char *p = realloc(r->sse, cap);
        if (!p)
            return false;
        r->sse = p;
        r->sse_cap = cap;
    }
    memcpy(r->sse + r->sse_len, head, sizeof head - 1);
    memcpy(r->sse + r->sse_len + sizeof head - 1, text, n);
    memcpy(r->sse + r->sse_len + sizeof head - 1 + n, tail, sizeof tail - 1);
    r->sse_len += need;
    return true;
}

/* MHD wants more of a stream: what is buffered; at its end, the end of the stream once the reply
 * went out, else nothing yet (the connection is suspended until an event arrives: MHD would
 * otherwise call again at once). */
static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct req *r = cls;
    (void)pos;
    if (r->state == REQ_CLOSE)
        return MHD_CONTENT_READER_END_WITH_ERROR; /* client gone or server stopping */
    if (r->sse_off < r->sse_len) {
        size_t n = r->sse_len - r->sse_off < max ? r->sse_len - r->sse_off : max;
        memcpy(buf, r->sse + r->sse_off, n);
        r->sse_off += n;
        return (ssize_t)n;
    }
    if (r->sse_end)
        return MHD_CONTENT_READER_END_OF_STREAM;
    r->suspended = true;
    cs_mhd.MHD_suspend_connection(r->conn);
    watch_peer(r);
    return 0;
}

/* The core's notifications for an exchange whose POST accepts text/event-stream. Only a stream
 * carries them (a request answered with plain JSON has none to carry). */
static void on_notify(void *arg, const char *text, size_t len)
{
    struct req *r = arg;
    if (r->state != REQ_STREAM || r->sse_end)
        return;
    if (sse_append(r, text, len))
        resume(r); /* MHD takes it on its next run */
}

/* Answers r, whose exchange is pending, as an SSE stream from now on (200 and the headers go out
 * at once; the reader suspends the connection until the first event). Runs in the access
 * handler. Returns false when the stream could not be set up (r is then answered as usual). */
static bool sse_start(struct req *r)
{
    struct MHD_Response *resp =
        cs_mhd.MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, sse_read, r, NULL);
    bool ok = resp &&
              cs_mhd.MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                                             "text/event-stream") == MHD_YES &&
              cs_mhd.MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache") ==
                  MHD_YES &&
              cs_mhd.MHD_add_response_header(resp, "X-Accel-Buffering", "no") == MHD_YES &&
              cs_mhd.MHD_queue_response(r->conn, MHD_HTTP_OK, resp) == MHD_YES;
    if (resp)
        cs_mhd.MHD_destroy_response(resp); /* the queue holds its own reference */
    if (ok)
        r->state = REQ_STREAM;
    return ok;
}

/* The reply of a streamed exchange: its last event (none when there is no reply: a cancelled
 * call), then the end of the stream. */
static void sse_reply(struct req *r, json_t *reply, char *text, size_t len)
{
    if (reply && !text)
        text = cs_wire_json_text(reply, &len);
    if (text && !sse_append(r, text, len))
        emit(r->h, "error", "http_stream", "out of memory: a reply was lost");
    free(text);
    json_decref(reply);
    r->sse_end = true;
    resume(r); /* MHD takes it on its next run */
}

static void on_reply(void *arg, json_t *reply, char *text, size_t len)
{
    struct req *r = arg;
    (void)len;
    /* Called once, maybe from inside cs_mcp_session_handle (r not suspended yet) or later. */
    r->x = NULL;
    if (r->state == REQ_STREAM) {
        sse_reply(r, reply, text, len);
        return;
    }
    json_decref(r->reply);
    r->reply = reply;
    free(r->reply_text);
    r->reply_text = text; /* NULL: serialized in send_reply (then reply is a small error) */
    r->state = REQ_REPLIED;
    resume(r);
}

/* True when the reply says the message itself was refused: a single JSON-RPC error whose id is
 * null (a parse error, an invalid request, a batch where batches are not accepted). Errors that
 * carry an id answer a request the server did accept, and a batch reply is a list. */
static bool input_refused(const json_t *reply)
{
    struct cs_jsonrpc_reply info;
    return cs_jsonrpc_reply_has_error(reply) && cs_jsonrpc_reply_info(reply, &info) &&
           info.is_error && info.id_null;
}

/* The HTTP status of a reply to a 2026-07-28 request (docs/protocol.md, "Errors"): 404 for a
 * method this revision does not have, 500 for an internal error, 400 for every other error. */
static unsigned modern_status(const json_t *reply)
{
    struct cs_jsonrpc_reply info;
    if (!cs_jsonrpc_reply_has_error(reply) || !cs_jsonrpc_reply_info(reply, &info) ||
        !info.is_error)
        return MHD_HTTP_OK;
    int64_t code = info.code;
    if (code == CS_JSONRPC_METHOD_NOT_FOUND)
        return MHD_HTTP_NOT_FOUND;
    if (code == CS_JSONRPC_INTERNAL_ERROR)
        return MHD_HTTP_INTERNAL_SERVER_ERROR;
    return MHD_HTTP_BAD_REQUEST;
}

/* After initialize the version header is optional but, when present, must be a 2025 version we
 * speak (2025 rules; a 2026-07-28 request is checked by the core). The initialize POST itself
 * carries no session and is not checked. */
static bool version_ok(struct req *r)
{
    const char *v;
    size_t n;
    int has_ver = header(&r->hdrs, H_VERSION, &v, &n);
    return has_ver == 0 || (has_ver > 0 && cs_mcp_version_supported(v));
}

/* Sends the reply of an exchange; finishes or drops a session being created by initialize.
 * Runs in the access handler, never inside the core. */
static enum MHD_Result send_reply(struct cs_http *h, struct req *r)
{
    const char *sid = NULL;
    if (r->new_sess) {
        struct sess *s = r->sess;
        r->sess = NULL;
        r->new_sess = false;
        h->nnew--;
        struct cs_jsonrpc_reply info;
        bool ok = cs_jsonrpc_reply_info(r->reply, &info) && info.has_result &&
                  cs_mcp_session_initialized(s->mcp);
        if (ok && sess_make_id(s) == 0 && h->nsessions < h->max_sessions) {
            h->sessions[h->nsessions++] = s;
            sid = s->id;
            sess_touch(h, s); /* busy is 0: this request no longer names it */
            sweep_at(h, s->used_ms + h->idle_ms);
            emit(h, "info", "session_created", "%s, %zu open", cs_mcp_session_version(s->mcp),
                 h->nsessions);
        } else {
            sess_free(s);
            if (ok)
                return reject(r, MHD_HTTP_INTERNAL_SERVER_ERROR, BODY_INTERNAL,
                              "no random session id");
        }
    }
    if (!r->reply)
        return respond(r, MHD_HTTP_ACCEPTED, NULL, 0, NULL, NULL, NULL);
    char *text = r->reply_text ? r->reply_text : cs_wire_json_text(r->reply, NULL);
    r->reply_text = NULL;
    if (!text)
        return reject(r, MHD_HTTP_INTERNAL_SERVER_ERROR, BODY_INTERNAL, "out of memory");
    unsigned status = MHD_HTTP_OK;
    if (r->modern) {
        status = modern_status(r->reply);
    } else if (input_refused(r->reply)) {
        /* Streamable HTTP: input the server cannot accept gets an HTTP error status; the body
         * is still the JSON-RPC error. */
        char peer[INET6_ADDRSTRLEN];
        status = MHD_HTTP_BAD_REQUEST;
        emit(h, "debug", "http_rejected", "400 invalid JSON-RPC message (peer=%s)",
             peer_text(r->conn, peer, sizeof peer));
    }
    return respond(r, status, NULL, strlen(text), text, sid ? "Mcp-Session-Id" : NULL, sid);
}

/* The whole body is in: classify the message (2026-07-28 or 2025), find or create the session
 * and hand the message to the core. */
static enum MHD_Result dispatch(struct cs_http *h, struct req *r)
{
    conn_received(r->conn);
    struct cs_mcp_headers hdr;
    hdr.has_version = header(&r->hdrs, H_VERSION, &hdr.version, &(size_t){0});
    hdr.has_method = header(&r->hdrs, H_METHOD, &hdr.method, &(size_t){0});
    hdr.has_name = header(&r->hdrs, H_NAME, &hdr.name, &(size_t){0});
    const char *accept = NULL;
    size_t accept_len = 0;
    bool sse_ok = header(&r->hdrs, H_ACCEPT, &accept, &accept_len) == 1 &&
                  cs_http_accepts_event_stream(accept, accept_len);
    hdr.notify = sse_ok ? on_notify : NULL;
    hdr.notify_arg = r;
    struct cs_mcp_msg *m = cs_mcp_msg_parse(r->body ? r->body : "", r->len);
    free(r->body);
    r->body = NULL;
    r->len = r->cap = 0;
    budget_release(h, r);
    if (!m)
        return reject(r, MHD_HTTP_INTERNAL_SERVER_ERROR, BODY_INTERNAL, "out of memory");
    struct cs_mcp_session *core;
    if (cs_mcp_msg_modern(m, &hdr)) {
        /* No session is needed or minted; an Mcp-Session-Id on it is ignored, never a 404. */
        r->modern = true;
        sess_detach(h, r);
        core = h->stateless;
        goto handle;
    }
    if (r->sess && !version_ok(r)) {
        cs_mcp_msg_free(m);
        return reject(r, MHD_HTTP_BAD_REQUEST, BODY_BAD_VERSION, "protocol version");
    }
    if (!r->sess) {
        bool init = cs_mcp_msg_is_initialize(m);
        if (r->named_session || !init)
            cs_mcp_msg_free(m);
        if (r->named_session)
            return reject(r, MHD_HTTP_NOT_FOUND, BODY_BAD_SESSION, "unknown or ended session");
        if (!init)
            return reject(r, MHD_HTTP_BAD_REQUEST, BODY_NO_SESSION, "no session");
        /* At the cap, make room by ending the least recently used idle session. */
        while (h->nsessions + h->nnew >= h->max_sessions) {
            struct sess *old = sess_lru(h);
            if (!old) {
                cs_mcp_msg_free(m);
                return reject(r, MHD_HTTP_SERVICE_UNAVAILABLE, BODY_TOO_MANY,
                              "session cap, every session busy");
            }
            sess_end(h, old);
            emit(h, "info", "session_ended", "evicted (least recently used), %zu open",
                 h->nsessions);
        }
        struct sess *s = calloc(1, sizeof *s);
        if (s)
            s->mcp = cs_mcp_session_new(h->srv);
        if (!s || !s->mcp) {
            free(s);
            cs_mcp_msg_free(m);
            return reject(r, MHD_HTTP_INTERNAL_SERVER_ERROR, BODY_INTERNAL, "out of memory");
        }
        r->sess = s;
        r->new_sess = true;
        h->nnew++;
    }
    core = r->sess->mcp;
handle:
    r->state = REQ_WAITING;
    struct cs_mcp_exchange *x = cs_mcp_session_handle_msg(core, m, &hdr, on_reply, r);
    if (!x)
        return send_reply(h, r); /* on_reply already ran */
    r->x = x;
    /* A call that asked for progress, from a client that takes a stream, is answered as one. */
    if (sse_ok && !r->new_sess && cs_mcp_exchange_wants_progress(x) && sse_start(r))
        return MHD_YES;
    r->suspended = true;
    cs_mhd.MHD_suspend_connection(r->conn);
    watch_peer(r);
    return MHD_YES;
}

/* Appends an upload chunk. Returns 0, MHD_HTTP_CONTENT_TOO_LARGE when the body would pass
 * max_body, MHD_HTTP_SERVICE_UNAVAILABLE when its buffer would pass the body budget, or
 * MHD_HTTP_INTERNAL_SERVER_ERROR when memory ran out. The buffer never grows past the announced
 * length (MHD delivers no more than that), so a body with a Content-Length stays within the
 * charge taken for it when its headers came in. */
static unsigned body_append(struct cs_http *h, struct req *r, const char *data, size_t n)
{
    if (n > h->max_body - r->len)
        return MHD_HTTP_CONTENT_TOO_LARGE;
    if (r->len + n > r->cap) {
        size_t limit = r->announced >= r->len + n ? r->announced : h->max_body;
        size_t cap = r->cap ? r->cap : BODY_FIRST_CAP;
        while (cap < r->len + n)
            cap = cap > h->max_body / 2 ? h->max_body : cap * 2;
        if (cap > limit)
            cap = limit;
        if (cap > r->charged && !budget_take(h, r, cap - r->charged))
            return MHD_HTTP_SERVICE_UNAVAILABLE;
        char *p = realloc(r->body, cap);
        if (!p)
            return MHD_HTTP_INTERNAL_SERVER_ERROR;
        r->body = p;
        r->cap = cap;
    }
    memcpy(r->body + r->len, data, n);
    r->len += n;
    return 0;
}

/* True when the request announces a body (Content-Length other than 0, or Transfer-Encoding). */
static bool has_body(const struct hdrs *hs)
{
    const char *v;
    size_t n;
    if (header(hs, H_TRANSFER, &v, &n) != 0)
        return true;
    const struct hdr_slot *clen = &hs->slot[H_CLEN];
    return clen->count > 0 && clen->value && strcmp(clen->value, "0") != 0;
}

/* GET /metrics, once Host, Origin and the token passed: the caller's page as text/plain; any
 * other method gets 405. Answered on the first call like every rejection. */
static enum MHD_Result serve_metrics(struct cs_http *h, struct req *r, const char *method)
{
    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0) {
        emit(h, "debug", "http_rejected", "405 method not allowed on /metrics");
        return respond(r, MHD_HTTP_METHOD_NOT_ALLOWED, BODY_NOT_ALLOWED, strlen(BODY_NOT_ALLOWED),
                       NULL, MHD_HTTP_HEADER_ALLOW, "GET");
    }
    size_t len = 0;
    char *text = h->metrics(h->metrics_arg, &len);
    if (!text)
        return reject(r, MHD_HTTP_INTERNAL_SERVER_ERROR, BODY_INTERNAL, "out of memory");
    enum MHD_Result rc = respond_typed(r, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8",
                                       text, len, NULL, NULL, NULL);
    free(text);
    return rc;
}

/* The first call for a request: headers are in, no body yet. */
static enum MHD_Result first_call(struct cs_http *h, struct req *r, const char *url,
                                  const char *method)
{
    const char *why = NULL, *v;
    size_t n;
    unsigned status = check_origin_and_auth(h, &r->hdrs, &why);
    if (status == MHD_HTTP_UNAUTHORIZED)
        return reject(r, status, BODY_UNAUTHORIZED, why);
    if (status != 0)
        return reject(r, status, BODY_FORBIDDEN, why);
    /* Before any path, session or body is looked at: nothing runs for such a request. */
    const char *body_text = NULL;
    if (check_single(&r->hdrs, &body_text, &why) != 0)
        return reject(r, MHD_HTTP_BAD_REQUEST, body_text, why);
    if (h->metrics && strcmp(url, "/metrics") == 0)
        return serve_metrics(h, r, method);
    if (strcmp(url, "/mcp") != 0)
        return reject(r, MHD_HTTP_NOT_FOUND, BODY_NOT_FOUND, "unknown path");
    bool post = strcmp(method, MHD_HTTP_METHOD_POST) == 0;
    bool del = strcmp(method, MHD_HTTP_METHOD_DELETE) == 0;
    if (!post && !del)
        return reject(r, MHD_HTTP_METHOD_NOT_ALLOWED, BODY_NOT_ALLOWED, "method not allowed");
    enum cs_http_body_verdict body =
        post ? check_body_headers(&r->hdrs, h->max_body, &r->announced) : CS_HTTP_BODY_OK;
    if (body == CS_HTTP_BODY_BAD_TYPE)
        return reject(r, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE, BODY_MEDIA_TYPE, "content type");
    if (body == CS_HTTP_BODY_TOO_LARGE)
        return reject(r, MHD_HTTP_CONTENT_TOO_LARGE, BODY_TOO_LARGE, "Content-Length over cap");
    /* The whole announced body is charged now, before a byte of it is buffered, so that the
     * total of bodies in flight never passes the budget (M9). */
    if (post && !budget_take(h, r, r->announced))
        return reject(r, MHD_HTTP_SERVICE_UNAVAILABLE, BODY_BUSY, "body budget in use");

    int has_sid = header(&r->hdrs, H_SESSION, &v, &n);
    if (has_sid != 0) {
        r->named_session = true;
        struct sess *s = has_sid > 0 ? sess_find(h, v, n) : NULL;
        /* A POST's session is judged once its body is in: a 2026-07-28 request ignores it. */
        if (!s && del)
            return reject(r, MHD_HTTP_NOT_FOUND, BODY_BAD_SESSION, "unknown session");
        if (s)
            sess_attach(h, r, s);
        if (del && !version_ok(r))
            return reject(r, MHD_HTTP_BAD_REQUEST, BODY_BAD_VERSION, "protocol version");
    } else if (del) {
        return reject(r, MHD_HTTP_BAD_REQUEST, BODY_NO_SESSION, "DELETE without session");
    }
    if (del) {
        struct sess *s = r->sess;
        r->sess = NULL;
        sess_end(h, s);
        emit(h, "info", "session_ended", "DELETE, %zu open", h->nsessions);
        return respond(r, MHD_HTTP_NO_CONTENT, NULL, 0, NULL, NULL, NULL);
    }
    r->state = REQ_BODY;
    conn_body_deadline(h, r->conn);
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls)
{
    struct cs_http *h = cls;
    struct req *r = *con_cls;
    (void)version;
    if (!r) {
        if (!conn_of(c))
            return MHD_NO; /* untracked (OOM at accept): it would have no deadline */
        r = calloc(1, sizeof *r);
        if (!r)
            return MHD_NO; /* closes the connection */
        r->h = h;
        r->conn = c;
        r->next = h->reqs;
        if (h->reqs)
            h->reqs->prev = r;
        h->reqs = r;
        *con_cls = r;
        r->state = REQ_DONE; /* until first_call says otherwise */
        read_headers(c, &r->hdrs);
        if (!has_body(&r->hdrs)) {
            /* MHD closes the connection after a response queued on the first call (it cannot
             * know whether a body follows), so a bodiless request is answered on the second. */
            conn_received(c);
            r->state = REQ_HEADERS;
            return MHD_YES;
        }
        return first_call(h, r, url, method);
    }
    switch (r->state) {
    case REQ_HEADERS: {
        enum MHD_Result rc = first_call(h, r, url, method);
        if (rc == MHD_YES && r->state == REQ_BODY)
            return dispatch(h, r); /* a POST with an empty body */
        return rc;
    }
    case REQ_BODY:
        if (*upload_size > 0) {
            size_t n = *upload_size;
            *upload_size = 0;
            unsigned status = body_append(h, r, upload, n);
            if (status == 0)
                return MHD_YES;
            /* MHD 0.9.75 refuses a response queued in the middle of an upload, so the rest of
             * the body is read and thrown away (never buffered) and the answer goes out at its
             * end; a body that keeps coming past a second allowance is cut off. */
            free(r->body);
            r->body = NULL;
            r->len = r->cap = 0;
            budget_release(h, r);
            r->state = REQ_DISCARD;
            r->discard_status = status;
            r->discarded = n;
            return MHD_YES;
        }
        return dispatch(h, r);
    case REQ_DISCARD:
        if (*upload_size > 0) {
            r->discarded += *upload_size;
            *upload_size = 0;
            if (r->discarded > h->max_body)
                return MHD_NO; /* closes the connection */
            return MHD_YES;
        }
        conn_received(c);
        if (r->discard_status == MHD_HTTP_CONTENT_TOO_LARGE)
            return reject(r, MHD_HTTP_CONTENT_TOO_LARGE, BODY_TOO_LARGE, "body over cap");
        if (r->discard_status == MHD_HTTP_SERVICE_UNAVAILABLE)
            return reject(r, MHD_HTTP_SERVICE_UNAVAILABLE, BODY_BUSY, "body budget in use");
        return reject(r, MHD_HTTP_INTERNAL_SERVER_ERROR, BODY_INTERNAL, "out of memory");
    case REQ_REPLIED:
        return send_reply(h, r);
    case REQ_ENDED:
        return reject(r, MHD_HTTP_NOT_FOUND, BODY_BAD_SESSION, "session ended while pending");
    case REQ_CLOSE:
        return MHD_NO;
    case REQ_WAITING: /* suspended: MHD does not call */
    case REQ_DONE:
    case REQ_STREAM:
        if (*upload_size > 0)
            *upload_size = 0; /* the rest of a refused body */
        return MHD_YES;
    }
    return MHD_NO;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    struct cs_http *h = cls;
    struct req *r = *con_cls;
    (void)toe;
    /* On keep-alive the next request's clock starts now; if MHD is closing the connection, its
     * connection-closed notification follows. */
    conn_expect_request(h, c, true);
    if (!r)
        return;
    *con_cls = NULL;
    unwatch(r); /* MHD closes the fd only after this callback */
    abandon(r); /* the transport can no longer deliver: the core drops the reply */
    if (r->new_sess) {
        sess_free(r->sess);
        r->sess = NULL;
        h->nnew--;
    } else {
        sess_detach(h, r);
    }
    json_decref(r->reply);
    free(r->reply_text);
    free(r->body);
    free(r->sse);
    budget_release(h, r);
    if (r->prev)
        r->prev->next = r->next;
    else
        h->reqs = r->next;
    if (r->next)
        r->next->prev = r->prev;
    free(r);
}

/* ---- start and stop ---- */

/* The connection limit the descriptor budget can hold: raises RLIMIT_NOFILE's soft limit
 * towards the hard one when `want` connections plus CS_HTTP_FD_RESERVE do not fit (only as far
 * as needed: children inherit it), else lowers the limit to what fits. Logs what it did. */
static unsigned fd_budget(struct cs_http *h, unsigned want)
{
    struct rlimit rl;
    rlim_t need = (rlim_t)want + CS_HTTP_FD_RESERVE + 16; /* 16: MHD's own and stdio */
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return want;
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need) {
        rlim_t was = rl.rlim_cur;
        rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > need ? need : rl.rlim_max;
        if (rl.rlim_cur > was && setrlimit(RLIMIT_NOFILE, &rl) == 0)
            emit(h, "info", "http_limits", "RLIMIT_NOFILE soft limit raised from %llu to %llu",
                 (unsigned long long)was, (unsigned long long)rl.rlim_cur);
        else
            rl.rlim_cur = was;
    }
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need) {
        rlim_t fit =
            rl.rlim_cur > CS_HTTP_FD_RESERVE + 16 + 16 ? rl.rlim_cur - CS_HTTP_FD_RESERVE - 16 : 16;
        emit(h, "warn", "http_limits",
             "RLIMIT_NOFILE %llu holds %llu connections, not %u: limit lowered",
             (unsigned long long)rl.rlim_cur, (unsigned long long)fit, want);
        return (unsigned)fit;
    }
    return want;
}

static char *dup_host(const char *host)
{
    /* An IPv6 literal appears bracketed in Host and Origin headers. */
    size_t n = strlen(host);
    bool v6 = strchr(host, ':') != NULL && host[0] != '[';
    char *s = malloc(n + 3);
    if (!s)
        return NULL;
    if (v6)
        snprintf(s, n + 3, "[%s]", host);
    else
        memcpy(s, host, n + 1);
    return s;
}

struct cs_http *cs_http_start(struct cs_loop *loop, struct cs_mcp *srv,
                              const struct cs_http_options *opt, struct cs_diag *err)
{
    struct cs_http *h = NULL, *ret = NULL;
    struct addrinfo *ai = NULL;
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct sockaddr_storage ss;
    const char *host = opt->host ? opt->host : "127.0.0.1";
    int grc;

    if (cs_mhd_load(err) != 0)
        return NULL;
    h = calloc(1, sizeof *h);
    if (!h) {
        cs_diag_set(err, CSW_ERROR_INTERNAL, "http: out of memory");
        goto out;
    }
    h->loop = loop;
    h->srv = srv;
    h->log = opt->log;
    h->log_arg = opt->log_arg;
    h->metrics = opt->metrics;
    h->metrics_arg = opt->metrics_arg;
    h->max_body = opt->max_body ? opt->max_body : CS_HTTP_DEFAULT_MAX_BODY;
    h->body_budget = opt->body_budget ? opt->body_budget : CS_HTTP_DEFAULT_BODY_BUDGET;
    if (h->body_budget < h->max_body)
        h->body_budget = h->max_body; /* one largest message always fits */
    h->max_sessions = opt->max_sessions ? opt->max_sessions : CS_HTTP_DEFAULT_MAX_SESSIONS;
    unsigned idle_s =
        opt->connection_timeout_s ? opt->connection_timeout_s : CS_HTTP_DEFAULT_TIMEOUT_S;
    h->request_ms =
        (int64_t)(opt->request_timeout_s ? opt->request_timeout_s : CS_HTTP_DEFAULT_REQUEST_S) *
        1000;
    h->idle_ms_conn = (int64_t)idle_s * 1000;
    h->idle_ms = (int64_t)(opt->session_idle_timeout_s ? opt->session_idle_timeout_s
                                                       : CS_HTTP_DEFAULT_SESSION_IDLE_S) *
                 1000;
    h->host = dup_host(host);
    h->sessions = calloc(h->max_sessions, sizeof *h->sessions);
    h->stateless = cs_mcp_session_new(srv);
    if (opt->token && opt->token[0]) {
        h->token = strdup(opt->token);
        h->token_len = strlen(opt->token);
    }
    if (!h->host || !h->sessions || !h->stateless || (opt->token && opt->token[0] && !h->token)) {
        cs_diag_set(err, CSW_ERROR_INTERNAL, "http: out of memory");
        goto out;
    }

    if (cs_mhd.MHD_is_feature_supported(MHD_FEATURE_EPOLL) != MHD_YES) {
        cs_diag_set(err, CSW_ERROR_INTERNAL, "http: libmicrohttpd was built without epoll support");
        goto out;
    }
    grc = getaddrinfo(host, NULL, &hints, &ai);
    if (grc != 0 || !ai || ai->ai_addrlen > sizeof ss) {
        cs_diag_set(err, CSW_ERROR_INTERNAL, "http: cannot resolve host '%s': %s", host,
                    grc ? gai_strerror(grc) : "no address");
        goto out;
    }
    memset(&ss, 0, sizeof ss);
    memcpy(&ss, ai->ai_addr, ai->ai_addrlen);
    bool v6 = ss.ss_family == AF_INET6;
    if (v6)
        ((struct sockaddr_in6 *)(void *)&ss)->sin6_port = htons(opt->port);
    else
        ((struct sockaddr_in *)(void *)&ss)->sin_port = htons(opt->port);

    /* External epoll mode: no MHD thread; the loop polls MHD's epoll fd and calls MHD_run. */
    unsigned flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME;
    if (v6)
        flags |= MHD_USE_IPv6;
    if (h->log)
        flags |= MHD_USE_ERROR_LOG;
    errno = 0;
    /* The logger comes first so that MHD never prints to stderr on its own. */
    h->max_conns =
        fd_budget(h, opt->max_connections ? opt->max_connections : CS_HTTP_DEFAULT_MAX_CONNECTIONS);
    /* Eviction keeps an eighth of the slots (at least 2) free for accepts: at MHD's limit it
     * would stop accepting, and a new client could not evict anyone. */
    unsigned spare = h->max_conns / 8 < 2 ? 2 : h->max_conns / 8;
    h->evict_at = h->max_conns > spare ? h->max_conns - spare : 1;
    h->per_ip = opt->per_ip_connections ? opt->per_ip_connections : CS_HTTP_DEFAULT_PER_IP;
    /* No MHD_OPTION_PER_IP_CONNECTION_LIMIT: MHD would refuse the new connection, and every
     * local client shares 127.0.0.1; conn_make_room evicts the address's oldest waiting one. */
    h->d = cs_mhd.MHD_start_daemon(
        flags, opt->port, NULL, NULL, on_request, h, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, h,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss, MHD_OPTION_CONNECTION_LIMIT, h->max_conns,
        MHD_OPTION_CONNECTION_TIMEOUT, idle_s, MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, h, MHD_OPTION_END);
    if (!h->d) {
        cs_diag_set(err, CSW_ERROR_INTERNAL, "http: cannot listen on %s port %u%s%s", host,
                    (unsigned)opt->port, errno ? ": " : "", errno ? strerror(errno) : "");
        goto out;
    }
    const union MHD_DaemonInfo *di = cs_mhd.MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    h->port = di ? di->port : opt->port;
    di = cs_mhd.MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_EPOLL_FD);
    if (di)
        h->mhd_watch = cs_loop_fd_add(loop, di->epoll_fd, CS_LOOP_READ, on_mhd_ready, h);
    if (!h->mhd_watch) {
        cs_diag_set(err, CSW_ERROR_INTERNAL, "http: cannot watch the MHD epoll fd");
        goto out;
    }
    rearm(h);
    ret = h;

out:
    if (ai)
        freeaddrinfo(ai);
    if (!ret)
        cs_http_stop(h);
    return ret;
}

uint16_t cs_http_port(const struct cs_http *h)
{
    return h->port;
}

void cs_http_stop(struct cs_http *h)
{
    if (!h)
        return;
    h->stopping = true;
    if (h->sweep)
        cs_loop_timer_cancel(h->sweep);
    h->sweep = NULL;
    /* MHD_stop_daemon closes the epoll fd: the loop stops watching it first. (The per-request
     * peer watches go in resume and on_completed, both before MHD closes a connection's fd.) */
    cs_loop_fd_del(h->mhd_watch);
    h->mhd_watch = NULL;
    if (h->d) {
        /* MHD must not be stopped with suspended connections: abandon every exchange, resume
         * those connections and let one run close them (the handler answers MHD_NO). */
        for (struct req *r = h->reqs; r; r = r->next) {
            abandon(r);
            if (r->suspended) {
                r->state = REQ_CLOSE;
                resume(r);
            }
        }
        cs_mhd.MHD_run(h->d);
        /* Completes every request (on_completed frees them) and reports every connection
         * closed (on_connection frees them). */
        cs_mhd.MHD_stop_daemon(h->d);
    }
    if (h->timer)
        cs_loop_timer_cancel(h->timer);
    while (h->conns) { /* none expected: MHD reported them all closed */
        struct conn *c = h->conns;
        h->conns = c->next;
        free(c);
    }
    for (size_t i = 0; i < h->nsessions; i++)
        sess_free(h->sessions[i]);
    free(h->sessions);
    cs_mcp_session_free(h->stateless);
    if (h->token) {
        explicit_bzero(h->token, h->token_len);
        free(h->token);
    }
    free(h->host);
    free(h);
}
