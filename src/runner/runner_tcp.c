/*
 * runner_tcp: the gateway side of `--runner tcp://HOST:PORT` (docs/scale-out.md): a worker the
 * gateway did not start, reached over TCP with mutual TLS 1.3 (runner_tls.c; plaintext only when
 * the operator says so). The wire protocol is the uds runner's, unchanged (version 7), carried by
 * the same framed connection (runner_conn.c) over the loop's end of the pump's stream.
 *
 * What differs from uds is the failure model. The worker is not ours: a dropped connection is not
 * a dead worker. Its processes and its replay cache stay; the gateway reconnects on its own
 * (100 ms, then doubling up to 5 s while attempts fail) and says hello again. Request ids count on
 * across connections, and each hello names this gateway (a random name, the same on every
 * connection): the worker's replay cache is keyed by the two, so an id is never reused towards
 * one worker by one gateway process, and another gateway's ids, which count from 1 too, are never
 * confused with ours. Other gateways may be connected to the same worker at the same time.
 *
 * Outcomes follow the existing ambiguity rules: a call sent on a connection that dropped before
 * its answer is ambiguous; a call that never left (no connection, or the connection failed before
 * its hello was answered) is before dispatch. A call made while connecting waits, encoded, for the
 * hello's answer; a call made during the back-off fails before dispatch at once.
 *
 * Processes across a drop: the runner remembers every process id it started (exec) until its
 * process_exited event. After each reconnection it asks process_status for each; one that exited
 * meanwhile, or that the worker does not know (a restarted worker, or an exec that never ran), is
 * announced as process_exited, which frees its workspace in the tool layer. The runner never calls
 * the tool layer's lost event: a lost connection does not mean lost processes. Each link after
 * the first (a hello answered and accepted) raises reconnected; the first raises first_link_late
 * when calls had failed before it for want of a link (what the gateway sends at start: its deny
 * scans, its journal questions).
 *
 * Isolation: each hello answer states what the worker enforces on its commands (its own sandbox
 * probe); the runner keeps the last statement for workspace_info (none before the first, and for
 * a worker that states nothing). With require_sandbox, a worker stating no sandbox is dropped at
 * its hello, before any call is sent, and retried with the back-off.
 *
 * Trust: the worker is authenticated by its certificate pin or the pre-shared key; its frames are
 * still decoded through the generated decoder, and a bad frame drops the connection (not the
 * worker).
 * Entry points: cs_runner_tcp_new, cs_runner_tcp_isolation (runner.h),
 * cs__runner_tcp_call/cancel/free (runner_internal.h).
 */
#include "runner_internal.h"
#include "runner_tls.h"
#include "base_diag.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "base_log.h"

#define CONNECT_MS     5000  /* TCP connect */
#define HELLO_MS       15000 /* connect + TLS handshake + hello answer */
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000

enum tstate { T_DOWN, T_CONNECTING, T_UP };

struct tlink {
    struct cs__runner_tcp *t;
    struct cs_runner_conn *conn;
    struct cs_tls_link *tls;
    struct tlink *next; /* in t->dying */
};

struct tcall {
    struct tcall *next;
    uint64_t id;
    cs_runner_done_fn done;
    void *arg;
    int64_t deadline;
    char *text; /* encoded, not yet sent (waiting for the connection) */
    size_t n;
};

struct live {
    struct live *next;
    char id[CS_SUPERVISOR_ID_SIZE];
};

