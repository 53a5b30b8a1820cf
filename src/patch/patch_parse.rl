/*
 * The V4A patch parser (docs/contract/patch.md §1; docs/patch-format.md). ragel -G2 turns this file
 * into patch_parse.c in the build tree.
 *
 * Design: the text is line-oriented, so parsing has three layers.
 *   1. Framing (C): the text is copied once and cut into lines at "\n" (one trailing "\r" is
 *      dropped, so CRLF patches work); each line is NUL-terminated in place, so every string the
 *      plan hands out is a slice of that one copy. A first pass finds the first and last
 *      non-blank lines: an optional heredoc wrapper (<<EOF, <<'EOF' or <<"EOF" ... EOF) and then
 *      "*** Begin Patch" / "*** End Patch" are recognised there, by position, after trimming
 *      white space. Everything strictly between them is the body.
 *   2. Line classes (Ragel, machine patch_line): each body line is classified by its prefix into
 *      one of enum line_class. The machine is a union of disjoint patterns whose classes are set
 *      by leaving (EOF) actions, so a class is only given to a line that matches its pattern in
 *      full; a line matching nothing is L_OTHER.
 *   3. Grammar (C, enum pstate): a six-state machine driven by the class of each body line,
 *      building the plan. Each state knows what it expects, which makes the error messages
 *      ("line N: expected ..., got ...").
 * Trust: the text is untrusted and may hold any bytes. Every array grows by doubling with
 * overflow checks and is bounded by the line count, itself capped (CS_PATCH_MAX_LINES) before
 * anything is allocated; quoted excerpts in messages are escaped (patch_msg.c).
 * Entry points: cs_patch_parse, cs_patch_free (patch.h).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "patch.h"
#include "patch_internal.h"

#define MARK_ADD    "*** Add File: "
#define MARK_DELETE "*** Delete File: "
#define MARK_UPDATE "*** Update File: "
#define MARK_MOVE   "*** Move to: "
#define MARK_LEN(m) (sizeof(m) - 1)

#define OPS_EXPECTED "\"*** Add File: \", \"*** Delete File: \", \"*** Update File: \""

enum line_class {
    L_OTHER,    /* matches no pattern */
    L_BLANK,    /* empty */
    L_PLUS,     /* "+..." */
    L_MINUS,    /* "-..." */
    L_SPACE,    /* " ..." */
    L_HUNK,     /* "@@" */
    L_HUNK_CTX, /* "@@ ..." */
    L_BEGIN,    /* "*** Begin Patch" and trailing white space */
    L_END,      /* "*** End Patch" and trailing white space */
    L_ADD,      /* "*** Add File: ..." */
    L_DELETE,   /* "*** Delete File: ..." */
    L_UPDATE,   /* "*** Update File: ..." */
    L_MOVE,     /* "*** Move to: ..." */
    L_EOF_MARK, /* "*** End of File" and trailing white space */
};

%%{
    machine patch_line;
    alphtype unsigned char;

    ws = [ \t\v\f\r];

    main := (
        '+' any*                    %{ cls = L_PLUS; } |
        '-' any*                    %{ cls = L_MINUS; } |
        ' ' any*                    %{ cls = L_SPACE; } |
        '@@'                        %{ cls = L_HUNK; } |
        '@@ ' any*                  %{ cls = L_HUNK_CTX; } |
        '*** Begin Patch' ws*       %{ cls = L_BEGIN; } |
        '*** End Patch' ws*         %{ cls = L_END; } |
        '*** Add File: ' any*       %{ cls = L_ADD; } |
        '*** Delete File: ' any*    %{ cls = L_DELETE; } |
        '*** Update File: ' any*    %{ cls = L_UPDATE; } |
        '*** Move to: ' any*        %{ cls = L_MOVE; } |
        '*** End of File' ws*       %{ cls = L_EOF_MARK; }
    );
}%%

%% write data;

/* Classifies the n bytes at s (one line, without its terminator). */
static enum line_class classify(const char *s, size_t n)
{
    if (n == 0)
        return L_BLANK;
    enum line_class cls = L_OTHER;
    int cs;
    const unsigned char *p = (const unsigned char *)s;
    const unsigned char *pe = p + n;
    const unsigned char *eof = pe;
    %% write init;
    %% write exec;
    return cls;
}

