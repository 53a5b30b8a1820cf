/*
 * Unit tests of the base module: the wire runtime (base_wire.c) driven through the generated
 * tables of every schema (build/gen/csw_tables.c).
 *
 * - every schema: each golden valid case decodes, encodes, decodes again to the same JSON
 *   (tests/golden/<type>/valid/), and each schema has such a case; the text encoder writes what
 *   json_dumps writes for the tree encoder's value;
 * - hand-built structs round trip, defaults apply without setting has_ flags;
 * - rejections name the JSON pointer of the first violation, for every kind of check;
 * - "fail the Nth allocation": for every golden case, decode and both encoders are run with the Nth
 *   allocation failing, for every N until they succeed, proving no crash and no leak on OOM;
 * - the error catalogue and tool tables generated from the schemas.
 */
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base_json.h"
#include "base_json_fast.h"
#include "base_log.h"
#include "base_loop.h"
#include "base_netallow.h"
#include "csw.h"

#ifndef CS_GOLDEN_DIR
#error "CS_GOLDEN_DIR must name tests/golden"
#endif

/* ---- helpers ---- */

static json_t *parse(const char *text)
{
    json_error_t err;
    json_t *j = json_loads(text, JSON_ALLOW_NUL | JSON_DECODE_ANY, &err);
    if (!j)
        fail_msg("bad test JSON: %s: %s", err.text, text);
    return j;
}

/* Decodes text as t and expects a rejection whose "<pointer>: <text>" equals want. */
static void expect_reject(const struct cs_wire_type *t, const char *text, const char *want)
{
    json_t *j = parse(text);
    void *out = test_malloc(t->size);
    struct cs_wire_diag diag;
    enum cs_wire_status st = cs_wire_decode(t, j, out, &diag);
    char buf[600];
    cs_wire_diag_format(&diag, buf, sizeof buf);
    if (st != CS_WIRE_INVALID)
        fail_msg("accepted: %s", text);
    assert_string_equal(buf, want);
    /* A failed decode leaves the output zeroed. */
    for (size_t i = 0; i < t->size; i++)
        assert_int_equal(((unsigned char *)out)[i], 0);
    test_free(out);
    json_decref(j);
}

static json_t *roundtrip(const struct cs_wire_type *t, const json_t *j, const char *what)
{
    void *a = calloc(1, t->size), *b = calloc(1, t->size);
    assert_non_null(a);
    assert_non_null(b);
    struct cs_wire_diag diag;
    char buf[600];
    if (cs_wire_decode(t, j, a, &diag) != CS_WIRE_OK)
        fail_msg("%s: rejected: %s", what, cs_wire_diag_format(&diag, buf, sizeof buf));
    json_t *e1 = NULL, *e2 = NULL;
    if (cs_wire_encode(t, a, &e1, &diag) != CS_WIRE_OK)
        fail_msg("%s: encode refused: %s", what, cs_wire_diag_format(&diag, buf, sizeof buf));
    if (cs_wire_decode(t, e1, b, &diag) != CS_WIRE_OK)
        fail_msg("%s: own encoding rejected: %s", what,
                 cs_wire_diag_format(&diag, buf, sizeof buf));
    assert_int_equal(cs_wire_encode(t, b, &e2, &diag), CS_WIRE_OK);
    if (!json_equal(e1, e2))
        fail_msg("%s: encode(decode(encode(x))) differs from encode(x)", what);
    json_decref(e2);
    cs_wire_free(t, a);
    cs_wire_free(t, b);
    free(a);
    free(b);
    return e1;
}

/* Every JSON key of `sub` appears in `full` with an equal value, recursively for objects, and
 * arrays match element-wise. Used to check that encode(decode(x)) keeps all known input. */
static int covers(const json_t *full, const json_t *sub)
{
    if (json_is_object(sub) && json_is_object(full)) {
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)sub, k, v)
        {
            json_t *f = json_object_get(full, k);
            if (f && !covers(f, v))
                return 0;
        }
        return 1;
    }
    if (json_is_array(sub) && json_is_array(full)) {
        if (json_array_size(sub) != json_array_size(full))
            return 0;
        for (size_t i = 0; i < json_array_size(sub); i++)
            if (!covers(json_array_get(full, i), json_array_get(sub, i)))
                return 0;
        return 1;
    }
    if (json_is_number(sub) && json_is_number(full))
        return json_number_value(sub) == json_number_value(full);
    return json_equal(full, sub);
}

typedef void (*case_fn)(const struct csw_toplevel *tl, const char *path, json_t *j);

/* Calls fn for every golden case of tl under kind ("valid" or "invalid"); returns the count. */
static size_t for_each_case(const struct csw_toplevel *tl, const char *kind, case_fn fn)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/%s/%s", CS_GOLDEN_DIR, tl->name, kind);
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 5, ".json") != 0)
            continue;
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        json_error_t err;
        json_t *j = json_load_file(path, JSON_ALLOW_NUL | JSON_DECODE_ANY, &err);
        if (!j)
            continue; /* unparseable cases are the golden test's business */
        fn(tl, path, j);
        json_decref(j);
        n++;
    }
    closedir(d);
    return n;
}

/* ---- round trips ---- */

static void expect_same_text(const struct cs_wire_type *t, const void *v);

static void roundtrip_case(const struct csw_toplevel *tl, const char *path, json_t *j)
{
    /* The text encoder agrees with json_dumps of the tree encoder on every golden value. */
    void *v = malloc(tl->type->size);
    assert_non_null(v);
    struct cs_wire_diag diag;
    if (cs_wire_decode(tl->type, j, v, &diag) != CS_WIRE_OK)
        fail_msg("%s: %s: %s", path, diag.pointer, diag.text);
    expect_same_text(tl->type, v);
    cs_wire_free(tl->type, v);
    free(v);
    json_t *e = roundtrip(tl->type, j, path);
    /* Nothing the schema knows is lost: the encoding covers the input's known properties.
     * (Unknown input properties are ignored, so check the other direction: every key of the
     * encoding with a counterpart in the input holds the same value.) */
    if (!covers(j, e))
        fail_msg("%s: the encoding changed a value of the input", path);
    json_decref(e);
}

static void test_every_schema_round_trips(void **state)
{
    (void)state;
    assert_true(csw_toplevel_count >= 28);
    for (size_t i = 0; i < csw_toplevel_count; i++) {
        size_t n = for_each_case(&csw_toplevel[i], "valid", roundtrip_case);
        if (n == 0)
            fail_msg("schema %s has no golden valid case to round trip", csw_toplevel[i].name);
    }
}

static void test_hand_built_round_trip(void **state)
{
    (void)state;
    struct csw_mcp_read_input in;
    memset(&in, 0, sizeof in);
    assert_int_equal(cs_str_set_n(&in.workspace_id, "demo", 4), 0);
    assert_int_equal(cs_str_set_n(&in.path, "a\0b", 3), 0); /* NUL survives */
    in.has_offset = true;
    in.offset = 3;
    json_t *j = NULL;
    struct cs_wire_diag diag;
    assert_int_equal(csw_mcp_read_input_encode(&in, &j, &diag), CS_WIRE_OK);
    char *text = json_dumps(j, JSON_SORT_KEYS | JSON_COMPACT);
    assert_string_equal(text, "{\"offset\":3,\"path\":\"a\\u0000b\",\"workspace_id\":\"demo\"}");
    free(text);

    struct csw_mcp_read_input back;
    assert_int_equal(csw_mcp_read_input_decode(j, &back, &diag), CS_WIRE_OK);
    assert_int_equal(back.path.n, 3);
    assert_memory_equal(back.path.s, "a\0b", 3);
    assert_true(back.has_offset);
    assert_int_equal(back.offset, 3);
    assert_false(back.has_limit); /* absent: default applied, flag stays false */
    assert_int_equal(back.limit, 1048576);
    csw_mcp_read_input_free(&back);
    csw_mcp_read_input_free(&in);
    assert_null(in.path.s);
    json_decref(j);

    /* A union: the runner envelope with an exec op, a map and a constant. */
    j = parse("{\"protocol\":5,\"kind\":\"request\",\"request_id\":\"rrpc-1\",\"op\":{\"op\":"
              "\"exec\",\"data\":{\"workspace\":{\"id\":\"w\",\"root\":\"/r\",\"profile\":"
              "\"workspace-write\",\"environment_kind\":\"host\",\"network\":\"restricted\"},"
              "\"argv\":[\"echo\",\"\"],\"process_id\":\"proc-1\",\"cwd\":\"workspace_root\","
              "\"env\":{\"use_runner_defaults\":true,\"overrides\":{\"A\":\"1\",\"B\":\"2\"}},"
              "\"timeout_ms\":30000,\"output_bytes_cap\":262144,\"tty\":false,\"policy\":{"
              "\"workspace_profile\":\"workspace-write\",\"network\":\"restricted\"}}}}");
    struct csw_runner_wire w;
    assert_int_equal(csw_runner_wire_decode(j, &w, &diag), CS_WIRE_OK);
    assert_int_equal(w.tag, CSW_RUNNER_WIRE_REQUEST);
    assert_int_equal(w.u.request.op.tag, CSW_RUNNER_WIRE_OP_EXEC);
    const struct csw_runner_wire_exec_data *ex = &w.u.request.op.u.exec.data;
    assert_int_equal(ex->argv.n, 2);
    assert_string_equal(ex->argv.v[0].s, "echo");
    assert_int_equal(ex->argv.v[1].n, 0);
    assert_int_equal(ex->env.overrides.n, 2);
    assert_string_equal(ex->env.overrides.v[1].key.s, "B");
    assert_string_equal(ex->env.overrides.v[1].value.s, "2");
    assert_int_equal(ex->workspace.profile, CSW_RUNNER_WORKSPACE_PROFILE_WORKSPACE_WRITE);
    json_t *e = NULL;
    assert_int_equal(csw_runner_wire_encode(&w, &e, &diag), CS_WIRE_OK);
    assert_true(json_equal(e, j));
    json_decref(e);
    csw_runner_wire_free(&w);
    json_decref(j);
}

static void test_integers_follow_json_schema(void **state)
{
    (void)state;
    struct csw_mcp_read_input in;
    struct cs_wire_diag diag;
    /* An integral real is an integer in JSON Schema. */
    json_t *j = parse("{\"workspace_id\":\"w\",\"path\":\"p\",\"offset\":5.0}");
    assert_int_equal(csw_mcp_read_input_decode(j, &in, &diag), CS_WIRE_OK);
    assert_int_equal(in.offset, 5);
    csw_mcp_read_input_free(&in);
    json_decref(j);
    /* Integral reals beyond int64 are refused like integer literals beyond int64 (which jansson
     * refuses to parse): saturating would let them pass an int64 bound. */
    expect_reject(&csw_mcp_read_input_type,
                  "{\"workspace_id\":\"w\",\"path\":\"p\",\"limit\":1e300}",
                  "/limit: integer out of range (beyond 64 bits)");
    expect_reject(&csw_mcp_read_input_type,
                  "{\"workspace_id\":\"w\",\"path\":\"p\",\"limit\":9223372036854775808.0}",
                  "/limit: integer out of range (beyond 64 bits)");
    j = parse("{\"workspace_id\":\"w\",\"path\":\"p\",\"offset\":-9223372036854775808.0}");
    assert_int_equal(csw_mcp_read_input_decode(j, &in, &diag), CS_WIRE_INVALID);
    assert_string_equal(diag.text, "must be >= 0"); /* -2^63 itself is in range */
    json_decref(j);
    expect_reject(&csw_mcp_read_input_type,
                  "{\"workspace_id\":\"w\",\"path\":\"p\",\"offset\":1.5}",
                  "/offset: expected integer");
    expect_reject(&csw_mcp_read_input_type,
                  "{\"workspace_id\":\"w\",\"path\":\"p\",\"offset\":true}",
                  "/offset: expected integer");
}

/* ---- rejections name the JSON pointer ---- */

