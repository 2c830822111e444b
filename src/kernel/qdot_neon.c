/* aarch64 NEON decode kernels: qdot.h's order, bit for bit the scalar
 * reference (lb__qdot_scalar in qdot_scalar.c).
 *
 * A chunk's 16 partial sums p[0..15] are four float32x4_t (p[0..3],
 * p[4..7], p[8..11], p[12..15]); vfmaq_f32 is the fused multiply-add the
 * order names (one rounding, as fmaf). C = 32: the low nibbles (even
 * elements) go first, then the high ones, each lane's two fmas in the
 * reference's order; x is staged that way (lb__qdot_stage_x). Rows in
 * flight: 4 for one token, 2 for two, 1 for three or four, so the sums
 * (16 registers at most) stay in the 32 vector registers.
 *
 * The element decoders, per kind (lb__qkind), all exact:
 *   F32/BF16/F16  load; bf16 << 16; fcvtl (fp16 -> fp32).
 *   E4M3          ((c & 0x7f) << 7) | ((c & 0x80) << 8) is the fp16 of
 *                 value * 2^-8, NaN codes patched to an fp16 NaN, then fcvtl;
 *                 the 2^8 folded into the block's scale when mul * 2^8 is
 *                 finite, as qdot_avx512.c argues; else v = h * 2^8 first.
 *   E5M2          c << 8 is the fp16 of the same value.
 *   LUT8          (fnuz) the reference decoder's 256 values, looked up one by
 *                 one (NEON has no gather; these formats are rare).
 *   I8/U8         widened to int32, converted: exact.
 *   NIB           per block the 16 possible w = (v - zp) * mul (the
 *                 reference's expression) are 64 bytes: tbl with four
 *                 registers picks each lane's 4 bytes.
 *   SIX           each code's two bytes go into a 16-bit lane (tbl), a
 *                 per-lane shift aligns it; the 32 magnitudes (128 bytes) are
 *                 looked up with tbl + tbx, bit 5 is the sign.
 * w = (v - zp) * mul for affine, v * mul otherwise, v when plain (as in
 * qdot_avx512.c). Blocks must hold whole chunks (or the row be one block),
 * except 4-bit elements in blocks of 16 (nvfp4), which run_nib16 handles;
 * the other layouts whose blocks split a chunk (int4:g48, fp6:g24, int8:g3)
 * go to the scalar reference. */
#include "kernel/qdot_internal.h"

#if defined(__aarch64__)

#include <arm_neon.h>
#include <math.h>
#include <string.h>

#include "quant/qkernels.h"

#define INL static inline __attribute__((always_inline))
#define RMAX LB__QDOT_ROWS

/* Byte indices that spread 4 float-table indices (already times 4) of a
 * 16-byte vector into the 4 bytes of each lane: group j takes bytes
 * 4j .. 4j+3 of the index vector, each 4 times, plus 0, 1, 2, 3. */
static const uint8_t spread_tab[4][16] = {
    {0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3},
    {4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7},
    {8, 8, 8, 8, 9, 9, 9, 9, 10, 10, 10, 10, 11, 11, 11, 11},
    {12, 12, 12, 12, 13, 13, 13, 13, 14, 14, 14, 14, 15, 15, 15, 15},
};
static const uint8_t byte_of_lane[16] = {0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3};

/* Lane group j (elements 4j .. 4j+3) of the byte indices of 16 table
 * entries idx4[l] = 4 * index. */
INL uint8x16_t spread(uint8x16_t idx4, int j)
{
    return vorrq_u8(vqtbl1q_u8(idx4, vld1q_u8(spread_tab[j])), vld1q_u8(byte_of_lane));
}

/* 16 floats from a 16-entry table (64 bytes) by 4-bit indices nib[l]. */
INL void lut16(uint8x16_t nib, uint8x16x4_t tab, float32x4_t *w)
{
    uint8x16_t idx4 = vshlq_n_u8(nib, 2);
    for (int j = 0; j < 4; j++) w[j] = vreinterpretq_f32_u8(vqtbl4q_u8(tab, spread(idx4, j)));
}

INL uint8x16x4_t table_bytes(const float *t)
{
    uint8x16x4_t b;
    b.val[0] = vreinterpretq_u8_f32(vld1q_f32(t)), b.val[1] = vreinterpretq_u8_f32(vld1q_f32(t + 4));
    b.val[2] = vreinterpretq_u8_f32(vld1q_f32(t + 8)), b.val[3] = vreinterpretq_u8_f32(vld1q_f32(t + 12));
    return b;
}

