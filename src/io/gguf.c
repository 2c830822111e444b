/* The GGUF reader (rules in gguf.h). It walks the file once with a cursor
 * that never moves past the end: every read first asks need() whether the
 * bytes are there, and every length or count read from the file is
 * compared with the bytes that remain (by division, so nothing wraps)
 * before anything is allocated for it. */
#include "io/gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h"

#define HEADER_BYTES 24 /* magic, version, tensor count, KV count */
/* The smallest possible records, which bound the counts a file can hold:
 * a KV is a key length, a 1-byte key, a type and a 1-byte value; a tensor
 * info is a name length, a 1-byte name, n_dims, one dimension, a type and
 * an offset. */
#define MIN_KV_BYTES (8 + 1 + 4 + 1)
#define MIN_TENSOR_INFO_BYTES (8 + 1 + 4 + 8 + 4 + 8)

/* ===== Owned memory: key and name copies, sorted indexes ===== */

/* Names are copied into blocks that never move, so the pointers handed out
 * stay valid however many follow. */
typedef struct name_block {
    struct name_block *next;
    size_t used, cap;
    char bytes[];
} name_block;

typedef struct gguf_priv {
    name_block *names;
    const lb__gguf_kv **kv_sorted;       /* by key */
    const lb__gguf_tensor **t_sorted;    /* by name */
    uint64_t *t_info_at;                 /* file offset of each tensor's info, for messages */
} gguf_priv;

static const char *copy_name(gguf_priv *pv, const uint8_t *s, size_t n)
{
    name_block *b = pv->names;
    if (!b || b->cap - b->used < n + 1) {
        size_t cap = n + 1 > 16384 ? n + 1 : 16384;
        b = malloc(sizeof *b + cap);
        if (!b) return NULL;
        b->next = pv->names, b->used = 0, b->cap = cap;
        pv->names = b;
    }
    char *dst = b->bytes + b->used;
    if (n) memcpy(dst, s, n);
    dst[n] = '\0';
    b->used += n + 1;
    return dst;
}

/* ===== Value types ===== */

static const struct {
    const char *name;
    size_t size; /* 0: variable (string, array) */
} value_types[LB_GGUF_TYPE_COUNT] = {
    [LB_GGUF_U8] = {"u8", 1},     [LB_GGUF_I8] = {"i8", 1},         [LB_GGUF_U16] = {"u16", 2},
    [LB_GGUF_I16] = {"i16", 2},   [LB_GGUF_U32] = {"u32", 4},       [LB_GGUF_I32] = {"i32", 4},
    [LB_GGUF_F32] = {"f32", 4},   [LB_GGUF_BOOL] = {"bool", 1},     [LB_GGUF_STRING] = {"string", 0},
    [LB_GGUF_ARRAY] = {"array", 0}, [LB_GGUF_U64] = {"u64", 8},     [LB_GGUF_I64] = {"i64", 8},
    [LB_GGUF_F64] = {"f64", 8},
};

size_t lb__gguf_type_size(int type)
{
    return type >= 0 && type < LB_GGUF_TYPE_COUNT ? value_types[type].size : 0;
}

const char *lb__gguf_type_name(int type)
{
    return type >= 0 && type < LB_GGUF_TYPE_COUNT ? value_types[type].name : "?";
}

static int is_unsigned(int t) { return t == LB_GGUF_U8 || t == LB_GGUF_U16 || t == LB_GGUF_U32 || t == LB_GGUF_U64; }
static int is_signed(int t) { return t == LB_GGUF_I8 || t == LB_GGUF_I16 || t == LB_GGUF_I32 || t == LB_GGUF_I64; }
static int is_float(int t) { return t == LB_GGUF_F32 || t == LB_GGUF_F64; }

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t rd32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }

typedef union scalar { uint64_t u; int64_t i; double f; } scalar;

/* One little-endian element of a fixed-size type (known valid). */
static scalar decode(int type, const uint8_t *p)
{
    scalar v = {0};
    switch (type) {
    case LB_GGUF_U8: case LB_GGUF_BOOL: v.u = p[0]; break;
    case LB_GGUF_I8: v.i = (int8_t)p[0]; break;
    case LB_GGUF_U16: v.u = rd16(p); break;
    case LB_GGUF_I16: v.i = (int16_t)rd16(p); break;
    case LB_GGUF_U32: v.u = rd32(p); break;
    case LB_GGUF_I32: v.i = (int32_t)rd32(p); break;
    case LB_GGUF_U64: v.u = rd64(p); break;
    case LB_GGUF_I64: v.i = (int64_t)rd64(p); break;
    case LB_GGUF_F32: {
        uint32_t bits = rd32(p);
        float x;
        memcpy(&x, &bits, sizeof x);
        v.f = x;
        break;
    }
    case LB_GGUF_F64: {
        uint64_t bits = rd64(p);
        memcpy(&v.f, &bits, sizeof v.f);
        break;
    }
    }
    return v;
}

