/* lb_export: a quantized model as a complete Hugging Face directory, in
 * the format an lb__exporter describes (exporter.h).
 *
 * The directory is built beside its destination and renamed into place
 * when complete (util/file.h: lb__outdir), so it is complete or absent,
 * also after SIGINT/SIGTERM. Streaming: every output tensor's name, dtype,
 * shape and size follow from the plan (each entry's spec and shape), so
 * the exporter first describes them all (no values), entries are assigned
 * to model-0000i-of-0000n.safetensors files from an upper bound of their
 * bytes (every shard stays under max_shard_bytes and the names are known
 * up front; one shard is model.safetensors, what Hugging Face writes), and
 * each shard's header is written when it is opened. Then one entry at a
 * time is quantized (or read), emitted and written straight to its place
 * in the shard (io/safetensors.h: lb__st_stream), so the peak memory is
 * about one tensor and its fp32 source, not a shard. Each emitted tensor
 * is checksummed as it is written; after writing, every shard is read back
 * with lowbit's own safetensors reader and each tensor compared (dtype,
 * shape, checksum of the bytes) with what the exporter emitted. */
#define _DEFAULT_SOURCE /* madvise, MADV_DONTNEED */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "export/exporter.h"
#include "export/hf_tokenizer.h"
#include "export/hf_tokenizer_internal.h"
#include "io/model_internal.h"
#include "io/safetensors.h"
#include "quant/quant_internal.h"
#include "util/alloc.h"
#include "util/error.h"
#include "util/file.h"
#include "weights/qmodel_internal.h"

/* Hugging Face's default max_shard_size ("5GB"). */
#define EXPORT_DEFAULT_SHARD_BYTES 5000000000ull
/* Shards one directory may hold (util/output.h: LB_OUTDIR_MAX_NAMES less
 * config.json, the index, model.safetensors and the tokenizer files). */
#define EXPORT_MAX_SHARDS 36
#define EXPORT_FIXED_NAMES (3 + LB_HF_TOKENIZER_FILES)

/* One output tensor, as described, then as written. */
typedef struct planned {
    char *name;
    lb_dtype dtype;
    int n_dims;
    uint64_t shape[4];
    uint64_t bytes, sum;  /* sum: checksum of the bytes written */
    size_t entry;         /* SIZE_MAX: a per-model extra */
    uint32_t shard;
} planned;

typedef struct job {
    const lb_qmodel *q;
    const lb__exporter *x;
    const lb_export_options *o;
    planned *p;
    size_t n_p, cap_p;
    int describing;          /* emit records the plan; else it writes */
    size_t entry;            /* the entry being emitted */
    size_t next;             /* writing: the planned tensor emit must give next */
    lb__st_stream s;         /* the shard being written */
    size_t shard_first;      /* its first tensor in p (its slot 0) */
    lb__st_out_tensor *list; /* its header list */
    float *scratch;          /* the fp32 values of the entry being written (the largest entry's size) */
    size_t scratch_n;
    lb_export_result r;
    uint64_t weight_bytes;   /* every byte written for the weights, scales included */
} job;

/* A 64-bit checksum of n bytes: four lanes of 8-byte words, each a running
 * sum and a sum of running sums (Fletcher's scheme, so a word's position
 * counts, not only its value), folded with the tail and the length by a
 * multiply-xorshift at the end. Adds only: it runs at memory speed, where
 * a byte-at-a-time FNV-1a, or a multiply per word, cost more than the
 * quantizer. It only needs to catch bytes that read back different. */
static uint64_t mix(uint64_t h, uint64_t w)
{
    h = (h ^ w) * 0x9E3779B97F4A7C15ull;
    return h ^ (h >> 31);
}

static uint64_t checksum(const uint8_t *p, uint64_t n)
{
    uint64_t a[4] = {0x243F6A8885A308D3ull, 0x13198A2E03707344ull, 0xA4093822299F31D0ull, 0x082EFA98EC4E6C89ull};
    uint64_t b[4] = {0, 0, 0, 0}, i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; k++) {
            uint64_t w;
            memcpy(&w, p + i + 8 * k, 8);
            a[k] += w, b[k] += a[k];
        }
    uint64_t tail = 0, h = n;
    for (int k = 0; i < n; i++, k++) {
        if (k == 8) h = mix(h, tail), tail = 0, k = 0;
        tail |= (uint64_t)p[i] << (8 * k);
    }
    h = mix(h, tail);
    for (int k = 0; k < 4; k++) h = mix(mix(h, a[k]), b[k]);
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

