/* lb_export_gguf: a quantized model as one GGUF file, laid out as
 * llama-quantize lays it out, so that from the same GGUF input the two
 * files can be compared byte for byte:
 *   - metadata: the input's keys in their order (less split keys), then
 *     general.quantization_version (2) and general.file_type (the file
 *     type's llama_ftype), which llama-quantize re-sets at the end;
 *   - tensors sorted by layer number, then name (llama.cpp's loader map
 *     order), each at a 32-byte-aligned offset (io/gguf_write.c);
 *   - a tensor whose type does not change is copied byte for byte, any
 *     other goes through fp32 into its type (io/ggml_rows.h), rows split
 *     over threads (the bytes do not depend on the thread count).
 * Tensors stream one at a time: the peak memory is one tensor in fp32 and
 * its packed bytes. q/k rows of a model read in Hugging Face's half-split
 * rotary layout are moved to the adjacent one llama.cpp's llama family
 * runs (the rule lowbit convert uses, io/model_save.c). NVFP4 tensors get
 * their per-tensor scale as a separate "<name>.scale" F32 tensor, which
 * llama.cpp multiplies the product by. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export/gguf_export.h"
#include "io/ggml_rows.h"
#include "io/model_internal.h"
#include "util/error.h"
#include "util/output.h"
#include "weights/qmodel_internal.h"

/* GGUF's quantization version, which llama-quantize writes (GGML_QNT_VERSION). */
#define GGUF_QNT_VERSION 2u

/* The tensors whose ".scale" llama.cpp's loader reads (its generic pass
 * over attention and feed-forward projections). */
static const char *const scaled_parts[] = {
    ".attn_q.weight", ".attn_k.weight", ".attn_v.weight", ".attn_output.weight", ".attn_qkv.weight",
    ".attn_gate.weight", ".ffn_down.weight", ".ffn_gate.weight", ".ffn_up.weight", ".ffn_down_exps.weight",
    ".ffn_gate_exps.weight", ".ffn_up_exps.weight", ".ffn_down_shexp.weight", ".ffn_gate_shexp.weight",
    ".ffn_up_shexp.weight",
};

int lb__gguf_takes_scale(const char *name)
{
    if (strncmp(name, "blk.", 4) != 0) return 0;
    size_t n = strlen(name);
    for (size_t k = 0; k < sizeof scaled_parts / sizeof *scaled_parts; k++) {
        size_t p = strlen(scaled_parts[k]);
        if (n > p && strcmp(name + n - p, scaled_parts[k]) == 0) return 1;
    }
    return 0;
}

/* One tensor of the file: an entry, or the scale of an NVFP4 entry. */
typedef struct out_t {
    char name[LB_GGUF_MAX_NAME + 64];
    size_t entry;
    int is_scale;
    lb_dtype dtype;
    int n_dims;
    uint64_t ne[4];
    int copy;             /* the stored bytes as they are */
    int borrow;           /* quantized straight from the stored fp32 (no copy of the values) */
    uint32_t permute;     /* rotary heads whose rows move, or 0 */
} out_t;

typedef struct wjob {
    const lb_qmodel *q;
    const lb_gguf_options *o;
    out_t *t;             /* in file order */
    size_t n;
    lb_rope_layout layout;
    float *buf, *tmp;
    size_t cap;
    size_t done;
    lb_export_result r;
} wjob;

static lb_status grow(wjob *j, size_t n)
{
    if (n <= j->cap) return LB_OK;
    float *a = realloc(j->buf, n * sizeof *a), *b = a ? realloc(j->tmp, n * sizeof *b) : NULL;
    if (a) j->buf = a;
    if (b) j->tmp = b;
    if (!a || !b) return lb__fail(LB_ERR_NOMEM, "out of memory for a tensor of %zu values", n);
    j->cap = n;
    return LB_OK;
}

/* The entry's values as the file's layout holds them, in j->buf (or tmp):
 * the source (or its replacement), q/k rows moved when needed. */
