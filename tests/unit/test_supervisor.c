/*
 * Unit tests of the supervisor on a real event loop with real children: the ring (a small cap so
 * it wraps: retained_from, output_lost, the tail intact, cursors before the window), a UTF-8
 * sequence cut by a read held back while the process runs, exit codes and signals from outside,
 * the time limit (termination timeout, then TIMEOUT at the end of the output), terminate of a
 * group with a background child, the live cap refusing before anything spawns, a missing
 * program, retention (at most retain_max exited handles), write_stdin and close, a PTY's size,
 * and the environment a command gets.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "supervisor.h"
#include "supervisor_internal.h"

/* One answer, copied out of the borrowed output. */
struct answer {
    bool done;
    int code;
    char msg[CS_DIAG_TEXT_SIZE];
    char text[300 * 1024];
    size_t text_n;
    int64_t cursor, retained_from, exit_code, total;
    bool output_lost, eof, exited, has_exit_code, has_signal;
    int64_t signo;
    enum csw_process_termination term;
    bool has_term;
};

enum kind { K_EXEC, K_READ, K_STATUS, K_WRITE, K_TERM, K_RESIZE };

struct ctx {
    enum kind kind;
    struct answer *a;
    struct cs_loop *loop;
};

static void done_fn(void *arg, int code, const char *msg, const void *out)
{
    struct ctx *c = arg;
    struct answer *a = c->a;
    memset(a, 0, sizeof *a);
    a->done = true;
    a->code = code;
    if (code) {
        snprintf(a->msg, sizeof a->msg, "%s", msg);
        return;
    }
    switch (c->kind) {
    case K_EXEC: {
        const struct csw_mcp_exec_command_output *o = out;
        snprintf(a->msg, sizeof a->msg, "%.*s", (int)o->process_id.n, o->process_id.s);
        if (o->has_output) {
            memcpy(a->text, o->output.s, o->output.n);
            a->text_n = o->output.n;
            a->cursor = o->cursor;
            a->output_lost = o->output_lost;
            a->exited = o->state == CSW_PROCESS_STATE_EXITED;
            a->has_exit_code = o->has_exit_code;
            a->exit_code = o->exit_code;
            a->has_term = o->has_termination;
            a->term = o->termination;
        }
        break;
    }
    case K_READ: {
        const struct csw_mcp_read_process_output *o = out;
        memcpy(a->text, o->chunk.s, o->chunk.n);
        a->text_n = o->chunk.n;
        a->cursor = o->cursor;
        a->retained_from = o->retained_from;
        a->output_lost = o->output_lost;
        a->eof = o->eof;
        break;
    }
    case K_STATUS: {
        const struct csw_mcp_process_status_output *o = out;
        a->exited = o->state == CSW_PROCESS_STATE_EXITED;
        a->has_exit_code = o->has_exit_code;
        a->exit_code = o->exit_code;
        a->has_term = o->has_termination;
        a->term = o->termination;
        a->has_signal = o->has_signal;
        a->signo = o->has_signal ? o->signal.number : 0;
        a->total = o->output_total;
        a->retained_from = o->output_retained_from;
        a->eof = o->eof;
        break;
    }
    case K_WRITE:
        a->total = ((const struct csw_mcp_write_stdin_output *)out)->bytes_written;
        break;
    case K_TERM:
        a->exited = ((const struct csw_mcp_terminate_process_output *)out)->state ==
                    CSW_PROCESS_STATE_EXITED;
        break;
    case K_RESIZE:
        break;
    }
}

struct fixture {
    struct cs_loop *loop;
    struct cs_supervisor *sup;
    int exits;
    char root[64];
};

static struct fixture F;

static void on_exit_cb(void *arg, const char *id)
{
    (void)id;
    ((struct fixture *)arg)->exits++;
}

static void stop_soon(void *arg)
{
    cs_loop_stop(arg);
}

/* Runs the loop until a->done (or 10 s). */
static void wait_for(struct answer *a)
{
    int64_t end = cs_loop_now_ms() + 10000;
    while (!a->done && cs_loop_now_ms() < end) {
        assert_non_null(cs_loop_timer_add(F.loop, 5, stop_soon, F.loop));
        assert_int_equal(cs_loop_run(F.loop), 0);
    }
    assert_true(a->done);
}

