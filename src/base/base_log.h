/*
 * base_log: the server's log, one JSON object a line on stderr (stdout belongs to MCP on the
 * stdio transport). Only boundaries log (main, transport callbacks); library modules report
 * errors to their caller instead.
 *
 * Trust: messages and fields may carry peer data; they are JSON-encoded, so they cannot break
 * the line format. Fields whose names look like secrets (token, authorization, password,
 * secret, cookie) are written as "[redacted]", whatever the caller passed.
 * Entry points: cs_log, cs_log_forward, cs_log_set_level, cs_log_level_parse, cs_log_level_name.
 */
#ifndef CS_BASE_LOG_H
#define CS_BASE_LOG_H

#include <jansson.h>
#include <stdbool.h>

/* The syslog / MCP logging levels, least severe first. */
enum cs_log_level {
    CS_LOG_DEBUG,
    CS_LOG_INFO,
    CS_LOG_NOTICE,
    CS_LOG_WARNING,
    CS_LOG_ERROR,
    CS_LOG_CRITICAL,
    CS_LOG_ALERT,
    CS_LOG_EMERGENCY,
};

/* Parses a level name (the MCP names, plus "warn"). Returns 0 and sets *out, or -1. */
int cs_log_level_parse(const char *name, enum cs_log_level *out);
/* The MCP name of a level (static storage). */
const char *cs_log_level_name(enum cs_log_level level);

/* Messages below level are dropped (default CS_LOG_INFO). */
void cs_log_set_level(enum cs_log_level level);
bool cs_log_enabled(enum cs_log_level level);

/* Writes {"ts":..., "level":..., "msg": msg, ...fields} as one line on stderr. fields (may be
 * NULL) is stolen, even when the message is dropped. */
void cs_log(enum cs_log_level level, const char *msg, json_t *fields);

/* The line cs_log writes for msg and fields, as a jansson object (members in order: ts, level,
 * msg, then the fields but ts/level/msg, secret-named ones "[redacted]"); cs_log writes it as
 * json_dumps(JSON_COMPACT | JSON_ENSURE_ASCII) does. fields is borrowed. NULL when out of memory
 * or when msg is not UTF-8. For cs_log's fallback and for tests that check its direct writer. */
json_t *cs_log_line_json(const char *ts, enum cs_log_level level, const char *msg,
                         const json_t *fields);

/* Writes n bytes that already are log lines (another process's: the uds worker's) to stderr as
 * they are, with cs_log's retries. text is borrowed for the call. For a relay only. */
void cs_log_forward(const char *text, size_t n);

#endif
