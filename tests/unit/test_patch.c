/*
 * Unit tests for the V4A patch parser and the in-memory apply (src/patch/patch.h): the grammar
 * and its tolerances, every parse error message, the four matching strategies and their order,
 * "@@" seeking, End of File anchoring, line endings, and every apply error message.
 * Trust: test inputs are fixed; the patch module is the code under test.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "patch.h"

/* ---- helpers ---- */

static struct cs_patch *parse_ok(const char *text)
{
    struct cs_patch *p = NULL;
    struct cs_diag msg = {0};
    int rc = cs_patch_parse(text, strlen(text), &p, &msg);
    if (rc != CS_PATCH_OK)
        fail_msg("parse failed: %s", msg.text);
    assert_non_null(p);
    return p;
}

static void parse_err(const char *text, const char *want)
{
    struct cs_patch *p = NULL;
    struct cs_diag msg = {0};
    int rc = cs_patch_parse(text, strlen(text), &p, &msg);
    assert_int_equal(rc, CS_PATCH_ERR_INVALID);
    assert_null(p);
    assert_int_equal(msg.code, CSW_ERROR_INVALID_PATCH);
    assert_string_equal(msg.text, want);
}

/* Parses patch, applies its only operation (an Update) to old, and compares with want. */
static void apply_ok(const char *patch, const char *old, const char *want)
{
    struct cs_patch *p = parse_ok(patch);
    assert_int_equal(p->n_ops, 1);
    char *out = NULL;
    size_t out_len = 0;
    struct cs_diag msg = {0};
    int rc = cs_patch_apply_update(&p->ops[0], old, strlen(old), &out, &out_len, &msg);
    if (rc != CS_PATCH_OK)
        fail_msg("apply failed: %s", msg.text);
    assert_int_equal(out_len, strlen(out));
    assert_string_equal(out, want);
    free(out);
    cs_patch_free(p);
}

static void apply_err(const char *patch, const char *old, const char *want)
{
    struct cs_patch *p = parse_ok(patch);
    assert_int_equal(p->n_ops, 1);
    char *out = NULL;
    size_t out_len = 0;
    struct cs_diag msg = {0};
    int rc = cs_patch_apply_update(&p->ops[0], old, strlen(old), &out, &out_len, &msg);
    assert_int_equal(rc, CS_PATCH_ERR_INVALID);
    assert_null(out);
    assert_int_equal(msg.code, CSW_ERROR_INVALID_PATCH);
    assert_string_equal(msg.text, want);
    cs_patch_free(p);
}

#define BEGIN "*** Begin Patch\n"
#define END   "*** End Patch\n"

/* ---- parsing: operations ---- */

static void parse_add(void **state)
{
    (void)state;
    struct cs_patch *p = parse_ok(BEGIN "*** Add File: src/new.c\n+int x;\n+\n+int y;\n" END);
    assert_int_equal(p->n_ops, 1);
    const struct cs_patch_op *op = &p->ops[0];
    assert_int_equal(op->kind, CS_PATCH_OP_ADD);
    assert_string_equal(op->path, "src/new.c");
    assert_int_equal(op->path_len, 9);
    assert_int_equal(op->line, 2);
    assert_int_equal(op->content_len, strlen("int x;\n\nint y;\n"));
    assert_string_equal(op->content, "int x;\n\nint y;\n");
    assert_null(op->move_to);
    assert_int_equal(op->n_chunks, 0);
    cs_patch_free(p);
}

static void parse_add_empty(void **state)
{
    (void)state;
    struct cs_patch *p = parse_ok(BEGIN "*** Add File: empty.txt\n" END);
    assert_int_equal(p->ops[0].content_len, 0);
    assert_string_equal(p->ops[0].content, "");
    cs_patch_free(p);
}

static void parse_delete(void **state)
{
    (void)state;
    struct cs_patch *p = parse_ok(BEGIN "*** Delete File: old.txt\n" END);
    assert_int_equal(p->n_ops, 1);
    assert_int_equal(p->ops[0].kind, CS_PATCH_OP_DELETE);
    assert_string_equal(p->ops[0].path, "old.txt");
    assert_null(p->ops[0].content);
    cs_patch_free(p);
}

static void parse_update(void **state)
{
    (void)state;
    struct cs_patch *p =
        parse_ok(BEGIN "*** Update File: a.c\n@@ int main(void)\n {\n-  return 1;\n"
                       "+  return 0;\n }\n" END);
    const struct cs_patch_op *op = &p->ops[0];
    assert_int_equal(op->kind, CS_PATCH_OP_UPDATE);
    assert_string_equal(op->path, "a.c");
    assert_int_equal(op->n_chunks, 1);
    const struct cs_patch_chunk *ch = &op->chunks[0];
    assert_string_equal(ch->ctx, "int main(void)");
    assert_int_equal(ch->ctx_len, 14);
    assert_int_equal(ch->ctx_line, 3);
    assert_int_equal(ch->first_line, 4);
    assert_false(ch->eof);
    assert_int_equal(ch->n_lines, 4);
    assert_int_equal(ch->lines[0].kind, CS_PATCH_LINE_CONTEXT);
    assert_string_equal(ch->lines[0].text, "{");
    assert_int_equal(ch->lines[1].kind, CS_PATCH_LINE_DEL);
    assert_string_equal(ch->lines[1].text, "  return 1;");
    assert_int_equal(ch->lines[2].kind, CS_PATCH_LINE_ADD);
    assert_string_equal(ch->lines[2].text, "  return 0;");
    assert_int_equal(ch->lines[3].kind, CS_PATCH_LINE_CONTEXT);
    cs_patch_free(p);
}

