/*
 * supervisor: the managed processes of one runner (docs/contract/runtime.md §5). Spawns commands
 * from an argv without a shell, each in its own session and process group, with pipes or a PTY on
 * the event loop; keeps each one's combined output in a capped ring; reaps through pidfds; enforces
 * the time limit and the live-process cap; answers the process tools (docs/contract/tools.md §3).
 *
 * The supervisor knows nothing of MCP sessions or workspaces' leases: it takes the tools' decoded
 * inputs, fills their generated output structs and completes each request through a callback,
 * now or later (a long poll, a yield, a terminate waiting for the end, a write waiting for the
 * pipe to drain). The same code serves the in-process runner and the codespace-runtime worker.
 *
 * Trust: inputs are decoded client values (ids, data, sizes within the schema's bounds); argv
 * comes from the client too and is only ever passed to execve, never to a shell. Process output
 * is arbitrary bytes; it leaves as lossy UTF-8.
 * Entry points: cs_supervisor_new/free, cs_supervisor_spawn, cs_supervisor_write_stdin,
 * cs_supervisor_read, cs_supervisor_status, cs_supervisor_resize, cs_supervisor_terminate.
 */
#ifndef CS_SUPERVISOR_H
#define CS_SUPERVISOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base_diag.h"
#include "base_loop.h"
#include "csw.h"

/* "proc-" + 36-character uuid + NUL. */
#define CS_SUPERVISOR_ID_SIZE 42

struct cs_supervisor;

struct cs_supervisor_limits {
    int64_t max_live;      /* live processes at once, every workspace together (safety cap) */
    int64_t timeout_ms;    /* time limit of a process whose spawn names none; 0: none */
    size_t ring_bytes;     /* output retained per process whose spawn names none (1 MiB) */
    int64_t retain_ms;     /* an exited handle is kept this long (15 minutes) ... */
    size_t retain_max;     /* ... and at most this many exited handles (64) */
    int64_t kill_grace_ms; /* terminate: SIGTERM, then SIGKILL after this long (2 s) */
    const char *path;      /* PATH given to commands and used to find them (copied) */
    const char *tmpdir;    /* TMPDIR given to commands (copied) */
    /* The Linux sandbox helper whose probe succeeded (copied): every command then runs through
     * it, with no fallback; NULL: commands run unsandboxed, and a workspace with network
     * enabled cannot exec. */
    const char *sandbox_helper;
    /* A root runner's commands run as this unprivileged host uid and gid when the workspace
     * root is owned by 0 (docs/contract/sandbox.md section 3); 0: the helper's default (65533). */
    int64_t sandbox_uid, sandbox_gid;
    /* No helper started ahead of sandboxed commands (CODESPACE_TEST_SANDBOX_WARM=0): each starts
     * its own (docs/runner-isolation.md, "Cost of a spawn"). */
    bool sandbox_cold;
    /* A shared workspace's network namespace is kept this long after its last process
     * (CODESPACE_NETNS_GRACE_SECS, default 60 s; workflows.md section 3). */
    int64_t netns_grace_ms;
    /* Not the supervisor's: the operations database (a path, borrowed) where the runner's
     * executor keeps the identity memories of the deny rules across restarts; NULL: in memory
     * only (docs/operations.md). */
    const char *operations_db;
    /* Not the supervisor's either: the executor keeps the operation ledger of its workspaces in
     * that database (or in memory without one): a --listen worker (issue 32). */
    bool keep_ledger;
};

/* The fixed limits of docs/contract/runtime.md §5 (the others come from the configuration). */
#define CS_SUPERVISOR_RING_BYTES     (1024 * 1024)     /* output kept per process, by default */
#define CS_SUPERVISOR_RING_MAX       (2 * 1024 * 1024) /* ... and at most (docs/operations.md) */
#define CS_SUPERVISOR_NO_TIME_LIMIT  (-1)              /* cs_supervisor_spawn.timeout_ms: none */
#define CS_SUPERVISOR_RETAIN_MS      (15 * 60 * 1000)  /* an exited handle lives this long ... */
#define CS_SUPERVISOR_RETAIN_MAX     64                /* ... and at most this many of them */
#define CS_SUPERVISOR_KILL_GRACE_MS  2000              /* terminate: SIGTERM, then SIGKILL */
#define CS_SUPERVISOR_NETNS_GRACE_MS (60 * 1000) /* a workspace's netns after its last process */

/* Fills *lim with the fixed limits above, max_live and timeout_ms, PATH and TMPDIR from this
 * process's environment (borrowed: they must outlive cs_supervisor_new, which copies them) and
 * sandbox_helper (may be NULL). */
void cs_supervisor_limits_init(struct cs_supervisor_limits *lim, int64_t max_live,
                               int64_t timeout_ms, const char *sandbox_helper);

