/*
 * runner_internal: the runner object shared by runner_core.c and runner_uds.c.
 */
#ifndef CS_RUNNER_INTERNAL_H
#define CS_RUNNER_INTERNAL_H

#include "runner.h"

struct cs__runner_uds;
struct cs__runner_tcp;
struct cs__runner_multi;

struct cs_runner {
    bool uds;
    struct cs_loop *loop;
    struct cs_runner_events ev;
    struct cs_runner_exec *ex;      /* in-process */
    struct cs__runner_uds *u;       /* uds */
    struct cs__runner_tcp *tcp;     /* tcp (runner_tcp.c) */
    struct cs__runner_multi *multi; /* per-workspace placement (runner_multi.c) */
};

void cs__runner_uds_call(struct cs_runner *r, const struct csw_runner_wire_op *op,
                         cs_runner_done_fn done, void *arg);
void cs__runner_uds_cancel(struct cs_runner *r, cs_runner_done_fn done, void *arg,
                           const char *process_id);
void cs__runner_uds_free(struct cs_runner *r);
void cs__runner_tcp_call(struct cs_runner *r, const struct csw_runner_wire_op *op,
                         cs_runner_done_fn done, void *arg);
void cs__runner_tcp_cancel(struct cs_runner *r, cs_runner_done_fn done, void *arg,
                           const char *process_id);
void cs__runner_tcp_free(struct cs_runner *r);
void cs__runner_multi_call(struct cs_runner *r, const struct csw_runner_wire_op *op,
                           cs_runner_done_fn done, void *arg);
void cs__runner_multi_cancel(struct cs_runner *r, cs_runner_done_fn done, void *arg,
                             const char *process_id);
void cs__runner_multi_free(struct cs_runner *r);

#endif
