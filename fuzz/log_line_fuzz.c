/*
 * Fuzz harness for cs_log (src/base/base_log.c), differential against jansson.
 * Input: arbitrary bytes. When they parse as a JSON object it is the line's fields, else the
 * fields are {"text": the bytes made UTF-8 as the tools do (cs_utf8_lossy)}; the message is that
 * text too (null when the text holds a NUL). The harness captures the line cs_log writes to
 * stderr and aborts unless it is byte for byte json_dumps(JSON_COMPACT | JSON_ENSURE_ASCII) of
 * cs_log_line_json's object for the same message and fields (what cs_log's jansson fallback
 * writes, and every line was before) plus a newline. When the bytes are not UTF-8, they also go in
 * as a string made unchecked: the line must then be the one that says it could not be written,
 * never bytes that are not JSON. Trust: the input is arbitrary. Entry point:
 * LLVMFuzzerTestOneInput.
 */
#include <fcntl.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base_log.h"
#include "base_utf8.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int rd = -1, wr = -1;

/* The line cs_log writes for msg and fields, read back from a pipe big enough to hold it. */
static char *capture(const char *msg, json_t *fields, size_t *n)
{
    if (rd < 0) {
        int p[2];
        if (pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0)
            abort();
        rd = p[0];
        wr = p[1];
        if (fcntl(wr, F_SETPIPE_SZ, 1 << 20) < (1 << 20))
            abort();
    }
    int saved = dup(STDERR_FILENO);
    if (saved < 0 || dup2(wr, STDERR_FILENO) < 0)
        abort();
    cs_log(CS_LOG_NOTICE, msg, fields);
    if (dup2(saved, STDERR_FILENO) < 0)
        abort();
    close(saved);
    size_t cap = 1 << 20;
    char *buf = malloc(cap + 1);
    if (!buf)
        abort();
    ssize_t r = read(rd, buf, cap);
    if (r <= 0)
        abort();
    buf[r] = '\0';
    *n = (size_t)r;
    return buf;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1 << 14)
        return 0;
    cs_log_set_level(CS_LOG_INFO);
    char *text = malloc(3 * size + 1);
    if (!text)
        abort();
    size_t used;
    bool lossy = false;
    size_t tn = cs_utf8_lossy(data, size, false, text, &used, &lossy);
    text[tn] = '\0';
    const char *msg = strlen(text) == tn ? text : NULL; /* a message is a C string */

    json_t *fields = json_loadb((const char *)data, size, 0, NULL);
    if (!json_is_object(fields)) {
        json_decref(fields);
        fields = json_object();
        json_object_set_new(fields, "text", json_stringn(text, tn));
    }
    json_incref(fields); /* cs_log takes one reference, the expected line reads it after */
    size_t n;
    char *line = capture(msg, fields, &n); /* takes fields */
    /* {"ts":"2026-12-04T02:28:45.123Z", ... */
    if (n < 32 || memcmp(line, "{\"ts\":\"", 7) != 0 || line[31] != '"' || line[n - 1] != '\n')
        abort();
    char when[25];
    memcpy(when, line + 7, 24);
    when[24] = '\0';
    json_t *expect = cs_log_line_json(when, CS_LOG_NOTICE, msg, fields);
    json_decref(fields);
    if (!expect)
        abort(); /* msg and the fields are UTF-8 here */
    char *want = json_dumps(expect, JSON_COMPACT | JSON_ENSURE_ASCII);
    if (!want || strlen(want) != n - 1 || memcmp(want, line, n - 1) != 0)
        abort();
    free(want);
    free(line);
    json_decref(expect);

    if (lossy) { /* the raw bytes, unchecked: jansson refuses them, and so must the line */
        json_t *bad = json_object();
        json_object_set_new(bad, "raw", json_stringn_nocheck((const char *)data, size));
        line = capture("raw", bad, &n);
        static const char refused[] = "{\"level\":\"error\",\"msg\":\"log: a line could not be "
                                      "written (out of memory, or a field that is not UTF-8)\"}\n";
        if (n != sizeof refused - 1 || memcmp(line, refused, n) != 0)
            abort();
        free(line);
    }
    free(text);
    return 0;
}