static void settle(int64_t ms)
{
    assert_non_null(cs_loop_timer_add(F.loop, ms, stop_soon, F.loop));
    assert_int_equal(cs_loop_run(F.loop), 0);
}

static int setup_limits(size_t ring, int64_t max_live, int64_t timeout_ms, size_t retain_max)
{
    memset(&F, 0, sizeof F);
    snprintf(F.root, sizeof F.root, "/tmp/cs-sup-XXXXXX");
    if (!mkdtemp(F.root))
        return -1;
    F.loop = cs_loop_new();
    struct cs_supervisor_limits lim = {
        .max_live = max_live,
        .timeout_ms = timeout_ms,
        .ring_bytes = ring,
        .retain_ms = 60000,
        .retain_max = retain_max,
        .kill_grace_ms = 500,
        .path = "/usr/bin:/bin",
        .tmpdir = "/tmp",
    };
    F.sup = F.loop ? cs_supervisor_new(F.loop, &lim) : NULL;
    return F.sup ? 0 : -1;
}

static int setup(void **state)
{
    (void)state;
    return setup_limits(1024, 3, 1500, 2);
}

static int teardown(void **state)
{
    (void)state;
    cs_supervisor_free(F.sup);
    cs_loop_free(F.loop);
    rmdir(F.root);
    return 0;
}

/* A spawn's per-workspace settings (the exec request's workspace limits). */
struct wsl {
    const char *workspace_id;
    int64_t max_live, timeout_ms;
    size_t ring_bytes;
};

static int spawn_ws(struct answer *a, bool tty, int64_t yield_ms, const char *const *argv, char *id,
                    const struct wsl *w);

/* Starts argv (NULL-terminated); returns the exec answer in a. */
static int spawn(struct answer *a, bool tty, int64_t yield_ms, const char *const *argv, char *id)
{
    return spawn_ws(a, tty, yield_ms, argv, id, NULL);
}

/* spawn, with w's workspace and limits (NULL: none, the supervisor's). */
static int spawn_ws(struct answer *a, bool tty, int64_t yield_ms, const char *const *argv, char *id,
                    const struct wsl *w)
{
    struct cs_str v[16];
    size_t n = 0;
    for (; argv[n]; n++)
        v[n] = (struct cs_str){(char *)argv[n], strlen(argv[n])};
    char pid[CS_SUPERVISOR_ID_SIZE];
    assert_int_equal(cs_supervisor_new_id(pid), 0);
    struct cs_supervisor_spawn sp = {
        .process_id = pid,
        .root = F.root,
        .argv = v,
        .argc = n,
        .tty = tty,
        .yield_ms = yield_ms,
        .on_exit = on_exit_cb,
        .exit_arg = &F,
    };
    if (w) {
        sp.workspace_id = w->workspace_id;
        sp.max_live = w->max_live;
        sp.timeout_ms = w->timeout_ms;
        sp.ring_bytes = w->ring_bytes;
    }
    static struct ctx c;
    c = (struct ctx){K_EXEC, a, F.loop};
    memset(a, 0, sizeof *a);
    struct cs_diag dg = {0};
    int rc = cs_supervisor_spawn(F.sup, &sp, done_fn, &c, &dg);
    if (rc != 0) {
        assert_int_equal(dg.code, rc); /* the diag carries the code spawn returns */
        snprintf(a->msg, sizeof a->msg, "%s", dg.text);
        return rc;
    }
    wait_for(a);
    if (id)
        snprintf(id, CS_SUPERVISOR_ID_SIZE, "%s", pid);
    return 0;
}

static void do_read(struct answer *a, const char *id, int64_t cursor, int64_t wait_ms)
{
    struct csw_mcp_read_process_input in = {
        .process_id = {(char *)id, strlen(id)},
        .has_cursor = true,
        .cursor = cursor,
        .has_wait_ms = wait_ms > 0,
        .wait_ms = wait_ms,
    };
    struct ctx c = {K_READ, a, F.loop};
    a->done = false;
    cs_supervisor_read(F.sup, &in, done_fn, &c);
    wait_for(a);
}

