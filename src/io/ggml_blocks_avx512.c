/* The AVX-512 build of the classic quantizers (ggml_blocks_quant.h).
 *
 * All seven are written in intrinsics, sixteen blocks (512 values; NVFP4:
 * four blocks of 64) a step: the plain C of the header, vectorized by the compiler,
 * spends most of its time on each block's own maximum (a horizontal
 * reduction per 32 values) and on its packing, and came out slower at 16
 * lanes than at 8. Here the sixteen maxima come from one transposing tree
 * (util/tree16_avx512.h), each block's scale and reciprocal are one lane
 * of a vector, and the codes are made and packed 16 at a time. Every value
 * goes through the scalar build's IEEE operations in the same order
 * (x * id, x * id + bias; d = max / -half), so the bytes are the same
 * (tests/unit/test_ggml_quants.c compares the builds). A row's last few
 * blocks (SmolLM2's rows of 576 are 18) run as a step padded with zero
 * blocks: in the header's C they took a quarter of the time. Q4_1 and
 * Q5_1 (minimum and maximum), MXFP4 and NVFP4 (the nearest E2M1 value, by
 * the header's eight-code loop) are written the same way. */
#include "io/ggml_blocks.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__)
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "util/tree16_avx512.h"

/* The scalar build's helpers: ggml's casts, the MXFP4 exponent, the UE4M3 code */
#define LB__QUANT_HELPERS_ONLY 1
#include "io/ggml_blocks_quant.h"

#define STEP 16 /* blocks a step */

/* The values of a step's n <= 16 blocks (block b: v[2b], v[2b+1]; zeros
 * past n), their magnitudes' bits in a, and each block's largest in lane
 * b: finite input, whose magnitudes order like their bits (absmax_bits). */
static inline __m512i magnitude(__m512 v) /* |v|'s bits */
{
    return _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7FFFFFFF));
}

/* A step's vectors: the first nvec from x, zeros after (up to 2 * STEP). */
static inline void load_step(const float *x, int nvec, __m512 v[2 * STEP])
{
    for (int k = 0; k < 2 * STEP; k++) v[k] = k < nvec ? _mm512_loadu_ps(x + 16 * k) : _mm512_setzero_ps();
}

static inline __m512i step_absmax(const float *x, int n, __m512 v[2 * STEP], __m512i a[2 * STEP])
{
    __m512 m[STEP];
    load_step(x, 2 * n, v);
    for (int k = 0; k < 2 * STEP; k++) a[k] = magnitude(v[k]);
    for (int b = 0; b < STEP; b++) m[b] = _mm512_castsi512_ps(_mm512_max_epu32(a[2 * b], a[2 * b + 1]));
    return _mm512_castps_si512(lb__tree16x16_avx512(m, LB__TREE_MAGNITUDE_MAX));
}

/* The reciprocal as the scalar build takes it: d != 0 ? 1 / d : 0. */
static inline __m512 reciprocal(__m512 d)
{
    return _mm512_maskz_div_ps(_mm512_cmp_ps_mask(d, _mm512_setzero_ps(), _CMP_NEQ_OQ), _mm512_set1_ps(1.0f), d);
}

/* in_int32_mask of each lane's bits: all ones where |v| < 2^31. */
static inline __m512i in_int32(__m512 v)
{
    return _mm512_movm_epi32(_mm512_cmplt_epu32_mask(magnitude(v), _mm512_set1_epi32(0x4F000000)));
}

/* cast_i8 lane-wise: truncated to int32 (0 where |v| >= 2^31 or NaN), the
 * low byte as a signed one. Where d and 1/d are finite the codes fit a byte
 * anyway, and the plain casts of the scalar build give the same. */
static inline __m512i cast_i8_lanes(__m512 v)
{
    const __m512i t = _mm512_cvttps_epi32(_mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v), in_int32(v))));
    return _mm512_srai_epi32(_mm512_slli_epi32(t, 24), 24);
}

/* np_round_i8 lane-wise, as 32-bit lanes whose low byte is the code. Its
 * last mask is not needed here: a lane out of range has a = 0, so t, the
 * rounding and the sign leave it 0. */
