/* The GGUF v3 writer (see gguf.h). Each KV's value is encoded to its
 * little-endian bytes when it is set, so writing is a straight copy and
 * the same calls always give the same file, byte for byte. The writer
 * refuses what the reader would refuse (duplicate keys or names, names of
 * 64 bytes or more, shapes whose counts overflow, a bad alignment), so
 * everything it writes reads back. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/dtype.h"
#include "io/gguf.h"
#include "util/error.h"

typedef struct wkv {
    char *key;
    int type;        /* LB_GGUF_* */
    uint8_t *val;    /* the encoded value (for arrays: element type, count, elements) */
    size_t val_len;
} wkv;

typedef struct wtensor {
    char *name;
    lb_dtype dtype;
    int ggml_type;
    int n_dims;
    uint64_t ne[4];
    uint64_t n_bytes;
} wtensor;

struct lb__gguf_writer {
    wkv *kv;
    size_t n_kv, cap_kv;
    wtensor *t;
    size_t n_t, cap_t;
    uint64_t alignment;
};

/* ===== Growing byte buffer ===== */

typedef struct bytes {
    uint8_t *p;
    size_t n, cap;
    int oom;
} bytes;

static void put(bytes *b, const void *src, size_t n)
{
    if (b->oom || n == 0) return;
    if (n > SIZE_MAX - b->n) {
        b->oom = 1;
        return;
    }
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n) cap = cap > SIZE_MAX / 2 ? b->n + n : cap * 2;
        uint8_t *q = realloc(b->p, cap);
        if (!q) {
            b->oom = 1;
            return;
        }
        b->p = q, b->cap = cap;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void put_le(bytes *b, uint64_t v, size_t size)
{
    uint8_t le[8];
    for (size_t k = 0; k < size; k++) le[k] = (uint8_t)(v >> (8 * k));
    put(b, le, size);
}

static void put_str(bytes *b, const char *s, uint64_t n)
{
    put_le(b, n, 8);
    if (n > SIZE_MAX) b->oom = 1;
    else put(b, s, (size_t)n);
}

/* ===== KVs ===== */

lb_status lb__gguf_writer_new(lb__gguf_writer **w)
{
    if (!w) return lb__fail(LB_ERR_ARG, "lb__gguf_writer_new: NULL output");
    *w = calloc(1, sizeof **w);
    if (!*w) return lb__fail(LB_ERR_NOMEM, "out of memory for a GGUF writer");
    (*w)->alignment = LB_GGUF_DEFAULT_ALIGNMENT;
    return LB_OK;
}

void lb__gguf_writer_free(lb__gguf_writer *w)
{
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) free(w->kv[i].key), free(w->kv[i].val);
    for (size_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->kv), free(w->t), free(w);
}

static int is_scalar(int type) { return lb__gguf_type_size(type) != 0; }

