/*
 * sandbox_filter: the command's seccomp filter (sandbox_filter.c). Shared by the helper and the
 * build-time exporter of sandbox_filter_bpf.h (sandbox_filter_export.c), which links nothing else
 * of the helper.
 */
#ifndef CS_SANDBOX_FILTER_H
#define CS_SANDBOX_FILTER_H

#include <seccomp.h>
#include <stdbool.h>
#include <stddef.h>

#include "sandbox_net.h"

/* The filter's rules in a new libseccomp context: socket() limited as net says, and the reported
 * refusals notifying (notify) or failing with EPERM. Returns the context (release with
 * seccomp_release), or NULL with a message in err. */
scmp_filter_ctx cs_sbx_filter_new(enum cs_sbx_net net, bool notify, char *err, size_t cap);

#endif