static bool is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\v' || c == '\f' || c == '\r';
}

/* One line of the copied text: its bytes are text_own[off, off + len). */
struct span {
    size_t off, len;
    size_t no;   /* 1-based line number */
    size_t next; /* offset of the next line */
    bool set;
};

/* Narrows [*s, *s + *n) to its bytes between leading and trailing white space. */
static void trim(const char **s, size_t *n)
{
    while (*n > 0 && is_ws((*s)[0])) {
        (*s)++;
        (*n)--;
    }
    while (*n > 0 && is_ws((*s)[*n - 1]))
        (*n)--;
}

enum pstate {
    ST_TOP,         /* between operations: an operation header, or a blank line */
    ST_ADD,         /* in an Add body: "+" lines, or the next operation */
    ST_UPDATE_HEAD, /* after "*** Update File: " (and maybe "*** Move to: "): the first chunk */
    ST_CHUNK_HEAD,  /* after "@@": the chunk's first line, or another "@@" */
    ST_CHUNK_BODY,  /* in a chunk: more lines, "*** End of File", "@@", or the next operation */
    ST_CHUNK_DONE,  /* after "*** End of File": "@@", or the next operation */
};

struct parser {
    struct cs_patch *p;
    enum pstate st;
    size_t add_cap;    /* allocated bytes of the current Add's content */
    size_t chunks_cap; /* allocated length of the current Update's chunks */
    size_t lines_cap;  /* allocated length of the current chunk's lines */
    struct cs_diag *diag;
};

/* Grows *arr (of elem-byte elements, *cap allocated) to hold at least need elements. */
static int grow(void **arr, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return CS_PATCH_OK;
    size_t n = *cap ? *cap : 4;
    while (n < need) {
        if (n > SIZE_MAX / 2)
            return CS_PATCH_ERR_NOMEM;
        n *= 2;
    }
    if (n > SIZE_MAX / elem)
        return CS_PATCH_ERR_NOMEM;
    void *na = realloc(*arr, n * elem);
    if (na == NULL)
        return CS_PATCH_ERR_NOMEM;
    *arr = na;
    *cap = n;
    return CS_PATCH_OK;
}

static struct cs_patch_op *cur_op(struct parser *ps)
{
    return &ps->p->ops[ps->p->n_ops - 1];
}

static struct cs_patch_chunk *cur_chunk(struct parser *ps)
{
    struct cs_patch_op *op = cur_op(ps);
    return &op->chunks[op->n_chunks - 1];
}

static int invalid_got(struct parser *ps, size_t no, const char *expected, const char *s, size_t n)
{
    char q[CS__PATCH_QUOTE_CAP];
    cs_diag_set(ps->diag, CSW_ERROR_INVALID_PATCH, "line %zu: expected %s, got %s", no, expected,
                cs__patch_quote(q, s, n));
    return CS_PATCH_ERR_INVALID;
}

static int empty_path(struct parser *ps, size_t no, const char *marker)
{
    cs_diag_set(ps->diag, CSW_ERROR_INVALID_PATCH, "line %zu: empty path after \"%s\"", no, marker);
    return CS_PATCH_ERR_INVALID;
}

/* Starts an operation from a header line of class cls (L_ADD, L_DELETE or L_UPDATE). */
static int start_op(struct parser *ps, enum line_class cls, size_t no, const char *s, size_t n)
{
    const char *marker = cls == L_ADD ? MARK_ADD : cls == L_DELETE ? MARK_DELETE : MARK_UPDATE;
    size_t mlen = strlen(marker);
    if (n == mlen)
        return empty_path(ps, no, marker);
    struct cs_patch *p = ps->p;
    int rc = grow((void **)&p->ops, &p->ops_cap, p->n_ops + 1, sizeof *p->ops);
    if (rc != CS_PATCH_OK)
        return rc;
    struct cs_patch_op *op = &p->ops[p->n_ops];
    memset(op, 0, sizeof *op);
    op->kind = cls == L_ADD      ? CS_PATCH_OP_ADD
               : cls == L_DELETE ? CS_PATCH_OP_DELETE
                                 : CS_PATCH_OP_UPDATE;
    op->line = no;
    op->path = s + mlen;
    op->path_len = n - mlen;
    p->n_ops++;
    ps->chunks_cap = 0;
    if (op->kind == CS_PATCH_OP_ADD) {
        op->content = malloc(64);
        if (op->content == NULL)
            return CS_PATCH_ERR_NOMEM;
        op->content[0] = '\0';
        ps->add_cap = 64;
        ps->st = ST_ADD;
    } else if (op->kind == CS_PATCH_OP_DELETE) {
        ps->st = ST_TOP;
    } else {
        ps->st = ST_UPDATE_HEAD;
    }
    return CS_PATCH_OK;
}

