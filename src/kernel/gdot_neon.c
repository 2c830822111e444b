/* aarch64 NEON decode kernels for ggml-typed matrices: gdot.h's order, bit
 * for bit the reference. A token's 16 partial sums are four q registers
 * (p[0..3] .. p[12..15]); each chunk of 16 values takes one vfmaq_f32 per
 * lane group, a fused multiply-add as fmaf.
 *
 * Q4_0, Q8_0, Q4_K and Q6_K are decoded in registers, 16 values at a time
 * in element order, each with the dequantizer's fp32 expression
 * (io/ggml_blocks.c, io/ggml_blocks_k.c; -ffp-contract=off there and here,
 * so a product and the offset subtracted from it stay two roundings): the
 * integer code widened and converted exactly, times the block's scale
 * (formed in scalar code as the dequantizer forms it), minus the block's
 * offset where the type has one. Every other dtype is decoded a segment at
 * a time by lb_dtype_to_f32 into scratch, then the same products. */
#include "kernel/gdot.h"

#if defined(__aarch64__)

#include <arm_neon.h>
#include <string.h>

#include "io/ggml_blocks.h"
#include "quant/qkernels.h"

#define INL static inline __attribute__((always_inline))

/* The 16 values w0..w3 (4 each, element order) times every token's x at
 * the same place; xk walks token 0's x along the row. */
#define CHUNK(t, xp)                                           \
    do {                                                       \
        a##t##0 = vfmaq_f32(a##t##0, vld1q_f32(xp), w0);       \
        a##t##1 = vfmaq_f32(a##t##1, vld1q_f32((xp) + 4), w1); \
        a##t##2 = vfmaq_f32(a##t##2, vld1q_f32((xp) + 8), w2); \
        a##t##3 = vfmaq_f32(a##t##3, vld1q_f32((xp) + 12), w3); \
    } while (0)

#define FMA16(v4)                                                                           \
    do {                                                                                    \
        const float32x4_t w0 = (v4)[0], w1 = (v4)[1], w2 = (v4)[2], w3 = (v4)[3];           \
        CHUNK(0, xk);                                                                       \
        if (NX > 1) CHUNK(1, xk + ldx);                                                     \
        if (NX > 2) CHUNK(2, xk + 2 * ldx);                                                 \
        if (NX > 3) CHUNK(3, xk + 3 * ldx);                                                 \
        xk += 16;                                                                           \
    } while (0)

#define ACC_DECL                                                                                         \
    float32x4_t a00 = vdupq_n_f32(0.0f), a01 = a00, a02 = a00, a03 = a00, a10 = a00, a11 = a00, a12 = a00, \
                a13 = a00, a20 = a00, a21 = a00, a22 = a00, a23 = a00, a30 = a00, a31 = a00, a32 = a00,    \
                a33 = a00

#define STORE_SUMS()                                                                                \
    do {                                                                                            \
        const float32x4_t acc_[LB__QDOT_MAX_NX][4] = {                                              \
            {a00, a01, a02, a03}, {a10, a11, a12, a13}, {a20, a21, a22, a23}, {a30, a31, a32, a33}}; \
        for (int t_ = 0; t_ < NX; t_++) {                                                           \
            float s_[16];                                                                           \
            for (int g_ = 0; g_ < 4; g_++) vst1q_f32(s_ + 4 * g_, acc_[t_][g_]);                    \
            y[t_ * ldy + r] = lb__sum16f(s_);                                                       \
        }                                                                                           \
    } while (0)

/* 16 signed bytes as four float32x4, exactly. */
INL void s8_to_f32(int8x16_t v, float32x4_t out[4])
{
    const int16x8_t lo = vmovl_s8(vget_low_s8(v)), hi = vmovl_s8(vget_high_s8(v));
    out[0] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo)));
    out[1] = vcvtq_f32_s32(vmovl_s16(vget_high_s16(lo)));
    out[2] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi)));
    out[3] = vcvtq_f32_s32(vmovl_s16(vget_high_s16(hi)));
}

