/*
 * test_supervisor_ring: the output ring alone (supervisor_ring.c), no process, no loop: empty
 * reads, writes below, at and past the capacity, one write several times the capacity, the wrap
 * inside a copy, the buffer's growth by doubling, a cursor behind the oldest kept byte (the
 * dropped bytes a reader is told about), a cursor past the end, and compaction once finished.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "supervisor_ring.h"

/* The byte the process wrote at position q: a pattern whose period (251) is prime to every cap
 * used here, so a copy from the wrong offset cannot match by accident. */
static uint8_t at(uint64_t q)
{
    return (uint8_t)((q * 31u + 7u) % 251u);
}

/* Appends positions [r->total, r->total + n) of the pattern, in one call. */
static void write_n(struct cs_ring *r, size_t n)
{
    uint8_t *data = malloc(n ? n : 1);
    assert_non_null(data);
    for (size_t i = 0; i < n; i++)
        data[i] = at(r->total + i);
    assert_int_equal(cs__ring_append(r, data, n), n);
    free(data);
}

/* [from, to) reads back as the pattern. */
static void check_range(const struct cs_ring *r, uint64_t from, uint64_t to)
{
    size_t n = (size_t)(to - from);
    uint8_t *got = malloc(n ? n : 1);
    assert_non_null(got);
    memset(got, 0xEE, n);
    cs__ring_copy(r, from, to, got);
    for (size_t i = 0; i < n; i++) {
        if (got[i] != at(from + i))
            fail_msg("position %llu: got %u, want %u", (unsigned long long)(from + i), got[i],
                     at(from + i));
    }
    free(got);
}

/* The whole window is the last min(total, cap) bytes, and reads back right. */
static void check_window(const struct cs_ring *r)
{
    uint64_t want = r->total > r->cap ? r->total - r->cap : 0;
    assert_int_equal(cs__ring_retained_from(r), want);
    check_range(r, want, r->total);
}

static void test_empty(void **state)
{
    (void)state;
    struct cs_ring r;
    cs__ring_init(&r, 100);
    assert_int_equal(r.total, 0);
    assert_int_equal(cs__ring_retained_from(&r), 0);
    assert_int_equal(cs__ring_start(&r, 0), 0);
    assert_int_equal(cs__ring_start(&r, 5), 0); /* past the end: at the end */
    uint8_t dst[1] = {0xEE};
    cs__ring_copy(&r, 0, 0, dst); /* an empty read touches nothing */
    assert_int_equal(dst[0], 0xEE);
    assert_int_equal(cs__ring_append(&r, "", 0), 0);
    assert_null(r.buf); /* nothing allocated for nothing */
    cs__ring_compact(&r);
    assert_true(r.linear);
    assert_int_equal(cs__ring_retained_from(&r), 0);
    assert_int_equal(cs__ring_start(&r, 3), 0);
    cs__ring_fini(&r);
    cs__ring_fini(&r); /* twice is harmless */
    assert_null(r.buf);
}

static void test_below_and_at_capacity(void **state)
{
    (void)state;
    struct cs_ring r;
    cs__ring_init(&r, 100);
    write_n(&r, 1);
    check_window(&r);
    write_n(&r, 98);
    check_window(&r);
    assert_int_equal(cs__ring_retained_from(&r), 0);
    write_n(&r, 1); /* exactly cap bytes: nothing dropped yet */
    assert_int_equal(r.total, 100);
    assert_int_equal(cs__ring_retained_from(&r), 0);
    check_window(&r);
    assert_int_equal(cs__ring_start(&r, 100), 100); /* the end: nothing to read */
    write_n(&r, 1);                                 /* one over: the first byte goes */
    assert_int_equal(cs__ring_retained_from(&r), 1);
    check_window(&r);
    cs__ring_fini(&r);
}

static void test_wraparound_in_small_writes(void **state)
{
    (void)state;
    struct cs_ring r;
    cs__ring_init(&r, 100);
    /* 7-byte writes: the write position crosses the end of the buffer at every offset mod 7. */
    for (int i = 0; i < 150; i++) {
        write_n(&r, 7);
        check_window(&r);
    }
    assert_int_equal(r.total, 1050);
    assert_int_equal(r.alloc, 100); /* never more than cap */
    /* Every sub-range of the window, the ones across the wrap included. */
    for (uint64_t from = 950; from <= 1050; from += 3)
        for (uint64_t to = from; to <= 1050; to += 11)
            check_range(&r, from, to);
    cs__ring_fini(&r);
}

static void test_space_stops_at_the_wrap(void **state)
{
    (void)state;
    struct cs_ring r;
    cs__ring_init(&r, 100);
    write_n(&r, 197); /* the next byte goes to buf[97] */
    size_t space = 0;
    uint8_t *dst = cs__ring_space(&r, &space);
    assert_ptr_equal(dst, r.buf + 97);
    assert_int_equal(space, 3); /* contiguous only: the caller loops for the rest */
    memcpy(dst, (const uint8_t[]){at(197), at(198), at(199)}, 3);
    cs__ring_commit(&r, 3);
    dst = cs__ring_space(&r, &space);
    assert_ptr_equal(dst, r.buf);
    assert_int_equal(space, 100);
    dst[0] = at(200);
    cs__ring_commit(&r, 1); /* less than offered */
    assert_int_equal(r.total, 201);
    check_window(&r);
    cs__ring_fini(&r);
}

