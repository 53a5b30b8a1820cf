/*
 * tools_recover: see tools_recover.h. Recovery runs on the loop thread: it is rare (a start, a
 * lost worker) and short (renames and unlinks named by the journal; no content is read).
 */
#include "tools_recover.h"

#include <stdio.h>
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

struct record {
    struct cs_tools *t;
    const char *ws_id;
};

static int record(void *arg, const char *op_id, enum csw_patch_status status)
{
    struct record *rec = arg;
    enum cs_store_status st =
        cs_store_recover(rec->t->store, rec->ws_id, op_id, status, NULL, NULL);
    return st == CS_STORE_OK || st == CS_STORE_NOT_FOUND ? 0 : -1;
}

static bool patching(const struct cs_tools *t, const char *op_id)
{
    for (size_t k = 0; k < t->n_patching; k++)
        if (strcmp(t->patching[k], op_id) == 0)
            return true;
    return false;
}

int cs__tools_patching_add(struct cs_tools *t, const char *op_id)
{
    if (t->n_patching == t->cap_patching) {
        size_t nc = t->cap_patching ? t->cap_patching * 2 : 8;
        void *np = realloc(t->patching, nc * sizeof *t->patching);
        if (np == NULL)
            return -1;
        t->patching = np;
        t->cap_patching = nc;
    }
    snprintf(t->patching[t->n_patching++], sizeof t->patching[0], "%s", op_id);
    return 0;
}

void cs__tools_patching_remove(struct cs_tools *t, const char *op_id)
{
    for (size_t k = 0; k < t->n_patching; k++)
        if (strcmp(t->patching[k], op_id) == 0) {
            memcpy(t->patching[k], t->patching[--t->n_patching], sizeof t->patching[0]);
            return;
        }
}

struct settle_unjournaled {
    struct cs_tools *t;
    const char *ws_id;
    unsigned n;
};

