/*
 * Unit tests of the HTTP request guard (src/http/http_guard.c): Host, Origin, bearer token,
 * the single-valued headers, Content-Type and Content-Length, each on its accepted and refused
 * shapes, and the order of cs_http_guard_check's and cs_http_guard_body's verdicts. The tables
 * spell each header the ways a client (or an attacker) may: IPv6 brackets, ports, case, a trailing
 * dot, userinfo, empty against missing, repeated headers, media type parameters, leading zeros
 * (docs/http.md, "Request handling").
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "http_guard.h"

static const struct cs_http_guard cfg = {"myhost.example", 8787, NULL, 0};
static const struct cs_http_guard cfg_token = {"[::1]", 9000, "s3cret", 6};

static bool host(const struct cs_http_guard *g, const char *v)
{
    return cs_http_host_ok(g, v, strlen(v));
}

static bool origin(const struct cs_http_guard *g, const char *v)
{
    return cs_http_origin_ok(g, v, strlen(v));
}

static void host_checks(void **state)
{
    (void)state;
    static const char *const good[] = {
        "localhost", "LOCALHOST:1", "127.0.0.1",      "127.0.0.1:8787",
        "[::1]",     "[::1]:65535", "myhost.example", "MyHost.Example:8787"};
    static const char *const bad[] = {"",
                                      "evil.example",
                                      "myhost.example:8788",
                                      "localhost:",
                                      "localhost:123456",
                                      "localhost:65536",
                                      "localhost:8x",
                                      "user@localhost",
                                      "localhost/x",
                                      "[::1",
                                      "[::2]",
                                      "127.0.0.1.evil.example",
                                      ":8787",
                                      "[]"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        assert_true(host(&cfg, good[i]));
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        assert_false(host(&cfg, bad[i]));
    assert_false(cs_http_host_ok(&cfg, "localhost\0x", 11)); /* the length is the value's */
    assert_false(cs_http_host_ok(&cfg, NULL, 0));
}

static void origin_checks(void **state)
{
    (void)state;
    assert_true(origin(&cfg, "http://localhost:3000"));
    assert_true(origin(&cfg, "HTTPS://[::1]"));
    assert_true(origin(&cfg, "http://myhost.example:1")); /* any port for the origin */
    assert_false(origin(&cfg, "http://evil.example"));
    assert_false(origin(&cfg, "null"));
    assert_false(origin(&cfg, "http://"));
    assert_false(origin(&cfg, "ftp://localhost"));
    assert_false(origin(&cfg, "http://localhost/"));
    assert_false(origin(&cfg, "http://localhost.evil.example"));
}

static void check_order_and_token(void **state)
{
    (void)state;
    struct cs_http_guard_header h1 = {1, "localhost", 9}, h0 = {0, NULL, 0};
    struct cs_http_guard_header h2 = {2, "localhost", 9}, hbad = {1, "evil", 4};
    struct cs_http_guard_header o_bad = {1, "http://evil", 11}, o_two = {2, "http://[::1]", 12};
    struct cs_http_guard_header a_ok = {1, "bearer s3cret", 13}, a_bad = {1, "Bearer s3cre", 12};
    struct cs_http_guard_header a_two = {2, "Bearer s3cret", 13}, a_basic = {1, "Basic s3cret", 12};

    assert_int_equal(cs_http_guard_check(&cfg, &h1, &h0, &h0), CS_HTTP_GUARD_OK);
    assert_int_equal(cs_http_guard_check(&cfg, &h0, &h0, &h0), CS_HTTP_GUARD_BAD_HOST);
    assert_int_equal(cs_http_guard_check(&cfg, &h2, &h0, &h0), CS_HTTP_GUARD_BAD_HOST);
    assert_int_equal(cs_http_guard_check(&cfg, &hbad, &o_bad, &h0), CS_HTTP_GUARD_BAD_HOST);
    assert_int_equal(cs_http_guard_check(&cfg, &h1, &o_bad, &h0), CS_HTTP_GUARD_BAD_ORIGIN);
    assert_int_equal(cs_http_guard_check(&cfg, &h1, &o_two, &h0), CS_HTTP_GUARD_BAD_ORIGIN);
    /* Host and Origin come before the token. */
    assert_int_equal(cs_http_guard_check(&cfg_token, &hbad, &h0, &h0), CS_HTTP_GUARD_BAD_HOST);
    assert_int_equal(cs_http_guard_check(&cfg_token, &h1, &o_bad, &a_bad),
                     CS_HTTP_GUARD_BAD_ORIGIN);
    assert_int_equal(cs_http_guard_check(&cfg_token, &h1, &h0, &a_ok), CS_HTTP_GUARD_OK);
    assert_int_equal(cs_http_guard_check(&cfg_token, &h1, &h0, &h0), CS_HTTP_GUARD_BAD_TOKEN);
    assert_int_equal(cs_http_guard_check(&cfg_token, &h1, &h0, &a_bad), CS_HTTP_GUARD_BAD_TOKEN);
    assert_int_equal(cs_http_guard_check(&cfg_token, &h1, &h0, &a_two), CS_HTTP_GUARD_BAD_TOKEN);
    assert_int_equal(cs_http_guard_check(&cfg_token, &h1, &h0, &a_basic), CS_HTTP_GUARD_BAD_TOKEN);
    struct cs_http_guard_header a_long = {1, "Bearer s3cretX", 14};
    assert_int_equal(cs_http_guard_check(&cfg_token, &h1, &h0, &a_long), CS_HTTP_GUARD_BAD_TOKEN);
}