static void do_status(struct answer *a, const char *id)
{
    struct csw_mcp_process_status_input in = {.process_id = {(char *)id, strlen(id)}};
    struct ctx c = {K_STATUS, a, F.loop};
    a->done = false;
    cs_supervisor_status(F.sup, &in, done_fn, &c);
    wait_for(a);
}

static struct answer A, B;

static void test_echo_and_exit_code(void **state)
{
    (void)state;
    char id[CS_SUPERVISOR_ID_SIZE];
    const char *argv[] = {"sh", "-c", "echo out; echo err >&2; exit 7", NULL};
    assert_int_equal(spawn(&A, false, 5000, argv, id), 0);
    assert_int_equal(A.code, 0);
    assert_true(A.exited);
    assert_true(A.has_exit_code);
    assert_int_equal(A.exit_code, 7);
    assert_int_equal(A.term, CSW_PROCESS_TERMINATION_EXITED);
    assert_int_equal(A.text_n, 8);
    assert_memory_equal(A.text, "out\nerr\n", 8);
    assert_int_equal(F.exits, 1);
    do_read(&B, id, 4, 0);
    assert_int_equal(B.text_n, 4);
    assert_true(B.eof);
    assert_int_equal(B.cursor, 8);
}

static void test_ring_wraps(void **state)
{
    (void)state;
    char id[CS_SUPERVISOR_ID_SIZE];
    /* 3000 bytes: "0123456789" x 300, into a 1024-byte ring */
    const char *argv[] = {
        "sh", "-c", "i=0; while [ $i -lt 300 ]; do printf 0123456789; i=$((i+1)); done", NULL};
    assert_int_equal(spawn(&A, false, 5000, argv, id), 0);
    assert_true(A.exited);
    assert_true(A.output_lost);
    assert_int_equal(A.text_n, 1024);
    assert_int_equal(A.cursor, 3000);
    do_read(&B, id, 0, 0);
    assert_int_equal(B.retained_from, 3000 - 1024);
    assert_int_equal(B.text_n, 1024);
    assert_memory_equal(B.text + 1024 - 10, "0123456789", 10);
    assert_memory_equal(B.text, "6789", 4); /* 1976 % 10 == 6 */
    do_status(&B, id);
    assert_int_equal(B.total, 3000);
    assert_int_equal(B.retained_from, 1976);
}

static void test_utf8_tail_held(void **state)
{
    (void)state;
    char id[CS_SUPERVISOR_ID_SIZE];
    /* "é" split across two writes 300 ms apart */
    const char *argv[] = {"sh", "-c", "printf 'a\\303'; sleep 0.3; printf '\\251b'", NULL};
    assert_int_equal(spawn(&A, false, 0, argv, id), 0);
    do_read(&B, id, 0, 2000);
    assert_int_equal(B.text_n, 1);
    assert_int_equal(B.cursor, 1); /* the lead byte stays for the next read */
    do_read(&B, id, 1, 2000);      /* waits: only the held lead byte is past the cursor */
    assert_int_equal(B.text_n, 3);
    assert_memory_equal(B.text,
                        "\xc3\xa9"
                        "b",
                        3);
}

static void test_signal_from_outside(void **state)
{
    (void)state;
    char id[CS_SUPERVISOR_ID_SIZE];
    const char *argv[] = {"sh", "-c", "kill -KILL $$", NULL};
    assert_int_equal(spawn(&A, false, 5000, argv, id), 0);
    assert_true(A.exited);
    assert_false(A.has_exit_code);
    assert_int_equal(A.term, CSW_PROCESS_TERMINATION_SIGNALED);
    do_status(&B, id);
    assert_true(B.has_signal);
    assert_int_equal(B.signo, SIGKILL);
}

