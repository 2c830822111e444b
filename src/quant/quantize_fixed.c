/* Quantization with the block scales given rather than chosen: GPTQ
 * (src/algo/gptq_grid.c) chooses each block's scale once, rounds the
 * block's columns one at a time onto that grid while the weights keep
 * changing under it, and at the end needs the tensor of codes that the
 * writers store. Both steps are lb_quantize's arithmetic (quantize.c,
 * encode_row and load_block_arrays: x / divisor + zero point, clamped,
 * encoded round-to-nearest-even saturating by the format layer's bulk
 * kernel) with the scale fixed, so a value and a scale give the same code
 * here as there, and dequantization is lb_dequantize's
 * ((decode(code) - zero point) * divisor). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "format/convert.h"
#include "quant/qkernels.h"
#include "quant/quant_internal.h"
#include "util/error.h"
#include "util/parallel.h"

/* What the encode step divides by and adds (load_block_arrays and
 * symmetric_adds): a zero divisor (an all-zero block) divides by 1, and a
 * symmetric spec adds -0 so that a negative zero keeps its sign. */
static float enc_div(const lb__block_scale *s) { return s->divisor != 0 ? s->divisor : 1.0f; }
static float enc_add(const lb__scale_rules *r, const lb__block_scale *s)
{
    return r->spec.affine ? (float)s->zero_point : -0.0f;
}

void lb__requantize_values(const lb__scale_rules *r, lb_isa isa, const float *x, size_t n, const lb__block_scale *s,
                           size_t stride, float *tmp, uint8_t *codes, float *out)
{
    const lb_format_info *e = lb_format_get(r->spec.element);
    float lo = r->clamp_lo, hi = r->clamp_hi;
    for (size_t i = 0; i < n; i++) { /* block_div_clamp's expression: exact IEEE, so any ISA's bits */
        const lb__block_scale *b = s + i * stride;
        float y = x[i] / enc_div(b) + enc_add(r, b);
        tmp[i] = y < lo ? lo : y > hi ? hi : y;
    }
    lb__encode_kernel(isa)(e, LB_SATURATE, tmp, n, codes); /* finite input: cannot fail */
    lb__decode_kernel(isa)(e, codes, n, tmp);
    for (size_t i = 0; i < n; i++) { /* block_sub_mul's expression */
        const lb__block_scale *b = s + i * stride;
        float sub = r->spec.affine ? (float)b->zero_point : 0.0f;
        out[i] = (tmp[i] - sub) * b->divisor;
    }
}

typedef struct fixed_job {
    const lb__scale_rules *rules;
    const float *x;
    const lb__block_scale *scales;
    lb_qtensor *q;
    lb_isa isa;
} fixed_job;

/* Rows begin..end-1: each row divided by its blocks' divisors, clamped and
 * encoded into the tensor (6-bit codes a byte each, then packed). */
static lb_status encode_rows(void *ctx, size_t begin, size_t end)
{
    const fixed_job *j = ctx;
    lb_qtensor *q = j->q;
    const lb__qkernels *k = lb__qkernels_get(j->isa);
    const lb_format_info *e = lb_format_get(q->spec.element);
    int tensor = q->spec.granularity == LB_GRAN_TENSOR;
    size_t nb = tensor ? 1 : q->scales_per_row, block = tensor ? q->cols : q->block;
    float *scaled = malloc(q->cols * sizeof *scaled), *div = malloc(nb * sizeof *div), *add = malloc(nb * sizeof *add);
    uint8_t *codes = e->bits == 6 ? malloc(q->cols) : NULL;
    lb_status st = scaled && div && add && (codes || e->bits != 6) ? LB_OK : lb__fail(LB_ERR_NOMEM, "out of memory");
    lb__fenv_guard g;
    lb__fenv_begin(&g);
    for (size_t r = begin; r < end && st == LB_OK; r++) {
        const float *x = j->x + r * q->cols;
        size_t bad = k->first_nonfinite(x, q->cols);
        if (bad < q->cols) {
            st = lb__fail(LB_ERR_NAN, "element %zu (row %zu, column %zu) is %s; quantization needs finite values",
                          r * q->cols + bad, r, bad, isnan(x[bad]) ? "NaN" : "infinite");
            break;
        }
        const lb__block_scale *s = j->scales + (tensor ? 0 : r * nb);
        for (size_t b = 0; b < nb; b++) div[b] = enc_div(&s[b]), add[b] = enc_add(j->rules, &s[b]);
        k->block_div_clamp(x, q->cols, block, div, add, j->rules->clamp_lo, j->rules->clamp_hi, scaled);
        uint8_t *dst = q->data + r * q->row_bytes;
        lb__encode_kernel(j->isa)(e, LB_SATURATE, scaled, q->cols, codes ? codes : dst);
        if (codes) lb__pack6(codes, q->cols, dst);
    }
    lb__fenv_end(&g);
    free(scaled), free(div), free(add), free(codes);
    return st;
}

/* The scale codes (and zero points) of the tensor, from the scales given. */
static void store_scales(lb_qtensor *q, const lb__block_scale *scales)
{
    const lb_format_info *sf = lb_format_get(q->spec.scale_format);
    if (q->spec.granularity == LB_GRAN_TENSOR) {
        lb__store_code(sf, q->scales, 0, scales[0].code);
        if (q->zero_points) lb__store_zero_point(q, 0, 0, scales[0].zero_point);
        return;
    }
    size_t nb = q->scales_per_row;
    for (size_t sr = 0; sr < q->scale_rows; sr++) /* a 2-D band's scales: its first row's */
        for (size_t b = 0; b < nb; b++) lb__store_code(sf, q->scales, sr * nb + b, scales[sr * q->block_rows * nb + b].code);
    for (size_t r = 0; q->zero_points && r < q->rows; r++)
        for (size_t b = 0; b < nb; b++) lb__store_zero_point(q, r, b, scales[r * nb + b].zero_point);
}

lb_status lb__quantize_fixed(const lb_qspec *spec, const float *x, size_t rows, size_t cols,
                             const lb__block_scale *scales, float tensor_scale, int threads, lb_qtensor **out)
{
    if (!spec || !x || !scales || !out) return lb__fail(LB_ERR_ARG, "lb__quantize_fixed: NULL argument");
    *out = NULL;
    if (spec->two_level && (!(tensor_scale > 0) || isinf(tensor_scale)))
        return lb__fail(LB_ERR_ARG, "lb__quantize_fixed: tensor scale %g is not a finite positive number",
                        (double)tensor_scale);
    lb_qtensor *q = NULL;
    lb_status st = lb__qtensor_alloc(spec, rows, cols, &q); /* checks the spec and the sizes */
    if (st != LB_OK) return st;
    lb__scale_rules rules;
    lb__scale_rules_init(spec, &rules);
    if (spec->two_level) q->tensor_scale = rules.tensor_scale = tensor_scale;
    store_scales(q, scales);
    fixed_job j = {.rules = &rules, .x = x, .scales = scales, .q = q, .isa = lb_isa_active()};
    st = lb__parallel_for(rows, 1, threads, encode_rows, &j);
    if (st != LB_OK) {
        lb_qtensor_free(q);
        return st;
    }
    *out = q;
    return LB_OK;
}
