/* The output error of a group of linear layers sharing one input when
 * that input is divided by per-channel scales s and the weights' columns
 * multiplied by them, both then quantized as the quantized model will:
 *   err(s) = sum over members k of || X W_k^T - Q_a,k(X / s) Q_w,k(W_k s)^T ||_F^2
 * on sample rows X of the input (before scaling). Q_w,k is member k's
 * weight quantizer (lb__quantize_ex under its spec, then dequantized; a
 * two-level spec takes its tensor scale from the largest |W s| over the
 * members under the same spec, as the fused q/k/v or gate/up group of
 * the quantized model does), the identity for a weight that is not
 * QUANTIZED. Q_a,k simulates member k's activation quantization
 * (model/act_sim.h) with, for STATIC and LOCAL activations, the range
 * calibration will find on the scaled input: max_j absmax_j / s_j over all
 * calibration tokens (absmax: the input's per-channel maxima), the static
 * scale rounded as a writer stores it (weights/engine_scales.h).
 *
 * That range, not one taken from the sample rows: in LLMs it is set by a
 * few tokens with outsized activations (SmolLM2: tens of times the rest
 * in some layers' down_proj inputs), which a row sample seldom holds, and
 * the quantization step it gives every other token is what the search
 * must see. (A variant taking the range from half the sample rows and
 * measuring the other half, meant to see clipping on new text, did worse:
 * SmolLM2 W8A8 static KLD 0.35 instead of 0.23, tests/algo/
 * test_smoothquant_e2e.py's setting.) Clipping on text beyond the
 * calibration's range is not modelled (smoothquant.c: on stories260K the
 * search's large alphas clip 20x more on held-out text). This is
 * SmoothQuant's alpha search (smoothquant.c). */
#ifndef LB_ALGO_SMOOTH_ERROR_H
#define LB_ALGO_SMOOTH_ERROR_H

#include <stddef.h>

#include "lowbit.h"

typedef struct lb__smooth_member {
    const float *w;       /* rows x cols: the weight's values before scaling (the caller's) */
    size_t rows;
    int quantized;        /* 1: QUANTIZED under spec; 0: Q_w is the identity */
    lb_qspec spec;
    lb_qact act;          /* mode NONE: Q_a is the identity */
    /* set by lb__smooth_group_init */
    float *y_ref;         /* n x rows: X W^T */
    float *col_absmax;    /* cols: max over rows of |w| */
} lb__smooth_member;

typedef struct lb__smooth_group {
    const float *x;          /* n x cols sample rows (the caller's) */
    size_t n, cols;
    const float *x_absmax;   /* cols: per-channel max |x| over all calibration tokens */
    lb__smooth_member m[3];
    size_t n_members;
    lb_dtype scale_dtype;    /* the quantized model's 16-bit dtype (static scales are rounded to it) */
    int threads;
    /* scratch, set by lb__smooth_group_init */
    float *xs, *xq, *ws, *y;
} lb__smooth_group;

/* After the fields above are filled in: the reference products and the
 * scratch. lb__smooth_group_free frees them (also after a failure). */
lb_status lb__smooth_group_init(lb__smooth_group *g);
/* err(s) (s: cols positive scales) in double. */
lb_status lb__smooth_group_error(lb__smooth_group *g, const float *s, double *err);
void lb__smooth_group_free(lb__smooth_group *g);

#endif