/* ===== ggml tensor types, for messages ===== */

static const char *const ggml_type_names[] = {
    "f32", "f16", "q4_0", "q4_1", "q4_2", "q4_3", "q5_0", "q5_1", "q8_0", "q8_1", "q2_k", "q3_k", "q4_k", "q5_k",
    "q6_k", "q8_k", "iq2_xxs", "iq2_xs", "iq3_xxs", "iq1_s", "iq4_nl", "iq3_s", "iq2_s", "iq4_xs", "i8", "i16",
    "i32", "i64", "f64", "iq1_m", "bf16", "q4_0_4_4", "q4_0_4_8", "q4_0_8_8", "tq1_0", "tq2_0", "iq4_nl_4_4",
    "iq4_nl_4_8", "iq4_nl_8_8", "mxfp4", "nvfp4", "q1_0",
};

/* Ids ggml once used and removed; on-disk ids are never reused. */
static int ggml_type_retired(uint32_t t) { return t == 4 || t == 5 || (t >= 31 && t <= 33) || (t >= 36 && t <= 38); }

/* ===== The cursor ===== */

typedef struct parser {
    const uint8_t *buf;
    size_t len, pos;
    const char *what;
    gguf_priv *pv;
    char ctx[160]; /* "KV 3 ('general.name')" or "tensor 7 ('output.weight')": where an error is */
} parser;

static size_t remain(const parser *p) { return p->len - p->pos; }

/* Printable form of a key or name for messages (may hold any bytes). */
static void show(char *dst, size_t cap, const uint8_t *s, uint64_t n)
{
    size_t k = 0, limit = cap > 4 ? cap - 4 : 0;
    for (uint64_t j = 0; j < n && k < limit; j++) dst[k++] = s[j] >= 0x20 && s[j] < 0x7f ? (char)s[j] : '?';
    if (n > limit) memcpy(dst + k, "...", 3), k += 3;
    dst[k] = '\0';
}

static lb_status need(const parser *p, uint64_t n, const char *item)
{
    if (n <= remain(p)) return LB_OK;
    return lb__fail(LB_ERR_PARSE, "%s: %s at byte %zu: the %s needs %llu bytes but the file ends %zu bytes later",
                    p->what, p->ctx, p->pos, item, (unsigned long long)n, remain(p));
}

/* A u64 length then that many bytes. */
static lb_status read_string(parser *p, const char *item, const uint8_t **s, uint64_t *n)
{
    lb_status st = need(p, 8, item);
    if (st != LB_OK) return st;
    uint64_t len = rd64(p->buf + p->pos);
    if (len > remain(p) - 8)
        return lb__fail(LB_ERR_PARSE, "%s: %s at byte %zu: the %s length %llu runs past the end of the file (%zu bytes remain)",
                        p->what, p->ctx, p->pos, item, (unsigned long long)len, remain(p) - 8);
    *s = p->buf + p->pos + 8, *n = len;
    p->pos += 8 + (size_t)len;
    return LB_OK;
}

static lb_status check_bools(parser *p, const uint8_t *b, uint64_t n)
{
    for (uint64_t j = 0; j < n; j++)
        if (b[j] > 1)
            return lb__fail(LB_ERR_PARSE, "%s: %s at byte %zu: bool value %u is neither 0 nor 1", p->what, p->ctx,
                            (size_t)(b + j - p->buf), b[j]);
    return LB_OK;
}

/* ===== KVs ===== */

