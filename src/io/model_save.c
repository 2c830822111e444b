#define _DEFAULT_SOURCE /* mkdtemp */
/* lb_model_save: any model view out as GGUF, safetensors, or a Hugging
 * Face directory. Tensors stream one at a time from the source mapping
 * through fp32 (when their type or rotary layout changes) into the
 * writer; only one tensor is ever held in memory. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
} save_job;

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static int is_float_dtype(lb_dtype d) { return d == LB_DT_F32 || d == LB_DT_F16 || d == LB_DT_BF16; }

/* llama.cpp runs the llama family with adjacent rotary pairs; qwen2/qwen3
 * (and Hugging Face everywhere) with half-split ones. */
static lb_rope_layout target_layout(target to, const lb_arch *a)
{
    if (to != TO_GGUF) return LB_ROPE_HALF;
    return strcmp(a->name, "llama") == 0 || strcmp(a->name, "mistral") == 0 ? LB_ROPE_ADJACENT : LB_ROPE_HALF;
}

/* Which heads a tensor's rows hold, if it is a q or k projection. */
static uint32_t rotary_heads(const lb_tensor *t, const lb_arch *a)
{
    size_t n = strlen(t->name);
    const char *tail = n > 24 ? t->name + n - 24 : t->name;
    int q = strstr(tail, "self_attn.q_proj.") != NULL, k = strstr(tail, "self_attn.k_proj.") != NULL;
    if (!q && !k) return 0;
    return q ? a->n_heads : a->n_kv_heads;
}

static lb_dtype output_dtype(const lb_tensor *t, lb_dtype want, target to)
{
    const lb_dtype_info *w = want < LB_DT_COUNT ? lb_dtype_get(want) : NULL;
    if (!w) return is_float_dtype(t->dtype) || !lb_dtype_get(t->dtype)->can_read ? t->dtype : LB_DT_F32;
    if (w->block > 1) { /* block types: weight matrices with whole-block rows only */
        uint64_t cols = t->n_dims >= 2 ? t->n_elements / t->shape[0] : t->n_elements;
        return lb_tensor_is_weight(t) && cols % w->block == 0 ? want : LB_DT_F32;
    }
    (void)to;
    /* integer and bool tensors keep their type: they are ids or masks, not weights */
    int integral = t->dtype >= LB_DT_I8 && t->dtype <= LB_DT_BOOL;
    return integral ? t->dtype : want;
}

/* Rows of each head from one rotary layout to the other: half-split keeps
 * pair (j, j + hd/2) in rows j and j + hd/2; adjacent in rows 2j and 2j+1. */
static void permute_rows(const float *src, float *dst, uint64_t rows, uint64_t cols, uint32_t heads, int to_adjacent)
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

