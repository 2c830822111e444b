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

#include "model/act_sim.h"
#include "kernel/qdot8.h"
#include "model/runner_impl.h"
#include "util/error.h"
#include "util/parallel.h"
#include "weights/qmodel_internal.h"

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
    out->int8_kernels = lb__qdot8_get(lb_isa_active())->name;
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
uint32_t lb_runner_context(const lb_runner *r) { return r ? (uint32_t)r->max_ctx : 0; }

/* Positions past pos are simply written again by the next tokens:
 * attention reads only positions below the cache's position. */
lb_status lb_runner_rewind(lb_runner *r, uint32_t pos)
{
    if (!r) return lb__fail(LB_ERR_ARG, "lb_runner_rewind: runner is NULL");
    if (pos > r->pos) return lb__fail(LB_ERR_ARG, "lb_runner_rewind: position %u is past the cache's %zu tokens", pos, r->pos);
    r->pos = pos;
    return LB_OK;
}

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
    if (lin->act8 && !r->calibrating)
        return lb__qmat_matmul_act8(&lin->q, x, n, y, r->threads, lb_isa_active());
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

/* Whether k weights that read one input take it in one int8-mode call. */
static int shares_int8_call(const lb_runner *r, linear *const *lins, size_t k)
{
    int shared = !r->calibrating;
    for (size_t i = 0; i < k && shared; i++)
        shared = lins[i]->act8 && !lins[i]->n_outliers && !lins[i]->has_out_scale && lins[i]->sim.mode == LB_ACT_NONE &&
                 lb__qdot8_shares_input(&lins[0]->q, &lins[i]->q);
    return shared;
}

/* Products of one input by k weights (q/k/v, gate/up): with int8 decode
 * activations on all of them, one call that quantizes the input once and
 * splits every row over the threads in one parallel section (the same
 * bits as one call each); else linear_matmul each. */
static lb_status shared_matmul(lb_runner *r, linear *const *lins, size_t k, const float *x, size_t n, float *const *ys)
{
    if (shares_int8_call(r, lins, k)) {
        const lb__qmat *ms[3];
        for (size_t i = 0; i < k; i++) ms[i] = &lins[i]->q;
        return lb__qmat_matmul_act8_multi(ms, k, x, n, ys, r->threads, lb__qdot8_get(lb_isa_active()));
    }
    lb_status st = LB_OK;
    for (size_t i = 0; i < k && st == LB_OK; i++) st = linear_matmul(r, lins[i], x, n, ys[i]);
    return st;
}

/* input_layernorm of b->x into b->xb, which q_proj, k_proj and v_proj read. */
static void attn_norm(lb_runner *r, size_t li, acts *b, size_t n)
{
    layer *ly = &r->layers[li];
    for (size_t t = 0; t < n; t++) rmsnorm(b->x + t * r->dim, ly->attn_norm, r->dim, r->a.norm_eps, b->xb + t * r->dim);
    for (int w = W_Q; w <= W_V; w++) hook(r, ly->name[w], b->xb, n, r->dim);
}

/* q, k and v of b->xb, the rotary embedding, the KV cache, and attention
 * into b->att, which o_proj reads. */