static void content_type(void **state)
{
    (void)state;
    static const char *const good[] = {"application/json", " application/json",
                                       "Application/JSON; charset=utf-8", "application/json \t",
                                       "application/json;"};
    static const char *const bad[] = {"", "text/plain", "application/jsonx", "application/json x",
                                      "application/js"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        assert_true(cs_http_content_type_ok(good[i], strlen(good[i])));
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        assert_false(cs_http_content_type_ok(bad[i], strlen(bad[i])));
}

static void accept_event_stream(void **state)
{
    (void)state;
    static const char *const yes[] = {"text/event-stream",
                                      "application/json, text/event-stream",
                                      " application/json ,\tTEXT/Event-Stream ",
                                      "text/event-stream;q=0.5",
                                      "text/event-stream ; charset=utf-8; q=1",
                                      "text/event-stream;q=0.01"};
    static const char *const no[] = {"",
                                     "application/json",
                                     "*/*",
                                     "text/*",
                                     "text/event-streams",
                                     "text/event-stream;q=0",
                                     "application/json, text/event-stream; q=0.000",
                                     "xtext/event-stream",
                                     "text/event-stream x"};
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++)
        assert_true(cs_http_accepts_event_stream(yes[i], strlen(yes[i])));
    for (size_t i = 0; i < sizeof no / sizeof *no; i++)
        assert_false(cs_http_accepts_event_stream(no[i], strlen(no[i])));
    assert_false(cs_http_accepts_event_stream(NULL, 0));
    /* Nothing is read past the length. */
    assert_false(cs_http_accepts_event_stream("text/event-stream", 16));
}

static void content_length(void **state)
{
    (void)state;
    uint64_t len = 77;
    assert_int_equal(cs_http_content_length("0", 1, 10, &len), CS_HTTP_LENGTH_OK);
    assert_int_equal(len, 0);
    assert_int_equal(cs_http_content_length("0010", 4, 10, &len), CS_HTTP_LENGTH_OK);
    assert_int_equal(len, 10);
    len = 77;
    assert_int_equal(cs_http_content_length("11", 2, 10, &len), CS_HTTP_LENGTH_OVER);
    assert_int_equal(len, 77); /* written on success only */
    const char *huge = "99999999999999999999999999999999999999999999";
    assert_int_equal(cs_http_content_length(huge, strlen(huge), UINT64_MAX, &len),
                     CS_HTTP_LENGTH_OVER);
    assert_int_equal(cs_http_content_length("18446744073709551615", 20, UINT64_MAX, &len),
                     CS_HTTP_LENGTH_OK);
    assert_true(len == UINT64_MAX);
    assert_int_equal(cs_http_content_length("18446744073709551616", 20, UINT64_MAX, &len),
                     CS_HTTP_LENGTH_OVER);
    assert_int_equal(cs_http_content_length("", 0, 10, &len), CS_HTTP_LENGTH_MALFORMED);
    assert_int_equal(cs_http_content_length("-1", 2, 10, &len), CS_HTTP_LENGTH_MALFORMED);
    assert_int_equal(cs_http_content_length("1 ", 2, 10, &len), CS_HTTP_LENGTH_MALFORMED);
    assert_int_equal(cs_http_content_length("99x", 3, 10, &len), CS_HTTP_LENGTH_MALFORMED);
}

