/*
 * jsonrpc: envelope checks and reply construction (see jsonrpc.h).
 * Trust: the message is untrusted; every field is type-checked before use.
 */
#include "jsonrpc.h"

#include <string.h>

static int valid_id(const json_t *id)
{
    return json_is_string(id) || json_is_integer(id);
}

enum cs_jsonrpc_kind cs_jsonrpc_classify(const json_t *msg, struct cs_jsonrpc_msg *out)
{
    memset(out, 0, sizeof *out);
    if (!json_is_object(msg)) {
        out->why = "a JSON-RPC message must be an object";
        return CS_JSONRPC_INVALID;
    }
    json_t *id = json_object_get(msg, "id");
    if (valid_id(id))
        out->id = id;
    const json_t *version = json_object_get(msg, "jsonrpc");
    if (!json_is_string(version) || json_string_length(version) != 3 ||
        strcmp(json_string_value(version), "2.0") != 0) {
        out->why = "\"jsonrpc\" must be \"2.0\"";
        return CS_JSONRPC_INVALID;
    }
    const json_t *method = json_object_get(msg, "method");
    if (!method) {
        if (json_object_get(msg, "result") || json_object_get(msg, "error")) {
            if (!out->id) {
                out->why = "a response needs a string or integer id";
                return CS_JSONRPC_INVALID;
            }
            return CS_JSONRPC_RESPONSE;
        }
        out->why = "missing \"method\"";
        return CS_JSONRPC_INVALID;
    }
    if (!json_is_string(method)) {
        out->why = "\"method\" must be a string";
        return CS_JSONRPC_INVALID;
    }
    json_t *params = json_object_get(msg, "params");
    if (params && !json_is_object(params) && !json_is_array(params)) {
        out->why = "\"params\" must be an object or an array";
        return CS_JSONRPC_INVALID;
    }
    out->method = json_string_value(method);
    out->params = params;
    if (!id)
        return CS_JSONRPC_NOTIFICATION;
    if (!out->id) {
        out->why = "\"id\" must be a string or an integer";
        return CS_JSONRPC_INVALID;
    }
    return CS_JSONRPC_REQUEST;
}

json_t *cs_jsonrpc_result(json_t *id, json_t *result)
{
    if (!result)
        return NULL;
    return json_pack("{s:s,s:O,s:o}", "jsonrpc", "2.0", "id", id ? id : json_null(), "result",
                     result);
}

json_t *cs_jsonrpc_error(json_t *id, int code, const char *message)
{
    return json_pack("{s:s,s:O,s:{s:i,s:s}}", "jsonrpc", "2.0", "id", id ? id : json_null(),
                     "error", "code", code, "message", message);
}

json_t *cs_jsonrpc_error_ex(json_t *id, bool omit_null_id, int code, const char *message,
                            json_t *data)
{
    json_t *r = (id || !omit_null_id) ? cs_jsonrpc_error(id, code, message)
                                      : json_pack("{s:s,s:{s:i,s:s}}", "jsonrpc", "2.0", "error",
                                                  "code", code, "message", message);
    if (r && data)
        json_object_set(json_object_get(r, "error"), "data", data);
    json_decref(data);
    return r;
}