/* Appends one Add body line (without its "+") and a "\n" to the current Add's content. */
static int add_line(struct parser *ps, const char *s, size_t n)
{
    struct cs_patch_op *op = cur_op(ps);
    if (n > SIZE_MAX - 2 - op->content_len)
        return CS_PATCH_ERR_NOMEM;
    size_t need = op->content_len + n + 2;
    if (need > ps->add_cap) {
        size_t c = ps->add_cap;
        while (c < need) {
            if (c > SIZE_MAX / 2)
                return CS_PATCH_ERR_NOMEM;
            c *= 2;
        }
        char *nc = realloc(op->content, c);
        if (nc == NULL)
            return CS_PATCH_ERR_NOMEM;
        op->content = nc;
        ps->add_cap = c;
    }
    memcpy(op->content + op->content_len, s, n);
    op->content_len += n;
    op->content[op->content_len++] = '\n';
    op->content[op->content_len] = '\0';
    return CS_PATCH_OK;
}

/* Opens a chunk of the current Update; ctx is NULL or the text after "@@ ". */
static int start_chunk(struct parser *ps, size_t ctx_line, const char *ctx, size_t ctx_len)
{
    struct cs_patch_op *op = cur_op(ps);
    int rc = grow((void **)&op->chunks, &ps->chunks_cap, op->n_chunks + 1, sizeof *op->chunks);
    if (rc != CS_PATCH_OK)
        return rc;
    struct cs_patch_chunk *ch = &op->chunks[op->n_chunks++];
    memset(ch, 0, sizeof *ch);
    /* "@@ " followed by white space only carries no context. */
    const char *t = ctx;
    size_t tn = ctx_len;
    if (t != NULL)
        trim(&t, &tn);
    if (t != NULL && tn > 0) {
        ch->ctx = ctx;
        ch->ctx_len = ctx_len;
    }
    ch->ctx_line = ctx_line;
    ps->lines_cap = 0;
    return CS_PATCH_OK;
}

/* An "@@" or "@@ text" line (cls L_HUNK or L_HUNK_CTX) on line no: opens the next chunk. */
static int at_line(struct parser *ps, enum line_class cls, size_t no, const char *s, size_t n)
{
    ps->st = ST_CHUNK_HEAD;
    return start_chunk(ps, no, cls == L_HUNK ? NULL : s + 3, cls == L_HUNK ? 0 : n - 3);
}

/* Appends a body line to the current chunk. */
static int chunk_line(struct parser *ps, size_t no, enum cs_patch_line_kind kind, const char *s,
                      size_t n)
{
    struct cs_patch_chunk *ch = cur_chunk(ps);
    int rc = grow((void **)&ch->lines, &ps->lines_cap, ch->n_lines + 1, sizeof *ch->lines);
    if (rc != CS_PATCH_OK)
        return rc;
    if (ch->n_lines == 0)
        ch->first_line = no;
    ch->lines[ch->n_lines++] = (struct cs_patch_line){.text = s, .len = n, .kind = kind};
    return CS_PATCH_OK;
}

/* A chunk body line (cls is L_SPACE, L_MINUS, L_PLUS or L_BLANK). */
static int body_line(struct parser *ps, enum line_class cls, size_t no, const char *s, size_t n)
{
    ps->st = ST_CHUNK_BODY;
    if (cls == L_BLANK)
        return chunk_line(ps, no, CS_PATCH_LINE_CONTEXT, s, 0);
    enum cs_patch_line_kind kind = cls == L_SPACE   ? CS_PATCH_LINE_CONTEXT
                                   : cls == L_MINUS ? CS_PATCH_LINE_DEL
                                                    : CS_PATCH_LINE_ADD;
    return chunk_line(ps, no, kind, s + 1, n - 1);
}

