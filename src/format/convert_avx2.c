/* AVX2 bulk conversion, 8 elements a step: the same integer rounding as
 * convert_avx512.c, with vector compares and blends in place of mask
 * registers. Compiled with -mavx2 -mfma -mf16c -mbmi2. Every value
 * compared here is below 2^31, so signed compares serve. */
#include "format/convert.h"

#if defined(__x86_64__) && defined(__AVX2__)
#include <immintrin.h>
#include <string.h>

#include "format/kernel_params.h"

#define V1(x) _mm256_set1_epi32((int)(x))
#define SEL(mask, yes, no) _mm256_blendv_epi8((no), (yes), (mask))

/* The rounding of convert_avx512.c's minifloat_codes: the add-and-shift
 * bit trick for normal results, a magic-number add for subnormal ones. */
static inline __m256i minifloat_codes(__m256i u, const lb__enc_params *p, int *nan_bad)
{
    const __m256i one = V1(1), zero = _mm256_setzero_si256();
    const int shift = 23 - p->man_bits;
    __m256i a = _mm256_and_si256(u, V1(0x7FFFFFFF));
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(a, shift), one);
    __m256i r = _mm256_add_epi32(_mm256_add_epi32(a, V1(p->round_half)), lsb);
    __m256i mag = _mm256_sub_epi32(_mm256_srli_epi32(r, shift), V1(p->rebias));
    __m256i sub = _mm256_cmpgt_epi32(V1(p->min_normal_bits), a); /* both below 2^31 */
    __m256 magic = _mm256_set1_ps(p->magic); /* branch-free, as in the AVX-512 twin */
    __m256i sum = _mm256_castps_si256(_mm256_add_ps(_mm256_castsi256_ps(a), magic));
    mag = SEL(sub, _mm256_sub_epi32(sum, _mm256_castps_si256(magic)), mag);

    __m256i neg = _mm256_srai_epi32(u, 31);
    __m256i res = _mm256_or_si256(mag, _mm256_and_si256(neg, V1(p->sign_bit)));
    if (p->zero_drops_sign) res = _mm256_andnot_si256(_mm256_cmpeq_epi32(mag, zero), res);
    __m256i ovf = _mm256_cmpgt_epi32(mag, V1(p->max_mag));
    res = SEL(ovf, SEL(neg, V1(p->ovf_neg), V1(p->ovf_pos)), res);
    if (p->is_unsigned_float)
        res = SEL(_mm256_andnot_si256(_mm256_cmpeq_epi32(a, zero), neg), V1(p->below_code), res);
    __m256i nan = _mm256_cmpgt_epi32(a, V1(0x7F800000));
    if (!_mm256_testz_si256(nan, nan)) {
        if (!p->nan_ok) *nan_bad |= _mm256_movemask_ps(_mm256_castsi256_ps(nan));
        __m256i nanc;
        if (p->nan_fp16_payload) {
            __m256i pl = _mm256_max_epi32(_mm256_srli_epi32(_mm256_and_si256(a, V1(0x7FFFFF)), 13), one);
            __m256i s16 = _mm256_and_si256(_mm256_srli_epi32(u, 16), V1(0x8000));
            nanc = _mm256_or_si256(_mm256_or_si256(s16, V1(0x7C00)), pl);
        } else {
            nanc = SEL(neg, V1(p->nan_neg), V1(p->nan_pos));
        }
        res = SEL(nan, nanc, res);
    }
    return res;
}

static inline __m256i e8m0_codes(__m256i u, const lb__enc_params *p)
{
    const __m256i zero = _mm256_setzero_si256();
    __m256i a = _mm256_and_si256(u, V1(0x7FFFFFFF));
    __m256i expf = _mm256_srli_epi32(a, 23), man = _mm256_and_si256(a, V1(0x7FFFFF));
    __m256i c = _mm256_add_epi32(expf, _mm256_srli_epi32(man, 22));
    __m256i sub_c = _mm256_and_si256(_mm256_cmpgt_epi32(man, V1(0x5FFFFF)), V1(1));
    c = SEL(_mm256_cmpeq_epi32(expf, zero), sub_c, c);
    c = SEL(_mm256_cmpgt_epi32(c, V1(254)), V1(p->saturate ? 0xFE : 0xFF), c);
    __m256i below = _mm256_or_si256(_mm256_srai_epi32(u, 31), _mm256_cmpeq_epi32(a, zero));
    c = SEL(below, V1(p->saturate ? 0x00 : 0xFF), c);
    return SEL(_mm256_cmpgt_epi32(a, V1(0x7F800000)), V1(0xFF), c);
}

