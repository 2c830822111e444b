/* The AVX-512 VNNI int8-activation row loop (qdot8.h's sums, bit for bit
 * the scalar reference), instantiated by qdot8_vnni.c and, with the VBMI
 * unpacking of fp4 codes, by qdot8_vnni_vbmi.c (compiled with VBMI and
 * called only where the CPU has it).
 *
 * A group is 64 bytes of a row in both layouts (128 4-bit elements, or
 * 64 int8 ones) and its 16 lanes are the 16 int32 lanes of a zmm:
 * vpdpbusd adds four byte products into each, so for 4-bit weights the
 * low nibbles (even elements, staged x's first 64 codes) and the high
 * ones (odd) give each lane its 8 elements in two instructions.
 * vpdpbusd multiplies unsigned bytes by signed ones: the weights are the
 * unsigned operand, u + c with c the set's offset (int4 + 8, uint4 + 0,
 * fp4 2v + 12; int8 codes xor 0x80 = + 128) and each lane's sum starts at
 * the staged -c * (lane sum of x), which makes it end exactly at P
 * (qdot8.h). Then one int->float conversion (exact: |P| < 2^24),
 * s = d * mw and an fma per lane. Rows in flight: 4 (2 for three or four
 * tokens, so the sums stay in the 32 registers).
 *
 * Memory: rows in flight are taken from R separate streams of the range
 * (see run()), each read front to back, with software prefetch a fixed
 * distance ahead in each; the unpacking is kept to three instructions
 * where it can be (unpack()), since a matvec from memory only reaches the
 * read bandwidth when the kernel alone runs well above it. */
#ifndef LB_KERNEL_QDOT8_VNNI_RUN_H
#define LB_KERNEL_QDOT8_VNNI_RUN_H

#include <immintrin.h>
#include <stdint.h>

#include "kernel/qdot8.h"
#include "kernel/row_streams.h"
#include "kernel/qdot_scales_avx512.h"
#include "kernel/sum16_avx512.h"
#include "quant/qkernels.h"

#define INL static inline __attribute__((always_inline))
#define RMAX 4

/* How a 64-byte chunk of weight codes becomes vpdpbusd's unsigned
 * operands (u + c): int8 codes xor 0x80; int4 and uint4 as (nibble xor c)
 * -- (v & 15) ^ 8 is v + 8 for a signed nibble v -- one vpternlogd each;
 * fp4 through the 16-value table (lb__qdot8_nibble_table), by vpshufb
 * after masking, or with VBMI by vpermb, which reads only an index's low
 * six bits, so the table repeated four times needs no mask. */
enum { LB__U8_INT8, LB__U8_NIBX, LB__U8_LUT, LB__U8_VBMI, LB__U8_SIX, LB__U8_FP8 };
/* two 4-bit codes per byte (groups of 128 elements in 64 bytes) */
#define NIB(U) ((U) == LB__U8_NIBX || (U) == LB__U8_LUT || (U) == LB__U8_VBMI)
/* bytes of codes per group of 16 lanes: fp6 e2m3 64 codes in 48 */
#define GROUP_BYTES(U) ((U) == LB__U8_SIX ? 48 : 64)
/* bytes of staged activations per group: two halves of 64 for 4-bit codes
 * (low, high nibbles) and for fp8 (bf16 words: pair operands A and B) */
#define ACT_BYTES(U) (NIB(U) || (U) == LB__U8_FP8 ? 128 : 64)

/* (a ^ b) & c */
#define LB__XOR_AND 0x28

INL void unpack(const int U, __m512i wb, __m512i lut, __m512i xorc, __m512i *ul, __m512i *uh)
{
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    switch (U) {
    case LB__U8_INT8: *ul = *uh = _mm512_xor_si512(wb, _mm512_set1_epi8((char)0x80)); return;
    case LB__U8_NIBX:
        *ul = _mm512_ternarylogic_epi32(wb, xorc, low4, LB__XOR_AND);
        *uh = _mm512_ternarylogic_epi32(_mm512_srli_epi16(wb, 4), xorc, low4, LB__XOR_AND);
        return;
    case LB__U8_LUT:
        *ul = _mm512_shuffle_epi8(lut, _mm512_and_si512(wb, low4));
        *uh = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(wb, 4), low4));
        return;
    case LB__U8_VBMI:
