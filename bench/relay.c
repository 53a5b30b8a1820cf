/*
 * relay: this machine's floor for the sandbox's HTTP proxy, the part of a proxied transfer no
 * proxy can remove: one more TCP connection and one more process between client and server.
 * It listens on 127.0.0.1 (an ephemeral port, printed on stdout), and for each accepted
 * connection connects to the one upstream given on the command line, sets TCP_NODELAY on both
 * sockets, and moves bytes both ways with splice(2) through one 1 MiB pipe per direction
 * (socket -> pipe -> socket, as helper/sandbox_proxy.c does once a tunnel is bulk). A side's
 * EOF becomes shutdown(SHUT_WR) of the other side once its pipe is drained. No parsing: an HTTP
 * client pointed at it as a proxy sends its absolute-form request through unchanged, which a
 * server answering by path reads as well.
 *
 * Built and run by bench/sandbox.py (cc -O2 -D_GNU_SOURCE -pthread); not part of the product.
 * Usage: relay HOST PORT [epoll|threads]
 *   epoll (default): one edge-triggered epoll loop serves every connection, each fd registered
 *     once for input and output; threads: two threads a connection, blocking splices.
 * Runs until killed, its parent dies (PR_SET_PDEATHSIG) or its stdin is readable (the bench
 * holds it open as a pipe: EOF when the bench is gone).
 * Trust: the peers are the bench's own client and server; errors close the connection.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#define PIPE_BYTES (1024 * 1024)

/* One direction: bytes from src go through the pipe to dst; n are in the pipe. */
struct dir {
    int src, dst;
    int p[2];
    size_t n;
    bool eof, shut;
};

struct conn {
    int fd[2];       /* client, upstream */
    struct dir d[2]; /* d[0]: client -> upstream, d[1]: upstream -> client */
    int done;        /* threads mode: directions finished, under mu */
    pthread_mutex_t mu;
};

static struct sockaddr_in upstream;
static char marker_listen, marker_stdin;

static void die(const char *what)
{
    perror(what);
    exit(1);
}

static void no_delay(int fd)
{
    int one = 1;
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0)
        die("relay: TCP_NODELAY");
}

/* Opens the pipe of direction d with PIPE_BYTES of room; 0, or -1 with errno. */
static int dir_open(struct dir *d, int src, int dst, int flags)
{
    d->src = src;
    d->dst = dst;
    d->n = 0;
    d->eof = d->shut = false;
    if (pipe2(d->p, O_CLOEXEC | flags) != 0)
        return -1;
    if (fcntl(d->p[1], F_SETPIPE_SZ, PIPE_BYTES) < 0)
        die("relay: F_SETPIPE_SZ");
    return 0;
}

/* Accepts one connection and connects it to the upstream (a blocking connect: loopback answers
 * at once); NULL when either fails. */
static struct conn *conn_open(int lfd, int flags)
{
    struct conn *c = calloc(1, sizeof *c);
    if (!c)
        die("relay: calloc");
    c->fd[0] = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    if (c->fd[0] < 0) {
        free(c);
        return NULL;
    }
    c->fd[1] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c->fd[1] < 0 || connect(c->fd[1], (struct sockaddr *)&upstream, sizeof upstream) != 0) {
        perror("relay: connect upstream");
        close(c->fd[0]);
        if (c->fd[1] >= 0)
            close(c->fd[1]);
        free(c);
        return NULL;
    }
    no_delay(c->fd[0]);
    no_delay(c->fd[1]);
    if (dir_open(&c->d[0], c->fd[0], c->fd[1], flags) != 0 ||
        dir_open(&c->d[1], c->fd[1], c->fd[0], flags) != 0)
        die("relay: pipe2");
    if (flags & O_NONBLOCK)
        for (int i = 0; i < 2; i++)
            if (fcntl(c->fd[i], F_SETFL, O_NONBLOCK) != 0)
                die("relay: O_NONBLOCK");
    return c;
}

/* ---- epoll mode ---- */

/* Moves what it can in direction d until neither side can go on (edge-triggered: the next
 * event on either fd calls again). Returns false on an error: the connection closes. */
static bool pump(struct dir *d)
{
    for (;;) {
        bool moved = false;
        if (!d->eof && d->n < PIPE_BYTES) {
            ssize_t r = splice(d->src, NULL, d->p[1], NULL, PIPE_BYTES - d->n,
                               SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
            if (r > 0) {
                d->n += (size_t)r;
                moved = true;
            } else if (r == 0) {
                d->eof = true;
            } else if (errno != EAGAIN && errno != EINTR) {
                return false;
            }
        }
        if (d->n) {
            ssize_t w =
                splice(d->p[0], NULL, d->dst, NULL, d->n, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
            if (w > 0) {
                d->n -= (size_t)w;
                moved = true;
            } else if (w < 0 && errno != EAGAIN && errno != EINTR) {
                return false;
            }
        }
        if (!moved)
            break;
    }
    if (d->eof && !d->n && !d->shut) {
        shutdown(d->dst, SHUT_WR);
        d->shut = true;
    }
    return true;
}

static void conn_close(struct conn *c)
{
    for (int i = 0; i < 2; i++) {
        close(c->fd[i]); /* leaves the epoll set */
        close(c->d[i].p[0]);
        close(c->d[i].p[1]);
        c->fd[i] = c->d[i].p[0] = c->d[i].p[1] = -1;
    }
}

/* An epoll set watching the listener and stdin (EOF there: the bench is gone). */
static int watch_listener(int lfd)
{
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0)
        die("relay: epoll_create1");
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &marker_listen};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev) != 0)
        die("relay: epoll_ctl");
    ev.data.ptr = &marker_stdin;
    (void)epoll_ctl(ep, EPOLL_CTL_ADD, 0, &ev); /* stdin may be a file: then not watched */
    return ep;
}

