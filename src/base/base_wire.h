/*
 * base_wire: the runtime behind the generated schema code.
 *
 * gen/csgen.py turns every JSON Schema under schema/ into C structs plus constant descriptor
 * tables (struct cs_wire_type). This module interprets those tables: it decodes a jansson value
 * into a struct (checking types, required fields, enums, string lengths, integer ranges, array
 * sizes), encodes a struct back to JSON, and frees what a decode allocated. Input is untrusted:
 * every check is real code, and the first violation is reported with its JSON pointer.
 *
 * Entry points: cs_wire_decode, cs_wire_encode, cs_wire_encode_text, cs_wire_free (usually
 * through the generated csw_<type>_decode/_encode/_encode_text/_free wrappers),
 * cs_wire_json_text, cs_wire_diag_format.
 *
 * All memory is obtained through jansson's allocator (json_get_alloc_funcs), so tests that fail
 * the Nth allocation cover the decoder's own allocations as well as jansson's.
 */
#ifndef CS_BASE_WIRE_H
#define CS_BASE_WIRE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Generated code checks this with #error: tables and runtime must agree on layout. */
#define CS_WIRE_ABI 2

/* A byte string with its length; may hold NUL bytes. s is NUL-terminated as well. A nullable
 * string (JSON type ["string","null"]) is null when s == NULL. */
struct cs_str {
    char *s;
    size_t n;
};

/* Storage of an array field: v points to n elements of the item's C type. */
struct cs_wire_array {
    void *v;
    size_t n;
};

enum cs_wire_kind {
    CS_WIRE_STRING,  /* struct cs_str */
    CS_WIRE_NSTRING, /* struct cs_str, JSON null when s == NULL */
    CS_WIRE_INT,     /* int64_t; an integral JSON real is accepted, as JSON Schema says */
    CS_WIRE_BOOL,    /* bool */
    CS_WIRE_ENUM,    /* int: index into enum_names */
    CS_WIRE_CONST,   /* nothing stored: the value must equal the constant, encode writes it */
    CS_WIRE_OBJECT,  /* the struct described by obj, embedded */
    CS_WIRE_ARRAY,   /* struct cs_wire_array of item */
    CS_WIRE_MAP,     /* struct cs_wire_array of entries { struct cs_str key; value } */
    CS_WIRE_UNION,   /* int tag at offset 0, branch object at union_offset */
    CS_WIRE_JSON,    /* json_t * (a reference): a value the schema leaves open (x-cs-json) */
};

/* The JSON types a CS_WIRE_JSON value may have (json_types; "number" is INTEGER | REAL; an
 * integral real counts as an integer, as JSON Schema says). */
enum {
    CS_WIRE_JSON_OBJECT = 1,
    CS_WIRE_JSON_ARRAY = 2,
    CS_WIRE_JSON_STRING = 4,
    CS_WIRE_JSON_INTEGER = 8,
    CS_WIRE_JSON_REAL = 16,
    CS_WIRE_JSON_BOOLEAN = 32,
    CS_WIRE_JSON_NULL = 64,
};

enum cs_wire_const_kind { CS_WIRE_CONST_STRING, CS_WIRE_CONST_INT, CS_WIRE_CONST_BOOL };

struct cs_wire_type;

/* One property of an object. */
struct cs_wire_field {
    const char *name;                /* JSON key (no NUL inside) */
    size_t offset;                   /* of the value in the parent struct */
    size_t has_offset;               /* of the bool presence flag; CS_WIRE_NO_HAS if required */
    const struct cs_wire_type *type; /* value type */
    bool required;
    bool has_default; /* absent: the value is set to the default, has_ stays false */
    int64_t def_int;  /* default for INT, BOOL (0/1) and ENUM (index) */
    const char *def_str;
};
#define CS_WIRE_NO_HAS ((size_t)-1)

struct cs_wire_object {
    const struct cs_wire_field *fields;
    size_t nfields;
};

/* One branch of a discriminated union: the discriminator value and the branch's object type. */
struct cs_wire_branch {
    const char *tag;
    const struct cs_wire_type *type;
};

