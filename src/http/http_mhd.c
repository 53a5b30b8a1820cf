/*
 * http_mhd: libmicrohttpd loaded with dlopen when `--http` starts the transport, not linked.
 * Debian's libmicrohttpd brings GnuTLS and seven more libraries with it (p11-kit, nettle, gmp,
 * ...) and initializes GnuTLS from its constructor; linked, that cost every server about 2.3 MiB
 * of resident memory and a TLS start-up it never uses, since HTTPS is not offered and stdio is
 * the default transport. The library is the one the build compiled against (its soname, from
 * CMake: CS_MHD_SONAME), resolved by the dynamic loader's usual search; every function is
 * checked to exist before any is used.
 *
 * Trust: none of the input is the client's. Entry point: cs_mhd_load.
 */
#include "http_mhd.h"

#include <dlfcn.h>
#include <stdio.h>

struct cs_mhd_api cs_mhd;

int cs_mhd_load(struct cs_diag *err)
{
    static void *lib;
    if (lib)
        return 0;
    void *h = dlopen(CS_MHD_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        cs_diag_set(err, CSW_ERROR_INTERNAL, "http: cannot load %s: %s", CS_MHD_SONAME,
                    why ? why : "?");
        return -1;
    }
    struct cs_mhd_api api;
#define CS_MHD_RESOLVE(f)                                                                          \
    *(void **)&api.f = dlsym(h, #f);                                                               \
    if (!api.f) {                                                                                  \
        cs_diag_set(err, CSW_ERROR_INTERNAL, "http: %s has no %s", CS_MHD_SONAME, #f);             \
        dlclose(h);                                                                                \
        return -1;                                                                                 \
    }
    CS_MHD_FUNCTIONS(CS_MHD_RESOLVE)
#undef CS_MHD_RESOLVE
    cs_mhd = api;
    lib = h;
    return 0;
}
