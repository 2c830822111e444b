/* GPTQ's grids for lb_qspec weight specs (gptq_grid.h says the rules). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "algo/gptq_grid.h"
#include "format/convert.h"
#include "util/error.h"

void lb__gptq_grid_free(lb__gptq_spec_grid *g)
{
    if (!g) return;
    free(g->scales), free(g->chosen), free(g->sub), free(g->tmp), free(g->codes);
    g->scales = NULL, g->chosen = NULL, g->sub = NULL, g->tmp = NULL, g->codes = NULL;
}

/* The block scales of a quantized tensor as its dequantization reads them:
 * divisors from the codes (lb__scale_divisors, g's tensor scale), the
 * decoded values, zero points. out[r * stride] for every row r (a 2-D
 * band's scale in each of its rows); spr == 1 (one block per row, or the
 * one tensor scale when rows == 1). vals: scale_count floats. */
static void read_scales(const lb__gptq_spec_grid *g, const lb_qtensor *q, size_t rows, float *vals, float *divs,
                        lb__block_scale *out, size_t stride)
{
    const lb_format_info *sf = lb_format_get(g->spec.scale_format);
    lb__scale_divisors(&g->rules, g->isa, q->scales, q->scale_count, divs);
    lb__decode_kernel(g->isa)(sf, q->scales, q->scale_count, vals);
    for (size_t r = 0; r < rows; r++) {
        size_t i = q->spec.granularity == LB_GRAN_TENSOR ? 0 : r / q->block_rows;
        lb__block_scale *s = out + r * stride;
        s->code = lb__load_code(sf, q->scales, i);
        s->value = vals[i];
        s->divisor = divs[i];
        s->zero_point = q->zero_points ? lb__zero_point(q, q->spec.granularity == LB_GRAN_TENSOR ? 0 : r, 0) : 0;
    }
}

/* The scales lb_quantize chooses for columns c0 .. c0+n-1 of the current
 * weights (one group): the sub-matrix quantized under the fixed tensor
 * scale, its scales read back. */
static lb_status spec_params(void *ctx, const float *w, size_t ld, size_t rows, size_t c0, size_t n)
{
    lb__gptq_spec_grid *g = ctx;
    if (g->whole_tensor) return LB_OK; /* chosen once from the whole weight */
    if (rows != g->rows || c0 % g->group != 0 || n == 0 || n > g->group || c0 + n > g->cols)
        return lb__fail(LB_ERR_ARG, "GPTQ grid: group of columns %zu..%zu (%zu rows) does not match the grid's "
                                    "groups of %zu (%zu x %zu)", c0, c0 + n, rows, g->group, g->rows, g->cols);
    const float *x = w;
    if (ld != n) {
        for (size_t r = 0; r < rows; r++) memcpy(g->sub + r * n, w + r * ld, n * sizeof *w);
        x = g->sub;
    }
    lb_qtensor *q = NULL;
    lb_status st = lb__quantize_ts(&g->choose, x, rows, n, g->threads, g->rules.tensor_scale, &q);
    if (st != LB_OK) return st;
    /* the scratch holds scale_count <= rows floats twice: sub (rows x group) is free again */
    float *vals = g->sub, *divs = g->sub + q->scale_count;
    lb__fenv_guard fe;
    lb__fenv_begin(&fe);
    read_scales(g, q, rows, vals, divs, g->scales + c0 / g->group, g->groups);
    lb__fenv_end(&fe);
    lb_qtensor_free(q);
    g->chosen[c0 / g->group] = 1;
    return LB_OK;
}

static void spec_round(void *ctx, size_t c, const float *col, size_t rows, float *out)
{
    lb__gptq_spec_grid *g = ctx;
    lb__fenv_guard fe;
    lb__fenv_begin(&fe);
    if (g->whole_tensor) lb__requantize_values(&g->rules, g->isa, col, rows, g->scales, 0, g->tmp, g->codes, out);
    else lb__requantize_values(&g->rules, g->isa, col, rows, g->scales + c / g->group, g->groups, g->tmp, g->codes, out);
    lb__fenv_end(&fe);
}

/* Columns per scale along a row. */
static size_t spec_group(const lb_qspec *spec, size_t cols)
{
    switch (spec->granularity) {
    case LB_GRAN_GROUP: return spec->group < cols ? spec->group : cols;
    case LB_GRAN_TENSOR:
    case LB_GRAN_CHANNEL:
    case LB_GRAN_TOKEN: return cols;
    }
    return cols;
}

