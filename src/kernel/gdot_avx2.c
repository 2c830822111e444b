/* AVX2 decode kernels for ggml-typed matrices: gdot.h's order, bit for bit
 * the reference. Every token's 16 partial sums are two ymm (p[0..7],
 * p[8..15]) that take 16 products at a time with one fused multiply-add
 * per lane, as fmaf does.
 *
 * Every ggml block type (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K .. Q6_K,
 * IQ4_NL, IQ4_XS, MXFP4, NVFP4) is decoded in registers, 16 values at a
 * time in element order, straight into the products. Each value is
 * computed with the same fp32 operations, in the same order, as the
 * dequantizers in io/ggml_blocks.c, io/ggml_blocks_k.c and
 * io/ggml_blocks_iq4.c (-ffp-contract=off there and here): an integer code
 * (or grid value) converted exactly to fp32, times the block's scale (one
 * rounding), then plus or minus the block's offset where the type has one
 * (a second rounding, never fused); the per-block scales are formed in
 * scalar code with those files' very expressions (or the helpers they
 * share from io/ggml_blocks.h). The plain dtypes (f16, bf16 ...) are
 * decoded a segment at a time into scratch by lb_dtype_to_f32 itself. */
#include "kernel/gdot.h"

#if defined(__x86_64__)

#include <immintrin.h>
#include <string.h>

#include "io/ggml_blocks.h"
#include "quant/qkernels.h"

#define INL static inline __attribute__((always_inline))

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

/* ---- the products ---- */

/* One chunk of 16 products for token t: p[0..7] += x * w0, p[8..15] += x * w1. */
#define CHUNK(t, xp)                                                        \
    do {                                                                    \
        a##t##0 = _mm256_fmadd_ps(_mm256_loadu_ps(xp), w0, a##t##0);       \
        a##t##1 = _mm256_fmadd_ps(_mm256_loadu_ps((xp) + 8), w1, a##t##1); \
    } while (0)

/* The next 16 values of the row (wa: the first 8, wb: the next 8) times
 * every token's x at the same place; xk walks token 0's x along the row. */
#define FMA16(wa, wb)                                        \
    do {                                                     \
        const __m256 w0 = (wa), w1 = (wb);                   \
        CHUNK(0, xk);                                        \
        if (NX > 1) CHUNK(1, xk + ldx);                      \
        if (NX > 2) CHUNK(2, xk + 2 * ldx);                  \
        if (NX > 3) CHUNK(3, xk + 3 * ldx);                  \
        xk += 16;                                            \
    } while (0)

/* A kernel for one block type: BODY turns the block at `src` into values
 * in registers and hands them, 16 at a time in element order, to FMA16.
 * The tokens' partial sums live in eight named registers (an array
 * indexed by the token was kept in memory by the compiler, which put a
 * store and a reload on every multiply-add's dependency chain), and no
 * value goes through memory between the decode and the product. */
