/* AVX-512 VNNI W8A8 int8 product: vpdpbusd adds, in each int32 lane, four
 * products of unsigned bytes by signed bytes, 64 multiply-adds per
 * instruction (four times an fp32 FMA's 16).
 *
 * The activations are the unsigned operand: their codes q in [-127, 127]
 * are stored as q + 128 in [1, 255] (lb__w8a8_acts), the weights' codes
 * stay signed, and the exact dot is
 *     sum_k q_k w_k = sum_k (q_k + 128) w_k - 128 * sum_k w_k
 * with the weight row's code sum precomputed (lb__w8a8.row_sum). Biasing
 * the activations rather than the weights keeps the weights as stored
 * (read in place, one byte each) and costs one add per activation when
 * they are quantized. A lane gains at most 4 * 255 * 128 per 64 columns,
 * so an int32 lane holds a run of LB__W8A8_RUN columns (w8a8_kernels.h);
 * runs are added in int64.
 *
 * Tiles of up to 4 tokens x 4 rows keep 16 accumulators in registers and
 * read 8 vectors per 16 vpdpbusd. Activation quantization and the fp8
 * product are the AVX-512 set's (w8a8_avx512.c). */
#include "kernel/w8a8_kernels.h"

#if defined(__x86_64__)
#include "kernel/w8a8_avx512.h"

static float quant_i8_biased(const float *x, size_t cols, float static_scale, int8_t *q)
{
    return lb__w8a8_quant_i8_avx512(x, cols, static_scale, q, 1);
}

static inline __attribute__((always_inline)) void tile_i8(const lb__w8a8 *w, const lb__w8a8_acts *a, size_t t0,
                                                          size_t r0, const int mt, const int mr, float *y)
{
    const lb__qmat *m = w->m;
    size_t cols = m->cols;
    const uint8_t *xp[4];
    const int8_t *wp[4];
    for (int t = 0; t < mt; t++) xp[t] = (const uint8_t *)a->q + (t0 + t) * a->ld;
    for (int r = 0; r < mr; r++) wp[r] = (const int8_t *)(m->data + (r0 + r) * m->row_bytes);
    __m512i sum_lo = _mm512_setzero_si512(), sum_hi = _mm512_setzero_si512();
    for (size_t k0 = 0; k0 < cols; k0 += LB__W8A8_RUN) {
        size_t end = cols - k0 < LB__W8A8_RUN ? cols : k0 + LB__W8A8_RUN;
        __m512i acc[16];
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) acc[i] = _mm512_setzero_si512();
        size_t k = k0;
        for (; k + 64 <= end; k += 64) {
            __m512i xv[4];
#pragma GCC unroll 4
            for (int t = 0; t < mt; t++) xv[t] = _mm512_loadu_si512(xp[t] + k);
#pragma GCC unroll 4
            for (int r = 0; r < mr; r++) {
                __m512i wv = _mm512_loadu_si512(wp[r] + k);
#pragma GCC unroll 4
                for (int t = 0; t < mt; t++) acc[t * 4 + r] = _mm512_dpbusd_epi32(acc[t * 4 + r], xv[t], wv);
            }
        }
        if (k < end) {
            /* the row's last columns: weights past the end load as 0, so
             * the padding activations (128) add nothing */
            __mmask64 mk = _cvtu64_mask64(~0ull >> (64 - (end - k)));
            __m512i xv[4];
            for (int t = 0; t < mt; t++) xv[t] = _mm512_loadu_si512(xp[t] + k);
            for (int r = 0; r < mr; r++) {
                __m512i wv = _mm512_maskz_loadu_epi8(mk, wp[r] + k);
                for (int t = 0; t < mt; t++) acc[t * 4 + r] = _mm512_dpbusd_epi32(acc[t * 4 + r], xv[t], wv);
            }
        }
        lb__w8a8_add_sums_avx512(acc, &sum_lo, &sum_hi);
    }
    /* minus 128 * row sum, lane t * 4 + r (row_sum has 4 spare entries) */
    __m512i rs = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(w->row_sum + r0)));
    sum_lo = _mm512_sub_epi64(sum_lo, _mm512_slli_epi64(_mm512_cvtepi32_epi64(_mm512_castsi512_si256(rs)), 7));
    sum_hi = _mm512_sub_epi64(sum_hi, _mm512_slli_epi64(_mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(rs, 1)), 7));
    lb__w8a8_store_tile_avx512(w, a, t0, r0, mt, mr, sum_lo, sum_hi, y);
}

