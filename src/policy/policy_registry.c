/*
 * policy_registry: the workspace registry (docs/contract/runtime.md section 2): the operator's file
 * (--config), the quick-start workspace (--workspace), lookups and the permission rules.
 *
 * Trust: the file is operator-owned but read like any wire input: parsed by jansson (duplicate
 * keys refused), decoded only through the generated decoder csw_config_registry_decode (the
 * schema is the single description of its shape), then checked semantically: ids and roots
 * without NUL bytes, roots absolute and existing directories (stored canonical, via realpath),
 * environments known, "local" never redefined. Every message names the file and the JSON path.
 * Roots are resolved once at load, opened by a no-follow walk and held as descriptors
 * (base_roots.h); no two roots may overlap.
 *
 * Entry points: cs__policy_registry_load (from cs_config_load), cs__policy_workspace_clear,
 * cs_config_workspace, cs_workspace_can_read / _write / _exec, cs_workspace_is_exec_path,
 * cs_workspace_check.
 */
#define _XOPEN_SOURCE 700

#include "policy.h"
#include "policy_internal.h"
#include "base_remote.h"

#include "base_netallow.h"
#include "base_roots.h"
#include "fs.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

/* Where a message about the registry points: the file and the JSON pointer of the value. */
struct where {
    const char *file;
    char ptr[512];
};

static int oom(struct cs_config_error *err)
{
    return cs__policy_errf(err, "out of memory");
}

/* Appends one RFC 6901 reference token (~ -> ~0, / -> ~1, control bytes -> '?') to w->ptr,
 * truncating with "..." when it does not fit. */
static void ptr_push(struct where *w, const char *tok, size_t n)
{
    size_t len = strlen(w->ptr);
    const size_t cap = sizeof w->ptr;
    if (len + 2 > cap)
        return;
    w->ptr[len++] = '/';
    for (size_t i = 0; i < n; i++) {
        unsigned char b = (unsigned char)tok[i];
        char esc[2] = {(char)b, 0};
        size_t need = 1;
        if (b == '~' || b == '/') {
            esc[0] = '~';
            esc[1] = b == '~' ? '0' : '1';
            need = 2;
        } else if (b < 0x20 || b == 0x7f) {
            esc[0] = '?';
        }
        if (len + need + 4 > cap) {
            memcpy(w->ptr + len, "...", 3);
            len += 3;
            break;
        }
        memcpy(w->ptr + len, esc, need);
        len += need;
    }
    w->ptr[len] = '\0';
}

/* "config FILE: POINTER<suffix>: text" */
#define REG_ERR(err, w, suffix, fmt, ...)                                                          \
    cs__policy_errf((err), "config %s: %s" suffix ": " fmt, (w)->file, (w)->ptr, __VA_ARGS__)

