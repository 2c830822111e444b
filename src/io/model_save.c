/* lb_model_save: any model view out as GGUF, safetensors, or a Hugging
 * Face directory. Tensors stream one at a time from the source mapping
 * through fp32 (when their type or rotary layout changes) into the
 * writer; only one tensor is ever held in memory. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include "export/hf_tokenizer.h"
#include "export/hf_tokenizer_internal.h"
#include "io/dtype.h"
#include "io/model_internal.h"
#include "util/error.h"

typedef enum target { TO_GGUF, TO_SAFETENSORS, TO_HF_DIR } target;

typedef struct out_tensor {
    const lb_tensor *src;
    char name[160];
    lb_dtype dtype;
    uint32_t permute_heads; /* q/k rows to move between rotary layouts: the head count, or 0 */
} out_tensor;

typedef struct save_job {
    const lb_model *m;
    out_tensor *t;
    size_t n;
    lb_rope_layout layout; /* the target's */
    float *buf, *tmp;
    size_t cap;
    int allow_nonfinite; /* copy NaN/infinite weights instead of refusing them */
    lb_progress_fn progress; /* after each tensor filled */
    void *progress_ctx;
    size_t filled;
} save_job;

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static int is_float_dtype(lb_dtype d) { return d == LB_DT_F32 || d == LB_DT_F16 || d == LB_DT_BF16; }

/* llama.cpp runs the llama family with adjacent rotary pairs; qwen2/qwen3
 * (and Hugging Face everywhere) with half-split ones. */
lb_rope_layout lb__gguf_rope_layout(const lb_arch *a)
{
    return strcmp(a->name, "llama") == 0 || strcmp(a->name, "mistral") == 0 ? LB_ROPE_ADJACENT : LB_ROPE_HALF;
}

static lb_rope_layout target_layout(target to, const lb_arch *a)
{
    return to == TO_GGUF ? lb__gguf_rope_layout(a) : LB_ROPE_HALF;
}

/* q and k projections (weights and biases) carry rotary pairs in their rows. */
static int is_rotary(const lb_tensor *t)
{
    size_t n = strlen(t->name);
    const char *tail = n > 24 ? t->name + n - 24 : t->name;
    return strstr(tail, "self_attn.q_proj.") != NULL || strstr(tail, "self_attn.k_proj.") != NULL;
}

/* How many heads a rotary tensor's rows hold (0: unknown). */
static uint32_t rotary_heads(const lb_tensor *t, const lb_arch *a)
{
    size_t n = strlen(t->name);
    const char *tail = n > 24 ? t->name + n - 24 : t->name;
    return strstr(tail, "self_attn.q_proj.") ? a->n_heads : a->n_kv_heads;
}

static lb_dtype output_dtype(const lb_tensor *t, lb_dtype want)
{
    /* integer and bool tensors keep their type: they are ids or masks, not weights */
    if (t->dtype >= LB_DT_I8 && t->dtype <= LB_DT_BOOL) return t->dtype;
    const lb_dtype_info *w = want < LB_DT_COUNT ? lb_dtype_get(want) : NULL;
    if (!w) return is_float_dtype(t->dtype) || !lb_dtype_get(t->dtype)->can_read ? t->dtype : LB_DT_F32;
    if (w->block > 1) { /* block types: weight matrices with whole-block rows only */
        uint64_t cols = t->n_dims >= 2 && t->shape[0] ? t->n_elements / t->shape[0] : t->n_elements;
        return lb_tensor_is_weight(t) && cols > 0 && cols % w->block == 0 ? want : LB_DT_F32;
    }
    return want;
}

/* Rows of each head from one rotary layout to the other: half-split keeps
 * pair (j, j + hd/2) in rows j and j + hd/2; adjacent in rows 2j and 2j+1. */
