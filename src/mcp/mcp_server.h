/*
 * mcp_server: the MCP protocol core, independent of the transport. A transport (stdio lines,
 * Streamable HTTP POST bodies) hands each received message text to a session; the session parses
 * JSON-RPC, runs the MCP methods (initialize, ping, tools/list, tools/call, logging/setLevel,
 * notifications/initialized, notifications/cancelled) and gives back at most one reply per
 * message through a callback, possibly later: tool handlers complete asynchronously, and
 * meanwhile the session keeps answering other messages (ping included).
 *
 * Trust: message texts come from the client and are untrusted. Tool arguments are decoded
 * through the generated input decoders (schema failures become INVALID_ARGUMENTS tool errors
 * naming the JSON pointer); results are encoded and checked through the output encoders.
 *
 * Entry points: cs_mcp_new/free, cs_mcp_set_tool (a handler per tool), cs_mcp_session_* (one
 * per client connection or HTTP session), cs_mcp_call_* (what a tool handler completes with).
 */
#ifndef CS_MCP_SERVER_H
#define CS_MCP_SERVER_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "csw.h"

struct cs_mcp;
struct cs_mcp_session;
struct cs_mcp_call;
struct cs_mcp_exchange;

/* Where a transport takes the notifications an exchange sends before its reply
 * (notifications/progress): text (len bytes, one JSON-RPC notification, compact, no newline) is
 * borrowed for the call. Never called after the exchange's reply or its abandonment. */
typedef void (*cs_mcp_notify_fn)(void *arg, const char *text, size_t len);

/* The revision served per request, statelessly (params._meta carries version and capabilities;
 * see docs/protocol.md). */
#define CS_MCP_MODERN_VERSION "2026-07-28"

/* The 2025 protocol versions (initialize handshake), newest first; the first is what an
 * initialize asking for an unknown version gets. */
extern const char *const cs_mcp_versions[];
extern const size_t cs_mcp_version_count;
/* Returns true when v (NUL-terminated) is a supported 2025 protocol version. */
bool cs_mcp_version_supported(const char *v);

/*
 * A tool handler. input points to the decoded struct csw_mcp_<tool>_input, owned by the call
 * and valid until the call completes. The handler must complete the call exactly once, now or
 * later, with cs_mcp_call_ok or cs_mcp_call_error.
 */
typedef void (*cs_mcp_tool_fn)(void *arg, struct cs_mcp_call *call, const void *input);

/* Returns a new server with every tool of the generated table listed and answering INTERNAL
 * "not implemented" until a handler is set, or NULL on OOM. version is copied. */
struct cs_mcp *cs_mcp_new(const char *version);
/* Frees the server. Sessions must be freed first. Accepts NULL. */
void cs_mcp_free(struct cs_mcp *srv);
/* Sets the handler of the tool named name. Returns 0, or -1 if there is no such tool. */
int cs_mcp_set_tool(struct cs_mcp *srv, const char *name, cs_mcp_tool_fn fn, void *arg);
/* Sets a hint for the tool named name: a decode error of its arguments whose first violation is
 * at exactly pointer (a JSON pointer such as "/command") gets ": <hint>" after the decoder's
 * message. pointer and hint are borrowed for the server's life (string literals). Returns 0, or
 * -1 if there is no such tool. */
int cs_mcp_set_tool_hint(struct cs_mcp *srv, const char *name, const char *pointer,
                         const char *hint);
/* The instructions text sent in the initialize result (static storage). */
const char *cs_mcp_instructions(void);

/* ---- tool calls ---- */

/* Completes call with a success: output points to the tool's struct csw_mcp_<tool>_output
 * (borrowed; the caller frees it afterwards). The result carries structuredContent and one text
 * item with the same JSON. An output that fails its schema becomes an INTERNAL tool error. */
void cs_mcp_call_ok(struct cs_mcp_call *call, const void *output);
/*
 * A success answered from a reply made off the loop thread. On the loop, cs_mcp_call_frame takes
 * what the reply needs of call (the id as written by the encoder, the revision's tail, the
 * output's type) into a frame, or gives NULL (out of memory, or a call nobody will read). Any
 * thread may then make the whole reply text of an output with cs_mcp_frame_reply (its length in
 * *len; NULL: out of
 * memory, or an output that breaks its schema; complete with cs_mcp_call_ok then, which says
 * why), and the loop completes the call with it (cs_mcp_call_ok_reply, which takes the text).
 * The text is byte for byte what cs_mcp_call_ok would have sent. cs_mcp_frame_free accepts NULL.
 */
struct cs_mcp_frame;
struct cs_mcp_frame *cs_mcp_call_frame(const struct cs_mcp_call *call);
char *cs_mcp_frame_reply(const struct cs_mcp_frame *f, const void *output, size_t *len);
void cs_mcp_frame_free(struct cs_mcp_frame *f);
void cs_mcp_call_ok_reply(struct cs_mcp_call *call, char *reply, size_t len);
/* A success result computed once and reused by many calls (an answer that cannot change while
 * the server runs): built from structured, the result already encoded (so checked) by the
 * tool's output encoder (borrowed; it must never change afterwards). NULL on OOM. */
