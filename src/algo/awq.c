/* AWQ's layer callback (awq.h), as AutoAWQ applies the paper to a
 * Llama-family decoder layer, on the statistics the calibration pass
 * (SOURCE mode) took of the layer's four linear inputs:
 *
 *  1. Scales, per group of weights sharing an input, in the forward order
 *     (each search sees the weights as the folds before it left them):
 *       ATTN_IN  q, k, v    folded into input_layernorm
 *       O_IN     o          folded into v_proj's rows
 *       MLP_IN   gate, up   folded into post_attention_layernorm
 *       DOWN_IN  down       folded into up_proj's rows
 *     A group is searched only when every member is quantized (a lowbit
 *     spec or a ggml block type) and weight-only (no activation
 *     quantization: a scale moves range into the activations, which W8A8
 *     would then pay for -- that is SmoothQuant's trade, not AWQ's); the
 *     others are left as they are.
 *     O_IN with grouped-query attention: o_proj's input channel (h, d) is
 *     made of v's kv channel (h / (n_heads / n_kv_heads), d), so one scale
 *     per kv channel is all v_proj's rows can take. The search runs on
 *     mean |x| averaged over the q heads of each kv group and repeated over
 *     them, which makes every s = f(x_mean) shared the same way. (AutoAWQ
 *     skips o_proj when v_proj and o_proj differ in shape, i.e. under GQA.)
 *  2. Clipping, per quantized weight-only weight except q_proj and k_proj
 *     (AutoAWQ's avoid_clipping, llm-awq: "due to qk bmm, it is hard to
 *     clip precisely": q and k meet in q.k^T, where the error of one is
 *     multiplied by the other and then through softmax, so neither
 *     projection's own output error ranks its clipping well). Each block of
 *     the quantizer (lb__fakeq_block: the spec's group, a row for
 *     per-channel specs, the ggml block: 256 for the K-quants, whose
 *     sub-block scales share a super-block scale, so a super-block is
 *     clipped as one) is clamped to the best of max|w| * (1 - k / 20),
 *     k < 10, by its output error on the folded input (sample rows / s)
 *     over AutoAWQ's 512 evenly spaced sample rows, and the clamped values
 *     replace the weight's.
 * The quantized model then quantizes the replaced (scaled, clipped)
 * values under each entry's spec: the output needs nothing AWQ-specific. */
#include "algo/awq.h"

#include <stdlib.h>
#include <string.h>

#include "algo/fold.h"
#include "util/error.h"
#include "weights/qmodel_internal.h"

#define AWQ_MAX_SHRINK 0.5f /* AutoAWQ: clipping ranges down to half of max|w| */
#define AWQ_CLIP_ROWS 512   /* AutoAWQ's n_sample_token: sample rows the clipping search uses */

/* Entry i quantized weight-only, with its quantizer in *f. */
static int weight_only_quantized(const lb_qmodel *q, size_t i, int threads, lb__fakeq *f)
{
    lb_qentry e;
    if (lb_qmodel_entry(q, i, &e) != LB_OK || e.act.mode != LB_ACT_NONE) return 0;
    int quantized = e.ggml != LB_DT_COUNT ? lb_dtype_get(e.ggml) && lb_dtype_get(e.ggml)->block > 1
                                          : e.state == LB_QSTATE_QUANTIZED;
    return quantized && lb__qmodel_fakeq(q, i, threads, f) == LB_OK;
}

static size_t weight_rows(const lb_qmodel *q, size_t i)
{
    lb_qentry e;
    return lb_qmodel_entry(q, i, &e) == LB_OK && e.tensor->n_dims == 2 ? (size_t)e.tensor->shape[0] : 0;
}

/* O_IN's mean |x| with every kv group's q heads given their average (see
 * above); x_mean as is for the other sites. out: cols floats. */
static lb_status search_mean(const lb__layer_stats *s, lb__calib_site site, float *out)
{
    const lb__site_stats *ss = &s->site[site];
    size_t cols = ss->cols, hd = s->head_dim, n_kv = s->n_kv_heads;
    memcpy(out, ss->mean_abs, cols * sizeof *out);
    if (site != LB__SITE_O_IN) return LB_OK;
    size_t n_heads = hd ? cols / hd : 0;
    if (!hd || !n_kv || n_heads * hd != cols || n_heads % n_kv)
        return lb__fail(LB_ERR_ARG, "AWQ, layer %zu: o_proj's %zu inputs are not heads of %zu over %zu kv heads",
                        s->layer, cols, hd, n_kv);
    size_t group = n_heads / n_kv;
    for (size_t g = 0; g < n_kv; g++)
        for (size_t d = 0; d < hd; d++) {
            double sum = 0;
            for (size_t k = 0; k < group; k++) sum += ss->mean_abs[(g * group + k) * hd + d];
            for (size_t k = 0; k < group; k++) out[(g * group + k) * hd + d] = (float)(sum / (double)group);
        }
    return LB_OK;
}

