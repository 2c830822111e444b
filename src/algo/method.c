/* lb_qmodel_apply_method (lowbit.h): the calibration windows, the
 * calibration pass in the mode each method calibrates in, and the method's
 * layer callback. */
#include <stdlib.h>
#include <string.h>

#include "algo/awq.h"
#include "algo/calib_pass.h"
#include "algo/smoothquant.h"
#include "util/error.h"

#define LB_METHOD_DEFAULT_SEQS 128
#define LB_METHOD_DEFAULT_LEN 512
#define LB_METHOD_DEFAULT_SAMPLE 4096
#define LB_AWQ_GRID 20 /* the paper's grid of scale exponents */

static const char *const method_names[LB_METHOD_COUNT] = {"rtn", "smoothquant", "awq"};

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
    return lb__fail(LB_ERR_ARG, "unknown method '%s' (rtn, smoothquant, awq)", name ? name : "(null)");
}

/* How many weights the method would work on: SmoothQuant the quantized
 * layers whose inputs are quantized too, AWQ the weight-only ones (a
 * spec, or a ggml block type). A method with nothing to work on is an
 * error, not a silent no-op that looks like a result. */
static size_t method_targets(const lb_qmodel *q, lb_method m)
{
    size_t n = 0;
    for (size_t i = 0; i < lb_qmodel_count(q); i++) {
        lb_qentry e;
        if (lb_qmodel_entry(q, i, &e) != LB_OK) continue;
        const lb_dtype_info *g = e.ggml == LB_DT_COUNT ? NULL : lb_dtype_get(e.ggml);
        int spec = e.state == LB_QSTATE_QUANTIZED, blocks = g && g->block > 1;
        if (m == LB_METHOD_SMOOTHQUANT) n += spec && e.act.mode != LB_ACT_NONE;
        else if (m == LB_METHOD_AWQ) n += (spec && e.act.mode == LB_ACT_NONE) || blocks;
    }
    return n;
}

lb_status lb_qmodel_apply_method(lb_qmodel *q, const int32_t *tokens, size_t n, const lb_method_options *o)
{
    if (!q || !o) return lb__fail(LB_ERR_ARG, "lb_qmodel_apply_method: NULL argument");
    lb__calib_layer_fn fn = NULL;
    void *ctx = NULL;
    lb__smooth_options smooth = {.alpha = o->alpha, .search = o->alpha_search, .threads = o->threads};
    lb__awq_options awq = {.grid = LB_AWQ_GRID, .clip = 1, .threads = o->threads};
    switch (o->method) {
    case LB_METHOD_RTN: return LB_OK;
    case LB_METHOD_SMOOTHQUANT:
        if (!o->alpha_search && !(o->alpha >= 0 && o->alpha <= 1))
            return lb__fail(LB_ERR_ARG, "SmoothQuant's alpha must be in [0, 1], not %g", (double)o->alpha);
        fn = lb__smoothquant_layer, ctx = &smooth;
        break;
    case LB_METHOD_AWQ: fn = lb__awq_layer, ctx = &awq; break;
    case LB_METHOD_COUNT: return lb__fail(LB_ERR_ARG, "lb_qmodel_apply_method: method %d", (int)o->method);
    }
    if (o->method == LB_METHOD_SMOOTHQUANT && method_targets(q, o->method) == 0)
        return lb__fail(LB_ERR_ARG, "SmoothQuant moves activation outliers into the weights, so it needs layers whose "
                        "input activations are quantized (W8A8: --scheme W8A8-INT8, or a recipe with "
                        "input_activations); none are here (weight-only: --method awq)");
    if (o->method == LB_METHOD_AWQ && method_targets(q, o->method) == 0)
        return lb__fail(LB_ERR_ARG, "AWQ scales the weights of weight-only quantization (W4A16, NVFP4A16, MXFP4A16, "
                        "GGUF types); no layer here is quantized weight-only (with quantized activations: "
                        "--method smoothquant)");
    if (!tokens || n == 0) return lb__fail(LB_ERR_ARG, "lb_qmodel_apply_method: no calibration tokens");
    size_t len = o->calib_len ? o->calib_len : LB_METHOD_DEFAULT_LEN;
    uint32_t model_ctx = lb_model_arch(lb_qmodel_model(q))->max_seq_len;
    if (model_ctx && len > model_ctx) len = model_ctx;
    size_t n_windows = 0;
    int32_t *windows = NULL;
    lb_status st = lb__calib_windows(tokens, n, o->calib_seqs ? o->calib_seqs : LB_METHOD_DEFAULT_SEQS, len, -1,
                                     &windows, &n_windows);
    if (st != LB_OK) return st;
    lb__calib_pass_options po = {.mode = LB__CALIB_SOURCE,
                                 .sample_rows = o->sample_rows ? o->sample_rows : LB_METHOD_DEFAULT_SAMPLE,
                                 .threads = o->threads, .progress = o->progress, .progress_ctx = o->progress_ctx};
    st = lb__calib_pass(q, windows, n_windows, len, &po, fn, ctx);
    free(windows);
    return st;
}
