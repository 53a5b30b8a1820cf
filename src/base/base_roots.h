/*
 * base_roots: the workspace roots this process holds (docs/contract/runtime.md §2). Each root is
 * opened once, at start, by a component-wise no-follow walk from "/", and held as an O_PATH
 * directory descriptor for the life of the process. The file tools (src/fs), the patch engine and
 * the supervisor reach a root only through its held descriptor, never through its path again, so
 * replacing an ancestor of a root by a symlink later redirects nothing.
 *
 * The table is filled before the loop starts (the gateway from its registry, the uds worker from
 * the descriptors the gateway passed it) and only read afterwards, from any thread.
 *
 * Trust: root paths come from the operator's registry (already canonical); the tree above them
 * may be changed by a sandboxed command at any time, which is what the walk guards against.
 * Entry points: cs_roots_walk, cs_roots_add, cs_roots_get, cs_roots_count / _path / _fd,
 * cs_roots_active, cs_roots_clear.
 */
#ifndef CS_BASE_ROOTS_H
#define CS_BASE_ROOTS_H

#include <stdbool.h>
#include <stddef.h>

/*
 * Opens the absolute path abs (no "." or ".." components, no empty ones but a trailing '/')
 * component by component from "/" with O_PATH | O_DIRECTORY | O_NOFOLLOW, so no symlink is
 * followed anywhere on the way. Returns the descriptor (O_CLOEXEC), or -1 with errno set (ELOOP
 * or ENOTDIR when a component is a symlink, EINVAL for a path that is not absolute and normal).
 */
int cs_roots_walk(const char *abs);

/*
 * Holds fd (borrowed; a duplicate is kept) as the root named path (copied). Returns 0, or -1
 * with errno set (EEXIST: path is held already; ENOMEM).
 */
int cs_roots_add(const char *path, int fd);

/* The held descriptor of root path (borrowed: never close it), or -1 when it is not held. */
int cs_roots_get(const char *path);

/* The number of held roots, and the i-th one's path and descriptor (borrowed), in the order
 * they were added: what the gateway passes on to its uds worker. */
size_t cs_roots_count(void);
const char *cs_roots_path(size_t i);
int cs_roots_fd(size_t i);

/* Whether any root is held: from then on, a root that is not held is refused. */
bool cs_roots_active(void);

/* Closes and forgets every held root (tests and shutdown). */
void cs_roots_clear(void);

#endif
