/*
 * Pure in-memory application of one V4A Update to a file's old content (docs/contract/patch.md §1;
 * docs/patch-format.md, "Applying an update"). The file is cut into lines (terminator "\n" or
 * "\r\n"); each chunk's "@@ text" and old lines (context + removed) are searched from the end of
 * the previous chunk with four strategies in turn (exact, trailing white space ignored, leading
 * and trailing white space ignored, typographic punctuation folded), and the result is written
 * in one allocation: untouched lines and context lines keep the file's own bytes, added lines get
 * the file's line ending.
 * Trust: the plan comes from cs_patch_parse (its lines are untrusted bytes); the old content is a
 * workspace file, any bytes. Sizes are checked for overflow; the search is O(lines x pattern) per
 * strategy, bounded by the caller's time limit.
 * Entry point: cs_patch_apply_update (patch.h).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "patch.h"
#include "patch_internal.h"

#define NOT_FOUND SIZE_MAX

/* One line of the old file: bytes [off, off + len), then term terminator bytes (0, 1 or 2). */
struct fline {
    size_t off, len, term;
};

/* The old file, cut into lines. */
struct file {
    const char *data;
    struct fline *lines;
    size_t n;
};

enum strategy {
    STRAT_EXACT, /* byte for byte */
    STRAT_RTRIM, /* trailing white space ignored */
    STRAT_TRIM,  /* leading and trailing white space ignored */
    STRAT_FOLD,  /* and typographic punctuation folded to ASCII */
    STRAT_COUNT,
};

static bool is_ws(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\v' || c == '\f' || c == '\r';
}

/*
 * Returns the folded unit at s[*i] (n bytes in all) and moves *i past it: U+2010..U+2015 and
 * U+2212 fold to '-', U+2018..U+201B to '\'', U+201C..U+201F to '"', U+00A0 and U+202F to ' ';
 * any other byte stands for itself.
 */
static unsigned char fold_next(const unsigned char *s, size_t n, size_t *i)
{
    size_t k = *i;
    unsigned char c = s[k];
    if (c == 0xC2 && n - k >= 2 && s[k + 1] == 0xA0) {
        *i = k + 2;
        return ' ';
    }
    if (c == 0xE2 && n - k >= 3) {
        unsigned char c1 = s[k + 1], c2 = s[k + 2];
        unsigned char r = 0;
        if ((c1 == 0x80 && c2 >= 0x90 && c2 <= 0x95) || (c1 == 0x88 && c2 == 0x92))
            r = '-';
        else if (c1 == 0x80 && c2 >= 0x98 && c2 <= 0x9B)
            r = '\'';
        else if (c1 == 0x80 && c2 >= 0x9C && c2 <= 0x9F)
            r = '"';
        else if (c1 == 0x80 && c2 == 0xAF)
            r = ' ';
        if (r != 0) {
            *i = k + 3;
            return r;
        }
    }
    *i = k + 1;
    return c;
}

/* The folded line's bounds without leading and trailing (folded) white space. */
static void fold_bounds(const unsigned char *s, size_t n, size_t *start, size_t *end)
{
    size_t i = 0, first = n, last = 0;
    while (i < n) {
        size_t at = i;
        unsigned char c = fold_next(s, n, &i);
        if (!is_ws(c)) {
            if (first == n)
                first = at;
            last = i;
        }
    }
    *start = first == n ? 0 : first;
    *end = first == n ? 0 : last;
}

static bool fold_eq(const char *a, size_t an, const char *b, size_t bn)
{
    const unsigned char *x = (const unsigned char *)a, *y = (const unsigned char *)b;
    size_t xi, xe, yi, ye;
    fold_bounds(x, an, &xi, &xe);
    fold_bounds(y, bn, &yi, &ye);
    while (xi < xe && yi < ye) {
        if (fold_next(x, xe, &xi) != fold_next(y, ye, &yi))
            return false;
    }
    return xi == xe && yi == ye;
}

static bool line_eq(enum strategy st, const char *a, size_t an, const char *b, size_t bn)
{
    switch (st) {
    case STRAT_EXACT:
        break;
    case STRAT_TRIM:
        while (an > 0 && is_ws((unsigned char)a[0]))
            a++, an--;
        while (bn > 0 && is_ws((unsigned char)b[0]))
            b++, bn--;
        while (an > 0 && is_ws((unsigned char)a[an - 1]))
            an--;
        while (bn > 0 && is_ws((unsigned char)b[bn - 1]))
            bn--;
        break;
    case STRAT_RTRIM:
        while (an > 0 && is_ws((unsigned char)a[an - 1]))
            an--;
        while (bn > 0 && is_ws((unsigned char)b[bn - 1]))
            bn--;
        break;
    case STRAT_FOLD:
        return fold_eq(a, an, b, bn);
    case STRAT_COUNT:
        return false;
    }
    return an == bn && (an == 0 || memcmp(a, b, an) == 0);
}

