/*
 * base_wire: interprets the generated descriptor tables (see base_wire.h).
 *
 * Trust: the JSON being decoded is untrusted peer input; the tables are trusted (generated).
 * The decoder walks the schema, not the input, so its recursion depth is bounded by the schema
 * (schemas are acyclic: the generator refuses recursive types). Every length is checked before it
 * is used to allocate.
 */
#include "base_wire.h"

#include <assert.h>
#include <stdarg.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base_diag.h"
#include "base_json.h"
#include "base_mem.h"

/*
 * The JSON pointer being decoded: a stack of reference tokens, borrowed from the tables and the
 * input (both outlive the call), rendered into text only when a diagnostic needs it. Pushing is
 * two stores, so a value that decodes cleanly pays nothing for the pointer it would have had.
 * Tokens deeper than PTR_DEPTH are counted but not kept (the rendered pointer ends with "...").
 */
#define PTR_DEPTH  32
#define TOK_STRLEN SIZE_MAX /* the token is a NUL-terminated name: measured when rendered */

struct seg {
    const char *tok; /* NULL: an array index */
    size_t n;        /* tok's length, or TOK_STRLEN; the index when tok is NULL */
};

struct ptr {
    struct seg seg[PTR_DEPTH];
    size_t depth;
};

/* A rendered pointer. Truncated pointers end with "...". */
struct ptr_text {
    char buf[256];
    size_t len;
    bool truncated;
};

/* The text being written by cs_wire_encode_text. */
struct tbuf {
    char *p;
    size_t n, cap;
};

struct ctx {
    struct ptr at;
    struct cs_wire_diag *diag;
    struct tbuf *tb; /* encode: write text here instead of building a jansson value */
    bool slack;      /* text_done leaves a big text's unused room (the caller frees it at once) */
};

void *cs_wire_malloc(size_t n)
{
    json_malloc_t m;
    json_free_t f;
    json_get_alloc_funcs(&m, &f);
    return m(n ? n : 1);
}

void cs_wire_release(void *p)
{
    json_malloc_t m;
    json_free_t f;
    if (!p)
        return;
    json_get_alloc_funcs(&m, &f);
    f(p);
}

static void *zalloc(size_t n)
{
    void *p = cs_wire_malloc(n);
    if (p)
        memset(p, 0, n ? n : 1);
    return p;
}

int cs_str_set_n(struct cs_str *s, const char *src, size_t n)
{
    if (n == SIZE_MAX)
        return -1;
    char *p = cs_wire_malloc(n + 1);
    if (!p)
        return -1;
    if (n)
        memcpy(p, src, n);
    p[n] = '\0';
    s->s = p;
    s->n = n;
    return 0;
}

/* Length of the UTF-8 sequence a lead byte starts (1 for anything else). */
static size_t utf8_seq_len(unsigned char b)
{
    if (b >= 0xF0)
        return 4;
    if (b >= 0xE0)
        return 3;
    if (b >= 0xC0)
        return 2;
    return 1;
}

/* A saved pointer state, restored by pop(). */
struct mark {
    size_t depth;
};

/*
 * Appends one reference token, escaped as RFC 6901 says (~ -> ~0, / -> ~1). Control bytes become
 * '?', so the pointer is always printable; truncation happens only between UTF-8 characters, so
 * it stays valid UTF-8. Once truncated, further tokens are not appended (the pointer ends with
 * "..." in the diagnostic).
 */
static void render_tok(struct ptr_text *p, const char *tok, size_t n)
{
    const size_t room = sizeof p->buf - 4; /* keep space for "..." and NUL */
    if (p->truncated)
        return;
    if (p->len + 1 > room) {
        p->truncated = true;
        return;
    }
    p->buf[p->len++] = '/';
    for (size_t i = 0; i < n;) {
        unsigned char b = (unsigned char)tok[i];
        size_t in = 1, outn = 1;
        char esc[4] = {(char)b, 0, 0, 0};
        if (b == '~' || b == '/') {
            esc[0] = '~';
            esc[1] = b == '~' ? '0' : '1';
            outn = 2;
        } else if (b < 0x20 || b == 0x7F) {
            esc[0] = '?';
        } else if (b >= 0x80) {
            in = utf8_seq_len(b);
            if (in > n - i)
                in = n - i; /* cannot happen for jansson strings; stay in bounds anyway */
            outn = 0;
        }
        size_t need = outn ? outn : in;
        if (p->len + need > room) {
            p->truncated = true;
            break;
        }
        memcpy(p->buf + p->len, outn ? esc : tok + i, need);
        p->len += need;
        i += in;
    }
    p->buf[p->len] = '\0';
}

static struct mark push_n(struct ptr *p, const char *tok, size_t n)
{
    struct mark saved = {p->depth};
    if (p->depth < PTR_DEPTH)
        p->seg[p->depth] = (struct seg){tok, n};
    p->depth++;
    return saved;
}

static struct mark push(struct ptr *p, const char *tok)
{
    return push_n(p, tok, TOK_STRLEN);
}

static struct mark push_index(struct ptr *p, size_t i)
{
    return push_n(p, NULL, i);
}

static void pop(struct ptr *p, struct mark m)
{
    p->depth = m.depth;
}

/* Renders the pointer p into t (RFC 6901 escapes, "..." when cut; see render_tok). */
static void render(const struct ptr *p, struct ptr_text *t)
{
    t->len = 0;
    t->truncated = false;
    t->buf[0] = '\0';
    size_t kept = p->depth < PTR_DEPTH ? p->depth : PTR_DEPTH;
    for (size_t i = 0; i < kept; i++) {
        const struct seg *g = &p->seg[i];
        if (!g->tok) {
            char num[32];
            int n = snprintf(num, sizeof num, "%zu", g->n);
            render_tok(t, num, (size_t)n);
        } else {
            render_tok(t, g->tok, g->n == TOK_STRLEN ? strlen(g->tok) : g->n);
        }
    }
    if (p->depth > PTR_DEPTH)
        t->truncated = true;
}

