/*
 * Unit tests of the policy module: configuration (flags, variables, defaults, every refusal of
 * docs/contract/runtime.md §2), the registry file and the quick-start workspace (with real
 * directories under a mkdtemp root), lookups and permissions, and the workspace_info builder
 * (docs/contract/tools.md section 4), whose output is checked field by field and through the
 * generated encoder.
 *
 * The environment is always passed explicitly, so nothing here depends on the caller's.
 */
#define _XOPEN_SOURCE 700

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <ftw.h>
#include <limits.h>
#include <fcntl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "policy.h"

/* ---- fixture: a temp tree with two workspace dirs and a file ---- */

static struct {
    char dir[128];  /* mkdtemp root, canonical */
    char ws1[256];  /* <dir>/ws1 */
    char ws2[256];  /* <dir>/ws2 */
    char ws3[256];  /* <dir>/ws3 (roots may not overlap: a third workspace needs its own) */
    char file[256]; /* <dir>/afile, a regular file */
    char cfg[256];  /* <dir>/registry.json, rewritten by each test */
} fx;

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static int group_setup(void **state)
{
    (void)state;
    char tmpl[] = "/tmp/cs-policy-XXXXXX";
    if (!mkdtemp(tmpl))
        return -1;
    char canon[PATH_MAX];
    if (!realpath(tmpl, canon) || strlen(canon) >= sizeof fx.dir)
        return -1;
    memcpy(fx.dir, canon, strlen(canon) + 1);
    snprintf(fx.ws1, sizeof fx.ws1, "%s/ws1", fx.dir);
    snprintf(fx.ws2, sizeof fx.ws2, "%s/ws2", fx.dir);
    snprintf(fx.ws3, sizeof fx.ws3, "%s/ws3", fx.dir);
    snprintf(fx.file, sizeof fx.file, "%s/afile", fx.dir);
    snprintf(fx.cfg, sizeof fx.cfg, "%s/registry.json", fx.dir);
    if (mkdir(fx.ws1, 0700) != 0 || mkdir(fx.ws2, 0700) != 0 || mkdir(fx.ws3, 0700) != 0)
        return -1;
    FILE *f = fopen(fx.file, "w");
    if (!f)
        return -1;
    fputs("not a directory\n", f);
    fclose(f);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    return nftw(fx.dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Writes text to fx.cfg. */
static void write_cfg(const char *text)
{
    FILE *f = fopen(fx.cfg, "w");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
}

/* Writes fx.cfg from a format with the workspace dirs substituted. */
static void write_cfgf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void write_cfgf(const char *fmt, ...)
{
    char buf[8192];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    assert_true(n > 0 && (size_t)n < sizeof buf);
    write_cfg(buf);
}

/* ---- loading helpers ---- */

#define ARGV(...) ((char *[]){"codespace-mcp", __VA_ARGS__, NULL})
#define NOARGS    ((char *[]){"codespace-mcp", NULL})
#define ENV(...)  ((char *[]){__VA_ARGS__, NULL})
#define BASE_ENV  ENV("HOME=/home/u", "PATH=/usr/bin")

static int argc_of(char **argv)
{
    int n = 0;
    while (argv[n])
        n++;
    return n;
}

static int load(struct cs_config *cfg, char **argv, char **envp, struct cs_config_error *err)
{
    return cs_config_load(cfg, argc_of(argv), argv, envp, err);
}

/* Loads and expects success; fails with the message otherwise. */
static void load_ok(struct cs_config *cfg, char **argv, char **envp)
{
    struct cs_config_error err;
    int rc = load(cfg, argv, envp, &err);
    if (rc != CS_CONFIG_READY)
        fail_msg("load failed (%d): %s", rc, err.text);
}

/* Loads and expects an error whose message is exactly want; cfg must come back zeroed. */
static void load_err(char **argv, char **envp, const char *want)
{
    struct cs_config cfg;
    struct cs_config_error err;
    int rc = load(&cfg, argv, envp, &err);
    if (rc != CS_CONFIG_ERROR)
        fail_msg("accepted (%d), wanted: %s", rc, want);
    assert_string_equal(err.text, want);
    const unsigned char *p = (const unsigned char *)&cfg;
    for (size_t i = 0; i < sizeof cfg; i++)
        assert_int_equal(p[i], 0);
    cs_config_free(&cfg); /* harmless on a zeroed cfg */
}

/* Loads and expects an error message starting with prefix. */
static void load_err_prefix(char **argv, char **envp, const char *prefix)
{
    struct cs_config cfg;
    struct cs_config_error err;
    int rc = load(&cfg, argv, envp, &err);
    if (rc != CS_CONFIG_ERROR)
        fail_msg("accepted (%d), wanted: %s...", rc, prefix);
    if (strncmp(err.text, prefix, strlen(prefix)) != 0)
        fail_msg("message \"%s\" does not start with \"%s\"", err.text, prefix);
}

/* Loads fx.cfg through --config and expects the error "config <fx.cfg>: <want>". */
static void cfg_err(const char *want)
{
    char full[4096];
    snprintf(full, sizeof full, "config %s: %s", fx.cfg, want);
    load_err(ARGV("--config", fx.cfg), BASE_ENV, full);
}

/* ---- defaults ---- */

static void test_defaults(void **state)
{
    (void)state;
    struct cs_config cfg;
    load_ok(&cfg, NOARGS, BASE_ENV);
    assert_int_equal(cfg.transport, CS_CONFIG_TRANSPORT_STDIO);
    assert_string_equal(cfg.host, "127.0.0.1");
    assert_int_equal(cfg.port, 8787);
    assert_null(cfg.token);
    assert_null(cfg.config_path);
    assert_null(cfg.workspace_dir);
    assert_string_equal(cfg.operations_db, "/home/u/.local/state/codespace/operations.db");
    assert_int_equal(cfg.runner, CS_CONFIG_RUNNER_IN_PROCESS);
    assert_string_equal(cfg.runner_dir, "/tmp");
    assert_int_equal(cfg.process_timeout_secs, 1800); /* 30 minutes (issue 28) */
    assert_int_equal(cfg.max_processes, 8);
    assert_int_equal(cfg.output_ring_bytes, 1048576);
    assert_int_equal(cfg.processes, CS_WORKSPACE_PROCESSES_EXCLUSIVE);
    assert_int_equal(cs_config_file_timeout_ms(&cfg), 30000);
    assert_int_equal(cfg.http_body_budget_mib, 64);
    assert_int_equal(cfg.http_request_timeout_secs, 5);
    assert_int_equal(cfg.http_max_connections, 1024);
    assert_false(cfg.require_linux_sandbox);
    assert_false(cfg.metrics);
    assert_string_equal(cfg.log_level, "info");
    assert_int_equal(cfg.log_severity, 6);
    assert_null(cfg.runtime_bin);
    assert_null(cfg.sandbox_bin);
    /* No workspace is a valid configuration; "local" always exists. */
    assert_int_equal(cfg.n_workspaces, 0);
    assert_int_equal(cfg.n_environments, 1);
    assert_string_equal(cfg.environments[0].id, "local");
    assert_int_equal(cfg.environments[0].kind, CS_POLICY_ENV_HOST);
    cs_config_free(&cfg);
    cs_config_free(&cfg); /* idempotent */
    cs_config_free(NULL);
}

static void test_default_paths_follow_the_environment(void **state)
{
    (void)state;
    struct cs_config cfg;
    /* XDG_STATE_HOME wins over HOME; its trailing slash does not double. */
    load_ok(&cfg, NOARGS, ENV("HOME=/home/u", "XDG_STATE_HOME=/state/", "TMPDIR=/run/tmp/"));
    assert_string_equal(cfg.operations_db, "/state/codespace/operations.db");
    assert_string_equal(cfg.runner_dir, "/run/tmp");
    cs_config_free(&cfg);
    /* A relative or empty XDG_STATE_HOME / TMPDIR is ignored, as the XDG spec says. */
    load_ok(&cfg, NOARGS, ENV("HOME=/home/u", "XDG_STATE_HOME=state", "TMPDIR="));
    assert_string_equal(cfg.operations_db, "/home/u/.local/state/codespace/operations.db");
    assert_string_equal(cfg.runner_dir, "/tmp");
    cs_config_free(&cfg);
    /* The default TMPDIR is not refused even when it is /tmp or /: only configured values are. */
    load_ok(&cfg, NOARGS, ENV("HOME=/home/u", "TMPDIR=/"));
    assert_string_equal(cfg.runner_dir, "/");
    cs_config_free(&cfg);
    /* The first entry of a name wins, as getenv does. */
    load_ok(&cfg, NOARGS, ENV("HOME=/a", "HOME=/b"));
    assert_string_equal(cfg.operations_db, "/a/.local/state/codespace/operations.db");
    cs_config_free(&cfg);
    /* Nothing to build the default from: an error unless the db is configured. */
    load_err(NOARGS, ENV("PATH=/bin"),
             "no default for the operations db: neither XDG_STATE_HOME nor HOME is set; set "
             "--operations-db or CODESPACE_OPERATIONS_DB (\":memory:\" for none)");
    load_ok(&cfg, ARGV("--operations-db", ":memory:"), NULL);
    assert_string_equal(cfg.operations_db, ":memory:");
    cs_config_free(&cfg);
}

/* ---- flags and variables ---- */

static void check_all_set(const struct cs_config *cfg)
{
    assert_int_equal(cfg->transport, CS_CONFIG_TRANSPORT_HTTP);
    assert_string_equal(cfg->host, "0.0.0.0");
    assert_int_equal(cfg->port, 9000);
    assert_string_equal(cfg->token, "s3cret");
    assert_string_equal(cfg->config_path, fx.cfg);
    assert_string_equal(cfg->workspace_dir, fx.ws1);
    assert_string_equal(cfg->operations_db, "/var/lib/cs/ops.db");
    assert_int_equal(cfg->runner, CS_CONFIG_RUNNER_UDS);
    assert_string_equal(cfg->runner_dir, "/run/cs");
    assert_string_equal(cfg->log_level, "debug");
    assert_int_equal(cfg->log_severity, 7);
    assert_int_equal(cfg->n_workspaces, 1);
}

static void test_every_flag(void **state)
{
    (void)state;
    struct cs_config cfg;
    write_cfg("{}");
    load_ok(&cfg,
            ARGV("--transport", "http", "--host", "0.0.0.0", "--port", "9000", "--token", "s3cret",
                 "--config", fx.cfg, "--workspace", fx.ws1, "--operations-db", "/var/lib/cs/ops.db",
                 "--runner", "uds", "--runner-dir", "/run/cs/", "--log-level", "debug"),
            BASE_ENV);
    check_all_set(&cfg);
    cs_config_free(&cfg);

    /* The same with --flag=value, and --http for the transport. */
    char c[512], w[512];
    snprintf(c, sizeof c, "--config=%s", fx.cfg);
    snprintf(w, sizeof w, "--workspace=%s", fx.ws1);
    load_ok(&cfg,
            ARGV("--http", "--host=0.0.0.0", "--port=9000", "--token=s3cret", c, w,
                 "--operations-db=/var/lib/cs/ops.db", "--runner=uds", "--runner-dir=/run/cs",
                 "--log-level=debug"),
            BASE_ENV);
    check_all_set(&cfg);
    cs_config_free(&cfg);

    /* A value may contain '=' and start with "--" in the two-argument form. */
    load_ok(&cfg, ARGV("--token=a=b", "--host", "--weird"), BASE_ENV);
    assert_string_equal(cfg.token, "a=b");
    assert_string_equal(cfg.host, "--weird");
    cs_config_free(&cfg);

    /* A repeated flag keeps its last value; --transport stdio after --http wins. */
    load_ok(&cfg, ARGV("--port", "1", "--port=2", "--http", "--transport", "stdio"), BASE_ENV);
    assert_int_equal(cfg.port, 2);
    cs_config_free(&cfg);
    load_ok(&cfg, ARGV("--port=0"), BASE_ENV); /* 0: any free port (tests) */
    assert_int_equal(cfg.port, 0);
    assert_int_equal(cfg.transport, CS_CONFIG_TRANSPORT_STDIO);
    cs_config_free(&cfg);
}

static void test_every_variable(void **state)
{
    (void)state;
    struct cs_config cfg;
    char c[512], w[512];
    write_cfg("{}");
    snprintf(c, sizeof c, "CODESPACE_CONFIG=%s", fx.cfg);
    snprintf(w, sizeof w, "CODESPACE_WORKSPACE=%s", fx.ws1);
    load_ok(&cfg, NOARGS,
            ENV("HOME=/home/u", "CODESPACE_TRANSPORT=http", "CODESPACE_HTTP_HOST=0.0.0.0",
                "CODESPACE_HTTP_PORT=9000", "CODESPACE_HTTP_TOKEN=s3cret", c, w,
                "CODESPACE_OPERATIONS_DB=/var/lib/cs/ops.db", "CODESPACE_RUNNER=uds",
                "CODESPACE_RUNNER_DIR=/run/cs", "CODESPACE_LOG=debug",
                "CODESPACE_PROCESS_TIMEOUT_SECS=45", "CODESPACE_MAX_PROCESSES=3",
                "CODESPACE_REQUIRE_LINUX_SANDBOX=1", "CODESPACE_RUNTIME_BIN=/opt/cs/rt",
                "CODESPACE_LINUX_SANDBOX_BIN=/opt/cs/sb", "CODESPACE_HTTP_BODY_BUDGET_MIB=128",
                "CODESPACE_HTTP_REQUEST_TIMEOUT_SECS=7", "CODESPACE_HTTP_MAX_CONNECTIONS=4096"));
    check_all_set(&cfg);
    assert_int_equal(cfg.http_body_budget_mib, 128);
    assert_int_equal(cfg.http_request_timeout_secs, 7);
    assert_int_equal(cfg.http_max_connections, 4096);
    assert_int_equal(cfg.process_timeout_secs, 45);
    assert_int_equal(cfg.max_processes, 3);
    assert_true(cfg.require_linux_sandbox);
    assert_string_equal(cfg.runtime_bin, "/opt/cs/rt");
    assert_string_equal(cfg.sandbox_bin, "/opt/cs/sb");
    cs_config_free(&cfg);

    load_ok(&cfg, NOARGS, ENV("HOME=/h", "CODESPACE_REQUIRE_LINUX_SANDBOX=0"));
    assert_false(cfg.require_linux_sandbox);
    cs_config_free(&cfg);
}

static void test_flag_wins_over_variable(void **state)
{
    (void)state;
    struct cs_config cfg;
    char c[512], w[512];
    write_cfg("{}");
    /* Every variable holds a value the flag overrides; the variables' values would even be
     * invalid, proving they are not looked at. */
    snprintf(c, sizeof c, "CODESPACE_CONFIG=%s/nope.json", fx.dir);
    snprintf(w, sizeof w, "CODESPACE_WORKSPACE=%s", fx.file);
    load_ok(&cfg,
            ARGV("--http", "--host", "0.0.0.0", "--port", "9000", "--token", "s3cret", "--config",
                 fx.cfg, "--workspace", fx.ws1, "--operations-db", "/var/lib/cs/ops.db", "--runner",
                 "uds", "--runner-dir", "/run/cs", "--log-level", "debug"),
            ENV("HOME=/home/u", "CODESPACE_TRANSPORT=carrier-pigeon",
                "CODESPACE_HTTP_HOST=", "CODESPACE_HTTP_PORT=0", "CODESPACE_HTTP_TOKEN=", c, w,
                "CODESPACE_OPERATIONS_DB=", "CODESPACE_RUNNER=docker", "CODESPACE_RUNNER_DIR=/",
                "CODESPACE_LOG=loud"));
    check_all_set(&cfg);
    cs_config_free(&cfg);

    /* And one by one with valid values on both sides. */
    load_ok(&cfg, ARGV("--transport", "stdio"), ENV("HOME=/h", "CODESPACE_TRANSPORT=http"));
    assert_int_equal(cfg.transport, CS_CONFIG_TRANSPORT_STDIO);
    cs_config_free(&cfg);
    load_ok(&cfg, ARGV("--port", "1"), ENV("HOME=/h", "CODESPACE_HTTP_PORT=2"));
    assert_int_equal(cfg.port, 1);
    cs_config_free(&cfg);
    load_ok(&cfg, ARGV("--runner", "in-process"), ENV("HOME=/h", "CODESPACE_RUNNER=uds"));
    assert_int_equal(cfg.runner, CS_CONFIG_RUNNER_IN_PROCESS);
    cs_config_free(&cfg);
    load_ok(&cfg, ARGV("--log-level", "error"), ENV("HOME=/h", "CODESPACE_LOG=debug"));
    assert_string_equal(cfg.log_level, "error");
    cs_config_free(&cfg);
}

static void test_log_levels(void **state)
{
    (void)state;
    static const struct {
        const char *in, *name;
        int severity;
    } cases[] = {
        {"debug", "debug", 7},       {"info", "info", 6},    {"notice", "notice", 5},
        {"warning", "warning", 4},   {"warn", "warning", 4}, {"error", "error", 3},
        {"critical", "critical", 2}, {"alert", "alert", 1},  {"emergency", "emergency", 0},
        {"DEBUG", "debug", 7},       {"Warn", "warning", 4},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct cs_config cfg;
        char v[64];
        snprintf(v, sizeof v, "CODESPACE_LOG=%s", cases[i].in);
        load_ok(&cfg, NOARGS, ENV("HOME=/h", v));
        assert_string_equal(cfg.log_level, cases[i].name);
        assert_int_equal(cfg.log_severity, cases[i].severity);
        cs_config_free(&cfg);
    }
}

static void test_help_and_version(void **state)
{
    (void)state;
    struct cs_config cfg;
    struct cs_config_error err;
    assert_int_equal(load(&cfg, ARGV("--help"), BASE_ENV, &err), CS_CONFIG_HELP);
    assert_null(cfg.host);
    assert_int_equal(load(&cfg, ARGV("--version"), BASE_ENV, &err), CS_CONFIG_VERSION);
    /* Returned when met: a bad value before it is not checked, a bad flag before it is. */
    assert_int_equal(load(&cfg, ARGV("--port", "abc", "--version"), BASE_ENV, &err),
                     CS_CONFIG_VERSION);
    assert_int_equal(load(&cfg, ARGV("--help", "--bogus"), BASE_ENV, &err), CS_CONFIG_HELP);
    load_err(ARGV("--bogus", "--help"), BASE_ENV, "unknown flag \"--bogus\" (see --help)");
    load_err(ARGV("--help=yes"), BASE_ENV, "--help: takes no value");
    load_err(ARGV("--version=1"), BASE_ENV, "--version: takes no value");

    /* The usage text names every flag and variable, with the defaults. */
    const char *u = cs_config_usage();
    static const char *const names[] = {"--transport",
                                        "--http",
                                        "--host",
                                        "--port",
                                        "--token",
                                        "--config",
                                        "--workspace",
                                        "--operations-db",
                                        "--runner",
                                        "--runner-dir",
                                        "--log-level",
                                        "--version",
                                        "--help",
                                        "CODESPACE_TRANSPORT",
                                        "CODESPACE_HTTP_HOST",
                                        "CODESPACE_HTTP_PORT",
                                        "CODESPACE_HTTP_TOKEN",
                                        "CODESPACE_CONFIG",
                                        "CODESPACE_WORKSPACE",
                                        "CODESPACE_OPERATIONS_DB",
                                        "CODESPACE_RUNNER",
                                        "CODESPACE_RUNNER_DIR",
                                        "CODESPACE_LOG",
                                        "CODESPACE_PROCESS_TIMEOUT_SECS",
                                        "CODESPACE_MAX_PROCESSES",
                                        "CODESPACE_OUTPUT_RING_BYTES",
                                        "CODESPACE_PROCESSES",
                                        "--process-timeout SECS",
                                        "--max-processes N",
                                        "--output-ring BYTES",
                                        "--processes exclusive|shared",
                                        "(default 1800)",
                                        "(default 1048576)",
                                        "(default exclusive)",
                                        "CODESPACE_REQUIRE_LINUX_SANDBOX",
                                        "CODESPACE_RUNTIME_BIN",
                                        "CODESPACE_LINUX_SANDBOX_BIN",
                                        "127.0.0.1",
                                        "8787",
                                        "in-process",
                                        "$XDG_STATE_HOME",
                                        ":memory:",
                                        "$TMPDIR",
                                        "(default 8)",
                                        "(default info)",
                                        "(default stdio)",
                                        "--metrics",
                                        "CODESPACE_METRICS"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (!strstr(u, names[i]))
            fail_msg("usage does not mention %s", names[i]);
    }
    assert_int_equal(u[strlen(u) - 1], '\n');
}

/* --metrics (workflows.md section 6): HTTP only, off by default; with stdio the start is
 * refused naming where it came from. */
static void test_metrics(void **state)
{
    (void)state;
    struct cs_config cfg;
    load_ok(&cfg, ARGV("--http", "--metrics"), BASE_ENV);
    assert_true(cfg.metrics);
    cs_config_free(&cfg);
    load_ok(&cfg, ARGV("--http"), ENV("HOME=/home/u", "CODESPACE_METRICS=1"));
    assert_true(cfg.metrics);
    cs_config_free(&cfg);
    load_ok(&cfg, ARGV("--http"), ENV("HOME=/home/u", "CODESPACE_METRICS=0"));
    assert_false(cfg.metrics);
    cs_config_free(&cfg);
    /* The flag wins over a variable that says 0. */
    load_ok(&cfg, ARGV("--http", "--metrics"), ENV("HOME=/home/u", "CODESPACE_METRICS=0"));
    assert_true(cfg.metrics);
    cs_config_free(&cfg);
    load_err(ARGV("--metrics"), BASE_ENV,
             "--metrics: metrics are served over HTTP only; the stdio transport has no endpoint "
             "for them (add --http, or drop --metrics)");
    load_err(NOARGS, ENV("HOME=/home/u", "CODESPACE_METRICS=1"),
             "CODESPACE_METRICS: metrics are served over HTTP only; the stdio transport has no "
             "endpoint for them (add --http, or drop CODESPACE_METRICS)");
    load_err(ARGV("--http"), ENV("HOME=/home/u", "CODESPACE_METRICS=yes"),
             "CODESPACE_METRICS: expected \"1\" or \"0\", got \"yes\"");
}

static void test_argument_errors(void **state)
{
    (void)state;
    load_err(ARGV("--nope"), BASE_ENV, "unknown flag \"--nope\" (see --help)");
    load_err(ARGV("--nope=1"), BASE_ENV, "unknown flag \"--nope\" (see --help)");
    load_err(ARGV("serve"), BASE_ENV, "unexpected argument \"serve\" (see --help)");
    load_err(ARGV("-p", "1"), BASE_ENV, "unexpected argument \"-p\" (see --help)");
    load_err(ARGV("--"), BASE_ENV, "unexpected argument \"--\" (see --help)");
    load_err(ARGV("--port"), BASE_ENV, "--port: missing value");
    load_err(ARGV("--http=1"), BASE_ENV, "--http: takes no value");
    load_err(ARGV("--http", "--metrics=1"), BASE_ENV, "--metrics: takes no value");
    /* Prefixes are not abbreviations. */
    load_err(ARGV("--hos", "x"), BASE_ENV, "unknown flag \"--hos\" (see --help)");
    load_err(ARGV("--hostname", "x"), BASE_ENV, "unknown flag \"--hostname\" (see --help)");
}

/* ---- every refused value of docs/contract/runtime.md section 2 ---- */

static void test_bad_values(void **state)
{
    (void)state;
    static const struct {
        const char *flag; /* "--x=value" or NULL */
        const char *var;  /* "NAME=value" or NULL */
        const char *want;
    } cases[] = {
        {"--transport=tcp", NULL, "--transport: expected \"stdio\" or \"http\", got \"tcp\""},
        {NULL, "CODESPACE_TRANSPORT=HTTP",
         "CODESPACE_TRANSPORT: expected \"stdio\" or \"http\", got \"HTTP\""},
        {"--transport=", NULL, "--transport: expected \"stdio\" or \"http\", got \"\""},
        {"--host=", NULL, "--host: must not be empty"},
        {NULL, "CODESPACE_HTTP_HOST=", "CODESPACE_HTTP_HOST: must not be empty"},
        {"--port=65536", NULL, "--port: expected an integer from 0 to 65535, got \"65536\""},
        {"--http-body-budget=15", NULL,
         "--http-body-budget: expected an integer from 16 to 65536, got \"15\""},
        {NULL, "CODESPACE_HTTP_BODY_BUDGET_MIB=65537",
         "CODESPACE_HTTP_BODY_BUDGET_MIB: expected an integer from 16 to 65536, got \"65537\""},
        {"--http-request-timeout=0", NULL,
         "--http-request-timeout: expected an integer from 1 to 3600, got \"0\""},
        {"--http-max-connections=8", NULL,
         "--http-max-connections: expected an integer from 16 to 65536, got \"8\""},
        {"--port=-1", NULL, "--port: expected an integer from 0 to 65535, got \"-1\""},
        {"--port=80x", NULL, "--port: expected an integer from 0 to 65535, got \"80x\""},
        {"--port= 80", NULL, "--port: expected an integer from 0 to 65535, got \" 80\""},
        {"--port=99999999999999999999999", NULL,
         "--port: expected an integer from 0 to 65535, got \"99999999999999999999999\""},
        {NULL, "CODESPACE_HTTP_PORT=http",
         "CODESPACE_HTTP_PORT: expected an integer from 0 to 65535, got \"http\""},
        {"--token=", NULL, "--token: must not be empty"},
        {NULL, "CODESPACE_HTTP_TOKEN=", "CODESPACE_HTTP_TOKEN: must not be empty"},
        {"--config=", NULL, "--config: must not be empty"},
        {"--workspace=", NULL, "--workspace: must not be empty"},
        {"--operations-db=", NULL, "--operations-db: must not be empty"},
        {"--runner=docker", NULL,
         "--runner: expected \"in-process\", \"uds\" or tcp://HOST:PORT, got \"docker\""},
        {NULL, "CODESPACE_RUNNER=inprocess",
         "CODESPACE_RUNNER: expected \"in-process\", \"uds\" or tcp://HOST:PORT, got "
         "\"inprocess\""},
        {"--runner=tcp://h:0", NULL, "--runner: expected tcp://HOST:PORT, got \"tcp://h:0\""},
        {"--runner=tcp://h", NULL, "--runner: expected tcp://HOST:PORT, got \"tcp://h\""},
        {"--runner=tcp://10.0.0.2:7451", NULL,
         "--runner tcp://10.0.0.2:7451 needs --tls-cert, --tls-key and --tls-peer-sha256, or "
         "--tls-psk and --tls-psk-identity (or --runner-tls off on a private link)"},
        {"--tls-psk=/k", NULL, "--tls-psk and --tls-psk-identity go together"},
        {"--tls-psk-identity=a b", NULL,
         "--tls-psk-identity: expected 1..128 bytes of [A-Za-z0-9._:@-], got \"a b\""},
        {"--tls-psk=", NULL, "--tls-psk: must not be empty"},
        {"--runner-tls=maybe", NULL, "--runner-tls: expected \"on\" or \"off\", got \"maybe\""},
        {"--tls-peer-sha256=abc", NULL,
         "--tls-peer-sha256: expected 64 hex digits (pairs may be split by ':'), got \"abc\""},
        {"--tls-cert=/c", NULL, "--tls-cert, --tls-key and --tls-peer-sha256 go together"},

        {"--runner-dir=", NULL, "--runner-dir: must not be empty"},
        {"--runner-dir=run/cs", NULL, "--runner-dir: expected an absolute path, got \"run/cs\""},
        {"--log-level=loud", NULL,
         "--log-level: expected one of \"debug\", \"info\", \"notice\", \"warning\", \"error\", "
         "\"critical\", \"alert\", \"emergency\", got \"loud\""},
        {NULL, "CODESPACE_LOG=loud",
         "CODESPACE_LOG: expected one of \"debug\", \"info\", \"notice\", \"warning\", \"error\", "
         "\"critical\", \"alert\", \"emergency\", got \"loud\""},
        {NULL, "CODESPACE_PROCESS_TIMEOUT_SECS=0",
         "CODESPACE_PROCESS_TIMEOUT_SECS: expected an integer from 1 to 2147483, got \"0\""},
        {NULL, "CODESPACE_PROCESS_TIMEOUT_SECS=-1",
         "CODESPACE_PROCESS_TIMEOUT_SECS: expected an integer from 1 to 2147483, got \"-1\""},
        {NULL, "CODESPACE_PROCESS_TIMEOUT_SECS=abc",
         "CODESPACE_PROCESS_TIMEOUT_SECS: expected an integer from 1 to 2147483, got \"abc\""},
        {NULL, "CODESPACE_PROCESS_TIMEOUT_SECS=",
         "CODESPACE_PROCESS_TIMEOUT_SECS: expected an integer from 1 to 2147483, got \"\""},
        {NULL, "CODESPACE_PROCESS_TIMEOUT_SECS=2147484",
         "CODESPACE_PROCESS_TIMEOUT_SECS: expected an integer from 1 to 2147483, got "
         "\"2147484\""},
        {NULL, "CODESPACE_MAX_PROCESSES=0",
         "CODESPACE_MAX_PROCESSES: expected an integer from 1 to 1024, got \"0\""},
        {NULL, "CODESPACE_MAX_PROCESSES=1025",
         "CODESPACE_MAX_PROCESSES: expected an integer from 1 to 1024, got \"1025\""},
        {"--process-timeout=-1", NULL,
         "--process-timeout: expected an integer from 0 to 2147483, got \"-1\""},
        {"--process-timeout=2147484", NULL,
         "--process-timeout: expected an integer from 0 to 2147483, got \"2147484\""},
        {"--max-processes=0", NULL,
         "--max-processes: expected an integer from 1 to 1024, got \"0\""},
        {"--max-processes=1025", NULL,
         "--max-processes: expected an integer from 1 to 1024, got \"1025\""},
        {"--output-ring=4095", NULL,
         "--output-ring: expected an integer from 4096 to 2097152, got \"4095\""},
        {"--output-ring=2097153", NULL,
         "--output-ring: expected an integer from 4096 to 2097152, got \"2097153\""},
        {NULL, "CODESPACE_OUTPUT_RING_BYTES=4095",
         "CODESPACE_OUTPUT_RING_BYTES: expected an integer from 4096 to 2097152, got \"4095\""},
        {NULL, "CODESPACE_OUTPUT_RING_BYTES=2097153",
         "CODESPACE_OUTPUT_RING_BYTES: expected an integer from 4096 to 2097152, got "
         "\"2097153\""},
        {"--processes=parallel", NULL,
         "--processes: expected \"exclusive\" or \"shared\", got \"parallel\""},
        {NULL, "CODESPACE_PROCESSES=Shared",
         "CODESPACE_PROCESSES: expected \"exclusive\" or \"shared\", got \"Shared\""},
        {NULL, "CODESPACE_REQUIRE_LINUX_SANDBOX=yes",
         "CODESPACE_REQUIRE_LINUX_SANDBOX: expected \"1\" or \"0\", got \"yes\""},
        {NULL, "CODESPACE_REQUIRE_LINUX_SANDBOX=",
         "CODESPACE_REQUIRE_LINUX_SANDBOX: expected \"1\" or \"0\", got \"\""},
        {NULL, "CODESPACE_RUNTIME_BIN=", "CODESPACE_RUNTIME_BIN: must not be empty"},
        {NULL, "CODESPACE_LINUX_SANDBOX_BIN=", "CODESPACE_LINUX_SANDBOX_BIN: must not be empty"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (cases[i].flag)
            load_err(ARGV((char *)cases[i].flag), BASE_ENV, cases[i].want);
        else
            load_err(NOARGS, ENV("HOME=/home/u", (char *)cases[i].var), cases[i].want);
    }
    /* Control bytes in a value never reach the message raw. */
    load_err(ARGV("--port=1\n2\"\\"), BASE_ENV,
             "--port: expected an integer from 0 to 65535, got \"1?2\\\"\\\\\"");
}

static void test_runner_dir_refusals(void **state)
{
    (void)state;
    static const char *const refused[] = {"/",         "//",      "/tmp",     "/tmp/",
                                          "//tmp",     "/tmp//",  "/var/tmp", "/var/tmp/",
                                          "/var//tmp", "/home/u", "/home/u/", "/home//u///"};
    static const char *const tail =
        ": /, /tmp, /var/tmp and $HOME are shared or too valuable; choose a directory of its own";
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        char flag[64], var[80], want[256];
        snprintf(flag, sizeof flag, "--runner-dir=%s", refused[i]);
        snprintf(want, sizeof want, "--runner-dir: refused \"%s\"%s", refused[i], tail);
        load_err(ARGV(flag), BASE_ENV, want);
        snprintf(var, sizeof var, "CODESPACE_RUNNER_DIR=%s", refused[i]);
        snprintf(want, sizeof want, "CODESPACE_RUNNER_DIR: refused \"%s\"%s", refused[i], tail);
        load_err(NOARGS, ENV("HOME=/home/u", var), want);
    }
    /* $HOME is compared normalised on its side too. */
    load_err(ARGV("--runner-dir", "/home/u"), ENV("HOME=/home/u/"),
             "--runner-dir: refused \"/home/u\""
             ": /, /tmp, /var/tmp and $HOME are shared or too "
             "valuable; choose a directory of its own");

    /* Directories below them are fine, stored without trailing slashes. */
    static const struct {
        const char *in, *stored;
    } ok[] = {{"/tmp/cs", "/tmp/cs"},       {"/tmp/cs/", "/tmp/cs"},
              {"/var/tmp/x", "/var/tmp/x"}, {"/home/u/run", "/home/u/run"},
              {"/home/user", "/home/user"}, {"//run//cs//", "/run/cs"}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        struct cs_config cfg;
        load_ok(&cfg, ARGV("--runner-dir", (char *)ok[i].in), BASE_ENV);
        assert_string_equal(cfg.runner_dir, ok[i].stored);
        cs_config_free(&cfg);
    }
    /* Without HOME only the fixed three are refused. */
    struct cs_config cfg;
    load_ok(&cfg, ARGV("--runner-dir", "/home/u", "--operations-db", ":memory:"), NULL);
    assert_string_equal(cfg.runner_dir, "/home/u");
    cs_config_free(&cfg);
}

/* ---- the registry file ---- */

static void test_registry_example(void **state)
{
    (void)state;
    /* docs/contract/runtime.md §2's example, with real roots, plus a container and a defaults-only
     * workspace. The root of "demo" is given with a trailing "/." to check canonicalisation. */
    write_cfgf("{\n"
               "  \"environments\": { \"box\": { \"kind\": \"linux-container\" } },\n"
               "  \"workspaces\": {\n"
               "    \"demo\": {\n"
               "      \"root\": \"%s/./\",\n"
               "      \"profile\": \"workspace-write\",\n"
               "      \"environment\": \"local\",\n"
               "      \"network\": \"enabled\",\n"
               "      \"network_allow\": [\"example.com\", \"*.example.org\", \"127.0.0.1:8080\"]\n"
               "    },\n"
               "    \"boxed\": { \"root\": \"%s\", \"environment\": \"box\",\n"
               "                 \"profile\": \"workspace-write\" },\n"
               "    \"docs\": { \"root\": \"%s\", \"network_allow\": [] }\n"
               "  }\n"
               "}\n",
               fx.ws1, fx.ws3, fx.ws2);
    struct cs_config cfg;
    load_ok(&cfg, ARGV("--config", fx.cfg), BASE_ENV);
    assert_int_equal(cfg.n_environments, 2);
    assert_string_equal(cfg.environments[0].id, "local");
    assert_string_equal(cfg.environments[1].id, "box");
    assert_int_equal(cfg.environments[1].kind, CS_POLICY_ENV_LINUX_CONTAINER);
    assert_int_equal(cfg.n_workspaces, 3);

    const struct cs_workspace *d = &cfg.workspaces[0];
    assert_string_equal(d->id, "demo");
    assert_int_equal(d->id_len, 4);
    assert_string_equal(d->root, fx.ws1);
    assert_int_equal(d->profile, CS_POLICY_PROFILE_WORKSPACE_WRITE);
    assert_string_equal(d->environment, "local");
    assert_int_equal(d->env_kind, CS_POLICY_ENV_HOST);
    assert_int_equal(d->network, CS_POLICY_NETWORK_ENABLED);
    assert_true(d->has_network_allow);
    assert_int_equal(d->n_network_allow, 3);
    assert_string_equal(d->network_allow[0], "example.com");
    assert_string_equal(d->network_allow[1], "*.example.org");
    assert_string_equal(d->network_allow[2], "127.0.0.1:8080");

    const struct cs_workspace *b = &cfg.workspaces[1];
    assert_string_equal(b->id, "boxed");
    assert_string_equal(b->environment, "box");
    assert_int_equal(b->env_kind, CS_POLICY_ENV_LINUX_CONTAINER);
    assert_int_equal(b->network, CS_POLICY_NETWORK_RESTRICTED);
    assert_false(b->has_network_allow);

    /* Defaults: read-only, restricted, local. */
    const struct cs_workspace *o = &cfg.workspaces[2];
    assert_string_equal(o->id, "docs");
    assert_string_equal(o->root, fx.ws2);
    assert_int_equal(o->profile, CS_POLICY_PROFILE_READ_ONLY);
    assert_int_equal(o->network, CS_POLICY_NETWORK_RESTRICTED);
    assert_string_equal(o->environment, "local");
    assert_int_equal(o->env_kind, CS_POLICY_ENV_HOST);
    assert_true(o->has_network_allow);
    assert_int_equal(o->n_network_allow, 0);
    cs_config_free(&cfg);

    /* An empty file object, and "local" restated as a host, are fine. */
    write_cfg("{\"environments\": {\"local\": {\"kind\": \"host\"}}}");
    load_ok(&cfg, ARGV("--config", fx.cfg), BASE_ENV);
    assert_int_equal(cfg.n_environments, 1);
    assert_int_equal(cfg.n_workspaces, 0);
    cs_config_free(&cfg);
}

/* workflows.md section 4: network "loopback" loads and workspace_info reports it. */
static void test_registry_loopback(void **state)
{
    (void)state;
    write_cfgf("{ \"workspaces\": { \"lb\": { \"root\": \"%s\", \"network\": \"loopback\" } } }\n",
               fx.ws1);
    struct cs_config cfg;
    load_ok(&cfg, ARGV("--config", fx.cfg), BASE_ENV);
    assert_int_equal(cfg.n_workspaces, 1);
    assert_int_equal(cfg.workspaces[0].network, CS_POLICY_NETWORK_LOOPBACK);
    assert_false(cfg.workspaces[0].has_network_allow);
    struct cs_runtime_caps caps = {.files_available = true,
                                   .patch_available = true,
                                   .process_available = true,
                                   .sandbox = true,
                                   .syscall_denials = true};
    struct csw_mcp_workspace_info_input in = {.has_workspace_id = true,
                                              .workspace_id = {(char *)"lb", 2}};
    struct csw_mcp_workspace_info_output out;
    assert_int_equal(cs_policy_workspace_info(&cfg, &caps, "0", &in, &out, NULL), 0);
    assert_int_equal(out.execution.network.policy,
                     CSW_MCP_WORKSPACE_INFO_OUTPUT_EXECUTION_NETWORK_POLICY_LOOPBACK);
    assert_int_equal(out.execution.network.enforcement,
                     CSW_MCP_WORKSPACE_INFO_OUTPUT_EXECUTION_NETWORK_ENFORCEMENT_ENFORCED);
    /* no_route reports come through seccomp user notification */
    assert_int_equal(out.execution.isolation.denial_reports.n, 2);
    assert_int_equal(out.execution.isolation.denial_reports.v[0],
                     CSW_MCP_WORKSPACE_INFO_OUTPUT_EXECUTION_ISOLATION_DENIAL_REPORTS_ITEM_NETWORK);
    csw_mcp_workspace_info_output_free(&out);
    cs_config_free(&cfg);
}

/* workflows.md section 3: processes "shared" from the registry, --processes / CODESPACE_PROCESSES
 * for the --workspace form, exclusive by default; workspace_info says share or reject. */
static void test_registry_processes(void **state)
{
    (void)state;
    write_cfgf("{ \"workspaces\": { \"sh\": { \"root\": \"%s\", \"processes\": \"shared\" },\n"
               "                  \"ex\": { \"root\": \"%s\" } } }\n",
               fx.ws1, fx.ws2);
    struct cs_config cfg;
    load_ok(&cfg, ARGV("--config", fx.cfg), BASE_ENV);
    assert_int_equal(cfg.workspaces[0].processes, CS_WORKSPACE_PROCESSES_SHARED);
    assert_int_equal(cfg.workspaces[1].processes, CS_WORKSPACE_PROCESSES_EXCLUSIVE);
    struct cs_runtime_caps caps = {
        .files_available = true, .patch_available = true, .process_available = true};
    struct csw_mcp_workspace_info_input in = {.has_workspace_id = true,
                                              .workspace_id = {(char *)"sh", 2}};
    struct csw_mcp_workspace_info_output out;
    assert_int_equal(cs_policy_workspace_info(&cfg, &caps, "0", &in, &out, NULL), 0);
    assert_int_equal(out.execution.serialization.process_conflict,
                     CSW_MCP_WORKSPACE_INFO_OUTPUT_EXECUTION_SERIALIZATION_PROCESS_CONFLICT_SHARE);
    csw_mcp_workspace_info_output_free(&out);
    in.workspace_id = (struct cs_str){(char *)"ex", 2};
    assert_int_equal(cs_policy_workspace_info(&cfg, &caps, "0", &in, &out, NULL), 0);
    assert_int_equal(out.execution.serialization.process_conflict,
                     CSW_MCP_WORKSPACE_INFO_OUTPUT_EXECUTION_SERIALIZATION_PROCESS_CONFLICT_REJECT);
    csw_mcp_workspace_info_output_free(&out);
    cs_config_free(&cfg);

    load_ok(&cfg, ARGV("--workspace", fx.ws1, "--processes", "shared"), BASE_ENV);
    assert_int_equal(cfg.workspaces[0].processes, CS_WORKSPACE_PROCESSES_SHARED);
    cs_config_free(&cfg);
    load_ok(&cfg, ARGV("--workspace", fx.ws1), ENV("HOME=/home/u", "CODESPACE_PROCESSES=shared"));
    assert_int_equal(cfg.workspaces[0].processes, CS_WORKSPACE_PROCESSES_SHARED);
    cs_config_free(&cfg);
    load_ok(&cfg, ARGV("--workspace", fx.ws1), BASE_ENV);
    assert_int_equal(cfg.workspaces[0].processes, CS_WORKSPACE_PROCESSES_EXCLUSIVE);
    cs_config_free(&cfg);
    load_err(ARGV("--workspace", fx.ws1, "--processes", "many"), BASE_ENV,
             "--processes: expected \"exclusive\" or \"shared\", got \"many\"");
}

static void test_registry_root_symlink_is_canonical(void **state)
{
    (void)state;
    char link[512];
    snprintf(link, sizeof link, "%s/link", fx.dir);
    unlink(link);
    assert_int_equal(symlink(fx.ws1, link), 0);
    write_cfgf("{\"workspaces\": {\"w\": {\"root\": \"%s\"}}}", link);
    struct cs_config cfg;
    load_ok(&cfg, ARGV("--config", fx.cfg), BASE_ENV);
    assert_string_equal(cfg.workspaces[0].root, fx.ws1);
    cs_config_free(&cfg);
    unlink(link);
}

/* docs/scale-out.md: a workspace on a remote worker is the worker's; its root need not exist on
 * the gateway's host and is never opened there, but must be canonical as given. A local one must
 * exist. The same for --workspace with the gateway's --runner tcp://. */
static void test_registry_remote_root(void **state)
{
    (void)state;
    char gone[512];
    snprintf(gone, sizeof gone, "%s/not-here/ws", fx.dir);
    write_cfgf("{\"workspaces\": {\"far\": {\"root\": \"%s\", \"runner\": {\"url\": "
               "\"tcp://10.0.0.2:7451\", \"tls_psk_file\": \"/k\", \"tls_psk_identity\": "
               "\"gw\"}}, \"near\": {\"root\": \"%s\"}}}",
               gone, fx.ws1);
    struct cs_config cfg;
    load_ok(&cfg, ARGV("--config", fx.cfg), BASE_ENV);
    assert_string_equal(cfg.workspaces[0].root, gone);
    assert_false(cfg.workspaces[0].has_root_fd);
    assert_string_equal(cfg.workspaces[0].remote.psk, "/k");
    assert_string_equal(cfg.workspaces[0].remote.psk_identity, "gw");
    assert_true(cfg.workspaces[1].has_root_fd);
    cs_config_free(&cfg);

    char want[1024];
    snprintf(want, sizeof want, "/workspaces/far/root: does not exist: %s", gone);
    write_cfgf("{\"workspaces\": {\"far\": {\"root\": \"%s\"}}}", gone);
    cfg_err(want);
    static const char *const odd[] = {"/a//b", "/a/./b", "/a/../b", "/a/", "/a/.", "/a/.."};
    for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) {
        write_cfgf("{\"workspaces\": {\"far\": {\"root\": \"%s\", \"runner\": {\"url\": "
                   "\"tcp://h:1\", \"plaintext\": true}}}}",
                   odd[i]);
        snprintf(want, sizeof want,
                 "/workspaces/far/root: a remote workspace's root is the worker's path and must "
                 "be canonical (no '//', '.' or '..' component, no trailing '/'): %s",
                 odd[i]);
        cfg_err(want);
    }
    load_ok(&cfg,
            ARGV("--workspace", gone, "--runner", "tcp://h:1", "--runner-tls", "off",
                 "--operations-db", ":memory:"),
            BASE_ENV);
    assert_string_equal(cfg.workspaces[0].root, gone);
    assert_false(cfg.workspaces[0].has_root_fd);
    cs_config_free(&cfg);
    /* The worker would refuse these anyway: the two modes together, or half of one. */
    write_cfgf("{\"workspaces\": {\"far\": {\"root\": \"/w\", \"runner\": {\"url\": "
               "\"tcp://h:1\", \"tls_psk_file\": \"/k\", \"tls_psk_identity\": \"gw\", "
               "\"tls_cert\": \"/c\"}}}}");
    cfg_err("/workspaces/far/runner: certificates (tls_cert, tls_key, tls_peer_sha256) and a "
            "pre-shared key (tls_psk_file, tls_psk_identity) are two modes: give one");
    write_cfgf("{\"workspaces\": {\"far\": {\"root\": \"/w\", \"runner\": {\"url\": "
               "\"tcp://h:1\", \"tls_psk_file\": \"/k\"}}}}");
    cfg_err("/workspaces/far/runner: needs tls_psk_file and tls_psk_identity");
    write_cfgf("{\"workspaces\": {\"far\": {\"root\": \"/w\", \"runner\": {\"url\": "
               "\"tcp://h:1\", \"tls_psk_file\": \"/k\", \"tls_psk_identity\": \"a b\"}}}}");
    cfg_err("/workspaces/far/runner/tls_psk_identity: expected 1..128 bytes of [A-Za-z0-9._:@-]");
}

static void test_registry_refusals(void **state)
{
    (void)state;
    char want[4096];

    /* From the generated decoder, verbatim. */
    write_cfgf("{\"workspaces\": {\"demo\": {\"root\": \"%s\", \"profile\": \"host-admin\"}}}",
               fx.ws1);
    cfg_err("/workspaces/demo/profile: expected one of \"read-only\", \"workspace-write\"");
    write_cfgf("{\"workspaces\": {\"demo\": {\"root\": \"%s\", \"network\": \"bogus\"}}}", fx.ws1);
    cfg_err("/workspaces/demo/network: expected one of \"restricted\", \"enabled\", \"loopback\"");
    write_cfg("{\"environments\": {\"box\": {\"kind\": \"bogus\"}}}");
    cfg_err("/environments/box/kind: expected one of \"host\", \"linux-container\"");
    write_cfg("{\"workspaces\": {\"demo\": {\"profile\": \"read-only\"}}}");
    cfg_err("/workspaces/demo/root: missing required property");
    write_cfg("{\"workspaces\": {\"demo\": {\"root\": \"\"}}}");
    {
        struct cs_config cfg;
        struct cs_config_error err;
        assert_int_equal(load(&cfg, ARGV("--config", fx.cfg), BASE_ENV, &err), CS_CONFIG_ERROR);
        snprintf(want, sizeof want, "config %s: /workspaces/demo/root: ", fx.cfg);
        assert_memory_equal(err.text, want, strlen(want));
    }
    write_cfg("[]");
    cfg_err("/: expected object");
    write_cfgf("{\"workspaces\": {\"demo\": {\"root\": \"%s\", \"network_allow\": [\"a\", 80]}}}",
               fx.ws1);
    cfg_err("/workspaces/demo/network_allow/1: expected string");

    /* Semantic checks, same style. */
    write_cfgf("{\"workspaces\": {\"demo\": {\"root\": \"%s\", \"environment\": \"box2\"}}}",
               fx.ws1);
    cfg_err("/workspaces/demo/environment: unknown environment \"box2\"");
    write_cfg("{\"workspaces\": {\"demo\": {\"root\": \"rel/dir\"}}}");
    cfg_err("/workspaces/demo/root: must be an absolute path, got \"rel/dir\"");
    write_cfgf("{\"workspaces\": {\"demo\": {\"root\": \"%s\"}}}", fx.file);
    snprintf(want, sizeof want, "/workspaces/demo/root: not a directory: %s", fx.file);
    cfg_err(want);
    write_cfgf("{\"workspaces\": {\"demo\": {\"root\": \"%s/nope\"}}}", fx.dir);
    snprintf(want, sizeof want, "/workspaces/demo/root: does not exist: %s/nope", fx.dir);
    cfg_err(want);
    write_cfgf("{\"workspaces\": {\"demo\": {\"root\": \"%s/sub\"}}}", fx.file);
    snprintf(want, sizeof want, "/workspaces/demo/root: cannot access %s/sub: Not a directory",
             fx.file);
    cfg_err(want);
    write_cfg("{\"environments\": {\"local\": {\"kind\": \"linux-container\"}}}");
    cfg_err("/environments/local/kind: environment \"local\" is built in as kind \"host\" and "
            "cannot be redefined");
    write_cfgf("{\"workspaces\": {\"\": {\"root\": \"%s\"}}}", fx.ws1);
    cfg_err("/workspaces/: empty workspace id (an empty workspace_id means none)");
    write_cfg("{\"environments\": {\"\": {\"kind\": \"host\"}}}");
    cfg_err("/environments/: empty environment id");

    /* NUL bytes: allowed by the parser so they can be named here. */
    write_cfg("{\"workspaces\": {\"demo\": {\"root\": \"/tmp\\u0000x\"}}}");
    cfg_err("/workspaces/demo/root: contains a NUL byte");
    write_cfgf("{\"workspaces\": {\"demo\": {\"root\": \"%s\", \"network_allow\": [\"a\", "
               "\"b\\u0000c\"]}}}",
               fx.ws1);
    cfg_err("/workspaces/demo/network_allow/1: contains a NUL byte");
    write_cfgf("{\"workspaces\": {\"demo\": {\"root\": \"%s\", \"environment\": \"lo\\u0000\"}}}",
               fx.ws1);
    cfg_err("/workspaces/demo/environment: unknown environment \"lo?\"");

    /* Ids are escaped in the pointer as RFC 6901 says; control bytes show as '?'. */
    write_cfg("{\"workspaces\": {\"web/app~1\\n\": {\"root\": \"x\"}}}");
    cfg_err("/workspaces/web~1app~01?/root: must be an absolute path, got \"x\"");

    /* Not JSON: jansson's message with line and column; duplicate keys are refused. */
    write_cfg("{\n  \"workspaces\": {,}\n}\n");
    snprintf(want, sizeof want, "config %s: line 2 column ", fx.cfg);
    load_err_prefix(ARGV("--config", fx.cfg), BASE_ENV, want);
    write_cfg("");
    snprintf(want, sizeof want, "config %s: line ", fx.cfg);
    load_err_prefix(ARGV("--config", fx.cfg), BASE_ENV, want);
    write_cfgf("{\"workspaces\": {\"a\": {\"root\": \"%s\"},\n \"a\": {\"root\": \"%s\"}}}", fx.ws1,
               fx.ws2);
    snprintf(want, sizeof want, "config %s: line 2 column ", fx.cfg);
    load_err_prefix(ARGV("--config", fx.cfg), BASE_ENV, want);

    /* The file itself. */
    snprintf(want, sizeof want, "config %s/missing.json: cannot open: No such file or directory",
             fx.dir);
    char path[512];
    snprintf(path, sizeof path, "%s/missing.json", fx.dir);
    load_err(ARGV("--config", path), BASE_ENV, want);
    snprintf(want, sizeof want, "config %s: not a regular file", fx.ws1);
    load_err(ARGV("--config", fx.ws1), BASE_ENV, want);
}

/* Every network_allow entry is checked at load with the parser the sandbox proxy runs
 * (base_netallow): a malformed one stops the start, naming the entry and its JSON path. */
static void test_registry_network_allow_entries(void **state)
{
    (void)state;
    static const struct {
        const char *json; /* the entry (no quote or backslash: also its JSON string body) */
        const char *reason;
    } bad[] = {
        {"", "empty"},
        {" example.com", "holds a space, a control or a non-ASCII character"},
        {"exa mple.com", "holds a space, a control or a non-ASCII character"},
        {"http://example.com", "a URL scheme is not allowed"},
        {"a/b", "a path is not allowed"},
        {"user@example.com", "user information is not allowed"},
        {"*", "a lone * is not allowed (omit network_allow to admit public destinations)"},
        {"*.", "* is only allowed as a leading \"*.\" before a domain"},
        {"*example.com", "* is only allowed as a leading \"*.\" before a domain"},
        {"a.*.com", "not a host name, *.domain or IP literal"},
        {"x:0", "the port must be a number from 1 to 65535"},
        {"x:99999", "the port must be a number from 1 to 65535"},
        {"x:", "the port must be a number from 1 to 65535"},
        {"x:8o", "the port must be a number from 1 to 65535"},
        {"a..b", "not a host name, *.domain or IP literal"},
        {".a", "not a host name, *.domain or IP literal"},
        {"-a.com", "not a host name (labels of 1-63 letters, digits, '-' or '_', separated by "
                   "single dots)"},
        {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.com",
         "not a host name (labels of 1-63 letters, digits, '-' or '_', separated by single "
         "dots)"},
        {"0x7f.1", "write an IPv4 address as a dotted quad (a.b.c.d)"},
        {"2130706433", "write an IPv4 address as a dotted quad (a.b.c.d)"},
        {"127.1", "write an IPv4 address as a dotted quad (a.b.c.d)"},
        {"0177.0.0.1", "write an IPv4 address as a dotted quad (a.b.c.d)"},
        {"1.2.3.4.5", "ends in a number but is not an IPv4 address"},
        {"256.1.1.1", "ends in a number but is not an IPv4 address"},
        {"*.10.0.0.1", "\"*.\" needs a domain name, not an address"},
        {"::1:80x", "not an IPv6 literal (write [v6]:port to give an IPv6 address a port)"},
        {"[::1", "not a host name, *.domain or IP literal"},
        {"[1.2.3.4]", "not a host name, *.domain or IP literal"},
    };
    char want[1024];
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        write_cfgf("{\"workspaces\": {\"demo\": {\"root\": \"%s\", \"network\": \"enabled\", "
                   "\"network_allow\": [\"example.com\", \"%s\"]}}}",
                   fx.ws1, bad[i].json);
        snprintf(want, sizeof want,
                 "/workspaces/demo/network_allow/1: invalid entry \"%s\": %s (expected a host "
                 "name, *.domain or IP literal, with an optional :port from 1 to 65535)",
                 bad[i].json, bad[i].reason);
        cfg_err(want);
    }

    /* Good entries load, as given; [] stays distinct from an absent list. */
    write_cfgf("{\"workspaces\": {\"demo\": {\"root\": \"%s\", \"network\": \"enabled\", "
               "\"network_allow\": [\"Example.COM.\", \"*.example.org:443\", \"127.0.0.1:8080\", "
               "\"::1\", \"[::1]:80\", \"[::ffff:10.0.0.1]\", \"a_b.example\", \"x:65535\"]},"
               " \"none\": {\"root\": \"%s\", \"network_allow\": []}}}",
               fx.ws1, fx.ws2);
    struct cs_config cfg;
    load_ok(&cfg, ARGV("--config", fx.cfg), BASE_ENV);
    const struct cs_workspace *d = cs_config_workspace(&cfg, "demo", 4);
    assert_non_null(d);
    assert_int_equal(d->n_network_allow, 8);
    assert_string_equal(d->network_allow[0], "Example.COM.");
    const struct cs_workspace *none = cs_config_workspace(&cfg, "none", 4);
    assert_non_null(none);
    assert_true(none->has_network_allow);
    assert_int_equal(none->n_network_allow, 0);
    cs_config_free(&cfg);
}

