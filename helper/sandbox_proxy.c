/*
 * sandbox_proxy: the enabled-network proxy (docs/contract/sandbox.md §4), run by the outer helper
 * in the host network namespace. The listening socket was created inside the sandbox's network
 * namespace, so only the sandboxed command can reach it.
 *
 * One epoll loop, level-triggered, non-blocking sockets. Each connection goes HEAD (reading the
 * request head, at most CS_SBX_HEAD_MAX bytes) -> RESOLVING (names only) -> CONNECTING
 * (non-blocking connect, next address on failure) -> TUNNEL (bytes both ways, half-close
 * propagated), or REPLY (a 4xx/5xx answer, then close; also from TUNNEL when a forwarded request's
 * destination ends before its first byte). A fd is registered only while some event
 * on it is wanted, so a hung-up peer never spins the loop. The same loop reads the signalfd: the
 * loop ends when the callback says the init was reaped; every connection is then closed.
 *
 * The tunnel moves bytes with splice(2) through one pipe per direction, so they never enter this
 * process: socket -> pipe -> socket. What the proxy itself must send first (the "200 Connection
 * established" line, a rewritten request head, bytes the client sent after the head) sits in a
 * bounded buffer that is written before anything in the pipe. A tunnel that gets no pipes (the
 * descriptor budget below, or pipe2 failing) copies through the buffers as before. Either way a
 * direction holds at most 64 KiB in flight: reading from a side stops while its buffer or pipe is
 * full, and a side's EOF becomes a shutdown of the other side once both are empty. After a read
 * the other side is written at once; EPOLLOUT is wanted only while a write could not finish.
 *
 * Trust: everything read from a client socket is hostile (cs_sbx_parse_request checks it).
 * Names are resolved by getaddrinfo on detached threads (at most MAX_LOOKUPS at once), which hand
 * the result back through a pipe the loop watches, so a slow DNS answer stalls only its own
 * connection (ST_RESOLVING); IP literals are parsed at once.
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sandbox.h"

#define BUF_CAP (64 * 1024)
/* A spliced tunnel's pipes, each way: 1 MiB moves four times what the default does per splice
 * (bench/sandbox.py: 100 MB through the proxy 0.41x -> 0.50x of direct). Only the first
 * BIG_PIPES tunnels get them, so a command holding many stalled tunnels pins at most
 * BIG_PIPES x 2 MiB of pipe buffers more than with the default size. */
#define PIPE_BYTES (1024 * 1024)
#define BIG_PIPES  16
#define MAX_CONNS  1024
/* Descriptors: 2 sockets a connection, 4 more (two pipes) a spliced tunnel. Pipes are given only
 * while MAX_CONNS copying connections still fit under RLIMIT_NOFILE with FD_RESERVE to spare, so
 * splicing never lowers how many connections the proxy accepts. */
#define FD_RESERVE 64
#define MAX_ADDRS  16 /* addresses tried per destination */

enum state { ST_HEAD, ST_RESOLVING, ST_CONNECTING, ST_TUNNEL, ST_REPLY };

struct buf {
    char *d;
    size_t off, len;
};

struct conn;

/* A name lookup run by a detached thread; the result comes back through a pipe as this
 * pointer. c is cleared when the connection goes away first; the loop then frees the job. */
struct lookup {
    struct conn *c;
    char host[CS_SBX_HOST_MAX + 1];
    char port[8];
    struct addrinfo *res;
    int rc;
    int notify_fd;
};

struct endpoint {
    struct conn *c;
    int side; /* 0 client, 1 upstream */
};

/* One direction's pipe while splicing: n bytes are in it (read from the source side, not yet
 * written to the other); full once a splice into it found no room. */
struct pipe_dir {
    int p[2];
    size_t n, cap;
    bool full;
};

