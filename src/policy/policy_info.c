/*
 * policy_info: the pure builder of the workspace_info result (docs/contract/tools.md section 4).
 *
 * Trust: cfg and caps come from the gateway (trusted); in->workspace_id comes from the client
 * and is only compared byte for byte against the registry (a NUL byte or any other content
 * simply matches nothing). Nothing here touches the file system: the root is the canonical path
 * resolved at load time.
 *
 * What is reported is the effective contract, never more than what holds: an operation is
 * "available" only when the profile permits it, the runner implements it and the environment is
 * an exec path; sandboxing and network enforcement come from the sandbox probe alone.
 *
 * Entry point: cs_policy_workspace_info.
 */
#include "policy.h"
#include "base_remote.h"
#include "policy_internal.h"
#include "fs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(CSW_ERROR_WORKSPACE_NOT_FOUND != 0 && CSW_ERROR_INTERNAL != 0,
               "0 means success for cs_policy_workspace_info");

static const char *const transports[] = {"stdio", "streamable-http"};

static int set_str(struct cs_str *s, const char *src)
{
    return cs_str_set_n(s, src, strlen(src));
}

/* runner "remote": the worker's identity (docs/scale-out.md), its HOST:PORT and either its
 * certificate pin (certificate mode) or the key's identity (PSK mode); never a credential. */
static int set_worker(struct csw_mcp_workspace_info_output_execution_isolation *iso,
                      const struct cs_remote *rm)
{
    char host[CS_RUNNER_URL_HOST_MAX], port[CS_RUNNER_URL_PORT_MAX];
    char addr[CS_RUNNER_URL_HOST_MAX + CS_RUNNER_URL_PORT_MAX + 1] = "";
    char pin[2 * sizeof rm->pin + 1] = "";
    if (cs_runner_url_parse(rm->url, host, port) == 0)
        snprintf(addr, sizeof addr, "%s:%s", host, port);
    for (size_t i = 0; i < sizeof rm->pin; i++)
        snprintf(pin + 2 * i, 3, "%02x", rm->pin[i]);
    iso->runner = CSW_MCP_WORKSPACE_INFO_OUTPUT_EXECUTION_ISOLATION_RUNNER_REMOTE;
    iso->has_worker = true;
    if (set_str(&iso->worker.address, addr) != 0)
        return -1;
    iso->worker.has_certificate_sha256 = !rm->plaintext && !rm->psk;
    if (iso->worker.has_certificate_sha256 && set_str(&iso->worker.certificate_sha256, pin) != 0)
        return -1;
    iso->worker.has_psk_identity = !rm->plaintext && rm->psk && rm->psk_identity;
    if (iso->worker.has_psk_identity && set_str(&iso->worker.psk_identity, rm->psk_identity) != 0)
        return -1;
    return 0;
}

/* Fills an array field of n strings: *v gets the allocation, *count is set at once so that the
 * generated free releases a half-filled array. Returns 0 or -1 on OOM. */
static int set_strings(struct cs_str **v, size_t *count, const char *const *src, size_t n)
{
    if (n == 0)
        return 0;
    *v = cs_wire_malloc(n * sizeof **v);
    if (!*v)
        return -1;
    memset(*v, 0, n * sizeof **v);
    *count = n;
    for (size_t i = 0; i < n; i++) {
        if (set_str(&(*v)[i], src[i]) != 0)
            return -1;
    }
    return 0;
}

static void fill_environment(struct csw_mcp_workspace_info_output_execution_environment *e,
                             const struct cs_workspace *ws)
{
    bool exec_path = cs_workspace_is_exec_path(ws);
    switch (ws->env_kind) {
    case CS_POLICY_ENV_HOST:
        e->kind = CSW_MCP_WORKSPACE_INFO_OUTPUT_EXECUTION_ENVIRONMENT_KIND_HOST;
        break;
    case CS_POLICY_ENV_LINUX_CONTAINER:
        e->kind = CSW_MCP_WORKSPACE_INFO_OUTPUT_EXECUTION_ENVIRONMENT_KIND_LINUX_CONTAINER;
        break;
    }
    /* host: everything supported; linux-container: registered but fails closed. */
    e->exec_supported = exec_path;
    e->file_read_supported = exec_path;
    e->file_write_supported = exec_path;
}

