/* aarch64 NEON int8-activation decode kernels: qdot8.h's sums, bit for
 * bit the scalar reference.
 *
 * A group's 64 bytes are four 16-byte quarters, lanes 4h .. 4h+3 each, one
 * float32x4_t of partial sums per quarter. The weights are signed bytes
 * (a tbl of the 16 nibble values, or the int8 codes), so no offset is
 * needed (c = 0). With the dot-product extension (Armv8.2, sdot) a lane's
 * four byte products are one instruction; without it, smull (and smlal
 * for the high nibbles: |u * x| <= 12 * 127, two fit in int16) and two
 * pairwise widening adds give the same exact int32 sums.
 * Rows in flight: 4 for one token, 2 for two, 1 for three or four. */
#include "kernel/qdot8.h"
#include "kernel/qdot8_instances.h"
#include "kernel/w8a8_kernels.h"

#if defined(__aarch64__)

#include <arm_neon.h>
#include <stdint.h>
#include <string.h>

#include "io/ggml_blocks.h"
#include "quant/qkernels.h"

#define INL static inline __attribute__((always_inline))
#define RMAX 4

/* Sums of four consecutive byte products: lanes of u . x (+ v . z). */
INL int32x4_t dot4(int8x16_t u, int8x16_t x, int8x16_t v, int8x16_t z, const int two)
{
#if defined(__ARM_FEATURE_DOTPROD)
    int32x4_t p = vdotq_s32(vdupq_n_s32(0), u, x);
    return two ? vdotq_s32(p, v, z) : p;
#else
    int16x8_t lo = vmull_s8(vget_low_s8(u), vget_low_s8(x)), hi = vmull_high_s8(u, x);
    if (two) lo = vmlal_s8(lo, vget_low_s8(v), vget_low_s8(z)), hi = vmlal_high_s8(hi, v, z);
    return vpaddq_s32(vpaddlq_s16(lo), vpaddlq_s16(hi));
#endif
}

static void scale_neon(float *w, size_t n, float a, float b)
{
    size_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(w + i, vmulq_n_f32(vmulq_n_f32(vld1q_f32(w + i), a), b));
    for (; i < n; i++) w[i] = (w[i] * a) * b;
}