struct cs_wire_type {
    enum cs_wire_kind kind;
    const char *name; /* C type name, for diagnostics and tests */
    size_t size;      /* sizeof the C storage of one value of this type */
    /* STRING, NSTRING: length bounds in Unicode code points (-1: none) */
    int64_t min_len, max_len;
    /* INT */
    bool has_min, has_max;
    int64_t min, max;
    /* ENUM */
    const char *const *enum_names;
    size_t nenum;
    /* CONST */
    enum cs_wire_const_kind const_kind;
    const char *const_str;
    int64_t const_int;
    /* ARRAY, MAP */
    const struct cs_wire_type *item; /* ARRAY items, MAP values */
    int64_t min_items, max_items;    /* -1: none */
    size_t entry_size;               /* MAP: sizeof one entry */
    size_t value_offset;             /* MAP: offset of the value in an entry */
    /* OBJECT */
    const struct cs_wire_object *obj;
    /* UNION */
    const char *discriminator;
    const struct cs_wire_branch *branches;
    size_t nbranches;
    size_t union_offset;
    /* JSON: CS_WIRE_JSON_* bits */
    unsigned json_types;
};

/* Where and why a decode or encode failed. pointer is a JSON pointer ("" is the whole document),
 * truncated with "..." when long; control bytes of keys show as '?', so both fields are always
 * printable, valid UTF-8 and safe to log or send back. */
struct cs_wire_diag {
    char pointer[256];
    char text[256];
};

enum cs_wire_status {
    CS_WIRE_OK = 0,
    CS_WIRE_INVALID = -1, /* the value violates the schema; diag says where */
    CS_WIRE_NOMEM = -2,   /* an allocation failed; diag says so */
};

/*
 * Decodes j (borrowed) as type t into out (t->size bytes, overwritten). Returns CS_WIRE_OK with
 * out filled (release it with cs_wire_free), or an error with out zeroed and diag (may be NULL)
 * describing the first violation. Unknown object properties are ignored.
 */
enum cs_wire_status cs_wire_decode(const struct cs_wire_type *t, const json_t *j, void *out,
                                   struct cs_wire_diag *diag);

/*
 * Encodes v as type t, checking it against the schema as the decoder would (string lengths and
 * UTF-8, integer ranges, array sizes, enum and union tags, unique map keys without NUL), so what
 * is encoded always decodes again. Optional fields whose has_ flag is false are omitted; a
 * required string left NULL encodes as "". Returns CS_WIRE_OK with *out a new reference, or an
 * error (CS_WIRE_INVALID: v breaks the schema, a bug in the caller; CS_WIRE_NOMEM) with *out
 * NULL and diag (may be NULL) saying where.
 */
enum cs_wire_status cs_wire_encode(const struct cs_wire_type *t, const void *v, json_t **out,
                                   struct cs_wire_diag *diag);

/*
 * cs_wire_encode, written straight to JSON text: on CS_WIRE_OK *out is the NUL-terminated text
 * (release it with cs_wire_release) and *out_n (may be NULL) its length, byte for byte what
 * json_dumps(JSON_COMPACT) writes for the value cs_wire_encode builds (same key order, same
 * escapes), with the same checks and errors; no jansson value is built (but for the set of keys
 * that finds duplicates in a map of over 64 entries). On error *out is NULL.
 */
enum cs_wire_status cs_wire_encode_text(const struct cs_wire_type *t, const void *v, char **out,
                                        size_t *out_n, struct cs_wire_diag *diag);
/* The same, for a text its caller releases at once (quoted into a reply, then gone): a big
 * text keeps the unused room its writing left (up to about as much again) instead of being
 * copied into a buffer of its size. */
enum cs_wire_status cs_wire_encode_text_brief(const struct cs_wire_type *t, const void *v,
                                              char **out, size_t *out_n, struct cs_wire_diag *diag);

/*
 * The JSON text of j, byte for byte what json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY) writes (the
 * same member order, escapes and numbers), written by the text encoder in a fraction of jansson's
 * time: every reply goes through it. NULL when out of memory, for a string that is not UTF-8, or
 * for nesting past 2048 (a cycle among them), as jansson refuses those too. *out_n (may be NULL)
 * gets the length. Release the text with cs_wire_release (free() under the default allocator).
 */
char *cs_wire_json_text(const json_t *j, size_t *out_n);

/* Frees everything a decode (or the caller, with the same allocator) put in v, then zeroes v.
 * Accepts a zeroed or half-built value. v itself is not freed. */
void cs_wire_free(const struct cs_wire_type *t, void *v);

/* Writes "<pointer>: <text>" (pointer "/" for the whole document) into buf; returns buf. */
const char *cs_wire_diag_format(const struct cs_wire_diag *diag, char *buf, size_t cap);

/* Allocation through jansson's current allocator functions. */
void *cs_wire_malloc(size_t n);
void cs_wire_release(void *p);

/* Sets s to a copy of the n bytes at src (NUL-terminated). Returns 0, or -1 on OOM. */
int cs_str_set_n(struct cs_str *s, const char *src, size_t n);

#endif