/* deny (docs/contract/tools.md §5): rules load as given; a bad glob fails the load naming the
 * entry; unknown keys anywhere fail the load naming the key (docs/contract/runtime.md §2). */
static void test_registry_deny_and_unknown_keys(void **state)
{
    (void)state;
    write_cfgf("{\"workspaces\": {\"demo\": {\"root\": \"%s\", \"deny\": [\".env\", "
               "\"**/*.pem\", \"secrets/\"]}}}",
               fx.ws1);
    struct cs_config cfg;
    load_ok(&cfg, ARGV("--config", fx.cfg), BASE_ENV);
    const struct cs_workspace *d = cs_config_workspace(&cfg, "demo", 4);
    assert_non_null(d);
    assert_int_equal(d->n_deny, 3);
    assert_string_equal(d->deny[1], "**/*.pem");
    cs_config_free(&cfg);

    write_cfgf("{\"workspaces\": {\"demo\": {\"root\": \"%s\", \"deny\": [\".env\", "
               "\"[abc\"]}}}",
               fx.ws1);
    cfg_err("/workspaces/demo/deny/1: invalid deny rule \"[abc\": has a '[' class with no "
            "closing ']' (expected a gitignore-style glob relative to the root, such as \".env\", "
            "\"**/*.pem\" or \"secrets/\")");
    write_cfgf("{\"workspaces\": {\"demo\": {\"root\": \"%s\", \"deny\": [\"!x\"]}}}", fx.ws1);
    cfg_err("/workspaces/demo/deny/0: invalid deny rule \"!x\": negation ('!') is not supported: "
            "deny rules only add (expected a gitignore-style glob relative to the root, such as "
            "\".env\", \"**/*.pem\" or \"secrets/\")");

    write_cfgf("{\"workspaces\": {\"demo\": {\"root\": \"%s\", \"dney\": [\".env\"]}}}", fx.ws1);
    cfg_err("/workspaces/demo/dney: unknown key \"dney\" (misspelled? unknown keys are refused so "
            "that no setting is silently ignored)");
    write_cfgf("{\"workspaces\": {}, \"workspace\": {}}");
    cfg_err("/workspace: unknown key \"workspace\" (misspelled? unknown keys are refused so that "
            "no setting is silently ignored)");
    write_cfgf("{\"environments\": {\"box\": {\"kind\": \"host\", \"x\": 1}}}");
    cfg_err("/environments/box/x: unknown key \"x\" (misspelled? unknown keys are refused so "
            "that no setting is silently ignored)");
}