void lb__permute_rotary_rows(const float *src, float *dst, uint64_t rows, uint64_t cols, uint32_t heads,
                             int to_adjacent)
{
    uint64_t hd = rows / heads, half = hd / 2;
    for (uint64_t h = 0; h < heads; h++)
        for (uint64_t j = 0; j < half; j++)
            for (uint64_t p = 0; p < 2; p++) {
                uint64_t split = h * hd + p * half + j, adjacent = h * hd + 2 * j + p;
                uint64_t from = to_adjacent ? split : adjacent, to = to_adjacent ? adjacent : split;
                memcpy(dst + to * cols, src + from * cols, cols * sizeof *dst);
            }
}

/* NaN and infinities are refused as inspect refuses them (one policy):
 * copying them would pass a broken checkpoint on silently. */
static lb_status refuse_nonfinite(const lb_tensor *t, const float *x, size_t n)
{
    for (size_t k = 0; k < n; k++)
        if (!isfinite(x[k]))
            return lb__fail(LB_ERR_NAN, "tensor '%s': element %zu is %s; not copying a non-finite weight "
                            "(convert --allow-nonfinite copies it)", t->name, k, isnan(x[k]) ? "NaN" : "infinite");
    return LB_OK;
}

static lb_status grow(save_job *j, size_t n, const char *name)
{
    if (n <= j->cap) return LB_OK;
    float *a = realloc(j->buf, n * sizeof *a), *b = a ? realloc(j->tmp, n * sizeof *b) : NULL;
    if (a) j->buf = a;
    if (b) j->tmp = b;
    if (!a || !b) return lb__fail(LB_ERR_NOMEM, "out of memory for tensor '%s'", name);
    j->cap = n;
    return LB_OK;
}

/* Integer and bool tensors hold ids and masks, no NaN; every other type
 * lowbit reads is checked through fp32. */
static int may_hold_nonfinite(lb_dtype d) { return !(d >= LB_DT_I8 && d <= LB_DT_BOOL) && lb_dtype_get(d)->can_read; }
static lb_status fill_one(save_job *j, size_t i, void *dst, uint64_t n_bytes);

static lb_status fill_tensor(void *ctx, size_t i, void *dst, uint64_t n_bytes)
{
    save_job *j = ctx;
    lb_status st = fill_one(j, i, dst, n_bytes);
    if (st == LB_OK && j->progress) j->progress(j->progress_ctx, ++j->filled, j->n);
    return st;
}

static lb_status fill_one(save_job *j, size_t i, void *dst, uint64_t n_bytes)
{
    const out_tensor *o = &j->t[i];
    const lb_tensor *t = o->src;
    if (t->n_elements == 0 || n_bytes == 0) return LB_OK; /* an empty tensor has no bytes */
    size_t n = (size_t)t->n_elements;
    int check = !j->allow_nonfinite && may_hold_nonfinite(t->dtype);
    lb_status st = LB_OK;
    if (o->dtype == t->dtype && !o->permute_heads) {
        if (n_bytes != t->n_bytes) return lb__fail(LB_ERR_ARG, "size mismatch copying '%s'", t->name);
        if (check && (st = grow(j, n, t->name)) == LB_OK && (st = lb_tensor_to_f32(t, j->buf)) == LB_OK)
            st = refuse_nonfinite(t, j->buf, n);
        if (st == LB_OK) memcpy(dst, t->data, n_bytes);
        lb_tensor_release(t);
        return st;
    }
    if ((st = grow(j, n, t->name)) != LB_OK) return st;
    st = lb_tensor_to_f32(t, j->buf);
    lb_tensor_release(t);
    if (st == LB_OK && check) st = refuse_nonfinite(t, j->buf, n);
    if (st != LB_OK) return st;
    float *vals = j->buf;
    if (o->permute_heads) {
        uint64_t rows = t->shape[0], cols = n / rows; /* plan() made sure rows > 0 */
        lb__permute_rotary_rows(j->buf, j->tmp, rows, cols, o->permute_heads, j->layout == LB_ROPE_ADJACENT);
        vals = j->tmp;
    }
    return lb_dtype_from_f32(o->dtype, vals, n, dst);
}

