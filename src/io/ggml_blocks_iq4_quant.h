/* ggml's IQ4_NL / IQ4_XS quantizer (quantize_iq4_nl / quantize_iq4_xs and
 * the scale search they share), included three times: by ggml_blocks_iq4.c
 * (the scalar twin, plain C), by ggml_blocks_iq4_avx2.c and by
 * ggml_blocks_iq4_avx512.c, compiled for those sets. Plain C but for the
 * search's 16 fits (fit_all), which the vector builds write in intrinsics;
 * with -ffp-contract=off and no fast-math every build does each lane's
 * IEEE operations in the same order, so they give the same bytes (tested in
 * tests/unit/test_ggml_quants.c). The includer defines LB__QNAME(type) to
 * the name of each function, and LB__IQ4_AVX2 or LB__IQ4_AVX512 for the
 * vector builds (so a build with wider -march flags still compiles the
 * scalar twin as plain C). */
#ifndef LB_IO_GGML_BLOCKS_IQ4_QUANT_H
#define LB_IO_GGML_BLOCKS_IQ4_QUANT_H

#include <math.h>

#include "io/ggml_blocks.h"

#ifndef LB__QNAME
#error "define LB__QNAME(type) before including ggml_blocks_iq4_quant.h"
#endif

#define IQ4_TRIES 7           /* scales tried either side of the first guess (ggml's ntry) */
#define IQ4_MIN_AMAX 1e-15f   /* smaller sub-blocks get scale 0 (ggml's GROUP_MAX_EPS) */

/* ===== Quantize ===== */

/* ggml's nearest_int: round to nearest even through the fp32 adder (the
 * magic constant 1.5 * 2^23 leaves the integer in the low mantissa bits).
 * Kept as the bit trick so that even inf and NaN give ggml's result. */
static inline int magic_round(float v)
{
    uint32_t u = lb__bits_from_f32(v + 12582912.0f);
    return (int)(u & 0x007FFFFFu) - 0x00400000;
}

/* The weighted fits of sub-block x at FITS inverse scales at once: for
 * each id[t], the grid codes q of id[t] * x (ggml's best_index_int8, as
 * lb__iq4_nearest32 computes it branch-free) and the sums sum w q x and
 * sum w q^2 over the elements in order. The fits are independent, so the
 * loops over t run them side by side (vector lanes); each lane does one
 * fit's operations in ggml's order (w q first, then times x and times q,
 * added element by element), so every sum has ggml's bits. Doing them one
 * at a time instead leaves the adder waiting on each sum's previous add. */
#define FITS 16 /* the first guess and the 2 * IQ4_TRIES + 1 tries */

#if defined(LB__IQ4_AVX512)
#include <immintrin.h>
/* The AVX-512 build: the 16 fits are the 16 lanes of one vector, each
 * lane the plain C's operations below in the same order but for how the
 * grid points either side of v are found (the same comparisons'
 * outcome, by a binary search), so the same bits (test_ggml_quants
 * compares the builds; the tie at a grid point picks that point either
 * way). GCC's own vectorization of the plain C spilled the lanes' counts
 * to the stack: intrinsics with the 14 comparisons made SmolLM2's IQ4_XS
 * 1.6x faster, the binary search (4 comparisons) 1.9x more. */
