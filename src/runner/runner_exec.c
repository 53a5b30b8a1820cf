/*
 * runner_exec: the executor behind both runners. Runs one wire operation against the file layer
 * (src/fs), the patch engine (src/patch, without the ledger: idempotency stays with the gateway)
 * and the supervisor, and completes it with the wire result (whose data are the tools' generated
 * output structs).
 *
 * File operations (read, find, version, apply_patch) never run on the loop: each becomes a job of
 * the executor's thread pool (base_pool.h) that owns copies of its inputs, runs the fs or patch
 * call on a pool thread with a cancel flag, and completes on the loop thread. A loop timer at the
 * process time limit sets that flag; the call then answers TIMEOUT once the job has stopped (a
 * patch stops only before its first write; past it, it runs to its end and answers what it did).
 * See docs/runner.md, "File work off the loop".
 *
 * Trust: ops come from the gateway's tool layer (in-process) or from the one peer of the worker
 * (the gateway that started it); both built them after the policy checks. The executor still
 * refuses exec for a workspace that is not a writable host workspace (defence in depth).
 * Entry points: runner.h (cs_runner_exec_*).
 */
#include "runner.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base_log.h"
#include "base_pool.h"
#include "fs.h"
#include "patch_txn.h"
#include "store.h"

struct cs_runner_exec {
    struct cs_loop *loop;
    struct cs_supervisor *sup;
    struct cs_pool *pool; /* file work */
    int64_t timeout_ms;   /* the time limit of a file operation: the process time limit */
    void (*process_exited)(void *arg, const char *id, const struct csw_runner_exit *how);
    void *arg;
    struct pending *pending; /* supervisor requests in flight, for cs_runner_exec_cancel */
    struct ws_deny *denies;  /* one per workspace with deny rules, created at its first op */
    size_t n_denies;
    struct cs_store *store; /* where identity memories persist (lim->operations_db); NULL: none */
    /* The database store opens on first use (exec_store): a second SQLite connection costs
     * about 300 KiB (its page cache and parsed schema), which a server whose workspaces have no
     * deny rules never needs. NULL once opened, or when there is no database. */
    char *store_path;
    /* A --listen worker keeps the operation ledger of its workspaces in store (in memory without
     * --operations-db): an operation_key seen through any gateway is answered from it (issue 32;
     * docs/scale-out.md, "The ledger on the worker"). */
    bool ledger;
    struct file_job **patches; /* apply_patch jobs with an operation id, received and not done */
    size_t n_patches, cap_patches;
    /* Patches, one at a time per workspace root (whichever gateway sent them: issue 32): those
     * running now, and those waiting, first come first served. */
    struct file_job *patch_running, *patch_wait, *patch_wait_tail;
    /* Commands of an exclusive workspace that came while a patch of it ran or waited: each
     * starts once none does (exec_kick), in the order they came. */
    struct exec_wait *exec_wait, *exec_wait_tail;
    bool freeing; /* cs_runner_exec_free has begun: nothing more is started */
    /* Workspace roots whose crash journal patch_outcomes could not recover: every operation on
     * one answers why (as the gateway stops a local one) until a later patch_outcomes succeeds. */
    struct stopped_root {
        char *root, *why;
        int code;
    } * stopped;
    size_t n_stopped;
};

/* Why root is stopped (its code in *code), or NULL. */
static const char *root_stopped(const struct cs_runner_exec *ex, const char *root, int *code)
{
    for (size_t i = 0; root != NULL && i < ex->n_stopped; i++)
        if (strcmp(ex->stopped[i].root, root) == 0) {
            *code = ex->stopped[i].code;
            return ex->stopped[i].why;
        }
    return NULL;
}

/* Records (why != NULL) or clears root's stop. Out of memory, a stop is not recorded: the
 * gateway still stops the workspace from the answer. */
static void root_stop(struct cs_runner_exec *ex, const char *root, const char *why, int code)
{
    for (size_t i = 0; i < ex->n_stopped; i++)
        if (strcmp(ex->stopped[i].root, root) == 0) {
            free(ex->stopped[i].root);
            free(ex->stopped[i].why);
            ex->stopped[i] = ex->stopped[--ex->n_stopped];
            break;
        }
    if (why == NULL)
        return;
    void *ns = realloc(ex->stopped, (ex->n_stopped + 1) * sizeof *ex->stopped);
    if (ns == NULL)
        return;
    ex->stopped = ns;
    struct stopped_root r = {strdup(root), strdup(why), code};
    if (r.root == NULL || r.why == NULL) {
        free(r.root);
        free(r.why);
        return;
    }
    ex->stopped[ex->n_stopped++] = r;
}

/* A workspace's deny rules and identity memory (fs.h), for the executor's life: the file-work
 * threads use d while it lives, so it goes only after the pool has been joined. */
struct ws_deny {
    char *id, *root;
    struct cs_fs_deny *d;
};

/* One supervisor request in flight: what to complete and how to wrap the output. */
struct pending {
    struct pending *prev, *next;
    struct cs_runner_exec *ex;
    cs_runner_done_fn done;
    void *arg;
    enum csw_runner_wire_result_tag tag;
};

struct cs_runner_exec *cs_runner_exec_new(
    struct cs_loop *loop, const struct cs_supervisor_limits *lim,
    void (*process_exited)(void *arg, const char *id, const struct csw_runner_exit *how), void *arg)
{
    struct cs_runner_exec *ex = calloc(1, sizeof *ex);
    if (!ex)
        return NULL;
    ex->loop = loop;
    ex->process_exited = process_exited;
    ex->arg = arg;
    ex->timeout_ms = lim->timeout_ms;
    ex->sup = cs_supervisor_new(loop, lim);
    ex->pool = ex->sup ? cs_pool_new(loop, CS_POOL_THREADS) : NULL;
    /* The identity memories of the deny rules persist in the operations database (store_ident.c):
     * a connection of our own, used on the loop thread only. */
    ex->ledger = lim->keep_ledger;
    const char *db = lim->operations_db ? lim->operations_db : ex->ledger ? ":memory:" : NULL;
    /* The ledger is used from the first patch on: open at once, and a failure stops the start.
     * Otherwise the gateway (or worker) has just opened the same file and checked it. */
    bool fail = false;
    if (ex->pool && db && ex->ledger)
        fail = cs_store_open(db, &ex->store, NULL) != CS_STORE_OK;
    else if (ex->pool && db)
        fail = (ex->store_path = strdup(db)) == NULL;
    if (fail) {
        cs_pool_free(ex->pool);
        ex->pool = NULL;
    }
    if (!ex->pool) {
        cs_supervisor_free(ex->sup);
        free(ex);
        return NULL;
    }
    return ex;
}

static void patch_wait_fail_all(struct cs_runner_exec *ex);
static void exec_wait_fail_all(struct cs_runner_exec *ex);

void cs_runner_exec_free(struct cs_runner_exec *ex)
{
    if (!ex)
        return;
    /* File jobs first: cancelled, joined, completed (patches that had begun writing finish);
     * then the patches still waiting for their turn, which never began. */
    ex->freeing = true;
    cs_pool_free(ex->pool);
    patch_wait_fail_all(ex);
    exec_wait_fail_all(ex);
    cs_supervisor_free(ex->sup);
    for (size_t i = 0; i < ex->n_denies; i++) {
        free(ex->denies[i].id);
        free(ex->denies[i].root);
        cs_fs_deny_free(ex->denies[i].d);
    }
    free(ex->denies);
    free(ex->patches);
    for (size_t i = 0; i < ex->n_stopped; i++) {
        free(ex->stopped[i].root);
        free(ex->stopped[i].why);
    }
    free(ex->stopped);
    cs_store_close(ex->store);
    free(ex->store_path);
    free(ex);
}

void cs_runner_exec_abandon(struct cs_runner_exec *ex)
{
    if (!ex)
        return;
    cs_supervisor_free(ex->sup);
    ex->sup = NULL;
}

void cs_runner_exec_reap_strays(struct cs_runner_exec *ex)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d/children", (int)getpid());
    FILE *f = fopen(path, "re");
    if (!f)
        return;
    long pid;
    /* NOLINTNEXTLINE(cert-err34-c): the kernel writes this file, decimal pids only */
    while (fscanf(f, "%ld", &pid) == 1)
        if (pid > 0 && !cs_supervisor_owns_pid(ex->sup, (pid_t)pid))
            (void)waitpid((pid_t)pid, NULL, WNOHANG);
    fclose(f);
}

/* The wire's network policy of an exec as the supervisor's. */
static enum cs_supervisor_network exec_network(enum csw_runner_wire_exec_data_policy_network n)
{
    switch (n) {
    case CSW_RUNNER_WIRE_EXEC_DATA_POLICY_NETWORK_RESTRICTED:
        break;
    case CSW_RUNNER_WIRE_EXEC_DATA_POLICY_NETWORK_ENABLED:
        return CS_SUPERVISOR_NETWORK_ENABLED;
    case CSW_RUNNER_WIRE_EXEC_DATA_POLICY_NETWORK_LOOPBACK:
        return CS_SUPERVISOR_NETWORK_LOOPBACK;
    }
    return CS_SUPERVISOR_NETWORK_RESTRICTED;
}

static void fail(cs_runner_done_fn done, void *arg, int code, const char *msg)
{
    struct cs_runner_reply r = {.outcome = CS_RUNNER_ERROR, .code = code, .msg = msg};
    done(arg, &r);
}

/* Completes with res, handing over what a prepare's make returned (made, may be NULL). */
static void ok_made(cs_runner_done_fn done, void *arg, const struct csw_runner_wire_result *res,
                    void *made)
{
    struct cs_runner_reply r = {.outcome = CS_RUNNER_OK, .result = res, .prepared = made};
    done(arg, &r);
}