static lb_status describe(job *j, const lb__out_tensor *t, lb_dtype d)
{
    if (j->n_p == j->cap_p) {
        size_t cap = j->cap_p ? 2 * j->cap_p : 256;
        planned *p = realloc(j->p, cap * sizeof *p);
        if (!p) return lb__fail(LB_ERR_NOMEM, "out of memory");
        j->p = p, j->cap_p = cap;
    }
    planned *p = &j->p[j->n_p];
    memset(p, 0, sizeof *p);
    if (!(p->name = strdup(t->name))) return lb__fail(LB_ERR_NOMEM, "out of memory");
    p->dtype = d, p->n_dims = t->n_dims, p->bytes = t->bytes, p->entry = j->entry;
    for (int k = 0; k < t->n_dims; k++) p->shape[k] = t->shape[k];
    j->n_p++;
    return LB_OK;
}

/* Writing: the tensor must be the one described next; its bytes go to
 * their place in the open shard. */
static lb_status put(job *j, const lb__out_tensor *t, lb_dtype d)
{
    planned *p = j->next < j->n_p ? &j->p[j->next] : NULL;
    int same = p && strcmp(p->name, t->name) == 0 && p->dtype == d && p->n_dims == t->n_dims && p->bytes == t->bytes;
    for (int k = 0; same && k < t->n_dims; k++) same = p->shape[k] == t->shape[k];
    if (!same)
        return lb__fail(LB_ERR_ARG, "tensor '%s': the %s exporter emitted it differently from how it described it "
                        "(expected '%s')", t->name, j->x->name, p ? p->name : "nothing");
    if (t->bytes && !t->data) return lb__fail(LB_ERR_ARG, "tensor '%s': emitted without data", t->name);
    p->sum = checksum(t->data, t->bytes);
    lb_status st = lb__st_stream_put(&j->s, j->next - j->shard_first, t->data, t->bytes);
    if (st == LB_OK) j->next++;
    return st;
}

static lb_status emit(void *sink, const lb__out_tensor *t)
{
    job *j = sink;
    lb_dtype d;
    if (!lb__st_dtype_from_name(t->dtype, &d))
        return lb__fail(LB_ERR_ARG, "tensor '%s': exporter emitted unknown dtype '%s'", t->name, t->dtype);
    if (t->n_dims < 0 || t->n_dims > 4) return lb__fail(LB_ERR_ARG, "tensor '%s': %d dims", t->name, t->n_dims);
    return j->describing ? describe(j, t, d) : put(j, t, d);
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
        float *v = j->scratch, *p = heads ? malloc(n * sizeof *p + 4) : NULL;
        if (heads && !p) st = lb__fail(LB_ERR_NOMEM, "out of memory reading '%s'", t->name);
        if (st == LB_OK) st = lb_qmodel_values_f32(q, i, v, j->o->threads);
        lb_tensor_release(t);
        if (st == LB_OK && heads) st = permute(v, p, rows, (size_t)(n / rows) * sizeof *v, heads);
        if (st == LB_OK) st = j->x->tensor(q, i, heads ? p : v, NULL, emit, j);
        free(p);
        return st;
    }
    lb_qtensor *qt = NULL;
    int owned = 0;
    st = lb__qmodel_quantized_scratch(q, i, j->o->threads, j->scratch, &qt, &owned);
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

/* Describes entry i: the exporter given its sizes only (exporter.h). */
static lb_status describe_entry(job *j, size_t i)
{
    lb_qentry e;
    lb_status st = lb_qmodel_entry(j->q, i, &e);
    if (st != LB_OK) return st;
    j->entry = i;
    if (e.state != LB_QSTATE_QUANTIZED) return j->x->tensor(j->q, i, NULL, NULL, emit, j);
    const lb_tensor *t = e.tensor;
    if (t->n_dims != 2) return lb__fail(LB_ERR_ARG, "tensor '%s': quantized but not 2-D", t->name);
    lb_qtensor_view v;
    lb__qtensor_layout(&e.spec, (size_t)t->shape[0], (size_t)t->shape[1], &v);
    return j->x->tensor(j->q, i, NULL, &v, emit, j);
}

