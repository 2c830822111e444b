/* Simulated activation quantization: the input rows of a linear layer
 * quantized and dequantized under the layer's activation spec before an
 * fp32 (or packed-weight) product, for every activation spec the W8A8
 * kernels (kernel/w8a8.h) do not compute on directly:
 *   DYNAMIC  the rows as one [n, in] tensor under the spec: per token
 *            (token/channel granularity) or per group of the row (MXFP4,
 *            MXFP8, FP8 per group of 128): the same math the engine's
 *            kernel applies before its low-precision GEMM
 *   STATIC   one fixed scale s (amax / elem_max from calibration, as a
 *            writer stores it: weights/engine_scales.h): x / s rounded to
 *            the element (saturating), times s
 *   LOCAL    NVFP4 W4A4: per-block ue4m3 scales at run time under the
 *            tensor scale made from the calibrated amax (amax / (6 * 448));
 *            should an input exceed the calibrated range, the tensor scale
 *            grows with it (an engine's block scales would saturate
 *            instead: the one place this differs, and only past the
 *            calibration's range)
 * The product then runs on the dequantized activations in fp32, so the
 * result equals the engine's up to the order of the sums. */
#ifndef LB_MODEL_ACT_SIM_H
#define LB_MODEL_ACT_SIM_H

#include <stddef.h>

#include "lowbit.h"

/* y[n][in] = dequantize(quantize(x[n][in])) under act (range: STATIC the
 * static scale, LOCAL the calibrated input range; unused otherwise). */
lb_status lb__act_simulate(const lb_qact *act, float range, const float *x, size_t n, size_t in, int threads, float *y);

#endif