static lb_status read_array(parser *p, lb__gguf_kv *kv)
{
    lb_status st = need(p, 12, "array element type and count");
    if (st != LB_OK) return st;
    uint32_t et = rd32(p->buf + p->pos);
    uint64_t n = rd64(p->buf + p->pos + 4);
    if (et == LB_GGUF_ARRAY)
        return lb__fail(LB_ERR_PARSE, "%s: %s at byte %zu: arrays of arrays are not supported", p->what, p->ctx, p->pos);
    if (et >= LB_GGUF_TYPE_COUNT)
        return lb__fail(LB_ERR_PARSE, "%s: %s at byte %zu: unknown array element type %u (types are 0..12)", p->what,
                        p->ctx, p->pos, et);
    p->pos += 12;
    kv->arr_type = (int)et, kv->n = n, kv->arr = p->buf + p->pos;
    if (et != LB_GGUF_STRING) {
        uint64_t size = value_types[et].size;
        if (n > remain(p) / size)
            return lb__fail(LB_ERR_PARSE, "%s: %s at byte %zu: array count %llu of %s runs past the end of the file "
                            "(%zu bytes remain)", p->what, p->ctx, p->pos, (unsigned long long)n, value_types[et].name,
                            remain(p));
        if (et == LB_GGUF_BOOL && (st = check_bools(p, kv->arr, n)) != LB_OK) return st;
        p->pos += (size_t)(n * size);
        return LB_OK;
    }
    /* Each string needs at least its 8-byte length: that bounds the table. */
    if (n > remain(p) / 8)
        return lb__fail(LB_ERR_PARSE, "%s: %s at byte %zu: array count %llu of strings runs past the end of the file "
                        "(%zu bytes remain, 8 at least per string)", p->what, p->ctx, p->pos, (unsigned long long)n,
                        remain(p));
    uint64_t *offs = malloc(n ? (size_t)n * sizeof *offs : 1);
    if (!offs) return lb__fail(LB_ERR_NOMEM, "%s: %s: out of memory for %llu string offsets", p->what, p->ctx,
                               (unsigned long long)n);
    kv->priv = offs;
    size_t base = p->pos;
    for (uint64_t j = 0; j < n; j++) {
        offs[j] = p->pos - base;
        const uint8_t *s;
        uint64_t len;
        if ((st = read_string(p, "array string", &s, &len)) != LB_OK) return st;
    }
    return LB_OK;
}

static lb_status read_value(parser *p, lb__gguf_kv *kv)
{
    lb_status st = need(p, 4, "value type");
    if (st != LB_OK) return st;
    uint32_t t = rd32(p->buf + p->pos);
    if (t >= LB_GGUF_TYPE_COUNT)
        return lb__fail(LB_ERR_PARSE, "%s: %s at byte %zu: unknown value type %u (types are 0..12)", p->what, p->ctx,
                        p->pos, t);
    p->pos += 4;
    kv->type = (int)t;
    if (t == LB_GGUF_ARRAY) return read_array(p, kv);
    if (t == LB_GGUF_STRING) {
        const uint8_t *s;
        if ((st = read_string(p, "string value", &s, &kv->str_len)) != LB_OK) return st;
        kv->str = (const char *)s;
        return LB_OK;
    }
    size_t size = value_types[t].size;
    if ((st = need(p, size, value_types[t].name)) != LB_OK) return st;
    if (t == LB_GGUF_BOOL && (st = check_bools(p, p->buf + p->pos, 1)) != LB_OK) return st;
    kv->raw = p->buf + p->pos;
    scalar v = decode((int)t, p->buf + p->pos);
    memcpy(&kv->v, &v, sizeof v);
    p->pos += size;
    return LB_OK;
}

static lb_status read_kvs(parser *p, lb__gguf_file *f)
{
    for (size_t i = 0; i < f->n_kv; i++) {
        lb__gguf_kv *kv = &f->kv[i];
        kv->file_offset = p->pos;
        snprintf(p->ctx, sizeof p->ctx, "KV %zu", i);
        const uint8_t *key;
        uint64_t n;
        lb_status st = read_string(p, "key", &key, &n);
        if (st != LB_OK) return st;
        if (n == 0)
            return lb__fail(LB_ERR_PARSE, "%s: KV %zu at byte %llu: the key is empty", p->what, i,
                            (unsigned long long)kv->file_offset);
        char shown[80];
        show(shown, sizeof shown, key, n);
        snprintf(p->ctx, sizeof p->ctx, "KV %zu ('%s')", i, shown);
        if (memchr(key, 0, (size_t)n))
            return lb__fail(LB_ERR_PARSE, "%s: %s at byte %llu: the key holds a NUL byte", p->what, p->ctx,
                            (unsigned long long)kv->file_offset);
        if (!(kv->key = copy_name(p->pv, key, (size_t)n)))
            return lb__fail(LB_ERR_NOMEM, "%s: out of memory for keys", p->what);
        if ((st = read_value(p, kv)) != LB_OK) return st;
    }
    return LB_OK;
}

/* ===== Sorted indexes (lookups and duplicate checks in n log n, whatever
 * the names; a hash table could be flooded with colliding names) ===== */

static int cmp_kv(const void *a, const void *b)
{
    const lb__gguf_kv *x = *(const lb__gguf_kv *const *)a, *y = *(const lb__gguf_kv *const *)b;
    int c = strcmp(x->key, y->key);
    return c ? c : (x > y) - (x < y); /* file order among equals: the later one is the duplicate */
}

static int cmp_tensor_name(const void *a, const void *b)
{
    const lb__gguf_tensor *x = *(const lb__gguf_tensor *const *)a, *y = *(const lb__gguf_tensor *const *)b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x > y) - (x < y);
}

