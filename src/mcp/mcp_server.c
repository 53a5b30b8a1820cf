/*
 * mcp_server: MCP sessions over JSON-RPC (see mcp_server.h).
 *
 * Trust: every message is untrusted. The JSON-RPC envelope is checked by jsonrpc.c; tool
 * arguments only ever reach a handler through the generated input decoder; results only leave
 * through the generated output encoder, which checks them against the outputSchema.
 *
 * Life cycle: one cs_mcp_exchange per handled message (or batch). An exchange counts the tool
 * calls it is waiting for and replies once that count is zero and the handling call returned.
 * A call keeps its exchange alive; an abandoned exchange (transport gone) or a freed session
 * still waits for its calls, then frees itself without replying.
 */
#include "mcp_server.h"

#include <malloc.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base_diag.h"
#include "base_json.h"
#include "base_log.h"
#include "base_mem.h"
#include "jsonrpc.h"

const char *const cs_mcp_versions[] = {"2025-11-25", "2025-06-18", "2025-03-26"};
const size_t cs_mcp_version_count = sizeof cs_mcp_versions / sizeof cs_mcp_versions[0];
#define BATCH_VERSION "2025-03-26"
/* A batch may not hold more messages than this: one small batch of tools/list requests would
 * otherwise make a reply thousands of times its size. */
#define MAX_BATCH 64

static const char instructions[] =
    "CodeSpace runs work in operator-registered workspaces. Call workspace_info with no "
    "arguments to list them (workspace_id, profile, network, processes, description), then pass "
    "a workspace_id to every other tool. workspace_info with a workspace_id describes that "
    "workspace: its execution object is the truth about what is enforced (sandboxing, network, "
    "permissions, process limits); "
    "the absence of enforcement is not permission. exec_command takes an argv and never runs a "
    "shell implicitly: pass [\"sh\",\"-c\",\"...\"] yourself if you need one. Processes outlive "
    "the request: poll them with read_process or process_status and stop them with "
    "terminate_process. read and find are paged: pass offset and limit, and continue from "
    "next_offset while truncated is true. apply_patch status \"unknown\" means the patch may "
    "have run: check operation_status before retrying, and pass an operation_key to make "
    "retries safe.";

struct tool_entry {
    const struct csw_tool *tool;
    cs_mcp_tool_fn fn;
    void *arg;
    /* cs_mcp_set_tool_hint: added to a decode error at exactly this pointer (static). */
    const char *hint_pointer, *hint;
};

/* 2026-07-28: the _meta keys of a request (basic/index.mdx) and of a result. */
#define META_VERSION  "io.modelcontextprotocol/protocolVersion"
#define META_CAPS     "io.modelcontextprotocol/clientCapabilities"
#define META_LOGLEVEL "io.modelcontextprotocol/logLevel"
#define META_SERVER   "io.modelcontextprotocol/serverInfo"
/* Caching hints (SEP-2549) on server/discover and tools/list: the tools and the instructions
 * never change while the server runs and hold nothing user-specific. */
#define CACHE_TTL_MS 3600000

struct cs_mcp {
    char *version;
    struct tool_entry *tools;
    size_t ntools;
    json_t *tools_list;        /* the tools/list result, built once */
    json_t *tools_list_modern; /* the same under 2026-07-28 (resultType, hints, _meta) */
    json_t *discover;          /* the server/discover result */
    char *modern_tail;         /* ,"resultType":"complete","_meta":{...}} closing a result text */
    struct cs_mcp_session *sessions; /* every live session, for notifications/message */
    cs_mcp_call_done_fn on_done;     /* cs_mcp_on_call_done, or NULL */
    void *on_done_arg;
};

struct cs_mcp_session {
    struct cs_mcp *srv;
    char version[16];
    bool initialized;
    enum cs_log_level log_level;
    struct cs_mcp_exchange *exchanges; /* waiting for a reply */
    struct cs_mcp_call *calls;         /* running tool calls, for notifications/cancelled */
    cs_mcp_notify_fn notify;           /* where its exchanges send notifications, or NULL */
    void *notify_arg;
    struct cs_mcp_session *prev, *next; /* in srv->sessions */
};

struct cs_mcp_exchange {
    struct cs_mcp_session *s; /* NULL once the session is gone */
    cs_mcp_reply_fn reply;
    void *arg;
    bool abandoned;
    bool handling; /* inside cs_mcp_session_handle: reply after it returns */
    bool batch;
    bool modern;     /* a 2026-07-28 request (never a batch) */
    bool no_meta;    /* the text has no "_meta" key in any spelling: params carry no _meta */
    json_t *replies; /* batch: array; else the one reply or NULL */
    char *raw_id;    /* the request's "id" token as written, or NULL */
    json_t *raw_ids; /* batch: the raw id (string or null) of each reply in replies */
    json_t *texts;   /* batch: the text (string) each reply came with, or null */
    char *text;      /* the one reply already serialized (cached results), or NULL */
    size_t text_n;   /* its length */
    size_t waiting;  /* tool calls not yet completed */
    size_t progress; /* tool calls that carried a progress token */
    cs_mcp_notify_fn notify; /* where notifications go before the reply, or NULL */
    void *notify_arg;
    struct cs_mcp_exchange *prev, *next;
};

struct cs_mcp_call {
    struct cs_mcp_exchange *x;
    const struct tool_entry *t;
    json_t *id;
    char *raw_id; /* the request's "id" token as written (batch element), or NULL */
    void *input;  /* decoded struct csw_mcp_<tool>_input */
    bool cancelled;
    cs_mcp_cancel_fn on_cancel; /* the handler's cancel hook, or NULL */
    void *on_cancel_arg;
    bool modern;                     /* answer under 2026-07-28 */
    json_t *progress_token;          /* _meta.progressToken (a string or an integer), or NULL */
    int64_t progress_sent;           /* the last progress notified, -1 before the first */
    struct cs_mcp_call *prev, *next; /* in the session's list while the session lives */
    const struct cs_mcp *srv;        /* for the report at completion (outlives every call) */
    int64_t started_ms;              /* CLOCK_MONOTONIC when the handler started */
    const void *output;              /* cs_mcp_call_ok's output while it completes, or NULL */
    int error;                       /* cs_mcp_call_error's code while it completes, or -1 */
    const char *error_op;            /* its operation_id (borrowed likewise), or NULL */
    bool input_ok;                   /* the arguments decoded: input is the handler's */
    struct cs_str refused_ws;        /* arguments refused: their workspace_id string, borrowed
                                      * from them while the refusal completes, or empty */
};

bool cs_mcp_version_supported(const char *v)
{
    for (size_t i = 0; i < cs_mcp_version_count; i++)
        if (strcmp(v, cs_mcp_versions[i]) == 0)
            return true;
    return false;
}

const char *cs_mcp_instructions(void)
{
    return instructions;
}

/* A struct cs_str borrowing the C string c (the encoders only read it). */
static struct cs_str cstr(const char *c)
{
    return (struct cs_str){(char *)(uintptr_t)c, strlen(c)};
}

/* The encoder's jansson value of v as type t, or NULL (out of memory, or a server bug that
 * breaks the schema: the caller answers an internal error). */
static json_t *encode(const struct cs_wire_type *t, const void *v)
{
    json_t *j = NULL;
    return cs_wire_encode(t, v, &j, NULL) == CS_WIRE_OK ? j : NULL;
}

/* The capabilities a 2025 session is announced: tools (never changing) and logging (process exits
 * are sent to every initialized session). server/discover (2026-07-28) announces tools alone: a
 * stateless request has no session, so it is never sent a notifications/message. */
static struct csw_protocol_common_server_capabilities capabilities(void)
{
    struct csw_protocol_common_server_capabilities c;
    memset(&c, 0, sizeof c);
    c.tools.listchanged = false;
    return c;
}

/* Whether the JSON string j equals the NUL-terminated name exactly (a NUL inside j never
 * matches). */
static bool str_is(const json_t *j, const char *name)
{
    return json_is_string(j) && json_string_length(j) == strlen(name) &&
           strcmp(json_string_value(j), name) == 0;
}

/* ---- server ---- */

static void not_implemented(void *arg, struct cs_mcp_call *call, const void *input)
{
    (void)arg;
    (void)input;
    cs_mcp_call_error(call, CSW_ERROR_INTERNAL, NULL,
                      "the %s tool is listed but not implemented in this build",
                      cs_mcp_call_tool(call));
}

/* The tools/list result (schema/protocol/list_tools_result.json), with the 2026-07-28 members
 * when meta is given (the serverInfo of every such result). */
static json_t *build_tools_list(const struct csw_protocol_common_result_meta *meta)
{
    struct csw_protocol_list_tools_result lt;
    memset(&lt, 0, sizeof lt);
    lt.tools.v = calloc(csw_tool_count ? csw_tool_count : 1, sizeof *lt.tools.v);
    json_t *out = NULL;
    bool ok = lt.tools.v != NULL;
    for (size_t i = 0; ok && i < csw_tool_count; i++) {
        const struct csw_tool *t = &csw_tools[i];
        struct csw_protocol_list_tools_result_tool *one = &lt.tools.v[i];
        lt.tools.n = i + 1;
        one->name = cstr(t->name);
        one->title = cstr(t->title);
        one->description = cstr(t->description);
        one->inputschema = json_loads(t->input_schema_json, 0, NULL);
        one->outputschema = json_loads(t->output_schema_json, 0, NULL);
        /* The hints of x-cs-tool, then the title (only booleans are decoded: nothing to free). */
        json_t *ann = json_loads(t->annotations_json, 0, NULL);
        ok = one->inputschema && one->outputschema && ann &&
             csw_protocol_list_tools_result_annotations_decode(ann, &one->annotations, NULL) ==
                 CS_WIRE_OK;
        json_decref(ann);
        one->annotations.has_title = true;
        one->annotations.title = cstr(t->title);
    }
    if (ok && meta) {
        lt.has_ttlms = lt.has_cachescope = lt.has_resulttype = lt.has_meta = true;
        lt.ttlms = CACHE_TTL_MS;
        lt.cachescope = CSW_PROTOCOL_COMMON_CACHE_SCOPE_PUBLIC;
        lt.resulttype = CSW_PROTOCOL_COMMON_RESULT_TYPE_COMPLETE;
        lt.meta = *meta;
    }
    if (ok)
        out = encode(&csw_protocol_list_tools_result_type, &lt);
    for (size_t i = 0; i < lt.tools.n; i++) { /* the strings are borrowed: only the schemas */
        json_decref(lt.tools.v[i].inputschema);
        json_decref(lt.tools.v[i].outputschema);
    }
    free(lt.tools.v);
    return out;
}

