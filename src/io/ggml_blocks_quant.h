/* The classic quantizers' bodies (ggml's quantize_row_*_ref for Q4_0, Q4_1,
 * Q5_0, Q5_1, Q8_0, MXFP4, NVFP4), included twice: by ggml_blocks.c, compiled
 * for baseline x86-64 (the scalar twin), and by ggml_blocks_avx2.c, compiled
 * with -mavx2. The code is plain C that the compiler vectorizes: with
 * -ffp-contract=off and no fast-math, both builds do each element's IEEE
 * operations in the same order, so the bytes are the same (tested in
 * tests/unit/test_ggml_quants.c); AVX2 only makes the lanes 8 wide. The
 * includer defines LB__QNAME(type) to the name of each function, or
 * LB__QUANT_HELPERS_ONLY for the helpers alone (the AVX-512 build, whose
 * quantizers are its own). */
#ifndef LB_IO_GGML_BLOCKS_QUANT_H
#define LB_IO_GGML_BLOCKS_QUANT_H

#include <math.h>

#include "io/ggml_blocks.h"

#if !defined(LB__QNAME) && !defined(LB__QUANT_HELPERS_ONLY)
#error "define LB__QNAME(type) or LB__QUANT_HELPERS_ONLY before including ggml_blocks_quant.h"
#endif