/* Starts prog with argv and envp, fds[0..2] as its stdin, stdout and stderr, nothing else open,
 * every signal at its default and unblocked: for the runner's own helpers (the worker, the
 * sandbox helper), not commands. Returns 0 with *pid set, or an errno value. */
int cs_supervisor_spawn_aux(const char *prog, char *const argv[], char *const envp[],
                            const int fds[3], pid_t *pid);
/* The same, and the descriptors keep[0..nkeep) (borrowed) are the child's 3, 4, ...
 * in that order; everything else above 2 is closed. */
int cs_supervisor_spawn_aux_keep(const char *prog, char *const argv[], char *const envp[],
                                 const int fds[3], const int *keep, size_t nkeep, pid_t *pid);

/* The PATH of a sandboxed command (docs/contract/sandbox.md section 3). */
#define CS_SUPERVISOR_SANDBOX_PATH "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"

/* Runs `helper probe` (stdio null, 5 s). Returns 0 when it succeeded, else -1 with msg saying
 * why (with the helper's stderr). */
int cs_supervisor_sandbox_probe(const char *helper, char *msg, size_t cap);

/* What this host's runner really enforces on its commands (docs/contract/tools.md section 4):
 * the gateway's in-process or uds runner and a remote worker learn it the same way. */
struct cs_supervisor_isolation {
    bool sandbox;         /* the helper's probe succeeded: commands run in the Linux sandbox */
    int64_t landlock_abi; /* the kernel's Landlock ABI with the sandbox, else 0 (unknown) */
    bool syscall_denials; /* with the sandbox: seccomp user notification reports refused calls */
};

/* Probes helper (NULL: no sandbox, nothing run) once and fills iso. Returns 0, or -1 when the
 * helper's probe failed (iso then says no sandbox) with msg saying why. */
int cs_supervisor_isolation_probe(const char *helper, struct cs_supervisor_isolation *iso,
                                  char *msg, size_t cap);

/*
 * docs/contract/sandbox.md §3, for a runner running as root: whether a command in the workspace
 * whose held root is rootfd can get an unprivileged identity. A root owned by uid or gid 0 needs an
 * idmapped bind (the root's owner mapped to uid/gid); this makes one, detached, in a throwaway
 * user namespace, exactly as the helper will. Returns 0 (possible, or not root, or not needed),
 * or -1 with d saying why not.
 */
int cs_supervisor_sandbox_identity_check(int rootfd, int64_t uid, int64_t gid, struct cs_diag *d);

/*
 * Completes one request. code is 0 with out pointing to the tool's output struct (borrowed for
 * the call: struct csw_mcp_<tool>_output), or a catalogue code with msg (borrowed) saying why and
 * out NULL. Called exactly once per request, possibly before the request function returns.
 */
typedef void (*cs_supervisor_done_fn)(void *arg, int code, const char *msg, const void *out);
/* A process has finished (reaped and output collected): the lease it held may go. Called once
 * per successfully spawned process, from the loop, never from inside cs_supervisor_spawn. */
typedef void (*cs_supervisor_exit_fn)(void *arg, const char *process_id);

/* Returns a new supervisor on loop (borrowed; it must outlive the supervisor), or NULL (errno
 * set). */
struct cs_supervisor *cs_supervisor_new(struct cs_loop *loop,
                                        const struct cs_supervisor_limits *lim);
/* Kills every live process group (SIGKILL), reaps every child, completes every pending request
 * with an INTERNAL "shutting down" error and frees everything. Exit callbacks are not called.
 * Accepts NULL. */
void cs_supervisor_free(struct cs_supervisor *s);

/* Live (not yet finished) processes. */
size_t cs_supervisor_live(const struct cs_supervisor *s);
/* True when pid is the unreaped leader of one of our processes (its status is ours to take
 * through its pidfd: a runner reaping stray children must leave it). */
bool cs_supervisor_owns_pid(const struct cs_supervisor *s, pid_t pid);
/* Writes a fresh "proc-<uuid v4>" (getrandom). Returns 0 or -1. */
int cs_supervisor_new_id(char out[CS_SUPERVISOR_ID_SIZE]);

/* A command's network (docs/contract/sandbox.md section 4, workflows "loopback"). */
enum cs_supervisor_network {
    CS_SUPERVISOR_NETWORK_RESTRICTED, /* lo only, AF_UNIX sockets only */
    CS_SUPERVISOR_NETWORK_ENABLED,    /* lo only plus the helper's proxy */
    CS_SUPERVISOR_NETWORK_LOOPBACK,   /* lo only, AF_INET/AF_INET6 allowed, nothing leaves */
};