static void test_time_limit(void **state)
{
    (void)state;
    char id[CS_SUPERVISOR_ID_SIZE];
    const char *argv[] = {"sh", "-c", "echo started; exec sleep 30", NULL};
    assert_int_equal(spawn(&A, false, 5000, argv, id), 0);
    assert_true(A.exited);
    assert_int_equal(A.term, CSW_PROCESS_TERMINATION_TIMEOUT);
    do_read(&B, id, 0, 0);
    assert_int_equal(B.code, 0);
    assert_int_equal(B.text_n, 8);
    do_read(&B, id, 8, 0);
    assert_int_equal(B.code, CSW_ERROR_TIMEOUT);
    do_status(&B, id);
    assert_false(B.has_signal); /* the server's own kill is not reported as a signal */
}

static bool sleeper_alive(const char *arg)
{
    DIR *d = opendir("/proc");
    struct dirent *e;
    bool found = false;
    while (d && (e = readdir(d))) {
        char path[300], buf[256];
        snprintf(path, sizeof path, "/proc/%s/cmdline", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = '\0';
        for (size_t i = 0; i < n; i++)
            if (buf[i] == '\0')
                buf[i] = ' ';
        if (strstr(buf, arg) && strncmp(buf, "sleep", 5) == 0)
            found = true;
    }
    if (d)
        closedir(d);
    return found;
}

static void test_terminate_group(void **state)
{
    (void)state;
    char id[CS_SUPERVISOR_ID_SIZE];
    const char *argv[] = {"sh", "-c", "sleep 91.7 & sleep 91.8; wait", NULL};
    assert_int_equal(spawn(&A, false, 0, argv, id), 0);
    settle(200);
    assert_true(sleeper_alive("91.7"));
    struct csw_mcp_terminate_process_input in = {.process_id = {id, strlen(id)}};
    struct ctx c = {K_TERM, &B, F.loop};
    B.done = false;
    cs_supervisor_terminate(F.sup, &in, done_fn, &c);
    wait_for(&B);
    assert_true(B.exited);
    assert_false(sleeper_alive("91.7"));
    assert_false(sleeper_alive("91.8"));
    do_status(&B, id);
    assert_int_equal(B.term, CSW_PROCESS_TERMINATION_TERMINATED);
}

static void test_background_child_dies_with_leader(void **state)
{
    (void)state;
    const char *argv[] = {"sh", "-c", "sleep 92.3 & echo bye", NULL};
    assert_int_equal(spawn(&A, false, 5000, argv, NULL), 0);
    assert_true(A.exited);
    settle(50);
    assert_false(sleeper_alive("92.3"));
}

static void test_live_cap_and_missing_program(void **state)
{
    (void)state;
    const char *sl[] = {"sleep", "93.1", NULL};
    char ids[3][CS_SUPERVISOR_ID_SIZE];
    for (int i = 0; i < 3; i++)
        assert_int_equal(spawn(&A, false, 0, sl, ids[i]), 0);
    assert_int_equal(cs_supervisor_live(F.sup), 3);
    assert_int_equal(spawn(&A, false, 0, sl, NULL), CSW_ERROR_WORKSPACE_BUSY);
    assert_non_null(strstr(A.msg, "live process limit"));
    for (int i = 0; i < 3; i++) {
        struct csw_mcp_terminate_process_input in = {.process_id = {ids[i], strlen(ids[i])}};
        struct ctx c = {K_TERM, &B, F.loop};
        B.done = false;
        cs_supervisor_terminate(F.sup, &in, done_fn, &c);
        wait_for(&B);
    }
    assert_int_equal(cs_supervisor_live(F.sup), 0);
    const char *missing[] = {"no-such-program-xyz", NULL};
    assert_int_equal(spawn(&A, false, 0, missing, NULL), CSW_ERROR_PROCESS_SPAWN_FAILED);
    const char *rel[] = {"./missing.sh", NULL};
    assert_int_equal(spawn(&A, false, 0, rel, NULL), CSW_ERROR_PROCESS_SPAWN_FAILED);
    assert_int_equal(cs_supervisor_live(F.sup), 0);
    /* retain_max 2: the oldest exited handles are gone */
    do_status(&B, ids[0]);
    assert_int_equal(B.code, CSW_ERROR_PROCESS_NOT_FOUND);
    do_status(&B, ids[2]);
    assert_int_equal(B.code, 0);
}

static void terminate_ids(char ids[][CS_SUPERVISOR_ID_SIZE], size_t n)
{
    for (size_t i = 0; i < n; i++) {
        struct csw_mcp_terminate_process_input in = {.process_id = {ids[i], strlen(ids[i])}};
        struct ctx c = {K_TERM, &B, F.loop};
        B.done = false;
        cs_supervisor_terminate(F.sup, &in, done_fn, &c);
        wait_for(&B);
    }
}

/* A workspace's own cap (max_live_processes) counts its live processes only; the runner's
 * (lim.max_live, 3 here) counts every workspace's; each refusal names its limit. */
static void test_workspace_live_cap(void **state)
{
    (void)state;
    const char *sl[] = {"sleep", "93.4", NULL};
    char ids[3][CS_SUPERVISOR_ID_SIZE];
    struct wsl a = {"a", 2, 0, 0}, b = {"b", 2, 0, 0};
    assert_int_equal(spawn_ws(&A, false, 0, sl, ids[0], &a), 0);
    assert_int_equal(spawn_ws(&A, false, 0, sl, ids[1], &a), 0);
    assert_int_equal(spawn_ws(&A, false, 0, sl, NULL, &a), CSW_ERROR_WORKSPACE_BUSY);
    assert_non_null(strstr(A.msg, "live process limit reached (max_live_processes 2)"));
    assert_int_equal(cs_supervisor_live(F.sup), 2);
    assert_int_equal(spawn_ws(&A, false, 0, sl, ids[2], &b), 0);
    assert_int_equal(spawn_ws(&A, false, 0, sl, NULL, &b), CSW_ERROR_WORKSPACE_BUSY);
    assert_non_null(strstr(A.msg, "the runner's cap of 3 processes"));
    /* One of a's ends: a may start one again. */
    terminate_ids(ids, 1);
    assert_int_equal(spawn_ws(&A, false, 0, sl, ids[0], &a), 0);
    terminate_ids(ids, 3);
    assert_int_equal(cs_supervisor_live(F.sup), 0);
    assert_false(sleeper_alive("93.4"));
}

/* A spawn's own time limit and ring win over the supervisor's (1500 ms, 1024 bytes here);
 * CS_SUPERVISOR_NO_TIME_LIMIT sets no timer at all. */
static void test_spawn_limits(void **state)
{
    (void)state;
    char id[CS_SUPERVISOR_ID_SIZE];
    /* No time limit: 2.5 s is past the supervisor's 1.5 s, and the command ends by itself. */
    const char *slow[] = {"sh", "-c", "sleep 2.5; echo done", NULL};
    struct wsl none = {"a", 0, CS_SUPERVISOR_NO_TIME_LIMIT, 0};
    assert_int_equal(spawn_ws(&A, false, 5000, slow, id, &none), 0);
    assert_true(A.exited);
    assert_int_equal(A.term, CSW_PROCESS_TERMINATION_EXITED);
    assert_int_equal(A.exit_code, 0);
    assert_int_equal(A.text_n, 5);
    /* Its own time limit, shorter; the read past the end names it. */
    const char *sl[] = {"sh", "-c", "echo go; exec sleep 93.5", NULL};
    struct wsl quick = {"a", 0, 300, 0};
    int64_t t0 = cs_loop_now_ms();
    assert_int_equal(spawn_ws(&A, false, 5000, sl, id, &quick), 0);
    assert_true(A.exited);
    assert_int_equal(A.term, CSW_PROCESS_TERMINATION_TIMEOUT);
    assert_true(cs_loop_now_ms() - t0 < 1400);
    do_read(&B, id, 3, 0);
    assert_int_equal(B.code, CSW_ERROR_TIMEOUT);
    assert_non_null(strstr(B.msg, "time limit (300 ms)"));
    /* Its own ring: 3000 bytes into 100. */
    const char *many[] = {
        "sh", "-c", "i=0; while [ $i -lt 300 ]; do printf 0123456789; i=$((i+1)); done", NULL};
    struct wsl small = {"a", 0, 0, 100};
    assert_int_equal(spawn_ws(&A, false, 5000, many, id, &small), 0);
    assert_true(A.output_lost);
    assert_int_equal(A.text_n, 100);
    assert_int_equal(A.cursor, 3000);
    do_status(&B, id);
    assert_int_equal(B.retained_from, 2900);
}

static void test_stdin_and_env(void **state)
{
    (void)state;
    char id[CS_SUPERVISOR_ID_SIZE];
    const char *argv[] = {"sh", "-c", "cat; echo \"[$HOME|$TERM|$NO_COLOR|$CI|$LANG|$(pwd)]\"",
                          NULL};
    assert_int_equal(spawn(&A, false, 0, argv, id), 0);
    struct csw_mcp_write_stdin_input in = {
        .process_id = {id, strlen(id)}, .data = {"hi\n", 3}, .has_close = true, .close = true};
    struct ctx c = {K_WRITE, &B, F.loop};
    B.done = false;
    cs_supervisor_write_stdin(F.sup, &in, done_fn, &c);
    wait_for(&B);
    assert_int_equal(B.code, 0);
    assert_int_equal(B.total, 3);
    B.done = false;
    cs_supervisor_write_stdin(F.sup, &in, done_fn, &c);
    wait_for(&B);
    assert_int_equal(B.code, CSW_ERROR_PROCESS_NOT_FOUND);
    /* Read on from each answer's cursor: a long poll that answers on new output or at the
     * exit. (Reading from 0 again would answer at once while output exists, so on a loaded
     * machine, with the process not yet gone, the loop never let the event loop see the exit.) */
    char got[512];
    size_t got_n = 0;
    int64_t cursor = 0;
    do {
        do_read(&B, id, cursor, 3000);
        assert_true(got_n + B.text_n <= sizeof got);
        memcpy(got + got_n, B.text, B.text_n);
        got_n += B.text_n;
        cursor = B.cursor;
    } while (!B.eof);
    char want[512];
    snprintf(want, sizeof want, "hi\n[%s|dumb|1|1|C.UTF-8|%s]\n", F.root, F.root);
    assert_int_equal(got_n, strlen(want));
    assert_memory_equal(got, want, strlen(want));
}

static void test_tty_size(void **state)
{
    (void)state;
    char id[CS_SUPERVISOR_ID_SIZE];
    const char *argv[] = {"sh", "-c", "stty size; read x; stty size", NULL};
    assert_int_equal(spawn(&A, true, 0, argv, id), 0);
    struct csw_mcp_process_resize_input rin = {
        .process_id = {id, strlen(id)}, .rows = 40, .cols = 120};
    struct ctx c = {K_RESIZE, &B, F.loop};
    settle(100);
    B.done = false;
    cs_supervisor_resize(F.sup, &rin, done_fn, &c);
    wait_for(&B);
    assert_int_equal(B.code, 0);
    struct csw_mcp_write_stdin_input win = {.process_id = {id, strlen(id)}, .data = {"\n", 1}};
    struct ctx wc = {K_WRITE, &B, F.loop};
    B.done = false;
    cs_supervisor_write_stdin(F.sup, &win, done_fn, &wc);
    wait_for(&B);
    do_status(&B, id);
    for (int i = 0; i < 100 && !B.exited; i++) {
        settle(20);
        do_status(&B, id);
    }
    assert_true(B.exited);
    do_read(&B, id, 0, 0);
    B.text[B.text_n] = '\0';
    assert_non_null(strstr(B.text, "24 80"));
    assert_non_null(strstr(B.text, "40 120"));
    B.done = false;
    cs_supervisor_resize(F.sup, &rin, done_fn, &c);
    wait_for(&B);
    assert_int_equal(B.code, CSW_ERROR_PROCESS_NOT_RUNNING);
}

/* ---- no plan outlives its run (R9): the pure and file-system helpers ---- */

static void test_plan_dir_pid(void **state)
{
    (void)state;
    pid_t pid = 0;
    assert_int_equal(cs__supervisor_plan_dir_pid("codespace-sandbox-1234-aZ09xY", &pid), 0);
    assert_int_equal(pid, 1234);
    assert_int_equal(cs__supervisor_plan_dir_pid("codespace-sandbox-2147483647-abcdef", &pid), 0);
    assert_int_equal(pid, 2147483647);
    static const char *const bad[] = {
        "codespace-sandbox-abcdef",             /* prepare by hand: no pid, never swept */
        "codespace-sandbox-probe-abcdef",       /* a probe run by hand: never swept */
        "codespace-sandbox-0-abcdef",           /* no pid 0 */
        "codespace-sandbox-012-abcdef",         /* leading zero */
        "codespace-sandbox-2147483648-abcdef",  /* over INT_MAX */
        "codespace-sandbox-99999999999-abcdef", /* eleven digits */
        "codespace-sandbox--1-abcdef",          /* sign */
        "codespace-sandbox-12-abcde",           /* five characters */
        "codespace-sandbox-12-abcdefg",         /* seven */
        "codespace-sandbox-12-abc.ef",          /* not mkdtemp's alphabet */
        "codespace-sandbox-12-abcdef/plan",     /* a path */
        "codespace-sandbox-12",                 /* nothing after the pid */
        "xcodespace-sandbox-12-abcdef",
        "",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        pid = 77;
        assert_int_not_equal(cs__supervisor_plan_dir_pid(bad[i], &pid), 0);
        assert_int_equal(pid, 77); /* untouched on refusal */
    }
}

/* Makes <helper tmpdir>/<name>/plan (0700 directory, 0600 file); writes the directory to dir. */
static void make_plan(const char *name, char *dir, size_t cap)
{
    snprintf(dir, cap, "%s/%s", cs__supervisor_helper_tmpdir(), name);
    assert_int_equal(mkdir(dir, 0700), 0);
    char plan[4200];
    snprintf(plan, sizeof plan, "%s/plan", dir);
    int fd = open(plan, O_WRONLY | O_CREAT | O_EXCL, 0600);
    assert_true(fd >= 0);
    close(fd);
}

static pid_t dead_pid(void)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(0);
    assert_int_equal(waitpid(pid, NULL, 0), pid);
    return pid;
}