static void fill_process(struct csw_mcp_workspace_info_output_execution_process *p,
                         const struct cs_workspace *ws, const struct cs_runtime_caps *caps)
{
    p->available =
        cs_workspace_can_exec(ws) && caps->process_available && cs_workspace_is_exec_path(ws);
    if (!p->available)
        return;
    p->has_capabilities = true;
    struct csw_mcp_workspace_info_output_execution_process_capabilities *c = &p->capabilities;
    c->handles = true;
    c->survives_request_end = true;
    c->write_stdin = true;
    c->incremental_read = true;
    c->terminate = true;
    c->output_combined = true;
    c->tty.supported = caps->tty_supported;
    c->tty.initial_rows = CS_POLICY_TTY_ROWS;
    c->tty.initial_cols = CS_POLICY_TTY_COLS;
    c->tty.resize_supported = true;
    /* The workspace's own limits, as the runner enforces them on each of its commands. */
    c->limits.max_live_processes = ws->limits.max_live_processes;
    c->limits.timeout_ms = ws->limits.timeout_ms;
    c->limits.output_ring_bytes = ws->limits.output_ring_bytes;
}

/* Fills execution (no allocation but permissions.deny and network.allow). Returns 0 or -1 on
 * OOM. */
static int fill_execution(struct csw_mcp_workspace_info_output_execution *x,
                          const struct cs_workspace *ws, const struct cs_runtime_caps *caps)
{
    bool exec_path = cs_workspace_is_exec_path(ws);
    fill_environment(&x->environment, ws);

    x->permissions.read = cs_workspace_can_read(ws);
    x->permissions.write = cs_workspace_can_write(ws);
    x->permissions.exec = cs_workspace_can_exec(ws);
    /* docs/contract/tools.md §5: the model knows what it cannot see (absent when no rules). */
    x->permissions.has_deny = ws->n_deny > 0;
    if (set_strings(&x->permissions.deny.v, &x->permissions.deny.n, (const char *const *)ws->deny,
                    ws->n_deny) != 0)
        return -1;
    /* What the rules do not cover, word for word as docs/security-model.md states it. */
    x->permissions.has_deny_limits = ws->n_deny > 0;
    if (ws->n_deny > 0) {
        const char *limits[CS_FS_DENY_N_LIMITS];
        char scan[256];
        memcpy(limits, cs_fs_deny_limits, sizeof limits);
        cs_fs_deny_limit_scan_text((size_t)ws->limits.deny_scan_entries, scan, sizeof scan);
        limits[CS_FS_DENY_LIMIT_SCAN] = scan; /* with this workspace's cap */
        if (set_strings(&x->permissions.deny_limits.v, &x->permissions.deny_limits.n, limits,
                        CS_FS_DENY_N_LIMITS) != 0)
            return -1;
    }

    x->files.read.available = x->permissions.read && caps->files_available && exec_path;
    x->files.find.available = x->permissions.read && caps->files_available && exec_path;
    x->files.patch.available = x->permissions.write && caps->patch_available && exec_path;
    x->files.capabilities.read_max_bytes = CS_POLICY_READ_MAX_BYTES;
    x->files.capabilities.find_max_paths = CS_POLICY_FIND_MAX_PATHS;

    fill_process(&x->process, ws, caps);

    x->serialization.max_waiters_per_resource = CS_POLICY_MAX_WAITERS;
    switch (ws->processes) {
    case CS_WORKSPACE_PROCESSES_EXCLUSIVE:
        x->serialization.process_conflict =
            CSW_MCP_WORKSPACE_INFO_OUTPUT_EXECUTION_SERIALIZATION_PROCESS_CONFLICT_REJECT;
        break;
    case CS_WORKSPACE_PROCESSES_SHARED:
        x->serialization.process_conflict =
            CSW_MCP_WORKSPACE_INFO_OUTPUT_EXECUTION_SERIALIZATION_PROCESS_CONFLICT_SHARE;
        break;
    }

    /* A workspace on a remote worker reports that worker's own probe, as its last hello said
     * (docs/security-model.md R17); this process's probe says nothing about it. */
    bool remote = ws->has_runner || caps->remote;
    struct cs_worker_isolation none = {0};
    struct cs_worker_isolation local = {
        caps->sandbox, caps->has_landlock_abi ? caps->landlock_abi : 0, caps->syscall_denials};
    const struct cs_worker_isolation *iso = !remote ? &local : caps->worker ? caps->worker : &none;
    x->isolation.command_sandbox =
        iso->sandbox
            ? CSW_MCP_WORKSPACE_INFO_OUTPUT_EXECUTION_ISOLATION_COMMAND_SANDBOX_LINUX_SANDBOX
            : CSW_MCP_WORKSPACE_INFO_OUTPUT_EXECUTION_ISOLATION_COMMAND_SANDBOX_NONE;
    x->isolation.runner = caps->uds_runner
                              ? CSW_MCP_WORKSPACE_INFO_OUTPUT_EXECUTION_ISOLATION_RUNNER_UDS
                              : CSW_MCP_WORKSPACE_INFO_OUTPUT_EXECUTION_ISOLATION_RUNNER_IN_PROCESS;
    if (ws->has_runner) {
        /* Its own worker (docs/scale-out.md): its identity, never a credential. */
        if (set_worker(&x->isolation, &ws->remote) != 0)
            return -1;
    } else if (caps->remote && set_worker(&x->isolation, caps->remote) != 0) {
        return -1;
    }
    x->isolation.has_landlock_abi =
        remote ? iso->sandbox && iso->landlock_abi > 0 : caps->has_landlock_abi;
    x->isolation.landlock_abi = x->isolation.has_landlock_abi ? iso->landlock_abi : 0;
    /* docs/contract/tools.md §6: only the kinds the helper really learns of here. Network refusals
     * come from the proxy (an enabled workspace); system calls from seccomp user notification;
     * file system refusals are never claimed (the kernel does not tell the helper). */
    if (iso->sandbox) {
        enum csw_mcp_workspace_info_output_execution_isolation_denial_reports_item k[2];
        size_t nk = 0;
        /* loopback: a connect that cannot leave is reported (no_route) by the same user
         * notification that reports system calls */
        if (ws->network == CS_POLICY_NETWORK_ENABLED ||
            (ws->network == CS_POLICY_NETWORK_LOOPBACK && iso->syscall_denials))
            k[nk++] = CSW_MCP_WORKSPACE_INFO_OUTPUT_EXECUTION_ISOLATION_DENIAL_REPORTS_ITEM_NETWORK;
        if (iso->syscall_denials)
            k[nk++] = CSW_MCP_WORKSPACE_INFO_OUTPUT_EXECUTION_ISOLATION_DENIAL_REPORTS_ITEM_SYSCALL;
        x->isolation.has_denial_reports = true;
        if (nk > 0) {
            x->isolation.denial_reports.v = cs_wire_malloc(nk * sizeof k[0]);
            if (!x->isolation.denial_reports.v)
                return -1;
            memcpy(x->isolation.denial_reports.v, k, nk * sizeof k[0]);
            x->isolation.denial_reports.n = nk;
        }
    }

    switch (ws->network) {
    case CS_POLICY_NETWORK_RESTRICTED:
        x->network.policy = CSW_MCP_WORKSPACE_INFO_OUTPUT_EXECUTION_NETWORK_POLICY_RESTRICTED;
        break;
    case CS_POLICY_NETWORK_ENABLED:
        x->network.policy = CSW_MCP_WORKSPACE_INFO_OUTPUT_EXECUTION_NETWORK_POLICY_ENABLED;
        break;
    case CS_POLICY_NETWORK_LOOPBACK:
        x->network.policy = CSW_MCP_WORKSPACE_INFO_OUTPUT_EXECUTION_NETWORK_POLICY_LOOPBACK;
        break;
    }
    /* The same probe that decides how commands spawn decides what is claimed here. */
    x->network.enforcement =
        iso->sandbox ? CSW_MCP_WORKSPACE_INFO_OUTPUT_EXECUTION_NETWORK_ENFORCEMENT_ENFORCED
                     : CSW_MCP_WORKSPACE_INFO_OUTPUT_EXECUTION_NETWORK_ENFORCEMENT_NONE;
    x->network.has_allow = ws->has_network_allow;
    if (ws->has_network_allow &&
        set_strings(&x->network.allow.v, &x->network.allow.n,
                    (const char *const *)ws->network_allow, ws->n_network_allow) != 0)
        return -1;
    return 0;
}