INL void run(const lb__qmat *m, const lb__act8 *a, size_t t0, const size_t nx, size_t r0, size_t r1, float *y,
             size_t ldy, void *scratch, const int nib, const int aff)
{
    const size_t R = nx == 1 ? 4 : nx == 2 ? 2 : 1;
    const size_t st = lb__qdot8_stage_stride(m), groups = a->groups, G = nib ? 128 : 64;
    float *mw = scratch;
    int32_t *zp = (int32_t *)((uint8_t *)scratch + (LB__QDOT8_STAGE_ROWS * st * sizeof(float) + 63) / 64 * 64);
    int32_t lb[LB__QDOT8_LANES];
    lb__qdot8_lane_blocks(m, lb);
    uint8_t lut16[16];
    lb__qdot8_nibble_table(m->element, 0, lut16);
    const int8x16_t lut = vreinterpretq_s8_u8(vld1q_u8(lut16));
    const uint8x16_t low4 = vdupq_n_u8(0x0F);
    const lb__qdot8_geom geo = lb__qdot8_geometry(m, groups, G);
    const size_t gmul = geo.gmul, gdiv = geo.gdiv, whole = geo.whole;
    uint8_t tail[RMAX][64];
    size_t first = SIZE_MAX, ms = st;
    for (size_t r = r0; r < r1; r += R) {
        size_t n = r1 - r < R ? r1 - r : R;
        if (first == SIZE_MAX || r + n > first + LB__QDOT8_STAGE_ROWS) {
            first = r;
            size_t k = r1 - r < LB__QDOT8_STAGE_ROWS ? r1 - r : LB__QDOT8_STAGE_ROWS;
            ms = lb__qdot8_stage_rows(m, LB_ISA_NEON, scale_neon, NULL, r, k, mw, zp);
        }
        const uint8_t *row[RMAX];
        const float *mwp[RMAX];
        const int32_t *zpp[RMAX];
        lb__qdot8_row_ptrs(m, r, n, R, first, st, ms, mw, zp, row, mwp, zpp);
        for (size_t i = 0; i < R; i++) {
            if (whole < groups) {
                memset(tail[i], 0, 64);
                memcpy(tail[i], row[i] + whole * 64, m->row_bytes - whole * 64);
            }
        }
        float32x4_t acc[RMAX][LB__QDOT_MAX_NX][4];
        _Pragma("GCC unroll 8")
        for (size_t i = 0; i < R; i++)
            _Pragma("GCC unroll 8")
            for (size_t t = 0; t < nx; t++)
                _Pragma("GCC unroll 8")
                for (size_t h = 0; h < 4; h++) acc[i][t][h] = vdupq_n_f32(0.0f);
        for (size_t g = 0; g < groups; g++) {
            const size_t b0 = g * gmul / gdiv;
            _Pragma("GCC unroll 8")
            for (size_t h = 0; h < 4; h++) {
                _Pragma("GCC unroll 8")
                for (size_t i = 0; i < R; i++) {
                    const uint8_t *src = g < whole ? row[i] + g * 64 : tail[i];
                    uint8x16_t wb = vld1q_u8(src + 16 * h);
                    float mws[4];
                    int32_t zs[4];
                    _Pragma("GCC unroll 8")
                    for (size_t j = 0; j < 4; j++) {
                        mws[j] = mwp[i][b0 + (size_t)lb[4 * h + j]];
                        zs[j] = aff ? zpp[i][b0 + (size_t)lb[4 * h + j]] : 0;
                    }
                    float32x4_t mwv = vld1q_f32(mws);
                    int8x16_t ul = vreinterpretq_s8_u8(wb), uh = ul;
                    if (nib) {
                        ul = vqtbl1q_s8(lut, vandq_u8(wb, low4));
                        uh = vqtbl1q_s8(lut, vshrq_n_u8(wb, 4));
                    }
                    _Pragma("GCC unroll 8")
                    for (size_t t = 0; t < nx; t++) {
                        const int8_t *q = a->q + (t0 + t) * a->stride + g * G;
                        size_t lo = (t0 + t) * a->lanes + g * LB__QDOT8_LANES + 4 * h;
                        int32x4_t p = nib ? dot4(ul, vld1q_s8(q + 16 * h), uh, vld1q_s8(q + 64 + 16 * h), 1)
                                          : dot4(ul, vld1q_s8(q + 16 * h), ul, ul, 0);
                        if (aff) p = vmlsq_s32(p, vld1q_s32(zs), vld1q_s32(a->xs + lo));
                        float32x4_t s = vmulq_f32(vld1q_f32(a->d + lo), mwv);
                        acc[i][t][h] = vfmaq_f32(acc[i][t][h], vcvtq_f32_s32(p), s);
                    }
                }
            }
        }
        _Pragma("GCC unroll 8")
        for (size_t i = 0; i < n; i++)
            _Pragma("GCC unroll 8")
            for (size_t t = 0; t < nx; t++) {
                float s[16];
                _Pragma("GCC unroll 8")
                for (size_t h = 0; h < 4; h++) vst1q_f32(s + 4 * h, acc[i][t][h]);
                y[t * ldy + r + i] = lb__sum16f(s);
            }
    }
}

LB__QDOT8_ROWS_FN(rows_neon)

/* ggml's Q4_K and Q5_K in place (qdot8.h's K-quant sums): a quarter q of
 * half h's 64 code bytes is lanes 4q .. 4q + 3, chunk 2h + q / 2, whose
 * low (high) nibbles are sub-block 4h + 2(q / 2) (+ 1); codes at most 31
 * are signed bytes as they are. */
