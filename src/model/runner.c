/* The Llama-family forward pass (Llama, Mistral, Qwen2, Qwen3, llama2.c):
 * weights packed in their quantized format (kernel/qmat.h) or as fp32
 * panels for the matmul kernels, a KV cache (fp32 or quantized,
 * kvcache.h), and the layer loop. See lowbit.h, "Evaluation".
 *
 * Every runner is built from a quantized model (lb_runner_from_qmodel;
 * lb_runner_new wraps a private one, runner_legacy.c): each tensor is read
 * through it (a replaced norm included), QUANTIZED weights are held packed,
 * KEPT/REPLACED ones as their 16-bit-rounded values, activations as each
 * entry's lb_qact says (W8A8 kernels, or simulated: act_sim.h), and an fp8
 * KV cache of the qmodel with its static per-layer scales. The runner keeps
 * copies of all it needs: the qmodel may go once it is built.
 *
 * Numerics: everything fp32 except the RMSNorm mean of squares, summed in
 * double (then x * (1/sqrt(mean + eps)) in fp32 times the weight), and the
 * rotary angles (cos/sin computed in double, stored fp32).
 *
 * The activation hook sees, per layer: the normed input once for each of
 * q_proj, k_proj and v_proj (the same rows, three calls, each with its
 * weight's name), o_proj's input, the normed input for gate_proj and
 * up_proj (two calls) and down_proj's input; then the output head's input
 * (named lm_head.weight, or model.embed_tokens.weight when the head is
 * tied) — only the last row under last_only, and no call when no logits
 * are asked for. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/arch_support.h"
#include "kernel/matmul.h"
#include "kernel/qmat.h"
#include "kernel/w8a8.h"
#include "model/act_sim.h"
#include "model/ggml_act.h"
#include "model/attention.h"
#include "model/kvcache.h"
#include "model/runner_internal.h"
#include "util/error.h"
#include "util/parallel.h"
#include "weights/engine_scales.h"
#include "weights/qmodel_internal.h"

enum { W_Q, W_K, W_V, W_O, W_GATE, W_UP, W_DOWN, W_COUNT };
static const char *const weight_suffix[W_COUNT] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                                   "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj",
                                                   "mlp.down_proj"};

/* One weight matrix as the runner holds it: fp32 panels (as stored, or
 * fake-quantized) or packed codes, optionally with W8A8 activations. */
typedef struct linear {
    size_t out, in;
    int packed;          /* 1: q, else f */
    lb__packed f;
    lb__qmat q;
    int has_a8;          /* W8A8 on q */
    lb_format a8_fmt;    /* its activation element: int8 or fp8_e4m3 */
    lb__w8a8 a8;
    lb_qact sim;         /* simulated activation quantization (act_sim.h); mode NONE: none */
    float sim_amax;      /* STATIC: its static input scale; LOCAL: its calibrated input range */
    float act_absmax;    /* calibration: largest input magnitude seen (finished calls) */
    float calib_absmax;  /* the same within the current lb_runner_calibrate call; -1: a non-finite input */
    float act_scale;     /* static activation scale; 0: per token */
    int has_out_scale;   /* a GGUF's per-tensor "<weight>.scale" (NVFP4's second-level scale): */
    float out_scale;     /* the product's outputs are multiplied by it, as llama.cpp does */
    lb__ggml_act ggml_act; /* options.ggml_act: inputs rounded as llama.cpp would (ggml_act.h); F32: not */
    size_t n_outliers;   /* 16-bit outlier columns (lb_qmodel_set_outliers); 0: none */
    uint32_t *outliers;  /* [n_outliers] their input features, ascending */
    lb__packed out_w;    /* [out][n_outliers] their 16-bit values as fp32 panels */
} linear;

typedef struct layer {
    linear w[W_COUNT];
    char name[W_COUNT][80];          /* canonical weight names, for the hook */
    float *attn_norm, *ffn_norm;     /* dim */
    float *q_bias, *k_bias, *v_bias; /* Qwen2; NULL otherwise */
    float *q_norm, *k_norm;          /* Qwen3: head_dim; NULL otherwise */
} layer;

struct lb_runner {
    lb_arch a;
    size_t dim, hidden, n_heads, n_kv_heads, head_dim, q_dim, kv_dim, vocab, n_layers;
    int threads;
    float *embed;      /* [vocab][dim] fp32; NULL when packed (embed_q) or tied (rows come from head) */
    lb__qmat embed_q;  /* an untied embedding stored packed */
    linear head;       /* [vocab][dim] */
    char head_name[32];
    float *final_norm;
    layer *layers;
    lb__kvcache kv;    /* layers x max_ctx x kv heads, in options.kv's format */
    size_t max_ctx, pos;
    lb__rope rope;
    float *scratch;    /* attention scores: n_heads * max_ctx */
    lb_activation_hook hook;
    void *hook_ctx;
    lb__kv_hook kv_hook;
    void *kv_hook_ctx;
    lb_format act;          /* W8A8 activations, or LB_FMT_FP32 */
    int calibrating;        /* lb_runner_calibrate: fp32 activations, maxima recorded */
    lb_runner_memory mem;
    uint64_t act_saturated, act_values; /* W8A8 inputs clipped to the code range, of those quantized */
    lb_runner_options opts; /* as built (progress dropped): lb__runner_reload_layer loads alike */
    int calibration;        /* as built: lb__runner_build_ex's mode */
};

/* ---- loading ---- */

typedef struct loader {
    const lb_model *m;
    const lb_qmodel *q;       /* what each tensor holds */
    const lb_runner_options *o;
    int threads;
    lb_format legacy_act;     /* lb_runner_new's W8A8 format for the projections, or LB_FMT_FP32 */
    int calibration;          /* LB__RUNNER_CALIB*: fp32 activations and KV cache whatever the qmodel says;
                                 LB__RUNNER_SOURCE also every tensor's source values (nothing quantized) */
} loader;

/* What a tensor holds under the loader's mode: the source values (before
 * any quantization or 16-bit rounding) in source mode, else what the
 * quantized model holds. */
static lb_status tensor_values(const loader *l, size_t i, float *dst)
{
    if (l->calibration == LB__RUNNER_SOURCE) return lb_qmodel_source_f32(l->q, i, dst);
    return lb_qmodel_values_f32(l->q, i, dst, l->threads);
}

static const lb_tensor *find(const loader *l, const char *name, int required, lb_status *st)
{
    const lb_tensor *t = lb_model_find(l->m, name);
    if (!t && required) *st = lb__fail(LB_ERR_PARSE, "the model has no tensor %s (a Llama-family model needs it)", name);
    return t;
}

/* The tensor `name`, which must exist with shape [rows, cols] (cols > 0)
 * or exactly `rows` elements (cols == 0). */
static const lb_tensor *find_shaped(const loader *l, const char *name, size_t rows, size_t cols, lb_status *st)
{
    const lb_tensor *t = find(l, name, 1, st);
    if (!t) return NULL;
    int shape_ok = cols ? t->n_dims == 2 && t->shape[0] == rows && t->shape[1] == cols
                        : t->n_elements == rows;
    if (shape_ok) return t;
    if (cols)
        *st = lb__fail(LB_ERR_PARSE, "tensor %s: expected shape [%zu, %zu], found %d dims, %llu elements", name, rows,
                       cols, t->n_dims, (unsigned long long)t->n_elements);
    else
        *st = lb__fail(LB_ERR_PARSE, "tensor %s: expected %zu elements, found %llu", name, rows,
                       (unsigned long long)t->n_elements);
    return NULL;
}

