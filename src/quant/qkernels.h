/* The vector loops of tensor quantization, one set per instruction set.
 * Each is exact IEEE arithmetic (max, min, one division or product per
 * element), so every set gives the same bits as the scalar one. */
#ifndef LB_QUANT_QKERNELS_H
#define LB_QUANT_QKERNELS_H

#include <stddef.h>

#include "lowbit.h"

typedef struct lb__qkernels {
    float (*absmax)(const float *x, size_t n);                      /* 0 for n = 0 */
    void (*minmax)(const float *x, size_t n, float *lo, float *hi);  /* +-0 if n = 0 */
    /* out = min(max(x / s + add, lo), hi) */
    void (*div_clamp)(const float *x, size_t n, float s, float add, float lo, float hi, float *out);
    /* out = (x - sub) * s */
    void (*sub_mul)(const float *x, size_t n, float sub, float s, float *out);
    /* index of the first NaN or infinity, or n */
    size_t (*first_nonfinite)(const float *x, size_t n);
} lb__qkernels;

const lb__qkernels *lb__qkernels_get(lb_isa isa);

extern const lb__qkernels lb__qkernels_scalar, lb__qkernels_avx2, lb__qkernels_avx512;

#endif