static lb_status plan(const lb_model *m, target to, lb_dtype dtype, save_job *j)
{
    const lb_arch *a = &m->arch;
    j->m = m, j->n = m->n_tensors;
    j->layout = target_layout(to, a);
    j->t = calloc(j->n ? j->n : 1, sizeof *j->t);
    if (!j->t) return lb__fail(LB_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < j->n; i++) {
        const lb_tensor *t = &m->tensors[i];
        out_tensor *o = &j->t[i];
        o->src = t;
        if (strlen(t->name) + 1 > sizeof o->name) /* GGUF caps names at 64 bytes; safetensors names this long are odd */
            return lb__fail(LB_ERR_UNSUPPORTED, "tensor name '%.60s...' is %zu bytes, longer than lowbit writes (%zu)",
                            t->name, strlen(t->name), sizeof o->name - 1);
        if (to == TO_GGUF) lb_name_to_gguf(t->name, o->name, sizeof o->name);
        else snprintf(o->name, sizeof o->name, "%s", t->name);
        o->dtype = output_dtype(t, dtype);
        if (to == TO_GGUF ? lb_dtype_get(o->dtype)->ggml_type < 0 : !lb_dtype_get(o->dtype)->st_name)
            return lb__fail(LB_ERR_UNSUPPORTED, "tensor '%s': %s cannot store %s", t->name,
                            to == TO_GGUF ? "GGUF" : "safetensors", lb_dtype_get(o->dtype)->name);
        if (o->dtype != t->dtype && !lb_dtype_get(o->dtype)->can_write)
            return lb__fail(LB_ERR_UNSUPPORTED, "tensor '%s': lowbit does not write %s", t->name,
                            lb_dtype_get(o->dtype)->name);
        lb_status st = lb__rotary_permute_heads(m, t, j->layout, &o->permute_heads);
        if (st != LB_OK) return st;
    }
    return LB_OK;
}

lb_status lb__rotary_permute_heads(const lb_model *m, const lb_tensor *t, lb_rope_layout to, uint32_t *heads)
{
    const lb_arch *a = &m->arch;
    *heads = 0;
    if (a->rope_layout == to || !is_rotary(t) || t->n_elements == 0) return LB_OK;
    uint32_t h = rotary_heads(t, a);
    uint64_t rows = t->n_dims >= 1 ? t->shape[0] : 0;
    if (h == 0) /* never write q/k rows in the wrong layout */
        return lb__fail(LB_ERR_PARSE, "tensor '%s': its rows must be permuted between rotary layouts, but the "
                                      "model does not say its number of heads", t->name);
    if (rows == 0 || rows % h || (rows / h) % 2)
        return lb__fail(LB_ERR_PARSE, "tensor '%s': %llu rows do not split into %u heads of even size", t->name,
                        (unsigned long long)rows, h);
    *heads = h;
    return LB_OK;
}

/* ----- GGUF ----- */

/* Architecture keys lowbit knows how to state, from lb_arch. */
typedef struct arch_key {
    const char *suffix;
    int is_float;
    double value;
} arch_key;

static size_t arch_keys(const lb_arch *a, arch_key *k)
{
    size_t n = 0;
    k[n++] = (arch_key){"block_count", 0, a->n_layers};
    k[n++] = (arch_key){"context_length", 0, a->max_seq_len};
    k[n++] = (arch_key){"embedding_length", 0, a->dim};
    k[n++] = (arch_key){"feed_forward_length", 0, a->hidden_dim};
    k[n++] = (arch_key){"attention.head_count", 0, a->n_heads};
    k[n++] = (arch_key){"attention.head_count_kv", 0, a->n_kv_heads};
    k[n++] = (arch_key){"attention.key_length", 0, a->head_dim};
    k[n++] = (arch_key){"attention.value_length", 0, a->head_dim};
    k[n++] = (arch_key){"rope.dimension_count", 0, a->head_dim};
    k[n++] = (arch_key){"vocab_size", 0, a->vocab_size};
    k[n++] = (arch_key){"rope.freq_base", 1, a->rope_theta};
    k[n++] = (arch_key){"attention.layer_norm_rms_epsilon", 1, a->norm_eps};
    return n;
}

