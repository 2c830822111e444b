/* lb_qmodel_apply_method (lowbit.h): the calibration windows, the
 * calibration pass in the mode each method calibrates in, and the method's
 * layer callback (AWQ+GPTQ: two passes over the same windows, AWQ's in
 * SOURCE mode, then GPTQ's in QUANTIZED mode on the transformed model). */
#include <stdlib.h>
#include <string.h>

#include "algo/awq.h"
#include "algo/calib_pass.h"
#include "algo/gptq_layer.h"
#include "algo/smoothquant.h"
#include "util/error.h"

#define LB_METHOD_DEFAULT_SEQS 128
#define LB_METHOD_DEFAULT_LEN 512
#define LB_METHOD_DEFAULT_SAMPLE 4096
#define LB_AWQ_GRID 20 /* the paper's grid of scale exponents */
#define LB_GPTQ_DEFAULT_DAMP 0.01 /* the paper's dampening, of mean(diag H) */

static const char *const method_names[LB_METHOD_COUNT] = {"rtn", "smoothquant", "awq", "gptq", "awq+gptq"};

const char *lb_method_name(lb_method m)
{
    return (unsigned)m < LB_METHOD_COUNT ? method_names[m] : NULL;
}

lb_status lb_method_parse(const char *name, lb_method *out)
{
    for (int m = 0; name && m < LB_METHOD_COUNT; m++)
        if (strcmp(name, method_names[m]) == 0) {
            *out = (lb_method)m;
            return LB_OK;
        }
    return lb__fail(LB_ERR_ARG, "unknown method '%s' (rtn, smoothquant, awq, gptq, awq+gptq)", name ? name : "(null)");
}

/* A linear weight of a decoder layer (what the calibration pass hands a
 * layer callback): model.layers.N.*_proj.weight. */
static int decoder_linear(const char *name)
{
    static const char suffix[] = "_proj.weight";
    size_t n = strlen(name), m = sizeof suffix - 1;
    return strncmp(name, "model.layers.", 13) == 0 && n > m && strcmp(name + n - m, suffix) == 0;
}

/* How many weights the method would work on: SmoothQuant the quantized
 * layers whose inputs are quantized too, AWQ the weight-only ones (a
 * spec, or a ggml block type), GPTQ the decoder layers' weights quantized
 * under a spec (ggml: the decoder weights in a ggml block type). A method
 * with nothing to work on is an error,
 * not a silent no-op that looks like a result. */
static size_t method_targets(const lb_qmodel *q, lb_method m, int ggml)
{
    size_t n = 0;
    for (size_t i = 0; i < lb_qmodel_count(q); i++) {
        lb_qentry e;
        if (lb_qmodel_entry(q, i, &e) != LB_OK) continue;
        const lb_dtype_info *g = e.ggml == LB_DT_COUNT ? NULL : lb_dtype_get(e.ggml);
        int spec = e.state == LB_QSTATE_QUANTIZED, blocks = g && g->block > 1;
        if (m == LB_METHOD_SMOOTHQUANT) n += spec && e.act.mode != LB_ACT_NONE;
        else if (m == LB_METHOD_AWQ) n += (spec && e.act.mode == LB_ACT_NONE) || blocks;
        else if (m == LB_METHOD_GPTQ && ggml) n += blocks && decoder_linear(e.tensor->name);
        else if (m == LB_METHOD_GPTQ) n += lb__gptq_target(q, i) && decoder_linear(e.tensor->name);
    }
    return n;
}

/* Methods that rescale input channels (SmoothQuant, AWQ, AWQ+GPTQ) make
 * an importance vector measured on the unscaled inputs weigh the wrong
 * channels: LB_ERR_ARG naming the first decoder weight that has one. */
static lb_status refuse_imatrix(const lb_qmodel *q, lb_method m)
{
    if (m != LB_METHOD_SMOOTHQUANT && m != LB_METHOD_AWQ && m != LB_METHOD_AWQ_GPTQ) return LB_OK;
    for (size_t i = 0; i < lb_qmodel_count(q); i++) {
        lb_qentry e;
        if (lb_qmodel_entry(q, i, &e) == LB_OK && e.has_imatrix && decoder_linear(e.tensor->name))
            return lb__fail(LB_ERR_ARG, "%s rescales the input channels of %s, so its importance vector (an imatrix, "
                            "measured on the unscaled inputs) would weigh the wrong channels: set none (gptq takes "
                            "one)", lb_method_name(m), e.tensor->name);
    }
    return LB_OK;
}

/* GPTQ's options from the method's: LB_ERR_ARG for values out of range. */
static lb_status gptq_options(const lb_method_options *o, lb__gptq_layer_options *g)
{
    if (o->gptq_scales != LB_GPTQ_SCALES_MSE && o->gptq_scales != LB_GPTQ_SCALES_MINMAX)
        return lb__fail(LB_ERR_ARG, "GPTQ's scales: %d is neither LB_GPTQ_SCALES_MSE nor _MINMAX", (int)o->gptq_scales);
    if (o->gptq_order != LB_GPTQ_ORDER_ACT && o->gptq_order != LB_GPTQ_ORDER_FILE)
        return lb__fail(LB_ERR_ARG, "GPTQ's order: %d is neither LB_GPTQ_ORDER_ACT nor _FILE", (int)o->gptq_order);
    if (o->gptq_sequential != LB_GPTQ_SEQ_SUBLAYER && o->gptq_sequential != LB_GPTQ_SEQ_LAYER)
        return lb__fail(LB_ERR_ARG, "GPTQ's sequence: %d is neither LB_GPTQ_SEQ_SUBLAYER nor _LAYER",
                        (int)o->gptq_sequential);
    if (!(o->damp == 0 || (o->damp > 0 && o->damp <= 1)))
        return lb__fail(LB_ERR_ARG, "GPTQ's dampening is a fraction of the Hessian's mean diagonal in (0, 1] (the "
                        "paper: 0.01), not %g", o->damp);
    int act = o->gptq_order == LB_GPTQ_ORDER_ACT;
    *g = (lb__gptq_layer_options){.gptq = {.damp = o->damp > 0 ? o->damp : LB_GPTQ_DEFAULT_DAMP, .block = o->block,
                                           .actorder = act,
                                           /* act-order's groups: scales fixed before any rounding */
                                           .static_groups = o->static_groups || act,
                                           .threads = o->threads},
                                  .mse_scales = o->gptq_scales == LB_GPTQ_SCALES_MSE,
                                  .warn = o->warn, .warn_ctx = o->warn_ctx};
    return LB_OK;
}

