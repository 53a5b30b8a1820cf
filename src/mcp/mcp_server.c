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

#include "base_json.h"
#include "base_log.h"
#include "jsonrpc.h"

const char *const cs_mcp_versions[] = {"2025-11-25", "2025-06-18", "2025-03-26"};
const size_t cs_mcp_version_count = sizeof cs_mcp_versions / sizeof cs_mcp_versions[0];
#define BATCH_VERSION "2025-03-26"
/* A batch may not hold more messages than this: one small batch of tools/list requests would
 * otherwise make a reply thousands of times its size. */
#define MAX_BATCH 64

static const char instructions[] =
    "CodeSpace runs work in operator-registered workspaces. Call workspace_info first: its "
    "execution object is the truth about what is enforced (sandboxing, network, permissions); "
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
};

struct cs_mcp {
    char *version;
    struct tool_entry *tools;
    size_t ntools;
    json_t *tools_list; /* the tools/list result, built once */
};

struct cs_mcp_session {
    struct cs_mcp *srv;
    char version[16];
    bool initialized;
    enum cs_log_level log_level;
    struct cs_mcp_exchange *exchanges; /* waiting for a reply */
    struct cs_mcp_call *calls;         /* running tool calls, for notifications/cancelled */
};

struct cs_mcp_exchange {
    struct cs_mcp_session *s; /* NULL once the session is gone */
    cs_mcp_reply_fn reply;
    void *arg;
    bool abandoned;
    bool handling; /* inside cs_mcp_session_handle: reply after it returns */
    bool batch;
    json_t *replies; /* batch: array; else the one reply or NULL */
    char *text;      /* the one reply already serialized (cached results), or NULL */
    size_t waiting;  /* tool calls not yet completed */
    struct cs_mcp_exchange *prev, *next;
};

