/* AVX-512 decode kernels: qdot.h's order, bit for bit the scalar reference.
 * The row loops and element decoders are qdot_avx512_run.h's; this file
 * instantiates them per (kind, affine, tokens), adds the loop of 4-bit
 * blocks of 16 and picks one per matrix. */
#include "kernel/qdot_internal.h"

#if defined(__x86_64__)

#include "kernel/qdot_avx512_run.h"

/* 4-bit elements in blocks of 16 (nvfp4, g16): a chunk of 32 spans two
 * blocks, lanes 0-7 (elements 0-15) in the first and 8-15 in the second, so
 * w = (v - zp) * mul is formed per lane with the two blocks' values side by
 * side, the reference's expression on the same operands. */
INL void run_nib16(const lb__qmat *m, const lb__qdot_plan *p, const int aff, const size_t nx, size_t r0, size_t r1,
                   float *y, size_t ldy)
{
    const size_t nb = p->blocks, nch = p->nch, xst = p->xstride;
    const size_t inplace = lb__qdot_inplace_chunks(m, p, p->chunk_bytes);
    const __m512 lut16 = _mm512_loadu_ps(p->lut);
    const __mmask16 upper = 0xFF00;
    _Alignas(64) uint8_t tail[R][2][64];
    lb__row_streams rs;
    streams_init(&rs, m, p, r0, r1);
    for (size_t k = 0; k < rs.per; k++) {
        const uint8_t *row[R];
        const float *mu[R], *zp[R];
        stream_rows(m, p, &rs, k, inplace, row, mu, zp, tail);
        __m512 acc[R][LB__QDOT_MAX_NX];
        zero_sums(acc, nx);
        size_t pf = rs.ahead; /* the next line of the rows ahead to ask for */
        for (size_t c = 0; c < nch; c++) {
            prefetch_to(row, &pf, rs.ahead + (c + 1) * p->chunk_bytes);
            size_t b0 = 2 * c, b1 = 2 * c + 1 < nb ? 2 * c + 1 : nb - 1; /* padding: the last block's */
            __m512 xe[LB__QDOT_MAX_NX], xo[LB__QDOT_MAX_NX];
            _Pragma("GCC unroll 8")
            for (size_t t = 0; t < nx; t++) {
                xe[t] = _mm512_loadu_ps(p->xs + t * xst + c * 32);
                xo[t] = _mm512_loadu_ps(p->xs + t * xst + c * 32 + 16);
            }
            _Pragma("GCC unroll 8")
            for (size_t i = 0; i < R; i++) {
                const uint8_t *s = c < inplace ? row[i] + c * 16 : tail[i][c - inplace];
                __m512 mulv = _mm512_mask_blend_ps(upper, _mm512_set1_ps(mu[i][b0]), _mm512_set1_ps(mu[i][b1]));
                __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)s));
                __m512 v0 = _mm512_permutexvar_ps(b, lut16), v1 = _mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), lut16);
                if (aff) {
                    __m512 zpv = _mm512_mask_blend_ps(upper, _mm512_set1_ps(zp[i][b0]), _mm512_set1_ps(zp[i][b1]));
                    v0 = _mm512_sub_ps(v0, zpv), v1 = _mm512_sub_ps(v1, zpv);
                }
                __m512 w0 = _mm512_mul_ps(v0, mulv), w1 = _mm512_mul_ps(v1, mulv);
                _Pragma("GCC unroll 8")
                for (size_t t = 0; t < nx; t++) {
                    acc[i][t] = _mm512_fmadd_ps(xe[t], w0, acc[i][t]);
                    acc[i][t] = _mm512_fmadd_ps(xo[t], w1, acc[i][t]);
                }
            }
        }
        store_sums(acc, &rs, k, nx, y, ldy);
    }
}

#define INST16(A, N)                                                                                            \
    static void run16_##A##_##N(const lb__qmat *m, const lb__qdot_plan *p, size_t r0, size_t r1, float *y,      \
                                size_t ldy)                                                                     \
    {                                                                                                           \
        run_nib16(m, p, A, N, r0, r1, y, ldy);                                                                  \
    }
INST16(0, 1) INST16(0, 2) INST16(0, 3) INST16(0, 4) INST16(1, 1) INST16(1, 2) INST16(1, 3) INST16(1, 4)

