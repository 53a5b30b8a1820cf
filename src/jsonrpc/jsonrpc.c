/*
 * jsonrpc: envelope checks and reply construction (see jsonrpc.h).
 * Trust: the message is untrusted; every field is type-checked before use.
 */
#include "jsonrpc.h"

#include <stdint.h>
#include <string.h>

#include "csw.h"

static int valid_id(const json_t *id)
{
    return json_is_string(id) || json_is_integer(id);
}

enum cs_jsonrpc_kind cs_jsonrpc_classify(const json_t *msg, struct cs_jsonrpc_msg *out)
{
    memset(out, 0, sizeof *out);
    /* schema/protocol/jsonrpc_message.json: every member open, so this only fails for a value
     * that is not an object; the rules below say what is wrong in their own words. */
    struct csw_protocol_jsonrpc_message m;
    if (csw_protocol_jsonrpc_message_decode(msg, &m, NULL) != CS_WIRE_OK) {
        out->why = "a JSON-RPC message must be an object";
        return CS_JSONRPC_INVALID;
    }
    /* The members are borrowed from msg, which holds them as long as out is used. */
    json_t *id = m.id, *method = m.method, *params = m.params;
    const json_t *version = m.jsonrpc;
    bool response = m.has_result || m.has_error;
    csw_protocol_jsonrpc_message_free(&m);
    out->method_any = method;
    out->params_any = params;
    if (valid_id(id))
        out->id = id;
    if (!json_is_string(version) || json_string_length(version) != 3 ||
        strcmp(json_string_value(version), "2.0") != 0) {
        out->why = "\"jsonrpc\" must be \"2.0\"";
        return CS_JSONRPC_INVALID;
    }
    if (!method) {
        if (response) {
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
    if (params && !json_is_object(params) && !json_is_array(params)) {
        out->why = "\"params\" must be an object or an array";
        return CS_JSONRPC_INVALID;
    }
    out->method = json_string_value(method);
    out->method_len = json_string_length(method);
    out->params = params;
    if (!id)
        return CS_JSONRPC_NOTIFICATION;
    if (!out->id) {
        out->why = "\"id\" must be a string or an integer";
        return CS_JSONRPC_INVALID;
    }
    return CS_JSONRPC_REQUEST;
}

bool cs_jsonrpc_method_is(const struct cs_jsonrpc_msg *m, const char *name)
{
    return m->method && m->method_len == strlen(name) &&
           memcmp(m->method, name, m->method_len) == 0;
}

json_t *cs_jsonrpc_result(json_t *id, json_t *result)
{
    if (!result)
        return NULL;
    struct csw_protocol_jsonrpc_result r = {.id = id ? id : json_null(), .result = result};
    json_t *out = NULL;
    csw_protocol_jsonrpc_result_encode(&r, &out, NULL); /* NULL when out of memory */
    json_decref(result);
    return out;
}

json_t *cs_jsonrpc_error(json_t *id, int code, const char *message)
{
    return cs_jsonrpc_error_ex(id, false, code, message, NULL);
}

json_t *cs_jsonrpc_error_ex(json_t *id, bool omit_null_id, int code, const char *message,
                            json_t *data)
{
    struct csw_protocol_jsonrpc_error e;
    memset(&e, 0, sizeof e);
    e.has_id = id || !omit_null_id;
    e.id = id ? id : json_null();
    e.error.code = code;
    e.error.message.s = (char *)(uintptr_t)message;
    e.error.message.n = strlen(message);
    e.error.has_data = data != NULL;
    e.error.data = data;
    json_t *out = NULL;
    csw_protocol_jsonrpc_error_encode(&e, &out, NULL); /* NULL when out of memory */
    json_decref(data);
    return out;
}

bool cs_jsonrpc_reply_has_error(const json_t *reply)
{
    return json_object_get(reply, "error") != NULL; /* NULL for an array (a batch reply) */
}

json_t *cs_jsonrpc_error_like(const json_t *reply, int code, const char *message)
{
    struct csw_protocol_jsonrpc_message m;
    bool known =
        json_is_object(reply) && csw_protocol_jsonrpc_message_decode(reply, &m, NULL) == CS_WIRE_OK;
    json_t *out = cs_jsonrpc_error(known && m.has_id ? m.id : NULL, code, message);
    if (known)
        csw_protocol_jsonrpc_message_free(&m);
    return out;
}

bool cs_jsonrpc_reply_info(const json_t *reply, struct cs_jsonrpc_reply *out)
{
    memset(out, 0, sizeof *out);
    struct csw_protocol_jsonrpc_message m;
    if (!json_is_object(reply) ||
        csw_protocol_jsonrpc_message_decode(reply, &m, NULL) != CS_WIRE_OK)
        return false;
    out->has_result = m.has_result;
    out->id_null = m.has_id && json_is_null(m.id);
    out->id_absent = !m.has_id;
    struct csw_protocol_jsonrpc_error_error e;
    if (m.has_error && csw_protocol_jsonrpc_error_error_decode(m.error, &e, NULL) == CS_WIRE_OK) {
        out->is_error = true;
        out->code = e.code;
        csw_protocol_jsonrpc_error_error_free(&e);
    }
    csw_protocol_jsonrpc_message_free(&m);
    return true;
}
