/*
 * base_id: the server's ids, "<prefix><uuid v4>" from a cryptographic random source
 * (docs/contract/tools.md section 2: process_id = proc-<uuid>, operation_id = op-<uuid>).
 * Entry points: cs_id_new.
 */
#include "base_id.h"

#include <errno.h>
#include <string.h>
#include <sys/random.h>

int cs_id_new(const char *prefix, char *out, size_t cap)
{
    static const char digits[] = "0123456789abcdef";
    size_t plen = strlen(prefix);
    if (cap < plen + 37)
        return -1;
    unsigned char b[16];
    size_t got = 0;
    while (got < sizeof b) {
        ssize_t r = getrandom(b + got, sizeof b - got, 0);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        got += (size_t)r;
    }
    b[6] = (unsigned char)((b[6] & 0x0F) | 0x40); /* version 4 */
    b[8] = (unsigned char)((b[8] & 0x3F) | 0x80); /* variant 10 (RFC 9562) */
    char *p = out;
    memcpy(p, prefix, plen);
    p += plen;
    for (size_t i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            *p++ = '-';
        *p++ = digits[b[i] >> 4];
        *p++ = digits[b[i] & 15];
    }
    *p = '\0';
    return 0;
}
