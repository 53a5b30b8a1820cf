/*
 * sandbox_plan: the plan's life (docs/contract/sandbox.md §1). `prepare` turns a request read from
 * stdin into a plan file (0600, in a fresh 0700 mkdtemp directory under $TMPDIR, created
 * exclusively, no-follow, fsynced) and answers one JSON line; `run` loads the plan with the
 * owner, mode and type checks, unlinks it and removes its directory before anything else, then
 * validates it.
 *
 * Plan directory names: `codespace-sandbox-<runner pid>-XXXXXX` when the runner says who it is
 * (CODESPACE_SANDBOX_RUNNER_PID, a decimal pid: the server's supervisor sets it to its own pid),
 * else the plain `codespace-sandbox-XXXXXX` of a tool calling `prepare` by hand. The pid lets a
 * runner starting up remove what a crashed runner left (a directory whose pid is no live process;
 * src/supervisor/supervisor_sandbox.c); a plain name is never swept by anyone.
 *
 * Trust: the request and the plan are untrusted at the parser: the generated decoders check the
 * schema, cs_sbx_plan_parse the semantic rules (the same rules for both, so a plan that prepare
 * would refuse is refused by run as well). fuzz/sandbox_plan_run_fuzz.c drives cs_sbx_plan_parse.
 *
 * Entry points: cs_sbx_prepare_main, cs_sbx_plan_load, cs_sbx_plan_parse, cs_sbx_plan_write,
 * cs_sbx_tmpdir, cs_sbx_runner_pid.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base_json.h"
#include "sandbox.h"

/* Records why in err (a plan the helper refuses means the command cannot start) and returns -1. */
static int fail(struct cs_diag *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(struct cs_diag *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    cs_diag_vset(err, CSW_ERROR_PROCESS_SPAWN_FAILED, fmt, ap);
    va_end(ap);
    return -1;
}

const char *cs_sbx_tmpdir(void)
{
    const char *t = getenv("TMPDIR");
    return t && t[0] == '/' ? t : "/tmp";
}

int cs_sbx_runner_pid(long *pid)
{
    const char *v = getenv(CS_SBX_RUNNER_PID_ENV);
    *pid = 0;
    if (!v)
        return 0;
    /* Decimal, no sign, no leading zero, 1 .. INT_MAX: exactly what the runner's sweep parses
     * back out of the directory name. */
    long n = 0;
    size_t i = 0;
    for (; v[i] >= '0' && v[i] <= '9' && i < 10; i++)
        n = n * 10 + (v[i] - '0');
    if (i == 0 || v[i] != '\0' || v[0] == '0' || n > INT_MAX)
        return -1;
    *pid = n;
    return 0;
}

static bool has_nul(const struct cs_str *s)
{
    return strlen(s->s) != s->n;
}

/* An absolute path in normal form: no empty, "." or ".." component, no trailing slash. */
static bool normal_abs(const struct cs_str *p)
{
    if (has_nul(p) || p->n < 2 || p->n >= PATH_MAX - 64 || p->s[0] != '/' || p->s[p->n - 1] == '/')
        return false;
    const char *c = p->s + 1;
    for (;;) {
        const char *e = strchr(c, '/');
        size_t l = e ? (size_t)(e - c) : strlen(c);
        if (l == 0 || (l == 1 && c[0] == '.') || (l == 2 && c[0] == '.' && c[1] == '.'))
            return false;
        if (!e)
            return true;
        c = e + 1;
    }
}

static bool inside(const struct cs_str *root, const struct cs_str *p)
{
    return strncmp(p->s, root->s, root->n) == 0 && (p->s[root->n] == '\0' || p->s[root->n] == '/');
}

/* The semantic rules shared by the request and the plan. */
static int check_common(const struct cs_str *root, const struct cs_str *cwd,
                        const struct cs_str *argv, size_t argc, const struct cs_str *allow,
                        size_t nallow, struct cs_diag *err)
{
    if (!normal_abs(root))
        return fail(err, "workspace_root must be an absolute normalized path, not /");
    if (!normal_abs(cwd) || !inside(root, cwd))
        return fail(err, "the working directory must be inside the workspace");
    if (argc == 0)
        return fail(err, "argv is empty");
    for (size_t i = 0; i < argc; i++)
        if (has_nul(&argv[i]))
            return fail(err, "argv[%zu] holds a NUL byte", i);
    if (argv[0].n == 0)
        return fail(err, "argv[0] is empty");
    for (size_t i = 0; i < nallow; i++) {
        struct cs_netallow_entry a;
        const char *why = NULL;
        if (cs_netallow_entry_parse(allow[i].s, allow[i].n, &a, &why) < 0)
            return fail(err,
                        "network_allow[%zu] is not a host, *.domain or IP literal "
                        "with an optional :port: %s",
                        i, why);
    }
    return 0;
}

/* deny_mask: workspace-relative paths in normal form (no leading '/', no empty, "." or ".."
 * component, no NUL); the helper walks each without following links. */
static int check_deny_mask(const struct cs_str *v, size_t n, struct cs_diag *err)
{
    for (size_t i = 0; i < n; i++) {
        const struct cs_str *p = &v[i];
        /* No length limit: the walk opens one component at a time (issue 29). */
        bool ok = !has_nul(p) && p->n > 0 && p->s[0] != '/' && p->s[p->n - 1] != '/';
        for (const char *c = p->s; ok;) {
            const char *e = strchr(c, '/');
            size_t l = e ? (size_t)(e - c) : strlen(c);
            if (l == 0 || (l == 1 && c[0] == '.') || (l == 2 && c[0] == '.' && c[1] == '.'))
                ok = false;
            if (!e)
                break;
            c = e + 1;
        }
        if (!ok)
            return fail(err, "deny_mask[%zu] is not a normalised relative path", i);
    }
    return 0;
}

char *cs_sbx_hex_path(const struct cs_str *h, size_t *n)
{
    if (h->n == 0 || h->n % 2 != 0)
        return NULL;
    char *out = malloc(h->n / 2 + 1);
    if (!out)
        return NULL;
    for (size_t i = 0; i < h->n; i++) {
        char c = h->s[i];
        int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (v < 0) {
            free(out);
            return NULL;
        }
        if (i % 2 == 0)
            out[i / 2] = (char)(v << 4);
        else
            out[i / 2] = (char)(out[i / 2] | v);
    }
    *n = h->n / 2;
    out[*n] = '\0';
    return out;
}

/* deny_mask_hex (the byte form of deny_mask): lowercase hex, two digits a byte, decoding to a
 * path deny_mask would accept; with deny_mask (n_plain paths), at most 4096 paths. */
static int check_deny_mask_hex(const struct cs_str *v, size_t n, size_t n_plain,
                               struct cs_diag *err)
{
    if (n + n_plain > CSW_SANDBOX_PLAN_DENY_MASK_MAX_ITEMS)
        return fail(err, "deny_mask and deny_mask_hex hold more than %d paths together",
                    CSW_SANDBOX_PLAN_DENY_MASK_MAX_ITEMS);
    for (size_t i = 0; i < n; i++) {
        size_t len = 0;
        char *b = cs_sbx_hex_path(&v[i], &len);
        if (!b)
            return fail(err, "deny_mask_hex[%zu] is not lowercase hexadecimal, two digits a byte",
                        i);
        struct cs_str one = {b, len};
        int rc = check_deny_mask(&one, 1, err);
        free(b);
        if (rc != 0)
            return fail(err, "deny_mask_hex[%zu] is not a normalised relative path", i);
    }
    return 0;
}

static int check_env_entry(const struct cs_str *k, const struct cs_str *v, struct cs_diag *err)
{
    if (k->n == 0 || has_nul(k) || strchr(k->s, '='))
        return fail(err, "environment names must be non-empty, without '=' or NUL");
    if (has_nul(v))
        return fail(err, "environment value of %s holds a NUL byte", k->s);
    return 0;
}

/* The workspace's namespaces (netns_fd, userns_fd): userns_fd only with netns_fd, and every
 * descriptor the plan names distinct from the others. */
static int check_ns_fds(const struct csw_sandbox_plan *p, struct cs_diag *err)
{
    if (p->has_userns_fd && !p->has_netns_fd)
        return fail(err, "userns_fd without netns_fd");
    const struct {
        bool has;
        int64_t fd;
        const char *name;
    } v[] = {{p->has_workspace_fd, p->workspace_fd, "workspace_fd"},
             {p->has_report_fd, p->report_fd, "report_fd"},
             {p->has_netns_fd, p->netns_fd, "netns_fd"},
             {p->has_userns_fd, p->userns_fd, "userns_fd"}};
    for (size_t i = 2; i < 4; i++)
        for (size_t k = 0; k < i; k++)
            if (v[i].has && v[k].has && v[i].fd == v[k].fd)
                return fail(err, "%s and %s are the same descriptor", v[i].name, v[k].name);
    return 0;
}

int cs_sbx_plan_parse(const char *buf, size_t n, struct csw_sandbox_plan *out, struct cs_diag *err)
{
    memset(out, 0, sizeof *out);
    json_error_t jerr;
    json_t *j = cs_json_loadb_budget(buf, n, JSON_ALLOW_NUL, &jerr);
    if (!j)
        return fail(err, "plan is not JSON: %s", jerr.text);
    struct cs_wire_diag diag;
    enum cs_wire_status st = csw_sandbox_plan_decode(j, out, &diag);
    json_decref(j);
    if (st != CS_WIRE_OK) {
        char d[600];
        return fail(err, "invalid plan: %s", cs_wire_diag_format(&diag, d, sizeof d));
    }
    int rc = check_common(&out->workspace_root, &out->cwd, out->argv.v, out->argv.n,
                          out->has_network_allow ? out->network_allow.v : NULL,
                          out->has_network_allow ? out->network_allow.n : 0, err);
    for (size_t i = 0; rc == 0 && i < out->env.n; i++)
        rc = check_env_entry(&out->env.v[i].key, &out->env.v[i].value, err);
    if (rc == 0 && out->has_deny_mask)
        rc = check_deny_mask(out->deny_mask.v, out->deny_mask.n, err);
    if (rc == 0 && out->has_deny_mask_hex)
        rc = check_deny_mask_hex(out->deny_mask_hex.v, out->deny_mask_hex.n,
                                 out->has_deny_mask ? out->deny_mask.n : 0, err);
    if (rc == 0 && out->has_report_fd && out->has_workspace_fd &&
        out->report_fd == out->workspace_fd)
        rc = fail(err, "report_fd and workspace_fd are the same descriptor");
    if (rc == 0)
        rc = check_ns_fds(out, err);
    if (rc < 0)
        csw_sandbox_plan_free(out);
    return rc;
}

int cs_sbx_plan_load(const char *path, struct csw_sandbox_plan *out, struct cs_diag *err)
{
    memset(out, 0, sizeof *out);
    size_t pl = strlen(path);
    if (path[0] != '/' || pl >= PATH_MAX || pl < 6 || strcmp(path + pl - 5, "/plan") != 0)
        return fail(err, "the plan path must be an absolute .../plan path");
    char dir[PATH_MAX];
    memcpy(dir, path, pl - 5);
    dir[pl - 5] = '\0';
    const char *slash = strrchr(dir, '/');
    if (!slash || strncmp(slash + 1, CS_SBX_DIR_PREFIX, strlen(CS_SBX_DIR_PREFIX)) != 0)
        return fail(err, "the plan is not in a " CS_SBX_DIR_PREFIX "* directory");

    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return fail(err, "open plan: %s", strerror(errno));
    struct stat st, dst;
    char *buf = NULL;
    int rc = -1;
    if (fstat(fd, &st) < 0) {
        fail(err, "stat plan: %s", strerror(errno));
        goto out;
    }
    if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 07777) != 0600 ||
        st.st_nlink != 1) {
        fail(err, "the plan must be a regular 0600 file owned by the caller");
        goto out;
    }
    if (lstat(dir, &dst) < 0 || !S_ISDIR(dst.st_mode) || dst.st_uid != geteuid() ||
        (dst.st_mode & 07777) != 0700) {
        fail(err, "the plan directory must be a 0700 directory owned by the caller");
        goto out;
    }
    if (st.st_size <= 0 || (size_t)st.st_size > CS_SBX_PLAN_MAX) {
        fail(err, "the plan is empty or over %u bytes", CS_SBX_PLAN_MAX);
        goto out;
    }
    size_t n = (size_t)st.st_size, got = 0;
    buf = malloc(n);
    if (!buf) {
        fail(err, "out of memory");
        goto out;
    }
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            fail(err, "read plan: %s", r < 0 ? strerror(errno) : "short read");
            goto out;
        }
        got += (size_t)r;
    }
    /* The plan is gone before anything else happens, whatever follows. */
    if (unlink(path) < 0 || rmdir(dir) < 0) {
        fail(err, "remove plan: %s", strerror(errno));
        goto out;
    }
    rc = cs_sbx_plan_parse(buf, n, out, err);