struct conn {
    enum state st;
    int fd[2];
    int reg[2]; /* registered epoll mask, -1 when not registered */
    struct endpoint ep[2];
    char head[CS_SBX_HEAD_MAX];
    size_t head_n;
    struct buf c2u, u2c;
    bool spliced;                            /* pd[] are open */
    size_t moved[2];                         /* bytes read from side i while copying */
    struct pipe_dir pd[2];                   /* pd[s]: the bytes from side s to the other */
    bool eof[2];                             /* side i sent EOF */
    bool shut[2];                            /* we shut down writing to side i */
    struct sockaddr_storage addr[MAX_ADDRS]; /* checked, normalized, with the port: what connect
                                              * uses, so no second resolution can differ */
    size_t naddr, next;
    struct lookup *lookup; /* in flight while ST_RESOLVING */
    struct cs_sbx_request req;
    size_t answered; /* bytes read from the destination: none yet means it has not answered */
    int up_fail;     /* the destination's side ended: an errno, -1 for EOF, 0 while it has not */
    struct conn *prev_c, *next_c;
};

struct proxy {
    int ep;
    int lookup_pipe[2];
    size_t lookups; /* threads in flight */
    const struct cs_sbx_proxy_cfg *cfg;
    struct conn *conns;
    struct conn *dead; /* closed during this batch of events, freed after it */
    size_t nconns;
    size_t spliced, splice_max; /* tunnels holding pipes, and how many may */
};

static char marker_listen, marker_sig, marker_lookup, marker_notify;

/* A relay passes on what it got at once: Nagle's algorithm would hold a short segment (a reply's
 * body after its head) until the peer acknowledged the last one. Best effort. */
