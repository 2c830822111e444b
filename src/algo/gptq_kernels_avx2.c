/* AVX2 + FMA kernels of C -= A . B (gptq_linalg.h): tiles of MR rows by
 * two vectors of columns, MR * 2 accumulators (12 of the 16 ymm registers),
 * so each B vector loaded feeds MR fused multiply-adds. B's tile (k rows,
 * k <= a block of 128) stays in L1 while the row tiles pass under it.
 * Columns past the last whole tile go through fma(), the same single
 * rounding per step as the vector lanes, so an element's value does not
 * depend on where the tiles fall. */
#include "algo/gptq_linalg.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#include <math.h>

#define MR 6
/* Rows of A per pass over B's column tiles: 96 rows of k <= 128 values
 * (48 KiB of floats, 96 KiB of doubles) stay in L2 while the tiles of B
 * (in L1) go by; without it A streamed from L3 once per column tile and
 * the fp64 kernel ran at a third of its speed. */
#define MC 96

#define ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)

/* ---- float: tiles of 6 x 16 ---- */

#define DECL_PS(r) __m256 c##r##0 = _mm256_setzero_ps(), c##r##1 = _mm256_setzero_ps();
#define STEP_PS(r)                                        \
    if (mr > r) {                                         \
        __m256 av = _mm256_broadcast_ss(a + r * lda + kk); \
        c##r##0 = _mm256_fmadd_ps(av, b0, c##r##0);       \
        c##r##1 = _mm256_fmadd_ps(av, b1, c##r##1);       \
    }
#define STORE_PS(r)                                                                      \
    if (mr > r) {                                                                        \
        float *cr = c + r * ldc;                                                         \
        _mm256_storeu_ps(cr, _mm256_sub_ps(_mm256_loadu_ps(cr), c##r##0));               \
        _mm256_storeu_ps(cr + 8, _mm256_sub_ps(_mm256_loadu_ps(cr + 8), c##r##1));       \
    }

static inline __attribute__((always_inline)) void tile_ps(size_t mr, size_t k, const float *a, size_t lda,
                                                          const float *b, size_t ldb, float *c, size_t ldc)
{
    ROWS(DECL_PS)
    for (size_t kk = 0; kk < k; kk++) {
        __m256 b0 = _mm256_loadu_ps(b + kk * ldb), b1 = _mm256_loadu_ps(b + kk * ldb + 8);
        ROWS(STEP_PS)
    }
    ROWS(STORE_PS)
}

static void rows_ps(size_t mr, size_t k, const float *a, size_t lda, const float *b, size_t ldb, float *c, size_t ldc)
{
    switch (mr) {
    case 6: tile_ps(6, k, a, lda, b, ldb, c, ldc); break;
    case 5: tile_ps(5, k, a, lda, b, ldb, c, ldc); break;
    case 4: tile_ps(4, k, a, lda, b, ldb, c, ldc); break;
    case 3: tile_ps(3, k, a, lda, b, ldb, c, ldc); break;
    case 2: tile_ps(2, k, a, lda, b, ldb, c, ldc); break;
    default: tile_ps(1, k, a, lda, b, ldb, c, ldc); break;
    }
}

static void gemm_f32(size_t m, size_t n, size_t k, const float *a, size_t lda, const float *b, size_t ldb, float *c,
                     size_t ldc)
{
    size_t nv = n - n % 16;
    for (size_t i0 = 0; i0 < m; i0 += MC) {
        size_t i1 = i0 + MC < m ? i0 + MC : m;
        for (size_t j = 0; j < nv; j += 16)
            for (size_t i = i0; i < i1; i += MR)
                rows_ps(i1 - i < MR ? i1 - i : MR, k, a + i * lda, lda, b + j, ldb, c + i * ldc + j, ldc);
    }
    for (size_t i = 0; i < m; i++)
        for (size_t j = nv; j < n; j++) {
            float acc = 0.0f;
            for (size_t kk = 0; kk < k; kk++) acc = fmaf(a[i * lda + kk], b[kk * ldb + j], acc);
            c[i * ldc + j] -= acc;
        }
}

/* ---- double: tiles of 6 x 8 ---- */

#define DECL_PD(r) __m256d d##r##0 = _mm256_setzero_pd(), d##r##1 = _mm256_setzero_pd();
#define STEP_PD(r)                                         \
    if (mr > r) {                                          \
        __m256d av = _mm256_broadcast_sd(a + r * lda + kk); \
        d##r##0 = _mm256_fmadd_pd(av, b0, d##r##0);        \
        d##r##1 = _mm256_fmadd_pd(av, b1, d##r##1);        \
    }
#define STORE_PD(r)                                                                      \
    if (mr > r) {                                                                        \
        double *cr = c + r * ldc;                                                        \
        _mm256_storeu_pd(cr, _mm256_sub_pd(_mm256_loadu_pd(cr), d##r##0));               \
        _mm256_storeu_pd(cr + 4, _mm256_sub_pd(_mm256_loadu_pd(cr + 4), d##r##1));       \
    }

static inline __attribute__((always_inline)) void tile_pd(size_t mr, size_t k, const double *a, size_t lda,
                                                          const double *b, size_t ldb, double *c, size_t ldc)
{
    ROWS(DECL_PD)
    for (size_t kk = 0; kk < k; kk++) {
        __m256d b0 = _mm256_loadu_pd(b + kk * ldb), b1 = _mm256_loadu_pd(b + kk * ldb + 4);
        ROWS(STEP_PD)
    }
    ROWS(STORE_PD)
}

static void rows_pd(size_t mr, size_t k, const double *a, size_t lda, const double *b, size_t ldb, double *c,
                    size_t ldc)
{
    switch (mr) {
    case 6: tile_pd(6, k, a, lda, b, ldb, c, ldc); break;
    case 5: tile_pd(5, k, a, lda, b, ldb, c, ldc); break;
    case 4: tile_pd(4, k, a, lda, b, ldb, c, ldc); break;
    case 3: tile_pd(3, k, a, lda, b, ldb, c, ldc); break;
    case 2: tile_pd(2, k, a, lda, b, ldb, c, ldc); break;
    default: tile_pd(1, k, a, lda, b, ldb, c, ldc); break;
    }
}

static void gemm_f64(size_t m, size_t n, size_t k, const double *a, size_t lda, const double *b, size_t ldb,
                     double *c, size_t ldc)
{
    size_t nv = n - n % 8;
    for (size_t i0 = 0; i0 < m; i0 += MC) {
        size_t i1 = i0 + MC < m ? i0 + MC : m;
        for (size_t j = 0; j < nv; j += 8)
            for (size_t i = i0; i < i1; i += MR)
                rows_pd(i1 - i < MR ? i1 - i : MR, k, a + i * lda, lda, b + j, ldb, c + i * ldc + j, ldc);
    }
    for (size_t i = 0; i < m; i++)
        for (size_t j = nv; j < n; j++) {
            double acc = 0.0;
            for (size_t kk = 0; kk < k; kk++) acc = fma(a[i * lda + kk], b[kk * ldb + j], acc);
            c[i * ldc + j] -= acc;
        }
}

const lb__gptq_kernels lb__gptq_kernels_avx2 = {gemm_f32, gemm_f64};
#else
const lb__gptq_kernels lb__gptq_kernels_avx2 = {0, 0};
#endif