static void ok(cs_runner_done_fn done, void *arg, const struct csw_runner_wire_result *res)
{
    ok_made(done, arg, res, NULL);
}

/* The root as a C string (the decoder guarantees no NUL only for ids; check). */
static char *root_of(const struct csw_runner_workspace *ws)
{
    if (memchr(ws->root.s, '\0', ws->root.n))
        return NULL;
    return strndup(ws->root.s, ws->root.n);
}

/* The identity memories' database, opened at its first use; NULL: none is configured, or it cannot
 * be opened now (logged; the caller fails closed or retries, and the next use tries again). */
static struct cs_store *exec_store(struct cs_runner_exec *ex)
{
    if (ex->store || !ex->store_path)
        return ex->store;
    struct cs_diag d = {0};
    if (cs_store_open(ex->store_path, &ex->store, &d) != CS_STORE_OK) {
        cs_log(CS_LOG_WARNING, "deny identities: the operations database cannot be opened",
               json_pack("{s:s}", "error", d.text));
        return NULL;
    }
    free(ex->store_path);
    ex->store_path = NULL;
    return ex->store;
}

/*
 * Writes what w's identity memory learned or forgot since the last write, in one transaction (on
 * the loop thread: after the first scan, each spawn's scan, each file operation). A write that
 * fails is retried whole at the next one (cs_fs_deny_resync); the memory itself is unaffected.
 */
static void ident_flush(struct cs_runner_exec *ex, struct ws_deny *w)
{
    struct cs_fs_deny_changes c;
    if (cs_fs_deny_take_changes(w->d, &c) != 0) {
        cs_fs_deny_resync(w->d);
        return;
    }
    if ((!ex->store && !ex->store_path) || (c.n == 0 && !c.replace)) {
        cs_fs_deny_changes_free(&c); /* no database: the journal is only drained */
        return;
    }
    struct cs_store *store = exec_store(ex);
    if (!store) { /* retried whole at the next write, as a failed one */
        cs_fs_deny_changes_free(&c);
        cs_fs_deny_resync(w->d);
        return;
    }
    struct cs_store_ident *v = c.n ? calloc(c.n, sizeof *v) : NULL;
    bool ok = c.n == 0 || v;
    for (size_t i = 0; ok && i < c.n; i++) {
        const struct cs_fs_ident *id = &c.v[i].id;
        v[i] = (struct cs_store_ident){id->dev,      id->ino,   id->gen,
                                       id->btime_ns, id->flags, c.v[i].forget};
    }
    if (!ok || cs_store_ident_save(store, w->id, w->root, v, c.n, c.replace, NULL) != CS_STORE_OK)
        cs_fs_deny_resync(w->d);
    free(v);
    cs_fs_deny_changes_free(&c);
}

static void ident_flush_all(struct cs_runner_exec *ex)
{
    for (size_t i = 0; i < ex->n_denies; i++)
        ident_flush(ex, &ex->denies[i]);
}

/* Loads w's stored identities (before its first scan). Returns 0, or -1: the operation fails
 * closed rather than run without what an earlier life of the server learned. */
static int ident_load(struct cs_runner_exec *ex, struct ws_deny *w)
{
    if (!ex->store && !ex->store_path)
        return 0;
    struct cs_store *store = exec_store(ex);
    struct cs_store_ident *v = NULL;
    size_t n = 0;
    if (!store || cs_store_ident_load(store, w->id, w->root, &v, &n, NULL) != CS_STORE_OK)
        return -1;
    struct cs_fs_ident *ids = n ? calloc(n, sizeof *ids) : NULL;
    int rc = n && !ids ? -1 : 0;
    for (size_t i = 0; rc == 0 && i < n; i++)
        ids[i] = (struct cs_fs_ident){v[i].dev, v[i].ino, v[i].gen, v[i].btime_ns, v[i].flags};
    if (rc == 0 && n)
        rc = cs_fs_deny_load(w->d, ids, n);
    free(ids);
    free(v);
    return rc;
}

/*
 * The deny state of ws (on the loop thread): NULL with *rc 0 when ws has no deny rules. Created
 * at the workspace's first operation in this process, with a bounded scan that remembers the
 * identity of every denied file existing then (docs/contract/tools.md §5, "at start": the
 * gateway sends each such workspace a version check when the runner starts, deny_warm_all in
 * src/tools/tools.c, so the first operation is the start's). *rc is an
 * error (msg set) when the rules do not compile (the gateway validated them: an invariant broke)
 * or on OOM: the operation then fails closed.
 */
static struct cs_fs_deny *deny_of(struct cs_runner_exec *ex, const struct csw_runner_workspace *ws,
                                  int *rc, const char **msg)
{
    *rc = 0;
    if (!ws->has_deny || ws->deny.n == 0)
        return NULL;
    for (size_t i = 0; i < ex->n_denies; i++) {
        struct ws_deny *w = &ex->denies[i];
        if (strlen(w->id) == ws->id.n && memcmp(w->id, ws->id.s, ws->id.n) == 0 &&
            strlen(w->root) == ws->root.n && memcmp(w->root, ws->root.s, ws->root.n) == 0)
            return w->d;
    }
    *rc = CSW_ERROR_INTERNAL;
    *msg = "out of memory";
    struct ws_deny *v = realloc(ex->denies, (ex->n_denies + 1) * sizeof *v);
    if (!v)
        return NULL;
    ex->denies = v;
    struct ws_deny w = {strndup(ws->id.s, ws->id.n), root_of(ws), NULL};
    if (w.id && w.root) {
        w.d = cs_fs_deny_new(ws->deny.v, ws->deny.n);
        if (!w.d)
            *msg = "the workspace's deny rules do not compile (or out of memory)";
        else if (ws->has_deny_scan_entries)
            cs_fs_deny_set_scan_cap(w.d, (size_t)ws->deny_scan_entries);
    }
    if (w.d && ident_load(ex, &w) != 0) {
        *msg = "cannot load the workspace's remembered deny identities from the operations "
               "database";
        cs_fs_deny_free(w.d);
        w.d = NULL;
    }
    if (!w.d) {
        free(w.id);
        free(w.root);
        return NULL;
    }
    int rootfd = -1;
    if (cs_fs_root_open(w.root, &rootfd, NULL) == 0) {
        (void)cs_fs_deny_scan(w.d, rootfd, NULL, NULL, NULL);
        close(rootfd);
    }
    ex->denies[ex->n_denies++] = w;
    ident_flush(ex, &ex->denies[ex->n_denies - 1]);
    *rc = 0;
    return w.d;
}

/* ---- supervisor completions ---- */

static void pending_unlink(struct pending *p)
{
    if (p->prev)
        p->prev->next = p->next;
    else
        p->ex->pending = p->next;
    if (p->next)
        p->next->prev = p->prev;
}

static void sup_done(void *arg, int code, const char *msg, const void *out)
{
    struct pending *p = arg;
    pending_unlink(p);
    if (code != 0) {
        fail(p->done, p->arg, code, msg);
        free(p);
        return;
    }
    struct csw_runner_wire_result res;
    memset(&res, 0, sizeof res);
    res.tag = p->tag;
    switch (p->tag) {
    case CSW_RUNNER_WIRE_RESULT_EXEC: {
        /* The wire's exec result is the MCP result's process_id and $defs/process as they are
         * (schema/runner/wire.json): dispatch_status is the gateway's to add. */
        const struct csw_mcp_exec_command_output *o = out;
        res.u.exec.data.process_id = o->process_id;
        res.u.exec.data.process = o->process;
        break;
    }
    case CSW_RUNNER_WIRE_RESULT_WRITE_STDIN:
        res.u.write_stdin.data = *(const struct csw_mcp_write_stdin_output *)out;
        break;
    case CSW_RUNNER_WIRE_RESULT_READ_PROCESS:
        res.u.read_process.data = *(const struct csw_mcp_read_process_output *)out;
        break;
    case CSW_RUNNER_WIRE_RESULT_PROCESS_STATUS:
        res.u.process_status.data = *(const struct csw_mcp_process_status_output *)out;
        break;
    case CSW_RUNNER_WIRE_RESULT_RESIZE:
        res.u.resize.data = *(const struct csw_mcp_process_resize_output *)out;
        break;
    case CSW_RUNNER_WIRE_RESULT_TERMINATE:
        res.u.terminate.data = *(const struct csw_mcp_terminate_process_output *)out;
        break;
    case CSW_RUNNER_WIRE_RESULT_HELLO:
    case CSW_RUNNER_WIRE_RESULT_READ:
    case CSW_RUNNER_WIRE_RESULT_FIND:
    case CSW_RUNNER_WIRE_RESULT_VERSION:
    case CSW_RUNNER_WIRE_RESULT_APPLY_PATCH:
    case CSW_RUNNER_WIRE_RESULT_WORKSPACE_OF:
    case CSW_RUNNER_WIRE_RESULT_TERMINATE_WORKSPACE:
    case CSW_RUNNER_WIRE_RESULT_CANCEL:
    case CSW_RUNNER_WIRE_RESULT_PATCH_OUTCOMES:
    case CSW_RUNNER_WIRE_RESULT_OPERATION_STATUS:
        fail(p->done, p->arg, CSW_ERROR_INTERNAL, "supervisor answered an unexpected operation");
        free(p);
        return;
    }
    ok(p->done, p->arg, &res);
    free(p);
}

static struct pending *pending_new(struct cs_runner_exec *ex, cs_runner_done_fn done, void *arg,
                                   enum csw_runner_wire_result_tag tag)
{
    struct pending *p = calloc(1, sizeof *p);
    if (!p) {
        fail(done, arg, CSW_ERROR_INTERNAL, "out of memory");
        return NULL;
    }
    p->ex = ex;
    p->next = ex->pending;
    if (p->next)
        p->next->prev = p;
    ex->pending = p;
    p->done = done;
    p->arg = arg;
    p->tag = tag;
    return p;
}