static lb_status file_values(wjob *j, const out_t *o, float **vals)
{
    const lb_tensor *t = lb_model_tensor(lb_qmodel_model(j->q), o->entry);
    size_t n = (size_t)t->n_elements;
    lb_status st = grow(j, n);
    if (st == LB_OK) st = lb_qmodel_source_f32(j->q, o->entry, j->buf);
    if (st != LB_OK) return st;
    *vals = j->buf;
    if (o->permute) {
        uint64_t rows = t->shape[0];
        lb__permute_rotary_rows(j->buf, j->tmp, rows, n / rows, o->permute, j->layout == LB_ROPE_ADJACENT);
        *vals = j->tmp;
    }
    return LB_OK;
}

/* Rows of row_bytes from one rotary layout to the other, as
 * lb__permute_rotary_rows moves rows of floats (here whole rows of blocks). */
static void permute_byte_rows(const unsigned char *src, unsigned char *dst, uint64_t rows, size_t row_bytes,
                              uint32_t heads, int to_adjacent)
{
    uint64_t hd = rows / heads, half = hd / 2;
    for (uint64_t h = 0; h < heads; h++)
        for (uint64_t k = 0; k < half; k++)
            for (uint64_t p = 0; p < 2; p++) {
                uint64_t split = h * hd + p * half + k, adjacent = h * hd + 2 * k + p;
                uint64_t from = to_adjacent ? split : adjacent, to = to_adjacent ? adjacent : split;
                memcpy(dst + to * row_bytes, src + from * row_bytes, row_bytes);
            }
}

/* An entry whose ggml bytes an algorithm set (GPTQ): those bytes, rows
 * moved as the file's layout needs; NVFP4's scale tensor their scale. */
static lb_status fill_set_bytes(wjob *j, const out_t *o, const void *bytes, size_t n, float scale, void *dst,
                                uint64_t n_bytes)
{
    if (o->is_scale) {
        memcpy(dst, &scale, sizeof scale);
        return LB_OK;
    }
    if (n != n_bytes) return lb__fail(LB_ERR_ARG, "tensor '%s': %zu bytes set for %llu", o->name, n,
                                      (unsigned long long)n_bytes);
    if (!o->permute) {
        memcpy(dst, bytes, n);
        return LB_OK;
    }
    const lb_tensor *t = lb_model_tensor(lb_qmodel_model(j->q), o->entry);
    uint64_t rows = t->shape[0];
    permute_byte_rows(bytes, dst, rows, n / rows, o->permute, j->layout == LB_ROPE_ADJACENT);
    return LB_OK;
}

static lb_status fill_one(wjob *j, const out_t *o, void *dst, uint64_t n_bytes)
{
    const lb_tensor *t = lb_model_tensor(lb_qmodel_model(j->q), o->entry);
    size_t n_set = 0;
    float set_scale = 1.0f;
    const void *set = lb__qmodel_ggml_bytes(j->q, o->entry, &n_set, &set_scale);
    if (set) return fill_set_bytes(j, o, set, n_set, set_scale, dst, n_bytes);
    if (o->copy) {
        if (n_bytes != t->n_bytes) return lb__fail(LB_ERR_ARG, "tensor '%s': size mismatch copying it", t->name);
        memcpy(dst, t->data, n_bytes);
        lb_tensor_release(t);
        return LB_OK;
    }
    if (t->n_elements == 0) return LB_OK;
    if (o->borrow) { /* the file's fp32 values as they are: quantized from the mapping, no copy */
        size_t cols = (size_t)o->ne[0], rows = (size_t)t->n_elements / (cols ? cols : 1), n_im = 0;
        const float *im = lb__qmodel_imatrix(j->q, o->entry, &n_im);
        lb__tensor_prefetch(t);
        lb_status st = lb__ggml_rows_stacked(o->dtype, t->data, rows, cols, im, n_im, dst, j->o->threads);
        lb_tensor_release(t);
        if (st != LB_OK) return lb__fail(st, "tensor '%s' as %s: %s", o->name, lb_dtype_get(o->dtype)->name, lb_last_error());
        return LB_OK;
    }
    float *x;
    lb_status st = file_values(j, o, &x);
    if (st != LB_OK) return st;
    size_t n = (size_t)t->n_elements;
    float scale = o->dtype == LB_DT_NVFP4 || o->is_scale ? lb__ggml_nvfp4_scale(x, n) : 1.0f;
    if (o->is_scale) {
        memcpy(dst, &scale, sizeof scale);
        return LB_OK;
    }
    if (scale != 1.0f) { /* tested once, outside, and in whole chunks: a loop the -O2 vectorizer takes */
        size_t k = 0;
        for (; k + 32 <= n; k += 32)
            for (int c = 0; c < 32; c++) x[k + c] /= scale;
        for (; k < n; k++) x[k] /= scale;
    }
    size_t cols = (size_t)o->ne[0], rows = n / (cols ? cols : 1);
    size_t n_im = 0;
    const float *im = lb__qmodel_imatrix(j->q, o->entry, &n_im);
    st = lb__ggml_rows_stacked(o->dtype, x, rows, cols, im, n_im, dst, j->o->threads);
    if (st != LB_OK) return lb__fail(st, "tensor '%s' as %s: %s", o->name, lb_dtype_get(o->dtype)->name, lb_last_error());
    return LB_OK;
}