static bool is_body(enum line_class cls)
{
    return cls == L_SPACE || cls == L_MINUS || cls == L_PLUS || cls == L_BLANK;
}

static bool is_op(enum line_class cls)
{
    return cls == L_ADD || cls == L_DELETE || cls == L_UPDATE;
}

static int no_chunks(struct parser *ps, size_t no, const char *s, size_t n)
{
    char qp[CS__PATCH_QUOTE_CAP], qg[CS__PATCH_QUOTE_CAP];
    struct cs_patch_op *op = cur_op(ps);
    cs_diag_set(ps->diag, CSW_ERROR_INVALID_PATCH,
                "line %zu: the update of %s (line %zu) has no chunks: expected \"@@\" or a "
                "line starting with \" \", \"-\" or \"+\", got %s",
                no, cs__patch_quote(qp, op->path, op->path_len), op->line,
                cs__patch_quote(qg, s, n));
    return CS_PATCH_ERR_INVALID;
}

/* Feeds one body line (s[n] is NUL) to the grammar. */
static int step(struct parser *ps, size_t no, size_t end_no, char *s, size_t n)
{
    enum line_class cls = classify(s, n);

    /* docs/contract/patch.md §1: where no chunk is open (right after "*** Begin Patch", between
     * operations, after an Add File body), leading white space before an operation header is
     * tolerated, as models emit it and Codex's apply_patch accepts it. Inside a chunk such a
     * line stays chunk content (a context line, or an error), never a header. */
    if ((ps->st == ST_TOP || ps->st == ST_ADD) && n > 0 && is_ws(s[0])) {
        size_t k = 0;
        while (k < n && is_ws(s[k]))
            k++;
        enum line_class inner = classify(s + k, n - k);
        if (is_op(inner)) {
            s += k;
            n -= k;
            cls = inner;
        }
    }

    if (cls == L_END) {
        cs_diag_set(ps->diag, CSW_ERROR_INVALID_PATCH,
                    "line %zu: \"*** End Patch\" before the end of the patch (it must be the "
                    "last line, line %zu)",
                    no, end_no);
        return CS_PATCH_ERR_INVALID;
    }
    if (cls == L_MOVE && ps->st != ST_UPDATE_HEAD) {
        cs_diag_set(ps->diag, CSW_ERROR_INVALID_PATCH,
                    "line %zu: \"*** Move to: \" must directly follow \"*** Update File: \"", no);
        return CS_PATCH_ERR_INVALID;
    }

    switch (ps->st) {
    case ST_TOP:
        if (cls == L_BLANK)
            return CS_PATCH_OK;
        if (is_op(cls))
            return start_op(ps, cls, no, s, n);
        return invalid_got(ps, no, OPS_EXPECTED " or \"*** End Patch\"", s, n);
    case ST_ADD:
        if (cls == L_PLUS)
            return add_line(ps, s + 1, n - 1);
        if (is_op(cls))
            return start_op(ps, cls, no, s, n);
        return invalid_got(ps, no,
                           "a line starting with \"+\" (the Add File body), " OPS_EXPECTED
                           " or \"*** End Patch\"",
                           s, n);
    case ST_UPDATE_HEAD: {
        struct cs_patch_op *op = cur_op(ps);
        if (cls == L_MOVE) {
            if (op->move_to != NULL) {
                cs_diag_set(ps->diag, CSW_ERROR_INVALID_PATCH,
                            "line %zu: a second \"*** Move to: \" for the update on line %zu", no,
                            op->line);
                return CS_PATCH_ERR_INVALID;
            }
            if (n == MARK_LEN(MARK_MOVE))
                return empty_path(ps, no, MARK_MOVE);
            op->move_to = s + MARK_LEN(MARK_MOVE);
            op->move_to_len = n - MARK_LEN(MARK_MOVE);
            op->move_line = no;
            return CS_PATCH_OK;
        }
        if (cls == L_HUNK || cls == L_HUNK_CTX) {
            return at_line(ps, cls, no, s, n);
        }
        if (is_body(cls)) {
            /* The first chunk may omit its "@@". */
            int rc = start_chunk(ps, 0, NULL, 0);
            if (rc != CS_PATCH_OK)
                return rc;
            return body_line(ps, cls, no, s, n);
        }
        return no_chunks(ps, no, s, n);
    }
    case ST_CHUNK_HEAD:
        if (is_body(cls))
            return body_line(ps, cls, no, s, n);
        /* "@@" lines in a row narrow the search, each from where the one before was found
         * ("@@ class A", then "@@ def f():"): the chunk before is an anchor without lines. */
        if (cls == L_HUNK || cls == L_HUNK_CTX)
            return at_line(ps, cls, no, s, n);
        {
            char q[CS__PATCH_QUOTE_CAP];
            cs_diag_set(ps->diag, CSW_ERROR_INVALID_PATCH,
                        "line %zu: expected a chunk line starting with \" \", \"-\" or \"+\" "
                        "after the \"@@\" on line %zu, got %s",
                        no, cur_chunk(ps)->ctx_line, cs__patch_quote(q, s, n));
        }
        return CS_PATCH_ERR_INVALID;
    case ST_CHUNK_BODY:
        if (is_body(cls))
            return body_line(ps, cls, no, s, n);
        if (cls == L_EOF_MARK) {
            cur_chunk(ps)->eof = true;
            ps->st = ST_CHUNK_DONE;
            return CS_PATCH_OK;
        }
        if (cls == L_HUNK || cls == L_HUNK_CTX) {
            return at_line(ps, cls, no, s, n);
        }
        if (is_op(cls))
            return start_op(ps, cls, no, s, n);
        return invalid_got(ps, no,
                           "a chunk line starting with \" \", \"-\" or \"+\", \"@@\", \"*** End "
                           "of File\", " OPS_EXPECTED " or \"*** End Patch\"",
                           s, n);
    case ST_CHUNK_DONE:
        if (cls == L_BLANK)
            return CS_PATCH_OK;
        if (cls == L_HUNK || cls == L_HUNK_CTX) {
            return at_line(ps, cls, no, s, n);
        }
        if (is_op(cls))
            return start_op(ps, cls, no, s, n);
        return invalid_got(ps, no,
                           "\"@@\", " OPS_EXPECTED " or \"*** End Patch\" after \"*** End of "
                           "File\"",
                           s, n);
    }
    return CS_PATCH_ERR_INVALID;
}