/* fp16 bit patterns to fp32: fcvtl, exact (subnormals and NaN payloads too,
 * as the reference's fp16 decoder). */
INL void f16x8(uint16x8_t h, float32x4_t *v)
{
    float16x8_t f = vreinterpretq_f16_u16(h);
    v[0] = vcvt_f32_f16(vget_low_f16(f));
    v[1] = vcvt_high_f32_f16(f);
}

INL void int8x16_to_f32(int8x16_t b, float32x4_t *v)
{
    int16x8_t lo = vmovl_s8(vget_low_s8(b)), hi = vmovl_high_s8(b);
    v[0] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))), v[1] = vcvtq_f32_s32(vmovl_high_s16(lo));
    v[2] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))), v[3] = vcvtq_f32_s32(vmovl_high_s16(hi));
}

INL void uint8x16_to_f32(uint8x16_t b, float32x4_t *v)
{
    uint16x8_t lo = vmovl_u8(vget_low_u8(b)), hi = vmovl_high_u8(b);
    v[0] = vcvtq_f32_u32(vmovl_u16(vget_low_u16(lo))), v[1] = vcvtq_f32_u32(vmovl_high_u16(lo));
    v[2] = vcvtq_f32_u32(vmovl_u16(vget_low_u16(hi))), v[3] = vcvtq_f32_u32(vmovl_high_u16(hi));
}

/* e4m3 codes (8 in 16-bit lanes) to the fp16 of value * 2^-8 */
INL uint16x8_t e4m3_half(uint16x8_t c)
{
    uint16x8_t h = vshlq_n_u16(vaddq_u16(c, vandq_u16(c, vdupq_n_u16(0x80))), 7);
    uint16x8_t nan = vceqq_u16(vandq_u16(c, vdupq_n_u16(0x7F)), vdupq_n_u16(0x7F));
    return vorrq_u16(h, vandq_u16(nan, vdupq_n_u16(0x7F80))); /* fp16 NaN -> fp32 S.7FF00000, the reference's */
}

/* 6-bit: the 16 codes of a chunk's 12 bytes at s (16 may be read), as
 * lb__unpack6 places them: code k at bits 6k .. 6k+5, little-endian. Lane k
 * of a 16-bit vector gets bytes floor(6k/8) and the next, shifted right by
 * 6k % 8. Returns codes 0-7 in c[0], 8-15 in c[1]. */
INL void six_codes(const uint8_t *s, uint16x8_t *c)
{
    static const uint8_t pick[2][16] = {{0, 1, 0, 1, 1, 2, 2, 3, 3, 4, 3, 4, 4, 5, 5, 6},
                                        {6, 7, 6, 7, 7, 8, 8, 9, 9, 10, 9, 10, 10, 11, 11, 12}};
    static const int16_t shr[8] = {0, -6, -4, -2, 0, -6, -4, -2};
    uint8x16_t b = vld1q_u8(s);
    int16x8_t sh = vld1q_s16(shr);
    for (int h = 0; h < 2; h++) {
        uint16x8_t pair = vreinterpretq_u16_u8(vqtbl1q_u8(b, vld1q_u8(pick[h])));
        c[h] = vandq_u16(vshlq_u16(pair, sh), vdupq_n_u16(0x3F));
    }
}

/* 6-bit values: the magnitude (bits 4:0) from the 32-entry table t0 | t1,
 * the sign from bit 5 (negating is exact). */
INL void six_values(const uint8_t *s, uint8x16x4_t t0, uint8x16x4_t t1, float32x4_t *v)
{
    uint16x8_t c[2];
    six_codes(s, c);
    uint8x16_t mag4 = vshlq_n_u8(vandq_u8(vcombine_u8(vmovn_u16(c[0]), vmovn_u16(c[1])), vdupq_n_u8(0x1F)), 2);
    for (int j = 0; j < 4; j++) {
        uint8x16_t bi = spread(mag4, j);
        /* entries 16-31 have byte indices 64-127: tbl gives 0 for them, tbx
         * fills them from t1 and leaves the others (bi - 64 wraps past 191) */
        uint8x16_t m = vqtbx4q_u8(vqtbl4q_u8(t0, bi), t1, vsubq_u8(bi, vdupq_n_u8(64)));
        uint16x8_t sgn16 = vandq_u16(vshlq_n_u16(c[j / 2], 10), vdupq_n_u16(0x8000));
        uint32x4_t sgn = (j & 1) ? vshll_high_n_u16(sgn16, 16) : vshll_n_u16(vget_low_u16(sgn16), 16);
        v[j] = vreinterpretq_f32_u32(veorq_u32(vreinterpretq_u32_u8(m), sgn));
    }
}

