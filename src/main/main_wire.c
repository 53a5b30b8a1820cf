/*
 * main_wire: the sandbox probe and the runner, wired at start-up (see main_wire.h).
 */
#include "main_wire.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runner.h"

char *cs_main_sibling(const char *name)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return NULL;
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (!slash)
        return NULL;
    *slash = '\0';
    size_t len = strlen(self) + 1 + strlen(name) + 1;
    char *p = malloc(len);
    if (p)
        snprintf(p, len, "%s/%s", self, name);
    return p;
}

void cs_main_probe(const struct cs_config *cfg, struct cs_main_sandbox *sb)
{
    memset(sb, 0, sizeof *sb);
    snprintf(sb->reason, sizeof sb->reason, "no sandbox helper was found beside codespace-mcp");
    sb->helper =
        cfg->sandbox_bin ? strdup(cfg->sandbox_bin) : cs_main_sibling("codespace-linux-sandbox");
    sb->sandboxed = sb->helper && cs_supervisor_isolation_probe(sb->helper, &sb->iso, sb->reason,
                                                                sizeof sb->reason) == 0;
    if (!sb->sandboxed) {
        free(sb->helper);
        sb->helper = NULL;
    }
}

void cs_main_sandbox_clear(struct cs_main_sandbox *sb)
{
    free(sb->helper);
    sb->helper = NULL;
}

/* A tcp runner's options from one set of remote settings: the gateway's flags or a registry
 * entry; CODESPACE_REQUIRE_LINUX_SANDBOX=1 holds for remote workers too. Borrows every string. */
static struct cs_runner_tcp_options tcp_options(const struct cs_tools *t,
                                                const struct cs_remote *rm)
{
    struct cs_runner_tcp_options opt = {.url = rm->url,
                                        .version = t->version,
                                        .plaintext = rm->plaintext,
                                        .cert = rm->cert,
                                        .key = rm->key,
                                        .psk_file = rm->psk,
                                        .psk_identity = rm->psk_identity,
                                        .require_sandbox = t->cfg->require_linux_sandbox};
    memcpy(opt.peer_pin, rm->pin, sizeof opt.peer_pin);
    return opt;
}

/*
 * Workspace placement (docs/scale-out.md): workspaces whose registry entry names a runner of
 * their own go to that worker, the others to the gateway's --runner. Workspaces naming the same
 * URL share one connection (the first one's TLS settings). Returns 0, or an error with err set.
 */
static int place_workspaces(struct cs_tools *t, struct cs_loop *loop, struct cs_diag *err)
{
    const struct cs_config *cfg = t->cfg;
    bool any = false;
    for (size_t i = 0; i < cfg->n_workspaces; i++)
        any = any || cfg->workspaces[i].has_runner;
    if (!any)
        return 0;
    struct cs_runner *multi = cs_runner_multi_new(loop, t->runner);
    struct cs_runner **subs = calloc(cfg->n_workspaces, sizeof *subs);
    int rc = 0;
    if (!multi || !subs) {
        cs_runner_free(multi);
        rc = cs_diag_set(err, CSW_ERROR_INTERNAL, "out of memory");
        goto out;
    }
    t->runner = multi; /* owns the default runner now; freed with the tools */
    for (size_t i = 0; i < cfg->n_workspaces; i++) {
        const struct cs_workspace *ws = &cfg->workspaces[i];
        if (!ws->has_runner)
            continue;
        for (size_t j = 0; j < i && !subs[i]; j++)
            if (subs[j] && strcmp(cfg->workspaces[j].remote.url, ws->remote.url) == 0)
                subs[i] = subs[j];
        if (!subs[i]) {
            struct cs_runner_tcp_options opt = tcp_options(t, &ws->remote);
            /* A tcp runner reports no loss (a dropped link is not a dead worker). */
            struct cs_runner_events ev = cs_tools_runner_events(t);
            ev.lost = NULL;
            struct cs_diag e = {0};
            subs[i] = cs_runner_tcp_new(loop, &opt, &ev, &e);
            if (!subs[i]) {
                rc = cs_diag_set(err, CSW_ERROR_INTERNAL, "workspace %s: runner %s: %s", ws->id,
                                 ws->remote.url, e.text);
                goto out;
            }
        }
        t->remote[i] = subs[i];
        if (cs_runner_multi_route(multi, ws->id, subs[i]) != 0) {
            rc = cs_diag_set(err, CSW_ERROR_INTERNAL, "out of memory");
            goto out;
        }
    }
out:
    free(subs);
    return rc;
}

int cs_main_runner(struct cs_tools *t, const struct cs_config *cfg,
                   const struct cs_main_sandbox *sb, struct cs_loop *loop, struct cs_diag *err)
{
    struct cs_runner_events ev = cs_tools_runner_events(t);
    /* A tcp:// worker runs its commands under its own --sandbox (docs/scale-out.md). */
    const char *helper = cfg->runner == CS_CONFIG_RUNNER_TCP ? NULL : sb->helper;
    if (cfg->runner == CS_CONFIG_RUNNER_UDS) {
        char *bin =
            cfg->runtime_bin ? strdup(cfg->runtime_bin) : cs_main_sibling("codespace-runtime");
        struct cs_runner_uds_options opt = {
            .runtime_bin = bin,
            .runner_dir = cfg->runner_dir,
            .max_processes = CS_POLICY_RUNNER_MAX_PROCS,
            .timeout_ms = cs_config_file_timeout_ms(cfg),
            .version = t->version,
            .sandbox_helper = helper,
            .sandbox_uid = cfg->sandbox_uid,
            .sandbox_gid = cfg->sandbox_gid,
            .operations_db = cfg->operations_db,
        };
        t->runner = bin ? cs_runner_uds_new(loop, &opt, &ev, err) : NULL;
        if (!bin)
            cs_diag_set(err, CSW_ERROR_INTERNAL, "cannot find codespace-runtime beside us");
        free(bin);
    } else if (cfg->runner == CS_CONFIG_RUNNER_TCP) {
        /* A worker someone else started (docs/scale-out.md): its sandbox is its own. */
        struct cs_runner_tcp_options opt = tcp_options(t, &cfg->remote);
        t->runner = cs_runner_tcp_new(loop, &opt, &ev, err);
        for (size_t i = 0; t->runner && i < cfg->n_workspaces; i++)
            t->remote[i] = t->runner; /* place_workspaces moves those with a runner of their own */
    } else {
        struct cs_supervisor_limits lim;
        /* The runner-wide safety cap; each workspace's own cap comes with each exec. The
         * timeout here is the file operations' (and a spawn's that names none). */
        cs_supervisor_limits_init(&lim, CS_POLICY_RUNNER_MAX_PROCS, cs_config_file_timeout_ms(cfg),
                                  helper);
        lim.sandbox_uid = cfg->sandbox_uid;
        lim.sandbox_gid = cfg->sandbox_gid;
        lim.operations_db = cfg->operations_db; /* the deny identities persist there */
        t->runner = cs_runner_inproc_new(loop, &lim, &ev);
        if (!t->runner)
            cs_diag_set(err, CSW_ERROR_INTERNAL, "cannot start the in-process runner");
    }
    if (!t->runner) {
        if (!cs_diag_failed(err))
            cs_diag_set(err, CSW_ERROR_INTERNAL, "cannot start the runner");
        return -1;
    }
    return place_workspaces(t, loop, err);
}
