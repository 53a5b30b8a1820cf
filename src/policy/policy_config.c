/*
 * policy_config: resolves the gateway's settings from flags, environment variables and defaults
 * (docs/contract/runtime.md section 2), then loads the registry (policy_registry.c).
 *
 * Trust: argv and envp come from the operator. Nothing is taken on faith: each value is checked
 * and the first bad one ends the load with a message naming the flag or variable and the value.
 * The environment is passed in explicitly (never getenv), so the result depends on nothing else
 * than argv, envp and the file system.
 *
 * Entry points: cs_config_load, cs_config_free, cs_config_usage; cs__policy_errf and
 * cs__policy_quote for the other parts of the module.
 */
#define _XOPEN_SOURCE 700

#include "policy.h"
#include "policy_internal.h"
#include "base_remote.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <strings.h>

/* Every setting: its flag (NULL: variable only) and its variable. */
enum slot {
    S_TRANSPORT,
    S_HOST,
    S_PORT,
    S_TOKEN,
    S_HTTP_BODY_BUDGET,
    S_HTTP_REQUEST_TIMEOUT,
    S_HTTP_MAX_CONNECTIONS,
    S_CONFIG,
    S_WORKSPACE,
    S_OPERATIONS_DB,
    S_RUNNER,
    S_RUNNER_DIR,
    S_LOG_LEVEL,
    S_TIMEOUT,
    S_MAX_PROCESSES,
    S_OUTPUT_RING,
    S_PROCESSES,
    S_REQUIRE_SANDBOX,
    S_RUNTIME_BIN,
    S_SANDBOX_BIN,
    S_SANDBOX_UID,
    S_SANDBOX_GID,
    S_RUNNER_TLS,
    S_TLS_CERT,
    S_TLS_KEY,
    S_TLS_PIN,
    S_TLS_PSK,
    S_TLS_PSK_ID,
    S_METRICS,
    S__COUNT
};

struct setting {
    const char *flag;
    const char *var;
};

static const struct setting settings[S__COUNT] = {
    [S_TRANSPORT] = {"--transport", "CODESPACE_TRANSPORT"},
    [S_HOST] = {"--host", "CODESPACE_HTTP_HOST"},
    [S_PORT] = {"--port", "CODESPACE_HTTP_PORT"},
    [S_TOKEN] = {"--token", "CODESPACE_HTTP_TOKEN"},
    [S_HTTP_BODY_BUDGET] = {"--http-body-budget", "CODESPACE_HTTP_BODY_BUDGET_MIB"},
    [S_HTTP_REQUEST_TIMEOUT] = {"--http-request-timeout", "CODESPACE_HTTP_REQUEST_TIMEOUT_SECS"},
    [S_HTTP_MAX_CONNECTIONS] = {"--http-max-connections", "CODESPACE_HTTP_MAX_CONNECTIONS"},
    [S_CONFIG] = {"--config", "CODESPACE_CONFIG"},
    [S_WORKSPACE] = {"--workspace", "CODESPACE_WORKSPACE"},
    [S_OPERATIONS_DB] = {"--operations-db", "CODESPACE_OPERATIONS_DB"},
    [S_RUNNER] = {"--runner", "CODESPACE_RUNNER"},
    [S_RUNNER_DIR] = {"--runner-dir", "CODESPACE_RUNNER_DIR"},
    [S_LOG_LEVEL] = {"--log-level", "CODESPACE_LOG"},
    [S_TIMEOUT] = {"--process-timeout", "CODESPACE_PROCESS_TIMEOUT_SECS"},
    [S_MAX_PROCESSES] = {"--max-processes", "CODESPACE_MAX_PROCESSES"},
    [S_OUTPUT_RING] = {"--output-ring", "CODESPACE_OUTPUT_RING_BYTES"},
    [S_PROCESSES] = {"--processes", "CODESPACE_PROCESSES"},
    [S_REQUIRE_SANDBOX] = {NULL, "CODESPACE_REQUIRE_LINUX_SANDBOX"},
    [S_RUNTIME_BIN] = {NULL, "CODESPACE_RUNTIME_BIN"},
    [S_SANDBOX_BIN] = {NULL, "CODESPACE_LINUX_SANDBOX_BIN"},
    [S_SANDBOX_UID] = {"--sandbox-uid", "CODESPACE_SANDBOX_UID"},
    [S_SANDBOX_GID] = {"--sandbox-gid", "CODESPACE_SANDBOX_GID"},
    [S_RUNNER_TLS] = {"--runner-tls", "CODESPACE_RUNNER_TLS"},
    [S_TLS_CERT] = {"--tls-cert", "CODESPACE_RUNNER_TLS_CERT"},
    [S_TLS_KEY] = {"--tls-key", "CODESPACE_RUNNER_TLS_KEY"},
    [S_TLS_PIN] = {"--tls-peer-sha256", "CODESPACE_RUNNER_TLS_PEER_SHA256"},
    [S_TLS_PSK] = {"--tls-psk", "CODESPACE_RUNNER_TLS_PSK"},
    [S_TLS_PSK_ID] = {"--tls-psk-identity", "CODESPACE_RUNNER_TLS_PSK_IDENTITY"},
    [S_METRICS] = {NULL, "CODESPACE_METRICS"}, /* the flag --metrics takes no value */
};

