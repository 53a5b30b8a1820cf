/*
 * codespace-runtime: the worker behind `--runner uds` (docs/contract/runtime.md §4). Started and
 * owned by the gateway; binds `runner.sock` in the gateway's private leaf directory, accepts
 * exactly one connection, and serves the runner wire protocol (version 7) on it with the same
 * executor the in-process runner uses (files, patch engine, supervisor).
 *
 * Hardening at start: not dumpable, no core files, every LD_* variable removed from its
 * environment. None of this sandboxes the commands it runs.
 *
 * Lifetime (issue 34): the worker never outlives its gateway. The gateway names itself with
 * --gateway-fd N, the read end of a pipe whose write end only the gateway holds (close-on-exec):
 * its hang-up means the gateway is gone, whenever that happened, even before our first line ran
 * (a getppid() taken then would name the reaper). It is checked once the parent-death signal
 * (SIGHUP, caught: it ends the loop like the hang-up) is armed, and watched on the loop after.
 * A worker no gateway says hello to within ACCEPT_BOUND_MS of binding exits too. Whichever way
 * it goes, its command groups are killed and it removes its socket and the directory holding
 * it (the gateway's leaf, made for this worker). These four signals are blocked from the first
 * line, so one that comes before the loop waits for it instead of ending us without cleanup. The
 * --sandbox helper is probed once at start (the gateway's code): a failed probe, or no sandbox
 * under CODESPACE_REQUIRE_LINUX_SANDBOX=1, stops the worker there, and the hello answer states what
 * the probe found (docs/scale-out.md).
 *
 * Protocol rules: the first request must be hello with protocol 7; any other protocol (in the
 * envelope or in hello), an undecodable frame, a frame of length 0 or over 16 MiB, or a message
 * that is not a request gets an error response and the connection is closed. Requests are
 * served concurrently (responses in completion order); the last 32 responses are kept for
 * `replay`. A finished process is announced with a process_exited event. When the connection
 * ends, every process group is killed and the worker exits 0.
 *
 * Trust: the peer is the gateway that started us (the socket lives in its 0700 directory); its
 * frames are still decoded through the generated decoder.
 *
 * --listen HOST:PORT (docs/scale-out.md): a worker nobody started for us. It opens its own roots
 * (--root PATH), and a TLS front (runner_tls.c) bridges each authenticated TCP connection to a
 * socketpair whose other end it hands to the loop (no name in the file system, so a killed
 * worker leaves nothing behind); the session code below is the same, but it keeps taking
 * connections: several gateways are served at once, each connection a session
 * with its own hello, request ids and cancels. An answer goes to the session that asked; the
 * replay cache is keyed by the gateway's name from its hello (else the session's number) and the
 * request id; process_exited goes to every session. A connection's end does not end the worker:
 * its processes and replay cache stay, its calls in flight answer to the cache only, and the
 * next connection says hello again. Such a worker has no parent-death signal: SIGHUP reads
 * its pre-shared key files again (cs_tls_front_reload), a removed identity's connection ends.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "base_log.h"
#include "base_roots.h"
#include "base_loop.h"
#include "base_version.h"
#include "runner.h"
#include "store.h"
#include "runner_tls.h"

extern char **environ;

/* A gateway-started worker exits when no gateway said hello within this long of its bind. The
 * gateway connects within 2 s of starting it and waits 2 s for the hello answer, or gives up and
 * kills it (runner_uds.c), so a live gateway never meets this bound (docs/runner.md). */
#define ACCEPT_BOUND_MS 5000

/* What a gateway-started worker removes when it exits, however it exits once started: the socket
 * it bound (never one it found live) and the directory holding it, the gateway's leaf made for
 * this worker (rmdir: only when empty). */
static struct {
    char *sock; /* --socket, set in gateway mode only */
    bool bound;
} own;

static void remove_own_files(void)
{
    if (!own.sock)
        return;
    if (own.bound)
        (void)unlink(own.sock);
    char *slash = strrchr(own.sock, '/');
    if (slash && slash != own.sock) {
        *slash = '\0';
        (void)rmdir(own.sock);
        *slash = '/';
    }
}

/* TEST-ONLY (docs/runner.md, "Test hooks"): CODESPACE_TEST_WORKER_STOP=STEP stops this worker
 * (SIGSTOP to itself) at STEP, one of before-pdeathsig, before-accept, after-accept, so that a
 * test can SIGKILL the gateway there and then let the worker go on (SIGCONT). Unset: nothing. */
static void test_stop(const char *step)
{
    const char *v = getenv("CODESPACE_TEST_WORKER_STOP");
    if (v && strcmp(v, step) == 0)
        (void)raise(SIGSTOP);
}

/* True when the gateway's end of the --gateway-fd pipe is closed: the gateway is gone. */
static bool gateway_gone(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return fd >= 0 && poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLERR | POLLNVAL)) != 0;
}

/* The replay cache's key of a connection: "g:" and the gateway its hello names (the same on each
 * of that gateway's connections), else "c:" and the connection's serial number. */
#define KEY_SIZE 80

/* One gateway connection (docs/scale-out.md, "Several gateways"). A gateway-started worker has
 * one at a time; a --listen worker one per bridged gateway connection, each with its own request
 * ids: an answer goes to the connection that asked, or, that connection gone, only to the cache. */
struct sess {
    struct worker *w;
    struct cs_runner_conn *conn;
    bool hello_done, closing, got_frame;
    char key[KEY_SIZE];
    struct req *reqs; /* its requests the executor has not answered yet, for cancel */
    struct sess *prev, *next;
};

struct worker {
    struct cs_loop *loop;
    struct cs_runner_exec *ex;
    struct sess *sessions;
    size_t n_sessions;
    unsigned long long serial; /* connections accepted */
    bool closing;              /* the worker ends: nothing more is sent */
    int lfd;
    struct cs_loop_fd *lw;
    struct cs_loop_timer *reap_timer;
    bool exits_since_scan;
    /* the replay cache: the last CS_RUNNER_REPLAY_CACHE responses as sent (JSON text), oldest
     * first overwritten */
    struct {
        char key[KEY_SIZE];
        char *request_id;
        char *text;
        size_t n;
    } cache[CS_RUNNER_REPLAY_CACHE];
    size_t cache_next;
    bool listening; /* --listen: a connection's end is not ours (docs/scale-out.md) */
    struct cs_supervisor_isolation iso; /* what our commands get (the probe at start) */
    int gatefd;                         /* --gateway-fd, or -1 (--listen) */
    struct cs_loop_fd *gw;
    struct cs_loop_timer *accept_timer; /* ACCEPT_BOUND_MS, until the gateway's hello */
    const char *why;                    /* set: the worker ends for this reason (exit 1) */
    struct cs_tls_front *front;         /* --listen: the TLS front (SIGHUP reloads its keys) */
};