static void parse_move(void **state)
{
    (void)state;
    struct cs_patch *p =
        parse_ok(BEGIN "*** Update File: a.txt\n*** Move to: dir/b.txt\n@@\n-x\n+y\n" END);
    const struct cs_patch_op *op = &p->ops[0];
    assert_string_equal(op->move_to, "dir/b.txt");
    assert_int_equal(op->move_to_len, 9);
    assert_int_equal(op->move_line, 3);
    assert_int_equal(op->n_chunks, 1);
    assert_null(op->chunks[0].ctx);
    assert_int_equal(op->chunks[0].ctx_line, 4);
    cs_patch_free(p);
}

static void parse_several_ops(void **state)
{
    (void)state;
    struct cs_patch *p = parse_ok(BEGIN "*** Add File: a\n+1\n*** Delete File: b\n"
                                        "*** Update File: c\n-x\n+y\n*** Add File: d\n+2\n" END);
    assert_int_equal(p->n_ops, 4);
    assert_int_equal(p->ops[0].kind, CS_PATCH_OP_ADD);
    assert_int_equal(p->ops[1].kind, CS_PATCH_OP_DELETE);
    assert_int_equal(p->ops[2].kind, CS_PATCH_OP_UPDATE);
    assert_int_equal(p->ops[3].kind, CS_PATCH_OP_ADD);
    assert_string_equal(p->ops[3].content, "2\n");
    cs_patch_free(p);
}

static void parse_several_chunks(void **state)
{
    (void)state;
    struct cs_patch *p =
        parse_ok(BEGIN "*** Update File: a\n@@ one\n-x\n+y\n@@ two\n z\n@@\n-w\n" END);
    const struct cs_patch_op *op = &p->ops[0];
    assert_int_equal(op->n_chunks, 3);
    assert_string_equal(op->chunks[0].ctx, "one");
    assert_string_equal(op->chunks[1].ctx, "two");
    assert_null(op->chunks[2].ctx);
    assert_int_equal(op->chunks[2].n_lines, 1);
    assert_int_equal(op->chunks[2].first_line, 9);
    cs_patch_free(p);
}

static void parse_first_chunk_without_at(void **state)
{
    (void)state;
    struct cs_patch *p = parse_ok(BEGIN "*** Update File: a\n ctx\n-x\n+y\n@@ next\n-z\n" END);
    const struct cs_patch_op *op = &p->ops[0];
    assert_int_equal(op->n_chunks, 2);
    assert_null(op->chunks[0].ctx);
    assert_int_equal(op->chunks[0].ctx_line, 0);
    assert_int_equal(op->chunks[0].first_line, 3);
    assert_int_equal(op->chunks[0].n_lines, 3);
    cs_patch_free(p);
}

static void parse_blank_line_is_context(void **state)
{
    (void)state;
    struct cs_patch *p = parse_ok(BEGIN "*** Update File: a\n@@\n a\n\n-b\n" END);
    const struct cs_patch_chunk *ch = &p->ops[0].chunks[0];
    assert_int_equal(ch->n_lines, 3);
    assert_int_equal(ch->lines[1].kind, CS_PATCH_LINE_CONTEXT);
    assert_int_equal(ch->lines[1].len, 0);
    cs_patch_free(p);
}

static void parse_end_of_file(void **state)
{
    (void)state;
    struct cs_patch *p =
        parse_ok(BEGIN "*** Update File: a\n@@\n-last\n+new last\n*** End of File\n" END);
    assert_true(p->ops[0].chunks[0].eof);
    assert_int_equal(p->ops[0].chunks[0].n_lines, 2);
    cs_patch_free(p);
}

static void parse_empty_patch(void **state)
{
    (void)state;
    struct cs_patch *p = parse_ok(BEGIN END);
    assert_int_equal(p->n_ops, 0);
    cs_patch_free(p);
}

static void parse_whitespace_around_markers(void **state)
{
    (void)state;
    struct cs_patch *p =
        parse_ok("\n \n  *** Begin Patch  \n*** Add File: a\n+x\n\t*** End Patch\t\n\n  \n");
    assert_int_equal(p->n_ops, 1);
    assert_string_equal(p->ops[0].content, "x\n");
    cs_patch_free(p);
}

/* docs/contract/patch.md §1: leading white space before an operation header is tolerated where no
 * chunk is open (after "*** Begin Patch", between operations, after an Add body), as Codex's
 * apply_patch accepts; inside a chunk such a line stays chunk content. */
static void parse_leading_ws_before_headers(void **state)
{
    (void)state;
    struct cs_patch *p = parse_ok(BEGIN "  *** Add File: a\n+x\n\t *** Delete File: b\n"
                                        "   *** Update File: c\n@@\n-1\n+2\n" END);
    assert_int_equal(p->n_ops, 3);
    assert_int_equal(p->ops[0].kind, CS_PATCH_OP_ADD);
    assert_string_equal(p->ops[0].path, "a");
    assert_string_equal(p->ops[0].content, "x\n");
    assert_int_equal(p->ops[1].kind, CS_PATCH_OP_DELETE);
    assert_string_equal(p->ops[1].path, "b");
    assert_int_equal(p->ops[2].kind, CS_PATCH_OP_UPDATE);
    assert_string_equal(p->ops[2].path, "c");
    cs_patch_free(p);

    /* Inside a chunk the same line is a context line, not a header. */
    p = parse_ok(BEGIN "*** Update File: c\n@@\n-1\n *** Add File: d\n" END);
    assert_int_equal(p->n_ops, 1);
    assert_int_equal(p->ops[0].n_chunks, 1);
    assert_int_equal(p->ops[0].chunks[0].n_lines, 2);
    assert_int_equal(p->ops[0].chunks[0].lines[1].kind, CS_PATCH_LINE_CONTEXT);
    assert_string_equal(p->ops[0].chunks[0].lines[1].text, "*** Add File: d");
    cs_patch_free(p);

    /* After "*** End of File" a chunk may follow: no tolerance there (Codex refuses it too). */
    parse_err(BEGIN "*** Update File: c\n@@\n-1\n*** End of File\n *** Add File: d\n+x\n" END,
              "line 6: expected \"@@\", \"*** Add File: \", \"*** Delete File: \", \"*** Update "
              "File: \" or \"*** End Patch\" after \"*** End of File\", got \" *** Add File: d\"");
    /* Only operation headers: other markers keep their rules. */
    parse_err(
        BEGIN " *** Move to: x\n" END,
        "line 2: expected \"*** Add File: \", \"*** Delete File: \", \"*** Update File: \" or "
        "\"*** End Patch\", got \" *** Move to: x\"");
}