#define DEFINE_KERNEL(name, ...)                                                                                    \
    INL void name##_rows(const lb__qmat *m, const float *x, const int NX, size_t ldx, size_t r0, size_t r1,       \
                         float *y, size_t ldy)                                                                      \
    {                                                                                                               \
        const size_t nb = m->cols / m->ggml_block, bb = m->ggml_block_bytes;                                       \
        for (size_t r = r0; r < r1; r++) {                                                                          \
            __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00, a30 = a00,     \
                   a31 = a00;                                                                                       \
            const uint8_t *src = m->data + r * m->row_bytes;                                                        \
            const float *xk = x;                                                                                    \
            for (size_t blk = 0; blk < nb; blk++, src += bb) __VA_ARGS__                                               \
            store_sums(NX, y, ldy, r, a00, a01, a10, a11, a20, a21, a30, a31);                                      \
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

/* y[t][r] = the tree over token t's 16 partial sums */
INL void store_sums(const int NX, float *y, size_t ldy, size_t r, __m256 a00, __m256 a01, __m256 a10, __m256 a11,
                    __m256 a20, __m256 a21, __m256 a30, __m256 a31)
{
    const __m256 acc[LB__QDOT_MAX_NX][2] = {{a00, a01}, {a10, a11}, {a20, a21}, {a30, a31}};
    for (int t = 0; t < NX; t++) {
        float s[16];
        _mm256_storeu_ps(s, acc[t][0]);
        _mm256_storeu_ps(s + 8, acc[t][1]);
        y[t * ldy + r] = lb__sum16f(s);
    }
}

/* The bytes 8g .. 8g+7 of a 128-bit lane as int32. */
INL __m256i lane8(__m128i v, int g) { return _mm256_cvtepu8_epi32(g ? _mm_srli_si128(v, 8) : v); }

DEFINE_KERNEL(k_q4_0, {
    const lb__block_q4_0 *b = (const lb__block_q4_0 *)src;
    const __m256 d = _mm256_set1_ps(lb__fp16_to_f32(lb__le16(b->d)));
    const __m256i eight = _mm256_set1_epi32(8);
    __m256i q[4];
    nibbles32(b->qs, q);
    FMA16(_mm256_mul_ps(d, cvt(_mm256_sub_epi32(q[0], eight))), _mm256_mul_ps(d, cvt(_mm256_sub_epi32(q[1], eight))));
    FMA16(_mm256_mul_ps(d, cvt(_mm256_sub_epi32(q[2], eight))), _mm256_mul_ps(d, cvt(_mm256_sub_epi32(q[3], eight))));
})

DEFINE_KERNEL(k_q4_1, {
    const lb__block_q4_1 *b = (const lb__block_q4_1 *)src;
    const __m256 d = _mm256_set1_ps(lb__fp16_to_f32(lb__le16(b->d))), mn = _mm256_set1_ps(lb__fp16_to_f32(lb__le16(b->m)));
    __m256i q[4];
    nibbles32(b->qs, q);
    FMA16(_mm256_add_ps(_mm256_mul_ps(d, cvt(q[0])), mn), _mm256_add_ps(_mm256_mul_ps(d, cvt(q[1])), mn));
    FMA16(_mm256_add_ps(_mm256_mul_ps(d, cvt(q[2])), mn), _mm256_add_ps(_mm256_mul_ps(d, cvt(q[3])), mn));
})

/* Q5_0/Q5_1's 32 codes as bytes in element order: the nibbles (low
 * nibbles are elements 0..15, in the low lane) with bit 4 set where bit i
 * of qh is (byte i / 8 of qh spread over 8 bytes, then each byte's own bit
 * tested). */
INL __m256i q5_codes(const uint8_t *qs, uint32_t qh)
{
    const __m128i mask = _mm_set1_epi8(0x0F);
    __m128i b = _mm_loadu_si128((const __m128i *)qs);
    __m256i nib = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(b, 4), mask), _mm_and_si128(b, mask));
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, /* low lane: qh bytes 0, 1 */
                                            2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3); /* high: 2, 3 */
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    __m256i h = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), spread);
    h = _mm256_cmpeq_epi8(_mm256_and_si256(h, bit), bit);
    return _mm256_or_si256(nib, _mm256_and_si256(h, _mm256_set1_epi8(0x10)));
}

DEFINE_KERNEL(k_q5_0, {
    const lb__block_q5_0 *b = (const lb__block_q5_0 *)src;
    const __m256 d = _mm256_set1_ps(lb__fp16_to_f32(lb__le16(b->d)));
    const __m256i v = q5_codes(b->qs, lb__le32(b->qh)), sixteen = _mm256_set1_epi32(16);
    const __m128i v0 = _mm256_castsi256_si128(v), v1 = _mm256_extracti128_si256(v, 1);
    FMA16(_mm256_mul_ps(d, cvt(_mm256_sub_epi32(lane8(v0, 0), sixteen))),
          _mm256_mul_ps(d, cvt(_mm256_sub_epi32(lane8(v0, 1), sixteen))));
    FMA16(_mm256_mul_ps(d, cvt(_mm256_sub_epi32(lane8(v1, 0), sixteen))),
          _mm256_mul_ps(d, cvt(_mm256_sub_epi32(lane8(v1, 1), sixteen))));
})

