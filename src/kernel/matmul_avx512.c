/* AVX-512 matmul kernel: MR rows of X times one 32-wide weight panel held
 * in 2*MR zmm accumulators. Per k it loads the panel's two vectors once
 * and multiplies them by each row's X[r][k] (a broadcast folded into the
 * FMA), so the inner loop is FMAs and loads only. Each accumulator lane
 * is one output element summed over k in order (see matmul.h). */
#include "kernel/matmul.h"

#if defined(__x86_64__) && defined(__AVX512F__)
#include <immintrin.h>

#define MR 8

/* Rows written out by macro (not a loop over an accumulator array) so
 * that every compiler keeps the 16 accumulators in registers; mr is a
 * constant after inlining, so the row tests fold away. */
#define ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#define DECL(r)                                                                                 \
    __m512 a##r##0 = _mm512_setzero_ps(), a##r##1 = _mm512_setzero_ps();                       \
    if (acc && mr > r) {                                                                        \
        a##r##0 = _mm512_maskz_loadu_ps(m0, y + r * ldy);                                       \
        a##r##1 = _mm512_maskz_loadu_ps(m1, y + r * ldy + 16);                                  \
    }
#define STEP(r)                                             \
    if (mr > r) {                                           \
        __m512 xv = _mm512_set1_ps(xk[r]);                  \
        a##r##0 = _mm512_fmadd_ps(xv, w0, a##r##0);         \
        a##r##1 = _mm512_fmadd_ps(xv, w1, a##r##1);         \
    }
#define STORE(r)                                            \
    if (mr > r) {                                           \
        _mm512_mask_storeu_ps(y + r * ldy, m0, a##r##0);    \
        _mm512_mask_storeu_ps(y + r * ldy + 16, m1, a##r##1); \
    }

static inline __attribute__((always_inline)) void block_n(const float *xp, size_t mr, size_t in, const float *panel,
                                                          float *y, size_t ldy, __mmask16 m0, __mmask16 m1, int acc)
{
    ROWS(DECL)
    for (size_t k = 0; k < in; k++) {
        __m512 w0 = _mm512_loadu_ps(panel + k * LB__MM_NR), w1 = _mm512_loadu_ps(panel + k * LB__MM_NR + 16);
        const float *xk = xp + k * mr;
        ROWS(STEP)
    }
    ROWS(STORE)
}

static void block(const float *xp, size_t mr, size_t in, const float *panel, float *y, size_t ldy, size_t ncols,
                  int acc)
{
    __mmask16 m0 = ncols >= 16 ? 0xFFFF : (__mmask16)((1u << ncols) - 1);
    __mmask16 m1 = ncols >= 32 ? 0xFFFF : ncols <= 16 ? 0 : (__mmask16)((1u << (ncols - 16)) - 1);
    switch (mr) {
    case 8: block_n(xp, 8, in, panel, y, ldy, m0, m1, acc); break;
    case 7: block_n(xp, 7, in, panel, y, ldy, m0, m1, acc); break;
    case 6: block_n(xp, 6, in, panel, y, ldy, m0, m1, acc); break;
    case 5: block_n(xp, 5, in, panel, y, ldy, m0, m1, acc); break;
    case 4: block_n(xp, 4, in, panel, y, ldy, m0, m1, acc); break;
    case 3: block_n(xp, 3, in, panel, y, ldy, m0, m1, acc); break;
    case 2: block_n(xp, 2, in, panel, y, ldy, m0, m1, acc); break;
    default: block_n(xp, 1, in, panel, y, ldy, m0, m1, acc); break;
    }
}

const lb__mm_kernel lb__mm_avx512 = {MR, block};
#else
const lb__mm_kernel lb__mm_avx512 = {0, 0};
#endif
