/* AVX-512 W8A8 kernels (F/BW/DQ/VL, no VNNI): the activation quantizer
 * and the fp8 product that w8a8_vnni.c shares, and an int8 product on
 * vpmaddwd for CPUs without vpdpbusd.
 *
 * Blocking: a tile is up to 4 tokens x 4 weight rows, 16 accumulators in
 * registers; lane l of accumulator (t, r) sums the products of columns
 * k = l (mod 16 or 32) of that pair. Tokens are walked in chunks so that a
 * chunk of activations stays in L2 while every row block of the thread's
 * slice passes over it. */
#include "kernel/w8a8_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <string.h>

#include "kernel/w8a8_avx512.h"

/* ---- activations ---- */

/* The vector twin of w8a8_scalar.c's quant_i8 (same max, same division,
 * same clamp order, cvtps2dq rounding to nearest even). */
float lb__w8a8_quant_i8_avx512(const float *x, size_t cols, float static_scale, int8_t *q, int biased)
{
    float s = static_scale;
    if (!(s > 0)) {
        const __m512 signless = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF));
        __m512 m = _mm512_setzero_ps();
        for (size_t k = 0; k < cols; k += 16) {
            __mmask16 mk = cols - k >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (cols - k)) - 1);
            __m512 a = _mm512_and_ps(_mm512_maskz_loadu_ps(mk, x + k), signless);
            m = _mm512_max_ps(a, m); /* (a > m) ? a : m: a NaN keeps m */
        }
        s = lb__w8a8_i8_scale(_mm512_reduce_max_ps(m));
    }
    const __m512 sv = _mm512_set1_ps(s), lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
    const __m512i bias = _mm512_set1_epi32(biased ? 128 : 0);
    for (size_t k = 0; k < cols; k += 16) {
        __mmask16 mk = cols - k >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (cols - k)) - 1);
        __m512 v = _mm512_div_ps(_mm512_maskz_loadu_ps(mk, x + k), sv);
        v = _mm512_min_ps(_mm512_max_ps(v, lo), hi); /* max(NaN, lo) = lo, as the scalar clamp */
        __m512i i = _mm512_add_epi32(_mm512_cvtps_epi32(v), bias);
        _mm512_mask_cvtepi32_storeu_epi8(q + k, mk, i);
    }
    return s;
}

static float quant_i8(const float *x, size_t cols, float static_scale, int8_t *q)
{
    return lb__w8a8_quant_i8_avx512(x, cols, static_scale, q, 0);
}

/* ---- int8 on vpmaddwd ---- */

/* Sign-extended int16 pairs: vpmaddwd adds two products of at most
 * 128 * 128 into an int32 lane, exactly; a run of LB__W8A8_RUN columns
 * adds at most 2^16 * 2^14 = 2^30 in magnitude over a whole pair. */
static inline __attribute__((always_inline)) void tile_i8(const lb__w8a8 *w, const lb__w8a8_acts *a, size_t t0,
                                                          size_t r0, const int mt, const int mr, float *y)
{
    const lb__qmat *m = w->m;
    size_t cols = m->cols;
    const int8_t *xp[4], *wp[4];
    for (int t = 0; t < mt; t++) xp[t] = a->q + (t0 + t) * a->ld;
    for (int r = 0; r < mr; r++) wp[r] = (const int8_t *)(m->data + (r0 + r) * m->row_bytes);
    __m512i sum_lo = _mm512_setzero_si512(), sum_hi = _mm512_setzero_si512();
    for (size_t k0 = 0; k0 < cols; k0 += LB__W8A8_RUN) {
        size_t end = cols - k0 < LB__W8A8_RUN ? cols : k0 + LB__W8A8_RUN;
        __m512i acc[16];
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) acc[i] = _mm512_setzero_si512();
        for (size_t k = k0; k < end; k += 32) {
            /* x is padded to whole vectors with code 0; w is loaded under a mask */
            __mmask32 mk = end - k >= 32 ? (__mmask32)0xFFFFFFFFu : (__mmask32)((1u << (end - k)) - 1);
            __m512i xv[4];
#pragma GCC unroll 4
            for (int t = 0; t < mt; t++) xv[t] = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(xp[t] + k)));
#pragma GCC unroll 4
            for (int r = 0; r < mr; r++) {
                __m512i wv = _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(mk, wp[r] + k));
#pragma GCC unroll 4
                for (int t = 0; t < mt; t++) acc[t * 4 + r] = _mm512_add_epi32(acc[t * 4 + r], _mm512_madd_epi16(xv[t], wv));
            }
        }
        lb__w8a8_add_sums_avx512(acc, &sum_lo, &sum_hi);
    }
    lb__w8a8_store_tile_avx512(w, a, t0, r0, mt, mr, sum_lo, sum_hi, y);
}

static void gemm_i8(const lb__w8a8 *w, const lb__w8a8_acts *a, size_t r0, size_t r1, float *y)
{
    for (size_t tc = 0; tc < a->n; tc += LB__W8A8_TOKEN_CHUNK) {
        size_t te = a->n - tc < LB__W8A8_TOKEN_CHUNK ? a->n : tc + LB__W8A8_TOKEN_CHUNK;
        for (size_t r = r0; r < r1; r += 4) {
            int mr = r1 - r < 4 ? (int)(r1 - r) : 4;
            for (size_t t = tc; t < te; t += 4) {
                int mt = te - t < 4 ? (int)(te - t) : 4;
                LB__W8A8_TILE_CASES(tile_i8)
            }
        }
    }
}

