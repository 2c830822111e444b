/* Folding input-channel scales into a layer (see fold.h). */
#include "algo/fold.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h"
#include "util/parallel.h"

typedef struct scale_job {
    float *w;
    size_t cols;
    const float *col_mul;   /* multiply column c by col_mul[c], or NULL */
    const float *col_div;   /* divide column c by col_div[c], or NULL */
    const float *row_div;   /* divide row r by row_div[r], or NULL */
} scale_job;

static lb_status scale_rows(void *ctx, size_t begin, size_t end)
{
    const scale_job *j = ctx;
    for (size_t r = begin; r < end; r++) {
        float *row = j->w + r * j->cols;
        if (j->col_mul)
            for (size_t c = 0; c < j->cols; c++) row[c] *= j->col_mul[c];
        if (j->col_div)
            for (size_t c = 0; c < j->cols; c++) row[c] /= j->col_div[c];
        if (j->row_div)
            for (size_t c = 0; c < j->cols; c++) row[c] /= j->row_div[r];
    }
    return LB_OK;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* Reads entry i's source values, applies the job (rows x cols) and
 * replaces them. */
static lb_status rescale(lb_qmodel *q, size_t i, size_t rows, size_t cols, const float *col_mul, const float *col_div,
                         const float *row_div, int threads)
{
    size_t n = rows * cols;
    float *w = malloc((n ? n : 1) * sizeof *w);
    if (!w) return lb__fail(LB_ERR_NOMEM, "cannot allocate %zu x %zu values to fold scales into", rows, cols);
    lb_status st = lb_qmodel_source_f32(q, i, w);
    if (st == LB_OK) {
        scale_job job = {w, cols, col_mul, col_div, row_div};
        st = lb__parallel_for(rows, 1, lb__threads_for(threads, rows * cols * sizeof *w), scale_rows, &job);
    }
    if (st == LB_OK) st = lb_qmodel_replace(q, i, w);
    free(w);
    return st;
}

/* Entry i as a tensor of n elements (a norm or bias), or rows x cols. */
static lb_status check_shape(const lb_qmodel *q, size_t i, size_t rows, size_t cols, const char *what)
{
    lb_qentry e;
    lb_status st = lb_qmodel_entry(q, i, &e);
    if (st != LB_OK) return st;
    const lb_tensor *t = e.tensor;
    int ok = cols == 0 ? t->n_dims == 1 && t->shape[0] == rows
                       : t->n_dims == 2 && t->shape[0] == rows && t->shape[1] == cols;
    if (!ok)
        return lb__fail(LB_ERR_ARG, "folding scales: %s (%s) is not %zu x %zu as the layer's statistics say", t->name,
                        what, rows, cols);
    return LB_OK;
}

/* The producer of O_IN or DOWN_IN: the weight that must be entry `i`,
 * named `suffix`, with `rows` rows; its bias (same name, .bias), if any. */
static lb_status find_producer(const lb_qmodel *q, size_t i, const char *suffix, size_t rows, size_t *cols,
                               long *bias)
{
    lb_qentry e;
    lb_status st = lb_qmodel_entry(q, i, &e);
    if (st != LB_OK) return st;
    const lb_tensor *t = e.tensor;
    if (!ends_with(t->name, suffix) || t->n_dims != 2 || t->shape[0] != rows)
        return lb__fail(LB_ERR_ARG, "folding scales: %s is not a %s of %zu rows", t->name, suffix, rows);
    *cols = (size_t)t->shape[1];
    char name[256];
    size_t n = strlen(t->name);
    *bias = -1;
    if (n - 7 + 5 < sizeof name) {
        snprintf(name, sizeof name, "%.*s.bias", (int)(n - 7), t->name); /* ".weight" -> ".bias" */
        size_t b;
        if (lb_model_find(lb_qmodel_model(q), name)) {
            if ((st = lb_qmodel_find(q, name, &b)) != LB_OK) return st;
            if ((st = check_shape(q, b, rows, 0, "bias")) != LB_OK) return st;
            *bias = (long)b;
        }
    }
    return LB_OK;
}

/* O_IN: the divisor of each v row (kv channel (g, d)) from the scale of
 * o_proj's input channels, which must agree over the q heads of group g. */
static lb_status v_row_divisors(const lb__layer_stats *s, const float *scale, size_t cols, float *div)
{
    size_t hd = s->head_dim, n_kv = s->n_kv_heads;
    size_t n_heads = hd ? cols / hd : 0;
    if (!hd || !n_kv || n_heads * hd != cols || n_heads % n_kv != 0)
        return lb__fail(LB_ERR_ARG, "folding into v_proj: o_proj's %zu inputs are not heads of %zu over %zu kv heads",
                        cols, hd, n_kv);
    size_t group = n_heads / n_kv;
    for (size_t g = 0; g < n_kv; g++)
        for (size_t d = 0; d < hd; d++) {
            float v = scale[g * group * hd + d];
            for (size_t k = 1; k < group; k++) {
                size_t c = (g * group + k) * hd + d;
                if (scale[c] != v)
                    return lb__fail(LB_ERR_ARG, "layer %zu: o_proj's input scale differs within kv group %zu (channel "
                                    "%zu: %g, channel %zu: %g); v_proj can only take one per kv channel", s->layer, g,
                                    g * group * hd + d, (double)v, c, (double)scale[c]);
            }
            div[g * hd + d] = v;
        }
    return LB_OK;
}

lb_status lb__fold_input_scale(lb_qmodel *q, const lb__layer_stats *s, lb__calib_site site, const float *scale,
                               int threads)
{
    if (!q || !s || !scale || (unsigned)site >= LB__SITE_COUNT)
        return lb__fail(LB_ERR_ARG, "lb__fold_input_scale: NULL argument or site %d", (int)site);
    const lb__site_stats *ss = &s->site[site];
    size_t cols = ss->cols;
    for (size_t j = 0; j < cols; j++)
        if (!(scale[j] > 0) || isinf(scale[j]))
            return lb__fail(LB_ERR_ARG, "layer %zu: input scale %zu is %g (scales must be positive and finite)",
                            s->layer, j, (double)scale[j]);
    if (ss->n_weights == 0 || ss->n_weights > 3)
        return lb__fail(LB_ERR_ARG, "layer %zu: site %d has %zu weights", s->layer, (int)site, ss->n_weights);
    size_t rows[3];
    lb_status st = LB_OK;
    for (size_t k = 0; k < ss->n_weights && st == LB_OK; k++) {
        lb_qentry e;
        if ((st = lb_qmodel_entry(q, ss->weight[k], &e)) != LB_OK) return st;
        rows[k] = e.tensor->n_dims == 2 ? (size_t)e.tensor->shape[0] : 0;
        st = check_shape(q, ss->weight[k], rows[k], cols, "a weight of this input");
    }
    if (st != LB_OK) return st;

    /* the producer: a norm (ATTN_IN, MLP_IN) or the rows of a weight */
    size_t producer = 0, p_rows = cols, p_cols = 0;
    long bias = -1;
    float *div = NULL;
    switch (site) {
    case LB__SITE_ATTN_IN: producer = s->attn_norm; break;
    case LB__SITE_MLP_IN: producer = s->ffn_norm; break;
    case LB__SITE_O_IN:
        if (s->site[LB__SITE_ATTN_IN].n_weights != 3)
            return lb__fail(LB_ERR_ARG, "layer %zu: no v_proj to fold o_proj's scale into", s->layer);
        producer = s->site[LB__SITE_ATTN_IN].weight[2];
        p_rows = s->n_kv_heads * s->head_dim;
        if ((st = find_producer(q, producer, "self_attn.v_proj.weight", p_rows, &p_cols, &bias)) != LB_OK) return st;
        if (!(div = malloc((p_rows ? p_rows : 1) * sizeof *div)))
            return lb__fail(LB_ERR_NOMEM, "cannot allocate %zu v_proj divisors", p_rows);
        if ((st = v_row_divisors(s, scale, cols, div)) != LB_OK) return free(div), st;
        break;
    case LB__SITE_DOWN_IN:
        if (s->site[LB__SITE_MLP_IN].n_weights != 2)
            return lb__fail(LB_ERR_ARG, "layer %zu: no up_proj to fold down_proj's scale into", s->layer);
        producer = s->site[LB__SITE_MLP_IN].weight[1];
        if ((st = find_producer(q, producer, "mlp.up_proj.weight", p_rows, &p_cols, &bias)) != LB_OK) return st;
        break;
    case LB__SITE_COUNT: return lb__fail(LB_ERR_ARG, "lb__fold_input_scale: site %d", (int)site);
    }
    if (p_cols == 0 && (st = check_shape(q, producer, cols, 0, "the norm in front of this input")) != LB_OK) return st;

    for (size_t k = 0; k < ss->n_weights && st == LB_OK; k++)
        st = rescale(q, ss->weight[k], rows[k], cols, scale, NULL, NULL, threads);
    const float *row_div = div ? div : scale; /* v's rows are kv channels; up's rows are down's inputs */
    if (st == LB_OK)
        st = p_cols ? rescale(q, producer, p_rows, p_cols, NULL, NULL, row_div, threads)
                    : rescale(q, producer, 1, cols, NULL, scale, NULL, threads); /* the norm, element by element */
    if (st == LB_OK && bias >= 0) st = rescale(q, (size_t)bias, 1, p_rows, NULL, row_div, NULL, threads);
    free(div);
    return st;
}
