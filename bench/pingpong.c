/*
 * pingpong: this machine's floor for one request/response between two processes, the part of a
 * uds runner call no code of ours can remove. A parent and a forked child each wait in
 * epoll_wait on their end of a Unix stream socketpair; the parent writes one byte, the child
 * reads it and writes it back, N times. Prints the median and mean round trip in microseconds.
 *
 * Built and run by bench/uds.py (cc -O2 -D_GNU_SOURCE); not part of the product.
 * Usage: pingpong [N=20000] [same|cross|chain]
 *   same: both processes on CPU 0 (a wake-up hands the CPU over); cross: the parent on CPU 0,
 *   the child on CPU 1 (every wake-up crosses CPUs); neither: where the scheduler puts them,
 *   which on a 2-CPU VM flips between the two from run to run.
 *   chain: three processes on CPU 0, the byte going parent -> middle -> end -> middle -> parent:
 *   the shape of a uds call (client, gateway, worker) where `same` is the shape of an in-process
 *   one (client, gateway). chain - same is what the hop costs on one CPU before any code of ours
 *   runs: two more switches, and every switch among three address spaces, which on some guests
 *   costs more than between two (issue 33: about 12.5 against 7 µs a switch on a PVM guest).
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

/* Waits until fd is readable, then reads what is there. Returns the bytes read (0: EOF). */
static ssize_t wait_read(int ep, int fd, char *buf, size_t cap)
{
    struct epoll_event ev;
    if (epoll_wait(ep, &ev, 1, -1) != 1)
        return -1;
    return read(fd, buf, cap);
}

static int watch(int fd)
{
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN};
    if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
        perror("pingpong: epoll");
        exit(1);
    }
    return ep;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Pins the calling process to one CPU; 0, or -1 with errno. */
static int pin(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return sched_setaffinity(0, sizeof set, &set);
}

/* Echoes what arrives on fd back to it until EOF; the exit status says whether all went. */
static void echo(int fd)
{
    int ep = watch(fd);
    char buf[64];
    ssize_t r;
    while ((r = wait_read(ep, fd, buf, sizeof buf)) > 0)
        if (write(fd, buf, (size_t)r) != r)
            _exit(1);
    _exit(0);
}

/* The middle of the chain: what arrives from up goes on down, and the answer from down goes back
 * up. */
static void relay(int up, int down)
{
    int ep_up = watch(up), ep_down = watch(down);
    char buf[64];
    ssize_t r;
    while ((r = wait_read(ep_up, up, buf, sizeof buf)) > 0)
        if (write(down, buf, (size_t)r) != r || wait_read(ep_down, down, buf, sizeof buf) != r ||
            write(up, buf, (size_t)r) != r)
            _exit(1);
    _exit(0);
}

/* `chain`: the parent on up[0], the middle (relay) between up[1] and down[0], the end (echo) on
 * down[1], all three on CPU 0. Fills rt with n round trips; 0, or -1 after saying why. */
static int chain(int n, double *rt)
{
    int up[2], down[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, up) != 0 ||
        socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, down) != 0 || pin(0) != 0) {
        perror("pingpong: chain");
        return -1;
    }
    pid_t end = fork();
    if (end == 0) {
        close(up[0]);
        close(up[1]);
        close(down[0]);
        echo(down[1]);
    }
    pid_t middle = end < 0 ? -1 : fork();
    if (middle == 0) {
        close(up[0]);
        close(down[1]);
        relay(up[1], down[0]);
    }
    close(up[1]);
    close(down[0]);
    close(down[1]);
    if (end < 0 || middle < 0) {
        perror("pingpong: fork");
        return -1;
    }
    int ep = watch(up[0]);
    char buf[64];
    for (int i = 0; i < n; i++) {
        double t0 = now_us();
        if (write(up[0], "x", 1) != 1 || wait_read(ep, up[0], buf, sizeof buf) != 1) {
            perror("pingpong: round trip");
            return -1;
        }
        rt[i] = now_us() - t0;
    }
    close(up[0]);
    waitpid(middle, NULL, 0);
    waitpid(end, NULL, 0);
    return 0;
}

static void report(double *rt, int n)
{
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += rt[i];
    qsort(rt, (size_t)n, sizeof *rt, by_value);
    printf("%.1f %.1f\n", rt[n / 2], sum / n);
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 20000;
    const char *place = argc > 2 ? argv[2] : "";
    if (strcmp(place, "chain") == 0) {
        double *rt = n >= 1 ? malloc(sizeof *rt * (size_t)n) : NULL;
        if (!rt || chain(n, rt) != 0)
            return 1;
        report(rt, n);
        free(rt);
        return 0;
    }
    int child_cpu = strcmp(place, "same") == 0 ? 0 : strcmp(place, "cross") == 0 ? 1 : -1;
    int sp[2];
    if (n < 1 || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) != 0) {
        perror("pingpong: socketpair");
        return 1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        perror("pingpong: fork");
        return 1;
    }
    char buf[64];
    if (child_cpu >= 0 && pin(pid == 0 ? child_cpu : 0) != 0) {
        perror("pingpong: sched_setaffinity");
        return 1;
    }
    if (pid == 0) {
        close(sp[0]);
        int ep = watch(sp[1]);
        ssize_t r;
        while ((r = wait_read(ep, sp[1], buf, sizeof buf)) > 0)
            if (write(sp[1], buf, (size_t)r) != r)
                _exit(1);
        _exit(0);
    }
    close(sp[1]);
    int ep = watch(sp[0]);
    double *rt = malloc(sizeof *rt * (size_t)n);
    if (!rt)
        return 1;
    for (int i = 0; i < n; i++) {
        double t0 = now_us();
        if (write(sp[0], "x", 1) != 1 || wait_read(ep, sp[0], buf, sizeof buf) != 1) {
            perror("pingpong: round trip");
            return 1;
        }
        rt[i] = now_us() - t0;
    }
    close(sp[0]);
    waitpid(pid, NULL, 0);
    report(rt, n);
    free(rt);
    return 0;
}
