/*
 * Unit tests of the mcp module (and jsonrpc under it): sessions driven message by message, with
 * a fake asynchronous tool, so replies that come later, cancellation, abandoned exchanges and
 * freed sessions are all exercised without a transport.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jsonrpc.h"
#include "mcp_server.h"

/* Replies collected by reply_cb. */
static json_t *replies[16];
static size_t nreplies;

/* Whether reply (what the transport reads the envelope from) and back (its text, parsed) agree:
 * equal, or the same but for a tool success's result, which reply only stands in for with an
 * empty object (cs_mcp_reply_fn). */
static bool envelope_matches(const json_t *reply, const json_t *back)
{
    if (json_equal(reply, back))
        return true;
    const json_t *stand = json_object_get(reply, "result");
    const json_t *real = json_object_get(back, "result");
    if (!json_is_object(stand) || json_object_size(stand) != 0 || !json_is_object(real) ||
        !json_is_object(json_object_get(real, "structuredContent")) ||
        json_object_size(reply) != json_object_size(back))
        return false;
    return json_equal(json_object_get(reply, "id"), json_object_get(back, "id"));
}

static void reply_cb(void *arg, json_t *reply, char *text, size_t len)
{
    (void)arg;
    assert_true(nreplies < 16);
    /* The text is the reply, serialized; the tests read the text. */
    if (reply) {
        assert_non_null(text);
        json_t *back = json_loadb(text, len, 0, NULL);
        assert_non_null(back);
        if (json_is_array(reply)) {
            assert_true(json_is_array(back));
            assert_int_equal(json_array_size(reply), json_array_size(back));
            for (size_t i = 0; i < json_array_size(reply); i++)
                assert_true(envelope_matches(json_array_get(reply, i), json_array_get(back, i)));
        } else {
            assert_true(envelope_matches(reply, back));
        }
        json_decref(reply);
        reply = back;
    } else {
        assert_null(text);
    }
    free(text);
    replies[nreplies++] = reply ? reply : json_null();
}

static void reset(void)
{
    for (size_t i = 0; i < nreplies; i++)
        json_decref(replies[i]);
    nreplies = 0;
}

static struct cs_mcp_exchange *send_text(struct cs_mcp_session *s, const char *text)
{
    return cs_mcp_session_handle(s, text, strlen(text), reply_cb, NULL);
}

/* Sends text and expects exactly one immediate reply, returned borrowed. */
static json_t *ask(struct cs_mcp_session *s, const char *text)
{
    reset();
    assert_null(send_text(s, text));
    assert_int_equal(nreplies, 1);
    return replies[0];
}

static int error_code(const json_t *reply)
{
    return (int)json_integer_value(json_object_get(json_object_get(reply, "error"), "code"));
}

/* The tool error body of a tools/call reply (parsed from its text item). */
static json_t *tool_error(const json_t *reply)
{
    const json_t *result = json_object_get(reply, "result");
    assert_true(json_is_true(json_object_get(result, "isError")));
    assert_null(json_object_get(result, "structuredContent"));
    const char *text = json_string_value(
        json_object_get(json_array_get(json_object_get(result, "content"), 0), "text"));
    assert_non_null(text);
    json_t *body = json_loads(text, 0, NULL);
    assert_non_null(body);
    return body;
}

static struct cs_mcp *srv;
static struct cs_mcp_session *sess;

static int setup(void **state)
{
    (void)state;
    srv = cs_mcp_new("9.9.9");
    sess = cs_mcp_session_new(srv);
    return srv && sess ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    reset();
    cs_mcp_session_free(sess);
    cs_mcp_free(srv);
    return 0;
}

static void init(const char *version)
{
    char msg[256];
    snprintf(msg, sizeof msg,
             "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{"
             "\"protocolVersion\":\"%s\",\"capabilities\":{},\"clientInfo\":{\"name\":\"t\","
             "\"version\":\"1\"}}}",
             version);
    json_t *r = ask(sess, msg);
    assert_non_null(json_object_get(r, "result"));
}

/* ---- protocol ---- */

static void test_initialize_negotiates(void **state)
{
    (void)state;
    assert_null(cs_mcp_session_version(sess));
    json_t *r = ask(sess, "{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"method\":\"initialize\","
                          "\"params\":{\"protocolVersion\":\"1999-01-01\"}}");
    const json_t *res = json_object_get(r, "result");
    assert_string_equal(json_string_value(json_object_get(res, "protocolVersion")), "2025-11-25");
    assert_string_equal(json_string_value(json_object_get(r, "id")), "a");
    const json_t *info = json_object_get(res, "serverInfo");
    assert_string_equal(json_string_value(json_object_get(info, "name")), "codespace");
    assert_string_equal(json_string_value(json_object_get(info, "version")), "9.9.9");
    const json_t *caps = json_object_get(res, "capabilities");
    assert_true(json_is_false(json_object_get(json_object_get(caps, "tools"), "listChanged")));
    assert_non_null(json_object_get(caps, "logging"));
    assert_null(json_object_get(caps, "resources"));
    assert_non_null(strstr(json_string_value(json_object_get(res, "instructions")), "argv"));
    /* A second initialize on the same session is refused. */
    r = ask(sess, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"initialize\",\"params\":{}}");
    assert_int_equal(error_code(r), CS_JSONRPC_INVALID_REQUEST);
    for (size_t i = 0; i < cs_mcp_version_count; i++) {
        cs_mcp_session_free(sess);
        sess = cs_mcp_session_new(srv);
        init(cs_mcp_versions[i]);
        assert_string_equal(cs_mcp_session_version(sess), cs_mcp_versions[i]);
    }
}

static void test_before_initialize(void **state)
{
    (void)state;
    json_t *r = ask(sess, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}");
    assert_int_equal(error_code(r), CS_JSONRPC_INVALID_REQUEST);
    r = ask(sess, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}");
    assert_true(json_is_object(json_object_get(r, "result")));
    /* A notification before initialize gets nothing. */
    r = ask(sess, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}");
    assert_true(json_is_null(r));
}

