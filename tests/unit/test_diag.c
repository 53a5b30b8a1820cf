/*
 * Unit tests of base_diag (the one failure formatter, src/base/base_diag.c):
 *
 * - a message that fits exactly is kept whole; one byte more is cut to the bound;
 * - a multi-byte character (2, 3 and 4 bytes) cut by the bound after any of its bytes is dropped
 *   whole, never left partial; one that fits exactly is kept;
 * - control bytes (< 0x20, 0x7F) are spelled \xHH, and dropped whole when the spelling does not
 *   fit; ill-formed bytes not at a cut are spelled \xHH too;
 * - the result is always valid UTF-8 without control bytes;
 * - a NULL diag is accepted and the code is returned; clear empties a diag.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "base_diag.h"
#include "base_utf8.h"

#define MAX (CS_DIAG_TEXT_SIZE - 1)

static void assert_clean(const char *s)
{
    size_t n = strlen(s);
    assert_true(n <= MAX);
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        bool valid;
        size_t k = cs_utf8_step((const unsigned char *)s + i, n - i, &cp, &valid);
        assert_true(valid);
        assert_true(cp >= 0x20 && cp != 0x7F);
        i += k;
    }
}

static void fits_exactly(void **state)
{
    (void)state;
    char pad[CS_DIAG_TEXT_SIZE + 1];
    memset(pad, 'a', sizeof pad);
    pad[MAX] = '\0';
    struct cs_diag d = {0};
    assert_int_equal(cs_diag_set(&d, CSW_ERROR_INTERNAL, "%s", pad), CSW_ERROR_INTERNAL);
    assert_true(cs_diag_failed(&d));
    assert_int_equal(d.code, CSW_ERROR_INTERNAL);
    assert_string_equal(d.text, pad);

    pad[MAX] = 'b';
    pad[MAX + 1] = '\0';
    cs_diag_set(&d, CSW_ERROR_TIMEOUT, "%s", pad);
    assert_int_equal(d.code, CSW_ERROR_TIMEOUT);
    assert_int_equal(strlen(d.text), MAX);
    assert_int_equal(strspn(d.text, "a"), MAX);
}

/* A character of every width, cut after each of its bytes by the bound. */
static void cut_sequences(void **state)
{
    (void)state;
    static const char *chars[] = {"\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80"};
    for (size_t c = 0; c < 3; c++) {
        size_t w = strlen(chars[c]);
        for (size_t kept = 1; kept <= w; kept++) {
            /* The bound leaves `kept` bytes of the character after the padding. */
            char pad[CS_DIAG_TEXT_SIZE];
            size_t plen = MAX - kept;
            memset(pad, 'x', plen);
            pad[plen] = '\0';
            struct cs_diag d = {0};
            cs_diag_set(&d, CSW_ERROR_INVALID_PATCH, "%s%s tail", pad, chars[c]);
            assert_clean(d.text);
            assert_int_equal(strspn(d.text, "x"), plen);
            if (kept == w) {
                assert_int_equal(strlen(d.text), MAX);
                assert_memory_equal(d.text + plen, chars[c], w);
            } else {
                assert_int_equal(strlen(d.text), plen);
            }
        }
    }
}

static void control_bytes(void **state)
{
    (void)state;
    struct cs_diag d = {0};
    cs_diag_set(&d, CSW_ERROR_FILE_NOT_FOUND, "a%cb\nc\td%s", 1, "\x7f\x1b[31m");
    assert_string_equal(d.text, "a\\x01b\\x0Ac\\x09d\\x7F\\x1B[31m");
    assert_clean(d.text);

    /* The spelling does not fit: the control byte is dropped whole. */
    char pad[CS_DIAG_TEXT_SIZE];
    memset(pad, 'y', MAX - 2);
    pad[MAX - 2] = '\0';
    cs_diag_set(&d, CSW_ERROR_INTERNAL, "%s\n", pad);
    assert_string_equal(d.text, pad);
    /* It fits exactly. */
    pad[MAX - 4] = '\0';
    cs_diag_set(&d, CSW_ERROR_INTERNAL, "%s\r", pad);
    assert_int_equal(strlen(d.text), MAX);
    assert_string_equal(d.text + MAX - 4, "\\x0D");
    /* Expansion pushes a multi-byte character past the bound: dropped whole. */
    pad[MAX - 6] = '\0';
    cs_diag_set(&d, CSW_ERROR_INTERNAL, "%s\n\xE2\x82\xAC", pad);
    assert_int_equal(strlen(d.text), MAX - 2);
    assert_clean(d.text);
}