/* ---- fp8 ---- */

/* 16 e4m3 codes to fp32, exactly: the 7 magnitude bits placed under an
 * fp16 exponent field (same mantissa width shifted, exponent bias 15 vs 7)
 * give the value times 2^-8, normal or subnormal alike, and vcvtph2ps and
 * the product by 256 are exact. S.1111.111, a NaN in e4m3 but 480 in fp16,
 * gets the NaN lb_decode_value gives (sign | 0x7FF00000). */
static inline __m512 e4m3_decode16(const uint8_t *p, __mmask16 mk)
{
    __m256i h = _mm256_cvtepu8_epi16(_mm_maskz_loadu_epi8(mk, p));
    __m256i mag = _mm256_and_si256(h, _mm256_set1_epi16(0x7F));
    __m256i half = _mm256_or_si256(_mm256_slli_epi16(mag, 7), _mm256_slli_epi16(_mm256_and_si256(h, _mm256_set1_epi16(0x80)), 8));
    __m512 f = _mm512_mul_ps(_mm512_cvtph_ps(half), _mm512_set1_ps(256.0f));
    __mmask16 nan = _mm256_cmpeq_epi16_mask(mag, _mm256_set1_epi16(0x7F));
    __m512i nanv = _mm512_or_si512(_mm512_and_si512(_mm512_castps_si512(f), _mm512_set1_epi32((int)0x80000000u)),
                                   _mm512_set1_epi32(0x7FF00000));
    return _mm512_mask_mov_ps(f, nan, _mm512_castsi512_ps(nanv));
}

/* lb__sum16f in registers, the same additions in the same order. */
static inline float sum16(__m512 s)
{
    __m256 t8 = _mm256_add_ps(_mm512_castps512_ps256(s), _mm512_extractf32x8_ps(s, 1)); /* t[i] = s[i] + s[i+8] */
    __m128 t4 = _mm_add_ps(_mm256_castps256_ps128(t8), _mm256_extractf128_ps(t8, 1));   /* t[i] + t[i+4] */
    __m128 t2 = _mm_add_ps(t4, _mm_movehl_ps(t4, t4));                                 /* t0+t2, t1+t3 */
    return _mm_cvtss_f32(_mm_add_ss(t2, _mm_movehdup_ps(t2)));
}

/* Lane l of accumulator (t, r) is qdot.h's partial sum p[l] of that pair:
 * fma(x[e+l], w[e+l], p[l]) chunk by chunk, padding included. */
static inline __attribute__((always_inline)) void tile_f8(const lb__w8a8 *w, const lb__w8a8_acts *a, size_t t0,
                                                          size_t r0, const int mt, const int mr, float *y,
                                                          const float *wbuf)
{
    size_t chunks = (w->m->cols + 15) / 16, rows = w->m->rows;
    __m512 acc[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) acc[i] = _mm512_setzero_ps();
    for (size_t c = 0; c < chunks; c++) {
        __m512 xv[4];
#pragma GCC unroll 4
        for (int t = 0; t < mt; t++) xv[t] = _mm512_loadu_ps(a->v + (t0 + t) * a->ld + c * 16);
#pragma GCC unroll 4
        for (int r = 0; r < mr; r++) {
            __m512 wv = _mm512_load_ps(wbuf + r * a->ld + c * 16);
#pragma GCC unroll 4
            for (int t = 0; t < mt; t++) acc[t * 4 + r] = _mm512_fmadd_ps(xv[t], wv, acc[t * 4 + r]);
        }
    }
    for (int t = 0; t < mt; t++)
        for (int r = 0; r < mr; r++)
            y[(t0 + t) * rows + r0 + r] = sum16(acc[t * 4 + r]) * (a->scale[t0 + t] * w->row_scale[r0 + r]);
}

#define TILE_F8(w, a, t, r, mt, mr, y) tile_f8(w, a, t, r, mt, mr, y, wbuf)

void lb__w8a8_gemm_f8_avx512(const lb__w8a8 *w, const lb__w8a8_acts *a, size_t r0, size_t r1, float *y, float *wbuf)
{
    const lb__qmat *m = w->m;
    size_t cols = m->cols, chunks = (cols + 15) / 16;
    for (size_t r = r0; r < r1; r += 4) {
        int mr = r1 - r < 4 ? (int)(r1 - r) : 4;
        /* rows decoded once per call, then reused by every token; the
         * masked loads pad each row with code 0 (+0) to whole chunks */
        for (int i = 0; i < mr; i++) {
            const uint8_t *src = m->data + (r + (size_t)i) * m->row_bytes;
            for (size_t c = 0; c < chunks; c++) {
                size_t k = c * 16;
                __mmask16 mk = cols - k >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (cols - k)) - 1);
                _mm512_store_ps(wbuf + (size_t)i * a->ld + k, e4m3_decode16(src + k, mk));
            }
        }
        for (size_t t = 0; t < a->n; t += 4) {
            int mt = a->n - t < 4 ? (int)(a->n - t) : 4;
            LB__W8A8_TILE_CASES(TILE_F8)
        }
    }
}

const lb__w8a8_ops lb__w8a8_avx512_ops = {0, quant_i8, gemm_i8, lb__w8a8_gemm_f8_avx512};

#else
const lb__w8a8_ops lb__w8a8_avx512_ops = {0, NULL, NULL, NULL};
#endif
