/* The AVX2 K-quant row loops (qdot8k_avx2.c's comment: qdot8.h's K-quant
 * sums, bit for bit the scalar reference), instantiated by qdot8k_avx2.c
 * and, with each lane's four byte products summed by AVX-VNNI's 256-bit
 * vpdpbusd (LB__QDOT8_AVX_VNNI 1) instead of vpmaddubsw and vpmaddwd, by
 * qdot8_avxvnni.c: the operands never saturate vpmaddubsw, and vpdpbusd
 * does not saturate, so the int32 sums are the same. Define
 * LB__QDOT8_AVX_VNNI (0 or 1) before including. */
#ifndef LB_KERNEL_QDOT8K_AVX2_RUN_H
#define LB_KERNEL_QDOT8K_AVX2_RUN_H

#include <immintrin.h>

#include "kernel/qdot8.h"
#include "kernel/qdot8k_x86.h"

/* Per int32 lane, the sum of its four byte products u * x (u unsigned, x
 * signed), and the same added to acc. */
INL __m256i dot4(__m256i u, __m256i x)
{
#if LB__QDOT8_AVX_VNNI
    return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, x);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), _mm256_set1_epi16(1));
#endif
}

INL __m256i dot4_acc(__m256i acc, __m256i u, __m256i x)
{
#if LB__QDOT8_AVX_VNNI
    return _mm256_dpbusd_avx_epi32(acc, u, x);
#else
    return _mm256_add_epi32(dot4(u, x), acc);
#endif
}

INL void krun45(const lb__qmat *m, const lb__act8 *a, size_t t0, const size_t nx, size_t r0, size_t r1, float *y,
                size_t ldy, const int five)
{
    const size_t R = nx == 1 ? 4 : nx == 2 ? 2 : 1;
    const size_t nsb = m->cols / 256, nblk = m->cols / 32, bb = m->ggml_block_bytes, qs_at = five ? 48 : 16;
    const __m256i low4 = _mm256_set1_epi8(0x0F), sixteen = _mm256_set1_epi8(16);
    kstreams ks;
    kstreams_init(&ks, m, R, r0, r1, nsb);
    for (size_t k = 0; k < ks.s.per; k++) {
        const uint8_t *row[RMAX];
        kstream_rows(m, &ks, R, k, row);
        __m256 acc[RMAX][LB__QDOT_MAX_NX][2], macc[RMAX][LB__QDOT_MAX_NX];
        _Pragma("GCC unroll 8")
        for (size_t i = 0; i < R; i++)
            _Pragma("GCC unroll 8")
            for (size_t t = 0; t < nx; t++)
                acc[i][t][0] = acc[i][t][1] = macc[i][t] = _mm256_setzero_ps();
        for (size_t s = 0; s < nsb; s++) {
            kprefetch(&ks, R, row, s);
            _Pragma("GCC unroll 8")
            for (size_t i = 0; i < R; i++) {
                const uint8_t *b = row[i] + s * bb, *qs = b + qs_at;
                uint64_t sc, mn;
                lb__qdot8k_scale_min(b + 4, &sc, &mn);
                const __m256 dsc = bytes_to_ps(sc, fp16_at(b)), dmn = bytes_to_ps(mn, fp16_at(b + 2));
                __m256i qh = _mm256_setzero_si256();
                if (five) qh = _mm256_loadu_si256((const __m256i *)(b + 16));
                _Pragma("GCC unroll 8")
                for (size_t t = 0; t < nx; t++)
                    macc[i][t] = _mm256_fmadd_ps(_mm256_loadu_ps(a->e + (t0 + t) * nblk + 8 * s), dmn, macc[i][t]);
                _Pragma("GCC unroll 2")
                for (size_t h = 0; h < 2; h++)
                    _Pragma("GCC unroll 2")
                    for (size_t n = 0; n < 2; n++)
                        _Pragma("GCC unroll 2")
                        for (size_t c = 0; c < 2; c++) {
                            const size_t ch = 2 * h + c, j = 2 * ch + n;
                            const __m256i wb = _mm256_loadu_si256((const __m256i *)(qs + 32 * ch));
                            __m256i u = _mm256_and_si256(n ? _mm256_srli_epi16(wb, 4) : wb, low4);
                            if (five) {
                                const __m256i bit = _mm256_set1_epi8((char)(1 << j));
                                u = _mm256_add_epi8(u, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bit), bit),
                                                                        sixteen));
                            }
                            const __m256 sv = _mm256_permutevar8x32_ps(dsc, _mm256_set1_epi32((int)j));
                            _Pragma("GCC unroll 8")
                            for (size_t t = 0; t < nx; t++) {
                                const size_t g = 2 * s + h;
                                const __m256i xv =
                                    _mm256_load_si256((const __m256i *)(a->q + (t0 + t) * a->stride + g * 128 + n * 64 + c * 32));
                                const __m256 dl = _mm256_load_ps(a->d + (t0 + t) * a->lanes + (2 * g + n) * 16 + 8 * c);
                                const __m256i p = dot4(u, xv);
                                acc[i][t][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(dl, sv), acc[i][t][c]);
                            }
                        }
            }
        }
        _Pragma("GCC unroll 8")
        for (size_t i = 0; i < R; i++)
            _Pragma("GCC unroll 8")
            for (size_t t = 0; t < nx; t++) {
                _Alignas(32) float s16[16], s8[8];
                _mm256_store_ps(s16, acc[i][t][0]);
                _mm256_store_ps(s16 + 8, acc[i][t][1]);
                _mm256_store_ps(s8, macc[i][t]);
                if (k < ks.s.len[i]) y[t * ldy + ks.s.first[i] + k] = lb__sum16f(s16) - lb__qdot8k_sum8(s8);
            }
    }
}