out:
    free(buf);
    close(fd);
    return rc;
}

int cs_sbx_plan_write(const struct csw_sandbox_plan *plan, const char *tmpdir, char **path_out,
                      struct cs_diag *err)
{
    json_t *j = NULL;
    struct cs_wire_diag diag;
    if (csw_sandbox_plan_encode(plan, &j, &diag) != CS_WIRE_OK) {
        char d[600];
        return fail(err, "plan: %s", cs_wire_diag_format(&diag, d, sizeof d));
    }
    char *text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!text)
        return fail(err, "out of memory");
    char dir[PATH_MAX], path[PATH_MAX], owner[24] = "";
    int rc = -1;
    long runner;
    if (cs_sbx_runner_pid(&runner) < 0) {
        fail(err, CS_SBX_RUNNER_PID_ENV " must be a decimal process id");
        goto out;
    }
    if (runner > 0)
        snprintf(owner, sizeof owner, "%ld-", runner);
    if (snprintf(dir, sizeof dir, "%s/" CS_SBX_DIR_PREFIX "%sXXXXXX", tmpdir, owner) >=
        (int)sizeof dir) {
        fail(err, "TMPDIR too long");
        goto out;
    }
    if (!mkdtemp(dir)) { /* 0700 */
        fail(err, "mkdtemp under %s: %s", tmpdir, strerror(errno));
        goto out;
    }
    if (snprintf(path, sizeof path, "%s/plan", dir) >= (int)sizeof path) {
        fail(err, "TMPDIR too long");
        rmdir(dir);
        goto out;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        fail(err, "create plan: %s", strerror(errno));
        rmdir(dir);
        goto out;
    }
    size_t n = strlen(text), done = 0;
    bool ok = fchmod(fd, 0600) == 0;
    while (ok && done < n) {
        ssize_t w = write(fd, text + done, n - done);
        if (w < 0 && errno == EINTR)
            continue;
        ok = w > 0;
        done += w > 0 ? (size_t)w : 0;
    }
    ok = ok && fsync(fd) == 0;
    int e = errno;
    close(fd);
    if (!ok) {
        unlink(path);
        rmdir(dir);
        fail(err, "write plan: %s", strerror(e));
        goto out;
    }
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    *path_out = strdup(path);
    if (!*path_out) {
        unlink(path);
        rmdir(dir);
        fail(err, "out of memory");
        goto out;
    }
    rc = 0;
