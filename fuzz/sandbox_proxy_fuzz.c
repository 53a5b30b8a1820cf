/*
 * libFuzzer harness for the sandbox proxy's request parser and network_allow rules
 * (helper/sandbox_proxy_parse.c). Input: "<allow entries, one per line>\0<request bytes>" (no
 * NUL: the whole input is the request and the list is empty).
 *
 * Invariants asserted (docs/security-model.md, S-invariants): parsing never crashes or reads
 * past the input; a parsed request has a non-empty lower-case host without a trailing dot, a
 * non-zero port and a head inside the input; a rewritten head is one HTTP head ending in a blank
 * line with "Connection: close"; a strict prefix of a complete head is never complete (parsing
 * does not depend on how the bytes arrive); the allow rules never admit an internal address the
 * list does not name.
 */
#include <arpa/inet.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sandbox.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *in = (const char *)data;
    const char *nul = memchr(in, '\0', size);
    struct cs_sbx_allow allow[16];
    size_t nallow = 0;
    const char *req = in;
    size_t rn = size;
    if (nul) {
        const char *p = in;
        while (p < nul && nallow < 16) {
            const char *e = memchr(p, '\n', (size_t)(nul - p));
            size_t l = e ? (size_t)(e - p) : (size_t)(nul - p);
            if (cs_sbx_allow_parse(p, l, &allow[nallow]) == 0) {
                if (allow[nallow].host[0] == '\0')
                    abort();
                nallow++;
            }
            p += l + 1;
        }
        req = nul + 1;
        rn = size - (size_t)(req - in);
    }
    /* a copy of exactly rn bytes, so ASan sees any over-read */
    char *buf = malloc(rn ? rn : 1);
    if (!buf)
        abort();
    memcpy(buf, req, rn);
    struct cs_sbx_request r;
    enum cs_sbx_parse st = cs_sbx_parse_request(buf, rn, &r);
    if (st == CS_SBX_PARSE_BAD && !r.reason)
        abort();
    if (st == CS_SBX_PARSE_MORE && rn >= CS_SBX_HEAD_MAX)
        abort();
    if (st == CS_SBX_PARSE_OK) {
        size_t hl = strlen(r.host);
        if (hl == 0 || r.host[hl - 1] == '.' || r.port == 0 || r.head_len > rn ||
            r.head_len > CS_SBX_HEAD_MAX)
            abort();
        for (size_t i = 0; i < hl; i++)
            if (r.host[i] >= 'A' && r.host[i] <= 'Z')
                abort();
        if (r.connect != (r.rewritten == NULL))
            abort();
        if (r.rewritten) {
            if (r.rewritten_len < 4 || memcmp(r.rewritten + r.rewritten_len - 4, "\r\n\r\n", 4) ||
                !strstr(r.rewritten, "Connection: close\r\n") ||
                strlen(r.rewritten) != r.rewritten_len)
                abort();
            struct cs_sbx_request again;
            /* the rewritten head is origin-form: the proxy never re-parses it as a request */
            (void)cs_sbx_parse_request(r.rewritten, r.rewritten_len, &again);
            free(again.rewritten);
        }
        struct cs_sbx_request pre;
        if (cs_sbx_parse_request(buf, r.head_len - 1, &pre) != CS_SBX_PARSE_MORE)
            abort();
        free(pre.rewritten);
        /* the resolved-address rule on the host if it is a literal */
        struct sockaddr_in a4;
        memset(&a4, 0, sizeof a4);
        a4.sin_family = AF_INET;
        if (inet_pton(AF_INET, r.host, &a4.sin_addr) == 1 && nallow > 0 &&
            cs_sbx_addr_is_internal((struct sockaddr *)&a4) &&
            cs_sbx_allow_address(allow, nallow, (struct sockaddr *)&a4, r.port)) {
            bool listed = false;
            for (size_t i = 0; i < nallow; i++)
                listed |= allow[i].kind == CS_SBX_ALLOW_IP;
            if (!listed)
                abort(); /* an internal address admitted without any IP entry */
        }
        (void)cs_sbx_allow_match(allow, nallow, r.host, r.port);
        free(r.rewritten);
    }
    free(buf);
    return 0;
}
