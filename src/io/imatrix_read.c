/* Reading llama.cpp's imatrix files (formats in io/imatrix.h). What the
 * readers refuse beyond what llama.cpp's loader refuses -- each a file no
 * llama-imatrix writes: a count that is negative, fractional or not finite;
 * a sum that is NaN, infinite or negative (sums of squares); in_sum2 and
 * counts whose sizes do not divide; duplicate entries; a legacy name that
 * is empty, holds a NUL or is too long to save as GGUF; a legacy file with
 * bytes after its trailer, or a trailer cut short. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "io/gguf.h"
#include "io/imatrix.h"
#include "util/error.h"
#include "util/file.h"

/* ---- GGUF ---- */

static const char SUM2[] = ".in_sum2", COUNTS[] = ".counts";

/* name's length without suffix, or 0 when name does not end with it */
static size_t base_len(const char *name, const char *suffix)
{
    size_t n = strlen(name), s = strlen(suffix);
    return n > s && strcmp(name + n - s, suffix) == 0 ? n - s : 0;
}

static float f32_at(const uint8_t *p, uint64_t i)
{
    float v;
    memcpy(&v, p + 4 * i, 4);
    return v;
}

static lb_status gguf_meta(const lb__gguf_file *f, const char *what, lb_imatrix *im)
{
    const lb__gguf_kv *kv = lb__gguf_find(f, "imatrix.datasets");
    if (kv) {
        if (kv->type != LB_GGUF_ARRAY || kv->arr_type != LB_GGUF_STRING)
            return lb__fail(LB_ERR_PARSE, "%s: imatrix.datasets is not an array of strings", what);
        for (uint64_t i = 0; i < kv->n; i++) {
            const char *s;
            uint64_t len;
            if (!lb__gguf_arr_str(kv, i, &s, &len)) return lb__fail(LB_ERR_PARSE, "%s: imatrix.datasets[%llu] unreadable", what, (unsigned long long)i);
            lb_status st = lb__imatrix_add_dataset(im, s, (size_t)len);
            if (st != LB_OK) return st;
        }
    }
    const char *keys[2] = {"imatrix.chunk_count", "imatrix.chunk_size"};
    uint32_t *dst[2] = {&im->chunk_count, &im->chunk_size};
    im->has_metadata = kv != NULL;
    for (int k = 0; k < 2; k++) {
        kv = lb__gguf_find(f, keys[k]);
        if (!kv) {
            im->has_metadata = 0;
            continue;
        }
        if (kv->type != LB_GGUF_U32)
            return lb__fail(LB_ERR_PARSE, "%s: %s is %s, expected u32", what, keys[k], lb__gguf_type_name(kv->type));
        *dst[k] = (uint32_t)kv->v.u;
    }
    return LB_OK;
}

static lb_status gguf_entry(const lb__gguf_file *f, const char *what, const lb__gguf_tensor *sum2, size_t blen,
                            lb_imatrix *im)
{
    const char *name = sum2->name;
    char counts_name[LB_GGUF_MAX_NAME + 8];
    snprintf(counts_name, sizeof counts_name, "%.*s%s", (int)blen, name, COUNTS);
    const lb__gguf_tensor *cnt = lb__gguf_find_tensor(f, counts_name);
    if (!cnt) return lb__fail(LB_ERR_PARSE, "%s: entry '%.*s' has sums but no %s tensor", what, (int)blen, name, counts_name);
    if (sum2->ggml_type != 0 || cnt->ggml_type != 0)
        return lb__fail(LB_ERR_PARSE, "%s: entry '%.*s': in_sum2 and counts must be F32 (ggml types %d and %d)", what,
                        (int)blen, name, sum2->ggml_type, cnt->ggml_type);
    uint64_t nval = sum2->n_elements, nmat = cnt->n_elements;
    if (nval == 0 || nmat == 0 || nval % nmat)
        return lb__fail(LB_ERR_PARSE, "%s: entry '%.*s': %llu sums do not split into %llu matrices", what, (int)blen,
                        name, (unsigned long long)nval, (unsigned long long)nmat);
    /* every element lies in the mapping (the GGUF reader checked), so the
     * counts are bounded by the file's size */
    lb__imatrix_entry *e;
    lb_status st = lb__imatrix_add(im, name, blen, (size_t)(nval / nmat), (size_t)nmat, &e);
    if (st != LB_OK) return st;
    for (uint64_t m = 0; m < nmat; m++) {
        float c = f32_at(cnt->data, m);
        if (!isfinite(c) || c < 0 || c != floorf(c) || c >= 9.2e18f)
            return lb__fail(LB_ERR_PARSE, "%s: entry '%s': count %llu is %g, not a token count", what, e->name,
                            (unsigned long long)m, (double)c);
        e->counts[m] = (int64_t)c;
    }
    for (uint64_t j = 0; j < nval; j++) {
        float v = f32_at(sum2->data, j);
        if (!isfinite(v) || v < 0)
            return lb__fail(LB_ERR_PARSE, "%s: entry '%s': sum %llu is %g, not a sum of squares", what, e->name,
                            (unsigned long long)j, (double)v);
        e->sums[j] = v;
    }
    return LB_OK;
}