static void test_one_write_larger_than_capacity(void **state)
{
    (void)state;
    struct cs_ring r;
    cs__ring_init(&r, 100);
    write_n(&r, 350); /* 3.5 times the cap in one call */
    assert_int_equal(r.total, 350);
    assert_int_equal(cs__ring_retained_from(&r), 250);
    check_window(&r);
    write_n(&r, 100); /* exactly cap from an unaligned position */
    assert_int_equal(cs__ring_retained_from(&r), 350);
    check_window(&r);
    write_n(&r, 200); /* exactly twice cap */
    assert_int_equal(cs__ring_retained_from(&r), 550);
    check_window(&r);
    cs__ring_fini(&r);
}

static void test_cursor_behind_the_window(void **state)
{
    (void)state;
    struct cs_ring r;
    cs__ring_init(&r, 100);
    write_n(&r, 1000);
    uint64_t from = cs__ring_retained_from(&r);
    assert_int_equal(from, 900); /* 900 bytes were dropped: a reader at 0 lost them */
    assert_int_equal(cs__ring_start(&r, 0), 900);
    assert_int_equal(cs__ring_start(&r, 899), 900);
    assert_int_equal(cs__ring_start(&r, 900), 900);
    assert_int_equal(cs__ring_start(&r, 901), 901);
    assert_int_equal(cs__ring_start(&r, 999), 999);
    assert_int_equal(cs__ring_start(&r, 1000), 1000);
    assert_int_equal(cs__ring_start(&r, 1001), 1000); /* ahead of the output: at its end */
    assert_int_equal(cs__ring_start(&r, INT64_MAX), 1000);
    /* A reader that caught up loses nothing more until cap bytes pass its cursor. */
    write_n(&r, 99);
    assert_true(cs__ring_start(&r, 1000) == 1000);
    write_n(&r, 2);
    assert_int_equal(cs__ring_start(&r, 1000), 1001);
    cs__ring_fini(&r);
}

static void test_growth_by_doubling(void **state)
{
    (void)state;
    struct cs_ring r;
    const size_t cap = 100000; /* not a power of two: the last step is cut to cap */
    cs__ring_init(&r, cap);
    write_n(&r, 1);
    assert_int_equal(r.alloc, 16384);
    write_n(&r, 16383);
    assert_int_equal(r.alloc, 16384); /* full, not grown until the next byte */
    write_n(&r, 1);
    assert_int_equal(r.alloc, 32768);
    check_window(&r);
    write_n(&r, 40000);
    assert_int_equal(r.alloc, 65536);
    write_n(&r, 43615); /* total = 100000 = cap */
    assert_int_equal(r.alloc, cap);
    assert_int_equal(cs__ring_retained_from(&r), 0);
    check_window(&r);
    write_n(&r, 12345); /* now it wraps */
    assert_int_equal(r.alloc, cap);
    assert_int_equal(cs__ring_retained_from(&r), 12345);
    check_window(&r);
    cs__ring_fini(&r);

    /* A cap below the first allocation: the buffer is the cap at once. */
    cs__ring_init(&r, 10);
    write_n(&r, 3);
    assert_int_equal(r.alloc, 10);
    write_n(&r, 25);
    check_window(&r);
    cs__ring_fini(&r);
}

static void test_compact(void **state)
{
    (void)state;
    struct cs_ring r;
    /* Before any wrap: the bytes move to a buffer of their size, positions unchanged. */
    cs__ring_init(&r, 100);
    write_n(&r, 42);
    cs__ring_compact(&r);
    assert_true(r.linear);
    assert_int_equal(r.alloc, 42);
    assert_int_equal(cs__ring_retained_from(&r), 0);
    check_range(&r, 0, 42);
    check_range(&r, 10, 20);
    cs__ring_fini(&r);

    /* After wrapping: the window keeps its positions and its loss. */
    cs__ring_init(&r, 100);
    write_n(&r, 1234);
    cs__ring_compact(&r);
    assert_true(r.linear);
    assert_int_equal(r.alloc, 100);
    assert_int_equal(r.total, 1234);
    assert_int_equal(cs__ring_retained_from(&r), 1134);
    assert_int_equal(cs__ring_start(&r, 5), 1134);
    assert_int_equal(cs__ring_start(&r, 1200), 1200);
    check_range(&r, 1134, 1234);
    check_range(&r, 1200, 1201);
    cs__ring_fini(&r);

    /* At exactly cap. */
    cs__ring_init(&r, 100);
    write_n(&r, 100);
    cs__ring_compact(&r);
    assert_int_equal(cs__ring_retained_from(&r), 0);
    check_range(&r, 0, 100);
    cs__ring_fini(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty),
        cmocka_unit_test(test_below_and_at_capacity),
        cmocka_unit_test(test_wraparound_in_small_writes),
        cmocka_unit_test(test_space_stops_at_the_wrap),
        cmocka_unit_test(test_one_write_larger_than_capacity),
        cmocka_unit_test(test_cursor_behind_the_window),
        cmocka_unit_test(test_growth_by_doubling),
        cmocka_unit_test(test_compact),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