static int cmp_tensor_offset(const void *a, const void *b)
{
    const lb__gguf_tensor *x = *(const lb__gguf_tensor *const *)a, *y = *(const lb__gguf_tensor *const *)b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    return (x > y) - (x < y);
}

static lb_status index_kvs(parser *p, lb__gguf_file *f)
{
    const lb__gguf_kv **s = malloc(f->n_kv ? f->n_kv * sizeof *s : 1);
    if (!s) return lb__fail(LB_ERR_NOMEM, "%s: out of memory for the key index", p->what);
    p->pv->kv_sorted = s;
    for (size_t i = 0; i < f->n_kv; i++) s[i] = &f->kv[i];
    if (f->n_kv > 1) qsort(s, f->n_kv, sizeof *s, cmp_kv);
    for (size_t i = 1; i < f->n_kv; i++)
        if (strcmp(s[i - 1]->key, s[i]->key) == 0) {
            char shown[80];
            show(shown, sizeof shown, (const uint8_t *)s[i]->key, strlen(s[i]->key));
            return lb__fail(LB_ERR_PARSE, "%s: duplicate key '%s': KV %zu at byte %llu repeats KV %zu at byte %llu",
                            p->what, shown, (size_t)(s[i] - f->kv), (unsigned long long)s[i]->file_offset,
                            (size_t)(s[i - 1] - f->kv), (unsigned long long)s[i - 1]->file_offset);
        }
    return LB_OK;
}

static lb_status read_alignment(parser *p, lb__gguf_file *f)
{
    f->alignment = LB_GGUF_DEFAULT_ALIGNMENT;
    const lb__gguf_kv *kv = lb__gguf_find(f, "general.alignment");
    if (!kv) return LB_OK;
    size_t i = (size_t)(kv - f->kv);
    unsigned long long at = (unsigned long long)kv->file_offset;
    if (kv->type != LB_GGUF_U32)
        return lb__fail(LB_ERR_PARSE, "%s: KV %zu ('general.alignment') at byte %llu: the alignment is a %s, not a u32",
                        p->what, i, at, lb__gguf_type_name(kv->type));
    uint64_t a = kv->v.u;
    if (a == 0 || (a & (a - 1)) != 0)
        return lb__fail(LB_ERR_PARSE, "%s: KV %zu ('general.alignment') at byte %llu: alignment %llu is not a power of two",
                        p->what, i, at, (unsigned long long)a);
    if (a > LB_GGUF_MAX_ALIGNMENT)
        return lb__fail(LB_ERR_PARSE, "%s: KV %zu ('general.alignment') at byte %llu: alignment %llu is larger than "
                        "lowbit's cap of %u bytes", p->what, i, at, (unsigned long long)a, LB_GGUF_MAX_ALIGNMENT);
    f->alignment = a;
    return LB_OK;
}

/* ===== Tensor infos ===== */

static lb_status read_type(parser *p, lb__gguf_tensor *t)
{
    lb_status st = need(p, 4, "tensor type");
    if (st != LB_OK) return st;
    uint32_t g = rd32(p->buf + p->pos);
    size_t n_names = sizeof ggml_type_names / sizeof ggml_type_names[0];
    if (ggml_type_retired(g))
        return lb__fail(LB_ERR_PARSE, "%s: %s at byte %zu: ggml type %u (%s) was retired from ggml", p->what, p->ctx,
                        p->pos, g, ggml_type_names[g]);
    if (g >= n_names)
        return lb__fail(LB_ERR_PARSE, "%s: %s at byte %zu: unknown ggml tensor type %u", p->what, p->ctx, p->pos, g);
    if (lb_dtype_from_ggml((int)g, &t->dtype) != LB_OK)
        return lb__fail(LB_ERR_PARSE, "%s: %s at byte %zu: ggml type %u (%s) is not one lowbit reads", p->what, p->ctx,
                        p->pos, g, ggml_type_names[g]);
    t->ggml_type = (int)g;
    const lb_dtype_info *d = lb_dtype_get(t->dtype);
    if (t->ne[0] % d->block)
        return lb__fail(LB_ERR_PARSE, "%s: %s at byte %zu: a row of %llu elements is not whole %s blocks of %u",
                        p->what, p->ctx, p->pos, (unsigned long long)t->ne[0], d->name, d->block);
    uint64_t blocks = t->n_elements / d->block; /* exact: ne[0] is whole blocks */
    if (blocks > UINT64_MAX / d->block_bytes)
        return lb__fail(LB_ERR_PARSE, "%s: %s at byte %zu: %llu %s elements overflow a 64-bit byte count", p->what,
                        p->ctx, p->pos, (unsigned long long)t->n_elements, d->name);
    t->n_bytes = blocks * d->block_bytes;
    p->pos += 4;
    return LB_OK;
}