/* Per-workspace processes and limits (issue 28, docs/operations.md "Process limits"): a key of
 * the registry wins, else the flag, else the variable, else the default; every bound is checked
 * at and past it, and a value out of range fails the load naming its JSON path. */
static void test_registry_limits(void **state)
{
    (void)state;
    struct cs_config cfg;
    write_cfgf("{\"workspaces\": {\"a\": {\"root\": \"%s\", \"description\": \"The demo\","
               " \"processes\": \"shared\", \"limits\": {\"timeout_ms\": 0,"
               " \"max_live_processes\": 1024, \"output_ring_bytes\": 4096}},"
               " \"b\": {\"root\": \"%s\", \"limits\": {\"timeout_ms\": 1000}}}}",
               fx.ws1, fx.ws2);
    load_ok(&cfg, ARGV("--config", fx.cfg), BASE_ENV);
    const struct cs_workspace *a = cs_config_workspace(&cfg, "a", 1);
    const struct cs_workspace *b = cs_config_workspace(&cfg, "b", 1);
    assert_string_equal(a->description, "The demo");
    assert_int_equal(a->processes, CS_WORKSPACE_PROCESSES_SHARED);
    assert_int_equal(a->limits.timeout_ms, 0);
    assert_int_equal(a->limits.max_live_processes, 1024);
    assert_int_equal(a->limits.output_ring_bytes, 4096);
    assert_null(b->description);
    assert_int_equal(b->processes, CS_WORKSPACE_PROCESSES_EXCLUSIVE);
    assert_int_equal(b->limits.timeout_ms, 1000);
    assert_int_equal(b->limits.max_live_processes, 8);
    assert_int_equal(b->limits.output_ring_bytes, 1048576);
    cs_config_free(&cfg);

    /* The other ends of each range. */
    write_cfgf("{\"workspaces\": {\"a\": {\"root\": \"%s\", \"limits\": {\"timeout_ms\": "
               "2147483000, \"max_live_processes\": 1, \"output_ring_bytes\": 2097152}}}}",
               fx.ws1);
    load_ok(&cfg, ARGV("--config", fx.cfg), BASE_ENV);
    assert_int_equal(cfg.workspaces[0].limits.timeout_ms, 2147483000);
    assert_int_equal(cfg.workspaces[0].limits.max_live_processes, 1);
    assert_int_equal(cfg.workspaces[0].limits.output_ring_bytes, 2097152);
    assert_int_equal(cfg.workspaces[0].limits.deny_scan_entries, 100000); /* the default */
    cs_config_free(&cfg);
    write_cfgf("{\"workspaces\": {\"a\": {\"root\": \"%s\", \"limits\": "
               "{\"deny_scan_entries\": 4000000}}, \"b\": {\"root\": \"%s\", \"limits\": "
               "{\"deny_scan_entries\": 1000}}}}",
               fx.ws1, fx.ws2);
    load_ok(&cfg, ARGV("--config", fx.cfg), BASE_ENV);
    assert_int_equal(cs_config_workspace(&cfg, "a", 1)->limits.deny_scan_entries, 4000000);
    assert_int_equal(cs_config_workspace(&cfg, "b", 1)->limits.deny_scan_entries, 1000);
    cs_config_free(&cfg);

    /* Flags and variables are every workspace's defaults; the registry's keys win over them;
     * --workspace ("default") takes them as they are. */
    write_cfgf("{\"workspaces\": {\"a\": {\"root\": \"%s\", \"processes\": \"exclusive\","
               " \"limits\": {\"max_live_processes\": 2}}}}",
               fx.ws1);
    load_ok(&cfg,
            ARGV("--config", fx.cfg, "--workspace", fx.ws2, "--process-timeout", "0", "--processes",
                 "shared", "--output-ring=8192"),
            ENV("HOME=/home/u", "CODESPACE_MAX_PROCESSES=5", "CODESPACE_PROCESS_TIMEOUT_SECS=9",
                "CODESPACE_OUTPUT_RING_BYTES=65536", "CODESPACE_PROCESSES=exclusive"));
    a = cs_config_workspace(&cfg, "a", 1);
    const struct cs_workspace *d = cs_config_workspace(&cfg, "default", 7);
    assert_int_equal(a->processes, CS_WORKSPACE_PROCESSES_EXCLUSIVE);
    assert_int_equal(a->limits.max_live_processes, 2);
    assert_int_equal(a->limits.timeout_ms, 0);
    assert_int_equal(a->limits.output_ring_bytes, 8192);
    assert_int_equal(d->processes, CS_WORKSPACE_PROCESSES_SHARED);
    assert_int_equal(d->limits.max_live_processes, 5);
    assert_int_equal(d->limits.timeout_ms, 0);
    assert_int_equal(d->limits.output_ring_bytes, 8192);
    /* No time limit for commands is still 30 s for file operations. */
    assert_int_equal(cs_config_file_timeout_ms(&cfg), 30000);
    cs_config_free(&cfg);
    load_ok(&cfg, ARGV("--workspace", fx.ws2),
            ENV("HOME=/home/u", "CODESPACE_PROCESS_TIMEOUT_SECS=9", "CODESPACE_PROCESSES=shared"));
    assert_int_equal(cfg.workspaces[0].limits.timeout_ms, 9000);
    assert_int_equal(cfg.workspaces[0].processes, CS_WORKSPACE_PROCESSES_SHARED);
    assert_int_equal(cs_config_file_timeout_ms(&cfg), 9000);
    cs_config_free(&cfg);

    /* Out of range, at each bound: the JSON path and the range in the message. */
    static const struct {
        const char *limits, *want;
    } bad[] = {
        {"\"timeout_ms\": 999",
         "/workspaces/demo/limits/timeout_ms: expected 0 (no time limit) or 1000..2147483000 "
         "milliseconds, got 999"},
        {"\"timeout_ms\": 2147483001",
         "/workspaces/demo/limits/timeout_ms: expected 0 (no time limit) or 1000..2147483000 "
         "milliseconds, got 2147483001"},
        {"\"max_live_processes\": 0",
         "/workspaces/demo/limits/max_live_processes: expected 1..1024 live processes, got 0"},
        {"\"max_live_processes\": 1025",
         "/workspaces/demo/limits/max_live_processes: expected 1..1024 live processes, got 1025"},
        {"\"output_ring_bytes\": 4095",
         "/workspaces/demo/limits/output_ring_bytes: expected 4096..2097152 bytes, got 4095"},
        {"\"output_ring_bytes\": 2097153",
         "/workspaces/demo/limits/output_ring_bytes: expected 4096..2097152 bytes, got 2097153"},
        {"\"deny_scan_entries\": 999",
         "/workspaces/demo/limits/deny_scan_entries: expected 1000..4000000 files and "
         "directories, got 999"},
        {"\"deny_scan_entries\": 4000001",
         "/workspaces/demo/limits/deny_scan_entries: expected 1000..4000000 files and "
         "directories, got 4000001"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_cfgf("{\"workspaces\": {\"demo\": {\"root\": \"%s\", \"limits\": {%s}}}}", fx.ws1,
                   bad[i].limits);
        cfg_err(bad[i].want);
    }
    /* The schema's checks: a negative number, a string, an unknown processes mode, an unknown
     * limit key, a description over 200 characters (200 is fine). */
    write_cfgf("{\"workspaces\": {\"demo\": {\"root\": \"%s\", \"limits\": {\"timeout_ms\": -1}}}}",
               fx.ws1);
    cfg_err("/workspaces/demo/limits/timeout_ms: must be >= 0");
    write_cfgf("{\"workspaces\": {\"demo\": {\"root\": \"%s\", \"processes\": \"many\"}}}", fx.ws1);
    cfg_err("/workspaces/demo/processes: expected one of \"exclusive\", \"shared\"");
    write_cfgf("{\"workspaces\": {\"demo\": {\"root\": \"%s\", \"limits\": {\"timeout\": 1}}}}",
               fx.ws1);
    cfg_err("/workspaces/demo/limits/timeout: unknown key \"timeout\" (misspelled? unknown keys "
            "are refused so that no setting is silently ignored)");
    char desc[260];
    memset(desc, 'd', 201);
    desc[201] = '\0';
    write_cfgf("{\"workspaces\": {\"demo\": {\"root\": \"%s\", \"description\": \"%s\"}}}", fx.ws1,
               desc);
    cfg_err("/workspaces/demo/description: must be at most 200 characters long");
    desc[200] = '\0';
    write_cfgf("{\"workspaces\": {\"demo\": {\"root\": \"%s\", \"description\": \"%s\"}}}", fx.ws1,
               desc);
    load_ok(&cfg, ARGV("--config", fx.cfg), BASE_ENV);
    assert_int_equal(strlen(cfg.workspaces[0].description), 200);
    cs_config_free(&cfg);
}

static void test_registry_environment_order(void **state)
{
    (void)state;
    /* A workspace may name an environment the file defines after the workspaces. */
    write_cfgf("{\"workspaces\": {\"w\": {\"root\": \"%s\", \"environment\": \"box\"}},\n"
               " \"environments\": {\"box\": {\"kind\": \"linux-container\"},\n"
               "                    \"h2\": {\"kind\": \"host\"}}}",
               fx.ws1);
    struct cs_config cfg;
    load_ok(&cfg, ARGV("--config", fx.cfg), BASE_ENV);
    assert_int_equal(cfg.n_environments, 3);
    assert_int_equal(cfg.workspaces[0].env_kind, CS_POLICY_ENV_LINUX_CONTAINER);
    cs_config_free(&cfg);
}

/* ---- quick start ---- */

static void test_quick_start(void **state)
{
    (void)state;
    struct cs_config cfg;
    load_ok(&cfg, ARGV("--workspace", fx.ws1), BASE_ENV);
    assert_int_equal(cfg.n_workspaces, 1);
    const struct cs_workspace *w = &cfg.workspaces[0];
    assert_string_equal(w->id, "default");
    assert_int_equal(w->id_len, 7);
    assert_string_equal(w->root, fx.ws1);
    assert_int_equal(w->profile, CS_POLICY_PROFILE_WORKSPACE_WRITE);
    assert_int_equal(w->network, CS_POLICY_NETWORK_RESTRICTED);
    assert_string_equal(w->environment, "local");
    assert_int_equal(w->env_kind, CS_POLICY_ENV_HOST);
    assert_false(w->has_network_allow);
    assert_string_equal(cfg.workspace_dir, fx.ws1);
    cs_config_free(&cfg);

    /* The variable, and a relative directory resolved against the working directory. */
    char cwd[PATH_MAX];
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(fx.dir), 0);
    load_ok(&cfg, NOARGS, ENV("HOME=/h", "CODESPACE_WORKSPACE=ws2/"));
    assert_int_equal(chdir(cwd), 0);
    assert_string_equal(cfg.workspaces[0].root, fx.ws2);
    assert_string_equal(cfg.workspace_dir, "ws2/");
    cs_config_free(&cfg);

    char want[4096];
    snprintf(want, sizeof want, "--workspace: not a directory: %s", fx.file);
    load_err(ARGV("--workspace", fx.file), BASE_ENV, want);
    snprintf(want, sizeof want, "--workspace: does not exist: %s/nope", fx.dir);
    char nope[512];
    snprintf(nope, sizeof nope, "%s/nope", fx.dir);
    load_err(ARGV("--workspace", nope), BASE_ENV, want);
    char var[512];
    snprintf(var, sizeof var, "CODESPACE_WORKSPACE=%s", fx.file);
    snprintf(want, sizeof want, "CODESPACE_WORKSPACE: not a directory: %s", fx.file);
    load_err(NOARGS, ENV("HOME=/h", var), want);
}

