/*
 * golden_check: the C side of the golden schema conformance test (run_golden.py is the driver
 * and Python jsonschema the oracle).
 *
 * Input (trusted, from the driver): lines "<type-name>\t<file-path>" on stdin. For each line the
 * file (untrusted case content) is parsed the way the servers parse peer input (JSON_ALLOW_NUL,
 * any root value) and decoded with the generated decoder of the named top-level type. Output, one
 * line per input line on stdout:
 *
 *     accept\t<path>
 *     reject\t<path>\t<pointer>\t<text>
 *
 * <pointer> is the decoder's diagnostic location as an RFC 6901 JSON pointer ("" for the whole
 * document), compared by the driver with the one the case records. A file jansson cannot parse
 * is a reject at "". An unknown type name or a malformed input line is an error: a message on
 * stderr and exit status 2.
 */
#ifndef _GNU_SOURCE
#define _POSIX_C_SOURCE 200809L /* getline */
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "csw.h"

/* Prints s with tabs, newlines and other control bytes replaced by spaces, so that one verdict
 * stays one line of tab-separated fields whatever a diagnostic quotes from the input. */
static void put_field(const char *s)
{
    for (; *s; s++)
        putchar((unsigned char)*s < 0x20 || *s == 0x7f ? ' ' : *s);
}

static void put_reject(const char *path, const char *pointer, const char *why)
{
    fputs("reject\t", stdout);
    put_field(path);
    putchar('\t');
    put_field(pointer);
    putchar('\t');
    put_field(why);
    putchar('\n');
}

/* Decodes one case and prints its verdict. Returns 0, or 2 when the decoder ran out of memory
 * (a verdict cannot be given). */
static int check(const struct csw_toplevel *tl, const char *path)
{
    json_error_t jerr;
    json_t *j = json_load_file(path, JSON_ALLOW_NUL | JSON_DECODE_ANY, &jerr);
    if (!j) {
        char why[512];
        snprintf(why, sizeof why, "not parsed by jansson: %s (line %d, column %d)", jerr.text,
                 jerr.line, jerr.column);
        put_reject(path, "", why);
        return 0;
    }
    const struct cs_wire_type *t = tl->type;
    void *out = malloc(t->size ? t->size : 1);
    if (!out) {
        json_decref(j);
        fprintf(stderr, "golden_check: out of memory\n");
        return 2;
    }
    struct cs_wire_diag diag;
    enum cs_wire_status st = cs_wire_decode(t, j, out, &diag);
    int rc = 0;
    switch (st) {
    case CS_WIRE_OK:
        cs_wire_free(t, out);
        fputs("accept\t", stdout);
        put_field(path);
        putchar('\n');
        break;
    case CS_WIRE_INVALID:
        put_reject(path, diag.pointer, diag.text);
        break;
    case CS_WIRE_NOMEM:
        fprintf(stderr, "golden_check: %s: decoder out of memory\n", path);
        rc = 2;
        break;
    }
    free(out);
    json_decref(j);
    return rc;
}

int main(void)
{
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int rc = 0;
    while (rc == 0 && (len = getline(&line, &cap, stdin)) != -1) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = '\0';
        if (len == 0)
            continue;
        char *tab = strchr(line, '\t');
        if (!tab || tab[1] == '\0') {
            fprintf(stderr, "golden_check: malformed line (want <type>\\t<path>): %s\n", line);
            rc = 2;
            break;
        }
        *tab = '\0';
        const char *path = tab + 1;
        const struct csw_toplevel *tl = csw_toplevel_find(line);
        if (!tl) {
            fprintf(stderr, "golden_check: unknown type name \"%s\"\n", line);
            rc = 2;
            break;
        }
        rc = check(tl, path);
    }
    free(line);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "golden_check: cannot write the verdicts\n");
        rc = 2;
    }
    return rc;
}