static lb_status fill(void *ctx, size_t i, void *dst, uint64_t n_bytes)
{
    wjob *j = ctx;
    lb_status st = fill_one(j, &j->t[i], dst, n_bytes);
    if (st == LB_OK && j->o->progress) j->o->progress(j->o->progress_ctx, ++j->done, j->n);
    return st;
}

/* The type an entry is written in, and whether its bytes are copied. */
static lb_status plan_entry(wjob *j, const lb__gguf_view *v, size_t i, out_t *o)
{
    const lb_qmodel *q = j->q;
    const lb_model *m = lb_qmodel_model(q);
    lb_qentry e;
    lb_status st = lb_qmodel_entry(q, i, &e);
    if (st != LB_OK) return st;
    const lb_tensor *t = e.tensor;
    snprintf(o->name, sizeof o->name, "%s", v->names[i]);
    o->entry = i;
    o->n_dims = v->t[i].n_dims;
    memcpy(o->ne, v->t[i].ne, sizeof o->ne);
    if (e.state == LB_QSTATE_QUANTIZED)
        return lb__fail(LB_ERR_UNSUPPORTED, "tensor '%s' is quantized under a lowbit scheme, which GGUF cannot hold: "
                        "choose GGUF types (lowbit quantize --format gguf --type T)", t->name);
    if (e.ggml != LB_DT_COUNT) o->dtype = e.ggml;
    else if (lb_dtype_from_ggml(v->t[i].type, &o->dtype) != LB_OK) o->dtype = LB_DT_F32;
    if ((st = lb__rotary_permute_heads(m, t, j->layout, &o->permute)) != LB_OK) return st;
    o->copy = o->dtype == t->dtype && !o->permute && !e.replaced && !lb__qmodel_ggml_bytes(q, i, NULL, NULL);
    /* NVFP4 divides the values by the tensor's scale first, so it needs its own copy */
    o->borrow = !o->copy && t->dtype == LB_DT_F32 && !o->permute && !e.replaced && o->dtype != LB_DT_NVFP4;
    const lb_dtype_info *d = lb_dtype_get(o->dtype);
    if (!o->copy && !lb__ggml_rows_can(o->dtype))
        return lb__fail(LB_ERR_UNSUPPORTED, "tensor '%s': lowbit does not write %s yet", o->name, d->name);
    if (d->block > 1 && o->ne[0] % d->block)
        return lb__fail(LB_ERR_ARG, "tensor '%s': rows of %llu are not whole %s blocks of %u", o->name,
                        (unsigned long long)o->ne[0], d->name, d->block);
    if (o->dtype == LB_DT_NVFP4 && !o->copy && !lb__gguf_takes_scale(o->name))
        return lb__fail(LB_ERR_UNSUPPORTED, "tensor '%s': llama.cpp reads no per-tensor scale for it, so it cannot be "
                        "NVFP4 (give it another type: --tensor-type, --output-tensor-type, --token-embedding-type)",
                        o->name);
    if (lb_tensor_is_weight(t)) {
        uint64_t bytes = 0;
        lb_dtype_bytes(o->dtype, t->n_elements, &bytes);
        j->r.weight_params += t->n_elements;
        j->r.bytes += bytes;
        j->r.quantized += d->block > 1;
    }
    return LB_OK;
}

