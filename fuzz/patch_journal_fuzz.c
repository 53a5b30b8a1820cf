/*
 * Fuzz harness for apply_patch's crash journal parser: the intent file recovery reads
 * (cs__patch_journal_parse_check, src/patch/patch_journal.c; docs/patch-format.md, "Crash
 * journal"). The journal sits in the workspace, so a command can write any bytes there.
 * Input: arbitrary bytes, parsed twice: as they are, and resealed (their last line replaced by a
 * correct "end sha256:<hex>" line over what comes before), so that mutations reach the item
 * grammar behind the checksum. Seeds are intents the engine wrote (fuzz/corpus/patch_journal).
 * Trust: the input is arbitrary. The harness aborts unless
 *   - the parse returns 0 or -1, a refusal has a non-empty reason and no output;
 *   - an accepted input begins with "cs-patch-journal 1\n" and ends with a line
 *     "end sha256:<hex>\n" whose hex is the SHA-256 of everything before it (computed here);
 *   - an accepted input reads back byte for byte (the parser takes only what the writer prints);
 *   - walked here independently of the parser, an accepted input holds an operation id without
 *     NUL, control bytes or "/", then exactly the counted items, each with a kind A, U, D or M
 *     and the kept-file letter that goes with it ("-" for an add, L or C otherwise), a mode of at
 *     most 07777, a temporary name ".cs-patch-<16 lowercase hex>.tmp" (recovery unlinks and
 *     creates it beside the path, so nothing else may reach outside the workspace), a path that
 *     is normalised and relative (non-empty, no NUL, no leading or trailing "/", no empty, "."
 *     or ".." component), a Move source exactly for a Move, and at most 2047 directories (one
 *     per proper prefix of a 4095-byte path), only for an add or a move, each a normalised path.
 * Leaks are found by the sanitizers. Entry point: LLVMFuzzerTestOneInput.
 */
#include <openssl/evp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "patch_journal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAGIC    "cs-patch-journal 1\n"
#define SEAL_LEN (11u + 64u + 1u) /* "end sha256:" <64 hex> "\n" */

static void check(bool ok)
{
    if (!ok)
        abort();
}

static void hex_sha256(const char *data, size_t len, char out[65])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdn = 0;
    check(EVP_Digest(data, len, md, &mdn, EVP_sha256(), NULL) == 1 && mdn == 32);
    for (unsigned i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", md[i]);
}

/* ---- an independent reading of an accepted intent ---- */

struct walk {
    const char *p, *end;
};

/* A run of decimal digits (no leading zero) then sep; at most max. */
static bool take_number(struct walk *w, unsigned base, uintmax_t max, char sep, uintmax_t *out)
{
    uintmax_t v = 0;
    const char *s = w->p;
    while (w->p < w->end && *w->p >= '0' && *w->p < (char)('0' + base)) {
        unsigned d = (unsigned)(*w->p - '0');
        if (v > (UINTMAX_MAX - d) / base)
            return false;
        v = v * base + d;
        w->p++;
    }
    size_t n = (size_t)(w->p - s);
    if (n == 0 || (n > 1 && s[0] == '0') || v > max || w->p >= w->end || *w->p != sep)
        return false;
    w->p++;
    *out = v;
    return true;
}

/* A normalised relative path: components separated by single "/", none empty, "." or "..". */
static bool normalised(const char *s, size_t n)
{
    if (n == 0 || memchr(s, '\0', n) != NULL)
        return false;
    size_t start = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i < n && s[i] != '/')
            continue;
        size_t c = i - start;
        if (c == 0 || (c == 1 && s[start] == '.') ||
            (c == 2 && s[start] == '.' && s[start + 1] == '.'))
            return false;
        start = i + 1;
    }
    return true;
}

/* "<len> <bytes>\n": true with *len set, the bytes normalised unless empty. */
static bool take_path(struct walk *w, size_t *len)
{
    uintmax_t n = 0;
    if (!take_number(w, 10, 4095, ' ', &n) || (uintmax_t)(w->end - w->p) < n + 1 || w->p[n] != '\n')
        return false;
    if (n > 0 && !normalised(w->p, (size_t)n))
        return false;
    w->p += n + 1;
    *len = (size_t)n;
    return true;
}

