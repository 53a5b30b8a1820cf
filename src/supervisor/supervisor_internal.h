/*
 * supervisor_internal: what supervisor.c and supervisor_spawn.c share.
 */
#ifndef CS_SUPERVISOR_INTERNAL_H
#define CS_SUPERVISOR_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/pidfd.h>
#include <sys/types.h>
#include <sys/wait.h>

#include "base_loop.h"
#include "supervisor.h"

/* One command to start: everything borrowed for the call. */
struct cs__supervisor_cmd {
    char *const *argv; /* NULL-terminated, argv[0] not empty */
    char *const *envp; /* NULL-terminated */
    const char *prog;  /* what to execute; NULL: argv[0], looked up as below */
    const char *root;  /* working directory (for messages) */
    int root_fd;       /* the held root: the child's working directory (fchdir) */
    bool pass_root;    /* the child also gets root_fd as its fd 3 (the sandbox helper) */
    int report_fd;     /* >= 0: the child also gets it as its fd 4 (the helper's denial report) */
    int plan_fd;       /* > 5: the child also gets it as its fd 5 (the helper's sealed plan);
                        * 0: none */
    int netns_fd;      /* >= 10 with a plan: the child also gets it as its fd 6 (the workspace's
                        * network namespace, the plan's netns_fd); -1: none */
    int userns_fd;     /* >= 10 with netns_fd: as its fd 7 (the plan's userns_fd); -1: none */
    const char *path;  /* where argv[0] is looked up when it has no slash */
    bool tty;
    int64_t rows, cols; /* initial terminal size */
};

/* What a started command leaves the supervisor: all close-on-exec, in and out non-blocking. */
struct cs__supervisor_fds {
    pid_t pid;
    int pidfd;
    int in;  /* stdin pipe's write end, or a duplicate of the PTY master; -1 if none */
    int out; /* combined stdout+stderr pipe's read end, or the PTY master */
};

/* Finds name in the absolute entries of path (an executable regular file). Returns a new string,
 * or NULL (not found). */
char *cs__supervisor_lookup(const char *path, const char *name);

/* The plan as the helper's `run --plan-fd` takes it: encoded here through the generated encoder
 * into a memfd (close-on-exec) sealed against writes, growing, shrinking and new seals, at fd
 * 6 or above. Returns the fd, or -1 with d saying why. */
int cs__supervisor_sandbox_plan_memfd(const struct csw_sandbox_plan *plan, struct cs_diag *d);

/* The TMPDIR given to the sandbox helper (static storage). */
const char *cs__supervisor_helper_tmpdir(void);

/* Parses a plan directory name codespace-sandbox-<pid>-XXXXXX (pid decimal, 1 .. INT_MAX, no
 * leading zero; six mkdtemp characters [A-Za-z0-9]). Returns 0 with *pid set, or -1. */
int cs__supervisor_plan_dir_pid(const char *name, pid_t *pid);

/* Removes the plan at plan_path (what prepare returned) and its directory, if still there and
 * only if it has prepare's shape: a codespace-sandbox-* directory of our uid directly under the
 * helper's TMPDIR, reached without following links. Returns 1 (removed), 0 (already gone) or
 * -1 (not ours, or an error). */
int cs__supervisor_plan_remove(const char *plan_path);

/* The start-up sweep: removes the helper TMPDIR's plan directories left by runners that are gone
 * (pid not alive, or over an hour old), ours only (uid). Returns how many went, or -1. */
int cs__supervisor_plan_sweep(void);

/* The pre-started sandbox helper (`run --wait-fd 5`, issue 20): at most one per supervisor.
 * pid 0: none; then pidfd and sock are -1. */
struct cs__supervisor_warm {
    pid_t pid;
    int pidfd; /* close-on-exec */
    int sock;  /* our end of its SOCK_SEQPACKET pair (close-on-exec) */
};

/* The message header `run --wait-fd` takes (helper/sandbox.h, CS_SBX_WAIT_*): this version
 * byte, then the terminal flag, then how many namespaces follow the other descriptors (0-2). */
#define CS__SUPERVISOR_WAIT_VERSION 2

/* Starts prog as `codespace-linux-sandbox run --wait-fd 5` with envp (borrowed), under the rules
 * of every child (its own session, signals at their defaults, the parent-death signal, nothing
 * open but /dev/null as 0-2 and its socket as 5, / as working directory) into *w, which must
 * hold none. Returns 0, or -1 (nothing left running or open; the caller just goes on cold). */
int cs__supervisor_warm_start(struct cs__supervisor_warm *w, const char *prog, char *const envp[]);

/* Closes the socket (the helper exits on EOF), kills and reaps the helper; *w then holds none.
 * Accepts a *w that holds none. */
void cs__supervisor_warm_stop(struct cs__supervisor_warm *w);

/* Starts cmd. With warm holding a helper and cmd a sandboxed start (plan, report pipe and root
 * passed), the helper gets the command's descriptors instead of a new child being started, and
 * *warm then holds none whether that worked or not; when it did not, the start is the usual one.
 * Returns 0 with fds filled, or -1 with d (may be NULL) saying why under
 * CSW_ERROR_PROCESS_SPAWN_FAILED (nothing is left running and no descriptor is left open). */
int cs__supervisor_start(const struct cs__supervisor_cmd *cmd, struct cs__supervisor_warm *warm,
                         struct cs__supervisor_fds *fds, struct cs_diag *d);

/* ---- supervisor_netns.c: one network namespace per shared workspace ---- */

struct cs__netns;

/* The supervisor's held namespaces; zero-initialise, then set loop, helper and grace_ms. */
struct cs__netns_table {
    struct cs_loop *loop;
    const char *helper; /* the sandbox helper (borrowed) */
    int64_t grace_ms;   /* kept this long after its last process (CODESPACE_NETNS_GRACE_SECS) */
    struct cs__netns *list;
};

/* The namespace of workspace_id (created, with its holder, when there is none), counted as used
 * by one more process until cs__netns_release. Returns it (owned by the table), or NULL with d
 * saying why under CSW_ERROR_PROCESS_SPAWN_FAILED. */
struct cs__netns *cs__netns_acquire(struct cs__netns_table *t, const char *workspace_id,
                                    struct cs_diag *d);
/* One process of n has finished (or never started): after the last, n goes once the grace period
 * passes without a new acquire. Accepts NULL. */
void cs__netns_release(struct cs__netns *n);
/* n's network namespace descriptor (user false) or the user namespace owning it (true; -1 for a
 * root runner): borrowed, >= 10, close-on-exec. */
int cs__netns_fd(const struct cs__netns *n, bool user);
/* True when pid is one of the table's holders (reaped by the table, never by a stray reaper). */
bool cs__netns_owns_pid(const struct cs__netns_table *t, pid_t pid);
/* Lets every namespace go now (holders killed and reaped). */
void cs__netns_table_fini(struct cs__netns_table *t);

#endif