/* A setting as given: value NULL when neither the flag nor the variable is set; source names
 * where it came from, for messages. Both borrowed from argv, envp or static storage. */
struct raw {
    const char *value;
    const char *source;
};

/* MCP logging levels (RFC 5424 severities), most severe first; index = severity. */
static const char *const log_levels[] = {"emergency", "alert",  "critical", "error",
                                         "warning",   "notice", "info",     "debug"};
#define LOG_LEVEL_COUNT (sizeof log_levels / sizeof log_levels[0])

/* The --help text in two literals (C99 promises literals of 4095 bytes, no more), joined once. */
static const char usage_head[] =
    "usage: codespace-mcp [options]\n"
    "CodeSpace: an MCP execution server over operator-registered workspaces.\n"
    "\n"
    "Each flag has an environment variable; a flag wins over its variable.\n"
    "Flags take '--flag value' or '--flag=value'.\n"
    "\n"
    "  --transport stdio|http, --http      CODESPACE_TRANSPORT\n"
    "      transport; --http is --transport http (default stdio)\n"
    "  --host HOST                         CODESPACE_HTTP_HOST\n"
    "      HTTP bind address (default 127.0.0.1)\n"
    "  --port PORT                         CODESPACE_HTTP_PORT\n"
    "      HTTP port, 0..65535; 0 picks a free port, logged at start (default 8787)\n"
    "  --token TOKEN                       CODESPACE_HTTP_TOKEN\n"
    "      HTTP bearer token (default unset: no bearer check)\n"
    "  --http-body-budget MIB              CODESPACE_HTTP_BODY_BUDGET_MIB\n"
    "      HTTP request bodies being received at once, in MiB, 16..65536; past it a new\n"
    "      body gets 503 with Retry-After (default 64)\n"
    "  --http-request-timeout SECS         CODESPACE_HTTP_REQUEST_TIMEOUT_SECS\n"
    "      time to receive an HTTP request's head, and then its body, 1..3600 (default 5)\n"
    "  --http-max-connections N            CODESPACE_HTTP_MAX_CONNECTIONS\n"
    "      HTTP connections at once, 16..65536, lowered to fit RLIMIT_NOFILE; near it the\n"
    "      oldest connection waiting for a request is closed (default 1024)\n"
    "  --config FILE                       CODESPACE_CONFIG\n"
    "      workspace registry file (default none)\n"
    "  --workspace DIR                     CODESPACE_WORKSPACE\n"
    "      register DIR as workspace \"default\", profile workspace-write, network\n"
    "      restricted (default none)\n"
    "  --processes exclusive|shared        CODESPACE_PROCESSES\n"
    "      exclusive: one live process holds a workspace; shared: several at once\n"
    "      (default exclusive)\n"
    "  --process-timeout SECS              CODESPACE_PROCESS_TIMEOUT_SECS\n"
    "      time limit of every command, 1..2147483; 0 (the flag only) for none\n"
    "      (default 1800)\n"
    "  --max-processes N                   CODESPACE_MAX_PROCESSES\n"
    "      live processes per workspace, 1..1024 (default 8)\n"
    "  --output-ring BYTES                 CODESPACE_OUTPUT_RING_BYTES\n"
    "      output kept per process, 4096..2097152 (default 1048576)\n"
    "      These four are every workspace's unless its registry entry sets them.\n"
    "  --operations-db FILE                CODESPACE_OPERATIONS_DB\n"
    "      operation ledger; :memory: for none (default\n"
    "      $XDG_STATE_HOME/codespace/operations.db, else\n"
    "      $HOME/.local/state/codespace/operations.db)\n"
    "  --runner in-process|uds|tcp://HOST:PORT  CODESPACE_RUNNER\n"
    "      where files and processes are handled; tcp:// is a codespace-runtime --listen\n"
    "      worker on another host (default in-process)\n"
    "  --runner-tls on|off                 CODESPACE_RUNNER_TLS\n"
    "      TLS 1.3 to a tcp:// runner; off only on a private link (default on)\n"
    "  --tls-cert FILE                     CODESPACE_RUNNER_TLS_CERT\n"
    "      the gateway's certificate (PEM) for tcp:// runners (default none)\n"
    "  --tls-key FILE                      CODESPACE_RUNNER_TLS_KEY\n"
    "      its private key (PEM) (default none)\n"
    "  --tls-peer-sha256 HEX               CODESPACE_RUNNER_TLS_PEER_SHA256\n"
    "      the SHA-256 of the worker's certificate, 64 hex digits (default none)\n";

