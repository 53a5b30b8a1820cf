/*
 * libFuzzer harness for the MCP core: arbitrary bytes as one JSON-RPC message (or batch) to an
 * initialized session, then the same bytes again as a second message of a session on the batch
 * version (2025-03-26), then as a first message with no handshake, the way a 2026-07-28 request
 * arrives (classified by its own _meta; over stdio, and with HTTP routing headers that may or may
 * not match it). Every tool answers through the generated decoders.
 *
 * Invariants (docs/security-model.md M1, M2): no input crashes or leaks; every handled message
 * is answered exactly once (a reply or "no reply"); every reply is a JSON-RPC 2.0 object or a
 * non-empty array of them.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mcp_server.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replies;

static void check_one(const json_t *r)
{
    if (!json_is_object(r) || !json_is_string(json_object_get(r, "jsonrpc")))
        abort();
    if (!json_object_get(r, "result") == !json_object_get(r, "error"))
        abort(); /* exactly one of result and error */
}

static void on_reply(void *arg, json_t *reply, char *text, size_t len)
{
    (void)arg;
    replies++;
    if (!reply != !text)
        abort(); /* a reply always comes serialized, and "no reply" without text */
    if (text && memchr(text, '\n', len))
        abort(); /* compact: one line */
    if (reply && json_is_array(reply)) {
        if (json_array_size(reply) == 0)
            abort();
        size_t i;
        json_t *one;
        json_array_foreach(reply, i, one)
        {
            check_one(one);
        }
    } else if (reply) {
        check_one(reply);
    }
    if (text) { /* the text is what is sent: it parses, and it is the same kind of reply */
        /* ids are echoed as written, past 64 bits too: read as reals (only one past a real's
         * range fails, and only as such). */
        json_error_t err;
        json_t *back = json_loadb(text, len, JSON_DECODE_INT_AS_REAL, &err);
        if (!back && json_error_code(&err) == json_error_numeric_overflow)
            back = json_incref(reply);
        if (!back || json_is_array(back) != json_is_array(reply))
            abort();
        if (!json_is_array(back))
            check_one(back);
        json_decref(back);
    }
    json_decref(reply);
    free(text);
}

static void run(struct cs_mcp *srv, const char *version, const uint8_t *data, size_t size)
{
    struct cs_mcp_session *s = cs_mcp_session_new(srv);
    if (!s)
        abort();
    char init[256];
    int n = snprintf(init, sizeof init,
                     "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{"
                     "\"protocolVersion\":\"%s\"}}",
                     version);
    replies = 0;
    if (cs_mcp_session_handle(s, init, (size_t)n, on_reply, NULL) != NULL || replies != 1)
        abort();
    /* No tool completes later here, so every message is answered before handle returns. */
    if (cs_mcp_session_handle(s, (const char *)data, size, on_reply, NULL) != NULL)
        abort();
    if (replies != 2)
        abort();
    cs_mcp_session_free(s);
}

/* No initialize: a 2026-07-28 request needs none, anything else gets the 2025 answer. */
static void run_modern(struct cs_mcp *srv, const struct cs_mcp_headers *hdr, const uint8_t *data,
                       size_t size)
{
    struct cs_mcp_session *s = cs_mcp_session_new(srv);
    struct cs_mcp_msg *m = cs_mcp_msg_parse((const char *)data, size);
    if (!s || !m)
        abort();
    (void)cs_mcp_msg_modern(m, hdr);
    replies = 0;
    if (cs_mcp_session_handle_msg(s, m, hdr, on_reply, NULL) != NULL || replies != 1)
        abort();
    cs_mcp_session_free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct cs_mcp *srv;
    if (!srv && !(srv = cs_mcp_new("fuzz")))
        abort();
    run(srv, "2025-11-25", data, size);
    run(srv, "2025-03-26", data, size);
    run_modern(srv, NULL, data, size);
    /* The headers a 2026 HTTP client sends for a tools/call of read: they match some inputs and
     * contradict the rest. */
    struct cs_mcp_headers hdr = {.version = "2026-07-28",
                                 .method = "tools/call",
                                 .name = "read",
                                 .has_version = 1,
                                 .has_method = 1,
                                 .has_name = 1};
    run_modern(srv, &hdr, data, size);
    return 0;
}
