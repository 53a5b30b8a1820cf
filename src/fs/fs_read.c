/*
 * fs_read: the read tool. Opens a regular file beneath the root (fs_path.c), then reads it once,
 * start to end, in fixed chunks: every byte goes through SHA-256 and the bytes that fall in the
 * window [offset, offset + limit) are kept. The version and the window therefore always come from
 * the same read sequence on the same fd; fstat's size is never trusted (a file may grow, shrink
 * or be replaced while it is read, and the answer still describes one sequence of bytes).
 * Memory: one chunk buffer and at most limit bytes of window, whatever the file's size.
 *
 * Also here: the UTF-8 decoding shared by the module (maximal-subpart replacement, as the Unicode
 * standard recommends and the WHATWG decoder does).
 *
 * Trust: the input is the client's (decoded: types and ranges are schema-checked); the file's
 * bytes are arbitrary. Entry points: cs_fs_read, cs_fs_read_at, cs_fs_utf8_lossy.
 */
#include "fs.h"
#include "base_utf8.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHUNK_BYTES (256 * 1024) /* one read(2); sized to stay in cache while it is hashed */

/* ---- UTF-8 ---- */

size_t cs__fs_utf8_step(const unsigned char *s, size_t n, uint32_t *cp, bool *valid)
{
    return cs_utf8_step(s, n, cp, valid);
}

bool cs__fs_utf8_valid(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t at = 0;
    while (at < n) {
        if (u[at] < 0x80) {
            at++;
            continue;
        }
        uint32_t cp;
        bool valid;
        at += cs__fs_utf8_step(u + at, n - at, &cp, &valid);
        if (!valid)
            return false;
    }
    return true;
}

size_t cs_fs_utf8_lossy(const unsigned char *s, size_t n, char *out, bool *lossy)
{
    size_t used;
    return cs_utf8_lossy(s, n, false, out, &used, lossy);
}

/* ---- read ---- */

static void hex(const unsigned char *d, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[d[i] >> 4];
        out[2 * i + 1] = digits[d[i] & 15];
    }
    out[2 * n] = '\0';
}

/*
 * One pass over fd: hashes every byte into version ("sha256:" + 64 hex, NUL-terminated) and
 * copies the bytes of [offset, offset + limit) into *win (malloc'd, *win_n bytes). *total is the
 * number of bytes read. Returns 0 or an error.
 */
static int stream(int fd, uint64_t offset, size_t limit, const char *rel, unsigned char **win,
                  size_t *win_n, uint64_t *total, char version[72], char *msg, size_t cap)
{
    int rc = 0;
    unsigned char *chunk = malloc(CHUNK_BYTES);
    unsigned char *w = NULL;
    size_t wn = 0, wcap = 0;
    uint64_t pos = 0;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (chunk == NULL || ctx == NULL || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
        cs__fs_msgf(msg, cap, "out of memory (or no SHA-256) reading %s", rel);
        rc = CSW_ERROR_INTERNAL;
        goto out;
    }
    for (;;) {
        ssize_t r = read(fd, chunk, CHUNK_BYTES);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            cs__fs_msgf(msg, cap, "reading %s failed: %s", rel, strerror(errno));
            rc = CSW_ERROR_FILE_OPERATION_FAILED;
            goto out;
        }
        if (r == 0)
            break;
        size_t got = (size_t)r;
        if (EVP_DigestUpdate(ctx, chunk, got) != 1) {
            cs__fs_msgf(msg, cap, "hashing %s failed", rel);
            rc = CSW_ERROR_INTERNAL;
            goto out;
        }
        /* The part of this chunk inside the window, if any. */
        uint64_t end = pos + got;
        if (wn < limit && end > offset) {
            uint64_t from = offset > pos ? offset : pos;
            size_t take = (size_t)(end - from);
            if (take > limit - wn)
                take = limit - wn;
            if (wn + take > wcap) {
                /* Grow by doubling, never past limit (at most CS_FS_READ_MAX_BYTES). */
                size_t nc = wcap ? wcap : 64 * 1024;
                while (nc < wn + take)
                    nc *= 2;
                if (nc > limit)
                    nc = limit;
                unsigned char *nw = realloc(w, nc);
                if (nw == NULL) {
                    cs__fs_msgf(msg, cap, "out of memory reading %s", rel);
                    rc = CSW_ERROR_INTERNAL;
                    goto out;
                }
                w = nw;
                wcap = nc;
            }
            memcpy(w + wn, chunk + (from - pos), take);
            wn += take;
        }
        pos = end;
    }
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdn = 0;
    if (EVP_DigestFinal_ex(ctx, md, &mdn) != 1 || mdn != 32) {
        cs__fs_msgf(msg, cap, "hashing %s failed", rel);
        rc = CSW_ERROR_INTERNAL;
        goto out;
    }
    memcpy(version, "sha256:", 7);
    hex(md, mdn, version + 7);
    *win = w;
    *win_n = wn;
    *total = pos;
    w = NULL;