/* Reads and parses the file. Returns a new reference, or NULL with err set. */
static json_t *load_json(const char *path, struct cs_config_error *err)
{
    FILE *f = fopen(path, "re");
    if (!f) {
        cs__policy_errf(err, "config %s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    json_t *j = NULL;
    if (fstat(fileno(f), &st) != 0) {
        cs__policy_errf(err, "config %s: cannot stat: %s", path, strerror(errno));
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        cs__policy_errf(err, "config %s: not a regular file", path);
        goto out;
    }
    json_error_t je;
    /* NUL is allowed inside strings so that it can be refused with a clear message below;
     * duplicate keys are refused: two entries for one workspace id are a mistake. */
    j = json_loadf(f, JSON_ALLOW_NUL | JSON_REJECT_DUPLICATES, &je);
    if (!j)
        cs__policy_errf(err, "config %s: line %d column %d: %s", path, je.line, je.column, je.text);
out:
    fclose(f);
    return j;
}

static enum cs_policy_env_kind env_kind(enum csw_config_registry_environments_value_kind k)
{
    switch (k) {
    case CSW_CONFIG_REGISTRY_ENVIRONMENTS_VALUE_KIND_HOST:
        return CS_POLICY_ENV_HOST;
    case CSW_CONFIG_REGISTRY_ENVIRONMENTS_VALUE_KIND_LINUX_CONTAINER:
        return CS_POLICY_ENV_LINUX_CONTAINER;
    }
    return CS_POLICY_ENV_LINUX_CONTAINER; /* unreachable: fail closed */
}

static enum cs_policy_profile profile_of(enum csw_config_registry_workspaces_value_profile p)
{
    switch (p) {
    case CSW_CONFIG_REGISTRY_WORKSPACES_VALUE_PROFILE_READ_ONLY:
        return CS_POLICY_PROFILE_READ_ONLY;
    case CSW_CONFIG_REGISTRY_WORKSPACES_VALUE_PROFILE_WORKSPACE_WRITE:
        return CS_POLICY_PROFILE_WORKSPACE_WRITE;
    }
    return CS_POLICY_PROFILE_READ_ONLY; /* unreachable: fail closed */
}

static enum cs_policy_network network_of(enum csw_config_registry_workspaces_value_network n)
{
    switch (n) {
    case CSW_CONFIG_REGISTRY_WORKSPACES_VALUE_NETWORK_RESTRICTED:
        return CS_POLICY_NETWORK_RESTRICTED;
    case CSW_CONFIG_REGISTRY_WORKSPACES_VALUE_NETWORK_ENABLED:
        return CS_POLICY_NETWORK_ENABLED;
    case CSW_CONFIG_REGISTRY_WORKSPACES_VALUE_NETWORK_LOOPBACK:
        return CS_POLICY_NETWORK_LOOPBACK;
    }
    return CS_POLICY_NETWORK_RESTRICTED; /* unreachable: fail closed */
}

static bool has_nul(const struct cs_str *s)
{
    return s->s && memchr(s->s, '\0', s->n) != NULL;
}

static const struct cs_config_environment *env_find(const struct cs_config *cfg, const char *id,
                                                    size_t n)
{
    for (size_t i = 0; i < cfg->n_environments; i++) {
        const struct cs_config_environment *e = &cfg->environments[i];
        if (strlen(e->id) == n && memcmp(e->id, id, n) == 0)
            return e;
    }
    return NULL;
}

static int env_add(struct cs_config *cfg, const char *id, enum cs_policy_env_kind kind,
                   struct cs_config_error *err)
{
    struct cs_config_environment *v =
        realloc(cfg->environments, (cfg->n_environments + 1) * sizeof *v);
    if (!v)
        return oom(err);
    cfg->environments = v;
    char *copy = strdup(id);
    if (!copy)
        return oom(err);
    v[cfg->n_environments++] = (struct cs_config_environment){copy, kind};
    return 0;
}

/* Appends *ws to cfg, taking what it owns (released even on failure). */
static int ws_add_take(struct cs_config *cfg, struct cs_workspace *ws, struct cs_config_error *err)
{
    struct cs_workspace *v = realloc(cfg->workspaces, (cfg->n_workspaces + 1) * sizeof *v);
    if (!v) {
        cs__policy_workspace_clear(ws);
        return oom(err);
    }
    cfg->workspaces = v;
    v[cfg->n_workspaces++] = *ws;
    memset(ws, 0, sizeof *ws);
    return 0;
}

void cs__policy_workspace_clear(struct cs_workspace *ws)
{
    free(ws->id);
    free(ws->root);
    free(ws->description);
    if (ws->has_root_fd)
        close(ws->root_fd);
    free(ws->environment);
    for (size_t i = 0; i < ws->n_network_allow; i++)
        free(ws->network_allow[i]);
    free(ws->network_allow);
    for (size_t i = 0; i < ws->n_deny; i++)
        free(ws->deny[i]);
    free(ws->deny);
    cs__policy_remote_clear(&ws->remote);
    memset(ws, 0, sizeof *ws);
}

static int environments_load(struct cs_config *cfg, const struct csw_config_registry *reg,
                             const char *file, struct cs_config_error *err)
{
    for (size_t i = 0; i < reg->environments.n; i++) {
        const struct csw_config_registry_environments_entry *e = &reg->environments.v[i];
        struct where w = {file, "/environments"};
        ptr_push(&w, e->key.s, e->key.n);
        enum cs_policy_env_kind kind = env_kind(e->value.kind);
        if (e->key.n == 0)
            return REG_ERR(err, &w, "", "%s", "empty environment id");
        if (has_nul(&e->key))
            return REG_ERR(err, &w, "", "%s", "environment id contains a NUL byte");
        if (strcmp(e->key.s, CS_POLICY_LOCAL_ENV) == 0) {
            /* "local" is built in; restating it as a host is harmless, anything else is not. */
            if (kind != CS_POLICY_ENV_HOST)
                return REG_ERR(err, &w, "/kind", "%s",
                               "environment \"local\" is built in as kind \"host\" and cannot "
                               "be redefined");
            continue;
        }
        if (env_add(cfg, e->key.s, kind, err) != 0)
            return CS_CONFIG_ERROR;
    }
    return 0;
}

/*
 * Checks that path names an existing directory and returns its canonical absolute path in
 * *canon (malloc'd). what prefixes the message ("config F: /workspaces/x/root" or a flag name).
 */
static int dir_resolve(const char *path, const char *what, struct cs_workspace *ws,
                       struct cs_config_error *err)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        if (errno == ENOENT)
            return cs__policy_errf(err, "%s: does not exist: %s", what, path);
        return cs__policy_errf(err, "%s: cannot access %s: %s", what, path, strerror(errno));
    }
    if (!S_ISDIR(st.st_mode))
        return cs__policy_errf(err, "%s: not a directory: %s", what, path);
    ws->root = realpath(path, NULL);
    if (!ws->root)
        return errno == ENOMEM
                   ? oom(err)
                   : cs__policy_errf(err, "%s: cannot resolve %s: %s", what, path, strerror(errno));
    /* Held from now on: opened by a no-follow walk of the canonical path, so what is held is
     * the directory the operator named, whatever happens to its ancestors later. */
    int fd = cs_roots_walk(ws->root);
    if (fd < 0)
        return cs__policy_errf(err, "%s: cannot open %s without following a symlink: %s", what,
                               ws->root, strerror(errno));
    ws->root_fd = fd;
    ws->has_root_fd = true;
    return 0;
}

