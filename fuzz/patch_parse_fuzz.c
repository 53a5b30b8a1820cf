/*
 * Fuzz harness for the V4A patch parser and the in-memory apply (src/patch/patch.h).
 * Input: arbitrary bytes, parsed as a patch. When they parse, every Update is applied to a few
 * fixed file contents (empty, LF, CRLF, no final newline, typographic punctuation) and to a file
 * made of its own chunks' old lines.
 * Trust: the input is arbitrary. The harness aborts unless
 *   - parse returns OK with a plan or INVALID without one, and every message is valid UTF-8
 *     that fits its buffer;
 *   - the plan is well-formed: paths and Move targets non-empty and NUL-terminated, every Update
 *     has chunks, the last of them with lines (one without lines is an anchor: "@@" lines in a
 *     row), Add content is empty or ends with "\n";
 *   - apply returns OK or INVALID; a result is NUL-terminated, ends with a line ending unless it
 *     is empty, and a file whose every line ends in CRLF gives a result whose every line does;
 *   - applied to the file made of its own old lines (bare "@@" anchors skipped; when no chunk
 *     seeks with "@@ text", is anchored at the end, is a pure insertion or holds a "\r"), an
 *     Update succeeds and yields exactly its chunks' new lines.
 * Leaks are found by the sanitizers. Entry point: LLVMFuzzerTestOneInput.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "patch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(bool ok)
{
    if (!ok)
        abort();
}

static bool utf8_valid(const char *str, size_t n)
{
    const unsigned char *s = (const unsigned char *)str;
    for (size_t i = 0; i < n;) {
        unsigned char c = s[i];
        size_t k;
        unsigned lo = 0x80, hi = 0xBF;
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xC2 && c <= 0xDF) {
            k = 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            k = 3;
            lo = c == 0xE0 ? 0xA0 : 0x80;
            hi = c == 0xED ? 0x9F : 0xBF;
        } else if (c >= 0xF0 && c <= 0xF4) {
            k = 4;
            lo = c == 0xF0 ? 0x90 : 0x80;
            hi = c == 0xF4 ? 0x8F : 0xBF;
        } else {
            return false;
        }
        if (n - i < k || s[i + 1] < lo || s[i + 1] > hi)
            return false;
        for (size_t j = 2; j < k; j++) {
            if (s[i + j] < 0x80 || s[i + j] > 0xBF)
                return false;
        }
        i += k;
    }
    return true;
}

/* A refusal carries INVALID_PATCH and a bounded, valid UTF-8 message without control bytes. */
static void check_msg(const struct cs_diag *d)
{
    size_t n = strnlen(d->text, sizeof d->text);
    check(d->set && d->code == CSW_ERROR_INVALID_PATCH);
    check(n < sizeof d->text);
    check(utf8_valid(d->text, n));
    for (size_t i = 0; i < n; i++)
        check((unsigned char)d->text[i] >= 0x20 && d->text[i] != 0x7F);
}

static void apply_one(const struct cs_patch_op *op, const char *old, size_t old_len)
{
    struct cs_diag msg = {0};
    char *out = NULL;
    size_t n = 0;
    int rc = cs_patch_apply_update(op, old, old_len, &out, &n, &msg);
    if (rc != CS_PATCH_OK) {
        check(rc == CS_PATCH_ERR_INVALID && out == NULL);
        check_msg(&msg);
        return;
    }
    check(out != NULL && out[n] == '\0');
    check(n == 0 || out[n - 1] == '\n');
    /* A file whose every line ends in CRLF stays so: added lines get CRLF too. */
    bool all_crlf = old_len > 0 && old[old_len - 1] == '\n';
    for (size_t i = 0; i < old_len && all_crlf; i++)
        all_crlf = old[i] != '\n' || (i > 0 && old[i - 1] == '\r');
    for (size_t i = 0; i < n && all_crlf; i++)
        check(out[i] != '\n' || (i > 0 && out[i - 1] == '\r'));
    free(out);
}