static void test_jsonrpc_errors(void **state)
{
    (void)state;
    init("2025-11-25");
    json_t *r = ask(sess, "{not json");
    assert_int_equal(error_code(r), CS_JSONRPC_PARSE_ERROR);
    assert_true(json_is_null(json_object_get(r, "id")));
    r = ask(sess, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"resources/list\"}");
    assert_int_equal(error_code(r), CS_JSONRPC_METHOD_NOT_FOUND);
    assert_int_equal(json_integer_value(json_object_get(r, "id")), 3);
    r = ask(sess, "{\"jsonrpc\":\"1.0\",\"id\":4,\"method\":\"ping\"}");
    assert_int_equal(error_code(r), CS_JSONRPC_INVALID_REQUEST);
    assert_int_equal(json_integer_value(json_object_get(r, "id")), 4);
    r = ask(sess, "{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"ping\"}");
    assert_int_equal(error_code(r), CS_JSONRPC_INVALID_REQUEST);
    assert_true(json_is_null(json_object_get(r, "id")));
    r = ask(sess, "42");
    assert_int_equal(error_code(r), CS_JSONRPC_INVALID_REQUEST);
    r = ask(sess, "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\",\"params\":{\"name\":"
                  "\"format_disk\"}}");
    assert_int_equal(error_code(r), CS_JSONRPC_INVALID_PARAMS);
    r = ask(sess, "{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"tools/call\",\"params\":{}}");
    assert_int_equal(error_code(r), CS_JSONRPC_INVALID_PARAMS);
    /* A client's response to a request we never sent is ignored. */
    r = ask(sess, "{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}");
    assert_true(json_is_null(r));
    r = ask(sess, "{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"logging/setLevel\",\"params\":{"
                  "\"level\":\"loud\"}}");
    assert_int_equal(error_code(r), CS_JSONRPC_INVALID_PARAMS);
    r = ask(sess, "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"logging/setLevel\",\"params\":{"
                  "\"level\":\"debug\"}}");
    assert_true(json_is_object(json_object_get(r, "result")));
    assert_string_equal(cs_mcp_session_log_level(sess), "debug");
}

static void test_tools_list(void **state)
{
    (void)state;
    init("2025-06-18");
    json_t *r = ask(sess, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}");
    const json_t *tools = json_object_get(json_object_get(r, "result"), "tools");
    assert_int_equal(json_array_size(tools), 11);
    const json_t *t = json_array_get(tools, 5);
    assert_string_equal(json_string_value(json_object_get(t, "name")), "exec_command");
    assert_non_null(json_object_get(t, "title"));
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(t, "inputSchema"), "type")), "object");
    assert_non_null(json_object_get(t, "outputSchema"));
    const json_t *ann = json_object_get(t, "annotations");
    assert_true(json_is_true(json_object_get(ann, "destructiveHint")));
    assert_true(json_is_true(json_object_get(ann, "openWorldHint")));
}

