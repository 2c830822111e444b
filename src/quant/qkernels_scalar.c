/* Scalar twins of the quantization loops (the reference). */
#include <math.h>

#include "quant/qkernels.h"

static float absmax(const float *x, size_t n)
{
    float m = 0;
    for (size_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        m = a > m ? a : m;
    }
    return m;
}

static void minmax(const float *x, size_t n, float *lo, float *hi)
{
    float a = 0, b = 0;
    for (size_t i = 0; i < n; i++) {
        a = x[i] < a ? x[i] : a;
        b = x[i] > b ? x[i] : b;
    }
    *lo = a + 0.0f, *hi = b + 0.0f; /* both include 0, as +0: zero must be exactly representable */
}

static void div_clamp(const float *x, size_t n, float s, float add, float lo, float hi, float *out)
{
    for (size_t i = 0; i < n; i++) {
        float y = x[i] / s + add;
        out[i] = y < lo ? lo : y > hi ? hi : y;
    }
}

static void sub_mul(const float *x, size_t n, float sub, float s, float *out)
{
    for (size_t i = 0; i < n; i++) out[i] = (x[i] - sub) * s;
}

static size_t first_nonfinite(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return i;
    return n;
}

const lb__qkernels lb__qkernels_scalar = {absmax, minmax, div_clamp, sub_mul, first_nonfinite};

const lb__qkernels *lb__qkernels_get(lb_isa isa)
{
    switch (isa) {
    case LB_ISA_AVX512: return &lb__qkernels_avx512;
    case LB_ISA_AVX2: return &lb__qkernels_avx2;
    default: return &lb__qkernels_scalar;
    }
}
