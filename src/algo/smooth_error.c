/* The output error of a smoothed, quantized group (see smooth_error.h). */
#include "algo/smooth_error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernel/matmul.h"
#include "model/act_sim.h"
#include "quant/quant_internal.h"
#include "util/error.h"
#include "weights/engine_scales.h"

/* y[n][rows] = x[n][cols] . w[rows][cols]^T */
static lb_status product(const float *x, size_t n, const float *w, size_t rows, size_t cols, int threads, float *y)
{
    lb__packed p;
    lb_status st = lb__pack_weight(w, rows, cols, &p);
    if (st != LB_OK) return st;
    st = lb__matmul(x, n, &p, y, threads);
    lb__packed_free(&p);
    return st;
}

void lb__smooth_group_free(lb__smooth_group *g)
{
    for (size_t k = 0; k < g->n_members && k < 3; k++) {
        free(g->m[k].y_ref), g->m[k].y_ref = NULL;
        free(g->m[k].col_absmax), g->m[k].col_absmax = NULL;
    }
    free(g->xs), free(g->xq), free(g->ws), free(g->y);
    g->xs = g->xq = g->ws = g->y = NULL;
}

lb_status lb__smooth_group_init(lb__smooth_group *g)
{
    if (g->n_members == 0 || g->n_members > 3 || g->n == 0 || g->cols == 0 || !g->x || !g->x_absmax)
        return lb__fail(LB_ERR_ARG, "smoothing search: %zu members, %zu x %zu sample rows", g->n_members, g->n,
                        g->cols);
    size_t max_rows = 0;
    for (size_t k = 0; k < g->n_members; k++) {
        g->m[k].y_ref = NULL, g->m[k].col_absmax = NULL;
        if (g->m[k].rows > max_rows) max_rows = g->m[k].rows;
    }
    g->xs = malloc(g->n * g->cols * sizeof *g->xs);
    g->xq = malloc(g->n * g->cols * sizeof *g->xq);
    g->ws = malloc(max_rows * g->cols * sizeof *g->ws);
    g->y = malloc(g->n * max_rows * sizeof *g->y);
    if (!g->xs || !g->xq || !g->ws || !g->y)
        return lb__fail(LB_ERR_NOMEM, "cannot allocate the smoothing search's buffers (%zu x %zu sample rows)", g->n,
                        g->cols);
    for (size_t k = 0; k < g->n_members; k++) {
        lb__smooth_member *m = &g->m[k];
        m->y_ref = malloc(g->n * m->rows * sizeof *m->y_ref);
        m->col_absmax = calloc(g->cols, sizeof *m->col_absmax);
        if (!m->y_ref || !m->col_absmax)
            return lb__fail(LB_ERR_NOMEM, "cannot allocate the reference outputs (%zu x %zu)", g->n, m->rows);
        for (size_t r = 0; r < m->rows; r++)
            for (size_t c = 0; c < g->cols; c++) {
                float a = fabsf(m->w[r * g->cols + c]);
                if (a > m->col_absmax[c]) m->col_absmax[c] = a;
            }
        lb_status st = product(g->x, g->n, m->w, m->rows, g->cols, g->threads, m->y_ref);
        if (st != LB_OK) return st;
    }
    return LB_OK;
}

static int same_act(const lb_qact *a, const lb_qact *b)
{
    if (a->mode != b->mode) return 0;
    if (a->mode == LB_ACT_NONE) return 1;
    char ta[96], tb[96];
    lb_qspec_format(&a->spec, ta, sizeof ta);
    lb_qspec_format(&b->spec, tb, sizeof tb);
    return strcmp(ta, tb) == 0;
}

static int same_spec(const lb_qspec *a, const lb_qspec *b)
{
    char ta[96], tb[96];
    lb_qspec_format(a, ta, sizeof ta);
    lb_qspec_format(b, tb, sizeof tb);
    return strcmp(ta, tb) == 0;
}

/* The range Q_a needs (act_sim.h): the static scale, or the calibrated
 * range of a LOCAL input; unused for NONE and DYNAMIC. */
static float act_range(const lb__smooth_group *g, const lb_qact *a, float amax)
{
    switch (a->mode) {
    case LB_ACT_NONE:
    case LB_ACT_DYNAMIC: return 0;
    case LB_ACT_STATIC: return lb__static_input_scale(a->spec.element, amax, g->scale_dtype);
    case LB_ACT_LOCAL: return amax;
    }
    return 0;
}

/* ws = Q_w(W_k s), the tensor scale of a two-level spec from the largest
 * |W s| over the members under that spec. */
static lb_status fake_quant_weight(const lb__smooth_group *g, size_t k, const float *s)
{
    const lb__smooth_member *m = &g->m[k];
    size_t cols = g->cols;
    for (size_t r = 0; r < m->rows; r++)
        for (size_t c = 0; c < cols; c++) g->ws[r * cols + c] = m->w[r * cols + c] * s[c];
    if (!m->quantized) return LB_OK;
    float amax = 0;
    if (m->spec.two_level)
        for (size_t j = 0; j < g->n_members; j++) {
            const lb__smooth_member *o = &g->m[j];
            if (!o->quantized || !same_spec(&o->spec, &m->spec)) continue;
            for (size_t c = 0; c < cols; c++) {
                float a = o->col_absmax[c] * s[c];
                if (a > amax) amax = a;
            }
        }
    lb_qtensor *qt = NULL;
    lb_status st = lb__quantize_ex(&m->spec, g->ws, m->rows, cols, g->threads, amax, &qt);
    if (st == LB_OK) st = lb_dequantize(qt, g->ws, g->threads);
    lb_qtensor_free(qt);
    return st;
}

lb_status lb__smooth_group_error(lb__smooth_group *g, const float *s, double *err)
{
    size_t n = g->n, cols = g->cols;
    float amax = 0;
    for (size_t c = 0; c < cols; c++) {
        float a = g->x_absmax[c] / s[c];
        if (a > amax) amax = a;
    }
    if (!(amax > 0)) amax = 1; /* an all-zero input: any range quantizes it exactly */
    for (size_t i = 0; i < n; i++)
        for (size_t c = 0; c < cols; c++) g->xs[i * cols + c] = g->x[i * cols + c] / s[c];
    double total = 0;
    const lb_qact *made = NULL; /* the activation quantization xq holds */
    for (size_t k = 0; k < g->n_members; k++) {
        const lb__smooth_member *m = &g->m[k];
        const float *xk = g->xs;
        lb_status st;
        if (m->act.mode != LB_ACT_NONE) {
            if (!made || !same_act(made, &m->act)) {
                st = lb__act_simulate(&m->act, act_range(g, &m->act, amax), g->xs, n, cols, g->threads, g->xq);
                if (st != LB_OK) return st;
                made = &m->act;
            }
            xk = g->xq;
        }
        if ((st = fake_quant_weight(g, k, s)) != LB_OK) return st;
        if ((st = product(xk, n, g->ws, m->rows, cols, g->threads, g->y)) != LB_OK) return st;
        for (size_t e = 0; e < n * m->rows; e++) {
            double d = (double)g->y[e] - m->y_ref[e];
            total += d * d;
        }
    }
    *err = total;
    return LB_OK;
}
