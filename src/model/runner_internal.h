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

/* lb_runner_from_qmodel; calibration = 1 keeps the activations and the KV
 * cache fp32 whatever the qmodel says (what lb_calibrate measures on). */
lb_status lb__runner_build(const lb_qmodel *q, const lb_runner_options *o, int calibration, lb_runner **out);

/* The one builder: legacy_act is lb_runner_new's W8A8 format for the
 * seven projections (LB_FMT_FP32: the qmodel's lb_qact instead). */
lb_status lb__runner_build_ex(const lb_qmodel *q, const lb_runner_options *o, lb_format legacy_act, int calibration,
                              lb_runner **out);

/* The runner's context length (calibration windows are at most this). */
size_t lb__runner_max_ctx(const lb_runner *r);

#endif
