/* Scalar twins of the quantization loops (the reference). */
#include <float.h>
#include <math.h>

#include "format/codec.h"
#include "quant/qkernels.h"

static int block_absmax(const float *x, size_t n, size_t block, float *out)
{
    int bad = 0;
    FOR_BLOCKS(n, block) {
        float m = 0;
        for (size_t i = start; i < start + len; i++) {
            float a = fabsf(x[i]);
            bad |= !(a <= FLT_MAX); /* NaN or infinity */
            m = a > m ? a : m;
        }
        out[b] = m;
    }
    return bad;
}

static int block_minmax(const float *x, size_t n, size_t block, float *lo, float *hi)
{
    int bad = 0;
    FOR_BLOCKS(n, block) {
        float a = 0, c = 0;
        for (size_t i = start; i < start + len; i++) {
            bad |= !(fabsf(x[i]) <= FLT_MAX);
            a = x[i] < a ? x[i] : a;
            c = x[i] > c ? x[i] : c;
        }
        lo[b] = a + 0.0f, hi[b] = c + 0.0f; /* both include 0, as +0: zero must be exactly representable */
    }
    return bad;
}

static void block_div_clamp(const float *x, size_t n, size_t block, const float *div, const float *add, float lo,
                            float hi, float *out)
{
    FOR_BLOCKS(n, block) {
        for (size_t i = start; i < start + len; i++) {
            float y = x[i] / div[b] + add[b];
            out[i] = y < lo ? lo : y > hi ? hi : y;
        }
    }
}

static void block_sub_mul(const float *x, size_t n, size_t block, const float *sub, const float *mul, float *out)
{
    FOR_BLOCKS(n, block) {
        for (size_t i = start; i < start + len; i++) out[i] = (x[i] - sub[b]) * mul[b];
    }
}

static void block_scaled_err(const float *x, const float *q, size_t n, size_t block, const float *div,
                             const float *add, float *out)
{
    FOR_BLOCKS(n, block) {
        float s[16] = {0};
        for (size_t i = 0; i < len; i++) {
            float e = (x[start + i] / div[b] + add[b]) - q[start + i];
            s[i % 16] += e * e;
        }
        out[b] = lb__sum16f(s);
    }
}

static void block_trial_err_int(const float *x, size_t n, size_t block, const float *div, const float *add, float lo,
                                float hi, float *out)
{
    FOR_BLOCKS(n, block) {
        float s[16] = {0};
        for (size_t i = 0; i < len; i++) {
            float y = x[start + i] / div[b] + add[b];
            float c = y < lo ? lo : y > hi ? hi : y;
            float e = y - (float)lb__round_half_even((double)c);
            s[i % 16] += e * e;
        }
        out[b] = lb__sum16f(s);
    }
}

static size_t first_nonfinite(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return i;
    return n;
}

static void full_range_scales(const float *lo, const float *hi, size_t n, float ratio, float den_lo, float den_hi,
                              float *out)
{
    for (size_t b = 0; b < n; b++) out[b] = lb__full_range_scale(lo[b], hi[b], ratio, den_lo, den_hi);
}

static void signed_scales(const float *lo, const float *hi, size_t n, float ratio, float qmin, float *out)
{
    for (size_t b = 0; b < n; b++) out[b] = lb__signed_scale(lo[b], hi[b], ratio, qmin);
}

static int rows4_absmax(const float *const rows[4], size_t n, float out[4])
{
    return lb__rows4_one_by_one(block_absmax, rows, n, out);
}

const lb__qkernels lb__qkernels_scalar = {block_absmax, rows4_absmax, block_minmax, block_div_clamp, block_sub_mul,
                                          block_scaled_err, block_trial_err_int, first_nonfinite, full_range_scales,
                                          signed_scales};

const lb__qkernels *lb__qkernels_get(lb_isa isa)
{
    /* a set compiled without its instruction set is empty: the scalar one serves */
    const lb__qkernels *k = isa == LB_ISA_AVX512 ? &lb__qkernels_avx512 : isa == LB_ISA_AVX2 ? &lb__qkernels_avx2 : NULL;
    return k && k->block_absmax ? k : &lb__qkernels_scalar;
}
