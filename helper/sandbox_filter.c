/*
 * sandbox_filter: the command's seccomp filter as libseccomp rules (docs/contract/sandbox.md §3,
 * docs/contract/tools.md §6), in one place for its two users: codespace-sandbox-filter-export,
 * which exports the program of each variant at build time into sandbox_filter_bpf.h (the helper
 * loads that as it is: building and compiling the rules took about 330 us of every spawn, issue
 * 20), and the helper itself for a variant the build could not export (a build host without user
 * notification). Both produce the same program from the same rules.
 *
 * Trust: no input; the variant is chosen by the helper. Entry point: cs_sbx_filter_new.
 */
#include <errno.h>
#include <sched.h>
#include <seccomp.h>
#include <stdio.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/ioctl.h>
#include <termios.h>

#include "sandbox_filter.h"

/* SCMP_An() leaves datum_b implicit, which clang's -Wmissing-field-initializers rejects. */
static struct scmp_arg_cmp cmp(unsigned arg, enum scmp_compare op, uint64_t a, uint64_t b)
{
    struct scmp_arg_cmp c = {.arg = arg, .op = op, .datum_a = a, .datum_b = b};
    return c;
}

/* The filter being built and its first failure. */
struct build {
    scmp_filter_ctx ctx;
    char *err;
    size_t cap;
    bool failed;
};

static void fail_rule(struct build *b, const char *name, int rc)
{
    if (!b->failed)
        snprintf(b->err, b->cap, "seccomp rule %s: %s", name, strerror(-rc));
    b->failed = true;
}

static void sc_add_nr(struct build *b, uint32_t action, int nr, const char *name, unsigned n,
                      const struct scmp_arg_cmp *cmp)
{
    int rc = seccomp_rule_add_array(b->ctx, action, nr, n, cmp);
    if (rc < 0)
        fail_rule(b, name, rc);
}

static void sc_add(struct build *b, uint32_t action, const char *name, unsigned n,
                   const struct scmp_arg_cmp *cmp)
{
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR)
        return; /* not a syscall of this architecture */
    sc_add_nr(b, action, nr, name, n, cmp);
}

