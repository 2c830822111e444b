/* Folding per-input-channel scales into a decoder layer, the step that
 * SmoothQuant and AWQ share: the weights that read one linear input get
 * their columns multiplied by s and whatever produces that input is
 * divided by s, so the layer computes the same before quantization
 * (exactly, up to fp32 rounding of the new values):
 *   ATTN_IN   input_layernorm's weight / s        (RMSNorm: y = w * x / rms)
 *   MLP_IN    post_attention_layernorm's weight / s
 *   O_IN      v_proj's rows (and bias) / s: o_proj's input channel
 *             (head h, d) is attention-weighted rows of v's channel
 *             (h / (n_heads / n_kv_heads), d), so with GQA the scale must be
 *             one value per kv channel, repeated over the q heads of its
 *             kv group (the caller derives it so)
 *   DOWN_IN   up_proj's rows (and bias) / s: silu(gate) * up is linear in up
 * Everything goes through lb_qmodel_replace from the entries' current
 * source values (lb_qmodel_source_f32), so folds compose (a second fold
 * on the same layer multiplies in) and a QUANTIZED entry is then quantized
 * from its new values. */
#ifndef LB_ALGO_FOLD_H
#define LB_ALGO_FOLD_H

#include "algo/calib_pass.h"

/* Multiplies the columns of the site's weights (s->site[site].weight) by
 * scale (s->site[site].cols values, finite and > 0) and divides the
 * producer by it, as above. LB_ERR_ARG for a scale that is not positive
 * and finite, for an O_IN scale that differs between the q heads of one
 * kv group (naming the channel), or when the layer's tensors are not the
 * Llama layout the stats say (names, shapes). Nothing is changed on an
 * argument error; an allocation failure midway may leave some of the
 * layer folded (the caller stops then). */
lb_status lb__fold_input_scale(lb_qmodel *q, const lb__layer_stats *s, lb__calib_site site, const float *scale,
                               int threads);

#endif
