/*
 * tools_lease: the per-workspace mutation lease's state machine (see tools_lease.h): acquire,
 * the bounded FIFO (a ring of CS_TOOLS_LEASE_MAX_WAITERS slots), release in order, a live process
 * holding it. Pure: no I/O and no allocation; waiters are run or refused through the hooks.
 *
 * Trust: called by the tool handlers only; nothing here comes from a peer unchecked (the calls
 * and inputs are the MCP core's, opaque). Entry points: tools_lease.h.
 */
#include "tools_lease.h"

#include <stdio.h>
#include <string.h>

#include "csw.h"

/* acquire's 0 (taken) and 1 (queued) must not collide with the refusals it returns. */
_Static_assert(CSW_ERROR_WORKSPACE_BUSY > 1 && CSW_ERROR_RESOURCE_QUEUE_FULL > 1,
               "lease refusal codes collide with taken/queued");

int cs__tools_lease_acquire(struct cs_tools_lease *l, struct cs_mcp_call *call, const void *input,
                            cs_tools_locked_fn run)
{
    switch (l->state) {
    case CS_TOOLS_LEASE_FREE:
        l->state = CS_TOOLS_LEASE_HELD;
        return 0;
    case CS_TOOLS_LEASE_LIVE:
        return CSW_ERROR_WORKSPACE_BUSY;
    case CS_TOOLS_LEASE_HELD:
        break;
    }
    if (l->n_wait >= CS_TOOLS_LEASE_MAX_WAITERS)
        return CSW_ERROR_RESOURCE_QUEUE_FULL;
    size_t slot = (l->head + l->n_wait) % CS_TOOLS_LEASE_MAX_WAITERS;
    l->wait[slot].call = call;
    l->wait[slot].input = input;
    l->wait[slot].run = run;
    l->n_wait++;
    return 1;
}

bool cs__tools_lease_unqueue(struct cs_tools_lease *l, const struct cs_mcp_call *call)
{
    const size_t cap = CS_TOOLS_LEASE_MAX_WAITERS;
    for (size_t i = 0; i < l->n_wait; i++) {
        if (l->wait[(l->head + i) % cap].call != call)
            continue;
        for (size_t k = i; k + 1 < l->n_wait; k++)
            l->wait[(l->head + k) % cap] = l->wait[(l->head + k + 1) % cap];
        l->n_wait--;
        return true;
    }
    return false;
}

/* A live process took the lease: every queued mutation fails WORKSPACE_BUSY. */
static void refuse_waiters(struct cs_tools_lease *l)
{
    while (l->n_wait > 0) {
        struct cs_mcp_call *call = l->wait[l->head].call;
        l->head = (l->head + 1) % CS_TOOLS_LEASE_MAX_WAITERS;
        l->n_wait--;
        l->hooks->busy(l, call);
    }
}

void cs__tools_lease_release(struct cs_tools_lease *l)
{
    l->state = CS_TOOLS_LEASE_FREE;
    l->process_id[0] = '\0';
    l->killing = false;
    if (l->draining)
        return;
    l->draining = true;
    while (l->n_wait > 0 && l->state == CS_TOOLS_LEASE_FREE) {
        struct cs_mcp_call *call = l->wait[l->head].call;
        const void *input = l->wait[l->head].input;
        cs_tools_locked_fn run = l->wait[l->head].run;
        l->head = (l->head + 1) % CS_TOOLS_LEASE_MAX_WAITERS;
        l->n_wait--;
        l->state = CS_TOOLS_LEASE_HELD;
        l->hooks->grant(l, call, input, run);
    }
    if (l->state == CS_TOOLS_LEASE_LIVE)
        refuse_waiters(l);
    l->draining = false;
}

void cs__tools_lease_go_live(struct cs_tools_lease *l, const char *process_id)
{
    l->state = CS_TOOLS_LEASE_LIVE;
    snprintf(l->process_id, sizeof l->process_id, "%s", process_id);
    refuse_waiters(l);
}

void cs__tools_lease_kill(struct cs_tools_lease *l, const char *process_id)
{
    if (l->state == CS_TOOLS_LEASE_LIVE && strcmp(l->process_id, process_id) == 0) {
        l->state = CS_TOOLS_LEASE_HELD;
        l->killing = true;
    }
}

bool cs__tools_lease_holds(const struct cs_tools_lease *l, const char *process_id)
{
    if (l->live) {
        for (size_t i = 0; i < l->n_live; i++)
            if (process_id == NULL || strncmp(l->live[i], process_id, sizeof l->live[i]) == 0)
                return true;
        return false;
    }
    if (l->state != CS_TOOLS_LEASE_LIVE && !l->killing)
        return false;
    return process_id == NULL || strcmp(l->process_id, process_id) == 0;
}

int cs__tools_lease_share(struct cs_tools_lease *l, const char *process_id)
{
    if (l->n_live >= l->max_live)
        return CSW_ERROR_WORKSPACE_BUSY;
    snprintf(l->live[l->n_live], sizeof l->live[l->n_live], "%s", process_id);
    l->n_live++;
    return 0;
}

bool cs__tools_lease_unshare(struct cs_tools_lease *l, const char *process_id)
{
    for (size_t i = 0; i < l->n_live; i++) {
        if (strncmp(l->live[i], process_id, sizeof l->live[i]) != 0)
            continue;
        /* order does not matter: the last one takes the freed slot */
        if (i + 1 < l->n_live)
            memcpy(l->live[i], l->live[l->n_live - 1], sizeof l->live[i]);
        l->n_live--;
        return true;
    }
    return false;
}

void cs__tools_lease_lost(struct cs_tools_lease *l)
{
    if (l->live)
        l->n_live = 0;
    else if (cs__tools_lease_holds(l, NULL))
        cs__tools_lease_release(l);
}