static void test_rejections_name_the_pointer(void **state)
{
    (void)state;
    const struct cs_wire_type *exec = &csw_mcp_exec_command_input_type;
    expect_reject(exec, "{\"workspace_id\":\"w\",\"command\":[\"ls\",1]}",
                  "/command/1: expected string");
    expect_reject(exec, "{\"workspace_id\":\"w\",\"command\":\"ls\"}", "/command: expected array");
    expect_reject(exec, "{\"command\":[]}", "/workspace_id: missing required property");
    expect_reject(exec, "[]", "/: expected object");
    expect_reject(exec, "{\"workspace_id\":\"w\",\"command\":[],\"yield_ms\":-1}",
                  "/yield_ms: must be >= 0");
    expect_reject(exec, "{\"workspace_id\":\"w\",\"command\":[],\"tty\":\"yes\"}",
                  "/tty: expected boolean");
    expect_reject(exec, "{\"workspace_id\":null,\"command\":[]}", "/workspace_id: expected string");
    expect_reject(&csw_mcp_apply_patch_input_type,
                  "{\"workspace_id\":\"w\",\"patch\":\"\",\"operation_key\":\"\"}",
                  "/operation_key: must be at least 1 characters long");
    expect_reject(&csw_mcp_apply_patch_input_type,
                  "{\"workspace_id\":\"w\",\"patch\":\"\",\"expected_versions\":{\"a/b~c\":1}}",
                  "/expected_versions/a~1b~0c: expected string");
    expect_reject(&csw_mcp_process_resize_input_type,
                  "{\"process_id\":\"p\",\"rows\":24,\"cols\":1001}", "/cols: must be <= 1000");
    expect_reject(&csw_config_registry_type,
                  "{\"workspaces\":{\"demo\":{\"root\":\"/x\",\"profile\":\"host-admin\"}}}",
                  "/workspaces/demo/profile: expected one of \"read-only\", \"workspace-write\"");
    expect_reject(&csw_config_registry_type, "{\"workspaces\":{\"demo\":{}}}",
                  "/workspaces/demo/root: missing required property");
    expect_reject(&csw_errors_type, "{\"code\":\"NOPE\",\"message\":\"m\"}",
                  "/code: expected one of \"INVALID_ARGUMENTS\", \"UNAUTHORIZED\", "
                  "\"WORKSPACE_NOT_FOUND\", \"WORKSPACE_BUSY\", \"RESOURCE_QUEUE_FULL\", "
                  "\"INVALID_PATCH\", \"INVALID_COMMAND\", \"PROCESS_SPAWN_FAILED\", "
                  "\"PATH_ESCAPE\", \"FILE_NOT_FOUND\", ...");
    /* Unions: discriminator missing, unknown, and a violation inside the chosen branch. */
    const struct cs_wire_type *wire = &csw_runner_wire_type;
    expect_reject(wire, "{\"protocol\":5}", "/kind: missing required property");
    expect_reject(wire, "{\"protocol\":5,\"kind\":\"shout\"}",
                  "/kind: expected one of \"request\", \"response\", \"event\"");
    expect_reject(wire,
                  "{\"protocol\":5,\"kind\":\"request\",\"request_id\":\"rrpc-1\",\"op\":{\"op\":"
                  "\"resize\",\"data\":{\"process_id\":\"p\",\"rows\":0,\"cols\":80}}}",
                  "/op/data/rows: must be >= 1");
    expect_reject(wire,
                  "{\"protocol\":5,\"kind\":\"request\",\"request_id\":\"rrpc-1\",\"op\":{\"op\":"
                  "\"exec\",\"data\":{\"workspace\":{\"id\":\"w\",\"root\":\"/r\",\"profile\":"
                  "\"read-only\",\"environment_kind\":\"host\",\"network\":\"restricted\"},"
                  "\"argv\":[\"x\"],\"process_id\":\"p\",\"cwd\":\"/etc\",\"env\":{"
                  "\"use_runner_defaults\":true,\"overrides\":{}},\"timeout_ms\":1,"
                  "\"output_bytes_cap\":1,\"tty\":false,\"policy\":{\"workspace_profile\":"
                  "\"read-only\",\"network\":\"restricted\"}}}}",
                  "/op/data/cwd: must be \"workspace_root\"");
    expect_reject(&csw_sandbox_prepare_request_type,
                  "{\"protocol\":2,\"workspace_root\":\"/w\",\"command_cwd\":\"/w\","
                  "\"writable_workspace\":true,\"network\":\"restricted\",\"argv\":[\"x\"],"
                  "\"env\":{},\"tty\":false}",
                  "/protocol: must be 1");
    expect_reject(&csw_sandbox_plan_type,
                  "{\"protocol\":1,\"argv\":[],\"cwd\":\"/w\",\"workspace_root\":\"/w\","
                  "\"writable_workspace\":true,\"network\":\"restricted\",\"env\":{},"
                  "\"tty\":false}",
                  "/argv: must have at least 1 items");
    expect_reject(&csw_mcp_workspace_info_output_type,
                  "{\"server\":\"codespace\",\"version\":\"1\",\"internal_model_calls\":false,"
                  "\"tools_exposed\":[],\"transports\":[],\"workspace_id\":7,"
                  "\"workspace_id_is_credential\":false}",
                  "/workspace_id: expected string or null");
}

static void test_unknown_properties_are_ignored(void **state)
{
    (void)state;
    json_t *j = parse("{\"workspace_id\":\"w\",\"command\":[\"id\"],\"approved\":true,"
                      "\"user_id\":\"root\",\"cwd\":\"/\"}");
    struct csw_mcp_exec_command_input in;
    struct cs_wire_diag diag;
    assert_int_equal(csw_mcp_exec_command_input_decode(j, &in, &diag), CS_WIRE_OK);
    json_t *e = NULL;
    assert_int_equal(csw_mcp_exec_command_input_encode(&in, &e, &diag), CS_WIRE_OK);
    assert_null(json_object_get(e, "approved"));
    assert_null(json_object_get(e, "cwd"));
    json_decref(e);
    csw_mcp_exec_command_input_free(&in);
    json_decref(j);
}

static void test_long_pointer_is_truncated_safely(void **state)
{
    (void)state;
    /* A map key far longer than the diagnostic buffer. */
    char key[2000];
    memset(key, 'k', sizeof key - 1);
    key[sizeof key - 1] = '\0';
    json_t *j = json_pack("{s:s,s:s,s:{s:i}}", "workspace_id", "w", "patch", "",
                          "expected_versions", key, 1);
    struct csw_mcp_apply_patch_input in;
    struct cs_wire_diag diag;
    assert_int_equal(csw_mcp_apply_patch_input_decode(j, &in, &diag), CS_WIRE_INVALID);
    size_t n = strlen(diag.pointer);
    assert_true(n < sizeof diag.pointer);
    assert_string_equal(diag.pointer + n - 3, "...");
    assert_string_equal(diag.text, "expected string");
    json_decref(j);
}

/* Expects encode of v as t to be refused with "<pointer>: <text>" == want, by both encoders. */
static void expect_encode_refused(const struct cs_wire_type *t, const void *v, const char *want)
{
    json_t *j = (json_t *)1;
    struct cs_wire_diag diag;
    char buf[600];
    assert_int_equal(cs_wire_encode(t, v, &j, &diag), CS_WIRE_INVALID);
    assert_null(j);
    assert_string_equal(cs_wire_diag_format(&diag, buf, sizeof buf), want);
    char *text = (char *)1;
    size_t n = 1;
    memset(&diag, 0, sizeof diag);
    assert_int_equal(cs_wire_encode_text(t, v, &text, &n, &diag), CS_WIRE_INVALID);
    assert_null(text);
    assert_int_equal(n, 0);
    assert_string_equal(cs_wire_diag_format(&diag, buf, sizeof buf), want);
}

/* The text encoder writes what json_dumps(JSON_COMPACT) writes for the tree encoder's value. */
static void expect_same_text(const struct cs_wire_type *t, const void *v)
{
    json_t *j = NULL;
    struct cs_wire_diag diag;
    assert_int_equal(cs_wire_encode(t, v, &j, &diag), CS_WIRE_OK);
    char *dumped = json_dumps(j, JSON_COMPACT);
    assert_non_null(dumped);
    char *text = NULL;
    size_t n = 0;
    assert_int_equal(cs_wire_encode_text(t, v, &text, &n, &diag), CS_WIRE_OK);
    assert_int_equal(n, strlen(dumped));
    assert_memory_equal(text, dumped, n);
    assert_int_equal(text[n], '\0');
    cs_wire_release(text);
    free(dumped);
    json_decref(j);
}

/* An apply_patch input whose expected_versions map has 100 keys (k0..k99): past the size where
 * the text encoder finds duplicates through a set. in.expected_versions.v must be pointed at ev
 * by the user of a copy of in. */
struct big_map {
    struct csw_mcp_apply_patch_input in;
    struct csw_mcp_apply_patch_input_expected_versions_entry ev[100];
    char keys[100][16];
};

static void big_map_init(struct big_map *m)
{
    memset(m, 0, sizeof *m);
    m->in.workspace_id = (struct cs_str){"w", 1};
    m->in.patch = (struct cs_str){"p", 1};
    for (int i = 0; i < 100; i++) {
        snprintf(m->keys[i], sizeof m->keys[i], "k%d", i);
        m->ev[i].key = (struct cs_str){m->keys[i], strlen(m->keys[i])};
        m->ev[i].value = (struct cs_str){"absent", 6};
    }
    m->in.has_expected_versions = true;
    m->in.expected_versions.v = m->ev;
    m->in.expected_versions.n = 100;
}

static void test_text_encoder_matches_jansson(void **state)
{
    (void)state;
    /* Every escape class, a NUL, multi-byte UTF-8, nested objects, arrays, a map, integers up to
     * INT64_MAX, booleans, enums, constants and a union (the runner wire message). */
    const char *doc =
        "{\"protocol\":5,\"kind\":\"request\",\"request_id\":\"rrpc-1\",\"op\":{\"op\":\"exec\","
        "\"data\":{\"workspace\":{\"id\":\"w\",\"root\":\"/r\",\"profile\":\"workspace-write\","
        "\"environment_kind\":\"host\",\"network\":\"restricted\"},\"argv\":[\"sh\","
        "\"-c\",\"printf '\\\"\\\\/\\b\\f\\n\\r\\t\\u0000\\u001f\\u007f "
        "\u00e9\u20ac\\ud83d\\ude00'\"],"
        "\"process_id\":\"proc_0123456789abcdef0123456789abcdef\",\"cwd\":\"workspace_root\","
        "\"env\":{\"use_runner_defaults\":true,\"overrides\":{\"A\":\"1\",\"\u00e9\":\"\\n\"}},"
        "\"timeout_ms\":9223372036854775807,\"output_bytes_cap\":1,\"tty\":false,"
        "\"policy\":{\"workspace_profile\":\"workspace-write\",\"network\":\"restricted\"},"
        "\"yield_ms\":0}}}";
    json_error_t jerr;
    json_t *j = json_loads(doc, JSON_ALLOW_NUL, &jerr);
    assert_non_null(j);
    struct csw_runner_wire w;
    struct cs_wire_diag diag;
    if (csw_runner_wire_decode(j, &w, &diag) != CS_WIRE_OK)
        fail_msg("%s: %s", diag.pointer, diag.text);
    expect_same_text(&csw_runner_wire_type, &w);
    csw_runner_wire_free(&w);
    json_decref(j);

    /* A map past the size where duplicates are found through a set, with and without one. */
    struct big_map m;
    big_map_init(&m);
    struct csw_mcp_apply_patch_input in = m.in;
    struct csw_mcp_apply_patch_input_expected_versions_entry *ev = m.ev;
    in.expected_versions.v = ev;
    expect_same_text(&csw_mcp_apply_patch_input_type, &in);
    ev[99].key = ev[70].key;
    expect_encode_refused(&csw_mcp_apply_patch_input_type, &in,
                          "/expected_versions/k70: duplicate map key");

    /* A string longer than one escaping piece (64 KiB), escapes on both sides of the seam. */
    size_t big = 200000;
    char *s = malloc(big);
    assert_non_null(s);
    for (size_t i = 0; i < big; i++)
        s[i] = i % 7 == 0 ? '\n' : i % 11 == 0 ? '"' : 'a';
    in.has_expected_versions = false;
    in.patch = (struct cs_str){s, big};
    expect_same_text(&csw_mcp_apply_patch_input_type, &in);
    free(s);
}