/* A GGUF source's metadata is carried over as it is (tokenizer, names,
 * every architecture key), alignment and file type aside; keys lowbit can
 * state that the source lacks are added. Other sources get lowbit's keys. */
/* Keys llama-quantize drops from its input's metadata: it sets the first
 * two again (at the end), and writes one file, not a split. */
static int quantize_drops(const char *key)
{
    static const char *const dropped[] = {"general.quantization_version", "general.file_type", "split.no",
                                          "split.count", "split.tensors.count"};
    for (size_t k = 0; k < sizeof dropped / sizeof *dropped; k++)
        if (strcmp(key, dropped[k]) == 0) return 1;
    return 0;
}

static int listed(const char *key, const char *const *list)
{
    for (; list && *list; list++)
        if (strcmp(key, *list) == 0) return 1;
    return 0;
}

lb_status lb__gguf_model_metadata(const lb_model *m, lb__gguf_writer *w, int as_quantize, const char *const *reset)
{
    const lb_arch *a = &m->arch;
    lb_status st = LB_OK;
    int from_gguf = m->kind == LB_MODEL_GGUF;
    if (from_gguf)
        for (size_t i = 0; st == LB_OK && i < m->gguf.n_kv; i++) {
            const lb__gguf_kv *kv = &m->gguf.kv[i];
            int skip = as_quantize ? quantize_drops(kv->key)
                                   : strcmp(kv->key, "general.alignment") == 0 || strcmp(kv->key, "general.file_type") == 0;
            if (!skip && !listed(kv->key, reset)) st = lb__gguf_copy_kv(w, kv);
        }
    if (from_gguf && as_quantize) return st; /* llama-quantize adds nothing to a GGUF's keys */
    if (st == LB_OK && !from_gguf && (m->kind == LB_MODEL_HF_DIR || m->kind == LB_MODEL_SAFETENSORS) && m->path) {
        /* a Hugging Face input keeps its tokenizer (export/hf_tokenizer_to_gguf.c) */
        char *dir = NULL;
        if (m->kind == LB_MODEL_HF_DIR) dir = strdup(m->path);
        else if ((dir = strdup(m->path)) != NULL) {
            char *slash = strrchr(dir, '/');
            if (!slash) strcpy(dir, ".");
            else if (slash == dir) dir[1] = '\0';
            else *slash = '\0';
        }
        st = dir ? lb__hf_tokenizer_to_gguf(dir, w) : lb__fail(LB_ERR_NOMEM, "out of memory");
        free(dir);
    }
    if (st != LB_OK || !a->name[0]) return st; /* no architecture: tensors only */
    if (!from_gguf || !lb__gguf_find(&m->gguf, "general.architecture"))
        st = lb__gguf_set_str(w, "general.architecture", a->name, strlen(a->name));
    arch_key keys[16];
    size_t n = arch_keys(a, keys);
    char key[96];
    for (size_t i = 0; st == LB_OK && i < n; i++) {
        snprintf(key, sizeof key, "%s.%s", a->name, keys[i].suffix);
        if ((from_gguf && lb__gguf_find(&m->gguf, key)) || (!keys[i].is_float && keys[i].value == 0)) continue;
        st = keys[i].is_float ? lb__gguf_set_f32(w, key, (float)keys[i].value)
                              : lb__gguf_set_u32(w, key, (uint32_t)keys[i].value);
    }
    return st;
}

