/* AVX2 W8A8 kernels.
 *
 * int8: vpmaddwd on sign-extended int16 codes. (vpmaddubsw would do twice
 * the work per instruction but adds two products of up to 255 * 127 into
 * an int16, which saturates; vpmaddwd's int16 x int16 pairs land in int32
 * exactly: at most 2 * 128 * 128 per lane and chunk, 2^30 per run of
 * LB__W8A8_RUN columns.) Tiles of up to 4 tokens x 2 rows: 8 accumulators,
 * 4 activation vectors and a weight vector in the 16 ymm registers.
 * fp8: the 16 partial sums of qdot.h's order as two ymm per pair, tiles of
 * 2 tokens x 2 rows; weights decoded once per call through the table. */
#include "kernel/w8a8_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <string.h>

#define TOKEN_CHUNK 128

/* ---- activations: the twin of w8a8_scalar.c's quant_i8 ---- */

static float quant_i8(const float *x, size_t cols, float static_scale, int8_t *q)
{
    float s = static_scale;
    size_t k;
    if (!(s > 0)) {
        const __m256 signless = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
        __m256 m8 = _mm256_setzero_ps();
        for (k = 0; k + 8 <= cols; k += 8) m8 = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + k), signless), m8);
        float lanes[8], m = 0;
        _mm256_storeu_ps(lanes, m8);
        for (int l = 0; l < 8; l++) m = lanes[l] > m ? lanes[l] : m;
        for (; k < cols; k++) {
            float a = x[k] < 0 ? -x[k] : x[k];
            m = a > m ? a : m; /* max is order-free once NaN is skipped */
        }
        s = lb__w8a8_i8_scale(m);
    }
    const __m256 sv = _mm256_set1_ps(s), lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
    for (k = 0; k + 8 <= cols; k += 8) {
        __m256 v = _mm256_min_ps(_mm256_max_ps(_mm256_div_ps(_mm256_loadu_ps(x + k), sv), lo), hi);
        __m256i i = _mm256_cvtps_epi32(v); /* in [-127, 127]: pack twice without saturating */
        __m128i i16 = _mm_packs_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1));
        _mm_storel_epi64((__m128i *)(q + k), _mm_packs_epi16(i16, i16));
    }
    for (; k < cols; k++) q[k] = (int8_t)lb__w8a8_i8_code(x[k] / s);
    return s;
}

/* ---- int8 ---- */

/* 16 codes sign-extended; the row's last partial chunk through a copy
 * padded with code 0 (x is padded in memory already). */
static inline __m256i load16(const int8_t *p, size_t avail)
{
    if (avail >= 16) return _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)p));
    int8_t tmp[16] = {0};
    memcpy(tmp, p, avail);
    return _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)tmp));
}

/* the lane sums of 8 accumulators, as int32 (exact: a run's whole sum fits) */
static inline void hsum8(const __m256i acc[8], int32_t out[8])
{
    __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(acc[0], acc[1]), _mm256_hadd_epi32(acc[2], acc[3]));
    __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(acc[4], acc[5]), _mm256_hadd_epi32(acc[6], acc[7]));
    _mm_storeu_si128((__m128i *)out, _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1)));
    _mm_storeu_si128((__m128i *)(out + 4), _mm_add_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1)));
}

static inline __attribute__((always_inline)) void tile_i8(const lb__w8a8 *w, const lb__w8a8_acts *a, size_t t0,
                                                          size_t r0, const int mt, const int mr, float *y)
{
    const lb__qmat *m = w->m;
    size_t cols = m->cols, rows = m->rows;
    const int8_t *xp[4], *wp[2];
    for (int t = 0; t < mt; t++) xp[t] = a->q + (t0 + t) * a->ld;
    for (int r = 0; r < mr; r++) wp[r] = (const int8_t *)(m->data + (r0 + r) * m->row_bytes);
    int64_t dot[8] = {0}; /* pair (t, r) at t * 2 + r */
    for (size_t k0 = 0; k0 < cols; k0 += LB__W8A8_RUN) {
        size_t end = cols - k0 < LB__W8A8_RUN ? cols : k0 + LB__W8A8_RUN;
        __m256i acc[8];
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) acc[i] = _mm256_setzero_si256();
        for (size_t k = k0; k < end; k += 16) {
            __m256i xv[4];
#pragma GCC unroll 4
            for (int t = 0; t < mt; t++) xv[t] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(xp[t] + k)));
#pragma GCC unroll 2
            for (int r = 0; r < mr; r++) {
                __m256i wv = load16(wp[r] + k, end - k);
#pragma GCC unroll 4
                for (int t = 0; t < mt; t++) acc[t * 2 + r] = _mm256_add_epi32(acc[t * 2 + r], _mm256_madd_epi16(xv[t], wv));
            }
        }
        int32_t s[8];
        hsum8(acc, s);
        for (int i = 0; i < 8; i++) dot[i] += s[i];
    }
    for (int t = 0; t < mt; t++)
        for (int r = 0; r < mr; r++)
            y[(t0 + t) * rows + r0 + r] = (float)dot[t * 2 + r] * (a->scale[t0 + t] * w->row_scale[r0 + r]);
}