/* docs/contract/runtime.md §2: no root equal to, inside or containing another (through a symlink
 * alias too: roots are compared canonical), and each root is held as a descriptor. */
static void test_roots_disjoint_and_held(void **state)
{
    (void)state;
    char sub[300], alias[300], want[4096];
    snprintf(sub, sizeof sub, "%s/sub", fx.ws1);
    snprintf(alias, sizeof alias, "%s/alias", fx.dir);
    assert_true(mkdir(sub, 0700) == 0 || errno == EEXIST);
    assert_true(symlink(fx.ws1, alias) == 0 || errno == EEXIST);
    static const char *const tail = "; a root may not be equal to, inside or contain another";

    write_cfgf("{\"workspaces\": {\"a\": {\"root\": \"%s\"}, \"b\": {\"root\": \"%s/\"}}}", fx.ws1,
               fx.ws1);
    snprintf(want, sizeof want,
             "workspace roots overlap: \"a\" (%s) is the same directory as \"b\" (%s)%s", fx.ws1,
             fx.ws1, tail);
    load_err(ARGV("--config", fx.cfg), BASE_ENV, want);

    write_cfgf("{\"workspaces\": {\"a\": {\"root\": \"%s\"}, \"b\": {\"root\": \"%s\"}}}", fx.ws1,
               sub);
    snprintf(want, sizeof want, "workspace roots overlap: \"a\" (%s) contains \"b\" (%s)%s", fx.ws1,
             sub, tail);
    load_err(ARGV("--config", fx.cfg), BASE_ENV, want);

    write_cfgf("{\"workspaces\": {\"a\": {\"root\": \"%s\"}, \"b\": {\"root\": \"%s\"}}}", sub,
               fx.ws1);
    snprintf(want, sizeof want, "workspace roots overlap: \"a\" (%s) is inside \"b\" (%s)%s", sub,
             fx.ws1, tail);
    load_err(ARGV("--config", fx.cfg), BASE_ENV, want);

    /* An alias: <dir>/alias/sub is ws1/sub once resolved. */
    write_cfgf("{\"workspaces\": {\"a\": {\"root\": \"%s\"}, \"b\": {\"root\": \"%s/sub\"}}}",
               fx.ws1, alias);
    snprintf(want, sizeof want, "workspace roots overlap: \"a\" (%s) contains \"b\" (%s)%s", fx.ws1,
             sub, tail);
    load_err(ARGV("--config", fx.cfg), BASE_ENV, want);

    /* The quick start against the file. */
    write_cfgf("{\"workspaces\": {\"a\": {\"root\": \"%s\"}}}", fx.ws1);
    snprintf(want, sizeof want, "workspace roots overlap: \"a\" (%s) contains \"default\" (%s)%s",
             fx.ws1, sub, tail);
    load_err(ARGV("--config", fx.cfg, "--workspace", sub), BASE_ENV, want);

    /* Siblings load, each root held: the descriptor is that very directory. */
    write_cfgf("{\"workspaces\": {\"a\": {\"root\": \"%s\"}, \"b\": {\"root\": \"%s\"}}}", fx.ws1,
               fx.ws2);
    struct cs_config cfg;
    load_ok(&cfg, ARGV("--config", fx.cfg), BASE_ENV);
    for (size_t i = 0; i < cfg.n_workspaces; i++) {
        struct stat a, b;
        assert_true(cfg.workspaces[i].has_root_fd);
        assert_int_equal(fstat(cfg.workspaces[i].root_fd, &a), 0);
        assert_int_equal(stat(cfg.workspaces[i].root, &b), 0);
        assert_true(a.st_dev == b.st_dev && a.st_ino == b.st_ino);
        assert_true(fcntl(cfg.workspaces[i].root_fd, F_GETFD) & FD_CLOEXEC);
    }
    cs_config_free(&cfg);
    unlink(alias);
    rmdir(sub);
}