out:
    EVP_MD_CTX_free(ctx);
    free(chunk);
    free(w);
    return rc;
}

int cs_fs_read_at(int rootfd, const struct csw_mcp_read_input *in, struct csw_mcp_read_output *out,
                  char *msg, size_t msg_cap)
{
    int rc;
    int fd = -1;
    unsigned char *win = NULL;
    size_t win_n = 0;
    uint64_t total = 0;
    char version[72];
    struct cs_fs_path p;
    memset(out, 0, sizeof *out);

    /* The decoder sets the default limit when it is absent. */
    if (in->limit <= 0 || in->limit > CS_FS_READ_MAX_BYTES) {
        cs__fs_msgf(msg, msg_cap, "limit %lld is outside 1..%d bytes", (long long)in->limit,
                    CS_FS_READ_MAX_BYTES);
        rc = CSW_ERROR_OUTPUT_LIMIT;
        goto out;
    }
    if (in->offset < 0) {
        cs__fs_msgf(msg, msg_cap, "offset %lld is negative", (long long)in->offset);
        rc = CSW_ERROR_OUTPUT_LIMIT;
        goto out;
    }
    rc = cs_fs_path_normalize(in->path.s, in->path.n, &p, msg, msg_cap);
    if (rc != 0)
        goto out;
    struct stat st;
    rc = cs_fs_open_beneath(rootfd, &p, CS_FS_WANT_FILE, &fd, &st, msg, msg_cap);
    if (rc != 0)
        goto out;
    uint64_t offset = (uint64_t)in->offset;
    rc = stream(fd, offset, (size_t)in->limit, p.rel, &win, &win_n, &total, version, msg, msg_cap);
    if (rc != 0)
        goto out;

    char *text = cs_wire_malloc(3 * win_n + 1);
    if (text == NULL || cs_str_set_n(&out->path, p.rel, p.len) != 0 ||
        cs_str_set_n(&out->version, version, strlen(version)) != 0) {
        cs_wire_release(text);
        cs__fs_msgf(msg, msg_cap, "out of memory reading %s", p.rel);
        rc = CSW_ERROR_INTERNAL;
        goto out;
    }
    out->content.n = cs_fs_utf8_lossy(win, win_n, text, &out->content_lossy);
    out->content.s = text;
    out->byte_count = (int64_t)win_n;
    /* Bytes remain after the window: the window is full and the file goes on past it. */
    out->truncated = offset < total && total - offset > win_n;
    out->has_offset = in->has_offset;
    out->offset = in->has_offset ? in->offset : 0;
    if (out->truncated) {
        out->has_next_offset = true;
        out->next_offset = (int64_t)(offset + win_n);
    }
    rc = 0;
out:
    if (rc != 0)
        csw_mcp_read_output_free(out);
    if (fd >= 0)
        close(fd);
    free(win);
    return rc;
}

int cs_fs_read(const char *root, const struct csw_mcp_read_input *in,
               struct csw_mcp_read_output *out, char *msg, size_t msg_cap)
{
    int rootfd = -1;
    memset(out, 0, sizeof *out);
    int rc = cs_fs_root_open(root, &rootfd, msg, msg_cap);
    if (rc != 0)
        return rc;
    rc = cs_fs_read_at(rootfd, in, out, msg, msg_cap);
    close(rootfd);
    return rc;
}
