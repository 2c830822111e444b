/* safetensors reader (see safetensors.h). The header is read member by
 * member (lb__json_each_member: one tensor entry's tree at a time, so a
 * header of a million tiny tensors costs a record and a name each, not a
 * JSON tree of them all); this file turns each entry into a tensor and
 * checks the rules the format adds on top: field names and types, dtype,
 * shape and size arithmetic (overflow-checked), and offsets that tile the
 * data section exactly, with no overlap, gap, or trailing byte.
 *
 * Any failure on that path reads the header again the old way, as one
 * strict JSON tree (parse_tree), whose checks and their order decide the
 * message: each rule has its own, naming the file, the tensor and the
 * offending offset or values. So the member-by-member path only ever
 * accepts, and the tree path alone words refusals. */
#define _DEFAULT_SOURCE /* madvise, MADV_DONTNEED */
#include "io/safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "io/json.h"
#include "util/arena.h"
#include "util/error.h"

/* Everything a parsed file owns besides the mapping. */
typedef struct st_owned {
    lb__arena arena;           /* names and metadata strings */
    lb__arena shapes;          /* the tensors' shapes (dropped with the table) */
    lb__st_tensor *tensors;
    size_t n_tensors, cap_tensors;
    const char **meta;         /* n_meta keys, then n_meta values */
    size_t n_meta;
    int seen_meta;             /* a second __metadata__ is a repeated key */
} st_owned;

/* ===== Message helpers ===== */

/* Untrusted text shown in a message: control bytes escaped, long strings
 * cut, so a hostile name can neither garble a terminal nor crowd the rest
 * of the message out of lb_last_error()'s buffer. */
#define SHOWN_MAX 100
typedef struct shown {
    char s[SHOWN_MAX * 4 + 32];
} shown;

/* Writes the shown form of s[0..n) at dst (room for SHOWN_MAX * 4 + 4). */
static void show_into(char *dst, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0, lim = n < SHOWN_MAX ? n : SHOWN_MAX;
    while (lim < n && lim > 0 && ((unsigned char)s[lim] & 0xC0) == 0x80) lim--; /* cut between characters */
    for (size_t i = 0; i < lim; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f || c == '\\' || c == '\'') {
            dst[o++] = '\\', dst[o++] = 'x', dst[o++] = hex[c >> 4], dst[o++] = hex[c & 15];
        } else {
            dst[o++] = (char)c;
        }
    }
    if (lim < n) memcpy(dst + o, "...", 3), o += 3;
    dst[o] = '\0';
}

static const char *show(shown *b, const char *s, size_t n)
{
    show_into(b->s, s, n);
    return b->s;
}

static const char *json_type_name(lb__json_type t)
{
    switch (t) {
    case LB_JSON_NULL: return "null";
    case LB_JSON_FALSE: return "false";
    case LB_JSON_TRUE: return "true";
    case LB_JSON_NUMBER: return "number";
    case LB_JSON_STRING: return "string";
    case LB_JSON_ARRAY: return "array";
    case LB_JSON_OBJECT: return "object";
    }
    return "value";
}

/* A JSON value as a message shows it: a number's source text, a string in
 * quotes, or the type's name. */
static const char *show_value(shown *b, const lb__json *v)
{
    if (v->type == LB_JSON_NUMBER) return show(b, v->str, v->num_len);
    if (v->type == LB_JSON_STRING) {
        memcpy(b->s, "the string '", 12);
        show_into(b->s + 12, v->str, v->len);
        size_t o = strlen(b->s);
        b->s[o] = '\'', b->s[o + 1] = '\0';
        return b->s;
    }
    snprintf(b->s, sizeof b->s, "%s%s", v->type == LB_JSON_ARRAY || v->type == LB_JSON_OBJECT ? "an " : "",
             json_type_name(v->type));
    return b->s;
}

/* "[2, 3]" (already validated dims only). */
static const char *show_shape(char *buf, size_t size, const uint64_t *shape, int n_dims)
{
    size_t o = 0;
    buf[o++] = '[';
    for (int d = 0; d < n_dims && o < size; d++)
        o += (size_t)snprintf(buf + o, size - o, "%s%llu", d ? ", " : "", (unsigned long long)shape[d]);
    if (o < size - 1) buf[o++] = ']';
    buf[o < size ? o : size - 1] = '\0';
    return buf;
}

