/* GPTQ's layer callback (gptq_layer.h), on the statistics the calibration
 * pass (QUANTIZED mode) took of the layer's four linear inputs.
 *
 * H: the site's sum of x x^T over all calibration tokens, as the pass
 * accumulates it. The paper's H = 2 X X^T / n differs by a constant
 * factor, which changes nothing: the solver's dampening is relative to
 * mean(diag H) and its result is invariant to scaling H.
 *
 * Order inside a layer: q, k, v, o, gate, up, down. In the pass's
 * QUANTIZED mode every site's statistics were taken with the layer
 * unquantized (its inputs from the quantized layers before it) and the
 * callback rounds all seven weights at once; in SUBLAYERS mode (the
 * default: --true-sequential) it is called once per site, after that
 * site's statistics were taken with the sites before it rounded, and
 * rounds that site's weights alone. Either way the order only matters for
 * two-level specs' fused-group range, which comes from the members'
 * source values and is the same whatever was set before. */
#include "algo/gptq_layer.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "algo/gptq_grid.h"
#include "algo/gptq_grid_ggml.h"
#include "util/clock.h"
#include "util/error.h"
#include "weights/qmodel_internal.h"

int lb__gptq_target(const lb_qmodel *q, size_t i)
{
    lb_qentry e;
    if (lb_qmodel_entry(q, i, &e) != LB_OK) return 0;
    return e.state == LB_QSTATE_QUANTIZED && e.ggml == LB_DT_COUNT && !lb_qmodel_outliers(q, i, NULL);
}

static void warn(const lb__gptq_layer_options *o, const char *fmt, ...) LB__PRINTF(2, 3);

static void warn(const lb__gptq_layer_options *o, const char *fmt, ...)
{
    if (!o->warn) return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    o->warn(o->warn_ctx, msg);
}

/* One weight done: counted, and what the user should know said. */
static void counted(lb__gptq_layer_options *o, size_t layer, const char *name, size_t cols, const lb__gptq_report *rep)
{
    o->weights++;
    o->dead_columns += rep->dead_columns;
    if (rep->damp_retries > 0) {
        o->damp_raised++;
        warn(o, "GPTQ, layer %zu, %s: the Hessian with dampening %g (of its mean diagonal) is not positive definite; "
             "dampening raised to %g (%d time%s)", layer, name, o->gptq.damp, rep->damp_rel, rep->damp_retries,
             rep->damp_retries == 1 ? "" : "s");
    }
    if (rep->dead_columns > 0)
        warn(o, "GPTQ, layer %zu, %s: %zu of %zu input features were 0 on every calibration token; their weights are "
             "set to 0 (more calibration text may reach them)", layer, name, rep->dead_columns, cols);
}

/* GPTQ of weight i (a target) against h; its quantized tensor set. */
static lb_status gptq_spec_weight(lb__gptq_layer_options *o, lb_qmodel *q, size_t layer, size_t i, const double *h,
                                  size_t h_cols)
{
    lb_qentry e;
    lb_status st = lb_qmodel_entry(q, i, &e);
    if (st != LB_OK) return st;
    const char *name = e.tensor->name;
    size_t rows = (size_t)e.tensor->shape[0], cols = (size_t)e.tensor->shape[1];
    if (e.tensor->n_dims != 2 || cols != h_cols)
        return lb__fail(LB_ERR_ARG, "GPTQ, layer %zu: %s has rows of %zu, its input %zu features", layer, name, cols,
                        h_cols);
    float amax = 0;
    if ((st = lb__qmodel_group_amax(q, i, &amax)) != LB_OK) return st;
    float *w = malloc(rows * cols * sizeof *w);
    if (!w) return lb__fail(LB_ERR_NOMEM, "GPTQ: out of memory for %s (%zu x %zu)", name, rows, cols);
    double t0 = lb__now();
    lb__gptq_spec_grid g;
    lb__gptq_grid grid;
    lb__gptq_report rep = {0};
    lb_qtensor *qt = NULL;
    st = lb_qmodel_source_f32(q, i, w);
    if (st == LB_OK) st = lb__gptq_grid_init(&g, &e.spec, w, rows, cols, amax, o->gptq.threads, o->mse_scales, &grid);
    if (st == LB_OK) {
        st = lb__gptq(w, rows, cols, h, &o->gptq, &grid, &rep);
        if (st == LB_OK) st = lb__gptq_grid_qtensor(&g, w, &qt);
        lb__gptq_grid_free(&g);
    }
    free(w);
    o->seconds += lb__now() - t0;
    if (st != LB_OK) return lb__fail(st, "GPTQ, layer %zu, %s: %s", layer, name, lb_last_error());
    if ((st = lb_qmodel_set_qtensor(q, i, qt)) != LB_OK) return st;
    counted(o, layer, name, cols, &rep);
    return LB_OK;
}