/* The serverInfo of every 2026-07-28 result (strings borrowed from srv). */
static struct csw_protocol_common_result_meta result_meta(const struct cs_mcp *srv)
{
    struct csw_protocol_common_result_meta m;
    m.io_modelcontextprotocol_serverinfo.name = cstr("codespace");
    m.io_modelcontextprotocol_serverinfo.version = cstr(srv->version);
    return m;
}

static int build_modern(struct cs_mcp *srv)
{
    struct csw_protocol_common_result_meta meta = result_meta(srv);
    srv->tools_list_modern = build_tools_list(&meta);

    struct cs_str versions[1 + sizeof cs_mcp_versions / sizeof cs_mcp_versions[0]];
    versions[0] = cstr(CS_MCP_MODERN_VERSION);
    for (size_t i = 0; i < cs_mcp_version_count; i++)
        versions[i + 1] = cstr(cs_mcp_versions[i]);
    struct csw_protocol_discover_result d;
    memset(&d, 0, sizeof d);
    d.supportedversions.v = versions;
    d.supportedversions.n = 1 + cs_mcp_version_count;
    d.capabilities.tools = capabilities().tools; /* no logging: nothing is sent (see there) */
    d.instructions = cstr(instructions);
    d.ttlms = CACHE_TTL_MS;
    d.cachescope = CSW_PROTOCOL_COMMON_CACHE_SCOPE_PUBLIC;
    d.resulttype = CSW_PROTOCOL_COMMON_RESULT_TYPE_COMPLETE;
    d.meta = meta;
    srv->discover = encode(&csw_protocol_discover_result_type, &d);

    /* What closes a 2026-07-28 result spliced from text: the members call_tool_result.json
     * writes after the content, in its order. */
    char *text = NULL;
    if (csw_protocol_common_result_meta_encode_text(&meta, &text, NULL, NULL) == CS_WIRE_OK) {
        size_t n = strlen(text) + 64;
        srv->modern_tail = malloc(n);
        if (srv->modern_tail)
            snprintf(srv->modern_tail, n, ",\"resultType\":\"complete\",\"_meta\":%s}", text);
    }
    cs_wire_release(text);
    return srv->tools_list_modern && srv->discover && srv->modern_tail ? 0 : -1;
}

struct cs_mcp *cs_mcp_new(const char *version)
{
    struct cs_mcp *srv = calloc(1, sizeof *srv);
    if (!srv)
        return NULL;
    srv->version = strdup(version);
    srv->tools = calloc(csw_tool_count ? csw_tool_count : 1, sizeof *srv->tools);
    srv->tools_list = build_tools_list(NULL);
    if (!srv->version || !srv->tools || !srv->tools_list || build_modern(srv) != 0) {
        cs_mcp_free(srv);
        return NULL;
    }
    srv->ntools = csw_tool_count;
    for (size_t i = 0; i < srv->ntools; i++)
        srv->tools[i] = (struct tool_entry){&csw_tools[i], not_implemented, NULL, NULL, NULL};
    return srv;
}

void cs_mcp_free(struct cs_mcp *srv)
{
    if (!srv)
        return;
    json_decref(srv->tools_list);
    json_decref(srv->tools_list_modern);
    json_decref(srv->discover);
    free(srv->modern_tail);
    free(srv->tools);
    free(srv->version);
    free(srv);
}

int cs_mcp_set_tool(struct cs_mcp *srv, const char *name, cs_mcp_tool_fn fn, void *arg)
{
    for (size_t i = 0; i < srv->ntools; i++) {
        if (strcmp(srv->tools[i].tool->name, name) == 0) {
            srv->tools[i].fn = fn;
            srv->tools[i].arg = arg;
            return 0;
        }
    }
    return -1;
}

int cs_mcp_set_tool_hint(struct cs_mcp *srv, const char *name, const char *pointer,
                         const char *hint)
{
    for (size_t i = 0; i < srv->ntools; i++) {
        if (strcmp(srv->tools[i].tool->name, name) == 0) {
            srv->tools[i].hint_pointer = pointer;
            srv->tools[i].hint = hint;
            return 0;
        }
    }
    return -1;
}

/* ---- exchanges ---- */

/* Adds reply r (stolen, may be NULL) to x; text (stolen, may be NULL; n bytes) is r serialized.
 * raw: in a batch, the raw id token of the request r answers (borrowed, may be NULL). */
static void add_reply_text(struct cs_mcp_exchange *x, json_t *r, char *text, size_t n,
                           const char *raw)
{
    if (!r) {
        free(text);
        return;
    }
    if (x->batch) {
        /* A reply's text is kept: a tool success's r only stands in for it (cs_mcp_call_ok). */
        if (json_array_append_new(x->replies, r) == 0) {
            json_array_append_new(x->raw_ids, raw ? json_string_nocheck(raw) : json_null());
            json_array_append_new(x->texts, text ? json_stringn_nocheck(text, n) : json_null());
        }
        free(text);
    } else {
        json_decref(x->replies);
        free(x->text);
        x->replies = r;
        x->text = text;
        x->text_n = text ? n : 0;
    }
}

static void add_reply(struct cs_mcp_exchange *x, json_t *r, const char *raw)
{
    add_reply_text(x, r, NULL, 0, raw);
}

/*
 * text (a reply r serialized; taken) with its "id" replaced by raw, the request's id token as
 * written: jansson holds an id past 64 bits only clamped (and re-spells -0, escapes), and the
 * contract wants the id back exactly. Only a reply that carries the request's id (not null) is
 * touched. *n_io is text's length, then the returned one's. Returns the text to send (text
 * itself, or a new one), NULL when out of memory.
 */
static char *splice_id(char *text, size_t *n_io, const json_t *r, const char *raw)
{
    struct cs_jsonrpc_reply info;
    size_t off, len, n = text ? *n_io : 0, rn = raw ? strlen(raw) : 0;
    if (!text || !raw || !cs_jsonrpc_reply_info(r, &info) || info.id_absent || info.id_null ||
        cs_json_member_span(text, n, "id", true, &off, &len) != 0 ||
        (len == rn && memcmp(text + off, raw, rn) == 0))
        return text;
    char *t = malloc(n - len + rn + 1);
    if (t) {
        memcpy(t, text, off);
        memcpy(t + off, raw, rn);
        memcpy(t + off + rn, text + off + len, n - off - len + 1);
        *n_io = n - len + rn;
    }
    free(text);
    return t;
}

/* The text of a batch reply: each element serialized and spliced with its raw id. */
static char *batch_text(const json_t *replies, const json_t *raw_ids, const json_t *texts)
{
    size_t cap = 64, used = 1, i;
    char *out = malloc(cap);
    const json_t *one;
    if (!out)
        return NULL;
    out[0] = '[';
    json_array_foreach(replies, i, one)
    {
        if (json_array_size(texts) != json_array_size(replies) ||
            json_array_size(raw_ids) != json_array_size(replies)) {
            free(out); /* an append ran out of memory: the lists no longer pair up */
            return NULL;
        }
        const json_t *kept = json_array_get(texts, i);
        size_t n = json_string_length(kept); /* 0 for null */
        char *t =
            json_is_string(kept) ? strndup(json_string_value(kept), n) : cs_wire_json_text(one, &n);
        t = splice_id(t, &n, one, json_string_value(json_array_get(raw_ids, i)));
        if (t && used + n + 3 > cap) {
            while (used + n + 3 > cap)
                cap *= 2;
            char *p = realloc(out, cap);
            if (!p) {
                free(t);
                t = NULL;
            } else {
                out = p;
            }
        }
        if (!t) {
            free(out);
            return NULL;
        }
        if (i > 0)
            out[used++] = ',';
        memcpy(out + used, t, n);
        used += n;
        free(t);
    }
    out[used++] = ']';
    out[used] = '\0';
    return out;
}

/* Replies (unless abandoned) and frees x. */
static void finish(struct cs_mcp_exchange *x)
{
    if (x->s) {
        if (x->prev)
            x->prev->next = x->next;
        else
            x->s->exchanges = x->next;
        if (x->next)
            x->next->prev = x->prev;
    }
    json_t *r = x->replies;
    x->replies = NULL;
    if (x->batch && json_array_size(r) == 0) {
        json_decref(r);
        r = NULL;
    }
    char *text = x->text;
    size_t n = x->text_n;
    x->text = NULL;
    if (!x->abandoned) {
        if (r && x->batch) {
            free(text);
            text = batch_text(r, x->raw_ids, x->texts);
            n = text ? strlen(text) : 0;
        } else if (r) {
            if (!text)
                text = cs_wire_json_text(r, &n);
            text = splice_id(text, &n, r, x->raw_id);
        }
        if (r && !text) {
            /* Out of memory: r alone may not be sent, a tool success's only stands in for its
             * text (cs_mcp_call_ok). The request is answered with the error instead. */
            json_t *e = x->batch
                            ? cs_jsonrpc_error(NULL, CS_JSONRPC_INTERNAL_ERROR, "out of memory")
                            : cs_jsonrpc_error_like(r, CS_JSONRPC_INTERNAL_ERROR, "out of memory");
            json_decref(r);
            r = e;
            text = e ? cs_wire_json_text(e, &n) : NULL;
        }
        x->reply(x->arg, r, text, text ? n : 0); /* takes text */
        cs_json_large_made(n);                   /* its memory is handed back soon (M8) */
    } else {
        json_decref(r);
        free(text);
    }
    free(x->raw_id);
    json_decref(x->raw_ids);
    json_decref(x->texts);
    free(x);
}