/* One request in flight. */
struct req {
    struct worker *w;
    struct sess *s; /* the connection that asked; NULL once it is gone */
    char key[KEY_SIZE];
    char *request_id;
    bool linked; /* in s->reqs */
    struct req *prev, *next;
};

#define USAGE                                                                                      \
    "usage: codespace-runtime --socket PATH --gateway-fd N --root FD:PATH... [options]   "         \
    "(started by codespace-mcp)\n"                                                                 \
    "       codespace-runtime --listen HOST:PORT --root PATH... (TLS or --plaintext) [options]\n"  \
    "       codespace-runtime --help | --version\n"

static void usage(void)
{
    fputs(USAGE, stderr);
}

/* Ends the loop; why (static text), when set, is logged at exit and makes the exit status 1. */
/* The reason stop() is given when the gateway's pipe hung up: the worker then exits at once. */
static const char GATEWAY_GONE[] = "the gateway is gone";

static void stop(struct worker *w, const char *why)
{
    if (why && !w->why)
        w->why = why;
    w->closing = true;
    cs_loop_stop(w->loop);
}

/* Removes every LD_* variable (the loader's knobs) from the environment. */
static void scrub_env(void)
{
    for (;;) {
        char *name = NULL;
        for (char **e = environ; *e; e++)
            if (strncmp(*e, "LD_", 3) == 0) {
                name = *e;
                break;
            }
        if (!name)
            return;
        char buf[256];
        size_t n = strcspn(name, "=");
        snprintf(buf, sizeof buf, "%.*s", (int)(n < sizeof buf ? n : sizeof buf - 1), name);
        if (unsetenv(buf) != 0)
            return;
    }
}

/* Keeps text (taken: released here or later) as the response to rid of the connections keyed
 * key. */
static void cache_put(struct worker *w, const char *key, const char *rid, char *text, size_t n)
{
    size_t i = w->cache_next++ % CS_RUNNER_REPLAY_CACHE;
    snprintf(w->cache[i].key, sizeof w->cache[i].key, "%s", key);
    free(w->cache[i].request_id);
    cs_wire_release(w->cache[i].text);
    w->cache[i].request_id = strdup(rid);
    w->cache[i].text = text;
    w->cache[i].n = n;
    if (!w->cache[i].request_id) {
        cs_wire_release(text);
        w->cache[i].text = NULL;
    }
}

/* Sends a response's JSON text (taken) on s (NULL: gone, nothing is sent), kept for replay under
 * (key, rid) when cache is set. */
static void send_text(struct worker *w, struct sess *s, const char *key, const char *rid,
                      char *text, size_t n, bool cache)
{
    if (!text)
        return;
    if (s && s->conn && !s->closing && !w->closing)
        (void)cs_runner_conn_send_text(s->conn, text, n);
    if (cache)
        cache_put(w, key, rid, text, n);
    else
        cs_wire_release(text);
}

/* Sends one wire message, written straight to text by the generated encoder. */
static bool send_wire(struct worker *w, struct sess *s, const char *key, const char *rid,
                      const struct csw_runner_wire *m, bool cache)
{
    char *text = NULL;
    size_t n = 0;
    struct cs_wire_diag diag;
    if (csw_runner_wire_encode_text(m, &text, &n, &diag) != CS_WIRE_OK)
        return false;
    send_text(w, s, key, rid, text, n, cache);
    return true;
}

/* An error response to request rid as JSON text (*text, *n; NULL when out of memory): a catalogue
 * code, or INTERNAL outside it. */
static void error_text(const char *rid, int code, const char *msg, char **text, size_t *n)
{
    struct csw_runner_wire m;
    memset(&m, 0, sizeof m);
    m.tag = CSW_RUNNER_WIRE_RESPONSE;
    m.u.response.protocol = CS_RUNNER_PROTOCOL;
    m.u.response.request_id = (struct cs_str){(char *)rid, strlen(rid)};
    m.u.response.ok = false;
    m.u.response.has_error = true;
    m.u.response.error.code =
        code >= 0 && code < CSW_ERROR__COUNT ? (enum csw_error)code : CSW_ERROR_INTERNAL;
    m.u.response.error.message = (struct cs_str){(char *)(msg ? msg : ""), msg ? strlen(msg) : 0};
    struct cs_wire_diag diag;
    *text = NULL;
    if (csw_runner_wire_encode_text(&m, text, n, &diag) == CS_WIRE_OK)
        return;
    /* A message the schema refuses (not UTF-8, too long): the code alone still goes out. */
    m.u.response.error.message = (struct cs_str){(char *)"(message not sendable)", 22};
    if (csw_runner_wire_encode_text(&m, text, n, &diag) != CS_WIRE_OK)
        *text = NULL;
}

/* An error response to request rid of s; never cached. */
static void send_error(struct sess *s, const char *rid, int code, const char *msg)
{
    char *text;
    size_t n = 0;
    error_text(rid, code, msg, &text, &n);
    send_text(s->w, s, s->key, rid, text, n, false);
}

/* A protocol violation: an error response, then the connection closes. */
static void refuse(struct sess *s, const char *rid, const char *msg)
{
    send_error(s, rid, CSW_ERROR_INVALID_ARGUMENTS, msg);
    if (s->conn) {
        (void)cs_runner_conn_flush(s->conn, 1000);
        cs_runner_conn_close(s->conn, msg);
    }
    s->closing = true;
}

/* Re-sends the cached response text (n bytes, our own encoder's) under request id rid: decoded
 * and encoded again by the generated code, so a replay is a wire message like any other, not a
 * patched text. Returns false when out of memory (or the cache holds something the schema
 * refuses, which would be a bug). */
static bool send_replay(struct sess *s, const char *rid, const char *text, size_t n)
{
    json_error_t jerr;
    json_t *j = json_loadb(text, n, JSON_ALLOW_NUL, &jerr);
    struct csw_runner_wire m;
    struct cs_wire_diag diag;
    if (!j || csw_runner_wire_decode(j, &m, &diag) != CS_WIRE_OK) {
        json_decref(j);
        return false;
    }
    json_decref(j);
    bool ok = false;
    if (m.tag == CSW_RUNNER_WIRE_RESPONSE) {
        struct cs_str old = m.u.response.request_id;
        m.u.response.request_id = (struct cs_str){(char *)rid, strlen(rid)};
        ok = send_wire(s->w, s, s->key, rid, &m, false);
        m.u.response.request_id = old; /* freed with the rest */
    }
    csw_runner_wire_free(&m);
    return ok;
}

