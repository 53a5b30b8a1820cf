/*
 * patch_journal: apply_patch's crash journal (docs/contract/runtime.md §6 "Crash atomicity of
 * apply_patch"; docs/patch-format.md "Crash journal"). Internal to the patch module: patch_txn.c
 * writes a journal before its first write and marks its outcome at the end; the recovery and the
 * settle entry points are public (patch_txn.h).
 *
 * Layout: <root>/.cs-patch-journal/<name>/ where name is the ledger operation id (or "tx-<hex>"
 * without one). Inside: "s<i>" keeps item i's old file (a hard link to its old inode, or a copy
 * of its bytes when a link cannot be made), "intent" (written to "intent.tmp", fsynced, renamed:
 * the durability point, before any write to the workspace) lists every item, and "outcome"
 * (written at the end) holds the final status name.
 *
 * Trust: the journal is the server's own file but lives in the workspace: recovery parses it
 * strictly (a checksum over the whole file, a version line, and byte for byte what begin writes:
 * normalised paths, hex temporary names) and refuses anything else, touching nothing.
 */
#ifndef CS_PATCH_JOURNAL_H
#define CS_PATCH_JOURNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "base_diag.h"
#include "csw.h"
#include "fs.h"
#include "patch_txn.h"

#define CS__PATCH_JOURNAL_DIR ".cs-patch-journal"
#define CS__PATCH_TMP_SIZE    32 /* ".cs-patch-<16 hex>.tmp" (30 bytes) + NUL, rounded up */

/* One item as the journal records it. kind is 'A' (add), 'U' (update), 'D' (delete) or 'M'
 * (move from from to path). The caller fills kind, path, from, old, old_len and mode; begin fills
 * tmp (the temporary file name the writes step must use beside path). */
struct cs__patch_jitem {
    char kind;
    const struct cs_fs_path *path;
    const struct cs_fs_path *from; /* 'M' only */
    const char *old;               /* U, D, M: the snapshot (for the copy fallback) */
    size_t old_len;
    mode_t mode;
    char tmp[CS__PATCH_TMP_SIZE];
};

struct cs__patch_journal {
    int rootfd; /* borrowed */
    int jrootfd, jdfd;
    char name[48];
    bool active; /* name is in the process's set of transactions in progress */
};

/* Writes the journal for n items durably, before any write. Returns 0 (j open: end it with
 * cs__patch_journal_end and close it), or a csw_error (nothing was written to the workspace and
 * the partial journal was removed). */
int cs__patch_journal_begin(int rootfd, const char *op_id, struct cs__patch_jitem *items, size_t n,
                            struct cs__patch_journal *j, struct cs_diag *diag);
/* Records the outcome durably. Returns 0 or -1. */
int cs__patch_journal_end(struct cs__patch_journal *j, enum csw_patch_status st);
/* Removes the journal (after end, when nobody else settles it: no operation id). */
void cs__patch_journal_remove(struct cs__patch_journal *j);
void cs__patch_journal_close(struct cs__patch_journal *j);

/* cs_patch_journal_recover on an open root. */
int cs__patch_journal_recover_at(int rootfd, struct cs_fs_deny *deny, cs_patch_recovered_fn fn,
                                 void *arg, unsigned *n_recovered, struct cs_diag *diag);

/* The intent parser recovery uses, for the unit test and the fuzz harness
 * (fuzz/patch_journal_fuzz.c): parses the len bytes at data (an intent file) into a scratch
 * journal and frees it. Returns 0, with *canon (when canon is not NULL; malloc'd, NUL-terminated,
 * the caller frees it) what was read written back as cs__patch_journal_begin writes it, which for
 * an accepted file is the file itself byte for byte; or -1 with *why a static reason. */
int cs__patch_journal_parse_check(const char *data, size_t len, char **canon, size_t *canon_len,
                                  const char **why);

/* Test hook: the step boundary counter (CODESPACE_TEST_PATCH_CRASH_AT). */
void cs__patch_journal_step(void);

#endif
