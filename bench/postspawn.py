#!/usr/bin/python3
"""What a process start costs the processes that run after it on the same CPU (issue 33): the
reason the uds hop of exec_command can miss its target on one CPU of some hosts while read's
meets it. No code of ours runs here.

Two processes share CPU 0 and bounce one byte over a socketpair, as a gateway and its worker do;
the second (B) is this program started afresh by the first (A), as a worker is a program of its
own. Before each bounce, A does one of:
  none             nothing
  spawn            posix_spawn /bin/true and wait for it (what exec_command does, in small)
  fork             fork a child that exits at once (no exec)
  thrash           write 8 MiB of its own memory (evicts the data caches, starts no process)
  spawn+warm       spawn, then run the code B is about to run: the same file's pages, but at
                   other addresses (each process's layout is randomized)
  spawn+warm-same  the same, with address randomization off for both, so A runs B's code at
                   B's addresses
On each wake-up B runs its work and measures it with CLOCK_THREAD_CPUTIME_ID:
  code        a call through FUNCS generated functions, about 120 bytes of text each (3000 by
              default: some 360 KB, the order of a gateway's path from wake-up to answer)
  data        a read of one byte on each of PAGES 4 KiB pages of its own (no huge pages)
Printed: B's work per wake-up in µs, the median of the blocks, and its excess over `none`.

What it showed on a PVM guest (bench/README.md, 2026-12-04): spawn and fork add tens of µs to
code and about 1 µs to data; thrash adds much less than spawn; spawn+warm does not help and
spawn+warm-same takes the cost away. So a process start loses state that is kept per virtual
address of code (branch prediction, the decoded-instruction cache), not cached memory: every
process that runs after it pays again for each branch on its path, and nothing another process
runs can pay for it. bench/uds.py's read-after-spawn row measures the same cost on the servers'
real path.

Run:  /usr/bin/python3 bench/postspawn.py [--rounds N] [--blocks B] [--funcs F] [--pages P]
Needs cc. Exits 0: this measures the host, it judges nothing.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

MODES = ("none", "spawn", "fork", "thrash", "spawn+warm", "spawn+warm-same")

PROGRAM = r"""
#define _GNU_SOURCE
#include <sched.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;
void runall(long x);

static double cpu_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void xfer(int fd, char *c, int out)
{
    if ((out ? write(fd, c, 1) : read(fd, c, 1)) != 1) {
        perror("postspawn: socketpair");
        exit(2);
    }
}

