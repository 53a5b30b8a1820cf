/*
 * supervisor_ring: a managed process's output ring, its own type so it can be tested alone
 * (test_supervisor_ring). Output positions count every byte the process ever wrote; the ring keeps
 * the last `cap` of them, [total - cap, total), and says where that window starts, so a reader
 * whose cursor fell behind learns how much it lost (read_process's output_lost/retained_from).
 * The buffer grows by doubling up to cap, so a quiet process costs little; once the process has
 * finished the ring can be compacted to exactly the bytes it keeps.
 *
 * Trust: the bytes are the command's and never interpreted here; cursors are the client's and
 * are clamped into the window (cs__ring_start), never used as an index unchecked. The cap is the
 * operator's (limits.ring_bytes), fixed at init.
 *
 * Entry points: cs__ring_init, cs__ring_fini, cs__ring_space + cs__ring_commit (the reader
 * writes in place), cs__ring_append, cs__ring_retained_from, cs__ring_start, cs__ring_copy,
 * cs__ring_compact. Internal to the supervisor module (and its unit test).
 */
#ifndef CS_SUPERVISOR_RING_H
#define CS_SUPERVISOR_RING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Position q lives at buf[q % cap] once the buffer has reached cap (before that at buf[q]: no
 * wrap yet). Once compacted, the kept bytes are buf[0 .. total - base) (linear, from base) and
 * nothing more may be written. */
struct cs_ring {
    uint8_t *buf; /* owned */
    size_t alloc, cap;
    uint64_t total; /* bytes ever written */
    bool linear;
    uint64_t base;
};

/* An empty ring that will keep at most cap (> 0) bytes. Allocates nothing yet. */
void cs__ring_init(struct cs_ring *r, size_t cap);
/* Frees the buffer; r reads as empty afterwards. Accepts a ring never written to. */
void cs__ring_fini(struct cs_ring *r);

/* Where the next bytes go and how many fit there contiguously (*space > 0); grows the buffer
 * until it reaches the cap. Returns NULL on OOM (nothing changed). Not after cs__ring_compact. */
uint8_t *cs__ring_space(struct cs_ring *r, size_t *space);
/* n (at most the last *space) bytes were written at what cs__ring_space returned. */
void cs__ring_commit(struct cs_ring *r, size_t n);
/* Copies data in (any length: only the last cap bytes stay). Returns the bytes taken: n, or
 * fewer on OOM. */
size_t cs__ring_append(struct cs_ring *r, const void *data, size_t n);

/* The oldest position still kept: 0 until more than cap bytes were written. Every byte before it
 * was dropped. */
uint64_t cs__ring_retained_from(const struct cs_ring *r);
/* Where a read at cursor starts: cursor moved into [retained_from, total] (a cursor behind the
 * window starts at its oldest byte, one past the end at the end). */
uint64_t cs__ring_start(const struct cs_ring *r, int64_t cursor);
/* Copies positions [from, to), which must lie within [retained_from, total], to dst. */
void cs__ring_copy(const struct cs_ring *r, uint64_t from, uint64_t to, uint8_t *dst);

/* The process finished: keep only the retained bytes, in a buffer of their size. On OOM the
 * ring stays as it is (it reads the same). */
void cs__ring_compact(struct cs_ring *r);

#endif