/* One chunk of one row: w[0..3] the 16 lanes (C = 16); C = 32: w[0..3] the
 * even elements, w[4..7] the odd ones. */
INL void chunk_w(const lb__qkind kind, const int aff, const int fold, const uint8_t *s, const float *lut, uint8x16x4_t tab,
                 uint8x16x4_t t0, uint8x16x4_t t1, float32x4_t mulv, float32x4_t zpv, int plain, float32x4_t *w)
{
    float32x4_t v[4];
    switch (kind) {
    case LB__QK_F32:
        for (int q = 0; q < 4; q++) v[q] = vreinterpretq_f32_u8(vld1q_u8(s + 16 * q));
        break;
    case LB__QK_BF16:
        for (int h = 0; h < 2; h++) {
            uint16x8_t b = vreinterpretq_u16_u8(vld1q_u8(s + 16 * h));
            v[2 * h] = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(b), 16));
            v[2 * h + 1] = vreinterpretq_f32_u32(vshll_high_n_u16(b, 16));
        }
        break;
    case LB__QK_F16:
        for (int h = 0; h < 2; h++) f16x8(vreinterpretq_u16_u8(vld1q_u8(s + 16 * h)), v + 2 * h);
        break;
    case LB__QK_E4M3:
    case LB__QK_E4M3_FINITE: {
        uint8x16_t b = vld1q_u8(s);
        f16x8(e4m3_half(vmovl_u8(vget_low_u8(b))), v);
        f16x8(e4m3_half(vmovl_high_u8(b)), v + 2);
        if (!fold)
            for (int q = 0; q < 4; q++) v[q] = vmulq_f32(v[q], vdupq_n_f32(256.0f));
        break;
    }
    case LB__QK_E5M2: {
        uint8x16_t b = vld1q_u8(s);
        f16x8(vshll_n_u8(vget_low_u8(b), 8), v);
        f16x8(vshll_high_n_u8(b, 8), v + 2);
        break;
    }
    case LB__QK_LUT8: {
        float g[16];
        for (int l = 0; l < 16; l++) g[l] = lut[s[l]];
        for (int q = 0; q < 4; q++) v[q] = vld1q_f32(g + 4 * q);
        break;
    }
    case LB__QK_I8: int8x16_to_f32(vreinterpretq_s8_u8(vld1q_u8(s)), v); break;
    case LB__QK_U8: uint8x16_to_f32(vld1q_u8(s), v); break;
    case LB__QK_NIB: {
        uint8x16_t b = vld1q_u8(s);
        lut16(vandq_u8(b, vdupq_n_u8(0x0F)), tab, w); /* low nibbles: the even elements */
        lut16(vshrq_n_u8(b, 4), tab, w + 4);
        return;
    }
    case LB__QK_SIX:
    case LB__QK_SIX_VBMI: six_values(s, t0, t1, v); break;
    }
    for (int q = 0; q < 4; q++) {
        if (plain) w[q] = v[q];
        else if (aff) w[q] = vmulq_f32(vsubq_f32(v[q], zpv), mulv);
        else w[q] = vmulq_f32(v[q], mulv);
    }
}

/* e4m3: whether 2^8 can be folded into this scale (qdot_avx512.c). */
static int foldable(float mul) { return !(fabsf(mul) >= 0x1p120f && fabsf(mul) <= 3.4028234663852886e38f); }

/* rows in flight for nx tokens: 4 * R * nx partial-sum registers <= 16 */
#define ROWS_FOR(nx) ((nx) == 1 ? 4 : (nx) == 2 ? 2 : 1)

/* sums of rows i < n, tokens t < nx, into y (lb__sum16f of the 16 lanes) */
INL void store_sums(float32x4_t acc[RMAX][LB__QDOT_MAX_NX][4], size_t n, size_t nx, size_t r, float *y, size_t ldy)
{
    for (size_t i = 0; i < n; i++)
        for (size_t t = 0; t < nx; t++) {
            float s[16];
            for (int q = 0; q < 4; q++) vst1q_f32(s + 4 * q, acc[i][t][q]);
            y[t * ldy + r + i] = lb__sum16f(s);
        }
}