INL void krun45(const lb__qmat *m, const lb__act8 *a, size_t t0, const size_t nx, size_t r0, size_t r1, float *y,
                size_t ldy, const int five)
{
    const size_t R = nx == 1 ? 4 : nx == 2 ? 2 : 1;
    const size_t nsb = m->cols / 256, nblk = m->cols / 32, bb = m->ggml_block_bytes, qs_at = five ? 48 : 16;
    const uint8x16_t low4 = vdupq_n_u8(0x0F), sixteen = vdupq_n_u8(16);
    for (size_t r = r0; r < r1; r += R) {
        size_t rn = r1 - r < R ? r1 - r : R;
        const uint8_t *row[RMAX];
        lb__qdot8k_row_ptrs(m, r, rn, R, row);
        float32x4_t acc[RMAX][LB__QDOT_MAX_NX][4], macc[RMAX][LB__QDOT_MAX_NX][2];
        _Pragma("GCC unroll 8")
        for (size_t i = 0; i < R; i++)
            _Pragma("GCC unroll 8")
            for (size_t t = 0; t < nx; t++) {
                for (size_t k = 0; k < 4; k++) acc[i][t][k] = vdupq_n_f32(0.0f);
                macc[i][t][0] = macc[i][t][1] = vdupq_n_f32(0.0f);
            }
        for (size_t s = 0; s < nsb; s++) {
            _Pragma("GCC unroll 8")
            for (size_t i = 0; i < R; i++) {
                const uint8_t *b = row[i] + s * bb, *qs = b + qs_at;
                uint64_t sc, mn;
                lb__qdot8k_scale_min(b + 4, &sc, &mn);
                const float d = lb__fp16_to_f32(lb__le16(b)), dmin = lb__fp16_to_f32(lb__le16(b + 2));
                float dsc[8], dmn[8];
                for (size_t j = 0; j < 8; j++)
                    dsc[j] = d * (float)((sc >> (8 * j)) & 63), dmn[j] = dmin * (float)((mn >> (8 * j)) & 63);
                _Pragma("GCC unroll 8")
                for (size_t t = 0; t < nx; t++) {
                    const float *e = a->e + (t0 + t) * nblk + 8 * s;
                    macc[i][t][0] = vfmaq_f32(macc[i][t][0], vld1q_f32(e), vld1q_f32(dmn));
                    macc[i][t][1] = vfmaq_f32(macc[i][t][1], vld1q_f32(e + 4), vld1q_f32(dmn + 4));
                }
                for (size_t h = 0; h < 2; h++)
                    _Pragma("GCC unroll 2")
                    for (size_t n = 0; n < 2; n++)
                        _Pragma("GCC unroll 4")
                        for (size_t k = 0; k < 4; k++) {
                            const size_t j = 4 * h + 2 * (k / 2) + n, g = 2 * s + h;
                            const uint8x16_t wb = vld1q_u8(qs + 64 * h + 16 * k);
                            uint8x16_t u = n ? vshrq_n_u8(wb, 4) : vandq_u8(wb, low4);
                            if (five)
                                u = vaddq_u8(u, vandq_u8(vtstq_u8(vld1q_u8(b + 16 + 16 * (k % 2)), vdupq_n_u8((uint8_t)(1u << j))),
                                                         sixteen));
                            _Pragma("GCC unroll 8")
                            for (size_t t = 0; t < nx; t++) {
                                const int8_t *q = a->q + (t0 + t) * a->stride + g * 128 + n * 64 + 16 * k;
                                const float32x4_t dl = vld1q_f32(a->d + (t0 + t) * a->lanes + (2 * g + n) * 16 + 4 * k);
                                int32x4_t p = dot4(vreinterpretq_s8_u8(u), vld1q_s8(q), vreinterpretq_s8_u8(u), vld1q_s8(q), 0);
                                acc[i][t][k] = vfmaq_f32(acc[i][t][k], vcvtq_f32_s32(p), vmulq_n_f32(dl, dsc[j]));
                            }
                        }
            }
        }
        for (size_t i = 0; i < rn; i++)
            for (size_t t = 0; t < nx; t++) {
                float s16[16], s8[8];
                for (size_t k = 0; k < 4; k++) vst1q_f32(s16 + 4 * k, acc[i][t][k]);
                vst1q_f32(s8, macc[i][t][0]);
                vst1q_f32(s8 + 4, macc[i][t][1]);
                y[t * ldy + r + i] = lb__sum16f(s16) - lb__qdot8k_sum8(s8);
            }
    }
}

/* Q6_K: quarter k of half h's ql bytes, nibble n, is elements 128h + 64n
 * + 16k .. + 15 (staged in order), lanes 4k .. 4k + 3, sub-block 8h + 4n +
 * k; the high two bits are bits 2(2n + k / 2) of qh[32h + 16(k % 2) ..];
 * u = 0 .. 63 as signed bytes, each lane's sum plus the staged -32 * S4. */