/* Refuses caps and limits the output schema would refuse, naming the field. Returns 0 or -1. */
static int caps_check(const struct cs_runtime_caps *caps, const struct cs_workspace *ws,
                      bool process, struct cs_diag *diag)
{
    const char *bad = NULL;
    if ((caps->has_landlock_abi && caps->landlock_abi < 0) ||
        (caps->worker && caps->worker->landlock_abi < 0))
        bad = "landlock_abi must be >= 0";
    else if (process && ws->limits.max_live_processes < 1)
        bad = "max_live_processes must be >= 1";
    else if (process && ws->limits.timeout_ms < 0)
        bad = "timeout_ms must be >= 0";
    else if (process && ws->limits.output_ring_bytes < 1)
        bad = "output_ring_bytes must be >= 1";
    if (!bad)
        return 0;
    cs_diag_set(diag, CSW_ERROR_INTERNAL, "%s: %s",
                bad[0] == 'l' ? "runtime caps" : "workspace limits", bad);
    return -1;
}

/* Bytewise order of workspace ids (a shorter prefix first), for the listing. */
static int ws_cmp(const void *a, const void *b)
{
    const struct cs_workspace *x = *(const struct cs_workspace *const *)a;
    const struct cs_workspace *y = *(const struct cs_workspace *const *)b;
    size_t n = x->id_len < y->id_len ? x->id_len : y->id_len;
    int c = memcmp(x->id, y->id, n);
    if (c != 0)
        return c;
    return x->id_len < y->id_len ? -1 : x->id_len > y->id_len;
}