static const char usage_tail[] =
    "  --tls-psk FILE                      CODESPACE_RUNNER_TLS_PSK\n"
    "      PSK mode instead of certificates: the pre-shared key, 32..64 bytes as hex, in a\n"
    "      file not readable by others (default none)\n"
    "  --tls-psk-identity NAME             CODESPACE_RUNNER_TLS_PSK_IDENTITY\n"
    "      the key's identity, 1..128 bytes of [A-Za-z0-9._:@-] (default none)\n"
    "  --runner-dir DIR                    CODESPACE_RUNNER_DIR\n"
    "      parent of the uds runner's private directory; /, /tmp, /var/tmp and $HOME\n"
    "      are refused (default $TMPDIR, else /tmp)\n"
    "  --log-level LEVEL                   CODESPACE_LOG\n"
    "      debug, info, notice, warning (or warn), error, critical, alert, emergency;\n"
    "      JSON lines on stderr (default info)\n"
    "                                      CODESPACE_REQUIRE_LINUX_SANDBOX\n"
    "      1: a failed sandbox probe is fatal at start (default unset, same as 0)\n"
    "                                      CODESPACE_NETNS_GRACE_SECS\n"
    "      how long a shared workspace keeps its network namespace after its last\n"
    "      process, 0..86400 (default 60)\n"
    "                                      CODESPACE_BUSY_POLL_US\n"
    "      a uds runner: how long gateway and worker poll their link for an answer\n"
    "      before they sleep, in microseconds, 0..1000, 0 off (default 200)\n"
    "                                      CODESPACE_RUNTIME_BIN\n"
    "      the codespace-runtime worker (default: next to this executable)\n"
    "                                      CODESPACE_LINUX_SANDBOX_BIN\n"
    "      the codespace-linux-sandbox helper (default: next to this executable)\n"
    "  --sandbox-uid UID                   CODESPACE_SANDBOX_UID\n"
    "      a root server only: the unprivileged host uid sandboxed commands run as when\n"
    "      the workspace root is owned by root; never 0, never the owner of a system\n"
    "      directory (default 65533)\n"
    "  --sandbox-gid GID                   CODESPACE_SANDBOX_GID\n"
    "      the same for the gid (default: the sandbox uid)\n"
    "  --metrics                           CODESPACE_METRICS\n"
    "      HTTP only: serve GET /metrics (Prometheus text format) behind the same\n"
    "      Host/Origin and bearer checks as /mcp; 1 or 0 (default off)\n"
    "  --doctor\n"
    "      check the sandbox's prerequisites, the helper's probe, the operations database\n"
    "      and the registry, one line each; exit 0 when every check passes (commands run\n"
    "      sandboxed), 1 otherwise\n"
    "  --version\n"
    "      print the version and exit\n"
    "  --help\n"
    "      print this text and exit\n";

static char usage_text[sizeof usage_head + sizeof usage_tail - 1];
static pthread_once_t usage_once = PTHREAD_ONCE_INIT;

static void usage_join(void)
{
    memcpy(usage_text, usage_head, sizeof usage_head - 1);
    memcpy(usage_text + sizeof usage_head - 1, usage_tail, sizeof usage_tail);
}

const char *cs_config_usage(void)
{
    pthread_once(&usage_once, usage_join);
    return usage_text;
}

/* ---- messages ---- */

int cs__policy_errf(struct cs_config_error *err, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        cs_diag_vformat(err->text, sizeof err->text, fmt, ap);
        va_end(ap);
    }
    return CS_CONFIG_ERROR;
}

const char *cs__policy_quote(char *buf, size_t cap, const char *s, size_t n)
{
    size_t len = 0;
    buf[len++] = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char b = (unsigned char)s[i];
        bool esc = b == '"' || b == '\\';
        size_t need = esc ? 2 : 1;
        /* Keep room for "..." and the closing quote and NUL. */
        if (len + need + 5 > cap) {
            memcpy(buf + len, "...", 3);
            len += 3;
            break;
        }
        if (esc)
            buf[len++] = '\\';
        buf[len++] = (char)(b < 0x20 || b == 0x7f ? '?' : b);
    }
    buf[len++] = '"';
    buf[len] = '\0';
    return buf;
}

/* ---- values ---- */

/* The value of name in envp (the first entry wins, as getenv does), or NULL. */
static const char *env_get(char **envp, const char *name)
{
    size_t n = strlen(name);
    for (char **e = envp; e && *e; e++) {
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
            return *e + n + 1;
    }
    return NULL;
}

static int oom(struct cs_config_error *err)
{
    return cs__policy_errf(err, "out of memory");
}

static int bad_value(struct cs_config_error *err, const struct raw *r, const char *expected)
{
    char q[256];
    return cs__policy_errf(err, "%s: expected %s, got %s", r->source, expected,
                           cs__policy_quote(q, sizeof q, r->value, strlen(r->value)));
}

