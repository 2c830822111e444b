/* Activations as llama.cpp's CPU backend feeds them to a matmul.
 *
 * ggml does not multiply fp32 activations by a block-typed weight: it first
 * converts each input row to the weight type's "vec_dot_type" (Q8_0 for
 * Q4_0/Q5_0/Q8_0/IQ4_NL/MXFP4/NVFP4, Q8_1 for Q4_1/Q5_1, Q8_K for the
 * K-quants and IQ4_XS, F16 for F16, BF16 for BF16) and takes integer dot
 * products on those codes. Rounding a row the same way and decoding it back
 * to fp32 ("fake quantization") leaves only the float summation order
 * between lowbit's products and llama.cpp's. */
#ifndef LB_MODEL_GGML_ACT_H
#define LB_MODEL_GGML_ACT_H

#include <stddef.h>

#include "lowbit.h"

/* ggml's vec_dot types (Q8_1 and Q8_K are no lb_dtype: nothing stores them) */
typedef enum lb__ggml_act {
    LB__GGML_ACT_F32 = 0, /* kept fp32: f32 weights, or no ggml matmul weight */
    LB__GGML_ACT_F16,
    LB__GGML_ACT_BF16,
    LB__GGML_ACT_Q8_0,
    LB__GGML_ACT_Q8_1,
    LB__GGML_ACT_Q8_K
} lb__ggml_act;

/* The type a matmul input is converted to for a weight of type w. */
lb__ggml_act lb__ggml_act_type(lb_dtype w);

/* y = x (n values, one or more whole rows) rounded to act and decoded:
 * Q8_0/Q8_1 per 32, Q8_K per 256, F16/BF16 per value, F32 copied. x and y
 * may be the same array. LB_ERR_ARG when n is not a multiple of the block
 * (act as an int, so that Python can call it). */
lb_status lb__ggml_act_round(int act, const float *x, size_t n, float *y);

#endif