/* docs/contract/sandbox.md section 3: the ids a root server's commands run as. */
static void test_sandbox_ids(void **state)
{
    (void)state;
    struct cs_config cfg;
    load_ok(&cfg, ARGV("--workspace", fx.ws1), BASE_ENV);
    assert_int_equal(cfg.sandbox_uid, 65533);
    assert_int_equal(cfg.sandbox_gid, 65533);
    cs_config_free(&cfg);
    load_ok(&cfg, ARGV("--workspace", fx.ws1, "--sandbox-uid", "4000"), BASE_ENV);
    assert_int_equal(cfg.sandbox_uid, 4000);
    assert_int_equal(cfg.sandbox_gid, 4000); /* the gid follows the uid */
    cs_config_free(&cfg);
    load_ok(&cfg, ARGV("--workspace", fx.ws1),
            ENV("HOME=/h", "CODESPACE_SANDBOX_UID=4001", "CODESPACE_SANDBOX_GID=4002"));
    assert_int_equal(cfg.sandbox_uid, 4001);
    assert_int_equal(cfg.sandbox_gid, 4002);
    cs_config_free(&cfg);
    load_err_prefix(ARGV("--workspace", fx.ws1, "--sandbox-uid", "0"), BASE_ENV, "--sandbox-uid: ");
    load_err_prefix(ARGV("--workspace", fx.ws1, "--sandbox-gid", "4294967295"), BASE_ENV,
                    "--sandbox-gid: ");
    load_err_prefix(ARGV("--workspace", fx.ws1), ENV("HOME=/h", "CODESPACE_SANDBOX_UID=x"),
                    "CODESPACE_SANDBOX_UID: ");
    /* An id that owns a system directory would own host files. */
    struct stat st;
    if (stat("/usr", &st) == 0 && st.st_uid != 0) {
        char id[32];
        snprintf(id, sizeof id, "%u", (unsigned)st.st_uid);
        load_err_prefix(ARGV("--workspace", fx.ws1, "--sandbox-uid", id), BASE_ENV,
                        "--sandbox-uid: uid ");
    }
}

