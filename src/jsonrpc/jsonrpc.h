/*
 * jsonrpc: JSON-RPC 2.0 message classification and reply construction, on jansson values.
 *
 * Trust: messages come from the client. Classification checks the envelope only ("jsonrpc" is
 * "2.0", method a string, id a string or an integer, params an object or array when present);
 * the method's own parameters are the caller's business.
 * Every envelope goes through the generated code of schema/protocol/ (jsonrpc_message.json read,
 * jsonrpc_result.json and jsonrpc_error.json written).
 * Entry points: cs_jsonrpc_classify, cs_jsonrpc_result, cs_jsonrpc_error, cs_jsonrpc_reply_info.
 */
#ifndef CS_JSONRPC_H
#define CS_JSONRPC_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

/* JSON-RPC 2.0 error codes. */
#define CS_JSONRPC_PARSE_ERROR      (-32700)
#define CS_JSONRPC_INVALID_REQUEST  (-32600)
#define CS_JSONRPC_METHOD_NOT_FOUND (-32601)
#define CS_JSONRPC_INVALID_PARAMS   (-32602)
#define CS_JSONRPC_INTERNAL_ERROR   (-32603)
/* MCP 2026-07-28 (basic/index.mdx, "Error codes"). */
#define CS_JSONRPC_HEADER_MISMATCH      (-32020)
#define CS_JSONRPC_MISSING_CLIENT_CAP   (-32021)
#define CS_JSONRPC_UNSUPPORTED_PROTOCOL (-32022)

enum cs_jsonrpc_kind {
    CS_JSONRPC_REQUEST,      /* method + id */
    CS_JSONRPC_NOTIFICATION, /* method, no id */
    CS_JSONRPC_RESPONSE,     /* result or error + id: a reply to a server request */
    CS_JSONRPC_INVALID,      /* anything else; *why says what */
};

/* The parts of a classified message, borrowed from it. */
struct cs_jsonrpc_msg {
    const char *method; /* REQUEST, NOTIFICATION */
    size_t method_len;  /* its length (a NUL inside never matches a name) */
    json_t *id;         /* REQUEST, RESPONSE; for INVALID the id when it was usable, else NULL */
    json_t *params;     /* may be NULL */
    const char *why;    /* INVALID: a static description of the defect */
    /* The message's "method" and "params" members as they are, whatever their type (NULL when
     * absent or msg is not an object), set for every kind: a caller that must look at them
     * even when the message is INVALID (the MCP revision it speaks) decodes nothing twice. */
    const json_t *method_any, *params_any;
};

/* Classifies msg (borrowed). Fills *out with pointers into msg. */
enum cs_jsonrpc_kind cs_jsonrpc_classify(const json_t *msg, struct cs_jsonrpc_msg *out);

/* Whether m's method is exactly name. */
bool cs_jsonrpc_method_is(const struct cs_jsonrpc_msg *m, const char *name);

/* What a reply built here says, for a transport choosing its status. */
struct cs_jsonrpc_reply {
    bool has_result;
    bool is_error;
    int64_t code;   /* is_error: error.code */
    bool id_null;   /* "id": null */
    bool id_absent; /* no "id" member */
};

/* A new error response with code and message answering what reply (borrowed) answers: its id,
 * or null when it has none or is not a single response. NULL on OOM. */
json_t *cs_jsonrpc_error_like(const json_t *reply, int code, const char *message);

/* Fills *out from reply (borrowed). Returns false when reply is not an object. */
bool cs_jsonrpc_reply_info(const json_t *reply, struct cs_jsonrpc_reply *out);

/* True when reply (borrowed) is a single reply with an "error" member: the cheap test a transport
 * makes on every reply before it asks cs_jsonrpc_reply_info what the error says. */
bool cs_jsonrpc_reply_has_error(const json_t *reply);

/* Returns a new response {"jsonrpc":"2.0","id":id,"result":result}. id is borrowed (NULL means
 * null); result is stolen. NULL on OOM. */
json_t *cs_jsonrpc_result(json_t *id, json_t *result);

/* Returns a new error response with id (borrowed; NULL means null), code and message. NULL on
 * OOM. */
json_t *cs_jsonrpc_error(json_t *id, int code, const char *message);

/* Like cs_jsonrpc_error, with data (stolen, may be NULL) as error.data; omit_null_id: no "id"
 * member at all when id is NULL (MCP 2026-07-28 forbids "id": null). NULL on OOM. */
json_t *cs_jsonrpc_error_ex(json_t *id, bool omit_null_id, int code, const char *message,
                            json_t *data);

#endif