/* A tensor of exactly `count` elements (shape [rows, cols] when cols > 0)
 * as a fresh fp32 array. */
static lb_status load_f32(const loader *l, const char *name, size_t rows, size_t cols, float **out)
{
    lb_status st = LB_OK;
    *out = NULL;
    const lb_tensor *t = find_shaped(l, name, rows, cols, &st);
    if (!t) return st;
    size_t count = rows * (cols ? cols : 1);
    float *f = malloc((count + 1) * sizeof *f); /* + 1: never a zero-byte malloc */
    if (!f) return lb__fail(LB_ERR_NOMEM, "cannot allocate fp32 copy of %s", name);
    size_t i;
    st = lb_qmodel_find(l->q, t->name, &i);
    if (st == LB_OK) st = tensor_values(l, i, f); /* a replacement (a folded norm) too */
    if (st != LB_OK) {
        free(f);
        return st;
    }
    *out = f;
    return LB_OK;
}

/* Quantize then dequantize in place: the weight the runner then uses is
 * exactly what a deployment of the spec would hold. */
static lb_status fake_quantize(const lb_qspec *spec, float *w, size_t rows, size_t cols, int threads,
                               const char *name)
{
    if (!spec) return LB_OK;
    lb_format e = spec->element;
    if (lb__qspec_is_plain(spec)) {
        if (e == LB_FMT_FP32) return LB_OK; /* the weights are fp32 already */
        /* 16-bit floats need no scale: round each weight (saturating) and back */
        size_t n = rows * cols;
        uint16_t *codes = malloc(n * sizeof *codes);
        lb_status st = codes ? lb_encode_f32(e, LB_SATURATE, w, n, codes, threads) : LB_ERR_NOMEM;
        if (st == LB_OK) st = lb_decode_f32(e, codes, n, w, threads);
        free(codes);
        return st == LB_OK ? LB_OK : lb__fail(st, "rounding %s to %s: %s", name, lb_format_get(e)->name,
                                               st == LB_ERR_NOMEM ? "out of memory" : lb_last_error());
    }
    lb_qtensor *q = NULL;
    lb_status st = lb_quantize(spec, w, rows, cols, threads, &q);
    if (st == LB_OK) st = lb_dequantize(q, w, threads);
    lb_qtensor_free(q);
    if (st != LB_OK) return lb__fail(st, "fake-quantizing %s: %s", name, lb_last_error());
    return LB_OK;
}

static void count_matrix(lb_runner_memory *mem, const linear *lin)
{
    mem->weights_fp32 += (uint64_t)lin->out * lin->in * sizeof(float);
    if (lin->packed) mem->weights += lin->q.bytes, mem->packed_matrices++;
    else mem->weights += (uint64_t)lin->out * lin->in * sizeof(float), mem->fp32_matrices++;
    mem->weights += (uint64_t)lin->out * lin->n_outliers * sizeof(float) + lin->n_outliers * sizeof *lin->outliers;
}

/* A QUANTIZED entry's 16-bit outlier columns (lb_qmodel_set_outliers),
 * held beside the quantized rest: their indices and their values as fp32
 * panels [out][n]. */
static lb_status load_outliers(const loader *l, size_t i, const char *name, linear *lin)
{
    size_t n = 0;
    const uint32_t *cols = lb_qmodel_outliers(l->q, i, &n);
    if (!cols) return LB_OK;
    float *v = malloc(lin->out * n * sizeof *v);
    lin->outliers = malloc(n * sizeof *lin->outliers);
    if (!v || !lin->outliers) {
        free(v);
        return lb__fail(LB_ERR_NOMEM, "cannot allocate the outlier columns of %s", name);
    }
    memcpy(lin->outliers, cols, n * sizeof *cols);
    lin->n_outliers = n;
    lb_status st = lb__qmodel_outlier_values(l->q, i, v);
    if (st == LB_OK) st = lb__pack_weight(v, lin->out, n, &lin->out_w);
    free(v);
    return st;
}

/* Zeroes the outlier columns of w [out][in]: the rest, as quantized. */
static void zero_outlier_columns(const lb_qmodel *q, size_t i, float *w, size_t out, size_t in)
{
    size_t n = 0;
    const uint32_t *cols = lb_qmodel_outliers(q, i, &n);
    for (size_t r = 0; cols && r < out; r++)
        for (size_t k = 0; k < n; k++) w[r * in + cols[k]] = 0.0f;
}

/* How a linear layer's input is quantized, as its qmodel entry says: on
 * the W8A8 kernels when they compute that pair (int8 or fp8_e4m3
 * activations per token or with a static per-tensor scale, over int8/fp8
 * packed weights per channel or tensor), else simulated (act_sim.h). */
static lb_status setup_act(const loader *l, const lb_qentry *e, const char *name, linear *lin)
{
    const lb_qact *a = &e->act;
    if (a->mode == LB_ACT_NONE || l->calibration) return LB_OK;
    if ((a->mode == LB_ACT_STATIC || a->mode == LB_ACT_LOCAL) && !(e->input_amax > 0))
        return lb__fail(LB_ERR_ARG, "%s: its static input scale is not calibrated (run lb_calibrate first)", name);
    lb_format el = a->spec.element;
    int a8_pair = (el == LB_FMT_INT8 || el == LB_FMT_FP8_E4M3) && !a->spec.affine && !a->spec.two_level &&
                  (a->mode == LB_ACT_STATIC ? a->spec.granularity == LB_GRAN_TENSOR
                                            : a->mode == LB_ACT_DYNAMIC && (a->spec.granularity == LB_GRAN_TOKEN ||
                                                                            a->spec.granularity == LB_GRAN_CHANNEL));
    if (a8_pair && lin->packed && lb__w8a8_init(&lin->q, el, &lin->a8) == LB_OK) {
        lin->has_a8 = 1;
        lin->a8_fmt = el;
        if (a->mode == LB_ACT_STATIC) {
            float scale = lb__static_input_scale(el, e->input_amax, lb_qmodel_dtype(l->q));
            lin->act_scale = scale > 0 ? scale : 0.0f;
        }
        return LB_OK;
    }
    lin->sim = *a;
    /* STATIC: the scale a writer stores (engine_scales.h); LOCAL: the range */
    lin->sim_amax = a->mode == LB_ACT_STATIC ? lb__static_input_scale(el, e->input_amax, lb_qmodel_dtype(l->q))
                                             : e->input_amax;
    return LB_OK;
}

/* 1 for a tensor stored in a ggml block type (Q4_K, Q8_0, MXFP4 ...): the
 * runner holds it as the file's bytes (lb__qmat_from_ggml). Plain types
 * (f32, f16, bf16) keep their fp32 panels. */
static int ggml_blocks(const lb_tensor *t)
{
    const lb_dtype_info *d = t->dtype == LB_DT_QUANTIZED ? NULL : lb_dtype_get(t->dtype);
    return d && d->block > 1 && d->block_bytes > 0 && d->can_read && d->ggml_type >= 0 && t->data;
}

/* A GGUF's optional per-tensor scale of weight `name` ("X.weight" ->
 * "X.scale", one element; llama.cpp loads it for every projection and an
 * untied output head, and multiplies the product by it: NVFP4's second
 * level scale). */
static lb_status load_out_scale(const loader *l, const char *name, linear *lin)
{
    char sname[112];
    size_t n = strlen(name);
    if (n < 7 || strcmp(name + n - 7, ".weight") != 0) return LB_OK;
    snprintf(sname, sizeof sname, "%.*s.scale", (int)(n - 7), name);
    if (!lb_model_find(l->m, sname)) return LB_OK;
    float *v = NULL;
    lb_status st = load_f32(l, sname, 1, 0, &v);
    if (st != LB_OK) return st;
    lin->has_out_scale = 1;
    lin->out_scale = v[0];
    free(v);
    return LB_OK;
}

