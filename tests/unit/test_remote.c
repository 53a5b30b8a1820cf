/*
 * Unit tests of base_remote (the remote runner's address and certificate pin parsers,
 * src/base/base_remote.c, docs/scale-out.md):
 *
 * - addresses: IPv4, names, bracketed IPv6, the port bounds 1 and 65535 are accepted and split;
 *   a wrong scheme, an empty host, an unbracketed ':' in the host, port 0, a leading zero, a port
 *   over 65535, a missing port, trailing bytes, an unclosed bracket and a 256-byte host are not;
 * - pins: 64 hex digits in either case, or 32 pairs joined by ':', give the bytes; 63 or 65
 *   digits, a non-hex digit, a misplaced ':' or a missing one are refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "base_remote.h"

static void accepts(const char *url, const char *host, const char *port)
{
    char h[CS_RUNNER_URL_HOST_MAX], p[CS_RUNNER_URL_PORT_MAX];
    if (cs_runner_url_parse(url, h, p) != 0)
        fail_msg("refused: %s", url);
    assert_string_equal(h, host);
    assert_string_equal(p, port);
}

static void refuses(const char *url)
{
    char h[CS_RUNNER_URL_HOST_MAX], p[CS_RUNNER_URL_PORT_MAX];
    if (cs_runner_url_parse(url, h, p) == 0)
        fail_msg("accepted: %s", url ? url : "(null)");
}

static void addresses(void **state)
{
    (void)state;
    accepts("tcp://10.0.0.2:7451", "10.0.0.2", "7451");
    accepts("tcp://worker-1.example.org:1", "worker-1.example.org", "1");
    accepts("tcp://[fe80::1]:65535", "fe80::1", "65535");
    accepts("tcp://under_score:80", "under_score", "80");
    refuses("http://h:80");
    refuses("tcp:/h:80");
    refuses("tcp://:80");
    refuses("tcp://a:b:80");
    refuses("tcp://h:0");
    refuses("tcp://h:080");
    refuses("tcp://h:65536");
    refuses("tcp://h:");
    refuses("tcp://h");
    refuses("tcp://h:80/");
    refuses("tcp://h:80 ");
    refuses("tcp://[::1:80");
    refuses("tcp://[]:80");
    refuses("tcp://h h:80");
    refuses(NULL);
    char big[300] = "tcp://";
    memset(big + 6, 'a', 256);
    strcpy(big + 262, ":80");
    refuses(big);
    big[6 + 255] = ':';
    strcpy(big + 6 + 255, ":80"); /* 255 bytes of host: the most there is room for */
    char h[CS_RUNNER_URL_HOST_MAX], p[CS_RUNNER_URL_PORT_MAX];
    assert_int_equal(cs_runner_url_parse(big, h, p), 0);
    assert_int_equal(strlen(h), 255);
}

static void pins(void **state)
{
    (void)state;
    unsigned char pin[CS_TLS_PIN_SIZE];
    const char *hex = "9F86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
    assert_int_equal(cs_tls_pin_parse(hex, pin), 0);
    assert_int_equal(pin[0], 0x9f);
    assert_int_equal(pin[31], 0x08);
    char colons[96];
    size_t k = 0;
    for (int i = 0; i < CS_TLS_PIN_SIZE; i++) {
        colons[k++] = hex[2 * i];
        colons[k++] = hex[2 * i + 1];
        if (i + 1 < CS_TLS_PIN_SIZE)
            colons[k++] = ':';
    }
    colons[k] = '\0';
    unsigned char pin2[CS_TLS_PIN_SIZE];
    assert_int_equal(cs_tls_pin_parse(colons, pin2), 0);
    assert_memory_equal(pin, pin2, sizeof pin);
    char bad[100];
    snprintf(bad, sizeof bad, "%.63s", hex);
    assert_int_equal(cs_tls_pin_parse(bad, pin), -1);
    snprintf(bad, sizeof bad, "%s0", hex);
    assert_int_equal(cs_tls_pin_parse(bad, pin), -1);
    snprintf(bad, sizeof bad, "%s", hex);
    bad[10] = 'g';
    assert_int_equal(cs_tls_pin_parse(bad, pin), -1);
    snprintf(bad, sizeof bad, "%s", colons);
    bad[2] = '-';
    assert_int_equal(cs_tls_pin_parse(bad, pin), -1);
    snprintf(bad, sizeof bad, "%s", colons);
    bad[1] = ':';
    assert_int_equal(cs_tls_pin_parse(bad, pin), -1);
    assert_int_equal(cs_tls_pin_parse("", pin), -1);
    assert_int_equal(cs_tls_pin_parse(NULL, pin), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(addresses),
        cmocka_unit_test(pins),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