static void test_config_and_quick_start(void **state)
{
    (void)state;
    struct cs_config cfg;
    /* Both apply. */
    write_cfgf("{\"workspaces\": {\"demo\": {\"root\": \"%s\"}}}", fx.ws2);
    load_ok(&cfg, ARGV("--config", fx.cfg, "--workspace", fx.ws1), BASE_ENV);
    assert_int_equal(cfg.n_workspaces, 2);
    assert_string_equal(cfg.workspaces[0].id, "demo");
    assert_string_equal(cfg.workspaces[1].id, "default");
    cs_config_free(&cfg);

    /* A "default" in the file collides. */
    write_cfgf("{\"workspaces\": {\"default\": {\"root\": \"%s\"}}}", fx.ws2);
    char want[4096];
    snprintf(want, sizeof want,
             "--workspace registers workspace \"default\", which config %s also defines at "
             "/workspaces/default; rename one of them",
             fx.cfg);
    load_err(ARGV("--config", fx.cfg, "--workspace", fx.ws1), BASE_ENV, want);
    char c[512], w[512];
    snprintf(c, sizeof c, "CODESPACE_CONFIG=%s", fx.cfg);
    snprintf(w, sizeof w, "CODESPACE_WORKSPACE=%s", fx.ws1);
    snprintf(want, sizeof want,
             "CODESPACE_WORKSPACE registers workspace \"default\", which config %s also defines "
             "at /workspaces/default; rename one of them",
             fx.cfg);
    load_err(NOARGS, ENV("HOME=/h", c, w), want);
    /* Without --workspace the file's "default" is an ordinary workspace. */
    load_ok(&cfg, NOARGS, ENV("HOME=/h", c));
    assert_string_equal(cfg.workspaces[0].id, "default");
    assert_int_equal(cfg.workspaces[0].profile, CS_POLICY_PROFILE_READ_ONLY);
    cs_config_free(&cfg);
}

/* ---- lookups and permissions ---- */

static void load_three(struct cs_config *cfg)
{
    write_cfgf("{\"environments\": {\"box\": {\"kind\": \"linux-container\"}},\n"
               " \"workspaces\": {\n"
               "  \"rw\": {\"root\": \"%s\", \"profile\": \"workspace-write\",\n"
               "          \"network\": \"enabled\", \"network_allow\": [\"example.com:443\"]},\n"
               "  \"ro\": {\"root\": \"%s\"},\n"
               "  \"box\": {\"root\": \"%s\", \"environment\": \"box\",\n"
               "           \"profile\": \"workspace-write\"}}}",
               fx.ws1, fx.ws2, fx.ws3);
    load_ok(cfg, ARGV("--config", fx.cfg), BASE_ENV);
}

static void test_lookup(void **state)
{
    (void)state;
    struct cs_config cfg;
    load_three(&cfg);
    assert_ptr_equal(cs_config_workspace(&cfg, "rw", 2), &cfg.workspaces[0]);
    assert_ptr_equal(cs_config_workspace(&cfg, "box", 3), &cfg.workspaces[2]);
    assert_ptr_equal(cs_config_workspace(&cfg, "roX", 2), &cfg.workspaces[1]); /* length counts */
    assert_null(cs_config_workspace(&cfg, "r", 1));
    assert_null(cs_config_workspace(&cfg, "rw\0", 3));
    assert_null(cs_config_workspace(&cfg, "RW", 2));
    assert_null(cs_config_workspace(&cfg, "", 0));
    assert_null(cs_config_workspace(&cfg, NULL, 0));
    assert_null(cs_config_workspace(&cfg, "default", 7));
    cs_config_free(&cfg);
}

static void test_permissions(void **state)
{
    (void)state;
    struct cs_config cfg;
    load_three(&cfg);
    const struct cs_workspace *rw = &cfg.workspaces[0], *ro = &cfg.workspaces[1],
                              *box = &cfg.workspaces[2];
    assert_true(cs_workspace_can_read(rw));
    assert_true(cs_workspace_can_write(rw));
    assert_true(cs_workspace_can_exec(rw));
    assert_true(cs_workspace_is_exec_path(rw));
    assert_true(cs_workspace_can_read(ro));
    assert_false(cs_workspace_can_write(ro));
    assert_false(cs_workspace_can_exec(ro));
    assert_true(cs_workspace_is_exec_path(ro));
    /* The profile grants, the environment fails closed. */
    assert_true(cs_workspace_can_exec(box));
    assert_false(cs_workspace_is_exec_path(box));

    struct cs_diag msg = {0};
    assert_int_equal(cs_workspace_check(rw, CS_POLICY_ACCESS_READ, &msg), 0);
    assert_int_equal(cs_workspace_check(rw, CS_POLICY_ACCESS_WRITE, &msg), 0);
    assert_int_equal(cs_workspace_check(rw, CS_POLICY_ACCESS_EXEC, NULL), 0);
    assert_int_equal(cs_workspace_check(ro, CS_POLICY_ACCESS_READ, &msg), 0);
    assert_int_equal(cs_workspace_check(ro, CS_POLICY_ACCESS_WRITE, &msg), CSW_ERROR_UNAUTHORIZED);
    assert_string_equal(msg.text, "workspace \"ro\": profile read-only does not permit write");
    assert_int_equal(msg.code, CSW_ERROR_UNAUTHORIZED);
    assert_int_equal(cs_workspace_check(ro, CS_POLICY_ACCESS_EXEC, &msg), CSW_ERROR_UNAUTHORIZED);
    assert_string_equal(msg.text, "workspace \"ro\": profile read-only does not permit exec");
    for (int a = CS_POLICY_ACCESS_READ; a <= CS_POLICY_ACCESS_EXEC; a++) {
        assert_int_equal(cs_workspace_check(box, (enum cs_policy_access)a, &msg),
                         CSW_ERROR_UNAUTHORIZED);
        assert_string_equal(msg.text, "workspace \"box\": environment \"box\" (linux-container) is "
                                      "registered but not an exec path");
    }
    assert_int_equal(cs_workspace_check(ro, CS_POLICY_ACCESS_WRITE, NULL), CSW_ERROR_UNAUTHORIZED);
    cs_config_free(&cfg);
}