static inline __m512i round_i8(__m512 v)
{
    const __m512i keep = in_int32(v);
    const __m512i u = _mm512_castps_si512(v);
    const __m512 a = _mm512_castsi512_ps(_mm512_and_si512(magnitude(v), keep));
    const __m512i t = _mm512_cvttps_epi32(a);
    const __m512i frac = _mm512_castps_si512(_mm512_sub_ps(a, _mm512_cvtepi32_ps(t)));
    __m512i r = _mm512_mask_add_epi32(t, _mm512_cmpge_epu32_mask(frac, _mm512_set1_epi32(0x3F000000)), t,
                                      _mm512_set1_epi32(1));
    const __m512i neg = _mm512_srai_epi32(u, 31);
    return _mm512_sub_epi32(_mm512_xor_si512(r, neg), neg);
}

/* symmetric_codes' code of each lane: cast_i8(x * id + bias), then
 * min(code, top). (The low byte's sign extension in cast_i8_lanes no finite
 * block reaches: where 1/d is finite the codes lie in 0 .. 2 * half + 1,
 * elsewhere they are 0.) */
static inline __m512i symmetric_code(__m512 x, __m512 id, __m512 bias, __m512i top)
{
    return _mm512_min_epi32(cast_i8_lanes(_mm512_add_ps(_mm512_mul_ps(x, id), bias)), top);
}

/* Blocks in the step that starts at block i of nb: 16, or the rest (a
 * row's last few, computed as a step padded with zero blocks). */
static inline int step_blocks(size_t i, size_t nb) { return nb - i < STEP ? (int)(nb - i) : STEP; }

void lb__quantize_q8_0_avx512(const float *restrict src, size_t nb, void *restrict dst)
{
    lb__block_q8_0 *y = dst;
    for (size_t i = 0; i < nb; i += STEP, src += STEP * LB__QK) {
        const int n = step_blocks(i, nb);
        __m512 v[2 * STEP];
        __m512i a[2 * STEP];
        const __m512 amax = _mm512_castsi512_ps(step_absmax(src, n, v, a));
        const __m512 d = _mm512_div_ps(amax, _mm512_set1_ps(127.0f));
        float dv[STEP], idv[STEP];
        _mm512_storeu_ps(dv, d);
        _mm512_storeu_ps(idv, reciprocal(d));
        for (int b = 0; b < n; b++) {
            const __m512 id = _mm512_set1_ps(idv[b]);
            lb__block_q8_0 *o = y + i + (size_t)b;
            lb__store_ggml_fp16(o->d, dv[b]);
            _mm_storeu_si128((__m128i *)o->qs, _mm512_cvtepi32_epi8(round_i8(_mm512_mul_ps(v[2 * b], id))));
            _mm_storeu_si128((__m128i *)(o->qs + 16), _mm512_cvtepi32_epi8(round_i8(_mm512_mul_ps(v[2 * b + 1], id))));
        }
    }
}

/* The four- and five-bit types' step: each block's scale (and minimum),
 * and its codes as 32-bit lanes. */
typedef struct code_step {
    float d[STEP], min[STEP];   /* min: Q4_1 and Q5_1 only */
    __m512i lo[STEP], hi[STEP]; /* codes of elements 0..15 and 16..31 */
} code_step;

/* Four-bit codes: element j's in the low nibble of byte j, j + 16's high. */
static inline void pack4(const code_step *s, int b, uint8_t *qs)
{
    const __m512i packed = _mm512_or_si512(s->lo[b], _mm512_slli_epi32(s->hi[b], 4));
    _mm_storeu_si128((__m128i *)qs, _mm512_cvtepi32_epi8(packed));
}

/* Five-bit codes: the low nibbles as pack4, the fifth bits in a
 * little-endian word (element j's in bit j). */
static inline void pack5(const code_step *s, int b, uint8_t *qh, uint8_t *qs)
{
    const __m512i nibble = _mm512_set1_epi32(0x0F), fifth = _mm512_set1_epi32(0x10);
    const uint32_t h = (uint32_t)_mm512_test_epi32_mask(s->lo[b], fifth) |
                       (uint32_t)_mm512_test_epi32_mask(s->hi[b], fifth) << 16;
    qh[0] = (uint8_t)h, qh[1] = (uint8_t)(h >> 8), qh[2] = (uint8_t)(h >> 16), qh[3] = (uint8_t)(h >> 24);
    const __m512i packed = _mm512_or_si512(_mm512_and_si512(s->lo[b], nibble),
                                           _mm512_slli_epi32(_mm512_and_si512(s->hi[b], nibble), 4));
    _mm_storeu_si128((__m128i *)qs, _mm512_cvtepi32_epi8(packed));
}