/* Takes the encoded value in val (freed here on failure). */
static lb_status add_kv(lb__gguf_writer *w, const char *key, int type, bytes *val)
{
    lb_status st = LB_OK;
    if (!w || !key) st = lb__fail(LB_ERR_ARG, "GGUF writer: NULL writer or key");
    else if (!key[0]) st = lb__fail(LB_ERR_ARG, "GGUF writer: empty key");
    else if (val->oom) st = lb__fail(LB_ERR_NOMEM, "GGUF writer: out of memory for the value of '%s'", key);
    for (size_t i = 0; st == LB_OK && i < w->n_kv; i++)
        if (strcmp(w->kv[i].key, key) == 0) st = lb__fail(LB_ERR_ARG, "GGUF writer: key '%s' is set twice", key);
    /* The alignment KV is also the writer's setting; refuse what a reader refuses. */
    uint64_t align = 0;
    if (st == LB_OK && strcmp(key, "general.alignment") == 0) {
        if (type != LB_GGUF_U32)
            st = lb__fail(LB_ERR_ARG, "GGUF writer: general.alignment must be a u32, not a %s", lb__gguf_type_name(type));
        else {
            align = (uint64_t)val->p[0] | (uint64_t)val->p[1] << 8 | (uint64_t)val->p[2] << 16 | (uint64_t)val->p[3] << 24;
            if (align == 0 || (align & (align - 1)) || align > LB_GGUF_MAX_ALIGNMENT)
                st = lb__fail(LB_ERR_ARG, "GGUF writer: general.alignment %llu is not a power of two up to %u",
                              (unsigned long long)align, LB_GGUF_MAX_ALIGNMENT);
        }
    }
    if (st == LB_OK && w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? w->cap_kv * 2 : 16;
        wkv *k = realloc(w->kv, cap * sizeof *k);
        if (!k) st = lb__fail(LB_ERR_NOMEM, "GGUF writer: out of memory for KVs");
        else w->kv = k, w->cap_kv = cap;
    }
    char *copy = NULL;
    if (st == LB_OK) {
        size_t n = strlen(key);
        if (!(copy = malloc(n + 1))) st = lb__fail(LB_ERR_NOMEM, "GGUF writer: out of memory for key '%s'", key);
        else memcpy(copy, key, n + 1);
    }
    if (st != LB_OK) {
        free(val->p);
        return st;
    }
    if (align) w->alignment = align;
    w->kv[w->n_kv++] = (wkv){copy, type, val->p, val->n};
    return LB_OK;
}

static lb_status check_bools(const char *key, const uint8_t *p, uint64_t n)
{
    for (uint64_t j = 0; j < n; j++)
        if (p[j] > 1)
            return lb__fail(LB_ERR_ARG, "GGUF writer: '%s': bool element %llu is %u, not 0 or 1", key ? key : "?",
                            (unsigned long long)j, p[j]);
    return LB_OK;
}

lb_status lb__gguf_set_scalar(lb__gguf_writer *w, const char *key, int type, const void *value)
{
    if (!is_scalar(type) || !value)
        return lb__fail(LB_ERR_ARG, "GGUF writer: '%s': type %d is not a scalar type (or the value is NULL)",
                        key ? key : "?", type);
    lb_status st;
    if (type == LB_GGUF_BOOL && (st = check_bools(key, value, 1)) != LB_OK) return st;
    bytes b = {0};
    put(&b, value, lb__gguf_type_size(type));
    return add_kv(w, key, type, &b);
}

static lb_status set_le(lb__gguf_writer *w, const char *key, int type, uint64_t bits)
{
    uint8_t le[8];
    for (int k = 0; k < 8; k++) le[k] = (uint8_t)(bits >> (8 * k));
    return lb__gguf_set_scalar(w, key, type, le);
}

lb_status lb__gguf_set_u32(lb__gguf_writer *w, const char *key, uint32_t v) { return set_le(w, key, LB_GGUF_U32, v); }
lb_status lb__gguf_set_i32(lb__gguf_writer *w, const char *key, int32_t v)
{
    return set_le(w, key, LB_GGUF_I32, (uint32_t)v);
}
lb_status lb__gguf_set_u64(lb__gguf_writer *w, const char *key, uint64_t v) { return set_le(w, key, LB_GGUF_U64, v); }
lb_status lb__gguf_set_bool(lb__gguf_writer *w, const char *key, int v) { return set_le(w, key, LB_GGUF_BOOL, v != 0); }

lb_status lb__gguf_set_f32(lb__gguf_writer *w, const char *key, float v)
{
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    return set_le(w, key, LB_GGUF_F32, bits);
}

lb_status lb__gguf_set_str(lb__gguf_writer *w, const char *key, const char *s, uint64_t len)
{
    if (!s && len) return lb__fail(LB_ERR_ARG, "GGUF writer: '%s': NULL string of %llu bytes", key ? key : "?",
                                   (unsigned long long)len);
    bytes b = {0};
    put_str(&b, s, len);
    return add_kv(w, key, LB_GGUF_STRING, &b);
}