/*
 * The root of a workspace on a remote worker (docs/scale-out.md): the worker's path, which need
 * not exist here and is never opened here. It must already be canonical, since the worker
 * compares it byte for byte with the roots it was started with: absolute, no empty, "." or ".."
 * component, no trailing '/'. Kept as given in ws->root; no descriptor.
 */
static int remote_root_take(const char *path, const char *what, struct cs_workspace *ws,
                            struct cs_config_error *err)
{
    size_t n = strlen(path);
    bool ok = path[0] == '/' && (n == 1 || path[n - 1] != '/') && !strstr(path, "//") &&
              !strstr(path, "/./") && !strstr(path, "/../");
    if (ok && n >= 2 && strcmp(path + n - 2, "/.") == 0)
        ok = false;
    if (ok && n >= 3 && strcmp(path + n - 3, "/..") == 0)
        ok = false;
    if (!ok)
        return cs__policy_errf(err,
                               "%s: a remote workspace's root is the worker's path and must be "
                               "canonical (no '//', '.' or '..' component, no trailing '/'): %s",
                               what, path);
    ws->root = strdup(path);
    return ws->root ? 0 : oom(err);
}

/* Whether root a is b or lies inside it (both canonical). */
static bool root_within(const char *a, const char *b)
{
    size_t n = strlen(b);
    if (strcmp(b, "/") == 0)
        return true;
    return strncmp(a, b, n) == 0 && (a[n] == '\0' || a[n] == '/');
}

/* docs/contract/runtime.md section 2: no root may be equal to, inside, or contain another. */
static int roots_disjoint(const struct cs_config *cfg, struct cs_config_error *err)
{
    for (size_t i = 0; i < cfg->n_workspaces; i++)
        for (size_t j = i + 1; j < cfg->n_workspaces; j++) {
            const struct cs_workspace *a = &cfg->workspaces[i], *b = &cfg->workspaces[j];
            const char *how = strcmp(a->root, b->root) == 0   ? "is the same directory as"
                              : root_within(a->root, b->root) ? "is inside"
                              : root_within(b->root, a->root) ? "contains"
                                                              : NULL;
            if (how)
                return cs__policy_errf(err,
                                       "workspace roots overlap: \"%s\" (%s) %s \"%s\" (%s); a "
                                       "root may not be equal to, inside or contain another",
                                       a->id, a->root, how, b->id, b->root);
        }
    return 0;
}

/* The defaults of a workspace: the configuration's processes and limits (flags, variables). */
static void ws_defaults(const struct cs_config *cfg, struct cs_workspace *ws)
{
    ws->processes = cfg->processes;
    ws->limits.timeout_ms = cfg->process_timeout_secs * 1000;
    ws->limits.max_live_processes = cfg->max_processes;
    ws->limits.output_ring_bytes = cfg->output_ring_bytes;
    ws->limits.deny_scan_entries = CS_FS_DENY_SCAN_CAP;
}

/*
 * description, processes and limits of a registry entry (docs/operations.md, "Process limits"):
 * each limit in its bounds, else the load fails naming its JSON path. The description's length
 * (at most 200 characters) is the schema's; a NUL byte is refused here.
 */
