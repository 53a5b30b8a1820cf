/*
 * runner: where the work runs (docs/contract/runtime.md §4). The gateway holds one runner with an
 * asynchronous interface: submit an operation of the runner wire protocol (the generated
 * struct csw_runner_wire_op: read, find, apply_patch, exec, the process operations, ...) and
 * receive its completion later. Two implementations:
 *
 *   - in-process: the executor (runner_exec.c: files, patch engine, supervisor) on the gateway's
 *     own loop;
 *   - uds: the same executor inside codespace-runtime, behind a private Unix socket, spoken to
 *     with the wire protocol (version 7) over the length-prefix framer;
 *   - tcp: the same protocol to a codespace-runtime --listen the gateway did not start, over
 *     TCP with mutual TLS 1.3 (runner_tcp.c, runner_tls.c; docs/scale-out.md);
 *   - multi: routes each call to the runner holding its workspace (runner_multi.c).
 *
 * The tool layer cannot tell them apart except through the outcome kinds a transport can add
 * (before dispatch, ambiguous) and workspace_info's isolation.runner.
 *
 * Trust: operations come from the tool layer, which built them from decoded client input after
 * the policy checks; the worker trusts its one peer, the gateway that started it, and still
 * decodes every frame through the generated decoders.
 * Entry points: cs_runner_inproc_new, cs_runner_uds_new, cs_runner_call, cs_runner_free;
 * cs_runner_exec_* (the executor, shared with the worker); cs_runner_conn_* (framed JSON on the
 * loop, shared with the worker).
 */
#ifndef CS_RUNNER_H
#define CS_RUNNER_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base_loop.h"
#include "csw.h"
#include "supervisor.h"

/* The wire protocol version this build speaks. */
#define CS_RUNNER_PROTOCOL 7
/* Per-call deadline of the uds runner (docs/contract/runtime.md section 4). */
#define CS_RUNNER_DEADLINE_MS 120000
/* Responses the worker keeps for replay. */
#define CS_RUNNER_REPLAY_CACHE 32

enum cs_runner_outcome {
    CS_RUNNER_OK,              /* result is set */
    CS_RUNNER_ERROR,           /* the runner answered a catalogue error: code, msg */
    CS_RUNNER_BEFORE_DISPATCH, /* the transport failed before the request left: nothing ran */
    CS_RUNNER_AMBIGUOUS,       /* the request left but no answer came: it may have run */
};

struct cs_runner_reply {
    enum cs_runner_outcome outcome;
    int code;        /* CS_RUNNER_ERROR: an enum csw_error value */
    const char *msg; /* CS_RUNNER_ERROR and the transport outcomes: why */
    const struct csw_runner_wire_result *result; /* CS_RUNNER_OK */
    /* CS_RUNNER_OK of a call made with cs_runner_call_prepared: what its make returned (NULL:
     * nothing was made), handed over to done, which frees it. Else NULL. */
    void *prepared;
};

/* Completes one call; reply and everything it points to are borrowed for the call. Called
 * exactly once per call, possibly before cs_runner_call returns. */
typedef void (*cs_runner_done_fn)(void *arg, const struct cs_runner_reply *reply);

/* What a runner reports besides completions. */
struct cs_runner_events {
    /* A process finished (it no longer holds its workspace). how (borrowed for the call) is the
     * process_exited event's data (schema/runner/wire.json): its process_id is process_id's, the
     * rest (workspace, exit code, termination, signal) is set when the runner knows it. */
    void (*process_exited)(void *arg, const char *process_id, const struct csw_runner_exit *how);
    /* uds: the worker is gone; every process it owned is dead, every pending call was completed
     * as ambiguous, later calls fail before dispatch. */
    void (*lost)(void *arg);
    /* A link to a worker was made again after a loss (optional): uds, a new worker replaced a
     * lost one; tcp, a hello was answered and accepted on a connection after the first such. */
    void (*reconnected)(void *arg);
    /* tcp only (optional): the first hello accepted came after calls had failed before dispatch
     * for want of a link (the worker was not reachable when the gateway started), so what the
     * gateway sent at start never arrived. Not a reconnection: reconnected is not called. */
    void (*first_link_late)(void *arg);
    void *arg;
};

struct cs_runner;

/* Submits op (borrowed for the call). */
void cs_runner_call(struct cs_runner *r, const struct csw_runner_wire_op *op,
                    cs_runner_done_fn done, void *arg);
/*
 * Work made of a file operation's result on the thread that ran it, so that a caller whose
 * answer costs as much as the operation (a megabyte window quoted twice) does not do it on the
 * loop thread. make (any thread; it touches only arg, which must stay valid and unchanged until
 * done runs, and output) gets the MCP output a successful read or find carries (struct
 * csw_mcp_read_output or csw_mcp_find_output, borrowed for the call); what it returns reaches
 * done as reply->prepared. release frees what make returned when done never gets it (the time
 * limit, a shutdown). Only the in-process runner has such threads: the others never call make.
 */
struct cs_runner_prepare {
    void *(*make)(void *arg, const void *output);
    void (*release)(void *made);
    void *arg;
};