lb_status lb__gguf_set_arr_str(lb__gguf_writer *w, const char *key, const char *const *s, const uint64_t *lens,
                               uint64_t n)
{
    if (!s && n) return lb__fail(LB_ERR_ARG, "GGUF writer: '%s': NULL string array", key ? key : "?");
    bytes b = {0};
    put_le(&b, LB_GGUF_STRING, 4);
    put_le(&b, n, 8);
    for (uint64_t i = 0; i < n && !b.oom; i++) {
        uint64_t len = lens ? lens[i] : (s[i] ? strlen(s[i]) : 0);
        if (!s[i] && len) {
            free(b.p);
            return lb__fail(LB_ERR_ARG, "GGUF writer: '%s': string %llu is NULL", key ? key : "?",
                            (unsigned long long)i);
        }
        put_str(&b, s[i], len);
    }
    return add_kv(w, key, LB_GGUF_ARRAY, &b);
}

lb_status lb__gguf_set_arr(lb__gguf_writer *w, const char *key, int elem_type, const void *elems, uint64_t n)
{
    size_t size = lb__gguf_type_size(elem_type);
    if (!size)
        return lb__fail(LB_ERR_ARG, "GGUF writer: '%s': element type %d is not a fixed-size type (use "
                        "lb__gguf_set_arr_str for strings; nested arrays are not supported)", key ? key : "?", elem_type);
    if (n > SIZE_MAX / size) return lb__fail(LB_ERR_ARG, "GGUF writer: '%s': %llu elements overflow", key ? key : "?",
                                             (unsigned long long)n);
    if (!elems && n) return lb__fail(LB_ERR_ARG, "GGUF writer: '%s': NULL elements", key ? key : "?");
    lb_status st;
    if (elem_type == LB_GGUF_BOOL && (st = check_bools(key, elems, n)) != LB_OK) return st;
    bytes b = {0};
    put_le(&b, (uint64_t)elem_type, 4);
    put_le(&b, n, 8);
    put(&b, elems, (size_t)(n * size));
    return add_kv(w, key, LB_GGUF_ARRAY, &b);
}

lb_status lb__gguf_copy_kv(lb__gguf_writer *w, const lb__gguf_kv *kv)
{
    if (!kv) return lb__fail(LB_ERR_ARG, "lb__gguf_copy_kv: NULL KV");
    if (is_scalar(kv->type)) {
        if (kv->raw) return lb__gguf_set_scalar(w, kv->key, kv->type, kv->raw);
        /* A KV made by hand: encode from the union. */
        uint64_t bits = kv->v.u;
        if (kv->type == LB_GGUF_F32) {
            float x = (float)kv->v.f;
            uint32_t b32;
            memcpy(&b32, &x, sizeof b32);
            bits = b32;
        } else if (kv->type == LB_GGUF_F64) memcpy(&bits, &kv->v.f, sizeof bits);
        else if (kv->type == LB_GGUF_I8 || kv->type == LB_GGUF_I16 || kv->type == LB_GGUF_I32 || kv->type == LB_GGUF_I64)
            bits = (uint64_t)kv->v.i;
        return set_le(w, kv->key, kv->type, bits);
    }
    if (kv->type == LB_GGUF_STRING) return lb__gguf_set_str(w, kv->key, kv->str, kv->str_len);
    if (kv->type != LB_GGUF_ARRAY)
        return lb__fail(LB_ERR_ARG, "lb__gguf_copy_kv: '%s' has unknown type %d", kv->key ? kv->key : "?", kv->type);
    if (kv->arr_type != LB_GGUF_STRING) return lb__gguf_set_arr(w, kv->key, kv->arr_type, kv->arr, kv->n);
    if (kv->n && !kv->priv) return lb__fail(LB_ERR_ARG, "lb__gguf_copy_kv: '%s' has no string table", kv->key);
    bytes b = {0};
    put_le(&b, LB_GGUF_STRING, 4);
    put_le(&b, kv->n, 8);
    for (uint64_t i = 0; i < kv->n && !b.oom; i++) {
        const char *s;
        uint64_t len;
        lb__gguf_arr_str(kv, i, &s, &len);
        put_str(&b, s, len);
    }
    return add_kv(w, kv->key, LB_GGUF_ARRAY, &b);
}