INL void run(const lb__qmat *m, const lb__qdot_plan *p, const lb__qkind kind, const int aff, const size_t nx, size_t r0,
             size_t r1, float *y, size_t ldy)
{
    const size_t R = ROWS_FOR(nx);
    const size_t C = kind == LB__QK_NIB ? 32 : 16, nb = p->blocks, cb = p->chunk_bytes, nch = p->nch;
    const size_t xst = p->xstride;
    /* SIX reads 16 bytes of a 12-byte chunk */
    const size_t inplace = lb__qdot_inplace_chunks(m, p, kind == LB__QK_SIX ? 16 : cb);
    const int plain = p->plain;
    float32x4_t lut[4] = {vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0)};
    uint8x16x4_t t0 = {{vdupq_n_u8(0), vdupq_n_u8(0), vdupq_n_u8(0), vdupq_n_u8(0)}}, t1 = t0;
    if (kind == LB__QK_NIB)
        for (int q = 0; q < 4; q++) lut[q] = vld1q_f32(p->lut + 4 * q);
    if (kind == LB__QK_SIX) t0 = table_bytes(p->lut), t1 = table_bytes(p->lut + 16);
    _Alignas(64) uint8_t tail[RMAX][2][64]; /* a row's chunks past `inplace`: at most 2 (qdot_internal.h) */
    for (size_t r = r0; r < r1; r += R) {
        size_t n = r1 - r < R ? r1 - r : R;
        lb__qdot_stage_scales(m, p, LB_ISA_NEON, r, n, 0);
        const uint8_t *row[RMAX];
        size_t so[RMAX]; /* row i's first scale in p->mul; rows past n repeat the last (results dropped) */
        for (size_t i = 0; i < R; i++) {
            size_t k = i < n ? i : n - 1;
            row[i] = m->data + (r + k) * m->row_bytes;
            so[i] = k * nb;
            for (size_t c = inplace; c < nch; c++) lb__qdot_tail_chunk(m, p, row[i], c, tail[i][c - inplace]);
        }
        float32x4_t acc[RMAX][LB__QDOT_MAX_NX][4];
        for (size_t i = 0; i < R; i++)
            for (size_t t = 0; t < nx; t++)
                for (int q = 0; q < 4; q++) acc[i][t][q] = vdupq_n_f32(0.0f);
        for (size_t c = 0, b = 0; c < nch; b++) { /* block b holds chunks [b * cpb, (b + 1) * cpb) */
            size_t cend = (b + 1) * p->cpb;
            if (cend > nch) cend = nch;
            float32x4_t mulv[RMAX], zpv[RMAX];
            uint8x16x4_t tab[RMAX];
            int fold = 1;
            for (size_t i = 0; i < R; i++) {
                float mu = plain ? 1.0f : p->mul[so[i] + b];
                if (kind == LB__QK_E4M3) fold &= foldable(mu);
                mulv[i] = vdupq_n_f32(mu);
                zpv[i] = aff ? vdupq_n_f32(p->zp[so[i] + b]) : vdupq_n_f32(0.0f);
                tab[i] = t0;
                if (kind == LB__QK_NIB) {
                    float tw[16]; /* the block's 16 w values, the reference's expression */
                    for (int q = 0; q < 4; q++)
                        vst1q_f32(tw + 4 * q, aff ? vmulq_f32(vsubq_f32(lut[q], zpv[i]), mulv[i])
                                                  : vmulq_f32(lut[q], mulv[i]));
                    tab[i] = table_bytes(tw);
                }
            }
            if (kind == LB__QK_E4M3 && fold)
                for (size_t i = 0; i < R; i++) mulv[i] = vmulq_f32(mulv[i], vdupq_n_f32(256.0f));
            for (; c < cend; c++) {
                float32x4_t xv[LB__QDOT_MAX_NX][8];
                for (size_t t = 0; t < nx; t++)
                    for (size_t q = 0; q < C / 4; q++) xv[t][q] = vld1q_f32(p->xs + t * xst + c * C + 4 * q);
                for (size_t i = 0; i < R; i++) {
                    const uint8_t *s = c < inplace ? row[i] + c * cb : tail[i][c - inplace];
                    float32x4_t w[8];
                    if (kind == LB__QK_E4M3 && !fold)
                        chunk_w(kind, aff, 0, s, p->lut, tab[i], t0, t1, mulv[i], zpv[i], plain, w);
                    else
                        chunk_w(kind, aff, 1, s, p->lut, tab[i], t0, t1, mulv[i], zpv[i], plain, w);
                    for (size_t t = 0; t < nx; t++)
                        for (int q = 0; q < 4; q++) {
                            acc[i][t][q] = vfmaq_f32(acc[i][t][q], xv[t][q], w[q]);
                            if (C == 32) acc[i][t][q] = vfmaq_f32(acc[i][t][q], xv[t][4 + q], w[4 + q]);
                        }
                }
            }
        }
        store_sums(acc, n, nx, r, y, ldy);
    }
}

