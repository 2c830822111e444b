/* SmoothQuant (Xiao et al., "SmoothQuant: Accurate and Efficient
 * Post-Training Quantization for Large Language Models", ICML 2023):
 * per input channel j of a group of linear layers sharing one input,
 *     s_j = max|X_j|^alpha / max|W_j|^(1 - alpha)
 * (max|W_j| over every weight of the group), the activations divided by s
 * (folded into the norm or the layer that produces them) and the weights'
 * columns multiplied by s, so the product is unchanged before
 * quantization and the activations' outliers move into the weights. */
#ifndef LB_ALGO_SMOOTHQUANT_H
#define LB_ALGO_SMOOTHQUANT_H

#include <stddef.h>

#include "algo/calib_pass.h"

/* The alpha search's grid: LB__SMOOTH_GRID_STEP .. 1 - LB__SMOOTH_GRID_STEP
 * in steps of LB__SMOOTH_GRID_STEP (0.05 .. 0.95: 19 points, the range of
 * the paper's Figure 10 and llm-compressor's smoothing_strength), plus no
 * smoothing at all (s = 1). */
#define LB__SMOOTH_GRID_STEP 0.05f
#define LB__SMOOTH_GRID 19

/* Which inputs are smoothed: a bit (1u << lb__calib_site) per site. */
#define LB__SMOOTH_SITE(site) (1u << (site))
/* The default: every input of the layer (see smoothquant.c for why). */
#define LB__SMOOTH_DEFAULT_SITES                                                                             \
    (LB__SMOOTH_SITE(LB__SITE_ATTN_IN) | LB__SMOOTH_SITE(LB__SITE_O_IN) | LB__SMOOTH_SITE(LB__SITE_MLP_IN) | \
     LB__SMOOTH_SITE(LB__SITE_DOWN_IN))

typedef struct lb__smooth_options {
    float alpha;     /* migration strength in [0, 1] */
    int search;      /* 1: alpha chosen per group from a grid by the group's output error on the sample rows */
    int threads;
    unsigned sites;  /* LB__SMOOTH_SITE bits; 0: LB__SMOOTH_DEFAULT_SITES */
} lb__smooth_options;

/* s (cols) from the per-channel maxima of the activations and of the
 * group's weights. Channels where either maximum is 0 (or not finite) get
 * s_j = 1 (nothing to migrate); s is clamped to [1e-5, 1e5]. */
void lb__smoothquant_scales(const float *x_absmax, const float *w_absmax, size_t cols, float alpha, float *s);

/* A calibration pass layer callback (SOURCE mode): smooths the layer's
 * groups in q and folds the scales (see smoothquant.c for which groups and
 * where). ctx: an lb__smooth_options. */
lb_status lb__smoothquant_layer(void *ctx, lb_qmodel *q, const lb__layer_stats *s);

#endif