/* The body is over (the next line, end_no, is "*** End Patch"): checks the last state. */
static int finish(struct parser *ps, size_t end_no, const char *s, size_t n)
{
    switch (ps->st) {
    case ST_UPDATE_HEAD:
        return no_chunks(ps, end_no, s, n);
    case ST_CHUNK_HEAD: {
        char q[CS__PATCH_QUOTE_CAP];
        cs_diag_set(ps->diag, CSW_ERROR_INVALID_PATCH,
                    "line %zu: expected a chunk line starting with \" \", \"-\" or \"+\" after "
                    "the \"@@\" on line %zu, got %s",
                    end_no, cur_chunk(ps)->ctx_line, cs__patch_quote(q, s, n));
        return CS_PATCH_ERR_INVALID;
    }
    case ST_TOP:
    case ST_ADD:
    case ST_CHUNK_BODY:
    case ST_CHUNK_DONE:
        break;
    }
    return CS_PATCH_OK;
}

/* A path an operation touches, for the duplicate check. */
struct touch {
    const char *path;
    size_t len;
    size_t line;
};

static int touch_cmp(const void *a, const void *b)
{
    const struct touch *x = a, *y = b;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = n > 0 ? memcmp(x->path, y->path, n) : 0;
    if (c != 0)
        return c;
    if (x->len != y->len)
        return x->len < y->len ? -1 : 1;
    return x->line < y->line ? -1 : x->line > y->line ? 1 : 0;
}

