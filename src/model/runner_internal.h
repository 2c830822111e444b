/* What calibration (src/algo/calibrate.c) needs of the runner beyond
 * lowbit.h. */
#ifndef LB_MODEL_RUNNER_INTERNAL_H
#define LB_MODEL_RUNNER_INTERNAL_H

#include <stddef.h>

#include "lowbit.h"

/* Called in every layer with the keys (after the rotary embedding and any
 * k norm: what the cache stores) and values of n tokens, kv_dim floats
 * each, before they are stored. */
typedef void (*lb__kv_hook)(void *ctx, size_t layer, const float *k, const float *v, size_t n, size_t kv_dim);
void lb__runner_set_kv_hook(lb_runner *r, lb__kv_hook hook, void *ctx);

/* A runner's build modes (lb__runner_build's calibration):
 *   0                   lb_runner_from_qmodel: everything as the qmodel says;
 *   LB__RUNNER_CALIB    activations and KV cache fp32 whatever the qmodel
 *                       says, weights as it holds them (what lb_calibrate
 *                       measures on; the sequential calibration pass);
 *   LB__RUNNER_SOURCE   that, and every tensor's source values too (the
 *                       replacement or the stored values: nothing
 *                       quantized or rounded to 16-bit): the model the
 *                       quantized model was made from, as folded so far. */
enum { LB__RUNNER_CALIB = 1, LB__RUNNER_SOURCE = 2 };
/* lb_runner_from_qmodel in one of those modes. */
lb_status lb__runner_build(const lb_qmodel *q, const lb_runner_options *o, int calibration, lb_runner **out);
/* The same in a calibration mode with no decoder layer loaded: the
 * calibration pass loads each in its turn (lb__runner_reload_layer_as)
 * and drops it after (lb__runner_unload_layer), and drops the embeddings
 * and head once the windows are embedded (lb__runner_unload_ends), so it
 * holds one layer's weights, not the model's (fp32 in SOURCE mode: 0.54
 * GB for SmolLM2, 32 GB for an 8B model). Running a layer that is not
 * loaded, or embedding after the ends are dropped, is LB_ERR_ARG. */
lb_status lb__runner_build_layerwise(const lb_qmodel *q, const lb_runner_options *o, int calibration, lb_runner **out);
void lb__runner_unload_layer(lb_runner *r, size_t li);
/* Reloads weights w0 .. w1-1 of loaded layer li (in model order: q, k, v,
 * o, gate, up, down = 0 .. 6) from q in the runner's build mode, the rest
 * of the layer as it is: what the SUBLAYERS pass needs after a callback
 * changed one site's weights. On failure those already reloaded stay so. */
lb_status lb__runner_reload_weights(lb_runner *r, const lb_qmodel *q, size_t li, int w0, int w1);
void lb__runner_unload_ends(lb_runner *r);

/* The one builder: legacy_act is lb_runner_new's W8A8 format for the
 * seven projections (LB_FMT_FP32: the qmodel's lb_qact instead). */
lb_status lb__runner_build_ex(const lb_qmodel *q, const lb_runner_options *o, lb_format legacy_act, int calibration,
                              lb_runner **out);

/* lb_runner_forward, the logits of positions first .. n-1 computed rows
 * positions at a time into buf (rows x vocab floats) and handed to fn
 * (pos: the chunk's first position, count <= rows): an evaluation that
 * only reads the logits holds one chunk, not n x vocab floats. */
typedef lb_status (*lb__logits_fn)(void *ctx, size_t pos, const float *logits, size_t count);
lb_status lb__runner_forward_chunked(lb_runner *r, const int32_t *tokens, size_t n, size_t first, size_t rows,
                                     float *buf, lb__logits_fn fn, void *fn_ctx);

/* The runner's context length (calibration windows are at most this). */
size_t lb__runner_max_ctx(const lb_runner *r);

/* Layer by layer, for the calibration pass (src/algo/calib_pass.c), which
 * carries every window's hidden states from one layer to the next. */
