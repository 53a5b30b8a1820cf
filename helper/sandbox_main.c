/*
 * codespace-linux-sandbox: the command sandbox helper (docs/contract/sandbox.md sections 1, 3, 4).
 *
 *   codespace-linux-sandbox probe
 *   codespace-linux-sandbox prepare          < request.json   > {"type":"prepared",...}
 *   codespace-linux-sandbox run --plan <absolute path>
 *   codespace-linux-sandbox run --plan-fd <n>   (the runner: a sealed memfd, inherited as fd n)
 *   codespace-linux-sandbox run --wait-fd <n>   (the runner's pre-started helper: fd n a
 *                                                socket the plan and stdio come on, then as
 *                                                run --plan-fd 5; sandbox_wait.c)
 *   codespace-linux-sandbox netns-hold <label>  (a workspace's network namespace, held until
 *                                                EOF on stdin; sandbox_netns.c)
 *
 * Trust: argv comes from the runner; the helper ignores its own environment except TMPDIR and
 * CODESPACE_SANDBOX_RUNNER_PID (the runner's pid, named in plan directories: sandbox_plan.c).
 * Lifetime (issue 34): `probe` and `prepare` started by a runner that named itself so (it spawns
 * them directly) never outlive it: prepare dies with it (parent-death signal, then the parent
 * checked against that pid, so a runner gone before the arming is seen too); probe, which has a
 * child and a workspace of its own to remove, watches its parent while it waits. `run` is
 * started with the runner's own parent-death signal (supervisor_spawn.c).
 * helper/README.md is the contract with the runner (exit codes, signals, terminal).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base_version.h"
#include "sandbox.h"

#define USAGE       "usage: codespace-linux-sandbox run --plan <path>\n"
#define PLAN_FD_MAX 1023 /* the fds run closes go up to here, and this one with them */

#define USAGE_MORE                                                                                 \
    "       codespace-linux-sandbox run --plan-fd <n>\n"                                           \
    "       codespace-linux-sandbox run --wait-fd <n>\n"                                           \
    "       codespace-linux-sandbox prepare < request.json\n"                                      \
    "       codespace-linux-sandbox probe\n"                                                       \
    "       codespace-linux-sandbox netns-hold <label>\n"                                          \
    "       codespace-linux-sandbox --help | --version\n"

static int usage(void)
{
    fputs(USAGE USAGE_MORE, stderr);
    return CS_SBX_EXIT_USAGE;
}

/* The runner that started us, when it named itself (CODESPACE_SANDBOX_RUNNER_PID, its own pid:
 * it is our parent), else 0. */
static pid_t runner_pid(void)
{
    long pid = 0;
    return cs_sbx_runner_pid(&pid) == 0 ? (pid_t)pid : 0;
}

/* True when the runner that named itself is no longer our parent: it is gone. */
static bool runner_gone(pid_t runner)
{
    if (runner > 0 && getppid() != runner) {
        fprintf(stderr, "codespace-linux-sandbox: the runner (pid %d) is gone\n", (int)runner);
        return true;
    }
    return false;
}

/* --help: what each mode does (docs/operations.md, "The sandbox helper"). */
static int help(void)
{
    fputs(USAGE USAGE_MORE
          "\n"
          "The command sandbox helper of codespace-mcp and codespace-runtime, which start it;\n"
          "helper/README.md is its contract with them.\n"
          "\n"
          "  probe                 run /usr/bin/true sandboxed; exit 0 when the sandbox works,\n"
          "                        else the reason on stderr\n"
          "  prepare               read a sandbox request (JSON) on stdin, write a plan file and\n"
          "                        print {\"type\":\"prepared\",\"plan_path\":...}\n"
          "  run --plan PATH       run the plan at the absolute PATH in the sandbox\n"
          "  run --plan-fd N       the same, the plan in the sealed memfd inherited as fd N\n"
          "  run --wait-fd N       wait on the socket fd N for a plan and the command's stdio\n"
          "  netns-hold LABEL      make and hold a workspace's network namespace (lo up) until\n"
          "                        the supervisor's pipe on stdin closes\n"
          "  --version             print the version and exit\n"
          "  --help                print this text and exit\n"
          "\n"
          "Environment: TMPDIR (plan and probe directories, default /tmp) and\n"
          "CODESPACE_SANDBOX_RUNNER_PID (set by the runner: its pid, named in plan\n"
          "directories); every other variable is ignored.\n"
          "Exit status: 0 for --help and --version, 2 for wrong usage; probe 0 or 1; run the\n"
          "command's status (or its signal), 125 when the sandbox could not be set up.\n",
          stdout);
    return 0;
}