static void parse_no_final_newline(void **state)
{
    (void)state;
    struct cs_patch *p = parse_ok(BEGIN "*** Delete File: a\n*** End Patch");
    assert_int_equal(p->n_ops, 1);
    cs_patch_free(p);
}

static void parse_crlf_patch(void **state)
{
    (void)state;
    struct cs_patch *p =
        parse_ok("*** Begin Patch\r\n*** Add File: a b\r\n+x\r\n*** End Patch\r\n");
    assert_string_equal(p->ops[0].path, "a b");
    assert_string_equal(p->ops[0].content, "x\n");
    cs_patch_free(p);
}

static void parse_heredoc_quoted(void **state)
{
    (void)state;
    struct cs_patch *p = parse_ok("<<'EOF'\n" BEGIN "*** Delete File: a\n" END "EOF\n");
    assert_int_equal(p->n_ops, 1);
    assert_int_equal(p->ops[0].line, 3);
    cs_patch_free(p);
}

static void parse_heredoc_plain(void **state)
{
    (void)state;
    struct cs_patch *p = parse_ok("<<EOF\n" BEGIN "*** Delete File: a\n" END "EOF");
    assert_int_equal(p->n_ops, 1);
    cs_patch_free(p);
}

static void parse_heredoc_double_quoted(void **state)
{
    (void)state;
    struct cs_patch *p = parse_ok("  <<\"EOF\"  \n\n" BEGIN "*** Delete File: a\n" END " EOF \n\n");
    assert_int_equal(p->n_ops, 1);
    assert_int_equal(p->ops[0].line, 4);
    cs_patch_free(p);
}

static void parse_path_verbatim(void **state)
{
    (void)state;
    struct cs_patch *p = parse_ok(BEGIN "*** Delete File:  ../x y \n" END);
    assert_string_equal(p->ops[0].path, " ../x y ");
    cs_patch_free(p);
}

static void parse_path_with_nul(void **state)
{
    (void)state;
    static const char text[] = "*** Begin Patch\n*** Delete File: a\0b\n*** End Patch\n";
    struct cs_patch *p = NULL;
    struct cs_diag msg = {0};
    assert_int_equal(cs_patch_parse(text, sizeof text - 1, &p, &msg), CS_PATCH_OK);
    assert_int_equal(p->ops[0].path_len, 3);
    assert_memory_equal(p->ops[0].path, "a\0b", 3);
    cs_patch_free(p);
}

static void parse_at_at_blank_context_is_none(void **state)
{
    (void)state;
    struct cs_patch *p = parse_ok(BEGIN "*** Update File: a\n@@   \n-x\n" END);
    assert_null(p->ops[0].chunks[0].ctx);
    cs_patch_free(p);
}

static void parse_text_is_copied(void **state)
{
    (void)state;
    char *text = strdup(BEGIN "*** Add File: a\n+x\n" END);
    assert_non_null(text);
    struct cs_patch *p = NULL;
    struct cs_diag msg = {0};
    assert_int_equal(cs_patch_parse(text, strlen(text), &p, &msg), CS_PATCH_OK);
    memset(text, 'z', strlen(text));
    free(text);
    assert_string_equal(p->ops[0].path, "a");
    assert_string_equal(p->ops[0].content, "x\n");
    cs_patch_free(p);
}

/* ---- parsing: errors ---- */

static void err_empty_text(void **state)
{
    (void)state;
    parse_err("", "line 1: expected \"*** Begin Patch\", got end of input");
    parse_err(" \n\n", "line 1: expected \"*** Begin Patch\", got end of input");
}

static void err_missing_begin(void **state)
{
    (void)state;
    parse_err("*** Add File: a\n+x\n" END,
              "line 1: expected \"*** Begin Patch\", got \"*** Add File: a\"");
}

static void err_missing_end(void **state)
{
    (void)state;
    parse_err(BEGIN "*** Add File: a\n+x\n", "line 3: expected \"*** End Patch\", got \"+x\"");
}

static void err_only_begin(void **state)
{
    (void)state;
    parse_err(BEGIN, "line 2: expected \"*** End Patch\", got end of input");
}

static void err_unknown_marker(void **state)
{
    (void)state;
    parse_err(BEGIN "*** Copy File: a\n" END,
              "line 2: expected \"*** Add File: \", \"*** Delete File: \", \"*** Update File: \" "
              "or \"*** End Patch\", got \"*** Copy File: a\"");
}

static void err_top_level_garbage(void **state)
{
    (void)state;
    parse_err(BEGIN "*** Delete File: a\nfoo\n" END,
              "line 3: expected \"*** Add File: \", \"*** Delete File: \", \"*** Update File: \" "
              "or \"*** End Patch\", got \"foo\"");
}