struct cs__runner_tcp {
    struct cs_runner *r;
    char host[CS_RUNNER_URL_HOST_MAX], port[CS_RUNNER_URL_PORT_MAX];
    char *version;
    struct cs_tls_ctx *ctx;
    enum tstate st;
    struct tlink *link;
    struct tlink *dying;
    uint64_t next_id;
    uint64_t hello_id;
    int64_t connect_deadline;
    struct tcall *calls;   /* sent, unanswered */
    struct tcall *waiting; /* encoded, waiting for the connection (FIFO) */
    struct live *live;     /* processes started and not known to have exited */
    struct cs_loop_timer *sweep, *retry;
    int64_t backoff_ms;
    int64_t retry_at; /* when retry fires */
    char why[320];    /* the last connection's end */
    bool freeing;
    bool require_sandbox; /* CODESPACE_REQUIRE_LINUX_SANDBOX=1 */
    /* What the worker enforces, as its last answered hello said (nothing before the first) */
    struct cs_supervisor_isolation iso;
    uint64_t hellos; /* hellos answered (a refused worker's too: workspace_info's staleness) */
    uint64_t links;  /* hellos answered and accepted: links made */
    bool missed;     /* a call failed before dispatch before the first link (first_link_late) */
    /* This gateway's name towards the worker, the same on every connection (random, 128 bits):
     * the worker keeps our answers for replay apart from other gateways'. Empty: none. */
    char name[33];
};

/* ---- calls ---- */

static void finish(struct tcall *c, enum cs_runner_outcome o, const char *msg)
{
    struct cs_runner_reply rep = {.outcome = o, .msg = msg};
    c->done(c->arg, &rep);
    cs_wire_release(c->text);
    free(c);
}

static struct tcall *take(struct tcall **list, uint64_t id)
{
    for (struct tcall **p = list; *p; p = &(*p)->next)
        if ((*p)->id == id) {
            struct tcall *c = *p;
            *p = c->next;
            return c;
        }
    return NULL;
}

static void live_add(struct cs__runner_tcp *t, const struct cs_str *id)
{
    struct live *l = calloc(1, sizeof *l);
    if (!l || id->n >= sizeof l->id) {
        free(l);
        return;
    }
    memcpy(l->id, id->s, id->n);
    l->next = t->live;
    t->live = l;
}

/* Forgets id; returns whether it was remembered. */
static bool live_del(struct cs__runner_tcp *t, const char *id)
{
    for (struct live **p = &t->live; *p; p = &(*p)->next)
        if (strcmp((*p)->id, id) == 0) {
            struct live *l = *p;
            *p = l->next;
            free(l);
            return true;
        }
    return false;
}

static void exited(struct cs__runner_tcp *t, const char *id, const struct csw_runner_exit *how)
{
    live_del(t, id);
    if (t->r->ev.process_exited)
        t->r->ev.process_exited(t->r->ev.arg, id, how);
}

/* ---- the connection ---- */

static void connect_now(struct cs__runner_tcp *t);

static void on_retry(void *arg)
{
    struct cs__runner_tcp *t = arg;
    t->retry = NULL;
    if (t->st == T_DOWN)
        connect_now(t);
}

static void free_tlink(void *arg)
{
    struct tlink *l = arg;
    for (struct tlink **p = &l->t->dying; *p; p = &(*p)->next)
        if (*p == l) {
            *p = l->next;
            break;
        }
    cs_runner_conn_free(l->conn);
    cs_tls_link_free(l->tls);
    free(l);
}