/* v[i] = s * v[i] (the dequantizers' scale * code, or code * scale for
 * Q8_0: the same product) and, with an offset, then minus m. */
INL void scale4(float32x4_t v[4], float32x4_t s)
{
    for (int i = 0; i < 4; i++) v[i] = vmulq_f32(s, v[i]);
}
INL void scale_sub4(float32x4_t v[4], float32x4_t s, float32x4_t m)
{
    for (int i = 0; i < 4; i++) v[i] = vsubq_f32(vmulq_f32(s, v[i]), m);
}

#define DEFINE_KERNEL(name, ...)                                                                                    \
    INL void name##_rows(const lb__qmat *m, const float *x, const int NX, size_t ldx, size_t r0, size_t r1,       \
                         float *y, size_t ldy)                                                                      \
    {                                                                                                               \
        const size_t nb = m->cols / m->ggml_block, bb = m->ggml_block_bytes;                                       \
        for (size_t r = r0; r < r1; r++) {                                                                          \
            ACC_DECL;                                                                                               \
            const uint8_t *src = m->data + r * m->row_bytes;                                                        \
            const float *xk = x;                                                                                    \
            for (size_t blk = 0; blk < nb; blk++, src += bb) __VA_ARGS__                                            \
            STORE_SUMS();                                                                                           \
        }                                                                                                           \
    }                                                                                                               \
    static void name(const lb__qmat *m, const float *x, size_t nx, size_t ldx, size_t r0, size_t r1, float *y,     \
                     size_t ldy)                                                                                    \
    {                                                                                                               \
        switch (nx) {                                                                                               \
        case 1: name##_rows(m, x, 1, ldx, r0, r1, y, ldy); break;                                                  \
        case 2: name##_rows(m, x, 2, ldx, r0, r1, y, ldy); break;                                                  \
        case 3: name##_rows(m, x, 3, ldx, r0, r1, y, ldy); break;                                                  \
        default: name##_rows(m, x, 4, ldx, r0, r1, y, ldy); break; /* nx <= LB__QDOT_MAX_NX */                     \
        }                                                                                                           \
    }

/* Q4_0: low nibbles are elements 0..15, high 16..31; d * (code - 8). */
DEFINE_KERNEL(k_q4_0, {
    const lb__block_q4_0 *b = (const lb__block_q4_0 *)src;
    const float32x4_t d = vdupq_n_f32(lb__fp16_to_f32(lb__le16(b->d)));
    const uint8x16_t q = vld1q_u8(b->qs);
    const int8x16_t eight = vdupq_n_s8(8);
    float32x4_t v[4];
    s8_to_f32(vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0F))), eight), v);
    scale4(v, d);
    FMA16(v);
    s8_to_f32(vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), eight), v);
    scale4(v, d);
    FMA16(v);
})

DEFINE_KERNEL(k_q8_0, {
    const lb__block_q8_0 *b = (const lb__block_q8_0 *)src;
    const float32x4_t d = vdupq_n_f32(lb__fp16_to_f32(lb__le16(b->d)));
    float32x4_t v[4];
    for (int h = 0; h < 2; h++) {
        s8_to_f32(vld1q_s8(b->qs + 16 * h), v);
        scale4(v, d);
        FMA16(v);
    }
})

/* Q4_K's eight 6-bit scales and mins (ggml_blocks.h gives the packing). */
static void k_scale_min(const uint8_t *s, int sc[8], int mn[8])
{
    for (int j = 0; j < 4; j++) {
        sc[j] = s[j] & 63;
        mn[j] = s[j + 4] & 63;
        sc[j + 4] = (s[j + 8] & 0x0F) | (s[j] >> 6) << 4;
        mn[j + 4] = (s[j + 8] >> 4) | (s[j + 4] >> 6) << 4;
    }
}

/* Q4_K: chunk c's 32 bytes give sub-block 2c (low nibbles) then 2c + 1
 * (high), 16 bytes at a time. Codes 0..15 are non-negative int8. */