/* Fails when two operations touch one path (byte for byte); names the earliest second touch. */
static int check_duplicates(const struct cs_patch *p, struct cs_diag *diag)
{
    size_t n = 0;
    for (size_t i = 0; i < p->n_ops; i++)
        n += p->ops[i].move_to != NULL ? 2 : 1;
    if (n < 2)
        return CS_PATCH_OK;
    struct touch *t = calloc(n, sizeof *t);
    if (t == NULL)
        return CS_PATCH_ERR_NOMEM;
    size_t k = 0;
    for (size_t i = 0; i < p->n_ops; i++) {
        const struct cs_patch_op *op = &p->ops[i];
        t[k++] = (struct touch){op->path, op->path_len, op->line};
        if (op->move_to != NULL)
            t[k++] = (struct touch){op->move_to, op->move_to_len, op->move_line};
    }
    qsort(t, n, sizeof *t, touch_cmp);
    const struct touch *first = NULL, *second = NULL;
    size_t group = 0;
    for (size_t i = 1; i < n; i++) {
        if (t[i].len != t[group].len || memcmp(t[i].path, t[group].path, t[i].len) != 0) {
            group = i;
            continue;
        }
        if (i == group + 1 && (second == NULL || t[i].line < second->line)) {
            first = &t[group];
            second = &t[i];
        }
    }
    int rc = CS_PATCH_OK;
    if (second != NULL) {
        char q[CS__PATCH_QUOTE_CAP];
        cs_diag_set(diag, CSW_ERROR_INVALID_PATCH,
                    "line %zu: %s is already touched by the operation on line %zu (one "
                    "operation per path)",
                    second->line, cs__patch_quote(q, second->path, second->len), first->line);
        rc = CS_PATCH_ERR_INVALID;
    }
    free(t);
    return rc;
}

/* Is the (trimmed) line a heredoc opener: <<EOF, <<'EOF' or <<"EOF"? */
static bool heredoc_open(const char *s, size_t n)
{
    return (n == 5 && memcmp(s, "<<EOF", 5) == 0) || (n == 7 && memcmp(s, "<<'EOF'", 7) == 0) ||
           (n == 7 && memcmp(s, "<<\"EOF\"", 7) == 0);
}

static int frame_error(struct cs_diag *diag, size_t no, const char *expected,
                       const char *s, size_t n)
{
    char q[CS__PATCH_QUOTE_CAP];
    if (s == NULL)
        cs_diag_set(diag, CSW_ERROR_INVALID_PATCH, "line %zu: expected %s, got end of input", no,
                    expected);
    else
        cs_diag_set(diag, CSW_ERROR_INVALID_PATCH, "line %zu: expected %s, got %s", no, expected,
                    cs__patch_quote(q, s, n));
    return CS_PATCH_ERR_INVALID;
}

/* Finds the line ending at or after off: its length without "\n" and one "\r", and the next. */
static void cut_line(const char *t, size_t len, size_t off, size_t *n, size_t *next)
{
    const char *nl = memchr(t + off, '\n', len - off);
    size_t end = nl != NULL ? (size_t)(nl - t) : len;
    *next = nl != NULL ? end + 1 : len;
    if (end > off && t[end - 1] == '\r')
        end--;
    *n = end - off;
}

