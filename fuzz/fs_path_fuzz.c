/*
 * Fuzz harness for the fs module's pure parsers: the path normaliser (cs_fs_path_normalize), the
 * glob matcher (cs_fs_glob_match) and the lossy UTF-8 decoder (cs_fs_utf8_lossy).
 * Input: byte 0 picks the target (mod 3). 0: the rest is a path. 1: byte 1 is the glob's length,
 * then the glob, then the path. 2: the rest is bytes to decode.
 * Trust: the input is arbitrary. The harness aborts unless
 *   - the normaliser agrees with a plain left-to-right model (a stack of components), its result
 *     has no empty, "." or ".." component, no NUL, no leading or trailing '/', fits the cap, and
 *     normalises to itself;
 *   - the greedy glob matcher agrees with a memoised dynamic-programming model written separately
 *     from the documented grammar (on globs and paths of up to 64 bytes);
 *   - the decoder's output is well-formed UTF-8 no longer than 3 bytes per input byte, equals a
 *     well-formed input, and is lossy exactly when the input is not well-formed; with the tail
 *     held (process output), it leaves out at most a cut sequence's lead and continuation bytes.
 * Entry point: LLVMFuzzerTestOneInput.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base_utf8.h"
#include "fs.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(bool ok)
{
    if (!ok)
        abort();
}

/* ---- normaliser ---- */

static void fuzz_normalize(const uint8_t *s, size_t n)
{
    static struct cs_fs_path p, again;
    struct cs_diag msg = {0};
    const char *in = (const char *)s;
    int rc = cs_fs_path_normalize(in, n, &p, &msg);
    check(rc == 0 || (msg.set && msg.code == (enum csw_error)rc &&
                      cs__fs_utf8_valid(msg.text, strlen(msg.text))));

    /* The model: left to right with a stack of components. */
    int want = 0;
    size_t *starts = malloc((n + 1) * sizeof *starts);
    size_t *lens = malloc((n + 1) * sizeof *lens);
    check(starts != NULL && lens != NULL);
    size_t depth = 0;
    bool dir_only = false;
    if (n == 0 || memchr(in, '\0', n) != NULL || in[0] == '/') {
        want = CSW_ERROR_PATH_ESCAPE;
    } else {
        size_t at = 0;
        for (;;) {
            const char *slash = memchr(in + at, '/', n - at);
            size_t end = slash ? (size_t)(slash - in) : n;
            size_t len = end - at;
            bool dot = len == 1 && in[at] == '.';
            bool dotdot = len == 2 && in[at] == '.' && in[at + 1] == '.';
            dir_only = len == 0 || dot || dotdot;
            if (dotdot) {
                if (depth == 0) {
                    want = CSW_ERROR_PATH_ESCAPE;
                    break;
                }
                depth--;
            } else if (len > 0 && !dot) {
                starts[depth] = at;
                lens[depth] = len;
                depth++;
            }
            if (!slash)
                break;
            at = end + 1;
        }
    }
    size_t total = 0;
    if (want == 0) {
        for (size_t i = 0; i < depth; i++)
            total += lens[i] + (i ? 1 : 0);
        if (total > CS_FS_PATH_MAX)
            want = CSW_ERROR_FILE_OPERATION_FAILED;
    }
    check(rc == want);
    if (rc == 0) {
        check(p.len == total && p.rel[p.len] == '\0' && p.dir_only == dir_only);
        size_t o = 0;
        for (size_t i = 0; i < depth; i++) {
            if (i)
                check(p.rel[o++] == '/');
            check(memcmp(p.rel + o, in + starts[i], lens[i]) == 0);
            o += lens[i];
        }
        check(memchr(p.rel, '\0', p.len) == NULL);
        if (p.len > 0) {
            check(p.rel[0] != '/' && p.rel[p.len - 1] != '/');
            check(cs_fs_path_normalize(p.rel, p.len, &again, NULL) == 0);
            check(again.len == p.len && memcmp(again.rel, p.rel, p.len) == 0);
            check(!again.dir_only);
        }
    }
    free(starts);
    free(lens);
}