/* File byte of a header value: the JSON offsets count from the header. */
static unsigned long long at_byte(const lb__json *v) { return 8ull + (unsigned long long)v->offset; }

static uint64_t read_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* ===== dtypes ===== */

int lb__st_dtype_from_name(const char *name, lb_dtype *out)
{
    for (int i = 0; i < LB_DT_COUNT; i++) {
        const lb_dtype_info *d = lb_dtype_get((lb_dtype)i);
        if (d && d->st_name && strcmp(d->st_name, name) == 0) {
            *out = (lb_dtype)i;
            return 1;
        }
    }
    return 0;
}

/* The format's other dtypes (safetensors 0.8): legal, but not in lb_dtype. */
static const char *const unread_dtypes[] = {"F4", "F6_E2M3", "F6_E3M2", "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ",
                                            "U16", "U32", "U64", "C64"};

/* ===== One tensor entry ===== */

/* Parses and checks the entry of tensor `name`, all but how its range
 * relates to the other tensors' (check_tiling). */
static lb_status parse_tensor(const char *what, const char *name, const lb__json *v, uint64_t data_size,
                              lb__st_tensor *t, uint64_t shape_buf[LB_MAX_DIMS])
{
    shown nm, val;
    show(&nm, name, strlen(name));
    if (v->type != LB_JSON_OBJECT)
        return lb__fail(LB_ERR_PARSE, "'%s': tensor '%s' (byte %llu): entry is %s, not an object", what, nm.s,
                        at_byte(v), show_value(&val, v));
    const lb__json *dtype = NULL, *shape = NULL, *offsets = NULL;
    for (size_t k = 0; k < v->len; k++) {
        const char *key = v->keys[k];
        size_t klen = v->key_lens[k];
        if (klen == 5 && memcmp(key, "dtype", 5) == 0) dtype = &v->items[k];
        else if (klen == 5 && memcmp(key, "shape", 5) == 0) shape = &v->items[k];
        else if (klen == 12 && memcmp(key, "data_offsets", 12) == 0) offsets = &v->items[k];
        else {
            shown kk;
            return lb__fail(LB_ERR_PARSE,
                            "'%s': tensor '%s' (byte %llu): unexpected field '%s' (a tensor has only dtype, shape "
                            "and data_offsets)", what, nm.s, at_byte(&v->items[k]), show(&kk, key, klen));
        }
    }
    const char *missing = !dtype ? "dtype" : !shape ? "shape" : !offsets ? "data_offsets" : NULL;
    if (missing)
        return lb__fail(LB_ERR_PARSE, "'%s': tensor '%s' (byte %llu): missing field '%s'", what, nm.s, at_byte(v),
                        missing);

    /* dtype */
    if (dtype->type != LB_JSON_STRING)
        return lb__fail(LB_ERR_PARSE, "'%s': tensor '%s' (byte %llu): dtype is %s, not a string", what, nm.s,
                        at_byte(dtype), show_value(&val, dtype));
    if (strlen(dtype->str) != dtype->len || !lb__st_dtype_from_name(dtype->str, &t->dtype)) {
        /* A legal file in a type lowbit lacks is not malformed: say so. */
        for (size_t k = 0; k < sizeof unread_dtypes / sizeof unread_dtypes[0]; k++)
            if (strcmp(dtype->str, unread_dtypes[k]) == 0 && strlen(dtype->str) == dtype->len)
                return lb__fail(LB_ERR_UNSUPPORTED, "'%s': tensor '%s' (byte %llu): dtype '%s' is a safetensors "
                                "dtype lowbit does not read", what, nm.s, at_byte(dtype), unread_dtypes[k]);
        return lb__fail(LB_ERR_PARSE, "'%s': tensor '%s' (byte %llu): unknown dtype '%s'", what, nm.s,
                        at_byte(dtype), show(&val, dtype->str, dtype->len));
    }
    const lb_dtype_info *di = lb_dtype_get(t->dtype);
    if (di->block != 1) /* the sizes below assume one element per block, as every safetensors type has */
        return lb__fail(LB_ERR_UNSUPPORTED, "'%s': tensor '%s' (byte %llu): dtype '%s' has blocks of %u elements",
                        what, nm.s, at_byte(dtype), di->st_name, di->block);

    /* shape, and the element and byte counts it implies */
    if (shape->type != LB_JSON_ARRAY)
        return lb__fail(LB_ERR_PARSE, "'%s': tensor '%s' (byte %llu): shape is %s, not an array", what, nm.s,
                        at_byte(shape), show_value(&val, shape));
    if (shape->len > LB_MAX_DIMS)
        return lb__fail(LB_ERR_PARSE, "'%s': tensor '%s' (byte %llu): shape has %zu dimensions, more than %d",
                        what, nm.s, at_byte(shape), shape->len, LB_MAX_DIMS);
    t->n_dims = (int)shape->len;
    t->shape = shape_buf;
    for (size_t d = 0; d < shape->len; d++)
        if (!lb__json_u64(&shape->items[d], &shape_buf[d]))
            return lb__fail(LB_ERR_PARSE, "'%s': tensor '%s' (byte %llu): shape[%zu] is %s, not a non-negative "
                            "integer that fits 64 bits", what, nm.s, at_byte(&shape->items[d]), d,
                            show_value(&val, &shape->items[d]));
    char sh[LB_MAX_DIMS * 22 + 4];
    show_shape(sh, sizeof sh, t->shape, t->n_dims);
    /* Multiplied in file order, as the reference reader does: an overflow
     * is an error even if a later dimension is 0. */
    uint64_t count = 1;
    for (int d = 0; d < t->n_dims; d++) {
        if (t->shape[d] && count > UINT64_MAX / t->shape[d])
            return lb__fail(LB_ERR_PARSE, "'%s': tensor '%s' (byte %llu): the element count of shape %s overflows "
                            "64 bits", what, nm.s, at_byte(shape), sh);
        count *= t->shape[d];
    }
    t->n_elements = count;
    uint64_t size = di->block_bytes;
    if (count > UINT64_MAX / size)
        return lb__fail(LB_ERR_PARSE, "'%s': tensor '%s' (byte %llu): %llu %s elements (shape %s) overflow a "
                        "64-bit byte count", what, nm.s, at_byte(shape), (unsigned long long)count, di->st_name, sh);
    uint64_t bytes = count * size;

    /* data_offsets */
    if (offsets->type != LB_JSON_ARRAY || offsets->len != 2)
        return lb__fail(LB_ERR_PARSE, "'%s': tensor '%s' (byte %llu): data_offsets is %s%s, not an array of two "
                        "integers [begin, end]", what, nm.s, at_byte(offsets), show_value(&val, offsets),
                        offsets->type == LB_JSON_ARRAY ? " of the wrong length" : "");
    for (int k = 0; k < 2; k++)
        if (!lb__json_u64(&offsets->items[k], k ? &t->end : &t->begin))
            return lb__fail(LB_ERR_PARSE, "'%s': tensor '%s' (byte %llu): data_offsets[%d] is %s, not a "
                            "non-negative integer that fits 64 bits", what, nm.s, at_byte(&offsets->items[k]), k,
                            show_value(&val, &offsets->items[k]));
    unsigned long long b = (unsigned long long)t->begin, e = (unsigned long long)t->end;
    if (t->end < t->begin)
        return lb__fail(LB_ERR_PARSE, "'%s': tensor '%s' (byte %llu): data_offsets [%llu, %llu] end before they "
                        "begin", what, nm.s, at_byte(offsets), b, e);
    if (t->end - t->begin != bytes)
        return lb__fail(LB_ERR_PARSE, "'%s': tensor '%s' (byte %llu): data_offsets [%llu, %llu] hold %llu bytes, "
                        "but shape %s of %s needs %llu", what, nm.s, at_byte(offsets), b, e, e - b, sh, di->st_name,
                        (unsigned long long)bytes);
    if (t->end > data_size)
        return lb__fail(LB_ERR_PARSE, "'%s': tensor '%s' (byte %llu): data_offsets [%llu, %llu] reach past the "
                        "end of the file (the data section holds %llu bytes)", what, nm.s, at_byte(offsets), b, e,
                        (unsigned long long)data_size);
    return LB_OK;
}