/* A member's quantizer in the scale search: its lb__fakeq first (the
 * context lb__fake_quantize reads) and, with an importance vector, the
 * entry's and the copy for the scaled weight that the quantizer reads. */
typedef struct member_q {
    lb__fakeq f;
    const float *base;
    float *scaled;
    size_t n;
} member_q;

/* The importance of a column of W diag(s) is E[(x_j / s_j)^2]. An
 * importance vector of another length than the rows (or rows x experts)
 * is one the ggml quantizers ignore: left as it is. */
static void scale_importance(const float *base, size_t n, const float *s, size_t cols, float *out)
{
    for (size_t k = 0; k < n; k++) out[k] = n % cols ? base[k] : base[k] / (s[k % cols] * s[k % cols]);
}

static void member_scale(void *ctx, const float *s, size_t cols)
{
    member_q *m = ctx;
    if (m->scaled) scale_importance(m->base, m->n, s, cols, m->scaled);
}

/* After a fold: the importance vectors of the site's weights follow their
 * inputs (x / s), so the quantizers weigh the scaled columns as the
 * search measured them. */
static lb_status fold_importance(lb_qmodel *q, const lb__site_stats *ss, const float *scale)
{
    lb_status st = LB_OK;
    for (size_t k = 0; k < ss->n_weights && st == LB_OK; k++) {
        size_t n = 0;
        const float *im = lb__qmodel_imatrix(q, ss->weight[k], &n);
        if (!im) continue;
        float *scaled = malloc(n * sizeof *scaled);
        if (!scaled) return lb__fail(LB_ERR_NOMEM, "AWQ: out of memory for an importance vector of %zu", n);
        scale_importance(im, n, scale, ss->cols, scaled);
        st = lb_qmodel_set_imatrix(q, ss->weight[k], scaled, n);
        free(scaled);
    }
    return st;
}

/* The scale search on one site whose weights are all quantized (f: their
 * quantizers); the best scale into scale (cols floats). */
static lb_status search_site(const lb__awq_options *o, lb_qmodel *q, const lb__layer_stats *s, lb__calib_site site,
                             lb__fakeq *f, float *scale)
{
    const lb__site_stats *ss = &s->site[site];
    size_t cols = ss->cols, rows[3], total = 0;
    member_q m[3];
    void *qctx[3];
    lb_status st = LB_OK;
    for (size_t k = 0; k < ss->n_weights; k++) {
        rows[k] = weight_rows(q, ss->weight[k]);
        total += rows[k];
        m[k] = (member_q){.f = f[k], .base = f[k].imatrix, .n = f[k].n_imatrix};
        if (m[k].base && !(m[k].f.imatrix = m[k].scaled = malloc(m[k].n * sizeof *m[k].scaled)))
            st = lb__fail(LB_ERR_NOMEM, "AWQ: out of memory for an importance vector of %zu", m[k].n);
        qctx[k] = &m[k];
    }
    float *w = malloc(total * cols * sizeof *w), *x_mean = malloc(cols * sizeof *x_mean);
    if (st == LB_OK && (!w || !x_mean))
        st = lb__fail(LB_ERR_NOMEM, "AWQ: out of memory for a %zu x %zu group", total, cols);
    for (size_t k = 0, r0 = 0; k < ss->n_weights && st == LB_OK; r0 += rows[k], k++)
        st = lb_qmodel_source_f32(q, ss->weight[k], w + r0 * cols);
    if (st == LB_OK) st = search_mean(s, site, x_mean);
    int best = 0;
    if (st == LB_OK)
        st = lb__awq_search_scale_ex(w, rows, ss->n_weights, cols, ss->sample, ss->n_sample, x_mean, o->grid,
                                     lb__fake_quantize, qctx, member_scale, scale, NULL, &best, o->threads);
    for (size_t k = 0; k < ss->n_weights; k++) free(m[k].scaled);
    free(w);
    free(x_mean);
    return st;
}

/* The clipping search on weight i (quantizer f) reading site ss, whose
 * input the folds divided by scale (NULL: not scaled); the clamped values
 * replace the weight's. */
