/*
 * policy: the gateway's configuration (flags and environment variables, docs/contract/runtime.md
 * §2), the operator's workspace registry (--config FILE, --workspace DIR), the profile and
 * environment rules that decide what a workspace permits, and the pure builder of the
 * workspace_info result (docs/contract/tools.md section 4).
 *
 * Trust: argv, the environment and the registry file come from the operator, who is trusted to
 * mean what they write but not to write it correctly: every value is checked and the first bad
 * one fails the whole load with one message naming the flag, variable or JSON path. The registry
 * file is decoded only through the generated decoder (schema/config/registry.json), then checked
 * semantically (absolute, existing directory roots; known environments). A model can never add
 * a workspace: nothing here reads client input except cs_policy_workspace_info's workspace_id,
 * which is only compared byte for byte.
 *
 * Entry points: cs_config_load / cs_config_free / cs_config_usage, cs_config_workspace,
 * cs_workspace_can_read / _write / _exec, cs_workspace_is_exec_path, cs_workspace_check,
 * cs_policy_workspace_info. The library never prints or logs; the caller reports.
 */
#ifndef CS_POLICY_H
#define CS_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base_diag.h"
#include "csw.h"

/* ---- fixed values (docs/contract/tools.md §4, docs/contract/runtime.md §5) ---- */

#define CS_POLICY_READ_MAX_BYTES                    CSW_MCP_READ_INPUT_LIMIT_DEFAULT /* per call */
#define CS_POLICY_FIND_MAX_PATHS                    CSW_MCP_FIND_INPUT_LIMIT_DEFAULT /* per call */
#define CS_POLICY_MAX_WAITERS                       64 /* mutation FIFO per workspace */
#define CS_POLICY_TTY_ROWS                          24 /* PTY size at start */
#define CS_POLICY_TTY_COLS                          80
#define CS_POLICY_DEFAULT_HOST                      "127.0.0.1"
#define CS_POLICY_DEFAULT_PORT                      8787
#define CS_POLICY_DEFAULT_HTTP_BODY_BUDGET_MIB      64
#define CS_POLICY_DEFAULT_HTTP_REQUEST_TIMEOUT_SECS 5
#define CS_POLICY_DEFAULT_HTTP_MAX_CONNECTIONS      1024
/* Per-workspace process limits (docs/operations.md, "Process limits"): defaults and bounds. */
#define CS_POLICY_DEFAULT_TIMEOUT_SECS 1800    /* 30 minutes */
#define CS_POLICY_MAX_TIMEOUT_SECS     2147483 /* so the timeout in ms fits in an int */
#define CS_POLICY_MIN_TIMEOUT_MS       1000    /* besides 0, no limit */
#define CS_POLICY_MAX_TIMEOUT_MS       ((int64_t)CS_POLICY_MAX_TIMEOUT_SECS * 1000)
#define CS_POLICY_DEFAULT_MAX_PROCS    8
#define CS_POLICY_MAX_PROCS            1024
#define CS_POLICY_DEFAULT_RING_BYTES   (1024 * 1024)
#define CS_POLICY_MIN_RING_BYTES       4096
/* A yield or a read answers the whole ring in one message: 2 MiB escaped at most six times
 * (a control byte is "\u00XX") stays under the runner wire's 16 MiB frame. */
#define CS_POLICY_MAX_RING_BYTES (2 * 1024 * 1024)
/* The runner-wide safety cap on live processes, every workspace together. */
#define CS_POLICY_RUNNER_MAX_PROCS 1024
/* The time limit of a file operation (read, find, apply_patch): this, or the process timeout
 * of --process-timeout / CODESPACE_PROCESS_TIMEOUT_SECS when that is smaller and not 0. */
#define CS_POLICY_FILE_TIMEOUT_MS    30000
#define CS_POLICY_DEFAULT_SANDBOX_ID 65533 /* a root server's unprivileged command id */
#define CS_POLICY_MAX_SANDBOX_ID     CSW_SANDBOX_PLAN_SANDBOX_UID_MAX /* (uid_t)-1: no id */
#define CS_POLICY_LOCAL_ENV          "local"   /* the built-in host environment */
#define CS_POLICY_QUICK_START_ID     "default" /* the workspace --workspace registers */

/* ---- configuration ---- */

enum cs_config_transport {
    CS_CONFIG_TRANSPORT_STDIO,
    CS_CONFIG_TRANSPORT_HTTP,
};

enum cs_config_runner {
    CS_CONFIG_RUNNER_IN_PROCESS,
    CS_CONFIG_RUNNER_UDS,
    CS_CONFIG_RUNNER_TCP, /* a codespace-runtime --listen worker (docs/scale-out.md) */
};