#if defined(__AVX512VBMI__)
        *ul = _mm512_permutexvar_epi8(wb, lut); /* bits 4-5 of the index pick a copy of the table */
        *uh = _mm512_permutexvar_epi8(_mm512_srli_epi16(wb, 4), lut);
#else
        *ul = *uh = lut; /* never instantiated without VBMI */
#endif
        return;
    case LB__U8_FP8: *ul = *uh = wb; return; /* never here: fp8 runs group_step_fp8 */
    case LB__U8_SIX: {
#if defined(__AVX512VBMI__)
        /* 64 codes in 48 bytes: vpermb puts each 8 codes' 6 bytes in a
         * qword, vpmultishiftqb moves code j to byte j (bits 6j .. 6j + 7),
         * vpermb looks u + off up by the code's low six bits */
        const __m512i spread = _mm512_set_epi64(0x00002F2E2D2C2B2Aull, 0x0000292827262524ull, 0x0000232221201F1Eull,
                                                0x00001D1C1B1A1918ull, 0x0000171615141312ull, 0x000011100F0E0D0Cull,
                                                0x00000B0A09080706ull, 0x0000050403020100ull);
        const __m512i at = _mm512_set1_epi64(0x2A241E18120C0600ll);
        *ul = *uh = _mm512_permutexvar_epi8(_mm512_multishift_epi64_epi8(at, _mm512_permutexvar_epi8(spread, wb)), lut);
#else
        *ul = *uh = lut; /* never instantiated without VBMI */
#endif
        return;
    }
    }
}

static void scale_avx512(float *w, size_t n, float a, float b)
{
    const __m512 av = _mm512_set1_ps(a), bv = _mm512_set1_ps(b);
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 k = (__mmask16)(n - i >= 16 ? 0xFFFF : (1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(w + i, k, _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, w + i), av), bv));
    }
}

/* (s * sm) * f for scales b .. b+15 (mask k); half: f != 1, f in hv (lb__qdot8_unit) */
INL __m512 scale_vector(const lb_format F, const int half, const uint8_t *codes, size_t b, __mmask16 k, __m512 smv,
                        __m512 hv)
{
    __m512 v = _mm512_mul_ps(lb__scale16_avx512(F, codes, b, k), smv);
    return half ? _mm512_mul_ps(v, hv) : v;
}

/* (s * sm) * f, or for FOLD (s * 2^-8) * (sm * f * 2^8), of the 16
 * scales i .. i+15 of codes (mask k) */
INL __m512 staged_scales(const lb_format F, const int FOLD, const uint8_t *codes, size_t i, __mmask16 k, __m512 smv,
                         __m512 hv, __m512 cv, int half)
{
    return FOLD ? _mm512_mul_ps(lb__ue4m3_16_over256_avx512(codes, i, k), cv)
                : scale_vector(F, half, codes, i, k, smv, hv);
}

/* Rows r .. r+n-1 of block scales of format F straight into their staged
 * rows, w = (decoded * sm) * f, 16 at a time; FOLD (UE4M3 only): w =
 * (decoded * 2^-8) * (sm * f * 2^8), one product instead of three, the
 * same float where fold_ue4m3() says. Returns the floats from one staged
 * row to the next:
 * - nb, the rows back to back, when every scale is finite: the n rows'
 *   codes are contiguous, so this is one pass of whole vectors (a row of
 *   18 scales took two vectors, a masked one and a tail: per row, staging
 *   cost a third of what mxfp4's dot products did on 576-wide rows). A
 *   kernel loading 16 from a row's last group reads into the next row,
 *   and past the last row into 16 zeros: those lanes hold no element
 *   (sums of 0), and 0 times a finite scale adds +0 to a lane that
 *   started at +0, whatever the scale.
 * - else st (lb__qdot8_stage_stride), each row on its own with its last
 *   scale repeated 16 times past it, so no NaN or infinity meets another
 *   row's zeros; also where a row is whole vectors (nb a multiple of 16):
 *   back to back they gain nothing. */