/* ===== Tensors ===== */

lb_status lb__gguf_add_tensor(lb__gguf_writer *w, const char *name, lb_dtype dtype, int n_dims, const uint64_t ne[4])
{
    if (!w || !name || !ne) return lb__fail(LB_ERR_ARG, "lb__gguf_add_tensor: NULL argument");
    size_t len = strlen(name);
    if (len == 0 || len >= LB_GGUF_MAX_NAME)
        return lb__fail(LB_ERR_ARG, "GGUF writer: tensor name '%s' is %zu bytes; GGUF names are 1..%d bytes", name,
                        len, LB_GGUF_MAX_NAME - 1);
    const lb_dtype_info *d = lb_dtype_get(dtype);
    if (!d || d->ggml_type < 0)
        return lb__fail(LB_ERR_ARG, "GGUF writer: tensor '%s': dtype %s has no GGUF type", name, lb__dtype_name(dtype));
    if (n_dims < 1 || n_dims > 4)
        return lb__fail(LB_ERR_ARG, "GGUF writer: tensor '%s': n_dims %d is not in 1..4", name, n_dims);
    uint64_t count = 1;
    for (int j = 0; j < n_dims; j++) {
        if (ne[j] > INT64_MAX || (ne[j] && count > INT64_MAX / ne[j]))
            return lb__fail(LB_ERR_ARG, "GGUF writer: tensor '%s': dimension %d (%llu) overflows the element count",
                            name, j, (unsigned long long)ne[j]);
        count *= ne[j];
    }
    if (ne[0] % d->block)
        return lb__fail(LB_ERR_ARG, "GGUF writer: tensor '%s': a row of %llu elements is not whole %s blocks of %u",
                        name, (unsigned long long)ne[0], d->name, d->block);
    uint64_t n_bytes;
    if (lb_dtype_bytes(dtype, count, &n_bytes) != LB_OK)
        return lb__fail(LB_ERR_ARG, "GGUF writer: tensor '%s': %llu %s elements overflow a byte count", name,
                        (unsigned long long)count, d->name);
    for (size_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0)
            return lb__fail(LB_ERR_ARG, "GGUF writer: tensor name '%s' is added twice", name);
    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t ? w->cap_t * 2 : 16;
        wtensor *t = realloc(w->t, cap * sizeof *t);
        if (!t) return lb__fail(LB_ERR_NOMEM, "GGUF writer: out of memory for tensors");
        w->t = t, w->cap_t = cap;
    }
    wtensor *t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    if (!(t->name = malloc(len + 1))) return lb__fail(LB_ERR_NOMEM, "GGUF writer: out of memory for '%s'", name);
    memcpy(t->name, name, len + 1);
    t->dtype = dtype, t->ggml_type = d->ggml_type, t->n_dims = n_dims, t->n_bytes = n_bytes;
    for (int j = 0; j < 4; j++) t->ne[j] = j < n_dims ? ne[j] : 1;
    w->n_t++;
    return LB_OK;
}

/* ===== Writing ===== */

/* Offsets: the running sum of the sizes, each padded to the alignment. */
static lb_status plan_offsets(const lb__gguf_writer *w, uint64_t *offsets, uint64_t *max_bytes)
{
    uint64_t at = 0, a = w->alignment;
    *max_bytes = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        uint64_t n = w->t[i].n_bytes;
        if (n > UINT64_MAX - (a - 1) || (n + a - 1) / a * a > UINT64_MAX - at)
            return lb__fail(LB_ERR_ARG, "GGUF writer: the data section overflows 64 bits at tensor '%s'", w->t[i].name);
        offsets[i] = at;
        at += (n + a - 1) / a * a;
        if (n > *max_bytes) *max_bytes = n;
    }
    return LB_OK;
}

