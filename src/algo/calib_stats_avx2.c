/* AVX2 per-column activation statistics (calib_stats.h): eight columns at a
 * time, the two double sums in two halves of four; columns past the last
 * whole eight go through the scalar reference. _mm256_max_ps(a, m) returns
 * m when a is NaN, as the reference's a > m ? a : m does. */
#include "algo/calib_stats.h"

#if defined(__x86_64__) && defined(__AVX2__)
#include <immintrin.h>

static void column_stats(const float *x, size_t rows, size_t cols, float *amax, double *sa, double *sq)
{
    size_t nv = cols - cols % 8;
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (size_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        for (size_t j = 0; j < nv; j += 8) {
            __m256 v = _mm256_loadu_ps(xr + j), a = _mm256_and_ps(v, abs_mask);
            _mm256_storeu_ps(amax + j, _mm256_max_ps(a, _mm256_loadu_ps(amax + j)));
            __m256d a0 = _mm256_cvtps_pd(_mm256_castps256_ps128(a)), a1 = _mm256_cvtps_pd(_mm256_extractf128_ps(a, 1));
            _mm256_storeu_pd(sa + j, _mm256_add_pd(_mm256_loadu_pd(sa + j), a0));
            _mm256_storeu_pd(sa + j + 4, _mm256_add_pd(_mm256_loadu_pd(sa + j + 4), a1));
            /* |x|^2 = x^2, exact in double */
            _mm256_storeu_pd(sq + j, _mm256_add_pd(_mm256_loadu_pd(sq + j), _mm256_mul_pd(a0, a0)));
            _mm256_storeu_pd(sq + j + 4, _mm256_add_pd(_mm256_loadu_pd(sq + j + 4), _mm256_mul_pd(a1, a1)));
        }
    }
    if (nv < cols)
        for (size_t r = 0; r < rows; r++)
            lb__column_stats_ref(x + r * cols + nv, 1, cols - nv, amax + nv, sa + nv, sq + nv);
}

const lb__column_stats_fn lb__column_stats_avx2 = column_stats;
#else
const lb__column_stats_fn lb__column_stats_avx2 = 0;
#endif