/* How a process ended, from its status (answered at once: the supervisor holds the handle
 * while its exit callback runs). */
struct exit_how {
    struct csw_runner_exit *how;
    char signame[24]; /* the status's signal name is only borrowed for its callback */
};

static void exit_status(void *arg, int code, const char *msg, const void *out)
{
    struct exit_how *e = arg;
    const struct csw_mcp_process_status_output *st = out;
    (void)msg;
    if (code != 0 || !st)
        return;
    struct csw_runner_exit *how = e->how;
    how->has_exit_code = st->has_exit_code;
    how->exit_code = st->exit_code;
    how->has_termination = st->has_termination;
    how->termination = st->termination;
    how->has_signal = st->has_signal;
    how->signal.number = st->signal.number;
    if (st->has_signal && st->signal.has_name && st->signal.name.n < sizeof e->signame) {
        memcpy(e->signame, st->signal.name.s, st->signal.name.n);
        how->signal.has_name = true;
        how->signal.name = (struct cs_str){e->signame, st->signal.name.n};
    }
}

static void exited(void *arg, const char *id)
{
    struct cs_runner_exec *ex = arg;
    if (!ex->process_exited)
        return;
    struct csw_runner_exit how;
    memset(&how, 0, sizeof how);
    struct cs_str pid = {(char *)(uintptr_t)id, strlen(id)};
    how.process_id = pid;
    const char *ws = cs_supervisor_workspace_of(ex->sup, &pid);
    if (ws) {
        how.has_workspace_id = true;
        how.workspace_id = (struct cs_str){(char *)(uintptr_t)ws, strlen(ws)};
    }
    struct exit_how e = {.how = &how};
    struct csw_mcp_process_status_input in = {.process_id = pid};
    cs_supervisor_status(ex->sup, &in, exit_status, &e);
    ex->process_exited(ex->arg, id, &how);
}

/* ---- file operations, on the pool ---- */

/* One file operation: copies of its inputs (the op is borrowed only for cs_runner_exec_op), its
 * outputs, and its time limit. Created and completed on the loop thread; between the two, only
 * the pool thread running file_work touches in, out, rc and msg. */
/* How long a read or find may run on the loop thread before it moves to a pool thread
 * (job_inline): most calls finish well inside it and skip two cross-thread wake-ups. */
#define CS_EXEC_INLINE_NS ((int64_t)1000000)

struct file_job {
    struct cs_runner_exec *ex;
    cs_runner_done_fn done;
    void *arg;
    enum csw_runner_wire_op_tag tag;
    char *root;
    struct cs_fs_deny *deny;                                      /* borrowed from the executor */
    struct cs_str path, glob, patch;                              /* owned copies */
    struct csw_mcp_apply_patch_input_expected_versions_entry *ev; /* owned, n_ev entries */
    size_t n_ev;
    char op_id[64];          /* apply_patch: the ledger operation naming the crash journal, or "" */
    struct cs_str wsid, key; /* apply_patch: owned copies of the workspace id and operation_key */
    bool ledger_row;         /* apply_patch: minted in the worker's ledger, finished in file_done */
    /* patch_outcomes: owned ids, settle first then ask; the answer's entries point into them */
    char **ids;
    size_t n_settle, n_ask;
    struct csw_runner_wire_patch_outcomes_result_outcomes_item *outcomes; /* ids owned */
    struct cs_str *absent;                                                /* owned */
    size_t n_outcomes, n_absent, cap_outcomes, cap_absent;
    union {
        struct csw_mcp_read_input read; /* read and version */
        struct csw_mcp_find_input find;
        struct csw_mcp_apply_patch_input patch;
    } in;
    union {
        struct csw_mcp_read_output read;
        struct csw_mcp_find_output find;
        struct csw_mcp_apply_patch_output patch;
    } out;
    int rc;
    struct cs_diag msg;
    struct cs_pool_job *pj;
    struct cs_loop_timer *timer; /* the time limit; NULL once fired or cancelled */
    bool timed_out;
    struct cs_runner_prepare prep; /* make NULL: none */
    void *made;                    /* what prep.make returned, until handed to done */
    bool make_only;                /* the work ran inline; only prep.make is left, for a thread */
    bool in_patch_queue;           /* apply_patch: in ex->patch_running or ex->patch_wait */
    struct file_job *patch_next;   /* ... the next there */
};

static int str_copy(struct cs_str *dst, const struct cs_str *src)
{
    dst->s = malloc(src->n + 1);
    if (!dst->s)
        return -1;
    if (src->n)
        memcpy(dst->s, src->s, src->n);
    dst->s[src->n] = '\0';
    dst->n = src->n;
    return 0;
}

/* Whether an apply_patch of op_id was received and has not answered yet. */
static bool patch_in_flight(const struct cs_runner_exec *ex, const struct cs_str *op_id)
{
    for (size_t i = 0; i < ex->n_patches; i++)
        if (strlen(ex->patches[i]->op_id) == op_id->n &&
            memcmp(ex->patches[i]->op_id, op_id->s, op_id->n) == 0)
            return true;
    return false;
}

/* Takes j out of the list at *head (its tail at *tail, or NULL). */
static bool patch_unlink(struct file_job **head, struct file_job **tail, struct file_job *j)
{
    struct file_job *prev = NULL;
    for (struct file_job **p = head; *p; prev = *p, p = &(*p)->patch_next)
        if (*p == j) {
            *p = j->patch_next;
            if (tail && *tail == j)
                *tail = prev;
            j->patch_next = NULL;
            return true;
        }
    return false;
}

/* Whether a patch of root runs or waits. */
static bool patch_busy(const struct cs_runner_exec *ex, const char *root)
{
    for (const struct file_job *q = ex->patch_running; q; q = q->patch_next)
        if (strcmp(q->root, root) == 0)
            return true;
    for (const struct file_job *q = ex->patch_wait; q; q = q->patch_next)
        if (strcmp(q->root, root) == 0)
            return true;
    return false;
}

/* A patch job leaves the queue (done, or failed before it ran). */
static void patch_leave(struct file_job *j)
{
    struct cs_runner_exec *ex = j->ex;
    if (!j->in_patch_queue)
        return;
    j->in_patch_queue = false;
    if (!patch_unlink(&ex->patch_running, NULL, j))
        (void)patch_unlink(&ex->patch_wait, &ex->patch_wait_tail, j);
}

static void job_submit(struct file_job *j);
static void exec_kick(struct cs_runner_exec *ex);
static void job_free(struct file_job *j);

/* The worker's ledger as a patch gets its turn (an earlier patch of the same workspace, so of the
 * same key, has ended): mints the row under the gateway's operation id (so that operation_status
 * answers through any gateway), or answers from the row its operation_key already names,
 * whichever gateway sent it (a replay, its error again, or OPERATION_KEY_CONFLICT). True when it
 * answered (the caller frees j). */
static bool ledger_begin(struct file_job *j)
{
    struct cs_runner_exec *ex = j->ex;
    struct cs_diag sd = {0};
    /* A row under this id already (a gateway sharing this database file, or an id sent twice):
     * the patch runs, recorded by whoever owns that row. */
    struct csw_mcp_operation_status_output had;
    if (cs_store_get_by_id(ex->store, j->op_id, strlen(j->op_id), &had, &sd) == CS_STORE_OK) {
        csw_mcp_operation_status_output_free(&had);
        return false;
    }
    /* The fingerprint covers the root too: two gateways may give one workspace id to two roots
     * of this worker, and a key of one must never replay in the other. */
    size_t rn = strlen(j->root);
    char *scope = malloc(j->wsid.n + 1 + rn + 1);
    char fp[CS_STORE_FINGERPRINT_SIZE];
    struct cs_store_existing row;
    enum cs_store_status ss = CS_STORE_ERROR;
    cs_diag_set(&sd, CSW_ERROR_INTERNAL, "out of memory");
    if (scope) {
        memcpy(scope, j->wsid.s, j->wsid.n);
        scope[j->wsid.n] = '\n';
        memcpy(scope + j->wsid.n + 1, j->root, rn + 1);
        struct csw_mcp_apply_patch_input in = j->in.patch;
        in.workspace_id = (struct cs_str){scope, j->wsid.n + 1 + rn};
        in.has_operation_key = j->key.s != NULL;
        in.operation_key = j->key;
        ss = cs_store_fingerprint(&in, fp, &sd);
        free(scope);
    }
    if (ss == CS_STORE_OK)
        ss = cs_store_mint_as(ex->store, j->wsid.s, j->wsid.n, j->key.s, j->key.n, fp, j->op_id,
                              &row, &sd);
    if (ss == CS_STORE_OK) {
        j->ledger_row = true;
        return false;
    }
    char m[CS_DIAG_TEXT_SIZE + 160];
    if (ss != CS_STORE_KEY_EXISTS) {
        snprintf(m, sizeof m, "the worker's ledger: %s", sd.text);
        fail(j->done, j->arg, CSW_ERROR_INTERNAL, m);
        return true;
    }
    if (strcmp(row.fingerprint, fp) != 0) {
        snprintf(m, sizeof m,
                 "operation_key already names operation %s, a different request (another "
                 "workspace, patch, expected_versions or check_only)",
                 row.id);
        fail(j->done, j->arg, CSW_ERROR_OPERATION_KEY_CONFLICT, m);
        return true;
    }
    enum csw_error code = CSW_ERROR_INTERNAL;
    ss = cs_store_get_error(ex->store, row.id, &code, m, sizeof m, &sd);
    if (ss == CS_STORE_OK) { /* refused with a tool error: the same error again */
        fail(j->done, j->arg, (int)code, m);
        return true;
    }
    struct csw_mcp_apply_patch_output out;
    if (ss != CS_STORE_NOT_FOUND ||
        cs_store_get_result(ex->store, row.id, &out, &sd) != CS_STORE_OK) {
        snprintf(m, sizeof m, "replay of %s from the worker's ledger: %s", row.id, sd.text);
        fail(j->done, j->arg, CSW_ERROR_INTERNAL, m);
        return true;
    }
    /* The stored result (an unfinished row's is unknown, never applied), under its own id. */
    struct csw_runner_wire_result res;
    memset(&res, 0, sizeof res);
    res.tag = CSW_RUNNER_WIRE_RESULT_APPLY_PATCH;
    struct csw_runner_wire_apply_patch_result *r = &res.u.apply_patch.data;
    r->status = out.status;
    r->files.v = out.files.v;
    r->files.n = out.files.n;
    r->changes.v = out.changes.v;
    r->changes.n = out.changes.n;
    r->has_operation_id = true;
    r->operation_id = (struct cs_str){row.id, strlen(row.id)};
    r->has_replayed = true;
    r->replayed = true;
    /* The asker's id is recorded too, with the same outcome: if this answer is lost, its
     * gateway's recovery asks about its own id (patch_outcomes), which must not read as a patch
     * that never ran (rolled_back) when the key's patch was applied. */
    if (out.status != CSW_PATCH_STATUS_UNKNOWN &&
        cs_store_mint_as(ex->store, j->wsid.s, j->wsid.n, NULL, 0, fp, j->op_id, NULL, &sd) ==
            CS_STORE_OK) {
        struct csw_mcp_apply_patch_output alias = out;
        alias.operation_id = (struct cs_str){j->op_id, strlen(j->op_id)}; /* its own row */
        if (cs_store_finish(ex->store, j->op_id, out.status, &alias, false, &sd) != CS_STORE_OK)
            cs_log(CS_LOG_WARNING, "worker ledger: a replay not recorded",
                   json_pack("{s:s,s:s}", "operation_id", j->op_id, "error", sd.text));
    }
    ok(j->done, j->arg, &res);
    csw_mcp_apply_patch_output_free(&out);
    return true;
}