static void test_plan_remove_only_prepare_shape(void **state)
{
    (void)state;
    const char *tmp = cs__supervisor_helper_tmpdir();
    char name[64], dir[4200], plan[4300];
    snprintf(name, sizeof name, "codespace-sandbox-%d-tstRmv", (int)getpid());
    make_plan(name, dir, sizeof dir);
    snprintf(plan, sizeof plan, "%s/plan", dir);
    /* not prepare's shape: refused, nothing touched */
    char other[4300];
    snprintf(other, sizeof other, "/nonexistent/%s/plan", name);
    assert_int_equal(cs__supervisor_plan_remove(other), -1);
    snprintf(other, sizeof other, "%s/%s/other", tmp, name);
    assert_int_equal(cs__supervisor_plan_remove(other), -1);
    snprintf(other, sizeof other, "%s/%s/x/plan", tmp, name);
    assert_int_equal(cs__supervisor_plan_remove(other), -1);
    snprintf(other, sizeof other, "%s/not-a-plan-dir/plan", tmp);
    assert_int_equal(cs__supervisor_plan_remove(other), -1);
    assert_int_equal(access(plan, F_OK), 0);
    /* prepare's shape: removed, then already gone */
    assert_int_equal(cs__supervisor_plan_remove(plan), 1);
    assert_int_not_equal(access(dir, F_OK), 0);
    assert_int_equal(cs__supervisor_plan_remove(plan), 0);
    /* a symlink in its place is not followed: the target's plan stays */
    char target[] = "/tmp/cs-test-plan-target-XXXXXX", tplan[64];
    assert_non_null(mkdtemp(target));
    snprintf(tplan, sizeof tplan, "%s/plan", target);
    int fd = open(tplan, O_WRONLY | O_CREAT | O_EXCL, 0600);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(symlink(target, dir), 0);
    assert_int_equal(cs__supervisor_plan_remove(plan), -1);
    assert_int_equal(access(tplan, F_OK), 0);
    assert_int_equal(unlink(dir), 0);
    assert_int_equal(unlink(tplan), 0);
    assert_int_equal(rmdir(target), 0);
}