/* A weight matrix as the qmodel says: QUANTIZED packed (dequantized fp32
 * panels when fake), KEPT/REPLACED as their 16-bit-rounded values in fp32
 * panels, STORED as stored; lb_runner_new's plain class specs as 16-bit
 * codes (or rounded fp32 panels when fake). a8: one of the projections
 * lb_runner_new's W8A8 option applies to. */
static lb_status load_matrix(const loader *l, const char *name, size_t out, size_t in, int a8, linear *lin,
                             lb_runner_memory *mem)
{
    lb_status st = LB_OK;
    size_t i;
    lb_qentry e;
    if (!find_shaped(l, name, out, in, &st)) return st;
    if ((st = lb_qmodel_find(l->q, name, &i)) != LB_OK) return st;
    if ((st = lb_qmodel_entry(l->q, i, &e)) != LB_OK) return st;
    const lb_qspec *plain = l->calibration == LB__RUNNER_SOURCE ? NULL : lb__qmodel_plain(l->q, i);
    /* a quantized rest with 16-bit outlier columns beside it (source mode: the whole source) */
    int split = e.state == LB_QSTATE_QUANTIZED && l->calibration != LB__RUNNER_SOURCE &&
                lb_qmodel_outliers(l->q, i, NULL);
    lin->out = out;
    lin->in = in;
    if (split && (st = load_outliers(l, i, name, lin)) != LB_OK) return st;
    if (e.state == LB_QSTATE_STORED && !l->o->fake && ggml_blocks(e.tensor)) {
        /* the file's blocks, read in place: no copy at all */
        st = lb__qmat_from_ggml(e.tensor->dtype, e.tensor->data, out, in, NULL, &lin->q);
        if (st != LB_OK) return lb__fail(st, "%s: %s", name, lb_last_error());
        lin->packed = 1;
    } else if (e.state == LB_QSTATE_QUANTIZED && !l->o->fake && l->calibration != LB__RUNNER_SOURCE) {
        lb_qtensor *qt = NULL;
        st = lb__qmodel_quantized_owned(l->q, i, l->threads, &qt);
        if (st != LB_OK) return lb__fail(st, "quantizing %s: %s", name, lb_last_error());
        lb__qmat_from_qtensor(qt, 1, &lin->q);
        lin->packed = 1;
    } else {
        float *w = malloc((out * in + 1) * sizeof *w);
        if (!w) return lb__fail(LB_ERR_NOMEM, "cannot allocate fp32 copy of %s", name);
        /* plain: the source rounded here (as the runner always did); else what the output holds */
        st = plain ? lb_qmodel_source_f32(l->q, i, w) : tensor_values(l, i, w);
        /* fake: the rest here, its 16-bit columns beside it (load_outliers) */
        if (st == LB_OK && split) zero_outlier_columns(l->q, i, w, out, in);
        if (st == LB_OK && plain && !l->o->fake) {
            st = lb__qmat_from_f32(w, out, in, plain, l->threads, &lin->q);
            if (st != LB_OK) st = lb__fail(st, "quantizing %s: %s", name, lb_last_error());
            lin->packed = st == LB_OK;
        } else if (st == LB_OK) {
            if (plain) st = fake_quantize(plain, w, out, in, l->threads, name);
            if (st == LB_OK) st = lb__pack_weight(w, out, in, &lin->f);
        }
        free(w);
    }
    if (st == LB_OK && l->legacy_act != LB_FMT_FP32) {
        if (a8) {
            if (!lin->packed)
                return lb__fail(LB_ERR_ARG, "%s: 8-bit activations need the weight stored packed (a spec, no fake)",
                                name);
            st = lb__w8a8_init(&lin->q, l->legacy_act, &lin->a8);
            if (st != LB_OK) return lb__fail(st, "%s: %s", name, lb_last_error());
            lin->has_a8 = 1;
            lin->a8_fmt = l->legacy_act;
        }
    } else if (st == LB_OK) {
        st = setup_act(l, &e, name, lin);
    }
    if (st == LB_OK) st = load_out_scale(l, name, lin);
    /* only a tensor kept as the file stores it is one ggml would multiply in its type */
    if (st == LB_OK && l->o->ggml_act && !l->calibration && e.state == LB_QSTATE_STORED)
        lin->ggml_act = lb__ggml_act_type(e.tensor->dtype);
    if (st == LB_OK) count_matrix(mem, lin);
    return st;
}

static void linear_free(linear *lin)
{
    free(lin->outliers);
    lb__packed_free(&lin->out_w);
    if (lin->has_a8) lb__w8a8_free(&lin->a8);
    lb__qmat_free(&lin->q);
    lb__packed_free(&lin->f);
    memset(lin, 0, sizeof *lin);
}

static lb_status load_optional_vector(const loader *l, const char *name, size_t n, float **out)
{
    *out = NULL;
    if (!lb_model_find(l->m, name)) return LB_OK;
    return load_f32(l, name, n, 0, out);
}

static lb_status check_arch(lb_runner *r, const lb_model *m)
{
    const lb_arch *a = &r->a;
    if (!a->n_layers || !a->dim || !a->n_heads || !a->hidden_dim)
        return lb__fail(LB_ERR_PARSE, "model architecture incomplete: layers %u, dim %u, heads %u, hidden %u",
                        a->n_layers, a->dim, a->n_heads, a->hidden_dim);
    r->n_layers = a->n_layers;
    r->dim = a->dim;
    r->hidden = a->hidden_dim;
    r->n_heads = a->n_heads;
    r->n_kv_heads = a->n_kv_heads ? a->n_kv_heads : a->n_heads;
    r->head_dim = a->head_dim ? a->head_dim : a->dim / a->n_heads;
    if (r->n_kv_heads > r->n_heads || r->n_heads % r->n_kv_heads)
        return lb__fail(LB_ERR_PARSE, "model architecture: %zu heads are not a multiple of %zu kv heads", r->n_heads,
                        r->n_kv_heads);
    if (r->head_dim == 0 || r->head_dim % 2)
        return lb__fail(LB_ERR_PARSE, "model architecture: head_dim %zu is not a positive even number", r->head_dim);
    r->q_dim = r->n_heads * r->head_dim;
    r->kv_dim = r->n_kv_heads * r->head_dim;
    const lb_tensor *e = lb_model_find(m, "model.embed_tokens.weight");
    r->vocab = a->vocab_size ? a->vocab_size : e && e->n_dims == 2 ? e->shape[0] : 0;
    if (!r->vocab) return lb__fail(LB_ERR_PARSE, "model architecture: vocabulary size unknown");
    if (!(a->norm_eps >= 0) || !(a->rope_theta > 0))
        return lb__fail(LB_ERR_PARSE, "model architecture: norm_eps %g, rope_theta %g", a->norm_eps, a->rope_theta);
    return LB_OK;
}

/* Every tensor the forward pass will read, present with the shape the
 * architecture implies, before anything is allocated from the metadata:
 * the layer count, head sizes and vocabulary are then bounded by what the
 * file holds (a 319 KB file saying block_count = 2000000 fails at the
 * first missing layer, not after gigabytes of per-layer state). */