static lb_status parse_gguf(const uint8_t *buf, size_t len, const char *what, lb_imatrix *im)
{
    lb__gguf_file f;
    lb_status st = lb__gguf_parse(buf, len, what, &f);
    if (st != LB_OK) return st;
    if (f.n_tensors == 0) st = lb__fail(LB_ERR_PARSE, "%s: a GGUF imatrix without tensors", what);
    if (st == LB_OK) st = gguf_meta(&f, what, im);
    for (size_t i = 0; i < f.n_tensors && st == LB_OK; i++) {
        const lb__gguf_tensor *t = &f.tensors[i];
        size_t b;
        if ((b = base_len(t->name, SUM2)) != 0) st = gguf_entry(&f, what, t, b, im);
        else if ((b = base_len(t->name, COUNTS)) != 0) {
            char sum_name[LB_GGUF_MAX_NAME + 8];
            snprintf(sum_name, sizeof sum_name, "%.*s%s", (int)b, t->name, SUM2);
            if (!lb__gguf_find_tensor(&f, sum_name))
                st = lb__fail(LB_ERR_PARSE, "%s: entry '%.*s' has counts but no %s tensor", what, (int)b, t->name,
                              sum_name);
        }
    }
    if (st == LB_OK && im->n == 0) st = lb__fail(LB_ERR_PARSE, "%s: no <name>.in_sum2 / <name>.counts tensors", what);
    lb__gguf_close(&f);
    return st;
}

/* ---- legacy .dat ---- */

typedef struct rd {
    const uint8_t *p;
    size_t len, at;
    const char *what;
} rd;

static int i32(rd *r, int32_t *v)
{
    if (r->len - r->at < 4) return 0;
    uint32_t u = (uint32_t)r->p[r->at] | (uint32_t)r->p[r->at + 1] << 8 | (uint32_t)r->p[r->at + 2] << 16 |
                 (uint32_t)r->p[r->at + 3] << 24;
    memcpy(v, &u, 4);
    r->at += 4;
    return 1;
}

static lb_status legacy_entry(rd *r, int32_t i, lb_imatrix *im)
{
    const char *what = r->what;
    int32_t nlen, ncall, nval;
    if (!i32(r, &nlen)) return lb__fail(LB_ERR_PARSE, "%s: entry %d: cut short before its name length", what, i);
    if (nlen < 1 || nlen > LB_IMATRIX_MAX_NAME || (size_t)nlen > r->len - r->at)
        return lb__fail(LB_ERR_PARSE, "%s: entry %d: name length %d (1..%d, and within the %zu bytes left)", what, i,
                        nlen, LB_IMATRIX_MAX_NAME, r->len - r->at);
    const char *name = (const char *)r->p + r->at;
    if (memchr(name, 0, (size_t)nlen)) return lb__fail(LB_ERR_PARSE, "%s: entry %d: the name holds a NUL byte", what, i);
    r->at += (size_t)nlen;
    if (!i32(r, &ncall) || !i32(r, &nval))
        return lb__fail(LB_ERR_PARSE, "%s: entry '%.*s': cut short before its counts", what, (int)nlen, name);
    if (ncall < 0) return lb__fail(LB_ERR_PARSE, "%s: entry '%.*s': ncall %d is negative", what, (int)nlen, name, ncall);
    if (nval < 1 || (size_t)nval > (r->len - r->at) / 4)
        return lb__fail(LB_ERR_PARSE, "%s: entry '%.*s': %d values (at least 1, and within the %zu bytes left)", what,
                        (int)nlen, name, nval, r->len - r->at);
    lb__imatrix_entry *e;
    lb_status st = lb__imatrix_add(im, name, (size_t)nlen, (size_t)nval, 1, &e);
    if (st != LB_OK) return st;
    e->counts[0] = ncall;
    for (int32_t j = 0; j < nval; j++) {
        float v = f32_at(r->p + r->at, (uint64_t)j);
        if (!isfinite(v) || v < 0)
            return lb__fail(LB_ERR_PARSE, "%s: entry '%s': value %d is %g, not a mean of squares", what, e->name, j,
                            (double)v);
        e->sums[j] = v;
    }
    r->at += 4 * (size_t)nval;
    return LB_OK;
}