/* Decode (one token): 16 rows at a time, one accumulator each, so 16
 * weight lines are in flight per step rather than 4 (one token's 4-row
 * tiles waited on memory: W8A8 decode ran at half the weight-only speed).
 * Same exact sums, same y = float(dot) * (s_t * s_w). */
static void rows16_i8(const lb__w8a8 *w, const lb__w8a8_acts *a, size_t r0, float *y)
{
    const lb__qmat *m = w->m;
    const uint8_t *xp = (const uint8_t *)a->q;
    const int8_t *wp = (const int8_t *)(m->data + r0 * m->row_bytes);
    size_t cols = m->cols, rb = m->row_bytes;
    const int short_rows = rb < 4096;
    __m512i sum_lo = _mm512_setzero_si512(), sum_hi = _mm512_setzero_si512();
    for (size_t k0 = 0; k0 < cols; k0 += LB__W8A8_RUN) {
        size_t end = cols - k0 < LB__W8A8_RUN ? cols : k0 + LB__W8A8_RUN;
        __m512i acc[16];
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) acc[i] = _mm512_setzero_si512();
        size_t k = k0;
        for (; k + 64 <= end; k += 64) {
            __m512i xv = _mm512_loadu_si512(xp + k);
            if (short_rows) /* the next 16 rows' same columns: short rows end before the hardware prefetcher ramps */
#pragma GCC unroll 16
                for (int r = 0; r < 16; r++) _mm_prefetch((const char *)(wp + (16 + r) * rb + k), _MM_HINT_T0);
#pragma GCC unroll 16
            for (int r = 0; r < 16; r++) acc[r] = _mm512_dpbusd_epi32(acc[r], xv, _mm512_loadu_si512(wp + r * rb + k));
        }
        if (k < end) { /* weights past the row load as 0: the padding activations add nothing */
            __mmask64 mk = _cvtu64_mask64(~0ull >> (64 - (end - k)));
            __m512i xv = _mm512_loadu_si512(xp + k);
            for (int r = 0; r < 16; r++) acc[r] = _mm512_dpbusd_epi32(acc[r], xv, _mm512_maskz_loadu_epi8(mk, wp + r * rb + k));
        }
        lb__w8a8_add_sums_avx512(acc, &sum_lo, &sum_hi); /* lane i: row r0 + i */
    }
    __m512i rs = _mm512_loadu_si512(w->row_sum + r0);
    sum_lo = _mm512_sub_epi64(sum_lo, _mm512_slli_epi64(_mm512_cvtepi32_epi64(_mm512_castsi512_si256(rs)), 7));
    sum_hi = _mm512_sub_epi64(sum_hi, _mm512_slli_epi64(_mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(rs, 1)), 7));
    __m512 f = _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtepi64_ps(sum_lo)), _mm512_cvtepi64_ps(sum_hi), 1);
    __m512 sw = _mm512_loadu_ps(w->row_scale + r0), st = _mm512_set1_ps(a->scale[0]);
    _mm512_storeu_ps(y + r0, _mm512_mul_ps(f, _mm512_mul_ps(st, sw)));
}

static void gemm_i8(const lb__w8a8 *w, const lb__w8a8_acts *a, size_t r0, size_t r1, float *y)
{
    if (a->n == 1) {
        for (; r0 + 16 <= r1; r0 += 16) rows16_i8(w, a, r0, y);
        if (r0 == r1) return; /* the last rows take the tiles below */
    }
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

const lb__w8a8_ops lb__w8a8_vnni_ops = {1, quant_i8_biased, gemm_i8, lb__w8a8_gemm_f8_avx512};

#else
const lb__w8a8_ops lb__w8a8_vnni_ops = {1, NULL, NULL, NULL};
#endif