/* cs_runner_call, with prep (copied) applied to a read's or a find's result. */
void cs_runner_call_prepared(struct cs_runner *r, const struct csw_runner_wire_op *op,
                             const struct cs_runner_prepare *prep, cs_runner_done_fn done,
                             void *arg);

/* The call submitted with (done, arg) was cancelled by its client: if it is waiting (a
 * read_process long poll, an exec_command yield, a terminate_process wait) it is answered now
 * (in-process: inside this call; uds: when the worker's answer arrives, a few ms later); a call
 * that does not wait (a file operation, a write) runs on. process_id (may be NULL): also kill
 * that process at once (SIGKILL to its group), whether or not the call still waits. Nothing
 * happens for a call that already completed. */
void cs_runner_cancel(struct cs_runner *r, cs_runner_done_fn done, void *arg,
                      const char *process_id);
/* Kills every process the runner owns (and the worker), completes pending calls as ambiguous,
 * removes the runner's socket and directory, frees r. Accepts NULL. */
void cs_runner_free(struct cs_runner *r);

/* The in-process runner: an executor on loop with lim. Returns NULL on OOM. */
struct cs_runner *cs_runner_inproc_new(struct cs_loop *loop, const struct cs_supervisor_limits *lim,
                                       const struct cs_runner_events *ev);

struct cs_runner_uds_options {
    const char *runtime_bin; /* codespace-runtime */
    const char *runner_dir;  /* the leaf directory goes under it */
    int64_t max_processes;
    int64_t timeout_ms;               /* the process time limit, also the file operations' (> 0) */
    const char *version;              /* ours, sent as hello's peer */
    const char *sandbox_helper;       /* the helper whose probe succeeded, or NULL */
    int64_t sandbox_uid, sandbox_gid; /* a root server's command ids (cs_supervisor_limits) */
    const char *operations_db;        /* the worker's --operations-db (deny identities), or NULL */
};

/* The uds runner: creates the leaf directory, starts the worker (handing it every held root of
 * base_roots.h as an inherited descriptor: it never opens a root by path), waits for its socket (20
 * ms polls, 2 s) and does the hello handshake, blocking. Returns the runner, or NULL with d (may
 * be NULL) saying why under CSW_ERROR_INTERNAL (nothing left behind: no worker, no directory). */
struct cs_runner *cs_runner_uds_new(struct cs_loop *loop, const struct cs_runner_uds_options *opt,
                                    const struct cs_runner_events *ev, struct cs_diag *d);

/* The tcp runner (runner_tcp.c, docs/scale-out.md): a worker started by someone else
 * (codespace-runtime --listen), reached at url over TLS 1.3 with pinned certificates or a
 * pre-shared key. */
struct cs_runner_tcp_options {
    const char *url;     /* tcp://HOST:PORT */
    const char *version; /* ours, sent as hello's peer */
    /* TLS: our certificate and key, the worker's certificate pin; or (psk_file set) the
     * pre-shared key file and its identity; or plaintext (a private link only). Copied. */
    bool plaintext;
    const char *cert, *key;
    unsigned char peer_pin[32];
    const char *psk_file, *psk_identity;
    /* CODESPACE_REQUIRE_LINUX_SANDBOX=1: a worker whose hello does not state the Linux sandbox
     * is refused (its calls fail before dispatch; the link is retried with the back-off). */
    bool require_sandbox;
};

/* Connects in the background (calls made meanwhile wait for the hello's answer). Returns NULL
 * with err set when the URL or the TLS files are bad; an unreachable worker is not an error here
 * (calls fail before dispatch while it is). */
struct cs_runner *cs_runner_tcp_new(struct cs_loop *loop, const struct cs_runner_tcp_options *opt,
                                    const struct cs_runner_events *ev, struct cs_diag *err);
/* Whether r is a tcp runner. */
bool cs_runner_is_tcp(const struct cs_runner *r);
/* What the worker of r (a tcp runner) enforces on its commands, as its last answered hello
 * stated it (docs/scale-out.md): fills iso, all false and 0 before any hello was answered.
 * Returns how many hellos have been answered, so a report built from iso can tell it is stale. */
uint64_t cs_runner_tcp_isolation(const struct cs_runner *r, struct cs_supervisor_isolation *iso);

/* The hello answer's isolation member, from what this worker's probe found. */
void cs_runner_isolation_encode(const struct cs_supervisor_isolation *iso,
                                struct csw_runner_wire_worker_isolation *w);
/* What a hello answer states, read conservatively: w NULL (a worker that stated nothing) is no
 * sandbox, and the sandbox counts only when both the command sandbox and the network
 * enforcement are stated. */
void cs_runner_isolation_decode(const struct csw_runner_wire_worker_isolation *w,
                                struct cs_supervisor_isolation *iso);

/* Workspace placement (runner_multi.c): a runner that routes each call to the runner holding
 * its workspace, def (taken) for every workspace without a route. Returns NULL on OOM (def is
 * then still the caller's). */
