/*
 * base_log: JSON-lines logging on stderr with secret redaction (see base_log.h).
 * Trust: msg and fields may hold peer text, escaped as json_dumps(JSON_ENSURE_ASCII) does: by
 * direct_line for strings, integers and literals, by jansson for anything else or for text that
 * is not UTF-8 (refused, and the line says so). Writes are single write(2)
 * calls of one whole line, so lines from a crash handler or a child never interleave mid-line.
 */
#include "base_log.h"

#include <ctype.h>
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "base_utf8.h"

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

/* A log line being written: a usual one fits the stack, a long one moves to the heap. */
struct line {
    char *p;
    size_t n, cap;
    bool failed;
    char stack[1024];
};

static void line_put(struct line *l, const char *s, size_t n)
{
    if (l->failed)
        return;
    if (l->cap - l->n < n) {
        size_t cap = l->cap;
        while (cap - l->n < n && cap <= SIZE_MAX / 2)
            cap *= 2;
        char *p = cap - l->n < n ? NULL : l->p == l->stack ? malloc(cap) : realloc(l->p, cap);
        if (!p) {
            l->failed = true;
            return;
        }
        if (l->p == l->stack)
            memcpy(p, l->stack, l->n);
        l->p = p;
        l->cap = cap;
    }
    memcpy(l->p + l->n, s, n);
    l->n += n;
}

static void line_hex4(struct line *l, unsigned v)
{
    static const char hex[] = "0123456789ABCDEF";
    char u[6] = {'\\',       'u', hex[(v >> 12) & 15], hex[(v >> 8) & 15], hex[(v >> 4) & 15],
                 hex[v & 15]};
    line_put(l, u, sizeof u);
}

/* A JSON string literal, byte for byte what json_dumps(JSON_ENSURE_ASCII) writes: every code
 * point above 0x7F as \uXXXX (a surrogate pair above the BMP, upper-case hex, as jansson). False
 * when s is not UTF-8, which jansson refuses to write: the caller falls back to jansson. */
static bool line_string(struct line *l, const char *s, size_t n)
{
    line_put(l, "\"", 1);
    size_t i = 0;
    while (i < n) {
        size_t run = i;
        while (run < n && (unsigned char)s[run] >= 0x20 && (unsigned char)s[run] < 0x80 &&
               s[run] != '"' && s[run] != '\\')
            run++;
        line_put(l, s + i, run - i);
        i = run;
        if (i == n)
            break;
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x80) {
            uint32_t cp;
            bool valid;
            size_t step = cs_utf8_step((const unsigned char *)s + i, n - i, &cp, &valid);
            if (!valid)
                return false;
            if (cp < 0x10000) {
                line_hex4(l, cp);
            } else {
                cp -= 0x10000;
                line_hex4(l, 0xD800 | (cp >> 10));
                line_hex4(l, 0xDC00 | (cp & 0x3FF));
            }
            i += step;
            continue;
        }
        const char *esc = c == '"'    ? "\\\""
                          : c == '\\' ? "\\\\"
                          : c == '\b' ? "\\b"
                          : c == '\f' ? "\\f"
                          : c == '\n' ? "\\n"
                          : c == '\r' ? "\\r"
                          : c == '\t' ? "\\t"
                                      : NULL;
        if (esc)
            line_put(l, esc, 2);
        else
            line_hex4(l, c);
        i++;
    }
    line_put(l, "\"", 1);
    return true;
}

static void line_int(struct line *l, long long v)
{
    char num[24];
    char *at = num + sizeof num;
    unsigned long long u = v < 0 ? 0 - (unsigned long long)v : (unsigned long long)v;
    do {
        *--at = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        *--at = '-';
    line_put(l, at, (size_t)(num + sizeof num - at));
}

/* A field's value as json_dumps writes it; false for what only jansson writes (a real, an
 * array, an object, a string that is not UTF-8). */
static bool line_value(struct line *l, const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_STRING:
        return line_string(l, json_string_value(v), json_string_length(v));
    case JSON_INTEGER:
        line_int(l, (long long)json_integer_value(v));
        return true;
    case JSON_TRUE:
        line_put(l, "true", 4);
        return true;
    case JSON_FALSE:
        line_put(l, "false", 5);
        return true;
    case JSON_NULL:
        line_put(l, "null", 4);
        return true;
    case JSON_REAL:
    case JSON_ARRAY:
    case JSON_OBJECT:
        return false;
    }
    return false;
}