static void req_done(void *arg, const struct cs_runner_reply *rep)
{
    struct req *r = arg;
    struct worker *w = r->w;
    if (r->linked) {
        if (r->prev)
            r->prev->next = r->next;
        else
            r->s->reqs = r->next;
        if (r->next)
            r->next->prev = r->prev;
    }
    char *text = NULL;
    size_t n = 0;
    struct cs_diag bad = {0}; /* a result our own schema refuses */
    const char *why = bad.text;
    int ecode = CSW_ERROR_INTERNAL;
    if (rep->outcome == CS_RUNNER_OK) {
        struct csw_runner_wire m;
        memset(&m, 0, sizeof m);
        m.tag = CSW_RUNNER_WIRE_RESPONSE;
        m.u.response.protocol = CS_RUNNER_PROTOCOL;
        m.u.response.request_id = (struct cs_str){r->request_id, strlen(r->request_id)};
        m.u.response.ok = true;
        m.u.response.has_result = true;
        m.u.response.result = *rep->result;
        struct cs_wire_diag diag;
        /* Written straight to text: no jansson value for a result that may be a megabyte. */
        if (csw_runner_wire_encode_text(&m, &text, &n, &diag) != CS_WIRE_OK)
            ecode = cs_diag_set(&bad, CSW_ERROR_INTERNAL, "result failed its schema at %s: %s",
                                diag.pointer, diag.text);
    } else {
        ecode = rep->outcome == CS_RUNNER_ERROR ? rep->code : CSW_ERROR_INTERNAL;
        why = rep->msg;
    }
    if (!text)
        error_text(r->request_id, ecode, why, &text, &n);
    send_text(w, r->s, r->key, r->request_id, text, n, true);
    free(r->request_id);
    free(r);
}

static void on_exited(void *arg, const char *id, const struct csw_runner_exit *how)
{
    struct worker *w = arg;
    w->exits_since_scan = true;
    struct csw_runner_wire m;
    memset(&m, 0, sizeof m);
    m.tag = CSW_RUNNER_WIRE_EVENT;
    m.u.event.protocol = CS_RUNNER_PROTOCOL;
    m.u.event.event.tag = CSW_RUNNER_WIRE_EVENT_BODY_PROCESS_EXITED;
    m.u.event.event.u.process_exited.data = *how; /* borrowed: sent before it returns */
    m.u.event.event.u.process_exited.data.process_id = (struct cs_str){(char *)id, strlen(id)};
    /* Every gateway connected is told: a process is the worker's, read through any of them. */
    char *text = NULL;
    size_t n = 0;
    struct cs_wire_diag diag;
    if (csw_runner_wire_encode_text(&m, &text, &n, &diag) != CS_WIRE_OK)
        return;
    for (struct sess *s = w->sessions; s; s = s->next)
        if (s->hello_done && s->conn && !s->closing && !w->closing)
            (void)cs_runner_conn_send_text(s->conn, text, n);
    cs_wire_release(text);
}

/* cancel: the gateway's client cancelled a call. The request it names, if still waiting in the
 * supervisor, is answered now (before the cancel's own answer); process_id is killed. */
static void cancel(struct sess *s, const struct csw_runner_wire_cancel_data *d, struct req *self)
{
    struct worker *w = s->w;
    struct req *target = NULL; /* a request of this connection only */
    for (struct req *r = s->reqs; d->has_request_id && r && !target; r = r->next)
        if (strlen(r->request_id) == d->request_id.n &&
            memcmp(r->request_id, d->request_id.s, d->request_id.n) == 0)
            target = r;
    struct csw_runner_wire_result res = {.tag = CSW_RUNNER_WIRE_RESULT_CANCEL};
    cs_runner_exec_cancel(w->ex, target ? req_done : NULL, target,
                          d->has_process_id ? &d->process_id : NULL, &res.u.cancel.data);
    struct cs_runner_reply rep = {.outcome = CS_RUNNER_OK, .result = &res};
    req_done(self, &rep);
}

/* The hello's answer: what this worker is and enforces. */
static void hello(struct sess *s, const char *rid, const struct csw_runner_wire_hello_data *h)
{
    struct worker *w = s->w;
    s->hello_done = true;
    cs_loop_timer_cancel(w->accept_timer); /* the gateway is here */
    w->accept_timer = NULL;
    /* The gateway's name keys the replay cache across its connections (runner_tcp.c sends one
     * per process); without one, the connection's own number does. */
    if (h->has_gateway && memchr(h->gateway.s, '\0', h->gateway.n) == NULL)
        snprintf(s->key, sizeof s->key, "g:%.*s", (int)h->gateway.n, h->gateway.s);
    char peer[128];
    snprintf(peer, sizeof peer, "codespace-runtime %s", CS_VERSION);
    struct csw_runner_wire_result res = {.tag = CSW_RUNNER_WIRE_RESULT_HELLO};
    res.u.hello.data.protocol = CS_RUNNER_PROTOCOL;
    res.u.hello.data.has_peer = true;
    res.u.hello.data.peer = (struct cs_str){peer, strlen(peer)};
    /* The gateway reports this, not its own probe, for the workspaces we hold. */
    res.u.hello.data.has_isolation = true;
    cs_runner_isolation_encode(&w->iso, &res.u.hello.data.isolation);
    struct req *r = calloc(1, sizeof *r);
    if (r && (r->request_id = strdup(rid))) {
        r->w = w;
        r->s = s;
        memcpy(r->key, s->key, sizeof r->key);
        struct cs_runner_reply rep = {.outcome = CS_RUNNER_OK, .result = &res};
        req_done(r, &rep);
    } else {
        free(r);
    }
}

