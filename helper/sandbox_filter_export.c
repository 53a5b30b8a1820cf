/*
 * codespace-sandbox-filter-export: writes sandbox_filter_bpf.h, the command's seccomp filter
 * (sandbox_filter.c) compiled by libseccomp at build time, one BPF program per variant (network
 * restricted, enabled or loopback, refusals reported by notification or plain EPERM). The helper
 * loads the program as it is instead of building and compiling the rules at every spawn (issue 20).
 *
 * A variant libseccomp cannot build here (a host without user notification refuses
 * SCMP_ACT_NOTIFY) is written as absent, and the helper builds that one at run time.
 *
 * Usage: codespace-sandbox-filter-export <output.h>. Exits 0, or 1 when the file cannot be written.
 */
#include <errno.h>
#include <linux/filter.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sandbox_filter.h"

/* Exports one variant's program into f as a static array; returns its instruction count, 0 if
 * the variant cannot be built here, -1 on an I/O error. */
static long emit(FILE *f, const char *name, enum cs_sbx_net net, bool notify)
{
    char err[256];
    scmp_filter_ctx ctx = cs_sbx_filter_new(net, notify, err, sizeof err);
    if (!ctx) {
        fprintf(stderr, "codespace-sandbox-filter-export: %s: %s (built at run time instead)\n",
                name, err);
        return 0;
    }
    FILE *tmp = tmpfile();
    long n = -1;
    if (!tmp || seccomp_export_bpf(ctx, fileno(tmp)) != 0 || fseek(tmp, 0, SEEK_END) != 0)
        goto out;
    long size = ftell(tmp);
    if (size <= 0 || size % (long)sizeof(struct sock_filter) != 0 || fseek(tmp, 0, SEEK_SET) != 0)
        goto out;
    n = size / (long)sizeof(struct sock_filter);
    fprintf(f, "static const struct sock_filter %s[] = {\n", name);
    for (long i = 0; i < n; i++) {
        struct sock_filter ins;
        if (fread(&ins, sizeof ins, 1, tmp) != 1) {
            n = -1;
            goto out;
        }
        fprintf(f, "    {0x%04x, %u, %u, 0x%08xu},\n", ins.code, ins.jt, ins.jf, ins.k);
    }
    fprintf(f, "};\n\n");
out:
    if (tmp)
        fclose(tmp);
    seccomp_release(ctx);
    if (n < 0)
        fprintf(stderr, "codespace-sandbox-filter-export: %s: cannot export the program\n", name);
    return n;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fputs("usage: codespace-sandbox-filter-export <output.h>\n", stderr);
        return 2;
    }
    char part[4096];
    if (snprintf(part, sizeof part, "%s.part", argv[1]) >= (int)sizeof part)
        return 1;
    FILE *f = fopen(part, "w");
    if (!f) {
        fprintf(stderr, "codespace-sandbox-filter-export: %s: %s\n", part, strerror(errno));
        return 1;
    }
    static const struct {
        const char *name;
        enum cs_sbx_net net;
        bool notify;
    } v[] = {{"cs_sbx_bpf_restricted", CS_SBX_NET_RESTRICTED, false},
             {"cs_sbx_bpf_restricted_notify", CS_SBX_NET_RESTRICTED, true},
             {"cs_sbx_bpf_enabled", CS_SBX_NET_ENABLED, false},
             {"cs_sbx_bpf_enabled_notify", CS_SBX_NET_ENABLED, true},
             {"cs_sbx_bpf_loopback", CS_SBX_NET_LOOPBACK, false},
             {"cs_sbx_bpf_loopback_notify", CS_SBX_NET_LOOPBACK, true}};
    enum { NV = sizeof v / sizeof *v };
    _Static_assert(NV == 2 * CS_SBX_NET_VARIANTS, "one program per network variant and notify");
    long n[NV];
    fputs("/* Written into the build tree by codespace-sandbox-filter-export (helper/\n"
          " * sandbox_filter_export.c) from sandbox_filter.c's rules: change those, not this. */\n"
          "#include <linux/filter.h>\n\n",
          f);
    int built = 0;
    for (int i = 0; i < NV; i++) {
        n[i] = emit(f, v[i].name, v[i].net, v[i].notify);
        if (n[i] < 0) {
            fclose(f);
            unlink(part);
            return 1;
        }
        built += n[i] > 0;
    }
    /* The table the helper indexes by [enum cs_sbx_net][notify]; len 0: build at run time. */
    fprintf(f,
            "static const struct {\n    const struct sock_filter *prog;\n    unsigned short len;\n"
            "} cs_sbx_bpf[%d][2] = {\n",
            CS_SBX_NET_VARIANTS);
    for (int i = 0; i < NV; i++) {
        if (i % 2 == 0)
            fputs("    {", f);
        if (n[i] > 0)
            fprintf(f, "{%s, %ld}", v[i].name, n[i]);
        else
            fputs("{NULL, 0}", f);
        fputs(i % 2 == 0 ? ", " : "},\n", f);
    }
    fputs("};\n", f);
    if (built == 0)
        fputs("codespace-sandbox-filter-export: no variant built here: the helper builds each "
              "at run time\n",
              stderr);
    if (fclose(f) != 0 || rename(part, argv[1]) != 0) {
        fprintf(stderr, "codespace-sandbox-filter-export: cannot write %s\n", argv[1]);
        unlink(part);
        return 1;
    }
    return 0;
}