static lb_status fill_tensor(void *ctx, size_t i, void *dst, uint64_t n_bytes)
{
    save_job *j = ctx;
    const out_tensor *o = &j->t[i];
    const lb_tensor *t = o->src;
    if (o->dtype == t->dtype && !o->permute_heads) {
        if (n_bytes != t->n_bytes) return lb__fail(LB_ERR_ARG, "size mismatch copying '%s'", t->name);
        memcpy(dst, t->data, n_bytes);
        lb_tensor_release(t);
        return LB_OK;
    }
    size_t n = (size_t)t->n_elements;
    if (n > j->cap) {
        float *a = realloc(j->buf, n * sizeof *a), *b = a ? realloc(j->tmp, n * sizeof *b) : NULL;
        if (a) j->buf = a;
        if (b) j->tmp = b;
        if (!a || !b) return lb__fail(LB_ERR_NOMEM, "out of memory for tensor '%s'", t->name);
        j->cap = n;
    }
    lb_status st = lb_tensor_to_f32(t, j->buf);
    lb_tensor_release(t);
    if (st != LB_OK) return st;
    float *vals = j->buf;
    if (o->permute_heads) {
        uint64_t rows = t->shape[0], cols = t->n_dims >= 2 ? n / rows : 1;
        permute_rows(j->buf, j->tmp, rows, cols, o->permute_heads, j->layout == LB_ROPE_ADJACENT);
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
        if (to == TO_GGUF) lb_name_to_gguf(t->name, o->name, sizeof o->name);
        else snprintf(o->name, sizeof o->name, "%s", t->name);
        o->dtype = output_dtype(t, dtype, to);
        if (to == TO_GGUF ? lb_dtype_get(o->dtype)->ggml_type < 0 : !lb_dtype_get(o->dtype)->st_name)
            return lb__fail(LB_ERR_UNSUPPORTED, "tensor '%s': %s cannot store %s", t->name,
                            to == TO_GGUF ? "GGUF" : "safetensors", lb_dtype_get(o->dtype)->name);
        if (o->dtype != t->dtype && !lb_dtype_get(o->dtype)->can_write)
            return lb__fail(LB_ERR_UNSUPPORTED, "tensor '%s': lowbit does not write %s", t->name,
                            lb_dtype_get(o->dtype)->name);
        uint32_t heads = a->rope_layout != j->layout ? rotary_heads(t, a) : 0;
        if (heads) {
            uint64_t rows = t->shape[0];
            if (rows % heads || (rows / heads) % 2)
                return lb__fail(LB_ERR_PARSE, "tensor '%s': %llu rows do not split into %u heads of even size",
                                t->name, (unsigned long long)rows, heads);
            o->permute_heads = heads;
        }
    }
    return LB_OK;
}

/* ----- GGUF ----- */

static lb_status gguf_metadata(const lb_model *m, lb__gguf_writer *w)
{
    const lb_arch *a = &m->arch;
    lb_status st = LB_OK;
    if (!a->name[0]) return LB_OK; /* tensors only */
    char key[96];
#define SET_U32(suffix, v)                                              \
    do {                                                                \
        snprintf(key, sizeof key, "%s.%s", a->name, suffix);            \
        if (st == LB_OK && (v)) st = lb__gguf_set_u32(w, key, (v));     \
    } while (0)
#define SET_F32(suffix, v)                                              \
    do {                                                                \
        snprintf(key, sizeof key, "%s.%s", a->name, suffix);            \
        if (st == LB_OK) st = lb__gguf_set_f32(w, key, (float)(v));     \
    } while (0)
    st = lb__gguf_set_str(w, "general.architecture", a->name, strlen(a->name));
    SET_U32("block_count", a->n_layers);
    SET_U32("context_length", a->max_seq_len);
    SET_U32("embedding_length", a->dim);
    SET_U32("feed_forward_length", a->hidden_dim);
    SET_U32("attention.head_count", a->n_heads);
    SET_U32("attention.head_count_kv", a->n_kv_heads);
    SET_U32("attention.key_length", a->head_dim);
    SET_U32("attention.value_length", a->head_dim);
    SET_U32("rope.dimension_count", a->head_dim);
    SET_U32("vocab_size", a->vocab_size);
    SET_F32("rope.freq_base", a->rope_theta);
    SET_F32("attention.layer_norm_rms_epsilon", a->norm_eps);
#undef SET_U32
#undef SET_F32
    if (st != LB_OK || m->kind != LB_MODEL_GGUF) return st;
    /* everything else a GGUF source says (tokenizer, names, chat template) */
    size_t prefix = strlen(a->name);
    for (size_t i = 0; st == LB_OK && i < m->gguf.n_kv; i++) {
        const lb__gguf_kv *kv = &m->gguf.kv[i];
        int ours = strcmp(kv->key, "general.architecture") == 0 || strcmp(kv->key, "general.alignment") == 0 ||
                   strcmp(kv->key, "general.file_type") == 0 ||
                   (strncmp(kv->key, a->name, prefix) == 0 && kv->key[prefix] == '.');
        if (!ours) st = lb__gguf_copy_kv(w, kv);
    }
    /* architecture keys lowbit does not model (e.g. rope scaling) are carried too */
    for (size_t i = 0; st == LB_OK && i < m->gguf.n_kv; i++) {
        const lb__gguf_kv *kv = &m->gguf.kv[i];
        if (strncmp(kv->key, a->name, prefix) != 0 || kv->key[prefix] != '.') continue;
        static const char *const set[] = {"block_count", "context_length", "embedding_length", "feed_forward_length",
                                          "attention.head_count", "attention.head_count_kv", "attention.key_length",
                                          "attention.value_length", "rope.dimension_count", "vocab_size",
                                          "rope.freq_base", "attention.layer_norm_rms_epsilon"};
        int done = 0;
        for (size_t k = 0; k < sizeof set / sizeof set[0] && !done; k++) done = strcmp(kv->key + prefix + 1, set[k]) == 0;
        if (!done) st = lb__gguf_copy_kv(w, kv);
    }
    return st;
}

