/*
 * sandbox_report: what the sandbox refused (docs/contract/tools.md §6), kept by the outer helper
 * and written to the runner when the command has ended, and the seccomp user-notification server
 * that learns of each refused system call.
 *
 * Trust: the notifications come from the kernel about the (hostile) command; their syscall
 * number, architecture and first two arguments are read, and for a loopback workspace's
 * connect()/sendto() the destination address (at most a sockaddr_in6) from the command's memory.
 * Every refused call is answered with an error: nothing here can make a refused call succeed.
 * The one call let through (SECCOMP_USER_NOTIF_FLAG_CONTINUE) is a loopback workspace's
 * connect()/sendto() to a loopback destination; the address may change after it was read, which
 * matters not: the command's network namespace has only lo, so the kernel refuses every other
 * destination itself. The helper's reading is for the report, never the enforcement.
 * The report goes to the runner on the plan's report_fd, which neither the init nor the command
 * ever holds, as one frame (u32 big-endian length + schema/sandbox/report.json).
 *
 * Entry points: cs_sbx_denial_add, cs_sbx_report_write, cs_sbx_notify_supported,
 * cs_sbx_notify_serve_one. All run on the outer helper's single thread.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <linux/seccomp.h>
#include <seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sandbox.h"

/* The 32 distinct entries of docs/contract/tools.md §6. The first 24 are open to any kind; the
 * last 8 are kept for the kinds other than the one holding most of the first 24, so a flood of
 * one kind (proxy refusals, say) cannot hide a later refusal of another (a ptrace). A refusal that
 * gets no entry is counted in dropped, which the report carries: nothing is silently lost. */
#define OPEN_SLOTS (CS_SBX_DENIALS_MAX - 8)

struct entry {
    enum csw_denial_kind kind;
    char target[CS_SBX_DENIAL_TARGET_MAX + 1];
    char reason[24];
    int64_t count;
};

static struct entry table[CS_SBX_DENIALS_MAX];
static size_t n_table;
static int64_t dropped;

/* The kind holding most of the first OPEN_SLOTS entries (ties: the lowest kind), once they are
 * all taken: the one the reserved slots refuse. */
static enum csw_denial_kind flood_kind(void)
{
    size_t per[CSW_DENIAL_KIND__COUNT] = {0};
    for (size_t i = 0; i < OPEN_SLOTS && i < n_table; i++)
        per[table[i].kind]++;
    size_t best = 0;
    for (size_t k = 1; k < CSW_DENIAL_KIND__COUNT; k++)
        if (per[k] > per[best])
            best = k;
    return (enum csw_denial_kind)best;
}

void cs_sbx_denial_add(enum csw_denial_kind kind, const char *target, const char *reason)
{
    char t[CS_SBX_DENIAL_TARGET_MAX + 1];
    snprintf(t, sizeof t, "%s", target); /* host names are ASCII: the cut cannot split UTF-8 */
    for (size_t i = 0; i < n_table; i++)
        if (table[i].kind == kind && strcmp(table[i].reason, reason) == 0 &&
            strcmp(table[i].target, t) == 0) {
            if (table[i].count < INT64_MAX)
                table[i].count++;
            return;
        }
    if (n_table == CS_SBX_DENIALS_MAX || (n_table >= OPEN_SLOTS && kind == flood_kind())) {
        if (dropped < INT64_MAX)
            dropped++;
        return;
    }
    struct entry *e = &table[n_table++];
    e->kind = kind;
    memcpy(e->target, t, sizeof t);
    snprintf(e->reason, sizeof e->reason, "%s", reason);
    e->count = 1;
}

size_t cs_sbx_denial_count(void)
{
    return n_table;
}

void cs_sbx_report_write(int fd)
{
    struct csw_denial v[CS_SBX_DENIALS_MAX];
    for (size_t i = 0; i < n_table; i++)
        v[i] = (struct csw_denial){.kind = table[i].kind,
                                   .target = {table[i].target, strlen(table[i].target)},
                                   .reason = {table[i].reason, strlen(table[i].reason)},
                                   .count = table[i].count};
    struct csw_sandbox_report r = {
        .denials = {v, n_table}, .has_dropped = dropped > 0, .dropped = dropped};
    char *text = NULL;
    size_t n = 0;
    struct cs_wire_diag diag;
    if (csw_sandbox_report_encode_text(&r, &text, &n, &diag) != CS_WIRE_OK)
        return; /* the runner then reports no denials: never a reason to fail the command */
    unsigned char *frame = malloc(n + 4);
    if (frame) {
        frame[0] = (unsigned char)(n >> 24);
        frame[1] = (unsigned char)(n >> 16);
        frame[2] = (unsigned char)(n >> 8);
        frame[3] = (unsigned char)n;
        memcpy(frame + 4, text, n);
        /* At most 32 entries of about 400 bytes: far below a pipe's buffer, so this does not
         * wait for the runner. */
        size_t off = 0;
        while (off < n + 4) {
            ssize_t w = write(fd, frame + off, n + 4 - off);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                break;
            off += (size_t)w;
        }
    }
    free(frame);
    free(text);
}