INL size_t stage_rows(const lb_format F, const int FOLD, const lb__qmat *m, size_t r, size_t n, float *mw)
{
    const size_t nb = m->blocks, st = lb__qdot8_stage_stride(m);
    const float f = lb__qdot8_unit(m->element);
    const int half = f != 1.0f;
    const __m512 smv = _mm512_set1_ps(m->scale_mul), hv = _mm512_set1_ps(f);
    const __m512 cv = _mm512_set1_ps(m->scale_mul * (f * 256.0f));
    const size_t row_codes = lb_format_bytes(F, nb); /* whole bytes: every scale format is */
    const uint8_t *codes = m->scales + r * row_codes;
    const size_t total = nb % 16 ? n * nb : 0; /* rows of whole vectors gain nothing back to back */
    __mmask16 bad = nb % 16 == 0;
    size_t i = 0;
    for (; i + 16 <= total; i += 16) {
        __m512 v = staged_scales(F, FOLD, codes, i, 0xFFFF, smv, hv, cv, half);
        bad |= _mm512_fpclass_ps_mask(v, 0x99); /* NaN or infinity */
        _mm512_storeu_ps(mw + i, v);
    }
    if (i < total) {
        __mmask16 k = (__mmask16)((1u << (total - i)) - 1);
        __m512 v = staged_scales(F, FOLD, codes, i, k, smv, hv, cv, half);
        bad |= _mm512_mask_fpclass_ps_mask(k, v, 0x99);
        _mm512_mask_storeu_ps(mw + i, k, v);
    }
    if (!bad) {
        _mm512_storeu_ps(mw + total, _mm512_setzero_ps());
        return nb;
    }
    const __m512i last = _mm512_set1_epi32((int)((nb - 1) % 16)); /* lane of the last scale in its vector */
    for (size_t j = 0; j < n; j++) {
        const uint8_t *c = m->scales + (r + j) * row_codes;
        float *w = mw + j * st;
        __m512 v = _mm512_setzero_ps();
        size_t b = 0;
        for (; b + 16 <= nb; b += 16) { /* whole vectors first: no mask to compute */
            v = staged_scales(F, FOLD, c, b, 0xFFFF, smv, hv, cv, half);
            _mm512_storeu_ps(w + b, v);
        }
        if (b < nb) {
            __mmask16 k = (__mmask16)((1u << (nb - b)) - 1);
            v = staged_scales(F, FOLD, c, b, k, smv, hv, cv, half);
            _mm512_storeu_ps(w + b, v);
        }
        _mm512_storeu_ps(w + nb, _mm512_permutexvar_ps(last, v));
    }
    return st;
}

/* Whether (s * sm) * f equals (s * 2^-8) * (sm * f * 2^8) for every UE4M3
 * scale s (f = 1, 1/2 or 1/8): powers of two move through a product unchanged
 * while nothing leaves the normal range, and s is 2^-9 .. 448, so
 * 2^-100 <= |sm| <= 2^100 keeps every step normal and finite (a global
 * scale is ~1e-4 .. 1; outside that, the three products as written). */
static int fold_ue4m3(float sm)
{
    float a = sm < 0 ? -sm : sm;
    return a >= 0x1p-100f && a <= 0x1p100f;
}

/* Zero points of 4-bit codes go into the unsigned operand instead of a
 * product per token: a lane's weights become u' = (q + c) + (16 - c - z),
 * that is q - z + 16, in 1 .. 31 for int4 and uint4 codes and zero points
 * (q - z in -15 .. 15), and its sum starts at -16 * (lane sum of x), so it
 * ends at the same exact P = sum of x * (q - z) (qdot8.h). One byte add
 * per half row-group replaces a vpmulld and a subtraction per token (alone
 * that changed little: the scalar zero-point staging was what bound the
 * int4:g128:affine loop, see stage_zero_nibbles). Staged as the byte
 * 16 - c - z repeated four times in each int32, for vpaddb. */