/* Applies op to a file made of its own old lines, which must give exactly its new lines. */
static void apply_self(const struct cs_patch_op *op)
{
    size_t old_len = 0, want_len = 0;
    for (size_t c = 0; c < op->n_chunks; c++) {
        const struct cs_patch_chunk *ch = &op->chunks[c];
        size_t n_old = 0;
        if (ch->n_lines == 0 && ch->ctx == NULL)
            continue; /* a bare "@@" before another: moves nothing */
        if (ch->ctx != NULL || ch->eof)
            return;
        for (size_t i = 0; i < ch->n_lines; i++) {
            const struct cs_patch_line *l = &ch->lines[i];
            if (memchr(l->text, '\r', l->len) != NULL)
                return;
            if (l->kind != CS_PATCH_LINE_ADD) {
                n_old++;
                old_len += l->len + 1;
            }
            if (l->kind != CS_PATCH_LINE_DEL)
                want_len += l->len + 1;
        }
        if (n_old == 0)
            return;
    }
    char *old = malloc(old_len + 1);
    char *want = malloc(want_len + 1);
    check(old != NULL && want != NULL);
    size_t o = 0, w = 0;
    for (size_t c = 0; c < op->n_chunks; c++) {
        const struct cs_patch_chunk *ch = &op->chunks[c];
        for (size_t i = 0; i < ch->n_lines; i++) {
            const struct cs_patch_line *l = &ch->lines[i];
            if (l->kind != CS_PATCH_LINE_ADD) {
                memcpy(old + o, l->text, l->len);
                o += l->len;
                old[o++] = '\n';
            }
            if (l->kind != CS_PATCH_LINE_DEL) {
                memcpy(want + w, l->text, l->len);
                w += l->len;
                want[w++] = '\n';
            }
        }
    }
    char *out = NULL;
    size_t n = 0;
    int rc = cs_patch_apply_update(op, old, old_len, &out, &n, NULL);
    check(rc == CS_PATCH_OK);
    check(n == want_len && (n == 0 || memcmp(out, want, n) == 0));
    free(out);
    free(old);
    free(want);
}

static const char *const files[] = {
    "",
    "a\nb\nc\n",
    "a\r\nb\r\nc\r\n",
    "int main(void)\n{\n    return 0;\n}",
    "x \xe2\x80\x94 \xe2\x80\x9cy\xe2\x80\x9d\xc2\xa0\n\n  z\t\n",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct cs_patch *p = NULL;
    struct cs_diag msg = {0};
    int rc = cs_patch_parse((const char *)data, size, &p, &msg);
    if (rc != CS_PATCH_OK) {
        check(rc == CS_PATCH_ERR_INVALID && p == NULL);
        check_msg(&msg);
        return 0;
    }
    check(p != NULL);
    for (size_t i = 0; i < p->n_ops; i++) {
        const struct cs_patch_op *op = &p->ops[i];
        check(op->path_len > 0 && op->path[op->path_len] == '\0');
        switch (op->kind) {
        case CS_PATCH_OP_ADD:
            check(op->content != NULL && op->content[op->content_len] == '\0');
            check(op->content_len == 0 || op->content[op->content_len - 1] == '\n');
            break;
        case CS_PATCH_OP_DELETE:
            check(op->n_chunks == 0 && op->move_to == NULL);
            break;
        case CS_PATCH_OP_UPDATE:
            check(op->n_chunks > 0);
            check(op->move_to == NULL ||
                  (op->move_to_len > 0 && op->move_to[op->move_to_len] == '\0'));
            /* A chunk without lines is an anchor ("@@" lines in a row): never the last, never
             * anchored at the end. */
            check(op->chunks[op->n_chunks - 1].n_lines > 0);
            for (size_t c = 0; c < op->n_chunks; c++)
                check(op->chunks[c].n_lines > 0 || !op->chunks[c].eof);
            for (size_t f = 0; f < sizeof files / sizeof files[0]; f++)
                apply_one(op, files[f], strlen(files[f]));
            apply_self(op);
            break;
        }
    }
    cs_patch_free(p);
    return 0;
}