struct cs_runner *cs_runner_multi_new(struct cs_loop *loop, struct cs_runner *def);
/* Routes workspace_id's calls to sub (taken, once, even when several workspaces share it, and
 * even when this fails). Returns 0 or -1 (OOM). */
int cs_runner_multi_route(struct cs_runner *multi, const char *workspace_id, struct cs_runner *sub);

/* ---- the executor (runner_exec.c) ---- */

struct cs_runner_exec;

/* process_exited is called (from the loop) when a process finishes, with how it ended (borrowed
 * for the call: every member the supervisor knows is set). lim->timeout_ms is also the
 * time limit of every file operation (read, find, version, apply_patch), which runs on a pool of
 * threads (base_pool.h) and answers TIMEOUT past it. Returns NULL on OOM or when the threads cannot
 * start. */
struct cs_runner_exec *cs_runner_exec_new(struct cs_loop *loop,
                                          const struct cs_supervisor_limits *lim,
                                          void (*process_exited)(void *arg, const char *id,
                                                                 const struct csw_runner_exit *how),
                                          void *arg);
/* Cancels every file operation and completes it (INTERNAL "shutting down", or the real result of
 * a patch that had begun writing and ran to its end), joins the file threads, kills every process
 * and frees. Call on the loop thread, with the loop still alive. Accepts NULL. */
void cs_runner_exec_free(struct cs_runner_exec *ex);
/* For a process about to _exit because its gateway is gone: every command group is killed now
 * (the supervisor is freed) and file jobs are abandoned where they stand, as a SIGKILL would
 * leave them (a patch in its writes step stops between two renames, each file whole), never
 * waited for. ex is unusable afterwards except by _exit. Accepts NULL. */
void cs_runner_exec_abandon(struct cs_runner_exec *ex);
/* Reaps our children that are not process leaders (orphans of commands reparented to a runner
 * that is a child subreaper). Call on SIGCHLD. */
void cs_runner_exec_reap_strays(struct cs_runner_exec *ex);
/* cs_runner_cancel on the executor: kills process_id when given (may be NULL) and answers the
 * supervisor wait of the call submitted through cs_runner_exec_op with (done, arg) (done may be
 * NULL: none). res says what was done. */
void cs_runner_exec_cancel(struct cs_runner_exec *ex, cs_runner_done_fn done, void *arg,
                           const struct cs_str *process_id,
                           struct csw_runner_wire_cancel_result *res);
/* Runs op (every op but hello, replay and cancel, which belong to the connection), with prep
 * (may be NULL; copied) applied to a read's or a find's result. */
void cs_runner_exec_op(struct cs_runner_exec *ex, const struct csw_runner_wire_op *op,
                       const struct cs_runner_prepare *prep, cs_runner_done_fn done, void *arg);

/* ---- framed JSON on the loop (runner_conn.c) ---- */

struct cs_runner_conn;

struct cs_runner_conn_callbacks {
    /* One decoded wire message (borrowed for the call). The callback may close the conn. */
    void (*message)(void *arg, struct csw_runner_wire *msg);
    /* A frame that is not a valid wire message: the JSON (or NULL if it was not JSON) and why.
     * The connection is closed after this callback returns unless it was closed already. */
    void (*bad)(void *arg, const json_t *raw, const char *why);
    /* The stream ended (clean EOF between frames, or an error: why). Called once; the conn must
     * then be freed by the owner (not inside the callback). */
    void (*closed)(void *arg, const char *why);
    void *arg;
};

/* Takes fd (connected, made non-blocking here, closed by cs_runner_conn_free). */
struct cs_runner_conn *cs_runner_conn_new(struct cs_loop *loop, int fd,
                                          const struct cs_runner_conn_callbacks *cb);
void cs_runner_conn_free(struct cs_runner_conn *c);
/* Busy polling (base_loop.h) on a uds link, where the peer is one hop away on this host; never
 * through the TLS pump threads of a tcp:// link, where it measured slower (bench/README.md,
 * "Issue 33"). The worker's side (busy_poll): after each write, for the gateway's next request.
 * The gateway's (expect_answer): after the write of a request whose answer comes within
 * microseconds (runner_uds.c quick), not while a command spawns or a long poll waits. */
void cs_runner_conn_busy_poll(struct cs_runner_conn *c, bool on);
void cs_runner_conn_expect_answer(struct cs_runner_conn *c);
/* Queues msg as one frame. Returns 0, or -1 (encoding failed, or the conn is closed). */
int cs_runner_conn_send(struct cs_runner_conn *c, const struct csw_runner_wire *msg);
/* Queues an already encoded JSON text as one frame. Returns 0 or -1. */
int cs_runner_conn_send_text(struct cs_runner_conn *c, const char *text, size_t len);
/* Writes what is queued, blocking up to ms milliseconds. Returns 0 when all is written. */
int cs_runner_conn_flush(struct cs_runner_conn *c, int ms);
/* Stops reading; the next loop turn calls closed(why). */
void cs_runner_conn_close(struct cs_runner_conn *c, const char *why);

#endif
