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

/* The filter's network variants, the index of the precompiled table (sandbox_filter_bpf.h). */
enum cs_sbx_net {
    CS_SBX_NET_RESTRICTED = 0, /* socket(): AF_UNIX only */
    CS_SBX_NET_ENABLED = 1,    /* socket(): AF_UNIX, AF_INET, AF_INET6 (the proxy) */
    CS_SBX_NET_LOOPBACK = 2,   /* as enabled; with notify, connect()/sendto() with an IPv4 or
                                * IPv6 sized address notify the helper (no_route reports) */
};
#define CS_SBX_NET_VARIANTS 3

/* The filter's rules in a new libseccomp context: socket() limited as net says, and the reported
 * refusals notifying (notify) or failing with EPERM. Returns the context (release with
 * seccomp_release), or NULL with a message in err. */
scmp_filter_ctx cs_sbx_filter_new(enum cs_sbx_net net, bool notify, char *err, size_t cap);

#endif