static lb_status save_gguf(const lb_model *m, save_job *j, const char *path)
{
    lb__gguf_writer *w;
    lb_status st = lb__gguf_writer_new(&w);
    if (st != LB_OK) return st;
    st = lb__gguf_model_metadata(m, w, 0, NULL);
    for (size_t i = 0; st == LB_OK && i < j->n; i++) {
        const lb_tensor *t = j->t[i].src;
        if (t->n_dims > 4) {
            st = lb__fail(LB_ERR_UNSUPPORTED, "tensor '%s' has %d dimensions; GGUF holds at most 4", t->name, t->n_dims);
            break;
        }
        uint64_t ne[4] = {1, 1, 1, 1};
        int nd = t->n_dims ? t->n_dims : 1;
        for (int d = 0; d < t->n_dims; d++) ne[d] = t->shape[t->n_dims - 1 - d];
        st = lb__gguf_add_tensor(w, j->t[i].name, j->t[i].dtype, nd, ne);
    }
    if (st == LB_OK) st = lb__gguf_write(w, path, fill_tensor, j);
    lb__gguf_writer_free(w);
    return st;
}

/* ----- safetensors and Hugging Face directories ----- */

static lb_status save_safetensors(save_job *j, const char *path)
{
    lb__st_out_tensor *t = calloc(j->n ? j->n : 1, sizeof *t);
    if (!t) return lb__fail(LB_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < j->n; i++) {
        const lb_tensor *s = j->t[i].src;
        t[i].name = j->t[i].name;
        t[i].dtype = j->t[i].dtype;
        t[i].n_dims = s->n_dims;
        memcpy(t[i].shape, s->shape, sizeof t[i].shape);
    }
    /* transformers reads the "format" metadata to know the tensors are PyTorch's */
    const char *keys[] = {"format"}, *values[] = {"pt"};
    lb_status st = lb__st_write(path, t, j->n, keys, values, 1, fill_tensor, j);
    free(t);
    return st;
}

/* config.json's architectures[] entry: arch_support.c's table */
static const char *hf_class(const char *arch)
{
    const char *cls = lb__arch_hf_class(arch);
    return cls ? cls : "LlamaForCausalLM";
}

/* The shortest decimal that reads back as the same fp32 value: GGUF stores
 * eps and theta as fp32, and 1e-05 reads better than 9.99999975e-06. */
static void shortest_float(char *buf, size_t size, double v)
{
    if (fabs(v) < 1e15 && v == floor(v)) { /* 10000, not 1e+04 (the range first: the cast needs it) */
        snprintf(buf, size, "%lld", (long long)v);
        return;
    }
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, size, "%.*g", p, v);
        if ((float)strtod(buf, NULL) == (float)v) return;
    }
}

/* The architectures whose config.json lowbit writes: the ones the forward
 * pass runs (arch_support.c's table), whose fields lb_arch holds completely. */
static int hf_arch(const char *name) { return lb__arch_hf_class(name) != NULL; }

/* torch_dtype: the floating-point type the tensors were written in. */
static const char *torch_dtype(const save_job *j)
{
    int bf16 = 0, f16 = 0, f32 = 0;
    for (size_t i = 0; i < j->n; i++) {
        lb_dtype d = j->t[i].dtype;
        bf16 |= d == LB_DT_BF16, f16 |= d == LB_DT_F16, f32 |= d == LB_DT_F32 || d == LB_DT_F64;
    }
    return f32 || (bf16 && f16) ? "float32" : bf16 ? "bfloat16" : f16 ? "float16" : "float32";
}

/* config.json of a Hugging Face directory: the architecture lb_arch holds,
 * torch_dtype, and (lowbit quantize) a "quantization_config" value that is
 * already JSON (NULL: none). Shared with src/export/export.c. */