static void err_add_line_without_plus(void **state)
{
    (void)state;
    parse_err(BEGIN "*** Add File: a\n+x\n y\n" END,
              "line 4: expected a line starting with \"+\" (the Add File body), \"*** Add File: "
              "\", \"*** Delete File: \", \"*** Update File: \" or \"*** End Patch\", got \" y\"");
}

static void err_add_blank_line(void **state)
{
    (void)state;
    parse_err(BEGIN "*** Add File: a\n+x\n\n+y\n" END,
              "line 4: expected a line starting with \"+\" (the Add File body), \"*** Add File: "
              "\", \"*** Delete File: \", \"*** Update File: \" or \"*** End Patch\", got \"\"");
}

static void err_empty_paths(void **state)
{
    (void)state;
    parse_err(BEGIN "*** Add File: \n" END, "line 2: empty path after \"*** Add File: \"");
    parse_err(BEGIN "*** Delete File: \n" END, "line 2: empty path after \"*** Delete File: \"");
    parse_err(BEGIN "*** Update File: \n" END, "line 2: empty path after \"*** Update File: \"");
    parse_err(BEGIN "*** Update File: a\n*** Move to: \n-x\n" END,
              "line 3: empty path after \"*** Move to: \"");
}

static void err_update_without_chunks(void **state)
{
    (void)state;
    parse_err(BEGIN "*** Update File: a\n" END,
              "line 3: the update of \"a\" (line 2) has no chunks: expected \"@@\" or a line "
              "starting with \" \", \"-\" or \"+\", got \"*** End Patch\"");
    parse_err(BEGIN "*** Update File: a\n*** Delete File: b\n" END,
              "line 3: the update of \"a\" (line 2) has no chunks: expected \"@@\" or a line "
              "starting with \" \", \"-\" or \"+\", got \"*** Delete File: b\"");
    parse_err(BEGIN "*** Update File: a\n*** Move to: b\n" END,
              "line 4: the update of \"a\" (line 2) has no chunks: expected \"@@\" or a line "
              "starting with \" \", \"-\" or \"+\", got \"*** End Patch\"");
}

static void err_chunk_without_lines(void **state)
{
    (void)state;
    /* "@@" lines in a row are anchors; the last one still needs lines. */
    parse_err(BEGIN "*** Update File: a\n@@ x\n@@ y\n" END,
              "line 5: expected a chunk line starting with \" \", \"-\" or \"+\" after the \"@@\" "
              "on line 4, got \"*** End Patch\"");
    parse_err(BEGIN "*** Update File: a\n@@ x\n@@ y\n*** Delete File: b\n" END,
              "line 5: expected a chunk line starting with \" \", \"-\" or \"+\" after the \"@@\" "
              "on line 4, got \"*** Delete File: b\"");
    parse_err(BEGIN "*** Update File: a\n@@ x\n" END,
              "line 4: expected a chunk line starting with \" \", \"-\" or \"+\" after the \"@@\" "
              "on line 3, got \"*** End Patch\"");
}

static void err_chunk_garbage(void **state)
{
    (void)state;
    parse_err(BEGIN "*** Update File: a\n-x\n~y\n" END,
              "line 4: expected a chunk line starting with \" \", \"-\" or \"+\", \"@@\", \"*** "
              "End of File\", \"*** Add File: \", \"*** Delete File: \", \"*** Update File: \" "
              "or \"*** End Patch\", got \"~y\"");
}

static void err_after_end_of_file(void **state)
{
    (void)state;
    parse_err(BEGIN "*** Update File: a\n-x\n*** End of File\n-y\n" END,
              "line 5: expected \"@@\", \"*** Add File: \", \"*** Delete File: \", \"*** Update "
              "File: \" or \"*** End Patch\" after \"*** End of File\", got \"-y\"");
}

static void err_move_without_update(void **state)
{
    (void)state;
    parse_err(BEGIN "*** Move to: b\n" END,
              "line 2: \"*** Move to: \" must directly follow \"*** Update File: \"");
    parse_err(BEGIN "*** Update File: a\n-x\n*** Move to: b\n" END,
              "line 4: \"*** Move to: \" must directly follow \"*** Update File: \"");
    parse_err(BEGIN "*** Add File: a\n*** Move to: b\n" END,
              "line 3: \"*** Move to: \" must directly follow \"*** Update File: \"");
}

static void err_second_move(void **state)
{
    (void)state;
    parse_err(BEGIN "*** Update File: a\n*** Move to: b\n*** Move to: c\n-x\n" END,
              "line 4: a second \"*** Move to: \" for the update on line 2");
}

static void err_end_patch_in_the_middle(void **state)
{
    (void)state;
    parse_err(BEGIN "*** Delete File: a\n" END "*** Delete File: b\n" END,
              "line 3: \"*** End Patch\" before the end of the patch (it must be the last line, "
              "line 5)");
}

static void err_duplicate_paths(void **state)
{
    (void)state;
    parse_err(BEGIN "*** Add File: a\n+x\n*** Delete File: b\n*** Update File: a\n-x\n" END,
              "line 5: \"a\" is already touched by the operation on line 2 (one operation per "
              "path)");
    parse_err(BEGIN "*** Delete File: a\n*** Add File: a\n" END,
              "line 3: \"a\" is already touched by the operation on line 2 (one operation per "
              "path)");
}