/* One function per (kind, affine, nx): every branch on them folds away. */
#define INST(K, A, N)                                                                                          \
    static void run_##K##_##A##_##N(const lb__qmat *m, const lb__qdot_plan *p, size_t r0, size_t r1, float *y, \
                                    size_t ldy)                                                                \
    {                                                                                                          \
        run(m, p, LB__QK_##K, A, N, r0, r1, y, ldy);                                                           \
    }
#define INST4(K, A) INST(K, A, 1) INST(K, A, 2) INST(K, A, 3) INST(K, A, 4)
#define INSTB(K, A, N)                                                                                            \
    static void runb1_##K##_##A##_##N(const lb__qmat *m, const lb__qdot_plan *p, size_t r0, size_t r1, float *y, \
                                      size_t ldy)                                                                 \
    {                                                                                                             \
        run_b1(m, p, LB__QK_##K, A, N, r0, r1, y, ldy);                                                           \
    }
#define INSTB4(K, A) INSTB(K, A, 1) INSTB(K, A, 2) INSTB(K, A, 3) INSTB(K, A, 4)
INSTB4(E4M3, 0) INSTB4(E5M2, 0) INSTB4(I8, 0) INSTB4(I8, 1) INSTB4(U8, 0) INSTB4(U8, 1) INSTB4(NIB, 0) INSTB4(NIB, 1)
INSTB4(SIX, 0) INSTB4(F16, 0) INSTB4(E4M3F, 0)
INST4(F32, 0) INST4(BF16, 0) INST4(F16, 0) INST4(E4M3, 0) INST4(E5M2, 0) INST4(LUT8, 0)
INST4(I8, 0) INST4(I8, 1) INST4(U8, 0) INST4(U8, 1) INST4(NIB, 0) INST4(NIB, 1) INST4(SIX, 0) INST4(E4M3F, 0)

typedef void (*run_fn)(const lb__qmat *, const lb__qdot_plan *, size_t, size_t, float *, size_t);
/* [kind][variant][nx - 1]: variant 1 is affine for integers and, for e4m3
 * (never affine), a matrix without NaN codes */
#define ROW(K, A) {run_##K##_##A##_1, run_##K##_##A##_2, run_##K##_##A##_3, run_##K##_##A##_4}
static const run_fn runs[LB__QK_COUNT][2][LB__QDOT_MAX_NX] = {
    [LB__QK_F32] = {ROW(F32, 0), ROW(F32, 0)},    [LB__QK_BF16] = {ROW(BF16, 0), ROW(BF16, 0)},
    [LB__QK_F16] = {ROW(F16, 0), ROW(F16, 0)},    [LB__QK_E4M3] = {ROW(E4M3, 0), ROW(E4M3F, 0)},
    [LB__QK_E5M2] = {ROW(E5M2, 0), ROW(E5M2, 0)}, [LB__QK_LUT8] = {ROW(LUT8, 0), ROW(LUT8, 0)},
    [LB__QK_I8] = {ROW(I8, 0), ROW(I8, 1)},       [LB__QK_U8] = {ROW(U8, 0), ROW(U8, 1)},
    [LB__QK_NIB] = {ROW(NIB, 0), ROW(NIB, 1)},    [LB__QK_SIX] = {ROW(SIX, 0), ROW(SIX, 0)},
};

#define ROWB(K, A) {runb1_##K##_##A##_1, runb1_##K##_##A##_2, runb1_##K##_##A##_3, runb1_##K##_##A##_4}
static const run_fn runs_b1[LB__QK_COUNT][2][LB__QDOT_MAX_NX] = {
    [LB__QK_F16] = {ROWB(F16, 0), ROWB(F16, 0)},  [LB__QK_E4M3] = {ROWB(E4M3, 0), ROWB(E4M3F, 0)},
    [LB__QK_E5M2] = {ROWB(E5M2, 0), ROWB(E5M2, 0)}, [LB__QK_I8] = {ROWB(I8, 0), ROWB(I8, 1)},
    [LB__QK_U8] = {ROWB(U8, 0), ROWB(U8, 1)},     [LB__QK_NIB] = {ROWB(NIB, 0), ROWB(NIB, 1)},
    [LB__QK_SIX] = {ROWB(SIX, 0), ROWB(SIX, 0)},
};

static void qdot_avx512(const lb__qmat *m, const float *x, size_t nx, size_t ldx, size_t r0, size_t r1, float *y,
                        size_t ldy, void *scratch)
{
    if (r0 >= r1 || nx == 0) return;
    lb__qdot_plan p;
    lb__qdot_plan_init(m, scratch, &p);
    if (p.kind == LB__QK_NIB && !p.plain && p.blocks > 1 && m->block == 16) { /* nvfp4 and other g16 */
        static const run_fn r16[2][LB__QDOT_MAX_NX] = {{run16_0_1, run16_0_2, run16_0_3, run16_0_4},
                                                       {run16_1_1, run16_1_2, run16_1_3, run16_1_4}};
        lb__qdot_stage_x(&p, x, nx, ldx);
        r16[p.affine][nx - 1](m, &p, r0, r1, y, ldy);
        return;
    }
    if (!lb__qdot_blocks_fit(m, &p)) { /* a chunk would straddle two blocks */
        lb__qdot_scalar(m, x, nx, ldx, r0, r1, y, ldy, scratch);
        return;
    }
    lb__qdot_stage_x(&p, x, nx, ldx);
    if (p.kind == LB__QK_SIX && p.six_unit != 0.0f && lb__qdot_six_vbmi(m, &p, nx, r0, r1, y, ldy)) return;
    int variant = p.kind == LB__QK_E4M3 ? m->nan_free != 0 : p.affine;
    if (lb__qdot_takes_b1(&p) && runs_b1[p.kind][variant][nx - 1])
        runs_b1[p.kind][variant][nx - 1](m, &p, r0, r1, y, ldy);
    else
        runs[p.kind][variant][nx - 1](m, &p, r0, r1, y, ldy);
}

const lb__qdot_fn lb__qdot_avx512_fn = qdot_avx512;

#else
const lb__qdot_fn lb__qdot_avx512_fn = NULL;
#endif