static lb_status save_gguf(const lb_model *m, save_job *j, const char *path)
{
    lb__gguf_writer *w;
    lb_status st = lb__gguf_writer_new(&w);
    if (st != LB_OK) return st;
    st = gguf_metadata(m, w);
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

static const char *hf_class(const char *arch)
{
    if (strcmp(arch, "mistral") == 0) return "MistralForCausalLM";
    if (strcmp(arch, "qwen2") == 0) return "Qwen2ForCausalLM";
    if (strcmp(arch, "qwen3") == 0) return "Qwen3ForCausalLM";
    return "LlamaForCausalLM";
}

/* The shortest decimal that reads back as the same fp32 value: GGUF stores
 * eps and theta as fp32, and 1e-05 reads better than 9.99999975e-06. */
static void shortest_float(char *buf, size_t size, double v)
{
    if (v == (double)(long long)v && v > -1e15 && v < 1e15) { /* 10000, not 1e+04 */
        snprintf(buf, size, "%lld", (long long)v);
        return;
    }
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, size, "%.*g", p, v);
        if ((float)strtod(buf, NULL) == (float)v) return;
    }
}

static lb_status write_config(const lb_model *m, const char *path, lb_dtype dtype)
{
    const lb_arch *a = &m->arch;
    const char *model_type = strcmp(a->name, "mistral") == 0 || strcmp(a->name, "qwen2") == 0 ||
                                     strcmp(a->name, "qwen3") == 0 ? a->name : "llama";
    const char *torch_dtype = dtype == LB_DT_BF16 ? "bfloat16" : dtype == LB_DT_F16 ? "float16" : "float32";
    char theta[32], eps[32], text[2048];
    shortest_float(theta, sizeof theta, a->rope_theta);
    shortest_float(eps, sizeof eps, a->norm_eps);
    int n = snprintf(text, sizeof text,
                     "{\n  \"architectures\": [\"%s\"],\n  \"model_type\": \"%s\",\n  \"hidden_size\": %u,\n"
                     "  \"intermediate_size\": %u,\n  \"num_hidden_layers\": %u,\n  \"num_attention_heads\": %u,\n"
                     "  \"num_key_value_heads\": %u,\n  \"head_dim\": %u,\n  \"vocab_size\": %u,\n"
                     "  \"max_position_embeddings\": %u,\n  \"rope_theta\": %s,\n  \"rms_norm_eps\": %s,\n"
                     "  \"tie_word_embeddings\": %s,\n  \"attention_bias\": %s,\n  \"hidden_act\": \"silu\",\n"
                     "  \"torch_dtype\": \"%s\"\n}\n",
                     hf_class(a->name), model_type, a->dim, a->hidden_dim, a->n_layers, a->n_heads, a->n_kv_heads,
                     a->head_dim, a->vocab_size, a->max_seq_len ? a->max_seq_len : 2048, theta, eps,
                     a->tied_embeddings ? "true" : "false", a->qkv_bias ? "true" : "false", torch_dtype);
    lb__outfile o;
    lb_status st = lb__out_open(path, &o);
    if (st != LB_OK) return st;
    st = lb__out_write(&o, text, (size_t)n);
    if (st != LB_OK) {
        lb__out_abort(&o);
        return st;
    }
    return lb__out_commit(&o);
}

