/* AVX2 decode kernels for ggml-typed matrices: gdot.h's order, bit for bit
 * the reference. A segment of blocks is decoded into fp32 scratch by a
 * block decoder below (or lb_dtype_to_f32 for the types without one), then
 * every token's 16 partial sums (two ymm: p[0..7], p[8..15]) take the
 * segment's products with one fused multiply-add per lane, as fmaf does.
 *
 * The block decoders compute each value with the same fp32 operations, in
 * the same order, as the dequantizers in io/ggml_blocks.c and
 * io/ggml_blocks_k.c (the build has -ffp-contract=off there and here): an
 * integer code converted exactly to fp32, times the block's scale (one
 * rounding), then plus or minus the block's offset where the type has one
 * (a second rounding, never fused). The per-block scales are formed in
 * scalar code with the very expressions of those files. */
#include "kernel/gdot.h"

#if defined(__x86_64__)

#include <immintrin.h>
#include <string.h>

#include "io/ggml_blocks.h"
#include "quant/qkernels.h"

#define INL static inline __attribute__((always_inline))

typedef void (*block_decoder)(const uint8_t *src, size_t nb, float *dst);

INL __m256 cvt(__m256i v) { return _mm256_cvtepi32_ps(v); }

/* The 32 4-bit codes of a classic block's 16 bytes, as int32 in element
 * order: low nibbles are elements 0..15, high nibbles 16..31. */
INL void nibbles32(const uint8_t *qs, __m256i q[4])
{
    const __m128i mask = _mm_set1_epi8(0x0F);
    __m128i b = _mm_loadu_si128((const __m128i *)qs);
    __m128i lo = _mm_and_si128(b, mask), hi = _mm_and_si128(_mm_srli_epi16(b, 4), mask);
    q[0] = _mm256_cvtepu8_epi32(lo), q[1] = _mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8));
    q[2] = _mm256_cvtepu8_epi32(hi), q[3] = _mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8));
}

/* Bit j of qh, for elements j = 8g .. 8g+7, moved to bit 4. */
INL __m256i fifth_bits(uint32_t qh, int g)
{
    __m256i sh = _mm256_add_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(8 * g));
    __m256i b = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)qh), sh), _mm256_set1_epi32(1));
    return _mm256_slli_epi32(b, 4);
}

static void dec_q4_0(const uint8_t *src, size_t nb, float *dst)
{
    const lb__block_q4_0 *x = (const lb__block_q4_0 *)src;
    for (size_t i = 0; i < nb; i++, dst += LB__QK) {
        __m256 d = _mm256_set1_ps(lb__fp16_to_f32(lb__le16(x[i].d)));
        __m256i q[4];
        nibbles32(x[i].qs, q);
        for (int g = 0; g < 4; g++)
            _mm256_storeu_ps(dst + 8 * g, _mm256_mul_ps(d, cvt(_mm256_sub_epi32(q[g], _mm256_set1_epi32(8)))));
    }
}

static void dec_q4_1(const uint8_t *src, size_t nb, float *dst)
{
    const lb__block_q4_1 *x = (const lb__block_q4_1 *)src;
    for (size_t i = 0; i < nb; i++, dst += LB__QK) {
        __m256 d = _mm256_set1_ps(lb__fp16_to_f32(lb__le16(x[i].d)));
        __m256 m = _mm256_set1_ps(lb__fp16_to_f32(lb__le16(x[i].m)));
        __m256i q[4];
        nibbles32(x[i].qs, q);
        for (int g = 0; g < 4; g++) _mm256_storeu_ps(dst + 8 * g, _mm256_add_ps(_mm256_mul_ps(d, cvt(q[g])), m));
    }
}

static void dec_q5_0(const uint8_t *src, size_t nb, float *dst)
{
    const lb__block_q5_0 *x = (const lb__block_q5_0 *)src;
    for (size_t i = 0; i < nb; i++, dst += LB__QK) {
        __m256 d = _mm256_set1_ps(lb__fp16_to_f32(lb__le16(x[i].d)));
        uint32_t qh = lb__le32(x[i].qh);
        __m256i q[4];
        nibbles32(x[i].qs, q);
        for (int g = 0; g < 4; g++) {
            __m256i v = _mm256_sub_epi32(_mm256_or_si256(q[g], fifth_bits(qh, g)), _mm256_set1_epi32(16));
            _mm256_storeu_ps(dst + 8 * g, _mm256_mul_ps(d, cvt(v)));
        }
    }
}