/* Starts each waiting patch whose root has none running, in the order they came. */
static void patch_kick(struct cs_runner_exec *ex)
{
    for (struct file_job *q = ex->patch_wait; q && !ex->freeing;) {
        struct file_job *next = q->patch_next;
        bool running = false;
        for (const struct file_job *r = ex->patch_running; r && !running; r = r->patch_next)
            running = strcmp(r->root, q->root) == 0;
        bool earlier = false; /* an earlier waiting patch of the same root goes first */
        for (const struct file_job *w = ex->patch_wait; w != q && !earlier; w = w->patch_next)
            earlier = strcmp(w->root, q->root) == 0;
        if (!running && !earlier && q->wsid.s != NULL && ledger_begin(q)) {
            job_free(q); /* answered from the ledger: out of the queue */
            q = ex->patch_wait;
            continue;
        }
        if (!running && !earlier) {
            (void)patch_unlink(&ex->patch_wait, &ex->patch_wait_tail, q);
            q->patch_next = ex->patch_running;
            ex->patch_running = q;
            job_submit(q);      /* may answer and free q at once (out of memory) */
            q = ex->patch_wait; /* the list may have changed: from the start */
            continue;
        }
        q = next;
    }
    exec_kick(ex);
}

static void job_free(struct file_job *j);

/* Answers and frees every patch still waiting for its turn (the executor is being freed). */
static void patch_wait_fail_all(struct cs_runner_exec *ex)
{
    while (ex->patch_wait) {
        struct file_job *j = ex->patch_wait;
        fail(j->done, j->arg, CSW_ERROR_INTERNAL,
             "apply_patch was stopped: the server is shutting down (before any write)");
        job_free(j); /* takes it out of the queue */
    }
}

/* Queues the patch job j: it runs now when no other patch of its root runs or waits. */
static void patch_enqueue(struct file_job *j)
{
    struct cs_runner_exec *ex = j->ex;
    j->in_patch_queue = true;
    j->patch_next = NULL;
    if (ex->patch_wait_tail)
        ex->patch_wait_tail->patch_next = j;
    else
        ex->patch_wait = j;
    ex->patch_wait_tail = j;
    patch_kick(ex);
}

static void job_free(struct file_job *j)
{
    struct cs_runner_exec *ex = j->ex;
    patch_leave(j);
    if (j->ledger_row) /* minted, then never run (out of memory, shutting down): nothing ran */
        (void)cs_store_forget(ex->store, j->op_id, NULL);
    for (size_t i = 0; i < ex->n_patches; i++)
        if (ex->patches[i] == j)
            ex->patches[i] = ex->patches[--ex->n_patches];
    for (size_t i = 0; j->ids && i < j->n_settle + j->n_ask; i++)
        free(j->ids[i]);
    free(j->ids);
    for (size_t i = 0; i < j->n_outcomes; i++)
        free(j->outcomes[i].operation_id.s);
    for (size_t i = 0; i < j->n_absent; i++)
        free(j->absent[i].s);
    free(j->outcomes);
    free(j->absent);
    if (j->made)
        j->prep.release(j->made);
    free(j->root);
    free(j->path.s);
    free(j->glob.s);
    free(j->patch.s);
    free(j->wsid.s);
    free(j->key.s);
    for (size_t i = 0; i < j->n_ev; i++) {
        free(j->ev[i].key.s);
        free(j->ev[i].value.s);
    }
    free(j->ev);
    free(j);
}

static struct file_job *job_new(struct cs_runner_exec *ex, enum csw_runner_wire_op_tag tag,
                                const struct csw_runner_workspace *ws, cs_runner_done_fn done,
                                void *arg)
{
    struct file_job *j = calloc(1, sizeof *j);
    if (!j) {
        fail(done, arg, CSW_ERROR_INTERNAL, "out of memory");
        return NULL;
    }
    j->ex = ex;
    j->tag = tag;
    j->done = done;
    j->arg = arg;
    j->root = root_of(ws);
    if (!j->root) {
        fail(done, arg, CSW_ERROR_INTERNAL, "workspace root is not a C string (or out of memory)");
        job_free(j);
        return NULL;
    }
    int rc = 0;
    const char *why =
        tag != CSW_RUNNER_WIRE_OP_PATCH_OUTCOMES ? root_stopped(ex, j->root, &rc) : NULL;
    if (why != NULL) {
        fail(done, arg, rc, why);
        job_free(j);
        return NULL;
    }
    j->deny = deny_of(ex, ws, &rc, &why);
    if (rc != 0) {
        fail(done, arg, rc, why);
        job_free(j);
        return NULL;
    }
    return j;
}

static const char *op_name(enum csw_runner_wire_op_tag tag)
{
    switch (tag) {
    case CSW_RUNNER_WIRE_OP_READ:
        return "read";
    case CSW_RUNNER_WIRE_OP_FIND:
        return "find";
    case CSW_RUNNER_WIRE_OP_VERSION:
        return "the version check";
    case CSW_RUNNER_WIRE_OP_APPLY_PATCH:
        return "apply_patch";
    case CSW_RUNNER_WIRE_OP_PATCH_OUTCOMES:
        return "the patch outcomes";
    case CSW_RUNNER_WIRE_OP_HELLO:
    case CSW_RUNNER_WIRE_OP_EXEC:
    case CSW_RUNNER_WIRE_OP_WRITE_STDIN:
    case CSW_RUNNER_WIRE_OP_READ_PROCESS:
    case CSW_RUNNER_WIRE_OP_PROCESS_STATUS:
    case CSW_RUNNER_WIRE_OP_RESIZE:
    case CSW_RUNNER_WIRE_OP_TERMINATE:
    case CSW_RUNNER_WIRE_OP_WORKSPACE_OF:
    case CSW_RUNNER_WIRE_OP_TERMINATE_WORKSPACE:
    case CSW_RUNNER_WIRE_OP_REPLAY:
    case CSW_RUNNER_WIRE_OP_CANCEL:
    case CSW_RUNNER_WIRE_OP_OPERATION_STATUS:
        break;
    }
    return "the operation";
}

/* patch_outcomes, on the pool thread: one asked id's status (unknown: no journal names it). */
static int outcome_seen(void *arg, const char *op_id, enum csw_patch_status status)
{
    struct file_job *j = arg;
    bool absent = status == CSW_PATCH_STATUS_UNKNOWN;
    size_t *n = absent ? &j->n_absent : &j->n_outcomes;
    size_t *cap = absent ? &j->cap_absent : &j->cap_outcomes;
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 8;
        void *p = absent ? realloc(j->absent, nc * sizeof *j->absent)
                         : realloc(j->outcomes, nc * sizeof *j->outcomes);
        if (p == NULL)
            return -1;
        if (absent)
            j->absent = p;
        else
            j->outcomes = p;
        *cap = nc;
    }
    struct cs_str id = {strdup(op_id), strlen(op_id)};
    if (id.s == NULL)
        return -1;
    if (absent)
        j->absent[(*n)++] = id;
    else
        j->outcomes[(*n)++] =
            (struct csw_runner_wire_patch_outcomes_result_outcomes_item){id, status};
    return 0;
}

/* The fs or patch call, on the job's own copies: on a pool thread, or on the loop thread under a
 * deadline (job_inline). */