static lb_status check_tensors(const loader *l, const lb_runner *r)
{
    lb_status st = LB_OK;
    const lb_tensor *head = lb_model_find(l->m, "lm_head.weight");
    if (!find_shaped(l, "model.embed_tokens.weight", r->vocab, r->dim, &st)) return st;
    if (head && !r->a.tied_embeddings && !find_shaped(l, "lm_head.weight", r->vocab, r->dim, &st)) return st;
    if (lb_model_find(l->m, "lm_head.scale") && !(head && !r->a.tied_embeddings)) /* llama.cpp refuses it too */
        return lb__fail(LB_ERR_UNSUPPORTED, "the model has an output head scale (lm_head.scale) but its head is the "
                        "tied embedding, which the scale cannot apply to");
    if (!find_shaped(l, "model.norm.weight", r->dim, 0, &st)) return st;
    if (lb_model_find(l->m, "rope_freqs.weight") && !find_shaped(l, "rope_freqs.weight", r->head_dim / 2, 0, &st))
        return st;
    size_t shape[W_COUNT][2] = {{r->q_dim, r->dim},     {r->kv_dim, r->dim},    {r->kv_dim, r->dim},
                                {r->dim, r->q_dim},     {r->hidden, r->dim},    {r->hidden, r->dim},
                                {r->dim, r->hidden}};
    struct { const char *suffix; size_t n; int present; } vectors[] = {
        {"input_layernorm.weight", r->dim, 1},          {"post_attention_layernorm.weight", r->dim, 1},
        {"self_attn.q_proj.bias", r->q_dim, r->a.qkv_bias}, {"self_attn.k_proj.bias", r->kv_dim, r->a.qkv_bias},
        {"self_attn.v_proj.bias", r->kv_dim, r->a.qkv_bias}, {"self_attn.q_norm.weight", r->head_dim, r->a.qk_norm},
        {"self_attn.k_norm.weight", r->head_dim, r->a.qk_norm},
    };
    char name[96];
    for (size_t i = 0; i < r->n_layers; i++) {
        for (int w = 0; w < W_COUNT; w++) {
            snprintf(name, sizeof name, "model.layers.%zu.%s.weight", i, weight_suffix[w]);
            if (!find_shaped(l, name, shape[w][0], shape[w][1], &st)) return st;
        }
        for (size_t v = 0; v < sizeof vectors / sizeof vectors[0]; v++) {
            snprintf(name, sizeof name, "model.layers.%zu.%s", i, vectors[v].suffix);
            /* an optional vector absent from one layer but present in
             * another is loaded where it is: the shapes still must agree */
            if (!vectors[v].present && !lb_model_find(l->m, name)) continue;
            if (!find_shaped(l, name, vectors[v].n, 0, &st)) return st;
        }
    }
    return LB_OK;
}

static lb_status load_layer(const loader *l, lb_runner *r, size_t i, layer *ly)
{
    char name[96];
    size_t shape[W_COUNT][2] = {{r->q_dim, r->dim},     {r->kv_dim, r->dim},    {r->kv_dim, r->dim},
                                {r->dim, r->q_dim},     {r->hidden, r->dim},    {r->hidden, r->dim},
                                {r->dim, r->hidden}};
    lb_status st = LB_OK;
    for (int w = 0; w < W_COUNT && st == LB_OK; w++) {
        snprintf(ly->name[w], sizeof ly->name[w], "model.layers.%zu.%s.weight", i, weight_suffix[w]);
        st = load_matrix(l, ly->name[w], shape[w][0], shape[w][1], 1, &ly->w[w], &r->mem);
    }
#define VEC(field, fmt, n, required)                                                   \
    if (st == LB_OK) {                                                                 \
        snprintf(name, sizeof name, "model.layers.%zu." fmt, i);                       \
        st = (required) ? load_f32(l, name, n, 0, &ly->field) : load_optional_vector(l, name, n, &ly->field); \
    }
    VEC(attn_norm, "input_layernorm.weight", r->dim, 1)
    VEC(ffn_norm, "post_attention_layernorm.weight", r->dim, 1)
    VEC(q_bias, "self_attn.q_proj.bias", r->q_dim, r->a.qkv_bias)
    VEC(k_bias, "self_attn.k_proj.bias", r->kv_dim, r->a.qkv_bias)
    VEC(v_bias, "self_attn.v_proj.bias", r->kv_dim, r->a.qkv_bias)
    VEC(q_norm, "self_attn.q_norm.weight", r->head_dim, r->a.qk_norm)
    VEC(k_norm, "self_attn.k_norm.weight", r->head_dim, r->a.qk_norm)
#undef VEC
    return st;
}

static lb_status load_embeddings(const loader *l, lb_runner *r)
{
    lb_status st = LB_OK;
    const lb_tensor *head = lb_model_find(l->m, "lm_head.weight");
    const char *ename = "model.embed_tokens.weight";
    if (head && !r->a.tied_embeddings) {
        snprintf(r->head_name, sizeof r->head_name, "lm_head.weight");
        size_t i;
        lb_qentry e;
        if (!find_shaped(l, ename, r->vocab, r->dim, &st)) return st;
        if ((st = lb_qmodel_find(l->q, ename, &i)) != LB_OK || (st = lb_qmodel_entry(l->q, i, &e)) != LB_OK) return st;
        const lb_qspec *plain = l->calibration == LB__RUNNER_SOURCE ? NULL : lb__qmodel_plain(l->q, i);
        if (e.state == LB_QSTATE_STORED && !l->o->fake && ggml_blocks(e.tensor)) { /* the file's blocks, in place */
            st = lb__qmat_from_ggml(e.tensor->dtype, e.tensor->data, r->vocab, r->dim, NULL, &r->embed_q);
            if (st != LB_OK) return lb__fail(st, "%s: %s", ename, lb_last_error());
            r->mem.other += r->embed_q.bytes;
        } else if (e.state == LB_QSTATE_QUANTIZED && !l->o->fake && l->calibration != LB__RUNNER_SOURCE) {
            /* packed: only the rows a token looks up are decoded */
            lb_qtensor *qt = NULL;
            st = lb__qmodel_quantized_owned(l->q, i, l->threads, &qt);
            if (st != LB_OK) return lb__fail(st, "quantizing %s: %s", ename, lb_last_error());
            lb__qmat_from_qtensor(qt, 1, &r->embed_q);
            r->mem.other += r->embed_q.bytes;
        } else {
            r->embed = malloc(((size_t)r->vocab * r->dim + 1) * sizeof *r->embed);
            if (!r->embed) return lb__fail(LB_ERR_NOMEM, "cannot allocate fp32 copy of %s", ename);
            st = plain ? lb_qmodel_source_f32(l->q, i, r->embed) : tensor_values(l, i, r->embed);
            if (st == LB_OK && plain && !l->o->fake) {
                st = lb__qmat_from_f32(r->embed, r->vocab, r->dim, plain, l->threads, &r->embed_q);
                if (st != LB_OK) st = lb__fail(st, "quantizing %s: %s", ename, lb_last_error());
                free(r->embed);
                r->embed = NULL;
                r->mem.other += r->embed_q.bytes;
            } else {
                if (st == LB_OK && plain) st = fake_quantize(plain, r->embed, r->vocab, r->dim, l->threads, ename);
                r->mem.other += (uint64_t)r->vocab * r->dim * sizeof(float);
            }
        }
        if (st == LB_OK) st = load_matrix(l, "lm_head.weight", r->vocab, r->dim, 0, &r->head, &r->mem);
        return st;
    }
    /* tied: one matrix serves both; the embedding's spec applies to it */
    snprintf(r->head_name, sizeof r->head_name, "%s", ename);
    return load_matrix(l, ename, r->vocab, r->dim, 0, &r->head, &r->mem);
}

