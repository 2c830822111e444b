/* AVX2 matmul kernel: the 32-wide weight panel in two halves of 16
 * columns, each half with MR rows of X in 2*MR ymm accumulators (12 of
 * the 16 registers). Same per-element order as every path (matmul.h). */
#include "kernel/matmul.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

#define MR 6

/* Rows written out by macro so every compiler keeps the 12 accumulators
 * in registers; mr is a constant after inlining. */
#define ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)
#define DECL(r)                                                                                 \
    __m256 a##r##0 = _mm256_setzero_ps(), a##r##1 = _mm256_setzero_ps();                       \
    if (acc && mr > r) {                                                                        \
        for (size_t c = 0; c < 16; c++) t[c] = c < ncols ? y[r * ldy + c] : 0.0f;               \
        a##r##0 = _mm256_loadu_ps(t), a##r##1 = _mm256_loadu_ps(t + 8);                         \
    }
#define STEP(r)                                          \
    if (mr > r) {                                        \
        __m256 xv = _mm256_broadcast_ss(xk + r);         \
        a##r##0 = _mm256_fmadd_ps(xv, w0, a##r##0);      \
        a##r##1 = _mm256_fmadd_ps(xv, w1, a##r##1);      \
    }
#define STORE(r)                                         \
    if (mr > r) {                                        \
        _mm256_storeu_ps(t, a##r##0);                    \
        _mm256_storeu_ps(t + 8, a##r##1);                \
        for (size_t c = 0; c < ncols; c++) y[r * ldy + c] = t[c]; \
    }

static inline __attribute__((always_inline)) void half_n(const float *xp, size_t mr, size_t in, const float *panel,
                                                         float *y, size_t ldy, size_t ncols, int acc)
{
    float t[16];
    ROWS(DECL)
    for (size_t k = 0; k < in; k++) {
        __m256 w0 = _mm256_loadu_ps(panel + k * LB__MM_NR), w1 = _mm256_loadu_ps(panel + k * LB__MM_NR + 8);
        const float *xk = xp + k * mr;
        ROWS(STEP)
    }
    ROWS(STORE)
}

static void half(const float *xp, size_t mr, size_t in, const float *panel, float *y, size_t ldy, size_t ncols, int acc)
{
    switch (mr) {
    case 6: half_n(xp, 6, in, panel, y, ldy, ncols, acc); break;
    case 5: half_n(xp, 5, in, panel, y, ldy, ncols, acc); break;
    case 4: half_n(xp, 4, in, panel, y, ldy, ncols, acc); break;
    case 3: half_n(xp, 3, in, panel, y, ldy, ncols, acc); break;
    case 2: half_n(xp, 2, in, panel, y, ldy, ncols, acc); break;
    default: half_n(xp, 1, in, panel, y, ldy, ncols, acc); break;
    }
}

static void block(const float *xp, size_t mr, size_t in, const float *panel, float *y, size_t ldy, size_t ncols,
                  int acc)
{
    half(xp, mr, in, panel, y, ldy, ncols < 16 ? ncols : 16, acc);
    if (ncols > 16) half(xp, mr, in, panel + 16, y + 16, ldy, ncols - 16, acc);
}

const lb__mm_kernel lb__mm_avx2 = {MR, block};
#else
const lb__mm_kernel lb__mm_avx2 = {0, 0};
#endif