/* Called when one of x's calls completed. */
static void call_done(struct cs_mcp_exchange *x)
{
    x->waiting--;
    if (x->waiting == 0 && !x->handling)
        finish(x);
}

/* ---- tool calls ---- */

const char *cs_mcp_call_tool(const struct cs_mcp_call *call)
{
    return call->t->tool->name;
}

bool cs_mcp_call_cancelled(const struct cs_mcp_call *call)
{
    return call->cancelled || !call->x || call->x->abandoned || !call->x->s;
}

void cs_mcp_call_on_cancel(struct cs_mcp_call *call, cs_mcp_cancel_fn fn, void *arg)
{
    call->on_cancel = fn;
    call->on_cancel_arg = arg;
}

/* ---- progress (docs/protocol.md, "Progress") ---- */

void cs_mcp_session_on_notify(struct cs_mcp_session *s, cs_mcp_notify_fn fn, void *arg)
{
    s->notify = fn;
    s->notify_arg = arg;
}

bool cs_mcp_exchange_wants_progress(const struct cs_mcp_exchange *x)
{
    return x->progress > 0;
}

bool cs_mcp_call_wants_progress(const struct cs_mcp_call *call)
{
    return call->progress_token && !cs_mcp_call_cancelled(call) && call->x->notify;
}

int cs_mcp_call_progress(struct cs_mcp_call *call, int64_t progress, const char *message,
                         size_t message_len)
{
    if (!cs_mcp_call_wants_progress(call) || progress <= call->progress_sent)
        return -1;
    struct csw_protocol_progress_notification n; /* schema/protocol/progress_notification.json */
    memset(&n, 0, sizeof n);
    n.params.progresstoken = call->progress_token; /* borrowed: never freed through n */
    n.params.progress = progress;
    if (message) {
        n.params.has_message = true;
        n.params.message = (struct cs_str){(char *)(uintptr_t)message, message_len};
    }
    char *text = NULL;
    size_t len = 0;
    if (csw_protocol_progress_notification_encode_text(&n, &text, &len, NULL) != CS_WIRE_OK)
        return -1;
    call->progress_sent = progress;
    call->x->notify(call->x->notify_arg, text, len);
    cs_wire_release(text);
    return 0;
}

/* ---- logging (docs/protocol.md, "Logging") ---- */

/* Where s takes a notifications/message now: stdio's one stream, or on HTTP a progress stream
 * (an SSE reply) of one of its 2025 exchanges still open; else none (HTTP has no standalone
 * stream: GET /mcp is 405). */
static bool log_channel(const struct cs_mcp_session *s, cs_mcp_notify_fn *fn, void **arg)
{
    if (s->notify) {
        *fn = s->notify;
        *arg = s->notify_arg;
        return true;
    }
    for (const struct cs_mcp_exchange *x = s->exchanges; x; x = x->next) {
        if (x->notify && x->progress > 0 && !x->abandoned && !x->modern) {
            *fn = x->notify;
            *arg = x->notify_arg;
            return true;
        }
    }
    return false;
}

size_t cs_mcp_log(struct cs_mcp *srv, enum csw_protocol_logging_level level,
                  const struct csw_protocol_log_data *data)
{
    enum cs_log_level l;
    if (cs_log_level_parse(csw_protocol_logging_level_names[level], &l) != 0)
        return 0;
    struct csw_protocol_logging_message_notification n; /* logging_message_notification.json */
    memset(&n, 0, sizeof n);
    n.params.level = level;
    n.params.logger = cstr("codespace");
    n.params.data = *data; /* borrowed: never freed through n */
    char *text = NULL;
    size_t len = 0, sent = 0;
    for (struct cs_mcp_session *s = srv->sessions; s; s = s->next) {
        cs_mcp_notify_fn fn;
        void *arg;
        /* Only an initialized 2025 session has a level (logging/setLevel, info until set); a
         * 2026-07-28 request's session never is, and gets none. */
        if (!s->initialized || l < s->log_level || !log_channel(s, &fn, &arg))
            continue;
        if (!text && csw_protocol_logging_message_notification_encode_text(&n, &text, &len, NULL) !=
                         CS_WIRE_OK)
            return 0; /* out of memory, or data its schema refuses: nothing is sent */
        fn(arg, text, len);
        sent++;
    }
    cs_wire_release(text);
    return sent;
}

/* Takes call off its session's list (when the session still exists). */
static void call_unlink(struct cs_mcp_call *call)
{
    struct cs_mcp_exchange *x = call->x;
    if (x && x->s) {
        if (call->prev)
            call->prev->next = call->next;
        else
            x->s->calls = call->next;
        if (call->next)
            call->next->prev = call->prev;
    }
    call->prev = call->next = NULL;
}

/*
 * Cancels call (docs/contract/tools.md §2): it leaves its exchange and its session's list, so the
 * exchange replies (or, abandoned, ends) without waiting for it (on HTTP the POST is answered at
 * once), then its hook runs, which stops the handler's wait and completes the call into nothing
 * (complete_with frees a detached call). Nothing happens to a call cancelled before.
 */
static void call_cancel(struct cs_mcp_call *call)
{
    struct cs_mcp_exchange *x = call->x;
    if (!x || call->cancelled)
        return;
    call->cancelled = true;
    call_unlink(call);
    call->x = NULL;
    if (call->progress_token)
        x->progress--;
    cs_mcp_cancel_fn fn = call->on_cancel;
    call->on_cancel = NULL;
    call_done(x); /* may reply (NULL: HTTP 202) and free x */
    if (fn)
        fn(call->on_cancel_arg, call); /* may complete and free call */
}

