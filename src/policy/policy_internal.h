/*
 * policy_internal: what the parts of the policy module share (not for other modules).
 *
 * Trust: as policy.h; these helpers only format messages and load the registry.
 * Entry points: cs__policy_errf, cs__policy_quote, cs__policy_registry_load,
 * cs__policy_workspace_clear, cs__policy_remote_clear.
 */
#ifndef CS_POLICY_INTERNAL_H
#define CS_POLICY_INTERNAL_H

#include <stddef.h>

#include "policy.h"

/* Sets err->text (err may be NULL) from fmt; always returns CS_CONFIG_ERROR. */
int cs__policy_errf(struct cs_config_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/*
 * Writes the n bytes at s into buf as a double-quoted string for a message: '"' and '\' are
 * escaped, control bytes show as '?', and a value too long for cap ends with "..." before the
 * closing quote. Returns buf (cap must be at least 8).
 */
const char *cs__policy_quote(char *buf, size_t cap, const char *s, size_t n);

/*
 * Fills cfg->environments ("local" first) and cfg->workspaces from the registry file at path
 * (NULL: none) and the quick-start directory ws_dir (NULL: none; ws_source names the flag or
 * variable it came from). Returns 0, or CS_CONFIG_ERROR with err set; what was added so far
 * stays in cfg for cs_config_free.
 */
int cs__policy_registry_load(struct cs_config *cfg, const char *path, const char *ws_dir,
                             const char *ws_source, struct cs_config_error *err);

/* Releases what ws owns and zeroes it. Accepts a zeroed or half-built workspace. */
void cs__policy_workspace_clear(struct cs_workspace *ws);

/* Releases what rm owns (not rm itself) and zeroes it, the key's pin included. */
void cs__policy_remote_clear(struct cs_remote *rm);

#endif
