/*
 * runner_multi: workspace placement (docs/scale-out.md). When the registry gives some workspaces
 * a `runner` of their own, the tool layer holds one multi runner that routes each call to the
 * runner holding its workspace: operations naming a workspace by its id, process operations by
 * the process id (remembered when the exec went out, the last CS_RUNNER_MULTI_PIDS of them), and
 * everything else to the default runner (the gateway's --runner). Sub-runners report their
 * events straight to the tool layer (they were made with its events).
 *
 * A process id this gateway did not start (another gateway in front of the same workers did,
 * issue 32; or it fell out of the ring) is asked for: the operation goes to each runner in turn,
 * the default first, until one answers anything but PROCESS_NOT_FOUND; that runner is remembered
 * for the id. Safe for every process operation: a runner that does not know the id did nothing.
 * A runner that could not be reached is skipped, and named if no runner knew the id.
 *
 * Trust: routes come from the operator's registry; process ids from the gateway's own exec.
 * Entry points: cs_runner_multi_new, cs_runner_multi_route (runner.h),
 * cs__runner_multi_call/cancel/free (runner_internal.h).
 */
#include "runner_internal.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base_wire.h"

#define CS_RUNNER_MULTI_PIDS 4096

struct route {
    char *ws_id;
    struct cs_runner *r;
};

struct pid_route {
    char id[CS_SUPERVISOR_ID_SIZE];
    struct cs_runner *r;
};

/* A process operation looking for the runner that knows its process (see the top). */
struct probe {
    struct cs__runner_multi *m;
    cs_runner_done_fn done;
    void *arg;
    struct cs_runner_prepare prep;
    bool has_prep;
    char *text; /* the operation, as a request's JSON text (decoded again for each runner) */
    size_t n;
    size_t next;              /* the index in m->subs of the next runner to ask */
    struct cs_runner *cur;    /* the runner asked now */
    enum csw_error not_found; /* the answer that sends the operation on to the next runner */
    bool process;             /* a process id (remembered once found), or an operation's */
    char id[256];
    char unreached[320]; /* the first runner that could not be reached: why */
    struct probe *link;  /* m->probes */
};

struct cs__runner_multi {
    struct probe *probes; /* in flight, for cancel */
    struct cs_runner *def;
    struct route *routes;
    size_t n_routes;
    struct cs_runner **subs; /* distinct sub-runners, owned (the default included) */
    size_t n_subs;
    struct pid_route *pids; /* a ring */
    size_t next_pid;
};

struct cs_runner *cs_runner_multi_new(struct cs_loop *loop, struct cs_runner *def)
{
    struct cs_runner *r = calloc(1, sizeof *r);
    struct cs__runner_multi *m = calloc(1, sizeof *m);
    struct cs_runner **subs = calloc(1, sizeof *subs);
    struct pid_route *pids = calloc(CS_RUNNER_MULTI_PIDS, sizeof *pids);
    if (!r || !m || !subs || !pids) {
        free(r);
        free(m);
        free(subs);
        free(pids);
        return NULL;
    }
    r->loop = loop;
    r->multi = m;
    m->def = def;
    m->subs = subs;
    m->subs[m->n_subs++] = def;
    m->pids = pids;
    return r;
}

int cs_runner_multi_route(struct cs_runner *multi, const char *workspace_id, struct cs_runner *sub)
{
    struct cs__runner_multi *m = multi->multi;
    bool owned = false;
    for (size_t i = 0; i < m->n_subs; i++)
        owned = owned || m->subs[i] == sub;
    if (!owned) {
        struct cs_runner **s = realloc(m->subs, (m->n_subs + 1) * sizeof *s);
        if (!s)
            return -1;
        m->subs = s;
        m->subs[m->n_subs++] = sub; /* owned from here on, even if the route below fails */
    }
    struct route *rt = realloc(m->routes, (m->n_routes + 1) * sizeof *rt);
    if (!rt)
        return -1;
    m->routes = rt;
    char *id = strdup(workspace_id);
    if (!id)
        return -1;
    m->routes[m->n_routes++] = (struct route){id, sub};
    return 0;
}

