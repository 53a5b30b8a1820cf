/*
 * runner_core: the runner object and the in-process implementation (the executor on the
 * gateway's own loop), and the request-id and cancel helpers of the uds and tcp runners. The uds
 * implementation is in runner_uds.c, the tcp one in runner_tcp.c. Also the hello's isolation
 * member both ends use (cs_runner_isolation_encode, cs_runner_isolation_decode).
 * Entry points: runner.h.
 */
#include "runner_internal.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void inproc_exited(void *arg, const char *id, const struct csw_runner_exit *how)
{
    struct cs_runner *r = arg;
    if (r->ev.process_exited)
        r->ev.process_exited(r->ev.arg, id, how);
}

struct cs_runner *cs_runner_inproc_new(struct cs_loop *loop, const struct cs_supervisor_limits *lim,
                                       const struct cs_runner_events *ev)
{
    struct cs_runner *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->loop = loop;
    r->ev = *ev;
    r->ex = cs_runner_exec_new(loop, lim, inproc_exited, r);
    if (!r->ex) {
        free(r);
        return NULL;
    }
    return r;
}

void cs_runner_call(struct cs_runner *r, const struct csw_runner_wire_op *op,
                    cs_runner_done_fn done, void *arg)
{
    cs_runner_call_prepared(r, op, NULL, done, arg);
}

void cs_runner_call_prepared(struct cs_runner *r, const struct csw_runner_wire_op *op,
                             const struct cs_runner_prepare *prep, cs_runner_done_fn done,
                             void *arg)
{
    if (r->multi)
        cs__runner_multi_call(r, op, prep, done, arg);
    else if (r->tcp)
        cs__runner_tcp_call(r, op, done, arg); /* the worker's answer is decoded here: no make */
    else if (r->uds)
        cs__runner_uds_call(r, op, done, arg);
    else
        cs_runner_exec_op(r->ex, op, prep, done, arg);
}

void cs_runner_cancel(struct cs_runner *r, cs_runner_done_fn done, void *arg,
                      const char *process_id)
{
    if (r->multi) {
        cs__runner_multi_cancel(r, done, arg, process_id);
        return;
    }
    if (r->tcp) {
        cs__runner_tcp_cancel(r, done, arg, process_id);
        return;
    }
    if (r->uds) {
        cs__runner_uds_cancel(r, done, arg, process_id);
        return;
    }
    struct cs_str id = {(char *)(uintptr_t)process_id, process_id ? strlen(process_id) : 0};
    struct csw_runner_wire_cancel_result res;
    cs_runner_exec_cancel(r->ex, done, arg, process_id ? &id : NULL, &res);
}

void cs_runner_free(struct cs_runner *r)
{
    if (!r)
        return;
    if (r->multi)
        cs__runner_multi_free(r);
    if (r->tcp)
        cs__runner_tcp_free(r);
    if (r->uds)
        cs__runner_uds_free(r);
    cs_runner_exec_free(r->ex);
    free(r);
}

/* ---- shared by the uds and tcp runners ---- */

void cs__runner_rid_format(char out[CS__RUNNER_RID_SIZE], uint64_t id)
{
    snprintf(out, CS__RUNNER_RID_SIZE, "rrpc-%" PRIu64, id);
}

bool cs__runner_rid_parse(const struct cs_str *rid, uint64_t *out)
{
    if (rid->n < 6 || memcmp(rid->s, "rrpc-", 5) != 0)
        return false;
    uint64_t id = 0;
    for (size_t i = 5; i < rid->n; i++) {
        if (rid->s[i] < '0' || rid->s[i] > '9' || id > UINT64_MAX / 10)
            return false;
        id = id * 10 + (uint64_t)(rid->s[i] - '0');
    }
    *out = id;
    return true;
}

void cs__runner_request(struct csw_runner_wire *w, char rid[CS__RUNNER_RID_SIZE], uint64_t id,
                        const struct csw_runner_wire_op *op)
{
    cs__runner_rid_format(rid, id);
    memset(w, 0, sizeof *w);
    w->tag = CSW_RUNNER_WIRE_REQUEST;
    w->u.request.protocol = CS_RUNNER_PROTOCOL;
    w->u.request.request_id = (struct cs_str){rid, strlen(rid)};
    w->u.request.op = *op;
}

void cs__runner_fail_before(cs_runner_done_fn done, void *arg, const char *msg)
{
    struct cs_runner_reply rep = {.outcome = CS_RUNNER_BEFORE_DISPATCH, .msg = msg};
    done(arg, &rep);
}

static void cancel_done(void *arg, const struct cs_runner_reply *reply)
{
    (void)arg;
    (void)reply;
}

void cs__runner_cancel_send(struct cs_runner *r, cs__runner_call_fn call, const uint64_t *id,
                            const char *process_id)
{
    char rid[CS__RUNNER_RID_SIZE];
    struct csw_runner_wire_op op = {.tag = CSW_RUNNER_WIRE_OP_CANCEL};
    struct csw_runner_wire_cancel_data *d = &op.u.cancel.data;
    if (id) {
        cs__runner_rid_format(rid, *id);
        d->has_request_id = true;
        d->request_id = (struct cs_str){rid, strlen(rid)};
    }
    if (process_id) {
        d->has_process_id = true;
        d->process_id = (struct cs_str){(char *)(uintptr_t)process_id, strlen(process_id)};
    }
    call(r, &op, cancel_done, NULL);
}

void cs_runner_isolation_encode(const struct cs_supervisor_isolation *iso,
                                struct csw_runner_wire_worker_isolation *w)
{
    memset(w, 0, sizeof *w);
    w->command_sandbox = iso->sandbox
                             ? CSW_RUNNER_WIRE_WORKER_ISOLATION_COMMAND_SANDBOX_LINUX_SANDBOX
                             : CSW_RUNNER_WIRE_WORKER_ISOLATION_COMMAND_SANDBOX_NONE;
    w->network_enforcement = iso->sandbox
                                 ? CSW_RUNNER_WIRE_WORKER_ISOLATION_NETWORK_ENFORCEMENT_ENFORCED
                                 : CSW_RUNNER_WIRE_WORKER_ISOLATION_NETWORK_ENFORCEMENT_NONE;
    w->has_landlock_abi = iso->sandbox && iso->landlock_abi > 0;
    w->landlock_abi = w->has_landlock_abi ? iso->landlock_abi : 0;
    w->has_syscall_denials = iso->sandbox;
    w->syscall_denials = iso->sandbox && iso->syscall_denials;
}

void cs_runner_isolation_decode(const struct csw_runner_wire_worker_isolation *w,
                                struct cs_supervisor_isolation *iso)
{
    memset(iso, 0, sizeof *iso);
    if (!w)
        return;
    iso->sandbox =
        w->command_sandbox == CSW_RUNNER_WIRE_WORKER_ISOLATION_COMMAND_SANDBOX_LINUX_SANDBOX &&
        w->network_enforcement == CSW_RUNNER_WIRE_WORKER_ISOLATION_NETWORK_ENFORCEMENT_ENFORCED;
    if (!iso->sandbox)
        return;
    iso->landlock_abi = w->has_landlock_abi && w->landlock_abi > 0 ? w->landlock_abi : 0;
    iso->syscall_denials = w->has_syscall_denials && w->syscall_denials;
}