static inline __m256i int_codes(__m256 x, const lb__enc_params *p, int *nan_bad)
{
    *nan_bad |= _mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    __m256 r = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm256_min_ps(_mm256_max_ps(r, _mm256_set1_ps(p->int_lo)), _mm256_set1_ps(p->int_hi));
    return _mm256_and_si256(_mm256_cvtps_epi32(r), V1(p->code_mask));
}

static inline __m256i fp32_codes(__m256i u, const lb__enc_params *p)
{
    if (!p->saturate) return u;
    __m256i a = _mm256_and_si256(u, V1(0x7FFFFFFF));
    __m256i maxf = _mm256_or_si256(_mm256_and_si256(u, V1(0x80000000)), V1(0x7F7FFFFF));
    return SEL(_mm256_cmpeq_epi32(a, V1(0x7F800000)), maxf, u);
}

static inline void store8(int bits, uint8_t *d, __m256i c)
{
    switch (bits) {
    case 4: {
        __m256i t = _mm256_or_si256(c, _mm256_srli_epi64(c, 28)); /* byte 0 of each qword */
        const __m256i pick = _mm256_setr_epi8(0, 8, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                              0, 8, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
        t = _mm256_shuffle_epi8(t, pick);
        uint32_t w = (uint32_t)_mm_extract_epi16(_mm256_castsi256_si128(t), 0) |
                     ((uint32_t)_mm_extract_epi16(_mm256_extracti128_si256(t, 1), 0) << 16);
        memcpy(d, &w, 4);
        break;
    }
    case 6: case 8: {
        __m256i p16 = _mm256_packus_epi32(c, c);
        __m256i p8 = _mm256_packus_epi16(p16, p16);
        _mm_storel_epi64((__m128i *)d, _mm_unpacklo_epi32(_mm256_castsi256_si128(p8), _mm256_extracti128_si256(p8, 1)));
        break;
    }
    case 16: {
        __m256i p16 = _mm256_permute4x64_epi64(_mm256_packus_epi32(c, c), _MM_SHUFFLE(3, 1, 2, 0));
        _mm_storeu_si128((__m128i *)d, _mm256_castsi256_si128(p16));
        break;
    }
    default: _mm256_storeu_si256((__m256i *)d, c);
    }
}

static inline __m256i load8(int bits, const uint8_t *s)
{
    switch (bits) {
    case 4: {
        int32_t w;
        memcpy(&w, s, 4);
        __m256i q = _mm256_cvtepu8_epi64(_mm_cvtsi32_si128(w));
        return _mm256_or_si256(_mm256_and_si256(q, _mm256_set1_epi64x(0xF)),
                               _mm256_slli_epi64(_mm256_srli_epi64(q, 4), 32));
    }
    case 6: return _mm256_and_si256(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)s)), V1(0x3F));
    case 8: return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)s));
    case 16: return _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)s));
    default: return _mm256_loadu_si256((const __m256i *)s);
    }
}

#define ENCODE_LOOP(CODES)                                                            \
    for (; i + 8 <= n; i += 8) {                                                      \
        __m256 x = _mm256_loadu_ps(src + i);                                          \
        __m256i u = _mm256_castps_si256(x);                                           \
        (void)u;                                                                      \
        int bad = 0;                                                                  \
        __m256i c = CODES;                                                            \
        if (bad) return i + (size_t)__builtin_ctz((unsigned)bad);                     \
        store8(f->bits, d, c);                                                        \
        d += step;                                                                    \
    }

size_t lb__encode_avx2(const lb_format_info *f, lb_overflow mode, const float *src, size_t n, void *dst)
{
    lb__enc_params p;
    lb__enc_params_init(f, mode, &p);
    uint8_t *d = dst;
    const size_t step = lb_format_bytes(f->id, 8);
    size_t i = 0;
    switch (p.kind) {
    case LB_CODEC_MINIFLOAT: ENCODE_LOOP(minifloat_codes(u, &p, &bad)) break;
    case LB_CODEC_E8M0: ENCODE_LOOP(e8m0_codes(u, &p)) break;
    case LB_CODEC_INT: ENCODE_LOOP(int_codes(x, &p, &bad)) break;
    case LB_CODEC_FP32: ENCODE_LOOP(fp32_codes(u, &p)) break;
    }
    size_t bad = lb__encode_scalar(f, mode, src + i, n - i, d);
    return bad == LB_ENCODE_OK ? bad : i + bad;
}