static void file_work_with(struct file_job *j, const struct cs_cancel *cancel)
{
    switch (j->tag) {
    case CSW_RUNNER_WIRE_OP_READ:
    case CSW_RUNNER_WIRE_OP_VERSION:
        j->rc = cs_fs_read_deny(j->root, j->deny, &j->in.read, cancel, &j->out.read, &j->msg);
        return;
    case CSW_RUNNER_WIRE_OP_FIND:
        j->rc = cs_fs_find_deny(j->root, j->deny, &j->in.find, CS_FS_FIND_WALK_CAP, cancel,
                                &j->out.find, &j->msg);
        return;
    case CSW_RUNNER_WIRE_OP_APPLY_PATCH:
        j->rc = cs_patch_txn_apply_op(j->root, j->deny, j->op_id, &j->in.patch, cancel,
                                      &j->out.patch, &j->msg);
        return;
    case CSW_RUNNER_WIRE_OP_PATCH_OUTCOMES:
        j->rc = cs_patch_journal_outcomes(j->root, j->deny, (const char *const *)j->ids,
                                          j->n_settle, (const char *const *)j->ids + j->n_settle,
                                          j->n_ask, outcome_seen, j, &j->msg);
        return;
    case CSW_RUNNER_WIRE_OP_HELLO:
    case CSW_RUNNER_WIRE_OP_EXEC:
    case CSW_RUNNER_WIRE_OP_WRITE_STDIN:
    case CSW_RUNNER_WIRE_OP_READ_PROCESS:
    case CSW_RUNNER_WIRE_OP_PROCESS_STATUS:
    case CSW_RUNNER_WIRE_OP_RESIZE:
    case CSW_RUNNER_WIRE_OP_TERMINATE:
    case CSW_RUNNER_WIRE_OP_WORKSPACE_OF:
    case CSW_RUNNER_WIRE_OP_TERMINATE_WORKSPACE:
    case CSW_RUNNER_WIRE_OP_REPLAY:
    case CSW_RUNNER_WIRE_OP_CANCEL:
    case CSW_RUNNER_WIRE_OP_OPERATION_STATUS:
        break;
    }
    assert(0 && "file_work: not a file operation");
}

/* On a pool thread: the work (unless it ran inline already, job_inline), then the caller's
 * make on a read's or find's result, here and never on the loop. */
static void file_work(void *arg, const struct cs_cancel *cancel)
{
    struct file_job *j = arg;
    if (!j->make_only)
        file_work_with(j, cancel);
    if (j->rc != 0 || !j->prep.make)
        return;
    if (j->tag == CSW_RUNNER_WIRE_OP_READ)
        j->made = j->prep.make(j->prep.arg, &j->out.read);
    else if (j->tag == CSW_RUNNER_WIRE_OP_FIND)
        j->made = j->prep.make(j->prep.arg, &j->out.find);
}

/* Frees j's outputs (zeroed on error and before the work, so this is always right). */
static void job_out_free(struct file_job *j)
{
    if (j->tag == CSW_RUNNER_WIRE_OP_FIND)
        csw_mcp_find_output_free(&j->out.find);
    else if (j->tag == CSW_RUNNER_WIRE_OP_APPLY_PATCH)
        csw_mcp_apply_patch_output_free(&j->out.patch);
    else
        csw_mcp_read_output_free(&j->out.read);
}

/* Whether the answer of j, done inline, is worth a thread of its own: its make would hold the
 * loop about as long as the inline work may (a read window past 64 KiB, a listing past 1,024
 * paths), against a thread hop's tens of microseconds. */
static bool make_later(const struct file_job *j)
{
    if (!j->prep.make || j->rc != 0)
        return false;
    if (j->tag == CSW_RUNNER_WIRE_OP_READ)
        return j->out.read.content.n > 65536;
    return j->tag == CSW_RUNNER_WIRE_OP_FIND && j->out.find.paths.n > 1024;
}

/* Records a patch's end in the worker's ledger (ledger_begin minted its row): its result, or
 * the tool error it answers (code not 0), which a replay then answers again. A record that fails
 * leaves the row unfinished: a replay answers unknown, never applied. */
static void ledger_finish(struct file_job *j, int code, const char *msg)
{
    if (!j->ledger_row)
        return;
    j->ledger_row = false;
    struct cs_diag sd = {0};
    enum cs_store_status ss;
    if (code != 0) {
        ss = cs_store_finish_rejected(j->ex->store, j->op_id, (enum csw_error)code, msg, &sd);
    } else {
        struct csw_mcp_apply_patch_output out = j->out.patch;
        out.operation_id = (struct cs_str){j->op_id, strlen(j->op_id)};
        ss = cs_store_finish(j->ex->store, j->op_id, out.status, &out, false, &sd);
    }
    if (ss != CS_STORE_OK) /* the row stays unknown: a replay answers unknown, never applied */
        cs_log(CS_LOG_WARNING, "worker ledger: an outcome not recorded",
               json_pack("{s:s,s:s}", "operation_id", j->op_id, "error", sd.text));
}

/* On the loop thread, once file_work has returned: the reply, then the job goes. */
static void file_done(void *arg)
{
    struct file_job *j = arg;
    struct cs_runner_exec *ex = j->ex;
    /* Out of the queue before the answer: a mutation its caller starts from the answer (the
     * gateway's next in its own queue) must not find this patch still running. */
    bool was_patch = j->in_patch_queue;
    patch_leave(j);
    ident_flush_all(j->ex); /* what a find remembered, what a read or patch forgot */
    cs_loop_timer_cancel(j->timer);
    j->timer = NULL;
    struct csw_runner_wire_result res;
    memset(&res, 0, sizeof res);
    if (j->rc == CSW_ERROR_TIMEOUT) {
        /* The job saw its cancel flag: the time limit, or the executor is being freed. */
        struct cs_diag dg;
        if (j->timed_out)
            cs_diag_set(&dg, CSW_ERROR_TIMEOUT,
                        "%s did not finish within the time limit of %" PRId64
                        " ms of file operations and was stopped%s",
                        op_name(j->tag), j->ex->timeout_ms,
                        j->tag == CSW_RUNNER_WIRE_OP_APPLY_PATCH ? " before any write" : "");
        else
            cs_diag_set(&dg, CSW_ERROR_INTERNAL, "%s was stopped: the server is shutting down%s",
                        op_name(j->tag),
                        j->tag == CSW_RUNNER_WIRE_OP_APPLY_PATCH ? " (before any write)" : "");
        ledger_finish(j, (int)dg.code, dg.text);
        fail(j->done, j->arg, (int)dg.code, dg.text);
    } else if (j->tag == CSW_RUNNER_WIRE_OP_VERSION && j->rc == CSW_ERROR_FILE_NOT_FOUND) {
        res.tag = CSW_RUNNER_WIRE_RESULT_VERSION;
        res.u.version.data.version = (struct cs_str){"absent", 6};
        ok(j->done, j->arg, &res);
    } else if (j->rc != 0) {
        ledger_finish(j, j->rc, j->msg.text);
        fail(j->done, j->arg, j->rc, j->msg.text);
    } else {
        switch (j->tag) {
        case CSW_RUNNER_WIRE_OP_READ:
            res.tag = CSW_RUNNER_WIRE_RESULT_READ;
            res.u.read.data = j->out.read;
            break;
        case CSW_RUNNER_WIRE_OP_VERSION:
            res.tag = CSW_RUNNER_WIRE_RESULT_VERSION;
            res.u.version.data.version = j->out.read.version;
            break;
        case CSW_RUNNER_WIRE_OP_FIND:
            res.tag = CSW_RUNNER_WIRE_RESULT_FIND;
            res.u.find.data = j->out.find;
            break;
        case CSW_RUNNER_WIRE_OP_APPLY_PATCH:
            ledger_finish(j, 0, NULL);
            res.tag = CSW_RUNNER_WIRE_RESULT_APPLY_PATCH;
            res.u.apply_patch.data.status = j->out.patch.status;
            res.u.apply_patch.data.files.v = j->out.patch.files.v;
            res.u.apply_patch.data.files.n = j->out.patch.files.n;
            res.u.apply_patch.data.changes.v = j->out.patch.changes.v;
            res.u.apply_patch.data.changes.n = j->out.patch.changes.n;
            break;
        case CSW_RUNNER_WIRE_OP_PATCH_OUTCOMES:
            res.tag = CSW_RUNNER_WIRE_RESULT_PATCH_OUTCOMES;
            res.u.patch_outcomes.data.outcomes.v = j->outcomes;
            res.u.patch_outcomes.data.outcomes.n = j->n_outcomes;
            res.u.patch_outcomes.data.absent.v = j->absent;
            res.u.patch_outcomes.data.absent.n = j->n_absent;
            break;
        case CSW_RUNNER_WIRE_OP_HELLO:
        case CSW_RUNNER_WIRE_OP_EXEC:
        case CSW_RUNNER_WIRE_OP_WRITE_STDIN:
        case CSW_RUNNER_WIRE_OP_READ_PROCESS:
        case CSW_RUNNER_WIRE_OP_PROCESS_STATUS:
        case CSW_RUNNER_WIRE_OP_RESIZE:
        case CSW_RUNNER_WIRE_OP_TERMINATE:
        case CSW_RUNNER_WIRE_OP_WORKSPACE_OF:
        case CSW_RUNNER_WIRE_OP_TERMINATE_WORKSPACE:
        case CSW_RUNNER_WIRE_OP_REPLAY:
        case CSW_RUNNER_WIRE_OP_CANCEL:
        case CSW_RUNNER_WIRE_OP_OPERATION_STATUS:
            assert(0 && "file_done: not a file operation");
        }
        void *made = j->made;
        j->made = NULL; /* done's now */
        ok_made(j->done, j->arg, &res, made);
    }
    job_out_free(j);
    job_free(j);
    if (was_patch)
        patch_kick(ex); /* the next patch of that root, if one waits */
}

/* The time limit: ask the job to stop; file_done answers once it has. */
static void file_timeout(void *arg)
{
    struct file_job *j = arg;
    j->timer = NULL;
    j->timed_out = true;
    cs_pool_cancel(j->pj);
}