static lb_status read_shape(parser *p, lb__gguf_tensor *t)
{
    lb_status st = need(p, 4, "n_dims");
    if (st != LB_OK) return st;
    uint32_t nd = rd32(p->buf + p->pos);
    if (nd == 0 || nd > 4)
        return lb__fail(LB_ERR_PARSE, "%s: %s at byte %zu: n_dims %u is not in 1..4", p->what, p->ctx, p->pos, nd);
    p->pos += 4;
    if ((st = need(p, 8ull * nd, "dimensions")) != LB_OK) return st;
    t->n_dims = (int)nd;
    uint64_t count = 1;
    for (int j = 0; j < 4; j++) t->ne[j] = 1;
    for (uint32_t j = 0; j < nd; j++) {
        uint64_t d = rd64(p->buf + p->pos + 8 * j);
        if (d > INT64_MAX)
            return lb__fail(LB_ERR_PARSE, "%s: %s at byte %zu: dimension %u is %llu, beyond int64 (ggml reads it "
                            "as negative)", p->what, p->ctx, p->pos + 8 * j, j, (unsigned long long)d);
        if (d && count > INT64_MAX / d)
            return lb__fail(LB_ERR_PARSE, "%s: %s at byte %zu: the product of the dimensions overflows int64 "
                            "(dimension %u is %llu, the ones before multiply to %llu)", p->what, p->ctx, p->pos, j,
                            (unsigned long long)d, (unsigned long long)count);
        t->ne[j] = d, count *= d;
    }
    t->n_elements = count;
    p->pos += 8 * (size_t)nd;
    return LB_OK;
}

static lb_status read_tensor_infos(parser *p, lb__gguf_file *f)
{
    for (size_t i = 0; i < f->n_tensors; i++) {
        lb__gguf_tensor *t = &f->tensors[i];
        p->pv->t_info_at[i] = p->pos;
        snprintf(p->ctx, sizeof p->ctx, "tensor %zu", i);
        const uint8_t *name;
        uint64_t n;
        lb_status st = read_string(p, "name", &name, &n);
        if (st != LB_OK) return st;
        unsigned long long at = (unsigned long long)p->pv->t_info_at[i];
        if (n == 0) return lb__fail(LB_ERR_PARSE, "%s: tensor %zu at byte %llu: the name is empty", p->what, i, at);
        char shown[80];
        show(shown, sizeof shown, name, n);
        snprintf(p->ctx, sizeof p->ctx, "tensor %zu ('%s')", i, shown);
        if (n >= LB_GGUF_MAX_NAME)
            return lb__fail(LB_ERR_PARSE, "%s: %s at byte %llu: the name is %llu bytes, too long (ggml's limit is %d)",
                            p->what, p->ctx, at, (unsigned long long)n, LB_GGUF_MAX_NAME - 1);
        if (memchr(name, 0, (size_t)n))
            return lb__fail(LB_ERR_PARSE, "%s: %s at byte %llu: the name holds a NUL byte", p->what, p->ctx, at);
        if (!(t->name = copy_name(p->pv, name, (size_t)n)))
            return lb__fail(LB_ERR_NOMEM, "%s: out of memory for tensor names", p->what);
        if ((st = read_shape(p, t)) != LB_OK || (st = read_type(p, t)) != LB_OK) return st;
        if ((st = need(p, 8, "tensor offset")) != LB_OK) return st;
        t->offset = rd64(p->buf + p->pos);
        p->pos += 8;
    }
    return LB_OK;
}

static lb_status index_tensors(parser *p, lb__gguf_file *f)
{
    const lb__gguf_tensor **s = malloc(f->n_tensors ? f->n_tensors * sizeof *s : 1);
    if (!s) return lb__fail(LB_ERR_NOMEM, "%s: out of memory for the tensor index", p->what);
    p->pv->t_sorted = s;
    for (size_t i = 0; i < f->n_tensors; i++) s[i] = &f->tensors[i];
    if (f->n_tensors > 1) qsort(s, f->n_tensors, sizeof *s, cmp_tensor_name);
    for (size_t i = 1; i < f->n_tensors; i++)
        if (strcmp(s[i - 1]->name, s[i]->name) == 0) {
            char shown[80];
            show(shown, sizeof shown, (const uint8_t *)s[i]->name, strlen(s[i]->name));
            size_t a = (size_t)(s[i - 1] - f->tensors), b = (size_t)(s[i] - f->tensors);
            return lb__fail(LB_ERR_PARSE, "%s: duplicate tensor name '%s': tensor %zu at byte %llu repeats tensor %zu "
                            "at byte %llu", p->what, shown, b, (unsigned long long)p->pv->t_info_at[b], a,
                            (unsigned long long)p->pv->t_info_at[a]);
        }
    return LB_OK;
}