static lb_status attn_heads(lb_runner *r, size_t li, acts *b, size_t n)
{
    layer *ly = &r->layers[li];
    lb_status st;
    float *dst[3] = {b->q, b->k, b->v};
    const float *bias[3] = {ly->q_bias, ly->k_bias, ly->v_bias};
    linear *qkv[3] = {&ly->w[W_Q], &ly->w[W_K], &ly->w[W_V]};
    if ((st = shared_matmul(r, qkv, 3, b->xb, n, dst)) != LB_OK) return st;
    for (int w = W_Q; w <= W_V; w++) {
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
    return LB_OK;
}

/* b->x += lin(in): a half's product added into the residual stream. */
static lb_status add_product(lb_runner *r, linear *lin, const float *in, acts *b, size_t n)
{
    lb_status st = linear_matmul(r, lin, in, n, b->xb);
    if (st != LB_OK) return st;
    for (size_t i = 0; i < n * r->dim; i++) b->x[i] += b->xb[i];
    return LB_OK;
}

/* b->x += o_proj(b->att): the attention half's residual. */
static lb_status attn_out(lb_runner *r, size_t li, acts *b, size_t n)
{
    return add_product(r, &r->layers[li].w[W_O], b->att, b, n);
}

static lb_status attention_block(lb_runner *r, size_t li, acts *b, size_t n)
{
    attn_norm(r, li, b, n);
    lb_status st = attn_heads(r, li, b, n);
    return st == LB_OK ? attn_out(r, li, b, n) : st;
}

/* post_attention_layernorm of b->x into b->xb, which gate_proj and up_proj read. */
static void mlp_norm(lb_runner *r, size_t li, acts *b, size_t n)
{
    layer *ly = &r->layers[li];
    for (size_t t = 0; t < n; t++) rmsnorm(b->x + t * r->dim, ly->ffn_norm, r->dim, r->a.norm_eps, b->xb + t * r->dim);
    hook(r, ly->name[W_GATE], b->xb, n, r->dim);
    hook(r, ly->name[W_UP], b->xb, n, r->dim);
}

/* gate = silu(gate) * up in columns c0 .. c1-1 of n rows of width hidden. */
typedef struct silu_job {
    float *gate;
    const float *up;
    size_t n, hidden;
} silu_job;

static void silu_times_up(void *ctx, size_t c0, size_t c1)
{
    const silu_job *j = ctx;
    for (size_t t = 0; t < j->n; t++)
        for (size_t i = t * j->hidden + c0; i < t * j->hidden + c1; i++) {
            float g = j->gate[i];
            j->gate[i] = g / (1.0f + expf(-g)) * j->up[i];
        }
}

/* silu(gate_proj(b->xb)) * up_proj(b->xb) into b->hb, which down_proj
 * reads. In one int8-mode call each thread applies the silu to the rows
 * it computed, inside the parallel section (it was 5% of SmolLM2's
 * decode, on one thread while the other waited): the same bits. */
static lb_status mlp_act(lb_runner *r, size_t li, acts *b, size_t n)
{
    layer *ly = &r->layers[li];
    linear *gate_up[2] = {&ly->w[W_GATE], &ly->w[W_UP]};
    float *gu[2] = {b->hb, b->hb2};
    silu_job sj = {.gate = b->hb, .up = b->hb2, .n = n, .hidden = r->hidden};
    lb_status st;
    if (shares_int8_call(r, gate_up, 2) && gate_up[0]->out == gate_up[1]->out) {
        st = lb__qmat_matmul_act8_pair(&gate_up[0]->q, &gate_up[1]->q, b->xb, n, b->hb, b->hb2, r->threads,
                                       lb__qdot8_get(lb_isa_active()), silu_times_up, &sj);
    } else {
        st = shared_matmul(r, gate_up, 2, b->xb, n, gu);
        if (st == LB_OK) silu_times_up(&sj, 0, r->hidden);
    }
    if (st != LB_OK) return st;
    hook(r, ly->name[W_DOWN], b->hb, n, r->hidden);
    return LB_OK;
}

/* b->x += down_proj(b->hb): the MLP half's residual. */
static lb_status mlp_out(lb_runner *r, size_t li, acts *b, size_t n)
{
    return add_product(r, &r->layers[li].w[W_DOWN], b->hb, b, n);
}

/* The MLP half of layer li on b->x; with inputs_only, it stops once
 * down_proj's input is computed and hooked (b->x is then left as the
 * attention half made it). */
static lb_status mlp_block(lb_runner *r, size_t li, acts *b, size_t n, int inputs_only)
{
    mlp_norm(r, li, b, n);
    lb_status st = mlp_act(r, li, b, n);
    return st == LB_OK && !inputs_only ? mlp_out(r, li, b, n) : st;
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

/* A layerwise runner (lb__runner_build_layerwise) holds only what its
 * calibration pass loaded: what is not there is refused, never read. */
static lb_status check_ends(const lb_runner *r, const char *fn)
{
    return r->ends_unloaded ? lb__fail(LB_ERR_ARG, "%s: this runner's embeddings and head were dropped", fn) : LB_OK;
}

static lb_status check_layer(const lb_runner *r, const char *fn, size_t li, size_t n)
{
    if (li >= r->n_layers) return lb__fail(LB_ERR_ARG, "%s: layer %zu of %zu", fn, li, r->n_layers);
    if (n == 0 || n > r->max_ctx) return lb__fail(LB_ERR_ARG, "%s: %zu tokens (the context is %zu)", fn, n, r->max_ctx);
    if (!r->layers[li].loaded) return lb__fail(LB_ERR_ARG, "%s: layer %zu is not loaded", fn, li);
    return LB_OK;
}

static lb_status check_tokens(const lb_runner *r, const char *fn, const int32_t *tokens, size_t n)
{
    if (check_ends(r, fn) != LB_OK) return LB_ERR_ARG;
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
    for (size_t li = 0; li < r->n_layers; li++)
        if (!r->layers[li].loaded) return lb__fail(LB_ERR_ARG, "%s: layer %zu is not loaded", fn_name, li);

    acts b;
    float *buf = acts_alloc(r, n, &b);
    if (!buf) return lb__fail(LB_ERR_NOMEM, "%s: cannot allocate activations for %zu tokens", fn_name, n);

    for (size_t t = 0; t < n && st == LB_OK; t++) st = embed_row(r, tokens[t], b.x + t * r->dim);
    for (size_t li = 0; li < r->n_layers && st == LB_OK; li++) {
        st = attention_block(r, li, &b, n);
        if (st == LB_OK) st = mlp_block(r, li, &b, n, 0);
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

/* Layer li on x (out: NULL when only its inputs are wanted: the hooks
 * fire up to down_proj's, whose product is not computed). */
static lb_status run_layer(lb_runner *r, const char *fn, size_t li, const float *x, float *out, size_t n)
{
    if (check_layer(r, fn, li, n) != LB_OK) return LB_ERR_ARG;
    acts b;
    float *buf = acts_alloc(r, n, &b);
    if (!buf) return lb__fail(LB_ERR_NOMEM, "%s: cannot allocate activations for %zu tokens", fn, n);
    memcpy(b.x, x, n * r->dim * sizeof *x);
    size_t pos = r->pos;
    r->pos = 0; /* the window from an empty cache: positions 0 .. n-1 */
    lb_status st = attention_block(r, li, &b, n);
    if (st == LB_OK) st = mlp_block(r, li, &b, n, out == NULL);
    r->pos = pos;
    if (st == LB_OK && out) memcpy(out, b.x, n * r->dim * sizeof *x);
    free(buf);
    return st;
}

lb_status lb__runner_layer(lb_runner *r, size_t li, float *x, size_t n)
{
    return run_layer(r, "lb__runner_layer", li, x, x, n);
}

lb_status lb__runner_layer_inputs(lb_runner *r, size_t li, const float *x, size_t n)
{
    return run_layer(r, "lb__runner_layer_inputs", li, x, NULL, n);
}

size_t lb__runner_carry_width(const lb_runner *r) { return r->q_dim > r->hidden ? r->q_dim : r->hidden; }

lb_status lb__runner_layer_stage(lb_runner *r, size_t li, lb__layer_stage stage, float *x, float *carry, size_t n)
{
    const char *fn = "lb__runner_layer_stage";
    if (check_layer(r, fn, li, n) != LB_OK) return LB_ERR_ARG;
    if (!x || (!carry && stage != LB__STAGE_ATTN_IN)) return lb__fail(LB_ERR_ARG, "%s: NULL hidden states or carry", fn);
    acts b;
    float *buf = acts_alloc(r, n, &b);
    if (!buf) return lb__fail(LB_ERR_NOMEM, "%s: cannot allocate activations for %zu tokens", fn, n);
    b.x = x; /* in place: the stages share the window's hidden states */
    size_t pos = r->pos;
    r->pos = 0; /* the window from an empty cache, as lb__runner_layer */
    lb_status st = LB_OK;
    switch (stage) {
    case LB__STAGE_ATTN_IN: attn_norm(r, li, &b, n); break;
    case LB__STAGE_O_IN:
        attn_norm(r, li, &b, n);
        b.att = carry;
        st = attn_heads(r, li, &b, n);
        break;
    case LB__STAGE_MLP_IN:
        b.att = carry;
        if ((st = attn_out(r, li, &b, n)) == LB_OK) mlp_norm(r, li, &b, n);
        break;
    case LB__STAGE_DOWN_IN:
        mlp_norm(r, li, &b, n);
        b.hb = carry;
        st = mlp_act(r, li, &b, n);
        break;
    case LB__STAGE_OUT:
        b.hb = carry;
        st = mlp_out(r, li, &b, n);
        break;
    case LB__STAGE_COUNT: st = lb__fail(LB_ERR_ARG, "%s: stage %d", fn, (int)stage); break;
    }
    r->pos = pos;
    free(buf);
    return st;
}

lb_status lb__runner_logits(lb_runner *r, const float *x, size_t n, float *logits)
{
    if (check_ends(r, "lb__runner_logits") != LB_OK) return LB_ERR_ARG;
    if (n == 0) return lb__fail(LB_ERR_ARG, "lb__runner_logits: no rows");
    float *xb = malloc(n * r->dim * sizeof *xb);
    if (!xb) return lb__fail(LB_ERR_NOMEM, "lb__runner_logits: cannot allocate %zu normed rows", n);
    for (size_t t = 0; t < n; t++) rmsnorm(x + t * r->dim, r->final_norm, r->dim, r->a.norm_eps, xb + t * r->dim);
    hook(r, r->head_name, xb, n, r->dim);
    lb_status st = linear_matmul(r, &r->head, xb, n, logits);
    free(xb);
    return st;
}
