/*
 * codespace-linux-sandbox: internal interfaces shared by the helper's files.
 *
 * Trust: the prepare request (stdin) and the plan file come from the runner and are untrusted
 * at the parser (docs/security-model.md, S-invariants); proxy input comes from the sandboxed
 * command and is hostile. Nothing here is a library for other modules: the runner links only
 * the generated protocol code, never these files.
 *
 * Files: sandbox_main.c (CLI, probe), sandbox_plan.c (prepare, plan load, plan validation),
 * sandbox_run.c (outer helper, init, command), sandbox_identity.c (the command's ids and the
 * workspace tree), sandbox_setup.c (mounts, capabilities, Landlock, seccomp), sandbox_filter.c
 * (the seccomp rules, also compiled at build time by sandbox_filter_export.c), sandbox_proxy.c
 * (the epoll proxy), sandbox_proxy_parse.c (request head parser; pure, fuzzed). The
 * network_allow entries and destination rules are src/base/base_netallow.c, shared with the
 * configuration load.
 */
#ifndef CS_SANDBOX_H
#define CS_SANDBOX_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "base_diag.h"
#include "base_netallow.h"
#include "csw.h"
#include "sandbox_net.h"

#define CS_SBX_PROTOCOL   1
#define CS_SBX_PATH       "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"
#define CS_SBX_REQ_MAX    (1u << 20) /* prepare request cap (the runner reads 1 MiB back) */
#define CS_SBX_PLAN_MAX   (2u << 20) /* plan file cap */
#define CS_SBX_DIR_PREFIX "codespace-sandbox-"
#define CS_SBX_EXIT_SETUP 125 /* the helper itself failed (setup error) */
#define CS_SBX_EXIT_USAGE 2

/* Set by a runner to its pid: plan directories are then codespace-sandbox-<pid>-XXXXXX, which
 * that runner's successors may sweep once the pid is gone (docs/contract/sandbox.md section 1). */
#define CS_SBX_RUNNER_PID_ENV "CODESPACE_SANDBOX_RUNNER_PID"

/* ---- sandbox_plan.c ---- */

/*
 * Parses and validates plan bytes (untrusted): JSON, the generated decoder, then the semantic
 * rules (absolute canonical-looking paths, cwd inside the workspace, no NUL in argv/env, env
 * keys without '=', every network_allow entry well formed). Returns 0 with *out filled (free
 * with csw_sandbox_plan_free) or -1 with out zeroed and a message in err.
 */
/* The path one deny_mask_hex item names (lowercase hex, two digits a byte): malloc'd and
 * NUL-terminated with *n its bytes, or NULL when h is not such hex (or out of memory). */
char *cs_sbx_hex_path(const struct cs_str *h, size_t *n);
int cs_sbx_plan_parse(const char *buf, size_t n, struct csw_sandbox_plan *out, struct cs_diag *err);

/* Reads the plan at path with every check of docs/contract/sandbox.md §1, then unlinks it and
 * removes its directory. Returns 0 or -1 with err set. */
int cs_sbx_plan_load(const char *path, struct csw_sandbox_plan *out, struct cs_diag *err);

/* Writes plan into a fresh 0700 mkdtemp directory under tmpdir; *path_out (malloc'd) is the
 * plan path. Returns 0 or -1 with err set. */
int cs_sbx_plan_write(const struct csw_sandbox_plan *plan, const char *tmpdir, char **path_out,
                      struct cs_diag *err);

/* Validates a request (schema already checked) and writes its plan; *path (malloc'd) is the
 * plan path. Returns 0 or -1 with err set. */
int cs_sbx_prepare_request(const struct csw_sandbox_prepare_request *q, char **path,
                           struct cs_diag *err);

/* `prepare`: stdin -> plan file -> one JSON line on stdout. Returns the exit code. */
int cs_sbx_prepare_main(void);

/* CODESPACE_SANDBOX_RUNNER_PID: 0 with *pid set (0 when the variable is absent), or -1 when it
 * is not a decimal pid in 1 .. INT_MAX without leading zero. */
int cs_sbx_runner_pid(long *pid);

/* $TMPDIR if absolute, else /tmp. */
const char *cs_sbx_tmpdir(void);

/* ---- sandbox_run.c ---- */

/* `run`: builds the sandbox for the (already loaded) plan and runs the command. Never returns:
 * exits with the command's status (or re-raises its signal), or CS_SBX_EXIT_SETUP. */