/* The connection is gone (or must go): sent calls are ambiguous, waiting ones never left. */
static void drop(struct cs__runner_tcp *t, const char *why)
{
    if (t->st == T_DOWN)
        return;
    bool was_up = t->st == T_UP;
    t->st = T_DOWN;
    snprintf(t->why, sizeof t->why, "%s", why);
    struct tlink *l = t->link;
    t->link = NULL;
    if (l) {
        cs_runner_conn_close(l->conn, why); /* its closed callback defers the free */
        l->next = t->dying;
        t->dying = l;
    }
    if (was_up)
        t->backoff_ms = 0;
    t->backoff_ms = t->backoff_ms ? t->backoff_ms * 2 : BACKOFF_MIN_MS;
    if (t->backoff_ms > BACKOFF_MAX_MS)
        t->backoff_ms = BACKOFF_MAX_MS;
    /* A worker that refuses our key or whose certificate is not the pinned one fails every
     * call until the operator fixes it: a warning, like a lost link (workflows.md section 6).
     * Our own refusals of the worker start "TLS handshake failed" (runner_tls.c); the worker's
     * refusal of us arrives, in TLS 1.3, as an alert on the first read after our side of the
     * handshake ("... alert bad certificate", "... alert certificate required"): any alert
     * before the link was ever up. A worker not (yet) listening is ordinary while it starts:
     * info. */
    bool auth = strstr(why, "TLS handshake failed") != NULL ||
                (!was_up && strstr(why, "TLS") != NULL && strstr(why, " alert ") != NULL);
    cs_log(was_up || auth ? CS_LOG_WARNING : CS_LOG_INFO,
           was_up ? "runner connection lost"
           : auth ? "runner authentication failed"
                  : "runner connection failed",
           json_pack("{s:s,s:s,s:s,s:I}", "host", t->host, "port", t->port, "error", why,
                     "next_attempt_in_ms", (json_int_t)t->backoff_ms));
    char msg[420];
    cs_diag_format(msg, sizeof msg, "runner transport failed: %s", why);
    while (t->calls) {
        struct tcall *c = t->calls;
        t->calls = c->next;
        finish(c, CS_RUNNER_AMBIGUOUS, msg);
    }
    cs_diag_format(msg, sizeof msg, "runner transport failed before dispatch: %s", why);
    if (t->waiting && t->links == 0)
        t->missed = true;
    while (t->waiting) {
        struct tcall *c = t->waiting;
        t->waiting = c->next;
        finish(c, CS_RUNNER_BEFORE_DISPATCH, msg);
    }
    if (!t->freeing && !t->retry) {
        t->retry = cs_loop_timer_add(t->r->loop, t->backoff_ms, on_retry, t);
        t->retry_at = cs_loop_now_ms() + t->backoff_ms;
    }
}

static void status_done(void *arg, const struct cs_runner_reply *rep);

struct status_probe {
    struct cs__runner_tcp *t;
    char id[CS_SUPERVISOR_ID_SIZE];
};

static void send_call(struct cs__runner_tcp *t, struct tcall *c)
{
    if (cs_runner_conn_send_text(t->link->conn, c->text, c->n) != 0) {
        finish(c, CS_RUNNER_BEFORE_DISPATCH,
               "runner transport failed before dispatch: the request could not be written");
        return;
    }
    cs_wire_release(c->text);
    c->text = NULL;
    c->deadline = cs_loop_now_ms() + CS_RUNNER_DEADLINE_MS;
    c->next = t->calls;
    t->calls = c;
}

static void up(struct cs__runner_tcp *t)
{
    t->st = T_UP;
    t->backoff_ms = 0;
    cs_log(CS_LOG_INFO, "runner connected",
           json_pack("{s:s,s:s,s:b,s:s}", "host", t->host, "port", t->port, "tls",
                     !cs_tls_ctx_plaintext(t->ctx), "auth", cs_tls_ctx_auth(t->ctx)));
    /* FIFO: the waiting list is kept in arrival order. */
    while (t->waiting && t->st == T_UP) {
        struct tcall *c = t->waiting;
        t->waiting = c->next;
        send_call(t, c);
    }
    /* Which of our processes lived through the gap (docs/scale-out.md, "Failure model"). */
    size_t n = 0;
    for (struct live *l = t->live; l; l = l->next)
        n++;
    char(*ids)[CS_SUPERVISOR_ID_SIZE] = n ? calloc(n, sizeof *ids) : NULL;
    size_t k = 0;
    for (struct live *l = t->live; l && ids; l = l->next)
        memcpy(ids[k++], l->id, sizeof *ids);
    for (size_t i = 0; i < k && t->st == T_UP; i++) {
        struct status_probe *p = calloc(1, sizeof *p);
        if (!p)
            break;
        p->t = t;
        memcpy(p->id, ids[i], sizeof p->id);
        struct csw_runner_wire_op op = {.tag = CSW_RUNNER_WIRE_OP_PROCESS_STATUS};
        op.u.process_status.data.process_id = (struct cs_str){p->id, strlen(p->id)};
        cs__runner_tcp_call(t->r, &op, status_done, p);
    }
    free(ids);
}

