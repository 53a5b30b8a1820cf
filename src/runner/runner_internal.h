/*
 * runner_internal: the runner object shared by runner_core.c and the uds, tcp and placement
 * runners, and the request-id and cancel helpers the uds and tcp runners share.
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

/* ---- shared by the uds and tcp runners (runner_core.c) ---- */

/* A request id on the wire: "rrpc-" and the call's number in decimal (runner.md). */
#define CS__RUNNER_RID_SIZE 32
void cs__runner_rid_format(char out[CS__RUNNER_RID_SIZE], uint64_t id);
/* Returns whether rid is such an id, with its number in *id. */
bool cs__runner_rid_parse(const struct cs_str *rid, uint64_t *id);

/* Fills *w (zeroed first) with the request numbered id carrying op (shallow: borrowed for the
 * encode); rid is the storage of its id. */
void cs__runner_request(struct csw_runner_wire *w, char rid[CS__RUNNER_RID_SIZE], uint64_t id,
                        const struct csw_runner_wire_op *op);
/* Completes a call that never left: outcome before dispatch, with msg. */
void cs__runner_fail_before(cs_runner_done_fn done, void *arg, const char *msg);

/* A runner's own call function (cs__runner_uds_call, cs__runner_tcp_call). */
typedef void (*cs__runner_call_fn)(struct cs_runner *r, const struct csw_runner_wire_op *op,
                                   cs_runner_done_fn done, void *arg);
/* Sends the cancel request through call: for the call numbered *id (NULL: none, then only the
 * process) and process_id (NULL: none). Its answer is ignored: the cancelled call completes on
 * its own. */
void cs__runner_cancel_send(struct cs_runner *r, cs__runner_call_fn call, const uint64_t *id,
                            const char *process_id);

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
                           const struct cs_runner_prepare *prep, cs_runner_done_fn done, void *arg);
void cs__runner_multi_cancel(struct cs_runner *r, cs_runner_done_fn done, void *arg,
                             const char *process_id);
void cs__runner_multi_free(struct cs_runner *r);

#endif
