/* The scales engines load beside quantized weights, defined once: the
 * writers (src/export) store them, the runner (src/model) evaluates them,
 * and a quantized checkpoint's qmodel (qmodel_checkpoint.c) inverts them,
 * so `lowbit ppl` on a written directory computes what `lowbit ppl
 * --scheme` computed on its source.
 *
 *   static input scale   compressed-tensors and ModelOpt "input_scale" of
 *                        FP8 / INT8 activations: x_hat = q * s with
 *                        s = amax / qmax (qmax 448 for fp8_e4m3, 127 for
 *                        int8), rounded to the dtype the output stores
 *                        scales in (compressed-tensors: the model's; ModelOpt's
 *                        F32 holds that value exactly). The rounded value is
 *                        what an engine multiplies by, so it is also what
 *                        lowbit evaluates.
 *   NVFP4 tensor scale   a multiplier ts = amax / (6 * 448) (ModelOpt's
 *                        weight_scale_2 and input_scale); compressed-tensors
 *                        stores the divisor 1 / ts (weight_global_scale,
 *                        input_global_scale).
 *   KV scale             k_scale, v_scale = amax / 448, F32.
 *
 * The inverses find the calibrated range (amax) that gives a stored
 * scale back bit for bit when one exists (always, for a scale lowbit
 * wrote); for a scale another tool computed differently, the nearest. */
#ifndef LB_WEIGHTS_ENGINE_SCALES_H
#define LB_WEIGHTS_ENGINE_SCALES_H

#include "lowbit.h"

#define LB__E4M3_MAX 448.0f /* fp8_e4m3's largest value: FP8 scales, NVFP4 block scales */
#define LB__E2M1_MAX 6.0f   /* fp4_e2m1's largest value */
#define LB__INT8_MAX 127.0f /* symmetric int8 activations */

/* qmax of static activations of element el: 448 (fp8_e4m3) or 127 (int8). */
float lb__static_qmax(lb_format el);
/* fl(amax / qmax(el)) rounded to dt (bf16, f16; f32 leaves it). */
float lb__static_input_scale(lb_format el, float amax, lb_dtype dt);
/* amax / 448 */
float lb__kv_scale(float amax);
/* amax / (6 * 448): the multiplier of an NVFP4 tensor (as lb__tensor_scale makes it) */
float lb__nvfp4_tensor_scale(float amax);
/* compressed-tensors' divisor of a tensor scale: 1 / ts */
float lb__ct_global_divisor(float ts);

/* The a with fl(a / qmax) == s, when one exists (the one nearest s * qmax);
 * else fl(s * qmax). s finite and > 0. */
float lb__amax_for_scale(float s, float qmax);
/* The t with fl(1 / t) == g nearest 1 / g (in double), else fl(1 / g): a
 * compressed-tensors divisor back to lowbit's multiplier. */
float lb__scale_for_divisor(float g);

#endif