static int settings_load(const struct csw_config_registry_workspaces_value *v, struct where *w,
                         struct cs_workspace *ws, struct cs_config_error *err)
{
    if (v->has_description) {
        if (has_nul(&v->description))
            return REG_ERR(err, w, "/description", "%s", "contains a NUL byte");
        ws->description = strndup(v->description.s, v->description.n);
        if (!ws->description)
            return oom(err);
    }
    if (v->has_processes)
        ws->processes = v->processes == CSW_CONFIG_REGISTRY_WORKSPACES_VALUE_PROCESSES_SHARED
                            ? CS_WORKSPACE_PROCESSES_SHARED
                            : CS_WORKSPACE_PROCESSES_EXCLUSIVE;
    if (!v->has_limits)
        return 0;
    const struct csw_config_registry_workspaces_value_limits *l = &v->limits;
    if (l->has_timeout_ms) {
        if (l->timeout_ms != 0 &&
            (l->timeout_ms < CS_POLICY_MIN_TIMEOUT_MS || l->timeout_ms > CS_POLICY_MAX_TIMEOUT_MS))
            return REG_ERR(err, w, "/limits/timeout_ms",
                           "expected 0 (no time limit) or %d..%lld milliseconds, got %lld",
                           CS_POLICY_MIN_TIMEOUT_MS, (long long)CS_POLICY_MAX_TIMEOUT_MS,
                           (long long)l->timeout_ms);
        ws->limits.timeout_ms = l->timeout_ms;
    }
    if (l->has_max_live_processes) {
        if (l->max_live_processes < 1 || l->max_live_processes > CS_POLICY_MAX_PROCS)
            return REG_ERR(err, w, "/limits/max_live_processes",
                           "expected 1..%d live processes, got %lld", CS_POLICY_MAX_PROCS,
                           (long long)l->max_live_processes);
        ws->limits.max_live_processes = l->max_live_processes;
    }
    if (l->has_output_ring_bytes) {
        if (l->output_ring_bytes < CS_POLICY_MIN_RING_BYTES ||
            l->output_ring_bytes > CS_POLICY_MAX_RING_BYTES)
            return REG_ERR(err, w, "/limits/output_ring_bytes", "expected %d..%d bytes, got %lld",
                           CS_POLICY_MIN_RING_BYTES, CS_POLICY_MAX_RING_BYTES,
                           (long long)l->output_ring_bytes);
        ws->limits.output_ring_bytes = l->output_ring_bytes;
    }
    if (l->has_deny_scan_entries) {
        if (l->deny_scan_entries < CS_FS_DENY_SCAN_MIN ||
            l->deny_scan_entries > CS_FS_DENY_SCAN_MAX)
            return REG_ERR(err, w, "/limits/deny_scan_entries",
                           "expected %d..%d files and directories, got %lld", CS_FS_DENY_SCAN_MIN,
                           CS_FS_DENY_SCAN_MAX, (long long)l->deny_scan_entries);
        ws->limits.deny_scan_entries = l->deny_scan_entries;
    }
    return 0;
}

static int workspace_load(struct cs_config *cfg,
                          const struct csw_config_registry_workspaces_entry *e, const char *file,
                          struct cs_config_error *err)
{
    const struct csw_config_registry_workspaces_value *v = &e->value;
    struct cs_workspace ws;
    memset(&ws, 0, sizeof ws);
    struct where w = {file, "/workspaces"};
    char q[256], what[1024];
    int rc = CS_CONFIG_ERROR;

    ptr_push(&w, e->key.s, e->key.n);
    if (e->key.n == 0) {
        REG_ERR(err, &w, "", "%s", "empty workspace id (an empty workspace_id means none)");
        goto out;
    }
    if (has_nul(&e->key)) {
        REG_ERR(err, &w, "", "%s", "workspace id contains a NUL byte");
        goto out;
    }
    ws.id = strdup(e->key.s);
    ws.id_len = e->key.n;
    if (!ws.id) {
        rc = oom(err);
        goto out;
    }

    /* root: absolute, an existing directory; stored canonical. */
    if (has_nul(&v->root)) {
        REG_ERR(err, &w, "/root", "%s", "contains a NUL byte");
        goto out;
    }
    if (v->root.n == 0 || v->root.s[0] != '/') {
        REG_ERR(err, &w, "/root", "must be an absolute path, got %s",
                cs__policy_quote(q, sizeof q, v->root.s, v->root.n));
        goto out;
    }
    snprintf(what, sizeof what, "config %s: %s/root", file, w.ptr);
    /* A workspace held by a remote worker (its own runner, or the gateway's tcp:// one) is not
     * opened here: the worker holds it. */
    if (v->has_runner || cfg->runner == CS_CONFIG_RUNNER_TCP
            ? remote_root_take(v->root.s, what, &ws, err) != 0
            : dir_resolve(v->root.s, what, &ws, err) != 0)
        goto out;