/* Runs j's work on the loop thread under a deadline of CS_EXEC_INLINE_NS. True when it finished
 * in time (file_done has answered and freed j); false when the deadline cut it short: nothing
 * was answered, and j is as it was, to run again from the start on a pool thread. Only reads and
 * walks: they change nothing, so running one twice is safe, and a slice of either is bounded
 * (one 256 KiB chunk, or a directory's entries), so the loop is held for about a millisecond at
 * most (P6). A patch always goes to the pool. Also false, with j->make_only set, when the work
 * finished but its prepared answer is big enough to be made on a thread (make_later). */
static bool job_inline(struct file_job *j)
{
    if (j->tag != CSW_RUNNER_WIRE_OP_READ && j->tag != CSW_RUNNER_WIRE_OP_VERSION &&
        j->tag != CSW_RUNNER_WIRE_OP_FIND)
        return false;
    struct cs_cancel c = {.deadline_ns = cs_cancel_now_ns() + CS_EXEC_INLINE_NS};
    atomic_init(&c.set, false);
    file_work_with(j, &c);
    if (j->rc == CSW_ERROR_TIMEOUT && cs_cancel_requested(&c)) {
        /* Cut short: outputs are zeroed on error; start again on a thread. */
        job_out_free(j);
        j->rc = 0;
        cs_diag_clear(&j->msg);
        return false;
    }
    if (make_later(j)) {
        j->make_only = true; /* the answer is made on a thread (job_submit) */
        return false;
    }
    file_done(j);
    return true;
}

static void job_submit(struct file_job *j)
{
    struct cs_runner_exec *ex = j->ex;
    if (job_inline(j))
        return;
    j->timer = cs_loop_timer_add(ex->loop, ex->timeout_ms, file_timeout, j);
    if (j->timer)
        j->pj = cs_pool_submit(ex->pool, file_work, file_done, j);
    if (!j->pj) {
        cs_loop_timer_cancel(j->timer);
        fail(j->done, j->arg, CSW_ERROR_INTERNAL, "out of memory (or shutting down)");
        job_out_free(j); /* a make_only job holds the inline work's outputs */
        job_free(j);
    }
}

/* Copies src into the job's dst; out of memory, answers the call and frees the job: -1. */
static int job_str(struct file_job *j, struct cs_str *dst, const struct cs_str *src)
{
    if (str_copy(dst, src) == 0)
        return 0;
    fail(j->done, j->arg, CSW_ERROR_INTERNAL, "out of memory");
    job_free(j);
    return -1;
}

static void op_read(struct cs_runner_exec *ex, const struct csw_runner_wire_read_data *d,
                    const struct cs_runner_prepare *prep, cs_runner_done_fn done, void *arg)
{
    struct file_job *j = job_new(ex, CSW_RUNNER_WIRE_OP_READ, &d->workspace, done, arg);
    if (!j)
        return;
    if (prep)
        j->prep = *prep;
    if (job_str(j, &j->path, &d->path) != 0)
        return;
    /* The request carries the MCP input's arguments as they are (wire.json refers to them). */
    j->in.read = (struct csw_mcp_read_input){.args = d->args};
    j->in.read.path = j->path; /* the job's own copy: the request is freed before the job runs */
    job_submit(j);
}

static void op_find(struct cs_runner_exec *ex, const struct csw_runner_wire_find_data *d,
                    const struct cs_runner_prepare *prep, cs_runner_done_fn done, void *arg)
{
    struct file_job *j = job_new(ex, CSW_RUNNER_WIRE_OP_FIND, &d->workspace, done, arg);
    if (!j)
        return;
    if (prep)
        j->prep = *prep;
    if (d->has_glob && job_str(j, &j->glob, &d->glob) != 0)
        return;
    j->in.find = (struct csw_mcp_find_input){.args = d->args};
    j->in.find.glob = j->glob; /* the job's own copy (empty when absent) */
    job_submit(j);
}

static void op_version(struct cs_runner_exec *ex, const struct csw_runner_wire_version_data *d,
                       cs_runner_done_fn done, void *arg)
{
    struct file_job *j = job_new(ex, CSW_RUNNER_WIRE_OP_VERSION, &d->workspace, done, arg);
    if (!j)
        return;
    if (job_str(j, &j->path, &d->path) != 0)
        return;
    j->in.read = (struct csw_mcp_read_input){.path = j->path, .has_limit = true, .limit = 1};
    job_submit(j);
}

static void op_apply_patch(struct cs_runner_exec *ex,
                           const struct csw_runner_wire_apply_patch_data *d, cs_runner_done_fn done,
                           void *arg)
{
    if (d->workspace.profile != CSW_RUNNER_WORKSPACE_PROFILE_WORKSPACE_WRITE) {
        fail(done, arg, CSW_ERROR_UNAUTHORIZED, "the workspace profile does not allow writes");
        return;
    }
    /* An exclusive workspace held by a live process refuses a patch here too, whichever gateway
     * started the process (a worker shared by gateways, issue 32; each gateway's own lease
     * refuses it first for its own processes). */
    if (!(d->has_check_only && d->check_only) &&
        !(d->workspace.has_processes &&
          d->workspace.processes == CSW_RUNNER_WORKSPACE_PROCESSES_SHARED)) {
        char *wsid = strndup(d->workspace.id.s, d->workspace.id.n);
        if (!wsid) {
            fail(done, arg, CSW_ERROR_INTERNAL, "out of memory");
            return;
        }
        const char *holder = cs_supervisor_workspace_holder(ex->sup, wsid);
        if (holder) {
            char m[512];
            snprintf(m, sizeof m,
                     "workspace \"%.200s\" is held by its live process %s (processes: "
                     "exclusive): wait for it to exit (process_status) or terminate it",
                     wsid, holder);
            free(wsid);
            fail(done, arg, CSW_ERROR_WORKSPACE_BUSY, m);
            return;
        }
        free(wsid);
    }
    struct file_job *j = job_new(ex, CSW_RUNNER_WIRE_OP_APPLY_PATCH, &d->workspace, done, arg);
    if (!j)
        return;
    /* The two expected_versions entry types are generated from the same shape. */
    _Static_assert(sizeof(struct csw_runner_wire_apply_patch_data_expected_versions_entry) ==
                       sizeof(struct csw_mcp_apply_patch_input_expected_versions_entry),
                   "expected_versions entries differ");
    bool oom = str_copy(&j->patch, &d->patch) != 0;
    /* The schema caps it at 64 characters; a NUL or a longer id names no journal. */
    if (d->has_operation_id && d->operation_id.n < sizeof j->op_id &&
        memchr(d->operation_id.s, '\0', d->operation_id.n) == NULL) {
        memcpy(j->op_id, d->operation_id.s, d->operation_id.n);
        j->op_id[d->operation_id.n] = '\0';
    }
    if (!oom && d->has_expected_versions && d->expected_versions.n > 0) {
        j->ev = calloc(d->expected_versions.n, sizeof *j->ev);
        oom = !j->ev;
        for (size_t i = 0; !oom && i < d->expected_versions.n; i++) {
            oom = str_copy(&j->ev[i].key, &d->expected_versions.v[i].key) != 0 ||
                  str_copy(&j->ev[i].value, &d->expected_versions.v[i].value) != 0;
            j->n_ev = i + 1; /* job_free frees a half-copied entry too (calloc'd) */
        }
    }
    /* The worker's ledger records the patch under its gateway's id (ledger_begin), with its
     * operation_key if it has one. */
    if (!oom && ex->ledger && ex->store && j->op_id[0] != '\0' &&
        strlen(j->op_id) < CS_STORE_ID_SIZE)
        oom = str_copy(&j->wsid, &d->workspace.id) != 0 ||
              (d->has_operation_key && str_copy(&j->key, &d->operation_key) != 0);
    if (oom) {
        fail(done, arg, CSW_ERROR_INTERNAL, "out of memory");
        job_free(j);
        return;
    }
    j->in.patch = (struct csw_mcp_apply_patch_input){
        .patch = j->patch,
        .has_expected_versions = d->has_expected_versions,
        .expected_versions = {j->ev, j->n_ev},
        .has_check_only = d->has_check_only,
        .check_only = d->check_only,
    };
    /* In flight from here until it answers: patch_outcomes never calls it absent meanwhile. */
    if (j->op_id[0] != '\0') {
        if (ex->n_patches == ex->cap_patches) {
            size_t nc = ex->cap_patches ? ex->cap_patches * 2 : 8;
            void *np = realloc(ex->patches, nc * sizeof *ex->patches);
            if (!np) {
                fail(done, arg, CSW_ERROR_INTERNAL, "out of memory");
                job_free(j);
                return;
            }
            ex->patches = np;
            ex->cap_patches = nc;
        }
        ex->patches[ex->n_patches++] = j;
    }
    /* A keyed check_only patch is queued too: its turn comes after an earlier one of its key. */
    if (!(d->has_check_only && d->check_only) || j->key.s != NULL)
        patch_enqueue(j);
    else if (j->wsid.s != NULL && ledger_begin(j))
        job_free(j);
    else
        job_submit(j); /* writes nothing: not ordered with the others, holds nothing */
}

/* The crash journals of a workspace whose ledger is the gateway's (patch_txn.h,
 * cs_patch_journal_outcomes): an id whose patch is in flight here is left out of ask. */