/* The E2M1 values doubled, indexed by the 4-bit code (gguf's kvalues). */
static const float kvalues_fp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* Half of 2^(e - 127), as ggml_e8m0_to_fp32_half builds it: e = 0 and 1
 * give the subnormals 2^-128 and 2^-127; e = 255 (E8M0's NaN) is 2^127. */
static inline float e8m0_half(uint32_t e)
{
    return lb__f32_from_bits(e < 2 ? 0x00200000u << e : (e - 1) << 23);
}

/* ===== Quantize (ggml's quantize_row_*_ref, op for op) ===== */

/* The float -> 8-bit integer casts of ggml's quantizers, as the x86-64
 * build of libggml does them (and numpy, for the gguf package): truncate to
 * int32 (NaN, inf and |v| >= 2^31 give INT32_MIN, whose low byte is 0) and
 * keep the low byte. Out-of-range casts only happen for blocks so small
 * that 1/d overflows to infinity.
 *
 * These helpers use integer masks where one would write branches or float
 * compares: GCC does not if-convert float compares under the default
 * -ftrapping-math, and the block loops would not vectorize. */
static inline uint32_t in_int32_mask(uint32_t bits) /* all ones when |v| < 2^31 */
{
    return 0u - (uint32_t)((bits & 0x7FFFFFFFu) < 0x4F000000u);
}

static inline uint8_t np_cast_u8(float v)
{
    uint32_t u = lb__bits_from_f32(v), keep = in_int32_mask(u);
    return (uint8_t)(uint32_t)(int32_t)lb__f32_from_bits(u & keep);
}

/* Whether a block's scale or its reciprocal is finite. When both are,
 * every x / d of the block lies within the code range (|x| <= the block's
 * extreme and a finite 1/d is at most a few ulps off), so the plain
 * conversion gives the cast's result and the masks above can be skipped:
 * the common case. An infinite 1/d (d below 2^-128) takes the masked path. */
static inline int in_range(float v) { return (lb__bits_from_f32(v) & 0x7F800000u) != 0x7F800000u; }

/* The same cast to a signed byte: ggml clamps it with a signed MIN. */
static inline int cast_i8(float v) { return (int)(int8_t)np_cast_u8(v); }

/* roundf (half away from zero), then the cast above. */
static inline int8_t np_round_i8(float v)
{
    uint32_t u = lb__bits_from_f32(v), keep = in_int32_mask(u);
    float a = lb__f32_from_bits(u & 0x7FFFFFFFu & keep); /* |v|, or 0 when out of range */
    int32_t t = (int32_t)a;
    /* a - t is exact and >= +0, so its bits order like its value */
    int32_t r = t + (lb__bits_from_f32(a - (float)t) >= 0x3F000000u); /* fraction >= 0.5 */
    int32_t neg = -(int32_t)(u >> 31);
    r = (r ^ neg) - neg;
    return (int8_t)(uint8_t)((uint32_t)r & keep);
}

/* The largest |x[j]| of n finite values, as its bits: the magnitudes of
 * finite floats order like their bits, and an integer max vectorizes
 * where a float compare does not (-ftrapping-math). */
static inline uint32_t absmax_bits(const float *x, int n)
{
    uint32_t m = 0;
    for (int j = 0; j < n; j++) {
        uint32_t a = lb__bits_from_f32(x[j]) & 0x7FFFFFFFu;
        m = a > m ? a : m;
    }
    return m;
}

static inline float absmax(const float *x, int n) { return lb__f32_from_bits(absmax_bits(x, n)); }

/* The signed value of the first element of largest magnitude, or +0 when
 * all are zero (ggml starts from +0 and only takes a strictly larger
 * magnitude, so a block of zeros gives +0 whatever their signs). */
static inline float signed_absmax(const float *x)
{
    const uint32_t m = absmax_bits(x, LB__QK);
    if (m == 0) return 0.0f;
    int first = 0;
    while ((lb__bits_from_f32(x[first]) & 0x7FFFFFFFu) != m) first++;
    return x[first];
}

/* The smallest and largest element as ggml's strict compares find them:
 * the first of equal values, which matters only between -0 and +0 (the
 * stored minimum's sign, the sign of a zero scale). Starting from x[0] is
 * ggml's start from +-FLT_MAX: x[0] replaces it unless equal to it. A
 * scalar loop: the compares become minss/maxss, and after the first few
 * elements the running extremes rarely change. */
static inline void min_max(const float *x, float *mn, float *mx)
{
    float lo = x[0], hi = x[0];
    for (int j = 1; j < LB__QK; j++) {
        lo = x[j] < lo ? x[j] : lo;
        hi = x[j] > hi ? x[j] : hi;
    }
    *mn = lo, *mx = hi;
}

/* Codes q[0..31] into 16 bytes, element j low nibble, j + 16 high. */
static inline void pack_nibbles(const uint8_t *q, uint8_t *qs)
{
    for (int j = 0; j < LB__QK / 2; j++) qs[j] = (uint8_t)(q[j] | q[j + LB__QK / 2] << 4);
}

/* Five-bit codes: the low nibbles as above, the fifth bits in a
 * little-endian word (element j's in bit j). */
static inline void pack_q5(const uint8_t *q, uint8_t *qs, uint8_t *qh)
{
    uint32_t h = 0;
    for (int j = 0; j < LB__QK / 2; j++) {
        qs[j] = (uint8_t)((q[j] & 0x0F) | (q[j + LB__QK / 2] & 0x0F) << 4);
        h |= (uint32_t)(q[j] >> 4 & 1u) << j | (uint32_t)(q[j + LB__QK / 2] >> 4 & 1u) << (j + LB__QK / 2);
    }
    qh[0] = (uint8_t)h, qh[1] = (uint8_t)(h >> 8), qh[2] = (uint8_t)(h >> 16), qh[3] = (uint8_t)(h >> 24);
}

#ifndef LB__QUANT_HELPERS_ONLY
void LB__QNAME(q8_0)(const float *restrict src, size_t nb, void *restrict dst)
{
    lb__block_q8_0 *y = dst;
    for (size_t i = 0; i < nb; i++, src += LB__QK) {
        const float amax = absmax(src, LB__QK); /* input is finite */
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        for (int j = 0; j < LB__QK; j++) y[i].qs[j] = np_round_i8(src[j] * id);
        lb__store_ggml_fp16(y[i].d, d);
    }
}
#endif

/* Q4_0 and Q5_0 share the symmetric recipe: d = max / -half, codes
 * trunc(x / d + half + 0.5) clamped above (signed, as ggml's MIN). */
static inline void symmetric_codes(const float *x, float half, int top, float *d_out, uint8_t *q)
{
    const float max = signed_absmax(x);
    const float d = max / -half;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const float bias = half + 0.5f;
    if (in_range(id))
        for (int j = 0; j < LB__QK; j++) {
            int32_t c = (int32_t)(x[j] * id + bias);
            q[j] = (uint8_t)(c < top ? c : top);
        }
    else
        for (int j = 0; j < LB__QK; j++) {
            int c = cast_i8(x[j] * id + bias);
            q[j] = (uint8_t)(c < top ? c : top);
        }
    *d_out = d;
}

#ifndef LB__QUANT_HELPERS_ONLY
void LB__QNAME(q4_0)(const float *restrict src, size_t nb, void *restrict dst)
{
    lb__block_q4_0 *y = dst;
    for (size_t i = 0; i < nb; i++, src += LB__QK) {
        uint8_t q[LB__QK];
        float d;
        symmetric_codes(src, 8.0f, 15, &d, q);
        lb__store_ggml_fp16(y[i].d, d);
        pack_nibbles(q, y[i].qs);
    }
}
#endif

#ifndef LB__QUANT_HELPERS_ONLY
void LB__QNAME(q5_0)(const float *restrict src, size_t nb, void *restrict dst)
{
    lb__block_q5_0 *y = dst;
    for (size_t i = 0; i < nb; i++, src += LB__QK) {
        uint8_t q[LB__QK];
        float d;
        symmetric_codes(src, 16.0f, 31, &d, q);
        lb__store_ggml_fp16(y[i].d, d);
        pack_q5(q, y[i].qs, y[i].qh);
    }
}
#endif

#ifndef LB__QUANT_HELPERS_ONLY
void LB__QNAME(q4_1)(const float *restrict src, size_t nb, void *restrict dst)
{
    lb__block_q4_1 *y = dst;
    for (size_t i = 0; i < nb; i++, src += LB__QK) {
        float min, max;
        min_max(src, &min, &max);
        const float d = (max - min) / 15.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        lb__store_ggml_fp16(y[i].d, d);
        lb__store_ggml_fp16(y[i].m, min);
        if (in_range(d) && in_range(id)) { /* both nibbles of a byte at once: 32-bit lanes to the end */
            for (int j = 0; j < LB__QK / 2; j++) {
                int32_t lo = (int32_t)((src[j] - min) * id + 0.5f), hi = (int32_t)((src[j + 16] - min) * id + 0.5f);
                y[i].qs[j] = (uint8_t)((lo < 15 ? lo : 15) | (hi < 15 ? hi : 15) << 4);
            }
            continue;
        }
        uint8_t q[LB__QK];
        for (int j = 0; j < LB__QK; j++) {
            int c = cast_i8((src[j] - min) * id + 0.5f);
            q[j] = (uint8_t)(c < 15 ? c : 15);
        }
        pack_nibbles(q, y[i].qs);
    }
}
#endif

#ifndef LB__QUANT_HELPERS_ONLY
void LB__QNAME(q5_1)(const float *restrict src, size_t nb, void *restrict dst)
{
    lb__block_q5_1 *y = dst;
    for (size_t i = 0; i < nb; i++, src += LB__QK) {
        float min, max;
        min_max(src, &min, &max);
        const float d = (max - min) / 31.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        uint8_t q[LB__QK];
        if (in_range(d) && in_range(id)) /* no clamp in ggml */
            for (int j = 0; j < LB__QK; j++) q[j] = (uint8_t)(int32_t)((src[j] - min) * id + 0.5f);
        else
            for (int j = 0; j < LB__QK; j++) q[j] = np_cast_u8((src[j] - min) * id + 0.5f);
        lb__store_ggml_fp16(y[i].d, d);
        lb__store_ggml_fp16(y[i].m, min);
        pack_q5(q, y[i].qs, y[i].qh);
    }
}
#endif

/* The nearest doubled E2M1 value to each of x[0..n-1] at scale d (ggml's
 * best_index_mxfp4: over the sixteen codes in order, the first of equal
 * errors |d * v - x| wins). Only eight codes can win for a value, so the
 * loop tries those on |x|: for x >= 0 a negative code's error is at least
 * code 0's (-0 ties it, and comes later), and for x < 0 a positive code's
 * likewise, while code 8 + k's error for x is code k's for -x (negation is
 * exact), so the winner is |x|'s code k, plus 8 for a negative x when k > 0
 * (k = 0 stays 0: it precedes code 8). The loop over codes is outside so the
 * loop over elements vectorizes. */
static inline void nearest_fp4(const float *x, int n, float d, uint8_t *q)
{
    /* |error| bits as int32: non-negative floats order like their bits, and
     * 32-bit lanes throughout (no byte lanes mixed in) vectorize best */
    int32_t best[LB__QK], code[LB__QK];
    for (int j = 0; j < n; j++)
        code[j] = 0, best[j] = (int32_t)lb__bits_from_f32(fabsf(d * kvalues_fp4[0] - fabsf(x[j])));
    for (int k = 1; k < 8; k++) {
        const float v = d * kvalues_fp4[k];
        for (int j = 0; j < n; j++) {
            const int32_t err = (int32_t)lb__bits_from_f32(fabsf(v - fabsf(x[j])));
            const int32_t take = -(int32_t)(err < best[j]);
            code[j] = (k & take) | (code[j] & ~take);
            best[j] = (err & take) | (best[j] & ~take);
        }
    }
    for (int j = 0; j < n; j++) { /* a negative x's code k > 0 is 8 + k */
        const int32_t neg = -(int32_t)(lb__bits_from_f32(x[j]) >> 31), nonzero = -(int32_t)(code[j] != 0);
        q[j] = (uint8_t)(code[j] | (8 & neg & nonzero));
    }
}

/* floor(log2(amax)) - 2 + 127 as ggml computes it with log2f; the double
 * log2 rounded to fp32 gives the same floor for every positive fp32
 * (checked exhaustively against glibc's log2f), and is numpy's, which the
 * gguf package uses. A value just under a power of two can round up to it:
 * this is not the exponent field. Away from that (a normal amax more than
 * 256 ulps below the next power of two; checked exhaustively too) the floor
 * is the exponent field less 127, and no log2 is needed. amax: the block's
 * largest magnitude, as bits. */
static inline uint8_t mxfp4_exponent(uint32_t amax)
{
    const uint32_t exp_field = amax >> 23, man = amax & 0x7FFFFFu;
    if (exp_field != 0 && man < 0x7FFF00u) return np_cast_u8((float)((int)exp_field - 127) - 2.0f + 127.0f);
    if (amax != 0) return np_cast_u8(floorf((float)log2((double)lb__f32_from_bits(amax))) - 2.0f + 127.0f);
    return 0;
}

#ifndef LB__QUANT_HELPERS_ONLY
void LB__QNAME(mxfp4)(const float *restrict src, size_t nb, void *restrict dst)
{
    lb__block_mxfp4 *y = dst;
    for (size_t i = 0; i < nb; i++, src += LB__QK) {
        const uint8_t e = mxfp4_exponent(absmax_bits(src, LB__QK)); /* input is finite */
        uint8_t q[LB__QK];
        nearest_fp4(src, LB__QK, e8m0_half(e), q);
        y[i].e = e;
        pack_nibbles(q, y[i].qs);
    }
}
#endif

/* fp32 -> UE4M3 code as ggml rounds a sub-block scale (ggml_fp32_to_ue4m3):
 * clamp to 448; below 2^-6 the subnormal code trunc(x * 512 + 0.5) capped at
 * 7; otherwise the top three mantissa bits rounded up by the fourth alone
 * (no sticky bits: half up, not to even), 0x7E past the top. */
static uint8_t ue4m3_code(float x)
{
    if (!(x > 0.0f)) return 0;
    if (x > 448.0f) x = 448.0f;
    uint32_t u = lb__bits_from_f32(x);
    int exp = (int)(u >> 23 & 0xFFu) - 127 + 7, man = (int)(u >> 20 & 7u);
    if (exp <= 0) {
        int m = (int)(x * 512.0f + 0.5f);
        m = m > 7 ? 7 : m;
        return (uint8_t)(m < 1 ? 0 : m);
    }
    if (exp >= 15) return 0x7E;
    man += (int)(u >> 19 & 1u);
    if (man > 7) {
        man = 0;
        if (++exp >= 15) return 0x7E;
    }
    return (uint8_t)(exp << 3 | man);
}

#ifndef LB__QUANT_HELPERS_ONLY
void LB__QNAME(nvfp4)(const float *restrict src, size_t nb, void *restrict dst)
{
    lb__block_nvfp4 *y = dst;
    for (size_t i = 0; i < nb; i++) {
        for (int s = 0; s < 4; s++, src += 16) {
            const float amax = absmax(src, 16); /* input is finite */
            const uint8_t code = ue4m3_code(amax / 6.0f); /* 6: the largest E2M1 value maps to amax */
            uint8_t q[16];
            nearest_fp4(src, 16, lb__nvfp4_scale_half(code), q);
            y[i].d[s] = code;
            for (int k = 0; k < 8; k++) y[i].qs[8 * s + k] = (uint8_t)(q[k] | q[k + 8] << 4);
        }
    }
}
#endif

#endif
