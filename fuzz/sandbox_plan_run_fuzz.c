/*
 * libFuzzer harness for the plan path of `codespace-linux-sandbox run`: the bytes of a plan file
 * go through cs_sbx_plan_parse (helper/sandbox_plan.c), exactly what run does after reading and
 * unlinking the file: JSON, the generated decoder, then the semantic rules.
 *
 * Invariants asserted (docs/security-model.md, S-invariants): no input crashes or leaks; an
 * accepted plan has a non-empty argv without NUL bytes, an absolute workspace root other than
 * "/", a cwd inside it, environment names without '=' and a well-formed network_allow; a
 * refusal always says why and leaves the plan zeroed.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sandbox.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct csw_sandbox_plan plan;
    struct cs_diag err = {0};
    if (cs_sbx_plan_parse((const char *)data, size, &plan, &err) < 0) {
        static const struct csw_sandbox_plan zero;
        if (!err.set || err.text[0] == '\0' || memcmp(&plan, &zero, sizeof plan) != 0)
            abort();
        return 0;
    }
    if (plan.argv.n == 0 || plan.argv.v[0].n == 0)
        abort();
    for (size_t i = 0; i < plan.argv.n; i++)
        if (strlen(plan.argv.v[i].s) != plan.argv.v[i].n)
            abort();
    const char *root = plan.workspace_root.s;
    size_t rl = plan.workspace_root.n;
    if (root[0] != '/' || rl < 2 || strncmp(plan.cwd.s, root, rl) != 0 ||
        (plan.cwd.s[rl] != '\0' && plan.cwd.s[rl] != '/') || strstr(root, "/../") ||
        strstr(root, "//"))
        abort();
    for (size_t i = 0; i < plan.env.n; i++)
        if (plan.env.v[i].key.n == 0 || strchr(plan.env.v[i].key.s, '='))
            abort();
    for (size_t i = 0; plan.has_network_allow && i < plan.network_allow.n; i++) {
        struct cs_netallow_entry a;
        if (cs_netallow_entry_parse(plan.network_allow.v[i].s, plan.network_allow.v[i].n, &a,
                                    NULL) < 0)
            abort();
    }
    csw_sandbox_plan_free(&plan);
    return 0;
}
