/* The W8A8 kernel sets behind lb__w8a8_matmul (w8a8.h): private to
 * w8a8*.c and the tests that compare the sets with each other.
 *
 * A call quantizes the activations once (lb__w8a8_acts), then each thread
 * runs a set's product over its slice of weight rows. Every set computes
 * the same numbers (w8a8.h): the int8 dot is exact, so only its
 * conversion to fp32 and the two products round; the fp8 dot follows
 * qdot.h's canonical order lane for lane. */
#ifndef LB_KERNEL_W8A8_KERNELS_H
#define LB_KERNEL_W8A8_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "kernel/w8a8.h"

/* The kernel sets. VNNI is AVX-512 plus vpdpbusd (lb__cpu_extras); NEON
 * is aarch64's (LB_ISA_NEON). */
typedef enum lb__w8a8_kind {
    LB__W8A8_SCALAR = 0,
    LB__W8A8_AVX2 = 1,
    LB__W8A8_AVX512 = 2,
    LB__W8A8_VNNI = 3,
    LB__W8A8_NEON = 4,
    LB__W8A8_KINDS = 5
} lb__w8a8_kind;

/* Activation rows are padded to a multiple of this many columns (one
 * 64-byte vector of int8 codes), so kernels read whole vectors of x. */
#define LB__W8A8_PAD 64
/* int32 accumulators hold a run of at most this many columns: with the
 * VNNI bias a product is at most 255 * 128 in magnitude, and
 * 2^16 * 255 * 128 < 2^31 (every other kernel's bound is smaller). */
#define LB__W8A8_RUN 65536

/* The quantized activations of one call.
 *   int8: q[t * ld + k], the code of x[t][k]; padding 0. Sets with
 *         `biased` store q + 128 as uint8 (= q ^ 0x80): vpdpbusd takes
 *         unsigned bytes times signed bytes, and the kernel subtracts
 *         128 * (the weight row's code sum) from the exact sum.
 *   fp8:  v[t * ld + k], the decoded e4m3 value of x[t][k] / s_t; padding +0.
 *   scale[t] = s_t; scale has n + 4 entries, the last 4 zero, so a kernel
 *   may load 4 at a time. */
typedef struct lb__w8a8_acts {
    size_t n, ld;
    int8_t *q;
    float *v;
    float *scale;
} lb__w8a8_acts;

typedef struct lb__w8a8_ops {
    int biased; /* int8 codes stored as q + 128 (VNNI) */
    /* int8: quantizes one token row x[cols] into q[0..cols) (as the set
     * stores them) and returns s_t; static_scale > 0 is used as s_t. */
    float (*quant_i8)(const float *x, size_t cols, float static_scale, int8_t *q);
    /* y[t * rows + r] for every token t and rows r0 <= r < r1 */
    void (*gemm_i8)(const lb__w8a8 *w, const lb__w8a8_acts *a, size_t r0, size_t r1, float *y);
    /* the same for fp8; wbuf: 4 * a->ld floats, 64-byte aligned, the
     * calling thread's */
    void (*gemm_f8)(const lb__w8a8 *w, const lb__w8a8_acts *a, size_t r0, size_t r1, float *y, float *wbuf);
} lb__w8a8_ops;

/* NULL .gemm_i8 where the build has no such set */
extern const lb__w8a8_ops lb__w8a8_scalar_ops, lb__w8a8_avx2_ops, lb__w8a8_avx512_ops, lb__w8a8_vnni_ops,
    lb__w8a8_neon_ops;

/* The best set for an instruction set on this CPU (VNNI at AVX-512 when
 * the CPU has it); a set the build or CPU lacks falls back. */
lb__w8a8_kind lb__w8a8_kind_for(lb_isa isa);
/* 1 if this build and CPU can run the set. */
int lb__w8a8_kind_available(lb__w8a8_kind kind);

/* lb__w8a8_matmul with a named set (which must be available). */
lb_status lb__w8a8_matmul_kind(const lb__w8a8 *w, const float *x, size_t n, float static_scale, float *y,
                               int threads, lb__w8a8_kind kind);

/* The fp32 value of every e4m3 code (lb_decode_value's), built once. */
const float *lb__w8a8_e4m3_table(void);

/* The int8 activation scale of a row: absmax / 127 (absmax ignores NaN as
 * the vector max does: m = a > m ? a : m), 1 where that is 0. */
static inline float lb__w8a8_i8_scale(float amax)
{
    float s = amax / 127.0f;
    return s == 0 ? 1.0f : s;
}

/* The int8 code of v = x / s: clamped first (a NaN becomes -127, as
 * max(v, -127) then min(v, 127) leave it in the vector sets), then rounded
 * to nearest even by the default rounding mode. */
static inline int lb__w8a8_i8_code(float v)
{
    v = v > -127.0f ? v : -127.0f;
    v = v < 127.0f ? v : 127.0f;
    /* |v| <= 127: adding 1.5 * 2^23 leaves the integer part in the
     * mantissa, rounded to nearest even, exactly as cvtps2dq does */
    return (int)((v + 12582912.0f) - 12582912.0f);
}

#endif