static void err_duplicate_move_target(void **state)
{
    (void)state;
    parse_err(BEGIN "*** Update File: a\n*** Move to: b\n-x\n*** Add File: b\n" END,
              "line 5: \"b\" is already touched by the operation on line 3 (one operation per "
              "path)");
    parse_err(BEGIN "*** Update File: a\n*** Move to: a\n-x\n" END,
              "line 3: \"a\" is already touched by the operation on line 2 (one operation per "
              "path)");
}

static void err_duplicate_reports_earliest(void **state)
{
    (void)state;
    parse_err(BEGIN "*** Delete File: z\n*** Delete File: a\n*** Delete File: z\n"
                    "*** Delete File: a\n*** Delete File: z\n" END,
              "line 4: \"z\" is already touched by the operation on line 2 (one operation per "
              "path)");
}

static void err_heredoc_unclosed(void **state)
{
    (void)state;
    parse_err("<<'EOF'\n" BEGIN END,
              "line 3: expected \"EOF\" closing the heredoc opened on line 1, got \"*** End "
              "Patch\"");
    parse_err("<<EOF\n", "line 2: expected \"EOF\" closing the heredoc opened on line 1, got end "
                         "of input");
}

static void err_heredoc_empty(void **state)
{
    (void)state;
    parse_err("<<EOF\nEOF\n", "line 2: expected \"*** Begin Patch\", got \"EOF\"");
    parse_err("<<EOF\n" BEGIN "EOF\n", "line 3: expected \"*** End Patch\", got \"EOF\"");
}

static void err_quotes_escape_bytes(void **state)
{
    (void)state;
    parse_err(BEGIN "x\"\\\x01\xff\xc3\xa9\n" END,
              "line 2: expected \"*** Add File: \", \"*** Delete File: \", \"*** Update File: \" "
              "or \"*** End Patch\", got \"x\\\"\\\\\\x01\\xFF\xc3\xa9\"");
}

static void err_long_line_is_cut(void **state)
{
    (void)state;
    char text[512];
    char want[512];
    char longl[201];
    memset(longl, 'q', 200);
    longl[200] = '\0';
    snprintf(text, sizeof text, BEGIN "%s\n" END, longl);
    snprintf(want, sizeof want,
             "line 2: expected \"*** Add File: \", \"*** Delete File: \", \"*** Update File: \" or "
             "\"*** End Patch\", got \"%.80s...\"",
             longl);
    parse_err(text, want);
}

static void err_msg_carries_code(void **state)
{
    (void)state;
    /* The quoted line holds multi-byte chars; the diag's bound and UTF-8 cut are base_diag's
     * (tests/unit/test_diag.c). Here: the refusal carries INVALID_PATCH and keeps the chars. */
    const char *text = BEGIN "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\n" END;
    struct cs_diag d = {0};
    struct cs_patch *p = NULL;
    assert_int_equal(cs_patch_parse(text, strlen(text), &p, &d), CS_PATCH_ERR_INVALID);
    assert_true(cs_diag_failed(&d));
    assert_int_equal(d.code, CSW_ERROR_INVALID_PATCH);
    assert_int_equal(cs_patch_rc_error(CS_PATCH_ERR_INVALID), CSW_ERROR_INVALID_PATCH);
    assert_int_equal(cs_patch_rc_error(CS_PATCH_ERR_NOMEM), CSW_ERROR_INTERNAL);
    assert_int_equal(cs_patch_rc_error(CS_PATCH_OK), 0);
    assert_non_null(strstr(d.text, "\"\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\""));
    assert_int_equal(cs_patch_parse(text, strlen(text), &p, NULL), CS_PATCH_ERR_INVALID);
}

static void err_too_many_lines(void **state)
{
    (void)state;
    size_t n = (size_t)CS_PATCH_MAX_LINES + 1;
    char *text = malloc(n);
    assert_non_null(text);
    memset(text, '\n', n);
    struct cs_patch *p = NULL;
    struct cs_diag msg = {0};
    assert_int_equal(cs_patch_parse(text, n, &p, &msg), CS_PATCH_ERR_INVALID);
    assert_string_equal(msg.text, "patch has more than 4194304 lines");
    free(text);
}

/* ---- apply ---- */

#define UPD "*** Update File: src/a.c\n"

static void apply_simple(void **state)
{
    (void)state;
    apply_ok(BEGIN UPD "@@\n a\n-b\n+B\n c\n" END, "a\nb\nc\nd\n", "a\nB\nc\nd\n");
}

static void apply_several_chunks(void **state)
{
    (void)state;
    apply_ok(BEGIN UPD "@@\n-1\n+one\n@@\n 3\n-4\n+four\n@@\n-6\n" END, "1\n2\n3\n4\n5\n6\n7\n",
             "one\n2\n3\nfour\n5\n7\n");
}

static void apply_at_seek(void **state)
{
    (void)state;
    /* "x" occurs twice; the "@@ g" seek picks the one after "g". */
    apply_ok(BEGIN UPD "@@ g\n-x\n+y\n" END, "f\nx\ng\nx\n", "f\nx\ng\ny\n");
}