static void ct_equal(void **state)
{
    (void)state;
    assert_true(cs_http_ct_equal("abc", 3, "abc", 3));
    assert_false(cs_http_ct_equal("abc", 3, "abd", 3));
    assert_false(cs_http_ct_equal("abc", 3, "abc\0", 4));
    assert_true(cs_http_ct_equal("", 0, "", 0));
}

/* ---- tables ---- */

#define ABSENT ((const char *)0)
static const char nul_host[] = "localhost\0.evil.example";

/* One header as the request carries it: count, and a value taken whole (len 0: strlen). */
struct spelling {
    unsigned count;
    const char *value;
    size_t len;
};

static struct cs_http_guard_header as_header(const struct spelling *sp)
{
    struct cs_http_guard_header h = {sp->count, sp->value, sp->len};
    if (sp->value && !sp->len)
        h.len = strlen(sp->value);
    return h;
}

struct host_case {
    const struct cs_http_guard *g;
    const char *value;
    bool ok;
};

static const struct cs_http_guard g_name = {"myhost.example", 8787, NULL, 0};
static const struct cs_http_guard g_v6 = {"[fe80::1]", 443, NULL, 0};

static const struct host_case host_table[] = {
    /* loopback names, any port or none, any case */
    {&g_name, "localhost", true},
    {&g_name, "LOCALHOST", true},
    {&g_name, "LocalHost:8787", true},
    {&g_name, "localhost:1", true},
    {&g_name, "localhost:0", true},
    {&g_name, "localhost:65535", true},
    {&g_name, "127.0.0.1", true},
    {&g_name, "127.0.0.1:80", true},
    {&g_name, "[::1]", true},
    {&g_name, "[::1]:8787", true},
    {&g_v6, "[::1]:1", true},
    /* the configured host, alone or with the bound port */
    {&g_name, "myhost.example", true},
    {&g_name, "MYHOST.EXAMPLE:8787", true},
    {&g_name, "myhost.example:08787", true}, /* the same port number */
    {&g_v6, "[fe80::1]", true},
    {&g_v6, "[FE80::1]:443", true},
    /* another port for the configured host */
    {&g_name, "myhost.example:8788", false},
    {&g_name, "myhost.example:80", false},
    {&g_v6, "[fe80::1]:444", false},
    /* other names, other spellings of loopback */
    {&g_name, "evil.example", false},
    {&g_name, "127.0.0.2", false},
    {&g_name, "127.1", false},
    {&g_name, "2130706433", false},
    {&g_name, "[0:0:0:0:0:0:0:1]", false},
    {&g_name, "[::ffff:127.0.0.1]", false},
    {&g_name, "::1", false},
    {&g_name, "[fe80::1]", false},
    {&g_v6, "fe80::1", false},
    {&g_name, "127.0.0.1.evil.example", false},
    {&g_name, "localhost.evil.example", false},
    /* a trailing dot is another name */
    {&g_name, "localhost.", false},
    {&g_name, "LOCALHOST.:80", false},
    {&g_name, "myhost.example.", false},
    {&g_name, "myhost.example.:8787", false},
    /* userinfo has no place in Host */
    {&g_name, "user@localhost", false},
    {&g_name, "user:pw@localhost", false},
    {&g_name, "localhost@evil.example", false},
    {&g_name, "[::1]@evil.example", false},
    /* malformed ports */
    {&g_name, "localhost:", false},
    {&g_name, "localhost:65536", false},
    {&g_name, "localhost:123456", false},
    {&g_name, "localhost:-1", false},
    {&g_name, "localhost:+80", false},
    {&g_name, "localhost: 80", false},
    {&g_name, "localhost:80:80", false},
    {&g_name, "localhost:8x", false},
    {&g_name, ":8787", false},
    /* malformed brackets */
    {&g_name, "[::1", false},
    {&g_name, "[::1]:", false},
    {&g_name, "[::1]x", false},
    {&g_name, "[::1]]", false},
    {&g_name, "[]", false},
    {&g_name, "[localhost]", false},
    /* paths, lists, blanks: nothing but the authority */
    {&g_name, "localhost/x", false},
    {&g_name, "localhost?x", false},
    {&g_name, "localhost,evil.example", false},
    {&g_name, "localhost, localhost", false},
    {&g_name, " localhost", false},
    {&g_name, "localhost ", false},
    {&g_name, "", false},
};

