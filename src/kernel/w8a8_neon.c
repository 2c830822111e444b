/* aarch64 NEON W8A8 kernels (w8a8.h), bit for bit w8a8_scalar.c.
 *
 * int8: products of int8 codes are exact in int16 (at most 128 * 128 =
 * 2^14 in magnitude); smull gives 8 of them and sadalp adds pairs into
 * int32 lanes, so each lane takes 4 products per 16 columns: at most
 * 2^16 / 4 * 2^14 = 2^28 per run of LB__W8A8_RUN columns, and a run's
 * whole sum at most 2^30 (int32, exact). With the dot-product extension
 * (__ARM_FEATURE_DOTPROD, e.g. -march=armv8.2-a+dotprod) sdot does the
 * same 4 products per lane in one instruction. Any order gives the same
 * integer. Tiles of up to 4 tokens x 2 rows: 8 accumulators.
 * fp8: the 16 partial sums of qdot.h's order as four float32x4_t per
 * (token, row) pair, fmla being the fused step (a product of two e4m3
 * values is exact, so it equals the reference's x * w + p); tiles of 2
 * tokens x 2 rows, weights decoded through the table once per call. */
#include "kernel/w8a8_kernels.h"

#if defined(__aarch64__)
#include <arm_neon.h>
#include <string.h>

#include "quant/qkernels.h"

#define INL static inline __attribute__((always_inline))
#define TOKEN_CHUNK 128

/* ---- activations: the twin of w8a8_scalar.c's quant_i8 ---- */

/* m = a > m ? a : m lane by lane: a NaN a is skipped, as in the reference
 * (fmax would return it) */
INL float32x4_t max_skip_nan(float32x4_t a, float32x4_t m) { return vbslq_f32(vcgtq_f32(a, m), a, m); }

/* 4 codes of x / s: clamped by compare and select (a NaN becomes -127, as
 * lb__w8a8_i8_code), then rounded to nearest even (fcvtns) */
INL int32x4_t code4(float32x4_t x, float32x4_t sv)
{
    const float32x4_t lo = vdupq_n_f32(-127.0f), hi = vdupq_n_f32(127.0f);
    float32x4_t v = vdivq_f32(x, sv);
    v = vbslq_f32(vcgtq_f32(v, lo), v, lo);
    v = vbslq_f32(vcltq_f32(v, hi), v, hi);
    return vcvtnq_s32_f32(v);
}

static float quant_i8(const float *x, size_t cols, float static_scale, int8_t *q)
{
    float s = static_scale;
    size_t k;
    if (!(s > 0)) {
        float32x4_t m4 = vdupq_n_f32(0.0f);
        for (k = 0; k + 4 <= cols; k += 4) m4 = max_skip_nan(vabsq_f32(vld1q_f32(x + k)), m4);
        float lanes[4], m = 0;
        vst1q_f32(lanes, m4);
        for (int l = 0; l < 4; l++) m = lanes[l] > m ? lanes[l] : m;
        for (; k < cols; k++) {
            float a = x[k] < 0 ? -x[k] : x[k];
            m = a > m ? a : m; /* max is order-free once NaN is skipped */
        }
        s = lb__w8a8_i8_scale(m);
    }
    const float32x4_t sv = vdupq_n_f32(s);
    for (k = 0; k + 16 <= cols; k += 16) {
        /* in [-127, 127]: narrowing twice is exact */
        int16x8_t a = vcombine_s16(vmovn_s32(code4(vld1q_f32(x + k), sv)), vmovn_s32(code4(vld1q_f32(x + k + 4), sv)));
        int16x8_t b =
            vcombine_s16(vmovn_s32(code4(vld1q_f32(x + k + 8), sv)), vmovn_s32(code4(vld1q_f32(x + k + 12), sv)));
        vst1q_s8(q + k, vcombine_s8(vmovn_s16(a), vmovn_s16(b)));
    }
    for (; k < cols; k++) q[k] = (int8_t)lb__w8a8_i8_code(x[k] / s);
    return s;
}

/* ---- int8 ---- */

/* 16 weight codes; the row's last partial chunk through a copy padded with
 * code 0 (x is padded in memory already) */