/* Do the file's lines from pos on equal the n pattern lines under strategy st? */
static bool match_at(const struct file *f, size_t pos, const struct cs_patch_line *const *pat,
                     size_t n, enum strategy st)
{
    for (size_t i = 0; i < n; i++) {
        const struct fline *l = &f->lines[pos + i];
        if (!line_eq(st, f->data + l->off, l->len, pat[i]->text, pat[i]->len))
            return false;
    }
    return true;
}

/*
 * Finds the n (>= 1) pattern lines in the file at or after start, trying each strategy over the
 * whole range before the next; with eof, only at the very end. Returns the index or NOT_FOUND.
 */
static size_t seek(const struct file *f, const struct cs_patch_line *const *pat, size_t n,
                   size_t start, bool eof)
{
    if (n > f->n || start > f->n - n)
        return NOT_FOUND;
    size_t last = f->n - n;
    for (int s = STRAT_EXACT; s < STRAT_COUNT; s++) {
        enum strategy st = (enum strategy)s;
        if (eof) {
            if (match_at(f, last, pat, n, st))
                return last;
            continue;
        }
        for (size_t pos = start; pos <= last; pos++) {
            if (match_at(f, pos, pat, n, st))
                return pos;
        }
    }
    return NOT_FOUND;
}

/* Cuts data into lines; a last line without terminator has term 0. */
static int split_file(struct file *f, const char *data, size_t n)
{
    size_t count = 0;
    for (size_t i = 0; i < n;) {
        const char *nl = memchr(data + i, '\n', n - i);
        count++;
        if (nl == NULL)
            break;
        i = (size_t)(nl - data) + 1;
    }
    f->data = data;
    f->n = count;
    f->lines = calloc(count ? count : 1, sizeof *f->lines);
    if (f->lines == NULL)
        return CS_PATCH_ERR_NOMEM;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        const char *nl = memchr(data + i, '\n', n - i);
        struct fline *l = &f->lines[k++];
        l->off = i;
        if (nl == NULL) {
            l->len = n - i;
            l->term = 0;
            break;
        }
        size_t end = (size_t)(nl - data);
        l->term = 1;
        if (end > i && data[end - 1] == '\r') {
            end--;
            l->term = 2;
        }
        l->len = end - i;
        i = (size_t)(nl - data) + 1;
    }
    return CS_PATCH_OK;
}

/* Where one chunk goes: the file's lines [at, at + n_old) become the chunk's first n_lines. */
struct repl {
    size_t at, n_old;
    const struct cs_patch_chunk *ch;
    size_t n_lines;
};

static int not_found(const struct cs_patch_op *op, size_t line, const char *s, size_t n,
                     struct cs_diag *diag)
{
    char qp[CS__PATCH_QUOTE_CAP], ql[CS__PATCH_QUOTE_CAP];
    cs_diag_set(diag, CSW_ERROR_INVALID_PATCH,
                "update of %s: context not found (patch line %zu): %s",
                cs__patch_escape(qp, op->path, op->path_len), line, cs__patch_quote(ql, s, n));
    return CS_PATCH_ERR_INVALID;
}

/* Locates every chunk, in order, filling r[0 .. op->n_chunks). */
static int locate(const struct cs_patch_op *op, const struct file *f, struct repl *r,
                  const struct cs_patch_line **pat, struct cs_diag *diag)
{
    size_t pos = 0;
    bool anchored = false; /* anchors just before this chunk found a line ("@@ text" in a row) */
    for (size_t c = 0; c < op->n_chunks; c++) {
        const struct cs_patch_chunk *ch = &op->chunks[c];
        anchored = anchored || ch->ctx != NULL;
        if (ch->ctx != NULL) {
            struct cs_patch_line ctx = {.text = ch->ctx, .len = ch->ctx_len};
            const struct cs_patch_line *one = &ctx;
            size_t at = seek(f, &one, 1, pos, false);
            if (at == NOT_FOUND)
                return not_found(op, ch->ctx_line, ch->ctx, ch->ctx_len, diag);
            pos = at + 1;
        }
        if (ch->n_lines == 0) {
            /* An anchor followed by another "@@" (the parser allows no other): it only moves
             * the position. */
            r[c] = (struct repl){.at = pos, .ch = ch};
            continue;
        }
        bool after_anchor = anchored;
        anchored = false;
        size_t n_old = 0, first_old = SIZE_MAX;
        for (size_t i = 0; i < ch->n_lines; i++) {
            if (ch->lines[i].kind != CS_PATCH_LINE_ADD) {
                if (first_old == SIZE_MAX)
                    first_old = i;
                pat[n_old++] = &ch->lines[i];
            }
        }
        r[c] = (struct repl){.ch = ch, .n_lines = ch->n_lines};
        if (n_old == 0) {
            /* A pure insertion: after the "@@ text" line if there is one (this chunk's or its
             * anchors', a bare "@@" last among them moving nothing), else at the end. */
            r[c].at = after_anchor && !ch->eof ? pos : f->n;
            pos = r[c].at;
            continue;
        }
        size_t at = seek(f, pat, n_old, pos, ch->eof);
        const struct cs_patch_line *tail = &ch->lines[ch->n_lines - 1];
        if (at == NOT_FOUND && n_old > 1 && tail->kind == CS_PATCH_LINE_CONTEXT && tail->len == 0) {
            /* A blank line closing a chunk is often only the patch's own spacing: retry without
             * it (as the reference implementation does). */
            at = seek(f, pat, n_old - 1, pos, ch->eof);
            if (at != NOT_FOUND) {
                n_old--;
                r[c].n_lines--;
            }
        }
        if (at == NOT_FOUND) {
            const struct cs_patch_line *l = &ch->lines[first_old];
            return not_found(op, ch->first_line + first_old, l->text, l->len, diag);
        }
        r[c].at = at;
        r[c].n_old = n_old;
        pos = at + n_old;
    }
    return CS_PATCH_OK;
}