/* ---- glob model: the grammar read again from the documentation, matched by memoised DP ---- */

#define MAXG 64

/* A character: a well-formed UTF-8 sequence, or one byte of an ill-formed one. */
static size_t m_char(const uint8_t *s, size_t n, uint32_t *c)
{
    uint32_t cp;
    bool valid;
    size_t k = cs__fs_utf8_step(s, n, &cp, &valid);
    *c = valid ? cp : 0x110000u + s[0];
    return valid ? k : 1;
}

/* Parses the class at p[0] == '['; returns its length or 0 if unclosed; *hit for c. */
static size_t m_class(const uint8_t *p, size_t n, uint32_t c, bool *hit)
{
    size_t i = 1;
    bool neg = false, in = false;
    if (i < n && (p[i] == '!' || p[i] == '^'))
        neg = true, i++;
    size_t first = i;
    for (;;) {
        if (i >= n)
            return 0;
        if (p[i] == ']' && i != first)
            break;
        uint32_t lo, hi;
        if (p[i] == '\\' && i + 1 < n)
            i += 1 + m_char(p + i + 1, n - i - 1, &lo);
        else
            i += m_char(p + i, n - i, &lo);
        hi = lo;
        if (i + 1 < n && p[i] == '-' && p[i + 1] != ']') {
            i++;
            if (p[i] == '\\' && i + 1 < n)
                i += 1 + m_char(p + i + 1, n - i - 1, &hi);
            else
                i += m_char(p + i, n - i, &hi);
        }
        in = in || (lo <= c && c <= hi);
    }
    *hit = in != neg;
    return i + 1;
}

struct seg_dp {
    const uint8_t *p, *s;
    size_t pn, sn;
    signed char memo[MAXG + 1][MAXG + 1];
};

static bool m_seg_at(struct seg_dp *d, size_t i, size_t j)
{
    if (d->memo[i][j] >= 0)
        return d->memo[i][j];
    bool r;
    if (i == d->pn) {
        r = j == d->sn;
    } else if (d->p[i] == '*') {
        uint32_t c;
        r = m_seg_at(d, i + 1, j) ||
            (j < d->sn && m_seg_at(d, i, j + m_char(d->s + j, d->sn - j, &c)));
    } else if (j == d->sn) {
        r = false;
    } else {
        uint32_t c, lit;
        size_t sk = m_char(d->s + j, d->sn - j, &c);
        bool hit = false;
        size_t pk;
        if (d->p[i] == '?') {
            pk = 1;
            hit = true;
        } else if (d->p[i] == '[' && (pk = m_class(d->p + i, d->pn - i, c, &hit)) != 0) {
            /* set */
        } else {
            if (d->p[i] == '\\' && i + 1 < d->pn)
                pk = 1 + m_char(d->p + i + 1, d->pn - i - 1, &lit);
            else
                pk = m_char(d->p + i, d->pn - i, &lit);
            hit = lit == c;
        }
        r = hit && m_seg_at(d, i + pk, j + sk);
    }
    d->memo[i][j] = r;
    return r;
}

static bool m_seg(const uint8_t *p, size_t pn, const uint8_t *s, size_t sn)
{
    static struct seg_dp d;
    d.p = p;
    d.s = s;
    d.pn = pn;
    d.sn = sn;
    memset(d.memo, -1, sizeof d.memo);
    return m_seg_at(&d, 0, 0);
}

/* Segments of x as (start, len) pairs; returns the count. */
static size_t split(const uint8_t *x, size_t n, size_t st[], size_t ln[])
{
    size_t k = 0, at = 0;
    for (;;) {
        const uint8_t *sl = memchr(x + at, '/', n - at);
        size_t end = sl ? (size_t)(sl - x) : n;
        st[k] = at;
        ln[k] = end - at;
        k++;
        if (!sl)
            return k;
        at = end + 1;
    }
}