DEFINE_KERNEL(k_q5_1, {
    const lb__block_q5_1 *b = (const lb__block_q5_1 *)src;
    const __m256 d = _mm256_set1_ps(lb__fp16_to_f32(lb__le16(b->d))), mn = _mm256_set1_ps(lb__fp16_to_f32(lb__le16(b->m)));
    const __m256i v = q5_codes(b->qs, lb__le32(b->qh));
    const __m128i v0 = _mm256_castsi256_si128(v), v1 = _mm256_extracti128_si256(v, 1);
    FMA16(_mm256_add_ps(_mm256_mul_ps(d, cvt(lane8(v0, 0))), mn), _mm256_add_ps(_mm256_mul_ps(d, cvt(lane8(v0, 1))), mn));
    FMA16(_mm256_add_ps(_mm256_mul_ps(d, cvt(lane8(v1, 0))), mn), _mm256_add_ps(_mm256_mul_ps(d, cvt(lane8(v1, 1))), mn));
})

DEFINE_KERNEL(k_q8_0, {
    const lb__block_q8_0 *b = (const lb__block_q8_0 *)src;
    const __m256 d = _mm256_set1_ps(lb__fp16_to_f32(lb__le16(b->d)));
    const __m128i lo = _mm_loadu_si128((const __m128i *)b->qs), hi = _mm_loadu_si128((const __m128i *)(b->qs + 16));
    FMA16(_mm256_mul_ps(cvt(_mm256_cvtepi8_epi32(lo)), d), _mm256_mul_ps(cvt(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))), d));
    FMA16(_mm256_mul_ps(cvt(_mm256_cvtepi8_epi32(hi)), d), _mm256_mul_ps(cvt(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))), d));
})

DEFINE_KERNEL(k_mxfp4, {
    const lb__block_mxfp4 *b = (const lb__block_mxfp4 *)src;
    const __m256 d = _mm256_set1_ps(e8m0_half(b->e));
    __m256i q[4];
    nibbles32(b->qs, q);
    FMA16(_mm256_mul_ps(d, fp4_doubled(q[0])), _mm256_mul_ps(d, fp4_doubled(q[1])));
    FMA16(_mm256_mul_ps(d, fp4_doubled(q[2])), _mm256_mul_ps(d, fp4_doubled(q[3])));
})

/* Q4_K / Q5_K (HAS_QH): per chunk c, 32 low-nibble values (sub-block 2c)
 * then 32 high-nibble ones (2c + 1); the fifth bit of sub-block j is bit j
 * of qh[l], taken for 32 bytes at once. */
#define K45_BODY(block_t, HAS_QH)                                                                                   \
    {                                                                                                               \
        const block_t *b = (const block_t *)src;                                                                    \
        const float d = lb__fp16_to_f32(lb__le16(b->d)), dmin = lb__fp16_to_f32(lb__le16(b->dmin));                \
        int sc[8], mn[8];                                                                                           \
        k_scale_min(b->scales, sc, mn);                                                                             \
        const __m256i nib = _mm256_set1_epi8(0x0F);                                                                 \
        for (int c = 0; c < 4; c++) {                                                                               \
            const __m256i bytes = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * c));                            \
            __m256i half[2] = {_mm256_and_si256(bytes, nib), _mm256_and_si256(_mm256_srli_epi16(bytes, 4), nib)}; \
            for (int t2 = 0; t2 < 2; t2++) {                                                                        \
                const int j = 2 * c + t2;                                                                           \
                __m256i v = half[t2];                                                                               \
                if (HAS_QH) {                                                                                       \
                    __m256i h = _mm256_loadu_si256((const __m256i *)K45_QH(b));                                     \
                    h = _mm256_and_si256(_mm256_srl_epi16(h, _mm_cvtsi32_si128(j)), _mm256_set1_epi8(1));           \
                    v = _mm256_or_si256(v, _mm256_slli_epi16(h, 4));                                                \
                }                                                                                                   \
                const __m256 dj = _mm256_set1_ps(d * (float)sc[j]), mj = _mm256_set1_ps(dmin * (float)mn[j]);      \
                const __m128i v0 = _mm256_castsi256_si128(v), v1 = _mm256_extracti128_si256(v, 1);                  \
                FMA16(_mm256_sub_ps(_mm256_mul_ps(dj, cvt(lane8(v0, 0))), mj),                                      \
                      _mm256_sub_ps(_mm256_mul_ps(dj, cvt(lane8(v0, 1))), mj));                                     \
                FMA16(_mm256_sub_ps(_mm256_mul_ps(dj, cvt(lane8(v1, 0))), mj),                                      \
                      _mm256_sub_ps(_mm256_mul_ps(dj, cvt(lane8(v1, 1))), mj));                                     \
            }                                                                                                       \
        }                                                                                                           \
    }