/* Q4_0 and Q5_0 (symmetric_codes): each block's signed maximum (the first
 * value of largest magnitude, +0 for a block of zeros), d = max / -half,
 * its reciprocal, and the codes of both halves. */
static inline void symmetric_step(const float *x, int n, float half, int top, code_step *s)
{
    __m512 v[2 * STEP];
    __m512i a[2 * STEP];
    const __m512i amax = step_absmax(x, n, v, a);
    uint32_t mbits[STEP], sign[STEP] = {0};
    _mm512_storeu_si512(mbits, amax);
    for (int b = 0; b < n; b++) { /* the sign of the block's first value of that magnitude */
        const __m512i m = _mm512_set1_epi32((int)mbits[b]);
        const uint32_t at = (uint32_t)_mm512_cmpeq_epi32_mask(a[2 * b], m) |
                            (uint32_t)_mm512_cmpeq_epi32_mask(a[2 * b + 1], m) << 16;
        const int first = __builtin_ctz(at); /* at != 0: the maximum is one of the block's */
        sign[b] = lb__bits_from_f32(x[LB__QK * b + first]) & 0x80000000u;
    }
    const __m512 max = _mm512_castsi512_ps(_mm512_or_si512(amax, _mm512_loadu_si512(sign)));
    /* a block of zeros: amax 0, its first zero's sign; the scalar build takes +0 there */
    const __m512 smax = _mm512_castsi512_ps(_mm512_maskz_mov_epi32(_mm512_test_epi32_mask(amax, amax),
                                                                   _mm512_castps_si512(max)));
    const __m512 d = _mm512_div_ps(smax, _mm512_set1_ps(-half));
    float idv[STEP];
    _mm512_storeu_ps(s->d, d);
    _mm512_storeu_ps(idv, reciprocal(d));
    const __m512 bias = _mm512_set1_ps(half + 0.5f);
    const __m512i vtop = _mm512_set1_epi32(top);
    for (int b = 0; b < n; b++) {
        const __m512 id = _mm512_set1_ps(idv[b]);
        s->lo[b] = symmetric_code(v[2 * b], id, bias, vtop);
        s->hi[b] = symmetric_code(v[2 * b + 1], id, bias, vtop);
    }
}

/* Q4_1 and Q5_1: each block's minimum and maximum as ggml's strict
 * compares find them (min_max: the first of equal values, which differs
 * from a tree's only between -0 and +0), d = (max - min) / top, its
 * reciprocal, and the codes of both halves as 32-bit lanes (code_step). */
/* The sign a zero extreme takes: that of the block's first zero (the only
 * values equal to it), where the tree may have kept another's. */
static inline void zero_signs(const __m512 v[2 * STEP], int n, __m512 *ext)
{
    float e[STEP];
    _mm512_storeu_ps(e, *ext);
    __mmask16 zero = _mm512_cmp_ps_mask(*ext, _mm512_setzero_ps(), _CMP_EQ_OQ);
    for (int b = 0; b < n; b++)
        if (zero >> b & 1) {
            const uint32_t at = (uint32_t)_mm512_cmp_ps_mask(v[2 * b], _mm512_setzero_ps(), _CMP_EQ_OQ) |
                                (uint32_t)_mm512_cmp_ps_mask(v[2 * b + 1], _mm512_setzero_ps(), _CMP_EQ_OQ) << 16;
            const int first = __builtin_ctz(at);
            uint32_t sign;
            memcpy(&sign, (const float *)&v[2 * b + (first >> 4)] + (first & 15), sizeof sign);
            e[b] = (sign & 0x80000000u) ? -0.0f : 0.0f;
        }
    *ext = _mm512_loadu_ps(e);
}