static enum cs_wire_status fail(struct ctx *c, enum cs_wire_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static enum cs_wire_status fail(struct ctx *c, enum cs_wire_status st, const char *fmt, ...)
{
    if (c->diag) {
        /* t.len <= sizeof t.buf - 4 (see render_tok), so "..." always fits. */
        struct ptr_text t;
        render(&c->at, &t);
        _Static_assert(sizeof c->diag->pointer >= sizeof t.buf, "pointer fits");
        memcpy(c->diag->pointer, t.buf, t.len);
        size_t n = t.len;
        if (t.truncated) {
            memcpy(c->diag->pointer + n, "...", 3);
            n += 3;
        }
        c->diag->pointer[n] = '\0';
        va_list ap;
        va_start(ap, fmt);
        cs_diag_vformat(c->diag->text, sizeof c->diag->text, fmt, ap);
        va_end(ap);
    }
    return st;
}

static enum cs_wire_status oom(struct ctx *c)
{
    return fail(c, CS_WIRE_NOMEM, "out of memory");
}

/* Number of Unicode code points in valid UTF-8 (jansson validated it). */
static size_t utf8_count(const char *s, size_t n)
{
    size_t count = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80)
            count++;
    return count;
}

enum int_kind { INT_OK, INT_NOT_INTEGER, INT_OUT_OF_RANGE };

/* JSON Schema's "integer": an integer, or a real with no fractional part. An integral real
 * outside int64 is refused as out of range, as jansson refuses such integer literals: a JSON
 * Schema validator might accept it, and saturating would let it pass an int64 bound. */
static enum int_kind as_int(const json_t *j, int64_t *out)
{
    if (json_is_integer(j)) {
        *out = (int64_t)json_integer_value(j);
        return INT_OK;
    }
    if (!json_is_real(j))
        return INT_NOT_INTEGER;
    double d = json_real_value(j);
    if (!isfinite(d) || floor(d) != d)
        return INT_NOT_INTEGER;
    /* -2^63 is exact in a double; 2^63 is the first value beyond INT64_MAX. */
    if (d < -9223372036854775808.0 || d >= 9223372036854775808.0)
        return INT_OUT_OF_RANGE;
    *out = (int64_t)d;
    return INT_OK;
}

/* Writes "a", "b", ... into buf, ending with "..." when not every name fits. */
static void enum_list(const char *const *names, size_t n, char *buf, size_t cap)
{
    static const char more[] = ", ...";
    size_t len = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        size_t need = strlen(names[i]) + (i ? 4 : 2);
        if (len + need + sizeof more > cap) {
            memcpy(buf + len, i ? more : more + 2, i ? sizeof more : sizeof more - 2);
            return;
        }
        len += (size_t)snprintf(buf + len, cap - len, "%s\"%s\"", i ? ", " : "", names[i]);
    }
}

/* ---- checks shared by decode and encode ---- */

/* The CS_WIRE_JSON_* bit of j's JSON type (an integral real is an integer and a real). */
static unsigned json_type_bits(const json_t *j)
{
    switch (json_typeof(j)) {
    case JSON_OBJECT:
        return CS_WIRE_JSON_OBJECT;
    case JSON_ARRAY:
        return CS_WIRE_JSON_ARRAY;
    case JSON_STRING:
        return CS_WIRE_JSON_STRING;
    case JSON_INTEGER:
        return CS_WIRE_JSON_INTEGER;
    case JSON_REAL: {
        double d = json_real_value(j);
        return CS_WIRE_JSON_REAL | (isfinite(d) && floor(d) == d ? CS_WIRE_JSON_INTEGER : 0u);
    }
    case JSON_TRUE:
    case JSON_FALSE:
        return CS_WIRE_JSON_BOOLEAN;
    case JSON_NULL:
        return CS_WIRE_JSON_NULL;
    }
    return 0;
}

/* Checks an open (x-cs-json) value against its allowed JSON types. */
static enum cs_wire_status check_json(const struct cs_wire_type *t, const json_t *j, struct ctx *c)
{
    static const struct {
        unsigned bit;
        const char *name;
    } types[] = {{CS_WIRE_JSON_OBJECT, "object"}, {CS_WIRE_JSON_ARRAY, "array"},
                 {CS_WIRE_JSON_STRING, "string"}, {CS_WIRE_JSON_INTEGER, "integer"},
                 {CS_WIRE_JSON_REAL, "number"},   {CS_WIRE_JSON_BOOLEAN, "boolean"},
                 {CS_WIRE_JSON_NULL, "null"}};
    if (!j)
        return fail(c, CS_WIRE_INVALID, "no value");
    if (json_type_bits(j) & t->json_types)
        return CS_WIRE_OK;
    char list[120];
    size_t at = 0;
    list[0] = '\0';
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        if ((t->json_types & types[i].bit) == 0 ||
            (types[i].bit == CS_WIRE_JSON_INTEGER && (t->json_types & CS_WIRE_JSON_REAL)))
            continue; /* "number" says it */
        int w = snprintf(list + at, sizeof list - at, "%s%s", at ? " or " : "", types[i].name);
        if (w > 0 && (size_t)w < sizeof list - at)
            at += (size_t)w;
    }
    return fail(c, CS_WIRE_INVALID, "expected %s", list);
}

static enum cs_wire_status check_str(const struct cs_wire_type *t, const char *s, size_t n,
                                     struct ctx *c)
{
    if (t->min_len < 0 && t->max_len < 0)
        return CS_WIRE_OK;
    size_t cp = utf8_count(s, n);
    if (t->min_len >= 0 && cp < (uint64_t)t->min_len)
        return fail(c, CS_WIRE_INVALID, "must be at least %lld characters long",
                    (long long)t->min_len);
    if (t->max_len >= 0 && cp > (uint64_t)t->max_len)
        return fail(c, CS_WIRE_INVALID, "must be at most %lld characters long",
                    (long long)t->max_len);
    return CS_WIRE_OK;
}

static enum cs_wire_status check_int(const struct cs_wire_type *t, int64_t v, struct ctx *c)
{
    if (t->has_min && v < t->min)
        return fail(c, CS_WIRE_INVALID, "must be >= %lld", (long long)t->min);
    if (t->has_max && v > t->max)
        return fail(c, CS_WIRE_INVALID, "must be <= %lld", (long long)t->max);
    return CS_WIRE_OK;
}

