/*
 * base_log: JSON-lines logging on stderr with secret redaction (see base_log.h).
 * Trust: msg and fields may hold peer text; jansson escapes it. Writes are single write(2)
 * calls of one whole line, so lines from a crash handler or a child never interleave mid-line.
 */
#include "base_log.h"

#include <ctype.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static enum cs_log_level threshold = CS_LOG_INFO;

static const char *const names[] = {"debug", "info",     "notice", "warning",
                                    "error", "critical", "alert",  "emergency"};

int cs_log_level_parse(const char *name, enum cs_log_level *out)
{
    if (strcmp(name, "warn") == 0) {
        *out = CS_LOG_WARNING;
        return 0;
    }
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (strcmp(name, names[i]) == 0) {
            *out = (enum cs_log_level)i;
            return 0;
        }
    }
    return -1;
}

const char *cs_log_level_name(enum cs_log_level level)
{
    size_t i = (size_t)level;
    return i < sizeof names / sizeof names[0] ? names[i] : "error";
}

void cs_log_set_level(enum cs_log_level level)
{
    threshold = level;
}

bool cs_log_enabled(enum cs_log_level level)
{
    return level >= threshold;
}

/* Whether a field name names a secret: its value is never written. */
static bool secret_key(const char *key)
{
    static const char *const words[] = {"token", "authorization", "password", "secret", "cookie"};
    char low[64];
    size_t n = strlen(key);
    if (n >= sizeof low)
        n = sizeof low - 1;
    for (size_t i = 0; i < n; i++)
        low[i] = (char)tolower((unsigned char)key[i]);
    low[n] = '\0';
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (strstr(low, words[i]))
            return true;
    return false;
}

/* Writes n bytes to stderr whole, unless it fails for good. */
static void put(const char *p, size_t left)
{
    int waits = 0;
    while (left > 0) {
        ssize_t n = write(STDERR_FILENO, p, left);
        if (n < 0 && (errno == EAGAIN || errno == EINTR) && waits < 50) {
            /* stderr may share a non-blocking open file description with stdout (a terminal):
             * wait for it a little rather than cut the line. */
            struct pollfd pfd = {.fd = STDERR_FILENO, .events = POLLOUT};
            poll(&pfd, 1, 20);
            waits++;
            continue;
        }
        if (n <= 0)
            break;
        p += n;
        left -= (size_t)n;
    }
}

void cs_log(enum cs_log_level level, const char *msg, json_t *fields)
{
    if (!cs_log_enabled(level)) {
        json_decref(fields);
        return;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[40];
    size_t w = strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(when + w, sizeof when - w, ".%03ldZ", ts.tv_nsec / 1000000);

    json_t *line =
        json_pack("{s:s,s:s,s:s?}", "ts", when, "level", cs_log_level_name(level), "msg", msg);
    if (line && json_is_object(fields)) {
        const char *key;
        json_t *value;
        json_object_foreach(fields, key, value)
        {
            if (strcmp(key, "ts") == 0 || strcmp(key, "level") == 0 || strcmp(key, "msg") == 0)
                continue;
            json_object_set_new(line, key,
                                secret_key(key) ? json_string("[redacted]") : json_incref(value));
        }
    }
    json_decref(fields);
    char *text = line ? json_dumps(line, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    json_decref(line);
    if (!text) {
        static const char oom[] = "{\"level\":\"error\",\"msg\":\"log: out of memory\"}\n";
        (void)!write(STDERR_FILENO, oom, sizeof oom - 1);
        return;
    }
    size_t len = strlen(text);
    text[len] = '\n'; /* replaces the NUL; write() takes the length */
    put(text, len + 1);
    free(text);
}

void cs_log_forward(const char *text, size_t n)
{
    put(text, n);
}