out:
    free(text);
    return rc;
}

static void respond(bool ok, const char *text)
{
    struct csw_sandbox_prepare_response r;
    memset(&r, 0, sizeof r);
    if (ok) {
        r.tag = CSW_SANDBOX_PREPARE_RESPONSE_PREPARED;
        r.u.prepared.plan_path.s = (char *)text;
        r.u.prepared.plan_path.n = strlen(text);
    } else {
        r.tag = CSW_SANDBOX_PREPARE_RESPONSE_ERROR;
        r.u.error.message.s = (char *)text;
        r.u.error.message.n = strlen(text);
    }
    json_t *j = NULL;
    char *s = NULL;
    if (csw_sandbox_prepare_response_encode(&r, &j, NULL) == CS_WIRE_OK)
        s = json_dumps(j, JSON_COMPACT);
    if (s)
        printf("%s\n", s);
    else
        printf("{\"type\":\"error\",\"message\":\"cannot encode the response\"}\n");
    fflush(stdout);
    free(s);
    json_decref(j);
}

/* Prepare-time checks against the file system. With workspace_fd (the runner's held root,
 * inherited), the host path is never resolved: the descriptor must be a directory, and the cwd
 * is checked inside the root by its text (run enters it inside the sandbox, where the path
 * leads into the bind of that very descriptor). Without it (a tool calling prepare), the
 * workspace must be a real directory reached without symlinks and the cwd inside it. */