static void host_table_test(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof host_table / sizeof *host_table; i++) {
        const struct host_case *c = &host_table[i];
        if (cs_http_host_ok(c->g, c->value, strlen(c->value)) != c->ok)
            fail_msg("Host \"%s\" (configured %s:%u): want %s", c->value, c->g->host, c->g->port,
                     c->ok ? "accepted" : "refused");
        /* The same value as the one Host header of a request: the whole check agrees. */
        struct cs_http_guard_header h = {1, c->value, strlen(c->value)}, none = {0, NULL, 0};
        assert_int_equal(cs_http_guard_check(c->g, &h, &none, &none),
                         c->ok ? CS_HTTP_GUARD_OK : CS_HTTP_GUARD_BAD_HOST);
    }
    /* A NUL byte inside the value: the length is the value's, and such a value is bad. */
    assert_false(cs_http_host_ok(&g_name, nul_host, sizeof nul_host - 1));
}

static const struct host_case origin_table[] = {
    {&g_name, "http://localhost", true},
    {&g_name, "http://localhost:3000", true},
    {&g_name, "HTTP://LOCALHOST", true},
    {&g_name, "https://127.0.0.1:8443", true},
    {&g_name, "http://[::1]", true},
    {&g_name, "https://[::1]:1", true},
    {&g_name, "http://myhost.example", true},
    {&g_name, "http://myhost.example:9999", true}, /* any port for an origin */
    {&g_name, "Http://MyHost.Example", true},
    {&g_v6, "https://[fe80::1]", true},
    {&g_v6, "https://[fe80::1]:8443", true},
    {&g_name, "", false},
    {&g_name, "null", false},
    {&g_name, "localhost", false},
    {&g_name, "http://", false},
    {&g_name, "https://", false},
    {&g_name, "http:/localhost", false},
    {&g_name, "http//localhost", false},
    {&g_name, "ws://localhost", false},
    {&g_name, "file://", false},
    {&g_name, "ftp://localhost", false},
    {&g_name, "http://localhost/", false},
    {&g_name, "http://localhost:3000/", false},
    {&g_name, "http://localhost.", false},
    {&g_name, "http://localhost.:3000", false},
    {&g_name, "http://user@localhost", false},
    {&g_name, "http://localhost@evil.example", false},
    {&g_name, "http://evil.example", false},
    {&g_name, "http://localhost.evil.example", false},
    {&g_name, "http://127.0.0.1.evil.example", false},
    {&g_name, "http://localhost:", false},
    {&g_name, "http://localhost:99999", false},
    {&g_name, "http://[::1", false},
    {&g_name, "http://[::1]x", false},
    {&g_name, "http://[fe80::1]", false},
    {&g_name, " http://localhost", false},
    {&g_name, "http://localhost ", false},
    {&g_name, "http://localhost, http://evil.example", false},
    {&g_name, "http://localhost http://evil.example", false},
};

static void origin_table_test(void **state)
{
    (void)state;
    struct cs_http_guard_header host = {1, "localhost", 9}, none = {0, NULL, 0};
    for (size_t i = 0; i < sizeof origin_table / sizeof *origin_table; i++) {
        const struct host_case *c = &origin_table[i];
        if (cs_http_origin_ok(c->g, c->value, strlen(c->value)) != c->ok)
            fail_msg("Origin \"%s\" (configured %s): want %s", c->value, c->g->host,
                     c->ok ? "accepted" : "refused");
        struct cs_http_guard_header o = {1, c->value, strlen(c->value)};
        assert_int_equal(cs_http_guard_check(c->g, &host, &o, &none),
                         c->ok ? CS_HTTP_GUARD_OK : CS_HTTP_GUARD_BAD_ORIGIN);
    }
}