DEFINE_KERNEL(k_q4_k, {
    const lb__block_q4_k *b = (const lb__block_q4_k *)src;
    const float d = lb__fp16_to_f32(lb__le16(b->d)), dmin = lb__fp16_to_f32(lb__le16(b->dmin));
    int sc[8], mn[8];
    k_scale_min(b->scales, sc, mn);
    for (int c = 0; c < 4; c++) {
        const uint8x16_t q0 = vld1q_u8(b->qs + 32 * c), q1 = vld1q_u8(b->qs + 32 * c + 16);
        for (int t2 = 0; t2 < 2; t2++) {
            const int j = 2 * c + t2;
            const float32x4_t dj = vdupq_n_f32(d * (float)sc[j]), mj = vdupq_n_f32(dmin * (float)mn[j]);
            const uint8x16_t n0 = t2 ? vshrq_n_u8(q0, 4) : vandq_u8(q0, vdupq_n_u8(0x0F));
            const uint8x16_t n1 = t2 ? vshrq_n_u8(q1, 4) : vandq_u8(q1, vdupq_n_u8(0x0F));
            float32x4_t v[4];
            s8_to_f32(vreinterpretq_s8_u8(n0), v);
            scale_sub4(v, dj, mj);
            FMA16(v);
            s8_to_f32(vreinterpretq_s8_u8(n1), v);
            scale_sub4(v, dj, mj);
            FMA16(v);
        }
    }
})

/* Q6_K: in half h, group j (elements 128h + 32j + l) takes nibble j / 2 of
 * ql[64h + 32(j & 1) + l] and bits 2j, 2j+1 of qh[32h + l]; its l < 16 and
 * l >= 16 are two sub-blocks. Codes minus 32 as signed bytes. */
DEFINE_KERNEL(k_q6_k, {
    const lb__block_q6_k *b = (const lb__block_q6_k *)src;
    const float d = lb__fp16_to_f32(lb__le16(b->d));
    const uint8x16_t nib = vdupq_n_u8(0x0F), three = vdupq_n_u8(3);
    const int8x16_t off = vdupq_n_s8(32);
    for (int h = 0; h < 2; h++) {
        const uint8x16_t hb[2] = {vld1q_u8(b->qh + 32 * h), vld1q_u8(b->qh + 32 * h + 16)};
        for (int j = 0; j < 4; j++) {
            const int8x16_t shift = vdupq_n_s8((int8_t)(-2 * j));
            for (int g = 0; g < 2; g++) { /* l = 16 g .. 16 g + 15 */
                uint8x16_t lb = vld1q_u8(b->ql + 64 * h + 32 * (j & 1) + 16 * g);
                lb = j < 2 ? vandq_u8(lb, nib) : vshrq_n_u8(lb, 4);
                const uint8x16_t hi = vandq_u8(vshlq_u8(hb[g], shift), three);
                const int8x16_t code = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(lb, vshlq_n_u8(hi, 4))), off);
                const float32x4_t s = vdupq_n_f32(d * (float)b->scales[8 * h + 2 * j + g]);
                float32x4_t v[4];
                s8_to_f32(code, v);
                scale4(v, s);
                FMA16(v);
            }
        }
    }
})

/* The other types: a segment of blocks decoded into scratch by the dtype's
 * own dequantizer, then the same products; a block-1 type's last partial
 * chunk is padded with +0 in w and a staged copy of x. */
