/* AVX-512 bulk conversion, 16 elements a step. Compiled with
 * -mavx512f -mavx512bw -mavx512dq -mavx512vl and only called when the CPU
 * has them. Each step computes 16 codes in 32-bit lanes, then packs them
 * to the storage width; the tail goes through the scalar reference.
 * Rounding is done in integers, never in the FPU, so the results do not
 * depend on MXCSR (rounding mode, flush-to-zero, denormals-are-zero). */
#include "format/convert.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__)
#include <immintrin.h>
#include <string.h>

#include "format/kernel_params.h"

#define V1(x) _mm512_set1_epi32((int)(x))

/* ----- fp32 -> codes ----- */

/* Round-to-nearest-even of fp32 into a sign/exponent/mantissa code.
 * Normal results: the classic bit trick, adding half an ulp of the target
 * (less one, plus the bit that will become the LSB, so that ties go to
 * even) and shifting; a carry out of the mantissa bumps the exponent, as
 * it should. Subnormal results: adding a magic power of two whose fp32 ulp
 * is the target's subnormal step makes the FPU round for us; the caller
 * has set the default FP environment (round to nearest, no FTZ/DAZ). */
static inline __m512i minifloat_codes(__m512i u, const lb__enc_params *p, __mmask16 *nan_bad)
{
    const __m512i one = V1(1);
    const int shift = 23 - p->man_bits;
    __m512i a = _mm512_and_si512(u, V1(0x7FFFFFFF));
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(a, (unsigned)shift), one);
    __m512i r = _mm512_add_epi32(_mm512_add_epi32(a, V1(p->round_half)), lsb);
    __m512i mag = _mm512_sub_epi32(_mm512_srli_epi32(r, (unsigned)shift), V1(p->rebias));
    /* branch-free: how many lanes are subnormal depends on the data, and a
     * mispredicted branch costs more than the two instructions */
    __mmask16 sub = _mm512_cmplt_epu32_mask(a, V1(p->min_normal_bits));
    __m512 magic = _mm512_set1_ps(p->magic);
    __m512 sum = _mm512_add_round_ps(_mm512_castsi512_ps(a), magic, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    mag = _mm512_mask_sub_epi32(mag, sub, _mm512_castps_si512(sum), _mm512_castps_si512(magic));

    __mmask16 neg = _mm512_movepi32_mask(u);
    __m512i res = _mm512_mask_or_epi32(mag, neg, mag, V1(p->sign_bit));
    if (p->zero_drops_sign)
        res = _mm512_mask_mov_epi32(res, _mm512_cmpeq_epi32_mask(mag, _mm512_setzero_si512()), _mm512_setzero_si512());
    if (!nan_bad) return res; /* in range and finite (see minifloat_codes_in_range) */
    __mmask16 ovf = _mm512_cmpgt_epu32_mask(mag, V1(p->max_mag));
    res = _mm512_mask_mov_epi32(res, ovf & ~neg, V1(p->ovf_pos));
    res = _mm512_mask_mov_epi32(res, ovf & neg, V1(p->ovf_neg));
    if (p->is_unsigned_float)
        res = _mm512_mask_mov_epi32(res, neg & _mm512_test_epi32_mask(a, a), V1(p->below_code));
    __mmask16 nan = _mm512_cmpgt_epi32_mask(a, V1(0x7F800000));
    if (nan) {
        if (!p->nan_ok) *nan_bad |= nan;
        if (p->nan_fp16_payload) {
            __m512i pl = _mm512_max_epi32(_mm512_srli_epi32(_mm512_and_si512(a, V1(0x7FFFFF)), 13), one);
            __m512i s16 = _mm512_and_si512(_mm512_srli_epi32(u, 16), V1(0x8000));
            res = _mm512_mask_mov_epi32(res, nan, _mm512_or_si512(_mm512_or_si512(s16, V1(0x7C00)), pl));
        } else {
            res = _mm512_mask_mov_epi32(res, nan & ~neg, V1(p->nan_pos));
            res = _mm512_mask_mov_epi32(res, nan & neg, V1(p->nan_neg));
        }
    }
    return res;
}