json_t *cs_log_line_json(const char *ts, enum cs_log_level level, const char *msg,
                         const json_t *fields)
{
    json_t *line =
        json_pack("{s:s,s:s,s:s?}", "ts", ts, "level", cs_log_level_name(level), "msg", msg);
    if (line && json_is_object(fields)) {
        const char *key;
        json_t *value;
        json_object_foreach((json_t *)(uintptr_t)fields, key, value)
        {
            if (strcmp(key, "ts") == 0 || strcmp(key, "level") == 0 || strcmp(key, "msg") == 0)
                continue;
            json_object_set_new(line, key,
                                secret_key(key) ? json_string("[redacted]") : json_incref(value));
        }
    }
    return line;
}

/* The line through jansson: what every line was before, and still the answer for a line whose
 * fields line_value does not write. */
static char *jansson_line(const char *when, enum cs_log_level level, const char *msg,
                          json_t *fields)
{
    json_t *line = cs_log_line_json(when, level, msg, fields);
    char *text = line ? json_dumps(line, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    json_decref(line);
    return text;
}

/* The line written here, byte for byte what jansson_line makes (test_base and the log_line
 * fuzz harness check it against cs_log_line_json): a tool call's line costs a few thousand
 * instructions instead of some 30,000 (two json_pack, strftime, snprintf, json_dumps with its cycle
 * check). */
static bool direct_line(struct line *l, const char *when, enum cs_log_level level, const char *msg,
                        json_t *fields)
{
    static const char ts[] = "{\"ts\":\"", lv[] = "\",\"level\":\"";
    line_put(l, ts, sizeof ts - 1);
    line_put(l, when, strlen(when));
    line_put(l, lv, sizeof lv - 1);
    const char *name = cs_log_level_name(level);
    line_put(l, name, strlen(name));
    line_put(l, "\"", 1);
    line_put(l, ",\"msg\":", 7);
    if (!msg) /* as json_pack's "s?" wrote it */
        line_put(l, "null", 4);
    else if (!line_string(l, msg, strlen(msg)))
        return false;
    if (json_is_object(fields)) {
        for (void *it = json_object_iter(fields); it; it = json_object_iter_next(fields, it)) {
            const char *key = json_object_iter_key(it);
            json_t *value = json_object_iter_value(it);
            /* A key holding a NUL (json_object_setn) is cut at it when jansson's line object
             * takes it, so two keys may become one member there: only jansson writes that. */
            if (json_object_iter_key_len(it) != strlen(key))
                return false;
            if (strcmp(key, "ts") == 0 || strcmp(key, "level") == 0 || strcmp(key, "msg") == 0)
                continue;
            line_put(l, ",", 1);
            if (!line_string(l, key, strlen(key)))
                return false;
            line_put(l, ":", 1);
            if (secret_key(key))
                line_put(l, "\"[redacted]\"", 12);
            else if (!line_value(l, value))
                return false;
        }
    }
    line_put(l, "}\n", 2);
    return !l->failed;
}

/* Two digits of a date or time. */
static char *two(char *at, int v)
{
    at[0] = (char)('0' + v / 10 % 10);
    at[1] = (char)('0' + v % 10);
    return at + 2;
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
    /* 2026-12-04T02:28:45.123Z, as strftime's "%Y-%m-%dT%H:%M:%S" and ".%03ldZ" wrote it */
    char when[40];
    int year = tm.tm_year + 1900;
    char *at = when;
    if (year >= 1000 && year <= 9999) {
        at = two(two(at, year / 100), year % 100);
    } else {
        size_t w = strftime(when, sizeof when, "%Y", &tm);
        at = when + w;
    }
    *at++ = '-';
    at = two(at, tm.tm_mon + 1);
    *at++ = '-';
    at = two(at, tm.tm_mday);
    *at++ = 'T';
    at = two(at, tm.tm_hour);
    *at++ = ':';
    at = two(at, tm.tm_min);
    *at++ = ':';
    at = two(at, tm.tm_sec);
    long ms = ts.tv_nsec / 1000000;
    *at++ = '.';
    *at++ = (char)('0' + ms / 100);
    at = two(at, (int)(ms % 100));
    *at++ = 'Z';
    *at = '\0';

    struct line l = {.cap = sizeof l.stack};
    l.p = l.stack;
    if (direct_line(&l, when, level, msg, fields)) {
        json_decref(fields);
        put(l.p, l.n);
        if (l.p != l.stack)
            free(l.p);
        return;
    }
    if (l.p != l.stack)
        free(l.p);
    char *text = jansson_line(when, level, msg, fields);
    json_decref(fields);
    if (!text) {
        static const char oom[] = "{\"level\":\"error\",\"msg\":\"log: a line could not "
                                  "be written (out of memory, or a field that is not UTF-8)\"}\n";
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