static enum cs_wire_status check_items(const struct cs_wire_type *t, size_t n, struct ctx *c)
{
    if (t->min_items >= 0 && n < (uint64_t)t->min_items)
        return fail(c, CS_WIRE_INVALID, "must have at least %lld items", (long long)t->min_items);
    if (t->max_items >= 0 && n > (uint64_t)t->max_items)
        return fail(c, CS_WIRE_INVALID, "must have at most %lld items", (long long)t->max_items);
    return CS_WIRE_OK;
}

static enum cs_wire_status dec(const struct cs_wire_type *t, const json_t *j, void *out,
                               struct ctx *c);

static enum cs_wire_status set_default(const struct cs_wire_field *f, void *slot, struct ctx *c)
{
    switch (f->type->kind) {
    case CS_WIRE_INT:
        memcpy(slot, &f->def_int, sizeof f->def_int);
        return CS_WIRE_OK;
    case CS_WIRE_BOOL: {
        bool b = f->def_int != 0;
        memcpy(slot, &b, sizeof b);
        return CS_WIRE_OK;
    }
    case CS_WIRE_ENUM: {
        int e = (int)f->def_int;
        memcpy(slot, &e, sizeof e);
        return CS_WIRE_OK;
    }
    case CS_WIRE_STRING:
    case CS_WIRE_NSTRING:
        if (f->def_str && cs_str_set_n(slot, f->def_str, strlen(f->def_str)) != 0)
            return oom(c);
        return CS_WIRE_OK;
    case CS_WIRE_CONST:
    case CS_WIRE_OBJECT:
    case CS_WIRE_ARRAY:
    case CS_WIRE_MAP:
    case CS_WIRE_UNION:
    case CS_WIRE_JSON:
        break;
    }
    return CS_WIRE_OK; /* the generator emits defaults only for scalar kinds */
}

#define SCAN_FIELDS  16 /* objects of at most this many fields... */
#define SCAN_MEMBERS 8  /* ...and members are decoded by one scan of the members */

static enum cs_wire_status dec_object(const struct cs_wire_object *o, const json_t *j, char *base,
                                      struct ctx *c)
{
    if (!json_is_object(j))
        return fail(c, CS_WIRE_INVALID, "expected object");
    /* A small object is scanned once, each member matched against the fields by length and
     * bytes: cheaper than one hashed lookup a field (a JSON-RPC envelope has 6 fields and 3 or 4
     * members). The fields are then decoded in the schema's order either way. */
    const json_t *found[SCAN_FIELDS];
    bool scanned = o->nfields <= SCAN_FIELDS && json_object_size(j) <= SCAN_MEMBERS;
    if (scanned) {
        memset(found, 0, o->nfields * sizeof found[0]);
        for (void *it = json_object_iter((json_t *)(uintptr_t)j); it;
             it = json_object_iter_next((json_t *)(uintptr_t)j, it)) {
            const char *key = json_object_iter_key(it);
            size_t kn = json_object_iter_key_len(it);
            for (size_t i = 0; i < o->nfields; i++) {
                const char *name = o->fields[i].name;
                if (name[0] == key[0] && strlen(name) == kn && memcmp(name, key, kn) == 0) {
                    found[i] = json_object_iter_value(it);
                    break;
                }
            }
        }
    }
    for (size_t i = 0; i < o->nfields; i++) {
        const struct cs_wire_field *f = &o->fields[i];
        const json_t *v = scanned ? found[i] : json_object_get(j, f->name);
        if (!v) {
            if (f->required) {
                struct mark s = push(&c->at, f->name);
                enum cs_wire_status st = fail(c, CS_WIRE_INVALID, "missing required property");
                pop(&c->at, s);
                return st;
            }
            if (f->has_default) {
                enum cs_wire_status st = set_default(f, base + f->offset, c);
                if (st != CS_WIRE_OK)
                    return st;
            }
            continue;
        }
        struct mark s = push(&c->at, f->name);
        enum cs_wire_status st = dec(f->type, v, base + f->offset, c);
        if (st != CS_WIRE_OK)
            return st;
        pop(&c->at, s);
        if (f->has_offset != CS_WIRE_NO_HAS) {
            bool yes = true;
            memcpy(base + f->has_offset, &yes, sizeof yes);
        }
    }
    return CS_WIRE_OK;
}

static enum cs_wire_status dec_string(const struct cs_wire_type *t, const json_t *j, void *out,
                                      struct ctx *c)
{
    if (t->kind == CS_WIRE_NSTRING && json_is_null(j))
        return CS_WIRE_OK; /* s stays NULL */
    if (!json_is_string(j))
        return fail(c, CS_WIRE_INVALID,
                    t->kind == CS_WIRE_NSTRING ? "expected string or null" : "expected string");
    const char *s = json_string_value(j);
    size_t n = json_string_length(j);
    enum cs_wire_status st = check_str(t, s, n, c);
    if (st != CS_WIRE_OK)
        return st;
    if (cs_str_set_n(out, s, n) != 0)
        return oom(c);
    return CS_WIRE_OK;
}

static enum cs_wire_status dec_const(const struct cs_wire_type *t, const json_t *j, struct ctx *c)
{
    int64_t v;
    switch (t->const_kind) {
    case CS_WIRE_CONST_STRING:
        if (json_is_string(j) && json_string_length(j) == strlen(t->const_str) &&
            memcmp(json_string_value(j), t->const_str, json_string_length(j)) == 0)
            return CS_WIRE_OK;
        return fail(c, CS_WIRE_INVALID, "must be \"%s\"", t->const_str);
    case CS_WIRE_CONST_INT:
        if (as_int(j, &v) == INT_OK && v == t->const_int)
            return CS_WIRE_OK;
        return fail(c, CS_WIRE_INVALID, "must be %lld", (long long)t->const_int);
    case CS_WIRE_CONST_BOOL:
        if (json_is_boolean(j) && (json_is_true(j) ? 1 : 0) == t->const_int)
            return CS_WIRE_OK;
        return fail(c, CS_WIRE_INVALID, "must be %s", t->const_int ? "true" : "false");
    }
    return fail(c, CS_WIRE_INVALID, "bad constant kind");
}