struct cs_mcp_cached;
struct cs_mcp_cached *cs_mcp_cached_new(json_t *structured);
void cs_mcp_cached_free(struct cs_mcp_cached *c);
/* Completes call with a cached result (borrowed; it must outlive the call's reply). */
void cs_mcp_call_ok_cached(struct cs_mcp_call *call, const struct cs_mcp_cached *c);
/* The JSON text of v as a new JSON string (what a result's text item holds), or NULL on OOM. */
json_t *cs_mcp_text_of(const json_t *v);
/* Completes call with a tool error (isError: true, the JSON error body as text). operation_id
 * may be NULL. */
void cs_mcp_call_error(struct cs_mcp_call *call, enum csw_error code, const char *operation_id,
                       const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* True once the client cancelled the request or its transport went away: the handler may stop
 * early but must still complete the call (the reply is then dropped). */
bool cs_mcp_call_cancelled(const struct cs_mcp_call *call);
/*
 * What to do when call is cancelled (docs/contract/tools.md section 2): the client sent
 * notifications/cancelled naming it, or the transport dropped the exchange that carried it (an
 * HTTP client closed the connection of a held POST). fn runs once, on the loop, from inside the
 * session's handling of that notification or from cs_mcp_exchange_abandon; by then the call is
 * already detached from its exchange (the transport has been answered, or will be without it),
 * and fn must make the call stop waiting, free what it holds and complete it, now or later (the
 * reply is dropped). fn NULL removes the hook; a later call replaces the earlier one. It is never
 * run for a call that is already cancelled when it is set, nor for the calls of a session being
 * freed (shutdown: the tools free everything themselves).
 */
typedef void (*cs_mcp_cancel_fn)(void *arg, struct cs_mcp_call *call);
void cs_mcp_call_on_cancel(struct cs_mcp_call *call, cs_mcp_cancel_fn fn, void *arg);
/* The tool's name (static storage). */
const char *cs_mcp_call_tool(const struct cs_mcp_call *call);

/* ---- what each call did, for the boundary's log (docs/operations.md, "Logs") ---- */

/*
 * One completed tool call, as the observer set by cs_mcp_on_call_done sees it. Every pointer is
 * borrowed for the observer's run only. The record holds no argument value of its own: the
 * observer picks from input and output only what it may log (ids), never contents.
 */
struct cs_mcp_call_report {
    const char *tool;   /* the tool's name (static storage) */
    const void *input;  /* the decoded struct csw_mcp_<tool>_input, or NULL: arguments refused */
    const void *output; /* the struct csw_mcp_<tool>_output answered, or NULL: an error, or a
                         * success answered from a cached or prepared text (workspace_info,
                         * read, find) */
    int error;          /* -1: success; else the enum csw_error the call was answered with */
    const char *operation_id; /* the error's operation_id, or NULL */
    /* input NULL: the arguments' workspace_id when it was a string (not checked against the
     * registry), else empty */
    struct cs_str refused_workspace_id;
    int64_t duration_ms; /* from the handler's start to the completion */
    bool cancelled;      /* the client cancelled it, or its transport went away */
};
/* Runs fn(arg, report) on the loop as each tool call of every session of srv completes (a call
 * the arguments decoder refused included; a tools/call naming no tool is not a tool call). fn NULL
 * removes it. fn must not complete or cancel calls. */
typedef void (*cs_mcp_call_done_fn)(void *arg, const struct cs_mcp_call_report *r);
void cs_mcp_on_call_done(struct cs_mcp *srv, cs_mcp_call_done_fn fn, void *arg);

/* ---- progress (docs/protocol.md, "Progress") ---- */

/* Every exchange s starts from now on sends its notifications through fn (stdio: the one
 * stream; HTTP passes its own per POST in struct cs_mcp_headers); fn NULL: none. */
void cs_mcp_session_on_notify(struct cs_mcp_session *s, cs_mcp_notify_fn fn, void *arg);
/* Whether x (pending) holds a tool call that carried params._meta.progressToken. */
bool cs_mcp_exchange_wants_progress(const struct cs_mcp_exchange *x);
/* Whether call carried a progress token, is not cancelled and its exchange has somewhere to send
 * notifications: a handler polls for progress only then. */
bool cs_mcp_call_wants_progress(const struct cs_mcp_call *call);
/* Sends notifications/progress for call (schema/protocol/progress_notification.json): its token
 * as given, progress, and message (message_len bytes of valid UTF-8, at most 200 code points; NULL:
 * none; borrowed). Returns 0 when sent, -1 when not: no token, cancelled, no channel, progress not
 * above the last one sent (progress only grows), or a message the schema refuses. */
int cs_mcp_call_progress(struct cs_mcp_call *call, int64_t progress, const char *message,
                         size_t message_len);

/* ---- logging (docs/protocol.md, "Logging") ---- */

/* Sends notifications/message (schema/protocol/logging_message_notification.json) with level,
 * logger "codespace" and data (borrowed for the call) to every session that takes it now: an
 * initialized 2025 session whose logging/setLevel (info until set) is at or below level, on its
 * stdio stream, or on HTTP on an SSE reply of one of its exchanges still open (none: not
 * delivered). Each session gets it once. Returns how many sessions it went to (0 also when data
 * breaks its schema or memory ran out). Call from the loop, never from inside a notify callback. */
size_t cs_mcp_log(struct cs_mcp *srv, enum csw_protocol_logging_level level,
                  const struct csw_protocol_log_data *data);

/* ---- sessions ---- */

/* reply receives a new reference to the JSON-RPC reply (a response object, or an array for a
 * batch), or NULL when the message gets no reply (a notification, a client response, a cancelled
 * request), and the reply serialized as compact JSON (text, len bytes, no newline, malloc'd and
 * handed over: the callee frees it; NULL when reply is NULL, or when even an error's text ran
 * out of memory). The text is the reply: a
 * tool call's success carries an empty object standing in for its result (the one in the text
 * may hold a megabyte twice, never built as a tree), so a transport reads only the envelope from
 * reply (its id, result or error, error code) and sends the text. It is called exactly once per
 * handled message unless the exchange is abandoned. */
typedef void (*cs_mcp_reply_fn)(void *arg, json_t *reply, char *text, size_t len);

/* Returns a new session of srv, or NULL on OOM. */
struct cs_mcp_session *cs_mcp_session_new(struct cs_mcp *srv);
/* Frees a session. Pending calls are marked cancelled and their replies dropped; the calls
 * themselves complete later into nothing. Accepts NULL. */
void cs_mcp_session_free(struct cs_mcp_session *s);

/*
 * Handles one message (len bytes at data, one JSON value). Calls reply once, before returning or
 * later. Returns NULL when reply was already called, else a token the transport may pass to
 * cs_mcp_exchange_abandon if it can no longer deliver the reply; the token is invalid once reply
 * ran. A parse error replies -32700 with id null.
 */
struct cs_mcp_exchange *cs_mcp_session_handle(struct cs_mcp_session *s, const char *data,
                                              size_t len, cs_mcp_reply_fn reply, void *arg);
/*
 * What the Streamable HTTP transport read from a POST's headers, for the 2026-07-28 checks
 * (SEP-2243); stdio passes NULL. has_*: 1 present, 0 absent, -1 present but unusable (an embedded
 * NUL). Values are borrowed for the call (NUL-terminated, untrimmed).
 */
struct cs_mcp_headers {
    const char *version; /* MCP-Protocol-Version */
    const char *method;  /* Mcp-Method */
    const char *name;    /* Mcp-Name */
    int has_version, has_method, has_name;
    /* The POST accepts text/event-stream: the exchange's notifications go to notify (instead of
     * the session's), which answers it as a stream. NULL: the exchange sends none. */
    cs_mcp_notify_fn notify;
    void *notify_arg;
};

/* One received message, parsed once: the transport classifies it, then hands it to a session.
 * Returns NULL only when out of memory; a text that is not JSON is kept as a parse error. The
 * request's "id" token is kept as written, to be echoed byte for byte in every reply. */
struct cs_mcp_msg;
struct cs_mcp_msg *cs_mcp_msg_parse(const char *data, size_t len);
/* Frees m. Accepts NULL. */
void cs_mcp_msg_free(struct cs_mcp_msg *m);
/*
 * Whether m is a 2026-07-28 request (docs/protocol.md, "Which revision"): its method is
 * server/discover, or its params._meta names a protocol version, or (HTTP, hdr non-NULL) the
 * MCP-Protocol-Version header says 2026-07-28. Such a message needs no session and gets none;
 * anything else follows the 2025 rules (initialize, sessions). A batch is never 2026.
 */
bool cs_mcp_msg_modern(struct cs_mcp_msg *m, const struct cs_mcp_headers *hdr);
/* Whether m is an initialize request (a 2025 session would start with it). Both read m's
 * envelope once and remember what it says (m is otherwise unchanged). */
bool cs_mcp_msg_is_initialize(struct cs_mcp_msg *m);
/* cs_mcp_session_handle for a parsed message (taken, freed even on failure), with the HTTP
 * headers (NULL on stdio; used during the call only). */
struct cs_mcp_exchange *cs_mcp_session_handle_msg(struct cs_mcp_session *s, struct cs_mcp_msg *m,
                                                  const struct cs_mcp_headers *hdr,
                                                  cs_mcp_reply_fn reply, void *arg);

/* The transport is gone: reply will not be called for x; the calls behind it are cancelled (their
 * cancel hooks run inside this call). x is invalid afterwards. */
void cs_mcp_exchange_abandon(struct cs_mcp_exchange *x);

/* The negotiated protocol version, or NULL before initialize. */
const char *cs_mcp_session_version(const struct cs_mcp_session *s);
/* True once initialize succeeded. */
bool cs_mcp_session_initialized(const struct cs_mcp_session *s);
/* The level set by logging/setLevel ("info" until then; static storage). */
const char *cs_mcp_session_log_level(const struct cs_mcp_session *s);
/* Number of exchanges still waiting for a reply. */
size_t cs_mcp_session_pending(const struct cs_mcp_session *s);

#endif