/* Copies a set, non-empty value into *out. Returns 0 or CS_CONFIG_ERROR. */
static int take_string(const struct raw *r, char **out, struct cs_config_error *err)
{
    if (r->value[0] == '\0')
        return cs__policy_errf(err, "%s: must not be empty", r->source);
    *out = strdup(r->value);
    return *out ? 0 : oom(err);
}

/* Parses a decimal integer in lo..hi (digits only: no sign, space or suffix). */
static bool parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    int64_t v = 0;
    if (*s == '\0')
        return false;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return false;
        v = v * 10 + (*s - '0');
        if (v > hi)
            return false;
    }
    if (v < lo)
        return false;
    *out = v;
    return true;
}

static int take_int(const struct raw *r, int64_t lo, int64_t hi, int64_t *out,
                    struct cs_config_error *err)
{
    char expected[96];
    if (parse_int(r->value, lo, hi, out))
        return 0;
    snprintf(expected, sizeof expected, "an integer from %lld to %lld", (long long)lo,
             (long long)hi);
    return bad_value(err, r, expected);
}

/* Returns a copy of path with runs of '/' collapsed and trailing '/' removed ("/" stays), or
 * NULL on OOM. */
static char *path_normalise(const char *path)
{
    size_t n = strlen(path);
    char *out = malloc(n + 1);
    if (!out)
        return NULL;
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        if (path[i] == '/' && len > 0 && out[len - 1] == '/')
            continue;
        out[len++] = path[i];
    }
    while (len > 1 && out[len - 1] == '/')
        len--;
    out[len] = '\0';
    return out;
}

/* Returns a new string "<a><b>", or NULL on OOM. */
static char *concat(const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b);
    char *s = malloc(na + nb + 1);
    if (!s)
        return NULL;
    memcpy(s, a, na);
    memcpy(s + na, b, nb + 1);
    return s;
}

/* An environment variable that is set, non-empty and absolute (XDG: anything else is ignored). */
static const char *env_abs(char **envp, const char *name)
{
    const char *v = env_get(envp, name);
    return v && v[0] == '/' ? v : NULL;
}

static int resolve_operations_db(struct cs_config *cfg, const struct raw *r, char **envp,
                                 struct cs_config_error *err)
{
    if (r->value)
        return take_string(r, &cfg->operations_db, err);
    const char *state = env_abs(envp, "XDG_STATE_HOME");
    const char *home = env_get(envp, "HOME");
    const char *tail = "/codespace/operations.db";
    if (!state && (!home || home[0] == '\0'))
        return cs__policy_errf(err, "no default for the operations db: neither XDG_STATE_HOME nor "
                                    "HOME is set; set --operations-db or CODESPACE_OPERATIONS_DB "
                                    "(\":memory:\" for none)");
    if (!state)
        tail = "/.local/state/codespace/operations.db";
    char *base = path_normalise(state ? state : home);
    if (!base)
        return oom(err);
    /* A base of "/" normalises to "/": skip it so the result has no "//". */
    cfg->operations_db = concat(strcmp(base, "/") == 0 ? "" : base, tail);
    free(base);
    return cfg->operations_db ? 0 : oom(err);
}

/*
 * The TLS settings of tcp:// runners (docs/scale-out.md): with TLS on (the default) a tcp runner
 * needs all three of certificate, key and pin (certificate mode), or both of pre-shared key file
 * and identity (PSK mode), never a mix; with it off, none. They are checked here for form (the
 * pin's hex, the identity's bytes); the files are loaded when the runner starts.
 */