lb_status lb_qmodel_apply_method(lb_qmodel *q, const int32_t *tokens, size_t n, const lb_method_options *o)
{
    if (!q || !o) return lb__fail(LB_ERR_ARG, "lb_qmodel_apply_method: NULL argument");
    lb__calib_layer_fn fn = NULL;
    void *ctx = NULL;
    lb__smooth_options smooth = {.alpha = o->alpha, .search = o->alpha_search, .threads = o->threads};
    lb__awq_options awq = {.grid = LB_AWQ_GRID, .clip = 1, .threads = o->threads};
    lb__gptq_layer_options gptq;
    int with_awq = 0, with_gptq = 0;
    lb_status st = LB_OK;
    switch (o->method) {
    case LB_METHOD_RTN: return LB_OK;
    case LB_METHOD_SMOOTHQUANT:
        if (!o->alpha_search && !(o->alpha >= 0 && o->alpha <= 1))
            return lb__fail(LB_ERR_ARG, "SmoothQuant's alpha must be in [0, 1], not %g", (double)o->alpha);
        fn = lb__smoothquant_layer, ctx = &smooth;
        break;
    case LB_METHOD_AWQ: with_awq = 1; break;
    case LB_METHOD_GPTQ: with_gptq = 1; break;
    case LB_METHOD_AWQ_GPTQ: with_awq = with_gptq = 1; break;
    case LB_METHOD_COUNT: return lb__fail(LB_ERR_ARG, "lb_qmodel_apply_method: method %d", (int)o->method);
    }
    if (with_gptq && (st = gptq_options(o, &gptq)) != LB_OK) return st;
    if ((st = refuse_imatrix(q, o->method)) != LB_OK) return st;
    if (o->method == LB_METHOD_SMOOTHQUANT && method_targets(q, o->method, 0) == 0)
        return lb__fail(LB_ERR_ARG, "SmoothQuant moves activation outliers into the weights, so it needs layers whose "
                        "input activations are quantized (W8A8: --scheme W8A8-INT8, or a recipe with "
                        "input_activations); none are here (weight-only: --method awq)");
    if (with_awq && method_targets(q, LB_METHOD_AWQ, 0) == 0)
        return lb__fail(LB_ERR_ARG, "AWQ scales the weights of weight-only quantization (W4A16, NVFP4A16, MXFP4A16, "
                        "GGUF types); no layer here is quantized weight-only (with quantized activations: "
                        "--method smoothquant or gptq)");
    if (with_gptq && method_targets(q, LB_METHOD_GPTQ, 0) + method_targets(q, LB_METHOD_GPTQ, 1) == 0)
        return lb__fail(LB_ERR_ARG, "GPTQ rounds the decoder layers' weights quantized under a spec; none is here "
                        "(every q/k/v/o/gate/up/down weight is kept 16-bit, or has 16-bit outlier columns)");
    if (!tokens || n == 0) return lb__fail(LB_ERR_ARG, "lb_qmodel_apply_method: no calibration tokens");
    size_t len = o->calib_len ? o->calib_len : LB_METHOD_DEFAULT_LEN;
    uint32_t model_ctx = lb_model_arch(lb_qmodel_model(q))->max_seq_len;
    if (model_ctx && len > model_ctx) len = model_ctx;
    size_t n_windows = 0;
    int32_t *windows = NULL;
    st = lb__calib_windows(tokens, n, o->calib_seqs ? o->calib_seqs : LB_METHOD_DEFAULT_SEQS, len, -1, &windows,
                           &n_windows);
    if (st != LB_OK) return st;
    lb__calib_pass_options po = {.mode = LB__CALIB_SOURCE,
                                 .sample_rows = o->sample_rows ? o->sample_rows : LB_METHOD_DEFAULT_SAMPLE,
                                 .threads = o->threads, .progress = o->progress, .progress_ctx = o->progress_ctx};
    if (fn) { /* SmoothQuant's folds leave each layer's outputs as they were: one run through each layer */
        po.keep_outputs = 1;
        st = lb__calib_pass(q, windows, n_windows, len, &po, fn, ctx);
        po.keep_outputs = 0;
    }
    if (with_awq) st = lb__calib_pass(q, windows, n_windows, len, &po, lb__awq_layer, &awq);
    if (st == LB_OK && with_gptq) {
        /* GPTQ needs no sample rows: each weight's Hessian is its whole statistic */
        po.mode = o->gptq_sequential == LB_GPTQ_SEQ_LAYER ? LB__CALIB_QUANTIZED : LB__CALIB_SUBLAYERS;
        po.sample_rows = 0, po.hessian = 1;
        st = lb__calib_pass(q, windows, n_windows, len, &po, lb__gptq_layer, &gptq);
    }
    free(windows);
    return st;
}