static void remove_tree(const char *dir)
{
    static const char *const files[] = {"config.json", "model.safetensors"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char *p = lb__path_join(dir, files[i]);
        if (p) unlink(p);
        free(p);
    }
    rmdir(dir);
}

/* Everything goes into a fresh directory beside the target, which is
 * renamed onto it at the end (rename replaces an empty directory). */
static lb_status save_hf_dir(const lb_model *m, save_job *j, const char *path, lb_dtype dtype)
{
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISDIR(sb.st_mode))
        return lb__fail(LB_ERR_IO, "'%s' exists and is not a directory", path);
    size_t n = strlen(path);
    char *tmp = malloc(n + 16);
    if (!tmp) return lb__fail(LB_ERR_NOMEM, "out of memory");
    snprintf(tmp, n + 16, "%s.tmp.XXXXXX", path);
    while (n > 1 && tmp[n - 1] == '/') memmove(tmp + n - 1, tmp + n, strlen(tmp + n) + 1), n--;
    if (!mkdtemp(tmp)) {
        lb_status st = lb__fail(LB_ERR_IO, "cannot create a directory beside '%s': %s", path, strerror(errno));
        free(tmp);
        return st;
    }
    char *cfg = lb__path_join(tmp, "config.json"), *st_path = lb__path_join(tmp, "model.safetensors");
    lb_status st = cfg && st_path ? LB_OK : lb__fail(LB_ERR_NOMEM, "out of memory");
    if (st == LB_OK) st = save_safetensors(j, st_path);
    if (st == LB_OK) st = write_config(m, cfg, dtype);
    if (st == LB_OK) {
        chmod(tmp, 0755);
        if (rename(tmp, path) != 0)
            st = lb__fail(LB_ERR_IO, "cannot move the new model into '%s': %s%s", path, strerror(errno),
                          errno == ENOTEMPTY || errno == EEXIST ? " (the directory is not empty)" : "");
    }
    if (st != LB_OK) remove_tree(tmp);
    free(cfg), free(st_path), free(tmp);
    return st;
}

lb_status lb_model_save(const lb_model *m, const char *path, lb_dtype dtype)
{
    if (!m || !path) return lb__fail(LB_ERR_ARG, "lb_model_save: NULL argument");
    target to = ends_with(path, ".gguf") ? TO_GGUF : ends_with(path, ".safetensors") ? TO_SAFETENSORS : TO_HF_DIR;
    if (dtype != LB_DT_COUNT) {
        const lb_dtype_info *d = lb_dtype_get(dtype);
        int ok = d && (is_float_dtype(dtype) || (to == TO_GGUF && d->block > 1 && d->can_write));
        if (!ok)
            return lb__fail(LB_ERR_ARG, "cannot store a model as %s%s (f32, f16, bf16%s)", d ? d->name : "?",
                            to == TO_GGUF ? " in GGUF" : "", to == TO_GGUF ? ", q8_0, q4_0, mxfp4" : "; block types need a .gguf output");
    }
    if (to == TO_HF_DIR && !m->arch.name[0])
        return lb__fail(LB_ERR_UNSUPPORTED, "the model's architecture is unknown: cannot write config.json "
                                            "(write a .safetensors file instead)");
    save_job j = {0};
    lb_status st = plan(m, to, dtype, &j);
    if (st == LB_OK) {
        if (to == TO_GGUF) st = save_gguf(m, &j, path);
        else if (to == TO_SAFETENSORS) st = save_safetensors(&j, path);
        else st = save_hf_dir(m, &j, path, dtype == LB_DT_COUNT ? LB_DT_F32 : dtype);
    }
    free(j.t), free(j.buf), free(j.tmp);
    return st;
}