static lb_status clip_weight(const lb__awq_options *o, lb_qmodel *q, const lb__site_stats *ss, size_t i, lb__fakeq *f,
                             const float *scale)
{
    size_t rows = weight_rows(q, i), cols = ss->cols;
    size_t group = lb__fakeq_block(f, cols), blocks = (cols + group - 1) / group;
    /* AutoAWQ's sample: every step-th row */
    size_t step = ss->n_sample / AWQ_CLIP_ROWS ? ss->n_sample / AWQ_CLIP_ROWS : 1;
    size_t n = (ss->n_sample + step - 1) / step;
    float *w = malloc(rows * cols * sizeof *w), *x = malloc(n * cols * sizeof *x);
    float *clip = malloc(rows * blocks * sizeof *clip);
    lb_status st = w && x && clip ? LB_OK : lb__fail(LB_ERR_NOMEM, "AWQ: out of memory clipping a %zu x %zu weight",
                                                     rows, cols);
    if (st == LB_OK) st = lb_qmodel_source_f32(q, i, w);
    for (size_t t = 0; t < n && st == LB_OK; t++)
        for (size_t c = 0; c < cols; c++)
            x[t * cols + c] = scale ? ss->sample[t * step * cols + c] / scale[c] : ss->sample[t * step * cols + c];
    if (st == LB_OK)
        st = lb__awq_search_clip(w, rows, cols, group, x, n, o->grid, AWQ_MAX_SHRINK, lb__fake_quantize, f, clip,
                                 o->threads);
    for (size_t r = 0; r < rows && st == LB_OK; r++)
        for (size_t c = 0; c < cols; c++) {
            float m = clip[r * blocks + c / group], *v = &w[r * cols + c];
            *v = *v > m ? m : *v < -m ? -m : *v;
        }
    if (st == LB_OK) st = lb_qmodel_replace(q, i, w);
    free(w);
    free(x);
    free(clip);
    return st;
}

lb_status lb__awq_layer(void *ctx, lb_qmodel *q, const lb__layer_stats *s)
{
    const lb__awq_options *o = ctx;
    if (!o || !q || !s) return lb__fail(LB_ERR_ARG, "lb__awq_layer: NULL argument");
    if (o->grid < 1) return lb__fail(LB_ERR_ARG, "AWQ: the scale grid has %d points", o->grid);
    float *scale[LB__SITE_COUNT] = {NULL};
    lb_status st = LB_OK;
    for (int site = 0; site < LB__SITE_COUNT && st == LB_OK; site++) {
        const lb__site_stats *ss = &s->site[site];
        lb__fakeq f[3];
        int all = ss->n_weights >= 1 && ss->n_weights <= 3;
        for (size_t k = 0; k < ss->n_weights && all; k++) all = weight_only_quantized(q, ss->weight[k], o->threads, &f[k]);
        if (!all) continue;
        if (!ss->sample || ss->n_sample == 0 || !ss->mean_abs) {
            st = lb__fail(LB_ERR_ARG, "AWQ, layer %zu: input %d has no sample rows to measure errors on", s->layer,
                          site);
            break;
        }
        if (!(scale[site] = malloc(ss->cols * sizeof *scale[site]))) {
            st = lb__fail(LB_ERR_NOMEM, "AWQ: out of memory for %zu scales", ss->cols);
            break;
        }
        st = search_site(o, q, s, (lb__calib_site)site, f, scale[site]);
        if (st == LB_OK) st = lb__fold_input_scale(q, s, (lb__calib_site)site, scale[site], o->threads);
        if (st == LB_OK) st = fold_importance(q, ss, scale[site]);
        if (st != LB_OK) st = lb__fail(st, "AWQ, layer %zu, input %d: %s", s->layer, site, lb_last_error());
    }
    for (int site = 0; o->clip && site < LB__SITE_COUNT && st == LB_OK; site++) {
        const lb__site_stats *ss = &s->site[site];
        /* q_proj and k_proj keep their range (see above) */
        for (size_t k = site == LB__SITE_ATTN_IN ? 2 : 0; k < ss->n_weights && st == LB_OK; k++) {
            lb__fakeq f;
            if (!weight_only_quantized(q, ss->weight[k], o->threads, &f)) continue;
            if (!ss->sample || ss->n_sample == 0) {
                st = lb__fail(LB_ERR_ARG, "AWQ, layer %zu: input %d has no sample rows to clip by", s->layer, site);
                break;
            }
            st = clip_weight(o, q, ss, ss->weight[k], &f, scale[site]);
            if (st != LB_OK) st = lb__fail(st, "AWQ, layer %zu, clipping weight %zu: %s", s->layer, ss->weight[k],
                                           lb_last_error());
        }
    }
    for (int site = 0; site < LB__SITE_COUNT; site++) free(scale[site]);
    return st;
}