/* What comes from the whole weight, once: the two-level tensor scale and a
 * per-tensor scale, as lb__quantize_ex chooses them for w. */
static lb_status whole_weight_scales(lb__gptq_spec_grid *g, const float *w, float tensor_amax)
{
    if (!g->spec.two_level && g->spec.granularity != LB_GRAN_TENSOR) return LB_OK;
    lb_qtensor *q = NULL;
    lb_status st = lb__quantize_ex(&g->choose, w, g->rows, g->cols, g->threads, tensor_amax, &q);
    if (st != LB_OK) return st;
    g->rules.tensor_scale = q->tensor_scale;
    if (g->whole_tensor) {
        float vals[1], divs[1];
        lb__fenv_guard fe;
        lb__fenv_begin(&fe);
        read_scales(g, q, 1, vals, divs, g->scales, 0);
        lb__fenv_end(&fe);
        g->chosen[0] = 1;
    }
    lb_qtensor_free(q);
    return LB_OK;
}

lb_status lb__gptq_grid_init(lb__gptq_spec_grid *g, const lb_qspec *spec, const float *w, size_t rows, size_t cols,
                             float tensor_amax, int threads, int mse_scales, lb__gptq_grid *out)
{
    if (!g || !spec || !w || !out) return lb__fail(LB_ERR_ARG, "lb__gptq_grid_init: NULL argument");
    memset(g, 0, sizeof *g);
    if (rows == 0 || cols == 0) return lb__fail(LB_ERR_ARG, "GPTQ grid: empty weight (%zu x %zu)", rows, cols);
    if (rows > SIZE_MAX / 4 / cols) return lb__fail(LB_ERR_ARG, "GPTQ grid: %zu x %zu is too large", rows, cols);
    lb_status st = lb_qspec_validate(spec);
    if (st != LB_OK) return st;
    g->spec = g->choose = *spec;
    /* lb_qspec_validate's rule for clip=mse: single-level, not e8m0 */
    if (mse_scales && spec->scale_format != LB_FMT_E8M0 && !spec->two_level) g->choose.search = LB_SEARCH_MSE;
    lb__scale_rules_init(spec, &g->rules);
    g->isa = lb_isa_active();
    g->threads = threads;
    g->rows = rows, g->cols = cols;
    g->group = spec_group(spec, cols);
    g->groups = (cols + g->group - 1) / g->group;
    g->block_rows = lb__block_rows(spec);
    g->whole_tensor = spec->granularity == LB_GRAN_TENSOR;
    size_t n_scales = g->whole_tensor ? 1 : rows * g->groups;
    g->scales = calloc(n_scales, sizeof *g->scales);
    g->chosen = calloc(g->groups, 1);
    /* sub: a group's values, and later twice rows floats for reading scales back */
    g->sub = g->whole_tensor ? NULL : malloc(rows * (g->group > 2 ? g->group : 2) * sizeof *g->sub);
    g->tmp = malloc(rows * sizeof *g->tmp);
    g->codes = malloc(rows * 4);
    if (!g->scales || !g->chosen || (!g->sub && !g->whole_tensor) || !g->tmp || !g->codes) {
        lb__gptq_grid_free(g);
        return lb__fail(LB_ERR_NOMEM, "GPTQ grid: out of memory for a %zu x %zu weight", rows, cols);
    }
    if ((st = whole_weight_scales(g, w, tensor_amax)) != LB_OK) {
        lb__gptq_grid_free(g);
        return st;
    }
    *out = (lb__gptq_grid){.group = g->group, .params = spec_params, .round = spec_round, .ctx = g};
    return LB_OK;
}

lb_status lb__gptq_grid_qtensor(const lb__gptq_spec_grid *g, const float *q, lb_qtensor **out)
{
    if (!g || !g->scales || !q || !out) return lb__fail(LB_ERR_ARG, "lb__gptq_grid_qtensor: NULL argument");
    for (size_t b = 0; b < g->groups && !g->whole_tensor; b++)
        if (!g->chosen[b])
            return lb__fail(LB_ERR_ARG, "GPTQ grid: the scales of columns %zu.. were never chosen (GPTQ did not "
                                        "reach them)", b * g->group);
    return lb__quantize_fixed(&g->spec, q, g->rows, g->cols, g->scales, g->rules.tensor_scale, g->threads, out);
}
