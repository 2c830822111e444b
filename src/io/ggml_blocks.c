/* The classic ggml block types (32 elements a block) and the FP4 ones:
 * dequantize loops for Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4, NVFP4 and
 * ggml's reference quantizers for each (no importance matrix). The K-quants are
 * in ggml_blocks_k.c. Layouts and the why of the arithmetic order: see
 * ggml_blocks.h.
 *
 * The loops are plain and branch-free inside a block (the scale is decoded
 * once per block) so the compiler can vectorize them. */
#include <math.h>

#include "io/ggml_blocks.h"
#include "util/cpu.h"

/* the quantizers' scalar build; also the helpers the dequantizers share (e8m0_half) */
#define LB__QNAME(type) lb__quantize_##type##_scalar
#include "io/ggml_blocks_quant.h"

uint16_t lb__fp16_from_f32(float x)
{
    uint32_t u = lb__bits_from_f32(x);
    uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) { /* NaN: keep the payload's top bits, never become inf */
        uint32_t h = 0x7C00u | (a & 0x7FFFFFu) >> 13;
        return (uint16_t)(sign | (h == 0x7C00u ? 0x7C01u : h));
    }
    if (a >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u); /* >= 65520 rounds past 65504: inf */
    if (a >= 0x38800000u) {                                  /* normal fp16: rebias, round the 13 dropped bits */
        uint32_t r = a + 0xFFFu + ((a >> 13) & 1u);
        return (uint16_t)(sign | ((r >> 13) - (112u << 10)));
    }
    if (a < 0x33000000u) return (uint16_t)sign; /* below 2^-25: rounds to zero */
    /* subnormal fp16: the value in units of 2^-24, rounded to even (a carry
     * into 0x400 is the smallest normal, which is the right code) */
    uint32_t e = a >> 23, m = (a & 0x7FFFFFu) | 0x800000u, s = 126u - e;
    uint32_t h = m >> s, rem = m & ((1u << s) - 1), half = 1u << (s - 1);
    if (rem > half || (rem == half && (h & 1u))) h++;
    return (uint16_t)(sign | h);
}

/* ===== Dequantize ===== */

void lb__dequantize_q4_0(const void *restrict src, size_t nb, float *restrict dst)
{
    const lb__block_q4_0 *x = src;
    for (size_t i = 0; i < nb; i++, dst += LB__QK) {
        const float d = lb__fp16_to_f32(lb__le16(x[i].d));
        const uint8_t *qs = x[i].qs;
        for (int j = 0; j < LB__QK / 2; j++) {
            dst[j] = d * (float)((int)(qs[j] & 0x0F) - 8);
            dst[j + LB__QK / 2] = d * (float)((int)(qs[j] >> 4) - 8);
        }
    }
}

void lb__dequantize_q4_1(const void *restrict src, size_t nb, float *restrict dst)
{
    const lb__block_q4_1 *x = src;
    for (size_t i = 0; i < nb; i++, dst += LB__QK) {
        const float d = lb__fp16_to_f32(lb__le16(x[i].d)), m = lb__fp16_to_f32(lb__le16(x[i].m));
        const uint8_t *qs = x[i].qs;
        for (int j = 0; j < LB__QK / 2; j++) {
            dst[j] = d * (float)(qs[j] & 0x0F) + m;
            dst[j + LB__QK / 2] = d * (float)(qs[j] >> 4) + m;
        }
    }
}

/* bit j of a word, as a table: a per-lane shift by j does not vectorize
 * on baseline x86-64, a load and a compare do */
static const uint32_t bit_of[LB__QK] = {
    1u << 0,  1u << 1,  1u << 2,  1u << 3,  1u << 4,  1u << 5,  1u << 6,  1u << 7,
    1u << 8,  1u << 9,  1u << 10, 1u << 11, 1u << 12, 1u << 13, 1u << 14, 1u << 15,
    1u << 16, 1u << 17, 1u << 18, 1u << 19, 1u << 20, 1u << 21, 1u << 22, 1u << 23,
    1u << 24, 1u << 25, 1u << 26, 1u << 27, 1u << 28, 1u << 29, 1u << 30, 1u << 31,
};

void lb__dequantize_q5_0(const void *restrict src, size_t nb, float *restrict dst)
{
    const lb__block_q5_0 *x = src;
    for (size_t i = 0; i < nb; i++, dst += LB__QK) {
        const float d = lb__fp16_to_f32(lb__le16(x[i].d));
        const uint32_t qh = lb__le32(x[i].qh);
        const uint8_t *qs = x[i].qs;
        for (int j = 0; j < LB__QK / 2; j++) {
            int lo = (int)(qs[j] & 0x0F) | ((qh & bit_of[j]) != 0) << 4;
            int hi = (int)(qs[j] >> 4) | ((qh & bit_of[j + 16]) != 0) << 4;
            dst[j] = d * (float)(lo - 16);
            dst[j + LB__QK / 2] = d * (float)(hi - 16);
        }
    }
}