static void op_patch_outcomes(struct cs_runner_exec *ex,
                              const struct csw_runner_wire_patch_outcomes_data *d,
                              cs_runner_done_fn done, void *arg)
{
    if (d->workspace.profile != CSW_RUNNER_WORKSPACE_PROFILE_WORKSPACE_WRITE) {
        fail(done, arg, CSW_ERROR_UNAUTHORIZED, "the workspace profile does not allow writes");
        return;
    }
    struct file_job *j = job_new(ex, CSW_RUNNER_WIRE_OP_PATCH_OUTCOMES, &d->workspace, done, arg);
    if (!j)
        return;
    size_t ns = d->has_settle ? d->settle.n : 0, na = d->has_ask ? d->ask.n : 0;
    j->ids = calloc(ns + na + 1, sizeof *j->ids);
    bool oom = !j->ids;
    for (size_t i = 0; !oom && i < ns; i++) {
        oom = (j->ids[i] = strndup(d->settle.v[i].s, d->settle.v[i].n)) == NULL;
        j->n_settle = i + 1;
    }
    for (size_t i = 0; !oom && i < na; i++) {
        /* In flight: not known yet. A NUL inside: names no journal (the schema allows it). */
        if (patch_in_flight(ex, &d->ask.v[i]) || memchr(d->ask.v[i].s, '\0', d->ask.v[i].n))
            continue;
        oom = (j->ids[j->n_settle + j->n_ask] = strndup(d->ask.v[i].s, d->ask.v[i].n)) == NULL;
        j->n_ask++;
    }
    if (oom) {
        fail(done, arg, CSW_ERROR_INTERNAL, "out of memory");
        job_free(j);
        return;
    }
    /* On the loop thread, before the next frame is read: a call the gateway sends after it (the
     * first read after a start) finds the workspace recovered. Recovery renames and unlinks what
     * a journal names and reads no content, so it is short. */
    struct cs_cancel c = {.deadline_ns = 0};
    atomic_init(&c.set, false);
    file_work_with(j, &c);
    /* The worker's own rows of these patches end as the gateway's do (tools_recover.c): a
     * journal's status, or rolled_back where none names the id (nothing was written). */
    /* An id no journal names but the worker's ledger finished (a replay recorded under the
     * asker's id, ledger_begin): its outcome, not absent. */
    for (size_t i = 0; ex->ledger && ex->store && j->rc == 0 && i < j->n_absent;) {
        struct csw_mcp_operation_status_output row;
        enum csw_patch_status st = CSW_PATCH_STATUS_UNKNOWN;
        if (cs_store_get_by_id(ex->store, j->absent[i].s, j->absent[i].n, &row, NULL) ==
            CS_STORE_OK) {
            if (row.has_finished_at)
                st = row.status;
            csw_mcp_operation_status_output_free(&row);
        }
        if (st == CSW_PATCH_STATUS_UNKNOWN || outcome_seen(j, j->absent[i].s, st) != 0) {
            i++;
            continue;
        }
        free(j->absent[i].s);
        j->absent[i] = j->absent[--j->n_absent];
    }
    char *wsid = ex->ledger && ex->store && j->rc == 0
                     ? strndup(d->workspace.id.s, d->workspace.id.n)
                     : NULL;
    for (size_t i = 0; wsid && i < j->n_outcomes + j->n_absent; i++) {
        bool journal = i < j->n_outcomes;
        const char *id = journal ? j->outcomes[i].operation_id.s : j->absent[i - j->n_outcomes].s;
        enum csw_patch_status st = journal ? j->outcomes[i].status : CSW_PATCH_STATUS_ROLLED_BACK;
        if (st != CSW_PATCH_STATUS_UNKNOWN)
            (void)cs_store_recover(ex->store, wsid, id, st, NULL, NULL);
    }
    free(wsid);
    if (j->rc == 0 || j->rc == CSW_ERROR_FILE_OPERATION_FAILED || j->rc == CSW_ERROR_PATH_DENIED)
        root_stop(ex, j->root, j->rc == 0 ? NULL : j->msg.text, j->rc);
    file_done(j);
}

/* operation_status on the worker's ledger (issue 32): the row an id or a key names, whichever
 * gateway sent its patch. A runner without a ledger knows no operation. */
static void op_operation_status(struct cs_runner_exec *ex,
                                const struct csw_runner_wire_operation_status_data *d,
                                cs_runner_done_fn done, void *arg)
{
    if (!ex->ledger || !ex->store) {
        fail(done, arg, CSW_ERROR_OPERATION_NOT_FOUND,
             "this runner keeps no operation ledger (its gateway does)");
        return;
    }
    if (d->has_operation_id == d->has_operation_key) {
        fail(done, arg, CSW_ERROR_INVALID_ARGUMENTS,
             "operation_status: exactly one of operation_id or operation_key");
        return;
    }
    struct csw_runner_wire_result res;
    memset(&res, 0, sizeof res);
    res.tag = CSW_RUNNER_WIRE_RESULT_OPERATION_STATUS;
    struct cs_diag sd = {0};
    enum cs_store_status ss =
        d->has_operation_id ? cs_store_get_by_id(ex->store, d->operation_id.s, d->operation_id.n,
                                                 &res.u.operation_status.data, &sd)
                            : cs_store_get_by_key(ex->store, d->operation_key.s, d->operation_key.n,
                                                  &res.u.operation_status.data, &sd);
    if (ss == CS_STORE_NOT_FOUND) {
        fail(done, arg, CSW_ERROR_OPERATION_NOT_FOUND,
             d->has_operation_id ? "no operation with this operation_id in the worker's ledger"
                                 : "no operation with this operation_key in the worker's ledger");
        return;
    }
    if (ss != CS_STORE_OK) {
        char m[CS_DIAG_TEXT_SIZE + 32];
        snprintf(m, sizeof m, "the worker's ledger: %s", sd.text);
        fail(done, arg, CSW_ERROR_INTERNAL, m);
        return;
    }
    ok(done, arg, &res);
    csw_mcp_operation_status_output_free(&res.u.operation_status.data);
}

/* ---- process operations, on the supervisor ---- */

/* A command waiting for its workspace's patches: its exec data as the generated encoder wrote
 * them (the op is borrowed only for cs_runner_exec_op), read back when its turn comes. */
struct exec_wait {
    struct exec_wait *next;
    char *root;
    json_t *data;
    cs_runner_done_fn done;
    void *arg;
};

static void exec_wait_free(struct exec_wait *e)
{
    free(e->root);
    json_decref(e->data);
    free(e);
}

/* Takes e out of the waiting commands (prev: the one before it, or NULL). */
static void exec_wait_unlink(struct cs_runner_exec *ex, struct exec_wait **at,
                             struct exec_wait *prev)
{
    struct exec_wait *e = *at;
    *at = e->next;
    if (ex->exec_wait_tail == e)
        ex->exec_wait_tail = prev;
}

static void op_exec(struct cs_runner_exec *ex, const struct csw_runner_wire_exec_data *d,
                    cs_runner_done_fn done, void *arg);

/* Starts each waiting command whose root no patch runs in or waits for, in the order they came
 * (a patch that came after a command still goes first: the command then starts a live process,
 * which the patch must not meet in an exclusive workspace). */
static void exec_kick(struct cs_runner_exec *ex)
{
    struct exec_wait **at = &ex->exec_wait, *prev = NULL;
    while (*at && !ex->freeing) {
        struct exec_wait *e = *at;
        if (patch_busy(ex, e->root)) {
            prev = e;
            at = &e->next;
            continue;
        }
        exec_wait_unlink(ex, at, prev);
        struct csw_runner_wire_exec_data d;
        struct cs_wire_diag dg;
        if (csw_runner_wire_exec_data_decode(e->data, &d, &dg) != CS_WIRE_OK) {
            fail(e->done, e->arg, CSW_ERROR_INTERNAL,
                 "a command that waited for the workspace's patch could not be read back");
        } else {
            op_exec(ex, &d, e->done, e->arg);
            csw_runner_wire_exec_data_free(&d);
        }
        exec_wait_free(e);
        at = &ex->exec_wait; /* the list may have changed: from the start */
        prev = NULL;
    }
}

/* Answers and frees every command still waiting (the executor is being freed). */
static void exec_wait_fail_all(struct cs_runner_exec *ex)
{
    while (ex->exec_wait) {
        struct exec_wait *e = ex->exec_wait;
        exec_wait_unlink(ex, &ex->exec_wait, NULL);
        fail(e->done, e->arg, CSW_ERROR_INTERNAL,
             "exec_command was stopped: the server is shutting down (the command never started)");
        exec_wait_free(e);
    }
}

/* Queues the command d of root (taken) until no patch of root runs or waits. */
static void exec_defer(struct cs_runner_exec *ex, char *root,
                       const struct csw_runner_wire_exec_data *d, cs_runner_done_fn done, void *arg)
{
    struct exec_wait *e = calloc(1, sizeof *e);
    struct cs_wire_diag dg;
    if (!e || csw_runner_wire_exec_data_encode(d, &e->data, &dg) != CS_WIRE_OK) {
        fail(done, arg, CSW_ERROR_INTERNAL,
             "out of memory (a command waiting for the workspace's patch to end)");
        free(root);
        free(e);
        return;
    }
    e->root = root;
    e->done = done;
    e->arg = arg;
    if (ex->exec_wait_tail)
        ex->exec_wait_tail->next = e;
    else
        ex->exec_wait = e;
    ex->exec_wait_tail = e;
}