/* Appends n bytes at s to dst at *o, or only counts them (dst NULL); fails on overflow. */
static bool put(char *dst, size_t *o, const char *s, size_t n)
{
    if (n > SIZE_MAX - 1 - *o)
        return false;
    if (dst != NULL && n > 0)
        memcpy(dst + *o, s, n);
    *o += n;
    return true;
}

/* A line of the old file, with its own terminator, or eol when it had none. */
static bool put_fline(char *dst, size_t *o, const struct file *f, size_t i, const char *eol,
                      size_t eol_len)
{
    const struct fline *l = &f->lines[i];
    if (l->term == 0)
        return put(dst, o, f->data + l->off, l->len) && put(dst, o, eol, eol_len);
    return put(dst, o, f->data + l->off, l->len + l->term);
}

/* Writes (or, with dst NULL, measures) the new content into dst; returns false on overflow. */
static bool build(char *dst, size_t *len, const struct file *f, const struct repl *r, size_t nr,
                  const char *eol, size_t eol_len)
{
    size_t o = 0, pos = 0;
    for (size_t c = 0; c < nr; c++) {
        for (; pos < r[c].at; pos++) {
            if (!put_fline(dst, &o, f, pos, eol, eol_len))
                return false;
        }
        for (size_t i = 0; i < r[c].n_lines; i++) {
            const struct cs_patch_line *l = &r[c].ch->lines[i];
            switch (l->kind) {
            case CS_PATCH_LINE_CONTEXT:
                /* Context keeps the file's bytes, whatever strategy matched it. */
                if (!put_fline(dst, &o, f, pos++, eol, eol_len))
                    return false;
                break;
            case CS_PATCH_LINE_DEL:
                pos++;
                break;
            case CS_PATCH_LINE_ADD:
                if (!put(dst, &o, l->text, l->len) || !put(dst, &o, eol, eol_len))
                    return false;
                break;
            }
        }
    }
    for (; pos < f->n; pos++) {
        if (!put_fline(dst, &o, f, pos, eol, eol_len))
            return false;
    }
    *len = o;
    return true;
}

int cs_patch_apply_update(const struct cs_patch_op *op, const char *old, size_t old_len,
                          char **new_out, size_t *new_len, struct cs_diag *diag)
{
    int rc = CS_PATCH_ERR_NOMEM;
    struct file f = {0};
    struct repl *r = NULL;
    const struct cs_patch_line **pat = NULL;
    char *buf = NULL;
    cs_diag_clear(diag);
    if (op == NULL || op->kind != CS_PATCH_OP_UPDATE || (old == NULL && old_len > 0)) {
        cs_diag_set(diag, CSW_ERROR_INVALID_PATCH,
                    "apply: not an Update operation, or no old content");
        return CS_PATCH_ERR_INVALID;
    }
    const char *data = old != NULL ? old : "";

    rc = split_file(&f, data, old_len);
    if (rc != CS_PATCH_OK)
        goto out;
    rc = CS_PATCH_ERR_NOMEM;
    size_t most = 1;
    for (size_t c = 0; c < op->n_chunks; c++) {
        if (op->chunks[c].n_lines > most)
            most = op->chunks[c].n_lines;
    }
    r = calloc(op->n_chunks ? op->n_chunks : 1, sizeof *r);
    pat = calloc(most, sizeof *pat);
    if (r == NULL || pat == NULL)
        goto out;

    rc = locate(op, &f, r, pat, diag);
    if (rc != CS_PATCH_OK)
        goto out;

    /* The file's line ending is the first line's; a file without one gets "\n". */
    bool crlf = f.n > 0 && f.lines[0].term == 2;
    const char *eol = crlf ? "\r\n" : "\n";
    size_t eol_len = crlf ? 2 : 1;
    size_t len = 0;
    rc = CS_PATCH_ERR_NOMEM;
    if (!build(NULL, &len, &f, r, op->n_chunks, eol, eol_len))
        goto out;
    buf = malloc(len + 1);
    if (buf == NULL)
        goto out;
    build(buf, &len, &f, r, op->n_chunks, eol, eol_len);
    buf[len] = '\0';

    *new_out = buf;
    *new_len = len;
    buf = NULL;
    rc = CS_PATCH_OK;
out:
    if (rc == CS_PATCH_ERR_NOMEM)
        cs_diag_set(diag, CSW_ERROR_INTERNAL, "out of memory applying the patch");
    free(buf);
    free(pat);
    free(r);
    free(f.lines);
    return rc;
}