static void shard_name(char *buf, size_t size, uint32_t s, uint32_t n)
{
    if (n == 1) snprintf(buf, size, "model.safetensors");
    else snprintf(buf, size, "model-%05u-of-%05u.safetensors", s + 1, n);
}

/* Opens shard s (its tensors are p[first..], contiguous) and writes its header. */
static lb_status open_shard(job *j, const char *dir, uint32_t s, uint32_t n_shards)
{
    size_t first = 0, n = 0;
    while (first < j->n_p && j->p[first].shard != s) first++;
    while (first + n < j->n_p && j->p[first + n].shard == s) n++;
    char name[64];
    shard_name(name, sizeof name, s, n_shards);
    char *path = lb__path_join(dir, name);
    free(j->list);
    j->list = calloc(n ? n : 1, sizeof *j->list);
    lb_status st = path && j->list ? LB_OK : lb__fail(LB_ERR_NOMEM, "out of memory");
    for (size_t k = 0; k < n && st == LB_OK; k++) {
        const planned *p = &j->p[first + k];
        lb__st_out_tensor *t = &j->list[k];
        t->name = p->name, t->dtype = p->dtype, t->n_dims = p->n_dims;
        for (int d = 0; d < p->n_dims; d++) t->shape[d] = p->shape[d];
    }
    const char *keys[] = {"format"}, *values[] = {"pt"};
    if (st == LB_OK) st = lb__st_stream_open(path, j->list, n, keys, values, 1, &j->s);
    if (st == LB_OK) j->shard_first = first, j->next = first;
    free(path);
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
    for (size_t i = 0; i < j->n_p; i++) {
        shard_name(name, sizeof name, j->p[i].shard, n_shards);
        lb__jsonw_key(w, j->p[i].name), lb__jsonw_str(w, name);
    }
    lb__jsonw_end(w);
    lb__jsonw_end(w);
    lb_status st = write_json_file(dir, "model.safetensors.index.json", w);
    lb__jsonw_free(w);
    return st;
}

/* Drops the pages of a read-back range from memory (they are in the page
 * cache; keeping them mapped would make the check cost the output's size
 * in resident memory). */
static void release(const uint8_t *p, uint64_t n)
{
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t ps = page > 0 ? (uintptr_t)page : 4096, a = (uintptr_t)p / ps * ps, b = ((uintptr_t)p + n) / ps * ps;
    if (b > a) madvise((void *)a, b - a, MADV_DONTNEED);
}

