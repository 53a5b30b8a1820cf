/*
 * runner_multi: workspace placement (docs/scale-out.md). When the registry gives some workspaces
 * a `runner` of their own, the tool layer holds one multi runner that routes each call to the
 * runner holding its workspace: operations naming a workspace by its id, process operations by
 * the process id (remembered when the exec went out, the last CS_RUNNER_MULTI_PIDS of them), and
 * everything else to the default runner (the gateway's --runner). Sub-runners report their
 * events straight to the tool layer (they were made with its events).
 *
 * Trust: routes come from the operator's registry; process ids from the gateway's own exec.
 * Entry points: cs_runner_multi_new, cs_runner_multi_route (runner.h),
 * cs__runner_multi_call/cancel/free (runner_internal.h).
 */
#include "runner_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CS_RUNNER_MULTI_PIDS 4096

struct route {
    char *ws_id;
    struct cs_runner *r;
};

struct pid_route {
    char id[CS_SUPERVISOR_ID_SIZE];
    struct cs_runner *r;
};

struct cs__runner_multi {
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

static struct cs_runner *by_pid(struct cs__runner_multi *m, const struct cs_str *id)
{
    for (size_t i = 0; i < CS_RUNNER_MULTI_PIDS; i++)
        if (m->pids[i].r && strlen(m->pids[i].id) == id->n &&
            memcmp(m->pids[i].id, id->s, id->n) == 0)
            return m->pids[i].r;
    return m->def;
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
        break;
    }
    return m->def;
}

void cs__runner_multi_call(struct cs_runner *r, const struct csw_runner_wire_op *op,
                           const struct cs_runner_prepare *prep, cs_runner_done_fn done, void *arg)
{
    struct cs__runner_multi *m = r->multi;
    struct cs_runner *sub = pick(m, op);
    if (op->tag == CSW_RUNNER_WIRE_OP_EXEC && sub != m->def) {
        const struct cs_str *id = &op->u.exec.data.process_id;
        struct pid_route *p = &m->pids[m->next_pid++ % CS_RUNNER_MULTI_PIDS];
        if (id->n < sizeof p->id) {
            memcpy(p->id, id->s, id->n);
            p->id[id->n] = '\0';
            p->r = sub;
        }
    }
    cs_runner_call_prepared(sub, op, prep, done, arg);
}

void cs__runner_multi_cancel(struct cs_runner *r, cs_runner_done_fn done, void *arg,
                             const char *process_id)
{
    struct cs__runner_multi *m = r->multi;
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