    ws.profile = profile_of(v->profile);
    ws.network = network_of(v->network);
    ws_defaults(cfg, &ws);
    if (settings_load(v, &w, &ws, err) != 0)
        goto out;

    /* environment: "local" unless given; must be registered. */
    const char *env = v->environment.s ? v->environment.s : CS_POLICY_LOCAL_ENV;
    size_t env_n = v->environment.s ? v->environment.n : strlen(CS_POLICY_LOCAL_ENV);
    const struct cs_config_environment *found = env_find(cfg, env, env_n);
    if (!found) {
        REG_ERR(err, &w, "/environment", "unknown environment %s",
                cs__policy_quote(q, sizeof q, env, env_n));
        goto out;
    }
    ws.environment = strdup(found->id);
    if (!ws.environment) {
        rc = oom(err);
        goto out;
    }
    ws.env_kind = found->kind;

    /* runner: a remote worker for this workspace (docs/scale-out.md); the URL, the pin and the
     * PSK identity are checked here, the TLS files and the key file when the runner starts. */
    if (v->has_runner) {
        const struct csw_config_registry_workspaces_value_runner *rn = &v->runner;
        char uhost[CS_RUNNER_URL_HOST_MAX], uport[CS_RUNNER_URL_PORT_MAX];
        bool tls_any = rn->has_tls_cert || rn->has_tls_key || rn->has_tls_peer_sha256;
        bool tls_all = rn->has_tls_cert && rn->has_tls_key && rn->has_tls_peer_sha256;
        bool psk_any = rn->has_tls_psk_file || rn->has_tls_psk_identity;
        bool psk_all = rn->has_tls_psk_file && rn->has_tls_psk_identity;
        bool plain = rn->has_plaintext && rn->plaintext;
        if (has_nul(&rn->url) || cs_runner_url_parse(rn->url.s, uhost, uport) != 0) {
            REG_ERR(err, &w, "/runner/url", "expected tcp://HOST:PORT, got %s",
                    cs__policy_quote(q, sizeof q, rn->url.s, rn->url.n));
            goto out;
        }
        if (plain ? tls_any || psk_any : tls_any && psk_any) {
            REG_ERR(err, &w, "/runner", "%s",
                    plain ? "plaintext, yet a tls_* key is given"
                          : "certificates (tls_cert, tls_key, tls_peer_sha256) and a pre-shared "
                            "key (tls_psk_file, tls_psk_identity) are two modes: give one");
            goto out;
        }
        if (!plain && (psk_any ? !psk_all : !tls_all)) {
            REG_ERR(err, &w, "/runner", "%s",
                    psk_any ? "needs tls_psk_file and tls_psk_identity"
                            : "needs tls_cert, tls_key and tls_peer_sha256, or tls_psk_file and "
                              "tls_psk_identity (or plaintext: true)");
            goto out;
        }
        if (rn->has_tls_psk_identity &&
            (has_nul(&rn->tls_psk_identity) || !cs_tls_psk_identity_ok(rn->tls_psk_identity.s))) {
            REG_ERR(err, &w, "/runner/tls_psk_identity", "%s",
                    "expected 1..128 bytes of [A-Za-z0-9._:@-]");
            goto out;
        }
        if (rn->has_tls_peer_sha256 &&
            (has_nul(&rn->tls_peer_sha256) ||
             cs_tls_pin_parse(rn->tls_peer_sha256.s, ws.remote.pin) != 0)) {
            REG_ERR(err, &w, "/runner/tls_peer_sha256", "%s",
                    "expected 64 hex digits (pairs may be split by ':')");
            goto out;
        }
        if ((rn->has_tls_cert && has_nul(&rn->tls_cert)) ||
            (rn->has_tls_key && has_nul(&rn->tls_key)) ||
            (rn->has_tls_psk_file && has_nul(&rn->tls_psk_file))) {
            REG_ERR(err, &w, "/runner", "%s", "a TLS file name contains a NUL byte");
            goto out;
        }
        ws.has_runner = true;
        ws.remote.plaintext = plain;
        ws.remote.url = strdup(rn->url.s);
        ws.remote.cert = rn->has_tls_cert ? strdup(rn->tls_cert.s) : NULL;
        ws.remote.key = rn->has_tls_key ? strdup(rn->tls_key.s) : NULL;
        ws.remote.psk = rn->has_tls_psk_file ? strdup(rn->tls_psk_file.s) : NULL;
        ws.remote.psk_identity = rn->has_tls_psk_identity ? strdup(rn->tls_psk_identity.s) : NULL;
        if (!ws.remote.url || (rn->has_tls_cert && !ws.remote.cert) ||
            (rn->has_tls_key && !ws.remote.key) || (rn->has_tls_psk_file && !ws.remote.psk) ||
            (rn->has_tls_psk_identity && !ws.remote.psk_identity)) {
            rc = oom(err);
            goto out;
        }
    }