#define LB__ZP_BIAS 16
_Static_assert(LB__ZP_BIAS == 1 << 4, "group_step starts the lane sums at -(xs << 4)");

static void stage_zero_bytes(size_t n, size_t st, int off, int32_t *zp)
{
    const __m512i k = _mm512_set1_epi32(LB__ZP_BIAS - off), rep = _mm512_set1_epi32(0x01010101);
    for (size_t i = 0; i < n; i++)
        for (size_t b = 0; b < st; b += 16) { /* the whole stride: pads become bytes too, added to codes of x = 0 */
            int32_t *z = zp + i * st + b;
            _mm512_storeu_si512(z, _mm512_mullo_epi32(_mm512_sub_epi32(k, _mm512_loadu_si512(z)), rep));
        }
}

/* The same bytes straight from a row of 4-bit zero points (two per byte,
 * low first; int4 sign-extended by (c ^ 8) - 8), 16 blocks per step:
 * the scalar staging (qdot8.c) took a fifth of the int4:g128:affine
 * loop's time. Lanes past the row's last block get bytes of whatever the
 * masked load left (zero codes): added to codes of x = 0 only. */
static void stage_zero_nibbles(const lb__qmat *m, size_t r, size_t n, int32_t *zp, int off)
{
    const size_t nb = m->blocks, st = lb__qdot8_stage_stride(m);
    const __m128i low4 = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8), k = _mm_set1_epi8((char)(LB__ZP_BIAS - off));
    const __m128i sign = m->element == LB_FMT_UINT4 ? _mm_setzero_si128() : eight;
    const __m512i rep = _mm512_set1_epi32(0x01010101);
    for (size_t i = 0; i < n; i++) {
        const uint8_t *zrow = m->zero_points + (r + i) * m->zp_row_bytes;
        for (size_t b = 0; b < nb; b += 16) {
            size_t bytes = nb - b >= 16 ? 8 : (nb - b + 1) / 2;
            __m128i v = _mm_maskz_loadu_epi8((__mmask16)((1u << bytes) - 1), zrow + b / 2);
            __m128i z = _mm_unpacklo_epi8(_mm_and_si128(v, low4), _mm_and_si128(_mm_srli_epi16(v, 4), low4));
            z = _mm_sub_epi8(_mm_xor_si128(z, sign), sign); /* int4: sign-extended; uint4: as is */
            _mm512_storeu_si512(zp + i * st + b, _mm512_mullo_epi32(_mm512_cvtepu8_epi32(_mm_sub_epi8(k, z)), rep));
        }
    }
}

/* The weight scales of rows r .. r+n-1: qdot8.c's staging, with the
 * common layout (a row of block scales per row) decoded here (the same
 * values); the zero points, if any, are staged after (for 4-bit codes as
 * the bytes the kernel adds), a row every lb__qdot8_stage_stride. Returns
 * the scales' row stride (stage_rows). */
static size_t stage(const int U, const lb__qmat *m, size_t r, size_t n, float *mw, int32_t *zp, int off)
{
    const size_t st = lb__qdot8_stage_stride(m);
    size_t mst = st;
    if (m->one_scale || m->block_rows > 1 || m->blocks <= 1) {
        mst = lb__qdot8_stage_rows(m, LB_ISA_AVX512, scale_avx512, NULL, r, n, mw, zp);
    } else {
#define STAGE_ROWS(F) mst = stage_rows(F, 0, m, r, n, mw) /* lb__qdot8_supported takes scale formats only */
        if (m->scale_format == LB_FMT_UE4M3 && fold_ue4m3(m->scale_mul))
            mst = stage_rows(LB_FMT_UE4M3, 1, m, r, n, mw);
        else
            LB__SCALE_FORMAT_SWITCH(m->scale_format, STAGE_ROWS)
#undef STAGE_ROWS
        if (m->zero_points && NIB(U)) {
            stage_zero_nibbles(m, r, n, zp, off);
            return mst;
        }
        if (m->zero_points) lb__qdot8_stage_zero_points(m, r, n, zp);
    }
    if (m->zero_points && NIB(U)) stage_zero_bytes(n, st, off, zp);
    return mst;
}