static void apply_nested_at(void **state)
{
    (void)state;
    const char *file = "class A\n  def f\n    x\nclass B\n  def f\n    x\n  def g\n    x\n";
    /* Each "@@" searches from after the one before: f of B, not f of A nor g's x. */
    apply_ok(BEGIN UPD "@@ class B\n@@   def f\n-    x\n+    y\n" END, file,
             "class A\n  def f\n    x\nclass B\n  def f\n    y\n  def g\n    x\n");
    /* A pure insertion goes after the last anchor. */
    apply_ok(BEGIN UPD "@@ class B\n@@   def f\n+    w\n" END, file,
             "class A\n  def f\n    x\nclass B\n  def f\n    w\n    x\n  def g\n    x\n");
    /* ... also when the last "@@" is bare: it moves nothing, the anchor before it holds. */
    apply_ok(BEGIN UPD "@@ class B\n@@\n+  w\n" END, file,
             "class A\n  def f\n    x\nclass B\n  w\n  def f\n    x\n  def g\n    x\n");
    /* Bare "@@" only: no anchor, so at the end, as a lone "@@" does. */
    apply_ok(BEGIN UPD "@@\n@@\n+end\n" END, "a\n", "a\nend\n");
    /* Three deep, and a bare "@@" among them moves nothing. */
    apply_ok(BEGIN UPD "@@\n@@ class B\n@@\n@@   def g\n-    x\n+    z\n" END, file,
             "class A\n  def f\n    x\nclass B\n  def f\n    x\n  def g\n    z\n");
    /* Anchors after an earlier chunk search from its end. */
    apply_ok(BEGIN UPD
             "@@ class A\n-  def f\n+  def f0\n@@ class B\n@@   def f\n-    x\n+    v\n" END,
             file, "class A\n  def f0\n    x\nclass B\n  def f\n    v\n  def g\n    x\n");
}

static void err_nested_at_not_found(void **state)
{
    (void)state;
    /* The second anchor is searched after the first only: "class A" lies before "class B". */
    apply_err(BEGIN UPD "@@ class B\n@@ class A\n-x\n" END, "class A\nx\nclass B\nx\n",
              "update of src/a.c: context not found (patch line 4): \"class A\"");
}

static void apply_at_seek_uses_strategies(void **state)
{
    (void)state;
    apply_ok(BEGIN UPD "@@ void g()\n-x\n+y\n" END, "x\n  void g()  \nx\n", "x\n  void g()  \ny\n");
}

static void apply_omitted_first_at(void **state)
{
    (void)state;
    apply_ok(BEGIN UPD " a\n-b\n@@ c\n-d\n" END, "a\nb\nc\nd\n", "a\nc\n");
}

static void apply_blank_context(void **state)
{
    (void)state;
    apply_ok(BEGIN UPD "@@\n a\n\n-b\n+B\n" END, "a\n\nb\n", "a\n\nB\n");
}

static void apply_exact(void **state)
{
    (void)state;
    apply_ok(BEGIN UPD "-x = 1;\n+x = 2;\n" END, "y\nx = 1;\n", "y\nx = 2;\n");
}

static void apply_rtrim(void **state)
{
    (void)state;
    apply_ok(BEGIN UPD "-x = 1;\n+x = 2;\n" END, "x = 1;   \t\n", "x = 2;\n");
}

static void apply_trim(void **state)
{
    (void)state;
    apply_ok(BEGIN UPD "-x = 1;\n+    x = 2;\n" END, "    x = 1;\n", "    x = 2;\n");
}

static void apply_fold(void **state)
{
    (void)state;
    /* en dash, right single quote, left/right double quotes, no-break space. */
    apply_ok(BEGIN UPD "-a - b 'c' \"d\" e\n+ok\n" END,
             "a \xe2\x80\x93 b \xe2\x80\x98"
             "c\xe2\x80\x99 \xe2\x80\x9c"
             "d\xe2\x80\x9d\xc2\xa0"
             "e\n",
             "ok\n");
}

static void apply_fold_other_code_points(void **state)
{
    (void)state;
    /* U+2212 minus, U+201A/U+201B, U+201E/U+201F, U+202F, U+2010 and U+2015 fold too. */
    apply_ok(BEGIN UPD "-1 - 2 '' \"\" x-y-z\n+ok\n" END,
             "1 \xe2\x88\x92 2 \xe2\x80\x9a\xe2\x80\x9b \xe2\x80\x9e\xe2\x80\x9f\xe2\x80\xafx"
             "\xe2\x80\x90y\xe2\x80\x95z\n",
             "ok\n");
    /* and the patch side folds as well. */
    apply_ok(BEGIN UPD "-\xe2\x80\x9chi\xe2\x80\x9d\n+ok\n" END, "\"hi\"\n", "ok\n");
}

static void apply_fold_does_not_fold_others(void **state)
{
    (void)state;
    /* U+2016 (double vertical line) and U+2020 are not punctuation we fold. */
    apply_err(BEGIN UPD "-a-b\n" END,
              "a\xe2\x80\x96"
              "b\n",
              "update of src/a.c: context not found (patch line 3): \"a-b\"");
}

static void apply_exact_wins_over_rtrim(void **state)
{
    (void)state;
    /* Line 1 matches only ignoring trailing white space; line 3 exactly: exact wins. */
    apply_ok(BEGIN UPD "-x\n+y\n" END, "x  \nm\nx\n", "x  \nm\ny\n");
}

static void apply_rtrim_wins_over_trim(void **state)
{
    (void)state;
    apply_ok(BEGIN UPD "-x\n+y\n" END, "  x\nm\nx \n", "  x\nm\ny\n");
}

static void apply_trim_wins_over_fold(void **state)
{
    (void)state;
    apply_ok(BEGIN UPD "-a-b\n+y\n" END,
             "a\xe2\x80\x94"
             "b\nm\n a-b\n",
             "a\xe2\x80\x94"
             "b\nm\ny\n");
}

static void apply_context_keeps_file_bytes(void **state)
{
    (void)state;
    /* Matched ignoring white space: context lines keep the file's own text. */
    apply_ok(BEGIN UPD " a\n-b\n+B\n c\n" END, "\ta  \n b\n  c\n", "\ta  \nB\n  c\n");
}