static lb_status write_header(const lb__gguf_writer *w, const uint64_t *offsets, lb__outfile *o)
{
    bytes b = {0};
    put(&b, "GGUF", 4);
    put_le(&b, 3, 4);
    put_le(&b, w->n_t, 8);
    put_le(&b, w->n_kv, 8);
    for (size_t i = 0; i < w->n_kv; i++) {
        put_str(&b, w->kv[i].key, strlen(w->kv[i].key));
        put_le(&b, (uint64_t)w->kv[i].type, 4);
        put(&b, w->kv[i].val, w->kv[i].val_len);
    }
    for (size_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        put_str(&b, t->name, strlen(t->name));
        put_le(&b, (uint64_t)t->n_dims, 4);
        for (int j = 0; j < t->n_dims; j++) put_le(&b, t->ne[j], 8);
        put_le(&b, (uint64_t)t->ggml_type, 4);
        put_le(&b, offsets[i], 8);
    }
    lb_status st = b.oom ? lb__fail(LB_ERR_NOMEM, "GGUF writer: out of memory for the header") : lb__out_write(o, b.p, b.n);
    free(b.p);
    if (st == LB_OK) st = lb__out_pad(o, w->alignment);
    return st;
}

lb_status lb__gguf_write(lb__gguf_writer *w, const char *path, lb__tensor_fill_fn fill, void *ctx)
{
    if (!w || !path) return lb__fail(LB_ERR_ARG, "lb__gguf_write: NULL writer or path");
    if (w->n_t && !fill) return lb__fail(LB_ERR_ARG, "lb__gguf_write: '%s': tensors but no fill function", path);
    uint64_t *offsets = malloc(w->n_t ? w->n_t * sizeof *offsets : 1), max_bytes = 0;
    if (!offsets) return lb__fail(LB_ERR_NOMEM, "lb__gguf_write: out of memory");
    lb_status st = plan_offsets(w, offsets, &max_bytes);
    if (st == LB_OK && max_bytes > SIZE_MAX)
        st = lb__fail(LB_ERR_NOMEM, "lb__gguf_write: '%s': a tensor of %llu bytes does not fit in memory", path,
                      (unsigned long long)max_bytes);
    uint8_t *buf = NULL;
    if (st == LB_OK && !(buf = malloc(max_bytes ? (size_t)max_bytes : 1)))
        st = lb__fail(LB_ERR_NOMEM, "lb__gguf_write: '%s': out of memory for a tensor of %llu bytes", path,
                      (unsigned long long)max_bytes);
    lb__outfile o;
    memset(&o, 0, sizeof o);
    if (st == LB_OK) st = lb__out_open(path, &o);
    if (st == LB_OK) st = write_header(w, offsets, &o);
    uint64_t base = st == LB_OK ? lb__out_tell(&o) : 0;
    for (size_t i = 0; i < w->n_t && st == LB_OK; i++) {
        const wtensor *t = &w->t[i];
        if (lb__out_tell(&o) != base + offsets[i]) {
            st = lb__fail(LB_ERR_IO, "lb__gguf_write: '%s': tensor '%s' landed at byte %llu, not %llu", path, t->name,
                          (unsigned long long)lb__out_tell(&o), (unsigned long long)(base + offsets[i]));
            break;
        }
        lb__fail(LB_OK, "%s", ""); /* so a fill that fails silently is not blamed on an older message */
        st = fill(ctx, i, buf, t->n_bytes);
        if (st != LB_OK) {
            char why[512];
            snprintf(why, sizeof why, "%s", lb_last_error()[0] ? lb_last_error() : "no message");
            st = lb__fail(st, "writing '%s': filling tensor %zu ('%s', %llu bytes) failed: %s", path, i, t->name,
                          (unsigned long long)t->n_bytes, why);
            break;
        }
        st = lb__out_write(&o, buf, (size_t)t->n_bytes);
        if (st == LB_OK) st = lb__out_pad(&o, w->alignment);
    }
    free(buf), free(offsets);
    if (st == LB_OK) return lb__out_commit(&o);
    lb__out_abort(&o);
    return st;
}