static lb_status load_rope(const loader *l, lb_runner *r)
{
    float *factors = NULL;
    lb_status st = LB_OK;
    if (lb_model_find(l->m, "rope_freqs.weight")) st = load_f32(l, "rope_freqs.weight", r->head_dim / 2, 0, &factors);
    if (st == LB_OK) st = lb__rope_init(&r->rope, &r->a, r->head_dim, factors, r->max_ctx);
    free(factors);
    return st;
}

/* The context when the options ask for none: the model's, up to 4096. */
static size_t default_ctx(const lb_arch *a)
{
    return a->max_seq_len && a->max_seq_len < 4096 ? a->max_seq_len : 4096;
}

lb_status lb_runner_supports(const lb_model *m, uint32_t max_ctx)
{
    if (!m) return lb__fail(LB_ERR_ARG, "lb_runner_supports: model is NULL");
    return lb__model_runnable(m, max_ctx ? max_ctx : default_ctx(lb_model_arch(m)));
}

/* The KV cache as the qmodel says (fp8_e4m3 with static per-layer scales
 * amax / 448) or, when it says none, as the options do. */
static lb_status init_kv(const loader *l, lb_runner *r)
{
    lb_format qkv = lb_qmodel_kv(l->q), kv = l->o->kv;
    if (qkv != LB_FMT_FP32 && kv != LB_FMT_FP32 && kv != qkv)
        return lb__fail(LB_ERR_ARG, "the quantized model's KV cache is %s; the options ask for %s",
                        lb_format_get(qkv)->name, lb_format_get(kv) ? lb_format_get(kv)->name : "another format");
    if (qkv != LB_FMT_FP32) kv = l->calibration ? LB_FMT_FP32 : qkv;
    lb_status st = lb__kv_init(&r->kv, kv, r->n_layers, r->max_ctx, r->n_kv_heads, r->head_dim);
    if (st != LB_OK || qkv == LB_FMT_FP32 || l->calibration) return st;
    for (size_t i = 0; i < r->n_layers && st == LB_OK; i++) {
        float ka, va;
        st = lb_qmodel_kv_amax(l->q, (uint32_t)i, &ka, &va);
        if (st == LB_OK && !(ka > 0 && va > 0))
            return lb__fail(LB_ERR_ARG, "layer %zu: the KV cache's static scales are not calibrated (k amax %g, v amax "
                            "%g; run lb_calibrate first)", i, (double)ka, (double)va);
        if (st == LB_OK) st = lb__kv_set_static(&r->kv, i, lb__kv_scale(ka), lb__kv_scale(va));
    }
    return st;
}

lb_status lb__runner_build_ex(const lb_qmodel *q, const lb_runner_options *o, lb_format legacy_act, int calibration,
                              lb_runner **out)
{
    const lb_model *m = lb_qmodel_model(q);
    lb_runner *r = calloc(1, sizeof *r);
    if (!r) return lb__fail(LB_ERR_NOMEM, "cannot allocate a runner");
    r->a = *lb_model_arch(m);
    r->threads = lb__thread_count(o->threads);
    r->act = legacy_act;
    r->max_ctx = o->max_ctx ? o->max_ctx : default_ctx(&r->a);
    loader l = {m, q, o, r->threads, legacy_act, calibration};
    r->opts = *o;
    r->opts.progress = NULL, r->opts.progress_ctx = NULL;
    r->calibration = calibration;
    lb_status st = lb__model_runnable(m, r->max_ctx);
    if (st == LB_OK) st = check_arch(r, m);
    if (st == LB_OK) st = check_tensors(&l, r);
    if (st == LB_OK) {
        r->layers = calloc(r->n_layers, sizeof *r->layers);
        st = init_kv(&l, r);
        if (st == LB_OK) {
            r->scratch = malloc(r->n_heads * r->max_ctx * sizeof(float));
            r->mem.kv_cache = lb__kv_bytes(&r->kv);
            if (!r->layers || !r->scratch)
                st = lb__fail(LB_ERR_NOMEM, "cannot allocate a runner of %zu positions x %zu layers", r->max_ctx,
                              r->n_layers);
        }
        if (st == LB_OK) st = load_embeddings(&l, r);
        if (st == LB_OK && o->progress) o->progress(o->progress_ctx, 0, r->n_layers);
        for (size_t i = 0; i < r->n_layers && st == LB_OK; i++) {
            st = load_layer(&l, r, i, &r->layers[i]);
            if (st == LB_OK && o->progress) o->progress(o->progress_ctx, i + 1, r->n_layers);
        }
        if (st == LB_OK) st = load_f32(&l, "model.norm.weight", r->dim, 0, &r->final_norm);
        if (st == LB_OK) st = load_rope(&l, r);
        /* norms (two per layer and the final one), biases, q/k norms, rotary tables */
        r->mem.other += ((2 * r->n_layers + 1) * r->dim + r->max_ctx * r->head_dim) * sizeof(float);
        if (r->a.qkv_bias) r->mem.other += r->n_layers * (r->q_dim + 2 * r->kv_dim) * sizeof(float);
        if (r->a.qk_norm) r->mem.other += r->n_layers * 2 * r->head_dim * sizeof(float);
    }
    if (st != LB_OK) {
        lb_runner_free(r);
        return st;
    }
    *out = r;
    return LB_OK;
}

lb_status lb__runner_build(const lb_qmodel *q, const lb_runner_options *o, int calibration, lb_runner **out)
{
    if (!out) return lb__fail(LB_ERR_ARG, "lb_runner_from_qmodel: out is NULL");
    *out = NULL;
    if (!q) return lb__fail(LB_ERR_ARG, "lb_runner_from_qmodel: qmodel is NULL");
    lb_runner_options defaults = {0};
    if (!o) o = &defaults;
    if (o->attn || o->mlp || o->embed || o->head || o->act != LB_FMT_FP32)
        return lb__fail(LB_ERR_ARG, "lb_runner_from_qmodel: the quantized model says how each weight and activation "
                        "is held; the options' attn, mlp, embed, head and act must be unset");
    if (lb__kv_format_check(o->kv) != LB_OK) return LB_ERR_FORMAT;
    return lb__runner_build_ex(q, o, LB_FMT_FP32, calibration, out);
}

lb_status lb_runner_from_qmodel(const lb_qmodel *q, const lb_runner_options *o, lb_runner **out)
{
    return lb__runner_build(q, o, 0, out);
}

void lb__runner_set_kv_hook(lb_runner *r, lb__kv_hook hook, void *ctx)
{
    if (!r) return;
    r->kv_hook = hook;
    r->kv_hook_ctx = ctx;
}

size_t lb__runner_max_ctx(const lb_runner *r) { return r ? r->max_ctx : 0; }

static void layer_free(layer *ly)
{
    for (int w = 0; w < W_COUNT; w++) linear_free(&ly->w[w]);
    free(ly->attn_norm);
    free(ly->ffn_norm);
    free(ly->q_bias);
    free(ly->k_bias);
    free(ly->v_bias);
    free(ly->q_norm);
    free(ly->k_norm);
    memset(ly, 0, sizeof *ly);
}

void lb_runner_free(lb_runner *r)
{
    if (!r) return;
    if (r->layers)
        for (size_t i = 0; i < r->n_layers; i++) layer_free(&r->layers[i]);
    free(r->layers);
    free(r->embed);
    lb__qmat_free(&r->embed_q);
    linear_free(&r->head);
    free(r->final_norm);
    lb__kv_free(&r->kv);
    free(r->scratch);
    lb__rope_free(&r->rope);
    free(r);
}