static void apply_end_of_file(void **state)
{
    (void)state;
    /* "x" occurs twice; the anchored chunk takes the last one. */
    apply_ok(BEGIN UPD "@@\n-x\n+y\n*** End of File\n" END, "x\nm\nx\n", "x\nm\ny\n");
}

static void apply_end_of_file_must_be_at_end(void **state)
{
    (void)state;
    apply_err(BEGIN UPD "@@\n-x\n+y\n*** End of File\n" END, "x\nm\n",
              "update of src/a.c: context not found (patch line 4): \"x\"");
}

static void apply_end_of_file_insertion(void **state)
{
    (void)state;
    apply_ok(BEGIN UPD "@@\n+tail\n*** End of File\n" END, "a\nb", "a\nb\ntail\n");
}

static void apply_pure_insertion_appends(void **state)
{
    (void)state;
    apply_ok(BEGIN UPD "+z\n" END, "a\nb\n", "a\nb\nz\n");
}

static void apply_pure_insertion_after_at(void **state)
{
    (void)state;
    apply_ok(BEGIN UPD "@@ a\n+a2\n" END, "a\nb\n", "a\na2\nb\n");
}

static void apply_crlf_kept(void **state)
{
    (void)state;
    apply_ok(BEGIN UPD "@@\n a\n-b\n+B\n+C\n" END, "a\r\nb\r\nc\r\n", "a\r\nB\r\nC\r\nc\r\n");
}

static void apply_crlf_patch_on_lf_file(void **state)
{
    (void)state;
    apply_ok("*** Begin Patch\r\n*** Update File: f\r\n-b\r\n+B\r\n*** End Patch\r\n", "a\nb\n",
             "a\nB\n");
}

static void apply_crlf_file_missing_final_newline(void **state)
{
    (void)state;
    apply_ok(BEGIN UPD "-a\n+A\n" END, "a\r\nb", "A\r\nb\r\n");
}

static void apply_adds_final_newline(void **state)
{
    (void)state;
    apply_ok(BEGIN UPD "-a\n+A\n" END, "a\nb", "A\nb\n");
    apply_ok(BEGIN UPD "-b\n+B\n" END, "a\nb", "a\nB\n");
}

static void apply_delete_all_lines(void **state)
{
    (void)state;
    apply_ok(BEGIN UPD "-a\n-b\n" END, "a\nb\n", "");
}

static void apply_to_empty_file(void **state)
{
    (void)state;
    apply_ok(BEGIN UPD "+first\n" END, "", "first\n");
}

static void apply_trailing_blank_context_retry(void **state)
{
    (void)state;
    /* The blank line before the next marker is context the file does not have at its end. */
    apply_ok(BEGIN UPD "@@\n-b\n+B\n\n" END, "a\nb\n", "a\nB\n");
}

static void apply_move_chunks(void **state)
{
    (void)state;
    apply_ok(BEGIN UPD "*** Move to: src/b.c\n@@\n-x\n+y\n" END, "x\n", "y\n");
}

static void err_context_not_found(void **state)
{
    (void)state;
    apply_err(BEGIN UPD "@@\n int main(void)\n-{\n" END, "int f(void)\n{\n",
              "update of src/a.c: context not found (patch line 4): \"int main(void)\"");
}

static void err_context_first_expected_is_removed_line(void **state)
{
    (void)state;
    apply_err(BEGIN UPD "@@\n+added\n-gone\n" END, "a\n",
              "update of src/a.c: context not found (patch line 5): \"gone\"");
}

static void err_at_context_not_found(void **state)
{
    (void)state;
    apply_err(BEGIN UPD "@@ int main(void)\n-x\n" END, "x\n",
              "update of src/a.c: context not found (patch line 3): \"int main(void)\"");
}

static void err_second_chunk_mismatch(void **state)
{
    (void)state;
    apply_err(BEGIN UPD "@@\n-a\n+A\n@@\n-zz\n+Z\n" END, "a\nb\n",
              "update of src/a.c: context not found (patch line 7): \"zz\"");
}

static void err_chunks_out_of_order(void **state)
{
    (void)state;
    apply_err(BEGIN UPD "@@\n-c\n+C\n@@\n-a\n+A\n" END, "a\nb\nc\n",
              "update of src/a.c: context not found (patch line 7): \"a\"");
}

static void err_apply_path_escaped(void **state)
{
    (void)state;
    apply_err(BEGIN "*** Update File: d\xff/\"x\"\n-q\n" END, "a\n",
              "update of d\\xFF/\\\"x\\\": context not found (patch line 3): \"q\"");
}

static void err_apply_not_update(void **state)
{
    (void)state;
    struct cs_patch *p = parse_ok(BEGIN "*** Delete File: a\n" END);
    char *out = NULL;
    size_t n = 0;
    struct cs_diag msg = {0};
    assert_int_equal(cs_patch_apply_update(&p->ops[0], "x\n", 2, &out, &n, &msg),
                     CS_PATCH_ERR_INVALID);
    assert_null(out);
    assert_int_equal(cs_patch_apply_update(NULL, "x\n", 2, &out, &n, &msg), CS_PATCH_ERR_INVALID);
    cs_patch_free(p);
}

static void apply_nul_bytes_in_file(void **state)
{
    (void)state;
    struct cs_patch *p = parse_ok(BEGIN UPD "-b\n+B\n" END);
    static const char old[] = "a\0z\nb\n";
    char *out = NULL;
    size_t n = 0;
    struct cs_diag msg = {0};
    assert_int_equal(cs_patch_apply_update(&p->ops[0], old, sizeof old - 1, &out, &n, &msg),
                     CS_PATCH_OK);
    assert_int_equal(n, 6);
    assert_memory_equal(out, "a\0z\nB\n", 6);
    free(out);
    cs_patch_free(p);
}