/* ===== Whole-file rules ===== */

static int by_range(const void *a, const void *b)
{
    const lb__st_tensor *x = *(const lb__st_tensor *const *)a, *y = *(const lb__st_tensor *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return strcmp(x->name, y->name); /* names are unique: a total order, so the first error is deterministic */
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const lb__st_tensor *)a)->name, ((const lb__st_tensor *)b)->name);
}

/* The ranges sorted by offset must tile [0, data_size) exactly: an overlap
 * lets one byte be read as two tensors, a gap or trailing bytes hide data
 * no tensor owns (a "polyglot" file). */
static lb_status check_tiling(const char *what, lb__st_tensor *t, size_t n, uint64_t data_size, uint64_t data_at)
{
    lb__st_tensor **order = malloc((n ? n : 1) * sizeof *order);
    if (!order) return lb__fail(LB_ERR_NOMEM, "'%s': out of memory sorting %zu tensors", what, n);
    for (size_t i = 0; i < n; i++) order[i] = &t[i];
    qsort(order, n, sizeof *order, by_range);
    uint64_t covered = 0;
    const lb__st_tensor *prev = NULL;
    lb_status st = LB_OK;
    shown a, b;
    for (size_t i = 0; i < n && st == LB_OK; i++) {
        const lb__st_tensor *x = order[i];
        if (x->begin < covered)
            st = lb__fail(LB_ERR_PARSE, "'%s': tensors '%s' [%llu, %llu] and '%s' [%llu, %llu] overlap (data "
                          "offsets; the data section starts at file byte %llu)", what,
                          show(&a, prev->name, strlen(prev->name)), (unsigned long long)prev->begin,
                          (unsigned long long)prev->end, show(&b, x->name, strlen(x->name)),
                          (unsigned long long)x->begin, (unsigned long long)x->end, (unsigned long long)data_at);
        else if (x->begin > covered)
            st = lb__fail(LB_ERR_PARSE, "'%s': data bytes [%llu, %llu) before tensor '%s' belong to no tensor (a gap; "
                          "the data section starts at file byte %llu)", what, (unsigned long long)covered,
                          (unsigned long long)x->begin, show(&b, x->name, strlen(x->name)),
                          (unsigned long long)data_at);
        covered = x->end;
        prev = x;
    }
    free(order);
    if (st == LB_OK && covered != data_size)
        st = lb__fail(LB_ERR_PARSE, "'%s': %llu trailing bytes after the last tensor: the tensors cover data bytes "
                      "[0, %llu) of %llu (file bytes %llu to %llu belong to no tensor)", what,
                      (unsigned long long)(data_size - covered), (unsigned long long)covered,
                      (unsigned long long)data_size, (unsigned long long)(data_at + covered),
                      (unsigned long long)(data_at + data_size));
    return st;
}