/* x-cs-json values: kept as the input's own jansson value, checked for their JSON type only,
 * written back as jansson writes them. */
static void test_open_values(void **state)
{
    (void)state;
    json_error_t jerr;
    json_t *j =
        json_loads("{\"jsonrpc\":\"2.0\",\"id\":\"r\\u00e9\",\"error\":{\"code\":-32022,"
                   "\"message\":\"m\",\"data\":{\"supported\":[\"a\"],\"x\":1.5,\"n\":null}}}",
                   0, &jerr);
    assert_non_null(j);
    struct csw_protocol_jsonrpc_error e;
    struct cs_wire_diag diag;
    assert_int_equal(csw_protocol_jsonrpc_error_decode(j, &e, &diag), CS_WIRE_OK);
    assert_ptr_equal(e.error.data, json_object_get(json_object_get(j, "error"), "data"));
    expect_same_text(&csw_protocol_jsonrpc_error_type, &e);
    csw_protocol_jsonrpc_error_free(&e);
    json_decref(j);

    j = json_loads("{\"jsonrpc\":\"2.0\",\"id\":1.5,\"result\":{}}", 0, &jerr);
    struct csw_protocol_jsonrpc_result r;
    assert_int_equal(csw_protocol_jsonrpc_result_decode(j, &r, &diag), CS_WIRE_INVALID);
    assert_string_equal(diag.pointer, "/id");
    assert_string_equal(diag.text, "expected string or integer");
    json_decref(j);
    j = json_loads("{\"jsonrpc\":\"2.0\",\"id\":2.0,\"result\":{}}", 0, &jerr);
    assert_int_equal(csw_protocol_jsonrpc_result_decode(j, &r, &diag), CS_WIRE_OK);
    csw_protocol_jsonrpc_result_free(&r);
    json_decref(j);

    /* Encoding checks the type too, and a missing value is refused. */
    memset(&r, 0, sizeof r);
    r.id = json_integer(3);
    expect_encode_refused(&csw_protocol_jsonrpc_result_type, &r, "/result: no value");
    r.result = json_array();
    expect_encode_refused(&csw_protocol_jsonrpc_result_type, &r, "/result: expected object");
    json_decref(r.result);
    r.result = json_object();
    expect_same_text(&csw_protocol_jsonrpc_result_type, &r);
    csw_protocol_jsonrpc_result_free(&r);
    assert_null(r.id);
}

static void test_encoder_checks_the_schema(void **state)
{
    (void)state;
    /* An output type the server fills in: a bug there is caught before a client sees it. */
    struct csw_mcp_process_resize_output r = {.rows = 24, .cols = 1001};
    expect_encode_refused(&csw_mcp_process_resize_output_type, &r, "/cols: must be <= 1000");

    struct csw_mcp_apply_patch_input in;
    memset(&in, 0, sizeof in);
    assert_int_equal(cs_str_set_n(&in.workspace_id, "w", 1), 0);
    assert_int_equal(cs_str_set_n(&in.patch, "\xff", 1), 0);
    expect_encode_refused(&csw_mcp_apply_patch_input_type, &in,
                          "/patch: string is not valid UTF-8");
    cs_wire_release(in.patch.s);
    assert_int_equal(cs_str_set_n(&in.patch, "p", 1), 0);
    in.has_operation_key = true; /* NULL encodes as "", which breaks minLength 1 */
    expect_encode_refused(&csw_mcp_apply_patch_input_type, &in,
                          "/operation_key: must be at least 1 characters long");
    in.has_operation_key = false;
    in.has_check_only = true;
    struct csw_mcp_apply_patch_input_expected_versions_entry ev[2];
    memset(ev, 0, sizeof ev);
    ev[0].key = (struct cs_str){"a", 1};
    ev[0].value = (struct cs_str){"absent", 6};
    ev[1] = ev[0];
    in.has_expected_versions = true;
    in.expected_versions.v = ev;
    in.expected_versions.n = 2;
    expect_encode_refused(&csw_mcp_apply_patch_input_type, &in,
                          "/expected_versions/a: duplicate map key");
    ev[1].key = (struct cs_str){"b\0c", 3};
    expect_encode_refused(&csw_mcp_apply_patch_input_type, &in,
                          "/expected_versions/b?c: map key is not valid UTF-8 without NUL");
    ev[1].key = (struct cs_str){"b", 1};
    json_t *j = NULL;
    struct cs_wire_diag diag;
    assert_int_equal(csw_mcp_apply_patch_input_encode(&in, &j, &diag), CS_WIRE_OK);
    json_decref(j);
    in.expected_versions.v = NULL;
    in.expected_versions.n = 0;
    csw_mcp_apply_patch_input_free(&in);

    struct csw_mcp_terminate_process_output term = {.state = (enum csw_process_state)7};
    expect_encode_refused(&csw_mcp_terminate_process_output_type, &term,
                          "/state: enum value 7 out of range");
    struct csw_sandbox_prepare_response resp;
    memset(&resp, 0, sizeof resp);
    resp.tag = (enum csw_sandbox_prepare_response_tag)9;
    expect_encode_refused(&csw_sandbox_prepare_response_type, &resp, "/: union tag 9 out of range");
}

static void test_pointers_are_printable_utf8(void **state)
{
    (void)state;
    /* A key with control bytes shows them as '?', never raw. */
    json_t *j = json_pack("{s:s,s:s,s:{s:i}}", "workspace_id", "w", "patch", "",
                          "expected_versions", "a\n\x1b[31mb", 1);
    struct csw_mcp_apply_patch_input in;
    struct cs_wire_diag diag;
    assert_int_equal(csw_mcp_apply_patch_input_decode(j, &in, &diag), CS_WIRE_INVALID);
    assert_string_equal(diag.pointer, "/expected_versions/a??[31mb");
    json_decref(j);
    /* A long key of two-byte characters is cut between characters, and nothing is appended
     * after the cut (the pointer ends with "..."). */
    char key[1 + 2 * 200 + 1];
    key[0] = 'a';
    for (int i = 0; i < 200; i++)
        memcpy(key + 1 + 2 * i, "\xc3\xa9", 2);
    key[sizeof key - 1] = '\0';
    j = json_pack("{s:{s:{s:s,s:s}}}", "workspaces", key, "root", "/r", "profile", "nope");
    assert_non_null(j);
    struct csw_config_registry reg;
    assert_int_equal(csw_config_registry_decode(j, &reg, &diag), CS_WIRE_INVALID);
    size_t n = strlen(diag.pointer);
    assert_string_equal(diag.pointer + n - 3, "...");
    json_t *as_json = json_stringn(diag.pointer, n); /* NULL if not valid UTF-8 */
    assert_non_null(as_json);
    json_decref(as_json);
    assert_null(strstr(diag.pointer, "/profile"));
    json_decref(j);
}

/* ---- fail the Nth allocation ---- */

static long alloc_budget = -1; /* allocations left before failing; -1: unlimited */
static long alloc_live;

static void *counting_malloc(size_t n)
{
    if (alloc_budget == 0)
        return NULL;
    if (alloc_budget > 0)
        alloc_budget--;
    void *p = malloc(n);
    if (p)
        alloc_live++;
    return p;
}

static void counting_free(void *p)
{
    if (p)
        alloc_live--;
    free(p);
}

static size_t oom_iterations;

static void oom_case(const struct csw_toplevel *tl, const char *path, json_t *j)
{
    const struct cs_wire_type *t = tl->type;
    void *out = malloc(t->size);
    assert_non_null(out);
    /* The input was loaded with the real allocator; only decode and encode run under failure. */
    for (long n = 0;; n++) {
        json_set_alloc_funcs(counting_malloc, counting_free);
        alloc_live = 0;
        alloc_budget = n;
        struct cs_wire_diag diag;
        enum cs_wire_status st = cs_wire_decode(t, j, out, &diag);
        json_t *e = NULL;
        char *text = NULL;
        if (st == CS_WIRE_OK) {
            /* Encoding may fail too, and must not leak when it does; so may the text encoder,
             * run on what budget is left. */
            enum cs_wire_status est = cs_wire_encode(t, out, &e, &diag);
            if (est == CS_WIRE_INVALID)
                fail_msg("%s: encode refused a decoded value: %s", path, diag.text);
            assert_true(est == CS_WIRE_OK ? e != NULL : e == NULL);
            json_decref(e);
            if (est == CS_WIRE_OK) {
                size_t tn = 0;
                est = cs_wire_encode_text(t, out, &text, &tn, &diag);
                if (est == CS_WIRE_INVALID)
                    fail_msg("%s: encode_text refused a decoded value: %s", path, diag.text);
                if (est == CS_WIRE_NOMEM)
                    assert_string_equal(diag.text, "out of memory");
                assert_true(est == CS_WIRE_OK ? text != NULL : text == NULL);
                cs_wire_release(text);
            }
            cs_wire_free(t, out);
        } else if (st != CS_WIRE_NOMEM) {
            fail_msg("%s: with %ld allocations allowed the decode said %s", path, n, diag.text);
        } else {
            assert_string_equal(diag.text, "out of memory");
        }
        alloc_budget = -1;
        json_set_alloc_funcs(malloc, free);
        if (alloc_live != 0)
            fail_msg("%s: %ld allocations leaked with the allocation #%ld failing", path,
                     alloc_live, n + 1);
        oom_iterations++;
        if (st == CS_WIRE_OK && e && text)
            break;
        if (n > 100000)
            fail_msg("%s: no success after %ld allocations", path, n);
    }
    free(out);
}

/* The text encoder's own failure paths that no golden case reaches: the key set of a map over 64
 * entries, and giving back the room of a big text. */
static void test_text_encoder_fail_nth_allocation(void **state)
{
    (void)state;
    struct big_map m;
    big_map_init(&m);
    struct csw_mcp_apply_patch_input in = m.in;
    in.expected_versions.v = m.ev;
    size_t big = 300000;
    char *s = malloc(big);
    assert_non_null(s);
    memset(s, 'a', big);
    in.patch = (struct cs_str){s, big};
    size_t failures = 0;
    for (long n = 0;; n++) {
        json_set_alloc_funcs(counting_malloc, counting_free);
        alloc_live = 0;
        alloc_budget = n;
        char *text = NULL;
        size_t tn = 0;
        struct cs_wire_diag diag;
        enum cs_wire_status st =
            cs_wire_encode_text(&csw_mcp_apply_patch_input_type, &in, &text, &tn, &diag);
        if (st == CS_WIRE_NOMEM) {
            assert_null(text);
            assert_string_equal(diag.text, "out of memory");
            failures++;
        } else {
            assert_int_equal(st, CS_WIRE_OK);
            assert_true(tn > big);
        }
        cs_wire_release(text);
        alloc_budget = -1;
        json_set_alloc_funcs(malloc, free);
        if (alloc_live != 0)
            fail_msg("%ld allocations leaked with the allocation #%ld failing", alloc_live, n + 1);
        if (st == CS_WIRE_OK)
            break;
        if (n > 100000)
            fail_msg("no success after %ld allocations", n);
    }
    assert_true(failures > 3);
    free(s);
}

static void test_fail_nth_allocation(void **state)
{
    (void)state;
    size_t cases = 0;
    for (size_t i = 0; i < csw_toplevel_count; i++)
        cases += for_each_case(&csw_toplevel[i], "valid", oom_case);
    assert_true(cases >= csw_toplevel_count);
    print_message("fail-the-Nth-allocation: %zu cases, %zu runs\n", cases, oom_iterations);
}

/* ---- generated catalogue and tool tables ---- */