static void on_message(void *arg, struct csw_runner_wire *msg)
{
    struct sess *s = arg;
    struct worker *w = s->w;
    if (s->closing || w->closing)
        return;
    s->got_frame = true;
    if (msg->tag != CSW_RUNNER_WIRE_REQUEST) {
        char rid[128] = "rrpc-0";
        if (msg->tag == CSW_RUNNER_WIRE_RESPONSE && msg->u.response.request_id.n < 120)
            snprintf(rid, sizeof rid, "%.*s", (int)msg->u.response.request_id.n,
                     msg->u.response.request_id.s);
        refuse(s, rid, "the worker accepts requests only");
        return;
    }
    struct csw_runner_request *rq = &msg->u.request;
    char rid[128];
    snprintf(rid, sizeof rid, "%.*s", (int)(rq->request_id.n < 120 ? rq->request_id.n : 120),
             rq->request_id.s);
    struct cs_diag why;
    if (rq->protocol != CS_RUNNER_PROTOCOL) {
        cs_diag_set(&why, CSW_ERROR_INVALID_ARGUMENTS,
                    "protocol mismatch: this worker speaks %d, the request %" PRId64,
                    CS_RUNNER_PROTOCOL, rq->protocol);
        refuse(s, rid, why.text);
        return;
    }
    if (!s->hello_done) {
        if (rq->op.tag != CSW_RUNNER_WIRE_OP_HELLO) {
            refuse(s, rid, "the first request must be hello");
            return;
        }
        if (rq->op.u.hello.data.protocol != CS_RUNNER_PROTOCOL) {
            cs_diag_set(&why, CSW_ERROR_INVALID_ARGUMENTS,
                        "protocol mismatch: this worker speaks %d, the gateway %" PRId64,
                        CS_RUNNER_PROTOCOL, rq->op.u.hello.data.protocol);
            refuse(s, rid, why.text);
            return;
        }
        hello(s, rid, &rq->op.u.hello.data);
        return;
    }
    if (rq->op.tag == CSW_RUNNER_WIRE_OP_HELLO) {
        refuse(s, rid, "hello was already done on this connection");
        return;
    }
    if (rq->op.tag == CSW_RUNNER_WIRE_OP_REPLAY) {
        /* Only this gateway's answers (its key): another gateway's ids are its own. */
        const struct cs_str *old = &rq->op.u.replay.data.request_id;
        for (size_t i = 0; i < CS_RUNNER_REPLAY_CACHE; i++) {
            const char *cid = w->cache[i].request_id;
            if (!cid || !w->cache[i].text || strlen(cid) != old->n ||
                memcmp(cid, old->s, old->n) != 0 || strcmp(w->cache[i].key, s->key) != 0)
                continue;
            if (!send_replay(s, rid, w->cache[i].text, w->cache[i].n))
                send_error(s, rid, CSW_ERROR_INTERNAL, "out of memory");
            return;
        }
        send_error(s, rid, CSW_ERROR_OPERATION_NOT_FOUND,
                   "no cached response for this request_id (the worker keeps the last 32)");
        return;
    }
    struct req *r = calloc(1, sizeof *r);
    if (!r || !(r->request_id = strdup(rid))) {
        free(r);
        send_error(s, rid, CSW_ERROR_INTERNAL, "out of memory");
        return;
    }
    r->w = w;
    r->s = s;
    memcpy(r->key, s->key, sizeof r->key);
    if (rq->op.tag == CSW_RUNNER_WIRE_OP_CANCEL) {
        cancel(s, &rq->op.u.cancel.data, r);
        return;
    }
    /* Linked before the op runs: it may be answered inside cs_runner_exec_op. */
    r->linked = true;
    r->next = s->reqs;
    if (r->next)
        r->next->prev = r;
    s->reqs = r;
    cs_runner_exec_op(w->ex, &rq->op, NULL, req_done, r);
}

static void on_bad(void *arg, const json_t *raw, const char *why)
{
    struct sess *s = arg;
    s->got_frame = true;
    /* Only the frame's request_id, read through the wire schema's frame_id shape; none (or an
     * unusable one) answers as rrpc-0. */
    char rid[128] = "rrpc-0";
    struct csw_runner_wire_frame_id id;
    struct cs_wire_diag diag;
    if (raw && csw_runner_wire_frame_id_decode(raw, &id, &diag) == CS_WIRE_OK) {
        if (id.has_request_id && id.request_id.n < 120 &&
            memchr(id.request_id.s, '\0', id.request_id.n) == NULL)
            snprintf(rid, sizeof rid, "%.*s", (int)id.request_id.n, id.request_id.s);
        csw_runner_wire_frame_id_free(&id);
    }
    struct cs_diag d;
    cs_diag_set(&d, CSW_ERROR_INVALID_ARGUMENTS, "undecodable frame: %s", why);
    send_error(s, rid, (int)d.code, d.text);
    (void)cs_runner_conn_flush(s->conn, 1000);
    s->closing = true;
}

static void on_accept(void *arg, int fd, unsigned events);

/* Frees s (its connection ended). Its requests still in the executor answer to the cache only. */
static void sess_free(struct sess *s)
{
    struct worker *w = s->w;
    for (struct req *r = s->reqs; r; r = r->next) {
        r->s = NULL;
        r->linked = false;
    }
    cs_runner_conn_free(s->conn);
    if (s->prev)
        s->prev->next = s->next;
    else
        w->sessions = s->next;
    if (s->next)
        s->next->prev = s->prev;
    w->n_sessions--;
    free(s);
}

static void drop_session(void *arg)
{
    struct sess *s = arg;
    struct worker *w = s->w;
    sess_free(s);
    /* A gateway-started worker serves one connection at a time: accept the next. */
    if (!w->lw && !w->closing) {
        w->lw = cs_loop_fd_add(w->loop, w->lfd, CS_LOOP_READ, on_accept, w);
        if (!w->lw)
            cs_loop_stop(w->loop);
    }
}

static void on_closed(void *arg, const char *why)
{
    struct sess *s = arg;
    struct worker *w = s->w;
    (void)why;
    s->closing = true;
    /* --listen: the processes and the replay cache outlive the connection; the gateway comes
     * back, and the other gateways' connections go on (docs/scale-out.md, "Failure model"). */
    if (w->listening && cs_loop_defer(w->loop, drop_session, s) == 0)
        return;
    if (!s->got_frame && !s->hello_done) {
        /* A connection that said nothing (someone probing whether the socket is live) is not
         * the gateway: keep listening for it. */
        if (cs_loop_defer(w->loop, drop_session, s) == 0)
            return;
    }
    w->closing = true;
    cs_loop_stop(w->loop);
}

/* Orphans of our commands (reparented to us, the subreaper) are reaped by a scan once a second
 * after processes finished, off the path of any answer; leaders are reaped through their pidfds
 * at once. (A SIGCHLD handler would put a signalfd read and a timer update on every exit.) */
static void reap_strays(void *arg)
{
    struct worker *w = arg;
    if (w->exits_since_scan) {
        w->exits_since_scan = false;
        cs_runner_exec_reap_strays(w->ex);
    }
    w->reap_timer = cs_loop_timer_add(w->loop, 1000, reap_strays, w);
}

static void on_signal(void *arg, int signo)
{
    struct worker *w = arg;
    if (signo == SIGHUP && w->front) {
        /* A --listen worker has no parent-death signal: SIGHUP reloads its pre-shared keys (an
         * identity removed is refused from now on, its connection ended). */
        struct cs_diag err = {0};
        size_t n = 0;
        if (cs_tls_front_reload(w->front, &n, &err) == 0)
            cs_log(CS_LOG_NOTICE, "runner keys reloaded",
                   json_pack("{s:I}", "psk_identities", (json_int_t)n));
        else
            cs_log(CS_LOG_ERROR, "runner keys not reloaded",
                   json_pack("{s:s,s:s}", "error", err.text, "kept", "the previous keys"));
        return;
    }
    /* SIGHUP is also our parent-death signal: the hang-up says which it was. */
    stop(w, gateway_gone(w->gatefd) ? GATEWAY_GONE : NULL);
}