/* ------------------------------------------------------------ notifications ---- */

bool cs_sbx_notify_supported(bool precompiled)
{
    /* The kernel lists the actions it has (user_notif since 5.0); libseccomp's API level 5 is
     * its support of SCMP_ACT_NOTIFY, needed only to build a filter here (asking for it probes
     * the kernel with several system calls: skipped for a program compiled at build time). The
     * runner reads the same file for workspace_info. */
    int fd = open("/proc/sys/kernel/seccomp/actions_avail", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    char buf[256];
    ssize_t r = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (r <= 0)
        return false;
    buf[r] = '\0';
    return strstr(buf, "user_notif") != NULL && (precompiled || seccomp_api_get() >= 5);
}

static const char *family_name(uint64_t fam)
{
    switch (fam) {
    case AF_INET:
        return "AF_INET";
    case AF_INET6:
        return "AF_INET6";
    case AF_NETLINK:
        return "AF_NETLINK";
    case AF_PACKET:
        return "AF_PACKET";
    default:
        return NULL;
    }
}

/* The report's name of a refused call: its name, with the family for socket() and the request
 * for ioctl(). */
static void call_target(const struct seccomp_data *d, char *out, size_t cap)
{
    /* Names are resolved once per call number and kept: serving a notification allocates
     * nothing, so a flood of refusals cannot grow the helper. Only the native architecture
     * reaches here (the filter kills any other). */
    static char *names[1024];
    char *name = NULL;
    if (d->nr >= 0 && d->nr < 1024) {
        if (!names[d->nr])
            names[d->nr] = seccomp_syscall_resolve_num_arch(d->arch, d->nr);
        name = names[d->nr];
    }
    const char *n = name ? name : "unknown";
    if (d->nr == __NR_socket) {
        const char *f = family_name(d->args[0]);
        if (f)
            snprintf(out, cap, "socket(%s)", f);
        else
            snprintf(out, cap, "socket(%llu)", (unsigned long long)d->args[0]);
    } else if (d->nr == __NR_ioctl) {
        unsigned req = (unsigned)d->args[1];
        snprintf(out, cap, "ioctl(%s)", req == TIOCSTI ? "TIOCSTI" : "TIOCLINUX");
    } else {
        snprintf(out, cap, "%s", n);
    }
}

/* Whether a is an address of the sandbox's own namespace, where only lo exists: 127/8, ::1, their
 * IPv4-mapped forms, and the unspecified addresses (which Linux connects to the local host). */
static bool addr_local(const struct sockaddr_storage *a)
{
    if (a->ss_family == AF_INET) {
        const struct sockaddr_in *v4 = (const struct sockaddr_in *)a;
        uint32_t h = ntohl(v4->sin_addr.s_addr);
        return (h >> 24) == 127 || h == 0;
    }
    const struct in6_addr *v6 = &((const struct sockaddr_in6 *)a)->sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(v6) || IN6_IS_ADDR_UNSPECIFIED(v6))
        return true;
    if (IN6_IS_ADDR_V4MAPPED(v6))
        return v6->s6_addr[12] == 127 ||
               (v6->s6_addr[12] | v6->s6_addr[13] | v6->s6_addr[14] | v6->s6_addr[15]) == 0;
    return false;
}

/* A loopback workspace's connect() or sendto() (sandbox_filter.c notifies those whose address
 * length is an IPv4 or IPv6 one): reads the destination from the command's memory. Returns 1
 * with *dst filled when it is an IPv4 or IPv6 address, 0 when it is not or cannot be read (the
 * kernel then decides alone). */
static int read_destination(int fd, const struct seccomp_notif *req, struct sockaddr_storage *dst)
{
    bool is_connect = req->data.nr == __NR_connect;
    uint64_t addr = req->data.args[is_connect ? 1 : 4];
    uint64_t len = req->data.args[is_connect ? 2 : 5];
    if (addr == 0 || len > sizeof(struct sockaddr_in6))
        return 0;
    char path[64];
    snprintf(path, sizeof path, "/proc/%u/mem", req->pid);
    int mem = open(path, O_RDONLY | O_CLOEXEC);
    if (mem < 0)
        return 0;
    memset(dst, 0, sizeof *dst);
    ssize_t r = pread(mem, dst, (size_t)len, (off_t)addr);
    close(mem);
    /* The pid may have been reused between the notification and the open: the read counts
     * only if the notification is still pending (the caller still waits in that call). */
    if (r != (ssize_t)len || ioctl(fd, SECCOMP_IOCTL_NOTIF_ID_VALID, &req->id) < 0)
        return 0;
    if (dst->ss_family == AF_INET)
        return len >= sizeof(struct sockaddr_in);
    if (dst->ss_family == AF_INET6)
        return len >= sizeof(struct sockaddr_in6);
    return 0;
}