    /* network_allow: each entry validated, then kept as given (the proxy reads it; it only
     * matters for "enabled"). Absent and [] stay distinct: public only versus nothing. */
    if (v->has_network_allow) {
        ws.has_network_allow = true;
        if (v->network_allow.n) {
            ws.network_allow = calloc(v->network_allow.n, sizeof *ws.network_allow);
            if (!ws.network_allow) {
                rc = oom(err);
                goto out;
            }
        }
        for (size_t i = 0; i < v->network_allow.n; i++) {
            const struct cs_str *a = &v->network_allow.v[i];
            if (has_nul(a)) {
                REG_ERR(err, &w, "/network_allow/%zu", "%s", i, "contains a NUL byte");
                goto out;
            }
            /* The parser the sandbox helper's proxy runs: what loads here is what it enforces,
             * and a typo ("http://x", "*", "x:0") stops the start instead of admitting
             * something else or nothing. */
            struct cs_netallow_entry parsed;
            const char *why = NULL;
            if (cs_netallow_entry_parse(a->s, a->n, &parsed, &why) < 0) {
                REG_ERR(err, &w, "/network_allow/%zu",
                        "invalid entry %s: %s (expected a host name, *.domain or IP literal, "
                        "with an optional :port from 1 to 65535)",
                        i, cs__policy_quote(q, sizeof q, a->s ? a->s : "", a->n), why);
                goto out;
            }
            ws.network_allow[i] = strdup(a->s ? a->s : "");
            if (!ws.network_allow[i]) {
                rc = oom(err);
                goto out;
            }
            ws.n_network_allow = i + 1;
        }
    }
    /* deny: each rule checked by the matcher the file tools and the sandbox use, so what loads
     * is what is enforced, and a typo stops the start instead of protecting nothing. */
    if (v->has_deny && v->deny.n > 0) {
        if (v->deny.n > CS_FS_DENY_MAX_RULES) {
            REG_ERR(err, &w, "/deny", "%zu rules; at most %d are allowed", v->deny.n,
                    CS_FS_DENY_MAX_RULES);
            goto out;
        }
        ws.deny = calloc(v->deny.n, sizeof *ws.deny);
        if (!ws.deny) {
            rc = oom(err);
            goto out;
        }
        for (size_t i = 0; i < v->deny.n; i++) {
            const struct cs_str *a = &v->deny.v[i];
            const char *why = "invalid";
            if (!cs_fs_deny_rule_valid(a->s, a->n, &why)) {
                REG_ERR(err, &w, "/deny/%zu",
                        "invalid deny rule %s: %s (expected a gitignore-style glob relative to "
                        "the root, such as \".env\", \"**/*.pem\" or \"secrets/\")",
                        i, cs__policy_quote(q, sizeof q, a->s ? a->s : "", a->n), why);
                goto out;
            }
            ws.deny[i] = strndup(a->s, a->n);
            if (!ws.deny[i]) {
                rc = oom(err);
                goto out;
            }
            ws.n_deny = i + 1;
        }
    }
    rc = ws_add_take(cfg, &ws, err);
out:
    cs__policy_workspace_clear(&ws);
    return rc;
}

/* The quick start: dir becomes workspace "default", workspace-write, restricted, local. */
static int quick_start(struct cs_config *cfg, const char *dir, const char *source, const char *file,
                       struct cs_config_error *err)
{
    struct cs_workspace ws;
    memset(&ws, 0, sizeof ws);
    int rc = CS_CONFIG_ERROR;
    const char *id = CS_POLICY_QUICK_START_ID;