/* 4-bit elements in blocks of 16 (nvfp4, g16): a chunk of 32 spans two
 * blocks, lanes 0-7 (elements 0-15: w[0], w[1], w[4], w[5]) in the first
 * and lanes 8-15 in the second, so v is looked up unscaled and
 * w = (v - zp) * mul formed per vector with its block's values, the
 * reference's expression on the same operands. */
INL void run_nib16(const lb__qmat *m, const lb__qdot_plan *p, const int aff, const size_t nx, size_t r0, size_t r1,
                   float *y, size_t ldy)
{
    const size_t R = ROWS_FOR(nx);
    const size_t nb = p->blocks, nch = p->nch, xst = p->xstride;
    const size_t inplace = lb__qdot_inplace_chunks(m, p, p->chunk_bytes);
    const uint8x16x4_t raw = table_bytes(p->lut);
    _Alignas(64) uint8_t tail[RMAX][2][64];
    for (size_t r = r0; r < r1; r += R) {
        size_t n = r1 - r < R ? r1 - r : R;
        lb__qdot_stage_scales(m, p, LB_ISA_NEON, r, n, 0);
        const uint8_t *row[RMAX];
        const float *mu[RMAX], *zp[RMAX];
        for (size_t i = 0; i < R; i++) {
            size_t k = i < n ? i : n - 1;
            row[i] = m->data + (r + k) * m->row_bytes;
            mu[i] = p->mul + k * nb, zp[i] = p->zp + k * nb;
            for (size_t c = inplace; c < nch; c++) lb__qdot_tail_chunk(m, p, row[i], c, tail[i][c - inplace]);
        }
        float32x4_t acc[RMAX][LB__QDOT_MAX_NX][4];
        for (size_t i = 0; i < R; i++)
            for (size_t t = 0; t < nx; t++)
                for (int q = 0; q < 4; q++) acc[i][t][q] = vdupq_n_f32(0.0f);
        for (size_t c = 0; c < nch; c++) {
            size_t bk[2] = {2 * c, 2 * c + 1 < nb ? 2 * c + 1 : nb - 1}; /* padding: the last block's */
            float32x4_t xv[LB__QDOT_MAX_NX][8];
            for (size_t t = 0; t < nx; t++)
                for (int q = 0; q < 8; q++) xv[t][q] = vld1q_f32(p->xs + t * xst + c * 32 + 4 * q);
            for (size_t i = 0; i < R; i++) {
                const uint8_t *s = c < inplace ? row[i] + c * 16 : tail[i][c - inplace];
                uint8x16_t b = vld1q_u8(s);
                float32x4_t w[8];
                lut16(vandq_u8(b, vdupq_n_u8(0x0F)), raw, w);
                lut16(vshrq_n_u8(b, 4), raw, w + 4);
                for (int q = 0; q < 8; q++) {
                    size_t blk = bk[(q & 3) >> 1]; /* lanes 0-7: vectors 0, 1 (and 4, 5) */
                    float32x4_t mv = vdupq_n_f32(mu[i][blk]);
                    if (aff) w[q] = vsubq_f32(w[q], vdupq_n_f32(zp[i][blk]));
                    w[q] = vmulq_f32(w[q], mv);
                }
                for (size_t t = 0; t < nx; t++)
                    for (int q = 0; q < 4; q++) {
                        acc[i][t][q] = vfmaq_f32(acc[i][t][q], xv[t][q], w[q]);
                        acc[i][t][q] = vfmaq_f32(acc[i][t][q], xv[t][4 + q], w[4 + q]);
                    }
            }
        }
        store_sums(acc, n, nx, r, y, ldy);
    }
}