typedef struct meta_pair {
    const char *key, *value;
} meta_pair;

static int by_key(const void *a, const void *b)
{
    return strcmp(((const meta_pair *)a)->key, ((const meta_pair *)b)->key);
}

/* __metadata__: an object of strings, copied into the arena (sorted by
 * key when the whole header is read). */
static lb_status parse_meta(const char *what, const lb__json *m, st_owned *own)
{
    shown k, v;
    if (m->type != LB_JSON_OBJECT)
        return lb__fail(LB_ERR_PARSE, "'%s': __metadata__ (byte %llu) is %s, not an object of strings", what,
                        at_byte(m), show_value(&v, m));
    own->meta = malloc((m->len ? 2 * m->len : 1) * sizeof *own->meta);
    if (!own->meta) return lb__fail(LB_ERR_NOMEM, "'%s': out of memory for %zu metadata entries", what, m->len);
    for (size_t i = 0; i < m->len; i++) {
        const lb__json *val = &m->items[i];
        show(&k, m->keys[i], m->key_lens[i]);
        if (val->type != LB_JSON_STRING)
            return lb__fail(LB_ERR_PARSE, "'%s': __metadata__ '%s' (byte %llu) is %s, not a string", what, k.s,
                            at_byte(val), show_value(&v, val));
        /* The API hands out C strings, which cannot carry a \u0000. */
        if (strlen(m->keys[i]) != m->key_lens[i])
            return lb__fail(LB_ERR_PARSE, "'%s': __metadata__ key '%s' (byte %llu) contains a NUL character", what,
                            k.s, at_byte(val));
        if (strlen(val->str) != val->len)
            return lb__fail(LB_ERR_PARSE, "'%s': __metadata__ '%s' (byte %llu) contains a NUL character", what, k.s,
                            at_byte(val));
        own->meta[i] = lb__arena_strndup(&own->arena, m->keys[i], m->key_lens[i]);
        own->meta[m->len + i] = lb__arena_strndup(&own->arena, val->str, val->len);
        if (!own->meta[i] || !own->meta[m->len + i])
            return lb__fail(LB_ERR_NOMEM, "'%s': out of memory for %zu metadata entries", what, m->len);
    }
    own->n_meta = m->len;
    return LB_OK;
}

