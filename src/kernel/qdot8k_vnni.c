/* AVX-512 VNNI int8-activation kernels on ggml's Q4_K, Q5_K, Q6_K, IQ4_XS, IQ4_NL,
 * Q4_0 and Q5_0, read in place: qdot8.h's K-quant sums, bit for bit the
 * scalar reference.
 *
 * A super-block's 128 code bytes are two zmm halves h. The codes are
 * unsigned (0 .. 31), so they are vpdpbusd's unsigned operand as they
 * are, with no offset: the low nibbles of half h against the staged
 * activations' first 64 codes give lanes 0-7 sub-block 4h and lanes 8-15
 * sub-block 4h + 2, the high nibbles 4h + 1 and 4h + 3. Q5_K's fifth bit
 * is a byte mask test of qh (broadcast to both 32-byte halves) added as
 * 16. Per row and super-block the eight d * sc_j and dmin * m_j are
 * decoded once into a ymm each and permuted to the lanes; the mins meet
 * the staged e_j in 8 lanes of their own. */
#include "kernel/qdot8.h"

#if defined(__x86_64__)

#include "kernel/qdot8k_x86.h"




INL void krun45(const lb__qmat *m, const lb__act8 *a, size_t t0, const size_t nx, size_t r0, size_t r1, float *y,
                size_t ldy, const int five)
{
    const size_t R = nx <= 2 ? RMAX : RMAX / 2;
    const size_t nsb = m->cols / 256, nblk = m->cols / 32, bb = m->ggml_block_bytes, qs_at = five ? 48 : 16;
    const __m512i low4 = _mm512_set1_epi8(0x0F), sixteen = _mm512_set1_epi8(16);
    /* (h, n)'s lanes: 0-7 sub-block 4h + n, 8-15 sub-block 4h + 2 + n */
    __m512i sidx[4];
    for (int hn = 0; hn < 4; hn++) {
        int h = hn / 2, n = hn % 2;
        sidx[hn] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi32(4 * h + n)),
                                      _mm256_set1_epi32(4 * h + 2 + n), 1);
    }
    /* Q5_K: the fifth bit of chunk c's low (high) nibbles is bit 2c (2c + 1) of qh */
    __m512i qbit[4];
    for (int hn = 0; hn < 4; hn++) {
        int h = hn / 2, n = hn % 2;
        qbit[hn] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi8((char)(1 << (4 * h + n)))),
                                      _mm256_set1_epi8((char)(1 << (4 * h + 2 + n))), 1);
    }
    kstreams ks;
    kstreams_init(&ks, m, R, r0, r1, nsb);
    for (size_t k = 0; k < ks.s.per; k++) {
        const uint8_t *row[RMAX];
        kstream_rows(m, &ks, R, k, row);
        __m512 acc[RMAX][LB__QDOT_MAX_NX];
        __m256 macc[RMAX][LB__QDOT_MAX_NX];
        _Pragma("GCC unroll 8")
        for (size_t i = 0; i < R; i++)
            _Pragma("GCC unroll 8")
            for (size_t t = 0; t < nx; t++) acc[i][t] = _mm512_setzero_ps(), macc[i][t] = _mm256_setzero_ps();
        for (size_t s = 0; s < nsb; s++) {
            kprefetch(&ks, R, row, s);
            _Pragma("GCC unroll 8")
            for (size_t i = 0; i < R; i++) {
                const uint8_t *b = row[i] + s * bb, *qs = b + qs_at;
                uint64_t sc, mn;
                lb__qdot8k_scale_min(b + 4, &sc, &mn);
                const __m512 dsc = _mm512_castps256_ps512(bytes_to_ps(sc, fp16_at(b)));
                const __m256 dmn = bytes_to_ps(mn, fp16_at(b + 2));
                __m512i qh = _mm512_setzero_si512();
                if (five) qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b + 16)));
                _Pragma("GCC unroll 8")
                for (size_t t = 0; t < nx; t++)
                    macc[i][t] = _mm256_fmadd_ps(_mm256_loadu_ps(a->e + (t0 + t) * nblk + 8 * s), dmn, macc[i][t]);
                _Pragma("GCC unroll 2")
                for (size_t h = 0; h < 2; h++) {
                    const __m512i wb = _mm512_loadu_si512(qs + 64 * h);
                    __m512i u[2] = {_mm512_and_si512(wb, low4), _mm512_and_si512(_mm512_srli_epi16(wb, 4), low4)};
                    _Pragma("GCC unroll 2")
                    for (size_t n = 0; n < 2; n++) {
                        if (five)
                            u[n] = _mm512_mask_add_epi8(u[n], _mm512_test_epi8_mask(qh, qbit[2 * h + n]), u[n], sixteen);
                        const __m512 sv = _mm512_permutexvar_ps(sidx[2 * h + n], dsc);
                        _Pragma("GCC unroll 8")
                        for (size_t t = 0; t < nx; t++) {
                            const size_t g = 2 * s + h;
                            const __m512i xv = _mm512_load_si512(a->q + (t0 + t) * a->stride + g * 128 + n * 64);
                            const __m512 dl = _mm512_load_ps(a->d + (t0 + t) * a->lanes + (2 * g + n) * 16);
                            const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u[n], xv);
                            acc[i][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(dl, sv), acc[i][t]);
                        }
                    }
                }
            }
        }
        _Pragma("GCC unroll 8")
        for (size_t i = 0; i < R; i++) {
            if (k >= ks.s.len[i]) continue;
            _Pragma("GCC unroll 8")
            for (size_t t = 0; t < nx; t++) {
                _Alignas(64) float s16[16], s8[8];
                _mm512_store_ps(s16, acc[i][t]);
                _mm256_store_ps(s8, macc[i][t]);
                y[t * ldy + ks.s.first[i] + k] = lb__sum16f(s16) - lb__qdot8k_sum8(s8);
            }
        }
    }
}

