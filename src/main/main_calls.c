/*
 * main_calls: one log line per tool call, and the denial warnings (see main_calls.h).
 *
 * Where denials come from: the gateway learns a process's denials only from the answers that
 * carry them (exec_command with yield_ms, read_process, process_status: docs/contract/tools.md
 * section 6), so that is where they are logged: each answer's entries are compared with what was
 * already logged for that process, and each entry not seen before gets one `warning`. A process
 * whose answers nobody asks for logs no denial. The table is bounded (the most recent
 * MAX_PROCS processes; an older one forgotten may have its entries logged again).
 */
#include "main_calls.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base_log.h"
#include "csw.h"
#include "main_metrics.h"

#define MAX_PROCS 256
#define MAX_SEEN  64 /* an answer lists at most 32 entries; a process's kinds may change */
#define ID_MAX    48

struct proc {
    char id[ID_MAX];          /* "" when the slot is free */
    const char *workspace_id; /* the registry's (borrowed from cfg), or NULL */
    uint64_t seen[MAX_SEEN];  /* hashes of the denial entries already logged */
    size_t n_seen;
};

struct cs_main_calls {
    const struct cs_config *cfg;
    struct cs_main_metrics *metrics; /* NULL: none */
    struct proc procs[MAX_PROCS];
    size_t next; /* the slot a new process takes (the oldest) */
};

struct cs_main_calls *cs_main_calls_new(const struct cs_config *cfg)
{
    struct cs_main_calls *c = calloc(1, sizeof *c);
    if (c)
        c->cfg = cfg;
    return c;
}

void cs_main_calls_set_metrics(struct cs_main_calls *c, struct cs_main_metrics *m)
{
    c->metrics = m;
}

void cs_main_calls_free(struct cs_main_calls *c)
{
    free(c);
}

/* Whether s is an id of the server's own form: prefix then a 36-character uuid. Only such ids
 * are logged; anything else a client wrote stays out of the log. */
static bool own_id(const struct cs_str *s, const char *prefix)
{
    size_t p = strlen(prefix);
    if (s->n != p + 36 || memcmp(s->s, prefix, p) != 0)
        return false;
    for (size_t i = p; i < s->n; i++) {
        char ch = s->s[i];
        if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f') || ch == '-'))
            return false;
    }
    return true;
}

/* The registry's copy of a workspace id the client named, or NULL when none is registered. */
static const char *registered(const struct cs_main_calls *c, const struct cs_str *id)
{
    const struct cs_workspace *ws = cs_config_workspace(c->cfg, id->s, id->n);
    return ws ? ws->id : NULL;
}

static struct proc *proc_find(struct cs_main_calls *c, const char *id)
{
    for (size_t i = 0; i < MAX_PROCS; i++)
        if (c->procs[i].id[0] && strcmp(c->procs[i].id, id) == 0)
            return &c->procs[i];
    return NULL;
}

static struct proc *proc_add(struct cs_main_calls *c, const char *id, const char *workspace_id)
{
    struct proc *p = proc_find(c, id);
    if (!p) {
        p = &c->procs[c->next];
        c->next = (c->next + 1) % MAX_PROCS;
        memset(p, 0, sizeof *p);
        snprintf(p->id, sizeof p->id, "%s", id);
    }
    if (workspace_id)
        p->workspace_id = workspace_id;
    return p;
}

static uint64_t fnv(uint64_t h, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211u;
    }
    return (h ^ 0xff) * 1099511628211u; /* a separator, so ("ab","c") differs from ("a","bc") */
}

/* One warning per entry of denials[0..n) not yet logged for p, each counted in metrics (may be
 * NULL). */
static void log_denials(struct proc *p, const struct csw_denial *d, size_t n,
                        struct cs_main_metrics *metrics)
{
    for (size_t i = 0; i < n; i++) {
        const char *kind = csw_denial_kind_names[d[i].kind];
        uint64_t h = fnv(14695981039346656037u, kind, strlen(kind));
        h = fnv(h, d[i].target.s, d[i].target.n);
        h = fnv(h, d[i].reason.s, d[i].reason.n);
        bool seen = false;
        for (size_t k = 0; k < p->n_seen && !seen; k++)
            seen = p->seen[k] == h;
        if (seen)
            continue;
        if (p->n_seen < MAX_SEEN)
            p->seen[p->n_seen++] = h;
        if (metrics)
            cs_main_metrics_denial(metrics, (int)d[i].kind);
        if (!cs_log_enabled(CS_LOG_WARNING))
            continue;
        json_t *f =
            json_pack("{s:s,s:s%,s:s%,s:s}", "kind", kind, "target", d[i].target.s, d[i].target.n,
                      "reason", d[i].reason.s, d[i].reason.n, "process_id", p->id);
        if (f && p->workspace_id)
            json_object_set_new(f, "workspace_id", json_string(p->workspace_id));
        cs_log(CS_LOG_WARNING, "sandbox denial", f);
    }
}

/* What one call names: its workspace (registered), process and operation (of the server's form),
 * and the denials its answer carries. */
struct named {
    const char *workspace_id;
    char process_id[ID_MAX];
    char operation_id[ID_MAX];
    const struct csw_denial *denials;
    size_t n_denials;
    bool replayed; /* an apply_patch answered from the ledger: nothing ran again */
};

static void copy_id(char out[ID_MAX], const struct cs_str *s, const char *prefix)
{
    if (own_id(s, prefix))
        snprintf(out, ID_MAX, "%.*s", (int)s->n, s->s);
}