#define K45_QH(b) NULL
DEFINE_KERNEL(k_q4_k, K45_BODY(lb__block_q4_k, 0))
#undef K45_QH
#define K45_QH(b) ((b)->qh)
DEFINE_KERNEL(k_q5_k, K45_BODY(lb__block_q5_k, 1))
#undef K45_QH

/* Q6_K: in half h, the 32 values of group j (elements 128h + 32j + l)
 * take nibble j / 2 of ql[64h + 32(j & 1) + l] and bits 2j.. of
 * qh[32h + l]; l < 16 and l >= 16 are two sub-blocks. */
DEFINE_KERNEL(k_q6_k, {
    const lb__block_q6_k *b = (const lb__block_q6_k *)src;
    const float d = lb__fp16_to_f32(lb__le16(b->d));
    const __m256i nib = _mm256_set1_epi8(0x0F), two = _mm256_set1_epi8(3), off = _mm256_set1_epi32(32);
    for (int h = 0; h < 2; h++) {
        const __m256i hbits = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
        for (int j = 0; j < 4; j++) {
            __m256i lb = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32 * (j & 1)));
            lb = j < 2 ? _mm256_and_si256(lb, nib) : _mm256_and_si256(_mm256_srli_epi16(lb, 4), nib);
            __m256i hb = _mm256_and_si256(_mm256_srl_epi16(hbits, _mm_cvtsi32_si128(2 * j)), two);
            __m256i v = _mm256_or_si256(lb, _mm256_slli_epi16(hb, 4));
            const __m128i v0 = _mm256_castsi256_si128(v), v1 = _mm256_extracti128_si256(v, 1);
            const __m256 s0 = _mm256_set1_ps(d * (float)b->scales[8 * h + 2 * j]);
            const __m256 s1 = _mm256_set1_ps(d * (float)b->scales[8 * h + 2 * j + 1]);
            FMA16(_mm256_mul_ps(s0, cvt(_mm256_sub_epi32(lane8(v0, 0), off))),
                  _mm256_mul_ps(s0, cvt(_mm256_sub_epi32(lane8(v0, 1), off))));
            FMA16(_mm256_mul_ps(s1, cvt(_mm256_sub_epi32(lane8(v1, 0), off))),
                  _mm256_mul_ps(s1, cvt(_mm256_sub_epi32(lane8(v1, 1), off))));
        }
    }
})

/* IQ4_NL / IQ4_XS: 16 bytes hold 32 indices into kvalues_iq4nl (low
 * nibbles elements 0..15, high 16..31); the grid is looked up as signed
 * bytes by one byte shuffle per nibble half, then widened, converted and
 * scaled as the dequantizer does (scale * (float)grid value). */
INL __m128i iq4_grid(void) { return _mm_loadu_si128((const __m128i *)lb__kvalues_iq4nl); }

#define IQ4_32(qs, scale, grid)                                                                                    \
    do {                                                                                                           \
        const __m128i mask_ = _mm_set1_epi8(0x0F), b_ = _mm_loadu_si128((const __m128i *)(qs));                    \
        const __m128i lo_ = _mm_shuffle_epi8(grid, _mm_and_si128(b_, mask_));                                      \
        const __m128i hi_ = _mm_shuffle_epi8(grid, _mm_and_si128(_mm_srli_epi16(b_, 4), mask_));                   \
        FMA16(_mm256_mul_ps(scale, cvt(_mm256_cvtepi8_epi32(lo_))),                                                \
              _mm256_mul_ps(scale, cvt(_mm256_cvtepi8_epi32(_mm_srli_si128(lo_, 8)))));                           \
        FMA16(_mm256_mul_ps(scale, cvt(_mm256_cvtepi8_epi32(hi_))),                                                \
              _mm256_mul_ps(scale, cvt(_mm256_cvtepi8_epi32(_mm_srli_si128(hi_, 8)))));                           \
    } while (0)

DEFINE_KERNEL(k_iq4_nl, {
    const lb__block_iq4_nl *b = (const lb__block_iq4_nl *)src;
    const __m256 d = _mm256_set1_ps(lb__fp16_to_f32(lb__le16(b->d)));
    const __m128i grid = iq4_grid();
    IQ4_32(b->qs, d, grid);
})