static int resolve_runner_tls(struct cs_config *cfg, const struct raw *raw,
                              struct cs_config_error *err)
{
    const struct raw *t = &raw[S_RUNNER_TLS];
    cfg->remote.plaintext = false;
    if (t->value && strcmp(t->value, "off") == 0)
        cfg->remote.plaintext = true;
    else if (t->value && strcmp(t->value, "on") != 0)
        return bad_value(err, t, "\"on\" or \"off\"");
    if (raw[S_TLS_CERT].value && take_string(&raw[S_TLS_CERT], &cfg->remote.cert, err) != 0)
        return -1;
    if (raw[S_TLS_KEY].value && take_string(&raw[S_TLS_KEY], &cfg->remote.key, err) != 0)
        return -1;
    if (raw[S_TLS_PIN].value) {
        if (cs_tls_pin_parse(raw[S_TLS_PIN].value, cfg->remote.pin) != 0)
            return bad_value(err, &raw[S_TLS_PIN], "64 hex digits (pairs may be split by ':')");
        cfg->remote.has_pin = true;
    }
    if (raw[S_TLS_PSK].value && take_string(&raw[S_TLS_PSK], &cfg->remote.psk, err) != 0)
        return -1;
    if (raw[S_TLS_PSK_ID].value) {
        if (!cs_tls_psk_identity_ok(raw[S_TLS_PSK_ID].value))
            return bad_value(err, &raw[S_TLS_PSK_ID], "1..128 bytes of [A-Za-z0-9._:@-]");
        if (take_string(&raw[S_TLS_PSK_ID], &cfg->remote.psk_identity, err) != 0)
            return -1;
    }
    bool any = cfg->remote.cert || cfg->remote.key || cfg->remote.has_pin;
    bool all = cfg->remote.cert && cfg->remote.key && cfg->remote.has_pin;
    bool psk_any = cfg->remote.psk || cfg->remote.psk_identity;
    bool psk_all = cfg->remote.psk && cfg->remote.psk_identity;
    if (cfg->remote.plaintext && (any || psk_any))
        return cs__policy_errf(err,
                               "%s: off, yet a TLS certificate, key, pin or pre-shared key is "
                               "given",
                               t->source);
    if (any && psk_any)
        return cs__policy_errf(err, "--tls-cert, --tls-key and --tls-peer-sha256 (certificate "
                                    "mode) do not go with --tls-psk and --tls-psk-identity (PSK "
                                    "mode): give one mode");
    if (!cfg->remote.plaintext && any && !all)
        return cs__policy_errf(err, "--tls-cert, --tls-key and --tls-peer-sha256 go together");
    if (psk_any && !psk_all)
        return cs__policy_errf(err, "--tls-psk and --tls-psk-identity go together");
    if (cfg->runner == CS_CONFIG_RUNNER_TCP && !cfg->remote.plaintext && !all && !psk_all)
        return cs__policy_errf(err,
                               "--runner %s needs --tls-cert, --tls-key and "
                               "--tls-peer-sha256, or --tls-psk and --tls-psk-identity (or "
                               "--runner-tls off on a private link)",
                               cfg->remote.url);
    return 0;
}

/*
 * The runner dir: a configured value must be absolute and may not be "/", "/tmp", "/var/tmp" or
 * $HOME (compared after normalising slashes): the gateway creates its private directory there,
 * and those are shared or too valuable. The default ($TMPDIR, else /tmp) is not refused: the
 * leaf the gateway creates under it is private (mode 0700, unique name).
 */
/* Whether path resolves to the real path real. */
static bool same_real(const char *real, const char *path)
{
    char rp[PATH_MAX];
    return realpath(path, rp) != NULL && strcmp(real, rp) == 0;
}

static int resolve_runner_dir(struct cs_config *cfg, const struct raw *r, char **envp,
                              struct cs_config_error *err)
{
    if (!r->value) {
        const char *tmp = env_abs(envp, "TMPDIR");
        cfg->runner_dir = path_normalise(tmp ? tmp : "/tmp");
        return cfg->runner_dir ? 0 : oom(err);
    }
    if (r->value[0] == '\0')
        return cs__policy_errf(err, "%s: must not be empty", r->source);
    if (r->value[0] != '/')
        return bad_value(err, r, "an absolute path");
    char *dir = path_normalise(r->value);
    if (!dir)
        return oom(err);
    const char *home = env_get(envp, "HOME");
    char *home_n = home && home[0] ? path_normalise(home) : NULL;
    if (home && home[0] && !home_n) {
        free(dir);
        return oom(err);
    }
    bool refused = strcmp(dir, "/") == 0 || strcmp(dir, "/tmp") == 0 ||
                   strcmp(dir, "/var/tmp") == 0 || (home_n && strcmp(dir, home_n) == 0);
    /* The same directories reached another way ("/tmp/.", "/tmp/../tmp", a symlink): compared
     * by their real paths when the directory exists (one that does not fails at start). */
    char real[PATH_MAX];
    if (!refused && realpath(dir, real) != NULL)
        refused = strcmp(real, "/") == 0 || same_real(real, "/tmp") ||
                  same_real(real, "/var/tmp") || (home_n && same_real(real, home_n));
    free(home_n);
    if (refused) {
        char q[256];
        free(dir);
        return cs__policy_errf(err,
                               "%s: refused %s: /, /tmp, /var/tmp and $HOME are shared or "
                               "too valuable; choose a directory of its own",
                               r->source,
                               cs__policy_quote(q, sizeof q, r->value, strlen(r->value)));
    }
    cfg->runner_dir = dir;
    return 0;
}

/*
 * docs/contract/sandbox.md §3: the id a root server's commands run as when the workspace root is
 * owned by root. Never 0, and never the owner of a system directory: such an id would own host
 * files.
 */