/* A call's staged activations, per token: codes, lane sums (offset and
 * plain) and scales, each at its group 0. */
typedef struct act8_tokens {
    const int8_t *q[LB__QDOT_MAX_NX];
    const int32_t *cxs[LB__QDOT_MAX_NX], *xs[LB__QDOT_MAX_NX];
    const float *d[LB__QDOT_MAX_NX];
} act8_tokens;

/* Group g of the R rows in flight (masked: the rows' last, partial
 * group): their 64 bytes each unpacked, dotted with every token's staged
 * codes and added to the sums. b0: the group's first block. */
INL void group_step(const int U, const int aff, const size_t nx, const size_t R, const int masked,
                    const act8_tokens *x, size_t g, size_t b0, const uint8_t *const *row, const float *const *mwp,
                    const int32_t *const *zpp, __m512i idx, __m512i lut, __m512i xorc, __mmask64 tail,
                    __m512 acc[RMAX][LB__QDOT_MAX_NX])
{
    const int nib = NIB(U);
    const size_t G = ACT_BYTES(U), GB = GROUP_BYTES(U);
    __m512i xl[LB__QDOT_MAX_NX], xh[LB__QDOT_MAX_NX], cx[LB__QDOT_MAX_NX], xs[LB__QDOT_MAX_NX];
    __m512 dv[LB__QDOT_MAX_NX];
    _Pragma("GCC unroll 8")
    for (size_t t = 0; t < nx; t++) {
        xl[t] = _mm512_load_si512(x->q[t] + g * G);
        xh[t] = nib ? _mm512_load_si512(x->q[t] + g * G + 64) : xl[t];
        xs[t] = aff ? _mm512_load_si512(x->xs[t] + g * LB__QDOT8_LANES) : idx;
        cx[t] = aff && nib ? _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(xs[t], 4)) /* -16 * xs */
                           : _mm512_load_si512(x->cxs[t] + g * LB__QDOT8_LANES);
        dv[t] = _mm512_load_ps(x->d[t] + g * LB__QDOT8_LANES);
    }
    _Pragma("GCC unroll 8")
    for (size_t i = 0; i < R; i++) {
        __m512i wb = masked ? _mm512_maskz_loadu_epi8(tail, row[i] + g * GB)
                     : GB < 64 ? _mm512_maskz_loadu_epi8(_cvtu64_mask64(~0ull >> (64 - GB)), row[i] + g * GB)
                               : _mm512_loadu_si512(row[i] + g * GB);
        __m512i ul, uh;
        unpack(U, wb, lut, xorc, &ul, &uh);
        __m512 mwv = _mm512_permutexvar_ps(idx, _mm512_loadu_ps(mwp[i] + b0));
        __m512i zv = aff ? _mm512_permutexvar_epi32(idx, _mm512_loadu_si512(zpp[i] + b0)) : idx;
        if (aff && nib) ul = _mm512_add_epi8(ul, zv), uh = _mm512_add_epi8(uh, zv); /* q - z + 16 */
        _Pragma("GCC unroll 8")
        for (size_t t = 0; t < nx; t++) {
            __m512i p = _mm512_dpbusd_epi32(cx[t], ul, xl[t]); /* from -c * (lane sum of x) */
            if (nib) p = _mm512_dpbusd_epi32(p, uh, xh[t]);
            if (aff && !nib) p = _mm512_sub_epi32(p, _mm512_mullo_epi32(zv, xs[t]));
            acc[i][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(dv[t], mwv), acc[i][t]);
        }
    }
}

#if defined(__AVX512BF16__) && defined(__AVX512VBMI__)
/* fp8 (qdot8.h): the bf16 of a code's magnitude looked up byte by byte
 * (vpermi2b reads an index's low seven bits: 128-entry tables of the low
 * and the high bytes, t[0..1] and t[2..3]), the sign put into the high
 * byte, and the bytes interleaved within each 128-bit lane: operand A
 * holds elements 16L .. 16L + 7 of run L, B 16L + 8 .. 16L + 15, in the
 * order the activations were staged (lb__qdot8_bf16_pos). */