/* workspaces (docs/contract/tools.md §4, without a workspace_id): every registered workspace,
 * sorted by id; ids are selectors, not credentials. Returns 0 or -1 on OOM. */
static int fill_listing(struct csw_mcp_workspace_info_output *o, const struct cs_config *cfg)
{
    size_t n = cfg->n_workspaces;
    o->has_workspaces = true;
    if (n == 0)
        return 0;
    const struct cs_workspace **sorted = malloc(n * sizeof *sorted);
    o->workspaces.v = cs_wire_malloc(n * sizeof *o->workspaces.v);
    if (!sorted || !o->workspaces.v) {
        free(sorted);
        return -1;
    }
    memset(o->workspaces.v, 0, n * sizeof *o->workspaces.v);
    o->workspaces.n = n; /* at once: the generated free releases a half-filled array */
    for (size_t i = 0; i < n; i++)
        sorted[i] = &cfg->workspaces[i];
    qsort(sorted, n, sizeof *sorted, ws_cmp);
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        const struct cs_workspace *ws = sorted[i];
        struct csw_mcp_workspace_info_output_workspaces_item *it = &o->workspaces.v[i];
        rc = cs_str_set_n(&it->workspace_id, ws->id, ws->id_len);
        switch (ws->profile) {
        case CS_POLICY_PROFILE_READ_ONLY:
            it->profile = CSW_MCP_WORKSPACE_INFO_OUTPUT_WORKSPACES_ITEM_PROFILE_READ_ONLY;
            break;
        case CS_POLICY_PROFILE_WORKSPACE_WRITE:
            it->profile = CSW_MCP_WORKSPACE_INFO_OUTPUT_WORKSPACES_ITEM_PROFILE_WORKSPACE_WRITE;
            break;
        }
        switch (ws->network) {
        case CS_POLICY_NETWORK_RESTRICTED:
            it->network = CSW_MCP_WORKSPACE_INFO_OUTPUT_WORKSPACES_ITEM_NETWORK_RESTRICTED;
            break;
        case CS_POLICY_NETWORK_ENABLED:
            it->network = CSW_MCP_WORKSPACE_INFO_OUTPUT_WORKSPACES_ITEM_NETWORK_ENABLED;
            break;
        case CS_POLICY_NETWORK_LOOPBACK:
            it->network = CSW_MCP_WORKSPACE_INFO_OUTPUT_WORKSPACES_ITEM_NETWORK_LOOPBACK;
            break;
        }
        switch (ws->processes) {
        case CS_WORKSPACE_PROCESSES_EXCLUSIVE:
            it->processes = CSW_MCP_WORKSPACE_INFO_OUTPUT_WORKSPACES_ITEM_PROCESSES_EXCLUSIVE;
            break;
        case CS_WORKSPACE_PROCESSES_SHARED:
            it->processes = CSW_MCP_WORKSPACE_INFO_OUTPUT_WORKSPACES_ITEM_PROCESSES_SHARED;
            break;
        }
        it->has_description = ws->description != NULL;
        if (rc == 0 && ws->description)
            rc = set_str(&it->description, ws->description);
    }
    free(sorted);
    return rc == 0 ? 0 : -1;
}