/* B: waits for a byte, runs its work, measures it, answers. */
static int second(int fd, int rounds, int code, int pages)
{
    size_t len = (size_t)(pages + 1) * 4096;
    volatile char *buf =
        mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED)
        return 2;
    madvise((void *)buf, len, MADV_NOHUGEPAGE);
    for (int i = 0; i <= pages; i++)
        buf[(size_t)i * 4096] = 1;
    double sum = 0;
    char c;
    int warm = rounds / 10;
    for (int r = 0; r < rounds; r++) {
        xfer(fd, &c, 0);
        double t0 = cpu_us();
        if (code)
            runall(r);
        else
            for (int i = 0; i < pages; i++)
                (void)buf[(size_t)i * 4096];
        double t1 = cpu_us();
        if (r >= warm)
            sum += t1 - t0;
        xfer(fd, &c, 1);
    }
    printf("%.3f %p\n", sum / (rounds - warm), (void *)runall);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 6 && strcmp(argv[1], "B") == 0)
        return second(atoi(argv[2]), atoi(argv[3]), strcmp(argv[4], "code") == 0, atoi(argv[5]));
    if (argc != 5) {
        fprintf(stderr, "usage: postspawn ROUNDS MODE code|data PAGES\n");
        return 2;
    }
    const char *mode = argv[2];
    int code = strcmp(argv[3], "code") == 0;
    /* spawn+warm-same: both processes without address randomization, so B's code sits at
     * the addresses A warmed (A runs itself again once to get there). */
    if (strcmp(mode, "spawn+warm-same") == 0 && !(personality(0xffffffff) & ADDR_NO_RANDOMIZE)) {
        personality(ADDR_NO_RANDOMIZE);
        execv("/proc/self/exe", argv);
        perror("postspawn: execv");
        return 2;
    }
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(0, &one);
    if (sched_setaffinity(0, sizeof one, &one) != 0) {
        perror("postspawn: sched_setaffinity");
        return 2;
    }
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
        return 2;
    char *thrash = malloc(8 << 20);
    if (!thrash)
        return 2;
    memset(thrash, 1, 8 << 20);
    /* B is this program started afresh, as a worker is a program of its own. */
    pid_t b = fork();
    if (b == 0) {
        char fd[16];
        snprintf(fd, sizeof fd, "%d", sv[1]);
        execl("/proc/self/exe", "postspawn", "B", fd, argv[1], argv[3], argv[4], (char *)NULL);
        _exit(3);
    }
    close(sv[1]);
    int rounds = atoi(argv[1]);
    int warm = strncmp(mode, "spawn+warm", 10) == 0 && code;
    char c = 'x';
    for (int r = 0; r < rounds; r++) {
        if (strncmp(mode, "spawn", 5) == 0) {
            pid_t q;
            char *av[] = {(char *)"true", NULL};
            if (posix_spawn(&q, "/bin/true", NULL, NULL, av, environ) != 0)
                return 2;
            waitpid(q, NULL, 0);
            if (warm)
                runall(r);
        } else if (strcmp(mode, "fork") == 0) {
            pid_t q = fork();
            if (q == 0)
                _exit(0);
            waitpid(q, NULL, 0);
        } else if (strcmp(mode, "thrash") == 0) {
            for (int i = 0; i < (8 << 20); i += 64)
                thrash[i]++;
        }
        xfer(sv[0], &c, 1);
        xfer(sv[0], &c, 0);
    }
    int st;
    waitpid(b, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 2;
}
"""


def generate(work, funcs):
    """Writes the program and FUNCS small distinct functions beside it; returns the binary."""
    src = os.path.join(work, "postspawn.c")
    body = os.path.join(work, "body.c")
    with open(src, "w") as f:
        f.write(PROGRAM)
    with open(body, "w") as f:
        f.write("volatile long g;\n")
        for i in range(funcs):
            f.write("__attribute__((noinline)) void f%d(long x);\n" % i)
            f.write("void f%d(long x) { if (x & %d) g += x * %d; else g ^= %d; if (g > %d) g -= 3; }\n"
                    % (i, i % 7 + 1, i, i, i))
        f.write("void runall(long x);\nvoid runall(long x)\n{\n")
        for i in range(funcs):
            f.write("    f%d(x);\n" % i)
        f.write("}\n")
    exe = os.path.join(work, "postspawn")
    cc = shutil.which("cc") or shutil.which("gcc")
    subprocess.run([cc, "-O1", "-o", exe, src, body], check=True)
    return exe


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=300, help="bounces per block (default 300)")
    ap.add_argument("--blocks", type=int, default=3, help="blocks per cell, interleaved (default 3)")
    ap.add_argument("--funcs", type=int, default=3000, help="generated functions (default 3000)")
    ap.add_argument("--pages", type=int, default=256, help="data pages B reads (default 256)")
    a = ap.parse_args()
    if not (shutil.which("cc") or shutil.which("gcc")):
        sys.exit("postspawn: no C compiler (cc)")
    if a.rounds < 20 or a.blocks < 1 or a.funcs < 1 or a.pages < 1:
        sys.exit("postspawn: --rounds >= 20, --blocks, --funcs and --pages >= 1")
    work = tempfile.mkdtemp(prefix="cs-bench-postspawn-")
    try:
        exe = generate(work, a.funcs)
        text = os.path.getsize(exe)
        cells = {(k, m): [] for k in ("code", "data") for m in MODES}
        for _ in range(a.blocks):
            for kind, mode in cells:
                if kind == "data" and mode.startswith("spawn+warm"):
                    continue
                out = subprocess.run([exe, str(a.rounds), mode, kind, str(a.pages)],
                                     capture_output=True, text=True, check=True).stdout
                cells[(kind, mode)].append(float(out.split()[0]))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("B's work per wake-up, both processes on CPU 0, median of %d blocks of %d rounds"
          % (a.blocks, a.rounds))
    print("code: %d generated functions (binary %d KB); data: %d pages of 4 KiB"
          % (a.funcs, text // 1024, a.pages))
    print("%-8s %-16s %10s %12s" % ("work", "before it", "µs", "over none"))
    for kind in ("code", "data"):
        base = statistics.median(cells[(kind, "none")])
        for mode in MODES:
            xs = cells[(kind, mode)]
            if not xs:
                continue
            m = statistics.median(xs)
            print("%-8s %-16s %10.1f %+12.1f" % (kind, mode, m, m - base))
    return 0


if __name__ == "__main__":
    sys.exit(main())