/* Q6_K: 32 ql bytes at 64h + 32c, nibble n, are elements 128h + 64n + 32c
 * .. + 31 (staged in order), lanes 8c .. 8c + 7 of (h, n); their high two
 * bits are bits 2(2n + c) of qh[32h ..]; u = 0 .. 63 (a pair at most
 * 2 * 63 * 127 = 16002), each lane's sum plus the staged -32 * S4. Lane
 * l' of the ymm has sub-block 8h + 4n + 2c + l' / 4. */
INL void krun6(const lb__qmat *m, const lb__act8 *a, size_t t0, const size_t nx, size_t r0, size_t r1, float *y,
               size_t ldy)
{
    const size_t R = nx == 1 ? 4 : nx == 2 ? 2 : 1;
    const size_t nsb = m->cols / 256, bb = m->ggml_block_bytes;
    const __m256i low4 = _mm256_set1_epi8(0x0F), three = _mm256_set1_epi8(3);
    kstreams ks;
    kstreams_init(&ks, m, R, r0, r1, nsb);
    for (size_t k = 0; k < ks.s.per; k++) {
        const uint8_t *row[RMAX];
        kstream_rows(m, &ks, R, k, row);
        __m256 acc[RMAX][LB__QDOT_MAX_NX][2];
        _Pragma("GCC unroll 8")
        for (size_t i = 0; i < R; i++)
            _Pragma("GCC unroll 8")
            for (size_t t = 0; t < nx; t++) acc[i][t][0] = acc[i][t][1] = _mm256_setzero_ps();
        for (size_t s = 0; s < nsb; s++) {
            kprefetch(&ks, R, row, s);
            _Pragma("GCC unroll 8")
            for (size_t i = 0; i < R; i++) {
                const uint8_t *b = row[i] + s * bb; /* ql[128] qh[64] scales[16] d[2] */
                const __m128i sc8 = _mm_loadu_si128((const __m128i *)(b + 192));
                const __m256 d = _mm256_set1_ps(fp16_at(b + 208));
                const __m256 dsc[2] = {_mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc8)), d),
                                       _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc8, 8))), d)};
                _Pragma("GCC unroll 2")
                for (size_t h = 0; h < 2; h++) {
                    const __m256i qh = _mm256_loadu_si256((const __m256i *)(b + 128 + 32 * h));
                    _Pragma("GCC unroll 2")
                    for (size_t n = 0; n < 2; n++)
                        _Pragma("GCC unroll 2")
                        for (size_t c = 0; c < 2; c++) {
                            const __m256i wb = _mm256_loadu_si256((const __m256i *)(b + 64 * h + 32 * c));
                            const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qh, (int)(2 * (2 * n + c))), three);
                            const __m256i u = _mm256_or_si256(_mm256_and_si256(n ? _mm256_srli_epi16(wb, 4) : wb, low4),
                                                              _mm256_slli_epi16(hi, 4));
                            const int k0 = (int)(4 * n + 2 * c);
                            const __m256 sv = _mm256_permutevar8x32_ps(
                                dsc[h], _mm256_setr_epi32(k0, k0, k0, k0, k0 + 1, k0 + 1, k0 + 1, k0 + 1));
                            _Pragma("GCC unroll 8")
                            for (size_t t = 0; t < nx; t++) {
                                const size_t e = 256 * s + 128 * h + 64 * n + 32 * c;
                                const __m256i xv = _mm256_load_si256((const __m256i *)(a->q + (t0 + t) * a->stride + e));
                                const __m256i cx = _mm256_load_si256((const __m256i *)(a->cxs + (t0 + t) * a->lanes + e / 4));
                                const __m256 dl = _mm256_load_ps(a->d + (t0 + t) * a->lanes + e / 4);
                                const __m256i p = dot4_acc(cx, u, xv);
                                acc[i][t][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(dl, sv), acc[i][t][c]);
                            }
                        }
                }
            }
        }
        _Pragma("GCC unroll 8")
        for (size_t i = 0; i < R; i++)
            _Pragma("GCC unroll 8")
            for (size_t t = 0; t < nx; t++) {
                _Alignas(32) float s16[16];
                _mm256_store_ps(s16, acc[i][t][0]);
                _mm256_store_ps(s16 + 8, acc[i][t][1]);
                if (k < ks.s.len[i]) y[t * ldy + ks.s.first[i] + k] = lb__sum16f(s16);
            }
    }
}

