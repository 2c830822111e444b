/* The classic ggml block types (32 elements a block) and the FP4 ones:
 * dequantize loops for Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4, NVFP4 and the
 * reference quantizers lowbit writes (Q4_0, Q8_0, MXFP4). The K-quants are
 * in ggml_blocks_k.c. Layouts and the why of the arithmetic order: see
 * ggml_blocks.h.
 *
 * The loops are plain and branch-free inside a block (the scale is decoded
 * once per block) so the compiler can vectorize them. */
#include <math.h>

#include "io/ggml_blocks.h"

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

/* The E2M1 values doubled, indexed by the 4-bit code (gguf's kvalues). */
static const float kvalues_fp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

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

/* Half of 2^(e - 127), as ggml_e8m0_to_fp32_half builds it: e = 0 and 1
 * give the subnormals 2^-128 and 2^-127; e = 255 (E8M0's NaN) is 2^127. */
static float e8m0_half(uint32_t e)
{
    return lb__f32_from_bits(e < 2 ? 0x00200000u << e : (e - 1) << 23);
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

/* Half the value of a UE4M3 sub-block scale the way gguf decodes it: the
 * top bit is ignored, 0x00 and 0x7F (E4M3's NaN) read as zero. */
static float nvfp4_scale_half(uint32_t code)
{
    if (code == 0x00 || code == 0x7F) return 0.0f;
    uint32_t exp = (code >> 3) & 0x0F, man = code & 0x07;
    if (exp == 0) return (float)man * 0x1p-10f;     /* man * 2^-9, halved */
    return lb__f32_from_bits((exp + 119u) << 23 | man << 20); /* (1 + man/8) 2^(exp-7), halved */
}

void lb__dequantize_nvfp4(const void *restrict src, size_t nb, float *restrict dst)
{
    const lb__block_nvfp4 *x = src;
    for (size_t i = 0; i < nb; i++) {
        for (int s = 0; s < 4; s++, dst += 16) {
            const float d = nvfp4_scale_half(x[i].d[s]);
            const uint8_t *qs = x[i].qs + 8 * s;
            for (int k = 0; k < 8; k++) {
                dst[k] = d * (float)fp4_doubled(qs[k] & 0x0F);
                dst[k + 8] = d * (float)fp4_doubled(qs[k] >> 4);
            }
        }
    }
}

/* ===== Quantize (gguf.quants' numpy arithmetic) ===== */

/* numpy's float32 -> uint8/int8 cast on x86-64: truncate to int32 (NaN,
 * inf and |v| >= 2^31 give INT32_MIN, whose low byte is 0) and keep the
 * low byte. Out-of-range casts only happen for blocks so small that 1/d
 * overflows to infinity.
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

/* gguf's np_roundf (round half away from zero), then the cast above. */
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

static void store_fp16(uint8_t *p, float x)
{
    uint16_t h = lb__fp16_from_f32(x);
    p[0] = (uint8_t)h, p[1] = (uint8_t)(h >> 8);
}

void lb__quantize_q8_0(const float *restrict src, size_t nb, void *restrict dst)
{
    lb__block_q8_0 *y = dst;
    for (size_t i = 0; i < nb; i++, src += LB__QK) {
        float amax = 0.0f;
        for (int j = 0; j < LB__QK; j++) amax = fabsf(src[j]) > amax ? fabsf(src[j]) : amax; /* input is finite */
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        for (int j = 0; j < LB__QK; j++) y[i].qs[j] = np_round_i8(src[j] * id);
        store_fp16(y[i].d, d);
    }
}

void lb__quantize_q4_0(const float *restrict src, size_t nb, void *restrict dst)
{
    lb__block_q4_0 *y = dst;
    for (size_t i = 0; i < nb; i++, src += LB__QK) {
        /* the signed value of the first element of largest magnitude */
        float amax = 0.0f;
        for (int j = 0; j < LB__QK; j++) amax = fabsf(src[j]) > amax ? fabsf(src[j]) : amax; /* input is finite */
        int first = 0;
        while (fabsf(src[first]) != amax) first++;
        const float max = src[first];
        const float d = max / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        uint8_t q[LB__QK];
        for (int j = 0; j < LB__QK; j++) {
            uint8_t c = np_cast_u8(src[j] * id + 8.5f); /* np.trunc: the cast truncates already */
            q[j] = c > 15 ? 15 : c;
        }
        for (int j = 0; j < LB__QK / 2; j++) y[i].qs[j] = (uint8_t)(q[j] | q[j + LB__QK / 2] << 4);
        store_fp16(y[i].d, d);
    }
}

void lb__quantize_mxfp4(const float *restrict src, size_t nb, void *restrict dst)
{
    lb__block_mxfp4 *y = dst;
    for (size_t i = 0; i < nb; i++, src += LB__QK) {
        float amax = 0.0f;
        for (int j = 0; j < LB__QK; j++) amax = fabsf(src[j]) > amax ? fabsf(src[j]) : amax; /* input is finite */
        /* floor(log2(amax)) - 2 + 127 with numpy's fp32 log2, which is the
         * correctly rounded one: a value just under a power of two can
         * round up to it, so this is not the exponent field. */
        uint8_t e = 0;
        if (amax > 0.0f) e = np_cast_u8(floorf((float)log2((double)amax)) - 2.0f + 127.0f);
        const float d = e8m0_half(e);
        /* nearest doubled E2M1 value; the first of equal errors wins (the
         * loop over k is outside so the loop over elements vectorizes) */
        uint8_t q[LB__QK] = {0};
        uint32_t best[LB__QK]; /* |error| bits: non-negative floats order like their bits */
        for (int j = 0; j < LB__QK; j++) best[j] = lb__bits_from_f32(fabsf(d * kvalues_fp4[0] - src[j]));
        for (int k = 1; k < 16; k++) {
            const float v = d * kvalues_fp4[k];
            for (int j = 0; j < LB__QK; j++) {
                uint32_t err = lb__bits_from_f32(fabsf(v - src[j]));
                int take = err < best[j];
                q[j] = (uint8_t)(take ? k : q[j]);
                best[j] = take ? err : best[j];
            }
        }
        y[i].e = e;
        for (int j = 0; j < LB__QK / 2; j++) y[i].qs[j] = (uint8_t)(q[j] | q[j + LB__QK / 2] << 4);
    }
}