static void test_error_catalogue(void **state)
{
    (void)state;
    assert_int_equal(CSW_ERROR__COUNT, 26); /* PATH_DENIED is the 26th (docs/contract/errors.md) */
    assert_int_equal(csw_error_from_name("PATH_DENIED", 11), CSW_ERROR_PATH_DENIED);
    assert_string_equal(csw_error_names[CSW_ERROR_INVALID_ARGUMENTS], "INVALID_ARGUMENTS");
    assert_string_equal(csw_error_names[CSW_ERROR_INTERNAL], "INTERNAL");
    assert_int_equal(csw_error_from_name("PATH_ESCAPE", 11), CSW_ERROR_PATH_ESCAPE);
    assert_int_equal(csw_error_from_name("PATH_ESCAP", 10), -1);
    for (int i = 0; i < CSW_ERROR__COUNT; i++) {
        assert_true(strlen(csw_error_messages[i]) > 0);
        for (const char *c = csw_error_names[i]; *c; c++)
            assert_true((*c >= 'A' && *c <= 'Z') || *c == '_');
    }
}

static void test_tool_table(void **state)
{
    (void)state;
    static const char *const order[] = {
        "workspace_info",   "read",        "find",         "apply_patch",    "operation_status",
        "exec_command",     "write_stdin", "read_process", "process_status", "process_resize",
        "terminate_process"};
    assert_int_equal(csw_tool_count, 11);
    for (size_t i = 0; i < csw_tool_count; i++) {
        const struct csw_tool *t = &csw_tools[i];
        assert_string_equal(t->name, order[i]);
        assert_true(strlen(t->title) > 0 && strlen(t->description) > 40);
        json_t *in = parse(t->input_schema_json), *out = parse(t->output_schema_json);
        json_t *ann = parse(t->annotations_json);
        /* Bundled: self-contained, no generator keywords, no $id, no $ref left. */
        assert_string_equal(json_string_value(json_object_get(in, "type")), "object");
        assert_string_equal(json_string_value(json_object_get(out, "type")), "object");
        assert_null(strstr(t->input_schema_json, "x-cs-"));
        assert_null(strstr(t->output_schema_json, "$ref"));
        assert_null(strstr(t->output_schema_json, "$id"));
        bool ro = json_is_true(json_object_get(ann, "readOnlyHint"));
        bool expect_ro = i == 0 || i == 1 || i == 2 || i == 4 || i == 7 || i == 8;
        assert_int_equal(ro, expect_ro);
        assert_int_equal(json_is_true(json_object_get(ann, "openWorldHint")), i == 5);
        json_decref(in);
        json_decref(out);
        json_decref(ann);
    }
    /* The error body's enum is inlined into bundled texts that reference it. */
    const struct csw_toplevel *wire = csw_toplevel_find("runner_wire");
    assert_non_null(wire);
    assert_non_null(strstr(wire->schema_json, "PROCESS_NOT_TTY"));
    assert_null(csw_toplevel_find("nope"));
}

/* ---- event loop ---- */

static char loop_trace[64];

static void trace(void *arg)
{
    strncat(loop_trace, arg, sizeof loop_trace - strlen(loop_trace) - 1);
}

static void stop_loop(void *arg)
{
    cs_loop_stop(arg);
}

static struct cs_loop_fd *pipe_w, *other_w;
static int pipe_reads;

static void on_pipe(void *arg, int fd, unsigned events)
{
    (void)arg;
    char c;
    assert_true(events & CS_LOOP_READ);
    assert_int_equal(read(fd, &c, 1), 1);
    pipe_reads++;
    /* Removing another watcher whose event may already be pending must be safe. */
    cs_loop_fd_del(other_w);
    other_w = NULL;
    cs_loop_fd_del(pipe_w);
    pipe_w = NULL;
}

static void on_other(void *arg, int fd, unsigned events)
{
    (void)arg;
    (void)fd;
    (void)events;
    fail_msg("a removed watcher was called");
}

static int signals_seen;

static void on_sig(void *arg, int signo)
{
    assert_int_equal(signo, SIGUSR1);
    signals_seen++;
    cs_loop_stop(arg);
}

static void test_loop(void **state)
{
    (void)state;
    struct cs_loop *loop = cs_loop_new();
    assert_non_null(loop);
    /* Timers fire in due order, equal times in creation order; a cancelled one never. */
    loop_trace[0] = '\0';
    assert_non_null(cs_loop_timer_add(loop, 30, trace, "c"));
    assert_non_null(cs_loop_timer_add(loop, 10, trace, "a"));
    assert_non_null(cs_loop_timer_add(loop, 10, trace, "b"));
    struct cs_loop_timer *never = cs_loop_timer_add(loop, 20, trace, "X");
    cs_loop_timer_cancel(never);
    assert_int_equal(cs_loop_defer(loop, trace, "0"), 0);
    assert_non_null(cs_loop_timer_add(loop, 40, stop_loop, loop));
    int64_t t0 = cs_loop_now_ms();
    assert_int_equal(cs_loop_run(loop), 0);
    assert_string_equal(loop_trace, "0abc");
    assert_true(cs_loop_now_ms() - t0 >= 40);

    /* Two readable pipes: the first callback removes both watchers. */
    int p1[2], p2[2];
    assert_int_equal(pipe(p1), 0);
    assert_int_equal(pipe(p2), 0);
    pipe_w = cs_loop_fd_add(loop, p1[0], CS_LOOP_READ, on_pipe, NULL);
    other_w = cs_loop_fd_add(loop, p2[0], CS_LOOP_READ, on_other, NULL);
    assert_non_null(pipe_w);
    assert_non_null(other_w);
    assert_int_equal(write(p1[1], "x", 1), 1);
    assert_int_equal(write(p2[1], "y", 1), 1);
    assert_non_null(cs_loop_timer_add(loop, 20, stop_loop, loop));
    assert_int_equal(cs_loop_run(loop), 0);
    assert_int_equal(pipe_reads, 1);
    close(p1[0]);
    close(p1[1]);
    close(p2[0]);
    close(p2[1]);

    /* Signals arrive as callbacks. */
    assert_int_equal(cs_loop_signal(loop, SIGUSR1, on_sig, loop), 0);
    assert_int_equal(raise(SIGUSR1), 0);
    assert_int_equal(cs_loop_run(loop), 0);
    assert_int_equal(signals_seen, 1);
    /* Pending timers and deferred calls are released with the loop. */
    assert_non_null(cs_loop_timer_add(loop, 100000, trace, "late"));
    assert_int_equal(cs_loop_defer(loop, trace, "late"), 0);
    cs_loop_free(loop);
}

static void on_byte(void *arg, int fd, unsigned events)
{
    char c;
    assert_true(events & CS_LOOP_READ);
    assert_int_equal(read(fd, &c, 1), 1);
    cs_loop_stop(arg);
}

static int64_t thread_cpu_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Busy polling: after cs_loop_expect the loop polls before it sleeps (at least once, counted),
 * the window ends and the loop then sleeps, an event already there is dispatched at the first
 * poll, and nothing polls while the process may use one CPU only or with the window 0. No step
 * depends on timing but the CPU bound, whose margin is 30x the window. */
static void test_loop_busy_poll(void **state)
{
    (void)state;
    cpu_set_t all;
    assert_int_equal(sched_getaffinity(0, sizeof all, &all), 0);
    struct cs_loop *loop = cs_loop_new();
    assert_non_null(loop);
    int p[2];
    assert_int_equal(pipe2(p, O_NONBLOCK), 0);
    struct cs_loop_fd *w = cs_loop_fd_add(loop, p[0], CS_LOOP_READ, on_byte, loop);
    assert_non_null(w);
    cs_loop_busy_poll(loop, CS_LOOP_BUSY_POLL_MAX_US);
    /* Two CPUs or more, unless a cgroup quota grants fewer (then it must be off). */
    if (CPU_COUNT(&all) >= 2 && !cs_loop_busy_poll_on(loop))
        print_message("busy polling off: a cgroup quota grants fewer than 2 CPUs\n");
    if (CPU_COUNT(&all) >= 2 && cs_loop_busy_poll_on(loop)) {
        /* Nothing comes: the loop polls, the window ends, and it sleeps until the 60 ms timer. */
        uint64_t before = cs_loop_empty_polls(loop);
        int64_t cpu0 = thread_cpu_us();
        cs_loop_expect(loop);
        assert_non_null(cs_loop_timer_add(loop, 60, stop_loop, loop));
        assert_int_equal(cs_loop_run(loop), 0);
        assert_true(cs_loop_empty_polls(loop) > before);
        assert_true(thread_cpu_us() - cpu0 < 30000);
        /* A byte already there is read at the first poll; the window closes with it. */
        before = cs_loop_empty_polls(loop);
        assert_int_equal(write(p[1], "x", 1), 1);
        cs_loop_expect(loop);
        assert_int_equal(cs_loop_run(loop), 0);
        assert_int_equal(cs_loop_empty_polls(loop), before);
        char c;
        assert_int_equal(read(p[0], &c, 1), -1); /* on_byte took it (the pipe is empty) */
    }
    /* One CPU: the window never opens. */
    cpu_set_t one;
    CPU_ZERO(&one);
    for (int i = 0; i < CPU_SETSIZE; i++)
        if (CPU_ISSET(i, &all)) {
            CPU_SET(i, &one);
            break;
        }
    assert_int_equal(sched_setaffinity(0, sizeof one, &one), 0);
    cs_loop_busy_poll(loop, CS_LOOP_BUSY_POLL_MAX_US); /* counts the CPUs again */
    bool on_one = cs_loop_busy_poll_on(loop);
    uint64_t before = cs_loop_empty_polls(loop);
    cs_loop_expect(loop);
    assert_non_null(cs_loop_timer_add(loop, 5, stop_loop, loop));
    int rc = cs_loop_run(loop);
    uint64_t after = cs_loop_empty_polls(loop);
    assert_int_equal(sched_setaffinity(0, sizeof all, &all), 0); /* before any assert fails */
    assert_int_equal(rc, 0);
    assert_false(on_one);
    assert_int_equal(after, before);
    /* Off: no window either. */
    cs_loop_busy_poll(loop, 0);
    cs_loop_expect(loop);
    assert_non_null(cs_loop_timer_add(loop, 5, stop_loop, loop));
    assert_int_equal(cs_loop_run(loop), 0);
    assert_int_equal(cs_loop_empty_polls(loop), before);
    cs_loop_fd_del(w);
    cs_loop_free(loop);
    close(p[0]);
    close(p[1]);
}

static void test_log_levels_and_redaction(void **state)
{
    (void)state;
    enum cs_log_level l;
    assert_int_equal(cs_log_level_parse("warn", &l), 0);
    assert_int_equal(l, CS_LOG_WARNING);
    assert_int_equal(cs_log_level_parse("emergency", &l), 0);
    assert_string_equal(cs_log_level_name(l), "emergency");
    assert_int_equal(cs_log_level_parse("loud", &l), -1);
    /* Capture stderr through a pipe and check one JSON line without the secret. */
    int p[2];
    assert_int_equal(pipe(p), 0);
    int saved = dup(STDERR_FILENO);
    dup2(p[1], STDERR_FILENO);
    cs_log_set_level(CS_LOG_INFO);
    cs_log(CS_LOG_DEBUG, "dropped", json_pack("{s:s}", "x", "y"));
    cs_log(CS_LOG_WARNING, "hello\nworld",
           json_pack("{s:s,s:s,s:i}", "Authorization", "Bearer s3cret", "http_token", "s3cret", "n",
                     7));
    dup2(saved, STDERR_FILENO);
    close(saved);
    close(p[1]);
    char buf[1024];
    ssize_t n = read(p[0], buf, sizeof buf - 1);
    close(p[0]);
    assert_true(n > 0);
    buf[n] = '\0';
    assert_null(strstr(buf, "dropped"));
    assert_null(strstr(buf, "s3cret"));
    assert_non_null(strchr(buf, '\n'));
    assert_ptr_equal(strchr(buf, '\n'), buf + n - 1); /* exactly one line */
    json_t *j = json_loads(buf, 0, NULL);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "level")), "warning");
    assert_string_equal(json_string_value(json_object_get(j, "msg")), "hello\nworld");
    assert_string_equal(json_string_value(json_object_get(j, "Authorization")), "[redacted]");
    assert_int_equal(json_integer_value(json_object_get(j, "n")), 7);
    json_decref(j);
}

