/*
 * tools_progress: notifications/progress for a tool call that waits on a running process
 * (exec_command with yield_ms, read_process with wait_ms; docs/protocol.md, "Progress"). While the
 * call waits, the output of its process is polled through the runner's existing operations
 * (process_status for the byte count, read_process with no wait for the last few KiB), at most
 * once a second, and each time the count grew the call sends one notification: progress = output
 * bytes so far, message = the last non-empty line.
 *
 * Trust: the output is the command's, so untrusted: the message is cut to 200 code points and
 * its control characters are escaped (cs__tools_progress_line). Works the same on every runner,
 * since it only uses operations every runner has.
 *
 * Entry points: cs__tools_progress_start, cs__tools_progress_stop, cs__tools_progress_line.
 * Internal to the tools module (and its unit test).
 */
#ifndef CS_TOOLS_PROGRESS_H
#define CS_TOOLS_PROGRESS_H

#include <stddef.h>

#include "base_loop.h"

struct cs_mcp_call;
struct cs_runner;
struct cs_tools_progress;

/* The time between two polls of one call, so between two of its notifications at the least. */
#define CS_TOOLS_PROGRESS_INTERVAL_MS 1000
/* The longest message, in code points (an escape such as \x1B counts its four characters). */
#define CS_TOOLS_PROGRESS_MESSAGE_MAX 200
/* Bytes a message may take: every code point at most 4 bytes, and a NUL. */
#define CS_TOOLS_PROGRESS_MESSAGE_CAP (4 * CS_TOOLS_PROGRESS_MESSAGE_MAX + 1)

/*
 * Starts polling process_id (copied) for call every CS_TOOLS_PROGRESS_INTERVAL_MS, through runner
 * (borrowed; both must outlive the poller, which cs__tools_progress_stop ends). Returns NULL when
 * the call does not want progress (no token, or no channel: cs_mcp_call_wants_progress) or memory
 * ran out; the call then simply waits without notifications.
 */
struct cs_tools_progress *cs__tools_progress_start(struct cs_loop *loop, struct cs_runner *runner,
                                                   struct cs_mcp_call *call,
                                                   const char *process_id);
/* Stops p before its call completes: no notification is sent afterwards. p is freed now, or when
 * the poll in flight answers. Accepts NULL. */
void cs__tools_progress_stop(struct cs_tools_progress *p);

/*
 * The message of an output window: the last line of chunk[0..n) (valid UTF-8; lines end at \n or
 * \r) holding something other than blanks, cut to CS_TOOLS_PROGRESS_MESSAGE_MAX code points, with
 * every control character (C0, DEL, C1) written as \xHH. Writes it NUL-terminated into out (cap
 * bytes, at least CS_TOOLS_PROGRESS_MESSAGE_CAP) and returns its length in bytes, or 0 when the
 * window holds no such line.
 */
size_t cs__tools_progress_line(const char *chunk, size_t n, char *out, size_t cap);

#endif
