/*
 * codespace-mcp: the gateway. Parses the configuration, wires the modules together and runs the
 * event loop; holds no protocol logic of its own.
 *
 * Trust: argv and the environment come from the operator (checked by policy). Everything the
 * client sends goes through a transport into the MCP core.
 * Logging: this file is the boundary that logs (JSON lines on stderr); stdout carries only MCP
 * messages on the stdio transport.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <malloc.h>
#include <stdbool.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base_diag.h"
#include "base_json.h"
#include "base_log.h"
#include "base_loop.h"
#include "base_version.h"
#include "base_wire.h"
#include "http_server.h"
#include "jsonrpc.h"
#include "main_calls.h"
#include "main_doctor.h"
#include "main_metrics.h"
#include "main_wire.h"
#include "mcp_server.h"
#include "policy.h"
#include "runner_tls.h"
#include "store.h"
#include "tools.h"
#include "transport_stdio.h"

extern char **environ;

#define MAX_MESSAGE (16u * 1024u * 1024u) /* lines and bodies: docs/contract/runtime.md §3 */

struct gateway {
    struct cs_loop *loop;
    struct cs_mcp *srv;
    struct cs_mcp_session *session; /* stdio: the one session */
    struct cs_stdio *io;
    struct cs_http *http;
    struct cs_main_metrics *metrics; /* --metrics, else NULL */
    int64_t eof_deadline;
    bool output_lost;
    int exit_code;
    struct cs_loop_timer *trim; /* armed after a large parse */
};

/* ---- stdio ---- */

static void stdio_reply(void *arg, json_t *reply, char *text, size_t len)
{
    struct gateway *g = arg;
    json_decref(reply);
    if (reply && !text)
        cs_log(CS_LOG_ERROR, "out of memory encoding a reply", NULL);
    if (text && g->io && cs_stdio_write_line(g->io, text, len) != 0 && !g->output_lost) {
        g->output_lost = true; /* said once; the transport reports EOF and we shut down */
        cs_log(CS_LOG_WARNING, "stdout is closed; replies are dropped", NULL);
    }
    free(text);
}

/* A notification sent before a reply (notifications/progress): one more line on stdout. */
static void stdio_notify(void *arg, const char *text, size_t len)
{
    struct gateway *g = arg;
    if (g->io && cs_stdio_write_line(g->io, text, len) != 0 && !g->output_lost) {
        g->output_lost = true;
        cs_log(CS_LOG_WARNING, "stdout is closed; replies are dropped", NULL);
    }
}

static void stdio_line(void *arg, const uint8_t *data, size_t len)
{
    struct gateway *g = arg;
    cs_mcp_session_handle(g->session, (const char *)data, len, stdio_reply, g);
}

static void stdio_overlong(void *arg)
{
    struct gateway *g = arg;
    cs_log(CS_LOG_WARNING, "message over 16 MiB skipped", NULL);
    json_t *r =
        cs_jsonrpc_error(NULL, CS_JSONRPC_PARSE_ERROR, "Parse error: message longer than 16 MiB");
    char *text = r ? cs_wire_json_text(r, NULL) : NULL;
    stdio_reply(g, r, text, text ? strlen(text) : 0); /* takes text */
}

/* After a large message was parsed (its tree is freed by then), free memory goes back to the
 * system (M8): the HTTP transport's own parse has no later point to do it at. */
static void trim_now(void *arg)
{
    struct gateway *g = arg;
    g->trim = NULL;
    (void)malloc_trim(0);
}

static void trim_soon(void *arg)
{
    struct gateway *g = arg;
    if (!g->trim)
        g->trim = cs_loop_timer_add(g->loop, 100, trim_now, g);
}

/* After EOF: replies still in flight get up to this long to complete before shutdown. */
#define EOF_GRACE_MS 2000

static void wait_pending(void *arg)
{
    struct gateway *g = arg;
    if (cs_mcp_session_pending(g->session) == 0 || cs_loop_now_ms() >= g->eof_deadline) {
        cs_loop_stop(g->loop);
        return;
    }
    if (!cs_loop_timer_add(g->loop, 10, wait_pending, g))
        cs_loop_stop(g->loop);
}

