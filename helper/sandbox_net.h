/*
 * sandbox_net: the seccomp filter's network variants, shared by the helper (sandbox.h) and the
 * filter's rules (sandbox_filter.h) without pulling libseccomp into the helper's pure parts.
 */
#ifndef CS_SANDBOX_NET_H
#define CS_SANDBOX_NET_H

/* The filter's network variants, the index of the precompiled table (sandbox_filter_bpf.h). */
enum cs_sbx_net {
    CS_SBX_NET_RESTRICTED = 0, /* socket(): AF_UNIX only */
    CS_SBX_NET_ENABLED = 1,    /* socket(): AF_UNIX, AF_INET, AF_INET6 (the proxy) */
    CS_SBX_NET_LOOPBACK = 2,   /* as enabled; with notify, connect()/sendto() with an IPv4 or
                                * IPv6 sized address notify the helper (no_route reports) */
};
#define CS_SBX_NET_VARIANTS 3

#endif