lb_status lb__hf_config_write(const lb_model *m, const char *path, const char *torch_dtype_name, const char *quant_json)
{
    const lb_arch *a = &m->arch;
    const char *model_type = a->name;
    char theta[32], eps[32], text[2048];
    shortest_float(theta, sizeof theta, a->rope_theta);
    shortest_float(eps, sizeof eps, a->norm_eps);
    int n = snprintf(text, sizeof text,
                     "{\n  \"architectures\": [\"%s\"],\n  \"model_type\": \"%s\",\n  \"hidden_size\": %u,\n"
                     "  \"intermediate_size\": %u,\n  \"num_hidden_layers\": %u,\n  \"num_attention_heads\": %u,\n"
                     "  \"num_key_value_heads\": %u,\n  \"head_dim\": %u,\n  \"vocab_size\": %u,\n"
                     "  \"max_position_embeddings\": %u,\n  \"rope_theta\": %s,\n  \"rms_norm_eps\": %s,\n"
                     "  \"tie_word_embeddings\": %s,\n  \"attention_bias\": %s,\n  \"hidden_act\": \"silu\",\n"
                     "  \"torch_dtype\": \"%s\"",
                     hf_class(a->name), model_type, a->dim, a->hidden_dim, a->n_layers, a->n_heads, a->n_kv_heads,
                     a->head_dim, a->vocab_size, a->max_seq_len ? a->max_seq_len : 2048, theta, eps,
                     a->tied_embeddings ? "true" : "false", a->qkv_bias ? "true" : "false", torch_dtype_name);
    if (n < 0 || (size_t)n >= sizeof text) return lb__fail(LB_ERR_ARG, "config.json: architecture name too long");
    lb__outfile o;
    lb_status st = lb__out_open(path, &o);
    if (st != LB_OK) return st;
    st = lb__out_write(&o, text, (size_t)n);
    if (st == LB_OK && quant_json) {
        /* the value's own lines, one level deeper */
        st = lb__out_write(&o, ",\n  \"quantization_config\": ", 27);
        for (const char *p = quant_json; *p && st == LB_OK; p++)
            st = *p == '\n' ? lb__out_write(&o, "\n  ", 3) : lb__out_write(&o, p, 1);
    }
    if (st == LB_OK) st = lb__out_write(&o, "\n}\n", 3);
    if (st != LB_OK) {
        lb__out_abort(&o);
        return st;
    }
    return lb__out_commit(&o);
}

static lb_status write_config(const lb_model *m, const char *path, const save_job *j)
{
    return lb__hf_config_write(m, path, torch_dtype(j), NULL);
}

/* What a Hugging Face directory written here holds: the weights, their
 * config and whichever tokenizer files the input gives
 * (export/hf_tokenizer.c). */
#define HF_FILES (2 + LB_HF_TOKENIZER_FILES)
static const char *const hf_files[HF_FILES] = {"config.json", "model.safetensors", LB_HF_TOKENIZER_NAMES};

/* Everything goes into a fresh directory beside the target, which is
 * renamed onto it at the end (util/file.h: lb__outdir). */
static lb_status save_hf_dir(const lb_model *m, save_job *j, const char *path)
{
    lb__outdir d;
    lb_status st = lb__outdir_open(path, hf_files, HF_FILES, &d);
    if (st != LB_OK) return st;
    char *cfg = lb__path_join(d.tmp_path, "config.json"), *st_path = lb__path_join(d.tmp_path, "model.safetensors");
    if (!cfg || !st_path) st = lb__fail(LB_ERR_NOMEM, "out of memory");
    if (st == LB_OK) st = save_safetensors(j, st_path);
    if (st == LB_OK) st = write_config(m, cfg, j);
    if (st == LB_OK) st = lb__hf_tokenizer_write(m, NULL, d.tmp_path, NULL);
    free(cfg), free(st_path);
    if (st == LB_OK) return lb__outdir_commit(&d);
    lb__outdir_abort(&d);
    return st;
}