/* Q6_K: half h's 64 ql bytes against the staged codes of elements 128h +
 * 64n .. + 63 (in order); the two high bits of byte b's nibble n are bits
 * 2(2n + b / 32) of qh[32h + b % 32] (qh's 32 bytes broadcast, shifted by
 * per-256-bit counts); u = 0 .. 63 unsigned, each lane's sum starting at
 * the staged -32 * S4. Lane l's sub-block is 8h + 4n + l / 4. */
INL void krun6(const lb__qmat *m, const lb__act8 *a, size_t t0, const size_t nx, size_t r0, size_t r1, float *y,
               size_t ldy)
{
    const size_t R = nx <= 2 ? RMAX : RMAX / 2;
    const size_t nsb = m->cols / 256, bb = m->ggml_block_bytes;
    const __m512i low4 = _mm512_set1_epi8(0x0F), three = _mm512_set1_epi8(3);
    __m512i sidx[4], shift[2];
    for (int hn = 0; hn < 4; hn++) {
        _Alignas(64) int32_t ix[16];
        for (int l = 0; l < 16; l++) ix[l] = 8 * (hn / 2) + 4 * (hn % 2) + l / 4;
        sidx[hn] = _mm512_load_si512(ix);
    }
    for (int n = 0; n < 2; n++)
        shift[n] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16((short)(4 * n))),
                                      _mm256_set1_epi16((short)(4 * n + 2)), 1);
    kstreams ks;
    kstreams_init(&ks, m, R, r0, r1, nsb);
    for (size_t k = 0; k < ks.s.per; k++) {
        const uint8_t *row[RMAX];
        kstream_rows(m, &ks, R, k, row);
        __m512 acc[RMAX][LB__QDOT_MAX_NX];
        _Pragma("GCC unroll 8")
        for (size_t i = 0; i < R; i++)
            _Pragma("GCC unroll 8")
            for (size_t t = 0; t < nx; t++) acc[i][t] = _mm512_setzero_ps();
        for (size_t s = 0; s < nsb; s++) {
            kprefetch(&ks, R, row, s);
            _Pragma("GCC unroll 8")
            for (size_t i = 0; i < R; i++) {
                const uint8_t *b = row[i] + s * bb; /* ql[128] qh[64] scales[16] d[2] */
                const __m512 dsc = _mm512_mul_ps(
                    _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b + 192)))),
                    _mm512_set1_ps(fp16_at(b + 208)));
                _Pragma("GCC unroll 2")
                for (size_t h = 0; h < 2; h++) {
                    const __m512i wb = _mm512_loadu_si512(b + 64 * h);
                    const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b + 128 + 32 * h)));
                    _Pragma("GCC unroll 2")
                    for (size_t n = 0; n < 2; n++) {
                        const __m512i hi = _mm512_and_si512(_mm512_srlv_epi16(qh, shift[n]), three);
                        const __m512i u = _mm512_or_si512(_mm512_and_si512(n ? _mm512_srli_epi16(wb, 4) : wb, low4),
                                                          _mm512_slli_epi16(hi, 4));
                        const __m512 sv = _mm512_permutexvar_ps(sidx[2 * h + n], dsc);
                        _Pragma("GCC unroll 8")
                        for (size_t t = 0; t < nx; t++) {
                            const size_t e = 256 * s + 128 * h + 64 * n;
                            const __m512i xv = _mm512_load_si512(a->q + (t0 + t) * a->stride + e);
                            const __m512i cx = _mm512_load_si512(a->cxs + (t0 + t) * a->lanes + e / 4);
                            const __m512 dl = _mm512_load_ps(a->d + (t0 + t) * a->lanes + e / 4);
                            const __m512i p = _mm512_dpbusd_epi32(cx, u, xv);
                            acc[i][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(dl, sv), acc[i][t]);
                        }
                    }
                }
            }
        }
        _Pragma("GCC unroll 8")
        for (size_t i = 0; i < R; i++) {
            if (k >= ks.s.len[i]) continue;
            _Pragma("GCC unroll 8")
            for (size_t t = 0; t < nx; t++) {
                _Alignas(64) float s16[16];
                _mm512_store_ps(s16, acc[i][t]);
                y[t * ldy + ks.s.first[i] + k] = lb__sum16f(s16);
            }
        }
    }
}