static int check_fs(const struct csw_sandbox_prepare_request *q, struct cs_diag *err)
{
    char real[PATH_MAX];
    struct stat st;
    if (q->has_workspace_fd) {
        if (fstat((int)q->workspace_fd, &st) < 0 || !S_ISDIR(st.st_mode))
            return fail(err, "workspace_fd %lld is not an inherited directory",
                        (long long)q->workspace_fd);
        return 0;
    }
    if (!realpath(q->workspace_root.s, real) || stat(real, &st) < 0 || !S_ISDIR(st.st_mode))
        return fail(err, "workspace_root is not a directory");
    if (strcmp(real, q->workspace_root.s) != 0)
        return fail(err, "workspace_root must not go through a symlink");
    if (!realpath(q->command_cwd.s, real) || stat(real, &st) < 0 || !S_ISDIR(st.st_mode))
        return fail(err, "the working directory is not a directory");
    struct cs_str r = {real, strlen(real)};
    if (!inside(&q->workspace_root, &r))
        return fail(err, "the working directory resolves outside the workspace");
    return 0;
}

/* Builds the plan from a request (borrowing its strings) and writes it. */
int cs_sbx_prepare_request(const struct csw_sandbox_prepare_request *q, char **path,
                           struct cs_diag *err)
{
    int rc = check_common(&q->workspace_root, &q->command_cwd, q->argv.v, q->argv.n,
                          q->has_network_allow ? q->network_allow.v : NULL,
                          q->has_network_allow ? q->network_allow.n : 0, err);
    for (size_t i = 0; rc == 0 && i < q->env.n; i++)
        rc = check_env_entry(&q->env.v[i].key, &q->env.v[i].value, err);
    if (rc == 0 && q->has_deny_mask)
        rc = check_deny_mask(q->deny_mask.v, q->deny_mask.n, err);
    if (rc == 0 && q->has_deny_mask_hex)
        rc = check_deny_mask_hex(q->deny_mask_hex.v, q->deny_mask_hex.n,
                                 q->has_deny_mask ? q->deny_mask.n : 0, err);
    if (rc == 0 && q->has_report_fd && q->has_workspace_fd && q->report_fd == q->workspace_fd)
        rc = fail(err, "report_fd and workspace_fd are the same descriptor");
    if (rc == 0)
        rc = check_fs(q, err);
    if (rc < 0)
        return rc;
    struct csw_sandbox_plan p;
    memset(&p, 0, sizeof p);
    p.argv.v = q->argv.v;
    p.argv.n = q->argv.n;
    p.cwd = q->command_cwd;
    p.workspace_root = q->workspace_root;
    p.writable_workspace = q->writable_workspace;
    switch (q->network) {
    case CSW_SANDBOX_PREPARE_REQUEST_NETWORK_RESTRICTED:
        p.network = CSW_SANDBOX_PLAN_NETWORK_RESTRICTED;
        break;
    case CSW_SANDBOX_PREPARE_REQUEST_NETWORK_ENABLED:
        p.network = CSW_SANDBOX_PLAN_NETWORK_ENABLED;
        break;
    case CSW_SANDBOX_PREPARE_REQUEST_NETWORK_LOOPBACK:
        p.network = CSW_SANDBOX_PLAN_NETWORK_LOOPBACK;
        break;
    }
    p.has_network_allow = q->has_network_allow;
    p.network_allow.v = q->network_allow.v;
    p.network_allow.n = q->network_allow.n;
    p.has_deny_mask = q->has_deny_mask;
    p.deny_mask.v = q->deny_mask.v;
    p.deny_mask.n = q->deny_mask.n;
    p.has_deny_mask_hex = q->has_deny_mask_hex;
    p.deny_mask_hex.v = q->deny_mask_hex.v;
    p.deny_mask_hex.n = q->deny_mask_hex.n;
    p.tty = q->tty;
    p.has_workspace_fd = q->has_workspace_fd;
    p.workspace_fd = q->workspace_fd;
    p.has_report_fd = q->has_report_fd;
    p.report_fd = q->report_fd;
    p.has_sandbox_uid = q->has_sandbox_uid;
    p.sandbox_uid = q->sandbox_uid;
    p.has_sandbox_gid = q->has_sandbox_gid;
    p.sandbox_gid = q->sandbox_gid;
    p.env.n = q->env.n;
    p.env.v = q->env.n ? calloc(q->env.n, sizeof *p.env.v) : NULL;
    if (q->env.n && !p.env.v)
        return fail(err, "out of memory");
    for (size_t i = 0; i < q->env.n; i++) {
        p.env.v[i].key = q->env.v[i].key;
        p.env.v[i].value = q->env.v[i].value;
    }
    rc = cs_sbx_plan_write(&p, cs_sbx_tmpdir(), path, err);
    free(p.env.v);
    return rc;
}