/* The probe's own bound on its sandboxed `true`: under the runner's 5 s (HELPER_LIMIT_MS in
 * src/supervisor/supervisor_sandbox.c), so a hung probe removes its workspace itself and says
 * "timed out" before the runner's SIGKILL can leave it behind. */
#define PROBE_LIMIT_SEC 4

/* Runs `run --plan` for /usr/bin/true in a private probe workspace, PROBE_LIMIT_SEC at most; less
 * when the runner that started it goes (checked every 5 ms: the child killed, the workspace
 * removed). SIGPIPE is ignored here: a runner that is gone took the read end of our stderr with
 * it, and the line saying so must not kill us before the workspace is removed (it did: one probe
 * directory left in TMPDIR for each runner killed while it probed). The workspace is named as a
 * plan directory is, after the runner's pid, so that if we are killed anyway (SIGKILL leaves no
 * time to clean up) the next runner's start-up sweep removes it once that runner is gone. */
static int probe(void)
{
    signal(SIGPIPE, SIG_IGN);
    pid_t runner = runner_pid();
    const char *t = "/usr/bin/true";
    if (access(t, X_OK) < 0)
        t = "/bin/true";
    char ws[4096], owner[24] = "probe-";
    if (runner > 0)
        snprintf(owner, sizeof owner, "%ld-", (long)runner);
    snprintf(ws, sizeof ws, "%s/" CS_SBX_DIR_PREFIX "%sXXXXXX", cs_sbx_tmpdir(), owner);
    if (!mkdtemp(ws)) {
        fprintf(stderr, "codespace-linux-sandbox: probe workspace: %s\n", strerror(errno));
        return 1;
    }
    char real[4096];
    if (!realpath(ws, real)) {
        rmdir(ws);
        return 1;
    }
    struct cs_str argv[1] = {{(char *)t, strlen(t)}};
    struct csw_sandbox_prepare_request q;
    memset(&q, 0, sizeof q);
    q.workspace_root = (struct cs_str){real, strlen(real)};
    q.command_cwd = q.workspace_root;
    q.writable_workspace = true;
    q.network = CSW_SANDBOX_PREPARE_REQUEST_NETWORK_RESTRICTED;
    q.argv.v = argv;
    q.argv.n = 1;
    struct cs_diag err = {0};
    char *plan = NULL;
    int rc = 1;
    if (cs_sbx_prepare_request(&q, &plan, &err) < 0) {
        fprintf(stderr, "codespace-linux-sandbox: probe: %s\n", err.text);
        goto out;
    }
    pid_t self = getpid();
    pid_t pid = runner_gone(runner) ? -1 : fork();
    if (pid < 0)
        goto out;
    if (pid == 0) {
        /* It goes with us, whatever ends us. */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0 || getppid() != self)
            _exit(127);
        signal(SIGPIPE, SIG_DFL); /* run as a real command runs */
        int null = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0)
            _exit(127);
        char *args[] = {(char *)"codespace-linux-sandbox", (char *)"run", (char *)"--plan", plan,
                        NULL};
        execv("/proc/self/exe", args);
        _exit(127);
    }
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    int st = 0;
    for (;;) {
        pid_t p = waitpid(pid, &st, WNOHANG);
        if (p == pid)
            break;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (runner_gone(runner)) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            st = -1;
            break;
        }
        if (now.tv_sec - start.tv_sec >= PROBE_LIMIT_SEC) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            fprintf(stderr, "codespace-linux-sandbox: probe: timed out\n");
            st = -1;
            break;
        }
        poll(NULL, 0, 5);
    }
    rc = st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
    if (rc != 0 && st != -1)
        fprintf(stderr, "codespace-linux-sandbox: probe: the sandboxed true failed (%d)\n", st);