/* Missing, empty, repeated and NUL-holding Host and Origin headers, as whole requests. */
static void header_presence_table(void **state)
{
    (void)state;
    static const struct {
        struct spelling host, origin;
        enum cs_http_guard_verdict want;
    } table[] = {
        {{1, "localhost", 0}, {0, ABSENT, 0}, CS_HTTP_GUARD_OK},
        {{0, ABSENT, 0}, {0, ABSENT, 0}, CS_HTTP_GUARD_BAD_HOST},      /* missing Host */
        {{1, "", 0}, {0, ABSENT, 0}, CS_HTTP_GUARD_BAD_HOST},          /* empty Host */
        {{1, ABSENT, 0}, {0, ABSENT, 0}, CS_HTTP_GUARD_BAD_HOST},      /* Host holding a NUL */
        {{2, "localhost", 0}, {0, ABSENT, 0}, CS_HTTP_GUARD_BAD_HOST}, /* two Hosts, both good */
        {{3, "localhost", 0}, {0, ABSENT, 0}, CS_HTTP_GUARD_BAD_HOST},
        {{1, "localhost", 0}, {1, "http://localhost", 0}, CS_HTTP_GUARD_OK},
        {{1, "localhost", 0}, {1, "", 0}, CS_HTTP_GUARD_BAD_ORIGIN},     /* empty Origin */
        {{1, "localhost", 0}, {1, ABSENT, 0}, CS_HTTP_GUARD_BAD_ORIGIN}, /* Origin with a NUL */
        {{1, "localhost", 0}, {2, "http://localhost", 0}, CS_HTTP_GUARD_BAD_ORIGIN},
        /* Host is judged first, whatever Origin says. */
        {{2, "localhost", 0}, {2, "http://evil.example", 0}, CS_HTTP_GUARD_BAD_HOST},
        {{1, "evil.example", 0}, {1, "http://localhost", 0}, CS_HTTP_GUARD_BAD_HOST},
    };
    struct cs_http_guard_header none = {0, NULL, 0};
    for (size_t i = 0; i < sizeof table / sizeof *table; i++) {
        struct cs_http_guard_header h = as_header(&table[i].host);
        struct cs_http_guard_header o = as_header(&table[i].origin);
        if (cs_http_guard_check(&g_name, &h, &o, &none) != table[i].want)
            fail_msg("presence row %zu", i);
    }
}