json_t *cs_mcp_text_of(const json_t *v)
{
    char *text = cs_wire_json_text(v, NULL);
    json_t *s = text ? json_string(text) : NULL;
    free(text);
    return s;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void cs_mcp_on_call_done(struct cs_mcp *srv, cs_mcp_call_done_fn fn, void *arg)
{
    srv->on_done = fn;
    srv->on_done_arg = arg;
}

/* Tells the observer how call ended; nomem: it is being answered "out of memory" (INTERNAL). */
static void report_done(const struct cs_mcp_call *call, bool nomem)
{
    if (!call->srv || !call->srv->on_done)
        return;
    struct cs_mcp_call_report r = {
        .tool = call->t->tool->name,
        .input = call->input_ok ? call->input : NULL,
        .output = nomem || call->error >= 0 ? NULL : call->output,
        .error = nomem ? (int)CSW_ERROR_INTERNAL : call->error,
        .operation_id = nomem ? NULL : call->error_op,
        .refused_workspace_id = call->refused_ws,
        .duration_ms = now_ms() - call->started_ms,
        .cancelled = call->cancelled,
    };
    call->srv->on_done(call->srv->on_done_arg, &r);
}

/* Completes call with result (a CallToolResult, stolen; NULL: out of memory) and, when given,
 * the whole reply already serialized (stolen). */
static void complete_with(struct cs_mcp_call *call, json_t *result, char *reply_text,
                          size_t reply_n)
{
    struct cs_mcp_exchange *x = call->x;
    report_done(call, result == NULL && x && !call->cancelled);
    if (!x) { /* cancelled and detached (call_cancel): its exchange no longer waits for it */
        free(reply_text);
        json_decref(result);
        cs_wire_free(call->t->tool->input, call->input);
        free(call->input);
        json_decref(call->id);
        json_decref(call->progress_token);
        free(call->raw_id);
        free(call);
        return;
    }
    if (!cs_mcp_call_cancelled(call)) {
        json_t *resp = result
                           ? cs_jsonrpc_result(call->id, json_incref(result))
                           : cs_jsonrpc_error(call->id, CS_JSONRPC_INTERNAL_ERROR, "out of memory");
        if (!result || !resp) {
            free(reply_text);
            reply_text = NULL;
        }
        add_reply_text(x, resp, reply_text, reply_n, call->raw_id);
    } else {
        free(reply_text);
    }
    json_decref(result);

    call_unlink(call);
    if (call->progress_token)
        x->progress--;
    cs_wire_free(call->t->tool->input, call->input);
    free(call->input);
    json_decref(call->id);
    json_decref(call->progress_token);
    free(call->raw_id);
    free(call);
    call_done(x);
}

/* The server whose 2026-07-28 members call's result carries, or NULL (a 2025 call; a call whose
 * session is gone is never answered). */
static const struct cs_mcp *modern_srv(const struct cs_mcp_call *call)
{
    return call->modern && call->x && call->x->s ? call->x->s->srv : NULL;
}

/*
 * A CallToolResult (schema/protocol/call_tool_result.json): one text item (text[0..n), valid
 * UTF-8), structuredContent (borrowed, may be NULL) and, when srv is given, the 2026-07-28
 * members. The content is the same in every revision. NULL when out of memory.
 */
static json_t *call_result(const char *text, size_t n, json_t *structured, bool is_error,
                           const struct cs_mcp *srv)
{
    struct csw_protocol_call_tool_result_text_content item = {.text = {(char *)(uintptr_t)text, n}};
    struct csw_protocol_call_tool_result r;
    memset(&r, 0, sizeof r);
    r.content.v = &item;
    r.content.n = 1;
    r.iserror = is_error;
    r.has_structuredcontent = structured != NULL;
    r.structuredcontent = structured;
    if (srv) {
        r.has_resulttype = r.has_meta = true;
        r.resulttype = CSW_PROTOCOL_COMMON_RESULT_TYPE_COMPLETE;
        r.meta = result_meta(srv);
    }
    return encode(&csw_protocol_call_tool_result_type, &r);
}

/* result (a 2025 CallToolResult, stolen) with the 2026-07-28 members of srv added. */
static json_t *modernize_result(const struct cs_mcp *srv, json_t *result)
{
    struct csw_protocol_call_tool_result r;
    json_t *out = NULL;
    if (result && csw_protocol_call_tool_result_decode(result, &r, NULL) == CS_WIRE_OK) {
        r.has_resulttype = r.has_meta = true;
        r.resulttype = CSW_PROTOCOL_COMMON_RESULT_TYPE_COMPLETE;
        r.meta = result_meta(srv);
        out = encode(&csw_protocol_call_tool_result_type, &r);
        r.has_meta = false; /* borrowed from srv: not for _free */
        memset(&r.meta, 0, sizeof r.meta);
        csw_protocol_call_tool_result_free(&r);
    }
    json_decref(result);
    return out;
}

/* Completes call with a tool error: the text item is body's JSON text. */
static void complete_error(struct cs_mcp_call *call, json_t *body)
{
    char *text = body ? cs_wire_json_text(body, NULL) : NULL;
    json_t *result = text ? call_result(text, strlen(text), NULL, true, modern_srv(call)) : NULL;
    free(text);
    complete_with(call, result, NULL, 0);
}

static json_t *error_body(enum csw_error code, const char *operation_id, const char *message)
{
    struct csw_errors body;
    memset(&body, 0, sizeof body);
    body.code = code;
    body.message.s = (char *)(uintptr_t)message;
    body.message.n = strlen(message);
    if (operation_id) {
        body.has_operation_id = true;
        body.operation_id.s = (char *)(uintptr_t)operation_id;
        body.operation_id.n = strlen(operation_id);
    }
    json_t *j = NULL;
    if (csw_errors_encode(&body, &j, NULL) != CS_WIRE_OK) {
        /* Only a message that is not UTF-8 can get here: say so instead. */
        body.message.s = (char *)(uintptr_t) "error message was not valid UTF-8";
        body.message.n = strlen(body.message.s);
        body.has_operation_id = false;
        csw_errors_encode(&body, &j, NULL);
    }
    return j;
}

void cs_mcp_call_error(struct cs_mcp_call *call, enum csw_error code, const char *operation_id,
                       const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    cs_diag_vformat(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_t *body = error_body(code, operation_id, msg);
    call->error = (int)code;
    call->error_op = operation_id;
    complete_error(call, body);
    json_decref(body);
}

/* The text call_tool_result.json's encoder writes for a success whose structuredContent is s,
 * up to the content's text and from its end to structuredContent (test_mcp checks the splice
 * against the encoder). */
static const char result_head[] = "{\"content\":[{\"type\":\"text\",\"text\":";
static const char result_mid[] = "}],\"isError\":false,\"structuredContent\":";
/* The most put_result_text writes for n bytes of structuredContent. */
#define RESULT_TEXT_MAX(n)                                                                         \
    (sizeof result_head - 1 + CS_JSON_QUOTE_MAX(n) + sizeof result_mid - 1 + (n))
/* Past this much structuredContent the room for put_result_text is counted, not assumed. */
#define RESULT_COUNT_FROM ((size_t)65536)

/* Room for put_result_text of s (n bytes): the worst case for a small text; for a big one the
 * exact size (one read of s), since the worst case of a 6 MB text (an exec answer holding a 1 MiB
 * ring of NULs) is 42 MB: past glibc's largest mmap threshold, so every such answer got fresh
 * pages from the kernel and first-touched 3,300 of them (~18 µs each in a PVM guest, issue 33),
 * where a buffer of the size used is served again from the heap. */
static size_t result_text_room(const char *s, size_t n)
{
    if (n < RESULT_COUNT_FROM)
        return RESULT_TEXT_MAX(n);
    return sizeof result_head - 1 + cs_json_escaped_len(s, n) + 2 + sizeof result_mid - 1 + n;
}

/* Writes the CallToolResult text of a success whose structuredContent is s (n bytes of JSON text)
 * at out, all but its closing brace (the caller's: a 2026-07-28 reply adds members there); s is
 * quoted straight into place. Returns the bytes written, at most result_text_room(s, n). */
static size_t put_result_text(char *out, const char *s, size_t n)
{
    size_t at = sizeof result_head - 1;
    memcpy(out, result_head, at);
    at += cs_json_quote(s, n, out + at);
    memcpy(out + at, result_mid, sizeof result_mid - 1);
    at += sizeof result_mid - 1;
    memcpy(out + at, s, n);
    return at + n;
}

/*
 * The CallToolResult for structured (a tool's output, not stolen) in *result, and its JSON text
 * in *text (malloc'd). The text is spliced, not dumped: structured is serialized once (s, taken,
 * when the caller already has it from the text encoder, which writes what json_dumps would) and
 * that text is quoted once for the text item (cs_json_quote); dumping the result would escape a
 * big string three times (the text item's making, then both copies), which was most of what a
 * full read window cost. Returns 0, or -1 out of memory (nothing to free).
 */
static int ok_result(json_t *structured, char *s, const struct cs_mcp *srv, json_t **result,
                     char **text)
{
    *result = NULL;
    *text = NULL;
    if (!s)
        s = cs_wire_json_text(structured, NULL);
    if (!s)
        return -1;
    size_t n = strlen(s);
    char *t = cs_big_alloc(result_text_room(s, n) + 2);
    json_t *r = t ? call_result(s, n, structured, false, srv) : NULL;
    if (!t || !r) {
        cs_wire_release(s);
        free(t);
        json_decref(r);
        return -1;
    }
    size_t at = put_result_text(t, s, n);
    t[at++] = '}';
    t[at] = '\0';
    cs_wire_release(s);
    *result = r;
    *text = t;
    return 0;
}

/* What a success reply needs of its call, taken on the loop thread (cs_mcp_call_frame). */
struct cs_mcp_frame {
    const struct cs_wire_type *output; /* the tool's output type (static) */
    char *idt;                         /* the id's JSON text */
    size_t idn;
    char *tail; /* closes the result: `}`, or the 2026-07-28 tail (resultType, _meta) */
};

static void frame_clear(struct cs_mcp_frame *f)
{
    cs_wire_release(f->idt);
    free(f->tail);
}

/* Fills *f for call. -1: out of memory, or a call whose answer nobody will read (detached, or
 * a 2026-07-28 call whose session is gone). Under 2026-07-28 the result's closing brace becomes the
 * srv's modern tail, so the content before it is byte for byte the same in every revision. */
static int frame_fill(struct cs_mcp_frame *f, const struct cs_mcp_call *call)
{
    memset(f, 0, sizeof *f);
    if (!call->x || (call->modern && !call->x->s))
        return -1; /* cancelled and detached: complete_with drops it */
    f->output = call->t->tool->output;
    f->idt = cs_wire_json_text(call->id, &f->idn);
    f->tail = strdup(call->modern ? call->x->s->srv->modern_tail : "}");
    if (f->idt && f->tail)
        return 0;
    frame_clear(f);
    return -1;
}

/* A new buffer holding `{"jsonrpc":"2.0","id":<id>,"result":` with room for body more bytes,
 * f's tail and the closing brace; *at gets the bytes written. NULL when out of memory. */
static char *reply_open(const struct cs_mcp_frame *f, size_t body, size_t *at)
{
    static const char pre[] = "{\"jsonrpc\":\"2.0\",\"id\":", res[] = ",\"result\":";
    char *text = cs_big_alloc(sizeof pre + f->idn + sizeof res + body + strlen(f->tail) + 2);
    if (text) {
        memcpy(text, pre, sizeof pre - 1);
        memcpy(text + sizeof pre - 1, f->idt, f->idn);
        memcpy(text + sizeof pre - 1 + f->idn, res, sizeof res - 1);
        *at = sizeof pre - 1 + f->idn + sizeof res - 1;
    }
    return text;
}

/* Closes a response reply_open started, at bytes in: f's tail and the response's brace.
 * Returns the response's length. */
static size_t reply_close(const struct cs_mcp_frame *f, char *text, size_t at)
{
    size_t tn = strlen(f->tail);
    memcpy(text + at, f->tail, tn);
    at += tn;
    text[at++] = '}';
    text[at] = '\0';
    return at;
}

/* The JSON-RPC response to call carrying result_text (a serialized result object), malloc'd
 * (its length in *n), or NULL (frame_fill, reply_open). */
static char *response_text(const struct cs_mcp_call *call, const char *result_text, size_t *n)
{
    size_t rn = strlen(result_text), at;
    struct cs_mcp_frame f;
    if (rn == 0 || frame_fill(&f, call) != 0)
        return NULL;
    char *text = reply_open(&f, rn, &at);
    if (text) {
        memcpy(text + at, result_text, rn - 1); /* all but the result's closing brace */
        *n = reply_close(&f, text, at + rn - 1);
    }
    frame_clear(&f);
    return text;
}

/* The reply of a success whose output is encoded by f's type, written once into one buffer:
 * the output's JSON text, then the response around it with that text quoted straight into place
 * (put_result_text); its length in *len. NULL with *st CS_WIRE_NOMEM when out of memory, or with
 * the encoder's status and *diag when the output breaks its schema. Any thread. */
static char *ok_reply(const struct cs_mcp_frame *f, const void *output, size_t *len,
                      enum cs_wire_status *st, struct cs_wire_diag *diag)
{
    char *s = NULL, *reply = NULL;
    size_t n = 0, at;
    /* The text encoder checks the output against its schema exactly as the tree encoder does. */
    *st = cs_wire_encode_text_brief(f->output, output, &s, &n, diag);
    if (*st != CS_WIRE_OK)
        return NULL;
    reply = reply_open(f, result_text_room(s, n), &at);
    if (reply)
        *len = reply_close(f, reply, at + put_result_text(reply + at, s, n));
    else
        *st = CS_WIRE_NOMEM;
    cs_wire_release(s);
    return reply;
}

struct cs_mcp_frame *cs_mcp_call_frame(const struct cs_mcp_call *call)
{
    struct cs_mcp_frame *f = malloc(sizeof *f);
    if (f && frame_fill(f, call) != 0) {
        free(f);
        f = NULL;
    }
    return f;
}

void cs_mcp_frame_free(struct cs_mcp_frame *f)
{
    if (f) {
        frame_clear(f);
        free(f);
    }
}

char *cs_mcp_frame_reply(const struct cs_mcp_frame *f, const void *output, size_t *len)
{
    enum cs_wire_status st;
    return ok_reply(f, output, len, &st, NULL);
}

/*
 * A tool's success, answered from its output's JSON text alone (ok_reply): no jansson tree of a
 * result that may hold a megabyte twice is ever built. The transport gets an empty object
 * standing in for that result (cs_mcp_reply_fn): the text is the reply.
 */
void cs_mcp_call_ok_reply(struct cs_mcp_call *call, char *reply, size_t len)
{
    json_t *standin = reply ? json_object() : NULL;
    if (!standin) {
        free(reply);
        reply = NULL;
    }
    complete_with(call, standin, reply, len); /* NULL: answers "out of memory" */
}

void cs_mcp_call_ok(struct cs_mcp_call *call, const void *output)
{
    struct cs_mcp_frame f;
    call->output = output; /* for the report; an error below takes its place */
    if (frame_fill(&f, call) != 0) {
        complete_with(call, NULL, NULL, 0); /* "out of memory", or dropped: nobody reads it */
        return;
    }
    struct cs_wire_diag diag;
    enum cs_wire_status st;
    size_t len = 0;
    char *reply = ok_reply(&f, output, &len, &st, &diag);
    frame_clear(&f);
    if (!reply && st != CS_WIRE_NOMEM) {
        char where[600];
        cs_mcp_call_error(call, CSW_ERROR_INTERNAL, NULL,
                          "the %s result broke its output schema: %s", call->t->tool->name,
                          cs_wire_diag_format(&diag, where, sizeof where));
        return;
    }
    cs_mcp_call_ok_reply(call, reply, len);
}

struct cs_mcp_cached {
    json_t *result; /* the CallToolResult object */
    char *text;     /* its JSON text */
};

struct cs_mcp_cached *cs_mcp_cached_new(json_t *structured)
{
    struct cs_mcp_cached *c = calloc(1, sizeof *c);
    if (c && ok_result(structured, NULL, NULL, &c->result, &c->text) != 0) {
        free(c);
        return NULL;
    }
    return c;
}

void cs_mcp_cached_free(struct cs_mcp_cached *c)
{
    if (!c)
        return;
    json_decref(c->result);
    free(c->text);
    free(c);
}

void cs_mcp_call_ok_cached(struct cs_mcp_call *call, const struct cs_mcp_cached *c)
{
    /* The reply is spliced from the cached text instead of serialized again: for an answer
     * that never changes, that is most of what a call costs. */
    const struct cs_mcp *srv = modern_srv(call);
    json_t *result = srv ? modernize_result(srv, json_incref(c->result)) : json_incref(c->result);
    size_t n = 0;
    char *text = result ? response_text(call, c->text, &n) : NULL;
    complete_with(call, result, text, n);
}

/* A new reference to the progress token in meta (a tools/call's params._meta), or NULL: absent,
 * or a value of another type than the string or integer a ProgressToken is (ignored, as a
 * receiver may ignore the request for progress). */
static json_t *progress_token_of(const json_t *meta)
{
    struct csw_protocol_call_tool_params_meta m; /* schema/protocol/call_tool_params.json */
    json_t *token = NULL;
    if (!json_is_object(meta) ||
        csw_protocol_call_tool_params_meta_decode(meta, &m, NULL) != CS_WIRE_OK)
        return NULL;
    if (m.has_progresstoken &&
        (json_is_string(m.progresstoken) || json_is_integer(m.progresstoken)))
        token = json_incref(m.progresstoken);
    csw_protocol_call_tool_params_meta_free(&m);
    return token;
}

/* tools/call: decode the arguments through the tool's input schema and start the handler. */
static json_t *tools_call(struct cs_mcp_exchange *x, json_t *id, const char *raw, bool modern,
                          json_t *params, bool *async)
{
    struct cs_mcp *srv = x->s->srv;
    struct csw_protocol_call_tool_params p; /* schema/protocol/call_tool_params.json */
    if (csw_protocol_call_tool_params_decode(params, &p, NULL) != CS_WIRE_OK)
        return cs_jsonrpc_error(id, CS_JSONRPC_INVALID_PARAMS,
                                "tools/call needs params.name, a string");
    const struct tool_entry *t = NULL;
    for (size_t i = 0; i < srv->ntools; i++) /* a NUL inside the name never matches */
        if (p.name.n == strlen(srv->tools[i].tool->name) &&
            memcmp(p.name.s, srv->tools[i].tool->name, p.name.n) == 0)
            t = &srv->tools[i];
    if (!t) {
        char msg[300];
        cs_diag_format(msg, sizeof msg, "Unknown tool: %.200s", p.name.s);
        csw_protocol_call_tool_params_free(&p);
        return cs_jsonrpc_error(id, CS_JSONRPC_INVALID_PARAMS, msg);
    }
    /* Borrowed from params, which outlives this call; the tool's decoder reads it below. */
    json_t *args = p.has_arguments ? p.arguments : NULL;
    json_t *token = p.has_meta ? progress_token_of(p.meta) : NULL;
    csw_protocol_call_tool_params_free(&p);
    json_t *empty = NULL;
    if (!args) /* absent means {}; present, it must be an object (null included) */
        args = empty = json_object();

    struct cs_mcp_call *call = calloc(1, sizeof *call);
    void *input = calloc(1, t->tool->input->size);
    char *raw_id = raw ? strdup(raw) : NULL;
    if (!call || !input || (raw && !raw_id)) {
        free(raw_id);
        free(call);
        free(input);
        json_decref(empty);
        json_decref(token);
        return cs_jsonrpc_error(id, CS_JSONRPC_INTERNAL_ERROR, "out of memory");
    }
    *async = true;
    call->x = x;
    call->t = t;
    call->id = json_incref(id);
    call->raw_id = raw_id;
    call->modern = modern;
    call->input = input;
    call->progress_token = token;
    call->progress_sent = -1;
    call->srv = srv;
    call->error = -1;
    call->started_ms = now_ms();
    if (token)
        x->progress++;
    call->next = x->s->calls;
    if (call->next)
        call->next->prev = call;
    x->s->calls = call;
    x->waiting++;

    struct cs_wire_diag diag;
    bool is_object = json_is_object(args);
    enum cs_wire_status st =
        is_object ? cs_wire_decode(t->tool->input, args, input, &diag) : CS_WIRE_INVALID;
    /* Refused: the operator's log still names the workspace the call was for (main_calls.c logs
     * it only when it is a registered one). Read before empty goes; args is then the request's. */
    const json_t *w = is_object && st != CS_WIRE_OK ? json_object_get(args, "workspace_id") : NULL;
    if (json_is_string(w))
        call->refused_ws = (struct cs_str){(char *)json_string_value(w), json_string_length(w)};
    json_decref(empty); /* args is borrowed from params below when it is not an object */
    if (!is_object) {
        cs_mcp_call_error(call, CSW_ERROR_INVALID_ARGUMENTS, NULL,
                          "arguments: expected an object, got %s (omit arguments for none)",
                          json_is_null(args)     ? "null"
                          : json_is_array(args)  ? "an array"
                          : json_is_string(args) ? "a string"
                          : json_is_number(args) ? "a number"
                                                 : "a boolean");
    } else if (st != CS_WIRE_OK) {
        char where[600];
        /* The tool's hint, when the first violation is where a client is known to go wrong. */
        bool hinted =
            st == CS_WIRE_INVALID && t->hint_pointer && strcmp(diag.pointer, t->hint_pointer) == 0;
        cs_mcp_call_error(call, (enum csw_error)cs_diag_wire_error(st, CSW_ERROR_INVALID_ARGUMENTS),
                          NULL, "%s%s%s",
                          st == CS_WIRE_NOMEM ? "out of memory decoding arguments"
                                              : cs_wire_diag_format(&diag, where, sizeof where),
                          hinted ? ": " : "", hinted ? t->hint : "");
    } else {
        call->input_ok = true;
        t->fn(t->arg, call, input);
    }
    return NULL; /* the call replies through complete() */
}

static json_t *initialize(struct cs_mcp_session *s, json_t *id, json_t *params)
{
    /* A version we do not speak, or none (or params that do not decode), gets the newest. */
    struct csw_protocol_initialize_params p;
    const char *v = cs_mcp_versions[0];
    if (csw_protocol_initialize_params_decode(params, &p, NULL) == CS_WIRE_OK) {
        if (p.has_protocolversion && p.protocolversion.n == strlen(p.protocolversion.s) &&
            cs_mcp_version_supported(p.protocolversion.s))
            snprintf(s->version, sizeof s->version, "%s", p.protocolversion.s);
        else
            snprintf(s->version, sizeof s->version, "%s", v);
        csw_protocol_initialize_params_free(&p);
    } else {
        snprintf(s->version, sizeof s->version, "%s", v);
    }
    s->initialized = true;
    struct csw_protocol_initialize_result r;
    memset(&r, 0, sizeof r);
    r.protocolversion = cstr(s->version);
    r.capabilities = capabilities();
    r.serverinfo.name = cstr("codespace");
    r.serverinfo.version = cstr(s->srv->version);
    r.instructions = cstr(instructions);
    json_t *result = encode(&csw_protocol_initialize_result_type, &r);
    return result ? cs_jsonrpc_result(id, result)
                  : cs_jsonrpc_error(id, CS_JSONRPC_INTERNAL_ERROR, "out of memory");
}

static json_t *set_level(struct cs_mcp_session *s, json_t *id, json_t *params)
{
    struct csw_protocol_set_level_params p; /* only enum values: nothing to free */
    enum cs_log_level l;
    if (csw_protocol_set_level_params_decode(params, &p, NULL) != CS_WIRE_OK ||
        cs_log_level_parse(csw_protocol_logging_level_names[p.level], &l) != 0)
        return cs_jsonrpc_error(id, CS_JSONRPC_INVALID_PARAMS,
                                "params.level must be one of debug, info, notice, warning, "
                                "error, critical, alert, emergency");
    s->log_level = l;
    return cs_jsonrpc_result(id, json_object());
}

static void cancel(struct cs_mcp_session *s, json_t *params)
{
    struct csw_protocol_cancelled_params p;
    if (csw_protocol_cancelled_params_decode(params, &p, NULL) != CS_WIRE_OK)
        return; /* no request id: nothing to cancel */
    /* A cancelled call leaves s->calls, and its hook may complete others: scan again each time. */
    for (;;) {
        struct cs_mcp_call *c = s->calls;
        while (c && !json_equal(c->id, p.requestid))
            c = c->next;
        if (!c)
            break;
        call_cancel(c);
    }
    csw_protocol_cancelled_params_free(&p);
}

/* ---- 2026-07-28 requests (docs/protocol.md) ---- */

static bool ows(char c)
{
    return c == ' ' || c == '\t';
}

/* A header value with optional whitespace trimmed (RFC 9110 section 5.5): *v, *n. Returns false
 * when the value holds a character no header of ours may carry (controls, DEL, non-ASCII). */
static bool header_value(const char *raw, const char **v, size_t *n)
{
    size_t a = 0, b = strlen(raw);
    while (a < b && ows(raw[a]))
        a++;
    while (b > a && ows(raw[b - 1]))
        b--;
    for (size_t i = a; i < b; i++) {
        unsigned char c = (unsigned char)raw[i];
        if ((c < 0x20 && c != '\t') || c >= 0x7f)
            return false;
    }
    *v = raw + a;
    *n = b - a;
    return true;
}

static int b64val(char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

/* Decodes the standard Base64 text s (n bytes, padded to a multiple of 4) into out (room for
 * 3 * n / 4 bytes). Returns the decoded length, or -1 when s is not canonical Base64. */
static long b64_decode(const char *s, size_t n, unsigned char *out)
{
    size_t o = 0;
    if (n % 4 != 0)
        return -1;
    for (size_t i = 0; i < n; i += 4) {
        int v[4];
        size_t pad = 0;
        for (size_t k = 0; k < 4; k++) {
            if (s[i + k] == '=' && i + 4 == n && k >= 2) {
                v[k] = 0;
                pad++;
            } else if (pad > 0 || (v[k] = b64val(s[i + k])) < 0) {
                return -1;
            }
        }
        unsigned w =
            (unsigned)v[0] << 18 | (unsigned)v[1] << 12 | (unsigned)v[2] << 6 | (unsigned)v[3];
        out[o++] = (unsigned char)(w >> 16);
        if (pad < 2)
            out[o++] = (unsigned char)(w >> 8);
        if (pad < 1)
            out[o++] = (unsigned char)w;
    }
    return (long)o;
}

/* Whether the header value (already trimmed, n bytes) names the body string body: literally, or
 * in the Base64 form =?base64?...?= (SEP-2243), which is decoded first. *bad: the Base64 form
 * was malformed. */
static bool header_names(const char *v, size_t n, const json_t *body, bool *bad)
{
    static const char pre[] = "=?base64?", suf[] = "?=";
    const char *b = json_string_value(body);
    size_t bn = json_string_length(body);
    *bad = false;
    if (n >= sizeof pre - 1 + sizeof suf - 1 && memcmp(v, pre, sizeof pre - 1) == 0 &&
        memcmp(v + n - (sizeof suf - 1), suf, sizeof suf - 1) == 0) {
        size_t en = n - (sizeof pre - 1) - (sizeof suf - 1);
        unsigned char *out = malloc(en / 4 * 3 + 1);
        long dn = out ? b64_decode(v + sizeof pre - 1, en, out) : -1;
        bool same = dn >= 0 && (size_t)dn == bn && memcmp(out, b, bn) == 0;
        *bad = dn < 0;
        free(out);
        return same;
    }
    return n == bn && memcmp(v, b, n) == 0;
}

static json_t *mismatch(json_t *id, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A -32020 HeaderMismatch error (HTTP 400). */
static json_t *mismatch(json_t *id, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    cs_diag_vformat(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return cs_jsonrpc_error_ex(id, true, CS_JSONRPC_HEADER_MISMATCH, msg, NULL);
}

/* The -32602 answer to a request whose _meta lacks key (HTTP 400). */
static json_t *missing_meta(json_t *id, const char *key)
{
    char msg[200];
    snprintf(msg, sizeof msg, "Invalid params: missing or invalid _meta[\"%s\"]", key);
    struct cs_str k = cstr(key);
    struct csw_protocol_jsonrpc_error_missing_data d = {.missing = {&k, 1}};
    return cs_jsonrpc_error_ex(id, true, CS_JSONRPC_INVALID_PARAMS, msg,
                               encode(&csw_protocol_jsonrpc_error_missing_data_type, &d));
}

/* The body member that Mcp-Name must repeat for method, or NULL when none is required. */
static const char *name_member(const char *method)
{
    if (strcmp(method, "tools/call") == 0 || strcmp(method, "prompts/get") == 0)
        return "name";
    if (strcmp(method, "resources/read") == 0)
        return "uri";
    return NULL;
}

/*
 * The checks of a 2026-07-28 request before its method runs, in the order the revision and its
 * conformance suite fix (docs/protocol.md, "Errors"): required _meta keys (-32602), the
 * MCP-Protocol-Version header against the body (-32020), the version itself (-32022), Mcp-Method
 * and Mcp-Name against the body (-32020). Returns the error reply, or NULL when the request may go
 * on. hdr is NULL on stdio (no header checks there).
 */
static json_t *modern_check(json_t *id, const char *method, size_t mlen,
                            const struct csw_protocol_request_params *rp,
                            const struct cs_mcp_headers *hdr)
{
    /* The members are open in the schema (request_params.json): the order is checked here. */
    const json_t *pv = rp->meta.io_modelcontextprotocol_protocolversion;
    if (!rp->has_meta || !rp->meta.has_io_modelcontextprotocol_protocolversion ||
        !json_is_string(pv))
        return missing_meta(id, META_VERSION);
    if (!rp->meta.has_io_modelcontextprotocol_clientcapabilities ||
        !json_is_object(rp->meta.io_modelcontextprotocol_clientcapabilities))
        return missing_meta(id, META_CAPS);
    const char *v;
    size_t n;
    if (hdr) {
        if (hdr->has_version == 0)
            return mismatch(id, "Header mismatch: the MCP-Protocol-Version header is missing");
        if (hdr->has_version < 0 || !header_value(hdr->version, &v, &n))
            return mismatch(id, "Header mismatch: invalid characters in MCP-Protocol-Version");
        if (n != json_string_length(pv) || memcmp(v, json_string_value(pv), n) != 0)
            return mismatch(id,
                            "Header mismatch: MCP-Protocol-Version header value '%.*s' does not "
                            "match body value '%.100s'",
                            (int)(n > 100 ? 100 : n), v, json_string_value(pv));
    }
    if (!str_is(pv, CS_MCP_MODERN_VERSION)) {
        struct cs_str supported = cstr(CS_MCP_MODERN_VERSION);
        struct csw_protocol_jsonrpc_error_unsupported_version_data d = {
            .supported = {&supported, 1},
            .requested = {(char *)(uintptr_t)json_string_value(pv), json_string_length(pv)}};
        return cs_jsonrpc_error_ex(
            id, true, CS_JSONRPC_UNSUPPORTED_PROTOCOL, "Unsupported protocol version",
            encode(&csw_protocol_jsonrpc_error_unsupported_version_data_type, &d));
    }
    if (!hdr)
        return NULL;
    if (hdr->has_method == 0)
        return mismatch(id, "Header mismatch: the Mcp-Method header is missing");
    if (hdr->has_method < 0 || !header_value(hdr->method, &v, &n))
        return mismatch(id, "Header mismatch: invalid characters in Mcp-Method");
    if (n != mlen || memcmp(v, method, n) != 0)
        return mismatch(id,
                        "Header mismatch: Mcp-Method header value '%.*s' does not match body "
                        "value '%.100s'",
                        (int)(n > 100 ? 100 : n), v, method);
    const char *member = name_member(method);
    const json_t *body = !member                      ? NULL
                         : strcmp(member, "uri") == 0 ? (rp->has_uri ? rp->uri : NULL)
                                                      : (rp->has_name ? rp->name : NULL);
    if (!json_is_string(body))
        return NULL; /* nothing to compare with: the method itself answers -32602 */
    bool bad;
    if (hdr->has_name == 0)
        return mismatch(id, "Header mismatch: the Mcp-Name header is missing");
    if (hdr->has_name < 0 || !header_value(hdr->name, &v, &n))
        return mismatch(id, "Header mismatch: invalid characters in Mcp-Name");
    if (!header_names(v, n, body, &bad))
        return bad ? mismatch(id, "Header mismatch: Mcp-Name is not valid Base64")
                   : mismatch(id,
                              "Header mismatch: Mcp-Name header value '%.*s' does not match "
                              "body value '%.100s'",
                              (int)(n > 100 ? 100 : n), v, json_string_value(body));
    return NULL;
}

static bool log_level_ok(const json_t *level)
{
    static const char *const levels[] = {"debug", "info",     "notice", "warning",
                                         "error", "critical", "alert",  "emergency"};
    if (!level)
        return true;
    for (size_t i = 0; i < sizeof levels / sizeof levels[0]; i++)
        if (str_is(level, levels[i]))
            return true;
    return false;
}

/* A 2026-07-28 request (m: its classified envelope). */
static json_t *handle_modern(struct cs_mcp_exchange *x, struct cs_jsonrpc_msg *m, const char *raw,
                             const struct cs_mcp_headers *hdr, bool *async)
{
    struct cs_mcp *srv = x->s->srv;
    json_t *params = m->params;
    struct csw_protocol_request_params rp; /* schema/protocol/request_params.json */
    if (!json_is_object(params) ||
        csw_protocol_request_params_decode(params, &rp, NULL) != CS_WIRE_OK)
        return missing_meta(m->id, META_VERSION); /* params or its _meta not an object */
    json_t *r = modern_check(m->id, m->method, m->method_len, &rp, hdr);
    /* cs_jsonrpc_method_is, not a C string compare: "tools/list\u0000x" is not tools/list. */
    bool known = cs_jsonrpc_method_is(m, "server/discover") ||
                 cs_jsonrpc_method_is(m, "tools/list") || cs_jsonrpc_method_is(m, "tools/call");
    bool level_ok = log_level_ok(rp.meta.has_io_modelcontextprotocol_loglevel
                                     ? rp.meta.io_modelcontextprotocol_loglevel
                                     : NULL);
    csw_protocol_request_params_free(&rp);
    if (r)
        return r;
    if (!known) /* initialize, ping, logging/setLevel... are gone in this revision */
        return cs_jsonrpc_error(m->id, CS_JSONRPC_METHOD_NOT_FOUND, "Method not found");
    if (!level_ok)
        return cs_jsonrpc_error(m->id, CS_JSONRPC_INVALID_PARAMS,
                                "Invalid params: _meta[\"" META_LOGLEVEL "\"] must be one of "
                                "debug, info, notice, warning, error, critical, alert, emergency");
    if (cs_jsonrpc_method_is(m, "server/discover"))
        return cs_jsonrpc_result(m->id, json_incref(srv->discover)); /* shared, never changed */
    if (cs_jsonrpc_method_is(m, "tools/list"))
        return cs_jsonrpc_result(m->id, json_incref(srv->tools_list_modern));
    return tools_call(x, m->id, raw, true, params, async);
}

static bool header_modern(const struct cs_mcp_headers *hdr);
static bool members_modern(const json_t *method, const json_t *params);

/* Handles one parsed message into x. raw: its "id" token as written (borrowed, may be NULL). */
static void handle_one(struct cs_mcp_exchange *x, json_t *msg, const char *raw,
                       const struct cs_mcp_headers *hdr)
{
    struct cs_mcp_session *s = x->s;
    struct cs_jsonrpc_msg m;
    enum cs_jsonrpc_kind kind = cs_jsonrpc_classify(msg, &m);
    /* The revision, as cs_mcp_msg_modern() says, from the members classify found (one decode). */
    bool modern =
        !x->batch &&
        (json_is_object(msg)
             ? members_modern(m.method_any, x->no_meta ? NULL : m.params_any) || header_modern(hdr)
             : !json_is_array(msg) && header_modern(hdr));
    x->modern = modern;
    switch (kind) {
    case CS_JSONRPC_INVALID:
        add_reply(x, cs_jsonrpc_error_ex(m.id, modern, CS_JSONRPC_INVALID_REQUEST, m.why, NULL),
                  raw);
        return;
    case CS_JSONRPC_RESPONSE:
        return; /* we send no requests; nothing to match */
    case CS_JSONRPC_NOTIFICATION:
        /* A 2026-07-28 request on HTTP is cancelled by closing its connection; its requests share
         * one stateless session, so a cancel by id could reach another client's request. */
        if (cs_jsonrpc_method_is(&m, "notifications/cancelled") && json_is_object(m.params) &&
            !(modern && hdr))
            cancel(s, m.params);
        return; /* notifications/initialized and unknown notifications need nothing */
    case CS_JSONRPC_REQUEST:
        break;
    }
    json_t *r;
    bool async = false;
    if (modern) {
        r = handle_modern(x, &m, raw, hdr, &async);
        if (!r && !async)
            r = cs_jsonrpc_error(m.id, CS_JSONRPC_INTERNAL_ERROR, "internal error");
        add_reply(x, r, raw);
        return;
    }
    json_t *params = json_is_object(m.params) ? m.params : NULL;
    json_t *empty = NULL;
    if (!params)
        params = empty = json_object();
    if (cs_jsonrpc_method_is(&m, "initialize") && s->initialized)
        r = cs_jsonrpc_error(m.id, CS_JSONRPC_INVALID_REQUEST,
                             "the session is already initialized");
    else if (cs_jsonrpc_method_is(&m, "initialize"))
        r = initialize(s, m.id, params);
    else if (cs_jsonrpc_method_is(&m, "ping"))
        r = cs_jsonrpc_result(m.id, json_object());
    else if (!s->initialized)
        r = cs_jsonrpc_error(m.id, CS_JSONRPC_INVALID_REQUEST,
                             "the session is not initialized: send initialize first");
    else if (cs_jsonrpc_method_is(&m, "tools/list"))
        r = cs_jsonrpc_result(m.id, json_incref(s->srv->tools_list)); /* shared, never changed */
    else if (cs_jsonrpc_method_is(&m, "tools/call"))
        r = tools_call(x, m.id, raw, false, params, &async);
    else if (cs_jsonrpc_method_is(&m, "logging/setLevel"))
        r = set_level(s, m.id, params);
    else
        r = cs_jsonrpc_error(m.id, CS_JSONRPC_METHOD_NOT_FOUND, "Method not found");
    json_decref(empty);
    if (!r && !async) /* building the reply failed: a request is still answered */
        r = cs_jsonrpc_error(m.id, CS_JSONRPC_INTERNAL_ERROR, "internal error");
    add_reply(x, r, raw);
}

/* ---- sessions ---- */

struct cs_mcp_session *cs_mcp_session_new(struct cs_mcp *srv)
{
    struct cs_mcp_session *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->srv = srv;
    s->log_level = CS_LOG_INFO;
    s->next = srv->sessions;
    if (s->next)
        s->next->prev = s;
    srv->sessions = s;
    return s;
}

void cs_mcp_session_free(struct cs_mcp_session *s)
{
    if (!s)
        return;
    if (s->prev)
        s->prev->next = s->next;
    else
        s->srv->sessions = s->next;
    if (s->next)
        s->next->prev = s->prev;
    for (struct cs_mcp_call *c = s->calls; c; c = c->next)
        c->cancelled = true;
    for (struct cs_mcp_call *c = s->calls, *next; c; c = next) {
        next = c->next;
        c->prev = c->next = NULL;
    }
    for (struct cs_mcp_exchange *x = s->exchanges, *next; x; x = next) {
        next = x->next;
        x->s = NULL;
        x->abandoned = true;
        x->prev = x->next = NULL;
    }
    free(s);
}

/* ---- messages ---- */

struct cs_mcp_msg {
    json_t *json;     /* NULL: not JSON, or over the parse budget (why says which) */
    char why[256];    /* the parse error */
    bool over_budget; /* refused by the pre-pass (M8), answered -32600 under raw_id */
    size_t len;       /* of the text: a large one's memory is handed back when it is freed */
    bool no_meta;     /* no "_meta" in the text, in any spelling (no escapes at all) */
    signed char members_modern, initialize; /* what the envelope says, once read; -1 before */
    char *raw_id;                           /* an object's "id" token as written, or NULL */
    char **raw_ids;                         /* a batch: each element's, or NULL (nraw of them) */
    size_t nraw;
};

/* Whether jansson writes the id token t[0..n) (a string or an integer token) back exactly as it
 * is: a string without escapes (jansson re-spells only escapes, raw control bytes are not JSON),
 * or an integer within int64 other than "-0". Such an id needs no splice (splice_id). */
static bool id_token_canonical(const char *t, size_t n)
{
    if (t[0] == '"')
        return memchr(t, '\\', n) == NULL;
    if (n == 2 && t[0] == '-' && t[1] == '0')
        return false;
    size_t digits = n - (t[0] == '-');
    if (digits < 19)
        return true; /* at most 18 digits: within int64 */
    if (digits > 19)
        return false;
    return memcmp(t + (t[0] == '-'), t[0] == '-' ? "9223372036854775808" : "9223372036854775807",
                  19) <= 0;
}

/* A copy of the id token t[0..n) when the reply must carry it spelled as the request did (see
 * splice_id), else NULL: only a string or integer token is an id (any other id is not one: the
 * reply says null, or nothing), and one jansson writes back unchanged needs no splice. */
static char *raw_id_keep(const char *t, size_t n)
{
    if (n == 0 || (t[0] != '"' && !cs_json_is_integer_token(t, n)) || id_token_canonical(t, n))
        return NULL;
    return strndup(t, n);
}

/* raw_id_keep of the value token of member "id" of the object text s[0..n). */
static char *raw_id_of(const char *s, size_t n)
{
    size_t off, len;
    if (cs_json_member_span(s, n, "id", false, &off, &len) != 0)
        return NULL;
    return raw_id_keep(s + off, len);
}

struct cs_mcp_msg *cs_mcp_msg_parse(const char *data, size_t len)
{
    struct cs_mcp_msg *m = cs_zalloc(sizeof *m);
    if (!m)
        return NULL;
    m->len = len;
    m->members_modern = m->initialize = -1;
    /* The parse budget (M8): refused before jansson builds anything, under its id when the
     * pre-pass found a readable one (a string or an integer token). */
    struct cs_json_budget b = {.watch = "_meta"};
    char bwhy[200];
    if (cs_json_budget_check(data, len, &b, bwhy, sizeof bwhy) != 0) {
        m->over_budget = true;
        snprintf(m->why, sizeof m->why, "message over the parse budget: %s", bwhy);
        const char *t = data + b.id_off;
        if (b.id_len && (t[0] == '"' || cs_json_is_integer_token(t, b.id_len)))
            m->raw_id = strndup(t, b.id_len);
        return m;
    }
    json_error_t err;
    json_t *msg = json_loadb(data, len, JSON_ALLOW_NUL | JSON_DECODE_ANY, &err);
    if (!msg) {
        /* Valid JSON that jansson refuses only for a number out of its range (an integer past
         * int64, a real past double) is read again with those numbers clamped, so the request is
         * answered under its id: a limit of 2^64 is then too large (OUTPUT_LIMIT) rather than
         * a parse error nobody can match to the call. The reply's id is the raw token anyway. */
        size_t n2 = 0;
        char *again = cs_json_clamp_numbers(data, len, &n2);
        json_error_t err2;
        msg = again ? json_loadb(again, n2, JSON_ALLOW_NUL | JSON_DECODE_ANY, &err2) : NULL;
        free(again);
    }
    if (!msg) {
        cs_diag_format(m->why, sizeof m->why, "Parse error: %s (line %d, column %d)", err.text,
                       err.line, err.column);
        return m;
    }
    m->json = msg;
    /* A key spelt with an escape could be "_meta"; without any backslash, only the plain
     * spelling can be, and a text without it has no _meta to decode (members_modern). */
    m->no_meta = !b.escapes && !b.watch_seen;
    /* Without escapes, the method token as written says whether it is server/discover: with no
     * _meta either, the message's members cannot make it 2026-07-28 (no envelope decode). */
    static const char discover[] = "\"server/discover\"";
    if (m->no_meta && b.method_len > 0)
        m->members_modern = b.method_len == sizeof discover - 1 &&
                                    memcmp(data + b.method_off, discover, sizeof discover - 1) == 0
                                ? 1
                                : 0;
    if (json_is_object(msg)) {
        /* The pre-pass saw the top-level "id" member spelt plainly (the last one, as jansson
         * keeps); any other spelling is looked for by the full scan. */
        m->raw_id = b.id_len ? raw_id_keep(data + b.id_off, b.id_len) : raw_id_of(data, len);
    } else if (json_is_array(msg) && json_array_size(msg) > 0 &&
               json_array_size(msg) <= MAX_BATCH) {
        size_t offs[MAX_BATCH], lens[MAX_BATCH];
        int k = cs_json_array_spans(data, len, MAX_BATCH, offs, lens);
        if (k > 0 && (size_t)k == json_array_size(msg) &&
            (m->raw_ids = calloc((size_t)k, sizeof *m->raw_ids)) != NULL) {
            m->nraw = (size_t)k;
            for (size_t i = 0; i < m->nraw; i++)
                m->raw_ids[i] = raw_id_of(data + offs[i], lens[i]);
        }
    }
    return m;
}

void cs_mcp_msg_free(struct cs_mcp_msg *m)
{
    if (!m)
        return;
    bool large = m->len >= CS_JSON_LARGE;
    json_decref(m->json);
    free(m->raw_id);
    for (size_t i = 0; i < m->nraw; i++)
        free(m->raw_ids[i]);
    free(m->raw_ids);
    free(m);
    /* The tree of a large message, once freed, goes back to the system (thousands of small
     * chunks that free() alone keeps in the heap): RSS returns to its level before it (M8). */
    if (large)
        (void)malloc_trim(0);
}

/* Whether the HTTP headers alone make a request 2026-07-28: MCP-Protocol-Version says so. Any
 * other value keeps the 2025 rules (checked against the session's version after initialize). */
static bool header_modern(const struct cs_mcp_headers *hdr)
{
    const char *v;
    size_t n;
    return hdr && hdr->has_version > 0 && header_value(hdr->version, &v, &n) &&
           n == strlen(CS_MCP_MODERN_VERSION) && memcmp(v, CS_MCP_MODERN_VERSION, n) == 0;
}

/* Whether a message's "method" and "params" members (borrowed, NULL when absent) make it a
 * 2026-07-28 request: server/discover, or the protocol version in params._meta. */
static bool members_modern(const json_t *method, const json_t *params)
{
    if (method && str_is(method, "server/discover"))
        return true;
    /* An open decode (request_params.json): only presence matters here. */
    struct csw_protocol_request_params rp;
    bool modern = false;
    if (params && csw_protocol_request_params_decode(params, &rp, NULL) == CS_WIRE_OK) {
        modern = rp.has_meta && rp.meta.has_io_modelcontextprotocol_protocolversion;
        csw_protocol_request_params_free(&rp);
    }
    return modern;
}

/* Reads m's envelope once (an object's): whether its members make it 2026-07-28, and whether it
 * is an initialize request. The transport asks both before the core reads it again. */
static void envelope_once(struct cs_mcp_msg *m)
{
    if (m->members_modern >= 0 && m->initialize >= 0)
        return;
    m->members_modern = m->initialize = 0;
    struct csw_protocol_jsonrpc_message j;
    if (!json_is_object(m->json) ||
        csw_protocol_jsonrpc_message_decode(m->json, &j, NULL) != CS_WIRE_OK)
        return;
    m->members_modern = members_modern(j.has_method ? j.method : NULL,
                                       j.has_params && !m->no_meta ? j.params : NULL)
                            ? 1
                            : 0;
    m->initialize = j.has_id && j.has_method && str_is(j.method, "initialize") ? 1 : 0;
    csw_protocol_jsonrpc_message_free(&j);
}

bool cs_mcp_msg_modern(struct cs_mcp_msg *m, const struct cs_mcp_headers *hdr)
{
    if (!m->json || !json_is_object(m->json))
        return m->json ? !json_is_array(m->json) && header_modern(hdr) : header_modern(hdr);
    if (m->members_modern < 0)
        envelope_once(m);
    return m->members_modern || header_modern(hdr);
}

bool cs_mcp_msg_is_initialize(struct cs_mcp_msg *m)
{
    envelope_once(m);
    return m->initialize;
}

struct cs_mcp_exchange *cs_mcp_session_handle_msg(struct cs_mcp_session *s, struct cs_mcp_msg *m,
                                                  const struct cs_mcp_headers *hdr,
                                                  cs_mcp_reply_fn reply, void *arg)
{
    if (!m->json) {
        /* 2026-07-28 never answers "id": null; a parse error there has no id at all. A message
         * over the budget is answered under its id when it was readable (a placeholder id, then
         * the raw token spliced in). */
        json_t *id = m->over_budget && m->raw_id ? json_string("") : NULL;
        json_t *r = cs_jsonrpc_error_ex(
            id, header_modern(hdr),
            m->over_budget ? CS_JSONRPC_INVALID_REQUEST : CS_JSONRPC_PARSE_ERROR, m->why, NULL);
        json_decref(id);
        size_t n = 0;
        char *text = r ? cs_wire_json_text(r, &n) : NULL;
        text = splice_id(text, &n, r, m->raw_id);
        cs_mcp_msg_free(m);
        reply(arg, r, text, text ? n : 0); /* takes text */
        return NULL;
    }
    json_t *msg = m->json;
    struct cs_mcp_exchange *x = cs_zalloc(sizeof *x);
    if (!x) {
        cs_mcp_msg_free(m);
        reply(arg, NULL, NULL, 0); /* out of memory: nothing can be said */
        return NULL;
    }
    x->s = s;
    x->reply = reply;
    x->arg = arg;
    x->notify = hdr ? hdr->notify : s->notify; /* HTTP: per POST */
    x->notify_arg = hdr ? hdr->notify_arg : s->notify_arg;
    x->handling = true;
    x->raw_id = m->raw_id;
    m->raw_id = NULL;
    x->no_meta = m->no_meta;
    x->next = s->exchanges;
    if (x->next)
        x->next->prev = x;
    s->exchanges = x;

    if (json_is_array(msg)) {
        if (strcmp(s->version, BATCH_VERSION) != 0) {
            add_reply(x,
                      cs_jsonrpc_error(NULL, CS_JSONRPC_INVALID_REQUEST,
                                       "JSON-RPC batches are only accepted on protocol "
                                       "version " BATCH_VERSION),
                      NULL);
        } else if (json_array_size(msg) == 0) {
            add_reply(x, cs_jsonrpc_error(NULL, CS_JSONRPC_INVALID_REQUEST, "empty batch"), NULL);
        } else if (json_array_size(msg) > MAX_BATCH) {
            add_reply(x,
                      cs_jsonrpc_error(NULL, CS_JSONRPC_INVALID_REQUEST,
                                       "a batch may hold at most 64 messages"),
                      NULL);
        } else {
            x->batch = true;
            x->replies = json_array();
            x->raw_ids = json_array();
            x->texts = json_array();
            size_t i;
            json_t *one;
            json_array_foreach(msg, i, one)
            {
                handle_one(x, one, i < m->nraw ? m->raw_ids[i] : NULL, hdr);
            }
        }
    } else {
        handle_one(x, msg, x->raw_id, hdr);
    }
    cs_mcp_msg_free(m);
    x->handling = false;
    if (x->waiting == 0) {
        finish(x);
        return NULL;
    }
    return x;
}

struct cs_mcp_exchange *cs_mcp_session_handle(struct cs_mcp_session *s, const char *data,
                                              size_t len, cs_mcp_reply_fn reply, void *arg)
{
    struct cs_mcp_msg *m = cs_mcp_msg_parse(data, len);
    if (!m) {
        reply(arg, NULL, NULL, 0); /* out of memory: nothing can be said */
        return NULL;
    }
    return cs_mcp_session_handle_msg(s, m, NULL, reply, arg);
}

void cs_mcp_exchange_abandon(struct cs_mcp_exchange *x)
{
    if (!x)
        return;
    x->abandoned = true;
    if (!x->s)
        return; /* its session is gone: the calls were cancelled with it */
    /* Every call behind x is cancelled (the 2026-07-28 revision cancels by closing the
     * connection). x is held while the hooks run, which may complete other calls of it. */
    bool was_handling = x->handling;
    x->handling = true;
    for (;;) {
        struct cs_mcp_call *c = x->s ? x->s->calls : NULL;
        while (c && c->x != x)
            c = c->next;
        if (!c)
            break;
        call_cancel(c);
    }
    x->handling = was_handling;
    if (!was_handling && x->waiting == 0)
        finish(x); /* abandoned: no reply */
}

const char *cs_mcp_session_version(const struct cs_mcp_session *s)
{
    return s->initialized ? s->version : NULL;
}

bool cs_mcp_session_initialized(const struct cs_mcp_session *s)
{
    return s->initialized;
}

const char *cs_mcp_session_log_level(const struct cs_mcp_session *s)
{
    return cs_log_level_name(s->log_level);
}

size_t cs_mcp_session_pending(const struct cs_mcp_session *s)
{
    size_t n = 0;
    for (const struct cs_mcp_exchange *x = s->exchanges; x; x = x->next)
        n++;
    return n;
}