#define TILE_CASES(fn)                                                                  \
    switch ((mt - 1) * 2 + (mr - 1)) {                                                  \
    case 0: fn(w, a, t, r, 1, 1, y); break;                                             \
    case 1: fn(w, a, t, r, 1, 2, y); break;                                             \
    case 2: fn(w, a, t, r, 2, 1, y); break;                                             \
    case 3: fn(w, a, t, r, 2, 2, y); break;                                             \
    case 4: fn(w, a, t, r, 3, 1, y); break;                                             \
    case 5: fn(w, a, t, r, 3, 2, y); break;                                             \
    case 6: fn(w, a, t, r, 4, 1, y); break;                                             \
    default: fn(w, a, t, r, 4, 2, y); break;                                            \
    }

static void gemm_i8(const lb__w8a8 *w, const lb__w8a8_acts *a, size_t r0, size_t r1, float *y)
{
    for (size_t tc = 0; tc < a->n; tc += TOKEN_CHUNK) {
        size_t te = a->n - tc < TOKEN_CHUNK ? a->n : tc + TOKEN_CHUNK;
        for (size_t r = r0; r < r1; r += 2) {
            int mr = r1 - r < 2 ? (int)(r1 - r) : 2;
            for (size_t t = tc; t < te; t += 4) {
                int mt = te - t < 4 ? (int)(te - t) : 4;
                TILE_CASES(tile_i8)
            }
        }
    }
}

/* ---- fp8 ---- */

/* lb__sum16f of p[0..7] = lo, p[8..15] = hi: the same additions in order */
static inline float sum16(__m256 lo, __m256 hi)
{
    __m256 t8 = _mm256_add_ps(lo, hi);                                                /* t[i] = s[i] + s[i+8] */
    __m128 t4 = _mm_add_ps(_mm256_castps256_ps128(t8), _mm256_extractf128_ps(t8, 1)); /* t[i] + t[i+4] */
    __m128 t2 = _mm_add_ps(t4, _mm_movehl_ps(t4, t4));                               /* t0+t2, t1+t3 */
    return _mm_cvtss_f32(_mm_add_ss(t2, _mm_movehdup_ps(t2)));
}

static inline __attribute__((always_inline)) void tile_f8(const lb__w8a8 *w, const lb__w8a8_acts *a, size_t t0,
                                                          size_t r0, const int mt, const int mr, float *y,
                                                          const float *wbuf)
{
    size_t chunks = (w->m->cols + 15) / 16, rows = w->m->rows;
    __m256 acc[8]; /* pair (t, r): acc[(t * 2 + r) * 2 + half] */
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) acc[i] = _mm256_setzero_ps();
    for (size_t c = 0; c < chunks; c++) {
        __m256 xv[4];
#pragma GCC unroll 2
        for (int t = 0; t < mt; t++) {
            xv[2 * t] = _mm256_loadu_ps(a->v + (t0 + t) * a->ld + c * 16);
            xv[2 * t + 1] = _mm256_loadu_ps(a->v + (t0 + t) * a->ld + c * 16 + 8);
        }
#pragma GCC unroll 2
        for (int r = 0; r < mr; r++) {
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                __m256 wv = _mm256_load_ps(wbuf + r * a->ld + c * 16 + 8 * h);
#pragma GCC unroll 2
                for (int t = 0; t < mt; t++)
                    acc[(t * 2 + r) * 2 + h] = _mm256_fmadd_ps(xv[2 * t + h], wv, acc[(t * 2 + r) * 2 + h]);
            }
        }
    }
    for (int t = 0; t < mt; t++)
        for (int r = 0; r < mr; r++)
            y[(t0 + t) * rows + r0 + r] = sum16(acc[(t * 2 + r) * 2], acc[(t * 2 + r) * 2 + 1]) *
                                          (a->scale[t0 + t] * w->row_scale[r0 + r]);
}

#define TILE_F8(w, a, t, r, mt, mr, y) tile_f8(w, a, t, r, mt, mr, y, wbuf)

static void gemm_f8(const lb__w8a8 *w, const lb__w8a8_acts *a, size_t r0, size_t r1, float *y, float *wbuf)
{
    const lb__qmat *m = w->m;
    const float *table = lb__w8a8_e4m3_table();
    size_t padded = (m->cols + 15) / 16 * 16;
    for (size_t r = r0; r < r1; r += 2) {
        int mr = r1 - r < 2 ? (int)(r1 - r) : 2;
        for (int i = 0; i < mr; i++) { /* decoded once per call, padded with +0 */
            const uint8_t *src = m->data + (r + (size_t)i) * m->row_bytes;
            float *dst = wbuf + (size_t)i * a->ld;
            for (size_t k = 0; k < m->cols; k++) dst[k] = table[src[k]];
            for (size_t k = m->cols; k < padded; k++) dst[k] = 0.0f;
        }
        for (size_t t = 0; t < a->n; t += 2) {
            int mt = a->n - t < 2 ? (int)(a->n - t) : 2;
            switch ((mt - 1) * 2 + (mr - 1)) {
            case 0: TILE_F8(w, a, t, r, 1, 1, y); break;
            case 1: TILE_F8(w, a, t, r, 1, 2, y); break;
            case 2: TILE_F8(w, a, t, r, 2, 1, y); break;
            default: TILE_F8(w, a, t, r, 2, 2, y); break;
            }
        }
    }
}

const lb__w8a8_ops lb__w8a8_avx2_ops = {0, quant_i8, gemm_i8, gemm_f8};

#else
const lb__w8a8_ops lb__w8a8_avx2_ops = {0, NULL, NULL, NULL};
#endif