static inline void fit_all(const float *x, const float *w, const float *id, float *sumqx, float *sumq2)
{
    const __m512 grid = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)lb__kvalues_iq4nl)));
    const __m512 vid = _mm512_loadu_ps(id);
    __m512 sx = _mm512_setzero_ps(), s2 = _mm512_setzero_ps();
    for (int j = 0; j < 32; j++) {
        const __m512 xj = _mm512_set1_ps(x[j]), v = _mm512_mul_ps(vid, xj);
        /* n = how many of g[1..14] v is not below: the comparisons hold
         * for k up to some K and fail after (the grid ascends), so a
         * binary search over k finds n, then lo = g[n], hi = g[n + 1] */
        /* the first step against g[8] itself: no lookup */
        __m512i n = _mm512_maskz_mov_epi32(_mm512_cmp_ps_mask(v, _mm512_set1_ps((float)lb__kvalues_iq4nl[8]),
                                                              _CMP_NLT_UQ), _mm512_set1_epi32(8));
        for (int step = 4; step >= 1; step /= 2) {
            const __m512i k = _mm512_add_epi32(n, _mm512_set1_epi32(step));
            const __mmask16 not_below = _mm512_cmp_ps_mask(v, _mm512_permutexvar_ps(k, grid), _CMP_NLT_UQ);
            n = _mm512_mask_mov_epi32(n, not_below, k);
        }
        n = _mm512_min_epi32(n, _mm512_set1_epi32(14)); /* k = 15 is past the comparisons */
        const __m512 flo = _mm512_permutexvar_ps(n, grid);
        const __m512 fhi = _mm512_permutexvar_ps(_mm512_add_epi32(n, _mm512_set1_epi32(1)), grid);
        const __mmask16 up = _mm512_cmp_ps_mask(_mm512_sub_ps(v, flo), _mm512_sub_ps(fhi, v), _CMP_NLT_UQ);
        const __m512 q = _mm512_mask_blend_ps(up, flo, fhi);
        const __m512 wq = _mm512_mul_ps(_mm512_set1_ps(w[j]), q);
        sx = _mm512_add_ps(sx, _mm512_mul_ps(wq, xj));
        s2 = _mm512_add_ps(s2, _mm512_mul_ps(wq, q));
    }
    _mm512_storeu_ps(sumqx, sx);
    _mm512_storeu_ps(sumq2, s2);
}
#elif defined(LB__IQ4_AVX2)
#include <immintrin.h>
/* The AVX2 build: the same method in two 8-lane halves; the grid's 16
 * values as two 8-value tables, a lookup taking the upper one for
 * indices from 8 (vpermps reads only an index's low 3 bits). */
static inline __m256 grid_at(__m256i n, __m256 grid_lo, __m256 grid_hi)
{
    const __m256 upper = _mm256_castsi256_ps(_mm256_cmpgt_epi32(n, _mm256_set1_epi32(7)));
    return _mm256_blendv_ps(_mm256_permutevar8x32_ps(grid_lo, n), _mm256_permutevar8x32_ps(grid_hi, n), upper);
}

static inline void fit_all(const float *x, const float *w, const float *id, float *sumqx, float *sumq2)
{
    const __m256i g8 = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)lb__kvalues_iq4nl));
    const __m256i g8hi = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(lb__kvalues_iq4nl + 8)));
    const __m256 grid_lo = _mm256_cvtepi32_ps(g8), grid_hi = _mm256_cvtepi32_ps(g8hi);
    const __m256 vid[2] = {_mm256_loadu_ps(id), _mm256_loadu_ps(id + 8)};
    __m256 sx[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()}, s2[2] = {sx[0], sx[0]};
    for (int j = 0; j < 32; j++) {
        const __m256 xj = _mm256_set1_ps(x[j]), wj = _mm256_set1_ps(w[j]);
        for (int half = 0; half < 2; half++) { /* two independent chains side by side */
            const __m256 v = _mm256_mul_ps(vid[half], xj);
            /* the first step against g[8] itself: no lookup */
            __m256i n = _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(
                                             v, _mm256_set1_ps((float)lb__kvalues_iq4nl[8]), _CMP_NLT_UQ)),
                                         _mm256_set1_epi32(8));
            for (int step = 4; step >= 1; step /= 2) {
                const __m256i k = _mm256_add_epi32(n, _mm256_set1_epi32(step));
                const __m256 not_below = _mm256_cmp_ps(v, grid_at(k, grid_lo, grid_hi), _CMP_NLT_UQ);
                n = _mm256_blendv_epi8(n, k, _mm256_castps_si256(not_below));
            }
            n = _mm256_min_epi32(n, _mm256_set1_epi32(14)); /* k = 15 is past the comparisons */
            const __m256 flo = grid_at(n, grid_lo, grid_hi);
            const __m256 fhi = grid_at(_mm256_add_epi32(n, _mm256_set1_epi32(1)), grid_lo, grid_hi);
            const __m256 up = _mm256_cmp_ps(_mm256_sub_ps(v, flo), _mm256_sub_ps(fhi, v), _CMP_NLT_UQ);
            const __m256 q = _mm256_blendv_ps(flo, fhi, up);
            const __m256 wq = _mm256_mul_ps(wj, q);
            sx[half] = _mm256_add_ps(sx[half], _mm256_mul_ps(wq, xj));
            s2[half] = _mm256_add_ps(s2[half], _mm256_mul_ps(wq, q));
        }
    }
    for (int half = 0; half < 2; half++) {
        _mm256_storeu_ps(sumqx + 8 * half, sx[half]);
        _mm256_storeu_ps(sumq2 + 8 * half, s2[half]);
    }
}
#else
static inline void fit_all(const float *x, const float *w, const float *id, float *sumqx, float *sumq2)
{
    const int8_t *g = lb__kvalues_iq4nl;
    float sx[FITS], s2[FITS];
    for (int t = 0; t < FITS; t++) sx[t] = 0.0f, s2[t] = 0.0f;
    for (int j = 0; j < 32; j++) {
        float v[FITS];
        int32_t lo[FITS], hi[FITS];
        for (int t = 0; t < FITS; t++) v[t] = id[t] * x[j], lo[t] = g[0], hi[t] = g[1];
        /* unrolled whole, so the 16 lanes' lo and hi stay in registers */
#pragma GCC unroll 16
        for (int k = 1; k < 15; k++) {
            const float gk = (float)g[k];
            const int32_t gap_lo = g[k] - g[k - 1], gap_hi = g[k + 1] - g[k];
#pragma GCC unroll 16
            for (int t = 0; t < FITS; t++) {
                const int32_t not_below = -(int32_t)!(v[t] < gk);
                lo[t] += not_below & gap_lo;
                hi[t] += not_below & gap_hi;
            }
        }
        for (int t = 0; t < FITS; t++) {
            const int32_t up = -(int32_t)!(v[t] - (float)lo[t] < (float)hi[t] - v[t]);
            const float q = (float)((hi[t] & up) | (lo[t] & ~up));
            const float wq = w[j] * q;
            sx[t] += wq * x[j];
            s2[t] += wq * q;
        }
    }
    for (int t = 0; t < FITS; t++) sumqx[t] = sx[t], sumq2[t] = s2[t];
}
#endif