static void status_done(void *arg, const struct cs_runner_reply *rep)
{
    struct status_probe *p = arg;
    struct cs__runner_tcp *t = p->t;
    bool gone = false;
    if (rep->outcome == CS_RUNNER_OK && rep->result->tag == CSW_RUNNER_WIRE_RESULT_PROCESS_STATUS)
        gone = rep->result->u.process_status.data.state == CSW_PROCESS_STATE_EXITED;
    else if (rep->outcome == CS_RUNNER_ERROR)
        gone = rep->code == CSW_ERROR_PROCESS_NOT_FOUND;
    if (gone && !t->freeing) {
        cs_log(CS_LOG_INFO, "runner process ended while disconnected",
               json_pack("{s:s}", "process_id", p->id));
        /* How it ended, when the worker still knows it (not when it forgot the process). */
        struct csw_runner_exit how;
        memset(&how, 0, sizeof how);
        how.process_id = (struct cs_str){p->id, strlen(p->id)};
        if (rep->outcome == CS_RUNNER_OK) {
            const struct csw_mcp_process_status_output *st = &rep->result->u.process_status.data;
            how.has_exit_code = st->has_exit_code;
            how.exit_code = st->exit_code;
            how.has_termination = st->has_termination;
            how.termination = st->termination;
            how.has_signal = st->has_signal;
            how.signal.number = st->signal.number;
            how.signal.has_name = st->signal.has_name;
            how.signal.name = st->signal.name;
        }
        exited(t, p->id, &how);
    }
    free(p);
}

/* Keeps what the worker's hello says it enforces (a worker that says nothing enforces
 * nothing, docs/scale-out.md); with require_sandbox, a worker without the sandbox is refused:
 * why says so, naming the worker and the requirement. */
static void hello_isolation(struct cs__runner_tcp *t, const struct csw_runner_wire_hello_result *h,
                            char *why, size_t cap)
{
    cs_runner_isolation_decode(h->has_isolation ? &h->isolation : NULL, &t->iso);
    t->hellos++;
    if (!t->require_sandbox || t->iso.sandbox) {
        /* A link made: the events count only hellos accepted, never a refused one. */
        t->links++;
        if (t->links > 1 && t->r->ev.reconnected)
            t->r->ev.reconnected(t->r->ev.arg);
        if (t->links == 1 && t->missed && t->r->ev.first_link_late)
            t->r->ev.first_link_late(t->r->ev.arg);
        return;
    }
    cs_diag_format(
        why, cap,
        "the worker %s:%s runs its commands without the Linux sandbox (its hello %s) and "
        "CODESPACE_REQUIRE_LINUX_SANDBOX=1 requires it: nothing is sent to that worker",
        t->host, t->port, h->has_isolation ? "says command_sandbox none" : "states no isolation");
    cs_log(CS_LOG_ERROR, "runner refused",
           json_pack("{s:s,s:s,s:s}", "host", t->host, "port", t->port, "error", why));
}

