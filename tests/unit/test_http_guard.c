/*
 * Unit tests of the HTTP request guard (src/http/http_guard.c): Host, Origin, bearer token,
 * Content-Type and Content-Length, each on its accepted and refused shapes, and the order of
 * cs_http_guard_check's verdicts.
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(host_checks),           cmocka_unit_test(origin_checks),
        cmocka_unit_test(check_order_and_token), cmocka_unit_test(content_type),
        cmocka_unit_test(content_length),        cmocka_unit_test(ct_equal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