size_t lb__runner_n_layers(const lb_runner *r);
size_t lb__runner_dim(const lb_runner *r);
/* x[n][dim] = the embeddings of tokens (ids checked). */
lb_status lb__runner_embed(lb_runner *r, const int32_t *tokens, size_t n, float *x);
/* Runs decoder layer li on x[n][dim] in place: n tokens at positions
 * 0 .. n-1 (one window, as from an empty cache; layer li's cache rows are
 * overwritten; the position of lb_runner_forward is left as it was). The
 * activation and KV hooks fire as in lb_runner_forward. */
lb_status lb__runner_layer(lb_runner *r, size_t li, float *x, size_t n);
/* The same for the layer's inputs alone: x is left as it is and the
 * hooks fire for all of the layer's linear inputs and K/V, but down_proj's
 * product (nothing reads it) is not computed. The calibration pass's
 * collecting run, whose outputs the run through the changed layer
 * replaces: a fifth of a Llama layer's matmul work saved. */
lb_status lb__runner_layer_inputs(lb_runner *r, size_t li, const float *x, size_t n);
/* Layer li in stages, for the calibration pass's SUBLAYERS mode (GPTQ's
 * true-sequential order): each stage of one window, on that window's
 * hidden states x[n][dim] in place and its carry[n][carry_width] (what
 * one stage hands the next), ending where the next linear input is made:
 *   ATTN_IN   input_layernorm (q/k/v's hooks); x, carry untouched;
 *   O_IN      that again, q/k/v, the KV cache (KV hook), attention into
 *             carry (o_proj's hook); x untouched;
 *   MLP_IN    x += o_proj(carry), post_attention_layernorm (gate/up's hooks);
 *   DOWN_IN   that norm again, silu(gate) * up into carry (down_proj's hook);
 *   OUT       x += down_proj(carry): the layer's output.
 * Run in that order (ATTN_IN may be left out), a window ends as
 * lb__runner_layer leaves it when the weights are the same at every stage;
 * between stages the layer may be reloaded, so each stage computes with
 * the weights as they then are. Positions 0 .. n-1, as lb__runner_layer;
 * a stage fires the hooks of the norms it computes. */
typedef enum lb__layer_stage {
    LB__STAGE_ATTN_IN = 0,
    LB__STAGE_O_IN = 1,
    LB__STAGE_MLP_IN = 2,
    LB__STAGE_DOWN_IN = 3,
    LB__STAGE_OUT = 4,
    LB__STAGE_COUNT = 5
} lb__layer_stage;
/* Floats per token of a stage's carry: the wider of the attention output
 * and the MLP's hidden width. */
size_t lb__runner_carry_width(const lb_runner *r);
lb_status lb__runner_layer_stage(lb_runner *r, size_t li, lb__layer_stage stage, float *x, float *carry, size_t n);
/* logits[n][vocab] from the hidden states x[n][dim] after the last
 * layer: the final norm and the output head, as lb_runner_forward ends
 * (the head's hook fires). Rows are independent: any subset of a window's
 * rows gives those rows' logits. */
lb_status lb__runner_logits(lb_runner *r, const float *x, size_t n, float *logits);
/* Loads layer li again (weights, norms, biases) from q, a quantized model
 * of the same model, in the runner's build mode: what an algorithm changed
 * in that layer is what the next lb__runner_layer computes with. On
 * failure the layer is as it was. */
lb_status lb__runner_reload_layer(lb_runner *r, const lb_qmodel *q, size_t li);
/* The same in build mode `calibration` (LB__RUNNER_CALIB or _SOURCE) for
 * a runner built in one of them: the sequential calibration pass takes a
 * layer's statistics with the layer's source values and then carries the
 * windows on through it as the quantized model holds it. */
lb_status lb__runner_reload_layer_as(lb_runner *r, const lb_qmodel *q, size_t li, int calibration);

/* Loads the embedding and the output head again from q (as
 * lb__runner_reload_layer does a layer); on failure they are as they were.
 * The memory counts stay those of the build. */
lb_status lb__runner_reload_ends(lb_runner *r, const lb_qmodel *q);
/* Makes the KV cache again as q says (its format and static scales, or
 * the runner options' format when q has none): what the next
 * lb__runner_layer stores and attends over. On failure it is as it was. */
lb_status lb__runner_reload_kv(lb_runner *r, const lb_qmodel *q);

#endif