INL void krun6(const lb__qmat *m, const lb__act8 *a, size_t t0, const size_t nx, size_t r0, size_t r1, float *y,
               size_t ldy)
{
    const size_t R = nx == 1 ? 4 : nx == 2 ? 2 : 1;
    const size_t nsb = m->cols / 256, bb = m->ggml_block_bytes;
    const uint8x16_t low4 = vdupq_n_u8(0x0F), three = vdupq_n_u8(3);
    for (size_t r = r0; r < r1; r += R) {
        size_t rn = r1 - r < R ? r1 - r : R;
        const uint8_t *row[RMAX];
        lb__qdot8k_row_ptrs(m, r, rn, R, row);
        float32x4_t acc[RMAX][LB__QDOT_MAX_NX][4];
        for (size_t i = 0; i < R; i++)
            for (size_t t = 0; t < nx; t++)
                for (size_t k = 0; k < 4; k++) acc[i][t][k] = vdupq_n_f32(0.0f);
        for (size_t s = 0; s < nsb; s++) {
            _Pragma("GCC unroll 8")
            for (size_t i = 0; i < R; i++) {
                const uint8_t *b = row[i] + s * bb; /* ql[128] qh[64] scales[16] d[2] */
                const float d = lb__fp16_to_f32(lb__le16(b + 208));
                for (size_t h = 0; h < 2; h++)
                    _Pragma("GCC unroll 2")
                    for (size_t n = 0; n < 2; n++)
                        _Pragma("GCC unroll 4")
                        for (size_t k = 0; k < 4; k++) {
                            const uint8x16_t wb = vld1q_u8(b + 64 * h + 16 * k);
                            const uint8x16_t qh = vld1q_u8(b + 128 + 32 * h + 16 * (k % 2));
                            const uint8x16_t hi = vandq_u8(vshlq_u8(qh, vdupq_n_s8((int8_t)(-2 * (int)(2 * n + k / 2)))), three);
                            const uint8x16_t u = vorrq_u8(n ? vshrq_n_u8(wb, 4) : vandq_u8(wb, low4), vshlq_n_u8(hi, 4));
                            const float dsc = d * (float)(int8_t)b[192 + 8 * h + 4 * n + k];
                            _Pragma("GCC unroll 8")
                            for (size_t t = 0; t < nx; t++) {
                                const size_t e = 256 * s + 128 * h + 64 * n + 16 * k;
                                const int8x16_t xv = vld1q_s8(a->q + (t0 + t) * a->stride + e);
                                const int32x4_t p = vaddq_s32(dot4(vreinterpretq_s8_u8(u), xv, vreinterpretq_s8_u8(u), xv, 0),
                                                              vld1q_s32(a->cxs + (t0 + t) * a->lanes + e / 4));
                                const float32x4_t dl = vld1q_f32(a->d + (t0 + t) * a->lanes + e / 4);
                                acc[i][t][k] = vfmaq_f32(acc[i][t][k], vcvtq_f32_s32(p), vmulq_n_f32(dl, dsc));
                            }
                        }
            }
        }
        for (size_t i = 0; i < rn; i++)
            for (size_t t = 0; t < nx; t++) {
                float s16[16];
                for (size_t k = 0; k < 4; k++) vst1q_f32(s16 + 4 * k, acc[i][t][k]);
                y[t * ldy + r + i] = lb__sum16f(s16);
            }
    }
}