/* 16 in byte i of 32 where bit i of m is set, else 0. */
INL __m256i bits_as_16(uint32_t m)
{
    const __m256i pick = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, /* byte i / 8 of m */
                                          2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull); /* bit i % 8 */
    const __m256i v = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)m), pick), bit);
    return _mm256_and_si256(_mm256_cmpeq_epi8(v, bit), _mm256_set1_epi8(16));
}

/* IQ4_XS / IQ4_NL / Q4_0 / Q5_0: blocks 4g + 2c, 4g + 2c + 1 as one ymm,
 * lanes 8c .. 8c + 7, both nibbles into each lane's sum; the values
 * (vpshufb of the type's, signed; Q5_0's plus 16 where its fifth bit is
 * set) times the activations by vpmaddubsw on |v| and x with v's sign (a
 * pair at most 2 * 127 * 127 = 32258 < 2^15), no offset. */
INL void krun_iq4(const lb__qmat *m, const lb__act8 *a, size_t t0, const size_t nx, size_t r0, size_t r1, float *y,
                  size_t ldy, const int layout)
{
    const int blocked = layout != LB__IQ4_XS_SB, five = layout == LB__Q5_22;
    const size_t R = nx == 1 ? 4 : nx == 2 ? 2 : 1, nblk = m->cols / 32, groups = (nblk + 3) / 4;
    const __m256i lut = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)lb__qdot8k_values(m->ggml)));
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    kstreams ks;
    kstreams_init(&ks, m, R, r0, r1, groups);
    for (size_t k = 0; k < ks.s.per; k++) {
        const uint8_t *row[RMAX];
        kstream_rows(m, &ks, R, k, row);
        __m256 acc[RMAX][LB__QDOT_MAX_NX][2];
        _Pragma("GCC unroll 8")
        for (size_t i = 0; i < R; i++)
            _Pragma("GCC unroll 8")
            for (size_t t = 0; t < nx; t++) acc[i][t][0] = acc[i][t][1] = _mm256_setzero_ps();
        __m256 xs8[RMAX] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
        for (size_t g = 0; g < groups; g++) {
            kprefetch(&ks, R, row, g);
            _Pragma("GCC unroll 8")
            for (size_t i = 0; i < R; i++) {
                const uint8_t *codes[4];
                uint32_t qh[4] = {0, 0, 0, 0};
                __m256 s8; /* the scales of blocks first + 0 .. 3 */
                int first = 0;
                if (blocked) {
                    s8 = _mm256_castps128_ps256(block32_group(row[i], g, nblk, five, codes, qh));
                } else { /* the super-block's eight scales, decoded at its first half */
                    const lb__block_iq4_xs *b = (const lb__block_iq4_xs *)row[i] + g / 2;
                    if (g % 2 == 0) xs8[i] = iq4_xs_scales(b);
                    s8 = xs8[i], first = (int)(4 * (g % 2));
                    for (int q = 0; q < 4; q++) codes[q] = b->qs + 64 * (g % 2) + 16 * q;
                }
                _Pragma("GCC unroll 2")
                for (size_t c = 0; c < 2; c++) {
                    const __m256i wb = _mm256_loadu2_m128i((const __m128i *)codes[2 * c + 1], (const __m128i *)codes[2 * c]);
                    const int k0 = first + (int)(2 * c), k1 = k0 + 1;
                    const __m256 sv = _mm256_permutevar8x32_ps(s8, _mm256_setr_epi32(k0, k0, k0, k0, k1, k1, k1, k1));
                    __m256i v0 = _mm256_shuffle_epi8(lut, _mm256_and_si256(wb, low4));
                    __m256i v1 = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(wb, 4), low4));
                    if (five) { /* bits 0-15 of qh for the low nibbles, 16-31 for the high */
                        const uint32_t q0 = qh[2 * c], q1 = qh[2 * c + 1];
                        v0 = _mm256_add_epi8(v0, bits_as_16((q0 & 0xFFFF) | q1 << 16));
                        v1 = _mm256_add_epi8(v1, bits_as_16(q0 >> 16 | (q1 & 0xFFFF0000u)));
                    }
                    const __m256i a0 = _mm256_abs_epi8(v0), a1 = _mm256_abs_epi8(v1);
                    _Pragma("GCC unroll 8")
                    for (size_t t = 0; t < nx; t++) {
                        const size_t lo = (t0 + t) * a->lanes + g * 16 + 8 * c;
                        const int8_t *xq = a->q + (t0 + t) * a->stride + g * 128 + 32 * c;
                        const __m256i x0 = _mm256_load_si256((const __m256i *)xq);
                        const __m256i x1 = _mm256_load_si256((const __m256i *)(xq + 64));
                        const __m256i p = dot4_acc(dot4(a0, _mm256_sign_epi8(x0, v0)), a1, _mm256_sign_epi8(x1, v1));
                        acc[i][t][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(_mm256_load_ps(a->d + lo), sv),
                                                       acc[i][t][c]);
                    }
                }
            }
        }
        _Pragma("GCC unroll 8")
        for (size_t i = 0; i < R; i++)
            _Pragma("GCC unroll 8")
            for (size_t t = 0; t < nx; t++) {
                _Alignas(32) float s16[16];
                _mm256_store_ps(s16, acc[i][t][0]);
                _mm256_store_ps(s16 + 8, acc[i][t][1]);
                if (k < ks.s.len[i]) y[t * ldy + ks.s.first[i] + k] = lb__sum16f(s16);
            }
    }
}

#endif