static void serve_epoll(int lfd)
{
    int ep = watch_listener(lfd);
    struct epoll_event evs[64];
    struct conn *closed[64];
    for (;;) {
        int n = epoll_wait(ep, evs, 64, -1);
        if (n < 0 && errno != EINTR)
            die("relay: epoll_wait");
        int nclosed = 0;
        for (int i = 0; i < n; i++) {
            void *p = evs[i].data.ptr;
            if (p == &marker_stdin)
                return; /* the bench is gone */
            if (p == &marker_listen) {
                struct conn *c = conn_open(lfd, O_NONBLOCK);
                if (!c)
                    continue;
                for (int s = 0; s < 2; s++) {
                    struct epoll_event ce = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
                                             .data.ptr = c};
                    if (epoll_ctl(ep, EPOLL_CTL_ADD, c->fd[s], &ce) != 0)
                        die("relay: epoll_ctl conn");
                }
                continue; /* adding reports what is ready already: the next wait */
            }
            /* Both directions on any event: each fd is the source of one and the sink of the
             * other. */
            struct conn *c = p;
            if (c->fd[0] < 0)
                continue; /* closed earlier in this batch; freed after it */
            if (!pump(&c->d[0]) || !pump(&c->d[1]) || (c->d[0].shut && c->d[1].shut)) {
                conn_close(c);
                closed[nclosed++] = c; /* at most one per event: n <= 64 */
            }
        }
        for (int i = 0; i < nclosed; i++)
            free(closed[i]);
    }
}

/* ---- threads mode ---- */

struct half {
    struct conn *c;
    int i;
};

/* One direction with blocking splices until EOF or an error; the last of the two closes. */
static void *relay_dir(void *arg)
{
    struct half *h = arg;
    struct conn *c = h->c;
    struct dir *d = &c->d[h->i];
    for (;;) {
        ssize_t r = splice(d->src, NULL, d->p[1], NULL, PIPE_BYTES, SPLICE_F_MOVE);
        if (r <= 0)
            break;
        while (r > 0) {
            ssize_t w = splice(d->p[0], NULL, d->dst, NULL, (size_t)r, SPLICE_F_MOVE);
            if (w <= 0)
                goto out;
            r -= w;
        }
    }
out:
    shutdown(d->dst, SHUT_WR);
    free(h);
    pthread_mutex_lock(&c->mu);
    bool last = ++c->done == 2;
    pthread_mutex_unlock(&c->mu);
    if (last) {
        pthread_mutex_destroy(&c->mu);
        conn_close(c);
        free(c);
    }
    return NULL;
}

static void serve_threads(int lfd)
{
    int ep = watch_listener(lfd);
    struct epoll_event ev;
    pthread_attr_t attr;
    if (pthread_attr_init(&attr) != 0 ||
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED) != 0)
        die("relay: pthread_attr");
    for (;;) {
        int n = epoll_wait(ep, &ev, 1, -1);
        if (n < 0 && errno != EINTR)
            die("relay: epoll_wait");
        if (n != 1)
            continue;
        if (ev.data.ptr == &marker_stdin)
            return;
        struct conn *c = conn_open(lfd, 0);
        if (!c)
            continue;
        pthread_mutex_init(&c->mu, NULL);
        for (int i = 0; i < 2; i++) {
            struct half *h = malloc(sizeof *h);
            pthread_t t;
            if (!h)
                die("relay: malloc");
            *h = (struct half){c, i};
            if (pthread_create(&t, &attr, relay_dir, h) != 0)
                die("relay: pthread_create");
        }
    }
}

int main(int argc, char **argv)
{
    if (argc < 3 ||
        (argc > 3 && strcmp(argv[3], "epoll") != 0 && strcmp(argv[3], "threads") != 0)) {
        fprintf(stderr, "usage: relay HOST PORT [epoll|threads]\n");
        return 2;
    }
    /* Never outlive the bench: killed with its parent. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
        die("relay: PR_SET_PDEATHSIG");
    if (getppid() == 1)
        return 1;             /* the parent died before the line above */
    signal(SIGPIPE, SIG_IGN); /* a gone peer is EPIPE */
    upstream.sin_family = AF_INET;
    upstream.sin_port = htons((unsigned short)atoi(argv[2]));
    if (inet_pton(AF_INET, argv[1], &upstream.sin_addr) != 1) {
        fprintf(stderr, "relay: HOST must be an IPv4 address: %s\n", argv[1]);
        return 2;
    }
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in me = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof me;
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&me, sizeof me) != 0 || listen(lfd, 128) != 0 ||
        getsockname(lfd, (struct sockaddr *)&me, &len) != 0)
        die("relay: listen");
    printf("%u\n", ntohs(me.sin_port));
    fflush(stdout);
    if (argc > 3 && strcmp(argv[3], "threads") == 0)
        serve_threads(lfd);
    else
        serve_epoll(lfd);
    return 0;
}