static bool m_glob(const uint8_t *g, size_t gn, const uint8_t *s, size_t sn)
{
    if (gn == 0)
        return true;
    if (memchr(g, '/', gn) == NULL) {
        size_t b = sn;
        while (b > 0 && s[b - 1] != '/')
            b--;
        return m_seg(g, gn, s + b, sn - b);
    }
    for (;;) { /* leading "/" and "./" */
        if (gn > 0 && g[0] == '/')
            g++, gn--;
        else if (gn > 1 && g[0] == '.' && g[1] == '/')
            g += 2, gn -= 2;
        else
            break;
    }
    if (gn == 0)
        return true;
    size_t gs[MAXG + 1], gl[MAXG + 1], ss[MAXG + 1], sl[MAXG + 1];
    size_t ng = split(g, gn, gs, gl), ns = split(s, sn, ss, sl);
    bool star[MAXG + 1];
    for (size_t i = 0; i < ng; i++)
        star[i] = (gl[i] == 2 && g[gs[i]] == '*' && g[gs[i] + 1] == '*') ||
                  (i == ng - 1 && gl[i] == 0); /* a trailing '/' */
    /* M[i][j]: glob segments i.. match path segments j.. */
    static bool m[MAXG + 2][MAXG + 2];
    for (size_t i = ng + 1; i-- > 0;) {
        for (size_t j = ns + 1; j-- > 0;) {
            bool r;
            if (i == ng)
                r = j == ns;
            else if (star[i])
                r = m[i + 1][j] || (j < ns && m[i][j + 1]);
            else
                r = j < ns && m_seg(g + gs[i], gl[i], s + ss[j], sl[j]) && m[i + 1][j + 1];
            m[i][j] = r;
        }
    }
    return m[0][0];
}

static void fuzz_glob(const uint8_t *s, size_t n)
{
    size_t gn = n > 0 ? s[0] : 0;
    s += n > 0 ? 1 : 0;
    n -= n > 0 ? 1 : 0;
    if (gn > n)
        gn = n;
    const char *g = (const char *)s;
    const char *path = (const char *)s + gn;
    size_t pn = n - gn;
    bool got = cs_fs_glob_match(g, gn, path, pn);
    check(got == cs_fs_glob_match(g, gn, path, pn));
    if (gn <= MAXG && pn <= MAXG)
        check(got == m_glob(s, gn, s + gn, pn));
}

/* ---- UTF-8 ---- */

static void fuzz_utf8(const uint8_t *s, size_t n)
{
    char *out = malloc(3 * n + 1);
    check(out != NULL);
    bool lossy = false;
    size_t on = cs_fs_utf8_lossy(s, n, out, &lossy);
    bool valid = cs__fs_utf8_valid((const char *)s, n);
    check(on <= 3 * n && out[on] == '\0');
    check(cs__fs_utf8_valid(out, on));
    check(lossy == !valid);
    if (valid)
        check(on == n && memcmp(out, s, n) == 0);
    /* Held tail (process output, cs_utf8_lossy): what it leaves out is a proper prefix of one
     * sequence at the very end, and the rest decodes exactly as a plain decode of that part. */
    char *held = malloc(3 * n + 1);
    check(held != NULL);
    size_t used = 0;
    size_t hn = cs_utf8_lossy(s, n, true, held, &used, NULL);
    check(used <= n && n - used <= 3 && held[hn] == '\0');
    check(used == n || (s[used] >= 0xC2 && s[used] <= 0xF4));
    size_t pn = cs_fs_utf8_lossy(s, used, out, &lossy);
    check(pn == hn && memcmp(out, held, hn) == 0);
    free(held);
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    const uint8_t *s = data + 1;
    size_t n = size - 1;
    switch (data[0] % 3) {
    case 0:
        fuzz_normalize(s, n);
        break;
    case 1:
        fuzz_glob(s, n);
        break;
    default:
        fuzz_utf8(s, n);
        break;
    }
    return 0;
}