INL void fp8_pairs(__m512i wb, const __m512i t[4], __m512i *A, __m512i *B)
{
    const __m512i lo = _mm512_permutex2var_epi8(t[0], wb, t[1]);
    __m512i hi = _mm512_permutex2var_epi8(t[2], wb, t[3]);
    hi = _mm512_ternarylogic_epi32(hi, wb, _mm512_set1_epi8((char)0x80), 0xF8); /* hi | (wb & 0x80) */
    *A = _mm512_unpacklo_epi8(lo, hi);
    *B = _mm512_unpackhi_epi8(lo, hi);
}

/* group_step for fp8: P = vdpbf16ps(vdpbf16ps(+0, A, xA), B, xB), then
 * the fma with s = d * mw as for the integer sums. */
INL void group_step_fp8(const size_t nx, const size_t R, const int masked, const act8_tokens *x, size_t g, size_t b0,
                        const uint8_t *const *row, const float *const *mwp, __m512i idx, const __m512i tables[4],
                        __mmask64 tail, __m512 acc[RMAX][LB__QDOT_MAX_NX])
{
    __m512i xa[LB__QDOT_MAX_NX], xb[LB__QDOT_MAX_NX];
    __m512 dv[LB__QDOT_MAX_NX];
    _Pragma("GCC unroll 8")
    for (size_t t = 0; t < nx; t++) {
        xa[t] = _mm512_load_si512(x->q[t] + g * 128);
        xb[t] = _mm512_load_si512(x->q[t] + g * 128 + 64);
        dv[t] = _mm512_load_ps(x->d[t] + g * LB__QDOT8_LANES);
    }
    _Pragma("GCC unroll 8")
    for (size_t i = 0; i < R; i++) {
        __m512i wb = masked ? _mm512_maskz_loadu_epi8(tail, row[i] + g * 64) : _mm512_loadu_si512(row[i] + g * 64);
        __m512i A, B;
        fp8_pairs(wb, tables, &A, &B);
        __m512 mwv = _mm512_permutexvar_ps(idx, _mm512_loadu_ps(mwp[i] + b0));
        _Pragma("GCC unroll 8")
        for (size_t k = 0; k < nx; k++) {
            __m512 p = _mm512_dpbf16_ps(_mm512_setzero_ps(), (__m512bh)A, (__m512bh)xa[k]);
            p = _mm512_dpbf16_ps(p, (__m512bh)B, (__m512bh)xb[k]);
            acc[i][k] = _mm512_fmadd_ps(p, _mm512_mul_ps(dv[k], mwv), acc[i][k]);
        }
    }
}
#endif

/* Group g of the rows in flight with unpacking U: group_step, or for fp8
 * group_step_fp8 (compiled where the file has BF16 and VBMI). */
INL void step(const int U, const int aff, const size_t nx, const size_t R, const int masked, const act8_tokens *x,
              size_t g, size_t b0, const uint8_t *const *row, const float *const *mwp, const int32_t *const *zpp,
              __m512i idx, __m512i lut, __m512i xorc, const __m512i fp8t[4], __mmask64 tail,
              __m512 acc[RMAX][LB__QDOT_MAX_NX])
{
#if defined(__AVX512BF16__) && defined(__AVX512VBMI__)
    if (U == LB__U8_FP8) {
        group_step_fp8(nx, R, masked, x, g, b0, row, mwp, idx, fp8t, tail, acc);
        return;
    }
#else
    (void)fp8t;
#endif
    group_step(U, aff, nx, R, masked, x, g, b0, row, mwp, zpp, idx, lut, xorc, tail, acc);
}

/* Rows in flight: row k of each of R streams of the range (row_streams.h),
 * each prefetched a line per group; the scales are staged per stream,
 * STAGE_K rows at a time. */
#define STAGE_K (LB__QDOT8_STAGE_ROWS / RMAX)
#define SCALES_AHEAD 4 /* staging batches whose scales are asked for ahead */

