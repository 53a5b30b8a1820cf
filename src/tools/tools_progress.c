/*
 * tools_progress: notifications/progress while a call waits on a process (see tools_progress.h).
 *
 * One poll is two runner operations every runner has: process_status (output_total), then, when
 * the total grew, read_process with no wait from WINDOW bytes before the end (the last line). The
 * next poll is armed only once a poll has ended, CS_TOOLS_PROGRESS_INTERVAL_MS later, so two
 * notifications of a call are always at least that far apart, and at most one poll of a call is in
 * flight. A poll that fails (the process not spawned yet, a worker gone) sends nothing; the next
 * one tries again.
 */
#include "tools_progress.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base_utf8.h"
#include "mcp_server.h"
#include "runner.h"
#include "supervisor.h"

/* The bytes read back from the end of the output for the last line: a line longer than this is
 * shown from where the window starts (only its first 200 characters are shown anyway). */
#define WINDOW ((int64_t)4096)

struct cs_tools_progress {
    struct cs_loop *loop;
    struct cs_runner *runner;
    struct cs_mcp_call *call; /* NULL once stopped: the poll in flight frees p */
    char process_id[CS_SUPERVISOR_ID_SIZE];
    struct cs_loop_timer *timer; /* the next poll, or NULL while one is in flight */
    bool busy;                   /* a runner operation of this poller is in flight */
    int64_t seen;                /* output_total at the last poll that read the output */
};

static void poll_now(void *arg);

static void arm(struct cs_tools_progress *p)
{
    /* On OOM there is no next poll: the call still waits and answers, without progress. */
    p->timer = cs_loop_timer_add(p->loop, CS_TOOLS_PROGRESS_INTERVAL_MS, poll_now, p);
}

/* A runner answer arrived: false when p was stopped meanwhile (and is freed now). */
static bool still_wanted(struct cs_tools_progress *p)
{
    p->busy = false;
    if (p->call)
        return true;
    free(p);
    return false;
}

static void read_done(void *arg, const struct cs_runner_reply *r)
{
    struct cs_tools_progress *p = arg;
    if (!still_wanted(p))
        return;
    if (r->outcome == CS_RUNNER_OK && r->result->tag == CSW_RUNNER_WIRE_RESULT_READ_PROCESS) {
        const struct csw_mcp_read_process_output *out = &r->result->u.read_process.data;
        char msg[CS_TOOLS_PROGRESS_MESSAGE_CAP];
        size_t n = cs__tools_progress_line(out->chunk.s, out->chunk.n, msg, sizeof msg);
        /* The cursor is the end of what was read: the output's total when this was answered. */
        cs_mcp_call_progress(p->call, out->cursor > p->seen ? out->cursor : p->seen,
                             n > 0 ? msg : NULL, n);
    }
    arm(p);
}

static void status_done(void *arg, const struct cs_runner_reply *r)
{
    struct cs_tools_progress *p = arg;
    if (!still_wanted(p))
        return;
    if (r->outcome != CS_RUNNER_OK || r->result->tag != CSW_RUNNER_WIRE_RESULT_PROCESS_STATUS ||
        r->result->u.process_status.data.output_total <= p->seen) {
        arm(p); /* nothing new (or no answer): nothing to say */
        return;
    }
    const struct csw_mcp_process_status_output *st = &r->result->u.process_status.data;
    p->seen = st->output_total;
    int64_t from = st->output_total - WINDOW;
    if (from < st->output_retained_from)
        from = st->output_retained_from;
    if (from < 0)
        from = 0;
    struct csw_runner_wire_op op = {.tag = CSW_RUNNER_WIRE_OP_READ_PROCESS};
    op.u.read_process.data.process_id = (struct cs_str){p->process_id, strlen(p->process_id)};
    op.u.read_process.data.has_cursor = true;
    op.u.read_process.data.cursor = from;
    p->busy = true;
    cs_runner_call(p->runner, &op, read_done, p);
}

static void poll_now(void *arg)
{
    struct cs_tools_progress *p = arg;
    p->timer = NULL; /* fired */
    if (!cs_mcp_call_wants_progress(p->call)) {
        arm(p); /* cancelled: the call completes soon and stops p */
        return;
    }
    struct csw_runner_wire_op op = {.tag = CSW_RUNNER_WIRE_OP_PROCESS_STATUS};
    op.u.process_status.data.process_id = (struct cs_str){p->process_id, strlen(p->process_id)};
    p->busy = true;
    cs_runner_call(p->runner, &op, status_done, p);
}

struct cs_tools_progress *cs__tools_progress_start(struct cs_loop *loop, struct cs_runner *runner,
                                                   struct cs_mcp_call *call, const char *process_id)
{
    if (!loop || !cs_mcp_call_wants_progress(call) || strlen(process_id) >= CS_SUPERVISOR_ID_SIZE)
        return NULL;
    struct cs_tools_progress *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->loop = loop;
    p->runner = runner;
    p->call = call;
    memcpy(p->process_id, process_id, strlen(process_id) + 1);
    arm(p);
    if (!p->timer) {
        free(p);
        return NULL;
    }
    return p;
}

void cs__tools_progress_stop(struct cs_tools_progress *p)
{
    if (!p)
        return;
    p->call = NULL;
    if (p->busy)
        return; /* its answer frees p */
    cs_loop_timer_cancel(p->timer);
    free(p);
}

/* ---- the message ---- */

static bool blank(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\v' || c == '\f';
}

static bool line_end(char c)
{
    return c == '\n' || c == '\r';
}

size_t cs__tools_progress_line(const char *chunk, size_t n, char *out, size_t cap)
{
    if (cap < CS_TOOLS_PROGRESS_MESSAGE_CAP)
        return 0;
    out[0] = '\0';
    /* The last line holding something other than blanks: [start, end). */
    size_t end = n, start = 0;
    bool found = false;
    while (end > 0 && !found) {
        while (end > 0 && line_end(chunk[end - 1]))
            end--;
        start = end;
        while (start > 0 && !line_end(chunk[start - 1]))
            start--;
        for (size_t i = start; i < end && !found; i++)
            found = !blank((unsigned char)chunk[i]);
        if (!found)
            end = start;
    }
    if (!found)
        return 0;
    size_t len = 0, chars = 0;
    for (size_t i = start; i < end;) {
        uint32_t cp;
        bool valid;
        size_t step = cs_utf8_step((const unsigned char *)chunk + i, end - i, &cp, &valid);
        bool control = cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp < 0xa0);
        size_t width = control ? 4 : 1; /* \xHH is four characters */
        if (chars + width > CS_TOOLS_PROGRESS_MESSAGE_MAX)
            break;
        if (control) {
            snprintf(out + len, cap - len, "\\x%02X", (unsigned)cp);
            len += 4;
        } else if (!valid) {
            memcpy(out + len, "\xEF\xBF\xBD", 3); /* U+FFFD: the chunk is UTF-8 already */
            len += 3;
        } else {
            memcpy(out + len, chunk + i, step);
            len += step;
        }
        chars += width;
        i += step;
    }
    out[len] = '\0';
    return len;
}