struct cs_mcp_call {
    struct cs_mcp_exchange *x;
    const struct tool_entry *t;
    json_t *id;
    void *input; /* decoded struct csw_mcp_<tool>_input */
    bool cancelled;
    struct cs_mcp_call *prev, *next; /* in the session's list while the session lives */
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

/* Cuts a NUL-terminated string back to a whole UTF-8 character if snprintf truncation split
 * one (jansson refuses strings that are not valid UTF-8). */
static void utf8_tidy(char *s)
{
    size_t n = strlen(s);
    size_t i = n;
    while (i > 0 && ((unsigned char)s[i - 1] & 0xC0) == 0x80)
        i--; /* back over continuation bytes */
    if (i == 0)
        return;
    unsigned char lead = (unsigned char)s[i - 1];
    size_t want = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    if (lead >= 0x80 && n - (i - 1) < want)
        s[i - 1] = '\0';
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

static json_t *build_tools_list(void)
{
    json_t *tools = json_array();
    for (size_t i = 0; tools && i < csw_tool_count; i++) {
        const struct csw_tool *t = &csw_tools[i];
        json_error_t err;
        json_t *in = json_loads(t->input_schema_json, 0, &err);
        json_t *out = json_loads(t->output_schema_json, 0, &err);
        json_t *ann = json_loads(t->annotations_json, 0, &err);
        if (ann)
            json_object_set_new(ann, "title", json_string(t->title));
        json_t *one = (in && out && ann)
                          ? json_pack("{s:s,s:s,s:s,s:o,s:o,s:o}", "name", t->name, "title",
                                      t->title, "description", t->description, "inputSchema", in,
                                      "outputSchema", out, "annotations", ann)
                          : NULL;
        if (!one || json_array_append_new(tools, one) != 0) {
            if (!one) {
                json_decref(in);
                json_decref(out);
                json_decref(ann);
            }
            json_decref(tools);
            return NULL;
        }
    }
    return tools ? json_pack("{s:o}", "tools", tools) : NULL;
}

struct cs_mcp *cs_mcp_new(const char *version)
{
    struct cs_mcp *srv = calloc(1, sizeof *srv);
    if (!srv)
        return NULL;
    srv->version = strdup(version);
    srv->tools = calloc(csw_tool_count ? csw_tool_count : 1, sizeof *srv->tools);
    srv->tools_list = build_tools_list();
    if (!srv->version || !srv->tools || !srv->tools_list) {
        cs_mcp_free(srv);
        return NULL;
    }
    srv->ntools = csw_tool_count;
    for (size_t i = 0; i < srv->ntools; i++)
        srv->tools[i] = (struct tool_entry){&csw_tools[i], not_implemented, NULL};
    return srv;
}

void cs_mcp_free(struct cs_mcp *srv)
{
    if (!srv)
        return;
    json_decref(srv->tools_list);
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

/* ---- exchanges ---- */

/* Adds reply r (stolen, may be NULL) to x; text (stolen, may be NULL) is r serialized. */
static void add_reply_text(struct cs_mcp_exchange *x, json_t *r, char *text)
{
    if (!r) {
        free(text);
        return;
    }
    if (x->batch) {
        json_array_append_new(x->replies, r);
        free(text);
    } else {
        json_decref(x->replies);
        free(x->text);
        x->replies = r;
        x->text = text;
    }
}

static void add_reply(struct cs_mcp_exchange *x, json_t *r)
{
    add_reply_text(x, r, NULL);
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
    x->text = NULL;
    if (!x->abandoned) {
        if (r && !text)
            text = json_dumps(r, JSON_COMPACT);
        x->reply(x->arg, r, text, text ? strlen(text) : 0);
    } else {
        json_decref(r);
    }
    free(text);
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
    return call->cancelled || call->x->abandoned || !call->x->s;
}

json_t *cs_mcp_text_of(const json_t *v)
{
    char *text = json_dumps(v, JSON_COMPACT);
    json_t *s = text ? json_string(text) : NULL;
    free(text);
    return s;
}

/* Completes call with result (a CallToolResult, stolen; NULL: out of memory) and, when given,
 * the whole reply already serialized (stolen). */
static void complete_with(struct cs_mcp_call *call, json_t *result, char *reply_text)
{
    struct cs_mcp_exchange *x = call->x;
    if (!cs_mcp_call_cancelled(call)) {
        json_t *resp = result
                           ? cs_jsonrpc_result(call->id, json_incref(result))
                           : cs_jsonrpc_error(call->id, CS_JSONRPC_INTERNAL_ERROR, "out of memory");
        if (!result || !resp) {
            free(reply_text);
            reply_text = NULL;
        }
        add_reply_text(x, resp, reply_text);
    } else {
        free(reply_text);
    }
    json_decref(result);

    if (x->s) {
        if (call->prev)
            call->prev->next = call->next;
        else
            x->s->calls = call->next;
        if (call->next)
            call->next->prev = call->prev;
    }
    cs_wire_free(call->t->tool->input, call->input);
    free(call->input);
    json_decref(call->id);
    free(call);
    call_done(x);
}

/* Completes call with a text item (a JSON string, stolen) and structuredContent (stolen, may be
 * NULL). */
static void complete(struct cs_mcp_call *call, json_t *text, json_t *structured, bool is_error)
{
    json_t *result = text ? json_pack("{s:[{s:s,s:O}],s:b}", "content", "type", "text", "text",
                                      text, "isError", is_error)
                          : NULL;
    if (result && structured)
        json_object_set(result, "structuredContent", structured);
    json_decref(text);
    json_decref(structured);
    complete_with(call, result, NULL);
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
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    utf8_tidy(msg);
    json_t *body = error_body(code, operation_id, msg);
    complete(call, body ? cs_mcp_text_of(body) : NULL, NULL, true);
    json_decref(body);
}

/*
 * The CallToolResult for structured (a tool's output, not stolen) in *result, and its JSON text
 * in *text (malloc'd). The text is spliced, not dumped: structured is serialized once (s, taken,
 * when the caller already has it from the text encoder, which writes what json_dumps would) and
 * that text is quoted once for the text item (cs_json_quote); dumping the result would escape a
 * big string three times (the text item's making, then both copies), which was most of what a
 * full read window cost. Returns 0, or -1 out of memory (nothing to free).
 */
static int ok_result(json_t *structured, char *s, json_t **result, char **text)
{
    static const char head[] = "{\"content\":[{\"type\":\"text\",\"text\":";
    static const char mid[] = "}],\"isError\":false,\"structuredContent\":";
    *result = NULL;
    *text = NULL;
    if (!s)
        s = json_dumps(structured, JSON_COMPACT);
    if (!s)
        return -1;
    size_t n = strlen(s);
    char *t = malloc(sizeof head - 1 + CS_JSON_QUOTE_MAX(n) + sizeof mid - 1 + n + 2);
    json_t *item = json_stringn_nocheck(s, n); /* jansson's own output: valid UTF-8 */
    json_t *r = item ? json_pack("{s:[{s:s,s:O}],s:b,s:O}", "content", "type", "text", "text", item,
                                 "isError", 0, "structuredContent", structured)
                     : NULL;
    json_decref(item);
    if (!t || !r) {
        cs_wire_release(s);
        free(t);
        json_decref(r);
        return -1;
    }
    size_t at = sizeof head - 1;
    memcpy(t, head, at);
    at += cs_json_quote(s, n, t + at);
    memcpy(t + at, mid, sizeof mid - 1);
    at += sizeof mid - 1;
    memcpy(t + at, s, n);
    at += n;
    t[at++] = '}';
    t[at] = '\0';
    cs_wire_release(s);
    *result = r;
    *text = t;
    return 0;
}

/* The JSON-RPC response to id carrying result_text (a serialized result), malloc'd, or NULL. */
static char *response_text(const json_t *id, const char *result_text)
{
    char *idt = json_dumps(id, JSON_ENCODE_ANY | JSON_COMPACT);
    if (!idt)
        return NULL;
    size_t n = strlen(idt) + strlen(result_text) + 40;
    char *text = malloc(n);
    if (text)
        snprintf(text, n, "{\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":%s}", idt, result_text);
    free(idt);
    return text;
}

void cs_mcp_call_ok(struct cs_mcp_call *call, const void *output)
{
    json_t *j = NULL;
    char *s = NULL;
    struct cs_wire_diag diag;
    enum cs_wire_status st = cs_wire_encode(call->t->tool->output, output, &j, &diag);
    /* The text straight from the struct: jansson's dump escapes a big string slowly. */
    if (st == CS_WIRE_OK)
        st = cs_wire_encode_text(call->t->tool->output, output, &s, NULL, &diag);
    if (st != CS_WIRE_OK) {
        json_decref(j);
        char where[600];
        cs_mcp_call_error(call, CSW_ERROR_INTERNAL, NULL,
                          "the %s result broke its output schema: %s", call->t->tool->name,
                          cs_wire_diag_format(&diag, where, sizeof where));
        return;
    }
    json_t *result;
    char *text;
    int rc = ok_result(j, s, &result, &text);
    json_decref(j);
    if (rc != 0) {
        complete_with(call, NULL, NULL); /* answers "out of memory" */
        return;
    }
    char *reply = response_text(call->id, text);
    free(text);
    complete_with(call, result, reply);
}

struct cs_mcp_cached {
    json_t *result; /* the CallToolResult object */
    char *text;     /* its JSON text */
};

struct cs_mcp_cached *cs_mcp_cached_new(json_t *structured)
{
    struct cs_mcp_cached *c = calloc(1, sizeof *c);
    if (c && ok_result(structured, NULL, &c->result, &c->text) != 0) {
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
    complete_with(call, json_incref(c->result), response_text(call->id, c->text));
}

/* tools/call: decode the arguments through the tool's input schema and start the handler. */
static json_t *tools_call(struct cs_mcp_exchange *x, json_t *id, json_t *params, bool *async)
{
    struct cs_mcp *srv = x->s->srv;
    const json_t *name = json_object_get(params, "name");
    if (!json_is_string(name))
        return cs_jsonrpc_error(id, CS_JSONRPC_INVALID_PARAMS,
                                "tools/call needs params.name, a string");
    const struct tool_entry *t = NULL;
    for (size_t i = 0; i < srv->ntools; i++)
        if (str_is(name, srv->tools[i].tool->name))
            t = &srv->tools[i];
    if (!t) {
        char msg[300];
        snprintf(msg, sizeof msg, "Unknown tool: %.200s", json_string_value(name));
        utf8_tidy(msg);
        return cs_jsonrpc_error(id, CS_JSONRPC_INVALID_PARAMS, msg);
    }
    json_t *args = json_object_get(params, "arguments");
    json_t *empty = NULL;
    if (!args || json_is_null(args))
        args = empty = json_object();

    struct cs_mcp_call *call = calloc(1, sizeof *call);
    void *input = calloc(1, t->tool->input->size);
    if (!call || !input) {
        free(call);
        free(input);
        json_decref(empty);
        return cs_jsonrpc_error(id, CS_JSONRPC_INTERNAL_ERROR, "out of memory");
    }
    *async = true;
    call->x = x;
    call->t = t;
    call->id = json_incref(id);
    call->input = input;
    call->next = x->s->calls;
    if (call->next)
        call->next->prev = call;
    x->s->calls = call;
    x->waiting++;

    struct cs_wire_diag diag;
    enum cs_wire_status st = cs_wire_decode(t->tool->input, args, input, &diag);
    json_decref(empty);
    if (st == CS_WIRE_INVALID) {
        char where[600];
        cs_mcp_call_error(call, CSW_ERROR_INVALID_ARGUMENTS, NULL, "%s",
                          cs_wire_diag_format(&diag, where, sizeof where));
    } else if (st != CS_WIRE_OK) {
        cs_mcp_call_error(call, CSW_ERROR_INTERNAL, NULL, "out of memory decoding arguments");
    } else {
        t->fn(t->arg, call, input);
    }
    return NULL; /* the call replies through complete() */
}

static json_t *initialize(struct cs_mcp_session *s, json_t *id, json_t *params)
{
    const json_t *asked = json_object_get(params, "protocolVersion");
    const char *v = cs_mcp_versions[0];
    if (json_is_string(asked) && json_string_length(asked) == strlen(json_string_value(asked)) &&
        cs_mcp_version_supported(json_string_value(asked)))
        v = json_string_value(asked);
    snprintf(s->version, sizeof s->version, "%s", v);
    s->initialized = true;
    json_t *result =
        json_pack("{s:s,s:{s:{s:b},s:{}},s:{s:s,s:s},s:s}", "protocolVersion", s->version,
                  "capabilities", "tools", "listChanged", 0, "logging", "serverInfo", "name",
                  "codespace", "version", s->srv->version, "instructions", instructions);
    return result ? cs_jsonrpc_result(id, result)
                  : cs_jsonrpc_error(id, CS_JSONRPC_INTERNAL_ERROR, "out of memory");
}

static json_t *set_level(struct cs_mcp_session *s, json_t *id, json_t *params)
{
    const json_t *level = json_object_get(params, "level");
    enum cs_log_level l;
    if (!json_is_string(level) || json_string_length(level) != strlen(json_string_value(level)) ||
        cs_log_level_parse(json_string_value(level), &l) != 0 ||
        strcmp(json_string_value(level), "warn") == 0)
        return cs_jsonrpc_error(id, CS_JSONRPC_INVALID_PARAMS,
                                "params.level must be one of debug, info, notice, warning, "
                                "error, critical, alert, emergency");
    s->log_level = l;
    return cs_jsonrpc_result(id, json_object());
}

static void cancel(struct cs_mcp_session *s, json_t *params)
{
    const json_t *rid = json_object_get(params, "requestId");
    if (!rid)
        return;
    for (struct cs_mcp_call *c = s->calls; c; c = c->next)
        if (json_equal(c->id, (json_t *)rid))
            c->cancelled = true;
}

/* Handles one parsed message into x. */
static void handle_one(struct cs_mcp_exchange *x, json_t *msg)
{
    struct cs_mcp_session *s = x->s;
    struct cs_jsonrpc_msg m;
    switch (cs_jsonrpc_classify(msg, &m)) {
    case CS_JSONRPC_INVALID:
        add_reply(x, cs_jsonrpc_error(m.id, CS_JSONRPC_INVALID_REQUEST, m.why));
        return;
    case CS_JSONRPC_RESPONSE:
        return; /* we send no requests; nothing to match */
    case CS_JSONRPC_NOTIFICATION:
        if (str_is(json_object_get(msg, "method"), "notifications/cancelled") &&
            json_is_object(m.params))
            cancel(s, m.params);
        return; /* notifications/initialized and unknown notifications need nothing */
    case CS_JSONRPC_REQUEST:
        break;
    }
    json_t *params = json_is_object(m.params) ? m.params : NULL;
    json_t *empty = NULL;
    if (!params)
        params = empty = json_object();
    const json_t *method = json_object_get(msg, "method");
    json_t *r;
    bool async = false;
    if (str_is(method, "initialize") && s->initialized)
        r = cs_jsonrpc_error(m.id, CS_JSONRPC_INVALID_REQUEST,
                             "the session is already initialized");
    else if (str_is(method, "initialize"))
        r = initialize(s, m.id, params);
    else if (str_is(method, "ping"))
        r = cs_jsonrpc_result(m.id, json_object());
    else if (!s->initialized)
        r = cs_jsonrpc_error(m.id, CS_JSONRPC_INVALID_REQUEST,
                             "the session is not initialized: send initialize first");
    else if (str_is(method, "tools/list"))
        r = cs_jsonrpc_result(m.id, json_incref(s->srv->tools_list)); /* shared, never changed */
    else if (str_is(method, "tools/call"))
        r = tools_call(x, m.id, params, &async);
    else if (str_is(method, "logging/setLevel"))
        r = set_level(s, m.id, params);
    else
        r = cs_jsonrpc_error(m.id, CS_JSONRPC_METHOD_NOT_FOUND, "Method not found");
    json_decref(empty);
    if (!r && !async) /* building the reply failed: a request is still answered */
        r = cs_jsonrpc_error(m.id, CS_JSONRPC_INTERNAL_ERROR, "internal error");
    add_reply(x, r);
}

/* ---- sessions ---- */

struct cs_mcp_session *cs_mcp_session_new(struct cs_mcp *srv)
{
    struct cs_mcp_session *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->srv = srv;
    s->log_level = CS_LOG_INFO;
    return s;
}

void cs_mcp_session_free(struct cs_mcp_session *s)
{
    if (!s)
        return;
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

/* A message over the parse budget (M8): refused before jansson sees it, under its id when the
 * pre-pass found a readable one (a string or an integer), else under null. */
static bool over_budget(const char *data, size_t len, cs_mcp_reply_fn reply, void *arg)
{
    struct cs_json_budget b = {0};
    char why[200], msg[260];
    if (cs_json_budget_check(data, len, &b, why, sizeof why) == 0)
        return false;
    json_t *id = b.id_len ? json_loadb(data + b.id_off, b.id_len, JSON_DECODE_ANY, NULL) : NULL;
    if (id && !json_is_string(id) && !json_is_integer(id)) {
        json_decref(id);
        id = NULL;
    }
    snprintf(msg, sizeof msg, "message over the parse budget: %s", why);
    json_t *r = cs_jsonrpc_error(id, CS_JSONRPC_INVALID_REQUEST, msg);
    char *text = r ? json_dumps(r, JSON_COMPACT) : NULL;
    reply(arg, r, text, text ? strlen(text) : 0);
    free(text);
    return true;
}

/* After a large message, the freed tree goes back to the system (thousands of small chunks in
 * the heap that free() alone keeps): RSS returns to its level before the message. */
#define TRIM_AFTER ((size_t)1024 * 1024)

static struct cs_mcp_exchange *handle(struct cs_mcp_session *s, const char *data, size_t len,
                                      cs_mcp_reply_fn reply, void *arg);

struct cs_mcp_exchange *cs_mcp_session_handle(struct cs_mcp_session *s, const char *data,
                                              size_t len, cs_mcp_reply_fn reply, void *arg)
{
    struct cs_mcp_exchange *x =
        over_budget(data, len, reply, arg) ? NULL : handle(s, data, len, reply, arg);
    if (len >= TRIM_AFTER)
        (void)malloc_trim(0);
    return x;
}

static struct cs_mcp_exchange *handle(struct cs_mcp_session *s, const char *data, size_t len,
                                      cs_mcp_reply_fn reply, void *arg)
{
    json_error_t err;
    json_t *msg = json_loadb(data, len, JSON_ALLOW_NUL | JSON_DECODE_ANY, &err);
    if (!msg) {
        /* Valid JSON that jansson refuses only for a number out of its range (an integer past
         * int64, a real past double) is read again with those numbers clamped, so the request is
         * answered under its id: a limit of 2^64 is then too large (OUTPUT_LIMIT) rather than
         * a parse error nobody can match to the call. */
        size_t n2 = 0;
        char *again = cs_json_clamp_numbers(data, len, &n2);
        json_error_t err2;
        msg = again ? json_loadb(again, n2, JSON_ALLOW_NUL | JSON_DECODE_ANY, &err2) : NULL;
        free(again);
    }
    if (!msg) {
        char why[256];
        snprintf(why, sizeof why, "Parse error: %s (line %d, column %d)", err.text, err.line,
                 err.column);
        utf8_tidy(why);
        json_t *r = cs_jsonrpc_error(NULL, CS_JSONRPC_PARSE_ERROR, why);
        char *text = r ? json_dumps(r, JSON_COMPACT) : NULL;
        reply(arg, r, text, text ? strlen(text) : 0);
        free(text);
        return NULL;
    }
    struct cs_mcp_exchange *x = calloc(1, sizeof *x);
    if (!x) {
        json_decref(msg);
        reply(arg, NULL, NULL, 0); /* out of memory: nothing can be said */
        return NULL;
    }
    x->s = s;
    x->reply = reply;
    x->arg = arg;
    x->handling = true;
    x->next = s->exchanges;
    if (x->next)
        x->next->prev = x;
    s->exchanges = x;

    if (json_is_array(msg)) {
        if (strcmp(s->version, BATCH_VERSION) != 0) {
            add_reply(x, cs_jsonrpc_error(NULL, CS_JSONRPC_INVALID_REQUEST,
                                          "JSON-RPC batches are only accepted on protocol "
                                          "version " BATCH_VERSION));
        } else if (json_array_size(msg) == 0) {
            add_reply(x, cs_jsonrpc_error(NULL, CS_JSONRPC_INVALID_REQUEST, "empty batch"));
        } else if (json_array_size(msg) > MAX_BATCH) {
            add_reply(x, cs_jsonrpc_error(NULL, CS_JSONRPC_INVALID_REQUEST,
                                          "a batch may hold at most 64 messages"));
        } else {
            x->batch = true;
            x->replies = json_array();
            size_t i;
            json_t *one;
            json_array_foreach(msg, i, one)
            {
                handle_one(x, one);
            }
        }
    } else {
        handle_one(x, msg);
    }
    json_decref(msg);
    x->handling = false;
    if (x->waiting == 0) {
        finish(x);
        return NULL;
    }
    return x;
}

void cs_mcp_exchange_abandon(struct cs_mcp_exchange *x)
{
    if (!x)
        return;
    x->abandoned = true;
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