static void dec_q5_1(const uint8_t *src, size_t nb, float *dst)
{
    const lb__block_q5_1 *x = (const lb__block_q5_1 *)src;
    for (size_t i = 0; i < nb; i++, dst += LB__QK) {
        __m256 d = _mm256_set1_ps(lb__fp16_to_f32(lb__le16(x[i].d)));
        __m256 m = _mm256_set1_ps(lb__fp16_to_f32(lb__le16(x[i].m)));
        uint32_t qh = lb__le32(x[i].qh);
        __m256i q[4];
        nibbles32(x[i].qs, q);
        for (int g = 0; g < 4; g++) {
            __m256i v = _mm256_or_si256(q[g], fifth_bits(qh, g));
            _mm256_storeu_ps(dst + 8 * g, _mm256_add_ps(_mm256_mul_ps(d, cvt(v)), m));
        }
    }
}

static void dec_q8_0(const uint8_t *src, size_t nb, float *dst)
{
    const lb__block_q8_0 *x = (const lb__block_q8_0 *)src;
    for (size_t i = 0; i < nb; i++, dst += LB__QK) {
        __m256 d = _mm256_set1_ps(lb__fp16_to_f32(lb__le16(x[i].d)));
        for (int g = 0; g < 4; g++) {
            __m256i v = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(x[i].qs + 8 * g)));
            _mm256_storeu_ps(dst + 8 * g, _mm256_mul_ps(cvt(v), d));
        }
    }
}

/* The doubled E2M1 values of codes 0..7 and 8..15 (code 8 is +0, as the
 * reference's integer negation of 0 gives): a 16-entry lookup as two
 * vpermps and a blend on bit 3, moved to the sign bit. */
INL __m256 fp4_doubled(__m256i code)
{
    const __m256 pos = _mm256_setr_ps(0, 1, 2, 3, 4, 6, 8, 12), neg = _mm256_setr_ps(0, -1, -2, -3, -4, -6, -8, -12);
    return _mm256_blendv_ps(_mm256_permutevar8x32_ps(pos, code), _mm256_permutevar8x32_ps(neg, code),
                            _mm256_castsi256_ps(_mm256_slli_epi32(code, 28)));
}

/* Half of 2^(e - 127), built as the reference builds it (e 0 and 1: the
 * subnormals 2^-128 and 2^-127). */
static float e8m0_half(uint32_t e) { return lb__f32_from_bits(e < 2 ? 0x00200000u << e : (e - 1) << 23); }

static void dec_mxfp4(const uint8_t *src, size_t nb, float *dst)
{
    const lb__block_mxfp4 *x = (const lb__block_mxfp4 *)src;
    for (size_t i = 0; i < nb; i++, dst += LB__QK) {
        __m256 d = _mm256_set1_ps(e8m0_half(x[i].e));
        __m256i q[4];
        nibbles32(x[i].qs, q);
        for (int g = 0; g < 4; g++) _mm256_storeu_ps(dst + 8 * g, _mm256_mul_ps(d, fp4_doubled(q[g])));
    }
}

/* Q4_K/Q5_K's eight 6-bit scales and mins from their 12 packed bytes
 * (ggml_blocks.h gives the packing). */
static void k_scale_min(const uint8_t *s, int sc[8], int mn[8])
{
    for (int j = 0; j < 4; j++) {
        sc[j] = s[j] & 63;
        mn[j] = s[j + 4] & 63;
        sc[j + 4] = (s[j + 8] & 0x0F) | (s[j] >> 6) << 4;
        mn[j + 4] = (s[j + 8] >> 4) | (s[j + 4] >> 6) << 4;
    }
}

/* 8 bytes at p as int32 */
INL __m256i u8x8(const uint8_t *p) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p)); }

/* Q4_K and Q5_K (qh NULL for Q4_K): in chunk c, element 64c + l is the low
 * nibble of qs[32c + l] (sub-block 2c), 64c + 32 + l the high nibble
 * (sub-block 2c + 1); Q5_K's fifth bit j of qh[l] for sub-block j. */