static void ill_formed(void **state)
{
    (void)state;
    struct cs_diag d = {0};
    cs_diag_set(&d, CSW_ERROR_INTERNAL,
                "a\xff"
                "b\xE2\x82"
                "c\xED\xA0\x80");
    assert_string_equal(d.text, "a\\xFFb\\xE2\\x82c\\xED\\xA0\\x80");
    /* A partial sequence at the end of a message the bound did not cut was in the argument:
     * it is spelled, not silently dropped. */
    cs_diag_set(&d, CSW_ERROR_INTERNAL, "%s", "end\xF0\x9F");
    assert_string_equal(d.text, "end\\xF0\\x9F");
    assert_clean(d.text);
}

static void null_and_clear(void **state)
{
    (void)state;
    assert_int_equal(cs_diag_set(NULL, CSW_ERROR_PATH_ESCAPE, "%s", "x"), CSW_ERROR_PATH_ESCAPE);
    assert_false(cs_diag_failed(NULL));
    cs_diag_clear(NULL);
    struct cs_diag d = {0};
    assert_false(cs_diag_failed(&d));
    cs_diag_set(&d, CSW_ERROR_PATH_ESCAPE, "escape");
    assert_true(cs_diag_failed(&d));
    cs_diag_clear(&d);
    assert_false(cs_diag_failed(&d));
    assert_string_equal(d.text, "");
    /* An empty message is a failure too. */
    cs_diag_set(&d, CSW_ERROR_INTERNAL, "%s", "");
    assert_true(cs_diag_failed(&d));
    assert_string_equal(d.text, "");
}

static void clean_direct(void **state)
{
    (void)state;
    char out[8];
    /* cap 8: "ab\x01" needs 2 + 4 = 6 bytes and the NUL. */
    assert_int_equal(cs_diag_clean(out, sizeof out,
                                   "ab\x01"
                                   "cd",
                                   5, false),
                     7);
    assert_string_equal(out, "ab\\x01c");
    assert_int_equal(cs_diag_clean(out, sizeof out, "ab\xC3", 3, true), 2);
    assert_string_equal(out, "ab");
    assert_int_equal(cs_diag_clean(out, sizeof out, "ab\xC3", 3, false), 6);
    assert_string_equal(out, "ab\\xC3");
    assert_int_equal(cs_diag_clean(out, 1, "abc", 3, false), 0);
    assert_string_equal(out, "");
    /* The fixed-buffer formatter: same rules, the caller's bound. */
    assert_int_equal(cs_diag_format(out, sizeof out, "%s\xE2\x82\xAC", "abcde"), 5);
    assert_string_equal(out, "abcde");
    assert_int_equal(cs_diag_format(out, sizeof out, "a\tb"), 6);
    assert_string_equal(out, "a\\x09b");
}

static void wire_status(void **state)
{
    (void)state;
    assert_int_equal(cs_diag_wire_error(CS_WIRE_OK, CSW_ERROR_INVALID_ARGUMENTS), 0);
    assert_int_equal(cs_diag_wire_error(CS_WIRE_INVALID, CSW_ERROR_INVALID_ARGUMENTS),
                     CSW_ERROR_INVALID_ARGUMENTS);
    assert_int_equal(cs_diag_wire_error(CS_WIRE_INVALID, CSW_ERROR_INTERNAL), CSW_ERROR_INTERNAL);
    assert_int_equal(cs_diag_wire_error(CS_WIRE_NOMEM, CSW_ERROR_INVALID_ARGUMENTS),
                     CSW_ERROR_INTERNAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fits_exactly),   cmocka_unit_test(cut_sequences),
        cmocka_unit_test(control_bytes),  cmocka_unit_test(ill_formed),
        cmocka_unit_test(null_and_clear), cmocka_unit_test(clean_direct),
        cmocka_unit_test(wire_status),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
