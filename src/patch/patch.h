/*
 * patch: the V4A patch engine's pure half (docs/contract/patch.md §1). cs_patch_parse turns patch
 * text into a plan (Add, Delete, Update operations; an Update holds chunks), and
 * cs_patch_apply_update applies one Update's chunks to a file's old content in memory. Nothing
 * here touches the file system, a path policy or the ledger: apply_patch's transaction layer
 * normalises and checks every path, reads the old contents, calls this module and writes the
 * results. The grammar, the tolerances and the matching strategies are in docs/patch-format.md.
 *
 * Trust: the patch text is the client's and fully untrusted: any bytes, any length (the caller
 * caps the text; this module only refuses more than CS_PATCH_MAX_LINES lines, so every array it
 * grows is bounded). Paths are returned verbatim and are NOT checked here beyond being non-empty:
 * they may be absolute, hold "..", NUL bytes or anything else, and two spellings of one file
 * ("a/b" and "a/./b") are not recognised as the same file. The old content given to apply is a
 * workspace file: any bytes, not necessarily UTF-8.
 *
 * Entry points: cs_patch_parse, cs_patch_free, cs_patch_apply_update. The library never logs.
 *
 * Errors: fallible functions return CS_PATCH_OK (0) or a negative enum cs_patch_rc value, write
 * their outputs only on success, and record the failure in diag (base_diag.h) when diag is not
 * NULL. The diag's code is the status's csw_error: CS_PATCH_ERR_INVALID is the wire's
 * INVALID_PATCH; CS_PATCH_ERR_NOMEM is an allocation failure (INTERNAL).
 */
#ifndef CS_PATCH_H
#define CS_PATCH_H

#include <stdbool.h>
#include <stddef.h>

#include "base_diag.h"

/* Most lines (counted by "\n") a patch text may hold; past it, parse fails before allocating. */
#define CS_PATCH_MAX_LINES 4194304u

enum cs_patch_rc {
    CS_PATCH_OK = 0,
    CS_PATCH_ERR_INVALID = -1, /* the patch is malformed or its context does not match */
    CS_PATCH_ERR_NOMEM = -2,   /* an allocation failed */
};

/* The csw_error a status stands for (the one place it is mapped): 0 for CS_PATCH_OK,
 * CSW_ERROR_INVALID_PATCH for CS_PATCH_ERR_INVALID, CSW_ERROR_INTERNAL otherwise. */
int cs_patch_rc_error(int rc);

enum cs_patch_op_kind {
    CS_PATCH_OP_ADD,    /* "*** Add File: " */
    CS_PATCH_OP_DELETE, /* "*** Delete File: " */
    CS_PATCH_OP_UPDATE, /* "*** Update File: " */
};

enum cs_patch_line_kind {
    CS_PATCH_LINE_CONTEXT, /* " text", or an empty line: in both the old and the new lines */
    CS_PATCH_LINE_DEL,     /* "-text": an old line only */
    CS_PATCH_LINE_ADD,     /* "+text": a new line only */
};

/* One body line of a chunk, without its one-character prefix. */
struct cs_patch_line {
    const char *text; /* NUL-terminated; len is the truth (the text may hold NUL bytes) */
    size_t len;
    enum cs_patch_line_kind kind;
};

/* One chunk of an Update: its body lines are consecutive lines of the patch text. */
struct cs_patch_chunk {
    const char *ctx; /* "@@ text": the text (NUL-terminated), or NULL for "@@" or no "@@" */
    size_t ctx_len;  /* bytes of ctx */
    size_t ctx_line; /* patch line number of the "@@" line; 0 when the "@@" was omitted */
    struct cs_patch_line *lines;
    /* At least 1, except for an anchor: an "@@" followed by another "@@" (never the last chunk,
     * never eof; lines NULL, first_line 0), which only moves the search position. */
    size_t n_lines;
    size_t first_line; /* patch line number of lines[0]; lines[i] is on line first_line + i */
    bool eof;          /* "*** End of File" followed: the old lines must end the file */
};

struct cs_patch_op {
    enum cs_patch_op_kind kind;
    size_t line;      /* patch line number of the operation's header */
    const char *path; /* verbatim after the marker, NUL-terminated, never empty */
    size_t path_len;  /* bytes of path (it may hold NUL bytes: the caller's path rules decide) */
    /* Update only: "*** Move to: " target (verbatim, never empty), or NULL. */
    const char *move_to;
    size_t move_to_len;
    size_t move_line; /* patch line number of the "*** Move to: " line, 0 without one */
    /* Add only: the new file content, the body lines without their "+", each followed by "\n"
     * (empty when the body is empty). NUL-terminated for convenience; content_len is the truth. */
    char *content;
    size_t content_len;
    /* Update only: one or more chunks, in patch order. */
    struct cs_patch_chunk *chunks;
    size_t n_chunks;
};

/* A parsed patch. Every string in it points into memory the patch owns. */
struct cs_patch {
    struct cs_patch_op
        *ops; /* in patch order; n_ops may be 0 ("*** Begin Patch" "*** End Patch") */
    size_t n_ops;
    char *text_own; /* private: the copy of the text every borrowed string points into */
    size_t ops_cap; /* private: allocated length of ops */
};

/*
 * Parses the len bytes at text (not necessarily NUL-terminated; NULL is allowed when len is 0).
 * Returns CS_PATCH_OK with *out set to a new plan the caller frees with cs_patch_free, or
 * CS_PATCH_ERR_INVALID with a message naming the patch line ("line 3: expected ..., got ..."),
 * or CS_PATCH_ERR_NOMEM. Two operations touching one path (Add, Delete, Update or a Move target,
 * compared byte for byte) are an error. The text is copied: it need not outlive the call.
 */
int cs_patch_parse(const char *text, size_t len, struct cs_patch **out, struct cs_diag *diag);

/* Frees a plan and everything in it. Accepts NULL. */
void cs_patch_free(struct cs_patch *p);

/*
 * Applies the chunks of the Update op (borrowed; from a live plan) to the old_len bytes at old
 * (NULL is allowed when old_len is 0). Returns CS_PATCH_OK with *new_out set to a new
 * NUL-terminated buffer of *new_len bytes (not counting the NUL) that the caller frees with
 * free(), or CS_PATCH_ERR_INVALID when a context does not match ("update of <path>: context not
 * found (patch line N): "<first expected line>""), or when op is not an Update, or
 * CS_PATCH_ERR_NOMEM. The result keeps the file's line endings (CRLF when its first line ends in
 * CRLF) and ends with a line ending unless it is empty.
 */
int cs_patch_apply_update(const struct cs_patch_op *op, const char *old, size_t old_len,
                          char **new_out, size_t *new_len, struct cs_diag *diag);

#endif