#define INST16(A, N)                                                                                            \
    static void run16_##A##_##N(const lb__qmat *m, const lb__qdot_plan *p, size_t r0, size_t r1, float *y,      \
                                size_t ldy)                                                                     \
    {                                                                                                           \
        run_nib16(m, p, A, N, r0, r1, y, ldy);                                                                  \
    }
INST16(0, 1) INST16(0, 2) INST16(0, 3) INST16(0, 4) INST16(1, 1) INST16(1, 2) INST16(1, 3) INST16(1, 4)

/* One function per (kind, affine, nx): every branch on them folds away. */
#define INST(K, A, N)                                                                                          \
    static void run_##K##_##A##_##N(const lb__qmat *m, const lb__qdot_plan *p, size_t r0, size_t r1, float *y, \
                                    size_t ldy)                                                                \
    {                                                                                                          \
        run(m, p, LB__QK_##K, A, N, r0, r1, y, ldy);                                                           \
    }
#define INST4(K, A) INST(K, A, 1) INST(K, A, 2) INST(K, A, 3) INST(K, A, 4)
INST4(F32, 0) INST4(BF16, 0) INST4(F16, 0) INST4(E4M3, 0) INST4(E5M2, 0) INST4(LUT8, 0)
INST4(I8, 0) INST4(I8, 1) INST4(U8, 0) INST4(U8, 1) INST4(NIB, 0) INST4(NIB, 1) INST4(SIX, 0)

typedef void (*run_fn)(const lb__qmat *, const lb__qdot_plan *, size_t, size_t, float *, size_t);
#define ROW(K, A) {run_##K##_##A##_1, run_##K##_##A##_2, run_##K##_##A##_3, run_##K##_##A##_4}
/* [kind][affine][nx - 1]; the float kinds have no zero points (qdot_avx512.c's table) */
static const run_fn runs[LB__QK_COUNT][2][LB__QDOT_MAX_NX] = {
    [LB__QK_F32] = {ROW(F32, 0), ROW(F32, 0)},    [LB__QK_BF16] = {ROW(BF16, 0), ROW(BF16, 0)},
    [LB__QK_F16] = {ROW(F16, 0), ROW(F16, 0)},    [LB__QK_E4M3] = {ROW(E4M3, 0), ROW(E4M3, 0)},
    [LB__QK_E5M2] = {ROW(E5M2, 0), ROW(E5M2, 0)}, [LB__QK_LUT8] = {ROW(LUT8, 0), ROW(LUT8, 0)},
    [LB__QK_I8] = {ROW(I8, 0), ROW(I8, 1)},       [LB__QK_U8] = {ROW(U8, 0), ROW(U8, 1)},
    [LB__QK_NIB] = {ROW(NIB, 0), ROW(NIB, 1)},    [LB__QK_SIX] = {ROW(SIX, 0), ROW(SIX, 0)},
};

static void qdot_neon(const lb__qmat *m, const float *x, size_t nx, size_t ldx, size_t r0, size_t r1, float *y,
                      size_t ldy, void *scratch)
{
    if (r0 >= r1 || nx == 0) return;
    lb__qdot_plan p;
    lb__qdot_plan_init(m, scratch, &p);
    if (p.kind == LB__QK_NIB && !p.plain && p.blocks > 1 && m->block == 16) { /* nvfp4 and other g16 */
        static const run_fn r16[2][LB__QDOT_MAX_NX] = {{run16_0_1, run16_0_2, run16_0_3, run16_0_4},
                                                       {run16_1_1, run16_1_2, run16_1_3, run16_1_4}};
        lb__qdot_stage_x(&p, x, nx, ldx);
        r16[p.affine][nx - 1](m, &p, r0, r1, y, ldy);
        return;
    }
    if (!lb__qdot_blocks_fit(m, &p)) { /* a chunk would straddle two blocks */
        lb__qdot_scalar(m, x, nx, ldx, r0, r1, y, ldy, scratch);
        return;
    }
    lb__qdot_stage_x(&p, x, nx, ldx);
    runs[p.kind][p.affine][nx - 1](m, &p, r0, r1, y, ldy);
}

const lb__qdot_fn lb__qdot_neon_fn = qdot_neon;

#else
/* The symbol is defined in qdot_scalar.c (NULL) on other targets; an ISO C
 * translation unit must not be empty. */
typedef int lb__qdot_neon_unused;
#endif