static enum cs_wire_status dec_array(const struct cs_wire_type *t, const json_t *j, void *out,
                                     struct ctx *c)
{
    if (!json_is_array(j))
        return fail(c, CS_WIRE_INVALID, "expected array");
    size_t n = json_array_size(j);
    enum cs_wire_status st = check_items(t, n, c);
    if (st != CS_WIRE_OK)
        return st;
    struct cs_wire_array arr = {NULL, 0};
    if (n) {
        if (n > SIZE_MAX / t->item->size)
            return oom(c);
        arr.v = zalloc(n * t->item->size);
        if (!arr.v)
            return oom(c);
        arr.n = n;
    }
    memcpy(out, &arr, sizeof arr); /* published first so a failure below frees what was built */
    for (size_t i = 0; i < n; i++) {
        struct mark s = push_index(&c->at, i);
        st = dec(t->item, json_array_get(j, i), (char *)arr.v + i * t->item->size, c);
        if (st != CS_WIRE_OK)
            return st;
        pop(&c->at, s);
    }
    return CS_WIRE_OK;
}

static enum cs_wire_status dec_map(const struct cs_wire_type *t, const json_t *j, void *out,
                                   struct ctx *c)
{
    if (!json_is_object(j))
        return fail(c, CS_WIRE_INVALID, "expected object");
    size_t n = json_object_size(j);
    struct cs_wire_array arr = {NULL, 0};
    if (n) {
        if (n > SIZE_MAX / t->entry_size)
            return oom(c);
        arr.v = zalloc(n * t->entry_size);
        if (!arr.v)
            return oom(c);
        arr.n = n;
    }
    memcpy(out, &arr, sizeof arr);
    size_t i = 0;
    const char *key;
    size_t klen;
    json_t *v;
    json_object_keylen_foreach((json_t *)j, key, klen, v)
    {
        if (i >= n)
            break;
        char *entry = (char *)arr.v + i * t->entry_size;
        if (cs_str_set_n((struct cs_str *)(void *)entry, key, klen) != 0)
            return oom(c);
        struct mark s = push_n(&c->at, key, klen);
        enum cs_wire_status st = dec(t->item, v, entry + t->value_offset, c);
        if (st != CS_WIRE_OK)
            return st;
        pop(&c->at, s);
        i++;
    }
    return CS_WIRE_OK;
}

static enum cs_wire_status dec_union(const struct cs_wire_type *t, const json_t *j, void *out,
                                     struct ctx *c)
{
    if (!json_is_object(j))
        return fail(c, CS_WIRE_INVALID, "expected object");
    const json_t *d = json_object_get(j, t->discriminator);
    struct mark s = push(&c->at, t->discriminator);
    if (!d)
        return fail(c, CS_WIRE_INVALID, "missing required property");
    if (!json_is_string(d))
        return fail(c, CS_WIRE_INVALID, "expected string");
    const char *tag = json_string_value(d);
    size_t tlen = json_string_length(d);
    size_t which = t->nbranches;
    for (size_t i = 0; i < t->nbranches; i++) {
        if (strlen(t->branches[i].tag) == tlen && memcmp(t->branches[i].tag, tag, tlen) == 0) {
            which = i;
            break;
        }
    }
    if (which == t->nbranches) {
        char list[200];
        const char *names[64];
        size_t nn = t->nbranches < 64 ? t->nbranches : 64;
        for (size_t i = 0; i < nn; i++)
            names[i] = t->branches[i].tag;
        enum_list(names, nn, list, sizeof list);
        return fail(c, CS_WIRE_INVALID, "expected one of %s", list);
    }
    pop(&c->at, s);
    int tagv = (int)which;
    memcpy(out, &tagv, sizeof tagv);
    return dec_object(t->branches[which].type->obj, j, (char *)out + t->union_offset, c);
}

static enum cs_wire_status dec(const struct cs_wire_type *t, const json_t *j, void *out,
                               struct ctx *c)
{
    switch (t->kind) {
    case CS_WIRE_STRING:
    case CS_WIRE_NSTRING:
        return dec_string(t, j, out, c);
    case CS_WIRE_INT: {
        int64_t v = 0;
        enum int_kind k = as_int(j, &v);
        if (k == INT_NOT_INTEGER)
            return fail(c, CS_WIRE_INVALID, "expected integer");
        if (k == INT_OUT_OF_RANGE)
            return fail(c, CS_WIRE_INVALID, "integer out of range (beyond 64 bits)");
        enum cs_wire_status st = check_int(t, v, c);
        if (st != CS_WIRE_OK)
            return st;
        memcpy(out, &v, sizeof v);
        return CS_WIRE_OK;
    }
    case CS_WIRE_BOOL: {
        if (!json_is_boolean(j))
            return fail(c, CS_WIRE_INVALID, "expected boolean");
        bool b = json_is_true(j);
        memcpy(out, &b, sizeof b);
        return CS_WIRE_OK;
    }
    case CS_WIRE_ENUM: {
        if (json_is_string(j)) {
            const char *s = json_string_value(j);
            size_t n = json_string_length(j);
            for (size_t i = 0; i < t->nenum; i++) {
                if (strlen(t->enum_names[i]) == n && memcmp(t->enum_names[i], s, n) == 0) {
                    int e = (int)i;
                    memcpy(out, &e, sizeof e);
                    return CS_WIRE_OK;
                }
            }
        }
        char list[200];
        enum_list(t->enum_names, t->nenum, list, sizeof list);
        return fail(c, CS_WIRE_INVALID, "expected one of %s", list);
    }
    case CS_WIRE_CONST:
        return dec_const(t, j, c);
    case CS_WIRE_OBJECT:
        return dec_object(t->obj, j, out, c);
    case CS_WIRE_ARRAY:
        return dec_array(t, j, out, c);
    case CS_WIRE_MAP:
        return dec_map(t, j, out, c);
    case CS_WIRE_UNION:
        return dec_union(t, j, out, c);
    case CS_WIRE_JSON: {
        enum cs_wire_status st = check_json(t, j, c);
        if (st != CS_WIRE_OK)
            return st;
        json_t *ref = json_incref((json_t *)(uintptr_t)j); /* shared with the input, not copied */
        memcpy(out, &ref, sizeof ref);
        return CS_WIRE_OK;
    }
    }
    return fail(c, CS_WIRE_INVALID, "unsupported type kind");
}

