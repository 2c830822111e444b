/* Per-column activation statistics (calib_stats.h): the scalar reference
 * and the choice of kernel. */
#include "algo/calib_stats.h"

#include <math.h>

#include "util/cpu.h"

void lb__column_stats_ref(const float *x, size_t rows, size_t cols, float *amax, double *sa, double *sq)
{
    for (size_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        for (size_t j = 0; j < cols; j++) {
            float a = fabsf(xr[j]);
            amax[j] = a > amax[j] ? a : amax[j];
            sa[j] += a;
            sq[j] += (double)xr[j] * xr[j];
        }
    }
}

lb__column_stats_fn lb__column_stats_for(lb_isa isa)
{
    if (lb__isa_x86(lb__isa_clamp(isa)) >= LB_ISA_AVX2 && lb__column_stats_avx2) return lb__column_stats_avx2;
    return lb__column_stats_ref;
}