static void on_message(void *arg, struct csw_runner_wire *msg)
{
    struct tlink *l = arg;
    struct cs__runner_tcp *t = l->t;
    if (l != t->link)
        return;
    if (msg->tag == CSW_RUNNER_WIRE_EVENT) {
        const struct csw_runner_event *e = &msg->u.event;
        if (e->event.tag == CSW_RUNNER_WIRE_EVENT_BODY_PROCESS_EXITED) {
            const struct cs_str *id = &e->event.u.process_exited.data.process_id;
            char buf[CS_SUPERVISOR_ID_SIZE];
            if (id->n < sizeof buf) {
                memcpy(buf, id->s, id->n);
                buf[id->n] = '\0';
                exited(t, buf, &e->event.u.process_exited.data);
            }
        }
        return;
    }
    if (msg->tag != CSW_RUNNER_WIRE_RESPONSE) {
        drop(t, "the worker sent a request");
        return;
    }
    const struct csw_runner_response *resp = &msg->u.response;
    uint64_t id;
    if (!cs__runner_rid_parse(&resp->request_id, &id))
        return;
    if (t->st == T_CONNECTING) {
        if (id != t->hello_id)
            return; /* an answer to a call of an earlier connection: already completed */
        char why[320] = "";
        if (resp->protocol != CS_RUNNER_PROTOCOL)
            snprintf(why, sizeof why, "protocol mismatch: the worker speaks %" PRId64 ", we %d",
                     resp->protocol, CS_RUNNER_PROTOCOL);
        else if (!resp->ok || !resp->has_result || resp->result.tag != CSW_RUNNER_WIRE_RESULT_HELLO)
            snprintf(why, sizeof why, "the worker refused hello: %.*s",
                     resp->has_error ? (int)resp->error.message.n : 0,
                     resp->has_error ? resp->error.message.s : "");
        else if (resp->result.u.hello.data.protocol != CS_RUNNER_PROTOCOL)
            snprintf(why, sizeof why, "protocol mismatch: the worker speaks %" PRId64 ", we %d",
                     resp->result.u.hello.data.protocol, CS_RUNNER_PROTOCOL);
        else
            hello_isolation(t, &resp->result.u.hello.data, why, sizeof why);
        if (why[0])
            drop(t, why);
        else
            up(t);
        return;
    }
    struct tcall *c = take(&t->calls, id);
    if (!c)
        return; /* a late answer to a call already completed (deadline, earlier connection) */
    char text[1024];
    if (resp->ok && resp->has_result) {
        struct cs_runner_reply rep = {.outcome = CS_RUNNER_OK, .result = &resp->result};
        c->done(c->arg, &rep);
        free(c);
    } else if (!resp->ok && resp->has_error) {
        snprintf(text, sizeof text, "%.*s", (int)resp->error.message.n, resp->error.message.s);
        struct cs_runner_reply rep = {
            .outcome = CS_RUNNER_ERROR, .code = (int)resp->error.code, .msg = text};
        c->done(c->arg, &rep);
        free(c);
    } else {
        finish(c, CS_RUNNER_AMBIGUOUS,
               "runner transport failed: a response with neither result nor error");
    }
}

static void on_bad(void *arg, const json_t *raw, const char *why)
{
    (void)raw;
    struct tlink *l = arg;
    if (l != l->t->link)
        return;
    char msg[400];
    cs_diag_format(msg, sizeof msg, "bad frame from the worker: %s", why);
    drop(l->t, msg);
}

static void on_closed(void *arg, const char *why)
{
    struct tlink *l = arg;
    struct cs__runner_tcp *t = l->t;
    if (l == t->link) {
        char detail[320] = "";
        cs_tls_link_why(l->tls, detail, sizeof detail);
        char msg[400];
        cs_diag_format(msg, sizeof msg, "connection to %s:%s ended: %s", t->host, t->port,
                       detail[0] ? detail : why);
        drop(t, msg);
    }
    (void)cs_loop_defer(t->r->loop, free_tlink, l);
}

static void connect_now(struct cs__runner_tcp *t)
{
    struct cs_diag d = {0};
    struct tlink *l = calloc(1, sizeof *l);
    int fd = -1;
    if (!l) {
        cs_diag_set(&d, CSW_ERROR_INTERNAL, "out of memory");
        goto fail;
    }
    l->t = t;
    l->tls = cs_tls_link_start(t->ctx, t->host, t->port, CONNECT_MS, &fd, &d);
    if (!l->tls)
        goto fail;
    struct cs_runner_conn_callbacks cb = {on_message, on_bad, on_closed, l};
    l->conn = cs_runner_conn_new(t->r->loop, fd, &cb);
    if (!l->conn) {
        close(fd);
        cs_tls_link_free(l->tls);
        cs_diag_set(&d, CSW_ERROR_INTERNAL, "out of memory");
        goto fail;
    }
    t->link = l;
    t->st = T_CONNECTING;
    t->connect_deadline = cs_loop_now_ms() + HELLO_MS;
    /* hello goes first; the pump holds it until the peer is authenticated. */
    char peer[128], rid[CS__RUNNER_RID_SIZE];
    snprintf(peer, sizeof peer, "codespace-mcp %s", t->version);
    t->hello_id = t->next_id++;
    struct csw_runner_wire_op hello = {.tag = CSW_RUNNER_WIRE_OP_HELLO};
    hello.u.hello.data.protocol = CS_RUNNER_PROTOCOL;
    hello.u.hello.data.has_peer = true;
    hello.u.hello.data.peer = (struct cs_str){peer, strlen(peer)};
    hello.u.hello.data.has_gateway = t->name[0] != '\0';
    hello.u.hello.data.gateway = (struct cs_str){t->name, strlen(t->name)};
    struct csw_runner_wire w;
    cs__runner_request(&w, rid, t->hello_id, &hello);
    if (cs_runner_conn_send(l->conn, &w) != 0)
        drop(t, "cannot send hello");
    return;
fail:
    free(l);
    t->st = T_CONNECTING; /* so drop() accounts the failure and schedules the retry */
    drop(t, d.text);
}