enum cs_wire_status cs_wire_decode(const struct cs_wire_type *t, const json_t *j, void *out,
                                   struct cs_wire_diag *diag)
{
    struct ctx c;
    c.at.depth = 0; /* the segments are written before they are read */
    c.diag = diag;
    c.slack = false;
    c.tb = NULL;
    if (diag) {
        diag->pointer[0] = '\0';
        diag->text[0] = '\0';
    }
    memset(out, 0, t->size);
    if (!j)
        return fail(&c, CS_WIRE_INVALID, "no value");
    enum cs_wire_status st = dec(t, j, out, &c);
    if (st != CS_WIRE_OK)
        cs_wire_free(t, out);
    return st;
}

/* ---- free ---- */

static void free_value(const struct cs_wire_type *t, void *v);

static void free_object(const struct cs_wire_object *o, char *base)
{
    for (size_t i = 0; i < o->nfields; i++)
        free_value(o->fields[i].type, base + o->fields[i].offset);
}

static void free_value(const struct cs_wire_type *t, void *v)
{
    switch (t->kind) {
    case CS_WIRE_STRING:
    case CS_WIRE_NSTRING: {
        struct cs_str *s = v;
        cs_wire_release(s->s);
        s->s = NULL;
        s->n = 0;
        return;
    }
    case CS_WIRE_INT:
    case CS_WIRE_BOOL:
    case CS_WIRE_ENUM:
    case CS_WIRE_CONST:
        return;
    case CS_WIRE_OBJECT:
        free_object(t->obj, v);
        return;
    case CS_WIRE_ARRAY:
    case CS_WIRE_MAP: {
        struct cs_wire_array arr;
        memcpy(&arr, v, sizeof arr);
        size_t esz = t->kind == CS_WIRE_ARRAY ? t->item->size : t->entry_size;
        for (size_t i = 0; i < arr.n; i++) {
            char *e = (char *)arr.v + i * esz;
            if (t->kind == CS_WIRE_MAP) {
                free_value(&(const struct cs_wire_type){.kind = CS_WIRE_STRING}, e);
                free_value(t->item, e + t->value_offset);
            } else {
                free_value(t->item, e);
            }
        }
        cs_wire_release(arr.v);
        memset(v, 0, sizeof arr);
        return;
    }
    case CS_WIRE_UNION: {
        int tag;
        memcpy(&tag, v, sizeof tag);
        if (tag >= 0 && (size_t)tag < t->nbranches)
            free_object(t->branches[tag].type->obj, (char *)v + t->union_offset);
        return;
    }
    case CS_WIRE_JSON: {
        json_t *ref;
        memcpy(&ref, v, sizeof ref);
        json_decref(ref);
        ref = NULL;
        memcpy(v, &ref, sizeof ref);
        return;
    }
    }
}

void cs_wire_free(const struct cs_wire_type *t, void *v)
{
    if (!v)
        return;
    free_value(t, v);
    memset(v, 0, t->size);
}

/* ---- encode ---- */

/* Whether s[0..n) is valid UTF-8 (shortest form, no surrogates, at most U+10FFFF), as
 * json_stringn requires; used only to tell a caller's bad string from an allocation failure. */
static bool utf8_valid(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        /* Eight ASCII bytes at a time (most of a text). */
        while (n - i >= 8) {
            uint64_t v;
            memcpy(&v, u + i, sizeof v);
            if (v & 0x8080808080808080ull)
                break;
            i += 8;
        }
        if (i >= n)
            break;
        unsigned char b = u[i];
        size_t len = b < 0x80                 ? 1
                     : b >= 0xC2 && b <= 0xDF ? 2
                     : b >= 0xE0 && b <= 0xEF ? 3
                     : b >= 0xF0 && b <= 0xF4 ? 4
                                              : 0;
        if (len == 0 || len > n - i)
            return false;
        for (size_t k = 1; k < len; k++)
            if ((u[i + k] & 0xC0) != 0x80)
                return false;
        if ((b == 0xE0 && u[i + 1] < 0xA0) || (b == 0xED && u[i + 1] > 0x9F) ||
            (b == 0xF0 && u[i + 1] < 0x90) || (b == 0xF4 && u[i + 1] > 0x8F))
            return false;
        i += len;
    }
    return true;
}

static enum cs_wire_status enc(const struct cs_wire_type *t, const void *v, json_t **out,
                               struct ctx *c);

