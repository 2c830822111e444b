/* GPTQ as a method (lowbit.h, "Outlier methods"): the calibration pass's
 * layer callback that runs the solver (gptq.h) on every quantized linear
 * weight of a decoder layer with the Hessian of its input, and sets the
 * result as the entry's quantized tensor. */
#ifndef LB_ALGO_GPTQ_LAYER_H
#define LB_ALGO_GPTQ_LAYER_H

#include <stddef.h>

#include "algo/calib_pass.h"
#include "algo/gptq.h"

typedef struct lb__gptq_layer_options {
    lb__gptq_options gptq;   /* damp (relative, > 0), block, actorder, static_groups, threads */
    int mse_scales;          /* 1: spec grids choose each group's scales by the clip=mse search
                                (lb__gptq_grid_init), 0: by the group's range, as RTN */
    lb_message_fn warn;      /* raised dampening, dead input columns (NULL: not told) */
    void *warn_ctx;
    /* filled by the callback, summed over the layers */
    size_t weights;          /* weights quantized by GPTQ */
    size_t damp_raised;      /* of them, with the dampening raised */
    size_t dead_columns;     /* input columns never nonzero, over all of them */
    double seconds;          /* wall time in the solver and the grids */
} lb__gptq_layer_options;

/* A calibration pass layer callback (QUANTIZED mode, options.hessian = 1):
 * for every weight of the layer (q, k, v, o, gate, up, down) that is
 * QUANTIZED under a spec without outlier columns, GPTQ on its values (the
 * replacement when a transform set one, else the stored ones) against its
 * site's Hessian, on the spec's grid (gptq_grid.h; a two-level spec's
 * tensor scale from its fused group's range), the quantized tensor set on
 * the entry (lb_qmodel_set_qtensor). Kept, stored and replaced entries and
 * those with outlier columns are left alone; a weight held in a ggml block
 * type is rounded onto its blocks' grids (gptq_grid_ggml.h) and its bytes
 * set for the GGUF writer (lb__qmodel_set_ggml_bytes). ctx: an
 * lb__gptq_layer_options. */
lb_status lb__gptq_layer(void *ctx, lb_qmodel *q, const lb__layer_stats *s);

/* 1 if entry i is one lb__gptq_layer quantizes (QUANTIZED under a spec,
 * no outlier columns); 0 otherwise. */
int lb__gptq_target(const lb_qmodel *q, size_t i);

#endif