/* The --gateway-fd pipe: the gateway never writes to it; its hang-up is the gateway's end. */
static void on_gateway(void *arg, int fd, unsigned events)
{
    (void)events;
    struct worker *w = arg;
    char buf[64];
    ssize_t n = read(fd, buf, sizeof buf);
    if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EINTR)))
        return;
    cs_loop_fd_del(w->gw);
    w->gw = NULL;
    stop(w, GATEWAY_GONE);
}

static void on_no_gateway(void *arg)
{
    struct worker *w = arg;
    w->accept_timer = NULL;
    stop(w, "no gateway said hello within 5 s of the bind");
}

/* The connections a --listen worker serves at once: the TLS front bridges at most its
 * BRIDGE_MAX authenticated ones (runner_tls.c); the socket's directory is the worker's own. */
#define SESSIONS_MAX 64

/* Accepts a gateway's connection. A gateway-started worker takes exactly one: the listening
 * socket then stays open (so the path still probes as live and is never taken over) but is not
 * accepted from again, unless the connection ends without a single frame (a liveness probe, not
 * the gateway). A --listen worker takes each connection its TLS front bridges. */
static void on_accept(void *arg, int fd, unsigned events)
{
    struct worker *w = arg;
    (void)events;
    int cfd = w->listening ? cs_tls_front_accept(fd) : accept4(fd, NULL, NULL, SOCK_CLOEXEC);
    if (cfd < 0) {
        /* The front keeps its end as long as we run; one that is gone would wake us forever. */
        if (w->listening && errno == EPIPE)
            stop(w, "the TLS front's handoff ended");
        return;
    }
    test_stop("after-accept");
    struct sess *s = w->n_sessions < SESSIONS_MAX ? calloc(1, sizeof *s) : NULL;
    if (!s) {
        close(cfd);
        return;
    }
    s->w = w;
    snprintf(s->key, sizeof s->key, "c:%llu", ++w->serial);
    struct cs_runner_conn_callbacks cb = {on_message, on_bad, on_closed, s};
    s->conn = cs_runner_conn_new(w->loop, cfd, &cb);
    if (!s->conn) {
        close(cfd);
        free(s);
        return;
    }
    cs_runner_conn_busy_poll(s->conn, !w->listening); /* a uds link: runner.h */
    s->next = w->sessions;
    if (s->next)
        s->next->prev = s;
    w->sessions = s;
    w->n_sessions++;
    if (!w->listening) {
        cs_loop_fd_del(w->lw);
        w->lw = NULL;
    }
}

/* Binds path after probing a leftover: a live socket is an error (never unlinked), a refused one
 * is unlinked. Returns the listening fd or -1 (a message on stderr). */