static int settle_unjournaled(void *arg, const char *id)
{
    struct settle_unjournaled *su = arg;
    if (patching(su->t, id))
        return 0;
    if (cs_store_recover(su->t->store, su->ws_id, id, CSW_PATCH_STATUS_ROLLED_BACK, NULL, NULL) !=
        CS_STORE_OK)
        return -1;
    su->n++;
    return 0;
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
        rc = cs_patch_journal_recover(ws->root, deny, record, &(struct record){t, ws->id}, &n, &d);
    /* Every journal is settled: a row of this workspace still unknown (and not in flight) had
     * none, so its patch died before its durability point and nothing was written. */
    struct settle_unjournaled su = {t, ws->id, 0};
    if (rc == 0 &&
        cs_store_unknown_ops(t->store, ws->id, settle_unjournaled, &su, &d) != CS_STORE_OK)
        rc = CSW_ERROR_INTERNAL;
    n += su.n;
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
    free(t->patching);
    t->patching = NULL;
    t->n_patching = t->cap_patching = 0;
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

/* ---- a remote worker's journals ---- */

bool cs__tools_recover_remote(const struct cs_tools *t, size_t i)
{
    const struct cs_workspace *ws = &t->cfg->workspaces[i];
    return ws->profile == CS_POLICY_PROFILE_WORKSPACE_WRITE &&
           (ws->has_runner || t->cfg->runner == CS_CONFIG_RUNNER_TCP);
}

struct ask {
    struct cs_tools *t;
    size_t ws;
    struct cs_str *ids; /* owned strings */
    size_t n, cap;
    void (*then)(void *arg);
    void *arg;
};

static void ask_free(struct ask *a)
{
    for (size_t k = 0; k < a->n; k++)
        free(a->ids[k].s);
    free(a->ids);
    free(a);
}

static int ask_push(struct ask *a, const char *id)
{
    if (a->n == a->cap) {
        size_t nc = a->cap ? a->cap * 2 : 8;
        void *np = nc <= 4096 ? realloc(a->ids, nc * sizeof *a->ids) : NULL;
        if (np == NULL)
            return -1; /* the schema's cap: the rest wait for the next exchange */
        a->ids = np;
        a->cap = nc;
    }
    char *s = strdup(id);
    if (s == NULL)
        return -1;
    a->ids[a->n++] = (struct cs_str){s, strlen(s)};
    return 0;
}

static int ask_unknown(void *arg, const char *id)
{
    struct ask *a = arg;
    return patching(a->t, id) ? 0 : ask_push(a, id);
}

static void send_ask(struct ask *a, bool settle);

/* The worker's answer to the settle that ends an exchange: nothing more to do. */
static void settled(void *arg, const struct cs_runner_reply *r)
{
    (void)r; /* a journal left by a lost settle is reported again and settled next time */
    struct ask *a = arg;
    if (a->then)
        a->then(a->arg);
    ask_free(a);
}

static void asked(void *arg, const struct cs_runner_reply *r)
{
    struct ask *a = arg;
    struct cs_tools *t = a->t;
    unsigned n = 0;
    for (size_t k = 0; k < a->n; k++)
        free(a->ids[k].s);
    a->n = 0;
    if (r->outcome == CS_RUNNER_OK && r->result->tag == CSW_RUNNER_WIRE_RESULT_PATCH_OUTCOMES) {
        const struct csw_runner_wire_patch_outcomes_result *res = &r->result->u.patch_outcomes.data;
        char id[CS_STORE_ID_SIZE];
        for (size_t k = 0; k < res->outcomes.n + res->absent.n; k++) {
            bool journal = k < res->outcomes.n;
            const struct cs_str *s =
                journal ? &res->outcomes.v[k].operation_id : &res->absent.v[k - res->outcomes.n];
            enum csw_patch_status st =
                journal ? res->outcomes.v[k].status : CSW_PATCH_STATUS_ROLLED_BACK;
            if (s->n >= sizeof id || memchr(s->s, '\0', s->n) != NULL ||
                st == CSW_PATCH_STATUS_UNKNOWN)
                continue;
            memcpy(id, s->s, s->n);
            id[s->n] = '\0';
            /* In flight here: its own answer records it. No row (another ledger's journal) or a
             * failed ledger: left for the next exchange. */
            bool now = false;
            if (patching(t, id) || cs_store_recover(t->store, t->cfg->workspaces[a->ws].id, id, st,
                                                    &now, NULL) != CS_STORE_OK)
                continue;
            n += now; /* settled here, not by an earlier exchange */
            if (journal && ask_push(a, id) != 0)
                break;
        }
    } else if (r->outcome == CS_RUNNER_ERROR) {
        const char *why = r->msg ? r->msg : "patch_outcomes failed";
        /* A journal the worker cannot recover (corrupt, another version, a denied path, a failed
         * restore) stops that workspace as it does a local one: every call answers why. */
        if ((r->code == CSW_ERROR_FILE_OPERATION_FAILED || r->code == CSW_ERROR_PATH_DENIED) &&
            t->recover_stopped != NULL && t->recover_stopped[a->ws] == NULL) {
            t->recover_stopped[a->ws] = strdup(why);
            t->recover_stopped_code[a->ws] = r->code;
            if (t->recovery_log != NULL) /* "workspace stopped" (main.c) */
                t->recovery_log(t->cfg->workspaces[a->ws].id, 0, why);
        }
    }
    if (n > 0 && t->recovery_log != NULL)
        t->recovery_log(t->cfg->workspaces[a->ws].id, n, NULL);
    if (a->n > 0) {
        send_ask(a, true); /* the journals whose rows now hold their status go */
        return;
    }
    if (a->then)
        a->then(a->arg);
    ask_free(a);
}

static void send_ask(struct ask *a, bool settle)
{
    struct csw_runner_wire_op op = {.tag = CSW_RUNNER_WIRE_OP_PATCH_OUTCOMES};
    op.u.patch_outcomes.data = (struct csw_runner_wire_patch_outcomes_data){
        .workspace = a->t->wsdesc[a->ws],
        .has_ask = !settle,
        .ask = {a->ids, settle ? 0 : a->n},
        .has_settle = settle,
        .settle = {a->ids, settle ? a->n : 0},
    };
    cs_runner_call(a->t->runner, &op, settle ? settled : asked, a);
}

void cs__tools_recover_ask(struct cs_tools *t, size_t i, const char *settle_id,
                           void (*then)(void *arg), void *arg)
{
    struct ask *a = NULL;
    if (t->runner == NULL || !cs__tools_recover_remote(t, i) || (a = calloc(1, sizeof *a)) == NULL)
        goto none;
    *a = (struct ask){.t = t, .ws = i, .then = then, .arg = arg};
    if (settle_id != NULL) {
        if (ask_push(a, settle_id) != 0)
            goto none;
        send_ask(a, true);
        return;
    }
    /* Asked even with no row unknown: the answer lists the journals a lost settle left. */
    (void)cs_store_unknown_ops(t->store, t->cfg->workspaces[i].id, ask_unknown, a, NULL);
    send_ask(a, false);
    return;
none:
    if (a != NULL)
        ask_free(a);
    if (then != NULL)
        then(arg);
}

void cs__tools_recover_ask_all(struct cs_tools *t)
{
    for (size_t i = 0; i < t->cfg->n_workspaces; i++)
        if (cs__tools_recover_remote(t, i))
            cs__tools_recover_ask(t, i, NULL, NULL, NULL);
}