/* ===== The data section ===== */

static lb_status place_tensors(parser *p, lb__gguf_file *f)
{
    uint64_t start = ((uint64_t)p->pos + f->alignment - 1) / f->alignment * f->alignment;
    f->data_offset = start;
    f->data_size = start <= p->len ? p->len - start : 0;
    f->data = p->buf + (start <= p->len ? start : p->len);
    for (size_t i = 0; i < f->n_tensors; i++) {
        lb__gguf_tensor *t = &f->tensors[i];
        int misaligned = t->offset % f->alignment != 0;
        int outside = t->offset > f->data_size || t->n_bytes > f->data_size - t->offset;
        if (!misaligned && !outside) {
            t->data = f->data + t->offset;
            continue;
        }
        char shown[80];
        show(shown, sizeof shown, (const uint8_t *)t->name, strlen(t->name));
        unsigned long long at = (unsigned long long)p->pv->t_info_at[i];
        if (misaligned)
            return lb__fail(LB_ERR_PARSE, "%s: tensor %zu ('%s', info at byte %llu): data offset %llu is not a "
                            "multiple of the alignment %llu", p->what, i, shown, at, (unsigned long long)t->offset,
                            (unsigned long long)f->alignment);
        return lb__fail(LB_ERR_PARSE, "%s: tensor %zu ('%s', info at byte %llu): its %llu bytes at data offset %llu "
                        "run past the end of the file (the data section at byte %llu holds %llu bytes)", p->what, i,
                        shown, at, (unsigned long long)t->n_bytes, (unsigned long long)t->offset,
                        (unsigned long long)start, (unsigned long long)f->data_size);
    }
    /* Overlap: sorted by offset, each non-empty tensor starts at or after
     * the end of every earlier one. */
    const lb__gguf_tensor **s = malloc(f->n_tensors ? f->n_tensors * sizeof *s : 1);
    if (!s) return lb__fail(LB_ERR_NOMEM, "%s: out of memory checking tensor overlap", p->what);
    for (size_t i = 0; i < f->n_tensors; i++) s[i] = &f->tensors[i];
    if (f->n_tensors > 1) qsort(s, f->n_tensors, sizeof *s, cmp_tensor_offset);
    const lb__gguf_tensor *prev = NULL;
    lb_status st = LB_OK;
    for (size_t i = 0; i < f->n_tensors && st == LB_OK; i++) {
        const lb__gguf_tensor *t = s[i];
        if (t->n_bytes == 0) continue;
        if (prev && t->offset < prev->offset + prev->n_bytes) {
            char a[80], b[80];
            show(a, sizeof a, (const uint8_t *)prev->name, strlen(prev->name));
            show(b, sizeof b, (const uint8_t *)t->name, strlen(t->name));
            st = lb__fail(LB_ERR_PARSE, "%s: tensors '%s' (data bytes %llu..%llu) and '%s' (data bytes %llu..%llu) "
                          "overlap (the data section starts at byte %llu)", p->what, a,
                          (unsigned long long)prev->offset, (unsigned long long)(prev->offset + prev->n_bytes), b,
                          (unsigned long long)t->offset, (unsigned long long)(t->offset + t->n_bytes),
                          (unsigned long long)start);
        }
        if (!prev || t->offset + t->n_bytes > prev->offset + prev->n_bytes) prev = t;
    }
    free(s);
    return st;
}

/* ===== Entry points ===== */

