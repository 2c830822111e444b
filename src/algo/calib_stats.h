/* Per-column statistics of a block of activations, the calibration pass's
 * inner loop (calib_pass.c's hook): for each column j of x (rows x cols),
 *     amax[j] = max(amax[j], |x_rj|)     (a NaN leaves amax[j] as it was)
 *     sa[j]  += |x_rj|                   (in double, rows in order)
 *     sq[j]  += x_rj * x_rj              (in double: the product is exact)
 * The AVX2 version gives the scalar reference's results bit for bit: each
 * column's sums are the same additions in the same order, and a float's
 * square is exact in double, so fused or not it rounds once. */
#ifndef LB_ALGO_CALIB_STATS_H
#define LB_ALGO_CALIB_STATS_H
#include <stddef.h>

#include "lowbit.h"

typedef void (*lb__column_stats_fn)(const float *x, size_t rows, size_t cols, float *amax, double *sa, double *sq);

void lb__column_stats_ref(const float *x, size_t rows, size_t cols, float *amax, double *sa, double *sq);
extern const lb__column_stats_fn lb__column_stats_avx2; /* NULL where not built */
/* The kernel for isa (the scalar one where no vector one is built). */
lb__column_stats_fn lb__column_stats_for(lb_isa isa);

#endif