/* The scale of one 32-element sub-block x with weights w; 0 when its
 * largest magnitude is below IQ4_MIN_AMAX. */
static float sub_block_scale(const float *x, const float *w)
{
    float amax = 0.0f, max = 0.0f; /* magnitude and signed value of the first largest */
    for (int j = 0; j < 32; j++)
        if (fabsf(x[j]) > amax) amax = fabsf(x[j]), max = x[j];
    if (amax < IQ4_MIN_AMAX) return 0.0f;
    const float g0 = (float)lb__kvalues_iq4nl[0];
    float id[FITS], sumqx[FITS], sumq2[FITS];
    id[0] = 1.0f / (-max / g0);
    for (int t = -IQ4_TRIES; t <= IQ4_TRIES; t++) id[t + IQ4_TRIES + 1] = (float)(t + lb__kvalues_iq4nl[0]) / max;
    fit_all(x, w, id, sumqx, sumq2);
    float d = sumq2[0] > 0.0f ? sumqx[0] / sumq2[0] : 0.0f;
    float best = d * sumqx[0];
    for (int t = 1; t < FITS; t++) /* ggml's order: the tries after the first guess */
        if (sumq2[t] > 0.0f && sumqx[t] * sumqx[t] > best * sumq2[t]) { /* sumqx^2 / sumq2 > best, no division */
            d = sumqx[t] / sumq2[t];
            best = d * sumqx[t];
        }
    return d;
}

/* The weights of the fit for sub-block x: x^2 without an importance
 * matrix, else imatrix * sqrt(sigma2 + x^2) with sigma2 twice the mean
 * square of the super-block. */
static inline void fit_weights(const float *x, const float *imatrix, float sigma2, float *w)
{
    if (imatrix)
        for (int j = 0; j < 32; j++) w[j] = imatrix[j] * sqrtf(sigma2 + x[j] * x[j]);
    else
        for (int j = 0; j < 32; j++) w[j] = x[j] * x[j];
}

static float twice_mean_square(const float *x, int n)
{
    float s = 0.0f;
    for (int j = 0; j < n; j++) s += x[j] * x[j];
    return s * (2.0f / (float)n);
}

/* Codes of 32 elements at scale d (inverse 0 for d = 0), packed. */
static inline void codes_at(const float *x, float d, uint8_t *qs)
{
    uint8_t q[32];
    lb__iq4_nearest32(x, d != 0.0f ? 1.0f / d : 0.0f, q, NULL);
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)(q[j] | q[j + 16] << 4);
}