INL int8x16_t load16(const int8_t *p, size_t avail)
{
    if (avail >= 16) return vld1q_s8(p);
    int8_t tmp[16] = {0};
    memcpy(tmp, p, avail);
    return vld1q_s8(tmp);
}

/* acc += the 16 products x[l] * w[l], 4 to a lane (exact) */
INL int32x4_t dot16(int32x4_t acc, int8x16_t x, int8x16_t w)
{
#if defined(__ARM_FEATURE_DOTPROD)
    return vdotq_s32(acc, x, w);
#else
    acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(x), vget_low_s8(w)));
    return vpadalq_s16(acc, vmull_high_s8(x, w));
#endif
}

INL void tile_i8(const lb__w8a8 *w, const lb__w8a8_acts *a, size_t t0, size_t r0, const int mt, const int mr,
                 float *y)
{
    const lb__qmat *m = w->m;
    size_t cols = m->cols, rows = m->rows;
    const int8_t *xp[4], *wp[2];
    for (int t = 0; t < mt; t++) xp[t] = a->q + (t0 + t) * a->ld;
    for (int r = 0; r < mr; r++) wp[r] = (const int8_t *)(m->data + (r0 + r) * m->row_bytes);
    int64_t dot[8] = {0}; /* pair (t, r) at t * 2 + r */
    for (size_t k0 = 0; k0 < cols; k0 += LB__W8A8_RUN) {
        size_t end = cols - k0 < LB__W8A8_RUN ? cols : k0 + LB__W8A8_RUN;
        int32x4_t acc[8];
        for (int i = 0; i < 8; i++) acc[i] = vdupq_n_s32(0);
        for (size_t k = k0; k < end; k += 16) {
            int8x16_t xv[4];
            for (int t = 0; t < mt; t++) xv[t] = vld1q_s8(xp[t] + k);
            for (int r = 0; r < mr; r++) {
                int8x16_t wv = load16(wp[r] + k, end - k);
                for (int t = 0; t < mt; t++) acc[t * 2 + r] = dot16(acc[t * 2 + r], xv[t], wv);
            }
        }
        for (int i = 0; i < 8; i++) dot[i] += vaddvq_s32(acc[i]); /* a run's sum fits int32 */
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

INL void tile_f8(const lb__w8a8 *w, const lb__w8a8_acts *a, size_t t0, size_t r0, const int mt, const int mr,
                 float *y, const float *wbuf)
{
    size_t chunks = (w->m->cols + 15) / 16, rows = w->m->rows;
    float32x4_t acc[2][2][4]; /* [t][r][lanes 4q .. 4q+3] */
    for (int t = 0; t < 2; t++)
        for (int r = 0; r < 2; r++)
            for (int q = 0; q < 4; q++) acc[t][r][q] = vdupq_n_f32(0.0f);
    for (size_t c = 0; c < chunks; c++) {
        float32x4_t xv[2][4];
        for (int t = 0; t < mt; t++)
            for (int q = 0; q < 4; q++) xv[t][q] = vld1q_f32(a->v + (t0 + t) * a->ld + c * 16 + 4 * q);
        for (int r = 0; r < mr; r++)
            for (int q = 0; q < 4; q++) {
                float32x4_t wv = vld1q_f32(wbuf + r * a->ld + c * 16 + 4 * q);
                for (int t = 0; t < mt; t++) acc[t][r][q] = vfmaq_f32(acc[t][r][q], xv[t][q], wv);
            }
    }
    for (int t = 0; t < mt; t++)
        for (int r = 0; r < mr; r++) {
            float p[16];
            for (int q = 0; q < 4; q++) vst1q_f32(p + 4 * q, acc[t][r][q]);
            y[(t0 + t) * rows + r0 + r] = lb__sum16f(p) * (a->scale[t0 + t] * w->row_scale[r0 + r]);
        }
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

const lb__w8a8_ops lb__w8a8_neon_ops = {0, quant_i8, gemm_i8, gemm_f8};

#else
const lb__w8a8_ops lb__w8a8_neon_ops = {0, NULL, NULL, NULL};
#endif
