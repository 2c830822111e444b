/* lb_export: a quantized model as a complete Hugging Face directory, in
 * the format an lb__exporter describes (exporter.h).
 *
 * The directory is built beside its destination and renamed into place
 * when complete (util/file.h: lb__outdir), so it is complete or absent,
 * also after SIGINT/SIGTERM. Shards: entries are assigned to
 * model-0000i-of-0000n.safetensors files before anything is written, from
 * an upper bound of each entry's bytes, so every shard stays under
 * max_shard_bytes and the file names are known up front; one shard is
 * model.safetensors (what Hugging Face writes). Each shard's tensors are
 * gathered in memory and written by lb__st_write, so the peak memory is
 * one shard (use --max-shard-size to bound it), not the model. After
 * writing, every shard is read back with lowbit's own safetensors reader
 * and each tensor compared (dtype, shape, FNV-1a of the bytes) with what
 * the exporter emitted. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export/exporter.h"
#include "export/hf_tokenizer.h"
#include "export/hf_tokenizer_internal.h"
#include "io/model_internal.h"
#include "io/safetensors.h"
#include "util/error.h"
#include "util/file.h"

/* Hugging Face's default max_shard_size ("5GB"). */
#define EXPORT_DEFAULT_SHARD_BYTES 5000000000ull
/* Shards one directory may hold (util/output.h: LB_OUTDIR_MAX_NAMES less
 * config.json, the index, model.safetensors and the tokenizer files). */
#define EXPORT_MAX_SHARDS 36
#define EXPORT_FIXED_NAMES (3 + LB_HF_TOKENIZER_FILES)

typedef struct held {
    char *name;
    lb_dtype dtype;
    int n_dims;
    uint64_t shape[4];
    uint8_t *data;
    uint64_t bytes, hash;
    size_t entry;  /* SIZE_MAX: a per-model extra */
} held;

typedef struct job {
    const lb_qmodel *q;
    const lb__exporter *x;
    const lb_export_options *o;
    held *t;
    size_t n, cap;
    size_t entry;            /* the entry being emitted */
    lb_export_result r;
    uint64_t weight_bytes;   /* every byte written for the weights, scales included */
    char **names;            /* every tensor written, and its shard (for the index) */
    uint32_t *shard_of;
    uint64_t *hashes;
    lb_dtype *dtypes;
    size_t n_names, names_cap;
} job;

