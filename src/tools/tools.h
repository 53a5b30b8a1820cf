/*
 * tools: the handlers behind the MCP tools. Each handler receives arguments already decoded by
 * the generated input decoder, applies the workspace policy, does the work (through the runner
 * once it exists) and completes the call with a result the output encoder checks.
 *
 * Trust: decoded arguments are well-typed but still client-chosen values (ids, paths).
 * Entry points: cs_tools_init, cs_tools_runner_events, cs_tools_register, cs_tools_free.
 */
#ifndef CS_TOOLS_H
#define CS_TOOLS_H

#include "base_diag.h"
#include "base_loop.h"
#include "mcp_server.h"
#include "policy.h"
#include "runner.h"
#include "store.h"

struct cs_tools;
struct cs_runner;
struct cs_tools_lease; /* tools_lease.h */

/* What the handlers share; borrowed by the handlers for the server's lifetime. */
struct cs_tools {
    const struct cs_config *cfg;
    struct cs_runtime_caps caps; /* what this build and runner really offer */
    const char *version;
    struct cs_mcp_cached **info; /* workspace_info answers, encoded once (see tools.c) */
    size_t n_info;
    struct cs_store *store;              /* the operation ledger (borrowed) */
    struct cs_tools_lease *leases;       /* one per registry workspace, same order */
    struct cs_runner *runner;            /* where the work runs (owned) */
    struct csw_runner_workspace *wsdesc; /* each workspace as the wire describes it */
    /* Per registry workspace: why no command can run there (a root server whose commands cannot
     * get an unprivileged identity, docs/contract/sandbox.md section 3), or NULL. Owned. */
    char **no_exec;
    /* Per registry workspace: the tcp runner holding it (borrowed: runner owns it), or NULL; and
     * the count of that worker's answered hellos its cached workspace_info answer was built at,
     * since the isolation reported is the worker's last hello (docs/scale-out.md). */
    struct cs_runner **remote;
    uint64_t *info_hellos;
    struct cs_loop *loop; /* borrowed: the loop the runner and the progress polls run on */
    struct cs_mcp *srv;   /* borrowed: where process exits are logged (NULL while freeing) */
    /* Links to a worker made again after a loss, by any runner (struct cs_runner_events'
     * reconnected): a uds worker replaced, a tcp worker's hello answered after the first. */
    uint64_t runner_reconnects;
    unsigned deny_warming;            /* start-up deny scans not answered yet (deny_warm_all) */
    struct cs_loop *warm_wait;        /* cs_tools_deny_warm_wait's loop while it waits, or NULL */
    struct cs_loop_timer *warm_timer; /* its time limit, NULL once fired */
    /* apply_patch crash recovery (tools_recover.h), per registry workspace: a recovery due before
     * the next call, and why the workspace is stopped (owned, NULL: it is not) with the code its
     * calls answer. recovery_log (main sets it; may be NULL) hears every recovery that settled
     * something (error NULL) or failed. */
    bool *recover_pending;
    char **recover_stopped;
    int *recover_stopped_code;
    void (*recovery_log)(const char *workspace_id, unsigned settled, const char *error);
    /* The ledger rows of this gateway's apply_patch calls in flight (minted, not yet finished):
     * recovery never settles one of them. */
    char (*patching)[CS_STORE_ID_SIZE];
    size_t n_patching, cap_patching;
};

/* What the sandbox probe found (main runs it, docs/contract/sandbox.md §2): borrowed for the
 * call. */
struct cs_tools_sandbox {
    bool sandboxed;       /* the helper's probe succeeded */
    int64_t landlock_abi; /* with it: the kernel's Landlock ABI, else 0 */
    bool syscall_denials; /* with it: seccomp user notification reports refused calls */
    const char *reason;   /* without it: why not (the helper's words) */
};

/* Sets up t for cfg (borrowed, outliving t): the workspaces' leases and wire descriptions, every
 * root held (base_roots). store (borrowed; it must outlive every call) is the operation ledger
 * apply_patch and operation_status use; loop (borrowed, outliving t) carries the runner and the
 * progress polls. Returns 0, or non-zero with err saying why (cs_tools_free cleans up). */
int cs_tools_init(struct cs_tools *t, const struct cs_config *cfg, const char *version,
                  struct cs_store *store, struct cs_loop *loop, struct cs_diag *err);
/* apply_patch crash recovery at start (docs/contract/runtime.md §6): settles every crash journal
 * in the workspaces this gateway reaches (not a remote worker's) and records each operation's
 * status in the ledger, before anything is served. log (may be NULL) hears each workspace where
 * something was settled (error NULL) or that is stopped (error: why; its calls answer it). */
void cs_tools_recover(struct cs_tools *t,
                      void (*log)(const char *workspace_id, unsigned settled, const char *error));
/* The events every runner made for t reports to (a process exited, the uds worker was lost). */
struct cs_runner_events cs_tools_runner_events(struct cs_tools *t);
/* The processes this gateway started that hold a place in their workspace: spawned (or being
 * spawned) by exec_command and not yet known to have exited (no process_exited event, no lost
 * worker). A process being killed after its client cancelled counts until its exit. */
size_t cs_tools_live_processes(const struct cs_tools *t);
/* Runs loop until every start-up deny scan of a local workspace (this process's or its uds
 * worker's) that cs_tools_register sent is answered, at most limit_ms (contract section 7: denied
 * files are remembered "at start", so they are before anything is served). Returns 0 at once when
 * none is pending; -1 when something else stopped the loop meanwhile (a signal: shut down). */
int cs_tools_deny_warm_wait(struct cs_tools *t, struct cs_loop *loop, int64_t limit_ms);

/* After main has set t->runner (owned by t from then on) and, for workspaces placed on a remote
 * worker, t->remote: fills t->caps from what this build implements, cfg and sb, decides which
 * workspaces can run no command (a root server without the sandbox), and sets the handlers of
 * every tool on srv. Returns 0, or non-zero with err saying why. */
int cs_tools_register(struct cs_mcp *srv, struct cs_tools *t, const struct cs_tools_sandbox *sb,
                      struct cs_diag *err);
/* Kills every managed process (their groups, SIGKILL), completes every pending call and
 * releases what the handlers cached. Call before cs_mcp_free. */
void cs_tools_free(struct cs_tools *t);

#endif