/* "host:port" of a destination, an IPv6 host in brackets. */
static void destination_text(const struct sockaddr_storage *a, char *out, size_t cap)
{
    char host[INET6_ADDRSTRLEN] = "?";
    unsigned port;
    if (a->ss_family == AF_INET) {
        const struct sockaddr_in *v4 = (const struct sockaddr_in *)a;
        inet_ntop(AF_INET, &v4->sin_addr, host, sizeof host);
        port = ntohs(v4->sin_port);
        snprintf(out, cap, "%s:%u", host, port);
    } else {
        const struct sockaddr_in6 *v6 = (const struct sockaddr_in6 *)a;
        inet_ntop(AF_INET6, &v6->sin6_addr, host, sizeof host);
        port = ntohs(v6->sin6_port);
        snprintf(out, cap, "[%s]:%u", host, port);
    }
}

/* Answers a loopback workspace's connect()/sendto(): a destination outside loopback is refused
 * with ENETUNREACH (what the namespace, with no route, answers itself) and reported as no_route;
 * any other goes on to the kernel. */
static void serve_destination(int fd, const struct seccomp_notif *req,
                              struct seccomp_notif_resp *resp)
{
    struct sockaddr_storage dst;
    if (read_destination(fd, req, &dst) == 1 && !addr_local(&dst)) {
        resp->error = -ENETUNREACH;
        resp->flags = 0;
        (void)ioctl(fd, SECCOMP_IOCTL_NOTIF_SEND, resp);
        char target[CS_SBX_DENIAL_TARGET_MAX + 1];
        destination_text(&dst, target, sizeof target);
        cs_sbx_denial_add(CSW_DENIAL_KIND_NETWORK, target, "no_route");
        return;
    }
    resp->error = 0;
    resp->flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
    (void)ioctl(fd, SECCOMP_IOCTL_NOTIF_SEND, resp);
}

int cs_sbx_notify_serve_one(int fd)
{
    static struct seccomp_notif *req;
    static struct seccomp_notif_resp *resp;
    static size_t req_size, resp_size;
    if (!req) {
        /* The kernel's structure sizes (they may grow), never less than this header's. */
        struct seccomp_notif_sizes sz = {0};
        if (syscall(SYS_seccomp, SECCOMP_GET_NOTIF_SIZES, 0, &sz) < 0)
            cs_sbx_die("SECCOMP_GET_NOTIF_SIZES");
        req_size = sz.seccomp_notif > sizeof *req ? sz.seccomp_notif : sizeof *req;
        resp_size = sz.seccomp_notif_resp > sizeof *resp ? sz.seccomp_notif_resp : sizeof *resp;
        req = calloc(1, req_size);
        resp = calloc(1, resp_size);
        if (!req || !resp)
            cs_sbx_diex("out of memory");
    }
    memset(req, 0, req_size); /* the kernel refuses a receive buffer that is not zeroed */
    /* The kernel's ioctls directly: libseccomp's wrappers refuse to run in a process that
     * never probed its API level (the filter was loaded by the command, not here). */
    if (ioctl(fd, SECCOMP_IOCTL_NOTIF_RECV, req) < 0)
        /* ENOENT: the caller was killed meanwhile; EINTR: a signal. Anything else would repeat
         * at every wake-up: the caller closes the listener, and the kernel answers ENOSYS. */
        return errno == ENOENT || errno == EINTR ? 0 : -1;
    memset(resp, 0, resp_size);
    resp->id = req->id;
    resp->val = 0;
    /* Only a loopback workspace's filter notifies these (never a refusal rule). */
    if (req->data.nr == __NR_connect || req->data.nr == __NR_sendto) {
        serve_destination(fd, req, resp);
        return 0;
    }
    /* Every rule that notifies is an EPERM rule (the ENOSYS ones stay plain errno actions):
     * the caller sees exactly what it saw without reporting. flags stays 0: never
     * SECCOMP_USER_NOTIF_FLAG_CONTINUE, so the call is never carried out. */
    resp->error = -EPERM;
    resp->flags = 0;
    (void)ioctl(fd, SECCOMP_IOCTL_NOTIF_SEND, resp); /* ENOENT: the caller is gone */
    char target[CS_SBX_DENIAL_TARGET_MAX + 1];
    call_target(&req->data, target, sizeof target);
    cs_sbx_denial_add(CSW_DENIAL_KIND_SYSCALL, target, "denied");
    return 0;
}