DEFINE_KERNEL(k_iq4_xs, {
    const lb__block_iq4_xs *b = (const lb__block_iq4_xs *)src;
    const float d = lb__fp16_to_f32(lb__le16(b->d));
    const __m128i grid = iq4_grid();
    for (int ib = 0; ib < 8; ib++) {
        const __m256 dl = _mm256_set1_ps(d * (float)(lb__iq4_xs_scale_code(b, ib) - 32));
        IQ4_32(b->qs + 16 * ib, dl, grid);
    }
})

/* Q2_K / Q3_K: in half h the 32 bytes qs[32h ..] hold four groups of 32
 * elements (group s: bits 2s, 2s+1 of each byte); a group's bytes 0..15
 * and 16..31 are two sub-blocks of 16 with their own scales. */
DEFINE_KERNEL(k_q2_k, {
    const lb__block_q2_k *b = (const lb__block_q2_k *)src;
    const float d = lb__fp16_to_f32(lb__le16(b->d)), dmin = lb__fp16_to_f32(lb__le16(b->dmin));
    const __m256i three = _mm256_set1_epi8(3);
    for (int h = 0; h < 2; h++) {
        const __m256i bytes = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * h));
        for (int s = 0; s < 4; s++) {
            const int sub = 8 * h + 2 * s;
            const __m256i v = _mm256_and_si256(_mm256_srl_epi16(bytes, _mm_cvtsi32_si128(2 * s)), three);
            const __m128i v0 = _mm256_castsi256_si128(v), v1 = _mm256_extracti128_si256(v, 1);
            const __m256 d0 = _mm256_set1_ps(d * (float)(b->scales[sub] & 0x0F));
            const __m256 m0 = _mm256_set1_ps(dmin * (float)(b->scales[sub] >> 4));
            const __m256 d1 = _mm256_set1_ps(d * (float)(b->scales[sub + 1] & 0x0F));
            const __m256 m1 = _mm256_set1_ps(dmin * (float)(b->scales[sub + 1] >> 4));
            FMA16(_mm256_sub_ps(_mm256_mul_ps(d0, cvt(lane8(v0, 0))), m0),
                  _mm256_sub_ps(_mm256_mul_ps(d0, cvt(lane8(v0, 1))), m0));
            FMA16(_mm256_sub_ps(_mm256_mul_ps(d1, cvt(lane8(v1, 0))), m1),
                  _mm256_sub_ps(_mm256_mul_ps(d1, cvt(lane8(v1, 1))), m1));
        }
    }
})

/* Q3_K: the code is the 2-bit value minus 4 where the element's hmask bit
 * (bit 4h + s of hmask[l]) is clear, formed as signed bytes. */
INL __m256i sx8(__m128i v, int g) { return _mm256_cvtepi8_epi32(g ? _mm_srli_si128(v, 8) : v); }

DEFINE_KERNEL(k_q3_k, {
    const lb__block_q3_k *b = (const lb__block_q3_k *)src;
    const float d = lb__fp16_to_f32(lb__le16(b->d));
    int sc[16];
    lb__q3_k_scales(b->scales, sc);
    const __m256i three = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    const __m256i hm = _mm256_loadu_si256((const __m256i *)b->hmask);
    for (int h = 0; h < 2; h++) {
        const __m256i bytes = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * h));
        for (int s = 0; s < 4; s++) {
            const int sub = 8 * h + 2 * s;
            const __m256i low = _mm256_and_si256(_mm256_srl_epi16(bytes, _mm_cvtsi32_si128(2 * s)), three);
            const __m256i clear = _mm256_andnot_si256(_mm256_srl_epi16(hm, _mm_cvtsi32_si128(4 * h + s)), one);
            const __m256i v = _mm256_sub_epi8(low, _mm256_slli_epi16(clear, 2));
            const __m128i v0 = _mm256_castsi256_si128(v), v1 = _mm256_extracti128_si256(v, 1);
            const __m256 d0 = _mm256_set1_ps(d * (float)sc[sub]), d1 = _mm256_set1_ps(d * (float)sc[sub + 1]);
            FMA16(_mm256_mul_ps(d0, cvt(sx8(v0, 0))), _mm256_mul_ps(d0, cvt(sx8(v0, 1))));
            FMA16(_mm256_mul_ps(d1, cvt(sx8(v1, 0))), _mm256_mul_ps(d1, cvt(sx8(v1, 1))));
        }
    }
})