/* ---- workspace_info ---- */

static const struct cs_runtime_caps full_caps = {
    .files_available = true,
    .patch_available = true,
    .process_available = true,
    .uds_runner = false,
    .sandbox = true,
    .has_landlock_abi = true,
    .landlock_abi = 3,
    .syscall_denials = true,
    .tty_supported = true,
};

/* Runs the builder for id (NULL: absent), expects success, encodes through the generated encoder
 * and returns the JSON (new reference). */
static json_t *info_json(const struct cs_config *cfg, const struct cs_runtime_caps *caps,
                         const char *id, size_t id_len)
{
    struct csw_mcp_workspace_info_input in;
    memset(&in, 0, sizeof in);
    if (id) {
        in.has_workspace_id = true;
        in.workspace_id.s = (char *)id;
        in.workspace_id.n = id_len;
    }
    struct csw_mcp_workspace_info_output out;
    struct cs_diag msg = {0};
    int rc = cs_policy_workspace_info(cfg, caps, "1.2.3", &in, &out, &msg);
    if (rc != 0)
        fail_msg("workspace_info failed (%d): %s", rc, msg.text);
    json_t *j = NULL;
    struct cs_wire_diag diag;
    char buf[600];
    if (csw_mcp_workspace_info_output_encode(&out, &j, &diag) != CS_WIRE_OK)
        fail_msg("encoder refused: %s", cs_wire_diag_format(&diag, buf, sizeof buf));
    /* And what is encoded decodes again. */
    struct csw_mcp_workspace_info_output back;
    if (csw_mcp_workspace_info_output_decode(j, &back, &diag) != CS_WIRE_OK)
        fail_msg("decoder refused: %s", cs_wire_diag_format(&diag, buf, sizeof buf));
    csw_mcp_workspace_info_output_free(&back);
    csw_mcp_workspace_info_output_free(&out);
    return j;
}

static void expect_json(json_t *got, const char *want_text)
{
    json_error_t e;
    json_t *want = json_loads(want_text, 0, &e);
    if (!want)
        fail_msg("bad expected JSON: %s: %s", e.text, want_text);
    if (!json_equal(got, want)) {
        char *g = json_dumps(got, JSON_SORT_KEYS | JSON_INDENT(1));
        char *w = json_dumps(want, JSON_SORT_KEYS | JSON_INDENT(1));
        print_error("got:\n%s\nwant:\n%s\n", g, w);
        free(g);
        free(w);
        fail_msg("workspace_info differs");
    }
    json_decref(want);
    json_decref(got);
}

#define SERVER_PART                                                                                \
    "\"server\": \"codespace\", \"version\": \"1.2.3\", \"internal_model_calls\": false,"          \
    "\"tools_exposed\": [\"workspace_info\", \"read\", \"find\", \"apply_patch\","                 \
    "  \"operation_status\", \"exec_command\", \"write_stdin\", \"read_process\","                 \
    "  \"process_status\", \"process_resize\", \"terminate_process\"],"                            \
    "\"transports\": [\"stdio\", \"streamable-http\"], \"workspace_id_is_credential\": false"

/* The "worker" object of workspace_info for id (docs/scale-out.md), as compact JSON. */
static char *worker_of(const struct cs_config *cfg, const struct cs_runtime_caps *caps,
                       const char *id)
{
    json_t *j = info_json(cfg, caps, id, strlen(id));
    json_t *w =
        json_object_get(json_object_get(json_object_get(j, "execution"), "isolation"), "worker");
    char *text = w ? json_dumps(w, JSON_SORT_KEYS | JSON_COMPACT) : strdup("none");
    json_decref(j);
    return text;
}

/* A remote worker is reported by address and, per mode, certificate pin or PSK identity; never
 * a key file, key or certificate path. Per workspace (registry) and for the gateway's --runner. */
static void test_info_remote_worker(void **state)
{
    (void)state;
    static const char pin[] = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
    write_cfgf("{\"workspaces\": {"
               "\"c\": {\"root\": \"/w/c\", \"runner\": {\"url\": \"tcp://10.0.0.2:7451\", "
               "\"tls_cert\": \"/etc/g.pem\", \"tls_key\": \"/etc/g.key\", "
               "\"tls_peer_sha256\": \"%s\"}},"
               "\"p\": {\"root\": \"/w/p\", \"runner\": {\"url\": \"tcp://[fd00::3]:7451\", "
               "\"tls_psk_file\": \"/etc/w.psk\", \"tls_psk_identity\": \"gw@w3\"}},"
               "\"n\": {\"root\": \"/w/n\", \"runner\": {\"url\": \"tcp://h:1\", "
               "\"plaintext\": true}}}}",
               pin);
    struct cs_config cfg;
    load_ok(&cfg, ARGV("--config", fx.cfg), BASE_ENV);
    char want[256];
    snprintf(want, sizeof want, "{\"address\":\"10.0.0.2:7451\",\"certificate_sha256\":\"%s\"}",
             pin);
    char *got = worker_of(&cfg, &full_caps, "c");
    assert_string_equal(got, want);
    free(got);
    got = worker_of(&cfg, &full_caps, "p");
    assert_string_equal(got, "{\"address\":\"fd00::3:7451\",\"psk_identity\":\"gw@w3\"}");
    free(got);
    got = worker_of(&cfg, &full_caps, "n");
    assert_string_equal(got, "{\"address\":\"h:1\"}");
    free(got);
    cs_config_free(&cfg);

    /* The gateway's own --runner tcp:// in PSK mode: every workspace, and nothing else. */
    load_ok(&cfg,
            ARGV("--workspace", "/w/d", "--runner", "tcp://10.0.0.9:7451", "--tls-psk", "/etc/k",
                 "--tls-psk-identity", "gw"),
            BASE_ENV);
    struct cs_runtime_caps caps = full_caps;
    caps.remote = &cfg.remote;
    got = worker_of(&cfg, &caps, "default");
    assert_string_equal(got, "{\"address\":\"10.0.0.9:7451\",\"psk_identity\":\"gw\"}");
    free(got);
    got = worker_of(&cfg, &full_caps, "default");
    assert_string_equal(got, "none");
    free(got);
    cs_config_free(&cfg);
}

/* A workspace's isolation as "command_sandbox/enforcement/landlock_abi/denial kinds". */
static char *isolation_of(const struct cs_config *cfg, const struct cs_runtime_caps *caps,
                          const char *id)
{
    json_t *j = info_json(cfg, caps, id, strlen(id));
    json_t *x = json_object_get(j, "execution");
    json_t *iso = json_object_get(x, "isolation");
    json_t *abi = json_object_get(iso, "landlock_abi");
    json_t *kinds = json_object_get(iso, "denial_reports");
    char *k = kinds ? json_dumps(kinds, JSON_COMPACT) : strdup("-");
    char buf[256];
    snprintf(buf, sizeof buf, "%s/%s/%lld/%s",
             json_string_value(json_object_get(iso, "command_sandbox")),
             json_string_value(json_object_get(json_object_get(x, "network"), "enforcement")),
             abi ? (long long)json_integer_value(abi) : -1LL, k ? k : "?");
    free(k);
    json_decref(j);
    return strdup(buf);
}

/* docs/security-model.md R17: a workspace on a remote worker reports that worker's own probe,
 * as its last hello stated it; before any hello, none and none, whatever this process's probe
 * found. A local workspace beside it keeps this process's probe. */
static void test_info_remote_isolation(void **state)
{
    (void)state;
    write_cfgf("{\"workspaces\": {"
               "\"far\": {\"root\": \"/w/far\", \"network\": \"enabled\", "
               "\"runner\": {\"url\": \"tcp://h:1\", \"plaintext\": true}},"
               "\"near\": {\"root\": \"%s\"}}}",
               fx.ws1);
    struct cs_config cfg;
    load_ok(&cfg, ARGV("--config", fx.cfg), BASE_ENV);
    struct cs_runtime_caps caps = full_caps; /* this process has a working sandbox */
    char *got = isolation_of(&cfg, &caps, "far");
    assert_string_equal(got, "none/none/-1/-");
    free(got);
    got = isolation_of(&cfg, &caps, "near");
    assert_string_equal(got, "linux-sandbox/enforced/3/[\"syscall\"]");
    free(got);
    /* The worker stated its sandbox: its own ABI and denial kinds, not ours. */
    struct cs_worker_isolation w = {.sandbox = true, .landlock_abi = 6, .syscall_denials = false};
    caps.worker = &w;
    got = isolation_of(&cfg, &caps, "far");
    assert_string_equal(got, "linux-sandbox/enforced/6/[\"network\"]");
    free(got);
    /* The worker stated none, although this process has the sandbox. */
    struct cs_worker_isolation bare = {0};
    caps.worker = &bare;
    got = isolation_of(&cfg, &caps, "far");
    assert_string_equal(got, "none/none/-1/-");
    free(got);
    cs_config_free(&cfg);

    /* The gateway's own --runner tcp://: every workspace is the worker's. */
    load_ok(&cfg,
            ARGV("--workspace", fx.ws1, "--runner", "tcp://10.0.0.9:7451", "--runner-tls", "off"),
            BASE_ENV);
    caps = full_caps;
    caps.remote = &cfg.remote;
    got = isolation_of(&cfg, &caps, "default");
    assert_string_equal(got, "none/none/-1/-");
    free(got);
    caps.worker = &w;
    got = isolation_of(&cfg, &caps, "default");
    assert_string_equal(got, "linux-sandbox/enforced/6/[]");
    free(got);
    cs_config_free(&cfg);
}

static void test_info_server_only(void **state)
{
    (void)state;
    struct cs_config cfg;
    load_three(&cfg);
    /* Absent, and empty (counts as absent): the server part and every workspace, by id. */
#define THREE_LISTED                                                                               \
    ", \"workspaces\": ["                                                                          \
    "{\"workspace_id\": \"box\", \"profile\": \"workspace-write\", \"network\": \"restricted\","   \
    " \"processes\": \"exclusive\"},"                                                              \
    "{\"workspace_id\": \"ro\", \"profile\": \"read-only\", \"network\": \"restricted\","          \
    " \"processes\": \"exclusive\"},"                                                              \
    "{\"workspace_id\": \"rw\", \"profile\": \"workspace-write\", \"network\": \"enabled\","       \
    " \"processes\": \"exclusive\"}]"
    expect_json(info_json(&cfg, &full_caps, NULL, 0),
                "{" SERVER_PART ", \"workspace_id\": null" THREE_LISTED "}");
    expect_json(info_json(&cfg, &full_caps, "", 0),
                "{" SERVER_PART ", \"workspace_id\": null" THREE_LISTED "}");
    /* A NULL input is the same as an empty one. */
    struct csw_mcp_workspace_info_output out;
    assert_int_equal(cs_policy_workspace_info(&cfg, &full_caps, "1.2.3", NULL, &out, NULL), 0);
    assert_null(out.workspace_id.s);
    assert_false(out.has_execution);
    /* The tool names come from the generated table, in its order. */
    assert_int_equal(out.tools_exposed.n, csw_tool_count);
    assert_int_equal(out.tools_exposed.n, 11);
    for (size_t i = 0; i < csw_tool_count; i++)
        assert_string_equal(out.tools_exposed.v[i].s, csw_tools[i].name);
    csw_mcp_workspace_info_output_free(&out);
    cs_config_free(&cfg);

    /* With no workspace at all. */
    load_ok(&cfg, NOARGS, BASE_ENV);
    expect_json(info_json(&cfg, &full_caps, NULL, 0),
                "{" SERVER_PART ", \"workspace_id\": null, \"workspaces\": []}");
    cs_config_free(&cfg);
}

static void test_info_host_workspace(void **state)
{
    (void)state;
    struct cs_config cfg;
    load_three(&cfg);
    char want[8192];
    snprintf(want, sizeof want,
             "{" SERVER_PART ", \"workspace_id\": \"rw\", \"profile\": \"workspace-write\","
             " \"root\": \"%s\","
             " \"execution\": {"
             "  \"environment\": {\"kind\": \"host\", \"client_selectable\": false,"
             "    \"exec_supported\": true, \"file_read_supported\": true,"
             "    \"file_write_supported\": true},"
             "  \"permissions\": {\"read\": true, \"write\": true, \"exec\": true},"
             "  \"files\": {\"read\": {\"available\": true}, \"find\": {\"available\": true},"
             "    \"patch\": {\"available\": true},"
             "    \"capabilities\": {\"read_range\": true, \"find_pagination\": true,"
             "      \"read_max_bytes\": 1048576, \"find_max_paths\": 10000}},"
             "  \"process\": {\"available\": true, \"capabilities\": {"
             "    \"handles\": true, \"survives_request_end\": true, \"write_stdin\": true,"
             "    \"incremental_read\": true, \"terminate\": true, \"output_combined\": true,"
             "    \"wait\": true,"
             "    \"tty\": {\"supported\": true, \"default\": false, \"initial_rows\": 24,"
             "      \"initial_cols\": 80, \"resize_supported\": true},"
             "    \"lifetime\": {\"owner\": \"runner\", \"client_disconnect\": \"keep_running\","
             "      \"runner_disconnect\": \"terminate\", \"gateway_shutdown\": \"terminate\","
             "      \"restart_recovery\": \"none\"},"
             "    \"limits\": {\"max_live_processes\": 8, \"timeout_ms\": 1800000,"
             "      \"output_ring_bytes\": 1048576}}},"
             "  \"serialization\": {\"scope\": \"workspace\", \"request_conflict\": \"wait-fifo\","
             "    \"process_conflict\": \"reject\", \"queue_durable\": false,"
             "    \"max_waiters_per_resource\": 64, \"conflict_error\": \"WORKSPACE_BUSY\","
             "    \"queue_full_error\": \"RESOURCE_QUEUE_FULL\"},"
             "  \"isolation\": {\"file_tools_workspace_scoped\": true,"
             "    \"command_sandbox\": \"linux-sandbox\", \"runner\": \"in-process\","
             "    \"landlock_abi\": 3, \"denial_reports\": [\"network\", \"syscall\"]},"
             "  \"network\": {\"policy\": \"enabled\", \"enforcement\": \"enforced\","
             "    \"client_may_escalate\": false, \"allow\": [\"example.com:443\"]}}}",
             fx.ws1);
    json_t *j = info_json(&cfg, &full_caps, "rw", 2);
    /* The key environment_id never appears. */
    char *text = json_dumps(j, 0);
    assert_null(strstr(text, "environment_id"));
    free(text);
    expect_json(j, want);

    /* Read-only: read and find only; no process; restricted network without allow. */
    j = info_json(&cfg, &full_caps, "ro", 2);
    json_t *x = json_object_get(j, "execution");
    expect_json(json_incref(json_object_get(x, "permissions")),
                "{\"read\": true, \"write\": false, \"exec\": false}");
    expect_json(json_incref(json_object_get(x, "files")),
                "{\"read\": {\"available\": true}, \"find\": {\"available\": true},"
                " \"patch\": {\"available\": false},"
                " \"capabilities\": {\"read_range\": true, \"find_pagination\": true,"
                "   \"read_max_bytes\": 1048576, \"find_max_paths\": 10000}}");
    expect_json(json_incref(json_object_get(x, "process")), "{\"available\": false}");
    expect_json(json_incref(json_object_get(x, "network")),
                "{\"policy\": \"restricted\", \"enforcement\": \"enforced\","
                " \"client_may_escalate\": false}");
    assert_string_equal(json_string_value(json_object_get(j, "profile")), "read-only");
    assert_string_equal(json_string_value(json_object_get(j, "root")), fx.ws2);
    json_decref(j);
    cs_config_free(&cfg);
}