void lb_runner_set_hook(lb_runner *r, lb_activation_hook hook, void *ctx)
{
    if (!r) return;
    r->hook = hook;
    r->hook_ctx = ctx;
}

void lb_runner_reset(lb_runner *r)
{
    if (r) r->pos = 0;
}

lb_status lb_runner_calibrate(lb_runner *r, const int32_t *tokens, size_t n)
{
    if (!r) return lb__fail(LB_ERR_ARG, "lb_runner_calibrate: runner is NULL");
    if (r->act == LB_FMT_FP32)
        return lb__fail(LB_ERR_ARG, "lb_runner_calibrate: the runner keeps fp32 activations (no act format)");
    if (n == 0 || !tokens) return lb__fail(LB_ERR_ARG, "lb_runner_calibrate: no tokens");
    for (size_t i = 0; i < r->n_layers; i++)
        for (int w = 0; w < W_COUNT; w++) r->layers[i].w[w].calib_absmax = 0.0f;
    /* windows of the context, each from an empty cache */
    lb_status st = LB_OK;
    uint64_t kv_sat = r->kv.saturated, kv_values = r->kv.values; /* calibration runs are not measured runs */
    r->calibrating = 1;
    for (size_t at = 0; at < n && st == LB_OK; at += r->max_ctx) {
        r->pos = 0;
        st = lb_runner_forward(r, tokens + at, n - at < r->max_ctx ? n - at : r->max_ctx, NULL, 0);
    }
    r->calibrating = 0;
    r->pos = 0;
    r->kv.saturated = kv_sat, r->kv.values = kv_values;
    if (st != LB_OK) return st; /* nothing recorded: the maxima of earlier calls stand */
    for (size_t i = 0; i < r->n_layers; i++)
        for (int w = 0; w < W_COUNT; w++)
            if (r->layers[i].w[w].has_a8 && r->layers[i].w[w].calib_absmax < 0)
                return lb__fail(LB_ERR_NAN, "lb_runner_calibrate: the input of %s is not finite (NaN or infinity)",
                                r->layers[i].name[w]);
    float qmax = r->act == LB_FMT_INT8 ? 127.0f : 448.0f;
    for (size_t i = 0; i < r->n_layers; i++)
        for (int w = 0; w < W_COUNT; w++) {
            linear *lin = &r->layers[i].w[w];
            if (!lin->has_a8) continue;
            if (lin->calib_absmax > lin->act_absmax) lin->act_absmax = lin->calib_absmax;
            /* an input that was all zeros (or so small that its scale
             * underflows) keeps per-token scales: any scale fits it */
            float scale = lin->act_absmax / qmax;
            lin->act_scale = scale > 0 ? scale : 0.0f;
        }
    return LB_OK;
}

void lb_runner_memory_get(const lb_runner *r, lb_runner_memory *out)
{
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (r) *out = r->mem;
}

void lb_runner_saturation_get(const lb_runner *r, lb_runner_saturation *out)
{
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (!r) return;
    out->kv_saturated = r->kv.saturated, out->kv_values = r->kv.values;
    out->act_saturated = r->act_saturated, out->act_values = r->act_values;
}

uint32_t lb_runner_vocab_size(const lb_runner *r) { return r ? (uint32_t)r->vocab : 0; }
uint32_t lb_runner_position(const lb_runner *r) { return r ? (uint32_t)r->pos : 0; }

/* ---- the forward pass ---- */

/* out = w * (x / sqrt(mean(x^2) + eps)), the mean summed in double */
static void rmsnorm(const float *x, const float *w, size_t n, double eps, float *out)
{
    double ss = 0;
    for (size_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float s = (float)(1.0 / sqrt(ss / (double)n + eps));
    for (size_t i = 0; i < n; i++) out[i] = w[i] * (x[i] * s);
}

static float absmax(const float *x, size_t n)
{
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) m = fabsf(x[i]) > m ? fabsf(x[i]) : m;
    return m;
}

static lb_status linear_product(lb_runner *r, linear *lin, const float *x, size_t n, float *y);

/* With 16-bit outlier columns: y = Q(W_rest) x_rest + W_out x_out, x_rest
 * the input with the outlier features zeroed (all that the quantized
 * path, and any activation quantization on it, sees), x_out those
 * features (LLM.int8()'s decomposition). */
static lb_status split_product(lb_runner *r, linear *lin, const float *x, size_t n, float *y)
{
    size_t k = lin->n_outliers, in = lin->in;
    float *xr = malloc((n * in + 1) * sizeof *xr), *xo = malloc((n * k + 1) * sizeof *xo),
          *yo = malloc((n * lin->out + 1) * sizeof *yo);
    lb_status st = LB_OK;
    if (!xr || !xo || !yo) st = lb__fail(LB_ERR_NOMEM, "cannot allocate the split inputs of %zu x %zu", n, in);
    if (st == LB_OK) {
        memcpy(xr, x, n * in * sizeof *xr);
        for (size_t t = 0; t < n; t++)
            for (size_t j = 0; j < k; j++) {
                xo[t * k + j] = x[t * in + lin->outliers[j]];
                xr[t * in + lin->outliers[j]] = 0.0f;
            }
        st = linear_product(r, lin, xr, n, y);
    }
    if (st == LB_OK) st = lb__matmul(xo, n, &lin->out_w, yo, r->threads);
    for (size_t i = 0; st == LB_OK && i < n * lin->out; i++) y[i] += yo[i];
    free(xr), free(xo), free(yo);
    return st;
}

/* y[n][out] = x[n][in] . W^T on however the runner holds W, times the
 * weight's per-tensor output scale where the file has one. */
static lb_status linear_matmul(lb_runner *r, linear *lin, const float *x, size_t n, float *y)
{
    lb_status st = lin->n_outliers ? split_product(r, lin, x, n, y) : linear_product(r, lin, x, n, y);
    if (st == LB_OK && lin->has_out_scale)
        for (size_t i = 0; i < n * lin->out; i++) y[i] *= lin->out_scale; /* ggml_mul's fp32 product */
    return st;
}

static lb_status linear_product(lb_runner *r, linear *lin, const float *x, size_t n, float *y)
{
    if (lin->has_a8 && r->calibrating && lin->calib_absmax >= 0) {
        float m = absmax(x, n * lin->in);
        for (size_t i = 0; i < n * lin->in; i++)
            if (!isfinite(x[i])) m = -1.0f; /* the caller reports it */
        if (m < 0 || m > lin->calib_absmax) lin->calib_absmax = m;
    }
    if (lin->has_a8 && !r->calibrating) {
        /* a static scale clips what calibration did not see: x / s at or
         * beyond 127.5 (int8) or 464 (e4m3, the midpoint past 448) rounds
         * to the largest code; per-token absmax scales never clip */
        r->act_values += (uint64_t)n * lin->in;
        if (lin->act_scale > 0) {
            float s = lin->act_scale, limit = lin->a8_fmt == LB_FMT_INT8 ? 127.5f : 464.0f;
            for (size_t i = 0; i < n * lin->in; i++) r->act_saturated += fabsf(x[i]) / s >= limit && isfinite(x[i]);
        }
        return lb__w8a8_matmul(&lin->a8, x, n, lin->act_scale, y, r->threads);
    }
    if (lin->ggml_act != LB__GGML_ACT_F32 && !r->calibrating) {
        float *xq = malloc((n * lin->in + 1) * sizeof *xq);
        if (!xq) return lb__fail(LB_ERR_NOMEM, "cannot allocate rounded activations of %zu x %zu", n, lin->in);
        lb_status st = lb__ggml_act_round((int)lin->ggml_act, x, n * lin->in, xq);
        if (st == LB_OK) st = lin->packed ? lb__qmat_matmul(&lin->q, xq, n, y, r->threads)
                                          : lb__matmul(xq, n, &lin->f, y, r->threads);
        free(xq);
        return st;
    }
    if (lin->sim.mode != LB_ACT_NONE && !r->calibrating) {
        float *xq = malloc((n * lin->in + 1) * sizeof *xq);
        if (!xq) return lb__fail(LB_ERR_NOMEM, "cannot allocate quantized activations of %zu x %zu", n, lin->in);
        lb_status st = lb__act_simulate(&lin->sim, lin->sim_amax, x, n, lin->in, r->threads, xq);
        if (st == LB_OK) st = lin->packed ? lb__qmat_matmul(&lin->q, xq, n, y, r->threads)
                                          : lb__matmul(xq, n, &lin->f, y, r->threads);
        free(xq);
        return st;
    }
    if (lin->packed) return lb__qmat_matmul(&lin->q, x, n, y, r->threads);
    return lb__matmul(x, n, &lin->f, y, r->threads);
}