static inline void asym_step_codes(const float *x, int n, float top, int clamp, code_step *s)
{
    __m512 v[2 * STEP], lo[STEP], hi[STEP];
    load_step(x, 2 * n, v);
    for (int b = 0; b < STEP; b++) {
        lo[b] = _mm512_min_ps(v[2 * b], v[2 * b + 1]);
        hi[b] = _mm512_max_ps(v[2 * b], v[2 * b + 1]);
    }
    __m512 mn = lb__tree16x16_min_avx512(lo), mx = lb__tree16x16_max_avx512(hi);
    zero_signs(v, n, &mn);
    zero_signs(v, n, &mx);
    const __m512 d = _mm512_div_ps(_mm512_sub_ps(mx, mn), _mm512_set1_ps(top));
    float idv[STEP];
    _mm512_storeu_ps(s->d, d);
    _mm512_storeu_ps(s->min, mn);
    _mm512_storeu_ps(idv, reciprocal(d));
    const __m512 half = _mm512_set1_ps(0.5f);
    const __m512i cap = _mm512_set1_epi32(clamp);
    for (int b = 0; b < n; b++) {
        const __m512 id = _mm512_set1_ps(idv[b]), m = _mm512_set1_ps(s->min[b]);
        for (int h = 0; h < 2; h++) {
            /* cast_i8 (Q4_1) / np_cast_u8 (Q5_1: the same low byte) of (x - min) * id + 0.5 */
            const __m512 y = _mm512_add_ps(_mm512_mul_ps(_mm512_sub_ps(v[2 * b + h], m), id), half);
            const __m512i c = _mm512_min_epi32(cast_i8_lanes(y), cap);
            if (h) s->hi[b] = c;
            else s->lo[b] = c;
        }
    }
}

/* Q4_0, Q4_1, Q5_0, Q5_1: the fp16 scale first, then the fp16 minimum
 * (asymmetric), the fifth bits (five-bit), the nibbles. */
static inline __attribute__((always_inline)) void four_five(const float *src, size_t nb, uint8_t *dst, int asym,
                                                            int bits)
{
    const size_t m_at = 2, qh_at = 2 + 2 * (size_t)asym, qs_at = qh_at + (bits == 5 ? 4 : 0), bytes = qs_at + 16;
    for (size_t i = 0; i < nb; i += STEP, src += STEP * LB__QK) {
        const int n = step_blocks(i, nb);
        code_step s;
        if (asym) asym_step_codes(src, n, bits == 5 ? 31.0f : 15.0f, bits == 5 ? INT32_MAX : 15, &s);
        else symmetric_step(src, n, bits == 5 ? 16.0f : 8.0f, bits == 5 ? 31 : 15, &s);
        for (int b = 0; b < n; b++) {
            uint8_t *o = dst + (i + (size_t)b) * bytes;
            lb__store_ggml_fp16(o, s.d[b]);
            if (asym) lb__store_ggml_fp16(o + m_at, s.min[b]);
            if (bits == 5) pack5(&s, b, o + qh_at, o + qs_at);
            else pack4(&s, b, o + qs_at);
        }
    }
}

/* The layouts four_five writes are ggml_blocks.h's (Q5_1 has no clamp in
 * ggml: the code's low byte, INT32_MAX above). Each wrapper inlines it
 * with constant arguments, so its tests fold away. */
_Static_assert(offsetof(lb__block_q4_0, qs) == 2 && offsetof(lb__block_q4_1, m) == 2 &&
                   offsetof(lb__block_q4_1, qs) == 4 && offsetof(lb__block_q5_0, qh) == 2 &&
                   offsetof(lb__block_q5_0, qs) == 6 && offsetof(lb__block_q5_1, m) == 2 &&
                   offsetof(lb__block_q5_1, qh) == 4 && offsetof(lb__block_q5_1, qs) == 8,
               "the classic blocks' layouts four_five writes");

void lb__quantize_q4_0_avx512(const float *restrict src, size_t nb, void *restrict dst)
{
    four_five(src, nb, dst, 0, 4);
}
void lb__quantize_q4_1_avx512(const float *restrict src, size_t nb, void *restrict dst)
{
    four_five(src, nb, dst, 1, 4);
}
void lb__quantize_q5_0_avx512(const float *restrict src, size_t nb, void *restrict dst)
{
    four_five(src, nb, dst, 0, 5);
}
void lb__quantize_q5_1_avx512(const float *restrict src, size_t nb, void *restrict dst)
{
    four_five(src, nb, dst, 1, 5);
}

/* MXFP4 and NVFP4: nearest_fp4 on a vector of 16 values at scale d, the
 * codes in 32-bit lanes: |x| against the eight non-negative codes in order
 * (the first of equal rounded errors wins), then 8 + k for a negative x. */
