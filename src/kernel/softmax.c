/* The softmax's scalar reference and dispatch (see softmax.h). */
#include "kernel/softmax.h"

#include <math.h>

#include "util/bits.h"
#include "util/cpu.h"

float lb__exp(float x)
{
    if (x != x) return x;
    float xc = x < LB__EXP_LO ? LB__EXP_LO : x > LB__EXP_HI ? LB__EXP_HI : x;
    float n = nearbyintf(xc * LB__EXP_LOG2E);
    /* + n * C2 with C2 > 0: compilers may rewrite a - n * (negative constant)
     * as a + n * (its magnitude), which rounds the other way in a directed
     * rounding mode, and the vector twins would no longer match */
    float r = (xc - n * LB__EXP_C1) + n * LB__EXP_C2;
    float p = LB__EXP_P7;
    p = p * r + LB__EXP_P6;
    p = p * r + LB__EXP_P5;
    p = p * r + LB__EXP_P4;
    p = p * r + LB__EXP_P3;
    p = p * r + LB__EXP_P2;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    int32_t ni = (int32_t)n, e1 = ni >> 1, e2 = ni - e1; /* both in [-76, 65]: normal powers of two */
    float s1 = lb__f32_from_bits((uint32_t)(e1 + 127) << 23), s2 = lb__f32_from_bits((uint32_t)(e2 + 127) << 23);
    return p * s1 * s2;
}

static void softmax_scalar(float *row, size_t valid, float scale)
{
    float m = -INFINITY;
    for (size_t p = 0; p < valid; p++) {
        row[p] *= scale;
        if (row[p] > m) m = row[p];
    }
    float lane[16] = {0};
    for (size_t p = 0; p < valid; p++) {
        row[p] = lb__exp(row[p] - m);
        lane[p % 16] += row[p];
    }
    for (size_t w = 8; w >= 1; w /= 2)
        for (size_t i = 0; i < w; i++) lane[i] += lane[i + w];
    float inv = 1.0f / lane[0];
    for (size_t p = 0; p < valid; p++) row[p] *= inv;
}

void lb__softmax(float *row, size_t valid, size_t len, float scale, lb_isa isa)
{
    lb__softmax_fn f = softmax_scalar;
    isa = lb__isa_x86(lb__isa_clamp(isa)); /* x86 only: NEON runs the reference */
    if (isa >= LB_ISA_AVX512 && lb__softmax_avx512) f = lb__softmax_avx512;
    else if (isa >= LB_ISA_AVX2 && lb__softmax_avx2) f = lb__softmax_avx2;
    f(row, valid, scale);
    for (size_t p = valid; p < len; p++) row[p] = 0.0f;
}