/* After the entries: nothing, or the chunk count and the dataset name. */
static lb_status legacy_trailer(rd *r, lb_imatrix *im)
{
    if (r->at == r->len) return LB_OK;
    int32_t chunks, dlen;
    if (!i32(r, &chunks) || !i32(r, &dlen))
        return lb__fail(LB_ERR_PARSE, "%s: the trailer (chunk count, dataset) is cut short at byte %zu", r->what, r->at);
    if (chunks < 0) return lb__fail(LB_ERR_PARSE, "%s: chunk count %d is negative", r->what, chunks);
    im->chunk_count = (uint32_t)chunks;
    if (dlen < 0 || (size_t)dlen > r->len - r->at)
        return lb__fail(LB_ERR_PARSE, "%s: dataset name length %d (within the %zu bytes left)", r->what, dlen,
                        r->len - r->at);
    const char *s = (const char *)r->p + r->at;
    if (dlen > 0 && memchr(s, 0, (size_t)dlen)) return lb__fail(LB_ERR_PARSE, "%s: the dataset name holds a NUL byte", r->what);
    r->at += (size_t)dlen;
    if (r->at != r->len)
        return lb__fail(LB_ERR_PARSE, "%s: %zu bytes after the dataset name", r->what, r->len - r->at);
    return dlen > 0 ? lb__imatrix_add_dataset(im, s, (size_t)dlen) : LB_OK;
}

static lb_status parse_legacy(const uint8_t *buf, size_t len, const char *what, lb_imatrix *im)
{
    rd r = {.p = buf, .len = len, .what = what};
    int32_t n;
    if (!i32(&r, &n)) return lb__fail(LB_ERR_PARSE, "%s: %zu bytes: neither GGUF nor a legacy imatrix", what, len);
    /* an entry takes at least 17 bytes: name length, a 1-byte name, ncall, nval, one value */
    if (n < 1 || (size_t)n > (len - r.at) / 17)
        return lb__fail(LB_ERR_PARSE, "%s: not an imatrix: %d entries claimed in %zu bytes (legacy format; a GGUF "
                        "file starts with \"GGUF\")", what, n, len);
    im->legacy = 1;
    for (int32_t i = 0; i < n; i++) {
        lb_status st = legacy_entry(&r, i, im);
        if (st != LB_OK) return st;
    }
    return legacy_trailer(&r, im);
}

lb_status lb__imatrix_parse(const uint8_t *buf, size_t len, const char *what, lb_imatrix **out)
{
    if (!out) return lb__fail(LB_ERR_ARG, "lb__imatrix_parse: NULL output");
    *out = NULL;
    if (!what) what = "imatrix";
    if (!buf && len) return lb__fail(LB_ERR_ARG, "%s: NULL buffer", what);
    lb_imatrix *im = lb__imatrix_new();
    if (!im) return lb__fail(LB_ERR_NOMEM, "%s: out of memory", what);
    lb_status st = len >= 4 && memcmp(buf, "GGUF", 4) == 0 ? parse_gguf(buf, len, what, im)
                                                           : parse_legacy(buf, len, what, im);
    if (st == LB_OK) st = lb__imatrix_finish(im, what);
    if (st != LB_OK) {
        lb_imatrix_free(im);
        return st;
    }
    *out = im;
    return LB_OK;
}

lb_status lb_imatrix_load(const char *path, lb_imatrix **out)
{
    if (!out) return lb__fail(LB_ERR_ARG, "lb_imatrix_load: NULL output");
    *out = NULL;
    if (!path) return lb__fail(LB_ERR_ARG, "lb_imatrix_load: NULL path");
    lb__mapped m;
    lb_status st = lb__map_file(path, &m);
    if (st != LB_OK) return st;
    st = lb__imatrix_parse(m.data, m.size, path, out);
    lb__unmap_file(&m);
    return st;
}
