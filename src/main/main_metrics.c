/*
 * main_metrics: counting tool calls and denials, and the Prometheus text page (see
 * main_metrics.h). The series and their meaning are listed in docs/operations.md, "Metrics".
 */
#include "main_metrics.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "csw.h"

#define MAX_TOOLS 32 /* the server registers a dozen; a name past this is not counted */
/* Results: 0 "ok", 1 + e for error code e. */
#define N_RESULTS (CSW_ERROR__COUNT + 1)

/* The histogram's upper bounds in milliseconds, and as the text writes them (seconds). */
static const int64_t bucket_ms[] = {5,    10,   25,   50,    100,   250,   500,
                                    1000, 2500, 5000, 10000, 30000, 60000, 300000};
static const char *const bucket_le[] = {"0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5",
                                        "1",     "2.5",  "5",     "10",   "30",  "60",   "300"};
#define N_BUCKETS (sizeof bucket_ms / sizeof bucket_ms[0])
_Static_assert(sizeof bucket_le / sizeof bucket_le[0] == N_BUCKETS, "one text per bound");

struct tool_stats {
    const char *tool; /* static storage (the MCP core's) */
    uint64_t results[N_RESULTS];
    uint64_t buckets[N_BUCKETS]; /* not cumulative here: the page sums them */
    uint64_t count;
    int64_t sum_ms;
};

struct cs_main_metrics {
    const struct cs_tools *tools;
    struct tool_stats tool[MAX_TOOLS];
    size_t n_tools;
    uint64_t denials[CSW_DENIAL_KIND__COUNT];
};

struct cs_main_metrics *cs_main_metrics_new(const struct cs_tools *t)
{
    struct cs_main_metrics *m = calloc(1, sizeof *m);
    if (m)
        m->tools = t;
    return m;
}

void cs_main_metrics_free(struct cs_main_metrics *m)
{
    free(m);
}

static struct tool_stats *stats_of(struct cs_main_metrics *m, const char *tool)
{
    for (size_t i = 0; i < m->n_tools; i++)
        if (strcmp(m->tool[i].tool, tool) == 0)
            return &m->tool[i];
    if (m->n_tools == MAX_TOOLS)
        return NULL;
    struct tool_stats *s = &m->tool[m->n_tools++];
    s->tool = tool;
    return s;
}

void cs_main_metrics_call(struct cs_main_metrics *m, const struct cs_mcp_call_report *r)
{
    struct tool_stats *s = stats_of(m, r->tool);
    if (!s)
        return;
    /* The call log's rule: a code outside the catalogue is written INTERNAL. */
    int e = r->error < 0 ? -1 : r->error < CSW_ERROR__COUNT ? r->error : CSW_ERROR_INTERNAL;
    s->results[e + 1]++;
    int64_t ms = r->duration_ms < 0 ? 0 : r->duration_ms;
    for (size_t b = 0; b < N_BUCKETS; b++) {
        if (ms <= bucket_ms[b]) {
            s->buckets[b]++;
            break;
        }
    }
    s->count++;
    s->sum_ms += ms;
}

void cs_main_metrics_denial(struct cs_main_metrics *m, int kind)
{
    if (kind >= 0 && kind < CSW_DENIAL_KIND__COUNT)
        m->denials[kind]++;
}

/* ---- the page ---- */

struct buf {
    char *s;
    size_t n, cap;
    bool oom;
};

static void put(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct buf *b, const char *fmt, ...)
{
    if (b->oom)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->s + b->n, b->cap - b->n, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->oom = true;
            return;
        }
        if ((size_t)k < b->cap - b->n) {
            b->n += (size_t)k;
            return;
        }
        size_t cap = (b->cap + (size_t)k + 1) * 2;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->oom = true;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
}

/* A label value as the text format writes it: backslash, double quote and newline escaped. The
 * values are the server's own names; cut at 127 bytes, which none reaches. */
static const char *esc(char out[256], const char *v)
{
    size_t n = 0;
    for (size_t i = 0; v[i] && i < 127; i++) {
        if (v[i] == '\\' || v[i] == '"') {
            out[n++] = '\\';
            out[n++] = v[i];
        } else if (v[i] == '\n') {
            out[n++] = '\\';
            out[n++] = 'n';
        } else {
            out[n++] = v[i];
        }
    }
    out[n] = '\0';
    return out;
}

static void header(struct buf *b, const char *name, const char *type, const char *help)
{
    put(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

char *cs_main_metrics_text(void *arg, size_t *len)
{
    struct cs_main_metrics *m = arg;
    struct buf b = {.cap = 4096};
    b.s = malloc(b.cap);
    if (!b.s)
        return NULL;
    b.s[0] = '\0';
    char t[256], v[256];

    header(&b, "codespace_tool_calls_total", "counter",
           "Tool calls completed, by tool and result (ok or the error code).");
    for (size_t i = 0; i < m->n_tools; i++) {
        const struct tool_stats *s = &m->tool[i];
        for (size_t k = 0; k < N_RESULTS; k++)
            if (s->results[k] > 0)
                put(&b, "codespace_tool_calls_total{tool=\"%s\",result=\"%s\"} %" PRIu64 "\n",
                    esc(t, s->tool), esc(v, k == 0 ? "ok" : csw_error_names[k - 1]), s->results[k]);
    }

    header(&b, "codespace_tool_call_duration_seconds", "histogram",
           "Tool call duration from the handler's start to the completion, by tool.");
    for (size_t i = 0; i < m->n_tools; i++) {
        const struct tool_stats *s = &m->tool[i];
        esc(t, s->tool);
        uint64_t cum = 0;
        for (size_t k = 0; k < N_BUCKETS; k++) {
            cum += s->buckets[k];
            put(&b,
                "codespace_tool_call_duration_seconds_bucket{tool=\"%s\",le=\"%s\"} %" PRIu64 "\n",
                t, bucket_le[k], cum);
        }
        put(&b,
            "codespace_tool_call_duration_seconds_bucket{tool=\"%s\",le=\"+Inf\"} %" PRIu64 "\n"
            "codespace_tool_call_duration_seconds_sum{tool=\"%s\"} %" PRId64 ".%03" PRId64 "\n"
            "codespace_tool_call_duration_seconds_count{tool=\"%s\"} %" PRIu64 "\n",
            t, s->count, t, s->sum_ms / 1000, s->sum_ms % 1000, t, s->count);
    }

    header(&b, "codespace_processes_live", "gauge",
           "Processes this gateway started (exec_command) that have not exited.");
    put(&b, "codespace_processes_live %zu\n", cs_tools_live_processes(m->tools));

    header(&b, "codespace_sandbox_denials_total", "counter",
           "Sandbox denial entries seen in answers, each once per process, by kind.");
    for (int k = 0; k < CSW_DENIAL_KIND__COUNT; k++)
        put(&b, "codespace_sandbox_denials_total{kind=\"%s\"} %" PRIu64 "\n",
            esc(v, csw_denial_kind_names[k]), m->denials[k]);

    header(&b, "codespace_runner_reconnects_total", "counter",
           "Links to a worker made again after a loss (uds worker replaced, tcp hello again).");
    put(&b, "codespace_runner_reconnects_total %" PRIu64 "\n", m->tools->runner_reconnects);

    if (b.oom) {
        free(b.s);
        return NULL;
    }
    *len = b.n;
    return b.s;
}