static inline __m256i minifloat_values(__m256i c, const lb__dec_params *p)
{
    if (p->is_bf16) return _mm256_slli_epi32(c, 16);
    const int m = p->man_bits;
    const __m256i zero = _mm256_setzero_si256();
    __m256i sign = _mm256_slli_epi32(_mm256_and_si256(c, V1(p->sign_bit)), 31 - (p->exp_bits + m));
    __m256i mag = _mm256_and_si256(c, V1(p->mag_mask));
    __m256i expf = _mm256_srl_epi32(mag, _mm_cvtsi32_si128(m));
    __m256i man = _mm256_and_si256(mag, V1((1u << m) - 1));
    __m256i man_hi = _mm256_sll_epi32(man, _mm_cvtsi32_si128(23 - m));
    __m256i normal = _mm256_or_si256(_mm256_slli_epi32(_mm256_add_epi32(expf, V1(127 - p->bias)), 23), man_hi);
    __m256i sub = _mm256_castps_si256(_mm256_mul_ps(_mm256_cvtepi32_ps(man), _mm256_set1_ps(p->sub_scale)));
    __m256i res = _mm256_or_si256(SEL(_mm256_cmpeq_epi32(expf, zero), sub, normal), sign);
    __m256i special = _mm256_or_si256(_mm256_or_si256(sign, V1(0x7F800000)), man_hi);
    switch (p->specials) {
    case LB_SPECIALS_IEEE: res = SEL(_mm256_cmpeq_epi32(expf, V1((1u << p->exp_bits) - 1)), special, res); break;
    case LB_SPECIALS_FN: res = SEL(_mm256_cmpeq_epi32(mag, V1(p->mag_mask)), special, res); break;
    case LB_SPECIALS_FNUZ: res = SEL(_mm256_cmpeq_epi32(c, V1(p->sign_bit)), V1(0x7FC00000), res); break;
    case LB_SPECIALS_NONE: /* every code is a number */
    case LB_SPECIALS_E8M0: /* e8m0_values */
        break;
    }
    if (p->is_unsigned_float) res = SEL(_mm256_cmpgt_epi32(c, V1(p->mag_mask)), V1(0x7FC00000), res);
    return res;
}

static inline __m256i e8m0_values(__m256i c)
{
    __m256i res = _mm256_slli_epi32(c, 23);
    res = SEL(_mm256_cmpeq_epi32(c, _mm256_setzero_si256()), V1(0x00400000), res);
    return SEL(_mm256_cmpeq_epi32(c, V1(0xFF)), V1(0x7FC00000), res);
}

static inline __m256i int_values(__m256i c, const lb__dec_params *p)
{
    __m128i cnt = _mm_cvtsi32_si128(p->int_shift);
    __m256i v = p->int_signed ? _mm256_sra_epi32(_mm256_sll_epi32(c, cnt), cnt) : c;
    return _mm256_castps_si256(_mm256_cvtepi32_ps(v));
}

#define DECODE_LOOP(VALUES)                                                           \
    for (; i + 8 <= n; i += 8) {                                                      \
        __m256i c = load8(f->bits, s);                                                \
        _mm256_storeu_si256((__m256i *)(dst + i), VALUES);                            \
        s += step;                                                                    \
    }

void lb__decode_avx2(const lb_format_info *f, const void *src, size_t n, float *dst)
{
    lb__dec_params p;
    lb__dec_params_init(f, &p);
    const uint8_t *s = src;
    const size_t step = lb_format_bytes(f->id, 8);
    size_t i = 0;
    switch (p.kind) {
    case LB_CODEC_MINIFLOAT: DECODE_LOOP(minifloat_values(c, &p)) break;
    case LB_CODEC_E8M0: DECODE_LOOP(e8m0_values(c)) break;
    case LB_CODEC_INT: DECODE_LOOP(int_values(c, &p)) break;
    case LB_CODEC_FP32: DECODE_LOOP(c) break;
    }
    lb__decode_scalar(f, s, n - i, dst + i);
}

#else /* no AVX2 in this build: the scalar loops stand in */

size_t lb__encode_avx2(const lb_format_info *f, lb_overflow mode, const float *src, size_t n, void *dst)
{
    return lb__encode_scalar(f, mode, src, n, dst);
}
void lb__decode_avx2(const lb_format_info *f, const void *src, size_t n, float *dst)
{
    lb__decode_scalar(f, src, n, dst);
}
#endif