out:
    if (plan) { /* normally removed by run already */
        unlink(plan);
        char *slash = strrchr(plan, '/');
        *slash = '\0';
        rmdir(plan);
    }
    free(plan);
    rmdir(real);
    return rc;
}

/* The plan the runner encoded itself, handed over as a memfd inherited as fd (`run --plan-fd`):
 * trusted only when it is a regular file of our uid that nobody can change any more (sealed
 * against writes, growing, shrinking and further seal changes), so what is read here is what the
 * runner wrote. The fd is closed whatever happens: neither the init nor the command inherits it.
 * Then the same checks as a plan file (cs_sbx_plan_parse). */
/* A descriptor number argument of `what` (3 to PLAN_FD_MAX, decimal, no leading zero). Returns
 * it, or -1 with err. */
static long fd_arg(const char *what, const char *arg, struct cs_diag *err)
{
    long fd = 0;
    size_t i = 0;
    for (; arg[i] >= '0' && arg[i] <= '9' && i < 5; i++)
        fd = fd * 10 + (arg[i] - '0');
    if (i == 0 || arg[i] != '\0' || (arg[0] == '0' && i > 1) || fd < 3 || fd > PLAN_FD_MAX) {
        cs_diag_set(err, CSW_ERROR_PROCESS_SPAWN_FAILED,
                    "%s must be a descriptor number from 3 to %d", what, PLAN_FD_MAX);
        return -1;
    }
    return fd;
}