struct cs_supervisor_spawn {
    const char *process_id;    /* minted by the caller (cs_supervisor_new_id); copied */
    const char *root;          /* working directory and HOME (absolute) */
    const struct cs_str *argv; /* argc > 0 strings, argv[0] not empty; NUL inside is refused */
    size_t argc;
    const char *workspace_id; /* the owner, for workspace_of / terminate_workspace; copied */
    bool writable;            /* the sandbox mounts the workspace read-write */
    enum cs_supervisor_network network;
    /* A shared workspace (workflows.md section 3): a sandboxed command joins the network
     * namespace the supervisor holds for workspace_id instead of getting one of its own. */
    bool workspace_netns;
    bool has_network_allow;
    const struct cs_str *network_allow;
    size_t n_network_allow;
    /* Workspace-relative paths of the denied files and directories existing now (resolved by
     * the caller with the deny rules, fs.h cs_fs_deny_scan): the sandbox masks each. */
    char *const *deny_mask;
    size_t n_deny_mask;
    bool tty;
    /* The time limit in ms; 0: the supervisor's (lim.timeout_ms); CS_SUPERVISOR_NO_TIME_LIMIT:
     * none, no timer at all. */
    int64_t timeout_ms;
    /* Live processes of workspace_id at once, this one included (its limits.max_live_processes);
     * 0: only lim.max_live applies. */
    int64_t max_live;
    /* The workspace's processes are exclusive (workflows.md section 3): a live process of
     * workspace_id, whoever started it (another gateway of a shared worker), refuses this one
     * with WORKSPACE_BUSY naming it. */
    bool exclusive;
    /* The output ring of this process, 1 .. CS_SUPERVISOR_RING_MAX; 0: lim.ring_bytes. */
    size_t ring_bytes;
    int64_t yield_ms; /* 0 … 30000 */
    cs_supervisor_exit_fn on_exit;
    void *exit_arg;
};

/*
 * Starts a process. Returns 0 when it started: done then receives a struct
 * csw_mcp_exec_command_output (at once when yield_ms is 0, else when it finished or yield_ms
 * passed), and on_exit runs once when it finishes. Otherwise returns CSW_ERROR_WORKSPACE_BUSY
 * (the workspace's sp->max_live or the runner's lim.max_live reached, nothing spawned; the
 * message names the limit) or CSW_ERROR_PROCESS_SPAWN_FAILED (nothing
 * started: missing executable, bad argv, out of resources), with d (may be NULL) holding that
 * code and saying why; done and on_exit are never called then.
 */
int cs_supervisor_spawn(struct cs_supervisor *s, const struct cs_supervisor_spawn *sp,
                        cs_supervisor_done_fn done, void *arg, struct cs_diag *d);

/* The id of a live process of workspace_id (the oldest), or NULL: what holds an exclusive
 * workspace (borrowed until the next supervisor call). */
const char *cs_supervisor_workspace_holder(const struct cs_supervisor *s, const char *workspace_id);
/* The workspace id a process (live or retained) was started for, or NULL (borrowed until the
 * next supervisor call). */
const char *cs_supervisor_workspace_of(struct cs_supervisor *s, const struct cs_str *process_id);
/* Terminates (as terminate_process, without waiting) every live process of workspace_id and
 * returns how many it signalled. */
size_t cs_supervisor_terminate_workspace(struct cs_supervisor *s,
                                         const struct cs_str *workspace_id);

/* Kills process_id's group at once (SIGKILL; termination "terminated"): an exec_command the
 * client cancelled, whose id nobody learned. Returns true when it was live. The waiters are
 * answered when it has finished, as usual. */
bool cs_supervisor_kill(struct cs_supervisor *s, const struct cs_str *process_id);
/* The request that completes through (done, arg) stops waiting (a read_process long poll, an
 * exec_command yield, a terminate_process wait): it is answered now, with what there is, inside
 * this call. Returns false when no such request waits (it was answered already, or it is not a
 * wait: a write_stdin is not cancelled). */
bool cs_supervisor_cancel(struct cs_supervisor *s, cs_supervisor_done_fn done, void *arg);

/* The process tools; each completes through done (outputs: struct csw_mcp_<tool>_output). */
void cs_supervisor_write_stdin(struct cs_supervisor *s, const struct csw_mcp_write_stdin_input *in,
                               cs_supervisor_done_fn done, void *arg);
void cs_supervisor_read(struct cs_supervisor *s, const struct csw_mcp_read_process_input *in,
                        cs_supervisor_done_fn done, void *arg);
void cs_supervisor_status(struct cs_supervisor *s, const struct csw_mcp_process_status_input *in,
                          cs_supervisor_done_fn done, void *arg);
void cs_supervisor_resize(struct cs_supervisor *s, const struct csw_mcp_process_resize_input *in,
                          cs_supervisor_done_fn done, void *arg);
void cs_supervisor_terminate(struct cs_supervisor *s,
                             const struct csw_mcp_terminate_process_input *in,
                             cs_supervisor_done_fn done, void *arg);

#endif