/* Every shard read back with lowbit's reader: each tensor the exporter
 * emitted is there with its dtype, its shape and the same bytes. */
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
        for (size_t i = 0; i < j->n_p && st == LB_OK; i++) {
            const planned *p = &j->p[i];
            if (p->shard != s) continue;
            const lb__st_tensor *t = lb__st_find(&f, p->name);
            int same = t && t->dtype == p->dtype && t->n_dims == p->n_dims && t->end - t->begin == p->bytes;
            for (int k = 0; same && k < p->n_dims; k++) same = t->shape[k] == p->shape[k];
            if (!t) st = lb__fail(LB_ERR_IO, "verify: '%s' is missing from %s", p->name, name);
            else if (!same || checksum(t->data, p->bytes) != p->sum)
                st = lb__fail(LB_ERR_IO, "verify: '%s' in %s reads back different from what was written", p->name, name);
            if (t) release(t->data, p->bytes);
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
    lb_status st = lb__qmodel_check_no_outliers(q, x->name);
    if (st == LB_OK) st = x->check(q);
    for (size_t i = 0; st == LB_OK && i < lb_qmodel_count(q); i++) {
        lb_qentry e;
        if ((st = lb_qmodel_entry(q, i, &e)) == LB_OK && e.ggml != LB_DT_COUNT)
            st = lb__fail(LB_ERR_UNSUPPORTED, "tensor '%s' is set to be stored as ggml type %s, which only a GGUF "
                          "holds (lb_export_gguf; lowbit quantize --format gguf)", e.tensor->name,
                          lb_dtype_get(e.ggml)->name);
        if (st == LB_OK && e.state == LB_QSTATE_QUANTIZED)
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

/* The plan: every output tensor described, each assigned to its entry's
 * shard (the per-model extras to the last). */
static lb_status plan_tensors(job *j, const uint32_t *shard, uint32_t n_shards)
{
    size_t n = lb_qmodel_count(j->q);
    lb_status st = LB_OK;
    j->describing = 1;
    for (size_t i = 0; i < n && st == LB_OK; i++) st = describe_entry(j, i);
    if (st == LB_OK && n && j->x->extras) j->entry = SIZE_MAX, st = j->x->extras(j->q, emit, j);
    j->describing = 0;
    /* one fp32 buffer for every entry's values, faulted in once: a fresh one
     * a tensor cost more in page faults than the quantizer's work */
    for (size_t i = 0; i < n && st == LB_OK; i++) {
        lb_qentry e;
        st = lb_qmodel_entry(j->q, i, &e);
        if (st == LB_OK && e.tensor->n_elements > j->scratch_n) j->scratch_n = (size_t)e.tensor->n_elements;
    }
    if (st == LB_OK && j->scratch_n > SIZE_MAX / sizeof(float) - 1)
        st = lb__fail(LB_ERR_NOMEM, "a tensor of %zu values is more than this machine can address", j->scratch_n);
    if (st == LB_OK && !(j->scratch = lb__alloc_large((j->scratch_n + 1) * sizeof(float))))
        st = lb__fail(LB_ERR_NOMEM, "out of memory for %zu fp32 values (the largest tensor)", j->scratch_n);
    for (size_t k = 0; k < j->n_p && st == LB_OK; k++) {
        planned *p = &j->p[k];
        p->shard = p->entry == SIZE_MAX ? n_shards - 1 : shard[p->entry];
        j->r.bytes += p->bytes;
        if (p->entry != SIZE_MAX) {
            lb_qentry e;
            st = lb_qmodel_entry(j->q, p->entry, &e);
            if (st == LB_OK && lb_tensor_is_weight(e.tensor)) j->weight_bytes += p->bytes;
        }
    }
    return st;
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
    /* every header is known before anything is written or quantized */
    if (st == LB_OK) st = plan_tensors(&j, shard, n_shards);
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
    /* tensors, one entry at a time, shard by shard; a per-model extra (KV scales) in the last */
    for (size_t i = 0; i < n && st == LB_OK; i++) {
        if (i == 0 || shard[i] != shard[i - 1]) st = open_shard(&j, d.tmp_path, shard[i], n_shards);
        if (st == LB_OK) st = emit_entry(&j, i);
        lb_qentry e;
        if (st == LB_OK) st = lb_qmodel_entry(q, i, &e);
        if (st == LB_OK) {
            j.r.tensors++;
            j.r.quantized += e.state == LB_QSTATE_QUANTIZED;
        }
        if (st == LB_OK && i + 1 == n && j.x->extras) j.entry = SIZE_MAX, st = j.x->extras(q, emit, &j);
        if (st == LB_OK && (i + 1 == n || shard[i + 1] != shard[i])) st = lb__st_stream_commit(&j.s);
        if (st == LB_OK && o->progress) o->progress(o->progress_ctx, i + 1, n);
    }
    lb__st_stream_abort(&j.s); /* a shard left open by a failure: its temporary goes */
    if (st == LB_OK && j.next != j.n_p)
        st = lb__fail(LB_ERR_ARG, "the %s exporter described '%s' but never emitted it", j.x->name, j.p[j.next].name);
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
    free(shard), free(j.list);
    lb__free_large(j.scratch, (j.scratch_n + 1) * sizeof(float));
    for (size_t i = 0; i < j.n_p; i++) free(j.p[i].name);
    free(j.p);
    if (st == LB_OK && out) {
        j.r.shards = n_shards;
        j.r.bits_per_weight = j.r.weight_params ? 8.0 * (double)j.weight_bytes / (double)j.r.weight_params : 0;
        *out = j.r;
    }
    return st;
}