static void test_info_container_fails_closed(void **state)
{
    (void)state;
    struct cs_config cfg;
    load_three(&cfg);
    json_t *j = info_json(&cfg, &full_caps, "box", 3);
    json_t *x = json_object_get(j, "execution");
    expect_json(json_incref(json_object_get(x, "environment")),
                "{\"kind\": \"linux-container\", \"client_selectable\": false,"
                " \"exec_supported\": false, \"file_read_supported\": false,"
                " \"file_write_supported\": false}");
    /* The profile still says what it grants; nothing is available. */
    expect_json(json_incref(json_object_get(x, "permissions")),
                "{\"read\": true, \"write\": true, \"exec\": true}");
    expect_json(json_incref(json_object_get(json_object_get(x, "files"), "read")),
                "{\"available\": false}");
    expect_json(json_incref(json_object_get(json_object_get(x, "files"), "find")),
                "{\"available\": false}");
    expect_json(json_incref(json_object_get(json_object_get(x, "files"), "patch")),
                "{\"available\": false}");
    expect_json(json_incref(json_object_get(x, "process")), "{\"available\": false}");
    json_decref(j);
    cs_config_free(&cfg);
}

static void test_info_unknown_workspace(void **state)
{
    (void)state;
    struct cs_config cfg;
    load_three(&cfg);
    struct csw_mcp_workspace_info_input in = {.has_workspace_id = true,
                                              .workspace_id = {(char *)"x", 1}};
    struct csw_mcp_workspace_info_output out;
    memset(&out, 0xa5, sizeof out);
    struct cs_diag msg = {0};
    assert_int_equal(cs_policy_workspace_info(&cfg, &full_caps, "1", &in, &out, &msg),
                     CSW_ERROR_WORKSPACE_NOT_FOUND);
    assert_string_equal(msg.text, "unknown workspace_id \"x\"");
    assert_int_equal(msg.code, CSW_ERROR_WORKSPACE_NOT_FOUND);
    const unsigned char *p = (const unsigned char *)&out;
    for (size_t i = 0; i < sizeof out; i++)
        assert_int_equal(p[i], 0);
    /* Exact bytes: a NUL inside or a prefix matches nothing; the message stays printable. */
    in.workspace_id = (struct cs_str){(char *)"rw\0\n", 4};
    assert_int_equal(cs_policy_workspace_info(&cfg, &full_caps, "1", &in, &out, &msg),
                     CSW_ERROR_WORKSPACE_NOT_FOUND);
    assert_string_equal(msg.text, "unknown workspace_id \"rw??\"");
    in.workspace_id = (struct cs_str){(char *)"r", 1};
    assert_int_equal(cs_policy_workspace_info(&cfg, &full_caps, "1", &in, &out, NULL),
                     CSW_ERROR_WORKSPACE_NOT_FOUND);
    cs_config_free(&cfg);
}

static void test_info_caps(void **state)
{
    (void)state;
    struct cs_config cfg;
    load_three(&cfg);

    /* No sandbox, no landlock, uds runner: "none" for both, no landlock_abi key. */
    struct cs_runtime_caps c = full_caps;
    c.sandbox = false;
    c.has_landlock_abi = false;
    c.uds_runner = true;
    json_t *j = info_json(&cfg, &c, "rw", 2);
    json_t *x = json_object_get(j, "execution");
    expect_json(json_incref(json_object_get(x, "isolation")),
                "{\"file_tools_workspace_scoped\": true, \"command_sandbox\": \"none\","
                " \"runner\": \"uds\"}");
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(x, "network"), "enforcement")), "none");
    json_decref(j);

    /* denial_reports (docs/contract/tools.md §6): only with the sandbox; network only for an
     * enabled workspace, syscall only with seccomp user notification; never filesystem. */
    c = full_caps;
    c.syscall_denials = false;
    j = info_json(&cfg, &c, "rw", 2);
    x = json_object_get(j, "execution");
    expect_json(json_incref(json_object_get(json_object_get(x, "isolation"), "denial_reports")),
                "[\"network\"]");
    json_decref(j);

    /* landlock_abi 0 is present (a kernel without Landlock reports ABI 0 when probed). */
    c = full_caps;
    c.landlock_abi = 0;
    j = info_json(&cfg, &c, "rw", 2);
    x = json_object_get(j, "execution");
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(x, "isolation"), "landlock_abi")), 0);
    json_decref(j);

    /* Nothing implemented yet: every availability false, no process capabilities. */
    c = full_caps;
    c.files_available = false;
    c.patch_available = false;
    c.process_available = false;
    j = info_json(&cfg, &c, "rw", 2);
    x = json_object_get(j, "execution");
    json_t *f = json_object_get(x, "files");
    assert_true(json_is_false(json_object_get(json_object_get(f, "read"), "available")));
    assert_true(json_is_false(json_object_get(json_object_get(f, "find"), "available")));
    assert_true(json_is_false(json_object_get(json_object_get(f, "patch"), "available")));
    expect_json(json_incref(json_object_get(x, "process")), "{\"available\": false}");
    /* Permissions and environment still say what the profile and environment allow. */
    expect_json(json_incref(json_object_get(x, "permissions")),
                "{\"read\": true, \"write\": true, \"exec\": true}");
    json_decref(j);

    /* Files without patch; tty unsupported; other limits. */
    c = full_caps;
    c.patch_available = false;
    c.tty_supported = false;
    cfg.workspaces[0].limits = (struct cs_workspace_limits){
        .max_live_processes = 3, .timeout_ms = 0, .output_ring_bytes = 4096};
    cfg.workspaces[0].processes = CS_WORKSPACE_PROCESSES_SHARED;
    j = info_json(&cfg, &c, "rw", 2);
    x = json_object_get(j, "execution");
    f = json_object_get(x, "files");
    assert_true(json_is_true(json_object_get(json_object_get(f, "read"), "available")));
    assert_true(json_is_false(json_object_get(json_object_get(f, "patch"), "available")));
    json_t *pc = json_object_get(json_object_get(x, "process"), "capabilities");
    assert_true(json_is_false(json_object_get(json_object_get(pc, "tty"), "supported")));
    expect_json(json_incref(json_object_get(pc, "limits")),
                "{\"max_live_processes\": 3, \"timeout_ms\": 0, \"output_ring_bytes\": 4096}");
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(x, "serialization"), "process_conflict")),
        "share");
    json_decref(j);
    cfg.workspaces[0].limits = (struct cs_workspace_limits){1800000, 8, 1048576, 100000};
    cfg.workspaces[0].processes = CS_WORKSPACE_PROCESSES_EXCLUSIVE;

    /* Caps the schema would refuse are an INTERNAL error, not a malformed result. */
    struct csw_mcp_workspace_info_input in = {.has_workspace_id = true,
                                              .workspace_id = {(char *)"rw", 2}};
    struct csw_mcp_workspace_info_output out;
    struct cs_diag msg = {0};
    c = full_caps;
    cfg.workspaces[0].limits.max_live_processes = 0;
    assert_int_equal(cs_policy_workspace_info(&cfg, &c, "1", &in, &out, &msg), CSW_ERROR_INTERNAL);
    assert_string_equal(msg.text, "workspace limits: max_live_processes must be >= 1");
    cfg.workspaces[0].limits.max_live_processes = 8;
    cfg.workspaces[0].limits.timeout_ms = -1;
    assert_int_equal(cs_policy_workspace_info(&cfg, &c, "1", &in, &out, &msg), CSW_ERROR_INTERNAL);
    assert_string_equal(msg.text, "workspace limits: timeout_ms must be >= 0");
    cfg.workspaces[0].limits.timeout_ms = 1800000;
    assert_null(out.version.s);
    c = full_caps;
    c.landlock_abi = -1;
    assert_int_equal(cs_policy_workspace_info(&cfg, &c, "1", &in, &out, &msg), CSW_ERROR_INTERNAL);
    assert_string_equal(msg.text, "runtime caps: landlock_abi must be >= 0");
    /* Limits do not matter when the process tools are not offered. */
    c = full_caps;
    c.process_available = false;
    cfg.workspaces[0].limits.max_live_processes = 0;
    cfg.workspaces[0].limits.timeout_ms = -1;
    json_decref(info_json(&cfg, &c, "rw", 2));
    json_decref(info_json(&cfg, &c, "ro", 2));
    cs_config_free(&cfg);
}

/* "Fail the Nth allocation": every failure point gives INTERNAL, a zeroed output and no leak. */
static long alloc_budget = -1, alloc_live;

static void *counting_malloc(size_t n)
{
    if (alloc_budget == 0)
        return NULL;
    if (alloc_budget > 0)
        alloc_budget--;
    void *p = malloc(n);
    if (p)
        alloc_live++;
    return p;
}

static void counting_free(void *p)
{
    if (p)
        alloc_live--;
    free(p);
}

static void test_info_out_of_memory(void **state)
{
    (void)state;
    struct cs_config cfg;
    load_three(&cfg);
    static const char *const ids[] = {"", "rw", "ro", "box"};
    for (size_t k = 0; k < sizeof ids / sizeof ids[0]; k++) {
        struct csw_mcp_workspace_info_input in = {.has_workspace_id = true,
                                                  .workspace_id = {(char *)ids[k], strlen(ids[k])}};
        for (long n = 0;; n++) {
            struct csw_mcp_workspace_info_output out;
            struct cs_diag msg = {0};
            json_set_alloc_funcs(counting_malloc, counting_free);
            alloc_live = 0;
            alloc_budget = n;
            int rc = cs_policy_workspace_info(&cfg, &full_caps, "1", &in, &out, &msg);
            if (rc == 0)
                csw_mcp_workspace_info_output_free(&out);
            alloc_budget = -1;
            json_set_alloc_funcs(malloc, free);
            if (alloc_live != 0)
                fail_msg("%s: %ld allocations leaked with allocation #%ld failing", ids[k],
                         alloc_live, n + 1);
            if (rc == 0)
                break;
            assert_int_equal(rc, CSW_ERROR_INTERNAL);
            assert_string_equal(msg.text, "out of memory building workspace_info");
            assert_null(out.version.s);
            assert_null(out.tools_exposed.v);
            assert_true(n < 1000);
        }
    }
    cs_config_free(&cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_default_paths_follow_the_environment),
        cmocka_unit_test(test_every_flag),
        cmocka_unit_test(test_every_variable),
        cmocka_unit_test(test_flag_wins_over_variable),
        cmocka_unit_test(test_log_levels),
        cmocka_unit_test(test_help_and_version),
        cmocka_unit_test(test_metrics),
        cmocka_unit_test(test_argument_errors),
        cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_runner_dir_refusals),
        cmocka_unit_test(test_registry_example),
        cmocka_unit_test(test_registry_loopback),
        cmocka_unit_test(test_registry_processes),
        cmocka_unit_test(test_registry_root_symlink_is_canonical),
        cmocka_unit_test(test_registry_remote_root),
        cmocka_unit_test(test_registry_refusals),
        cmocka_unit_test(test_registry_limits),
        cmocka_unit_test(test_registry_network_allow_entries),
        cmocka_unit_test(test_registry_deny_and_unknown_keys),
        cmocka_unit_test(test_registry_environment_order),
        cmocka_unit_test(test_quick_start),
        cmocka_unit_test(test_config_and_quick_start),
        cmocka_unit_test(test_roots_disjoint_and_held),
        cmocka_unit_test(test_sandbox_ids),
        cmocka_unit_test(test_lookup),
        cmocka_unit_test(test_permissions),
        cmocka_unit_test(test_info_remote_worker),
        cmocka_unit_test(test_info_remote_isolation),
        cmocka_unit_test(test_info_server_only),
        cmocka_unit_test(test_info_host_workspace),
        cmocka_unit_test(test_info_container_fails_closed),
        cmocka_unit_test(test_info_unknown_workspace),
        cmocka_unit_test(test_info_caps),
        cmocka_unit_test(test_info_out_of_memory),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