INL void dec_k45(const uint8_t *dbytes, const uint8_t *scales, const uint8_t *qh, const uint8_t *qs, float *dst)
{
    const float d = lb__fp16_to_f32(lb__le16(dbytes)), dmin = lb__fp16_to_f32(lb__le16(dbytes + 2));
    int sc[8], mn[8];
    k_scale_min(scales, sc, mn);
    const __m256i nib = _mm256_set1_epi32(0x0F), one = _mm256_set1_epi32(1);
    for (int c = 0; c < 4; c++) {
        const int j0 = 2 * c, j1 = 2 * c + 1;
        const __m256 d0 = _mm256_set1_ps(d * (float)sc[j0]), m0 = _mm256_set1_ps(dmin * (float)mn[j0]);
        const __m256 d1 = _mm256_set1_ps(d * (float)sc[j1]), m1 = _mm256_set1_ps(dmin * (float)mn[j1]);
        float *y = dst + 64 * c;
        for (int l = 0; l < 32; l += 8) {
            __m256i b = u8x8(qs + 32 * c + l);
            __m256i q0 = _mm256_and_si256(b, nib), q1 = _mm256_srli_epi32(b, 4);
            if (qh) {
                __m256i h = u8x8(qh + l);
                q0 = _mm256_or_si256(q0, _mm256_slli_epi32(
                                             _mm256_and_si256(_mm256_srl_epi32(h, _mm_cvtsi32_si128(j0)), one), 4));
                q1 = _mm256_or_si256(q1, _mm256_slli_epi32(
                                             _mm256_and_si256(_mm256_srl_epi32(h, _mm_cvtsi32_si128(j1)), one), 4));
            }
            _mm256_storeu_ps(y + l, _mm256_sub_ps(_mm256_mul_ps(d0, cvt(q0)), m0));
            _mm256_storeu_ps(y + 32 + l, _mm256_sub_ps(_mm256_mul_ps(d1, cvt(q1)), m1));
        }
    }
}

static void dec_q4_k(const uint8_t *src, size_t nb, float *dst)
{
    const lb__block_q4_k *x = (const lb__block_q4_k *)src;
    for (size_t i = 0; i < nb; i++, dst += LB__QK_K) dec_k45(x[i].d, x[i].scales, NULL, x[i].qs, dst);
}

static void dec_q5_k(const uint8_t *src, size_t nb, float *dst)
{
    const lb__block_q5_k *x = (const lb__block_q5_k *)src;
    for (size_t i = 0; i < nb; i++, dst += LB__QK_K) dec_k45(x[i].d, x[i].scales, x[i].qh, x[i].qs, dst);
}

/* Q6_K: in half h, element 128h + 32j + l (j < 4, l < 32) takes the low
 * (j < 2) or high nibble of ql[64h + 32(j & 1) + l] and bits 2j..2j+1 of
 * qh[32h + l]; it is in sub-block 8h + 2j + l / 16. */
static void dec_q6_k(const uint8_t *src, size_t nb, float *dst)
{
    const lb__block_q6_k *x = (const lb__block_q6_k *)src;
    const __m256i nib = _mm256_set1_epi32(0x0F), two = _mm256_set1_epi32(3), off = _mm256_set1_epi32(32);
    for (size_t i = 0; i < nb; i++, dst += LB__QK_K) {
        const float d = lb__fp16_to_f32(lb__le16(x[i].d));
        float ds[16];
        for (int k = 0; k < 16; k++) ds[k] = d * (float)x[i].scales[k];
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = x[i].ql + 64 * h, *qh = x[i].qh + 32 * h;
            const float *dh = ds + 8 * h;
            float *y = dst + 128 * h;
            for (int l = 0; l < 32; l += 8) {
                const int half = l / 16;
                __m256i a = u8x8(ql + l), b = u8x8(ql + l + 32), hb = u8x8(qh + l);
                __m256i q[4];
                q[0] = _mm256_or_si256(_mm256_and_si256(a, nib), _mm256_slli_epi32(_mm256_and_si256(hb, two), 4));
                q[1] = _mm256_or_si256(_mm256_and_si256(b, nib),
                                       _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(hb, 2), two), 4));
                q[2] = _mm256_or_si256(_mm256_srli_epi32(a, 4),
                                       _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(hb, 4), two), 4));
                q[3] = _mm256_or_si256(_mm256_srli_epi32(b, 4), _mm256_slli_epi32(_mm256_srli_epi32(hb, 6), 4));
                for (int j = 0; j < 4; j++)
                    _mm256_storeu_ps(y + 32 * j + l, _mm256_mul_ps(_mm256_set1_ps(dh[2 * j + half]),
                                                                   cvt(_mm256_sub_epi32(q[j], off))));
            }
        }
    }
}

/* The decoder of a dtype, or NULL: lb_dtype_to_f32 then (every dtype is
 * listed, so a new one is a compile error here until it is placed). */