static uint64_t fnv1a(const uint8_t *p, uint64_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (uint64_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static const lb__exporter *exporter_of(lb_export_format f)
{
    switch (f) {
    case LB_EXPORT_COMPRESSED_TENSORS: return &lb__exporter_compressed_tensors;
    case LB_EXPORT_MODELOPT: return &lb__exporter_modelopt;
    }
    return NULL;
}

static lb_status emit(void *sink, const lb__out_tensor *t)
{
    job *j = sink;
    lb_dtype d;
    if (!lb__st_dtype_from_name(t->dtype, &d))
        return lb__fail(LB_ERR_ARG, "tensor '%s': exporter emitted unknown dtype '%s'", t->name, t->dtype);
    if (t->n_dims < 0 || t->n_dims > 4) return lb__fail(LB_ERR_ARG, "tensor '%s': %d dims", t->name, t->n_dims);
    if (j->n == j->cap) {
        size_t cap = j->cap ? 2 * j->cap : 64;
        held *h = realloc(j->t, cap * sizeof *h);
        if (!h) return lb__fail(LB_ERR_NOMEM, "out of memory");
        j->t = h, j->cap = cap;
    }
    held *h = &j->t[j->n];
    memset(h, 0, sizeof *h);
    h->name = strdup(t->name);
    h->data = malloc(t->bytes ? t->bytes : 1);
    if (!h->name || !h->data) {
        free(h->name), free(h->data);
        return lb__fail(LB_ERR_NOMEM, "out of memory holding '%s' (%llu bytes)", t->name, (unsigned long long)t->bytes);
    }
    memcpy(h->data, t->data, t->bytes);
    h->dtype = d, h->n_dims = t->n_dims, h->bytes = t->bytes, h->entry = j->entry;
    for (int k = 0; k < t->n_dims; k++) h->shape[k] = t->shape[k];
    h->hash = fnv1a(h->data, h->bytes);
    j->n++;
    return LB_OK;
}

static void drop_held(job *j)
{
    for (size_t i = 0; i < j->n; i++) free(j->t[i].name), free(j->t[i].data);
    j->n = 0;
}

/* An upper bound of what entry i becomes on disk: every element at 8 bits
 * (or 16/32 for a 16-bit or fp32 tensor), rows padded to 4 bytes, every
 * scale and zero point at 4 bytes, plus 64 bytes of small tensors. */
static uint64_t bound_bytes(const lb_qentry *e)
{
    const lb_tensor *t = e->tensor;
    if (e->state != LB_QSTATE_QUANTIZED) return t->n_elements * 4 + 64;
    uint64_t rows = t->shape[0], cols = t->n_elements / (rows ? rows : 1);
    uint64_t groups = e->spec.granularity == LB_GRAN_GROUP ? (cols + e->spec.group - 1) / e->spec.group : 1;
    return rows * ((cols + 3) / 4 * 4) + rows * groups * 4 * (e->spec.affine ? 2 : 1) + 64;
}

/* Rotary rows: a model read in the adjacent layout gives q/k rows that
 * Hugging Face holds half-split (model_save.c's rule). */
static uint32_t rotary_heads(const lb_model *m, const lb_tensor *t)
{
    const lb_arch *a = lb_model_arch(m);
    if (a->rope_layout != LB_ROPE_ADJACENT) return 0;
    if (strstr(t->name, "self_attn.q_proj.")) return a->n_heads;
    if (strstr(t->name, "self_attn.k_proj.")) return a->n_kv_heads;
    return 0;
}

/* 2-D blocks (bRxC) and the rotary reorder: it moves rows within a head, so
 * within a block only when each block holds whole heads (R a multiple of
 * the head's rows); otherwise the written blocks would not be the ones
 * lowbit quantized and evaluated. */
static lb_status check_block_heads(const lb_tensor *t, const lb_qspec *s, uint32_t heads)
{
    uint64_t rows = t->n_dims >= 1 ? t->shape[0] : 1, hd = heads ? rows / heads : 0, br = s->group_rows;
    if (!heads || s->granularity != LB_GRAN_GROUP || br <= 1 || (hd && br % hd == 0)) return LB_OK;
    return lb__fail(LB_ERR_UNSUPPORTED, "tensor '%s': blocks of %llu rows split its heads of %llu rows, and the "
                    "rotary reorder to Hugging Face's layout would move rows between blocks: use block rows that "
                    "are a multiple of %llu", t->name, (unsigned long long)br, (unsigned long long)hd,
                    (unsigned long long)hd);
}

/* Row r of the Hugging Face layout comes from row src_row(r) of the model's. */
static uint64_t src_row(uint64_t r, uint64_t rows, uint32_t heads)
{
    uint64_t hd = rows / heads, half = hd / 2, h = r / hd, k = r % hd;
    return h * hd + (k < half ? 2 * k : 2 * (k - half) + 1);
}

static lb_status permute(const void *src, void *dst, uint64_t rows, size_t row_bytes, uint32_t heads)
{
    if (!heads || rows % heads || (rows / heads) % 2)
        return lb__fail(LB_ERR_UNSUPPORTED, "%llu rows do not split into %u heads of even size", (unsigned long long)rows, heads);
    for (uint64_t r = 0; r < rows; r++)
        memcpy((uint8_t *)dst + r * row_bytes, (const uint8_t *)src + src_row(r, rows, heads) * row_bytes, row_bytes);
    return LB_OK;
}

/* Emits entry i through the exporter: values or the quantized view, in
 * Hugging Face row order. */
static lb_status emit_entry(job *j, size_t i)
{
    const lb_qmodel *q = j->q;
    lb_qentry e;
    lb_status st = lb_qmodel_entry(q, i, &e);
    if (st != LB_OK) return st;
    const lb_tensor *t = e.tensor;
    uint32_t heads = rotary_heads(lb_qmodel_model(q), t);
    uint64_t rows = t->n_dims >= 1 ? t->shape[0] : 1;
    j->entry = i;
    if (e.state != LB_QSTATE_QUANTIZED) {
        size_t n = (size_t)t->n_elements;
        float *v = malloc(n * sizeof *v + 4), *p = heads ? malloc(n * sizeof *p + 4) : NULL;
        if (!v || (heads && !p)) st = lb__fail(LB_ERR_NOMEM, "out of memory reading '%s'", t->name);
        if (st == LB_OK) st = lb_qmodel_values_f32(q, i, v, j->o->threads);
        lb_tensor_release(t);
        if (st == LB_OK && heads) st = permute(v, p, rows, (size_t)(n / rows) * sizeof *v, heads);
        if (st == LB_OK) st = j->x->tensor(q, i, heads ? p : v, NULL, emit, j);
        free(v), free(p);
        return st;
    }
    lb_qtensor *qt = NULL;
    int owned = 0;
    st = lb_qmodel_quantized(q, i, j->o->threads, &qt, &owned);
    lb_tensor_release(t);
    if (st != LB_OK) return st;
    lb_qtensor_view v;
    st = lb_qtensor_view_get(qt, &v);
    uint8_t *d = NULL, *s = NULL, *z = NULL;
    if (st == LB_OK && heads) {
        d = malloc(v.data_bytes + 1), s = malloc(v.scale_bytes + 1), z = malloc(v.zero_point_bytes + 1);
        if (!d || !s || !z) st = lb__fail(LB_ERR_NOMEM, "out of memory");
        if (st == LB_OK) st = permute(v.data, d, v.rows, v.row_bytes, heads);
        uint64_t br = v.spec.group_rows;
        if (st == LB_OK) st = check_block_heads(t, &v.spec, heads);
        if (st == LB_OK && v.spec.granularity != LB_GRAN_TENSOR && br <= 1)
            st = permute(v.scales, s, v.rows, v.scale_bytes / v.rows, heads);
        else if (st == LB_OK) memcpy(s, v.scales, v.scale_bytes); /* one scale, or whole heads per block row */
        if (st == LB_OK && v.zero_points) st = permute(v.zero_points, z, v.rows, v.zero_point_row_bytes, heads);
        if (st == LB_OK) {
            v.data = d, v.scales = s;
            if (v.zero_points) v.zero_points = z;
        }
    }
    if (st == LB_OK) st = j->x->tensor(q, i, NULL, &v, emit, j);
    free(d), free(s), free(z);
    if (owned) lb_qtensor_free(qt);
    return st;
}

static lb_status fill(void *ctx, size_t i, void *dst, uint64_t n_bytes)
{
    job *j = ctx;
    if (n_bytes != j->t[i].bytes) return lb__fail(LB_ERR_ARG, "size mismatch writing '%s'", j->t[i].name);
    memcpy(dst, j->t[i].data, n_bytes);
    return LB_OK;
}

static lb_status note_name(job *j, const held *h, uint32_t shard)
{
    if (j->n_names == j->names_cap) {
        size_t cap = j->names_cap ? 2 * j->names_cap : 256;
        char **n = realloc(j->names, cap * sizeof *n);
        uint32_t *s = n ? realloc(j->shard_of, cap * sizeof *s) : NULL;
        uint64_t *hs = s ? realloc(j->hashes, cap * sizeof *hs) : NULL;
        lb_dtype *ds = hs ? realloc(j->dtypes, cap * sizeof *ds) : NULL;
        if (n) j->names = n;
        if (s) j->shard_of = s;
        if (hs) j->hashes = hs;
        if (ds) j->dtypes = ds;
        if (!ds) return lb__fail(LB_ERR_NOMEM, "out of memory");
        j->names_cap = cap;
    }
    if (!(j->names[j->n_names] = strdup(h->name))) return lb__fail(LB_ERR_NOMEM, "out of memory");
    j->shard_of[j->n_names] = shard, j->hashes[j->n_names] = h->hash, j->dtypes[j->n_names] = h->dtype;
    j->n_names++;
    return LB_OK;
}

static void shard_name(char *buf, size_t size, uint32_t s, uint32_t n)
{
    if (n == 1) snprintf(buf, size, "model.safetensors");
    else snprintf(buf, size, "model-%05u-of-%05u.safetensors", s + 1, n);
}

/* Writes the tensors held to one shard file. */
static lb_status write_shard(job *j, const char *dir, uint32_t s, uint32_t n_shards)
{
    char name[64];
    shard_name(name, sizeof name, s, n_shards);
    char *path = lb__path_join(dir, name);
    lb__st_out_tensor *t = calloc(j->n ? j->n : 1, sizeof *t);
    lb_status st = path && t ? LB_OK : lb__fail(LB_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < j->n && st == LB_OK; i++) {
        t[i].name = j->t[i].name, t[i].dtype = j->t[i].dtype, t[i].n_dims = j->t[i].n_dims;
        for (int k = 0; k < j->t[i].n_dims; k++) t[i].shape[k] = j->t[i].shape[k];
        st = note_name(j, &j->t[i], s);
        j->r.bytes += j->t[i].bytes;
    }
    const char *keys[] = {"format"}, *values[] = {"pt"};
    if (st == LB_OK) st = lb__st_write(path, t, j->n, keys, values, 1, fill, j);
    free(t), free(path);
    return st;
}

/* dir/name holds the JSON text and a newline (complete or absent) */
static lb_status write_json_file(const char *dir, const char *name, lb__jsonw *w)
{
    lb_status st = lb__jsonw_status(w);
    char *path = lb__path_join(dir, name);
    if (st == LB_OK && !path) st = lb__fail(LB_ERR_NOMEM, "out of memory");
    lb__outfile o;
    if (st == LB_OK && (st = lb__out_open(path, &o)) == LB_OK) {
        size_t len;
        const char *text = lb__jsonw_text(w, &len);
        st = lb__out_write(&o, text, len);
        if (st == LB_OK) st = lb__out_write(&o, "\n", 1);
        st = st == LB_OK ? lb__out_commit(&o) : (lb__out_abort(&o), st);
    }
    free(path);
    return st;
}

static lb_status write_index(job *j, const char *dir, uint32_t n_shards)
{
    lb__jsonw *w = lb__jsonw_new();
    if (!w) return lb__fail(LB_ERR_NOMEM, "out of memory");
    char name[64];
    lb__jsonw_object(w);
    lb__jsonw_key(w, "metadata"), lb__jsonw_object(w);
    lb__jsonw_key(w, "total_size"), lb__jsonw_int(w, (long long)j->r.bytes);
    lb__jsonw_end(w);
    lb__jsonw_key(w, "weight_map"), lb__jsonw_object(w);
    for (size_t i = 0; i < j->n_names; i++) {
        shard_name(name, sizeof name, j->shard_of[i], n_shards);
        lb__jsonw_key(w, j->names[i]), lb__jsonw_str(w, name);
    }
    lb__jsonw_end(w);
    lb__jsonw_end(w);
    lb_status st = write_json_file(dir, "model.safetensors.index.json", w);
    lb__jsonw_free(w);
    return st;
}

/* Every shard read back with lowbit's reader: each tensor the exporter
 * emitted is there with its dtype and the same bytes. */
static lb_status verify(job *j, const char *dir, uint32_t n_shards)
{
    lb_status st = LB_OK;
    for (uint32_t s = 0; s < n_shards && st == LB_OK; s++) {
        char name[64];
        shard_name(name, sizeof name, s, n_shards);
        char *path = lb__path_join(dir, name);
        lb__st_file f;
        memset(&f, 0, sizeof f);
        st = path ? lb__st_open(path, &f) : lb__fail(LB_ERR_NOMEM, "out of memory");
        for (size_t i = 0; i < j->n_names && st == LB_OK; i++) {
            if (j->shard_of[i] != s) continue;
            const lb__st_tensor *t = lb__st_find(&f, j->names[i]);
            if (!t) st = lb__fail(LB_ERR_IO, "verify: '%s' is missing from %s", j->names[i], name);
            else if (t->dtype != j->dtypes[i] || fnv1a(t->data, t->end - t->begin) != j->hashes[i])
                st = lb__fail(LB_ERR_IO, "verify: '%s' in %s reads back different from what was written", j->names[i], name);
        }
        lb__st_close(&f);
        free(path);
    }
    return st;
}

static const char *torch_dtype_of(lb_dtype d)
{
    return d == LB_DT_F16 ? "float16" : d == LB_DT_F32 ? "float32" : "bfloat16";
}

lb_status lb_export_check(const lb_qmodel *q, const lb_export_options *o)
{
    if (!q || !o) return lb__fail(LB_ERR_ARG, "lb_export_check: NULL argument");
    const lb__exporter *x = exporter_of(o->format);
    if (!x) return lb__fail(LB_ERR_ARG, "unknown export format %d", (int)o->format);
    const lb_arch *a = lb_model_arch(lb_qmodel_model(q));
    if (!lb__arch_hf_class(a->name))
        return lb__fail(LB_ERR_UNSUPPORTED, "lowbit writes Hugging Face directories for llama, mistral, qwen2 and "
                                            "qwen3, not for architecture '%s'", a->name);
    lb_status st = x->check(q);
    for (size_t i = 0; st == LB_OK && i < lb_qmodel_count(q); i++) {
        lb_qentry e;
        if ((st = lb_qmodel_entry(q, i, &e)) == LB_OK && e.state == LB_QSTATE_QUANTIZED)
            st = check_block_heads(e.tensor, &e.spec, rotary_heads(lb_qmodel_model(q), e.tensor));
    }
    return st;
}

/* Assigns each entry to a shard from its upper-bound size; *n_shards. */
static lb_status plan_shards(const lb_qmodel *q, uint64_t max, uint32_t *shard, uint32_t *n_shards, lb_export_result *r)
{
    size_t n = lb_qmodel_count(q);
    uint64_t used = 0;
    uint32_t s = 0;
    for (size_t i = 0; i < n; i++) {
        lb_qentry e;
        lb_status st = lb_qmodel_entry(q, i, &e);
        if (st != LB_OK) return st;
        uint64_t b = bound_bytes(&e);
        if (used && used + b > max) s++, used = 0;
        used += b;
        shard[i] = s;
        if (lb_tensor_is_weight(e.tensor)) r->weight_params += e.tensor->n_elements;
    }
    *n_shards = s + 1;
    if (*n_shards > EXPORT_MAX_SHARDS)
        return lb__fail(LB_ERR_ARG, "%u shards of at most %llu bytes: lowbit writes up to %d; give a larger "
                                    "--max-shard-size", *n_shards, (unsigned long long)max, EXPORT_MAX_SHARDS);
    return LB_OK;
}

lb_status lb_export(const lb_qmodel *q, const char *dir, const lb_export_options *o, lb_export_result *out)
{
    if (!q || !dir || !o) return lb__fail(LB_ERR_ARG, "lb_export: NULL argument");
    lb_status st = lb_export_check(q, o);
    if (st != LB_OK) return st;
    const lb_model *m = lb_qmodel_model(q);
    if (lb__model_reads(m, dir)) return lb__fail(LB_ERR_ARG, "'%s' is one of the files the model is read from", dir);
    size_t n = lb_qmodel_count(q);
    uint64_t max = o->max_shard_bytes ? o->max_shard_bytes : EXPORT_DEFAULT_SHARD_BYTES;
    job j = {.q = q, .x = exporter_of(o->format), .o = o};
    uint32_t *shard = malloc((n ? n : 1) * sizeof *shard), n_shards = 1;
    if (!shard) return lb__fail(LB_ERR_NOMEM, "out of memory");
    st = plan_shards(q, max, shard, &n_shards, &j.r);
    /* the names the directory may hold */
    const char *names[LB_OUTDIR_MAX_NAMES];
    char shard_names[EXPORT_MAX_SHARDS][64];
    size_t k = 0;
    names[k++] = "config.json", names[k++] = "model.safetensors.index.json", names[k++] = "hf_quant_config.json";
    for (size_t t = 0; t < LB_HF_TOKENIZER_FILES; t++) names[k++] = lb__hf_tokenizer_files[t];
    for (uint32_t s = 0; st == LB_OK && s < n_shards; s++) {
        shard_name(shard_names[s], sizeof shard_names[s], s, n_shards);
        names[k++] = shard_names[s];
    }
    if (n_shards > 1 && st == LB_OK) names[k++] = "model.safetensors"; /* an earlier single-file output (--force) */
    lb__outdir d;
    memset(&d, 0, sizeof d);
    if (st == LB_OK) st = lb__outdir_open(dir, names, k, &d);
    if (st == LB_OK && o->progress) o->progress(o->progress_ctx, 0, n);
    /* tensors, shard by shard; a per-model extra (KV scales) in the last */
    for (size_t i = 0; i < n && st == LB_OK; i++) {
        st = emit_entry(&j, i);
        lb_qentry e;
        if (st == LB_OK) st = lb_qmodel_entry(q, i, &e);
        if (st == LB_OK) {
            uint64_t b = 0;
            for (size_t h = 0; h < j.n; h++) b += j.t[h].entry == i ? j.t[h].bytes : 0;
            if (lb_tensor_is_weight(e.tensor)) {
                j.weight_bytes += b;
            }
            j.r.tensors++;
            j.r.quantized += e.state == LB_QSTATE_QUANTIZED;
        }
        if (st == LB_OK && i + 1 == n && j.x->extras) j.entry = SIZE_MAX, st = j.x->extras(q, emit, &j);
        if (st == LB_OK && (i + 1 == n || shard[i + 1] != shard[i])) {
            st = write_shard(&j, d.tmp_path, shard[i], n_shards);
            drop_held(&j);
        }
        if (st == LB_OK && o->progress) o->progress(o->progress_ctx, i + 1, n);
    }
    if (st == LB_OK && n_shards > 1) st = write_index(&j, d.tmp_path, n_shards);
    lb__jsonw *w = st == LB_OK ? lb__jsonw_new() : NULL;
    if (st == LB_OK && !w) st = lb__fail(LB_ERR_NOMEM, "out of memory");
    if (st == LB_OK) st = j.x->quant_config(q, w);
    if (st == LB_OK) st = lb__jsonw_status(w);
    if (st == LB_OK) {
        char *cfg = lb__path_join(d.tmp_path, "config.json");
        st = cfg ? lb__hf_config_write(m, cfg, torch_dtype_of(lb_qmodel_dtype(q)), lb__jsonw_text(w, NULL))
                 : lb__fail(LB_ERR_NOMEM, "out of memory");
        free(cfg);
    }
    lb__jsonw_free(w);
    for (int f = 0; st == LB_OK && j.x->extra_file; f++) {
        const char *fname = NULL;
        lb__jsonw *fw = lb__jsonw_new();
        int has = fw ? j.x->extra_file(q, f, &fname, fw) : 0;
        if (!fw) st = lb__fail(LB_ERR_NOMEM, "out of memory");
        else if (has < 0) st = LB_ERR_UNSUPPORTED; /* the format failed and said why (lb_last_error) */
        else if (has) st = write_json_file(d.tmp_path, fname, fw);
        else fname = NULL;
        lb__jsonw_free(fw);
        if (!fname) break;
    }
    if (st == LB_OK) st = lb__hf_tokenizer_write(m, o->model_path, d.tmp_path, NULL);
    if (st == LB_OK && o->verify) st = verify(&j, d.tmp_path, n_shards);
    if (st == LB_OK) st = lb__outdir_commit(&d);
    else lb__outdir_abort(&d);
    drop_held(&j);
    free(j.t), free(shard);
    for (size_t i = 0; i < j.n_names; i++) free(j.names[i]);
    free(j.names), free(j.shard_of), free(j.hashes), free(j.dtypes);
    if (st == LB_OK && out) {
        j.r.shards = n_shards;
        j.r.bits_per_weight = j.r.weight_params ? 8.0 * (double)j.weight_bytes / (double)j.r.weight_params : 0;
        *out = j.r;
    }
    return st;
}