/* A POST's Content-Type and Content-Length through cs_http_guard_body (cap 1000). */
static void body_table(void **state)
{
    (void)state;
    static const char nul_type[] = "application/json\0x";
    static const struct {
        struct spelling ctype, clen;
        enum cs_http_body_verdict want;
        uint64_t announced;
    } table[] = {
        /* Content-Type: application/json in any case, parameters allowed, or absent */
        {{0, ABSENT, 0}, {0, ABSENT, 0}, CS_HTTP_BODY_OK, 0},
        {{1, "application/json", 0}, {0, ABSENT, 0}, CS_HTTP_BODY_OK, 0},
        {{1, "APPLICATION/JSON", 0}, {0, ABSENT, 0}, CS_HTTP_BODY_OK, 0},
        {{1, "Application/Json", 0}, {0, ABSENT, 0}, CS_HTTP_BODY_OK, 0},
        {{1, "application/json; charset=utf-8", 0}, {0, ABSENT, 0}, CS_HTTP_BODY_OK, 0},
        {{1, "application/json;charset=UTF-8", 0}, {0, ABSENT, 0}, CS_HTTP_BODY_OK, 0},
        {{1, "application/json ; charset=utf-8", 0}, {0, ABSENT, 0}, CS_HTTP_BODY_OK, 0},
        {{1, "application/json;", 0}, {0, ABSENT, 0}, CS_HTTP_BODY_OK, 0},
        {{1, " application/json", 0}, {0, ABSENT, 0}, CS_HTTP_BODY_OK, 0},
        {{1, "\tapplication/json\t", 0}, {0, ABSENT, 0}, CS_HTTP_BODY_OK, 0},
        /* anything else, an empty value, a NUL byte, or two of them */
        {{1, "", 0}, {0, ABSENT, 0}, CS_HTTP_BODY_BAD_TYPE, 0},
        {{1, "text/plain", 0}, {0, ABSENT, 0}, CS_HTTP_BODY_BAD_TYPE, 0},
        {{1, "text/plain; charset=utf-8", 0}, {0, ABSENT, 0}, CS_HTTP_BODY_BAD_TYPE, 0},
        {{1, "application/x-www-form-urlencoded", 0}, {0, ABSENT, 0}, CS_HTTP_BODY_BAD_TYPE, 0},
        {{1, "multipart/form-data; boundary=x", 0}, {0, ABSENT, 0}, CS_HTTP_BODY_BAD_TYPE, 0},
        {{1, "application/jsonx", 0}, {0, ABSENT, 0}, CS_HTTP_BODY_BAD_TYPE, 0},
        {{1, "application/json-seq", 0}, {0, ABSENT, 0}, CS_HTTP_BODY_BAD_TYPE, 0},
        {{1, "application/ld+json", 0}, {0, ABSENT, 0}, CS_HTTP_BODY_BAD_TYPE, 0},
        {{1, "application/json x", 0}, {0, ABSENT, 0}, CS_HTTP_BODY_BAD_TYPE, 0},
        {{1, "application/json, text/plain", 0}, {0, ABSENT, 0}, CS_HTTP_BODY_BAD_TYPE, 0},
        {{1, "application/js", 0}, {0, ABSENT, 0}, CS_HTTP_BODY_BAD_TYPE, 0},
        {{1, "*/*", 0}, {0, ABSENT, 0}, CS_HTTP_BODY_BAD_TYPE, 0},
        {{1, "application/*", 0}, {0, ABSENT, 0}, CS_HTTP_BODY_BAD_TYPE, 0},
        {{1, ABSENT, 0}, {0, ABSENT, 0}, CS_HTTP_BODY_BAD_TYPE, 0}, /* it held a NUL byte */
        {{1, nul_type, sizeof nul_type - 1}, {0, ABSENT, 0}, CS_HTTP_BODY_BAD_TYPE, 0},
        {{2, "application/json", 0}, {0, ABSENT, 0}, CS_HTTP_BODY_BAD_TYPE, 0},
        /* Content-Length: up to the cap, leading zeros allowed */
        {{0, ABSENT, 0}, {1, "0", 0}, CS_HTTP_BODY_OK, 0},
        {{0, ABSENT, 0}, {1, "1", 0}, CS_HTTP_BODY_OK, 1},
        {{0, ABSENT, 0}, {1, "999", 0}, CS_HTTP_BODY_OK, 999},
        {{0, ABSENT, 0}, {1, "1000", 0}, CS_HTTP_BODY_OK, 1000}, /* exactly the cap */
        {{0, ABSENT, 0}, {1, "0001000", 0}, CS_HTTP_BODY_OK, 1000},
        {{0, ABSENT, 0}, {1, "000000000000000000000000000001", 0}, CS_HTTP_BODY_OK, 1},
        {{1, "application/json", 0}, {1, "1000", 0}, CS_HTTP_BODY_OK, 1000},
        /* over the cap, however many digits */
        {{0, ABSENT, 0}, {1, "1001", 0}, CS_HTTP_BODY_TOO_LARGE, 0},
        {{0, ABSENT, 0}, {1, "18446744073709551615", 0}, CS_HTTP_BODY_TOO_LARGE, 0},
        {{0, ABSENT, 0}, {1, "18446744073709551616", 0}, CS_HTTP_BODY_TOO_LARGE, 0},
        {{0, ABSENT, 0}, {1, "99999999999999999999999999999999", 0}, CS_HTTP_BODY_TOO_LARGE, 0},
        /* malformed: libmicrohttpd refused it already; here it announces nothing */
        {{0, ABSENT, 0}, {1, "", 0}, CS_HTTP_BODY_OK, 0},
        {{0, ABSENT, 0}, {1, "-1", 0}, CS_HTTP_BODY_OK, 0},
        {{0, ABSENT, 0}, {1, "1e3", 0}, CS_HTTP_BODY_OK, 0},
        {{0, ABSENT, 0}, {1, " 10", 0}, CS_HTTP_BODY_OK, 0},
        {{0, ABSENT, 0}, {1, "0x10", 0}, CS_HTTP_BODY_OK, 0},
        {{0, ABSENT, 0}, {1, ABSENT, 0}, CS_HTTP_BODY_OK, 0},
        /* the type is judged first */
        {{1, "text/plain", 0}, {1, "5000", 0}, CS_HTTP_BODY_BAD_TYPE, 0},
    };
    for (size_t i = 0; i < sizeof table / sizeof *table; i++) {
        struct cs_http_guard_header ct = as_header(&table[i].ctype);
        struct cs_http_guard_header cl = as_header(&table[i].clen);
        uint64_t announced = 777;
        enum cs_http_body_verdict got = cs_http_guard_body(&ct, &cl, 1000, &announced);
        if (got != table[i].want || announced != table[i].announced)
            fail_msg("body row %zu (Content-Type \"%s\", Content-Length \"%s\"): got %d/%llu, "
                     "want %d/%llu",
                     i, ct.value ? ct.value : "-", cl.value ? cl.value : "-", (int)got,
                     (unsigned long long)announced, (int)table[i].want,
                     (unsigned long long)table[i].announced);
    }
}

