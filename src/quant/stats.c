/* Error statistics of a quantized tensor against its original. */
#include <math.h>
#include <stdlib.h>

#include "format/convert.h"
#include "kernel/qmat.h"
#include "quant/quant_internal.h"
#include "util/error.h"

lb_status lb_qstats_compute(const float *x, const float *xhat, const lb_qtensor *q, lb_qstats *out)
{
    if (!x || !xhat || !q || !out) return lb__fail(LB_ERR_ARG, "lb_qstats_compute: NULL argument");
    size_t n = q->rows * q->cols, nb = q->scales_per_row;
    double se = 0, ae = 0, sig = 0, maxe = -1;
    size_t maxi = 0, saturated = 0, flushed = 0;
    float *mul = malloc(nb * sizeof *mul), *sub = malloc(nb * sizeof *sub);
    if (!mul || !sub) {
        free(mul), free(sub);
        return lb__fail(LB_ERR_NOMEM, "out of memory");
    }
    lb__fenv_guard g;
    lb__fenv_begin(&g);
    lb__scale_rules rules;
    lb__scale_rules_init(&q->spec, &rules);
    rules.tensor_scale = q->tensor_scale;
    /* what a block can hold: [(lo - zp) d, (hi - zp) d], widened by fp32
     * rounding of the scale (so that the absmax value itself, which lands
     * on the top code, does not count as clipped) and, for affine, by the
     * half step that rounding the zero point can leave between the range
     * and the top code */
    double slack = 1 + 0x1p-22, half = q->zero_points ? 0.5 : 0;
    for (size_t r = 0; r < q->rows; r++) {
        lb__row_scales(q, &rules, LB_ISA_SCALAR, r, mul, sub);
        for (size_t b = 0; b < nb; b++) {
            size_t start = b * q->block, len = q->cols - start < q->block ? q->cols - start : q->block;
            double d = mul[b], zp = sub[b];
            double lo = (rules.clamp_lo - zp - half) * d * slack, hi = (rules.clamp_hi - zp + half) * d * slack;
            if (d < 0) { /* range=signed: a negative scale maps the low code to the top of the range */
                double t = lo;
                lo = hi, hi = t;
            }
            for (size_t i = r * q->cols + start, end = i + len; i < end; i++) {
                double v = x[i], err = fabs(v - (double)xhat[i]);
                se += err * err;
                ae += err;
                sig += v * v;
                if (err > maxe) maxe = err, maxi = i;
                if (v > hi || v < lo) saturated++;
                if (v != 0 && xhat[i] == 0) flushed++;
            }
        }
    }
    lb__fenv_end(&g);
    free(mul), free(sub);
    out->count = n;
    out->mse = se / (double)n;
    out->rmse = sqrt(out->mse);
    out->mae = ae / (double)n;
    out->max_abs_error = maxe;
    out->max_error_index = maxi;
    out->max_error_original = x[maxi];
    out->max_error_dequantized = xhat[maxi];
    out->sqnr_db = se == 0 ? INFINITY : sig == 0 ? -INFINITY : 10.0 * log10(sig / se);
    out->saturated_fraction = (double)saturated / (double)n;
    out->flushed_fraction = (double)flushed / (double)n;
    out->bits_per_value = lb_qspec_bits_per_value(&q->spec, q->rows, q->cols);
    return LB_OK;
}

/* The bytes a rows x cols tensor takes under spec, exactly as lb_quantize
 * lays it out (lowbit.h, "The stored layout"): rows of packed codes (each
 * row starts on a byte), the scale codes, the zero-point rows (a 4-bit zero
 * point still takes half a byte per scale, and each row of them starts on a
 * byte) and the fp32 tensor scale. In double, so that plan's hypothetical
 * sizes cannot wrap; exact for any real tensor (below 2^53 bytes). A plain
 * fp32/fp16/bf16 spec (no scale: what the runner keeps for "bf16") is its
 * codes alone. 0 for an invalid spec or a zero size. */
/* Bytes of n codes of `bits` bits packed from a byte boundary: 4-bit two
 * a byte, 6-bit a bit stream (four in three bytes), wider ones whole bytes. */
static double packed_bytes(int bits, uint64_t n)
{
    if (bits == 4) return (double)(n / 2 + (n & 1));
    if (bits == 6) return (double)(n / 4) * 3 + (double)(((n % 4) * 6 + 7) / 8);
    return (double)n * (double)(bits / 8);
}

static double stored_bytes(const lb_qspec *spec, uint64_t rows, uint64_t cols)
{
    if (!spec || rows == 0 || cols == 0) return 0;
    if (lb__qspec_is_plain(spec)) return (double)rows * packed_bytes(lb_format_get(spec->element)->bits, cols);
    if (lb_qspec_validate(spec) != LB_OK) return 0;
    const lb_format_info *e = lb_format_get(spec->element), *sf = lb_format_get(spec->scale_format);
    uint64_t block = spec->granularity == LB_GRAN_GROUP ? spec->group : cols;
    uint64_t per_row = spec->granularity == LB_GRAN_TENSOR ? 1 : cols / block + (cols % block != 0);
    uint64_t br = lb__block_rows(spec); /* a tensor scale is one code; 2-D blocks, a row of them per br rows */
    double scale_rows = spec->granularity == LB_GRAN_TENSOR ? 1 : (double)(rows / br + (rows % br != 0));
    double bytes = (double)rows * packed_bytes(e->bits, cols) + scale_rows * packed_bytes(sf->bits, per_row);
    if (spec->affine) /* zero points: one code per scale, in the element's bulk layout (4-bit: two a byte) */
        bytes += scale_rows * packed_bytes(e->bits, per_row);
    if (spec->two_level) bytes += 4; /* the fp32 tensor scale */
    return bytes;
}

uint64_t lb_qspec_bytes(const lb_qspec *spec, uint64_t rows, uint64_t cols)
{
    double b = stored_bytes(spec, rows, cols);
    return b > 0 && b < 9007199254740992.0 ? (uint64_t)b : 0; /* 2^53: beyond it a double is not exact */
}

double lb_qspec_bits_per_value(const lb_qspec *spec, uint64_t rows, uint64_t cols)
{
    double b = stored_bytes(spec, rows, cols);
    return b > 0 ? 8 * b / ((double)rows * (double)cols) : 0;
}