static int resolve_sandbox_ids(struct cs_config *cfg, const struct raw *ru, const struct raw *rg,
                               struct cs_config_error *err)
{
    static const char *const system_dirs[] = {"/",        "/etc",      "/usr",  "/usr/bin",
                                              "/usr/lib", "/usr/sbin", "/bin",  "/sbin",
                                              "/lib",     "/var",      "/root", "/boot"};
    cfg->sandbox_uid = CS_POLICY_DEFAULT_SANDBOX_ID;
    if (ru->value && take_int(ru, 1, CS_POLICY_MAX_SANDBOX_ID, &cfg->sandbox_uid, err) != 0)
        return CS_CONFIG_ERROR;
    cfg->sandbox_gid = cfg->sandbox_uid;
    if (rg->value && take_int(rg, 1, CS_POLICY_MAX_SANDBOX_ID, &cfg->sandbox_gid, err) != 0)
        return CS_CONFIG_ERROR;
    for (size_t i = 0; i < sizeof system_dirs / sizeof *system_dirs; i++) {
        struct stat st;
        if (lstat(system_dirs[i], &st) != 0)
            continue;
        if ((int64_t)st.st_uid == cfg->sandbox_uid)
            return cs__policy_errf(err,
                                   "%s: uid %lld owns %s; choose an id that owns no system "
                                   "files",
                                   ru->source ? ru->source : "--sandbox-uid",
                                   (long long)cfg->sandbox_uid, system_dirs[i]);
        if ((int64_t)st.st_gid == cfg->sandbox_gid)
            return cs__policy_errf(err,
                                   "%s: gid %lld owns %s; choose an id that owns no system "
                                   "files",
                                   rg->source ? rg->source : "--sandbox-gid",
                                   (long long)cfg->sandbox_gid, system_dirs[i]);
    }
    return 0;
}

static int resolve_log_level(struct cs_config *cfg, const struct raw *r,
                             struct cs_config_error *err)
{
    const char *v = r->value ? r->value : "info";
    if (strcasecmp(v, "warn") == 0)
        v = "warning";
    for (size_t i = 0; i < LOG_LEVEL_COUNT; i++) {
        if (strcasecmp(v, log_levels[i]) == 0) {
            cfg->log_level = log_levels[i];
            cfg->log_severity = (int)i;
            return 0;
        }
    }
    return bad_value(err, r,
                     "one of \"debug\", \"info\", \"notice\", \"warning\", \"error\", "
                     "\"critical\", \"alert\", \"emergency\"");
}

/*
 * The defaults of every workspace's processes and limits (docs/operations.md, "Process limits").
 * 0 seconds (no time limit) is taken from the flag only: a variable left over in an environment
 * must not lift the limit unnoticed.
 */
static int resolve_limits(struct cs_config *cfg, const struct raw *raw, struct cs_config_error *err)
{
    const struct raw *r = &raw[S_TIMEOUT];
    bool flag = r->source && strncmp(r->source, "--", 2) == 0;
    cfg->process_timeout_secs = CS_POLICY_DEFAULT_TIMEOUT_SECS;
    if (r->value &&
        take_int(r, flag ? 0 : 1, CS_POLICY_MAX_TIMEOUT_SECS, &cfg->process_timeout_secs, err) != 0)
        return CS_CONFIG_ERROR;
    cfg->max_processes = CS_POLICY_DEFAULT_MAX_PROCS;
    if (raw[S_MAX_PROCESSES].value &&
        take_int(&raw[S_MAX_PROCESSES], 1, CS_POLICY_MAX_PROCS, &cfg->max_processes, err) != 0)
        return CS_CONFIG_ERROR;
    cfg->output_ring_bytes = CS_POLICY_DEFAULT_RING_BYTES;
    if (raw[S_OUTPUT_RING].value &&
        take_int(&raw[S_OUTPUT_RING], CS_POLICY_MIN_RING_BYTES, CS_POLICY_MAX_RING_BYTES,
                 &cfg->output_ring_bytes, err) != 0)
        return CS_CONFIG_ERROR;
    r = &raw[S_PROCESSES];
    cfg->processes = CS_WORKSPACE_PROCESSES_EXCLUSIVE;
    if (r->value && strcmp(r->value, "shared") == 0)
        cfg->processes = CS_WORKSPACE_PROCESSES_SHARED;
    else if (r->value && strcmp(r->value, "exclusive") != 0)
        return bad_value(err, r, "\"exclusive\" or \"shared\"");
    return 0;
}

int64_t cs_config_file_timeout_ms(const struct cs_config *cfg)
{
    int64_t t = cfg->process_timeout_secs * 1000;
    return t > 0 && t < CS_POLICY_FILE_TIMEOUT_MS ? t : CS_POLICY_FILE_TIMEOUT_MS;
}

/* Applies every setting to cfg (zeroed). Returns 0 or CS_CONFIG_ERROR. */
static int resolve(struct cs_config *cfg, const struct raw *raw, char **envp,
                   struct cs_config_error *err)
{
    int64_t v = 0;
    const struct raw *r;

    r = &raw[S_TRANSPORT];
    cfg->transport = CS_CONFIG_TRANSPORT_STDIO;
    if (r->value && strcmp(r->value, "http") == 0)
        cfg->transport = CS_CONFIG_TRANSPORT_HTTP;
    else if (r->value && strcmp(r->value, "stdio") != 0)
        return bad_value(err, r, "\"stdio\" or \"http\"");