/* Makes room for more bytes after what the text holds (jansson's allocator has no realloc). */
static bool tb_room(struct tbuf *b, size_t more)
{
    if (more > SIZE_MAX / 2 - b->n)
        return false;
    size_t need = b->n + more;
    if (need <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 512;
    while (cap < need)
        cap *= 2;
    char *p = cs_wire_malloc(cap);
    if (!p)
        return false;
    cs_mem_huge(p, cap); /* a big text's pages (base_mem.h) */
    if (b->p && b->n)    /* no buffer yet: nothing in it */
        memcpy(p, b->p, b->n);
    cs_wire_release(b->p);
    b->p = p;
    b->cap = cap;
    return true;
}

static enum cs_wire_status put(struct ctx *c, const char *s, size_t n)
{
    struct tbuf *b = c->tb;
    if (n <= b->cap - b->n && b->p) { /* the common case: room already */
        memcpy(b->p + b->n, s, n);
        b->n += n;
        return CS_WIRE_OK;
    }
    if (n == 0)
        return CS_WIRE_OK; /* the buffer may not exist yet */
    if (!tb_room(c->tb, n))
        return oom(c);
    assert(c->tb->p); /* room for n > 0 bytes means a buffer */
    memcpy(c->tb->p + c->tb->n, s, n);
    c->tb->n += n;
    return CS_WIRE_OK;
}

static enum cs_wire_status put_c(struct ctx *c, char ch)
{
    struct tbuf *b = c->tb;
    if (b->n < b->cap) {
        b->p[b->n++] = ch;
        return CS_WIRE_OK;
    }
    return put(c, &ch, 1);
}

/* A string literal, byte for byte what json_dumps writes for it (cs_json_quote). A small string
 * gets room for its worst case (six bytes a byte); a big one is counted first and gets its exact
 * room at once (cs_json_escaped_len: one read, cheap next to the copies), so the buffer neither
 * needs six times the string nor is copied at every doubling on the way. Growing from a guess to a
 * megabyte of control bytes (a process's output of NULs escapes to six megabytes) copied and
 * first-touched about twice the final size (issue 33: page faults are dear in some VMs). */
static enum cs_wire_status put_quoted(struct ctx *c, const char *s, size_t n)
{
    enum { SMALL = 65536 };
    if (put_c(c, '"') != CS_WIRE_OK)
        return CS_WIRE_NOMEM;
    size_t room = n > SMALL ? cs_json_escaped_len(s, n) : 6 * n;
    if (!tb_room(c->tb, room + 1)) /* + 1: the closing quote */
        return oom(c);
    if (n > 0)
        c->tb->n += cs_json_escape(s, n, c->tb->p + c->tb->n);
    return put_c(c, '"');
}

static enum cs_wire_status put_int(struct ctx *c, int64_t v)
{
    char num[24];
    char *at = num + sizeof num;
    /* The magnitude as unsigned: -INT64_MIN does not fit an int64_t. */
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    do {
        *--at = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        *--at = '-';
    return put(c, at, (size_t)(num + sizeof num - at));
}

/* The deepest nesting put_json writes (jansson's parser stops at 2048 too): deeper, or a cycle
 * (which jansson's own writer refuses), is an error rather than a stack overflow. */
#define JSON_TEXT_DEPTH 2048

/* A jansson value, byte for byte what json_dumps(JSON_COMPACT | JSON_ENCODE_ANY) writes for it:
 * members in the object's order, strings through cs_json_escape, integers as %lld, reals by
 * jansson itself (its shortest-round-trip spelling). jansson's writer costs several thousand
 * instructions for a three-member reply (a hash table of the containers it is inside, a UTF-8
 * decode of every byte); this one only copies and escapes. */
static enum cs_wire_status put_json(struct ctx *c, const json_t *j, size_t depth)
{
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        if (depth >= JSON_TEXT_DEPTH)
            return fail(c, CS_WIRE_INVALID, "nested more than %d deep", JSON_TEXT_DEPTH);
        if (put_c(c, '{') != CS_WIRE_OK)
            return CS_WIRE_NOMEM;
        json_t *o = (json_t *)(uintptr_t)j; /* jansson's iterators take a non-const object */
        bool first = true;
        for (void *it = json_object_iter(o); it; it = json_object_iter_next(o, it)) {
            enum cs_wire_status st = first ? CS_WIRE_OK : put_c(c, ',');
            first = false;
            if (st == CS_WIRE_OK)
                st = put_quoted(c, json_object_iter_key(it), json_object_iter_key_len(it));
            if (st == CS_WIRE_OK)
                st = put_c(c, ':');
            if (st == CS_WIRE_OK)
                st = put_json(c, json_object_iter_value(it), depth + 1);
            if (st != CS_WIRE_OK)
                return st;
        }
        return put_c(c, '}');
    }
    case JSON_ARRAY: {
        if (depth >= JSON_TEXT_DEPTH)
            return fail(c, CS_WIRE_INVALID, "nested more than %d deep", JSON_TEXT_DEPTH);
        if (put_c(c, '[') != CS_WIRE_OK)
            return CS_WIRE_NOMEM;
        for (size_t i = 0; i < json_array_size(j); i++) {
            enum cs_wire_status st = i ? put_c(c, ',') : CS_WIRE_OK;
            if (st == CS_WIRE_OK)
                st = put_json(c, json_array_get(j, i), depth + 1);
            if (st != CS_WIRE_OK)
                return st;
        }
        return put_c(c, ']');
    }
    case JSON_STRING: {
        const char *s = json_string_value(j);
        size_t n = json_string_length(j);
        /* jansson refuses to write a string that is not UTF-8 (one made unchecked). */
        if (!utf8_valid(s, n))
            return fail(c, CS_WIRE_INVALID, "string is not valid UTF-8");
        return put_quoted(c, s, n);
    }
    case JSON_INTEGER:
        return put_int(c, (int64_t)json_integer_value(j));
    case JSON_REAL: {
        char *text = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
        if (!text)
            return oom(c); /* a json_real is always finite: only its copy can fail */
        enum cs_wire_status st = put(c, text, strlen(text));
        cs_wire_release(text);
        return st;
    }
    case JSON_TRUE:
        return put(c, "true", 4);
    case JSON_FALSE:
        return put(c, "false", 5);
    case JSON_NULL:
        return put(c, "null", 4);
    }
    return fail(c, CS_WIRE_INVALID, "unknown JSON type");
}

/* Whether the first i keys of a map's entries hold key (the text encoder has no object to ask).
 * Maps are small (environment overrides); past 64 keys a jansson object serves as the set. */
static bool key_seen(const struct cs_wire_type *t, const struct cs_wire_array *arr, size_t i,
                     const char *k, size_t kn, json_t *set)
{
    if (set)
        return json_object_getn(set, k, kn) != NULL;
    for (size_t j = 0; j < i; j++) {
        const struct cs_str *o =
            (const struct cs_str *)(const void *)((const char *)arr->v + j * t->entry_size);
        size_t on = o->s ? o->n : 0;
        if (on == kn && (kn == 0 || memcmp(o->s, k, kn) == 0))
            return true;
    }
    return false;
}

/* Wraps a jansson constructor's result: NULL there can only be an allocation failure. */
static enum cs_wire_status made(json_t *j, json_t **out, struct ctx *c)
{
    *out = j;
    return j ? CS_WIRE_OK : oom(c);
}