scmp_filter_ctx cs_sbx_filter_new(enum cs_sbx_net net, bool notify, char *err, size_t cap)
{
    struct build bb = {.ctx = seccomp_init(SCMP_ACT_ALLOW), .err = err, .cap = cap}, *fb = &bb;
    if (!fb->ctx) {
        snprintf(err, cap, "seccomp_init failed");
        return NULL;
    }
    /* Other architectures (i386 int 0x80, x32) kill the whole process. */
    if (seccomp_attr_set(fb->ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS) < 0 ||
        seccomp_attr_set(fb->ctx, SCMP_FLTATR_CTL_NNP, 1) < 0) {
        snprintf(err, cap, "seccomp filter attributes refused");
        seccomp_release(fb->ctx);
        return NULL;
    }

    static const char *const denied[] = {
        "ptrace",
        "process_vm_readv",
        "process_vm_writev",
        "io_uring_setup",
        "io_uring_enter",
        "io_uring_register",
        "keyctl",
        "add_key",
        "request_key",
        "bpf",
        "perf_event_open",
        "userfaultfd",
        "mount",
        "umount2",
        "pivot_root",
        "move_mount",
        "open_tree",
        "fsopen",
        "fsconfig",
        "fsmount",
        "fspick",
        "mount_setattr",
        "unshare",
        "setns",
        "kexec_load",
        "kexec_file_load",
        "init_module",
        "finit_module",
        "delete_module",
        "swapon",
        "swapoff",
        "reboot",
        "acct",
        "quotactl",
        "quotactl_fd",
        "open_by_handle_at",
        "name_to_handle_at",
        "iopl",
        "ioperm",
        "syslog",
        "chroot",
        "lookup_dcookie",
        "vhangup",
        "nfsservctl",
        "uselib",
    };
    /* The refusals the helper reports (docs/contract/tools.md §6) notify it instead: it answers
     * each with EPERM, what SCMP_ACT_ERRNO(EPERM) returns. The set-id mode rules and the ENOSYS
     * rules (clone3, openat2, fchmodat2: libc's fallback probes, hit by every fork) stay plain
     * errno actions and are not reported. */
    uint32_t eperm = SCMP_ACT_ERRNO(EPERM);
    uint32_t report = notify ? SCMP_ACT_NOTIFY : eperm;
    for (size_t i = 0; i < sizeof denied / sizeof *denied; i++)
        sc_add(fb, report, denied[i], 0, NULL);

    /* clone with any namespace flag (CLONE_NEWTIME's bit is CSIGNAL's for clone, skip it). */
    static const uint64_t ns[] = {CLONE_NEWNS,  CLONE_NEWUTS, CLONE_NEWIPC,   CLONE_NEWUSER,
                                  CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWCGROUP};
    for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) {
        struct scmp_arg_cmp c = cmp(0, SCMP_CMP_MASKED_EQ, ns[i], ns[i]);
        sc_add(fb, report, "clone", 1, &c);
    }
    /* clone3 passes flags in memory the filter cannot read: ENOSYS, and libc falls back. */
    sc_add(fb, SCMP_ACT_ERRNO(ENOSYS), "clone3", 0, NULL);

    /* personality: only PER_LINUX (the query 0xffffffff is refused too; libseccomp cannot
     * compare one argument twice in a rule). */
    {
        struct scmp_arg_cmp c = cmp(0, SCMP_CMP_NE, 0, 0);
        sc_add(fb, report, "personality", 1, &c);
    }
    /* Terminal injection: the kernel compares the low 32 bits of the request number. */
    {
        struct scmp_arg_cmp c = cmp(1, SCMP_CMP_MASKED_EQ, 0xFFFFFFFFu, TIOCSTI);
        sc_add(fb, report, "ioctl", 1, &c);
        struct scmp_arg_cmp d = cmp(1, SCMP_CMP_MASKED_EQ, 0xFFFFFFFFu, TIOCLINUX);
        sc_add(fb, report, "ioctl", 1, &d);
    }
    /* docs/contract/sandbox.md §3: no set-user-ID or set-group-ID bit can be set, by a mode change
     * or by a creation mode (arg is where each call takes its mode). openat2 passes its mode in
     * memory the filter cannot read, and fchmodat2 may be unknown to this libseccomp: both are
     * refused outright (ENOSYS: libc falls back to openat / fchmodat). */
    {
        static const struct {
            const char *name;
            unsigned arg;
        } modes[] = {{"chmod", 1}, {"fchmod", 1}, {"fchmodat", 2}, {"open", 2},  {"openat", 3},
                     {"creat", 1}, {"mkdir", 1},  {"mkdirat", 2},  {"mknod", 1}, {"mknodat", 2}};
        static const uint64_t bits[] = {S_ISUID, S_ISGID};
        for (size_t i = 0; i < sizeof modes / sizeof *modes; i++)
            for (size_t b = 0; b < 2; b++) {
                struct scmp_arg_cmp c = cmp(modes[i].arg, SCMP_CMP_MASKED_EQ, bits[b], bits[b]);
                sc_add(fb, eperm, modes[i].name, 1, &c);
            }
        sc_add(fb, SCMP_ACT_ERRNO(ENOSYS), "openat2", 0, NULL);
#ifndef __NR_fchmodat2
#define __NR_fchmodat2 452
#endif
        sc_add_nr(fb, SCMP_ACT_ERRNO(ENOSYS), __NR_fchmodat2, "fchmodat2", 0, NULL);
    }
    /* socket(): AF_UNIX only, plus AF_INET and AF_INET6 with the proxy or in loopback mode (no
     * packet, netlink or other family in any mode). */
    if (net == CS_SBX_NET_RESTRICTED) {
        struct scmp_arg_cmp c = cmp(0, SCMP_CMP_NE, AF_UNIX, 0);
        sc_add(fb, report, "socket", 1, &c);
    } else {
        for (uint64_t fam = 0; fam < AF_INET6; fam++) {
            if (fam == AF_UNIX || fam == AF_INET)
                continue;
            struct scmp_arg_cmp c = cmp(0, SCMP_CMP_EQ, fam, 0);
            sc_add(fb, report, "socket", 1, &c);
        }
        struct scmp_arg_cmp c = cmp(0, SCMP_CMP_GT, AF_INET6, 0);
        sc_add(fb, report, "socket", 1, &c);
    }
    /* loopback: a destination an IPv4 or IPv6 address length names goes by the helper, which
     * reports one outside loopback as no_route (and answers ENETUNREACH, what the namespace
     * would answer) and lets the kernel carry out the rest. Reporting only: the namespace has
     * no route out whatever the helper reads, so its check is not a security boundary. */
    if (net == CS_SBX_NET_LOOPBACK && notify) {
        static const uint64_t lens[] = {sizeof(struct sockaddr_in), sizeof(struct sockaddr_in6)};
        for (size_t i = 0; i < 2; i++) {
            struct scmp_arg_cmp c = cmp(2, SCMP_CMP_EQ, lens[i], 0);
            sc_add(fb, SCMP_ACT_NOTIFY, "connect", 1, &c);
            struct scmp_arg_cmp d = cmp(5, SCMP_CMP_EQ, lens[i], 0);
            sc_add(fb, SCMP_ACT_NOTIFY, "sendto", 1, &d);
        }
    }
    if (fb->failed) {
        seccomp_release(fb->ctx);
        return NULL;
    }
    return fb->ctx;
}