static struct cs_runner *by_workspace(struct cs__runner_multi *m, const struct cs_str *id)
{
    for (size_t i = 0; i < m->n_routes; i++)
        if (strlen(m->routes[i].ws_id) == id->n && memcmp(m->routes[i].ws_id, id->s, id->n) == 0)
            return m->routes[i].r;
    return m->def;
}

/* The runner remembered for process id, or NULL. */
static struct cs_runner *known_pid(struct cs__runner_multi *m, const struct cs_str *id)
{
    for (size_t i = 0; i < CS_RUNNER_MULTI_PIDS; i++)
        if (m->pids[i].r && strlen(m->pids[i].id) == id->n &&
            memcmp(m->pids[i].id, id->s, id->n) == 0)
            return m->pids[i].r;
    return NULL;
}

static struct cs_runner *by_pid(struct cs__runner_multi *m, const struct cs_str *id)
{
    struct cs_runner *r = known_pid(m, id);
    return r ? r : m->def;
}

static void remember(struct cs__runner_multi *m, const struct cs_str *id, struct cs_runner *sub)
{
    struct pid_route *p = &m->pids[m->next_pid++ % CS_RUNNER_MULTI_PIDS];
    if (id->n < sizeof p->id && memchr(id->s, '\0', id->n) == NULL) {
        memcpy(p->id, id->s, id->n);
        p->id[id->n] = '\0';
        p->r = sub;
    }
}

/* The process id of a process operation, or NULL for any other. */
static const struct cs_str *pid_of(const struct csw_runner_wire_op *op)
{
    switch (op->tag) {
    case CSW_RUNNER_WIRE_OP_WRITE_STDIN:
        return &op->u.write_stdin.data.process_id;
    case CSW_RUNNER_WIRE_OP_READ_PROCESS:
        return &op->u.read_process.data.process_id;
    case CSW_RUNNER_WIRE_OP_PROCESS_STATUS:
        return &op->u.process_status.data.process_id;
    case CSW_RUNNER_WIRE_OP_RESIZE:
        return &op->u.resize.data.process_id;
    case CSW_RUNNER_WIRE_OP_TERMINATE:
        return &op->u.terminate.data.process_id;
    case CSW_RUNNER_WIRE_OP_WORKSPACE_OF:
        return &op->u.workspace_of.data.process_id;
    case CSW_RUNNER_WIRE_OP_HELLO:
    case CSW_RUNNER_WIRE_OP_READ:
    case CSW_RUNNER_WIRE_OP_FIND:
    case CSW_RUNNER_WIRE_OP_VERSION:
    case CSW_RUNNER_WIRE_OP_APPLY_PATCH:
    case CSW_RUNNER_WIRE_OP_EXEC:
    case CSW_RUNNER_WIRE_OP_TERMINATE_WORKSPACE:
    case CSW_RUNNER_WIRE_OP_REPLAY:
    case CSW_RUNNER_WIRE_OP_CANCEL:
    case CSW_RUNNER_WIRE_OP_PATCH_OUTCOMES:
    case CSW_RUNNER_WIRE_OP_OPERATION_STATUS:
        break;
    }
    return NULL;
}