static enum cs_wire_status enc_object(const struct cs_wire_object *o, const char *base,
                                      json_t **out, struct ctx *c)
{
    json_t *obj = NULL;
    if (c->tb) {
        if (put_c(c, '{') != CS_WIRE_OK)
            return CS_WIRE_NOMEM;
    } else if (!(obj = json_object())) {
        return oom(c);
    }
    bool first = true;
    for (size_t i = 0; i < o->nfields; i++) {
        const struct cs_wire_field *f = &o->fields[i];
        if (f->has_offset != CS_WIRE_NO_HAS) {
            bool has;
            memcpy(&has, base + f->has_offset, sizeof has);
            if (!has)
                continue;
        }
        json_t *jv = NULL;
        struct mark m = push(&c->at, f->name);
        enum cs_wire_status st = CS_WIRE_OK;
        if (c->tb) {
            if ((!first && put_c(c, ',') != CS_WIRE_OK) ||
                put_quoted(c, f->name, strlen(f->name)) != CS_WIRE_OK ||
                put_c(c, ':') != CS_WIRE_OK)
                st = CS_WIRE_NOMEM;
        }
        if (st == CS_WIRE_OK)
            st = enc(f->type, base + f->offset, &jv, c);
        if (st == CS_WIRE_OK && !c->tb && json_object_set_new(obj, f->name, jv) != 0)
            st = oom(c); /* set_new released jv */
        if (st != CS_WIRE_OK) {
            json_decref(obj);
            return st;
        }
        first = false;
        pop(&c->at, m);
    }
    if (c->tb)
        return put_c(c, '}');
    *out = obj;
    return CS_WIRE_OK;
}

static enum cs_wire_status enc_string(const struct cs_wire_type *t, const struct cs_str *s,
                                      json_t **out, struct ctx *c)
{
    if (!s->s && t->kind == CS_WIRE_NSTRING)
        return c->tb ? put(c, "null", 4) : made(json_null(), out, c);
    const char *p = s->s ? s->s : "";
    size_t n = s->s ? s->n : 0;
    if (!utf8_valid(p, n))
        return fail(c, CS_WIRE_INVALID, "string is not valid UTF-8");
    enum cs_wire_status st = check_str(t, p, n, c);
    if (st != CS_WIRE_OK)
        return st;
    if (c->tb)
        return put_quoted(c, p, n);
    /* Checked just above: jansson need not walk the bytes a second time. */
    return made(json_stringn_nocheck(p, n), out, c);
}

static enum cs_wire_status enc_list(const struct cs_wire_type *t, const void *v, json_t **out,
                                    struct ctx *c)
{
    struct cs_wire_array arr;
    memcpy(&arr, v, sizeof arr);
    bool array = t->kind == CS_WIRE_ARRAY;
    enum cs_wire_status st = array ? check_items(t, arr.n, c) : CS_WIRE_OK;
    if (st != CS_WIRE_OK)
        return st;
    if (arr.n && !arr.v)
        return fail(c, CS_WIRE_INVALID, "%zu items but no storage", arr.n);
    json_t *all = NULL; /* the value being built, or (text, a big map) the set of its keys */
    if (c->tb) {
        if (put_c(c, array ? '[' : '{') != CS_WIRE_OK)
            return CS_WIRE_NOMEM;
        if (!array && arr.n > 64 && !(all = json_object()))
            return oom(c);
    } else if (!(all = array ? json_array() : json_object())) {
        return oom(c);
    }
    for (size_t i = 0; i < arr.n; i++) {
        json_t *e = NULL;
        struct mark m;
        if (c->tb && i > 0 && put_c(c, ',') != CS_WIRE_OK) {
            json_decref(all);
            return CS_WIRE_NOMEM;
        }
        if (array) {
            m = push_index(&c->at, i);
            st = enc(t->item, (const char *)arr.v + i * t->item->size, &e, c);
            if (st == CS_WIRE_OK && !c->tb && json_array_append_new(all, e) != 0)
                st = oom(c);
        } else {
            const char *entry = (const char *)arr.v + i * t->entry_size;
            const struct cs_str *key = (const struct cs_str *)(const void *)entry;
            const char *k = key->s ? key->s : "";
            size_t kn = key->s ? key->n : 0;
            m = push_n(&c->at, k, kn);
            if (memchr(k, '\0', kn) || !utf8_valid(k, kn))
                st = fail(c, CS_WIRE_INVALID, "map key is not valid UTF-8 without NUL");
            else if (c->tb ? key_seen(t, &arr, i, k, kn, all)
                           : json_object_getn(all, k, kn) != NULL)
                st = fail(c, CS_WIRE_INVALID, "duplicate map key");
            else if (c->tb && (put_quoted(c, k, kn) != CS_WIRE_OK || put_c(c, ':') != CS_WIRE_OK))
                st = CS_WIRE_NOMEM;
            else if (c->tb && all && json_object_setn_new(all, k, kn, json_null()) != 0)
                st = oom(c);
            else
                st = enc(t->item, entry + t->value_offset, &e, c);
            if (st == CS_WIRE_OK && !c->tb && json_object_setn_new(all, k, kn, e) != 0)
                st = oom(c);
        }
        if (st != CS_WIRE_OK) {
            json_decref(all);
            return st;
        }
        pop(&c->at, m);
    }
    if (c->tb) {
        json_decref(all);
        return put_c(c, array ? ']' : '}');
    }
    *out = all;
    return CS_WIRE_OK;
}

