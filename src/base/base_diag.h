/*
 * base_diag: the one diagnostic type and the one formatter that fills it.
 *
 * A failure is reported as a code from the generated error catalogue (enum csw_error, from
 * schema/errors.json) plus one human message. Every module that explains a failure writes that
 * message through cs_diag_set, so every message has the same properties: it fits in
 * CS_DIAG_TEXT_SIZE bytes with its NUL, it is valid UTF-8 (a formatted argument cut by the bound
 * loses its partial last sequence; an ill-formed byte is spelled \xHH), and it holds no control
 * byte (bytes below 0x20 and 0x7F are spelled \xHH), so it is safe to log and to send back.
 *
 * Modules with their own status enum (transport frames, the wire runtime, the config reader, the
 * ledger, ...) map it to a csw_error in one function next to the enum; docs/architecture.md
 * lists them.
 *
 * Entry points: cs_diag_set / cs_diag_vset, cs_diag_clear, cs_diag_failed, cs_diag_wire_error (and
 * cs_diag_format / cs_diag_vformat, cs_diag_clean for the fixed buffers of messages that are not a
 * cs_diag: JSON-RPC errors, log lines, the wire decoder's diagnostic). A NULL diag is accepted
 * everywhere and means "the caller does not want the message".
 */
#ifndef CS_BASE_DIAG_H
#define CS_BASE_DIAG_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

#include "csw.h"

/* Room for the message and its NUL; longer messages are cut at a character boundary. */
#define CS_DIAG_TEXT_SIZE 512

struct cs_diag {
    enum csw_error code; /* meaningful once set is true */
    bool set;            /* cs_diag_set was called since the last cs_diag_clear */
    char text[CS_DIAG_TEXT_SIZE];
};

/* Empties d (may be NULL): no code, text "". A zero-initialised struct cs_diag is empty too. */
void cs_diag_clear(struct cs_diag *d);

/* Whether d (may be NULL) holds a failure. */
bool cs_diag_failed(const struct cs_diag *d);

/*
 * Records code and the printf-formatted message in d (may be NULL: nothing is written) and
 * returns code, so a fallible function can end with `return cs_diag_set(d, CSW_ERROR_..., ...)`.
 * The text is bounded, valid UTF-8 and free of control bytes (see the file comment). A later
 * call replaces an earlier one.
 */
int cs_diag_set(struct cs_diag *d, enum csw_error code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int cs_diag_vset(struct cs_diag *d, enum csw_error code, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

/* The most bytes cs_diag_vformat formats before it sanitises; past it the text is cut. */
#define CS_DIAG_FORMAT_MAX 2048

/* The formatter behind cs_diag_vset, for the few messages that are not a struct cs_diag (struct
 * cs_wire_diag adds a JSON pointer; the start-up configuration error has room for 2 KiB):
 * formats into out (cap bytes, at most CS_DIAG_FORMAT_MAX used; NULL or cap 0: nothing is
 * written) with the same guarantees. Returns the length written. */
size_t cs_diag_vformat(char *out, size_t cap, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));
size_t cs_diag_format(char *out, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The one mapping of enum cs_wire_status (base_wire.h) to csw_error: 0 for CS_WIRE_OK,
 * CSW_ERROR_INTERNAL for CS_WIRE_NOMEM, and invalid for CS_WIRE_INVALID, since whose value broke
 * the schema decides it: CSW_ERROR_INVALID_ARGUMENTS for a client's arguments, CSW_ERROR_INTERNAL
 * for what the server itself built. */
int cs_diag_wire_error(enum cs_wire_status st, enum csw_error invalid);

/* The sanitising step of cs_diag_set on its own, for text that did not come through a format:
 * writes the n bytes at s into out (cap >= 1 bytes, NUL-terminated) as cs_diag_set would. cut
 * says the n bytes were already cut by a bound, so a partial sequence at their end is dropped
 * rather than spelled \xHH. Returns the length written. */
size_t cs_diag_clean(char *out, size_t cap, const char *s, size_t n, bool cut);

#endif