enum cs_policy_profile {
    CS_POLICY_PROFILE_READ_ONLY,       /* read */
    CS_POLICY_PROFILE_WORKSPACE_WRITE, /* read, write, exec */
};

enum cs_policy_env_kind {
    CS_POLICY_ENV_HOST,            /* an exec path: file tools and commands run on this host */
    CS_POLICY_ENV_LINUX_CONTAINER, /* registered but not an exec path: fails closed */
};

enum cs_policy_network {
    CS_POLICY_NETWORK_RESTRICTED,
    CS_POLICY_NETWORK_ENABLED,
    CS_POLICY_NETWORK_LOOPBACK, /* lo only, AF_INET/AF_INET6 allowed, nothing leaves */
};

/* Registry "processes" (docs/process.md): how live processes share a workspace. */
enum cs_workspace_processes {
    CS_WORKSPACE_PROCESSES_EXCLUSIVE = 0, /* one live process holds the workspace */
    CS_WORKSPACE_PROCESSES_SHARED = 1,    /* up to limits.max_live_processes at once */
};

/* A workspace's process limits, resolved (registry key, else flag, else variable, else
 * default; bounds in docs/operations.md). */
struct cs_workspace_limits {
    int64_t timeout_ms;         /* 0: no time limit; else CS_POLICY_MIN_TIMEOUT_MS .. MAX */
    int64_t max_live_processes; /* 1 .. CS_POLICY_MAX_PROCS */
    int64_t output_ring_bytes;  /* CS_POLICY_MIN_RING_BYTES .. CS_POLICY_MAX_RING_BYTES */
    int64_t deny_scan_entries;  /* CS_FS_DENY_SCAN_MIN .. MAX (src/fs/fs.h); default CAP */
};

/* An execution environment of the registry. "local" (host) always exists. */
struct cs_config_environment {
    char *id; /* NUL-terminated, no NUL inside, not empty */
    enum cs_policy_env_kind kind;
};

/*
 * How the gateway reaches a remote worker (docs/scale-out.md): a valid tcp://HOST:PORT and, unless
 * plaintext, either certificate mode (our certificate and key files, the worker's pin) or PSK
 * mode (the key file and its valid identity), never both. Files are paths, read when the runner
 * starts. Strings owned by the struct that holds it; NULL: not given.
 */
struct cs_remote {
    char *url;
    bool plaintext;
    char *cert, *key;
    unsigned char pin[32];
    bool has_pin;
    char *psk, *psk_identity;
};

/* A registered workspace. Every string is owned by the struct cs_config that holds it. */
struct cs_workspace {
    char *id; /* NUL-terminated, no NUL inside, not empty */
    size_t id_len;
    char *root;        /* absolute and canonical (realpath at load time) */
    char *description; /* for the model, at most 200 characters; NULL: none */
    /* The root, opened once at load by a no-follow walk from "/" (O_PATH, O_CLOEXEC) and held
     * for the config's life: every tool and the sandbox use it, never the path again. Valid
     * when has_root_fd. */
    int root_fd;
    bool has_root_fd;
    enum cs_policy_profile profile;
    char *environment; /* environment id */
    enum cs_policy_env_kind env_kind;
    enum cs_policy_network network;
    bool has_network_allow; /* the file gave network_allow (even empty) */
    char **network_allow;   /* host patterns, as given */
    size_t n_network_allow;
    enum cs_workspace_processes processes;
    struct cs_workspace_limits limits;
    /* deny rules (docs/contract/tools.md §5), as given, each checked by cs_fs_deny_rule_valid */
    char **deny;
    size_t n_deny;
    /* runner: this workspace's own remote worker (docs/scale-out.md, when has_runner), else the
     * gateway's --runner. Its root is then the worker's path, not opened here (no root_fd). */
    bool has_runner;
    struct cs_remote remote;
};

/*
 * Every setting of docs/contract/runtime.md §2, resolved (flag, else variable, else default).
 * Strings are owned by the struct and released by cs_config_free.
 */