int cs_sbx_prepare_main(void)
{
    struct cs_diag err = {0};
    size_t cap = CS_SBX_REQ_MAX + 1, n = 0;
    char *buf = malloc(cap);
    if (!buf) {
        respond(false, "out of memory");
        return 1;
    }
    for (;;) {
        ssize_t r = read(0, buf + n, cap - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            free(buf);
            respond(false, "cannot read the request");
            return 1;
        }
        if (r == 0)
            break;
        n += (size_t)r;
        if (n == cap) {
            free(buf);
            respond(false, "request over 1 MiB");
            return 1;
        }
    }
    json_error_t jerr;
    json_t *j = cs_json_loadb_budget(buf, n, 0, &jerr);
    free(buf);
    if (!j) {
        fail(&err, "request is not JSON: %s", jerr.text);
        respond(false, err.text);
        return 1;
    }
    struct csw_sandbox_prepare_request q;
    struct cs_wire_diag diag;
    enum cs_wire_status st = csw_sandbox_prepare_request_decode(j, &q, &diag);
    json_decref(j);
    if (st != CS_WIRE_OK) {
        char d[600];
        fail(&err, "invalid request: %s", cs_wire_diag_format(&diag, d, sizeof d));
        respond(false, err.text);
        return 1;
    }
    char *path = NULL;
    int rc = cs_sbx_prepare_request(&q, &path, &err);
    csw_sandbox_prepare_request_free(&q);
    if (rc < 0) {
        respond(false, err.text);
        return 1;
    }
    respond(true, path);
    free(path);
    return 0;
}