static inline __m512i fp4_codes(__m512 x, __m512 d)
{
    const __m512 a = _mm512_castsi512_ps(magnitude(x));
    __m512i best = _mm512_castps_si512(a), code = _mm512_setzero_si512(); /* code 0: |0 * d - |x|| = |x| */
    static const float doubled[8] = {0, 1, 2, 3, 4, 6, 8, 12};
    for (int k = 1; k < 8; k++) {
        const __m512 v = _mm512_mul_ps(d, _mm512_set1_ps(doubled[k]));
        const __m512i err = magnitude(_mm512_sub_ps(v, a));
        const __mmask16 take = _mm512_cmplt_epi32_mask(err, best);
        code = _mm512_mask_mov_epi32(code, take, _mm512_set1_epi32(k));
        best = _mm512_mask_mov_epi32(best, take, err);
    }
    const __mmask16 neg = _mm512_movepi32_mask(_mm512_castps_si512(x)) & _mm512_test_epi32_mask(code, code);
    return _mm512_mask_or_epi32(code, neg, code, _mm512_set1_epi32(8));
}

void lb__quantize_mxfp4_avx512(const float *restrict src, size_t nb, void *restrict dst)
{
    lb__block_mxfp4 *y = dst;
    for (size_t i = 0; i < nb; i += STEP, src += STEP * LB__QK) {
        const int n = step_blocks(i, nb);
        __m512 v[2 * STEP];
        __m512i a[2 * STEP];
        uint32_t amax[STEP];
        _mm512_storeu_si512(amax, step_absmax(src, n, v, a));
        for (int b = 0; b < n; b++) {
            lb__block_mxfp4 *o = y + i + (size_t)b;
            o->e = mxfp4_exponent(amax[b]);
            const __m512 d = _mm512_set1_ps(e8m0_half(o->e));
            const __m512i packed =
                _mm512_or_si512(fp4_codes(v[2 * b], d), _mm512_slli_epi32(fp4_codes(v[2 * b + 1], d), 4));
            _mm_storeu_si128((__m128i *)o->qs, _mm512_cvtepi32_epi8(packed));
        }
    }
}

/* NVFP4's blocks of 64 are four sub-blocks of 16, a vector each: a step
 * takes four blocks, whose sixteen sub-block maxima one tree finds. */
void lb__quantize_nvfp4_avx512(const float *restrict src, size_t nb, void *restrict dst)
{
    lb__block_nvfp4 *y = dst;
    for (size_t i = 0; i < nb; i += STEP / 4, src += STEP * 16) {
        const int n = nb - i < STEP / 4 ? (int)(nb - i) * 4 : STEP; /* sub-blocks in this step */
        __m512 v[2 * STEP], m[STEP];
        uint32_t amax[STEP];
        load_step(src, n, v); /* a sub-block a vector (step_absmax pairs two a block) */
        for (int k = 0; k < STEP; k++) m[k] = _mm512_castsi512_ps(magnitude(v[k]));
        _mm512_storeu_si512(amax, _mm512_castps_si512(lb__tree16x16_avx512(m, LB__TREE_MAGNITUDE_MAX)));
        for (int k = 0; k < n; k++) {
            lb__block_nvfp4 *o = y + i + (size_t)(k / 4);
            const int sub = k % 4;
            const uint8_t code = ue4m3_code(lb__f32_from_bits(amax[k]) / 6.0f); /* input is finite */
            o->d[sub] = code;
            const __m512i c = fp4_codes(v[k], _mm512_set1_ps(lb__nvfp4_scale_half(code)));
            /* element j < 8 in the low nibble of byte j, element j + 8 in its high nibble */
            const __m512i packed = _mm512_or_si512(c, _mm512_slli_epi32(_mm512_shuffle_i32x4(c, c, 0xEE), 4));
            _mm_storel_epi64((__m128i *)(o->qs + 8 * sub), _mm512_cvtepi32_epi8(packed));
        }
    }
}

int lb__ggml_blocks_avx512_built(void) { return 1; }

#else /* no AVX-512 build here: the names exist, the AVX2 build runs */

#define FORWARD(type)                                                                        \
    void lb__quantize_##type##_avx512(const float *restrict src, size_t nb, void *restrict dst) \
    {                                                                                        \
        lb__quantize_##type##_avx2(src, nb, dst);                                            \
    }
LB__CLASSIC_QUANTIZERS(FORWARD)

int lb__ggml_blocks_avx512_built(void) { return 0; }

#endif