/* Rows r0 .. r1-1 times tokens t0 .. t0+nx-1 with unpacking U (aff: zero
 * points). off: the set's offset for m's element (lb__qdot8_set.offset). */
INL void run(const int U, const lb__qmat *m, const lb__act8 *a, size_t t0, const size_t nx, size_t r0, size_t r1,
             float *y, size_t ldy, void *scratch, const int aff, const int off)
{
    const size_t R = nx <= 2 ? RMAX : RMAX / 2;
    const size_t st = lb__qdot8_stage_stride(m), groups = a->groups, G = NIB(U) ? 128 : 64, GB = GROUP_BYTES(U);
    __m512i fp8t[4] = {0}; /* fp8: the bf16 byte tables of fp8_pairs */
    if (U == LB__U8_FP8) {
        uint8_t local[256];
        const uint8_t *tb = lb__qdot8_bf16_tables(m->element, local);
        for (int i = 0; i < 4; i++) fp8t[i] = _mm512_loadu_si512(tb + 64 * i);
    }
    float *mw = scratch;
    int32_t *zp = (int32_t *)((uint8_t *)scratch + (LB__QDOT8_STAGE_ROWS * st * sizeof(float) + 63) / 64 * 64);
    int32_t lb[LB__QDOT8_LANES];
    lb__qdot8_lane_blocks(m, lb);
    const __m512i idx = _mm512_loadu_si512(lb);
    uint8_t lut64[64];
    if (U == LB__U8_SIX) lb__qdot8_code_table(m->element, off, lut64, 64);
    else lb__qdot8_nibble_table(m->element, off, lut64);
    const __m512i lut = U == LB__U8_SIX ? _mm512_loadu_si512(lut64)
                                        : _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)lut64));
    const __m512i xorc = _mm512_set1_epi8((char)off);
    const lb__qdot8_geom geo = lb__qdot8_geometry(m, groups, G);
    const size_t gmul = geo.gmul, gdiv = geo.gdiv, whole = geo.whole;
    const size_t rest = m->row_bytes - whole * GB; /* the partial group's bytes, if any */
    const __mmask64 tail = _cvtu64_mask64(~0ull >> (64 - (rest && rest < GB ? rest : GB)));
    act8_tokens x;
    _Pragma("GCC unroll 8")
    for (size_t t = 0; t < nx; t++) {
        x.q[t] = a->q + (t0 + t) * a->stride;
        x.cxs[t] = a->cxs + (t0 + t) * a->lanes;
        x.xs[t] = aff ? a->xs + (t0 + t) * a->lanes : NULL;
        x.d[t] = a->d + (t0 + t) * a->lanes;
    }
    lb__row_streams rs;
    lb__row_streams_init(&rs, m, R, r0, r1);
    for (size_t i = 0; i < R; i++)
        for (size_t b = 1; b <= SCALES_AHEAD; b++) lb__prefetch_scale_rows(m, m->blocks, rs.first[i] + b * STAGE_K, STAGE_K);
    size_t mst[RMAX] = {0}; /* each stream's staged scale rows: floats apart */
    for (size_t k = 0; k < rs.per; k++) {
        if (k % STAGE_K == 0)
            for (size_t i = 0; i < R; i++) {
                if (k >= rs.len[i]) continue;
                size_t cnt = rs.len[i] - k < STAGE_K ? rs.len[i] - k : STAGE_K;
                lb__prefetch_scale_rows(m, m->blocks, rs.first[i] + k + (SCALES_AHEAD + 1) * STAGE_K, STAGE_K);
                mst[i] = stage(U, m, rs.first[i] + k, cnt, mw + i * STAGE_K * st, zp + i * STAGE_K * st, off);
            }
        /* row k of each stream; a stream that has ended repeats the first's
         * row (its sums are dropped) */
        const uint8_t *row[RMAX];
        const float *mwp[RMAX];
        const int32_t *zpp[RMAX];
        _Pragma("GCC unroll 8")
        for (size_t i = 0; i < R; i++) {
            size_t j = lb__row_stream_at(&rs, i, k);
            row[i] = m->data + (rs.first[j] + k) * m->row_bytes;
            mwp[i] = mw + j * STAGE_K * st + k % STAGE_K * mst[j];
            zpp[i] = zp + (j * STAGE_K + k % STAGE_K) * st;
        }
        __m512 acc[RMAX][LB__QDOT_MAX_NX];
        _Pragma("GCC unroll 8")
        for (size_t i = 0; i < R; i++)
            _Pragma("GCC unroll 8")
            for (size_t t = 0; t < nx; t++) acc[i][t] = _mm512_setzero_ps();
        /* whole groups with plain loads, then the partial one (if any) */
        size_t g = 0, b0 = 0, in_block = 0; /* b0 = g * gmul / gdiv, counted */
        for (; g < whole; g++, in_block = in_block + 1 == gdiv ? 0 : in_block + 1, b0 += in_block ? 0 : gmul) {
            _Pragma("GCC unroll 8")
            for (size_t i = 0; i < R; i++) _mm_prefetch((const char *)row[i] + rs.ahead + g * GB, _MM_HINT_T1);
            step(U, aff, nx, R, 0, &x, g, b0, row, mwp, zpp, idx, lut, xorc, fp8t, tail, acc);
        }
        if (g < groups) {
            _Pragma("GCC unroll 8")
            for (size_t i = 0; i < R; i++) _mm_prefetch((const char *)row[i] + rs.ahead + g * GB, _MM_HINT_T1);
            step(U, aff, nx, R, 1, &x, g, b0, row, mwp, zpp, idx, lut, xorc, fp8t, tail, acc);
        }
        _Pragma("GCC unroll 8")
        for (size_t t = 0; t < nx; t++) {
            float sums[4];
            _mm_storeu_ps(sums, lb__sum16f_x4_avx512(acc[0][t], acc[1][t], acc[R > 2 ? 2 : 0][t], acc[R > 3 ? 3 : 1][t]));
            for (size_t i = 0; i < R; i++)
                if (k < rs.len[i]) y[t * ldy + rs.first[i] + k] = sums[i];
        }
    }
}