static lb_status sort_meta(const char *what, st_owned *own)
{
    size_t n = own->n_meta;
    if (n < 2) return LB_OK;
    meta_pair *pairs = malloc(n * sizeof *pairs);
    if (!pairs) return lb__fail(LB_ERR_NOMEM, "'%s': out of memory for %zu metadata entries", what, n);
    for (size_t i = 0; i < n; i++) pairs[i].key = own->meta[i], pairs[i].value = own->meta[n + i];
    qsort(pairs, n, sizeof *pairs, by_key);
    for (size_t i = 0; i < n; i++) own->meta[i] = pairs[i].key, own->meta[n + i] = pairs[i].value;
    free(pairs);
    return LB_OK;
}

/* One header member: __metadata__ or a tensor entry (name and shape copied
 * into the arena). value_at: unused here, messages count from the value's
 * own offsets, which are file bytes on the tree path, the only one whose
 * messages are shown. */
typedef struct member_ctx {
    const char *what;
    st_owned *own;
    uint64_t data_size;
} member_ctx;

static lb_status add_member(void *ctx, const char *name, size_t len, const lb__json *v, size_t value_at)
{
    (void)value_at;
    member_ctx *c = ctx;
    st_owned *own = c->own;
    const char *what = c->what;
    shown nm;
    if (len == 12 && memcmp(name, "__metadata__", 12) == 0) {
        if (own->seen_meta++) return lb__fail(LB_ERR_PARSE, "'%s': __metadata__ appears twice", what);
        return parse_meta(what, v, own);
    }
    if (len == 0) return lb__fail(LB_ERR_PARSE, "'%s': a tensor (byte %llu) has an empty name", what, at_byte(v));
    if (strlen(name) != len)
        return lb__fail(LB_ERR_PARSE, "'%s': tensor '%s' (byte %llu): the name contains a NUL character", what,
                        show(&nm, name, len), at_byte(v));
    if (own->n_tensors == own->cap_tensors) {
        size_t cap = own->cap_tensors ? 2 * own->cap_tensors : 64;
        lb__st_tensor *grown = realloc(own->tensors, cap * sizeof *grown);
        if (!grown) return lb__fail(LB_ERR_NOMEM, "'%s': out of memory for %zu tensors", what, cap);
        own->tensors = grown, own->cap_tensors = cap;
    }
    lb__st_tensor *t = &own->tensors[own->n_tensors];
    memset(t, 0, sizeof *t);
    uint64_t shape[LB_MAX_DIMS];
    lb_status st = parse_tensor(what, name, v, c->data_size, t, shape);
    if (st != LB_OK) return st;
    uint64_t *kept = lb__arena_alloc(&own->shapes, (size_t)t->n_dims * sizeof *kept + 1, sizeof *kept);
    t->name = lb__arena_strndup(&own->arena, name, len);
    if (!kept || !t->name) return lb__fail(LB_ERR_NOMEM, "'%s': out of memory for %zu tensors", what, own->n_tensors);
    if (t->n_dims) memcpy(kept, shape, (size_t)t->n_dims * sizeof *kept);
    t->shape = kept;
    own->n_tensors++;
    return LB_OK;
}

/* After every member: the ranges tile the data section, the tensors are
 * sorted by name (a repeated one, which the member-by-member path does not
 * catch, is refused) and point into the data. */
