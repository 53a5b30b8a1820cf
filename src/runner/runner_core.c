/*
 * runner_core: the runner object and the in-process implementation (the executor on the
 * gateway's own loop). The uds implementation is in runner_uds.c.
 * Entry points: runner.h.
 */
#include "runner_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void inproc_exited(void *arg, const char *id)
{
    struct cs_runner *r = arg;
    if (r->ev.process_exited)
        r->ev.process_exited(r->ev.arg, id);
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
    if (r->multi)
        cs__runner_multi_call(r, op, done, arg);
    else if (r->tcp)
        cs__runner_tcp_call(r, op, done, arg);
    else if (r->uds)
        cs__runner_uds_call(r, op, done, arg);
    else
        cs_runner_exec_op(r->ex, op, done, arg);
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
