/*
 * tools_recover: see tools_recover.h. Recovery runs on the loop thread: it is rare (a start, a
 * lost worker) and short (renames and unlinks named by the journal; no content is read).
 */
#include "tools_recover.h"

#include <stdlib.h>
#include <string.h>

#include "fs.h"
#include "mcp_server.h"
#include "patch_txn.h"
#include "store.h"
#include "tools.h"

bool cs__tools_recover_local(const struct cs_tools *t, size_t i)
{
    const struct cs_workspace *ws = &t->cfg->workspaces[i];
    return ws->has_root_fd && !ws->has_runner && t->cfg->runner != CS_CONFIG_RUNNER_TCP;
}

static int record(void *arg, const char *op_id, enum csw_patch_status status)
{
    struct cs_tools *t = arg;
    enum cs_store_status st = cs_store_recover(t->store, op_id, status, NULL);
    return st == CS_STORE_OK || st == CS_STORE_NOT_FOUND ? 0 : -1;
}

/* Recovers workspace i now: clears its pending mark, or stops it with the reason. */
static void recover(struct cs_tools *t, size_t i)
{
    const struct cs_workspace *ws = &t->cfg->workspaces[i];
    struct cs_str *rules = calloc(ws->n_deny + 1, sizeof *rules);
    struct cs_fs_deny *deny = NULL;
    struct cs_diag d = {0};
    unsigned n = 0;
    int rc = CSW_ERROR_INTERNAL;
    if (rules != NULL) {
        for (size_t k = 0; k < ws->n_deny; k++)
            rules[k] = (struct cs_str){ws->deny[k], strlen(ws->deny[k])};
        deny = ws->n_deny > 0 ? cs_fs_deny_new(rules, ws->n_deny) : NULL;
    }
    if (rules == NULL || (ws->n_deny > 0 && deny == NULL))
        cs_diag_set(&d, CSW_ERROR_INTERNAL, "out of memory preparing the patch recovery");
    else
        rc = cs_patch_journal_recover(ws->root, deny, record, t, &n, &d);
    cs_fs_deny_free(deny);
    free(rules);
    t->recover_pending[i] = false;
    if (rc != 0) {
        free(t->recover_stopped[i]);
        t->recover_stopped[i] = strdup(d.text);
        t->recover_stopped_code[i] = rc;
    }
    if (t->recovery_log != NULL && (n > 0 || rc != 0))
        t->recovery_log(ws->id, n, rc != 0 ? d.text : NULL);
}

int cs__tools_recover_init(struct cs_tools *t, struct cs_diag *err)
{
    size_t n = t->cfg->n_workspaces + 1;
    t->recover_pending = calloc(n, sizeof *t->recover_pending);
    t->recover_stopped = calloc(n, sizeof *t->recover_stopped);
    t->recover_stopped_code = calloc(n, sizeof *t->recover_stopped_code);
    if (!t->recover_pending || !t->recover_stopped || !t->recover_stopped_code)
        return cs_diag_set(err, CSW_ERROR_INTERNAL, "out of memory");
    return 0;
}

void cs_tools_recover(struct cs_tools *t,
                      void (*log)(const char *workspace_id, unsigned settled, const char *error))
{
    t->recovery_log = log;
    for (size_t i = 0; t->recover_pending && i < t->cfg->n_workspaces; i++)
        if (cs__tools_recover_local(t, i))
            recover(t, i);
}

void cs__tools_recover_free(struct cs_tools *t)
{
    for (size_t i = 0; t->recover_stopped && i < t->cfg->n_workspaces; i++)
        free(t->recover_stopped[i]);
    free(t->recover_stopped);
    free(t->recover_pending);
    free(t->recover_stopped_code);
    t->recover_stopped = NULL;
    t->recover_pending = NULL;
    t->recover_stopped_code = NULL;
}

void cs__tools_recover_mark(struct cs_tools *t, size_t i)
{
    for (size_t k = 0; t->recover_pending && k < t->cfg->n_workspaces; k++)
        if ((i == (size_t)-1 || k == i) && cs__tools_recover_local(t, k))
            t->recover_pending[k] = true;
}

bool cs__tools_recover_gate(struct cs_tools *t, size_t i, struct cs_mcp_call *call)
{
    if (t->recover_pending == NULL)
        return false;
    if (t->recover_pending[i] && t->recover_stopped[i] == NULL)
        recover(t, i);
    if (t->recover_stopped[i] == NULL)
        return false;
    cs_mcp_call_error(call, (enum csw_error)t->recover_stopped_code[i], NULL,
                      "workspace %s is stopped: %s", t->cfg->workspaces[i].id,
                      t->recover_stopped[i]);
    return true;
}

void cs__tools_recover_pending(struct cs_tools *t)
{
    for (size_t i = 0; t->recover_pending && i < t->cfg->n_workspaces; i++)
        if (t->recover_pending[i] && t->recover_stopped[i] == NULL)
            recover(t, i);
}