/* IQ4_XS / IQ4_NL / Q4_0 / Q5_0: group g's 64 code bytes (an IQ4_XS half
 * super-block, or four blocks of 32 gathered) through a vpshufb table of
 * the values + 128 (kvalues: 1 .. 241; Q4_0: 120 .. 135; Q5_0: 112 ..
 * 127, plus 16 where the fifth bit is set, by a byte mask from qh;
 * unsigned), low nibbles then high ones into each lane's one sum, which
 * starts at the staged -128 * S8; lane l's scale is block l / 4's. */
INL void krun_iq4(const lb__qmat *m, const lb__act8 *a, size_t t0, const size_t nx, size_t r0, size_t r1, float *y,
                  size_t ldy, const int layout)
{
    const size_t R = nx <= 2 ? RMAX : RMAX / 2, nblk = m->cols / 32, full = nblk / 4, groups = (nblk + 3) / 4;
    const int blocked = layout != LB__IQ4_XS_SB, five = layout == LB__Q5_22;
    /* four blocks of bb bytes in two zmm loads, at 0 and at hoff (4 bb - 64) */
    const size_t bb = five ? 22 : 18, hoff = 4 * bb - 64, bw = bb / 2 /* block words */, codes_at = five ? 3 : 1;
    /* rows of blocks of 32 may end in a group of 1-3 blocks: its bytes only, the rest read as 0 (scale 0) */
    const size_t tb = bb * (nblk % 4);
    const __mmask64 tail_lo = _cvtu64_mask64(tb >= 64 ? ~0ull : (1ull << tb) - 1);
    const __mmask64 tail_hi = _cvtu64_mask64(tb > hoff ? (1ull << (tb - hoff)) - 1 : 0);
    uint8_t lut16[16];
    const int8_t *values = lb__qdot8k_values(m->ggml);
    for (int c = 0; c < 16; c++) lut16[c] = (uint8_t)(values[c] + 128);
    const __m512i lut = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)lut16));
    const __m512i low4 = _mm512_set1_epi8(0x0F), sixteen = _mm512_set1_epi8(16);
    _Alignas(64) int32_t ix[16];
    for (int l = 0; l < 16; l++) ix[l] = l / 4;
    const __m512i sidx = _mm512_load_si512(ix);
    /* Blocks of 32: four blocks are 36 (44) words (block k: its scale at
     * word bw k, Q5_0's qh at bw k + 1 and + 2, its codes from bw k +
     * codes_at), in two zmm (words 0-31 and hoff / 2 ..): the codes' 32
     * words by one word permute, each lane's scale (block l / 4's) by
     * another, which also puts Q5_0's qh low halves (the fifth bits of the
     * low nibbles) at words 16-19 and the high halves at 20-23 */
    _Alignas(64) int16_t cw[32], sw[32];
    for (int w = 0; w < 32; w++) {
        const size_t c = bw * (size_t)(w / 8) + codes_at + (size_t)(w % 8);
        const size_t s = w < 16 ? bw * (size_t)(w / 4) : w < 24 && five ? bw * (size_t)(w % 4) + 1 + (size_t)(w >= 20) : 0;
        cw[w] = (int16_t)(c < 32 ? c : 32 + c - hoff / 2), sw[w] = (int16_t)(s < 32 ? s : 32 + s - hoff / 2);
    }
    const __m512i cidx = _mm512_load_si512(cw), swidx = _mm512_load_si512(sw);
    kstreams ks;
    kstreams_init(&ks, m, R, r0, r1, groups);
    for (size_t k = 0; k < ks.s.per; k++) {
        const uint8_t *row[RMAX];
        kstream_rows(m, &ks, R, k, row);
        __m512 acc[RMAX][LB__QDOT_MAX_NX];
        _Pragma("GCC unroll 8")
        for (size_t i = 0; i < R; i++)
            _Pragma("GCC unroll 8")
            for (size_t t = 0; t < nx; t++) acc[i][t] = _mm512_setzero_ps();
        __m512 xs8[RMAX] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
        for (size_t g = 0; g < groups; g++) {
            kprefetch(&ks, R, row, g);
            _Pragma("GCC unroll 8")
            for (size_t i = 0; i < R; i++) {
                __m512 sv;
                __m512i wb;
                __mmask64 five_lo = 0, five_hi = 0;
                if (blocked) {
                    const uint8_t *b = row[i] + g * 4 * bb;
                    __m512i lo, hi;
                    if (g < full) lo = _mm512_loadu_si512(b), hi = _mm512_loadu_si512(b + hoff);
                    else lo = _mm512_maskz_loadu_epi8(tail_lo, b), hi = _mm512_maskz_loadu_epi8(tail_hi, b + hoff);
                    wb = _mm512_permutex2var_epi16(lo, cidx, hi);
                    const __m512i s = _mm512_permutex2var_epi16(lo, swidx, hi);
                    sv = _mm512_cvtph_ps(_mm512_castsi512_si256(s));
                    if (five) {
                        const __m128i qh = _mm512_extracti32x4_epi32(s, 2);
                        five_lo = _cvtu64_mask64((uint64_t)_mm_cvtsi128_si64(qh));
                        five_hi = _cvtu64_mask64((uint64_t)_mm_extract_epi64(qh, 1));
                    }
                } else { /* the super-block's eight scales, decoded at its first half */
                    const lb__block_iq4_xs *b = (const lb__block_iq4_xs *)row[i] + g / 2;
                    if (g % 2 == 0) xs8[i] = _mm512_castps256_ps512(iq4_xs_scales(b));
                    sv = _mm512_permutexvar_ps(_mm512_add_epi32(sidx, _mm512_set1_epi32((int)(4 * (g % 2)))), xs8[i]);
                    wb = _mm512_loadu_si512(b->qs + 64 * (g % 2)); /* a half super-block's 64 bytes in a row */
                }
                __m512i u[2] = {_mm512_shuffle_epi8(lut, _mm512_and_si512(wb, low4)),
                                _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(wb, 4), low4))};
                if (five) {
                    u[0] = _mm512_mask_add_epi8(u[0], five_lo, u[0], sixteen);
                    u[1] = _mm512_mask_add_epi8(u[1], five_hi, u[1], sixteen);
                }
                _Pragma("GCC unroll 8")
                for (size_t t = 0; t < nx; t++) {
                    const size_t lo = (t0 + t) * a->lanes + g * 16;
                    const int8_t *xq = a->q + (t0 + t) * a->stride + g * 128;
                    __m512i p = _mm512_dpbusd_epi32(_mm512_load_si512(a->cxs + lo), u[0], _mm512_load_si512(xq));
                    p = _mm512_dpbusd_epi32(p, u[1], _mm512_load_si512(xq + 64));
                    acc[i][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(_mm512_load_ps(a->d + lo), sv),
                                                acc[i][t]);
                }
            }
        }
        _Pragma("GCC unroll 8")
        for (size_t i = 0; i < R; i++) {
            if (k >= ks.s.len[i]) continue;
            _Pragma("GCC unroll 8")
            for (size_t t = 0; t < nx; t++) {
                _Alignas(64) float s16[16];
                _mm512_store_ps(s16, acc[i][t]);
                y[t * ldy + ks.s.first[i] + k] = lb__sum16f(s16);
            }
        }
    }
}

LB__QDOT8K_ROWS_FN(lb__qdot8k_rows_vnni)

#endif