/* FP4 E2M1 of magnitudes a = |y| in [0, 6] (u: y's bits): the grid is
 * evenly spaced in three ranges, steps of 0.5 below 2, 1 below 4, 2 up to
 * 6, so the magnitude's code is rne(|y| / step) plus the code where the
 * range starts; the ties go to even codes as they do in minifloat_codes
 * (0.25 -> 0, 0.75 -> 1.0, 2.5 -> 2, 5 -> 4). The products are by powers
 * of two (exact) and the rounding is the instruction's own, not MXCSR's.
 * About half the instructions of the general path; the same codes. */
static inline __m512i e2m1_codes_of(__m512 a, __m512i u)
{
    __mmask16 ge2 = _mm512_cmp_ps_mask(a, _mm512_set1_ps(2.0f), _CMP_GE_OQ);
    __mmask16 ge4 = _mm512_cmp_ps_mask(a, _mm512_set1_ps(4.0f), _CMP_GE_OQ);
    __m512 inv_step = _mm512_mask_mov_ps(_mm512_set1_ps(2.0f), ge2, _mm512_set1_ps(1.0f));
    inv_step = _mm512_mask_mov_ps(inv_step, ge4, _mm512_set1_ps(0.5f));
    __m512i q = _mm512_cvt_roundps_epi32(_mm512_mul_ps(a, inv_step), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    q = _mm512_mask_add_epi32(q, ge2, q, V1(2));
    q = _mm512_mask_add_epi32(q, ge4, q, V1(2));
    return _mm512_or_si512(q, _mm512_and_si512(_mm512_srli_epi32(u, 28), V1(8))); /* the sign, of zeros too */
}

/* Of values not yet clamped: |y| clamped to 6 gives the codes that
 * clamping y to [-6, 6] first gives (the sign is y's either way), with one
 * instruction fewer. */
static inline __m512i e2m1_codes_clamping(__m512i u)
{
    __m512 a = _mm512_min_ps(_mm512_castsi512_ps(_mm512_and_si512(u, V1(0x7FFFFFFF))), _mm512_set1_ps(6.0f));
    return e2m1_codes_of(a, u);
}

/* For values already clamped to +-max finite, and finite: no overflow, inf
 * or NaN can occur, so the special-value blends are skipped (a signed
 * element format; the unsigned ones are scale formats only). */
static inline __m512i minifloat_codes_in_range(__m512i u, const lb__enc_params *p)
{
    return minifloat_codes(u, p, NULL);
}

static inline __m512i e8m0_codes(__m512i u, const lb__enc_params *p)
{
    __m512i a = _mm512_and_si512(u, V1(0x7FFFFFFF));
    __m512i expf = _mm512_srli_epi32(a, 23), man = _mm512_and_si512(a, V1(0x7FFFFF));
    /* normal inputs: 1.m rounds up from 1.5; subnormals: 2^-127 up to 1.5*2^-127, then 2^-126 */
    __m512i c = _mm512_add_epi32(expf, _mm512_srli_epi32(man, 22));
    __mmask16 sub = _mm512_cmpeq_epi32_mask(expf, _mm512_setzero_si512());
    c = _mm512_mask_mov_epi32(c, sub, _mm512_maskz_mov_epi32(_mm512_cmpge_epi32_mask(man, V1(0x600000)), V1(1)));
    c = _mm512_mask_mov_epi32(c, _mm512_cmpgt_epi32_mask(c, V1(254)), V1(p->saturate ? 0xFE : 0xFF));
    __mmask16 below = _mm512_movepi32_mask(u) | _mm512_cmpeq_epi32_mask(a, _mm512_setzero_si512());
    c = _mm512_mask_mov_epi32(c, below, V1(p->saturate ? 0x00 : 0xFF));
    return _mm512_mask_mov_epi32(c, _mm512_cmpgt_epi32_mask(a, V1(0x7F800000)), V1(0xFF));
}

static inline __m512i int_codes(__m512 x, const lb__enc_params *p, __mmask16 *nan_bad)
{
    *nan_bad |= _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    __m512 r = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm512_min_ps(_mm512_max_ps(r, _mm512_set1_ps(p->int_lo)), _mm512_set1_ps(p->int_hi));
    return _mm512_and_si512(_mm512_cvtps_epi32(r), V1(p->code_mask));
}

/* integers already clamped to the format's range: round and convert */
static inline __m512i int_codes_in_range(__m512 x, const lb__enc_params *p)
{
    __m512 r = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    return _mm512_and_si512(_mm512_cvtps_epi32(r), V1(p->code_mask));
}

static inline __m512i fp32_codes(__m512i u, const lb__enc_params *p)
{
    if (!p->saturate) return u;
    __m512i a = _mm512_and_si512(u, V1(0x7FFFFFFF));
    __m512i maxf = _mm512_or_si512(_mm512_and_si512(u, V1(0x80000000)), V1(0x7F7FFFFF));
    return _mm512_mask_mov_epi32(u, _mm512_cmpeq_epi32_mask(a, V1(0x7F800000)), maxf);
}

/* ----- codes <-> storage ----- */

static inline void store16(int bits, uint8_t *d, __m512i c)
{
    switch (bits) {
    case 4: /* lanes 2i and 2i+1 share a qword: fold the odd one into bits 4..7 */
        _mm_storel_epi64((__m128i *)d, _mm512_cvtepi64_epi8(_mm512_or_si512(c, _mm512_srli_epi64(c, 28))));
        break;
    case 6: case 8: _mm_storeu_si128((__m128i *)d, _mm512_cvtepi32_epi8(c)); break;
    case 16: _mm256_storeu_si256((__m256i *)d, _mm512_cvtepi32_epi16(c)); break;
    default: _mm512_storeu_si512(d, c);
    }
}

static inline __m512i load16(int bits, const uint8_t *s)
{
    switch (bits) {
    case 4: {
        __m512i q = _mm512_cvtepu8_epi64(_mm_loadl_epi64((const __m128i *)s));
        return _mm512_or_si512(_mm512_and_si512(q, _mm512_set1_epi64(0xF)),
                               _mm512_slli_epi64(_mm512_srli_epi64(q, 4), 32));
    }
    case 6: return _mm512_and_si512(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)s)), V1(0x3F));
    case 8: return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)s));
    case 16: return _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)s));
    default: return _mm512_loadu_si512(s);
    }
}