/* A weight held in a ggml type: plain ones (f16, f32) have nothing to
 * round; block types are rounded onto their blocks' grids (the scales
 * and mins lowbit's ggml quantizer picks for each block's current values,
 * with an importance vector: gptq_grid_ggml.h) and their bytes set for
 * the GGUF writer. The importance vector is the entry's (--imatrix) when
 * it has one, else the input's mean x^2 per channel, diag(H) / tokens:
 * the statistic llama-imatrix collects, of the inputs GPTQ itself sees
 * (after the layers before are quantized, and after AWQ's folds with
 * awq+gptq). On SmolLM2 Q4_K_M, KLD by llama-perplexity: 0.0309 with the
 * ggml rules' own weights, 0.0249 with an imatrix of the same text. */
static lb_status gptq_ggml_weight(lb__gptq_layer_options *o, lb_qmodel *q, size_t layer, size_t i,
                                  const lb__site_stats *ss)
{
    const double *h = ss->hessian;
    size_t h_cols = ss->cols;
    lb_qentry e;
    lb_status st = lb_qmodel_entry(q, i, &e);
    if (st != LB_OK) return st;
    const lb_dtype_info *t = lb_dtype_get(e.ggml);
    if (!t || t->block <= 1 || lb_qmodel_outliers(q, i, NULL)) return LB_OK;
    const char *name = e.tensor->name;
    if (!lb__gptq_ggml_supports(e.ggml))
        return lb__fail(LB_ERR_UNSUPPORTED, "GPTQ, layer %zu, %s: no GPTQ grid for the ggml type %s", layer, name,
                        t->name);
    if (!h) return lb__fail(LB_ERR_ARG, "GPTQ, layer %zu: the calibration pass took no Hessian of %s's input", layer, name);
    size_t rows = (size_t)e.tensor->shape[0], cols = (size_t)e.tensor->shape[1];
    if (e.tensor->n_dims != 2 || cols != h_cols)
        return lb__fail(LB_ERR_ARG, "GPTQ, layer %zu: %s has rows of %zu, its input %zu features", layer, name, cols,
                        h_cols);
    size_t n_imatrix = 0;
    const float *imatrix = lb__qmodel_imatrix(q, i, &n_imatrix);
    if (imatrix && n_imatrix != cols)
        return lb__fail(LB_ERR_UNSUPPORTED, "GPTQ, layer %zu, %s: an importance vector of %zu values for rows of %zu "
                        "(one per expert?) is not supported", layer, name, n_imatrix, cols);
    uint64_t n_bytes = 0;
    if ((st = lb_dtype_bytes(e.ggml, (uint64_t)rows * cols, &n_bytes)) != LB_OK) return st;
    float *w = malloc(rows * cols * sizeof *w), *diag = imatrix ? NULL : malloc(cols * sizeof *diag);
    void *bytes = malloc(n_bytes);
    if (!w || !bytes || (!imatrix && !diag)) {
        free(w), free(bytes), free(diag);
        return lb__fail(LB_ERR_NOMEM, "GPTQ: out of memory for %s (%zu x %zu)", name, rows, cols);
    }
    double t0 = lb__now();
    float tensor_scale = 1.0f;
    lb__gptq_report rep = {0};
    if (!imatrix) {
        for (size_t c = 0; c < cols; c++) diag[c] = (float)(h[c * cols + c] / (double)ss->rows);
        imatrix = diag;
    }
    st = lb_qmodel_source_f32(q, i, w);
    if (st == LB_OK)
        st = lb__gptq_ggml_run(e.ggml, w, rows, cols, h, imatrix, &o->gptq, bytes, &tensor_scale, &rep);
    free(w), free(diag);
    o->seconds += lb__now() - t0;
    if (st == LB_OK) st = lb__qmodel_set_ggml_bytes(q, i, bytes, (size_t)n_bytes, tensor_scale);
    free(bytes);
    if (st != LB_OK) return lb__fail(st, "GPTQ, layer %zu, %s: %s", layer, name, lb_last_error());
    counted(o, layer, name, cols, &rep);
    return LB_OK;
}

lb_status lb__gptq_layer(void *ctx, lb_qmodel *q, const lb__layer_stats *s)
{
    lb__gptq_layer_options *o = ctx;
    if (!o || !q || !s) return lb__fail(LB_ERR_ARG, "lb__gptq_layer: NULL argument");
    lb_status st = LB_OK;
    for (int site = 0; site < LB__SITE_COUNT && st == LB_OK; site++) {
        if (s->partial && site != s->current) continue;
        const lb__site_stats *ss = &s->site[site];
        for (size_t k = 0; k < ss->n_weights && st == LB_OK; k++) {
            size_t i = ss->weight[k];
            lb_qentry e;
            if ((st = lb_qmodel_entry(q, i, &e)) != LB_OK) break;
            if (e.ggml != LB_DT_COUNT) {
                st = gptq_ggml_weight(o, q, s->layer, i, ss);
                continue;
            }
            if (!lb__gptq_target(q, i)) continue;
            if (!ss->hessian)
                return lb__fail(LB_ERR_ARG, "GPTQ, layer %zu: the calibration pass took no Hessian of input %d",
                                s->layer, site);
            st = gptq_spec_weight(o, q, s->layer, i, ss->hessian, ss->cols);
        }
    }
    return st;
}