_Noreturn void cs_sbx_run(struct csw_sandbox_plan *plan);

/* Prints "codespace-linux-sandbox: <what>: <strerror(errno)>" and exits CS_SBX_EXIT_SETUP. */
_Noreturn void cs_sbx_die(const char *what);
_Noreturn void cs_sbx_diex(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- sandbox_wait.c: `run --wait-fd`, the pre-started helper ---- */

/* The runner's one message (src/supervisor/supervisor_spawn.c sends it): a version byte, a
 * terminal flag (0 or 1) and a namespace count (0, 1: the workspace's network namespace, 2: and
 * its user namespace), with the descriptors as SCM_RIGHTS. Version 2 added the count. */
#define CS_SBX_WAIT_VERSION 2
#define CS_SBX_WAIT_HEADER  3

/* Checks a received message's shape: n header bytes, the recvmsg flags, nfds descriptors.
 * Returns 0 with *tty and *nns (the namespace count) set, or -1 with err (nothing may run). */
int cs_sbx_wait_check(const unsigned char *hdr, size_t n, int msg_flags, size_t nfds, bool *tty,
                      size_t *nns, struct cs_diag *err);

/* Waits on sock for the runner's message. Returns 1 with the descriptors in place (0-2 the
 * command's stdio, 3 the workspace root, 4 the report pipe, 5 the plan memfd, 6 and 7 the
 * namespaces the message brought, checked for their types; the working
 * directory the root; nothing else open), 0 on EOF (no command: exit 0), or -1 with err (every
 * received descriptor closed). */
int cs_sbx_wait(int sock, struct cs_diag *err);

/* Passes fd over the unix socket sock (SCM_RIGHTS, one byte); dies naming what on failure. Used
 * for the proxy listener (init -> outer helper) and the seccomp listener (command -> outer). */
void cs_sbx_send_fd(int sock, int fd, const char *what);

/* ---- sandbox_netns.c: `netns-hold`, the workspace's network namespace ---- */

/* `netns-hold <label>`: creates the namespace, writes "ready\n" on stdout, waits for EOF on
 * stdin. Returns the exit code. */
int cs_sbx_netns_hold_main(int argc, char **argv);

/* Dies unless fd is a namespace descriptor of type nstype (CLONE_NEWNET or CLONE_NEWUSER);
 * sets close-on-exec on it. what names the plan field. */
void cs_sbx_netns_check(int fd, int nstype, const char *what);

/* ---- sandbox_identity.c (run by the outer helper, in the caller's namespaces) ---- */

#define CS_SBX_DEFAULT_ID 65533 /* a root caller's command id when the plan names none */

/* Who the command is (docs/contract/sandbox.md §3) and how the workspace reaches the sandbox. */
struct cs_sbx_ids {
    unsigned inner_uid, inner_gid; /* the ids inside the sandbox (the same as on the host) */
    unsigned host_uid, host_gid;   /* the command's host ids (never 0 for a root caller) */
    unsigned owner_uid, owner_gid; /* root caller: the workspace root's owner on disk */
    int ws_fd;   /* the workspace root directory: the plan's workspace_fd, else opened here */
    int tree_fd; /* root caller: a detached bind of ws_fd (open_tree), else -1 */
    bool idmap;  /* the tree maps the root's owner to host_uid/host_gid */
};

/* Decides the ids from the caller, the workspace root's owner and the plan, and for a root
 * caller clones the workspace tree; dies on any error (never falls back to host root). */
void cs_sbx_identity(const struct csw_sandbox_plan *plan, struct cs_sbx_ids *ids);

/* Sets the tree's flags (nosuid, nodev, read-only unless writable) and, when ids->idmap, its
 * idmapping (root's owner -> the command's ids). No-op without a tree. Dies on error. */
void cs_sbx_workspace_tree_attr(const struct cs_sbx_ids *ids, bool writable);

/* ---- sandbox_setup.c (all run inside the new namespaces; all die on error) ---- */

void cs_sbx_setup_loopback(void);
int cs_sbx_setup_proxy_listener(uint16_t *port); /* 127.0.0.1:0 in the sandbox netns */
void cs_sbx_setup_filesystem(const struct csw_sandbox_plan *plan, const struct cs_sbx_ids *ids);
void cs_sbx_setup_drop_caps(void);
int cs_sbx_setup_landlock(const struct csw_sandbox_plan *plan); /* returns the ABI used, 0 none */
/* Loads the filter; when notify_sock >= 0 and the host supports it, the reporting rules notify
 * and the listener is sent over notify_sock (SCM_RIGHTS) and closed here: the command never
 * holds it. notify_sock is closed either way. */
void cs_sbx_setup_seccomp(enum cs_sbx_net net, int notify_sock);
int cs_sbx_landlock_abi(void);

/* ---- sandbox_proxy_parse.c (pure; fuzzed by fuzz/sandbox_proxy_fuzz.c) ---- */

#define CS_SBX_HEAD_MAX 16384 /* request line + headers */
#define CS_SBX_HOST_MAX CS_NETALLOW_HOST_MAX

enum cs_sbx_parse {
    CS_SBX_PARSE_MORE = 0, /* no complete head yet (and under the cap) */
    CS_SBX_PARSE_OK = 1,
    CS_SBX_PARSE_BAD = -1, /* reason set */
};

struct cs_sbx_request {
    bool connect;                   /* CONNECT host:port, else absolute-form http:// */
    char host[CS_SBX_HOST_MAX + 1]; /* lower-case, no trailing dot, no brackets */
    uint16_t port;
    size_t head_len; /* bytes of the head including the blank line */
    /* absolute-form only: the rewritten origin-form head (request line, headers minus the
     * proxy and connection ones, "Connection: close") */
    char *rewritten; /* malloc'd, NUL-terminated; NULL for CONNECT */
    size_t rewritten_len;
    const char *reason; /* static text on BAD */
};

/* Parses buf[0..n) as one HTTP/1.x proxy request head. On OK, req is filled (free
 * req->rewritten); MORE means read more (n < CS_SBX_HEAD_MAX); BAD sets req->reason. */
enum cs_sbx_parse cs_sbx_parse_request(const char *buf, size_t n, struct cs_sbx_request *req);

/* ---- sandbox_proxy.c ---- */

/* Serves listen_fd (in the sandbox netns) from the host namespace until the init is reaped.
 * sig_fd is a signalfd for the forwarded signals and SIGCHLD; on_signal is called for each
 * signal; it returns true when the loop must end (the init was reaped). */
struct cs_sbx_proxy_cfg {
    int listen_fd;       /* -1: no proxy, only signals */
    int notify_fd;       /* the seccomp listener, -1: none */
    bool *notify_closed; /* set when the loop closed notify_fd (it failed) */
    int sig_fd;
    const struct cs_netallow_policy *policy; /* every destination is checked against it */
    bool (*on_signal)(void *ctx, int sig);
    void *ctx;
};
void cs_sbx_proxy_serve(const struct cs_sbx_proxy_cfg *cfg);

/* ---- sandbox_report.c (the outer helper's thread only) ---- */

/* distinct entries (docs/contract/tools.md section 6) */
#define CS_SBX_DENIALS_MAX CSW_SANDBOX_REPORT_DENIALS_MAX_ITEMS
/* bytes of a denial's target: the schema caps it in code points, so this many bytes always fit */
#define CS_SBX_DENIAL_TARGET_MAX CSW_DENIAL_TARGET_MAX_LEN

/* Records one refusal; target is copied (cut at CS_SBX_DENIAL_TARGET_MAX bytes), reason is a
 * static string. Distinct by kind+target+reason; past 32 entries, or refused one of the last 8
 * (kept for kinds other than the one holding most of the first 24), only counted as dropped. */
void cs_sbx_denial_add(enum csw_denial_kind kind, const char *target, const char *reason);
size_t cs_sbx_denial_count(void);

/* Writes the report (schema/sandbox/report.json) as one u32 big-endian length-prefixed frame
 * on fd; best effort (a failure leaves the runner without denials, never fails the command). */
void cs_sbx_report_write(int fd);

/* Whether the kernel supports seccomp user notification, and libseccomp too unless the filter
 * is a program compiled at build time (precompiled). */
bool cs_sbx_notify_supported(bool precompiled);

/* Receives one notification on the listener fd, answers it with EPERM (never lets the call
 * proceed) and records it. Returns 0 (also when the caller was already gone), or -1 when the
 * listener fails: the caller then closes it (the kernel answers ENOSYS from then on). */
int cs_sbx_notify_serve_one(int fd);

#endif