static lb_status read_header(parser *p, lb__gguf_file *f, uint64_t *n_tensors, uint64_t *n_kv)
{
    const uint8_t *b = p->buf;
    if (p->len >= 4 && memcmp(b, "GGUF", 4) != 0) {
        char shown[8];
        show(shown, sizeof shown, b, 4);
        return lb__fail(LB_ERR_PARSE, "%s: not a GGUF file: bad magic '%s' at byte 0 (expected 'GGUF')", p->what, shown);
    }
    if (p->len >= 8) {
        uint32_t v = rd32(b + 4);
        if (v != 3 && v != 0 && (v & 0xFFFF) == 0)
            return lb__fail(LB_ERR_PARSE, "%s: at byte 4: version field 0x%08x: big-endian GGUF is not supported",
                            p->what, v);
        if (v != 3)
            return lb__fail(LB_ERR_PARSE, "%s: at byte 4: GGUF version %u is not supported (only version 3)", p->what, v);
        f->version = v;
    }
    if (p->len < HEADER_BYTES)
        return lb__fail(LB_ERR_PARSE, "%s: file of %zu bytes is shorter than the %d-byte GGUF header", p->what, p->len,
                        HEADER_BYTES);
    *n_tensors = rd64(b + 8), *n_kv = rd64(b + 16);
    p->pos = HEADER_BYTES;
    /* Bound the counts by what the rest of the file could hold, before
     * allocating anything for them. */
    uint64_t rest = p->len - HEADER_BYTES;
    if (*n_kv > rest / MIN_KV_BYTES)
        return lb__fail(LB_ERR_PARSE, "%s: at byte 16: KV count %llu is absurd: the %llu bytes after the header hold "
                        "at most %llu KVs", p->what, (unsigned long long)*n_kv, (unsigned long long)rest,
                        (unsigned long long)(rest / MIN_KV_BYTES));
    if (*n_tensors > (rest - *n_kv * MIN_KV_BYTES) / MIN_TENSOR_INFO_BYTES)
        return lb__fail(LB_ERR_PARSE, "%s: at byte 8: tensor count %llu is absurd: the %llu bytes after the header "
                        "and %llu KVs hold at most %llu tensor infos", p->what, (unsigned long long)*n_tensors,
                        (unsigned long long)rest, (unsigned long long)*n_kv,
                        (unsigned long long)((rest - *n_kv * MIN_KV_BYTES) / MIN_TENSOR_INFO_BYTES));
    return LB_OK;
}

lb_status lb__gguf_parse(const uint8_t *buf, size_t len, const char *what, lb__gguf_file *out)
{
    if (!out) return lb__fail(LB_ERR_ARG, "lb__gguf_parse: NULL output");
    memset(out, 0, sizeof *out);
    if (!what) what = "GGUF input";
    if (!buf && len) return lb__fail(LB_ERR_ARG, "%s: NULL buffer of %zu bytes", what, len);
    static const uint8_t empty[1];
    parser p = {.buf = buf ? buf : empty, .len = len, .what = what};
    uint64_t n_tensors = 0, n_kv = 0;
    lb_status st = read_header(&p, out, &n_tensors, &n_kv);
    if (st != LB_OK) return st;

    gguf_priv *pv = calloc(1, sizeof *pv);
    out->priv = p.pv = pv;
    out->n_kv = (size_t)n_kv, out->n_tensors = (size_t)n_tensors;
    out->kv = calloc(n_kv ? (size_t)n_kv : 1, sizeof *out->kv);
    out->tensors = calloc(n_tensors ? (size_t)n_tensors : 1, sizeof *out->tensors);
    if (pv) pv->t_info_at = calloc(n_tensors ? (size_t)n_tensors : 1, sizeof *pv->t_info_at);
    if (!pv || !out->kv || !out->tensors || !pv->t_info_at)
        st = lb__fail(LB_ERR_NOMEM, "%s: out of memory for %llu KVs and %llu tensors", what,
                      (unsigned long long)n_kv, (unsigned long long)n_tensors);
    if (st == LB_OK) st = read_kvs(&p, out);
    if (st == LB_OK) st = index_kvs(&p, out);
    if (st == LB_OK) st = read_alignment(&p, out);
    if (st == LB_OK) st = read_tensor_infos(&p, out);
    if (st == LB_OK) st = index_tensors(&p, out);
    if (st == LB_OK) st = place_tensors(&p, out);
    if (st != LB_OK) {
        lb__gguf_close(out);
        return st;
    }
    return LB_OK;
}

lb_status lb__gguf_open(const char *path, lb__gguf_file *out)
{
    if (!out) return lb__fail(LB_ERR_ARG, "lb__gguf_open: NULL output");
    memset(out, 0, sizeof *out);
    if (!path) return lb__fail(LB_ERR_ARG, "lb__gguf_open: NULL path");
    lb__mapped m;
    lb_status st = lb__map_file(path, &m);
    if (st != LB_OK) return st;
    if ((st = lb__gguf_parse(m.data, m.size, path, out)) != LB_OK) {
        lb__unmap_file(&m);
        return st;
    }
    out->map = m;
    return LB_OK;
}

void lb__gguf_close(lb__gguf_file *f)
{
    if (!f) return;
    for (size_t i = 0; f->kv && i < f->n_kv; i++) free(f->kv[i].priv);
    gguf_priv *pv = f->priv;
    if (pv) {
        while (pv->names) {
            name_block *next = pv->names->next;
            free(pv->names);
            pv->names = next;
        }
        free(pv->kv_sorted), free(pv->t_sorted), free(pv->t_info_at);
        free(pv);
    }
    free(f->kv), free(f->tensors);
    if (f->map.data) lb__unmap_file(&f->map);
    memset(f, 0, sizeof *f);
}