static void test_plan_sweep_dead_runners_only(void **state)
{
    (void)state;
    char dead[4200], live[4200], name[64];
    snprintf(name, sizeof name, "codespace-sandbox-%d-tstDed", (int)dead_pid());
    make_plan(name, dead, sizeof dead);
    snprintf(name, sizeof name, "codespace-sandbox-%d-tstLiv", (int)getpid());
    make_plan(name, live, sizeof live);
    assert_true(cs__supervisor_plan_sweep() >= 1);
    assert_int_not_equal(access(dead, F_OK), 0);
    assert_int_equal(access(live, F_OK), 0); /* a live pid: maybe a running server's */
    char plan[4300];
    snprintf(plan, sizeof plan, "%s/plan", live);
    assert_int_equal(cs__supervisor_plan_remove(plan), 1);
}

/* The plan handed to `run --plan-fd` (issue 20): a memfd no child inherits by accident (close-
 * on-exec, above the child's fixed numbers), sealed so nobody can change it after the encoder
 * wrote it, and holding exactly the plan, as the helper's decoder reads it. */
static void test_plan_memfd_sealed(void **state)
{
    (void)state;
    struct cs_str argv[2] = {{(char *)"/bin/echo", 9}, {(char *)"hi", 2}};
    struct csw_sandbox_plan plan;
    memset(&plan, 0, sizeof plan);
    plan.argv.v = argv;
    plan.argv.n = 2;
    plan.workspace_root = (struct cs_str){(char *)"/w", 2};
    plan.cwd = plan.workspace_root;
    plan.network = CSW_SANDBOX_PLAN_NETWORK_RESTRICTED;
    plan.has_workspace_fd = true;
    plan.workspace_fd = 3;
    struct cs_diag d = {0};
    int fd = cs__supervisor_sandbox_plan_memfd(&plan, &d);
    assert_true(fd >= 6);
    assert_int_equal(fcntl(fd, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
    int seals = fcntl(fd, F_GET_SEALS);
    int need = F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE;
    assert_int_equal(seals & need, need);
    assert_int_equal(write(fd, "x", 1), -1);                           /* F_SEAL_WRITE */
    assert_int_equal(ftruncate(fd, 0), -1);                            /* F_SEAL_SHRINK */
    assert_int_equal(ftruncate(fd, 1 << 20), -1);                      /* F_SEAL_GROW */
    assert_int_equal(fcntl(fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE), -1); /* F_SEAL_SEAL */
    char buf[4096];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    assert_true(n > 0);
    buf[n] = '\0';
    json_error_t jerr;
    json_t *j = json_loads(buf, 0, &jerr);
    assert_non_null(j);
    struct csw_sandbox_plan back;
    struct cs_wire_diag diag;
    assert_int_equal(csw_sandbox_plan_decode(j, &back, &diag), CS_WIRE_OK);
    json_decref(j);
    assert_int_equal(back.argv.n, 2);
    assert_string_equal(back.argv.v[1].s, "hi");
    assert_string_equal(back.workspace_root.s, "/w");
    assert_true(back.has_workspace_fd && back.workspace_fd == 3);
    csw_sandbox_plan_free(&back);
    close(fd);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_echo_and_exit_code, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ring_wraps, setup, teardown),
        cmocka_unit_test_setup_teardown(test_utf8_tail_held, setup, teardown),
        cmocka_unit_test_setup_teardown(test_signal_from_outside, setup, teardown),
        cmocka_unit_test_setup_teardown(test_time_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_terminate_group, setup, teardown),
        cmocka_unit_test_setup_teardown(test_background_child_dies_with_leader, setup, teardown),
        cmocka_unit_test_setup_teardown(test_live_cap_and_missing_program, setup, teardown),
        cmocka_unit_test_setup_teardown(test_workspace_live_cap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_spawn_limits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stdin_and_env, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tty_size, setup, teardown),
        cmocka_unit_test(test_plan_dir_pid),
        cmocka_unit_test(test_plan_remove_only_prepare_shape),
        cmocka_unit_test(test_plan_sweep_dead_runners_only),
        cmocka_unit_test(test_plan_memfd_sealed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