/* One cs_log line captured from stderr (at most cap - 1 bytes, NUL-terminated). */
static size_t log_line(enum cs_log_level level, const char *msg, json_t *fields, char *buf,
                       size_t cap)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    int saved = dup(STDERR_FILENO);
    dup2(p[1], STDERR_FILENO);
    cs_log(level, msg, fields);
    dup2(saved, STDERR_FILENO);
    close(saved);
    close(p[1]);
    size_t n = 0;
    ssize_t r;
    while (n < cap - 1 && (r = read(p[0], buf + n, cap - 1 - n)) > 0)
        n += (size_t)r;
    close(p[0]);
    buf[n] = '\0';
    return n;
}

/* A line is byte for byte what jansson writes for the same members (ts, level, msg, the fields
 * in order, secrets redacted) with JSON_COMPACT | JSON_ENSURE_ASCII, whether cs_log writes it
 * itself or hands it to jansson (a real, an array, an object among the fields). */
static void check_log_line(const char *msg, json_t *fields)
{
    char buf[8192];
    size_t n = log_line(CS_LOG_NOTICE, msg, json_incref(fields), buf, sizeof buf);
    assert_true(n > 2 && buf[n - 1] == '\n');
    buf[n - 1] = '\0';
    assert_null(strstr(buf, "s3cret")); /* every case's secret value, under a secret's name */
    /* The timestamp: 2026-12-04T02:28:45.123Z, as strftime wrote it. */
    const char *ts = strstr(buf, "\"ts\":\"");
    assert_non_null(ts);
    ts += 6;
    assert_int_equal(strcspn(ts, "\""), 24);
    for (size_t i = 0; i < 24; i++)
        assert_true(i == 4 || i == 7     ? ts[i] == '-'
                    : i == 10            ? ts[i] == 'T'
                    : i == 13 || i == 16 ? ts[i] == ':'
                    : i == 19            ? ts[i] == '.'
                    : i == 23            ? ts[i] == 'Z'
                                         : ts[i] >= '0' && ts[i] <= '9');
    char when[25];
    memcpy(when, ts, 24);
    when[24] = '\0';
    json_t *expect = cs_log_line_json(when, CS_LOG_NOTICE, msg, fields);
    json_decref(fields);
    char *want = json_dumps(expect, JSON_COMPACT | JSON_ENSURE_ASCII);
    assert_non_null(want);
    assert_string_equal(buf, want);
    free(want);
    json_decref(expect);
}