/* The instances of one unpacking: (zero points or not) x (tokens 1..4),
 * and NAME(m, a, t0, nx, r0, r1, y, ldy, scratch, off) picking one. */
#define LB__VNNI_INST(U, AFF, NX)                                                                                \
    static void run_##U##_##AFF##_##NX(const lb__qmat *m, const lb__act8 *a, size_t t0, size_t r0, size_t r1, \
                                       float *y, size_t ldy, void *scratch, int off)                           \
    {                                                                                                           \
        run(U, m, a, t0, NX, r0, r1, y, ldy, scratch, AFF, off);                                                \
    }
#define LB__VNNI_INST4(U, AFF) LB__VNNI_INST(U, AFF, 1) LB__VNNI_INST(U, AFF, 2) LB__VNNI_INST(U, AFF, 3) LB__VNNI_INST(U, AFF, 4)
#define LB__VNNI_RUNS(U)                                                                                           \
    LB__VNNI_INST4(U, 0)                                                                                           \
    LB__VNNI_INST4(U, 1)                                                                                           \
    static void runs_##U(const lb__qmat *m, const lb__act8 *a, size_t t0, size_t nx, size_t r0, size_t r1, float *y, \
                         size_t ldy, void *scratch, int off)                                                       \
    {                                                                                                              \
        typedef void (*run_fn)(const lb__qmat *, const lb__act8 *, size_t, size_t, size_t, float *, size_t, void *, \
                               int);                                                                               \
        static const run_fn fns[2][LB__QDOT_MAX_NX] = {                                                            \
            {run_##U##_0_1, run_##U##_0_2, run_##U##_0_3, run_##U##_0_4},                                          \
            {run_##U##_1_1, run_##U##_1_2, run_##U##_1_3, run_##U##_1_4}};                                         \
        fns[m->zero_points != NULL][nx - 1](m, a, t0, r0, r1, y, ldy, scratch, off);                               \
    }

#endif