static void op_exec(struct cs_runner_exec *ex, const struct csw_runner_wire_exec_data *d,
                    cs_runner_done_fn done, void *arg)
{
    if (d->workspace.profile != CSW_RUNNER_WORKSPACE_PROFILE_WORKSPACE_WRITE ||
        d->workspace.environment_kind != CSW_RUNNER_WORKSPACE_ENVIRONMENT_KIND_HOST) {
        fail(done, arg, CSW_ERROR_UNAUTHORIZED,
             "the workspace is not a writable host workspace: no exec");
        return;
    }
    char *root = root_of(&d->workspace);
    int scode = 0;
    const char *why = root_stopped(ex, root, &scode);
    if (why != NULL) {
        fail(done, arg, scode, why);
        free(root);
        return;
    }
    /* An exclusive workspace: no command starts while a patch of it runs or waits here (sent
     * by another gateway: each gateway's own lease keeps its own exec behind its own patch); it
     * waits its turn, as it would in its own gateway's queue. */
    if (root && patch_busy(ex, root) &&
        !(d->workspace.has_processes &&
          d->workspace.processes == CSW_RUNNER_WORKSPACE_PROCESSES_SHARED)) {
        exec_defer(ex, root, d, done, arg);
        return;
    }
    char *pid = strndup(d->process_id.s, d->process_id.n);
    char *wsid = strndup(d->workspace.id.s, d->workspace.id.n);
    struct pending *p = NULL;
    char **masks = NULL;
    size_t n_masks = 0;
    int drc = 0;
    const char *dwhy = NULL;
    struct cs_diag dmsg = {0};
    struct cs_fs_deny *deny = deny_of(ex, &d->workspace, &drc, &dwhy);
    if (drc == 0 && deny) {
        /* At each spawn: what the rules deny now (and the files known under other names) is
         * remembered and masked in the sandbox; a mask list that cannot be built fails the
         * spawn instead of running the command with the secrets visible. */
        int rootfd = -1;
        drc = root ? cs_fs_root_open(root, &rootfd, &dmsg) : 0;
        if (drc == 0 && rootfd >= 0) {
            drc = cs_fs_deny_scan(deny, rootfd, &masks, &n_masks, &dmsg);
            close(rootfd);
        }
        ident_flush_all(ex); /* what the scan learned, before the command can move it */
        if (drc != 0)
            drc = CSW_ERROR_PROCESS_SPAWN_FAILED;
        dwhy = dmsg.text;
    }
    if (!root || !pid || !wsid || d->process_id.n >= CS_SUPERVISOR_ID_SIZE) {
        fail(done, arg, CSW_ERROR_INTERNAL,
             !root ? "workspace root is not a C string" : "bad process_id or out of memory");
    } else if (d->output_bytes_cap > CS_SUPERVISOR_RING_MAX) {
        /* The whole ring may be answered in one frame: a bigger one could not be sent. */
        char m[128];
        snprintf(m, sizeof m, "output_bytes_cap %" PRId64 " is above the runner's %d bytes",
                 d->output_bytes_cap, CS_SUPERVISOR_RING_MAX);
        fail(done, arg, CSW_ERROR_PROCESS_SPAWN_FAILED, m);
    } else if (drc != 0) {
        fail(done, arg, drc, dwhy);
    } else if ((p = pending_new(ex, done, arg, CSW_RUNNER_WIRE_RESULT_EXEC))) {
        struct cs_supervisor_spawn sp = {
            .process_id = pid,
            .root = root,
            .argv = d->argv.v,
            .argc = d->argv.n,
            .workspace_id = wsid,
            .writable = d->policy.workspace_profile ==
                        CSW_RUNNER_WIRE_EXEC_DATA_POLICY_WORKSPACE_PROFILE_WORKSPACE_WRITE,
            .network = exec_network(d->policy.network),
            .workspace_netns = d->workspace.has_processes &&
                               d->workspace.processes == CSW_RUNNER_WORKSPACE_PROCESSES_SHARED,
            .exclusive = !(d->workspace.has_processes &&
                           d->workspace.processes == CSW_RUNNER_WORKSPACE_PROCESSES_SHARED),
            .has_network_allow = d->policy.has_network_allow,
            .network_allow = d->policy.network_allow.v,
            .n_network_allow = d->policy.network_allow.n,
            .deny_mask = masks,
            .n_deny_mask = n_masks,
            .tty = d->tty,
            /* The workspace's limits (docs/operations.md): timeout_ms 0 is no time limit. */
            .timeout_ms = d->timeout_ms > 0 ? d->timeout_ms : CS_SUPERVISOR_NO_TIME_LIMIT,
            .max_live = d->has_max_live_processes ? d->max_live_processes : 0,
            .ring_bytes = (size_t)d->output_bytes_cap,
            .yield_ms = d->has_yield_ms ? d->yield_ms : 0,
            .on_exit = exited,
            .exit_arg = ex,
        };
        struct cs_diag dg = {0};
        int rc = cs_supervisor_spawn(ex->sup, &sp, sup_done, p, &dg);
        if (rc != 0) {
            pending_unlink(p);
            fail(done, arg, rc, dg.text);
            free(p);
        }
    }
    for (size_t i = 0; i < n_masks; i++)
        free(masks[i]);
    free(masks);
    free(root);
    free(pid);
    free(wsid);
}

void cs_runner_exec_cancel(struct cs_runner_exec *ex, cs_runner_done_fn done, void *arg,
                           const struct cs_str *process_id,
                           struct csw_runner_wire_cancel_result *res)
{
    res->found = false;
    res->killed = false;
    /* The kill first: answering the wait below may free what process_id points into. */
    if (process_id)
        res->killed = cs_supervisor_kill(ex->sup, process_id);
    if (!done)
        return;
    for (struct pending *p = ex->pending; p; p = p->next) {
        if (p->done == done && p->arg == arg) {
            res->found = cs_supervisor_cancel(ex->sup, sup_done, p);
            return;
        }
    }
    for (struct exec_wait **at = &ex->exec_wait, *prev = NULL; *at; prev = *at, at = &(*at)->next)
        if ((*at)->done == done && (*at)->arg == arg) {
            struct exec_wait *e = *at;
            exec_wait_unlink(ex, at, prev);
            res->found = true;
            fail(done, arg, CSW_ERROR_TIMEOUT,
                 "cancelled while it waited for the workspace's patch to end: nothing ran");
            exec_wait_free(e);
            return;
        }
}

void cs_runner_exec_op(struct cs_runner_exec *ex, const struct csw_runner_wire_op *op,
                       const struct cs_runner_prepare *prep, cs_runner_done_fn done, void *arg)
{
    struct pending *p;
    if (prep && !prep->make)
        prep = NULL;
    switch (op->tag) {
    case CSW_RUNNER_WIRE_OP_READ:
        op_read(ex, &op->u.read.data, prep, done, arg);
        return;
    case CSW_RUNNER_WIRE_OP_FIND:
        op_find(ex, &op->u.find.data, prep, done, arg);
        return;
    case CSW_RUNNER_WIRE_OP_VERSION:
        op_version(ex, &op->u.version.data, done, arg);
        return;
    case CSW_RUNNER_WIRE_OP_APPLY_PATCH:
        op_apply_patch(ex, &op->u.apply_patch.data, done, arg);
        return;
    case CSW_RUNNER_WIRE_OP_PATCH_OUTCOMES:
        op_patch_outcomes(ex, &op->u.patch_outcomes.data, done, arg);
        return;
    case CSW_RUNNER_WIRE_OP_EXEC:
        op_exec(ex, &op->u.exec.data, done, arg);
        return;
    case CSW_RUNNER_WIRE_OP_WRITE_STDIN:
        if ((p = pending_new(ex, done, arg, CSW_RUNNER_WIRE_RESULT_WRITE_STDIN)))
            cs_supervisor_write_stdin(ex->sup, &op->u.write_stdin.data, sup_done, p);
        return;
    case CSW_RUNNER_WIRE_OP_READ_PROCESS:
        if ((p = pending_new(ex, done, arg, CSW_RUNNER_WIRE_RESULT_READ_PROCESS)))
            cs_supervisor_read(ex->sup, &op->u.read_process.data, sup_done, p);
        return;
    case CSW_RUNNER_WIRE_OP_PROCESS_STATUS:
        if ((p = pending_new(ex, done, arg, CSW_RUNNER_WIRE_RESULT_PROCESS_STATUS)))
            cs_supervisor_status(ex->sup, &op->u.process_status.data, sup_done, p);
        return;
    case CSW_RUNNER_WIRE_OP_RESIZE:
        if ((p = pending_new(ex, done, arg, CSW_RUNNER_WIRE_RESULT_RESIZE)))
            cs_supervisor_resize(ex->sup, &op->u.resize.data, sup_done, p);
        return;
    case CSW_RUNNER_WIRE_OP_TERMINATE:
        if ((p = pending_new(ex, done, arg, CSW_RUNNER_WIRE_RESULT_TERMINATE)))
            cs_supervisor_terminate(ex->sup, &op->u.terminate.data, sup_done, p);
        return;
    case CSW_RUNNER_WIRE_OP_WORKSPACE_OF: {
        const char *ws = cs_supervisor_workspace_of(ex->sup, &op->u.workspace_of.data.process_id);
        if (!ws) {
            fail(done, arg, CSW_ERROR_PROCESS_NOT_FOUND, "no process with this process_id");
            return;
        }
        struct csw_runner_wire_result res = {.tag = CSW_RUNNER_WIRE_RESULT_WORKSPACE_OF};
        res.u.workspace_of.data.workspace_id = (struct cs_str){(char *)ws, strlen(ws)};
        ok(done, arg, &res);
        return;
    }
    case CSW_RUNNER_WIRE_OP_TERMINATE_WORKSPACE: {
        struct csw_runner_wire_result res = {.tag = CSW_RUNNER_WIRE_RESULT_TERMINATE_WORKSPACE};
        res.u.terminate_workspace.data.count = (int64_t)cs_supervisor_terminate_workspace(
            ex->sup, &op->u.terminate_workspace.data.workspace_id);
        ok(done, arg, &res);
        return;
    }
    case CSW_RUNNER_WIRE_OP_OPERATION_STATUS:
        op_operation_status(ex, &op->u.operation_status.data, done, arg);
        return;
    case CSW_RUNNER_WIRE_OP_HELLO:
    case CSW_RUNNER_WIRE_OP_REPLAY:
    case CSW_RUNNER_WIRE_OP_CANCEL:
        break;
    }
    fail(done, arg, CSW_ERROR_INTERNAL, "hello, replay and cancel belong to the connection");
}