static void test_log_line_is_janssons(void **state)
{
    (void)state;
    cs_log_set_level(CS_LOG_INFO);
    check_log_line("tool call", json_pack("{s:s,s:I,s:s,s:s}", "tool", "read", "duration_ms",
                                          (json_int_t)3, "result", "ok", "workspace_id", "demo"));
    check_log_line(NULL, json_pack("{s:b,s:b,s:n,s:I,s:I}", "yes", 1, "no", 0, "none", "min",
                                   (json_int_t)INT64_MIN, "max", (json_int_t)INT64_MAX));
    /* Every escape: quotes, backslash, the short forms, other controls and NUL as \u00XX, DEL
     * as itself, the BMP above 0x7F as \uXXXX, beyond it as a surrogate pair, in keys too. */
    static const char odd[] =
        "q\"b\\/\b\f\n\r\t\x01\x1f\x7f caf\xc3\xa9 \xe2\x80\xa8 \xf0\x9f\x98\x80";
    json_t *f = json_object();
    json_object_set_new(f, "text", json_stringn(odd, sizeof odd - 1));
    json_object_set_new(f, "nul", json_stringn("a\0b", 3));
    json_object_set_new(f, "k\xc3\xa9y\n", json_string("v"));
    json_object_set_new(f, "http_token", json_string("s3cret"));
    json_object_set_new(f, "ts", json_string("not mine"));
    json_object_set_new(f, "empty", json_string(""));
    check_log_line(odd, f);
    /* Handed to jansson: a real, an array, an object. */
    check_log_line("mixed", json_pack("{s:s,s:f,s:[i,s],s:{s:s},s:s}", "a", "x", "r", 1.5, "arr", 1,
                                      "\xc3\xa9", "obj", "k", "v", "Password", "s3cret"));
    /* Keys holding a NUL (json_object_setn): cut at it, "a" and "a\0x" are one member in
     * jansson's line object, the later value in the earlier place; never a duplicate key. */
    f = json_object();
    json_object_setn_new(f, "a", 1, json_integer(1));
    json_object_setn_new(f, "a\0x", 3, json_integer(2));
    json_object_set_new(f, "b", json_true());
    check_log_line("nul keys", f);
    char one[256];
    f = json_object();
    json_object_setn_new(f, "a", 1, json_integer(1));
    json_object_setn_new(f, "a\0x", 3, json_integer(2));
    log_line(CS_LOG_NOTICE, "nul keys", f, one, sizeof one);
    assert_non_null(strstr(one, "\"msg\":\"nul keys\",\"a\":2}\n"));
    /* A long line leaves the stack buffer. */
    char big[3000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    check_log_line("big", json_pack("{s:s,s:s}", "one", big, "two", big));
    /* A string that is not UTF-8 (made unchecked) is refused by jansson: a line that says why
     * takes its place, rather than bytes that are not JSON. */
    f = json_object();
    json_object_set_new(f, "bad", json_stringn_nocheck("\xff", 1));
    char buf[512];
    log_line(CS_LOG_WARNING, "bad", f, buf, sizeof buf);
    assert_string_equal(buf, "{\"level\":\"error\",\"msg\":\"log: a line could not be written "
                             "(out of memory, or a field that is not UTF-8)\"}\n");
}

/* cs_wire_json_text writes j as json_dumps(JSON_COMPACT | JSON_ENCODE_ANY) does. */
static void check_json_text(json_t *j)
{
    size_t n = 0;
    char *mine = cs_wire_json_text(j, &n);
    char *want = json_dumps(j, JSON_ENCODE_ANY | JSON_COMPACT);
    assert_non_null(mine);
    assert_non_null(want);
    assert_string_equal(mine, want);
    assert_int_equal(n, strlen(want));
    free(mine);
    free(want);
    json_decref(j);
}

static void test_json_text_matches_jansson(void **state)
{
    (void)state;
    static const char *const texts[] = {
        "{}",
        "[]",
        "null",
        "true",
        "false",
        "0",
        "-9223372036854775808",
        "9223372036854775807",
        "1.5",
        "-0.0",
        "1e300",
        "0.1",
        "\"\"",
        "{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}",
        "{\"b\":1,\"a\":[1,2.25,{\"z\":null,\"y\":[[],{}]}],\"\":\"\"}",
        "[\"\\u0000\\n\\\"\\\\/\\u001f\\u007f\",\"caf\u00e9 \\u2028 \\ud83d\\ude00\"]",
        "{\"k\\u0001ey\":\"v\",\"\\t\":[true,false,null]}"};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        json_error_t err;
        json_t *j = json_loads(texts[i], JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
        assert_non_null(j);
        check_json_text(j);
    }
    /* A key with a NUL in it (the parser refuses one, an object set by length holds it). */
    json_t *nul = json_object();
    assert_non_null(nul);
    assert_int_equal(json_object_setn_new(nul, "k\0y", 3, json_integer(-1)), 0);
    check_json_text(nul);
    /* A big string crosses the escaper's 64 KiB pieces and the buffer's doublings. */
    size_t big = 200000;
    char *s = malloc(big);
    assert_non_null(s);
    for (size_t i = 0; i < big; i++)
        s[i] = "ab\"\n\\x"[i % 6];
    json_t *arr = json_pack("[s#,i,{s:s#}]", s, big, 3, "k", s, big / 3);
    assert_non_null(arr);
    check_json_text(arr);
    free(s);
    /* What jansson refuses to write, refused too: a string that is not UTF-8, and a cycle. */
    json_t *bad = json_pack("{s:o}", "x", json_stringn_nocheck("\xff", 1));
    assert_non_null(bad);
    assert_null(cs_wire_json_text(bad, NULL));
    assert_null(json_dumps(bad, JSON_COMPACT));
    json_decref(bad);
    json_t *loop = json_array();
    json_t *inner = json_array();
    assert_int_equal(json_array_append(loop, inner), 0);
    assert_int_equal(json_array_append(inner, loop), 0);
    assert_null(cs_wire_json_text(loop, NULL));
    assert_null(json_dumps(loop, JSON_COMPACT));
    json_array_clear(inner); /* break the cycle so both are freed */
    json_decref(inner);
    json_decref(loop);
    assert_null(cs_wire_json_text(NULL, NULL));
}

/* cs_json_quote writes what jansson writes, for every escape class and for random UTF-8. */
static void check_quote(const char *s, size_t n)
{
    char *out = malloc(CS_JSON_QUOTE_MAX(n));
    assert_non_null(out);
    size_t q = cs_json_quote(s, n, out);
    assert_int_equal(cs_json_escaped_len(s, n) + 2, q); /* the count matches the writer */
    json_t *j = json_stringn(s, n);
    assert_non_null(j);
    char *want = json_dumps(j, JSON_ENCODE_ANY | JSON_COMPACT);
    assert_non_null(want);
    assert_int_equal(q, strlen(want));
    assert_memory_equal(out, want, q);
    free(want);
    json_decref(j);
    free(out);
}

static void test_json_quote_matches_jansson(void **state)
{
    (void)state;
    check_quote("", 0);
    check_quote("plain", 5);
    char all[128];
    for (int i = 0; i < 128; i++)
        all[i] = (char)i;
    check_quote(all, sizeof all); /* NUL, every control character, quote, backslash, slash, DEL */
    const char *multi = "caf\xc3\xa9 \xe2\x80\xa8 \xf0\x9f\x98\x80 \xed\x9f\xbf";
    check_quote(multi, strlen(multi));
    /* Random strings over a small alphabet rich in escapes, multibyte sequences among them. */
    static const char *const atoms[] = {"a",
                                        "\"",
                                        "\\",
                                        "\n",
                                        "\x01",
                                        "\x1f",
                                        "/",
                                        "\x7f",
                                        "\xc3\xa9",
                                        "\xe2\x82\xac",
                                        "\xf0\x9f\x98\x80",
                                        "\t"};
    uint32_t x = 42;
    for (int round = 0; round < 500; round++) {
        char buf[400];
        size_t n = 0;
        for (int k = 0; k < 80; k++) {
            x = x * 1103515245u + 12345u;
            const char *a = atoms[(x >> 16) % (sizeof atoms / sizeof atoms[0])];
            memcpy(buf + n, a, strlen(a));
            n += strlen(a);
        }
        check_quote(buf, n);
    }
}

/* The text writer's strings over 64 KiB (counted first, then escaped in one go: issue 33) are
 * what json_dumps writes: a megabyte of NULs (a process's output, six bytes each once escaped),
 * a big plain text, and a mix with every escape class beside multibyte UTF-8, inside an object
 * as the exec answer holds it. */
static void check_big_text(const char *s, size_t n)
{
    json_t *o = json_pack("{s:s%,s:i}", "output", s, n, "cursor", 7);
    assert_non_null(o);
    char *want = json_dumps(o, JSON_COMPACT);
    assert_non_null(want);
    size_t got_n = 0;
    char *got = cs_wire_json_text(o, &got_n);
    assert_non_null(got);
    assert_int_equal(got_n, strlen(want));
    assert_memory_equal(got, want, got_n);
    cs_wire_release(got);
    free(want);
    json_decref(o);
}

static void test_json_text_big_strings(void **state)
{
    (void)state;
    size_t n = 1024 * 1024;
    char *s = calloc(n, 1); /* NULs */
    assert_non_null(s);
    check_big_text(s, n);
    memset(s, 'x', n);
    check_big_text(s, n);
    check_big_text(s, 65537); /* just over the size that is counted first */
    static const char *const atoms[] = {
        "ab",         "\"",   "\\",       "\n",           "\x01",
        "\x1f",       "\x00", "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80",
        "plain text "};
    uint32_t x = 7;
    size_t at = 0;
    while (at + 16 < n) {
        x = x * 1103515245u + 12345u;
        const char *a = atoms[(x >> 16) % (sizeof atoms / sizeof atoms[0])];
        size_t k = strcmp(a, "\x00") == 0 ? 1 : strlen(a);
        memcpy(s + at, a, k);
        at += k;
    }
    check_big_text(s, at);
    free(s);
}

/* cs_json_clamp_numbers: only numbers jansson cannot hold change, and never inside strings. */
static void check_clamp(const char *in, const char *want)
{
    size_t n = 0;
    char *got = cs_json_clamp_numbers(in, strlen(in), &n);
    if (!want) {
        assert_null(got);
        return;
    }
    assert_non_null(got);
    assert_int_equal(n, strlen(want));
    assert_string_equal(got, want);
    json_error_t err;
    json_t *j = json_loadb(got, n, JSON_DECODE_ANY, &err);
    assert_non_null(j); /* jansson reads the clamped text */
    json_decref(j);
    free(got);
}

static void test_json_clamp_numbers(void **state)
{
    (void)state;
    check_clamp("[9223372036854775807,-9223372036854775808,1e308,1e-400,0.5]", NULL);
    check_clamp("[9223372036854775808]", "[9223372036854775807]");
    check_clamp("{\"a\":-9223372036854775809}", "{\"a\":-9223372036854775808}");
    check_clamp("{\"limit\":18446744073709551616,\"x\":1}",
                "{\"limit\":9223372036854775807,\"x\":1}");
    check_clamp("[1e400,-2.5E+999]", "[1.7976931348623157e308,-1.7976931348623157e308]");
    /* Digits inside strings, escaped quotes included, are text. */
    check_clamp("[\"99999999999999999999\",\"a\\\"1e999\",99999999999999999999]",
                "[\"99999999999999999999\",\"a\\\"1e999\",9223372036854775807]");
    check_clamp("\"1e999\"", NULL);
}

/* ---- base_netallow: network_allow entries, numeric hosts, the classifier, the rules ---- */

static struct sockaddr_storage nx_addr(const char *text)
{
    struct sockaddr_storage ss;
    assert_int_equal(cs_netallow_host_numeric(text, &ss), CS_NETALLOW_NUMERIC);
    return ss;
}

static void test_netallow_entries(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        int kind; /* -1: refused */
        const char *host;
        unsigned port;
    } cases[] = {
        {"example.com", CS_NETALLOW_KIND_HOST, "example.com", 0},
        {"Example.COM.", CS_NETALLOW_KIND_HOST, "example.com", 0},
        {"example.com:443", CS_NETALLOW_KIND_HOST, "example.com", 443},
        {"*.example.org", CS_NETALLOW_KIND_SUFFIX, "example.org", 0},
        {"*.example.org:8443", CS_NETALLOW_KIND_SUFFIX, "example.org", 8443},
        {"a_b-c.example", CS_NETALLOW_KIND_HOST, "a_b-c.example", 0},
        {"localhost:1", CS_NETALLOW_KIND_HOST, "localhost", 1},
        {"x:65535", CS_NETALLOW_KIND_HOST, "x", 65535},
        {"127.0.0.1", CS_NETALLOW_KIND_IP, "127.0.0.1", 0},
        {"127.0.0.1:8080", CS_NETALLOW_KIND_IP, "127.0.0.1", 8080},
        {"::1", CS_NETALLOW_KIND_IP, "::1", 0},
        {"[::1]", CS_NETALLOW_KIND_IP, "::1", 0},
        {"[::1]:80", CS_NETALLOW_KIND_IP, "::1", 80},
        {"FE80::1", CS_NETALLOW_KIND_IP, "fe80::1", 0},
        {"[::ffff:10.0.0.1]", CS_NETALLOW_KIND_IP, "::ffff:10.0.0.1", 0},
        {"", -1, NULL, 0},
        {" a", -1, NULL, 0},
        {"a b", -1, NULL, 0},
        {"a\tb", -1, NULL, 0},
        {"http://x", -1, NULL, 0},
        {"x/y", -1, NULL, 0},
        {"u@x", -1, NULL, 0},
        {"*", -1, NULL, 0},
        {"*.", -1, NULL, 0},
        {"*.:80", -1, NULL, 0},
        {"**.a", -1, NULL, 0},
        {"*a.com", -1, NULL, 0},
        {"a.*.com", -1, NULL, 0},
        {"*.*.com", -1, NULL, 0},
        {"*.1.2.3.4", -1, NULL, 0},
        {"*.[::1]", -1, NULL, 0},
        {"x:0", -1, NULL, 0},
        {"x:99999", -1, NULL, 0},
        {"x:65536", -1, NULL, 0},
        {"x:", -1, NULL, 0},
        {"x:+1", -1, NULL, 0},
        {":80", -1, NULL, 0},
        {"a..b", -1, NULL, 0},
        {".a", -1, NULL, 0},
        {"a..", -1, NULL, 0},
        {"-a", -1, NULL, 0},
        {"a-.b", -1, NULL, 0},
        {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", -1, NULL, 0},
        {"0x7f.1", -1, NULL, 0},
        {"0x7f000001", -1, NULL, 0},
        {"2130706433", -1, NULL, 0},
        {"127.1", -1, NULL, 0},
        {"127.0.1", -1, NULL, 0},
        {"0177.0.0.1", -1, NULL, 0},
        {"017700000001", -1, NULL, 0},
        {"1.2.3.4.5", -1, NULL, 0},
        {"256.0.0.1", -1, NULL, 0},
        {"example.123", -1, NULL, 0},
        {"[1.2.3.4]", -1, NULL, 0},
        {"[::1", -1, NULL, 0},
        {"[::1]x", -1, NULL, 0},
        {"[::1]:0", -1, NULL, 0},
        {"::1:80x", -1, NULL, 0},
        {"fe80::1%eth0", -1, NULL, 0},
        {"caf\xc3\xa9.com", -1, NULL, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        struct cs_netallow_entry e;
        const char *why = NULL;
        int rc = cs_netallow_entry_parse(cases[i].in, strlen(cases[i].in), &e, &why);
        if (cases[i].kind < 0) {
            if (rc == 0)
                fail_msg("accepted %s", cases[i].in);
            assert_non_null(why);
            continue;
        }
        if (rc != 0)
            fail_msg("refused %s: %s", cases[i].in, why);
        assert_int_equal(e.kind, cases[i].kind);
        assert_string_equal(e.host, cases[i].host);
        assert_int_equal(e.port, cases[i].port);
    }
    /* a label of 63 is a name, a name of 253 too, 254 is not */
    char name[300];
    memset(name, 'a', 63);
    name[63] = '\0';
    struct cs_netallow_entry e;
    assert_int_equal(cs_netallow_entry_parse(name, 63, &e, NULL), 0);
    for (size_t i = 0; i < 253; i++)
        name[i] = i % 2 ? '.' : 'a';
    name[253] = '\0';
    assert_int_equal(cs_netallow_entry_parse(name, 253, &e, NULL), 0);
    memcpy(name, "ab", 2);
    name[254] = '\0';
    name[253] = 'a';
    assert_int_equal(cs_netallow_entry_parse(name, 254, &e, NULL), -1);
    /* a NUL inside is refused */
    assert_int_equal(cs_netallow_entry_parse("a\0b", 3, &e, NULL), -1);
}

static void test_netallow_numeric_hosts(void **state)
{
    (void)state;
    /* every spelling a resolver reads as 127.0.0.1 (or another loopback), and its reading */
    static const struct {
        const char *host, *addr;
    } same[] = {
        {"127.0.0.1", "127.0.0.1"},        {"127.1", "127.0.0.1"},
        {"127.0.1", "127.0.0.1"},          {"2130706433", "127.0.0.1"},
        {"0x7f000001", "127.0.0.1"},       {"0x7f.0.0.1", "127.0.0.1"},
        {"0X7F.1", "127.0.0.1"},           {"0177.0.0.1", "127.0.0.1"},
        {"017700000001", "127.0.0.1"},     {"0177.1", "127.0.0.1"},
        {"000127.0.0.1", "87.0.0.1"},      {"0", "0.0.0.0"},
        {"4294967295", "255.255.255.255"}, {"0xa9fea9fe", "169.254.169.254"},
        {"2852039166", "169.254.169.254"}, {"0251.0376.0251.0376", "169.254.169.254"},
        {"1.2.65535", "1.2.255.255"},      {"::ffff:127.0.0.1", "127.0.0.1"},
        {"::ffff:7f00:1", "127.0.0.1"},    {"::1", "::1"},
    };
    for (size_t i = 0; i < sizeof same / sizeof *same; i++) {
        struct sockaddr_storage a = nx_addr(same[i].host), b = nx_addr(same[i].addr);
        if (!cs_netallow_addr_equal((struct sockaddr *)&a, (struct sockaddr *)&b))
            fail_msg("%s is not %s", same[i].host, same[i].addr);
    }
    static const char *const names[] = {"example.com", "localhost", "0x7f.example", "1e100.net",
                                        "deadbeef",    "0xg",       "a.b-c"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        struct sockaddr_storage ss;
        if (cs_netallow_host_numeric(names[i], &ss) != CS_NETALLOW_NAME)
            fail_msg("%s is not a name", names[i]);
    }
    static const char *const bad[] = {
        "1.2.3.4.5",  "256.0.0.1",   "1.2.3.256",  "08.1",        "099",    "0x",  "1.0x",
        "4294967296", "0x100000000", "1.16777216", "example.123", "a.0x1f", "1:2", "::g"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        struct sockaddr_storage ss;
        if (cs_netallow_host_numeric(bad[i], &ss) != CS_NETALLOW_BAD_NUMERIC)
            fail_msg("%s is not refused as a malformed number", bad[i]);
    }
}

static void test_netallow_classifier(void **state)
{
    (void)state;
    static const char *const internal[] = {"0.0.0.0",
                                           "0.1.2.3",
                                           "10.0.0.1",
                                           "10.255.255.255",
                                           "100.64.0.1",
                                           "100.127.255.255",
                                           "127.0.0.1",
                                           "127.255.255.255",
                                           "169.254.0.1",
                                           "169.254.169.254",
                                           "172.16.0.1",
                                           "172.31.255.255",
                                           "192.0.0.8",
                                           "192.168.0.1",
                                           "198.18.0.1",
                                           "198.19.255.255",
                                           "224.0.0.1",
                                           "239.255.255.250",
                                           "240.0.0.1",
                                           "255.255.255.255",
                                           "::",
                                           "::1",
                                           "::127.0.0.1",
                                           "::8.8.8.8",
                                           "::ffff:127.0.0.1",
                                           "::ffff:10.1.2.3",
                                           "::ffff:0:127.0.0.1",
                                           "64:ff9b::127.0.0.1",
                                           "64:ff9b::a9fe:a9fe",
                                           "64:ff9b:1::1",
                                           "2002:7f00:1::",
                                           "2002:a9fe:a9fe::1",
                                           "2002:c0a8:101::",
                                           "2001:0:4136:e378:8000:63bf:80ff:fffe",
                                           "2001:0:a00:1::1",
                                           "fe80::1",
                                           "febf::1",
                                           "fec0::1",
                                           "fc00::1",
                                           "fd00::2",
                                           "ff02::1",
                                           "ff0e::1",
                                           "100::1"};
    for (size_t i = 0; i < sizeof internal / sizeof *internal; i++) {
        struct sockaddr_storage ss = nx_addr(internal[i]);
        if (!cs_netallow_addr_internal((struct sockaddr *)&ss))
            fail_msg("%s is not classified internal", internal[i]);
    }
    static const char *const public[] = {
        "1.1.1.1",          "8.8.8.8",
        "9.255.255.255",    "11.0.0.0",
        "100.63.255.255",   "100.128.0.0",
        "126.255.255.255",  "128.0.0.0",
        "169.253.255.255",  "169.255.0.0",
        "172.15.255.255",   "172.32.0.0",
        "192.0.2.2",        "192.167.255.255",
        "192.169.0.0",      "198.17.255.255",
        "198.20.0.0",       "223.255.255.255",
        "2606:4700::1111",  "2001:4860:4860::8888",
        "64:ff9b::8.8.8.8", "2002:808:808::",
        "::ffff:1.1.1.1",   "2001:0:4136:e378:8000:63bf:f7f7:f7f7"};
    for (size_t i = 0; i < sizeof public / sizeof *public; i++) {
        struct sockaddr_storage ss = nx_addr(public[i]);
        if (cs_netallow_addr_internal((struct sockaddr *)&ss))
            fail_msg("%s is classified internal", public[i]);
    }
    struct sockaddr unknown = {.sa_family = AF_UNIX};
    assert_true(cs_netallow_addr_internal(&unknown));
}

static void test_netallow_rules(void **state)
{
    (void)state;
    struct sockaddr_storage own = nx_addr("192.0.2.2");
    struct cs_netallow_policy none = {.has_list = false, .own = &own, .n_own = 1};
    struct cs_netallow_policy empty = {.has_list = true, .own = &own, .n_own = 1};
    static const char *const spellings[] = {"127.0.0.1",
                                            "127.1",
                                            "2130706433",
                                            "0x7f000001",
                                            "0x7f.0.0.1",
                                            "0177.0.0.1",
                                            "017700000001",
                                            "::1",
                                            "::ffff:127.0.0.1",
                                            "::ffff:7f00:1",
                                            "64:ff9b::7f00:1",
                                            "2002:7f00:1::",
                                            "169.254.169.254",
                                            "0xa9fea9fe",
                                            "10.0.0.1",
                                            "192.168.1.1",
                                            "100.64.0.1",
                                            "0",
                                            "::",
                                            "224.0.0.1",
                                            "255.255.255.255",
                                            "fe80::1",
                                            "fc00::1",
                                            "192.0.2.2",
                                            "localhost",
                                            "a.localhost",
                                            "1.2.3.4.5"};
    const char *why;
    for (size_t i = 0; i < sizeof spellings / sizeof *spellings; i++) {
        why = NULL;
        if (cs_netallow_admit_host(&none, spellings[i], 80, &why))
            fail_msg("no list admits %s", spellings[i]);
        assert_non_null(why);
        if (cs_netallow_admit_host(&empty, spellings[i], 80, &why))
            fail_msg("[] admits %s", spellings[i]);
    }
    /* no list: public names and addresses; []: nothing */
    assert_true(cs_netallow_admit_host(&none, "example.com", 443, NULL));
    assert_true(cs_netallow_admit_host(&none, "1.1.1.1", 443, NULL));
    assert_false(cs_netallow_admit_host(&empty, "example.com", 443, &why));
    assert_string_equal(why, "network_allow is empty: no destination is admitted");
    struct sockaddr_storage pub = nx_addr("1.1.1.1"), lo = nx_addr("127.0.0.1");
    assert_true(cs_netallow_admit_addr(&none, (struct sockaddr *)&pub, 443, NULL));
    assert_false(cs_netallow_admit_addr(&empty, (struct sockaddr *)&pub, 443, NULL));
    assert_false(cs_netallow_admit_addr(&none, (struct sockaddr *)&own, 443, &why));
    assert_string_equal(why, "destination is an address of the host itself");

    /* a list: names by name, IP entries in any spelling, ports */
    struct cs_netallow_entry e[4];
    static const char *const list[] = {"localhost:8080", "127.0.0.1:8080", "*.example.org",
                                       "example.com"};
    for (size_t i = 0; i < 4; i++)
        assert_int_equal(cs_netallow_entry_parse(list[i], strlen(list[i]), &e[i], NULL), 0);
    struct cs_netallow_policy lp = {
        .has_list = true, .entries = e, .n = 4, .own = &own, .n_own = 1};
    assert_true(cs_netallow_admit_host(&lp, "localhost", 8080, NULL));
    assert_false(cs_netallow_admit_host(&lp, "localhost", 8081, NULL));
    assert_true(cs_netallow_admit_host(&lp, "0x7f.1", 8080, NULL));
    assert_true(cs_netallow_admit_host(&lp, "::ffff:127.0.0.1", 8080, NULL));
    assert_false(cs_netallow_admit_host(&lp, "127.0.0.2", 8080, NULL));
    assert_true(cs_netallow_admit_host(&lp, "a.example.org", 1, NULL));
    assert_false(cs_netallow_admit_host(&lp, "example.org", 1, NULL));
    assert_false(cs_netallow_admit_host(&lp, "badexample.org", 1, NULL));
    assert_true(cs_netallow_admit_host(&lp, "example.com", 1, NULL));
    assert_false(cs_netallow_admit_host(&lp, "1.2.3.4.5", 8080, NULL));
    /* the resolved-address rule: internal only when an IP entry lists it (port included) */
    assert_true(cs_netallow_admit_addr(&lp, (struct sockaddr *)&lo, 8080, NULL));
    assert_false(cs_netallow_admit_addr(&lp, (struct sockaddr *)&lo, 80, &why));
    assert_string_equal(why,
                        "destination is a loopback, link-local, private or other internal address");
    struct sockaddr_storage lo6 = nx_addr("::1"), mapped = nx_addr("::ffff:127.0.0.1");
    assert_false(cs_netallow_admit_addr(&lp, (struct sockaddr *)&lo6, 8080, NULL));
    assert_true(cs_netallow_admit_addr(&lp, (struct sockaddr *)&mapped, 8080, NULL));
    assert_true(cs_netallow_admit_addr(&lp, (struct sockaddr *)&pub, 1, NULL));
    assert_false(cs_netallow_admit_addr(&lp, (struct sockaddr *)&own, 1, NULL));

    /* the authority parser the proxy's request parser uses */
    char host[CS_NETALLOW_HOST_MAX + 1];
    uint16_t port = 0;
    assert_int_equal(cs_netallow_authority_parse("[::1]:8080", 10, host, &port, 0, true), 0);
    assert_string_equal(host, "::1");
    assert_int_equal(port, 8080);
    assert_int_equal(cs_netallow_authority_parse("EX.com.", 7, host, &port, 80, false), 0);
    assert_string_equal(host, "ex.com");
    assert_int_equal(port, 80);
    assert_int_equal(cs_netallow_authority_parse("ex.com", 6, host, &port, 0, true), -1);
    assert_int_equal(cs_netallow_authority_parse("[1.2.3.4]:1", 11, host, &port, 0, true), -1);
    assert_int_equal(cs_netallow_authority_parse("a b:1", 5, host, &port, 0, true), -1);
}

/* The parse budget's pre-pass (M8): exact counts for a table of shapes, depth and the refusals. */
static void test_json_budget_shapes(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        size_t values, containers, members, depth;
        int rc; /* with the default limits */
        const char *id;
    } cases[] = {
        {"", 0, 0, 0, 0, 0, NULL},
        {"1", 1, 0, 0, 0, 0, NULL},
        {"[]", 1, 1, 0, 1, 0, NULL},
        {"[[],[],[]]", 4, 4, 0, 2, 0, NULL},
        {"{}", 1, 1, 0, 1, 0, NULL},
        {"{\"a\":1,\"b\":[true,false,null],\"c\":{\"d\":\"e\"}}", 8, 3, 4, 2, 0, NULL},
        {"{\"jsonrpc\":\"2.0\",\"id\":42,\"method\":\"ping\"}", 4, 1, 3, 1, 0, "42"},
        {"{\"id\":\"x y\",\"p\":{\"id\":7}}", 4, 2, 3, 2, 0, "\"x y\""},
        {"{\"id\":[1]}", 3, 2, 1, 2, 0, NULL},
        {"[\"a\\\"b\",\"\\u00e9\"]", 3, 1, 0, 1, 0, NULL},
        {"[1,2.5e3,-0,\"s\"]", 5, 1, 0, 1, 0, NULL},
        {"[\"unterminated", 2, 1, 0, 1, 0, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        struct cs_json_budget b = {0};
        char why[160];
        const char *t = cases[i].text;
        int rc = cs_json_budget_check(t, strlen(t), &b, why, sizeof why);
        assert_int_equal(rc, cases[i].rc);
        assert_int_equal(b.values, cases[i].values);
        assert_int_equal(b.containers, cases[i].containers);
        assert_int_equal(b.members, cases[i].members);
        assert_int_equal(b.depth, cases[i].depth);
        if (cases[i].id) {
            assert_int_equal(b.id_len, strlen(cases[i].id));
            assert_memory_equal(t + b.id_off, cases[i].id, b.id_len);
        } else {
            assert_int_equal(b.id_len, 0);
        }
    }
}

/* Strings end where jansson says, whatever side of an 8-byte word the quote or an escape falls
 * on (the pre-pass reads strings a word at a time); escapes and a watched key are reported. */
static void test_json_budget_string_ends(void **state)
{
    (void)state;
    char t[96], body[40];
    for (size_t len = 0; len < 24; len++) {
        for (size_t esc = 0; esc <= len + 1; esc++) {
            /* A string of len bytes, with an escaped quote at esc when esc < len. */
            size_t k = 0;
            for (size_t i = 0; i < len; i++) {
                if (i == esc) {
                    body[k++] = '\\';
                    body[k++] = '"';
                } else {
                    body[k++] = (char)('a' + i % 26);
                }
            }
            int n = snprintf(t, sizeof t, "{\"id\":\"%.*s\",\"k\":[1]}", (int)k, body);
            struct cs_json_budget b = {.watch = "k"};
            char why[160];
            assert_int_equal(cs_json_budget_check(t, (size_t)n, &b, why, sizeof why), 0);
            json_error_t err;
            json_t *j = json_loadb(t, (size_t)n, 0, &err);
            assert_non_null(j);
            assert_int_equal(b.values, 4); /* the object, the id, the array, the 1 */
            assert_int_equal(b.members, 2);
            assert_int_equal(b.id_off, 6);
            assert_int_equal(b.id_len, k + 2);
            assert_int_equal(b.escapes, esc < len);
            assert_true(b.watch_seen);
            json_decref(j);
        }
    }
    /* A backslash as the last byte, or escaping the last byte: the string runs to the end. */
    static const char *const open_ended[] = {"[\"abc\\", "[\"abcdefghijkl\\", "[\"abcdefgh\\\""};
    for (size_t i = 0; i < sizeof open_ended / sizeof *open_ended; i++) {
        struct cs_json_budget b = {0};
        char why[160];
        assert_int_equal(
            cs_json_budget_check(open_ended[i], strlen(open_ended[i]), &b, why, sizeof why), 0);
        assert_int_equal(b.values, 2);
        assert_true(b.escapes);
    }
    /* The top-level "method" member's token, as the id's: only at the top level, last one wins. */
    static const struct {
        const char *text, *method;
    } methods[] = {
        {"{\"jsonrpc\":\"2.0\",\"method\":\"server/discover\",\"id\":1}", "\"server/discover\""},
        {"{\"method\":5}", "5"},
        {"{\"p\":{\"method\":\"x\"}}", NULL},
        {"{\"method\":\"a\",\"method\":\"b\"}", "\"b\""},
        {"{\"method\":{\"a\":1}}", NULL},
        {"[\"method\",\"x\"]", NULL},
    };
    for (size_t i = 0; i < sizeof methods / sizeof *methods; i++) {
        struct cs_json_budget b = {0};
        char why[160];
        const char *mt = methods[i].text;
        assert_int_equal(cs_json_budget_check(mt, strlen(mt), &b, why, sizeof why), 0);
        if (methods[i].method) {
            assert_int_equal(b.method_len, strlen(methods[i].method));
            assert_memory_equal(mt + b.method_off, methods[i].method, b.method_len);
        } else {
            assert_int_equal(b.method_len, 0);
        }
    }
    /* The watched key is a key at any depth, never a value, and only as spelt. */
    static const struct {
        const char *text;
        bool seen;
    } watch[] = {
        {"{\"_meta\":{}}", true},
        {"{\"p\":{\"q\":[{\"_meta\":1}]}}", true},
        {"{\"p\":\"_meta\"}", false},
        {"[\"_meta\"]", false},
        {"{\"_met\":1,\"_metaa\":2}", false},
        {"{\"\\u005fmeta\":1}", false}, /* escaped: the caller sees escapes instead */
    };
    for (size_t i = 0; i < sizeof watch / sizeof *watch; i++) {
        struct cs_json_budget b = {.watch = "_meta"};
        char why[160];
        assert_int_equal(
            cs_json_budget_check(watch[i].text, strlen(watch[i].text), &b, why, sizeof why), 0);
        assert_int_equal(b.watch_seen, watch[i].seen);
    }
}

static void test_json_budget_refusals(void **state)
{
    (void)state;
    char why[160];
    /* Depth: 128 nested arrays pass, 129 do not. */
    char deep[2 * 129 + 1];
    for (size_t d = 128; d <= 129; d++) {
        memset(deep, '[', d);
        memset(deep + d, ']', d);
        struct cs_json_budget b = {0};
        int rc = cs_json_budget_check(deep, 2 * d, &b, why, sizeof why);
        assert_int_equal(b.depth, d);
        assert_int_equal(rc, d <= CS_JSON_BUDGET_DEPTH ? 0 : -1);
        if (rc)
            assert_non_null(strstr(why, "nested 129 deep"));
    }
    /* 2 M empty arrays (6 MB of text) would be 300 MB of tree: refused, counted to the end, and
     * the id found after the bulk. */
    size_t n = 2000000, len = 0;
    char *t = malloc(3 * n + 64);
    assert_non_null(t);
    len += (size_t)sprintf(t, "{\"a\":[");
    for (size_t i = 0; i < n; i++) {
        memcpy(t + len, i ? ",[]" : "[]", i ? 3 : 2);
        len += i ? 3 : 2;
    }
    len += (size_t)sprintf(t + len, "],\"id\":\"late\"}");
    struct cs_json_budget b = {0};
    assert_int_equal(cs_json_budget_check(t, len, &b, why, sizeof why), -1);
    assert_int_equal(b.values, n + 3);
    assert_int_equal(b.members, 2);
    assert_int_equal(b.id_len, 6);
    assert_memory_equal(t + b.id_off, "\"late\"", 6);
    assert_non_null(strstr(why, "MiB"));
    json_error_t err;
    assert_null(cs_json_loadb_budget(t, len, 0, &err));
    assert_string_equal(err.source, "<budget>");
    /* One big string of the same size is well within the budget. */
    memset(t, 'a', len);
    t[0] = t[len - 1] = '"';
    b = (struct cs_json_budget){0};
    assert_int_equal(cs_json_budget_check(t, len, &b, why, sizeof why), 0);
    json_t *j = cs_json_loadb_budget(t, len, JSON_DECODE_ANY, &err);
    assert_true(json_is_string(j));
    json_decref(j);
    /* An explicit smaller budget refuses it. */
    b = (struct cs_json_budget){.max_bytes = len};
    assert_int_equal(cs_json_budget_check(t, len, &b, why, sizeof why), -1);
    free(t);
}

/* ---- the runner wire's fast JSON path (base_json_fast.c) ---- */

/* cs_json_loadb_fast answers text as json_loadb does: the same tree (dumped byte for byte) or
 * the same refusal and error text. Returns whether the fast path itself built it. */
static bool expect_as_jansson(const char *text, size_t n, size_t flags)
{
    json_error_t want_err, got_err;
    json_t *want = json_loadb(text, n, flags, &want_err);
    json_t *fast = cs_json_loadb_yajl(text, n, flags);
    json_t *got = cs_json_loadb_fast(text, n, flags, &got_err);
    if (fast && !want)
        fail_msg("the fast path took a text jansson refuses: %.*s", (int)n, text);
    if (!got != !want)
        fail_msg("verdicts differ on %.*s", (int)n, text);
    if (want) {
        char *a = json_dumps(want, JSON_ENCODE_ANY | JSON_COMPACT);
        char *b = json_dumps(got, JSON_ENCODE_ANY | JSON_COMPACT);
        char *c = fast ? json_dumps(fast, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
        assert_string_equal(a, b);
        if (c)
            assert_string_equal(a, c);
        assert_int_equal(got_err.position, want_err.position);
        free(a);
        free(b);
        free(c);
    } else {
        assert_string_equal(got_err.text, want_err.text);
        assert_int_equal(got_err.position, want_err.position);
    }
    bool took = fast != NULL;
    json_decref(want);
    json_decref(got);
    json_decref(fast);
    return took;
}

static size_t fast_files, fast_taken;

static void fast_case(const struct csw_toplevel *tl, const char *path, json_t *j)
{
    (void)j;
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static char text[1 << 20];
    size_t n = fread(text, 1, sizeof text, f);
    fclose(f);
    bool took = expect_as_jansson(text, n, JSON_ALLOW_NUL);
    fast_files++;
    /* Every valid wire message our encoders could write is taken by the fast path (the hop's
     * speed depends on it); the ones with \u escapes or reals go to jansson by design. */
    if (strcmp(tl->name, "runner_wire") == 0 && strstr(path, "/valid/") && !strstr(text, "\\u") &&
        !strpbrk(text, ".eE"))
        fail_msg("%s: the fast path declined a wire message", path);
    fast_taken += took;
}

static void test_json_fast_matches_jansson(void **state)
{
    (void)state;
    /* Every golden text of every schema, valid and invalid. */
    for (size_t i = 0; i < csw_toplevel_count; i++) {
        for_each_case(&csw_toplevel[i], "valid", fast_case);
        for_each_case(&csw_toplevel[i], "invalid", fast_case);
    }
    assert_true(fast_files > 100);
    assert_true(fast_taken > fast_files / 2);

    /* What the fast path leaves to jansson, and jansson's answer stands (tree or error). */
    static const struct {
        const char *text;
        size_t flags;
        bool fast; /* the fast path builds it */
    } cases[] = {
        {"{\"a\":[1,-2,true,false,null,\"x\\n\\\"\"],\"b\":{}}", 0, true},
        {"{\"a\":1,\"a\":2}", 0, true}, /* the last one wins, in the first one's place */
        {"[9223372036854775807,-9223372036854775808]", 0, true},
        {"{\"k\xc3\xa9y\":\"\xe2\x82\xac\xf0\x9f\x98\x80\"}", 0, true},
        {"[9223372036854775808]", 0, false}, /* too big integer */
        {"[1.5,1e2]", 0, false},             /* reals: jansson's */
        {"[\"\\ud83d\\ude00\"]", 0, false},  /* any \u: jansson's */
        {"[\"\\ud83d\"]", 0, false},         /* a lone surrogate: refused */
        {"[\"x\\u0000y\"]", 0, false},       /* NUL without JSON_ALLOW_NUL: refused */
        {"[\"x\\u0000y\"]", JSON_ALLOW_NUL, false},
        {"[\"\xc0\x80\"]", 0, false},      /* overlong UTF-8: refused */
        {"[\"\xed\xa0\x80\"]", 0, false},  /* a surrogate in UTF-8: refused */
        {"{\"\xff\":1}", 0, false},        /* a key that is not UTF-8: refused */
        {"[\"a\x01\"]", 0, false},         /* a control character: refused */
        {"\"x\"", JSON_DECODE_ANY, false}, /* scalar texts: jansson's */
        {"\"x\"", 0, false},
        {"{}\"abc", 0, false}, /* yajl 2.1 takes this as complete */
        {"{}\"ab]", 0, false},
        {"{} tru", 0, false},
        {"{}{}", 0, false},
        {"\f{}", 0, false}, /* a form feed is not JSON whitespace */
        {"[1,\v2]", 0, false},
        {"[/*c*/1]", 0, false},
        {"[01]", 0, false},
        {"{\"a\":", 0, false},
        {" \n\t{ \"a\" : [ ] }\r\n ", 0, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bool took = expect_as_jansson(cases[i].text, strlen(cases[i].text), cases[i].flags);
        if (took != cases[i].fast)
            fail_msg("case %zu (%s): fast path %s", i, cases[i].text,
                     took ? "took it" : "declined");
    }
    /* Deeper than the fast path follows: jansson's, same tree. */
    char deep[2 * 100 + 1];
    memset(deep, '[', 100);
    memset(deep + 100, ']', 100);
    assert_false(expect_as_jansson(deep, 200, 0));

    /* A worker's answer to a 1 KiB read, the file's lines in one string: the fast path. */
    char frame[2048];
    int len =
        snprintf(frame, sizeof frame,
                 "{\"protocol\":7,\"kind\":\"response\",\"request_id\":\"rrpc-9\",\"ok\":true,"
                 "\"result\":{\"type\":\"read\",\"data\":{\"content\":\"");
    for (int l = 0; l < 16; l++)
        len += snprintf(frame + len, sizeof frame - (size_t)len, "%063d\\n", l);
    len += snprintf(frame + len, sizeof frame - (size_t)len, "\",\"size\":1024}}}");
    assert_true(expect_as_jansson(frame, (size_t)len, JSON_ALLOW_NUL));

    /* cs_json_loadb_peer: the parse budget first, as cs_json_loadb_budget. */
    json_error_t err;
    json_t *ok = cs_json_loadb_peer(frame, (size_t)len, JSON_ALLOW_NUL, &err);
    assert_non_null(ok);
    json_decref(ok);
    size_t big = 3u * 1000000u + 2u;
    char *t = malloc(big);
    assert_non_null(t);
    t[0] = '[';
    for (size_t i = 0; i < 1000000; i++)
        memcpy(t + 1 + 3 * i, i ? ",[]" : "[] ", 3);
    t[big - 1] = ']';
    assert_null(cs_json_loadb_peer(t, big, 0, &err));
    assert_string_equal(err.source, "<budget>");
    free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_schema_round_trips),
        cmocka_unit_test(test_hand_built_round_trip),
        cmocka_unit_test(test_integers_follow_json_schema),
        cmocka_unit_test(test_rejections_name_the_pointer),
        cmocka_unit_test(test_unknown_properties_are_ignored),
        cmocka_unit_test(test_long_pointer_is_truncated_safely),
        cmocka_unit_test(test_encoder_checks_the_schema),
        cmocka_unit_test(test_text_encoder_matches_jansson),
        cmocka_unit_test(test_open_values),
        cmocka_unit_test(test_text_encoder_fail_nth_allocation),
        cmocka_unit_test(test_pointers_are_printable_utf8),
        cmocka_unit_test(test_fail_nth_allocation),
        cmocka_unit_test(test_error_catalogue),
        cmocka_unit_test(test_tool_table),
        cmocka_unit_test(test_loop),
        cmocka_unit_test(test_loop_busy_poll),
        cmocka_unit_test(test_log_levels_and_redaction),
        cmocka_unit_test(test_log_line_is_janssons),
        cmocka_unit_test(test_json_quote_matches_jansson),
        cmocka_unit_test(test_json_text_big_strings),
        cmocka_unit_test(test_json_text_matches_jansson),
        cmocka_unit_test(test_json_budget_shapes),
        cmocka_unit_test(test_json_budget_string_ends),
        cmocka_unit_test(test_json_budget_refusals),
        cmocka_unit_test(test_json_fast_matches_jansson),
        cmocka_unit_test(test_json_clamp_numbers),
        cmocka_unit_test(test_netallow_entries),
        cmocka_unit_test(test_netallow_numeric_hosts),
        cmocka_unit_test(test_netallow_classifier),
        cmocka_unit_test(test_netallow_rules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