/* Every second: calls past their deadline are ambiguous; a connection not up in time drops. */
static void on_sweep(void *arg)
{
    struct cs__runner_tcp *t = arg;
    t->sweep = NULL;
    int64_t now = cs_loop_now_ms();
    for (struct tcall **p = &t->calls; *p;) {
        struct tcall *c = *p;
        if (c->deadline > now) {
            p = &c->next;
            continue;
        }
        *p = c->next;
        finish(c, CS_RUNNER_AMBIGUOUS, "runner transport failed: no answer within 120 s");
    }
    if (t->st == T_CONNECTING && now > t->connect_deadline)
        drop(t, "the worker did not answer hello within 15 s");
    t->sweep = cs_loop_timer_add(t->r->loop, 1000, on_sweep, t);
}

/* ---- the interface ---- */

void cs__runner_tcp_call(struct cs_runner *r, const struct csw_runner_wire_op *op,
                         cs_runner_done_fn done, void *arg)
{
    struct cs__runner_tcp *t = r->tcp;
    char msg[420];
    if (t->st == T_DOWN) {
        int64_t left = t->retry ? t->retry_at - cs_loop_now_ms() : 0;
        if (left > 0) {
            cs_diag_format(
                msg, sizeof msg,
                "runner transport failed before dispatch: %s; the next attempt is in %" PRId64
                " ms",
                t->why, left);
            t->missed |= t->links == 0;
            cs__runner_fail_before(done, arg, msg);
            return;
        }
        cs_loop_timer_cancel(t->retry);
        t->retry = NULL;
        connect_now(t);
        if (t->st == T_DOWN) {
            cs_diag_format(msg, sizeof msg, "runner transport failed before dispatch: %s", t->why);
            t->missed |= t->links == 0;
            cs__runner_fail_before(done, arg, msg);
            return;
        }
    }
    struct tcall *c = calloc(1, sizeof *c);
    char rid[CS__RUNNER_RID_SIZE];
    uint64_t id = t->next_id++;
    struct csw_runner_wire w;
    cs__runner_request(&w, rid, id, op);
    struct cs_wire_diag diag;
    if (!c || csw_runner_wire_encode_text(&w, &c->text, &c->n, &diag) != CS_WIRE_OK) {
        free(c);
        cs__runner_fail_before(
            done, arg, "runner transport failed before dispatch: the request could not be encoded");
        return;
    }
    c->id = id;
    c->done = done;
    c->arg = arg;
    if (op->tag == CSW_RUNNER_WIRE_OP_EXEC)
        live_add(t, &op->u.exec.data.process_id);
    if (t->st == T_UP) {
        send_call(t, c);
        return;
    }
    struct tcall **p = &t->waiting;
    while (*p)
        p = &(*p)->next;
    *p = c;
}

void cs__runner_tcp_cancel(struct cs_runner *r, cs_runner_done_fn done, void *arg,
                           const char *process_id)
{
    struct cs__runner_tcp *t = r->tcp;
    if (t->st != T_UP)
        return; /* the next reconnection's process_status probes settle the processes */
    struct tcall *c = t->calls;
    while (c && !(c->done == done && c->arg == arg))
        c = c->next;
    if (!c && !process_id)
        return;
    cs__runner_cancel_send(r, cs__runner_tcp_call, c ? &c->id : NULL, process_id);
}