static enum cs_wire_status enc(const struct cs_wire_type *t, const void *v, json_t **out,
                               struct ctx *c)
{
    switch (t->kind) {
    case CS_WIRE_STRING:
    case CS_WIRE_NSTRING:
        return enc_string(t, v, out, c);
    case CS_WIRE_INT: {
        int64_t i;
        memcpy(&i, v, sizeof i);
        enum cs_wire_status st = check_int(t, i, c);
        if (st != CS_WIRE_OK)
            return st;
        return c->tb ? put_int(c, i) : made(json_integer((json_int_t)i), out, c);
    }
    case CS_WIRE_BOOL: {
        bool b;
        memcpy(&b, v, sizeof b);
        if (c->tb)
            return b ? put(c, "true", 4) : put(c, "false", 5);
        return made(json_boolean(b), out, c);
    }
    case CS_WIRE_ENUM: {
        int e;
        memcpy(&e, v, sizeof e);
        if (e < 0 || (size_t)e >= t->nenum)
            return fail(c, CS_WIRE_INVALID, "enum value %d out of range", e);
        if (c->tb)
            return put_quoted(c, t->enum_names[e], strlen(t->enum_names[e]));
        return made(json_string(t->enum_names[e]), out, c);
    }
    case CS_WIRE_CONST:
        switch (t->const_kind) {
        case CS_WIRE_CONST_STRING:
            if (c->tb)
                return put_quoted(c, t->const_str, strlen(t->const_str));
            return made(json_string(t->const_str), out, c);
        case CS_WIRE_CONST_INT:
            return c->tb ? put_int(c, t->const_int)
                         : made(json_integer((json_int_t)t->const_int), out, c);
        case CS_WIRE_CONST_BOOL:
            if (c->tb)
                return t->const_int ? put(c, "true", 4) : put(c, "false", 5);
            return made(json_boolean(t->const_int), out, c);
        }
        return fail(c, CS_WIRE_INVALID, "bad constant kind");
    case CS_WIRE_OBJECT:
        return enc_object(t->obj, v, out, c);
    case CS_WIRE_ARRAY:
    case CS_WIRE_MAP:
        return enc_list(t, v, out, c);
    case CS_WIRE_UNION: {
        int tag;
        memcpy(&tag, v, sizeof tag);
        if (tag < 0 || (size_t)tag >= t->nbranches)
            return fail(c, CS_WIRE_INVALID, "union tag %d out of range", tag);
        return enc_object(t->branches[tag].type->obj, (const char *)v + t->union_offset, out, c);
    }
    case CS_WIRE_JSON: {
        json_t *ref;
        memcpy(&ref, v, sizeof ref);
        enum cs_wire_status st = check_json(t, ref, c);
        if (st != CS_WIRE_OK)
            return st;
        if (!c->tb)
            return made(json_incref(ref), out, c);
        return put_json(c, ref, 0);
    }
    }
    return fail(c, CS_WIRE_INVALID, "unsupported type kind");
}

enum cs_wire_status cs_wire_encode(const struct cs_wire_type *t, const void *v, json_t **out,
                                   struct cs_wire_diag *diag)
{
    assert(t && v && out);
    struct ctx c;
    c.at.depth = 0; /* the segments are written before they are read */
    c.diag = diag;
    c.slack = false;
    c.tb = NULL;
    if (diag) {
        diag->pointer[0] = '\0';
        diag->text[0] = '\0';
    }
    *out = NULL;
    json_t *j = NULL;
    enum cs_wire_status st = enc(t, v, &j, &c);
    if (st == CS_WIRE_OK)
        *out = j;
    return st;
}

static enum cs_wire_status text_done(struct ctx *c, enum cs_wire_status st, char **out,
                                     size_t *out_n);

static enum cs_wire_status encode_text(const struct cs_wire_type *t, const void *v, char **out,
                                       size_t *out_n, struct cs_wire_diag *diag, bool slack)
{
    assert(t && v && out);
    struct tbuf tb = {NULL, 0, 0};
    struct ctx c;
    c.at.depth = 0; /* the segments are written before they are read */
    c.diag = diag;
    c.tb = &tb;
    c.slack = slack;
    if (diag) {
        diag->pointer[0] = '\0';
        diag->text[0] = '\0';
    }
    *out = NULL;
    if (out_n)
        *out_n = 0;
    /* Text mode never builds a value; unused only gives every path a place to write one. */
    json_t *unused = NULL;
    enum cs_wire_status st = enc(t, v, &unused, &c);
    assert(unused == NULL);
    return text_done(&c, st, out, out_n);
}

enum cs_wire_status cs_wire_encode_text(const struct cs_wire_type *t, const void *v, char **out,
                                        size_t *out_n, struct cs_wire_diag *diag)
{
    return encode_text(t, v, out, out_n, diag, false);
}

enum cs_wire_status cs_wire_encode_text_brief(const struct cs_wire_type *t, const void *v,
                                              char **out, size_t *out_n, struct cs_wire_diag *diag)
{
    return encode_text(t, v, out, out_n, diag, true);
}

char *cs_wire_json_text(const json_t *j, size_t *out_n)
{
    struct tbuf tb = {NULL, 0, 0};
    struct ctx c;
    c.at.depth = 0;
    c.diag = NULL;
    c.slack = false;
    c.tb = &tb;
    char *out = NULL;
    if (out_n)
        *out_n = 0;
    if (j && text_done(&c, put_json(&c, j, 0), &out, out_n) != CS_WIRE_OK)
        return NULL;
    return out;
}

/* Ends a text encode that returned st: on CS_WIRE_OK the text is NUL-terminated and handed to
 * *out (and its length to *out_n), else the buffer is released. */
static enum cs_wire_status text_done(struct ctx *c, enum cs_wire_status st, char **out,
                                     size_t *out_n)
{
    struct tbuf tb = *c->tb;
    if (st == CS_WIRE_OK && !tb_room(&tb, 1))
        st = oom(c);
    if (st != CS_WIRE_OK) {
        cs_wire_release(tb.p);
        return st;
    }
    tb.p[tb.n] = '\0';
    /* A big text may hold up to twice its length after doubling (and the room an escaped piece
     * needs): give it back, since a caller may keep the text (the worker's replay cache). */
    if (!c->slack && tb.cap - tb.n > 65536 && tb.cap - tb.n > tb.n / 8) {
        char *fit = cs_wire_malloc(tb.n + 1);
        if (fit) {
            memcpy(fit, tb.p, tb.n + 1);
            cs_wire_release(tb.p);
            tb.p = fit;
        }
    }
    *out = tb.p;
    if (out_n)
        *out_n = tb.n;
    return CS_WIRE_OK;
}

const char *cs_wire_diag_format(const struct cs_wire_diag *diag, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s: %s", diag->pointer[0] ? diag->pointer : "/", diag->text);
    return buf;
}
