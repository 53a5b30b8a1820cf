/*
 * main_doctor: `codespace-mcp --doctor` (see main_doctor.h).
 *
 * Each check prints "<ok|warn|fail> <check>: <what was found>[; remedy: <what to do>]". A fail
 * means the server would not start or its commands would not run sandboxed; a warn, that
 * something works less well (no denial reports, no Landlock) or matters only to another user.
 */
#include "main_doctor.h"

#include <linux/landlock.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "main_wire.h"
#include "store.h"
#include "supervisor.h"

enum verdict { OK, WARN, FAIL };

struct doctor {
    const char *proc_sys; /* /proc/sys, or CODESPACE_TEST_PROC_SYS (tests only) */
    bool root;
    int fails;
};

static void line(struct doctor *d, enum verdict v, const char *check, const char *remedy,
                 const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void line(struct doctor *d, enum verdict v, const char *check, const char *remedy,
                 const char *fmt, ...)
{
    char what[2600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    /* one line each: the helper's reason may hold newlines */
    for (char *p = what; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    printf("%-4s %s: %s%s%s\n",
           v == OK     ? "ok"
           : v == WARN ? "warn"
                       : "fail",
           check, what, remedy ? "; remedy: " : "", remedy ? remedy : "");
    if (v == FAIL)
        d->fails++;
}

/* The first line of the sysctl file at proc_sys/rel, in out; -1 when it cannot be read. */
static int sysctl_read(const struct doctor *d, const char *rel, char *out, size_t cap)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", d->proc_sys, rel);
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    bool got = fgets(out, (int)cap, f) != NULL;
    fclose(f);
    if (!got)
        return -1;
    out[strcspn(out, "\n")] = '\0';
    return 0;
}

/* User namespaces: the sandbox makes one per command (docs/contract/sandbox.md). */
static void check_userns(struct doctor *d)
{
    char v[64];
    if (sysctl_read(d, "user/max_user_namespaces", v, sizeof v) != 0)
        line(d, WARN, "user namespaces", NULL,
             "user.max_user_namespaces is not readable (kernel without user namespaces?)");
    else if (strtol(v, NULL, 10) <= 0)
        line(d, FAIL, "user namespaces", "sysctl -w user.max_user_namespaces=15000",
             "user.max_user_namespaces=%s: no user namespace can be made", v);
    else
        line(d, OK, "user namespaces", NULL, "user.max_user_namespaces=%s", v);

    /* Debian's own switch (absent from other kernels, which allow them). */
    if (sysctl_read(d, "kernel/unprivileged_userns_clone", v, sizeof v) != 0)
        line(d, OK, "unprivileged user namespaces", NULL,
             "kernel.unprivileged_userns_clone absent (not restricted)");
    else if (strcmp(v, "0") == 0)
        line(d, d->root ? WARN : FAIL, "unprivileged user namespaces",
             "sysctl -w kernel.unprivileged_userns_clone=1 (persist it in /etc/sysctl.d/)",
             "kernel.unprivileged_userns_clone=0: a non-root server cannot sandbox its "
             "commands%s",
             d->root ? " (this server runs as root, which it does not restrict)" : "");
    else
        line(d, OK, "unprivileged user namespaces", NULL, "kernel.unprivileged_userns_clone=%s", v);

    /* Ubuntu 23.10 and later: AppArmor refuses unprivileged user namespaces by default. */
    if (sysctl_read(d, "kernel/apparmor_restrict_unprivileged_userns", v, sizeof v) != 0)
        line(d, OK, "apparmor user namespace restriction", NULL,
             "kernel.apparmor_restrict_unprivileged_userns absent (not restricted)");
    else if (strcmp(v, "0") != 0)
        line(d, d->root ? WARN : FAIL, "apparmor user namespace restriction",
             "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0 (persist it in "
             "/etc/sysctl.d/), or an AppArmor profile granting 'userns' to "
             "codespace-linux-sandbox",
             "kernel.apparmor_restrict_unprivileged_userns=%s: a non-root server cannot "
             "sandbox its commands%s",
             v, d->root ? " (this server runs as root, which it does not restrict)" : "");
    else
        line(d, OK, "apparmor user namespace restriction", NULL,
             "kernel.apparmor_restrict_unprivileged_userns=0");
}

static void check_seccomp(struct doctor *d)
{
    char v[256];
    if (sysctl_read(d, "kernel/seccomp/actions_avail", v, sizeof v) != 0)
        line(d, FAIL, "seccomp", "a kernel built with CONFIG_SECCOMP_FILTER",
             "kernel.seccomp.actions_avail is not readable: no seccomp filters");
    else if (!strstr(v, "user_notif"))
        line(d, WARN, "seccomp", "a kernel of 5.0 or later",
             "no user_notif in kernel.seccomp.actions_avail: refused system calls are not "
             "reported as denials");
    else
        line(d, OK, "seccomp", NULL, "filters and user notification available");
}

static void check_landlock(struct doctor *d)
{
    long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
    if (abi <= 0)
        line(d, WARN, "landlock", "a kernel of 5.13 or later with 'landlock' in the lsm= list",
             "Landlock is not available: file access is confined by the mount namespace alone");
    else
        line(d, OK, "landlock", NULL, "ABI %ld", abi);
}

/* The helper's own probe: the check that decides (docs/contract/sandbox.md §2). */
static void check_helper(struct doctor *d, const struct cs_config *cfg)
{
    struct cs_config none;
    memset(&none, 0, sizeof none);
    none.sandbox_bin = getenv("CODESPACE_LINUX_SANDBOX_BIN");
    struct cs_main_sandbox sb;
    cs_main_probe(cfg ? cfg : &none, &sb);
    if (sb.sandboxed)
        line(d, OK, "sandbox helper", NULL, "%s: probe succeeded; commands run sandboxed",
             sb.helper);
    else
        line(d, FAIL, "sandbox helper",
             "fix what the lines above report, or set CODESPACE_LINUX_SANDBOX_BIN to a working "
             "codespace-linux-sandbox",
             "%s; %s", sb.reason,
             d->root ? "as root no command would run"
                     : "commands would run unsandboxed, as this user");
    cs_main_sandbox_clear(&sb);
}

static void check_db(struct doctor *d, const struct cs_config *cfg)
{
    if (!cfg) {
        line(d, WARN, "operations database", NULL,
             "not checked: the configuration did not load (see the registry line)");
        return;
    }
    struct cs_store *st = NULL;
    struct cs_diag e = {0};
    if (cs_store_open(cfg->operations_db, &st, &e) != CS_STORE_OK) {
        line(d, FAIL, "operations database",
             "point --operations-db (CODESPACE_OPERATIONS_DB) at a writable file, or fix or "
             "move the one named",
             "%s", e.text);
        return;
    }
    cs_store_close(st);
    line(d, OK, "operations database", NULL, "%s opens", cfg->operations_db);
}

static void check_registry(struct doctor *d, const struct cs_config *cfg, const char *error)
{
    if (!cfg)
        line(d, FAIL, "registry", "fix the setting named (see docs/operations.md)", "%s", error);
    else if (cfg->n_workspaces == 0)
        line(d, WARN, "registry", "pass --workspace DIR or --config FILE",
             "loads, but registers no workspace");
    else
        line(d, OK, "registry", NULL, "loads: %zu workspace%s", cfg->n_workspaces,
             cfg->n_workspaces == 1 ? "" : "s");
}

int cs_main_doctor(const struct cs_config *cfg, const char *config_error)
{
    struct doctor d = {.proc_sys = "/proc/sys", .root = geteuid() == 0};
    const char *test_root = getenv("CODESPACE_TEST_PROC_SYS"); /* tests only */
    if (test_root && test_root[0])
        d.proc_sys = test_root;
    check_userns(&d);
    check_seccomp(&d);
    check_landlock(&d);
    check_helper(&d, cfg);
    check_db(&d, cfg);
    check_registry(&d, cfg, config_error);
    fflush(stdout);
    return d.fails > 0 ? 1 : 0;
}