static int bind_socket(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof sa.sun_path) {
        fprintf(stderr, "codespace-runtime: socket path too long: %s\n", path);
        return -1;
    }
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    struct stat st;
    if (lstat(path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode)) {
            fprintf(stderr, "codespace-runtime: %s exists and is not a socket\n", path);
            return -1;
        }
        int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof sa) == 0) {
            close(probe);
            fprintf(stderr, "codespace-runtime: %s is a live socket; not touching it\n", path);
            return -1;
        }
        int e = errno;
        if (probe >= 0)
            close(probe);
        if (e != ECONNREFUSED) {
            fprintf(stderr, "codespace-runtime: cannot probe %s: %s\n", path, strerror(e));
            return -1;
        }
        if (unlink(path) != 0) {
            fprintf(stderr, "codespace-runtime: cannot remove stale %s: %s\n", path,
                    strerror(errno));
            return -1;
        }
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, 1) != 0) {
        fprintf(stderr, "codespace-runtime: cannot listen on %s: %s\n", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

/* "--root PATH" (--listen): the worker opens its own root by the no-follow walk; a remote
 * worker is given its roots by its operator, never by the gateway. Returns 0 or -1. */
static int open_root(const char *path)
{
    int fd = cs_roots_walk(path);
    if (fd < 0 || cs_roots_add(path, fd) != 0) {
        fprintf(stderr, "codespace-runtime: --root %s: %s\n", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    close(fd);
    return 0;
}

/* "--root FD:PATH": holds the inherited directory FD as the root PATH. Returns 0 or -1. */
static int adopt_root(const char *arg)
{
    char *end;
    long fd = strtol(arg, &end, 10);
    struct stat st;
    if (end == arg || *end != ':' || end[1] != '/' || fd < CSW_SANDBOX_PLAN_WORKSPACE_FD_MIN ||
        fd > CSW_SANDBOX_PLAN_WORKSPACE_FD_MAX || fstat((int)fd, &st) != 0 ||
        !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "codespace-runtime: --root %s: not an inherited directory descriptor\n",
                arg);
        return -1;
    }
    if (cs_roots_add(end + 1, (int)fd) != 0) {
        fprintf(stderr, "codespace-runtime: --root %s: %s\n", arg, strerror(errno));
        return -1;
    }
    close((int)fd); /* the table keeps its own duplicate */
    return 0;
}

/* "--gateway-fd N": the inherited read end of the gateway's pipe (close-on-exec and non-blocking
 * from here on). Returns the descriptor or -1. */
static int adopt_gateway(const char *arg)
{
    char *end;
    long fd = strtol(arg, &end, 10);
    struct stat st;
    if (end == arg || *end || fd < 3 || fd > CSW_SANDBOX_PLAN_WORKSPACE_FD_MAX ||
        fstat((int)fd, &st) != 0 || !S_ISFIFO(st.st_mode) ||
        fcntl((int)fd, F_SETFD, FD_CLOEXEC) != 0 || fcntl((int)fd, F_SETFL, O_NONBLOCK) != 0) {
        fprintf(stderr,
                "codespace-runtime: --gateway-fd %s: not an inherited pipe (the read end of a "
                "pipe whose write end only the gateway holds)\n",
                arg);
        return -1;
    }
    return (int)fd;
}

static int run(int argc, char **argv);

int main(int argc, char **argv)
{
    /* Before anything else: a signal that ends us (SIGHUP is also the parent-death signal)
     * waits for the loop's signalfd, which exits through the cleanup, and a write to the stderr
     * pipe of a gateway that is gone fails instead of killing us. Every thread started later
     * inherits the mask; every child gets a clean one (supervisor_spawn.c). */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    sigaddset(&set, SIGQUIT);
    (void)sigprocmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    int rc = run(argc, argv);
    remove_own_files();
    free(own.sock);
    return rc;
}

static int run(int argc, char **argv)
{
    const char *sock = NULL;
    int gatefd = -1;
    const char *sandbox = NULL;
    /* The runner-wide safety cap (every workspace together): each exec carries its workspace's
     * own max_live_processes. */
    long long max_procs = 1024, sandbox_uid = 0, sandbox_gid = 0;
    long long timeout_ms = 30000;
    const char *listen = NULL, *tls_pin = NULL, *operations_db = NULL;
    struct cs_tls_config tls = {0};
    unsigned char more_pins[CS_TLS_PINS_MAX - 1][CS_TLS_PIN_SIZE];
    bool pins_ok = true;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--socket") == 0 && i + 1 < argc) {
            sock = argv[++i];
        } else if (strcmp(argv[i], "--gateway-fd") == 0 && i + 1 < argc) {
            if (gatefd >= 0 || (gatefd = adopt_gateway(argv[++i])) < 0)
                return 2;
        } else if (strcmp(argv[i], "--listen") == 0 && i + 1 < argc) {
            listen = argv[++i];
        } else if (strcmp(argv[i], "--plaintext") == 0) {
            tls.plaintext = true;
        } else if (strcmp(argv[i], "--tls-cert") == 0 && i + 1 < argc) {
            tls.cert = argv[++i];
        } else if (strcmp(argv[i], "--tls-key") == 0 && i + 1 < argc) {
            tls.key = argv[++i];
        } else if (strcmp(argv[i], "--tls-peer-sha256") == 0 && i + 1 < argc) {
            /* Repeatable: one pin per gateway. */
            const char *pin = argv[++i];
            if (!tls_pin)
                tls_pin = pin;
            else if (tls.n_more_pins >= CS_TLS_PINS_MAX - 1 ||
                     cs_tls_pin_parse(pin, more_pins[tls.n_more_pins++]) != 0)
                pins_ok = false;
        } else if (strcmp(argv[i], "--tls-psk-keys") == 0 && i + 1 < argc) {
            tls.psk_keys_file = argv[++i];
        } else if (strcmp(argv[i], "--tls-psk") == 0 && i + 1 < argc) {
            tls.psk_file = argv[++i];
        } else if (strcmp(argv[i], "--tls-psk-identity") == 0 && i + 1 < argc) {
            tls.psk_identity = argv[++i];
        } else if (strcmp(argv[i], "--operations-db") == 0 && i + 1 < argc) {
            operations_db = argv[++i];
        } else if (strcmp(argv[i], "--max-processes") == 0 && i + 1 < argc) {
            char *end;
            max_procs = strtoll(argv[++i], &end, 10);
            if (*end || max_procs < 1 || max_procs > 1024) {
                usage();
                return 2;
            }
        } else if (strcmp(argv[i], "--timeout-ms") == 0 && i + 1 < argc) {
            char *end;
            timeout_ms = strtoll(argv[++i], &end, 10);
            if (*end || timeout_ms < 1 || timeout_ms > 2147483000LL) {
                usage();
                return 2;
            }
        } else if (strcmp(argv[i], "--sandbox") == 0 && i + 1 < argc) {
            sandbox = argv[++i]; /* the gateway's probe succeeded with this helper */
        } else if ((strcmp(argv[i], "--sandbox-uid") == 0 ||
                    strcmp(argv[i], "--sandbox-gid") == 0) &&
                   i + 1 < argc) {
            long long *id = argv[i][10] == 'u' ? &sandbox_uid : &sandbox_gid;
            char *end;
            *id = strtoll(argv[++i], &end, 10);
            if (*end || *id < CSW_SANDBOX_PLAN_SANDBOX_UID_MIN ||
                *id > CSW_SANDBOX_PLAN_SANDBOX_UID_MAX) {
                usage();
                return 2;
            }
        } else if (strcmp(argv[i], "--root") == 0 && i + 1 < argc) {
            /* A workspace root the gateway holds, inherited as a descriptor: the worker serves
             * exactly these and never opens a root by path (docs/contract/runtime.md section 2). */
            const char *arg = argv[++i];
            if (arg[0] == '/' ? open_root(arg) != 0 : adopt_root(arg) != 0)
                return 2;
        } else if (strcmp(argv[i], "--help") == 0) {
            fputs(
                USAGE
                "\n"
                "The worker that runs files and processes for codespace-mcp. Two ways to run:\n"
                "  uds:    codespace-mcp --runner uds starts it with --socket and inherited\n"
                "          roots (--root FD:PATH) and owns it; it is not started by hand.\n"
                "  remote: an operator starts it by hand with --listen on the machine that\n"
                "          holds the workspaces, and gateways reach it with --runner\n"
                "          tcp://HOST:PORT (docs/scale-out.md).\n"
                "\n"
                "  --socket PATH          uds: bind PATH (in the gateway's 0700 directory) and\n"
                "                         serve one connection\n"
                "  --gateway-fd N         uds: the read end of the gateway's pipe; its hang-up\n"
                "                         ends the worker, and so does no hello within 5 s\n"
                "  --root FD:PATH         uds: serve the workspace root PATH through the "
                "inherited\n"
                "                         directory descriptor FD (repeatable)\n"
                "  --listen HOST:PORT     remote: serve gateways over TCP; port 0 picks a free\n"
                "                         port, logged as \"runner listening\"\n"
                "  --root PATH            remote: serve the workspace root PATH, opened here\n"
                "                         (repeatable, at least one)\n"
                "  --tls-cert FILE        remote, certificate mode: this worker's certificate "
                "(PEM)\n"
                "  --tls-key FILE         its private key (PEM)\n"
                "  --tls-peer-sha256 HEX  the SHA-256 of a gateway's certificate (64 hex "
                "digits;\n"
                "                         repeatable: one per gateway, at most 16)\n"
                "  --tls-psk FILE         remote, PSK mode instead: the pre-shared key as hex,\n"
                "                         32..64 bytes, in a file not readable by others\n"
                "  --tls-psk-identity NAME  the key's identity, 1..128 bytes of [A-Za-z0-9._:@-]\n"
                "  --tls-psk-keys FILE    several gateways' keys: one IDENTITY:HEXKEY a line\n"
                "                         (# comments), not readable by others; with or\n"
                "                         without --tls-psk; SIGHUP reads the files again\n"
                "  --plaintext            remote: no TLS, for a private link only\n",
                stdout);
            /* Two literals: C99 promises 4095 bytes in one, no more. */
            fputs(
                "  --max-processes N      live processes at once, every workspace together,\n"
                "                         1..1024 (default 1024; each exec carries its\n"
                "                         workspace's own limit)\n"
                "  --timeout-ms MS        time limit of file operations (default 30000; each\n"
                "                         exec carries its workspace's own time limit)\n"
                "  --sandbox HELPER       run every command through this codespace-linux-sandbox,\n"
                "                         probed at start: a failed probe stops the worker\n"
                "  --sandbox-uid N        a root worker: the unprivileged uid commands run as\n"
                "                         (required with --listen)\n"
                "  --sandbox-gid N        the same for the gid\n"
                "  --operations-db FILE   keep the deny rules' identity memory (denied files\n"
                "                         renamed or linked) in this SQLite database so it\n"
                "                         survives a restart (uds: the gateway passes its own;\n"
                "                         remote: without it, kept in memory only); a remote\n"
                "                         worker also keeps its ledger there (the patches any\n"
                "                         gateway sent it, so a retried operation_key is a\n"
                "                         replay through every gateway)\n"
                "  --version              print the version and exit\n"
                "  --help                 print this text and exit\n"
                "\n"
                "Environment: CODESPACE_REQUIRE_LINUX_SANDBOX=1 refuses to start without a\n"
                "working sandbox; CODESPACE_NETNS_GRACE_SECS is how long a shared workspace\n"
                "keeps its network namespace after its last process (0..86400, default 60);\n"
                "CODESPACE_BUSY_POLL_US is how long a uds worker polls its link for the next\n"
                "request before it sleeps (microseconds, 0..1000, 0 off, default 200).\n"
                "Signals: SIGTERM, SIGINT and SIGQUIT end it; SIGHUP ends a uds worker, and\n"
                "makes a --listen worker read its pre-shared key files again.\n"
                "Exit status: 0 after --help or --version or when the gateway's connection\n"
                "ends (uds); 2 for wrong usage or a bad TLS file; 1 when it cannot start (the\n"
                "sandbox probe failed, the address is taken) or its gateway went away.\n",
                stdout);
            return 0;
        } else if (strcmp(argv[i], "--version") == 0) {
            printf("codespace-runtime %s\n", CS_VERSION);
            return 0;
        } else {
            usage();
            return 2;
        }
    }
    char lhost[CS_RUNNER_URL_HOST_MAX], lport[CS_RUNNER_URL_PORT_MAX];
    if (listen) {
        /* The URL syntax of --runner, with port 0 (any free port, logged) allowed here. */
        char url[300];
        const char *colon = strrchr(listen, ':');
        bool port0 = colon && strcmp(colon + 1, "0") == 0;
        snprintf(url, sizeof url, "tcp://%.*s%s",
                 (int)(port0 ? (size_t)(colon - listen) : strlen(listen)), listen,
                 port0 ? ":1" : "");
        bool certs = tls.cert || tls.key || tls_pin,
             psk = tls.psk_file || tls.psk_identity || tls.psk_keys_file;
        /* One mode: plaintext alone; PSK file and identity, or a keys file, or both; or
         * certificate, key and pins. */
        bool tls_ok;
        tls.more_pins = (const unsigned char(*)[CS_TLS_PIN_SIZE])more_pins;
        if (tls.plaintext)
            tls_ok = !certs && !psk;
        else if (psk)
            tls_ok = !certs && (tls.psk_file || tls.psk_keys_file) &&
                     (tls.psk_file ? cs_tls_psk_identity_ok(tls.psk_identity) : !tls.psk_identity);
        else
            tls_ok = tls.cert && tls.key && tls_pin && pins_ok &&
                     cs_tls_pin_parse(tls_pin, tls.peer_pin) == 0;
        if (sock || gatefd >= 0 || cs_runner_url_parse(url, lhost, lport) != 0) {
            fprintf(stderr,
                    "codespace-runtime: --listen HOST:PORT (not with --socket or --gateway-fd)\n");
            return 2;
        }
        if (port0)
            snprintf(lport, sizeof lport, "0");
        if (!tls_ok) {
            fprintf(stderr, "codespace-runtime: --listen needs either --tls-cert, --tls-key and "
                            "--tls-peer-sha256 (64 hex digits, at most 16 of them), or "
                            "--tls-psk and --tls-psk-identity ([A-Za-z0-9._:@-], 1..128 bytes) "
                            "and/or --tls-psk-keys FILE, or --plaintext alone\n");
            return 2;
        }
        /* Nobody checks a listening worker's identity rules for it (the gateway does for its
         * uds worker): as root it runs commands only sandboxed, as an unprivileged id. */
        if (geteuid() == 0 && (!sandbox || sandbox_uid <= 0 || sandbox_gid <= 0)) {
            fprintf(stderr, "codespace-runtime: a root --listen worker needs --sandbox, "
                            "--sandbox-uid and --sandbox-gid (it never runs a command as root)\n");
            return 2;
        }
        if (!cs_roots_active()) {
            fprintf(stderr, "codespace-runtime: --listen needs at least one --root PATH\n");
            return 2;
        }
    }
    if (!listen && (!sock || sock[0] != '/')) {
        usage();
        return 2;
    }
    if (!listen && gatefd < 0) {
        fprintf(stderr, "codespace-runtime: --socket needs --gateway-fd N (the worker is started "
                        "by its gateway, which names itself so)\n");
        return 2;
    }
    if (!listen && !(own.sock = strdup(sock))) {
        fprintf(stderr, "codespace-runtime: out of memory\n");
        return 1;
    }
    const char *require = getenv("CODESPACE_REQUIRE_LINUX_SANDBOX");
    if (require && require[0] && strcmp(require, "0") != 0 && strcmp(require, "1") != 0) {
        fprintf(stderr, "codespace-runtime: CODESPACE_REQUIRE_LINUX_SANDBOX must be 0 or 1\n");
        return 2;
    }
    /* Hardening first (docs/contract/runtime.md section 4, "Worker hardening"). */
    (void)prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    struct rlimit nocore = {0, 0};
    (void)setrlimit(RLIMIT_CORE, &nocore);
    scrub_env();
    /* A listening worker is started by its own supervisor, not by a gateway. The gateway's own
     * word, its pipe, says whether it is still there: armed first, then checked, the death
     * signal and the hang-up leave no moment uncovered. */
    test_stop("before-pdeathsig");
    if (!listen && (prctl(PR_SET_PDEATHSIG, SIGHUP, 0, 0, 0) != 0 || gateway_gone(gatefd))) {
        fprintf(stderr, "codespace-runtime: the gateway is already gone\n");
        return 1;
    }
    /* Orphans of our commands (a background child whose shell exited) become ours, not the
     * gateway's: reaped by a scan once a second, killed with the tree when we go. */
    (void)prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);

    /* What our commands really get, probed once with the gateway's own code (docs/scale-out.md):
     * told to sandbox, we never run a command without it; required to, we never start bare. */
    struct cs_supervisor_isolation iso;
    char perr[2048];
    if (cs_supervisor_isolation_probe(sandbox, &iso, perr, sizeof perr) != 0) {
        fprintf(stderr,
                "codespace-runtime: --sandbox %s: the Linux sandbox probe failed, and a worker "
                "told to sandbox never runs a command without it; not starting: %s\n",
                sandbox, perr);
        return 1;
    }
    if (require && strcmp(require, "1") == 0 && !iso.sandbox) {
        fprintf(stderr, "codespace-runtime: CODESPACE_REQUIRE_LINUX_SANDBOX=1 and this worker has "
                        "no Linux sandbox (no --sandbox HELPER); not starting\n");
        return 1;
    }

    if (operations_db) {
        /* Checked (and migrated) here, so that a database that cannot be used stops the worker
         * with its reason; the executor opens its own connection when it first needs it. */
        struct cs_store *st = NULL;
        struct cs_diag serr = {0};
        if (cs_store_open(operations_db, &st, &serr) != CS_STORE_OK) {
            fprintf(stderr, "codespace-runtime: --operations-db: %s\n", serr.text);
            return 1;
        }
        cs_store_close(st);
    }
    if (gateway_gone(gatefd)) { /* the probe may have taken a while */
        fprintf(stderr, "codespace-runtime: the gateway is already gone\n");
        return 1;
    }
    /* A gateway-started worker accepts on its socket; a listening one takes each authenticated
     * connection from its TLS front over a socketpair (runner_tls.h): no name in the file
     * system, so nothing is left behind however it ends. */
    int hand[2] = {-1, -1};
    int lfd;
    if (listen) {
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, hand) != 0 ||
            fcntl(hand[0], F_SETFL, O_NONBLOCK) != 0) {
            fprintf(stderr, "codespace-runtime: socketpair: %s\n", strerror(errno));
            return 1;
        }
        lfd = hand[0];
    } else if ((lfd = bind_socket(sock)) < 0) {
        return 1;
    }
    own.bound = !listen;
    test_stop("before-accept");

    struct worker w;
    memset(&w, 0, sizeof w);
    w.lfd = lfd;
    w.listening = listen != NULL;
    w.iso = iso;
    w.gatefd = gatefd;
    int rc = 1;
    struct cs_tls_ctx *tctx = NULL;
    struct cs_tls_front *front = NULL;
    if (listen) {
        struct cs_diag err = {0};
        tctx = cs_tls_ctx_new(&tls, true, &err);
        front = tctx ? cs_tls_front_start(tctx, lhost, lport, hand[1], &err) : NULL;
        close(hand[1]); /* the front has its own */
        w.front = front;
        if (!front) {
            fprintf(stderr, "codespace-runtime: %s\n", err.text);
            close(lfd);
            /* No context: a certificate, key or key file that cannot be used is a bad
             * configuration (2, like a bad flag); no front: the address (1). */
            int code = tctx ? 1 : 2;
            cs_tls_ctx_free(tctx);
            return code;
        }
        cs_log(CS_LOG_INFO, "runner listening",
               json_pack("{s:s,s:i,s:b,s:s,s:s}", "host", lhost, "port", cs_tls_front_port(front),
                         "tls", !tls.plaintext, "auth", cs_tls_ctx_auth(tctx), "command_sandbox",
                         iso.sandbox ? "linux-sandbox" : "none"));
        if (!operations_db) /* after "runner listening", the line supervisors wait for */
            cs_log(CS_LOG_WARNING, "deny identities in memory only",
                   json_pack("{s:s}", "remedy",
                             "start the worker with --operations-db FILE so that denied files "
                             "renamed before a restart stay denied, and the operation keys its "
                             "gateways sent stay known"));
    }
    w.loop = cs_loop_new();
    if (w.loop) {
        cs_loop_busy_poll_from_env(w.loop);
    }
    /* Every exec request carries its workspace's time limit, live-process cap and ring; file
     * operations (run on the executor's threads) have the time limit --timeout-ms gives. */
    struct cs_supervisor_limits lim;
    cs_supervisor_limits_init(&lim, max_procs, timeout_ms, sandbox);
    lim.sandbox_uid = sandbox_uid;
    lim.sandbox_gid = sandbox_gid;
    lim.operations_db = operations_db;
    lim.keep_ledger = listen != NULL; /* a uds worker's ledger is its gateway's */
    w.ex = w.loop ? cs_runner_exec_new(w.loop, &lim, on_exited, &w) : NULL;
    w.lw = w.ex ? cs_loop_fd_add(w.loop, lfd, CS_LOOP_READ, on_accept, &w) : NULL;
    if (!w.lw || cs_loop_signal(w.loop, SIGTERM, on_signal, &w) != 0 ||
        cs_loop_signal(w.loop, SIGINT, on_signal, &w) != 0 ||
        cs_loop_signal(w.loop, SIGHUP, on_signal, &w) != 0 ||
        cs_loop_signal(w.loop, SIGQUIT, on_signal, &w) != 0 ||
        !(w.reap_timer = cs_loop_timer_add(w.loop, 1000, reap_strays, &w)) ||
        (gatefd >= 0 &&
         (!(w.gw = cs_loop_fd_add(w.loop, gatefd, CS_LOOP_READ, on_gateway, &w)) ||
          !(w.accept_timer = cs_loop_timer_add(w.loop, ACCEPT_BOUND_MS, on_no_gateway, &w))))) {
        fprintf(stderr, "codespace-runtime: startup failed: %s\n", strerror(errno));
        goto out;
    }
    rc = cs_loop_run(w.loop) == 0 ? 0 : 1;
    if (w.why) {
        fprintf(stderr, "codespace-runtime: %s; exiting\n", w.why);
        rc = 1;
    }
    if (w.why && strcmp(w.why, GATEWAY_GONE) == 0) {
        /* At once, as the death signal used to end us: the command groups die, a file job in
         * flight is abandoned (not finished behind the back of a gateway that can no longer
         * record it), our socket and leaf go, and no thread is waited for. */
        cs_runner_exec_abandon(w.ex);
        remove_own_files();
        _exit(1);
    }
out:
    /* Every command group dies with the connection. */
    w.closing = true;
    cs_loop_timer_cancel(w.reap_timer);
    cs_loop_timer_cancel(w.accept_timer);
    cs_loop_fd_del(w.gw);
    cs_runner_exec_free(w.ex);
    cs_loop_fd_del(w.lw);
    for (struct sess *s = w.sessions, *next; s; s = next) {
        next = s->next;
        cs_loop_defer_cancel(w.loop, drop_session, s);
        sess_free(s);
    }
    for (size_t i = 0; i < CS_RUNNER_REPLAY_CACHE; i++) {
        free(w.cache[i].request_id);
        cs_wire_release(w.cache[i].text);
    }
    cs_loop_free(w.loop);
    close(lfd);
    if (gatefd >= 0)
        close(gatefd);
    if (listen)
        cs_tls_front_stop(front);
    return rc;
}