/* The headers whose meaning is one value through cs_http_guard_single: each repeated is refused
 * (the values are not even looked at: equal ones too), Content-Length beside Transfer-Encoding
 * is refused, and the first failure in the documented order wins. */
static void single_table(void **state)
{
    (void)state;
    static const struct {
        struct cs_http_guard_single c; /* method, name, version, session, length, transfer */
        enum cs_http_single_verdict want;
    } table[] = {
        {{0, 0, 0, 0, 0, 0}, CS_HTTP_SINGLE_OK},
        {{1, 1, 1, 1, 1, 0}, CS_HTTP_SINGLE_OK},
        {{1, 1, 1, 1, 0, 1}, CS_HTTP_SINGLE_OK},
        {{0, 0, 0, 0, 0, 2}, CS_HTTP_SINGLE_OK}, /* Transfer-Encoding is a list */
        {{2, 0, 0, 0, 0, 0}, CS_HTTP_SINGLE_METHOD},
        {{3, 1, 1, 1, 1, 0}, CS_HTTP_SINGLE_METHOD},
        {{0, 2, 0, 0, 0, 0}, CS_HTTP_SINGLE_NAME},
        {{1, 2, 1, 1, 1, 0}, CS_HTTP_SINGLE_NAME},
        {{0, 0, 2, 0, 0, 0}, CS_HTTP_SINGLE_VERSION},
        {{0, 0, 0, 2, 0, 0}, CS_HTTP_SINGLE_SESSION},
        {{0, 0, 0, 0, 2, 0}, CS_HTTP_SINGLE_LENGTH},
        {{0, 0, 0, 0, 9, 0}, CS_HTTP_SINGLE_LENGTH},
        {{0, 0, 0, 0, 1, 1}, CS_HTTP_SINGLE_LENGTH_TRANSFER},
        {{0, 0, 0, 0, 1, 3}, CS_HTTP_SINGLE_LENGTH_TRANSFER},
        {{2, 2, 2, 2, 0, 0}, CS_HTTP_SINGLE_VERSION},
        {{2, 2, 0, 2, 0, 0}, CS_HTTP_SINGLE_METHOD},
        {{0, 2, 0, 2, 0, 0}, CS_HTTP_SINGLE_NAME},
        {{2, 2, 2, 2, 2, 1}, CS_HTTP_SINGLE_LENGTH},
        {{2, 2, 2, 2, 1, 1}, CS_HTTP_SINGLE_LENGTH_TRANSFER},
        {{0, 0, 0, 2, 1, 1}, CS_HTTP_SINGLE_LENGTH_TRANSFER},
        {{0, 0, 0, 2, 2, 1}, CS_HTTP_SINGLE_LENGTH},
    };
    for (size_t i = 0; i < sizeof table / sizeof *table; i++) {
        enum cs_http_single_verdict got = cs_http_guard_single(&table[i].c);
        if (got != table[i].want)
            fail_msg("single row %zu: got %d, want %d", i, (int)got, (int)table[i].want);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(host_checks),
        cmocka_unit_test(origin_checks),
        cmocka_unit_test(check_order_and_token),
        cmocka_unit_test(content_type),
        cmocka_unit_test(accept_event_stream),
        cmocka_unit_test(content_length),
        cmocka_unit_test(ct_equal),
        cmocka_unit_test(host_table_test),
        cmocka_unit_test(origin_table_test),
        cmocka_unit_test(header_presence_table),
        cmocka_unit_test(body_table),
        cmocka_unit_test(single_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