    r = &raw[S_HOST];
    if (r->value) {
        if (take_string(r, &cfg->host, err) != 0)
            return CS_CONFIG_ERROR;
    } else if (!(cfg->host = strdup(CS_POLICY_DEFAULT_HOST))) {
        return oom(err);
    }

    r = &raw[S_PORT];
    cfg->port = CS_POLICY_DEFAULT_PORT;
    if (r->value) {
        if (take_int(r, 0, 65535, &v, err) != 0)
            return CS_CONFIG_ERROR;
        cfg->port = (uint16_t)v;
    }

    if (raw[S_TOKEN].value && take_string(&raw[S_TOKEN], &cfg->token, err) != 0)
        return CS_CONFIG_ERROR;
    cfg->http_body_budget_mib = CS_POLICY_DEFAULT_HTTP_BODY_BUDGET_MIB;
    if (raw[S_HTTP_BODY_BUDGET].value &&
        take_int(&raw[S_HTTP_BODY_BUDGET], 16, 65536, &cfg->http_body_budget_mib, err) != 0)
        return CS_CONFIG_ERROR;
    cfg->http_request_timeout_secs = CS_POLICY_DEFAULT_HTTP_REQUEST_TIMEOUT_SECS;
    if (raw[S_HTTP_REQUEST_TIMEOUT].value &&
        take_int(&raw[S_HTTP_REQUEST_TIMEOUT], 1, 3600, &cfg->http_request_timeout_secs, err) != 0)
        return CS_CONFIG_ERROR;
    cfg->http_max_connections = CS_POLICY_DEFAULT_HTTP_MAX_CONNECTIONS;
    if (raw[S_HTTP_MAX_CONNECTIONS].value &&
        take_int(&raw[S_HTTP_MAX_CONNECTIONS], 16, 65536, &cfg->http_max_connections, err) != 0)
        return CS_CONFIG_ERROR;
    if (raw[S_CONFIG].value && take_string(&raw[S_CONFIG], &cfg->config_path, err) != 0)
        return CS_CONFIG_ERROR;
    if (raw[S_WORKSPACE].value && take_string(&raw[S_WORKSPACE], &cfg->workspace_dir, err) != 0)
        return CS_CONFIG_ERROR;
    if (resolve_operations_db(cfg, &raw[S_OPERATIONS_DB], envp, err) != 0)
        return CS_CONFIG_ERROR;

    r = &raw[S_RUNNER];
    cfg->runner = CS_CONFIG_RUNNER_IN_PROCESS;
    char uhost[CS_RUNNER_URL_HOST_MAX], uport[CS_RUNNER_URL_PORT_MAX];
    if (r->value && strcmp(r->value, "uds") == 0) {
        cfg->runner = CS_CONFIG_RUNNER_UDS;
    } else if (r->value && strncmp(r->value, "tcp:", 4) == 0) {
        if (cs_runner_url_parse(r->value, uhost, uport) != 0)
            return bad_value(err, r, "tcp://HOST:PORT");
        cfg->runner = CS_CONFIG_RUNNER_TCP;
        if (take_string(r, &cfg->remote.url, err) != 0)
            return CS_CONFIG_ERROR;
    } else if (r->value && strcmp(r->value, "in-process") != 0) {
        return bad_value(err, r, "\"in-process\", \"uds\" or tcp://HOST:PORT");
    }
    if (resolve_runner_tls(cfg, raw, err) != 0)
        return CS_CONFIG_ERROR;

    if (resolve_runner_dir(cfg, &raw[S_RUNNER_DIR], envp, err) != 0)
        return CS_CONFIG_ERROR;
    if (resolve_log_level(cfg, &raw[S_LOG_LEVEL], err) != 0)
        return CS_CONFIG_ERROR;

    if (resolve_limits(cfg, raw, err) != 0)
        return CS_CONFIG_ERROR;

    r = &raw[S_REQUIRE_SANDBOX];
    cfg->require_linux_sandbox = false;
    if (r->value && strcmp(r->value, "1") == 0)
        cfg->require_linux_sandbox = true;
    else if (r->value && strcmp(r->value, "0") != 0)
        return bad_value(err, r, "\"1\" or \"0\"");

    r = &raw[S_METRICS];
    cfg->metrics = false;
    if (r->value && strcmp(r->value, "1") == 0)
        cfg->metrics = true;
    else if (r->value && strcmp(r->value, "0") != 0)
        return bad_value(err, r, "\"1\" or \"0\"");
    if (cfg->metrics && cfg->transport != CS_CONFIG_TRANSPORT_HTTP)
        return cs__policy_errf(err,
                               "%s: metrics are served over HTTP only; the stdio transport has "
                               "no endpoint for them (add --http, or drop %s)",
                               r->source, r->source);