static lb_status save(const lb_model *m, const char *path, const lb_save_options *o);

lb_status lb_model_save_opts(const lb_model *m, const char *path, const lb_save_options *o)
{
    if (!m || !path || !o) return lb__fail(LB_ERR_ARG, "lb_model_save: NULL argument");
    char *p = strdup(path); /* "out/" names the directory "out" */
    if (!p) return lb__fail(LB_ERR_NOMEM, "out of memory");
    for (size_t n = strlen(p); n > 1 && p[n - 1] == '/'; n--) p[n - 1] = '\0';
    lb_status st = save(m, p, o);
    free(p);
    return st;
}

lb_status lb_model_save(const lb_model *m, const char *path, lb_dtype dtype)
{
    lb_save_options o = {.dtype = dtype};
    return lb_model_save_opts(m, path, &o);
}

static lb_status save(const lb_model *m, const char *path, const lb_save_options *o)
{
    lb_dtype dtype = o->dtype;
    target to = ends_with(path, ".gguf") ? TO_GGUF : ends_with(path, ".safetensors") ? TO_SAFETENSORS : TO_HF_DIR;
    if (dtype != LB_DT_COUNT) {
        const lb_dtype_info *d = lb_dtype_get(dtype);
        int ok = d && (is_float_dtype(dtype) || (to == TO_GGUF && d->block > 1 && d->can_write));
        if (!ok)
            return lb__fail(LB_ERR_ARG, "cannot store a model as %s%s (f32, f16, bf16%s)", lb__dtype_name(dtype),
                            to == TO_GGUF ? " in GGUF" : "", to == TO_GGUF ? ", or a block type lowbit writes: q4_0, q4_1, q5_0, q5_1, q8_0, mxfp4, nvfp4, iq4_nl, iq4_xs"
                                           : "; block types need a .gguf output");
    }
    if (!path[0]) return lb__fail(LB_ERR_ARG, "the output path is empty");
    /* the destination rule before any work (the writers check it again) */
    lb__dest dest;
    lb_status st0 = to == TO_HF_DIR ? lb__dest_check_dir(path, hf_files, HF_FILES, &dest) : lb__dest_check_file(path, &dest);
    if (st0 != LB_OK) return st0;
    if (lb__model_reads(m, path))
        return lb__fail(LB_ERR_ARG, "'%s' is one of the files the model is read from; write elsewhere", path);
    if (to == TO_HF_DIR && !hf_arch(m->arch.name))
        return lb__fail(LB_ERR_UNSUPPORTED, "lowbit writes config.json for llama, mistral, qwen2 and qwen3, not for "
                                            "architecture '%s' (write a .safetensors file instead)", m->arch.name);
    if (to == TO_HF_DIR && (!m->arch.n_heads || !m->arch.head_dim || !m->arch.n_layers || !m->arch.dim))
        return lb__fail(LB_ERR_PARSE, "the model does not say its shape fully (heads %u, head_dim %u): cannot write "
                                      "config.json", m->arch.n_heads, m->arch.head_dim);
    lb_progress_fn progress = o->progress;
    void *ctx = o->progress_ctx;
    save_job j = {.allow_nonfinite = o->allow_nonfinite, .progress = progress, .progress_ctx = ctx};
    lb_status st = plan(m, to, dtype, &j);
    if (st == LB_OK && progress) progress(ctx, 0, j.n);
    if (st == LB_OK) {
        if (to == TO_GGUF) st = save_gguf(m, &j, path);
        else if (to == TO_SAFETENSORS) st = save_safetensors(&j, path);
        else st = save_hf_dir(m, &j, path);
    }
    free(j.t), free(j.buf), free(j.tmp);
    if (st == LB_ERR_ARG) { /* the writers' ARG (a name twice, too long) is about the model, not the call */
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", lb_last_error());
        st = lb__fail(LB_ERR_UNSUPPORTED, "%s", msg);
    }
    return st;
}