static struct cs_runner *pick(struct cs__runner_multi *m, const struct csw_runner_wire_op *op)
{
    switch (op->tag) {
    case CSW_RUNNER_WIRE_OP_READ:
        return by_workspace(m, &op->u.read.data.workspace.id);
    case CSW_RUNNER_WIRE_OP_FIND:
        return by_workspace(m, &op->u.find.data.workspace.id);
    case CSW_RUNNER_WIRE_OP_VERSION:
        return by_workspace(m, &op->u.version.data.workspace.id);
    case CSW_RUNNER_WIRE_OP_APPLY_PATCH:
        return by_workspace(m, &op->u.apply_patch.data.workspace.id);
    case CSW_RUNNER_WIRE_OP_PATCH_OUTCOMES:
        return by_workspace(m, &op->u.patch_outcomes.data.workspace.id);
    case CSW_RUNNER_WIRE_OP_EXEC:
        return by_workspace(m, &op->u.exec.data.workspace.id);
    case CSW_RUNNER_WIRE_OP_TERMINATE_WORKSPACE:
        return by_workspace(m, &op->u.terminate_workspace.data.workspace_id);
    case CSW_RUNNER_WIRE_OP_WRITE_STDIN:
        return by_pid(m, &op->u.write_stdin.data.process_id);
    case CSW_RUNNER_WIRE_OP_READ_PROCESS:
        return by_pid(m, &op->u.read_process.data.process_id);
    case CSW_RUNNER_WIRE_OP_PROCESS_STATUS:
        return by_pid(m, &op->u.process_status.data.process_id);
    case CSW_RUNNER_WIRE_OP_RESIZE:
        return by_pid(m, &op->u.resize.data.process_id);
    case CSW_RUNNER_WIRE_OP_TERMINATE:
        return by_pid(m, &op->u.terminate.data.process_id);
    case CSW_RUNNER_WIRE_OP_WORKSPACE_OF:
        return by_pid(m, &op->u.workspace_of.data.process_id);
    case CSW_RUNNER_WIRE_OP_HELLO:
    case CSW_RUNNER_WIRE_OP_REPLAY:
    case CSW_RUNNER_WIRE_OP_CANCEL:
    case CSW_RUNNER_WIRE_OP_OPERATION_STATUS:
        break;
    }
    return m->def;
}

/* What to ask every runner about, when there are several: an operation's id or key (the ledger
 * of whichever worker holds the row, issue 32), or a process id not remembered; NULL: the
 * operation is routed as usual. */
static const struct cs_str *probe_key(struct cs__runner_multi *m,
                                      const struct csw_runner_wire_op *op)
{
    const struct cs_str *k;
    if (op->tag == CSW_RUNNER_WIRE_OP_OPERATION_STATUS) {
        const struct csw_runner_wire_operation_status_data *os = &op->u.operation_status.data;
        k = os->has_operation_id ? &os->operation_id : &os->operation_key;
        if (k->n >= sizeof((struct probe *)0)->id)
            return NULL;
    } else {
        k = pid_of(op);
        if (!k || k->n >= CS_SUPERVISOR_ID_SIZE || known_pid(m, k))
            return NULL;
    }
    return m->n_subs > 1 && memchr(k->s, '\0', k->n) == NULL ? k : NULL;
}

static void probe_free(struct probe *p)
{
    for (struct probe **q = &p->m->probes; *q; q = &(*q)->link)
        if (*q == p) {
            *q = p->link;
            break;
        }
    cs_wire_release(p->text);
    free(p);
}

static void probe_done(void *arg, const struct cs_runner_reply *reply);

/* Asks the next runner (the operation decoded again from its text: a runner keeps nothing of it
 * past the call). */
static void probe_next(struct probe *p)
{
    json_error_t jerr;
    json_t *j = json_loadb(p->text, p->n, 0, &jerr);
    struct csw_runner_wire msg;
    struct cs_wire_diag diag;
    if (!j || csw_runner_wire_decode(j, &msg, &diag) != CS_WIRE_OK) {
        json_decref(j);
        struct cs_runner_reply rep = {
            .outcome = CS_RUNNER_ERROR, .code = CSW_ERROR_INTERNAL, .msg = "out of memory"};
        cs_runner_done_fn done = p->done;
        void *arg = p->arg;
        probe_free(p);
        done(arg, &rep);
        return;
    }
    json_decref(j);
    p->cur = p->m->subs[p->next++];
    cs_runner_call_prepared(p->cur, &msg.u.request.op, p->has_prep ? &p->prep : NULL, probe_done,
                            p); /* p may be gone from here */
    csw_runner_wire_free(&msg);
}