/* One loop per codec kind; `bits` is a local copy of f->bits, so the switch
 * in store16/load16 is hoisted by the compiler (read through f, it would be
 * reloaded and switched on after every store: the stores may alias *f). */
#define ENCODE_LOOP(CODES) ENCODE_LOOP_FROM(_mm512_loadu_ps(src + i), CODES)
#define ENCODE_LOOP_FROM(LOADX, CODES)                                                \
    for (; i + 16 <= n; i += 16) {                                                    \
        __m512 x = LOADX;                                                             \
        __m512i u = _mm512_castps_si512(x);                                           \
        (void)u;                                                                      \
        __mmask16 bad = 0;                                                            \
        __m512i c = CODES;                                                            \
        if (bad) return i + (size_t)__builtin_ctz(bad);                               \
        store16(bits, d, c);                                                          \
        d += step;                                                                    \
    }

size_t lb__encode_avx512(const lb_format_info *f, lb_overflow mode, const float *src, size_t n, void *dst)
{
    lb__enc_params p;
    lb__enc_params_init(f, mode, &p);
    const int bits = f->bits;
    uint8_t *d = dst;
    const size_t step = lb_format_bytes(f->id, 16);
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

/* Tensor quantization's inner step fused: each value is divided by its
 * block's divisor, offset, clamped, then encoded, without writing the
 * scaled row out in between. The same IEEE operations in the same order
 * as block_div_clamp followed by lb__encode_avx512, so the same bytes.
 * Blocks must be multiples of 16 values (or the row one block), so that
 * no vector straddles two blocks. */
typedef struct prescale_state { /* copies of *ps: the stores of codes may alias it */
    const float *div, *add;
    size_t block, ahead, b, boundary;
    __m512 vd, va, vlo, vhi;
} prescale_state;

/* x / div (+ add), not clamped */
static inline __m512 prescaled_y(const float *src, size_t i, prescale_state *st)
{
    if (i >= st->boundary) { /* the next block starts here */
        st->b++;
        st->boundary += st->block;
        st->vd = _mm512_set1_ps(st->div[st->b]);
        if (st->add) st->va = _mm512_set1_ps(st->add[st->b]);
    }
    if (st->ahead) { /* one line of the next four rows (lb__prescale.ahead): stream k = 1..4 in turn, in row r+k
                      * from its quarter 4-k on, a line per four vectors. Written out here, not in a helper: GCC 12
                      * deems a void function that only prefetches free of effects and drops its calls. */
        size_t t = i / 16, k = t % 4 + 1, line = t / 4;
        _mm_prefetch((const char *)(src + k * st->ahead + (4 - k) * (st->ahead / 4) + line * 16), _MM_HINT_T1);
    }
    __m512 y = _mm512_div_ps(_mm512_loadu_ps(src + i), st->vd);
    return st->add ? _mm512_add_ps(y, st->va) : y;
}

static inline __m512 prescaled_load(const float *src, size_t i, prescale_state *st)
{
    return _mm512_min_ps(_mm512_max_ps(prescaled_y(src, i, st), st->vlo), st->vhi);
}

size_t lb__encode_prescaled_avx512(const lb_format_info *f, const float *src, size_t n, const lb__prescale *ps, void *dst)
{
    lb__enc_params p;
    lb__enc_params_init(f, LB_SATURATE, &p);
    const int bits = f->bits;
    uint8_t *d = dst;
    const size_t step = lb_format_bytes(f->id, 16);
    prescale_state st = {ps->div, ps->add, ps->block, ps->ahead, 0, ps->block, _mm512_set1_ps(ps->div[0]),
                         _mm512_set1_ps(ps->add ? ps->add[0] : -0.0f), _mm512_set1_ps(ps->lo), _mm512_set1_ps(ps->hi)};
    size_t i = 0;
    switch (p.kind) { /* finite input: the NaN report of ENCODE_LOOP never fires */
    case LB_CODEC_MINIFLOAT:
        if (f->id == LB_FMT_FP4_E2M1 && ps->lo == -6.0f && ps->hi == 6.0f)
            ENCODE_LOOP_FROM(prescaled_y(src, i, &st), e2m1_codes_clamping(u))
        else ENCODE_LOOP_FROM(prescaled_load(src, i, &st), minifloat_codes_in_range(u, &p))
        break;
    case LB_CODEC_E8M0: ENCODE_LOOP_FROM(prescaled_load(src, i, &st), e8m0_codes(u, &p)) break;
    case LB_CODEC_INT: ENCODE_LOOP_FROM(prescaled_load(src, i, &st), int_codes_in_range(x, &p)) break;
    case LB_CODEC_FP32: ENCODE_LOOP_FROM(prescaled_load(src, i, &st), fp32_codes(u, &p)) break;
    }
    if (i < n) { /* the tail lies in one block: scale it as block_div_clamp would, then encode */
        float tail[16];
        size_t b = i / ps->block;
        for (size_t k = i; k < n; k++) {
            float y = ps->add ? src[k] / ps->div[b] + ps->add[b] : src[k] / ps->div[b];
            tail[k - i] = y < ps->lo ? ps->lo : y > ps->hi ? ps->hi : y;
        }
        lb__encode_scalar(f, LB_SATURATE, tail, n - i, d);
    }
    return LB_ENCODE_OK;
}

/* ----- codes -> fp32 ----- */

static inline __m512i minifloat_values(__m512i c, const lb__dec_params *p)
{
    if (p->is_bf16) return _mm512_slli_epi32(c, 16);
    const int m = p->man_bits;
    __m512i sign = _mm512_slli_epi32(_mm512_and_si512(c, V1(p->sign_bit)), 31 - (p->exp_bits + m));
    __m512i mag = _mm512_and_si512(c, V1(p->mag_mask));
    __m512i expf = _mm512_srl_epi32(mag, _mm_cvtsi32_si128(m));
    __m512i man = _mm512_and_si512(mag, V1((1u << m) - 1));
    __m512i man_hi = _mm512_sll_epi32(man, _mm_cvtsi32_si128(23 - m));
    __m512i normal = _mm512_or_si512(_mm512_slli_epi32(_mm512_add_epi32(expf, V1(127 - p->bias)), 23), man_hi);
    /* man * 2^(1-bias-m) is exact and a normal fp32, so FTZ/DAZ cannot bite */
    __m512i sub = _mm512_castps_si512(_mm512_mul_ps(_mm512_cvtepi32_ps(man), _mm512_set1_ps(p->sub_scale)));
    __m512i res = _mm512_mask_mov_epi32(normal, _mm512_cmpeq_epi32_mask(expf, _mm512_setzero_si512()), sub);
    res = _mm512_or_si512(res, sign);
    __m512i special = _mm512_or_si512(_mm512_or_si512(sign, V1(0x7F800000)), man_hi);
    switch (p->specials) {
    case LB_SPECIALS_IEEE:
        res = _mm512_mask_mov_epi32(res, _mm512_cmpeq_epi32_mask(expf, V1((1u << p->exp_bits) - 1)), special);
        break;
    case LB_SPECIALS_FN:
        res = _mm512_mask_mov_epi32(res, _mm512_cmpeq_epi32_mask(mag, V1(p->mag_mask)), special);
        break;
    case LB_SPECIALS_FNUZ:
        res = _mm512_mask_mov_epi32(res, _mm512_cmpeq_epi32_mask(c, V1(p->sign_bit)), V1(0x7FC00000));
        break;
    case LB_SPECIALS_NONE: /* every code is a number */
    case LB_SPECIALS_E8M0: /* e8m0_values */
        break;
    }
    if (p->is_unsigned_float) /* ue4m3 codes with the sign bit set are not numbers */
        res = _mm512_mask_mov_epi32(res, _mm512_cmpgt_epi32_mask(c, V1(p->mag_mask)), V1(0x7FC00000));
    return res;
}

static inline __m512i e8m0_values(__m512i c)
{
    __m512i res = _mm512_slli_epi32(c, 23);
    res = _mm512_mask_mov_epi32(res, _mm512_cmpeq_epi32_mask(c, _mm512_setzero_si512()), V1(0x00400000));
    return _mm512_mask_mov_epi32(res, _mm512_cmpeq_epi32_mask(c, V1(0xFF)), V1(0x7FC00000));
}

static inline __m512i int_values(__m512i c, const lb__dec_params *p)
{
    __m128i cnt = _mm_cvtsi32_si128(p->int_shift);
    __m512i v = p->int_signed ? _mm512_sra_epi32(_mm512_sll_epi32(c, cnt), cnt) : c;
    return _mm512_castps_si512(_mm512_cvtepi32_ps(v));
}

#define DECODE_LOOP(VALUES)                                                           \
    for (; i + 16 <= n; i += 16) {                                                    \
        __m512i c = load16(f->bits, s);                                               \
        _mm512_storeu_si512(dst + i, VALUES);                                         \
        s += step;                                                                    \
    }

void lb__decode_avx512(const lb_format_info *f, const void *src, size_t n, float *dst)
{
    lb__dec_params p;
    lb__dec_params_init(f, &p);
    const uint8_t *s = src;
    const size_t step = lb_format_bytes(f->id, 16);
    size_t i = 0;
    switch (p.kind) {
    case LB_CODEC_MINIFLOAT: DECODE_LOOP(minifloat_values(c, &p)) break;
    case LB_CODEC_E8M0: DECODE_LOOP(e8m0_values(c)) break;
    case LB_CODEC_INT: DECODE_LOOP(int_values(c, &p)) break;
    case LB_CODEC_FP32: DECODE_LOOP(c) break;
    }
    lb__decode_scalar(f, s, n - i, dst + i);
}

#else /* no AVX-512 in this build: the scalar loops stand in */

size_t lb__encode_prescaled_avx512(const lb_format_info *f, const float *src, size_t n, const lb__prescale *ps, void *dst)
{
    (void)f, (void)src, (void)n, (void)ps, (void)dst; /* never called: lb__encode_prescaled_kernel says so */
    return LB_ENCODE_OK;
}

size_t lb__encode_avx512(const lb_format_info *f, lb_overflow mode, const float *src, size_t n, void *dst)
{
    return lb__encode_scalar(f, mode, src, n, dst);
}
void lb__decode_avx512(const lb_format_info *f, const void *src, size_t n, float *dst)
{
    lb__decode_scalar(f, src, n, dst);
}
#endif