static void no_delay(int fd)
{
    int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

#define MAX_LOOKUPS 64

static void buf_compact(struct buf *b)
{
    if (b->off && b->len)
        memmove(b->d, b->d + b->off, b->len);
    b->off = 0;
}

static size_t buf_room(const struct buf *b)
{
    return BUF_CAP - b->off - b->len;
}

/* What side s sent that the other side has not been given yet. */
static struct buf *dir_buf(struct conn *c, int s)
{
    return s == 0 ? &c->c2u : &c->u2c;
}

static size_t dir_pending(const struct conn *c, int s)
{
    const struct buf *b = s == 0 ? &c->c2u : &c->u2c;
    return b->len + (c->spliced ? c->pd[s].n : 0);
}

/* Whether reading from side s may go on: its buffer or pipe has room. */
static bool dir_room(const struct conn *c, int s)
{
    if (c->spliced)
        return !c->pd[s].full && c->pd[s].n < c->pd[s].cap;
    return buf_room(s == 0 ? &c->c2u : &c->u2c) > 0;
}

static void conn_unsplice(struct proxy *px, struct conn *c)
{
    if (!c->spliced)
        return;
    for (int s = 0; s < 2; s++) {
        close(c->pd[s].p[0]);
        close(c->pd[s].p[1]);
    }
    c->spliced = false;
    px->spliced--;
}

/* Gives the tunnel its two pipes when the budget allows; otherwise it copies. */
static void conn_splice(struct proxy *px, struct conn *c)
{
    if (px->spliced >= px->splice_max)
        return;
    if (pipe2(c->pd[0].p, O_CLOEXEC | O_NONBLOCK) < 0)
        return;
    if (pipe2(c->pd[1].p, O_CLOEXEC | O_NONBLOCK) < 0) {
        close(c->pd[0].p[0]);
        close(c->pd[0].p[1]);
        return;
    }
    for (int s = 0; s < 2; s++) {
        /* Best effort: past the user's pipe budget the kernel refuses, the default stays. */
        if (px->spliced < BIG_PIPES)
            (void)fcntl(c->pd[s].p[1], F_SETPIPE_SZ, PIPE_BYTES);
        int sz = fcntl(c->pd[s].p[1], F_GETPIPE_SZ);
        c->pd[s].cap = sz > 0 ? (size_t)sz : BUF_CAP;
        c->pd[s].n = 0;
        c->pd[s].full = false;
    }
    c->spliced = true;
    px->spliced++;
}

/* Closes a connection and takes it out of the live list. Its memory is freed only after the
 * current batch of events (conn_reap): an event later in the batch that names it then finds no
 * live connection at its address, never a new one accepted meanwhile in the same memory. */
static void conn_free(struct proxy *px, struct conn *c)
{
    for (int i = 0; i < 2; i++)
        if (c->fd[i] >= 0)
            close(c->fd[i]); /* closing also removes it from the epoll set */
    c->fd[0] = c->fd[1] = -1;
    conn_unsplice(px, c);
    if (c->lookup)
        c->lookup->c = NULL; /* the loop frees it when the thread reports */
    c->lookup = NULL;
    assert((c->prev_c == NULL) == (px->conns == c)); /* only the head has no predecessor */
    if (c->prev_c)
        c->prev_c->next_c = c->next_c;
    else
        px->conns = c->next_c;
    if (c->next_c)
        c->next_c->prev_c = c->prev_c;
    px->nconns--;
    c->prev_c = NULL;
    c->next_c = px->dead;
    px->dead = c;
}

static void conn_reap(struct proxy *px)
{
    while (px->dead) {
        struct conn *c = px->dead;
        px->dead = c->next_c;
        free(c->req.rewritten);
        free(c->c2u.d);
        free(c->u2c.d);
        free(c);
    }
}

/* Registers exactly the events each fd needs now. */
static void conn_update(struct proxy *px, struct conn *c)
{
    int want[2] = {0, 0};
    switch (c->st) {
    case ST_HEAD:
        want[0] = EPOLLIN;
        break;
    case ST_RESOLVING:
        break;
    case ST_CONNECTING:
        want[1] = EPOLLOUT;
        break;
    case ST_REPLY:
        want[0] = c->u2c.len ? EPOLLOUT : 0;
        break;
    case ST_TUNNEL:
        for (int s = 0; s < 2; s++) {
            if (!c->eof[s] && dir_room(c, s))
                want[s] |= EPOLLIN;
            if (dir_pending(c, !s))
                want[s] |= EPOLLOUT;
        }
        break;
    }
    for (int i = 0; i < 2; i++) {
        if (c->fd[i] < 0 || want[i] == c->reg[i] || (want[i] == 0 && c->reg[i] < 0))
            continue;
        struct epoll_event ev = {.events = (uint32_t)want[i], .data.ptr = &c->ep[i]};
        int op = c->reg[i] < 0 ? EPOLL_CTL_ADD : want[i] ? EPOLL_CTL_MOD : EPOLL_CTL_DEL;
        if (epoll_ctl(px->ep, op, c->fd[i], &ev) == 0)
            c->reg[i] = op == EPOLL_CTL_DEL ? -1 : want[i];
    }
}

static void reply(struct proxy *px, struct conn *c, const char *status, const char *reason)
{
    int n = snprintf(c->u2c.d, BUF_CAP,
                     "HTTP/1.1 %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n%s\n",
                     status, strlen(reason) + 1, reason);
    c->u2c.off = 0;
    c->u2c.len = n > 0 ? (size_t)n : 0;
    if (c->fd[1] >= 0) {
        close(c->fd[1]);
        c->fd[1] = -1;
        c->reg[1] = -1;
    }
    c->st = ST_REPLY;
    conn_update(px, c);
}

/* Starts a connect to the next checked address; false when none is left. */
static bool try_connect(struct proxy *px, struct conn *c)
{
    for (; c->next < c->naddr; c->next++) {
        const struct sockaddr_storage *a = &c->addr[c->next];
        socklen_t len = a->ss_family == AF_INET ? (socklen_t)sizeof(struct sockaddr_in)
                                                : (socklen_t)sizeof(struct sockaddr_in6);
        int s = socket(a->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (s < 0)
            continue;
        no_delay(s);
        if (connect(s, (const struct sockaddr *)a, len) == 0 || errno == EINPROGRESS) {
            c->fd[1] = s;
            c->reg[1] = -1;
            c->next++;
            c->st = ST_CONNECTING;
            conn_update(px, c);
            return true;
        }
        close(s);
    }
    return false;
}

/* The address rule on one candidate: normalized (v4-mapped as IPv4), given the request's port,
 * checked, and kept for connect only when admitted. Returns the refusal reason or NULL. */
static const char *add_address(struct proxy *px, struct conn *c, const struct sockaddr *sa)
{
    if (sa->sa_family != AF_INET && sa->sa_family != AF_INET6)
        return "unsupported address family";
    struct sockaddr_storage a;
    cs_netallow_addr_normalize(sa, &a);
    cs_netallow_addr_set_port(&a, c->req.port);
    const char *why = NULL;
    if (!cs_netallow_admit_addr(px->cfg->policy, (const struct sockaddr *)&a, c->req.port, &why))
        return why;
    for (size_t i = 0; i < c->naddr; i++)
        if (cs_netallow_addr_equal((const struct sockaddr *)&c->addr[i],
                                   (const struct sockaddr *)&a))
            return NULL;
    if (c->naddr < MAX_ADDRS)
        c->addr[c->naddr++] = a;
    return NULL;
}

/* Records a refusal for the report (docs/contract/tools.md §6): host:port as requested, and which
 * rule refused it (the reasons are base_netallow's static texts). */
static void record_refusal(const struct conn *c, const char *why, bool bad_request)
{
    char target[CS_SBX_HOST_MAX + 16];
    const char *reason = "not_allowed";
    if (bad_request)
        reason = "bad_request";
    else if (why && (strstr(why, "internal") || strstr(why, "host itself") ||
                     strstr(why, "localhost") || strstr(why, "of the host")))
        reason = "private_address";
    if (c->req.host[0] == '\0')
        snprintf(target, sizeof target, "(malformed request)");
    else if (strchr(c->req.host, ':'))
        snprintf(target, sizeof target, "[%s]:%u", c->req.host, c->req.port);
    else
        snprintf(target, sizeof target, "%s:%u", c->req.host, c->req.port);
    cs_sbx_denial_add(CSW_DENIAL_KIND_NETWORK, target, reason);
}

/* Connects to the admitted addresses, or answers 403 with the last refusal. */
static void connect_admitted(struct proxy *px, struct conn *c, const char *refused)
{
    if (c->naddr == 0) {
        record_refusal(c, refused, false);
        reply(px, c, "403 Forbidden", refused ? refused : "no address");
        return;
    }
    c->next = 0;
    if (!try_connect(px, c))
        reply(px, c, "502 Bad Gateway", "cannot connect to the destination");
}

/* Continues with a finished lookup: the address rule on every result, then the first connect. */
static void resolved(struct proxy *px, struct conn *c, int rc, struct addrinfo *res)
{
    if (rc != 0 || !res) {
        if (res)
            freeaddrinfo(res);
        reply(px, c, "502 Bad Gateway", "cannot resolve the destination");
        return;
    }
    const char *refused = NULL;
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        const char *why = add_address(px, c, a->ai_addr);
        if (why)
            refused = why;
    }
    freeaddrinfo(res);
    connect_admitted(px, c, refused);
}

static void *lookup_thread(void *arg)
{
    struct lookup *l = arg;
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    /* Whatever the name resolves to, every address is checked before it is used. */
    l->rc = getaddrinfo(l->host, l->port, &hints, &l->res);
    /* a pointer is far below PIPE_BUF: the write is atomic */
    (void)!write(l->notify_fd, &l, sizeof l);
    return NULL;
}

static void start_upstream(struct proxy *px, struct conn *c)
{
    const char *why = NULL;
    if (!cs_netallow_admit_host(px->cfg->policy, c->req.host, c->req.port, &why)) {
        record_refusal(c, why, false);
        reply(px, c, "403 Forbidden", why);
        return;
    }
    char port[8];
    snprintf(port, sizeof port, "%u", c->req.port);
    /* Any numeric spelling is the address a resolver would read (base_netallow): no lookup,
     * the address itself is checked and connected to. */
    struct sockaddr_storage ip;
    if (cs_netallow_host_numeric(c->req.host, &ip) == CS_NETALLOW_NUMERIC) {
        connect_admitted(px, c, add_address(px, c, (const struct sockaddr *)&ip));
        return;
    }
    /* A name: resolve on a thread so the loop keeps serving every other connection. */
    if (px->lookups >= MAX_LOOKUPS) {
        reply(px, c, "503 Service Unavailable", "too many name lookups in flight");
        return;
    }
    struct lookup *l = calloc(1, sizeof *l);
    pthread_attr_t attr;
    pthread_t t;
    if (!l || pthread_attr_init(&attr) != 0) {
        free(l);
        reply(px, c, "503 Service Unavailable", "out of memory");
        return;
    }
    l->c = c;
    snprintf(l->host, sizeof l->host, "%s", c->req.host);
    snprintf(l->port, sizeof l->port, "%s", port);
    l->notify_fd = px->lookup_pipe[1];
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    int e = pthread_create(&t, &attr, lookup_thread, l);
    pthread_attr_destroy(&attr);
    if (e != 0) {
        free(l);
        reply(px, c, "503 Service Unavailable", "cannot start a name lookup");
        return;
    }
    px->lookups++;
    c->lookup = l;
    c->st = ST_RESOLVING;
    conn_update(px, c);
}

static void on_lookups(struct proxy *px)
{
    struct lookup *l;
    while (read(px->lookup_pipe[0], &l, sizeof l) == (ssize_t)sizeof l) {
        px->lookups--;
        struct conn *c = l->c;
        if (c) {
            c->lookup = NULL;
            resolved(px, c, l->rc, l->res);
        } else if (l->res) {
            freeaddrinfo(l->res);
        }
        free(l);
    }
}

static bool tunnel_io(struct conn *c, int side, uint32_t ev);

/* A forwarded request (not a CONNECT tunnel, whose 200 the client already has) that the
 * destination has not answered with one byte yet: if it ends now, the proxy answers. */
static bool unanswered(const struct conn *c)
{
    return !c->req.connect && c->answered == 0;
}

/* A tunnel that must end: closed, or for an unanswered request whose destination closed or
 * failed, a 502 that says so, as a proxy answers (the client would otherwise see an empty
 * reply and not know which side ended it). */
static void tunnel_end(struct proxy *px, struct conn *c)
{
    if (!unanswered(c) || c->up_fail == 0 || c->shut[0]) {
        conn_free(px, c);
        return;
    }
    char why[160];
    if (c->up_fail < 0)
        snprintf(why, sizeof why, "the destination closed the connection without answering");
    else
        snprintf(why, sizeof why, "the destination's connection failed before it answered: %s",
                 strerror(c->up_fail));
    conn_unsplice(px, c);
    reply(px, c, "502 Bad Gateway", why);
}

static void enter_tunnel(struct proxy *px, struct conn *c)
{
    size_t extra = c->head_n - c->req.head_len; /* bytes the client sent after the head */
    c->u2c.off = c->u2c.len = 0;
    c->c2u.off = c->c2u.len = 0;
    if (c->req.connect) {
        static const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";
        memcpy(c->u2c.d, ok, sizeof ok - 1);
        c->u2c.len = sizeof ok - 1;
    } else {
        memcpy(c->c2u.d, c->req.rewritten, c->req.rewritten_len);
        c->c2u.len = c->req.rewritten_len;
    }
    memcpy(c->c2u.d + c->c2u.len, c->head + c->req.head_len, extra);
    c->c2u.len += extra;
    c->st = ST_TUNNEL;
    /* Copying until one direction has carried BUF_CAP bytes (conn_bulk): a short exchange, such
     * as a small request and its reply on a connection of their own, pays no pipes. */
    /* Both sides are writable now, most likely: no loop turn before the first bytes go. */
    if (!tunnel_io(c, 0, EPOLLOUT) || !tunnel_io(c, 1, EPOLLOUT)) {
        tunnel_end(px, c);
        return;
    }
    conn_update(px, c);
}

static void on_head(struct proxy *px, struct conn *c)
{
    ssize_t r = read(c->fd[0], c->head + c->head_n, sizeof c->head - c->head_n);
    if (r < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (r <= 0) {
        conn_free(px, c);
        return;
    }
    c->head_n += (size_t)r;
    enum cs_sbx_parse p = cs_sbx_parse_request(c->head, c->head_n, &c->req);
    if (p == CS_SBX_PARSE_MORE)
        return;
    if (p == CS_SBX_PARSE_BAD) {
        record_refusal(c, NULL, true);
        reply(px, c, "400 Bad Request", c->req.reason);
        return;
    }
    start_upstream(px, c);
}

/* The upstream connect's outcome. Only a connection that has a peer enters the tunnel: no
 * error pending is not yet "connected" (a connect still in progress has neither). */
static void on_connecting(struct proxy *px, struct conn *c, int side, uint32_t ev)
{
    if (side != 1)
        return; /* only the upstream socket is registered while connecting */
    int err = 0;
    socklen_t l = sizeof err;
    if (getsockopt(c->fd[1], SOL_SOCKET, SO_ERROR, &err, &l) < 0)
        err = errno;
    if (err == 0) {
        struct sockaddr_storage peer;
        socklen_t pl = sizeof peer;
        if (getpeername(c->fd[1], (struct sockaddr *)&peer, &pl) == 0) {
            enter_tunnel(px, c);
            return;
        }
        if (!(ev & (EPOLLHUP | EPOLLERR)))
            return; /* still connecting: wait for the next event */
        err = errno;
    }
    epoll_ctl(px->ep, EPOLL_CTL_DEL, c->fd[1], NULL);
    close(c->fd[1]);
    c->fd[1] = -1;
    c->reg[1] = -1;
    if (!try_connect(px, c))
        reply(px, c, "502 Bad Gateway", "cannot connect to the destination");
}

/* Reads from side s what it sends the other side, as far as that direction has room; false when
 * the connection must close. */
static bool dir_read(struct conn *c, int s)
{
    if (c->eof[s] || !dir_room(c, s))
        return true;
    ssize_t r;
    if (c->spliced) {
        struct pipe_dir *pd = &c->pd[s];
        r = splice(c->fd[s], NULL, pd->p[1], NULL, pd->cap - pd->n,
                   SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
        if (r > 0) {
            pd->n += (size_t)r;
            if (s == 1)
                c->answered += (size_t)r;
        } else if (r < 0 && errno == EAGAIN && pd->n)
            pd->full = true; /* no slot left (a pipe counts pages, not bytes): wait for a drain */
    } else {
        struct buf *in = dir_buf(c, s);
        if (in->off + in->len == BUF_CAP)
            buf_compact(in);
        r = read(c->fd[s], in->d + in->off + in->len, buf_room(in));
        if (r > 0) {
            in->len += (size_t)r;
            c->moved[s] += (size_t)r;
            if (s == 1)
                c->answered += (size_t)r;
        }
    }
    if (r == 0)
        c->eof[s] = true;
    if (r >= 0 || errno == EAGAIN || errno == EINTR)
        return true;
    if (s == 1)
        c->up_fail = errno;
    return false;
}

/* Writes to the other side what side s sent: the buffer first, then the pipe. */
static bool dir_write(struct conn *c, int s)
{
    int fd = c->fd[!s];
    struct buf *out = dir_buf(c, s);
    if (out->len) {
        ssize_t w = send(fd, out->d + out->off, out->len, MSG_NOSIGNAL);
        if (w > 0) {
            out->off += (size_t)w;
            out->len -= (size_t)w;
            if (!out->len)
                out->off = 0;
        } else if (w < 0 && errno != EAGAIN && errno != EINTR) {
            if (s == 0)
                c->up_fail = errno;
            return false;
        }
        if (out->len)
            return true;
    }
    if (c->spliced && c->pd[s].n) {
        struct pipe_dir *pd = &c->pd[s];
        /* SIGPIPE is ignored in the outer helper: a gone peer is EPIPE here */
        ssize_t w = splice(pd->p[0], NULL, fd, NULL, pd->n, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
        if (w > 0) {
            pd->n -= (size_t)w;
            pd->full = false;
        } else if (w < 0 && errno != EAGAIN && errno != EINTR) {
            if (s == 0)
                c->up_fail = errno;
            return false;
        }
    }
    return true;
}

/* Moves bytes for one side's readiness: what it sends is read and passed on to the other side at
 * once; what it receives is written when it is writable. Returns false when the connection must
 * close. */
static bool tunnel_io(struct conn *c, int side, uint32_t ev)
{
    if (ev & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
        if (!dir_read(c, side))
            return false;
        if (dir_pending(c, side) && !dir_write(c, side))
            return false;
    }
    if ((ev & (EPOLLOUT | EPOLLERR)) && dir_pending(c, !side) && !dir_write(c, !side))
        return false;
    /* A request the destination ended without a byte of answer is answered here (tunnel_end). */
    if (c->eof[1] && unanswered(c)) {
        c->up_fail = -1;
        return false;
    }
    /* Propagate EOFs once everything before them is delivered. */
    for (int s = 0; s < 2; s++) {
        if (c->eof[s] && !dir_pending(c, s) && !c->shut[!s]) {
            shutdown(c->fd[!s], SHUT_WR);
            c->shut[!s] = true;
        }
    }
    return !(c->shut[0] && c->shut[1]);
}

static void on_accept(struct proxy *px)
{
    for (;;) {
        int fd = accept4(px->cfg->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        struct conn *c = px->nconns < MAX_CONNS ? calloc(1, sizeof *c) : NULL;
        char *b1 = c ? malloc(BUF_CAP) : NULL, *b2 = c ? malloc(BUF_CAP) : NULL;
        if (!c || !b1 || !b2) {
            free(b1);
            free(b2);
            free(c);
            close(fd);
            continue;
        }
        no_delay(fd);
        c->fd[0] = fd;
        c->fd[1] = -1;
        c->reg[0] = c->reg[1] = -1;
        c->ep[0] = (struct endpoint){c, 0};
        c->ep[1] = (struct endpoint){c, 1};
        c->c2u.d = b1;
        c->u2c.d = b2;
        c->st = ST_HEAD;
        c->next_c = px->conns;
        if (px->conns)
            px->conns->prev_c = c;
        px->conns = c;
        px->nconns++;
        conn_update(px, c);
    }
}

static void on_conn_event(struct proxy *px, struct endpoint *e, uint32_t ev)
{
    struct conn *c = e->c;
    switch (c->st) {
    case ST_HEAD:
        on_head(px, c);
        return;
    case ST_RESOLVING:
        return; /* nothing is registered in this state */
    case ST_CONNECTING:
        on_connecting(px, c, e->side, ev);
        return;
    case ST_REPLY: {
        ssize_t w = send(c->fd[0], c->u2c.d + c->u2c.off, c->u2c.len, MSG_NOSIGNAL);
        if (w > 0) {
            c->u2c.off += (size_t)w;
            c->u2c.len -= (size_t)w;
        }
        if ((w < 0 && errno != EAGAIN) || c->u2c.len == 0 || (ev & EPOLLERR)) {
            conn_free(px, c);
            return;
        }
        break;
    }
    case ST_TUNNEL:
        if (!tunnel_io(c, e->side, ev)) {
            tunnel_end(px, c);
            return;
        }
        /* A bulk transfer: the bytes already buffered go first (dir_write), then the pipes. */
        if (!c->spliced && (c->moved[0] >= BUF_CAP || c->moved[1] >= BUF_CAP))
            conn_splice(px, c);
        break;
    }
    conn_update(px, c);
}

void cs_sbx_proxy_serve(const struct cs_sbx_proxy_cfg *cfg)
{
    struct proxy px = {.cfg = cfg};
    /* The descriptor budget (FD_RESERVE above), raising the soft limit as far as it needs; only
     * this process is affected: the command was forked before. */
    struct rlimit rl;
    rlim_t need = FD_RESERVE + 6 * (rlim_t)MAX_CONNS;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need &&
            (rl.rlim_max == RLIM_INFINITY || rl.rlim_max > rl.rlim_cur)) {
            struct rlimit up = {
                .rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > need ? need : rl.rlim_max,
                .rlim_max = rl.rlim_max};
            if (setrlimit(RLIMIT_NOFILE, &up) == 0)
                rl.rlim_cur = up.rlim_cur;
        }
        rlim_t cur = rl.rlim_cur == RLIM_INFINITY ? need : rl.rlim_cur;
        rlim_t fixed = FD_RESERVE + 2 * (rlim_t)MAX_CONNS;
        px.splice_max = cur > fixed ? (size_t)((cur - fixed) / 4) : 0;
        if (px.splice_max > MAX_CONNS)
            px.splice_max = MAX_CONNS;
    }
    px.ep = epoll_create1(EPOLL_CLOEXEC);
    if (px.ep < 0)
        cs_sbx_die("epoll_create1");
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &marker_sig};
    if (epoll_ctl(px.ep, EPOLL_CTL_ADD, cfg->sig_fd, &ev) < 0)
        cs_sbx_die("epoll_ctl signalfd");
    if (pipe2(px.lookup_pipe, O_CLOEXEC) < 0 || fcntl(px.lookup_pipe[0], F_SETFL, O_NONBLOCK) < 0)
        cs_sbx_die("lookup pipe");
    ev.data.ptr = &marker_lookup;
    if (epoll_ctl(px.ep, EPOLL_CTL_ADD, px.lookup_pipe[0], &ev) < 0)
        cs_sbx_die("epoll_ctl lookup pipe");
    if (cfg->listen_fd >= 0) {
        ev.data.ptr = &marker_listen;
        if (epoll_ctl(px.ep, EPOLL_CTL_ADD, cfg->listen_fd, &ev) < 0)
            cs_sbx_die("epoll_ctl listener");
    }
    if (cfg->notify_fd >= 0) {
        ev.data.ptr = &marker_notify;
        if (epoll_ctl(px.ep, EPOLL_CTL_ADD, cfg->notify_fd, &ev) < 0)
            cs_sbx_die("epoll_ctl seccomp listener");
    }
    int notify_fd = cfg->notify_fd;
    bool done = false;
    struct epoll_event evs[64];
    while (!done) {
        int n = epoll_wait(px.ep, evs, 64, -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            cs_sbx_die("epoll_wait");
        }
        /* Signals first: a reaped init ends the loop before any pointer below is used. */
        for (int i = 0; i < n && !done; i++) {
            if (evs[i].data.ptr != &marker_sig)
                continue;
            struct signalfd_siginfo si;
            while (read(cfg->sig_fd, &si, sizeof si) == (ssize_t)sizeof si)
                if (cfg->on_signal(cfg->ctx, (int)si.ssi_signo))
                    done = true;
        }
        if (done)
            break;
        /* A conn closed by one event may be named by a later one in this batch: each pointer
         * is looked up in the live list first, and no memory is reused before the batch ends
         * (conn_reap). */
        for (int i = 0; i < n; i++) {
            void *p = evs[i].data.ptr;
            if (p == &marker_sig)
                continue;
            if (p == &marker_listen) {
                on_accept(&px);
                continue;
            }
            if (p == &marker_lookup) {
                on_lookups(&px);
                continue;
            }
            if (p == &marker_notify) {
                /* One notification per wake-up (level-triggered): a refused call waits only
                 * for this loop's turn, never for a connection or a lookup. */
                if (notify_fd >= 0 && (evs[i].events & EPOLLIN) &&
                    cs_sbx_notify_serve_one(notify_fd) == 0)
                    continue;
                /* EPOLLHUP: no process uses the filter any more (a receive would block); or
                 * the listener failed: closed, so refused calls get ENOSYS, never a hang. */
                if (notify_fd >= 0 && !(evs[i].events & EPOLLIN)) {
                    epoll_ctl(px.ep, EPOLL_CTL_DEL, notify_fd, NULL);
                } else if (notify_fd >= 0) {
                    epoll_ctl(px.ep, EPOLL_CTL_DEL, notify_fd, NULL);
                    close(notify_fd);
                    notify_fd = -1;
                    *cfg->notify_closed = true;
                }
                continue;
            }
            /* p is compared, never dereferenced, until it is known to be live */
            struct endpoint *e = NULL;
            for (struct conn *c = px.conns; c && !e; c = c->next_c)
                if (p == (void *)&c->ep[0] || p == (void *)&c->ep[1])
                    e = p;
            if (e)
                on_conn_event(&px, e, evs[i].events);
        }
        conn_reap(&px);
    }
    while (px.conns)
        conn_free(&px, px.conns);
    conn_reap(&px);
    if (cfg->listen_fd >= 0)
        close(cfg->listen_fd);
    /* Lookup threads still running keep the pipe's write end: it stays open, and the helper
     * exits right after this loop. */
    close(px.lookup_pipe[0]);
    close(px.ep);
}