    if (cs_config_workspace(cfg, id, strlen(id))) {
        cs__policy_errf(err,
                        "%s registers workspace \"%s\", which config %s also defines at "
                        "/workspaces/%s; rename one of them",
                        source, id, file ? file : "", id);
        goto out;
    }
    if (cfg->runner == CS_CONFIG_RUNNER_TCP ? remote_root_take(dir, source, &ws, err) != 0
                                            : dir_resolve(dir, source, &ws, err) != 0)
        goto out;
    ws.id = strdup(id);
    ws.id_len = strlen(id);
    ws.environment = strdup(CS_POLICY_LOCAL_ENV);
    if (!ws.id || !ws.environment) {
        rc = oom(err);
        goto out;
    }
    ws.profile = CS_POLICY_PROFILE_WORKSPACE_WRITE;
    ws.env_kind = CS_POLICY_ENV_HOST;
    ws.network = CS_POLICY_NETWORK_RESTRICTED;
    ws_defaults(cfg, &ws);
    rc = ws_add_take(cfg, &ws, err);
out:
    cs__policy_workspace_clear(&ws);
    return rc;
}

/*
 * Refuses the first object key the schema does not describe, walking the document along the
 * generated type tables (so the schema stays the one description of the shape): object fields,
 * map values and array items. Values of the wrong type are left to the decoder, which reports
 * them with the same pointer style. Returns 0 or CS_CONFIG_ERROR with err naming the key.
 */
static int unknown_keys_at(const json_t *j, const struct cs_wire_type *t, struct where *w,
                           struct cs_config_error *err)
{
    char q[256];
    size_t mark = strlen(w->ptr);
    switch (t->kind) {
    case CS_WIRE_OBJECT: {
        if (!json_is_object(j))
            return 0;
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)j, key, v)
        {
            const struct cs_wire_field *f = NULL;
            for (size_t i = 0; i < t->obj->nfields; i++)
                if (strcmp(t->obj->fields[i].name, key) == 0)
                    f = &t->obj->fields[i];
            ptr_push(w, key, strlen(key));
            if (!f)
                return cs__policy_errf(err,
                                       "config %s: %s: unknown key %s (misspelled? unknown "
                                       "keys are refused so that no setting is silently "
                                       "ignored)",
                                       w->file, w->ptr,
                                       cs__policy_quote(q, sizeof q, key, strlen(key)));
            if (unknown_keys_at(v, f->type, w, err) != 0)
                return CS_CONFIG_ERROR;
            w->ptr[mark] = '\0';
        }
        return 0;
    }
    case CS_WIRE_JSON:
        return 0; /* an open value: any keys */
    case CS_WIRE_MAP: {
        if (!json_is_object(j))
            return 0;
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)j, key, v)
        {
            ptr_push(w, key, strlen(key));
            if (unknown_keys_at(v, t->item, w, err) != 0)
                return CS_CONFIG_ERROR;
            w->ptr[mark] = '\0';
        }
        return 0;
    }
    case CS_WIRE_ARRAY: {
        if (!json_is_array(j))
            return 0;
        size_t i;
        json_t *v;
        json_array_foreach(j, i, v)
        {
            char idx[32];
            int l = snprintf(idx, sizeof idx, "%zu", i);
            ptr_push(w, idx, (size_t)l);
            if (unknown_keys_at(v, t->item, w, err) != 0)
                return CS_CONFIG_ERROR;
            w->ptr[mark] = '\0';
        }
        return 0;
    }
    case CS_WIRE_STRING:
    case CS_WIRE_NSTRING:
    case CS_WIRE_INT:
    case CS_WIRE_BOOL:
    case CS_WIRE_ENUM:
    case CS_WIRE_CONST:
    case CS_WIRE_UNION: /* the registry has none; the decoder checks the rest */
        break;
    }
    return 0;
}

static int unknown_keys(const json_t *doc, const struct cs_wire_type *t, const char *file,
                        struct cs_config_error *err)
{
    struct where w = {file, ""};
    return unknown_keys_at(doc, t, &w, err);
}