/* ===== Lookups and typed access ===== */

const lb__gguf_kv *lb__gguf_find(const lb__gguf_file *f, const char *key)
{
    const gguf_priv *pv = f ? f->priv : NULL;
    if (!pv || !pv->kv_sorted || !key) return NULL;
    size_t lo = 0, hi = f->n_kv;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(pv->kv_sorted[mid]->key, key);
        if (c == 0) return pv->kv_sorted[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

const lb__gguf_tensor *lb__gguf_find_tensor(const lb__gguf_file *f, const char *name)
{
    const gguf_priv *pv = f ? f->priv : NULL;
    if (!pv || !pv->t_sorted || !name) return NULL;
    size_t lo = 0, hi = f->n_tensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(pv->t_sorted[mid]->name, name);
        if (c == 0) return pv->t_sorted[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

static int to_u64(int type, scalar v, uint64_t *out)
{
    if (is_unsigned(type)) return *out = v.u, 1;
    if (is_signed(type) && v.i >= 0) return *out = (uint64_t)v.i, 1;
    return 0;
}

static int to_i64(int type, scalar v, int64_t *out)
{
    if (is_signed(type)) return *out = v.i, 1;
    if (is_unsigned(type) && v.u <= INT64_MAX) return *out = (int64_t)v.u, 1;
    return 0;
}

static int to_f64(int type, scalar v, double *out)
{
    if (is_float(type)) return *out = v.f, 1;
    if (is_unsigned(type) || type == LB_GGUF_BOOL) return *out = (double)v.u, 1;
    if (is_signed(type)) return *out = (double)v.i, 1;
    return 0;
}

static scalar kv_scalar(const lb__gguf_kv *kv)
{
    scalar v;
    memcpy(&v, &kv->v, sizeof v);
    return v;
}

int lb__gguf_get_u64(const lb__gguf_file *f, const char *key, uint64_t *out)
{
    const lb__gguf_kv *kv = lb__gguf_find(f, key);
    return kv && to_u64(kv->type, kv_scalar(kv), out);
}

int lb__gguf_get_i64(const lb__gguf_file *f, const char *key, int64_t *out)
{
    const lb__gguf_kv *kv = lb__gguf_find(f, key);
    return kv && to_i64(kv->type, kv_scalar(kv), out);
}

int lb__gguf_get_f64(const lb__gguf_file *f, const char *key, double *out)
{
    const lb__gguf_kv *kv = lb__gguf_find(f, key);
    return kv && kv->type != LB_GGUF_BOOL && to_f64(kv->type, kv_scalar(kv), out);
}

int lb__gguf_get_bool(const lb__gguf_file *f, const char *key, int *out)
{
    const lb__gguf_kv *kv = lb__gguf_find(f, key);
    if (!kv || kv->type != LB_GGUF_BOOL) return 0;
    *out = kv->v.u != 0;
    return 1;
}

int lb__gguf_get_str(const lb__gguf_file *f, const char *key, const char **s, uint64_t *len)
{
    const lb__gguf_kv *kv = lb__gguf_find(f, key);
    if (!kv || kv->type != LB_GGUF_STRING) return 0;
    *s = kv->str, *len = kv->str_len;
    return 1;
}

int lb__gguf_arr_str(const lb__gguf_kv *kv, uint64_t i, const char **s, uint64_t *len)
{
    if (!kv || kv->type != LB_GGUF_ARRAY || kv->arr_type != LB_GGUF_STRING || i >= kv->n || !kv->priv) return 0;
    const uint8_t *p = kv->arr + ((const uint64_t *)kv->priv)[i];
    *len = rd64(p), *s = (const char *)p + 8;
    return 1;
}

/* Element i of a fixed-size array, or 0. */
static int arr_elem(const lb__gguf_kv *kv, uint64_t i, scalar *v)
{
    if (!kv || kv->type != LB_GGUF_ARRAY || i >= kv->n) return 0;
    size_t size = lb__gguf_type_size(kv->arr_type);
    if (!size) return 0;
    *v = decode(kv->arr_type, kv->arr + i * size);
    return 1;
}

int lb__gguf_arr_f64(const lb__gguf_kv *kv, uint64_t i, double *out)
{
    scalar v;
    return arr_elem(kv, i, &v) && to_f64(kv->arr_type, v, out);
}

int lb__gguf_arr_i64(const lb__gguf_kv *kv, uint64_t i, int64_t *out)
{
    scalar v;
    return arr_elem(kv, i, &v) && to_i64(kv->arr_type, v, out);
}