/* IQ4_NL's scale of one block (unrounded: the codes are taken at it, the
 * block stores it as fp16). */
static inline float nl_scale(const float *src, const float *qw)
{
    float w[32];
    fit_weights(src, qw, qw ? twice_mean_square(src, LB__QK) : 0.0f, w);
    return sub_block_scale(src, w);
}

/* IQ4_XS's scales of one super-block: returns the unrounded super-block
 * scale d (stored as fp16) and each sub-block's 6-bit scale l[ib] in
 * -32..31; sub-block ib's codes are taken at the fp32 d * l. */
static inline float xs_scales(const float *src, const float *qw, int l[8])
{
    const float sigma2 = qw ? twice_mean_square(src, LB__QK_K) : 0.0f;
    float scale[8], w[32];
    float amax_scale = 0.0f, max_scale = 0.0f; /* the first scale of largest magnitude */
    for (int ib = 0; ib < 8; ib++) {
        fit_weights(src + 32 * ib, qw ? qw + 32 * ib : NULL, sigma2, w);
        scale[ib] = sub_block_scale(src + 32 * ib, w);
        if (fabsf(scale[ib]) > amax_scale) amax_scale = fabsf(scale[ib]), max_scale = scale[ib];
    }
    /* the super-block scale maps the largest sub-block scale to -32 */
    const float d = -max_scale / 32.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int ib = 0; ib < 8; ib++) {
        int v = magic_round(id * scale[ib]);
        l[ib] = v < -32 ? -32 : v > 31 ? 31 : v;
    }
    return d;
}

/* fit_all itself, for tests/unit/test_ggml_quants.c: 16 fits of one
 * sub-block (x, w: 32 values; id: 16 inverse scales). */
void LB__QNAME(iq4_fit16)(const float *x, const float *w, const float *id, float *sumqx, float *sumq2)
{
    fit_all(x, w, id, sumqx, sumq2);
}

void LB__QNAME(iq4_code_scales)(int xs, const float *restrict src, size_t nb, const float *restrict imatrix,
                                float *restrict scale)
{
    const size_t block = xs ? LB__QK_K : LB__QK;
    for (size_t i = 0; i < nb; i++, src += block) {
        const float *qw = imatrix ? imatrix + block * i : NULL;
        if (!xs) {
            scale[i] = nl_scale(src, qw);
            continue;
        }
        int l[8];
        const float d = xs_scales(src, qw, l);
        for (int ib = 0; ib < 8; ib++) scale[8 * i + ib] = d * (float)l[ib];
    }
}

void LB__QNAME(iq4_nl)(const float *restrict src, size_t nb, const float *restrict imatrix, void *restrict dst)
{
    lb__block_iq4_nl *y = dst;
    for (size_t i = 0; i < nb; i++, src += LB__QK) {
        const float d = nl_scale(src, imatrix ? imatrix + LB__QK * i : NULL);
        lb__store_ggml_fp16(y[i].d, d);
        codes_at(src, d, y[i].qs); /* with the unrounded scale, as ggml */
    }
}

void LB__QNAME(iq4_xs)(const float *restrict src, size_t nb, const float *restrict imatrix, void *restrict dst)
{
    lb__block_iq4_xs *y = dst;
    for (size_t i = 0; i < nb; i++, src += LB__QK_K) {
        int ls[8];
        const float d = xs_scales(src, imatrix ? imatrix + LB__QK_K * i : NULL, ls);
        lb__store_ggml_fp16(y[i].d, d);
        uint32_t h = 0;
        for (int ib = 0; ib < 8; ib++) {
            const int l = ls[ib];
            codes_at(src + 32 * ib, d * (float)l, y[i].qs + 16 * ib);
            const unsigned code = (unsigned)(l + 32);
            if (ib % 2 == 0) y[i].scales_l[ib / 2] = (uint8_t)(code & 0x0F);
            else y[i].scales_l[ib / 2] |= (uint8_t)((code & 0x0F) << 4);
            h |= (code >> 4) << 2 * ib;
        }
        y[i].scales_h[0] = (uint8_t)h, y[i].scales_h[1] = (uint8_t)(h >> 8);
    }
}

#endif