/* Entries and scale tensors in llama-quantize's order. */
static lb_status plan(wjob *j, const lb__gguf_view *v)
{
    size_t n = v->n, n_scale = 0;
    out_t *t = calloc(2 * (n ? n : 1), sizeof *t);
    lb__mix_tensor *mt = calloc(2 * (n ? n : 1), sizeof *mt);
    size_t *order = calloc(2 * (n ? n : 1), sizeof *order);
    lb_status st = t && mt && order ? LB_OK : lb__fail(LB_ERR_NOMEM, "out of memory");
    for (size_t i = 0; st == LB_OK && i < n; i++) {
        if ((st = plan_entry(j, v, i, &t[i])) != LB_OK) break;
        if (t[i].dtype == LB_DT_NVFP4 && !t[i].copy) {
            out_t *s = &t[n + n_scale++];
            const char *name = t[i].name;
            size_t base = strlen(name) - strlen(".weight");
            snprintf(s->name, sizeof s->name, "%.*s.scale", (int)base, name);
            s->entry = i, s->is_scale = 1, s->dtype = LB_DT_F32, s->n_dims = 1;
            s->ne[0] = s->ne[1] = s->ne[2] = s->ne[3] = 1;
            s->permute = t[i].permute;
        }
    }
    size_t total = n + n_scale;
    for (size_t i = 0; st == LB_OK && i < total; i++) mt[i].name = t[i].name; /* entries, then scales */
    if (st == LB_OK) st = lb__gguf_order(mt, total, order);
    if (st == LB_OK) {
        j->t = malloc((total ? total : 1) * sizeof *j->t);
        if (!j->t) st = lb__fail(LB_ERR_NOMEM, "out of memory");
        for (size_t k = 0; st == LB_OK && k < total; k++) j->t[k] = t[order[k]];
        j->n = total;
    }
    free(t), free(mt), free(order);
    return st;
}

/* The keys llama-quantize records of its --imatrix (tools/quantize: KV
 * overrides it sets after the file type, in this order): the file and
 * first dataset cut to 127 bytes (its fixed-size override strings), the
 * entries kept and the chunks (when the file says them) as u32. */
#define IMATRIX_KEY_FILE "quantize.imatrix.file"
#define IMATRIX_KEY_DATASET "quantize.imatrix.dataset"
#define IMATRIX_KEY_ENTRIES "quantize.imatrix.entries_count"
#define IMATRIX_KEY_CHUNKS "quantize.imatrix.chunks_count"
#define IMATRIX_MAX_STRING 127

static lb_status imatrix_keys(lb__gguf_writer *w, const lb_gguf_options *o, size_t kept)
{
    lb_imatrix_info info;
    lb_imatrix_get_info(o->imatrix, &info);
    const char *dataset = info.n_datasets ? lb_imatrix_dataset(o->imatrix, 0) : NULL;
    lb_status st = LB_OK;
    if (o->imatrix_file)
        st = lb__gguf_set_str(w, IMATRIX_KEY_FILE, o->imatrix_file, strnlen(o->imatrix_file, IMATRIX_MAX_STRING));
    if (st == LB_OK && dataset)
        st = lb__gguf_set_str(w, IMATRIX_KEY_DATASET, dataset, strnlen(dataset, IMATRIX_MAX_STRING));
    if (st == LB_OK) st = lb__gguf_set_u32(w, IMATRIX_KEY_ENTRIES, (uint32_t)kept);
    if (st == LB_OK && info.chunk_count) st = lb__gguf_set_u32(w, IMATRIX_KEY_CHUNKS, info.chunk_count);
    return st;
}