INL void generic_rows(const lb__qmat *m, const float *x, const int NX, size_t ldx, size_t r0, size_t r1, float *y,
                      size_t ldy, void *scratch)
{
    const size_t sb = lb__gdot_segment_blocks(m), seg = sb * m->ggml_block;
    float *w = scratch, *xtail = w + ((seg + 16) * sizeof(float) + 63) / 64 * 16;
    for (size_t r = r0; r < r1; r++) {
        const uint8_t *row = m->data + r * m->row_bytes;
        ACC_DECL;
        for (size_t k0 = 0; k0 < m->cols; k0 += seg) {
            size_t n = m->cols - k0 < seg ? m->cols - k0 : seg, e = 0;
            lb_dtype_to_f32(m->ggml, row + k0 / m->ggml_block * m->ggml_block_bytes, n, w); /* whole blocks: cannot fail */
            const float *xk = x + k0;
            for (; e + 16 <= n; e += 16) {
                const float32x4_t v[4] = {vld1q_f32(w + e), vld1q_f32(w + e + 4), vld1q_f32(w + e + 8),
                                          vld1q_f32(w + e + 12)};
                FMA16(v);
            }
            if (e < n) {
                for (size_t k = n; k % 16; k++) w[k] = 0.0f;
                for (int t = 0; t < NX; t++) {
                    memset(xtail + 16 * t, 0, 16 * sizeof *xtail);
                    memcpy(xtail + 16 * t, x + t * ldx + k0 + e, (n - e) * sizeof *xtail);
                }
                const float *xsave = xk;
                size_t ldsave = ldx;
                xk = xtail, ldx = 16;
                const float32x4_t v[4] = {vld1q_f32(w + e), vld1q_f32(w + e + 4), vld1q_f32(w + e + 8),
                                          vld1q_f32(w + e + 12)};
                FMA16(v);
                xk = xsave, ldx = ldsave;
            }
        }
        STORE_SUMS();
    }
}

static void generic(const lb__qmat *m, const float *x, size_t nx, size_t ldx, size_t r0, size_t r1, float *y,
                    size_t ldy, void *scratch)
{
    switch (nx) {
    case 1: generic_rows(m, x, 1, ldx, r0, r1, y, ldy, scratch); break;
    case 2: generic_rows(m, x, 2, ldx, r0, r1, y, ldy, scratch); break;
    case 3: generic_rows(m, x, 3, ldx, r0, r1, y, ldy, scratch); break;
    default: generic_rows(m, x, 4, ldx, r0, r1, y, ldy, scratch); break; /* nx <= LB__QDOT_MAX_NX */
    }
}

typedef void (*row_kernel)(const lb__qmat *m, const float *x, size_t nx, size_t ldx, size_t r0, size_t r1, float *y,
                           size_t ldy);

/* The register kernel of a dtype, or NULL: the generic path then (every
 * dtype is listed, so a new one is a compile error here until placed). */
static row_kernel kernel_of(lb_dtype t)
{
    switch (t) {
    case LB_DT_Q4_0: return k_q4_0;
    case LB_DT_Q8_0: return k_q8_0;
    case LB_DT_Q4_K: return k_q4_k;
    case LB_DT_Q6_K: return k_q6_k;
    case LB_DT_Q4_1:
    case LB_DT_Q5_0:
    case LB_DT_Q5_1:
    case LB_DT_Q2_K:
    case LB_DT_Q3_K:
    case LB_DT_Q5_K:
    case LB_DT_IQ4_NL:
    case LB_DT_IQ4_XS:
    case LB_DT_MXFP4:
    case LB_DT_NVFP4:
    case LB_DT_F32:
    case LB_DT_F16:
    case LB_DT_BF16:
    case LB_DT_F64:
    case LB_DT_F8_E4M3:
    case LB_DT_F8_E5M2:
    case LB_DT_I8:
    case LB_DT_I16:
    case LB_DT_I32:
    case LB_DT_I64:
    case LB_DT_U8:
    case LB_DT_BOOL:
    case LB_DT_QUANTIZED:
    case LB_DT_COUNT: return NULL;
    }
    return NULL;
}

static void gdot_neon(const lb__qmat *m, const float *x, size_t nx, size_t ldx, size_t r0, size_t r1, float *y,
                      size_t ldy, void *scratch)
{
    row_kernel k = kernel_of(m->ggml);
    if (k) k(m, x, nx, ldx, r0, r1, y, ldy);
    else generic(m, x, nx, ldx, r0, r1, y, ldy, scratch);
}

const lb__qdot_fn lb__gdot_neon_fn = gdot_neon;

#else

const lb__qdot_fn lb__gdot_neon_fn = NULL;

#endif
