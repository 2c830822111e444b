/* Attention's softmax over one row of scores, defined once so that every
 * instruction set computes the same bits:
 *
 *   1. y[p] = x[p] * scale, for p < valid;
 *   2. m = the largest y[p] (NaNs ignored; -inf if all are);
 *   3. e[p] = lb__exp(y[p] - m);
 *   4. the sum of the e[p] in 16 lanes -- lane i adds e[i], e[i+16], ...
 *      in order, from +0 -- then the lanes pairwise: lane i + lane i+8
 *      (i < 8), then i + i+4, i + i+2, i + i+1;
 *   5. row[p] = e[p] * (1 / sum) for p < valid, and 0 for valid <= p < len.
 *
 * Every operation is one IEEE fp32 rounding in the current rounding mode
 * (no fused multiply-add, no reassociation), which scalar and vector code
 * both perform, so the scalar function is the reference the vector ones
 * equal bit for bit (test_softmax, in 3 rounding modes), with one limit: a
 * row holding two different NaNs gives NaN either way, but which one's sign
 * and payload spreads depends on the operand order the compiler chose. The lanes of step 4 are what a 16-wide vector sums;
 * the libm expf and the sequential sum they replace took ~17% of SmolLM2's
 * decode at 1024 positions. */
#ifndef LB_KERNEL_SOFTMAX_H
#define LB_KERNEL_SOFTMAX_H

#include <stddef.h>

#include "lowbit.h"

/* e^x: NaN for NaN; x clamped to [-104, 88.75] (below, e^x is under half
 * the smallest subnormal: 0; above, past FLT_MAX: inf); n = x * log2(e)
 * rounded to an integer (current rounding mode), r = (x - n * C1) + n * C2
 * with C1 - C2 = ln 2 (C1 exact in 9 bits, so n * C1 is exact), e^r by its
 * Taylor polynomial of degree 7 in Horner's form (|r| <= 0.35: the
 * truncation is below 2^-27 relative), times 2^n as two exact powers of two
 * (2^(n>>1), then 2^(n - (n>>1)): the one rounding of a subnormal result
 * happens last; n in [-151, 129], the halves in [-76, 65]). In
 * round-to-nearest, within 2 ulp of e^x for normal results (test_softmax
 * measures 1.2); in a directed mode the same operations (the sets agree)
 * but n can be one off and the error some tens of ulp. */
float lb__exp(float x);

/* The softmax above on row[0 .. len), valid <= len, valid >= 1. */
void lb__softmax(float *row, size_t valid, size_t len, float scale, lb_isa isa);

/* The vector sets (softmax_avx512.c, softmax_avx2.c): steps 1-5 on
 * row[0 .. valid); NULL where not compiled. */
typedef void (*lb__softmax_fn)(float *row, size_t valid, float scale);
extern const lb__softmax_fn lb__softmax_avx512;
extern const lb__softmax_fn lb__softmax_avx2;

/* The constants of lb__exp, shared by its vector twins. */
#define LB__EXP_LO (-104.0f)
#define LB__EXP_HI 88.75f
#define LB__EXP_LOG2E 1.44269502f
#define LB__EXP_C1 0.693359375f
#define LB__EXP_C2 2.12194440e-4f /* C1 - ln 2 */
/* 1/k! for k = 7 .. 2 (Horner's order; then 1 and 1), each the float
 * nearest the quotient */
#define LB__EXP_P7 (1.0f / 5040.0f)
#define LB__EXP_P6 (1.0f / 720.0f)
#define LB__EXP_P5 (1.0f / 120.0f)
#define LB__EXP_P4 (1.0f / 24.0f)
#define LB__EXP_P3 (1.0f / 6.0f)
#define LB__EXP_P2 0.5f

#endif