/* 16 in byte i of 16 where bit i of m is set, else 0. */
INL int8x16_t bits_as_16(uint32_t m)
{
    static const uint8_t bits[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    const uint8x16_t v = vcombine_u8(vdup_n_u8((uint8_t)m), vdup_n_u8((uint8_t)(m >> 8)));
    return vreinterpretq_s8_u8(vandq_u8(vtstq_u8(v, vld1q_u8(bits)), vdupq_n_u8(16)));
}

/* IQ4_XS / IQ4_NL / Q4_0 (IQ4_NL's layout) / Q5_0: block 4g + k's 16 code
 * bytes are lanes 4k .. 4k + 3; the values (a tbl of the type's; Q5_0's
 * plus 16 where its fifth bit is set) are signed bytes as they are. */
INL void krun_iq4(const lb__qmat *m, const lb__act8 *a, size_t t0, const size_t nx, size_t r0, size_t r1, float *y,
                  size_t ldy, const int layout)
{
    const size_t R = nx == 1 ? 4 : nx == 2 ? 2 : 1, nblk = m->cols / 32, groups = (nblk + 3) / 4;
    const int8x16_t lut = vld1q_s8(lb__qdot8k_values(m->ggml));
    const uint8x16_t low4 = vdupq_n_u8(0x0F);
    for (size_t r = r0; r < r1; r += R) {
        size_t rn = r1 - r < R ? r1 - r : R;
        const uint8_t *row[RMAX];
        lb__qdot8k_row_ptrs(m, r, rn, R, row);
        float32x4_t acc[RMAX][LB__QDOT_MAX_NX][4];
        for (size_t i = 0; i < R; i++)
            for (size_t t = 0; t < nx; t++)
                for (size_t k = 0; k < 4; k++) acc[i][t][k] = vdupq_n_f32(0.0f);
        for (size_t g = 0; g < groups; g++) {
            _Pragma("GCC unroll 8")
            for (size_t i = 0; i < R; i++) {
                for (size_t k = 0; k < 4 && 4 * g + k < nblk; k++) { /* a row's last group may end early */
                    const size_t j = 4 * g + k; /* block */
                    const uint8_t *qs;
                    float sc;
                    uint32_t qh = 0;
                    if (layout == LB__Q5_22) {
                        const lb__block_q5_0 *b = (const lb__block_q5_0 *)row[i] + j;
                        qs = b->qs, sc = lb__fp16_to_f32(lb__le16(b->d));
                        qh = lb__le32(b->qh);
                    } else if (layout == LB__NL_18) {
                        const lb__block_iq4_nl *b = (const lb__block_iq4_nl *)row[i] + j; /* or Q4_0's: the same */
                        qs = b->qs, sc = lb__fp16_to_f32(lb__le16(b->d));
                    } else {
                        const lb__block_iq4_xs *b = (const lb__block_iq4_xs *)row[i] + j / 8;
                        qs = b->qs + 16 * (j % 8);
                        sc = lb__fp16_to_f32(lb__le16(b->d)) * (float)(lb__iq4_xs_scale_code(b, (int)(j % 8)) - 32);
                    }
                    const uint8x16_t wb = vld1q_u8(qs);
                    int8x16_t v[2] = {vqtbl1q_s8(lut, vandq_u8(wb, low4)), vqtbl1q_s8(lut, vshrq_n_u8(wb, 4))};
                    if (layout == LB__Q5_22) v[0] = vaddq_s8(v[0], bits_as_16(qh)), v[1] = vaddq_s8(v[1], bits_as_16(qh >> 16));
                    _Pragma("GCC unroll 8")
                    for (size_t t = 0; t < nx; t++) { /* both nibbles into one sum: at most 2 * 127 * 127 in int16 */
                        const size_t lo = (t0 + t) * a->lanes + g * 16 + 4 * k;
                        const int8_t *xq = a->q + (t0 + t) * a->stride + g * 128 + 16 * k;
                        const int32x4_t p = dot4(v[0], vld1q_s8(xq), v[1], vld1q_s8(xq + 64), 1);
                        acc[i][t][k] = vfmaq_f32(acc[i][t][k], vcvtq_f32_s32(p), vmulq_n_f32(vld1q_f32(a->d + lo), sc));
                    }
                }
            }
        }
        for (size_t i = 0; i < rn; i++)
            for (size_t t = 0; t < nx; t++) {
                float s16[16];
                for (size_t k = 0; k < 4; k++) vst1q_f32(s16 + 4 * k, acc[i][t][k]);
                y[t * ldy + r + i] = lb__sum16f(s16);
            }
    }
}

LB__QDOT8K_ROWS_FN(lb__qdot8k_rows_neon)

const lb__qdot8_set lb__qdot8_neon_set = {"neon", lb__qdot8_no_offset, rows_neon, lb__qdot8k_rows_neon, &lb__w8a8_neon_ops, 0, 0, NULL};

#else
const lb__qdot8_set lb__qdot8_neon_set = {"neon", lb__qdot8_no_offset, NULL, lb__qdot8k_rows_scalar, &lb__w8a8_neon_ops, 0, 0, NULL};
#endif
