/* What the perplexity and KL-divergence loops share. */
#ifndef LB_EVAL_INTERNAL_H
#define LB_EVAL_INTERNAL_H

#include "lowbit.h"

/* log sum exp(logits), the max subtracted first, in double. */
double lb__log_sum_exp(const float *logits, size_t vocab);
/* The window length and how many whole windows the text gives. */
lb_status lb__eval_windows(size_t n, const lb_eval_options *o, uint32_t *ctx, size_t *chunks);
/* Runs one window (its first token replaced by BOS when bos >= 0) from an
 * empty cache; logits of the scored half only: (ctx - ctx/2) x vocab
 * floats, row j - ctx/2 for position j. window holds ctx ids after. */
lb_status lb__eval_window(lb_runner *r, const int32_t *tokens, uint32_t ctx, int32_t bos, int32_t *window,
                          float *logits);

#endif