static lb_status finish(const char *what, uint64_t data_at, st_owned *own, lb__st_file *out)
{
    size_t n = own->n_tensors;
    lb_status st = check_tiling(what, own->tensors, n, out->data_size, data_at);
    if (st == LB_OK) st = sort_meta(what, own);
    if (st != LB_OK) return st;
    if (n > 1) qsort(own->tensors, n, sizeof *own->tensors, by_name); /* none: tensors may be NULL */
    for (size_t i = 0; i < n; i++) {
        if (i && strcmp(own->tensors[i - 1].name, own->tensors[i].name) == 0) {
            shown nm;
            const char *name = own->tensors[i].name;
            return lb__fail(LB_ERR_PARSE, "'%s': tensor '%s' appears twice", what, show(&nm, name, strlen(name)));
        }
        own->tensors[i].data = out->data + own->tensors[i].begin;
    }
    out->n_tensors = n;
    out->tensors = own->tensors;
    out->n_meta = own->n_meta;
    out->meta_keys = own->meta, out->meta_values = own->meta ? own->meta + own->n_meta : NULL;
    return LB_OK;
}

static void free_owned(st_owned *own)
{
    if (!own) return;
    lb__arena_free(&own->arena);
    lb__arena_free(&own->shapes);
    free(own->tensors);
    free((void *)own->meta);
    free(own);
}

/* The header as one JSON tree: the reference reading, whose messages say
 * exactly what is wrong (a syntax error anywhere comes before any rule
 * about the tensors; __metadata__ is checked first). */
static lb_status parse_tree(const char *what, const char *text, uint64_t n, st_owned *own, lb__st_file *out)
{
    lb__json *root;
    lb_status st = lb__json_parse(text, (size_t)n, "JSON header (byte offsets from file byte 8)", &root);
    if (st != LB_OK) {
        /* lb__fail formats into the buffer lb_last_error() returns: copy first. */
        char msg[800];
        snprintf(msg, sizeof msg, "%s", lb_last_error());
        return lb__fail(st == LB_ERR_NOMEM ? st : LB_ERR_PARSE, "'%s': invalid %s", what, msg);
    }
    if (root->type != LB_JSON_OBJECT) { /* cannot happen after '{', but the tree decides, not the byte */
        st = lb__fail(LB_ERR_PARSE, "'%s': the header is a JSON %s, not an object", what, json_type_name(root->type));
        lb__json_free(root);
        return st;
    }
    member_ctx c = {what, own, out->data_size};
    for (size_t i = 0; st == LB_OK && i < root->len; i++)
        if (root->key_lens[i] == 12 && memcmp(root->keys[i], "__metadata__", 12) == 0)
            st = add_member(&c, root->keys[i], root->key_lens[i], &root->items[i], 0);
    for (size_t i = 0; st == LB_OK && i < root->len; i++)
        if (!(root->key_lens[i] == 12 && memcmp(root->keys[i], "__metadata__", 12) == 0))
            st = add_member(&c, root->keys[i], root->key_lens[i], &root->items[i], 0);
    lb__json_free(root);
    if (st == LB_OK) st = finish(what, 8 + n, own, out);
    return st;
}

/* The header member by member (lb__json_each_member); fails on anything
 * the tree reading would refuse, with no particular message. */
static lb_status parse_members(const char *what, const char *text, uint64_t n, st_owned *own, lb__st_file *out)
{
    member_ctx c = {what, own, out->data_size};
    lb_status st = lb__json_each_member(text, (size_t)n, what, add_member, &c);
    if (st == LB_OK) st = finish(what, 8 + n, own, out);
    return st;
}

/* ===== Entry points ===== */