struct cs_config {
    /* --transport stdio|http (--http), CODESPACE_TRANSPORT */
    enum cs_config_transport transport;
    /* --host, CODESPACE_HTTP_HOST */
    char *host;
    /* --port, CODESPACE_HTTP_PORT: 0..65535 (0: any free port) */
    uint16_t port;
    /* --token, CODESPACE_HTTP_TOKEN; NULL: no bearer check */
    char *token;
    /* --http-body-budget, CODESPACE_HTTP_BODY_BUDGET_MIB: 16..65536 */
    int64_t http_body_budget_mib;
    /* --http-request-timeout, CODESPACE_HTTP_REQUEST_TIMEOUT_SECS: 1..3600 */
    int64_t http_request_timeout_secs;
    /* --http-max-connections, CODESPACE_HTTP_MAX_CONNECTIONS: 16..65536 */
    int64_t http_max_connections;
    /* --config, CODESPACE_CONFIG; NULL: none */
    char *config_path;
    /* --workspace, CODESPACE_WORKSPACE, as given; NULL: none */
    char *workspace_dir;
    /* --operations-db, CODESPACE_OPERATIONS_DB; ":memory:" for none */
    char *operations_db;
    /* --runner in-process|uds, CODESPACE_RUNNER */
    enum cs_config_runner runner;
    /* --runner-dir, CODESPACE_RUNNER_DIR: absolute, slashes normalised (no trailing one) */
    char *runner_dir;
    /* --runner tcp://HOST:PORT (url, NULL otherwise), --runner-tls (plaintext when off),
     * --tls-cert, --tls-key, --tls-peer-sha256, --tls-psk, --tls-psk-identity and their
     * CODESPACE_RUNNER_* variables */
    struct cs_remote remote;
    /* Every workspace's limits and processes unless its registry entry sets them:
     * --process-timeout, CODESPACE_PROCESS_TIMEOUT_SECS: 0 (no limit, the flag only) or
     * 1..CS_POLICY_MAX_TIMEOUT_SECS */
    int64_t process_timeout_secs;
    /* --max-processes, CODESPACE_MAX_PROCESSES: 1..CS_POLICY_MAX_PROCS */
    int64_t max_processes;
    /* --output-ring, CODESPACE_OUTPUT_RING_BYTES: CS_POLICY_MIN_RING_BYTES..MAX */
    int64_t output_ring_bytes;
    /* --processes exclusive|shared, CODESPACE_PROCESSES */
    enum cs_workspace_processes processes;
    /* CODESPACE_REQUIRE_LINUX_SANDBOX: "1" true; unset or "0" false */
    bool require_linux_sandbox;
    /* --metrics (no value), CODESPACE_METRICS "1" or "0": serve GET /metrics on the HTTP
     * transport (refused with the stdio transport) */
    bool metrics;
    /* --log-level, CODESPACE_LOG: the MCP level name ("debug" .. "emergency"; static storage)
     * and the same level as a syslog severity (0 emergency .. 7 debug) */
    const char *log_level;
    int log_severity;
    /* CODESPACE_RUNTIME_BIN, CODESPACE_LINUX_SANDBOX_BIN (docs/contract/runtime.md §1); NULL: the
     * sibling of the gateway's executable */
    char *runtime_bin;
    char *sandbox_bin;
    /* --sandbox-uid, CODESPACE_SANDBOX_UID; --sandbox-gid, CODESPACE_SANDBOX_GID
     * (docs/contract/sandbox.md section 3): 1..CS_POLICY_MAX_SANDBOX_ID, owning no system
     * directory; the gid defaults to the uid */
    int64_t sandbox_uid, sandbox_gid;

    /* The registry: "local" first, then the file's environments in document order. */
    struct cs_config_environment *environments;
    size_t n_environments;
    /* The file's workspaces in document order, then "default" from --workspace. */
    struct cs_workspace *workspaces;
    size_t n_workspaces;
};

/* One message naming what was wrong (flag or variable and value, or file and JSON path). */
struct cs_config_error {
    char text[2048];
};

/* What cs_config_load returns. */
enum cs_config_status {
    CS_CONFIG_ERROR = -1,  /* err holds the message; cfg is zeroed */
    CS_CONFIG_READY = 0,   /* cfg is filled: serve */
    CS_CONFIG_HELP = 1,    /* --help: print cs_config_usage() and exit 0; cfg is zeroed */
    CS_CONFIG_VERSION = 2, /* --version: print the version and exit 0; cfg is zeroed */
};

/*
 * Resolves the configuration from argv (argv[0] is the program name and is skipped) and envp
 * ("NAME=value" strings, NULL-terminated; NULL means an empty environment; the first entry of a
 * name wins, as getenv does). Flags take "--flag value" or "--flag=value"; a repeated flag keeps
 * its last value; a flag wins over its variable. --help and --version return at once when met.
 * Reads the registry file and resolves workspace roots (realpath), so it touches the file system.
 * Returns a enum cs_config_status value; on CS_CONFIG_READY release cfg with cs_config_free.
 * err may be NULL.
 */