int cs__policy_registry_load(struct cs_config *cfg, const char *path, const char *ws_dir,
                             const char *ws_source, struct cs_config_error *err)
{
    struct csw_config_registry reg;
    memset(&reg, 0, sizeof reg);
    json_t *doc = NULL;
    int rc = CS_CONFIG_ERROR;

    if (env_add(cfg, CS_POLICY_LOCAL_ENV, CS_POLICY_ENV_HOST, err) != 0)
        goto out;
    if (path) {
        doc = load_json(path, err);
        if (!doc)
            goto out;
        /* docs/contract/runtime.md §2: an unknown key anywhere fails the load (the wire decoder
         * ignores unknown properties by design; the registry is stricter, so that a misspelled
         * "deny" or "network_allow" cannot silently protect nothing). */
        if (unknown_keys(doc, &csw_config_registry_type, path, err) != 0)
            goto out;
        struct cs_wire_diag diag;
        enum cs_wire_status st = csw_config_registry_decode(doc, &reg, &diag);
        if (st == CS_WIRE_NOMEM) {
            oom(err);
            goto out;
        }
        if (st != CS_WIRE_OK) {
            char buf[600];
            cs__policy_errf(err, "config %s: %s", path,
                            cs_wire_diag_format(&diag, buf, sizeof buf));
            goto out;
        }
        /* Environments first: a workspace may name one defined after it in the file. */
        if (environments_load(cfg, &reg, path, err) != 0)
            goto out;
        for (size_t i = 0; i < reg.workspaces.n; i++) {
            if (workspace_load(cfg, &reg.workspaces.v[i], path, err) != 0)
                goto out;
        }
    }
    if (ws_dir && quick_start(cfg, ws_dir, ws_source, path, err) != 0)
        goto out;
    if (roots_disjoint(cfg, err) != 0)
        goto out;
    rc = 0;
out:
    csw_config_registry_free(&reg);
    json_decref(doc);
    return rc;
}

/* ---- lookups and permissions ---- */

const struct cs_workspace *cs_config_workspace(const struct cs_config *cfg, const char *id,
                                               size_t id_len)
{
    if (!id)
        return NULL;
    for (size_t i = 0; i < cfg->n_workspaces; i++) {
        const struct cs_workspace *ws = &cfg->workspaces[i];
        if (ws->id_len == id_len && memcmp(ws->id, id, id_len) == 0)
            return ws;
    }
    return NULL;
}

bool cs_workspace_can_read(const struct cs_workspace *ws)
{
    switch (ws->profile) {
    case CS_POLICY_PROFILE_READ_ONLY:
    case CS_POLICY_PROFILE_WORKSPACE_WRITE:
        return true;
    }
    return false;
}

bool cs_workspace_can_write(const struct cs_workspace *ws)
{
    switch (ws->profile) {
    case CS_POLICY_PROFILE_READ_ONLY:
        return false;
    case CS_POLICY_PROFILE_WORKSPACE_WRITE:
        return true;
    }
    return false;
}

bool cs_workspace_can_exec(const struct cs_workspace *ws)
{
    /* The same grant as write: a command can write anything the workspace can. */
    return cs_workspace_can_write(ws);
}

bool cs_workspace_is_exec_path(const struct cs_workspace *ws)
{
    switch (ws->env_kind) {
    case CS_POLICY_ENV_HOST:
        return true;
    case CS_POLICY_ENV_LINUX_CONTAINER:
        return false;
    }
    return false;
}

static const char *profile_name(enum cs_policy_profile p)
{
    switch (p) {
    case CS_POLICY_PROFILE_READ_ONLY:
        return "read-only";
    case CS_POLICY_PROFILE_WORKSPACE_WRITE:
        return "workspace-write";
    }
    return "?";
}

int cs_workspace_check(const struct cs_workspace *ws, enum cs_policy_access access,
                       struct cs_diag *diag)
{
    _Static_assert(CSW_ERROR_UNAUTHORIZED != 0, "0 means allowed");
    const char *verb = "read";
    bool allowed = false;
    char qid[128], qenv[128];
    switch (access) {
    case CS_POLICY_ACCESS_READ:
        allowed = cs_workspace_can_read(ws);
        break;
    case CS_POLICY_ACCESS_WRITE:
        verb = "write";
        allowed = cs_workspace_can_write(ws);
        break;
    case CS_POLICY_ACCESS_EXEC:
        verb = "exec";
        allowed = cs_workspace_can_exec(ws);
        break;
    }
    /* The environment first: a linux-container workspace fails closed whatever its profile. */
    if (!cs_workspace_is_exec_path(ws)) {
        return cs_diag_set(
            diag, CSW_ERROR_UNAUTHORIZED,
            "workspace %s: environment %s (linux-container) is registered but not an exec path",
            cs__policy_quote(qid, sizeof qid, ws->id, ws->id_len),
            cs__policy_quote(qenv, sizeof qenv, ws->environment, strlen(ws->environment)));
    }
    if (!allowed) {
        return cs_diag_set(
            diag, CSW_ERROR_UNAUTHORIZED, "workspace %s: profile %s does not permit %s",
            cs__policy_quote(qid, sizeof qid, ws->id, ws->id_len), profile_name(ws->profile), verb);
    }
    return 0;
}
