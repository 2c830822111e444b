/* Building a runner (runner.c has the forward pass): each tensor read
 * through the quantized model, in the loader's mode (what the qmodel
 * holds, or the source values for the calibration pass), packed or as
 * fp32 panels, activation quantization set up, the KV cache made; and
 * one layer rebuilt in place (lb__runner_reload_layer) as the sequential
 * calibration pass quantizes the model layer by layer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/arch_support.h"
#include "model/act_sim.h"
#include "kernel/qdot8.h"
#include "model/runner_impl.h"
#include "util/error.h"
#include "util/parallel.h"
#include "weights/engine_scales.h"
#include "weights/qmodel_internal.h"

static const char *const weight_suffix[W_COUNT] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                                   "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj",
                                                   "mlp.down_proj"};

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
    mem->int8_act_matrices += (uint64_t)lin->act8;
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
        /* int8 decode activations: the types the int8 kernels read in place
         * stay as read (qdot8.h: the K-quants, IQ4, Q4_0, Q5_0); Q8_0 and
         * MXFP4 are lowbit formats in another layout: a copy in lowbit's (the
         * same values, the same bytes) runs the int8 kernels */
        lb__qmat lowbit_layout;
        if (l->o->decode_act == LB_FMT_INT8 && !l->calibration && !lb__qdot8_supported(&lin->q)) {
            st = lb__qmat_repack_ggml(&lin->q, &lowbit_layout);
            if (st == LB_OK) lin->q = lowbit_layout;
            else if (st != LB_ERR_UNSUPPORTED) return lb__fail(st, "%s: %s", name, lb_last_error());
            st = LB_OK;
        }
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
    if (st == LB_OK)
        lin->act8 = l->o->decode_act == LB_FMT_INT8 && !l->calibration && lin->packed && !lin->has_a8 &&
                    lb__qdot8_supported(&lin->q);
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
/* Weight w's rows and columns in every decoder layer. */
static void weight_shape(const lb_runner *r, int w, size_t *rows, size_t *cols)
{
    const size_t shape[W_COUNT][2] = {{r->q_dim, r->dim}, {r->kv_dim, r->dim},  {r->kv_dim, r->dim}, {r->dim, r->q_dim},
                                      {r->hidden, r->dim}, {r->hidden, r->dim}, {r->dim, r->hidden}};
    *rows = shape[w][0], *cols = shape[w][1];
}

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
    struct { const char *suffix; size_t n; int present; } vectors[] = {
        {"input_layernorm.weight", r->dim, 1},          {"post_attention_layernorm.weight", r->dim, 1},
        {"self_attn.q_proj.bias", r->q_dim, r->a.qkv_bias}, {"self_attn.k_proj.bias", r->kv_dim, r->a.qkv_bias},
        {"self_attn.v_proj.bias", r->kv_dim, r->a.qkv_bias}, {"self_attn.q_norm.weight", r->head_dim, r->a.qk_norm},
        {"self_attn.k_norm.weight", r->head_dim, r->a.qk_norm},
    };
    char name[96];
    for (size_t i = 0; i < r->n_layers; i++) {
        for (int w = 0; w < W_COUNT; w++) {
            size_t rows, cols;
            weight_shape(r, w, &rows, &cols);
            snprintf(name, sizeof name, "model.layers.%zu.%s.weight", i, weight_suffix[w]);
            if (!find_shaped(l, name, rows, cols, &st)) return st;
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
    lb_status st = LB_OK;
    for (int w = 0; w < W_COUNT && st == LB_OK; w++) {
        size_t rows, cols;
        weight_shape(r, w, &rows, &cols);
        snprintf(ly->name[w], sizeof ly->name[w], "model.layers.%zu.%s.weight", i, weight_suffix[w]);
        st = load_matrix(l, ly->name[w], rows, cols, 1, &ly->w[w], &r->mem);
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
    ly->loaded = st == LB_OK;
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

/* The builder; layerwise: the decoder layers are left unloaded (each
 * loaded in its turn by lb__runner_reload_layer_as). */
static lb_status build(const lb_qmodel *q, const lb_runner_options *o, lb_format legacy_act, int calibration,
                       int layerwise, lb_runner **out)
{
    if (o->decode_act != LB_FMT_FP32 && o->decode_act != LB_FMT_INT8)
        return lb__fail(LB_ERR_ARG, "decode activations %d: int8 or fp32 (exact)", (int)o->decode_act);
    if (o->decode_act != LB_FMT_FP32 && legacy_act != LB_FMT_FP32)
        return lb__fail(LB_ERR_ARG, "int8 decode activations (decode_act) and W8A8 activations (act) exclude each "
                        "other: give one");
    if (o->decode_act != LB_FMT_FP32 && o->ggml_act)
        return lb__fail(LB_ERR_ARG, "int8 decode activations (decode_act) and llama.cpp's activation rounding "
                        "(ggml_act) exclude each other: give one");
    if (o->decode_act != LB_FMT_FP32 && o->fake)
        return lb__fail(LB_ERR_ARG, "int8 decode activations compute on packed weights: they do not combine with fake "
                        "quantization (fp32 copies)");
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
    r->mem.decode_act = o->decode_act;
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
        for (size_t i = 0; i < r->n_layers && st == LB_OK && !layerwise; i++) {
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

lb_status lb__runner_build_ex(const lb_qmodel *q, const lb_runner_options *o, lb_format legacy_act, int calibration,
                              lb_runner **out)
{
    return build(q, o, legacy_act, calibration, 0, out);
}

static lb_status build_from_qmodel(const lb_qmodel *q, const lb_runner_options *o, int calibration, int layerwise,
                                   lb_runner **out)
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
    return build(q, o, LB_FMT_FP32, calibration, layerwise, out);
}

lb_status lb__runner_build(const lb_qmodel *q, const lb_runner_options *o, int calibration, lb_runner **out)
{
    return build_from_qmodel(q, o, calibration, 0, out);
}

lb_status lb__runner_build_layerwise(const lb_qmodel *q, const lb_runner_options *o, int calibration, lb_runner **out)
{
    if (calibration != LB__RUNNER_CALIB && calibration != LB__RUNNER_SOURCE)
        return lb__fail(LB_ERR_ARG, "lb__runner_build_layerwise: build mode %d (the calibration modes only)",
                        calibration);
    return build_from_qmodel(q, o, calibration, 1, out);
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

lb_status lb__runner_reload_weights(lb_runner *r, const lb_qmodel *q, size_t li, int w0, int w1)
{
    if (li >= r->n_layers || !r->layers[li].loaded || w0 < 0 || w1 > W_COUNT || w0 >= w1)
        return lb__fail(LB_ERR_ARG, "lb__runner_reload_weights: weights %d .. %d of layer %zu (of %zu%s)", w0, w1, li,
                        r->n_layers, li < r->n_layers && !r->layers[li].loaded ? ", not loaded" : "");
    if (lb_model_arch(lb_qmodel_model(q))->n_layers != r->n_layers)
        return lb__fail(LB_ERR_ARG, "lb__runner_reload_weights: the quantized model is of another model");
    loader l = {lb_qmodel_model(q), q, &r->opts, r->threads, r->act, r->calibration};
    layer *ly = &r->layers[li];
    lb_runner_memory mem = r->mem;
    for (int w = w0; w < w1; w++) {
        size_t rows, cols;
        weight_shape(r, w, &rows, &cols);
        linear fresh = {0};
        lb_status st = load_matrix(&l, ly->name[w], rows, cols, 1, &fresh, &mem);
        if (st != LB_OK) {
            linear_free(&fresh);
            return st;
        }
        linear_free(&ly->w[w]);
        ly->w[w] = fresh;
        if (ly->w[w].has_a8) ly->w[w].a8.m = &ly->w[w].q; /* the W8A8 state borrows its matrix: this copy's */
    }
    return LB_OK;
}

void lb__runner_unload_layer(lb_runner *r, size_t li)
{
    if (r && li < r->n_layers) layer_free(&r->layers[li]);
}

void lb__runner_unload_ends(lb_runner *r)
{
    if (!r) return;
    free(r->embed);
    r->embed = NULL;
    lb__qmat_free(&r->embed_q);
    linear_free(&r->head);
    r->ends_unloaded = 1;
}

lb_status lb__runner_reload_ends(lb_runner *r, const lb_qmodel *q)
{
    if (lb_qmodel_model(q) != NULL && lb_model_arch(lb_qmodel_model(q))->vocab_size != r->a.vocab_size)
        return lb__fail(LB_ERR_ARG, "lb__runner_reload_ends: the quantized model is of another model");
    loader l = {lb_qmodel_model(q), q, &r->opts, r->threads, r->act, r->calibration};
    lb_runner fresh = *r; /* load_embeddings fills the embedding and head fields of fresh only */
    fresh.embed = NULL;
    memset(&fresh.embed_q, 0, sizeof fresh.embed_q);
    memset(&fresh.head, 0, sizeof fresh.head);
    lb_status st = load_embeddings(&l, &fresh);
    if (st != LB_OK) {
        free(fresh.embed);
        lb__qmat_free(&fresh.embed_q);
        linear_free(&fresh.head);
        return st;
    }
    free(r->embed);
    lb__qmat_free(&r->embed_q);
    linear_free(&r->head);
    r->embed = fresh.embed, r->embed_q = fresh.embed_q, r->head = fresh.head;
    if (r->head.has_a8) r->head.a8.m = &r->head.q; /* the W8A8 state borrows its matrix: this copy's */
    return LB_OK;
}

lb_status lb__runner_reload_kv(lb_runner *r, const lb_qmodel *q)
{
    loader l = {lb_qmodel_model(q), q, &r->opts, r->threads, r->act, r->calibration};
    lb__kvcache old = r->kv;
    memset(&r->kv, 0, sizeof r->kv);
    lb_status st = init_kv(&l, r);
    if (st != LB_OK) {
        lb__kv_free(&r->kv);
        r->kv = old;
        return st;
    }
    lb__kv_free(&old);
    return LB_OK;
}