int cs_config_load(struct cs_config *cfg, int argc, char **argv, char **envp,
                   struct cs_config_error *err);

/* Releases everything cfg owns and zeroes it. Accepts a zeroed or half-built cfg and NULL. */
void cs_config_free(struct cs_config *cfg);

/* The --help text: every flag and variable with its default (static storage, ends in '\n'). */
const char *cs_config_usage(void);

/* The workspace whose id is exactly the id_len bytes at id, or NULL. Borrowed from cfg. */
const struct cs_workspace *cs_config_workspace(const struct cs_config *cfg, const char *id,
                                               size_t id_len);

/* ---- permissions ---- */

/* What the profile grants (docs/contract/tools.md §4 "permissions"); not the environment. */
bool cs_workspace_can_read(const struct cs_workspace *ws);
bool cs_workspace_can_write(const struct cs_workspace *ws);
bool cs_workspace_can_exec(const struct cs_workspace *ws);
/* True when the workspace's environment is an exec path (host). A linux-container environment
 * is registered but fails closed: read, find, apply_patch and exec_command are refused. */
bool cs_workspace_is_exec_path(const struct cs_workspace *ws);

enum cs_policy_access {
    CS_POLICY_ACCESS_READ,  /* read, find */
    CS_POLICY_ACCESS_WRITE, /* apply_patch */
    CS_POLICY_ACCESS_EXEC,  /* exec_command */
};

/*
 * The gate a tool applies before doing anything: returns 0 when ws may do access, else
 * CSW_ERROR_UNAUTHORIZED with diag (may be NULL) saying why: the environment is not an exec
 * path, or the profile forbids the action.
 */
int cs_workspace_check(const struct cs_workspace *ws, enum cs_policy_access access,
                       struct cs_diag *diag);

/* ---- workspace_info ---- */

/* What a remote worker enforces on its commands, as its last hello said (docs/scale-out.md). */
struct cs_worker_isolation {
    bool sandbox;         /* its probe succeeded: linux-sandbox and enforced network */
    int64_t landlock_abi; /* its kernel's Landlock ABI, 0 when not stated */
    bool syscall_denials; /* its sandbox reports refused system calls */
};

/* What the runner really offers; filled by the gateway. */
struct cs_runtime_caps {
    bool files_available;   /* read and find are implemented */
    bool patch_available;   /* apply_patch is implemented */
    bool process_available; /* exec_command and the process tools are implemented */
    bool uds_runner;        /* runner "uds" (else "in-process") */
    /* runner "remote" (docs/scale-out.md): the gateway's --runner tcp:// settings, of which
     * workspace_info reports the identity only (NULL: another runner) */
    const struct cs_remote *remote;
    /* The workspace's remote worker's own report (a registry runner, or remote above): its
     * isolation is reported from this, never from the fields below; NULL before its first hello
     * (then none and none: nothing unproven is claimed). */
    const struct cs_worker_isolation *worker;
    bool sandbox; /* the sandbox probe succeeded: linux-sandbox and enforced network */
    bool has_landlock_abi;
    int64_t landlock_abi; /* >= 0 when has_landlock_abi */
    bool syscall_denials; /* the sandbox reports refused system calls (seccomp user_notif) */
    bool tty_supported;
    /* The process limits reported are each workspace's own (struct cs_workspace_limits). */
};

/* The time limit of file operations (read, find, apply_patch) for cfg: CS_POLICY_FILE_TIMEOUT_MS,
 * or cfg->process_timeout_secs when that is smaller and not 0. Runner-wide, never per
 * workspace. */
int64_t cs_config_file_timeout_ms(const struct cs_config *cfg);

/*
 * Builds the workspace_info result (docs/contract/tools.md §4) for in->workspace_id (absent or
 * empty: the server part and the list of every workspace, sorted by id). cfg, caps, version
 * (NUL-terminated) and in are borrowed for the call. Returns 0 with out filled (release it with
 * csw_mcp_workspace_info_output_free; it passes csw_mcp_workspace_info_output_encode), or an error
 * code with out zeroed and diag (may be NULL) saying why: CSW_ERROR_WORKSPACE_NOT_FOUND for an
 * unknown id, CSW_ERROR_INTERNAL on OOM or caps outside the schema. Reads no workspace files.
 */
int cs_policy_workspace_info(const struct cs_config *cfg, const struct cs_runtime_caps *caps,
                             const char *version, const struct csw_mcp_workspace_info_input *in,
                             struct csw_mcp_workspace_info_output *out, struct cs_diag *diag);

#endif