static void test_invalid_arguments_name_the_pointer(void **state)
{
    (void)state;
    init("2025-11-25");
    json_t *r = ask(sess, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{"
                          "\"name\":\"exec_command\",\"arguments\":{\"workspace_id\":\"w\","
                          "\"command\":[1]}}}");
    json_t *body = tool_error(r);
    assert_string_equal(json_string_value(json_object_get(body, "code")), "INVALID_ARGUMENTS");
    assert_string_equal(json_string_value(json_object_get(body, "message")),
                        "/command/0: expected string");
    assert_null(json_object_get(body, "operation_id"));
    json_decref(body);
    /* A tool's hint follows a violation at exactly its pointer, and nowhere else. */
    assert_int_equal(cs_mcp_set_tool_hint(srv, "exec_command", "/command", "use an argv"), 0);
    assert_int_equal(cs_mcp_set_tool_hint(srv, "nope", "/x", "y"), -1);
    r = ask(sess, "{\"jsonrpc\":\"2.0\",\"id\":11,\"method\":\"tools/call\",\"params\":{"
                  "\"name\":\"exec_command\",\"arguments\":{\"workspace_id\":\"w\","
                  "\"command\":\"ls -l\"}}}");
    body = tool_error(r);
    assert_string_equal(json_string_value(json_object_get(body, "message")),
                        "/command: expected array: use an argv");
    json_decref(body);
    r = ask(sess, "{\"jsonrpc\":\"2.0\",\"id\":12,\"method\":\"tools/call\",\"params\":{"
                  "\"name\":\"exec_command\",\"arguments\":{\"workspace_id\":\"w\","
                  "\"command\":[1]}}}");
    body = tool_error(r);
    assert_string_equal(json_string_value(json_object_get(body, "message")),
                        "/command/0: expected string");
    json_decref(body);
    /* Arguments that are not an object, and missing arguments. */
    r = ask(sess, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{"
                  "\"name\":\"read\",\"arguments\":[]}}");
    body = tool_error(r);
    assert_string_equal(json_string_value(json_object_get(body, "message")),
                        "arguments: expected an object, got an array (omit arguments for none)");
    json_decref(body);
    r = ask(sess, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{"
                  "\"name\":\"read\"}}");
    body = tool_error(r);
    assert_string_equal(json_string_value(json_object_get(body, "message")),
                        "/workspace_id: missing required property");
    json_decref(body);
    /* A listed tool without a handler answers INTERNAL, as a tool error. */
    r = ask(sess, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/call\",\"params\":{"
                  "\"name\":\"process_status\",\"arguments\":{\"process_id\":\"p\"}}}");
    body = tool_error(r);
    assert_string_equal(json_string_value(json_object_get(body, "code")), "INTERNAL");
    json_decref(body);
}

/* ---- asynchronous tools ---- */

static struct cs_mcp_call *held;

static void hold(void *arg, struct cs_mcp_call *call, const void *input)
{
    (void)arg;
    const struct csw_mcp_process_resize_input *in = input;
    assert_int_equal(in->rows, 40);
    held = call;
}

static void finish_held(int cols)
{
    struct csw_mcp_process_resize_output out = {.rows = 40, .cols = cols};
    cs_mcp_call_ok(held, &out);
    held = NULL;
}

#define RESIZE(id)                                                                                 \
    "{\"jsonrpc\":\"2.0\",\"id\":" #id ",\"method\":\"tools/call\",\"params\":{\"name\":"          \
    "\"process_resize\",\"arguments\":{\"process_id\":\"p\",\"rows\":40,\"cols\":120}}}"

static void test_async_reply_comes_later(void **state)
{
    (void)state;
    init("2025-11-25");
    assert_int_equal(cs_mcp_set_tool(srv, "process_resize", hold, NULL), 0);
    assert_int_equal(cs_mcp_set_tool(srv, "nope", hold, NULL), -1);
    reset();
    struct cs_mcp_exchange *x = send_text(sess, RESIZE(10));
    assert_non_null(x);
    assert_int_equal(nreplies, 0);
    assert_int_equal(cs_mcp_session_pending(sess), 1);
    /* Meanwhile ping is answered. */
    assert_null(send_text(sess, "{\"jsonrpc\":\"2.0\",\"id\":11,\"method\":\"ping\"}"));
    assert_int_equal(nreplies, 1);
    finish_held(120);
    assert_int_equal(nreplies, 2);
    const json_t *res = json_object_get(replies[1], "result");
    assert_int_equal(json_integer_value(json_object_get(replies[1], "id")), 10);
    assert_true(json_is_false(json_object_get(res, "isError")));
    const json_t *sc = json_object_get(res, "structuredContent");
    assert_int_equal(json_integer_value(json_object_get(sc, "cols")), 120);
    assert_true(json_is_true(json_object_get(sc, "ok")));
    /* The text item holds the same JSON, complete. */
    json_t *again = json_loads(json_string_value(json_object_get(
                                   json_array_get(json_object_get(res, "content"), 0), "text")),
                               0, NULL);
    assert_true(json_equal(again, (json_t *)sc));
    json_decref(again);
    assert_int_equal(cs_mcp_session_pending(sess), 0);
}

/* The text of the last reply, kept whole (whole_text_cb). */
static char *whole_text;

static void whole_text_cb(void *arg, json_t *reply, char *text, size_t len)
{
    (void)arg;
    (void)len;
    json_decref(reply);
    free(whole_text);
    whole_text = text;
}

struct made {
    const struct cs_mcp_frame *frame;
    const void *output;
    char *reply;
    size_t len;
};

static void *make_on_thread(void *arg)
{
    struct made *m = arg;
    m->reply = cs_mcp_frame_reply(m->frame, m->output, &m->len);
    return NULL;
}

/* A reply made on another thread from the call's frame is byte for byte the reply the loop
 * would have made (tools.c makes big read and find answers that way). */
static void test_prepared_reply_is_the_same(void **state)
{
    (void)state;
    init("2025-11-25");
    cs_mcp_set_tool(srv, "process_resize", hold, NULL);
    struct csw_mcp_process_resize_output out = {.rows = 40, .cols = 120};
    assert_non_null(
        cs_mcp_session_handle(sess, RESIZE(21), strlen(RESIZE(21)), whole_text_cb, NULL));
    cs_mcp_call_ok(held, &out);
    assert_non_null(whole_text);
    char *direct = whole_text;
    whole_text = NULL;

    assert_non_null(
        cs_mcp_session_handle(sess, RESIZE(21), strlen(RESIZE(21)), whole_text_cb, NULL));
    struct cs_mcp_frame *f = cs_mcp_call_frame(held);
    assert_non_null(f);
    struct made m = {f, &out, NULL, 0};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, make_on_thread, &m), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_non_null(m.reply);
    /* An output that breaks its schema makes nothing (the loop's cs_mcp_call_ok says why). */
    struct csw_mcp_process_resize_output bad = {.rows = 40, .cols = 5000};
    size_t bad_len = 0;
    assert_null(cs_mcp_frame_reply(f, &bad, &bad_len));
    cs_mcp_frame_free(f);
    assert_int_equal(m.len, strlen(m.reply));
    cs_mcp_call_ok_reply(held, m.reply, m.len);
    held = NULL;
    assert_non_null(whole_text);
    assert_string_equal(whole_text, direct);
    free(direct);
    free(whole_text);
    whole_text = NULL;
    assert_int_equal(cs_mcp_session_pending(sess), 0);
}

static void test_output_schema_is_enforced(void **state)
{
    (void)state;
    init("2025-11-25");
    cs_mcp_set_tool(srv, "process_resize", hold, NULL);
    reset();
    send_text(sess, RESIZE(12));
    finish_held(5000); /* cols above 1000: the handler broke its outputSchema */
    assert_int_equal(nreplies, 1);
    json_t *body = tool_error(replies[0]);
    assert_string_equal(json_string_value(json_object_get(body, "code")), "INTERNAL");
    assert_non_null(strstr(json_string_value(json_object_get(body, "message")), "/cols"));
    json_decref(body);
}

static void test_cancel_and_abandon(void **state)
{
    (void)state;
    init("2025-11-25");
    cs_mcp_set_tool(srv, "process_resize", hold, NULL);
    reset();
    send_text(sess, RESIZE("c1"));
    assert_null(send_text(sess, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\","
                                "\"params\":{\"requestId\":\"c1\",\"reason\":\"user\"}}"));
    /* The cancelled call's exchange is answered at once, with no response (an HTTP POST gets
     * 202), then the notification's own "no reply". */
    assert_int_equal(nreplies, 2);
    assert_true(json_is_null(replies[0]));
    assert_true(json_is_null(replies[1]));
    assert_true(cs_mcp_call_cancelled(held));
    assert_int_equal(cs_mcp_session_pending(sess), 0);
    finish_held(80); /* completes into nothing */
    assert_int_equal(nreplies, 2);

    reset();
    struct cs_mcp_exchange *x = send_text(sess, RESIZE(13));
    cs_mcp_exchange_abandon(x);
    assert_true(cs_mcp_call_cancelled(held));
    finish_held(80);
    assert_int_equal(nreplies, 0); /* the transport is gone: nothing is delivered */
}

/* What the completion observer saw (cs_mcp_on_call_done). */
static struct {
    int n;
    char tool[32];
    bool had_input, had_output, cancelled;
    int error;
    char op[48];
    int64_t duration_ms;
    int64_t cols;        /* from the output, while it is lent */
    char process_id[16]; /* from the input, while it is lent */
} seen;

static void observe(void *arg, const struct cs_mcp_call_report *r)
{
    assert_ptr_equal(arg, &seen);
    seen.n++;
    snprintf(seen.tool, sizeof seen.tool, "%s", r->tool);
    seen.had_input = r->input != NULL;
    seen.had_output = r->output != NULL;
    seen.cancelled = r->cancelled;
    seen.error = r->error;
    snprintf(seen.op, sizeof seen.op, "%s", r->operation_id ? r->operation_id : "");
    seen.duration_ms = r->duration_ms;
    seen.cols = r->output ? ((const struct csw_mcp_process_resize_output *)r->output)->cols : -1;
    const struct csw_mcp_process_resize_input *in = r->input;
    snprintf(seen.process_id, sizeof seen.process_id, "%.*s", in ? (int)in->process_id.n : 0,
             in ? in->process_id.s : "");
}

static void fail_held(enum csw_error code, const char *op)
{
    cs_mcp_call_error(held, code, op, "refused");
    held = NULL;
}

/* The boundary's log (docs/operations.md "Logs") learns each completed call from one report:
 * the tool, the decoded input and the output while they are lent, the code of an error (and its
 * operation_id), a refusal of the arguments (no input), a cancelled call, the duration. */
static void test_call_done_reports(void **state)
{
    (void)state;
    init("2025-11-25");
    cs_mcp_set_tool(srv, "process_resize", hold, NULL);
    cs_mcp_on_call_done(srv, observe, &seen);
    memset(&seen, 0, sizeof seen);

    send_text(sess, RESIZE(31));
    assert_int_equal(seen.n, 0); /* not before it completes */
    struct timespec pause = {0, 30 * 1000 * 1000};
    nanosleep(&pause, NULL);
    finish_held(120);
    assert_int_equal(seen.n, 1);
    assert_string_equal(seen.tool, "process_resize");
    assert_true(seen.had_input && seen.had_output && !seen.cancelled);
    assert_int_equal(seen.error, -1);
    assert_int_equal(seen.cols, 120);
    assert_string_equal(seen.process_id, "p");
    assert_true(seen.duration_ms >= 25 && seen.duration_ms < 5000);

    send_text(sess, RESIZE(32));
    fail_held(CSW_ERROR_VERSION_CONFLICT, "op-x");
    assert_int_equal(seen.n, 2);
    assert_int_equal(seen.error, (int)CSW_ERROR_VERSION_CONFLICT);
    assert_string_equal(seen.op, "op-x");
    assert_true(seen.had_input && !seen.had_output);

    /* An output that breaks its schema is reported as what the client got: INTERNAL. */
    send_text(sess, RESIZE(33));
    finish_held(5000);
    assert_int_equal(seen.n, 3);
    assert_int_equal(seen.error, (int)CSW_ERROR_INTERNAL);
    assert_false(seen.had_output);

    /* Arguments the decoder refused: no handler ran, no input to read. */
    reset();
    send_text(sess, "{\"jsonrpc\":\"2.0\",\"id\":34,\"method\":\"tools/call\",\"params\":{"
                    "\"name\":\"process_resize\",\"arguments\":{\"rows\":\"x\"}}}");
    assert_int_equal(seen.n, 4);
    assert_int_equal(seen.error, (int)CSW_ERROR_INVALID_ARGUMENTS);
    assert_false(seen.had_input);

    /* A tools/call naming no tool is not a tool call. */
    send_text(sess, "{\"jsonrpc\":\"2.0\",\"id\":35,\"method\":\"tools/call\",\"params\":{"
                    "\"name\":\"nope\"}}");
    assert_int_equal(seen.n, 4);

    /* Cancelled, then completed by its handler: reported once, as cancelled. */
    send_text(sess, RESIZE("c9"));
    send_text(sess, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\","
                    "\"params\":{\"requestId\":\"c9\"}}");
    assert_int_equal(seen.n, 4);
    finish_held(80);
    assert_int_equal(seen.n, 5);
    assert_true(seen.cancelled);

    cs_mcp_on_call_done(srv, NULL, NULL);
    send_text(sess, RESIZE(36));
    finish_held(80);
    assert_int_equal(seen.n, 5);
}

/* A handler with a cancel hook that completes the call from inside the hook. */
static int hooked;

static void on_cancel(void *arg, struct cs_mcp_call *call)
{
    assert_ptr_equal(arg, &hooked);
    assert_ptr_equal(call, held);
    assert_true(cs_mcp_call_cancelled(call));
    hooked++;
    finish_held(80);
}

static void hold_hooked(void *arg, struct cs_mcp_call *call, const void *input)
{
    hold(arg, call, input);
    cs_mcp_call_on_cancel(call, on_cancel, &hooked);
}

static void test_cancel_hook(void **state)
{
    (void)state;
    init("2025-11-25");
    cs_mcp_set_tool(srv, "process_resize", hold_hooked, NULL);
    hooked = 0;
    reset();
    send_text(sess, RESIZE(20));
    /* Another id: nothing happens. */
    send_text(sess, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\","
                    "\"params\":{\"requestId\":21}}");
    assert_int_equal(hooked, 0);
    assert_int_equal(nreplies, 1);
    send_text(sess, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\","
                    "\"params\":{\"requestId\":20}}");
    assert_int_equal(hooked, 1);
    assert_null(held);
    assert_int_equal(nreplies, 3);
    assert_true(json_is_null(replies[1])); /* the cancelled request: no response */
    /* Twice: nothing more. */
    send_text(sess, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\","
                    "\"params\":{\"requestId\":20}}");
    assert_int_equal(hooked, 1);

    /* The transport drops the exchange: the hook runs too, and nothing is delivered. */
    reset();
    struct cs_mcp_exchange *x = send_text(sess, RESIZE(22));
    cs_mcp_exchange_abandon(x);
    assert_int_equal(hooked, 2);
    assert_null(held);
    assert_int_equal(nreplies, 0);
    assert_int_equal(cs_mcp_session_pending(sess), 0);

    /* A hook removed before the cancellation does not run. */
    reset();
    send_text(sess, RESIZE(23));
    cs_mcp_call_on_cancel(held, NULL, NULL);
    send_text(sess, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\","
                    "\"params\":{\"requestId\":23}}");
    assert_int_equal(hooked, 2);
    finish_held(80);
    assert_int_equal(nreplies, 2);
}

static void test_arguments_must_be_an_object(void **state)
{
    (void)state;
    init("2025-11-25");
    static const char *const bad[] = {"null", "\"x\"", "[]", "3", "true"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char msg[256];
        snprintf(msg, sizeof msg,
                 "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":"
                 "\"workspace_info\",\"arguments\":%s}}",
                 bad[i]);
        json_t *r = ask(sess, msg);
        json_t *body = tool_error(r);
        assert_string_equal(json_string_value(json_object_get(body, "code")), "INVALID_ARGUMENTS");
        assert_non_null(strstr(json_string_value(json_object_get(body, "message")), "arguments"));
        json_decref(body);
    }
}

static void test_session_freed_while_pending(void **state)
{
    (void)state;
    init("2025-11-25");
    cs_mcp_set_tool(srv, "process_resize", hold, NULL);
    reset();
    send_text(sess, RESIZE(14));
    cs_mcp_session_free(sess);
    sess = cs_mcp_session_new(srv);
    assert_true(cs_mcp_call_cancelled(held));
    finish_held(80); /* completes into nothing, frees everything (ASan checks) */
    assert_int_equal(nreplies, 0);
}

static void test_batches(void **state)
{
    (void)state;
    init("2025-06-18");
    json_t *r = ask(sess, "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]");
    assert_int_equal(error_code(r), CS_JSONRPC_INVALID_REQUEST);
    cs_mcp_session_free(sess);
    sess = cs_mcp_session_new(srv);
    init("2025-03-26");
    cs_mcp_set_tool(srv, "process_resize", hold, NULL);
    reset();
    struct cs_mcp_exchange *x = send_text(
        sess, "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"},"
              "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}," RESIZE(2) "]");
    assert_non_null(x);
    assert_int_equal(nreplies, 0); /* the batch answers once, when all of it is done */
    finish_held(80);
    assert_int_equal(nreplies, 1);
    assert_int_equal(json_array_size(replies[0]), 2);
    r = ask(sess, "[{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}]");
    assert_true(json_is_null(r)); /* only notifications: no reply at all */
    r = ask(sess, "[]");
    assert_int_equal(error_code(r), CS_JSONRPC_INVALID_REQUEST);
    /* More than 64 messages in one batch is refused whole (no amplification). */
    char big[65 * 48 + 8];
    size_t n = 0;
    big[n++] = '[';
    for (int i = 0; i < 65; i++)
        n += (size_t)snprintf(big + n, sizeof big - n,
                              "%s{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"ping\"}", i ? "," : "",
                              i);
    big[n++] = ']';
    big[n] = '\0';
    r = ask(sess, big);
    assert_int_equal(error_code(r), CS_JSONRPC_INVALID_REQUEST);
}

static void test_names_with_nul_or_cut_utf8(void **state)
{
    (void)state;
    init("2025-11-25");
    /* A NUL inside a method or tool name never matches a shorter name. */
    json_t *r = ask(sess, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\\u0000x\"}");
    assert_int_equal(error_code(r), CS_JSONRPC_METHOD_NOT_FOUND);
    r = ask(sess, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{"
                  "\"name\":\"workspace_info\\u0000x\"}}");
    assert_int_equal(error_code(r), CS_JSONRPC_INVALID_PARAMS);
    /* An unknown tool name whose quoted prefix would end inside a UTF-8 character still gets
     * its error reply (the message is cut between characters). */
    char msg[600];
    char name[260];
    memset(name, 'a', 199);
    memcpy(name + 199, "\xc3\xa9", 2);
    name[201] = '\0';
    snprintf(msg, sizeof msg,
             "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{"
             "\"name\":\"%s\"}}",
             name);
    r = ask(sess, msg);
    assert_int_equal(error_code(r), CS_JSONRPC_INVALID_PARAMS);
    assert_int_equal(json_integer_value(json_object_get(r, "id")), 3);
}

/* ---- 2026-07-28 (docs/protocol.md) ---- */

#define META_OK                                                                                    \
    "\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\","                       \
    "\"io.modelcontextprotocol/clientCapabilities\":{}}"

static char last_text[4096];

static void text_cb(void *arg, json_t *reply, char *text, size_t len)
{
    (void)arg;
    assert_true(nreplies < 16);
    snprintf(last_text, sizeof last_text, "%.*s", (int)len, text ? text : "");
    /* The tests read the text (a tool success's reply only stands in); jansson cannot parse an
     * id past 64 bits (the reply's is clamped; the text's is as written), those are kept. */
    json_t *back = reply && text ? json_loadb(text, len, 0, NULL) : NULL;
    if (back) {
        assert_true(envelope_matches(reply, back));
        json_decref(reply);
        reply = back;
    }
    free(text);
    replies[nreplies++] = reply ? reply : json_null();
}

/* Sends text with hdr (NULL: stdio) and returns the one immediate reply (borrowed). */
static json_t *ask_hdr(const char *text, const struct cs_mcp_headers *hdr)
{
    reset();
    struct cs_mcp_msg *m = cs_mcp_msg_parse(text, strlen(text));
    assert_non_null(m);
    assert_null(cs_mcp_session_handle_msg(sess, m, hdr, text_cb, NULL));
    assert_int_equal(nreplies, 1);
    return replies[0];
}

static bool modern(const char *text, const struct cs_mcp_headers *hdr)
{
    struct cs_mcp_msg *m = cs_mcp_msg_parse(text, strlen(text));
    assert_non_null(m);
    bool yes = cs_mcp_msg_modern(m, hdr);
    cs_mcp_msg_free(m);
    return yes;
}

static void test_classification(void **state)
{
    (void)state;
    struct cs_mcp_headers h26 = {"2026-07-28", NULL, NULL, 1, 0, 0, NULL, NULL};
    struct cs_mcp_headers h26ws = {" 2026-07-28\t", NULL, NULL, 1, 0, 0, NULL, NULL};
    struct cs_mcp_headers h25 = {"2025-11-25", NULL, NULL, 1, 0, 0, NULL, NULL};
    struct cs_mcp_headers hbogus = {"bogus", NULL, NULL, 1, 0, 0, NULL, NULL};
    const char *discover = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"server/discover\"}";
    const char *meta = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{\"_meta\":{"
                       "\"io.modelcontextprotocol/protocolVersion\":\"1999\"}}}";
    const char *plain = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{}}";
    const char *batch = "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"server/discover\"}]";
    assert_true(modern(discover, NULL));
    assert_true(modern(meta, NULL));
    assert_false(modern(plain, NULL));
    assert_true(modern(plain, &h26));
    assert_true(modern(plain, &h26ws));
    assert_false(modern(plain, &h25));
    assert_false(modern(plain, &hbogus)); /* 2025 rules: not checked on initialize */
    assert_false(modern(batch, &h26));    /* batches are never 2026 */
    assert_false(modern("{nope", NULL));
    assert_true(modern("{nope", &h26));
    struct cs_mcp_msg *m = cs_mcp_msg_parse(plain, strlen(plain));
    assert_true(cs_mcp_msg_is_initialize(m));
    cs_mcp_msg_free(m);
}

static void test_modern_without_initialize(void **state)
{
    (void)state;
    json_t *r = ask_hdr(
        "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"server/discover\",\"params\":{" META_OK "}}",
        NULL);
    const json_t *res = json_object_get(r, "result");
    assert_string_equal(json_string_value(json_object_get(res, "resultType")), "complete");
    assert_string_equal(
        json_string_value(json_array_get(json_object_get(res, "supportedVersions"), 0)),
        "2026-07-28");
    assert_int_equal(json_integer_value(json_object_get(res, "ttlMs")), 3600000);
    assert_non_null(
        json_object_get(json_object_get(res, "_meta"), "io.modelcontextprotocol/serverInfo"));
    r = ask_hdr("{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"tools/list\",\"params\":{" META_OK "}}",
                NULL);
    res = json_object_get(r, "result");
    assert_string_equal(json_string_value(json_object_get(res, "cacheScope")), "public");
    assert_int_equal(json_array_size(json_object_get(res, "tools")), csw_tool_count);
    /* The session is still not initialized: a 2025 request needs initialize. */
    assert_false(cs_mcp_session_initialized(sess));
    r = ask_hdr("{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"tools/list\"}", NULL);
    assert_int_equal(error_code(r), CS_JSONRPC_INVALID_REQUEST);
}

static void test_modern_check_order(void **state)
{
    (void)state;
    struct cs_mcp_headers ok = {"2026-07-28", "tools/call", "t", 1, 1, 1, NULL, NULL};
    const char *call = "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{"
                       "\"name\":\"t\",\"arguments\":{}," META_OK "}}";
    /* missing _meta keys first, even with a header mismatch */
    struct cs_mcp_headers bad = {"2025-06-18", "x", NULL, 1, 1, 0, NULL, NULL};
    json_t *r = ask_hdr(
        "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"server/discover\",\"params\":{}}", &bad);
    assert_int_equal(error_code(r), CS_JSONRPC_INVALID_PARAMS);
    assert_int_equal(json_integer_value(json_object_get(r, "id")), 3);
    r = ask_hdr(
        "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"server/discover\",\"params\":{\"_meta\":"
        "{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\"}}}",
        NULL);
    assert_int_equal(error_code(r), CS_JSONRPC_INVALID_PARAMS);
    /* then the version header against the body, before support */
    r = ask_hdr(
        "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"server/discover\",\"params\":{\"_meta\":{"
        "\"io.modelcontextprotocol/protocolVersion\":\"v9\","
        "\"io.modelcontextprotocol/clientCapabilities\":{}}}}",
        &ok);
    assert_int_equal(error_code(r), CS_JSONRPC_HEADER_MISMATCH);
    struct cs_mcp_headers v9 = {"v9", "server/discover", NULL, 1, 1, 0, NULL, NULL};
    r = ask_hdr(
        "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"server/discover\",\"params\":{\"_meta\":{"
        "\"io.modelcontextprotocol/protocolVersion\":\"v9\","
        "\"io.modelcontextprotocol/clientCapabilities\":{}}}}",
        &v9);
    assert_int_equal(error_code(r), CS_JSONRPC_UNSUPPORTED_PROTOCOL);
    const json_t *data = json_object_get(json_object_get(r, "error"), "data");
    assert_string_equal(json_string_value(json_object_get(data, "requested")), "v9");
    assert_string_equal(json_string_value(json_array_get(json_object_get(data, "supported"), 0)),
                        "2026-07-28");
    /* then Mcp-Method and Mcp-Name */
    struct cs_mcp_headers nomethod = {"2026-07-28", NULL, "t", 1, 0, 1, NULL, NULL};
    assert_int_equal(error_code(ask_hdr(call, &nomethod)), CS_JSONRPC_HEADER_MISMATCH);
    struct cs_mcp_headers upper = {"2026-07-28", "TOOLS/CALL", "t", 1, 1, 1, NULL, NULL};
    assert_int_equal(error_code(ask_hdr(call, &upper)), CS_JSONRPC_HEADER_MISMATCH);
    struct cs_mcp_headers noname = {"2026-07-28", "tools/call", NULL, 1, 1, 0, NULL, NULL};
    assert_int_equal(error_code(ask_hdr(call, &noname)), CS_JSONRPC_HEADER_MISMATCH);
    struct cs_mcp_headers wrong = {"2026-07-28", "tools/call", "u", 1, 1, 1, NULL, NULL};
    assert_int_equal(error_code(ask_hdr(call, &wrong)), CS_JSONRPC_HEADER_MISMATCH);
    struct cs_mcp_headers badb64 = {"2026-07-28", "tools/call", "=?base64?dA?=", 1, 1, 1,
                                    NULL,         NULL};
    assert_int_equal(error_code(ask_hdr(call, &badb64)), CS_JSONRPC_HEADER_MISMATCH);
    struct cs_mcp_headers ctl = {"2026-07-28", "tools/call", "t\x01", 1, 1, 1, NULL, NULL};
    assert_int_equal(error_code(ask_hdr(call, &ctl)), CS_JSONRPC_HEADER_MISMATCH);
    /* accepted forms: trimmed, Base64 ("t" is dA==); the unknown tool then answers -32602 */
    struct cs_mcp_headers spaces = {" 2026-07-28 ", " tools/call\t", "  t  ", 1, 1, 1, NULL, NULL};
    assert_int_equal(error_code(ask_hdr(call, &spaces)), CS_JSONRPC_INVALID_PARAMS);
    struct cs_mcp_headers b64 = {"2026-07-28", "tools/call", "=?base64?dA==?=", 1, 1, 1,
                                 NULL,         NULL};
    assert_int_equal(error_code(ask_hdr(call, &b64)), CS_JSONRPC_INVALID_PARAMS);
    /* removed methods, then the log level */
    r = ask_hdr("{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"ping\",\"params\":{" META_OK "}}",
                NULL);
    assert_int_equal(error_code(r), CS_JSONRPC_METHOD_NOT_FOUND);
    r = ask_hdr("{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/list\",\"params\":{\"_meta\":{"
                "\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\","
                "\"io.modelcontextprotocol/clientCapabilities\":{},"
                "\"io.modelcontextprotocol/logLevel\":\"loud\"}}}",
                NULL);
    assert_int_equal(error_code(r), CS_JSONRPC_INVALID_PARAMS);
    /* a NUL inside the method name is another method */
    r = ask_hdr(
        "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/list\\u0000\",\"params\":{" META_OK "}}",
        NULL);
    assert_int_equal(error_code(r), CS_JSONRPC_METHOD_NOT_FOUND);
    /* never "id": null under 2026 */
    r = ask_hdr("{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"tools/list\",\"params\":{" META_OK
                "}}",
                NULL);
    assert_int_equal(error_code(r), CS_JSONRPC_INVALID_REQUEST);
    assert_null(json_object_get(r, "id"));
}

static void test_ids_echoed_as_written(void **state)
{
    (void)state;
    static const char *const ids[] = {"9223372036854775808", "-9223372036854775809",
                                      "12345678901234567890123", "-0", "\"\\u0041\""};
    init("2025-03-26");
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        char msg[256], want[128];
        snprintf(msg, sizeof msg, "{\"jsonrpc\":\"2.0\",\"method\":\"ping\",\"id\":%s}", ids[i]);
        snprintf(want, sizeof want, "{\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{}}", ids[i]);
        ask_hdr(msg, NULL);
        assert_string_equal(last_text, want);
        snprintf(msg, sizeof msg,
                 "{\"jsonrpc\":\"2.0\",\"method\":\"tools/list\",\"id\":%s,\"params\":{" META_OK
                 "}}",
                 ids[i]);
        ask_hdr(msg, NULL);
        snprintf(want, sizeof want, "{\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":", ids[i]);
        assert_memory_equal(last_text, want, strlen(want));
    }
    ask_hdr("[{\"jsonrpc\":\"2.0\",\"method\":\"ping\",\"id\":99999999999999999999},"
            "{\"jsonrpc\":\"2.0\",\"method\":\"ping\",\"id\":-1}]",
            NULL);
    assert_string_equal(last_text,
                        "[{\"jsonrpc\":\"2.0\",\"id\":99999999999999999999,\"result\":{}},"
                        "{\"jsonrpc\":\"2.0\",\"id\":-1,\"result\":{}}]");
    /* not an integer: not an id */
    ask_hdr("{\"jsonrpc\":\"2.0\",\"method\":\"ping\",\"id\":1e400}", NULL);
    assert_string_equal(last_text, "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32600,"
                                   "\"message\":\"\\\"id\\\" must be a string or an integer\"}}");
}

/* ---- logging (docs/protocol.md, "Logging") ---- */

/* Notifications a transport received, per channel. */
struct notes {
    json_t *v[8];
    size_t n;
};

static void note_cb(void *arg, const char *text, size_t len)
{
    struct notes *ns = arg;
    assert_true(ns->n < 8);
    ns->v[ns->n] = json_loadb(text, len, 0, NULL);
    assert_non_null(ns->v[ns->n]);
    ns->n++;
}

static void notes_clear(struct notes *ns)
{
    for (size_t i = 0; i < ns->n; i++)
        json_decref(ns->v[i]);
    ns->n = 0;
}

static void init_session(struct cs_mcp_session *s)
{
    reset();
    const char *msg = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{"
                      "\"protocolVersion\":\"2025-11-25\",\"capabilities\":{},\"clientInfo\":{"
                      "\"name\":\"t\",\"version\":\"1\"}}}";
    assert_null(cs_mcp_session_handle(s, msg, strlen(msg), reply_cb, NULL));
    assert_non_null(json_object_get(replies[0], "result"));
    reset();
}

static struct csw_protocol_log_data exit_data(void)
{
    struct csw_protocol_log_data d;
    memset(&d, 0, sizeof d);
    d.tag = CSW_PROTOCOL_LOG_DATA_PROCESS_EXITED;
    struct csw_protocol_log_process_exited *e = &d.u.process_exited;
    e->process_id = (struct cs_str){"proc-1", 6};
    e->workspace_id = (struct cs_str){"default", 7};
    e->has_exit_code = true;
    e->exit_code = 3;
    e->termination = CSW_PROCESS_TERMINATION_EXITED;
    return d;
}

static void set_level(struct cs_mcp_session *s, const char *level)
{
    char msg[160];
    snprintf(msg, sizeof msg,
             "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"logging/setLevel\",\"params\":{"
             "\"level\":\"%s\"}}",
             level);
    reset();
    assert_null(cs_mcp_session_handle(s, msg, strlen(msg), reply_cb, NULL));
    assert_non_null(json_object_get(replies[0], "result"));
    reset();
}

static void test_log_reaches_sessions_that_take_it(void **state)
{
    (void)state;
    struct notes stdio = {0}, stream = {0};
    struct csw_protocol_log_data d = exit_data();
    cs_mcp_session_on_notify(sess, note_cb, &stdio);
    /* Not initialized: nothing. */
    assert_int_equal(cs_mcp_log(srv, CSW_PROTOCOL_LOGGING_LEVEL_INFO, &d), 0);
    assert_int_equal(stdio.n, 0);
    init_session(sess);
    assert_int_equal(cs_mcp_log(srv, CSW_PROTOCOL_LOGGING_LEVEL_INFO, &d), 1);
    assert_int_equal(stdio.n, 1);
    const json_t *n = stdio.v[0];
    assert_string_equal(json_string_value(json_object_get(n, "method")), "notifications/message");
    const json_t *p = json_object_get(n, "params");
    assert_string_equal(json_string_value(json_object_get(p, "level")), "info");
    assert_string_equal(json_string_value(json_object_get(p, "logger")), "codespace");
    const json_t *data = json_object_get(p, "data");
    assert_string_equal(json_string_value(json_object_get(data, "event")), "process_exited");
    assert_string_equal(json_string_value(json_object_get(data, "process_id")), "proc-1");
    assert_string_equal(json_string_value(json_object_get(data, "workspace_id")), "default");
    assert_int_equal(json_integer_value(json_object_get(data, "exit_code")), 3);
    assert_string_equal(json_string_value(json_object_get(data, "termination")), "exited");
    assert_null(json_object_get(data, "signal"));
    notes_clear(&stdio);

    /* An HTTP-like session (no session channel): nothing until one of its exchanges streams. */
    struct cs_mcp_session *h = cs_mcp_session_new(srv);
    assert_non_null(h);
    init_session(h);
    assert_int_equal(cs_mcp_log(srv, CSW_PROTOCOL_LOGGING_LEVEL_INFO, &d), 1); /* stdio only */
    notes_clear(&stdio);
    cs_mcp_set_tool(srv, "process_resize", hold, NULL);
    const char *call = "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\",\"params\":{"
                       "\"name\":\"process_resize\",\"arguments\":{\"process_id\":\"p\","
                       "\"rows\":40,\"cols\":120},\"_meta\":{\"progressToken\":\"t\"}}}";
    struct cs_mcp_headers hdr = {"2025-11-25", NULL, NULL, 1, 0, 0, note_cb, &stream};
    struct cs_mcp_msg *m = cs_mcp_msg_parse(call, strlen(call));
    assert_non_null(m);
    reset();
    struct cs_mcp_exchange *x = cs_mcp_session_handle_msg(h, m, &hdr, reply_cb, NULL);
    assert_non_null(x);
    assert_true(cs_mcp_exchange_wants_progress(x));
    assert_int_equal(cs_mcp_log(srv, CSW_PROTOCOL_LOGGING_LEVEL_INFO, &d), 2);
    assert_int_equal(stream.n, 1);
    assert_int_equal(stdio.n, 1);
    assert_true(json_equal(stream.v[0], stdio.v[0]));
    finish_held(120);
    assert_int_equal(nreplies, 1);
    notes_clear(&stdio);
    notes_clear(&stream);
    /* Its stream ended with the reply: nothing more there. */
    assert_int_equal(cs_mcp_log(srv, CSW_PROTOCOL_LOGGING_LEVEL_INFO, &d), 1);
    assert_int_equal(stream.n, 0);
    notes_clear(&stdio);
    cs_mcp_session_free(h); /* leaves the server's list */

    /* logging/setLevel: warning stops info, lets warning through; debug lets info through. */
    set_level(sess, "warning");
    assert_int_equal(cs_mcp_log(srv, CSW_PROTOCOL_LOGGING_LEVEL_INFO, &d), 0);
    assert_int_equal(stdio.n, 0);
    assert_int_equal(cs_mcp_log(srv, CSW_PROTOCOL_LOGGING_LEVEL_WARNING, &d), 1);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(stdio.v[0], "params"), "level")),
        "warning");
    notes_clear(&stdio);
    set_level(sess, "debug");
    assert_int_equal(cs_mcp_log(srv, CSW_PROTOCOL_LOGGING_LEVEL_INFO, &d), 1);
    notes_clear(&stdio);

    /* Data its schema refuses (a termination out of its enum): nothing is sent. */
    d.u.process_exited.termination = (enum csw_process_termination)99;
    assert_int_equal(cs_mcp_log(srv, CSW_PROTOCOL_LOGGING_LEVEL_INFO, &d), 0);
    assert_int_equal(stdio.n, 0);
    cs_mcp_session_on_notify(sess, NULL, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_initialize_negotiates, setup, teardown),
        cmocka_unit_test_setup_teardown(test_before_initialize, setup, teardown),
        cmocka_unit_test_setup_teardown(test_jsonrpc_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tools_list, setup, teardown),
        cmocka_unit_test_setup_teardown(test_invalid_arguments_name_the_pointer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_async_reply_comes_later, setup, teardown),
        cmocka_unit_test_setup_teardown(test_output_schema_is_enforced, setup, teardown),
        cmocka_unit_test_setup_teardown(test_prepared_reply_is_the_same, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cancel_and_abandon, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cancel_hook, setup, teardown),
        cmocka_unit_test_setup_teardown(test_call_done_reports, setup, teardown),
        cmocka_unit_test_setup_teardown(test_arguments_must_be_an_object, setup, teardown),
        cmocka_unit_test_setup_teardown(test_session_freed_while_pending, setup, teardown),
        cmocka_unit_test_setup_teardown(test_batches, setup, teardown),
        cmocka_unit_test_setup_teardown(test_names_with_nul_or_cut_utf8, setup, teardown),
        cmocka_unit_test_setup_teardown(test_classification, setup, teardown),
        cmocka_unit_test_setup_teardown(test_modern_without_initialize, setup, teardown),
        cmocka_unit_test_setup_teardown(test_modern_check_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ids_echoed_as_written, setup, teardown),
        cmocka_unit_test_setup_teardown(test_log_reaches_sessions_that_take_it, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