static void apply_same_plan_twice(void **state)
{
    (void)state;
    struct cs_patch *p = parse_ok(BEGIN UPD "-b\n+B\n" END);
    for (int i = 0; i < 2; i++) {
        char *out = NULL;
        size_t n = 0;
        assert_int_equal(cs_patch_apply_update(&p->ops[0], "a\nb\n", 4, &out, &n, NULL),
                         CS_PATCH_OK);
        assert_string_equal(out, "a\nB\n");
        free(out);
    }
    cs_patch_free(p);
}

static void free_null(void **state)
{
    (void)state;
    cs_patch_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(parse_add),
        cmocka_unit_test(parse_add_empty),
        cmocka_unit_test(parse_delete),
        cmocka_unit_test(parse_update),
        cmocka_unit_test(parse_move),
        cmocka_unit_test(parse_several_ops),
        cmocka_unit_test(parse_several_chunks),
        cmocka_unit_test(parse_first_chunk_without_at),
        cmocka_unit_test(parse_blank_line_is_context),
        cmocka_unit_test(parse_end_of_file),
        cmocka_unit_test(parse_empty_patch),
        cmocka_unit_test(parse_whitespace_around_markers),
        cmocka_unit_test(parse_leading_ws_before_headers),
        cmocka_unit_test(parse_no_final_newline),
        cmocka_unit_test(parse_crlf_patch),
        cmocka_unit_test(parse_heredoc_quoted),
        cmocka_unit_test(parse_heredoc_plain),
        cmocka_unit_test(parse_heredoc_double_quoted),
        cmocka_unit_test(parse_path_verbatim),
        cmocka_unit_test(parse_path_with_nul),
        cmocka_unit_test(parse_at_at_blank_context_is_none),
        cmocka_unit_test(parse_text_is_copied),
        cmocka_unit_test(err_empty_text),
        cmocka_unit_test(err_missing_begin),
        cmocka_unit_test(err_missing_end),
        cmocka_unit_test(err_only_begin),
        cmocka_unit_test(err_unknown_marker),
        cmocka_unit_test(err_top_level_garbage),
        cmocka_unit_test(err_add_line_without_plus),
        cmocka_unit_test(err_add_blank_line),
        cmocka_unit_test(err_empty_paths),
        cmocka_unit_test(err_update_without_chunks),
        cmocka_unit_test(err_chunk_without_lines),
        cmocka_unit_test(err_chunk_garbage),
        cmocka_unit_test(err_after_end_of_file),
        cmocka_unit_test(err_move_without_update),
        cmocka_unit_test(err_second_move),
        cmocka_unit_test(err_end_patch_in_the_middle),
        cmocka_unit_test(err_duplicate_paths),
        cmocka_unit_test(err_duplicate_move_target),
        cmocka_unit_test(err_duplicate_reports_earliest),
        cmocka_unit_test(err_heredoc_unclosed),
        cmocka_unit_test(err_heredoc_empty),
        cmocka_unit_test(err_quotes_escape_bytes),
        cmocka_unit_test(err_long_line_is_cut),
        cmocka_unit_test(err_msg_carries_code),
        cmocka_unit_test(err_too_many_lines),
        cmocka_unit_test(apply_simple),
        cmocka_unit_test(apply_several_chunks),
        cmocka_unit_test(apply_at_seek),
        cmocka_unit_test(apply_nested_at),
        cmocka_unit_test(err_nested_at_not_found),
        cmocka_unit_test(apply_at_seek_uses_strategies),
        cmocka_unit_test(apply_omitted_first_at),
        cmocka_unit_test(apply_blank_context),
        cmocka_unit_test(apply_exact),
        cmocka_unit_test(apply_rtrim),
        cmocka_unit_test(apply_trim),
        cmocka_unit_test(apply_fold),
        cmocka_unit_test(apply_fold_other_code_points),
        cmocka_unit_test(apply_fold_does_not_fold_others),
        cmocka_unit_test(apply_exact_wins_over_rtrim),
        cmocka_unit_test(apply_rtrim_wins_over_trim),
        cmocka_unit_test(apply_trim_wins_over_fold),
        cmocka_unit_test(apply_context_keeps_file_bytes),
        cmocka_unit_test(apply_end_of_file),
        cmocka_unit_test(apply_end_of_file_must_be_at_end),
        cmocka_unit_test(apply_end_of_file_insertion),
        cmocka_unit_test(apply_pure_insertion_appends),
        cmocka_unit_test(apply_pure_insertion_after_at),
        cmocka_unit_test(apply_crlf_kept),
        cmocka_unit_test(apply_crlf_patch_on_lf_file),
        cmocka_unit_test(apply_crlf_file_missing_final_newline),
        cmocka_unit_test(apply_adds_final_newline),
        cmocka_unit_test(apply_delete_all_lines),
        cmocka_unit_test(apply_to_empty_file),
        cmocka_unit_test(apply_trailing_blank_context_retry),
        cmocka_unit_test(apply_move_chunks),
        cmocka_unit_test(err_context_not_found),
        cmocka_unit_test(err_context_first_expected_is_removed_line),
        cmocka_unit_test(err_at_context_not_found),
        cmocka_unit_test(err_second_chunk_mismatch),
        cmocka_unit_test(err_chunks_out_of_order),
        cmocka_unit_test(err_apply_path_escaped),
        cmocka_unit_test(err_apply_not_update),
        cmocka_unit_test(apply_nul_bytes_in_file),
        cmocka_unit_test(apply_same_plan_twice),
        cmocka_unit_test(free_null),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