int cs_policy_workspace_info(const struct cs_config *cfg, const struct cs_runtime_caps *caps,
                             const char *version, const struct csw_mcp_workspace_info_input *in,
                             struct csw_mcp_workspace_info_output *out, struct cs_diag *diag)
{
    struct csw_mcp_workspace_info_output o;
    memset(&o, 0, sizeof o);
    const struct cs_workspace *ws = NULL;
    int rc = CSW_ERROR_INTERNAL;
    cs_diag_clear(diag);

    /* An empty workspace_id counts as absent. */
    if (in && in->has_workspace_id && in->workspace_id.n > 0) {
        ws = cs_config_workspace(cfg, in->workspace_id.s, in->workspace_id.n);
        if (!ws) {
            char q[160];
            rc = cs_diag_set(diag, CSW_ERROR_WORKSPACE_NOT_FOUND, "unknown workspace_id %s",
                             cs__policy_quote(q, sizeof q, in->workspace_id.s, in->workspace_id.n));
            goto out;
        }
    }

    if (set_str(&o.version, version) != 0)
        goto out;
    o.tools_exposed.v = cs_wire_malloc(csw_tool_count * sizeof *o.tools_exposed.v);
    if (!o.tools_exposed.v)
        goto out;
    memset(o.tools_exposed.v, 0, csw_tool_count * sizeof *o.tools_exposed.v);
    o.tools_exposed.n = csw_tool_count;
    for (size_t i = 0; i < csw_tool_count; i++) {
        if (set_str(&o.tools_exposed.v[i], csw_tools[i].name) != 0)
            goto out;
    }
    if (set_strings(&o.transports.v, &o.transports.n, transports,
                    sizeof transports / sizeof transports[0]) != 0)
        goto out;

    if (!ws) {
        /* workspace_id stays NULL: encoded as null. No profile, root or execution; the list
         * of workspaces instead. */
        if (fill_listing(&o, cfg) != 0)
            goto out;
        rc = 0;
        goto out;
    }
    if (caps_check(caps, ws,
                   cs_workspace_can_exec(ws) && caps->process_available &&
                       cs_workspace_is_exec_path(ws),
                   diag) != 0)
        goto out;
    if (cs_str_set_n(&o.workspace_id, ws->id, ws->id_len) != 0)
        goto out;
    o.has_profile = true;
    switch (ws->profile) {
    case CS_POLICY_PROFILE_READ_ONLY:
        o.profile = CSW_MCP_WORKSPACE_INFO_OUTPUT_PROFILE_READ_ONLY;
        break;
    case CS_POLICY_PROFILE_WORKSPACE_WRITE:
        o.profile = CSW_MCP_WORKSPACE_INFO_OUTPUT_PROFILE_WORKSPACE_WRITE;
        break;
    }
    o.has_root = true;
    if (set_str(&o.root, ws->root) != 0)
        goto out;
    o.has_execution = true;
    if (fill_execution(&o.execution, ws, caps) != 0)
        goto out;
    rc = 0;
out:
    if (rc == CSW_ERROR_INTERNAL && !cs_diag_failed(diag))
        cs_diag_set(diag, CSW_ERROR_INTERNAL, "out of memory building workspace_info");
    if (rc != 0)
        csw_mcp_workspace_info_output_free(&o);
    *out = o;
    return rc;
}