static lb_status parse(const uint8_t *buf, size_t len, const char *what, lb__st_file *out, int tree_only)
{
    if (!out) return lb__fail(LB_ERR_ARG, "lb__st_parse: NULL output");
    memset(out, 0, sizeof *out);
    if (!what) what = "safetensors data";
    if (!buf && len) return lb__fail(LB_ERR_ARG, "lb__st_parse: NULL buffer of %zu bytes", len);
    if (len < 8)
        return lb__fail(LB_ERR_PARSE, "'%s': %zu bytes, shorter than the 8-byte header length that starts a "
                        "safetensors file", what, len);
    uint64_t n = read_le64(buf);
    if (n > LB_ST_MAX_HEADER)
        return lb__fail(LB_ERR_PARSE, "'%s': header length %llu (bytes 0-7) is over the %u-byte limit", what,
                        (unsigned long long)n, LB_ST_MAX_HEADER);
    if (n > len - 8) /* 8 + n > len, without the overflow */
        return lb__fail(LB_ERR_PARSE, "'%s': header length %llu (bytes 0-7) runs past the end of the file: 8 + %llu "
                        "> %zu bytes", what, (unsigned long long)n, (unsigned long long)n, len);
    const char *text = (const char *)buf + 8;
    /* The spec's MUST, which the reference reader relaxes: no leading
     * whitespace, so two readers cannot disagree about where it begins. */
    if (n == 0)
        return lb__fail(LB_ERR_PARSE, "'%s': the header (header length at bytes 0-7) is empty; it must be a JSON "
                        "object beginning with '{' at byte 8", what);
    if (text[0] != '{')
        return lb__fail(LB_ERR_PARSE, "'%s': the header must begin with '{' at byte 8, found byte 0x%02x%s", what,
                        (unsigned char)text[0], text[0] == ' ' || text[0] == '\t' || text[0] == '\n' ||
                        text[0] == '\r' ? " (leading whitespace)" : "");
    lb_status st = LB_ERR_PARSE;
    for (int tree = tree_only; tree <= 1 && st != LB_OK; tree++) {
        st_owned *own = calloc(1, sizeof *own);
        if (!own) return lb__fail(LB_ERR_NOMEM, "'%s': out of memory", what);
        out->data = buf + 8 + n;
        out->data_size = (uint64_t)len - 8 - n;
        st = tree ? parse_tree(what, text, n, own, out) : parse_members(what, text, n, own, out);
        if (st == LB_OK) {
            out->priv = own;
        } else {
            free_owned(own);
            memset(out, 0, sizeof *out);
        }
    }
    return st;
}

lb_status lb__st_parse(const uint8_t *buf, size_t len, const char *what, lb__st_file *out)
{
    return parse(buf, len, what, out, 0);
}

lb_status lb__st_parse_tree(const uint8_t *buf, size_t len, const char *what, lb__st_file *out)
{
    return parse(buf, len, what, out, 1);
}

lb_status lb__st_open(const char *path, lb__st_file *out)
{
    if (!out) return lb__fail(LB_ERR_ARG, "lb__st_open: NULL output");
    memset(out, 0, sizeof *out);
    if (!path) return lb__fail(LB_ERR_ARG, "lb__st_open: NULL path");
    lb__mapped m;
    lb_status st = lb__map_file(path, &m);
    if (st != LB_OK) return st;
    st = lb__st_parse(m.data, m.size, path, out);
    if (st != LB_OK) {
        lb__unmap_file(&m);
        return st;
    }
    out->map = m;
    /* Names, shapes and metadata were copied out: the header's pages (62 MB
     * for a million tensors) need not stay resident. Whole pages only, so
     * the first tensor's bytes keep theirs. */
    long page = sysconf(_SC_PAGESIZE);
    size_t ps = page > 0 ? (size_t)page : 4096, header_end = (size_t)(out->data - m.data);
    if (header_end / ps) madvise((void *)(uintptr_t)m.data, header_end / ps * ps, MADV_DONTNEED);
    return LB_OK;
}

void lb__st_close(lb__st_file *f)
{
    if (!f) return;
    free_owned(f->priv);
    if (f->map.data) lb__unmap_file(&f->map);
    memset(f, 0, sizeof *f);
}

void lb__st_drop_table(lb__st_file *f)
{
    if (!f || !f->priv) return;
    st_owned *own = f->priv;
    free(own->tensors);
    lb__arena_free(&own->shapes);
    own->tensors = NULL, own->n_tensors = own->cap_tensors = 0;
    f->tensors = NULL, f->n_tensors = 0;
}

const lb__st_tensor *lb__st_find(const lb__st_file *f, const char *name)
{
    if (!f || !name) return NULL;
    size_t lo = 0, hi = f->n_tensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(f->tensors[mid].name, name);
        if (c == 0) return &f->tensors[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}
