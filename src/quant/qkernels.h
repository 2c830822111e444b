/* The vector loops of tensor quantization, one set per instruction set.
 * Every function works block by block along a row: block b holds values
 * [b*block, min((b+1)*block, n)), so a row's last block may be partial.
 * Each is exact IEEE arithmetic in a fixed order (max, min, one division
 * or product per element; squared errors summed in double over 16 fixed
 * lanes), so every set gives the same bits as the scalar one. */
#ifndef LB_QUANT_QKERNELS_H
#define LB_QUANT_QKERNELS_H

#include <math.h>
#include <stddef.h>

#include "lowbit.h"

typedef struct lb__qkernels {
    /* out[b] = max |x| over block b (0 for an empty block). Returns 1 if
     * any x is NaN or infinite (then out is meaningless), else 0: the
     * check rides along the pass that reads the row from memory anyway. */
    int (*block_absmax)(const float *x, size_t n, size_t block, float *out);
    /* out[k] = max |rows[k][i]| over i < n, for four rows of n values;
     * returns 1 if any is NaN or infinite, like block_absmax. The AVX-512
     * set reads the four side by side: four streams from far-apart memory
     * keep more reads in flight than one row after another (one thread, a
     * 1 GiB tensor on an Intel Xeon: 15.9 against 14.6 GB/s); the others
     * take the rows one by one (lb__rows4_one_by_one). */
    int (*rows4_absmax)(const float *const rows[4], size_t n, float out[4]);
    /* lo[b] = min(0, min x), hi[b] = max(0, max x), as +0 when zero;
     * returns 1 on NaN or infinity, like block_absmax */
    int (*block_minmax)(const float *x, size_t n, size_t block, float *lo, float *hi);
    /* out[i] = min(max(x[i] / div[b] + add[b], lo), hi) */
    void (*block_div_clamp)(const float *x, size_t n, size_t block, const float *div, const float *add, float lo,
                            float hi, float *out);
    /* out[i] = (x[i] - sub[b]) * mul[b] */
    void (*block_sub_mul)(const float *x, size_t n, size_t block, const float *sub, const float *mul, float *out);
    /* The clipping search's error, in units of the block's scale: with
     * y = x / div[b] + add[b] (unclamped), out[b] = sum of (y - q)^2 over the
     * block, where q[i] is the value the code decodes to (the integer, for
     * integer elements). fp32 throughout: y is bounded by the element range
     * over the clipping ratio, so no square overflows. Element k of a block
     * goes to partial sum k % 16, and the 16 sums are added in a fixed tree
     * (lb__sum16f), so the result does not depend on the vector width. */
    void (*block_scaled_err)(const float *x, const float *q, size_t n, size_t block, const float *div,
                             const float *add, float *out);
    /* The same for integer elements with q computed inline as
     * rne(min(max(y, lo), hi)): equal, bit for bit, to block_div_clamp, the
     * integer encode and decode, then block_scaled_err. */
    void (*block_trial_err_int)(const float *x, size_t n, size_t block, const float *div, const float *add,
                                float lo, float hi, float *out);
    /* index of the first NaN or infinity, or n */
    size_t (*first_nonfinite)(const float *x, size_t n);
    /* out[b] = lb__full_range_scale(lo[b], hi[b], ratio, den_lo, den_hi) */
    void (*full_range_scales)(const float *lo, const float *hi, size_t n, float ratio, float den_lo, float den_hi,
                              float *out);
    /* out[b] = lb__signed_scale(lo[b], hi[b], ratio, qmin) */
    void (*signed_scales)(const float *lo, const float *hi, size_t n, float ratio, float qmin, float *out);
} lb__qkernels;

const lb__qkernels *lb__qkernels_get(lb_isa isa);

/* rows4_absmax as four calls of a set's block_absmax, one row a block. */
static inline int lb__rows4_one_by_one(int (*absmax)(const float *, size_t, size_t, float *),
                                       const float *const rows[4], size_t n, float out[4])
{
    int bad = 0;
    for (int k = 0; k < 4; k++) bad |= absmax(rows[k], n, n, &out[k]);
    return bad;
}

extern const lb__qkernels lb__qkernels_scalar, lb__qkernels_avx2, lb__qkernels_avx512;

/* Full range: the negative extreme on code qmin, a = fl(fl(-lo * ratio) /
 * -qmin), unless the largest positive value would then pass code qmax
 * (fl(a * qmax) < fl(hi * ratio)): then b = fl(fl(hi * ratio) / qmax), hi on
 * qmax. The smallest positive scale under which neither side clips. The
 * test is a product, not max(a, b), so that requantizing the dequantized
 * block (its top value fl(a * qmax)) gives a again, not b = a + 1 ulp. Each
 * denominator is times the tensor scale when two-level (den_lo = -qmin * ts,
 * den_hi = qmax * ts). */
static inline float lb__full_range_scale(float lo, float hi, float ratio, float den_lo, float den_hi)
{
    float a = (-lo * ratio) / den_lo, h = hi * ratio;
    return a * den_hi >= h ? a : h / den_hi;
}

/* Signed (ggml's Q4_0 rule): the block's value of largest magnitude m,
 * lo when -lo >= hi (a tie takes the positive scale), goes on code qmin:
 * s = fl(fl(m * ratio) / qmin), negative when m > 0. */
static inline float lb__signed_scale(float lo, float hi, float ratio, float qmin)
{
    float m = -lo >= hi ? lo : hi;
    return (m * ratio) / qmin;
}

/* for each block b of `block` values along [0, n): start, b and len (the
 * last block may be shorter) */
/* The reciprocal the vector trials divide by exactly (Markstein's
 * correction, qkernels_avx512.c `quotient`), or NaN where |d| lies outside
 * [2^-40, 2^40], which sends every quotient by d to the division. */
#define LB__EXACT_MIN 0x1p-40f /* the bounds, also of every lane's |x * r| (as bits: 0x2B800000, 0x53800000) */
#define LB__EXACT_MAX 0x1p40f
static inline float lb__exact_recip(float d)
{
    float a = d < 0 ? -d : d;
    return a >= LB__EXACT_MIN && a <= LB__EXACT_MAX ? 1.0f / d : NAN;
}

#define FOR_BLOCKS(n, block)                                                                    \
    for (size_t start = 0, b = 0, len; start < (n); start += (block), b++)                      \
        if ((len = (n) - start < (block) ? (n) - start : (block)), 1)

/* The fixed tree that adds the 16 partial sums of the error kernels. */
static inline float lb__sum16f(const float s[16])
{
    float t[8];
    for (int i = 0; i < 8; i++) t[i] = s[i] + s[i + 8];
    for (int i = 0; i < 4; i++) t[i] = t[i] + t[i + 4];
    return (t[0] + t[2]) + (t[1] + t[3]);
}

#endif
