/*
 * tools_lease: one workspace's exclusive mutation lease (docs/contract/runtime.md §5) as a pure
 * state machine, apart from the handlers that use it (tools.c). Free; held by a running mutation
 * (apply_patch, or an exec_command being spawned) while later mutations wait in a FIFO of at most
 * CS_TOOLS_LEASE_MAX_WAITERS; or held by a live process until it finishes, while new mutations
 * are refused with WORKSPACE_BUSY (and the FIFO was failed when it went live).
 *
 * A shared workspace (workflows.md section 3, processes "shared") uses the same lease for its
 * patches only: live processes never hold it, so patches serialize with each other through the
 * FIFO while processes run. Its live processes are a set of at most max_live ids instead
 * (cs__tools_lease_share / _unshare), which exec_command fills without waiting.
 *
 * Trust: the callers are the tool handlers; calls, inputs and process ids are opaque here (only
 * compared or handed back through the hooks). No I/O, no allocation, no MCP: a queued call is run
 * or refused through the lease's hooks, so the unit test drives it with fakes (test_tools).
 *
 * Entry points: cs__tools_lease_acquire, cs__tools_lease_unqueue, cs__tools_lease_release,
 * cs__tools_lease_go_live, cs__tools_lease_kill, cs__tools_lease_holds, cs__tools_lease_share,
 * cs__tools_lease_unshare, cs__tools_lease_lost. Internal to the tools
 * module (and its unit test).
 */
#ifndef CS_TOOLS_LEASE_H
#define CS_TOOLS_LEASE_H

#include <stdbool.h>
#include <stddef.h>

/* Most calls waiting on one workspace's lease (docs/contract/runtime.md §5); past it,
 * RESOURCE_QUEUE_FULL. */
#define CS_TOOLS_LEASE_MAX_WAITERS 64

struct cs_tools;
struct cs_workspace;
struct cs_mcp_call;
struct cs_tools_lease;

/* Runs a mutation that now holds its workspace's lease (see tools.c). */
typedef void (*cs_tools_locked_fn)(struct cs_tools *t, const struct cs_workspace *ws,
                                   struct cs_mcp_call *call, const void *input);

/* What the lease does with a waiter it hands on; both borrowed for the lease's lifetime. */
struct cs_tools_lease_hooks {
    /* The waiter's turn: the lease is HELD for call now. Runs run, which releases the lease when
     * its work is over, possibly before returning (cs__tools_lease_release is re-entrant). */
    void (*grant)(struct cs_tools_lease *l, struct cs_mcp_call *call, const void *input,
                  cs_tools_locked_fn run);
    /* A live process took the lease: call, which was waiting, is answered WORKSPACE_BUSY. */
    void (*busy)(struct cs_tools_lease *l, struct cs_mcp_call *call);
};

enum cs_tools_lease_state {
    CS_TOOLS_LEASE_FREE,
    CS_TOOLS_LEASE_HELD,
    CS_TOOLS_LEASE_LIVE,
};

struct cs_tools_lease {
    const struct cs_tools_lease_hooks *hooks;
    struct cs_tools *t;            /* for the hooks; the lease never looks inside */
    const struct cs_workspace *ws; /* likewise */
    enum cs_tools_lease_state state;
    char process_id[48]; /* the live process, when LIVE (or killing) */
    bool draining;       /* cs__tools_lease_release is handing it to waiters */
    /* HELD by process_id, an exec_command the client cancelled, being killed: until it has
     * finished, later mutations queue (as behind a running mutation) instead of failing
     * WORKSPACE_BUSY; its exit releases the lease to them. */
    bool killing;
    struct {
        struct cs_mcp_call *call;
        const void *input;
        cs_tools_locked_fn run;
    } wait[CS_TOOLS_LEASE_MAX_WAITERS];
    size_t head, n_wait;
    /* processes "shared": the live processes' ids, live[0..n_live), at most max_live (>= 1)
     * slots the caller allocated (and frees); NULL in an exclusive workspace. */
    char (*live)[48];
    size_t n_live, max_live;
};

/*
 * Takes l for call: 0 when it was free (the caller now holds it: run, and release it with
 * cs__tools_lease_release when the work is over, now or later), 1 when a mutation holds it and
 * the call was queued (FIFO; a release grants it later through hooks->grant, and input must live
 * until then), or a catalogue code with the call not queued: CSW_ERROR_WORKSPACE_BUSY (a live
 * process holds it), CSW_ERROR_RESOURCE_QUEUE_FULL (CS_TOOLS_LEASE_MAX_WAITERS wait already).
 */
int cs__tools_lease_acquire(struct cs_tools_lease *l, struct cs_mcp_call *call, const void *input,
                            cs_tools_locked_fn run);

/* Removes call from l's FIFO (a queued mutation its client cancelled); the later waiters keep
 * their order. Returns true when it was queued. */
bool cs__tools_lease_unqueue(struct cs_tools_lease *l, const struct cs_mcp_call *call);

/* The lease goes free (a mutation finished, a spawn failed, a live process ended) and passes to
 * the waiters in order, each through hooks->grant. Once a process holds it, the remaining waiters
 * get hooks->busy. Re-entrant: a waiter that completes at once releases it again inside the loop
 * (that inner call only frees the lease; the outer loop hands it on). */
void cs__tools_lease_release(struct cs_tools_lease *l);

/* The holder started a process: l is LIVE, held by process_id (copied, cut to fit) until its
 * exit; every waiter gets hooks->busy now. */
void cs__tools_lease_go_live(struct cs_tools_lease *l, const char *process_id);

/* The client cancelled the exec_command that started process_id: if that process holds l live,
 * l becomes HELD and killing, so later mutations queue behind the kill. */
void cs__tools_lease_kill(struct cs_tools_lease *l, const char *process_id);

/* True when a process holds l (live or being killed), or in a shared workspace is one of its live
 * processes: process_id, or any when NULL. */
bool cs__tools_lease_holds(const struct cs_tools_lease *l, const char *process_id);

/* A shared workspace (l->live set): process_id (copied, cut to fit) is about to start. Returns 0
 * when it was added, or CSW_ERROR_WORKSPACE_BUSY when max_live processes live already. Never
 * touches the mutation lease or its waiters. */
int cs__tools_lease_share(struct cs_tools_lease *l, const char *process_id);

/* A shared workspace: process_id ended or never started; returns true when it was live. */
bool cs__tools_lease_unshare(struct cs_tools_lease *l, const char *process_id);

/* The runner holding l's processes is gone, and every process with it: a shared workspace's set
 * empties, an exclusive lease held by a process is released. */
void cs__tools_lease_lost(struct cs_tools_lease *l);

#endif