void lb__dequantize_q5_1(const void *restrict src, size_t nb, float *restrict dst)
{
    const lb__block_q5_1 *x = src;
    for (size_t i = 0; i < nb; i++, dst += LB__QK) {
        const float d = lb__fp16_to_f32(lb__le16(x[i].d)), m = lb__fp16_to_f32(lb__le16(x[i].m));
        const uint32_t qh = lb__le32(x[i].qh);
        const uint8_t *qs = x[i].qs;
        for (int j = 0; j < LB__QK / 2; j++) {
            int lo = (int)(qs[j] & 0x0F) | ((qh & bit_of[j]) != 0) << 4;
            int hi = (int)(qs[j] >> 4) | ((qh & bit_of[j + 16]) != 0) << 4;
            dst[j] = d * (float)lo + m;
            dst[j + LB__QK / 2] = d * (float)hi + m;
        }
    }
}

void lb__dequantize_q8_0(const void *restrict src, size_t nb, float *restrict dst)
{
    const lb__block_q8_0 *x = src;
    for (size_t i = 0; i < nb; i++, dst += LB__QK) {
        const float d = lb__fp16_to_f32(lb__le16(x[i].d));
        const int8_t *qs = x[i].qs;
        for (int j = 0; j < LB__QK; j++) dst[j] = (float)qs[j] * d;
    }
}

/* kvalues_fp4[c] as an int, computed with adds, masks and compares only
 * (no table gather, no per-lane shift), which vectorizes on baseline
 * x86-64. Code 8 gives 0, not -0, as the table does. */
static inline int fp4_doubled(int c)
{
    int m = c & 7;
    int v = 4 + 2 * (m & 1);         /* 4 or 6 */
    v = (m & 2) ? v + v : v;         /* 8 or 12 for m = 6, 7 */
    v = m < 4 ? m : v;               /* 0, 1, 2, 3 as they are */
    return (c & 8) ? -v : v;
}

void lb__dequantize_mxfp4(const void *restrict src, size_t nb, float *restrict dst)
{
    const lb__block_mxfp4 *x = src;
    for (size_t i = 0; i < nb; i++, dst += LB__QK) {
        const float d = e8m0_half(x[i].e);
        const uint8_t *qs = x[i].qs;
        for (int j = 0; j < LB__QK / 2; j++) {
            dst[j] = d * (float)fp4_doubled(qs[j] & 0x0F);
            dst[j + LB__QK / 2] = d * (float)fp4_doubled(qs[j] >> 4);
        }
    }
}

void lb__dequantize_nvfp4(const void *restrict src, size_t nb, float *restrict dst)
{
    const lb__block_nvfp4 *x = src;
    for (size_t i = 0; i < nb; i++) {
        for (int s = 0; s < 4; s++, dst += 16) {
            const float d = lb__nvfp4_scale_half(x[i].d[s]);
            const uint8_t *qs = x[i].qs + 8 * s;
            for (int k = 0; k < 8; k++) {
                dst[k] = d * (float)fp4_doubled(qs[k] & 0x0F);
                dst[k + 8] = d * (float)fp4_doubled(qs[k] >> 4);
            }
        }
    }
}

/* ===== Quantize: the scalar build (included above), the AVX2 or the AVX-512 one ===== */

/* The AVX2 build where the CPU has it and lb_isa_active allows it. */
static int use_avx2(void) { return lb__isa_x86(lb_isa_active()) >= LB_ISA_AVX2 && lb__ggml_blocks_avx2_built(); }
static int use_avx512(void)
{
    return lb__isa_x86(lb_isa_active()) >= LB_ISA_AVX512 && lb__ggml_blocks_avx512_built();
}

#define QUANTIZER(type)                                                                \
    void lb__quantize_##type(const float *restrict src, size_t nb, void *restrict dst) \
    {                                                                                  \
        if (use_avx512()) lb__quantize_##type##_avx512(src, nb, dst);                  \
        else if (use_avx2()) lb__quantize_##type##_avx2(src, nb, dst);                 \
        else lb__quantize_##type##_scalar(src, nb, dst);                               \
    }
LB__CLASSIC_QUANTIZERS(QUANTIZER)