static void probe_done(void *arg, const struct cs_runner_reply *reply)
{
    struct probe *p = arg;
    bool not_found = reply->outcome == CS_RUNNER_ERROR && reply->code == (int)p->not_found;
    bool unreached = reply->outcome == CS_RUNNER_BEFORE_DISPATCH;
    if (unreached && p->unreached[0] == '\0')
        snprintf(p->unreached, sizeof p->unreached, "%s", reply->msg ? reply->msg : "unreached");
    if ((not_found || unreached) && p->next < p->m->n_subs) {
        probe_next(p);
        return;
    }
    cs_runner_done_fn done = p->done;
    void *darg = p->arg;
    if (!not_found && !unreached && p->process) {
        struct cs_str id = {p->id, strlen(p->id)};
        remember(p->m, &id, p->cur);
    }
    struct cs_runner_reply rep = *reply;
    char why[640];
    if (not_found && p->unreached[0] != '\0') {
        /* Nowhere known, and a runner was not asked: it may be there. */
        snprintf(why, sizeof why, "%s %.200s is not known to the runners reached; %s",
                 p->process ? "process" : "operation", p->id, p->unreached);
        rep = (struct cs_runner_reply){.outcome = CS_RUNNER_BEFORE_DISPATCH, .msg = why};
    }
    probe_free(p);
    done(darg, &rep);
}

void cs__runner_multi_call(struct cs_runner *r, const struct csw_runner_wire_op *op,
                           const struct cs_runner_prepare *prep, cs_runner_done_fn done, void *arg)
{
    struct cs__runner_multi *m = r->multi;
    struct cs_runner *sub = pick(m, op);
    if (op->tag == CSW_RUNNER_WIRE_OP_EXEC && sub != m->def)
        remember(m, &op->u.exec.data.process_id, sub);
    const struct cs_str *pid = probe_key(m, op);
    bool os = op->tag == CSW_RUNNER_WIRE_OP_OPERATION_STATUS;
    if (pid) {
        struct probe *p = calloc(1, sizeof *p);
        struct csw_runner_wire w;
        char rid[CS__RUNNER_RID_SIZE];
        cs__runner_request(&w, rid, 1, op);
        struct cs_wire_diag diag;
        if (p && csw_runner_wire_encode_text(&w, &p->text, &p->n, &diag) == CS_WIRE_OK) {
            p->m = m;
            p->done = done;
            p->arg = arg;
            p->has_prep = prep != NULL;
            if (prep)
                p->prep = *prep;
            memcpy(p->id, pid->s, pid->n);
            p->id[pid->n] = '\0';
            p->process = !os;
            p->not_found = os ? CSW_ERROR_OPERATION_NOT_FOUND : CSW_ERROR_PROCESS_NOT_FOUND;
            p->link = m->probes;
            m->probes = p;
            probe_next(p);
            return;
        }
        free(p); /* out of memory: the default runner, as before */
    }
    cs_runner_call_prepared(sub, op, prep, done, arg);
}

void cs__runner_multi_cancel(struct cs_runner *r, cs_runner_done_fn done, void *arg,
                             const char *process_id)
{
    struct cs__runner_multi *m = r->multi;
    for (struct probe *p = m->probes; p; p = p->link)
        if (p->done == done && p->arg == arg) {
            cs_runner_cancel(p->cur, probe_done, p, process_id);
            return;
        }
    if (process_id) {
        struct cs_str id = {(char *)(uintptr_t)process_id, strlen(process_id)};
        cs_runner_cancel(by_pid(m, &id), done, arg, process_id);
        return;
    }
    /* The call is in one of them; the others find nothing to cancel. */
    for (size_t i = 0; i < m->n_subs; i++)
        cs_runner_cancel(m->subs[i], done, arg, NULL);
}

void cs__runner_multi_free(struct cs_runner *r)
{
    struct cs__runner_multi *m = r->multi;
    /* Freeing the runners completes their calls, a probe's included: it then asks the next one
     * (freed already, or not yet)... so the probes are detached first and answered here. */
    while (m->probes) {
        struct probe *p = m->probes;
        m->probes = p->link;
        p->link = NULL;
        p->next = m->n_subs; /* no further runner */
    }
    for (size_t i = 0; i < m->n_subs; i++)
        cs_runner_free(m->subs[i]);
    for (size_t i = 0; i < m->n_routes; i++)
        free(m->routes[i].ws_id);
    free(m->routes);
    free(m->subs);
    free(m->pids);
    free(m);
    r->multi = NULL;
}