static void hook(const lb_runner *r, const char *name, const float *x, size_t rows, size_t cols)
{
    if (r->hook) r->hook(r->hook_ctx, name, x, rows, cols);
}

typedef struct acts {
    float *x, *xb, *q, *k, *v, *att, *hb, *hb2;
} acts;

static lb_status attention_block(lb_runner *r, size_t li, acts *b, size_t n)
{
    layer *ly = &r->layers[li];
    lb_status st;
    for (size_t t = 0; t < n; t++) rmsnorm(b->x + t * r->dim, ly->attn_norm, r->dim, r->a.norm_eps, b->xb + t * r->dim);
    float *dst[3] = {b->q, b->k, b->v};
    const float *bias[3] = {ly->q_bias, ly->k_bias, ly->v_bias};
    for (int w = W_Q; w <= W_V; w++) {
        hook(r, ly->name[w], b->xb, n, r->dim);
        if ((st = linear_matmul(r, &ly->w[w], b->xb, n, dst[w])) != LB_OK) return st;
        size_t width = ly->w[w].out;
        if (bias[w])
            for (size_t t = 0; t < n; t++)
                for (size_t i = 0; i < width; i++) dst[w][t * width + i] += bias[w][i];
    }
    for (size_t t = 0; t < n; t++) {
        float *q = b->q + t * r->q_dim, *k = b->k + t * r->kv_dim;
        if (ly->q_norm)
            for (size_t h = 0; h < r->n_heads; h++)
                rmsnorm(q + h * r->head_dim, ly->q_norm, r->head_dim, r->a.norm_eps, q + h * r->head_dim);
        if (ly->k_norm)
            for (size_t h = 0; h < r->n_kv_heads; h++)
                rmsnorm(k + h * r->head_dim, ly->k_norm, r->head_dim, r->a.norm_eps, k + h * r->head_dim);
        lb__rope_apply(&r->rope, q, r->n_heads, r->pos + t);
        lb__rope_apply(&r->rope, k, r->n_kv_heads, r->pos + t);
    }
    if (r->kv_hook) r->kv_hook(r->kv_hook_ctx, li, b->k, b->v, n, r->kv_dim);
    lb__kv_store(&r->kv, li, r->pos, n, b->k, b->v);
    lb__attn_job j = {.q = b->q, .kv = &r->kv, .layer = li, .pos0 = r->pos, .n = n, .n_heads = r->n_heads,
                      .n_kv_heads = r->n_kv_heads, .head_dim = r->head_dim, .out = b->att, .scratch = r->scratch};
    if ((st = lb__attention(&j, r->threads)) != LB_OK) return st;
    hook(r, ly->name[W_O], b->att, n, r->q_dim);
    if ((st = linear_matmul(r, &ly->w[W_O], b->att, n, b->xb)) != LB_OK) return st;
    for (size_t i = 0; i < n * r->dim; i++) b->x[i] += b->xb[i];
    return LB_OK;
}

static lb_status mlp_block(lb_runner *r, size_t li, acts *b, size_t n)
{
    layer *ly = &r->layers[li];
    lb_status st;
    for (size_t t = 0; t < n; t++) rmsnorm(b->x + t * r->dim, ly->ffn_norm, r->dim, r->a.norm_eps, b->xb + t * r->dim);
    hook(r, ly->name[W_GATE], b->xb, n, r->dim);
    if ((st = linear_matmul(r, &ly->w[W_GATE], b->xb, n, b->hb)) != LB_OK) return st;
    hook(r, ly->name[W_UP], b->xb, n, r->dim);
    if ((st = linear_matmul(r, &ly->w[W_UP], b->xb, n, b->hb2)) != LB_OK) return st;
    for (size_t i = 0; i < n * r->hidden; i++) {
        float g = b->hb[i];
        b->hb[i] = g / (1.0f + expf(-g)) * b->hb2[i]; /* silu(gate) * up */
    }
    hook(r, ly->name[W_DOWN], b->hb, n, r->hidden);
    if ((st = linear_matmul(r, &ly->w[W_DOWN], b->hb, n, b->xb)) != LB_OK) return st;
    for (size_t i = 0; i < n * r->dim; i++) b->x[i] += b->xb[i];
    return LB_OK;
}

/* One block holding the activations of n tokens; NULL when out of memory
 * (free() the result). */
static float *acts_alloc(const lb_runner *r, size_t n, acts *b)
{
    size_t per_token = 2 * r->dim + 2 * r->q_dim + 2 * r->kv_dim + 2 * r->hidden;
    float *buf = malloc(n * per_token * sizeof(float));
    if (!buf) return NULL;
    b->x = buf;
    b->xb = b->x + n * r->dim;
    b->q = b->xb + n * r->dim;
    b->att = b->q + n * r->q_dim;
    b->k = b->att + n * r->q_dim;
    b->v = b->k + n * r->kv_dim;
    b->hb = b->v + n * r->kv_dim;
    b->hb2 = b->hb + n * r->hidden;
    return buf;
}

/* Row t's embedding: from the fp32 table, the packed one, or the tied head. */
static lb_status embed_row(const lb_runner *r, int32_t token, float *row)
{
    if (r->embed) memcpy(row, r->embed + (size_t)token * r->dim, r->dim * sizeof *row);
    else if (r->embed_q.data) return lb__qmat_row_f32(&r->embed_q, (size_t)token, row);
    else if (r->head.packed) return lb__qmat_row_f32(&r->head.q, (size_t)token, row);
    else lb__packed_row(&r->head.f, (size_t)token, row);
    return LB_OK;
}

static lb_status check_tokens(const lb_runner *r, const char *fn, const int32_t *tokens, size_t n)
{
    if (n == 0) return lb__fail(LB_ERR_ARG, "%s: no tokens", fn);
    if (!tokens) return lb__fail(LB_ERR_ARG, "%s: tokens is NULL", fn);
    for (size_t t = 0; t < n; t++)
        if (tokens[t] < 0 || (size_t)tokens[t] >= r->vocab)
            return lb__fail(LB_ERR_ARG, "%s: token %zu is id %d, outside the vocabulary [0, %zu)", fn, t, tokens[t],
                            r->vocab);
    return LB_OK;
}

/* The logits of positions first .. n-1 from the last layer's states, in
 * chunks of at most `rows` positions through buf (rows x vocab floats):
 * each chunk is handed to fn, or, with fn NULL, buf must hold them all. */