static lb_status write_file(wjob *j, const char *path)
{
    const lb_model *m = lb_qmodel_model(j->q);
    lb__gguf_writer *w;
    lb_status st = lb__gguf_writer_new(&w);
    if (st != LB_OK) return st;
    /* the keys set below move to the end, as ggml's gguf_set_* moves them */
    size_t kept = lb__gguf_imatrix_kept(j->o);
    const char *reset[5] = {NULL}, **r = reset;
    if (kept && j->o->imatrix_file) *r++ = IMATRIX_KEY_FILE;
    if (kept && lb_imatrix_dataset(j->o->imatrix, 0)) *r++ = IMATRIX_KEY_DATASET;
    if (kept) *r++ = IMATRIX_KEY_ENTRIES;
    if (kept) {
        lb_imatrix_info info;
        lb_imatrix_get_info(j->o->imatrix, &info);
        if (info.chunk_count) *r++ = IMATRIX_KEY_CHUNKS;
    }
    st = lb__gguf_model_metadata(m, w, 1, reset);
    if (st == LB_OK) st = lb__gguf_set_u32(w, "general.quantization_version", GGUF_QNT_VERSION);
    const lb__ftype_info *f = j->o->type ? lb__ftype_by_name(j->o->type) : NULL;
    if (st == LB_OK && j->o->type && !f) st = lb__fail(LB_ERR_ARG, "unknown GGUF type '%s'", j->o->type);
    if (st == LB_OK && f) st = lb__gguf_set_u32(w, "general.file_type", (uint32_t)f->ftype);
    if (st == LB_OK && kept) st = imatrix_keys(w, j->o, kept); /* llama-quantize writes none when none is kept */
    for (size_t k = 0; st == LB_OK && k < j->n; k++)
        st = lb__gguf_add_tensor(w, j->t[k].name, j->t[k].dtype, j->t[k].n_dims, j->t[k].ne);
    if (st == LB_OK && j->o->progress) j->o->progress(j->o->progress_ctx, 0, j->n);
    if (st == LB_OK) st = lb__gguf_write(w, path, fill, j);
    lb__gguf_writer_free(w);
    return st;
}

lb_status lb_export_gguf(const lb_qmodel *q, const char *path, const lb_gguf_options *o, lb_export_result *out)
{
    if (!q || !path || !o) return lb__fail(LB_ERR_ARG, "lb_export_gguf: NULL argument");
    if (!path[0]) return lb__fail(LB_ERR_ARG, "the output path is empty");
    lb_status st = lb__qmodel_check_no_outliers(q, "a GGUF");
    if (st != LB_OK) return st;
    const lb_model *m = lb_qmodel_model(q);
    if (lb__model_reads(m, path)) return lb__fail(LB_ERR_ARG, "'%s' is one of the files the model is read from; write elsewhere", path);
    lb__dest dest;
    st = lb__dest_check_file(path, &dest);
    if (st != LB_OK) return st;
    wjob j = {.q = q, .o = o, .layout = lb__gguf_rope_layout(lb_model_arch(m))};
    lb__gguf_view v;
    st = lb__gguf_view_make(q, &v);
    if (st == LB_OK) st = plan(&j, &v);
    if (st == LB_OK) st = write_file(&j, path);
    if (st == LB_OK) {
        j.r.tensors = j.n;
        j.r.shards = 1;
        j.r.bits_per_weight = j.r.weight_params ? 8.0 * (double)j.r.bytes / (double)j.r.weight_params : 0;
        if (out) *out = j.r;
    }
    lb__gguf_view_free(&v);
    free(j.t), free(j.buf), free(j.tmp);
    return st;
}