static void names_of(struct cs_main_calls *c, const struct cs_mcp_call_report *r, struct named *n)
{
    const char *tool = r->tool;
    if (!r->input && r->refused_workspace_id.n > 0) /* arguments refused: a registered id only */
        n->workspace_id = registered(c, &r->refused_workspace_id);
    if (strcmp(tool, "workspace_info") == 0) {
        const struct csw_mcp_workspace_info_input *in = r->input;
        if (in && in->has_workspace_id)
            n->workspace_id = registered(c, &in->workspace_id);
    } else if (strcmp(tool, "read") == 0) {
        const struct csw_mcp_read_input *in = r->input;
        if (in)
            n->workspace_id = registered(c, &in->workspace_id);
    } else if (strcmp(tool, "find") == 0) {
        const struct csw_mcp_find_input *in = r->input;
        if (in)
            n->workspace_id = registered(c, &in->workspace_id);
    } else if (strcmp(tool, "apply_patch") == 0) {
        const struct csw_mcp_apply_patch_input *in = r->input;
        const struct csw_mcp_apply_patch_output *out = r->output;
        if (in)
            n->workspace_id = registered(c, &in->workspace_id);
        if (out) {
            copy_id(n->operation_id, &out->operation_id, "op-");
            n->replayed = out->replayed;
        }
    } else if (strcmp(tool, "operation_status") == 0) {
        const struct csw_mcp_operation_status_input *in = r->input;
        const struct csw_mcp_operation_status_output *out = r->output;
        if (in && in->has_operation_id)
            copy_id(n->operation_id, &in->operation_id, "op-");
        if (out) {
            n->workspace_id = registered(c, &out->workspace_id);
            copy_id(n->operation_id, &out->operation_id, "op-");
        }
    } else if (strcmp(tool, "exec_command") == 0) {
        const struct csw_mcp_exec_command_input *in = r->input;
        const struct csw_mcp_exec_command_output *out = r->output;
        if (in)
            n->workspace_id = registered(c, &in->workspace_id);
        if (out) {
            copy_id(n->process_id, &out->process_id, "proc-");
            if (out->has_denials) {
                n->denials = out->denials.v;
                n->n_denials = out->denials.n;
            }
        }
    } else if (r->input) { /* the process tools: each input's first member is process_id */
        const struct csw_mcp_process_status_input *in = r->input;
        _Static_assert(offsetof(struct csw_mcp_write_stdin_input, process_id) == 0 &&
                           offsetof(struct csw_mcp_read_process_input, process_id) == 0 &&
                           offsetof(struct csw_mcp_process_status_input, process_id) == 0 &&
                           offsetof(struct csw_mcp_process_resize_input, process_id) == 0 &&
                           offsetof(struct csw_mcp_terminate_process_input, process_id) == 0,
                       "the process tools' inputs start with process_id");
        copy_id(n->process_id, &in->process_id, "proc-");
        if (strcmp(tool, "read_process") == 0 && r->output) {
            const struct csw_mcp_read_process_output *out = r->output;
            if (out->has_denials) {
                n->denials = out->denials.v;
                n->n_denials = out->denials.n;
            }
        } else if (strcmp(tool, "process_status") == 0 && r->output) {
            const struct csw_mcp_process_status_output *out = r->output;
            if (out->has_denials) {
                n->denials = out->denials.v;
                n->n_denials = out->denials.n;
            }
        }
    }
    if (n->process_id[0]) {
        /* A process exec_command started here belongs to the workspace it was started in;
         * a process id the server never gave out is logged without one. */
        struct proc *p = strcmp(tool, "exec_command") == 0 && r->error < 0
                             ? proc_add(c, n->process_id, n->workspace_id)
                             : proc_find(c, n->process_id);
        if (p && !n->workspace_id)
            n->workspace_id = p->workspace_id;
        if (p && n->n_denials > 0)
            log_denials(p, n->denials, n->n_denials, c->metrics);
    }
}

void cs_main_calls_report(void *arg, const struct cs_mcp_call_report *r)
{
    struct cs_main_calls *c = arg;
    if (c->metrics)
        cs_main_metrics_call(c->metrics, r);
    if (!cs_log_enabled(CS_LOG_WARNING) && !c->metrics)
        return; /* neither line would be written, nothing to count */
    struct named n;
    memset(&n, 0, sizeof n);
    names_of(c, r, &n);
    if (!cs_log_enabled(CS_LOG_INFO))
        return;
    const char *result = r->error < 0                  ? "ok"
                         : r->error < CSW_ERROR__COUNT ? csw_error_names[r->error]
                                                       : "INTERNAL";
    /* Built member by member: json_pack parses its format on every call (issue 33: this line
     * was a quarter of a read's instructions in the gateway). */
    json_t *f = json_object();
    if (f) {
        json_object_set_new(f, "tool", json_string(r->tool));
        json_object_set_new(f, "duration_ms", json_integer((json_int_t)r->duration_ms));
        json_object_set_new(f, "result", json_string(result));
    }
    if (f && n.workspace_id)
        json_object_set_new(f, "workspace_id", json_string(n.workspace_id));
    if (f && n.process_id[0])
        json_object_set_new(f, "process_id", json_string(n.process_id));
    if (!n.operation_id[0] && r->operation_id)
        copy_id(n.operation_id,
                &(struct cs_str){(char *)(uintptr_t)r->operation_id, strlen(r->operation_id)},
                "op-");
    if (f && n.operation_id[0])
        json_object_set_new(f, "operation_id", json_string(n.operation_id));
    if (f && n.replayed)
        json_object_set_new(f, "replayed", json_true());
    if (f && r->cancelled)
        json_object_set_new(f, "cancelled", json_true());
    cs_log(CS_LOG_INFO, "tool call", f);
}