void cs__runner_tcp_free(struct cs_runner *r)
{
    struct cs__runner_tcp *t = r->tcp;
    if (!t)
        return;
    t->freeing = true;
    cs_loop_timer_cancel(t->sweep);
    cs_loop_timer_cancel(t->retry);
    t->sweep = t->retry = NULL;
    while (t->dying) {
        struct tlink *l = t->dying;
        t->dying = l->next;
        cs_loop_defer_cancel(r->loop, free_tlink, l);
        cs_runner_conn_free(l->conn);
        cs_tls_link_free(l->tls);
        free(l);
    }
    if (t->link) {
        cs_runner_conn_free(t->link->conn);
        cs_tls_link_free(t->link->tls);
        free(t->link);
        t->link = NULL;
    }
    while (t->calls) {
        struct tcall *c = t->calls;
        t->calls = c->next;
        finish(c, CS_RUNNER_AMBIGUOUS, "runner transport failed: the gateway is shutting down");
    }
    while (t->waiting) {
        struct tcall *c = t->waiting;
        t->waiting = c->next;
        finish(c, CS_RUNNER_BEFORE_DISPATCH,
               "runner transport failed before dispatch: the gateway is shutting down");
    }
    while (t->live) {
        struct live *l = t->live;
        t->live = l->next;
        free(l);
    }
    cs_tls_ctx_free(t->ctx);
    free(t->version);
    free(t);
    r->tcp = NULL;
}

struct cs_runner *cs_runner_tcp_new(struct cs_loop *loop, const struct cs_runner_tcp_options *opt,
                                    const struct cs_runner_events *ev, struct cs_diag *err)
{
    struct cs_runner *r = calloc(1, sizeof *r);
    struct cs__runner_tcp *t = calloc(1, sizeof *t);
    if (!r || !t || !(t->version = strdup(opt->version))) {
        free(r);
        free(t);
        cs_diag_set(err, CSW_ERROR_INTERNAL, "out of memory");
        return NULL;
    }
    r->loop = loop;
    r->ev = *ev;
    r->tcp = t;
    t->r = r;
    t->next_id = 1;
    t->require_sandbox = opt->require_sandbox;
    unsigned char rnd[16];
    if (getrandom(rnd, sizeof rnd, 0) == (ssize_t)sizeof rnd)
        for (size_t i = 0; i < sizeof rnd; i++)
            snprintf(t->name + 2 * i, 3, "%02x", rnd[i]);
    if (cs_runner_url_parse(opt->url, t->host, t->port) != 0) {
        cs_diag_set(err, CSW_ERROR_INTERNAL, "runner %s is not tcp://HOST:PORT", opt->url);
        goto fail;
    }
    struct cs_tls_config tc = {.plaintext = opt->plaintext,
                               .cert = opt->cert,
                               .key = opt->key,
                               .psk_file = opt->psk_file,
                               .psk_identity = opt->psk_identity};
    memcpy(tc.peer_pin, opt->peer_pin, sizeof tc.peer_pin);
    t->ctx = cs_tls_ctx_new(&tc, false, err);
    if (!t->ctx)
        goto fail;
    t->sweep = cs_loop_timer_add(loop, 1000, on_sweep, t);
    if (!t->sweep) {
        cs_diag_set(err, CSW_ERROR_INTERNAL, "out of memory");
        goto fail;
    }
    /* The first connection starts now, in the background: calls wait for its hello. */
    connect_now(t);
    return r;
fail:
    cs_tls_ctx_free(t->ctx);
    cs_loop_timer_cancel(t->sweep);
    free(t->version);
    free(t);
    free(r);
    return NULL;
}

bool cs_runner_is_tcp(const struct cs_runner *r)
{
    return r && r->tcp;
}

uint64_t cs_runner_tcp_isolation(const struct cs_runner *r, struct cs_supervisor_isolation *iso)
{
    memset(iso, 0, sizeof *iso);
    if (!r || !r->tcp)
        return 0;
    *iso = r->tcp->iso;
    return r->tcp->hellos;
}