static lb_status head_logits(lb_runner *r, acts *b, size_t first, size_t n, size_t rows, float *buf,
                             lb__logits_fn fn, void *fn_ctx)
{
    lb_status st = LB_OK;
    for (size_t at = first; at < n && st == LB_OK; at += rows) {
        size_t count = n - at < rows ? n - at : rows;
        for (size_t t = 0; t < count; t++)
            rmsnorm(b->x + (at + t) * r->dim, r->final_norm, r->dim, r->a.norm_eps, b->xb + t * r->dim);
        hook(r, r->head_name, b->xb, count, r->dim);
        st = linear_matmul(r, &r->head, b->xb, count, buf);
        if (st == LB_OK && fn) st = fn(fn_ctx, at, buf, count);
    }
    return st;
}

static lb_status forward(lb_runner *r, const char *fn_name, const int32_t *tokens, size_t n, size_t first,
                         size_t rows, float *logits, lb__logits_fn fn, void *fn_ctx);

lb_status lb_runner_forward(lb_runner *r, const int32_t *tokens, size_t n, float *logits, int last_only)
{
    if (!r) return lb__fail(LB_ERR_ARG, "lb_runner_forward: runner is NULL");
    size_t first = last_only && n ? n - 1 : 0;
    return forward(r, "lb_runner_forward", tokens, n, first, n ? n - first : 1, logits, NULL, NULL);
}

lb_status lb__runner_forward_chunked(lb_runner *r, const int32_t *tokens, size_t n, size_t first, size_t rows,
                                     float *buf, lb__logits_fn fn, void *fn_ctx)
{
    if (!r || !buf || !fn || rows == 0 || first >= n)
        return lb__fail(LB_ERR_ARG, "lb__runner_forward_chunked: bad arguments");
    return forward(r, "lb__runner_forward_chunked", tokens, n, first, rows, buf, fn, fn_ctx);
}

static lb_status forward(lb_runner *r, const char *fn_name, const int32_t *tokens, size_t n, size_t first,
                         size_t rows, float *logits, lb__logits_fn fn, void *fn_ctx)
{
    lb_status st = check_tokens(r, fn_name, tokens, n);
    if (st != LB_OK) return st;
    if (n > r->max_ctx || r->pos > r->max_ctx - n)
        return lb__fail(LB_ERR_ARG, "%s: %zu tokens after position %zu exceed the context of %zu", fn_name, n, r->pos,
                        r->max_ctx);

    acts b;
    float *buf = acts_alloc(r, n, &b);
    if (!buf) return lb__fail(LB_ERR_NOMEM, "%s: cannot allocate activations for %zu tokens", fn_name, n);

    for (size_t t = 0; t < n && st == LB_OK; t++) st = embed_row(r, tokens[t], b.x + t * r->dim);
    for (size_t li = 0; li < r->n_layers && st == LB_OK; li++) {
        st = attention_block(r, li, &b, n);
        if (st == LB_OK) st = mlp_block(r, li, &b, n);
    }
    if (st == LB_OK && logits) st = head_logits(r, &b, first, n, rows, logits, fn, fn_ctx);
    free(buf);
    if (st == LB_OK) r->pos += n;
    return st;
}

/* ---- layer by layer (runner_internal.h) ---- */

size_t lb__runner_n_layers(const lb_runner *r) { return r ? r->n_layers : 0; }
size_t lb__runner_dim(const lb_runner *r) { return r ? r->dim : 0; }

lb_status lb__runner_embed(lb_runner *r, const int32_t *tokens, size_t n, float *x)
{
    lb_status st = check_tokens(r, "lb__runner_embed", tokens, n);
    for (size_t t = 0; t < n && st == LB_OK; t++) st = embed_row(r, tokens[t], x + t * r->dim);
    return st;
}

lb_status lb__runner_layer(lb_runner *r, size_t li, float *x, size_t n)
{
    if (li >= r->n_layers) return lb__fail(LB_ERR_ARG, "lb__runner_layer: layer %zu of %zu", li, r->n_layers);
    if (n == 0 || n > r->max_ctx)
        return lb__fail(LB_ERR_ARG, "lb__runner_layer: %zu tokens (the context is %zu)", n, r->max_ctx);
    acts b;
    float *buf = acts_alloc(r, n, &b);
    if (!buf) return lb__fail(LB_ERR_NOMEM, "lb__runner_layer: cannot allocate activations for %zu tokens", n);
    memcpy(b.x, x, n * r->dim * sizeof *x);
    size_t pos = r->pos;
    r->pos = 0; /* the window from an empty cache: positions 0 .. n-1 */
    lb_status st = attention_block(r, li, &b, n);
    if (st == LB_OK) st = mlp_block(r, li, &b, n);
    r->pos = pos;
    if (st == LB_OK) memcpy(x, b.x, n * r->dim * sizeof *x);
    free(buf);
    return st;
}

lb_status lb__runner_logits(lb_runner *r, const float *x, size_t n, float *logits)
{
    if (n == 0) return lb__fail(LB_ERR_ARG, "lb__runner_logits: no rows");
    float *xb = malloc(n * r->dim * sizeof *xb);
    if (!xb) return lb__fail(LB_ERR_NOMEM, "lb__runner_logits: cannot allocate %zu normed rows", n);
    for (size_t t = 0; t < n; t++) rmsnorm(x + t * r->dim, r->final_norm, r->dim, r->a.norm_eps, xb + t * r->dim);
    hook(r, r->head_name, xb, n, r->dim);
    lb_status st = linear_matmul(r, &r->head, xb, n, logits);
    free(xb);
    return st;
}

static lb_status reload_layer(lb_runner *r, const lb_qmodel *q, size_t li, int calibration);

lb_status lb__runner_reload_layer(lb_runner *r, const lb_qmodel *q, size_t li)
{
    return reload_layer(r, q, li, r->calibration);
}

lb_status lb__runner_reload_layer_as(lb_runner *r, const lb_qmodel *q, size_t li, int calibration)
{
    if (!r->calibration || (calibration != LB__RUNNER_CALIB && calibration != LB__RUNNER_SOURCE))
        return lb__fail(LB_ERR_ARG, "lb__runner_reload_layer_as: build mode %d on a runner built in mode %d (only "
                        "the calibration modes, which keep fp32 activations and KV cache, mix)", calibration,
                        r->calibration);
    return reload_layer(r, q, li, calibration);
}

static lb_status reload_layer(lb_runner *r, const lb_qmodel *q, size_t li, int calibration)
{
    if (li >= r->n_layers) return lb__fail(LB_ERR_ARG, "lb__runner_reload_layer: layer %zu of %zu", li, r->n_layers);
    if (lb_model_arch(lb_qmodel_model(q))->n_layers != r->n_layers)
        return lb__fail(LB_ERR_ARG, "lb__runner_reload_layer: the quantized model is of another model");
    loader l = {lb_qmodel_model(q), q, &r->opts, r->threads, r->act, calibration};
    layer fresh = {0};
    lb_runner_memory mem = r->mem;
    lb_status st = load_layer(&l, r, li, &fresh);
    if (st != LB_OK) {
        layer_free(&fresh);
        return st;
    }
    layer_free(&r->layers[li]);
    r->layers[li] = fresh;
    /* the W8A8 state borrows its matrix: point it at the layer's own copy, not fresh's */
    for (int w = 0; w < W_COUNT; w++)
        if (r->layers[li].w[w].has_a8) r->layers[li].w[w].a8.m = &r->layers[li].w[w].q;
    r->mem = mem; /* the counts stay those of the build (a reloaded layer has the same shapes) */
    return LB_OK;
}