static void stdio_eof(void *arg)
{
    struct gateway *g = arg;
    cs_log(CS_LOG_INFO, "stdin closed or stdout broken; shutting down", NULL);
    g->eof_deadline = cs_loop_now_ms() + EOF_GRACE_MS;
    wait_pending(g);
}

/* ---- signals and logging ---- */

/* Whether host names the loopback interface: localhost, ::1 or any 127.0.0.0/8 address. */
static bool loopback_host(const char *host)
{
    struct in_addr a4;
    struct in6_addr a6;
    if (strcmp(host, "localhost") == 0)
        return true;
    if (inet_pton(AF_INET, host, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    return inet_pton(AF_INET6, host, &a6) == 1 && IN6_IS_ADDR_LOOPBACK(&a6);
}

static void on_signal(void *arg, int signo)
{
    struct gateway *g = arg;
    cs_log(CS_LOG_INFO, "signal received; shutting down", json_pack("{s:i}", "signal", signo));
    cs_loop_stop(g->loop);
}

static void http_log(void *arg, const char *level, const char *event, const char *detail)
{
    (void)arg;
    enum cs_log_level l = CS_LOG_INFO;
    cs_log_level_parse(level, &l);
    /* libmicrohttpd's own diagnostics (one per refused socket under a flood) are debug noise:
     * the limits they report are working as intended. */
    if (strcmp(event, "mhd") == 0)
        l = CS_LOG_DEBUG;
    cs_log(l, event, detail ? json_pack("{s:s}", "detail", detail) : NULL);
}

static int serve(struct gateway *g, const struct cs_config *cfg)
{
    if (cfg->transport == CS_CONFIG_TRANSPORT_STDIO) {
        g->session = cs_mcp_session_new(g->srv);
        if (g->session)
            cs_mcp_session_on_notify(g->session, stdio_notify, g);
        struct cs_stdio_callbacks cb = {stdio_line, stdio_overlong, stdio_eof, g};
        g->io = g->session ? cs_stdio_new(g->loop, STDIN_FILENO, STDOUT_FILENO, MAX_MESSAGE, &cb)
                           : NULL;
        if (!g->io) {
            cs_log(CS_LOG_ERROR, "cannot start the stdio transport",
                   json_pack("{s:s}", "error", strerror(errno)));
            return -1;
        }
        cs_log(CS_LOG_INFO, "listening", json_pack("{s:s}", "transport", "stdio"));
        return 0;
    }
    struct cs_http_options opt = {
        .host = cfg->host,
        .port = cfg->port,
        .token = cfg->token,
        .max_body = MAX_MESSAGE,
        .body_budget = (size_t)cfg->http_body_budget_mib * 1024 * 1024,
        .max_connections = (unsigned)cfg->http_max_connections,
        .request_timeout_s = (unsigned)cfg->http_request_timeout_secs,
        .log = http_log,
        .log_arg = g,
        .metrics = g->metrics ? cs_main_metrics_text : NULL,
        .metrics_arg = g->metrics,
    };
    struct cs_diag err = {0};
    g->http = cs_http_start(g->loop, g->srv, &opt, &err);
    if (!g->http) {
        cs_log(CS_LOG_ERROR, "cannot start the HTTP transport",
               json_pack("{s:s}", "error", err.text));
        return -1;
    }
    if (!cfg->token && !loopback_host(cfg->host))
        cs_log(CS_LOG_WARNING, "binding a non-loopback host without a bearer token",
               json_pack("{s:s}", "host", cfg->host));
    json_t *f = json_pack("{s:s,s:s,s:i,s:s}", "transport", "streamable-http", "host", cfg->host,
                          "port", (int)cs_http_port(g->http), "endpoint", "/mcp");
    if (f && g->metrics)
        json_object_set_new(f, "metrics", json_string("/metrics"));
    cs_log(CS_LOG_INFO, "listening", f);
    return 0;
}

/* The `starting` line: what this gateway is, and whether its commands are sandboxed
 * (workflows.md section 6), with a warning when the probe failed saying what follows. */
static void log_start(const struct cs_config *cfg, const struct cs_main_sandbox *sb)
{
    bool tcp = cfg->runner == CS_CONFIG_RUNNER_TCP;
    bool sandboxed = sb->sandboxed && !tcp;
    cs_log(CS_LOG_INFO, "starting",
           json_pack("{s:s,s:i,s:s,s:s,s:s,s:I}", "version", CS_VERSION, "workspaces",
                     (int)cfg->n_workspaces, "runner",
                     cfg->runner == CS_CONFIG_RUNNER_UDS ? "uds"
                     : tcp                               ? "tcp"
                                                         : "in-process",
                     "command_sandbox",
                     tcp         ? "remote"
                     : sandboxed ? "linux-sandbox"
                                 : "none",
                     "network_enforcement",
                     tcp         ? "remote"
                     : sandboxed ? "enforced"
                                 : "none",
                     "landlock_abi", (json_int_t)(sandboxed ? sb->iso.landlock_abi : 0)));
    if (!sb->sandboxed && !tcp)
        cs_log(CS_LOG_WARNING, "the Linux sandbox probe failed",
               json_pack("{s:s,s:s,s:s}", "reason", sb->reason, "consequence",
                         geteuid() == 0
                             ? "this server runs as root and never runs a command as host root: "
                               "no command runs (exec_command answers PROCESS_SPAWN_FAILED)"
                             : "commands run unsandboxed, as this server's user, with no "
                               "network enforcement",
                         "remedy", "run codespace-mcp --doctor"));
}

/* Removes a --doctor flag from argv (it is not a setting); returns whether there was one. */
static bool take_doctor(int *argc, char **argv)
{
    bool doctor = false;
    int w = 1;
    for (int i = 1; i < *argc; i++) {
        if (strcmp(argv[i], "--doctor") == 0)
            doctor = true;
        else
            argv[w++] = argv[i];
    }
    argv[w] = NULL;
    *argc = w;
    return doctor;
}

/* The certificate, key or pre-shared key files of one remote runner, loaded as the tcp runner
 * will load them: a file that cannot be used is a bad configuration like a bad flag (exit 2,
 * docs/operations.md "Configuration"), not a failed start. Returns 0, or -1 with err set. */
static int check_remote_files(const struct cs_remote *rm, const char *where,
                              struct cs_config_error *err)
{
    if (!rm->url || rm->plaintext)
        return 0;
    struct cs_tls_config tc = {
        .cert = rm->cert, .key = rm->key, .psk_file = rm->psk, .psk_identity = rm->psk_identity};
    memcpy(tc.peer_pin, rm->pin, sizeof tc.peer_pin);
    struct cs_diag d = {0};
    struct cs_tls_ctx *ctx = cs_tls_ctx_new(&tc, false, &d);
    if (!ctx) {
        snprintf(err->text, sizeof err->text, "%s: %s", where, d.text);
        return -1;
    }
    cs_tls_ctx_free(ctx);
    return 0;
}

/* Every remote runner's files: the gateway's --runner tcp:// and each registry workspace's own
 * runner (the registry path names it). Returns 0, or -1 with err set. */
static int check_tls_files(const struct cs_config *cfg, struct cs_config_error *err)
{
    if (cfg->runner == CS_CONFIG_RUNNER_TCP &&
        check_remote_files(&cfg->remote, cfg->remote.psk ? "--tls-psk" : "--tls-cert/--tls-key",
                           err) != 0)
        return -1;
    for (size_t i = 0; i < cfg->n_workspaces; i++) {
        const struct cs_workspace *ws = &cfg->workspaces[i];
        char where[1024];
        snprintf(where, sizeof where, "config %s: /workspaces/%s/runner",
                 cfg->config_path ? cfg->config_path : "", ws->id);
        if (ws->has_runner && check_remote_files(&ws->remote, where, err) != 0)
            return -1;
    }
    return 0;
}

/* Every workspace where a crash recovery settled patches, or which it stopped. */
static void log_recovery(const char *workspace_id, unsigned settled, const char *error)
{
    if (error != NULL)
        cs_log(CS_LOG_ERROR, "workspace stopped: its patch journal cannot be recovered",
               json_pack("{s:s,s:s}", "workspace", workspace_id, "error", error));
    else
        cs_log(CS_LOG_INFO, "interrupted patches recovered",
               json_pack("{s:s,s:i}", "workspace", workspace_id, "operations", (int)settled));
}

int main(int argc, char **argv)
{
    /* Very large buffers (message texts and bodies near the 16 MiB cap) always come from mmap
     * and go back to the system when freed: a fixed threshold stops glibc from raising it after
     * the first large free, which would put the next 16 MiB message in the heap for good (M8). */
    (void)mallopt(M_MMAP_THRESHOLD, 8 * 1024 * 1024);
    /* Below that, freed blocks stay in the heap for the next call up to this much: a full read
     * window's buffers (the window, its text, the reply quoting it: 1 to 7 MiB, every call)
     * would otherwise be mapped and faulted in afresh each time, a third of what a window cost
     * under many clients. A large text made or parsed arms a trim 100 ms later
     * (cs_json_set_large_hook), which hands everything back once the calls stop (M8). */
    (void)mallopt(M_TRIM_THRESHOLD, 32 * 1024 * 1024);
    bool doctor = take_doctor(&argc, argv);
    struct cs_config cfg;
    struct cs_config_error cerr;
    int loaded = cs_config_load(&cfg, argc, argv, environ, &cerr);
    if (doctor && loaded != CS_CONFIG_HELP && loaded != CS_CONFIG_VERSION) {
        int rc = cs_main_doctor(loaded == CS_CONFIG_READY ? &cfg : NULL, cerr.text);
        if (loaded == CS_CONFIG_READY)
            cs_config_free(&cfg);
        return rc;
    }
    switch (loaded) {
    case CS_CONFIG_HELP:
        fputs(cs_config_usage(), stdout);
        return 0;
    case CS_CONFIG_VERSION:
        printf("codespace-mcp %s\n", CS_VERSION);
        return 0;
    case CS_CONFIG_READY:
        break;
    default:
        /* One JSON log line like every other line on stderr (docs/contract/runtime.md §2), naming
         * the flag, variable or registry JSON path in "error". */
        cs_log(CS_LOG_ERROR, "invalid configuration", json_pack("{s:s}", "error", cerr.text));
        return 2;
    }
    if (check_tls_files(&cfg, &cerr) != 0) {
        cs_log(CS_LOG_ERROR, "invalid configuration", json_pack("{s:s}", "error", cerr.text));
        cs_config_free(&cfg);
        return 2;
    }
    enum cs_log_level level = CS_LOG_INFO;
    cs_log_level_parse(cfg.log_level, &level);
    cs_log_set_level(level);
    /* A client that goes away must not kill us through SIGPIPE; writes report EPIPE instead. */
    signal(SIGPIPE, SIG_IGN);

    struct gateway g;
    memset(&g, 0, sizeof g);
    struct cs_tools tools;
    memset(&tools, 0, sizeof tools);
    struct cs_main_sandbox sb;
    memset(&sb, 0, sizeof sb);
    struct cs_main_calls *calls = NULL;
    /* The ledger first: a database that cannot be opened or is corrupt stops the start
     * (docs/contract/runtime.md section 6); it is never replaced. */
    struct cs_store *store = NULL;
    struct cs_diag serr = {0};
    if (cs_store_open(cfg.operations_db, &store, &serr) != CS_STORE_OK) {
        cs_log(CS_LOG_ERROR, "cannot open the operations database",
               json_pack("{s:s,s:s}", "path", cfg.operations_db, "error", serr.text));
        cs_config_free(&cfg);
        return 1;
    }
    g.loop = cs_loop_new();
    if (g.loop) {
        cs_loop_busy_poll_from_env(g.loop);
    }
    g.srv = g.loop ? cs_mcp_new(CS_VERSION) : NULL;
    calls = cs_main_calls_new(&cfg);
    struct cs_diag terr = {0};
    /* Every signal that would end the process by default and can be caught ends it through the
     * shutdown path instead (docs/contract/runtime.md §5: owned process trees killed, the runner's
     * socket and directory removed). */
    if (!g.srv || !calls || cs_loop_signal(g.loop, SIGINT, on_signal, &g) != 0 ||
        cs_loop_signal(g.loop, SIGTERM, on_signal, &g) != 0 ||
        cs_loop_signal(g.loop, SIGHUP, on_signal, &g) != 0 ||
        cs_loop_signal(g.loop, SIGQUIT, on_signal, &g) != 0 ||
        cs_tools_init(&tools, &cfg, CS_VERSION, store, g.loop, &terr) != 0) {
        cs_log(CS_LOG_ERROR, "startup failed",
               json_pack("{s:s}", "error", terr.set ? terr.text : strerror(errno)));
        g.exit_code = 1;
        goto out;
    }
    /* docs/contract/runtime.md §6: patches a crash interrupted are settled before anything is
     * served (and again after a lost uds worker, before the next call on its workspaces). */
    cs_tools_recover(&tools, log_recovery);
    /* docs/contract/sandbox.md §2: probe the helper once; its answer decides how every command
     * spawns and what workspace_info reports. */
    cs_main_probe(&cfg, &sb);
    if (!sb.sandboxed && cfg.require_linux_sandbox) {
        cs_log(CS_LOG_ERROR, "startup failed",
               json_pack("{s:s,s:s}", "error",
                         "CODESPACE_REQUIRE_LINUX_SANDBOX=1 and the Linux sandbox probe failed",
                         "reason", sb.reason));
        g.exit_code = 1;
        goto out;
    }
    struct cs_tools_sandbox tsb = {sb.sandboxed, sb.iso.landlock_abi, sb.iso.syscall_denials,
                                   sb.reason};
    if (cs_main_runner(&tools, &cfg, &sb, g.loop, &terr) != 0 ||
        cs_tools_register(g.srv, &tools, &tsb, &terr) != 0) {
        cs_log(CS_LOG_ERROR, "startup failed", json_pack("{s:s}", "error", terr.text));
        g.exit_code = 1;
        goto out;
    }
    if (cfg.metrics) { /* HTTP only: the configuration refuses it with stdio */
        g.metrics = cs_main_metrics_new(&tools);
        if (!g.metrics) {
            cs_log(CS_LOG_ERROR, "startup failed", json_pack("{s:s}", "error", strerror(ENOMEM)));
            g.exit_code = 1;
            goto out;
        }
        cs_main_calls_set_metrics(calls, g.metrics);
    }
    /* The deny rules' start-up scans (contract section 7, "at start") are done before anything
     * is served: in process they ran already; a uds worker's are answered within milliseconds.
     * A remote worker's are sent unwaited; one whose link cannot be made then builds the state
     * at the workspace's first operation instead (or at a reconnect). */
    if (cs_tools_deny_warm_wait(&tools, g.loop, 10000) != 0)
        goto out; /* a signal meanwhile: shut down as the loop would have */
    cs_mcp_on_call_done(g.srv, cs_main_calls_report, calls);
    log_start(&cfg, &sb);
    cs_json_set_large_hook(trim_soon, &g);
    if (serve(&g, &cfg) != 0) {
        g.exit_code = 1;
        goto out;
    }
    if (cs_loop_run(g.loop) != 0) {
        cs_log(CS_LOG_ERROR, "event loop failed", json_pack("{s:s}", "error", strerror(errno)));
        g.exit_code = 1;
    }
out:
    if (g.io)
        cs_stdio_flush(g.io, 1000); /* replies already queued still reach the client */
    cs_stdio_free(g.io);
    g.io = NULL;
    cs_mcp_session_free(g.session);
    g.session = NULL;
    cs_http_stop(g.http);
    /* Every managed process group dies with the server (docs/contract/runtime.md §5), and the calls
     * still waiting on one complete before the MCP core goes. */
    cs_tools_free(&tools);
    cs_mcp_free(g.srv);
    cs_main_calls_free(calls);
    cs_main_metrics_free(g.metrics);
    cs_main_sandbox_clear(&sb);
    cs_store_close(store);
    cs_json_set_large_hook(NULL, NULL);
    cs_loop_timer_cancel(g.trim);
    cs_loop_free(g.loop);
    cs_config_free(&cfg);
    return g.exit_code;
}