int cs_patch_parse(const char *text, size_t len, struct cs_patch **out, struct cs_diag *diag)
{
    int rc = CS_PATCH_ERR_NOMEM;
    struct cs_patch *p = NULL;
    struct parser ps = {.st = ST_TOP, .diag = diag};
    cs_diag_clear(diag);
    if (len > 0 && text == NULL) {
        cs_diag_set(diag, CSW_ERROR_INVALID_PATCH, "no patch text");
        return CS_PATCH_ERR_INVALID;
    }

    /* The line cap comes first, before any allocation. */
    size_t nl = 0;
    for (const char *q = text, *e = text + len; q != NULL && q < e; q++) {
        q = memchr(q, '\n', (size_t)(e - q));
        if (q == NULL)
            break;
        if (++nl > CS_PATCH_MAX_LINES) {
            cs_diag_set(diag, CSW_ERROR_INVALID_PATCH, "patch has more than %u lines",
                        CS_PATCH_MAX_LINES);
            return CS_PATCH_ERR_INVALID;
        }
    }
    if (len == SIZE_MAX)
        return CS_PATCH_ERR_NOMEM;

    p = calloc(1, sizeof *p);
    if (p == NULL)
        goto out;
    p->text_own = malloc(len + 1);
    if (p->text_own == NULL)
        goto out;
    if (len > 0)
        memcpy(p->text_own, text, len);
    p->text_own[len] = '\0';
    char *t = p->text_own;

    /* Pass 1: the first two and the last two non-blank lines, and the line count. */
    struct span f0 = {0}, f1 = {0}, l0 = {0}, l1 = {0};
    size_t lines = 0;
    for (size_t off = 0; off < len;) {
        struct span sp = {.off = off, .no = ++lines, .set = true};
        cut_line(t, len, off, &sp.len, &sp.next);
        off = sp.next;
        const char *s = t + sp.off;
        size_t n = sp.len;
        trim(&s, &n);
        if (n == 0)
            continue;
        if (!f0.set)
            f0 = sp;
        else if (!f1.set)
            f1 = sp;
        l1 = l0;
        l0 = sp;
    }

    /* The frame: an optional heredoc wrapper, then "*** Begin Patch" ... "*** End Patch". */
    struct span begin = f0, end = l0;
    bool heredoc = false;
    if (!f0.set) {
        rc = frame_error(diag, 1, "\"*** Begin Patch\"", NULL, 0);
        goto out;
    }
    {
        const char *s = t + f0.off;
        size_t n = f0.len;
        trim(&s, &n);
        if (heredoc_open(s, n)) {
            const char *e = t + l0.off;
            size_t en = l0.len;
            trim(&e, &en);
            if (l0.no == f0.no || en != 3 || memcmp(e, "EOF", 3) != 0) {
                char what[96];
                snprintf(what, sizeof what, "\"EOF\" closing the heredoc opened on line %zu",
                         f0.no);
                if (l0.no == f0.no)
                    rc = frame_error(diag, lines + 1, what, NULL, 0);
                else
                    rc = frame_error(diag, l0.no, what, t + l0.off, l0.len);
                goto out;
            }
            heredoc = true;
            begin = f1; /* f1 exists: it is at least the "EOF" line */
            end = l1;
            if (begin.no == l0.no) {
                rc = frame_error(diag, l0.no, "\"*** Begin Patch\"", t + l0.off, l0.len);
                goto out;
            }
        }
    }
    {
        const char *s = t + begin.off;
        size_t n = begin.len;
        trim(&s, &n);
        if (classify(s, n) != L_BEGIN) {
            rc = frame_error(diag, begin.no, "\"*** Begin Patch\"", t + begin.off,
                             begin.len);
            goto out;
        }
    }
    {
        const char *s = t + end.off;
        size_t n = end.len;
        trim(&s, &n);
        if (end.no == begin.no) {
            /* Nothing after "*** Begin Patch" but, in a heredoc, its "EOF". */
            if (heredoc)
                rc = frame_error(diag, l0.no, "\"*** End Patch\"", t + l0.off, l0.len);
            else
                rc = frame_error(diag, lines + 1, "\"*** End Patch\"", NULL, 0);
            goto out;
        }
        if (classify(s, n) != L_END) {
            rc = frame_error(diag, end.no, "\"*** End Patch\"", t + end.off, end.len);
            goto out;
        }
    }

    /* Pass 2: the body, strictly between the two markers. */
    ps.p = p;
    size_t no = begin.no;
    for (size_t off = begin.next; off < end.off;) {
        size_t n, next;
        cut_line(t, len, off, &n, &next);
        t[off + n] = '\0';
        no++;
        rc = step(&ps, no, end.no, t + off, n);
        if (rc != CS_PATCH_OK)
            goto out;
        off = next;
    }
    rc = finish(&ps, end.no, t + end.off, end.len);
    if (rc != CS_PATCH_OK)
        goto out;
    rc = check_duplicates(p, diag);
    if (rc != CS_PATCH_OK)
        goto out;

    *out = p;
    p = NULL;
    rc = CS_PATCH_OK;
out:
    if (rc == CS_PATCH_ERR_NOMEM)
        cs_diag_set(diag, CSW_ERROR_INTERNAL, "out of memory parsing the patch");
    cs_patch_free(p);
    return rc;
}

void cs_patch_free(struct cs_patch *p)
{
    if (p == NULL)
        return;
    for (size_t i = 0; i < p->n_ops; i++) {
        struct cs_patch_op *op = &p->ops[i];
        free(op->content);
        for (size_t j = 0; j < op->n_chunks; j++)
            free(op->chunks[j].lines);
        free(op->chunks);
    }
    free(p->ops);
    free(p->text_own);
    free(p);
}
