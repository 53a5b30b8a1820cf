/*
 * Fuzz harness for the deny matcher (src/fs/fs_deny.c; docs/contract/tools.md section 5).
 * Input: a rule and a path separated by the first '\n' (no '\n': the whole input is the rule and
 * the path is "a/.env"). The path is normalised as the file tools do (cs_fs_path_normalize); a
 * path that does not normalise, or the root itself, is not matched. For a rule that
 * cs_fs_deny_rule_valid accepts, the harness aborts unless:
 *   - the answer is deterministic and equals what a compiled rule set (cs_fs_deny_new +
 *     cs_fs_deny_path) says, so the tools, the scan and the table tests share one answer;
 *   - a denied path denies everything below it (path + "/x" is denied too): a denied directory
 *     can never be walked around;
 *   - a rule with no '/' but a trailing one that denies p also denies "d/" + p (any depth).
 * Every input also goes through cs_fs_deny_rule_valid alone (it must not crash, whatever the
 * bytes). Security model invariant P8. Trust: the input is arbitrary. Entry point:
 * LLVMFuzzerTestOneInput.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fs.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 8192)
        return 0;
    const char *in = (const char *)data;
    const char *nl = memchr(in, '\n', size);
    size_t rn = nl ? (size_t)(nl - in) : size;
    const char *path = nl ? nl + 1 : "a/.env";
    size_t pn = nl ? size - rn - 1 : 6;
    const char *why = NULL;
    if (!cs_fs_deny_rule_valid(in, rn, &why)) {
        if (why == NULL)
            abort();
        return 0;
    }
    struct cs_fs_path p;
    if (cs_fs_path_normalize(path, pn, &p, NULL) != 0 || p.len == 0 || p.len + 8 > CS_FS_PATH_MAX)
        return 0;
    bool m = cs_fs_deny_rule_match(in, rn, p.rel, p.len);
    if (m != cs_fs_deny_rule_match(in, rn, p.rel, p.len))
        abort();
    struct cs_str rule = {(char *)in, rn};
    struct cs_fs_deny *d = cs_fs_deny_new(&rule, 1);
    if (d == NULL)
        abort(); /* a valid rule always compiles (no allocation failure here) */
    if ((cs_fs_deny_path(d, p.rel, p.len) != NULL) != m)
        abort();
    cs_fs_deny_free(d);
    char below[CS_FS_PATH_MAX + 1];
    memcpy(below, p.rel, p.len);
    memcpy(below + p.len, "/x", 3);
    if (m && !cs_fs_deny_rule_match(in, rn, below, p.len + 2))
        abort();
    size_t t = rn;
    while (t > 0 && in[t - 1] == '/')
        t--;
    if (m && memchr(in, '/', t) == NULL) {
        char deeper[CS_FS_PATH_MAX + 1];
        memcpy(deeper, "d/", 2);
        memcpy(deeper + 2, p.rel, p.len + 1);
        if (!cs_fs_deny_rule_match(in, rn, deeper, p.len + 2))
            abort();
    }
    return 0;
}