/* NVFP4: four sub-blocks of 16, each 8 bytes (low nibbles elements 0..7,
 * high 8..15) with its own UE4M3 scale, halved for the doubled E2M1
 * values as the dequantizer does. */
DEFINE_KERNEL(k_nvfp4, {
    const lb__block_nvfp4 *b = (const lb__block_nvfp4 *)src;
    const __m128i mask = _mm_set1_epi8(0x0F);
    for (int s = 0; s < 4; s++) {
        const __m128i q = _mm_loadl_epi64((const __m128i *)(b->qs + 8 * s));
        const __m256 d = _mm256_set1_ps(lb__nvfp4_scale_half(b->d[s]));
        const __m256i lo = _mm256_cvtepu8_epi32(_mm_and_si128(q, mask));
        const __m256i hi = _mm256_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(q, 4), mask));
        FMA16(_mm256_mul_ps(d, fp4_doubled(lo)), _mm256_mul_ps(d, fp4_doubled(hi)));
    }
})

/* The types without a register decoder: a segment of blocks decoded into
 * scratch by the dtype's own dequantizer, then the same products. */
INL void generic_rows(const lb__qmat *m, const float *x, const int NX, size_t ldx, size_t r0, size_t r1, float *y,
                      size_t ldy, void *scratch)
{
    const size_t sb = lb__gdot_segment_blocks(m), seg = sb * m->ggml_block;
    float *w = scratch, *xtail = w + ((seg + 16) * sizeof(float) + 63) / 64 * 16;
    for (size_t r = r0; r < r1; r++) {
        const uint8_t *row = m->data + r * m->row_bytes;
        __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00, a30 = a00, a31 = a00;
        for (size_t k0 = 0; k0 < m->cols; k0 += seg) {
            size_t n = m->cols - k0 < seg ? m->cols - k0 : seg, e = 0;
            lb_dtype_to_f32(m->ggml, row + k0 / m->ggml_block * m->ggml_block_bytes, n, w); /* whole blocks: cannot fail */
            const float *xk = x + k0;
            for (; e + 16 <= n; e += 16) FMA16(_mm256_load_ps(w + e), _mm256_load_ps(w + e + 8));
            if (e < n) { /* a block-1 type's last partial chunk: x and w padded with +0 */
                for (size_t k = n; k % 16; k++) w[k] = 0.0f;
                for (int t = 0; t < NX; t++) {
                    memset(xtail + 16 * t, 0, 16 * sizeof *xtail);
                    memcpy(xtail + 16 * t, x + t * ldx + k0 + e, (n - e) * sizeof *xtail);
                }
                const float *xsave = xk;
                size_t ldsave = ldx;
                xk = xtail, ldx = 16;
                FMA16(_mm256_load_ps(w + e), _mm256_load_ps(w + e + 8));
                xk = xsave, ldx = ldsave;
            }
        }
        store_sums(NX, y, ldy, r, a00, a01, a10, a11, a20, a21, a30, a31);
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
    case LB_DT_Q4_1: return k_q4_1;
    case LB_DT_Q5_0: return k_q5_0;
    case LB_DT_Q5_1: return k_q5_1;
    case LB_DT_Q8_0: return k_q8_0;
    case LB_DT_Q4_K: return k_q4_k;
    case LB_DT_Q5_K: return k_q5_k;
    case LB_DT_Q6_K: return k_q6_k;
    case LB_DT_MXFP4: return k_mxfp4;
    case LB_DT_Q2_K: return k_q2_k;
    case LB_DT_Q3_K: return k_q3_k;
    case LB_DT_IQ4_NL: return k_iq4_nl;
    case LB_DT_IQ4_XS: return k_iq4_xs;
    case LB_DT_NVFP4: return k_nvfp4;
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

static void gdot_avx2(const lb__qmat *m, const float *x, size_t nx, size_t ldx, size_t r0, size_t r1, float *y,
                      size_t ldy, void *scratch)
{
    row_kernel k = kernel_of(m->ggml);
    if (k) k(m, x, nx, ldx, r0, r1, y, ldy);
    else generic(m, x, nx, ldx, r0, r1, y, ldy, scratch);
}

const lb__qdot_fn lb__gdot_avx2_fn = gdot_avx2;

#else

const lb__qdot_fn lb__gdot_avx2_fn = NULL;

#endif