static bool walk_items(struct walk *w)
{
    uintmax_t count = 0;
    if ((size_t)(w->end - w->p) < 6 || memcmp(w->p, "items ", 6) != 0)
        return false;
    w->p += 6;
    if (!take_number(w, 10, 1u << 20, '\n', &count))
        return false;
    for (uintmax_t i = 0; i < count; i++) {
        if ((size_t)(w->end - w->p) < 4 || w->p[1] != ' ' || w->p[3] != ' ')
            return false;
        char kind = w->p[0], stash = w->p[2];
        if (strchr("AUDM", kind) == NULL || kind == '\0' ||
            (kind == 'A' ? stash != '-' : stash != 'L' && stash != 'C'))
            return false;
        w->p += 4;
        uintmax_t mode = 0, dev = 0, ino = 0, nd = 0;
        if (!take_number(w, 8, 07777, ' ', &mode) || !take_number(w, 10, UINTMAX_MAX, ' ', &dev) ||
            !take_number(w, 10, UINTMAX_MAX, ' ', &ino))
            return false;
        if ((size_t)(w->end - w->p) < 31 || memcmp(w->p, ".cs-patch-", 10) != 0 ||
            memcmp(w->p + 26, ".tmp ", 5) != 0)
            return false;
        for (size_t k = 10; k < 26; k++)
            if (!((w->p[k] >= '0' && w->p[k] <= '9') || (w->p[k] >= 'a' && w->p[k] <= 'f')))
                return false;
        w->p += 31;
        if (!take_number(w, 10, 2047, '\n', &nd) || (nd > 0 && kind != 'A' && kind != 'M'))
            return false;
        size_t path = 0, from = 0;
        if (!take_path(w, &path) || path == 0 || !take_path(w, &from) ||
            (kind == 'M') != (from > 0))
            return false;
        for (uintmax_t k = 0; k < nd; k++) {
            size_t dir = 0;
            if (!take_path(w, &dir) || dir == 0)
                return false;
        }
    }
    return w->p == w->end;
}

/* What an accepted input must be, judged without the parser. */
static void check_accepted(const char *data, size_t size)
{
    size_t magic = sizeof MAGIC - 1;
    check(size >= magic + SEAL_LEN && memcmp(data, MAGIC, magic) == 0);
    size_t body = size - SEAL_LEN;
    char hx[65];
    hex_sha256(data, body, hx);
    check(memcmp(data + body, "end sha256:", 11) == 0 && memcmp(data + body + 11, hx, 64) == 0 &&
          data[size - 1] == '\n');
    struct walk w = {data + magic, data + body};
    check((size_t)(w.end - w.p) > 4 && memcmp(w.p, "op ", 3) == 0);
    w.p += 3;
    const char *op = w.p;
    while (w.p < w.end && *w.p != '\n') {
        unsigned char c = (unsigned char)*w.p++;
        check(c >= 0x20 && c != 0x7f && c != '/');
    }
    check(w.p < w.end && w.p > op && w.p - op < 48);
    w.p++;
    check(walk_items(&w));
}

static void parse_one(const char *data, size_t size)
{
    const char *why = NULL;
    char *canon = NULL;
    size_t clen = 0;
    int rc = cs__patch_journal_parse_check(data, size, &canon, &clen, &why);
    check(rc == 0 || rc == -1);
    check(why != NULL);
    if (rc != 0) {
        check(canon == NULL && why[0] != '\0' && strlen(why) < 200);
        return;
    }
    check(canon != NULL && canon[clen] == '\0');
    check(clen == size && memcmp(canon, data, size) == 0);
    free(canon);
    check_accepted(data, size);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *in = (const char *)data;
    parse_one(in, size);
    /* Resealed: everything up to the start of the last line, then a correct checksum line. */
    size_t body = size;
    if (body > 0 && in[body - 1] == '\n')
        body--;
    while (body > 0 && in[body - 1] != '\n')
        body--;
    char *sealed = malloc(body + SEAL_LEN + 1);
    check(sealed != NULL);
    if (body > 0)
        memcpy(sealed, in, body);
    char hx[65];
    hex_sha256(sealed, body, hx);
    memcpy(sealed + body, "end sha256:", 11);
    memcpy(sealed + body + 11, hx, 64);
    sealed[body + SEAL_LEN - 1] = '\n';
    parse_one(sealed, body + SEAL_LEN);
    free(sealed);
    return 0;
}
