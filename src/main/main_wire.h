/*
 * main_wire: the gateway's start-up wiring that is not argument parsing: the sandbox helper's
 * probe (docs/contract/sandbox.md §2) and the runner every tool call goes through (in-process,
 * the uds worker, a tcp:// worker, and the workspaces placed on their own remote workers:
 * docs/scale-out.md). Moved out of cs_tools_register so the tool layer only handles calls.
 *
 * Trust: the configuration comes from the operator (checked by policy).
 * Entry points: cs_main_sibling, cs_main_probe, cs_main_runner.
 */
#ifndef CS_MAIN_WIRE_H
#define CS_MAIN_WIRE_H

#include <stdbool.h>

#include "base_diag.h"
#include "base_loop.h"
#include "policy.h"
#include "supervisor.h"
#include "tools.h"

/* The probe's answer. */
struct cs_main_sandbox {
    char *helper; /* the helper's path (malloc'd; NULL: none found), kept only when sandboxed */
    bool sandboxed;
    struct cs_supervisor_isolation iso;
    char reason[2048]; /* why not, when !sandboxed: the helper's words */
};

/* The file name beside our own executable (malloc'd), or NULL. */
char *cs_main_sibling(const char *name);
/* Probes cfg's helper (--sandbox-bin, else the sibling codespace-linux-sandbox) into sb. */
void cs_main_probe(const struct cs_config *cfg, struct cs_main_sandbox *sb);
/* Frees what sb holds. */
void cs_main_sandbox_clear(struct cs_main_sandbox *sb);
/* Builds the runner for cfg into t->runner (and t->remote for remote workspaces), sandboxed
 * through sb's helper when it has one (a tcp:// runner never). Returns 0, or non-zero with
 * err saying why. */
int cs_main_runner(struct cs_tools *t, const struct cs_config *cfg,
                   const struct cs_main_sandbox *sb, struct cs_loop *loop, struct cs_diag *err);

#endif