static int plan_load_fd(const char *arg, struct csw_sandbox_plan *out, struct cs_diag *err)
{
    memset(out, 0, sizeof *out);
    long fd = fd_arg("--plan-fd", arg, err);
    if (fd < 0)
        return -1;
    const unsigned need = F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE;
    struct stat st;
    int seals = fcntl((int)fd, F_GET_SEALS);
    char *buf = NULL;
    int rc = -1;
    if (fstat((int)fd, &st) < 0) {
        cs_diag_set(err, CSW_ERROR_PROCESS_SPAWN_FAILED, "plan fd %ld: %s", fd, strerror(errno));
        return -1; /* not open: nothing to close */
    }
    if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || seals < 0 ||
        ((unsigned)seals & need) != need) {
        cs_diag_set(err, CSW_ERROR_PROCESS_SPAWN_FAILED,
                    "plan fd %ld is not a sealed memfd of this user", fd);
        goto out;
    }
    if (st.st_size <= 0 || (size_t)st.st_size > CS_SBX_PLAN_MAX) {
        cs_diag_set(err, CSW_ERROR_PROCESS_SPAWN_FAILED, "the plan is empty or over %u bytes",
                    CS_SBX_PLAN_MAX);
        goto out;
    }
    size_t n = (size_t)st.st_size, got = 0;
    buf = malloc(n);
    if (!buf) {
        cs_diag_set(err, CSW_ERROR_PROCESS_SPAWN_FAILED, "out of memory");
        goto out;
    }
    while (got < n) {
        ssize_t r = pread((int)fd, buf + got, n - got, (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            cs_diag_set(err, CSW_ERROR_PROCESS_SPAWN_FAILED, "read plan: %s",
                        r < 0 ? strerror(errno) : "short read");
            goto out;
        }
        got += (size_t)r;
    }
    close((int)fd);
    fd = -1;
    rc = cs_sbx_plan_parse(buf, n, out, err);
out:
    if (fd >= 0)
        close((int)fd);
    free(buf);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return usage();
    if (argc == 2 && strcmp(argv[1], "--help") == 0)
        return help();
    if (argc == 2 && strcmp(argv[1], "--version") == 0) {
        printf("codespace-linux-sandbox %s\n", CS_VERSION);
        return 0;
    }
    if (strcmp(argv[1], "probe") == 0 && argc == 2)
        return probe();
    if (strcmp(argv[1], "prepare") == 0 && argc == 2) {
        pid_t runner = runner_pid();
        if (runner > 0 && (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0 || runner_gone(runner)))
            return 1;
        return cs_sbx_prepare_main();
    }
    if (strcmp(argv[1], "netns-hold") == 0)
        return cs_sbx_netns_hold_main(argc, argv);
    if (strcmp(argv[1], "run") != 0)
        return usage();
    bool by_fd = argc == 4 && strcmp(argv[2], "--plan-fd") == 0;
    bool wait = argc == 4 && strcmp(argv[2], "--wait-fd") == 0;
    if (argc != 4 || (!by_fd && !wait && (strcmp(argv[2], "--plan") != 0 || argv[3][0] != '/'))) {
        fputs(USAGE, stderr);
        return CS_SBX_EXIT_USAGE;
    }
    struct csw_sandbox_plan plan;
    struct cs_diag err = {0};
    if (wait) {
        /* The pre-started helper: the plan and the command's descriptors arrive on the socket,
         * and from here on this is `run --plan-fd 5` (sandbox_wait.c). */
        long sock = fd_arg("--wait-fd", argv[3], &err);
        int got = sock < 0 ? -1 : cs_sbx_wait((int)sock, &err);
        if (got == 0)
            return 0; /* the runner closed the socket: no command came */
        if (got < 0)
            cs_sbx_diex("%s", err.text);
        by_fd = true;
        argv[3] = (char *)"5";
    }
    if ((by_fd ? plan_load_fd(argv[3], &plan, &err) : cs_sbx_plan_load(argv[3], &plan, &err)) < 0)
        cs_sbx_diex("%s", err.text);
    /* Nothing the runner left open reaches the sandbox, but the held workspace root the plan
     * names (the runner passes it as fd 3). */
    /* One close_range per gap between the kept descriptors (3 to 1023, validated), not a close
     * per number: a thousand system calls were 80 us of every spawn (issue 20). */
    unsigned keep[4], nk = 0;
    if (plan.has_workspace_fd)
        keep[nk++] = (unsigned)plan.workspace_fd;
    if (plan.has_report_fd)
        keep[nk++] = (unsigned)plan.report_fd;
    if (plan.has_netns_fd)
        keep[nk++] = (unsigned)plan.netns_fd;
    if (plan.has_userns_fd)
        keep[nk++] = (unsigned)plan.userns_fd;
    for (unsigned i = 1; i < nk; i++) /* distinct (validated): an insertion sort of four */
        for (unsigned k = i; k > 0 && keep[k - 1] > keep[k]; k--) {
            unsigned t = keep[k];
            keep[k] = keep[k - 1];
            keep[k - 1] = t;
        }
    unsigned from = 3;
    for (unsigned i = 0; i < nk; i++) {
        if (keep[i] > from && close_range(from, keep[i] - 1, 0) < 0)
            cs_sbx_die("close_range");
        from = keep[i] + 1;
    }
    if (close_range(from, ~0u, 0) < 0)
        cs_sbx_die("close_range");
    /* The denial report's pipe (docs/contract/tools.md §6): the runner reads it after the end. */
    if (plan.has_report_fd) {
        struct stat st;
        int fl = fcntl((int)plan.report_fd, F_GETFL);
        if (fstat((int)plan.report_fd, &st) < 0 ||
            !(S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode)) || fl < 0 ||
            (fl & O_ACCMODE) == O_RDONLY)
            cs_sbx_diex("report_fd %lld is not a writable pipe", (long long)plan.report_fd);
        fcntl((int)plan.report_fd, F_SETFD, FD_CLOEXEC);
    }
    /* The workspace's namespaces (a netns-hold helper's): checked for their type. */
    if (plan.has_netns_fd)
        cs_sbx_netns_check((int)plan.netns_fd, CLONE_NEWNET, "netns_fd");
    if (plan.has_userns_fd)
        cs_sbx_netns_check((int)plan.userns_fd, CLONE_NEWUSER, "userns_fd");
    cs_sbx_run(&plan);
}