    if (raw[S_RUNTIME_BIN].value && take_string(&raw[S_RUNTIME_BIN], &cfg->runtime_bin, err) != 0)
        return CS_CONFIG_ERROR;
    if (raw[S_SANDBOX_BIN].value && take_string(&raw[S_SANDBOX_BIN], &cfg->sandbox_bin, err) != 0)
        return CS_CONFIG_ERROR;

    if (resolve_sandbox_ids(cfg, &raw[S_SANDBOX_UID], &raw[S_SANDBOX_GID], err) != 0)
        return CS_CONFIG_ERROR;

    return cs__policy_registry_load(cfg, cfg->config_path, cfg->workspace_dir,
                                    raw[S_WORKSPACE].source, err);
}

/* True when the first n bytes of arg are exactly name. */
static bool flag_is(const char *arg, size_t n, const char *name)
{
    return strlen(name) == n && memcmp(arg, name, n) == 0;
}

/*
 * Reads argv into raw. Returns CS_CONFIG_READY, CS_CONFIG_HELP or CS_CONFIG_VERSION (at once when
 * met), or CS_CONFIG_ERROR.
 */
static int parse_args(int argc, char **argv, struct raw *raw, struct cs_config_error *err)
{
    char q[256];
    for (int i = 1; i < argc && argv[i]; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0 || a[2] == '\0')
            return cs__policy_errf(err, "unexpected argument %s (see --help)",
                                   cs__policy_quote(q, sizeof q, a, strlen(a)));
        const char *eq = strchr(a, '=');
        size_t n = eq ? (size_t)(eq - a) : strlen(a);
        int code = flag_is(a, n, "--help")      ? CS_CONFIG_HELP
                   : flag_is(a, n, "--version") ? CS_CONFIG_VERSION
                   : flag_is(a, n, "--http")    ? CS_CONFIG_READY
                   : flag_is(a, n, "--metrics") ? CS_CONFIG_READY
                                                : CS_CONFIG_ERROR;
        if (code != CS_CONFIG_ERROR) {
            if (eq)
                return cs__policy_errf(err, "%.*s: takes no value", (int)n, a);
            if (code != CS_CONFIG_READY)
                return code;
            if (flag_is(a, n, "--metrics"))
                raw[S_METRICS] = (struct raw){"1", "--metrics"};
            else
                raw[S_TRANSPORT] = (struct raw){"http", "--http"};
            continue;
        }
        size_t s = 0;
        while (s < S__COUNT && !(settings[s].flag && flag_is(a, n, settings[s].flag)))
            s++;
        if (s == S__COUNT)
            return cs__policy_errf(err, "unknown flag %s (see --help)",
                                   cs__policy_quote(q, sizeof q, a, n));
        const char *value = eq ? eq + 1 : NULL;
        if (!eq) {
            if (i + 1 >= argc || !argv[i + 1])
                return cs__policy_errf(err, "%s: missing value", settings[s].flag);
            value = argv[++i];
        }
        raw[s] = (struct raw){value, settings[s].flag};
    }
    return CS_CONFIG_READY;
}

int cs_config_load(struct cs_config *cfg, int argc, char **argv, char **envp,
                   struct cs_config_error *err)
{
    struct raw raw[S__COUNT];
    memset(raw, 0, sizeof raw);
    memset(cfg, 0, sizeof *cfg);
    if (err)
        err->text[0] = '\0';

    int rc = parse_args(argc, argv, raw, err);
    if (rc != CS_CONFIG_READY)
        goto out;
    for (size_t s = 0; s < S__COUNT; s++) {
        if (raw[s].value)
            continue;
        raw[s].value = env_get(envp, settings[s].var);
        raw[s].source = settings[s].var;
    }
    rc = resolve(cfg, raw, envp, err);
out:
    if (rc != CS_CONFIG_READY)
        cs_config_free(cfg);
    return rc;
}

void cs__policy_remote_clear(struct cs_remote *rm)
{
    free(rm->url);
    free(rm->cert);
    free(rm->key);
    free(rm->psk);
    free(rm->psk_identity);
    memset(rm, 0, sizeof *rm);
}

void cs_config_free(struct cs_config *cfg)
{
    if (!cfg)
        return;
    free(cfg->host);
    free(cfg->token);
    free(cfg->config_path);
    free(cfg->workspace_dir);
    free(cfg->operations_db);
    free(cfg->runner_dir);
    cs__policy_remote_clear(&cfg->remote);
    free(cfg->runtime_bin);
    free(cfg->sandbox_bin);
    for (size_t i = 0; i < cfg->n_environments; i++)
        free(cfg->environments[i].id);
    free(cfg->environments);
    for (size_t i = 0; i < cfg->n_workspaces; i++)
        cs__policy_workspace_clear(&cfg->workspaces[i]);
    free(cfg->workspaces);
    memset(cfg, 0, sizeof *cfg);
}