static block_decoder decoder_of(lb_dtype t)
{
    switch (t) {
    case LB_DT_Q4_0: return dec_q4_0;
    case LB_DT_Q4_1: return dec_q4_1;
    case LB_DT_Q5_0: return dec_q5_0;
    case LB_DT_Q5_1: return dec_q5_1;
    case LB_DT_Q8_0: return dec_q8_0;
    case LB_DT_Q4_K: return dec_q4_k;
    case LB_DT_Q5_K: return dec_q5_k;
    case LB_DT_Q6_K: return dec_q6_k;
    case LB_DT_MXFP4: return dec_mxfp4;
    case LB_DT_Q2_K:
    case LB_DT_Q3_K:
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

/* One chunk of 16 products for token t: p[0..7] += x * w0, p[8..15] += x * w1. */
#define CHUNK(t, xp)                                                  \
    do {                                                              \
        a##t##0 = _mm256_fmadd_ps(_mm256_loadu_ps(xp), w0, a##t##0);     \
        a##t##1 = _mm256_fmadd_ps(_mm256_loadu_ps((xp) + 8), w1, a##t##1); \
    } while (0)

/* The tokens' partial sums live in eight named registers (an array
 * indexed by the token was kept in memory by the compiler, which put a
 * store and a reload on every multiply-add's dependency chain). */
INL void run(const lb__qmat *m, const float *x, const int NX, size_t ldx, size_t r0, size_t r1, float *y, size_t ldy,
             void *scratch)
{
    const size_t sb = lb__gdot_segment_blocks(m), seg = sb * m->ggml_block;
    float *w = scratch, *xtail = w + ((seg + 16) * sizeof(float) + 63) / 64 * 16;
    block_decoder dec = decoder_of(m->ggml);
    for (size_t r = r0; r < r1; r++) {
        const uint8_t *row = m->data + r * m->row_bytes;
        __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00, a30 = a00, a31 = a00;
        for (size_t k0 = 0; k0 < m->cols; k0 += seg) {
            size_t n = m->cols - k0 < seg ? m->cols - k0 : seg;
            const uint8_t *src = row + k0 / m->ggml_block * m->ggml_block_bytes;
            if (dec) dec(src, n / m->ggml_block, w);
            else lb_dtype_to_f32(m->ggml, src, n, w); /* whole blocks of a readable dtype: cannot fail */
            size_t e = 0;
            for (; e + 16 <= n; e += 16) {
                const __m256 w0 = _mm256_load_ps(w + e), w1 = _mm256_load_ps(w + e + 8);
                const float *xe = x + k0 + e;
                CHUNK(0, xe);
                if (NX > 1) CHUNK(1, xe + ldx);
                if (NX > 2) CHUNK(2, xe + 2 * ldx);
                if (NX > 3) CHUNK(3, xe + 3 * ldx);
            }
            if (e < n) { /* a block-1 type's last partial chunk: x and w padded with +0 */
                for (size_t k = n; k % 16; k++) w[k] = 0.0f;
                for (int t = 0; t < NX; t++) {
                    memset(xtail + 16 * t, 0, 16 * sizeof *xtail);
                    memcpy(xtail + 16 * t, x + t * ldx + k0 + e, (n - e) * sizeof *xtail);
                }
                const __m256 w0 = _mm256_load_ps(w + e), w1 = _mm256_load_ps(w + e + 8);
                CHUNK(0, xtail);
                if (NX > 1) CHUNK(1, xtail + 16);
                if (NX > 2) CHUNK(2, xtail + 32);
                if (NX > 3) CHUNK(3, xtail + 48);
            }
        }
        const __m256 acc[LB__QDOT_MAX_NX][2] = {{a00, a01}, {a10, a11}, {a20, a21}, {a30, a31}};
        for (int t = 0; t < NX; t++) {
            float s[16];
            _mm256_storeu_ps(s, acc[t][0]);
            _mm256_storeu_ps(s + 8, acc[t][1]);
            y[t * ldy + r] = lb__sum16f(s);
        }
    }
}

static void gdot_avx2(const lb__qmat *m, const float *x, size_t nx, size_t ldx, size_t r0, size_t r1, float *y,
                      size_t ldy, void *scratch)
{
    switch (nx) {
    case 1: run(m, x, 1, ldx, r0, r1, y, ldy, scratch); break;
    case 2: run(m, x, 2, ldx, r0, r1, y, ldy, scratch); break;
    case 3: run(m, x, 3, ldx, r0, r1, y, ldy, scratch); break;
    default: run(m, x, 4, ldx, r0, r1, y, ldy, scratch); break; /* nx <= LB__QDOT_MAX_NX */
    }
}

const lb__qdot_fn lb__gdot_avx2_fn = gdot_avx2;

#else

const lb__qdot_fn lb__gdot_avx2_fn = NULL;

#endif
