/* GPTQ's grids for lowbit's own weight specs (lb_qspec): what a column
 * rounds to, and the quantized tensor that the writers store at the end.
 *
 * One grid serves every spec, because it chooses and applies scales with
 * lb_quantize's own code rather than a copy of its rules:
 * - params() of a group = the scales lb_quantize chooses for the group's
 *   columns (their current values, or W's with static groups): the rows x n
 *   sub-matrix is quantized with lb__quantize_ts and its scales read back.
 *   The spec's clip=mse search, MX rounding, integer range, affine zero
 *   point and 2-D blocks come with it.
 * - round() = lb_quantize's encode step and lb_dequantize's decode step on
 *   the fixed scales (lb__requantize_values), bit for bit.
 * - Scales chosen from the whole weight are chosen once, before any
 *   rounding, by lb__quantize_ex on the weight given to
 *   lb__gptq_grid_init: a per-TENSOR scale (the grid is then static), and
 *   a two-level spec's tensor scale (NVFP4; from the tensor's largest
 *   magnitude, or a fused group's shared amax when larger), kept fixed
 *   while the block scales follow the groups.
 * So with an identity Hessian GPTQ gives lb_dequantize(lb_quantize(W))
 * exactly, and lb__gptq_grid_qtensor gives lb_quantize(W)'s bytes.
 *
 * Groups: the spec's block along a row (gN, and the C of a 2-D bRxC block,
 * whose scale spans R rows: params() sees every row of a group's columns,
 * so a band's scale is chosen from all of its rows, as lb_quantize does);
 * the whole row for channel, token and tensor granularity. */
#ifndef LB_ALGO_GPTQ_GRID_H
#define LB_ALGO_GPTQ_GRID_H

#include <stddef.h>
#include <stdint.h>

#include "algo/gptq.h"
#include "lowbit.h"
#include "quant/quant_internal.h"

/* The grid's state; fill it with lb__gptq_grid_init, free it with
 * lb__gptq_grid_free. */
typedef struct lb__gptq_spec_grid {
    lb_qspec spec;             /* the entry's: the quantized tensor's */
    lb_qspec choose;           /* what params() and the whole-weight scales are chosen with: spec, or spec with
                                  clip=mse when lb__gptq_grid_init was asked for it and the spec's scales allow it */
    lb__scale_rules rules;     /* rules.tensor_scale: the two-level tensor scale, else 1 */
    lb_isa isa;
    int threads;               /* for lb__quantize_ts of a group and the final tensor */
    size_t rows, cols;
    size_t group, groups;      /* columns per scale along a row, scales per row */
    size_t block_rows;         /* rows sharing a scale: R of a 2-D block, else 1 */
    int whole_tensor;          /* per-tensor granularity: scales[0] serves every value */
    lb__block_scale *scales;   /* rows x groups (a 2-D band's scale in each of its rows); one if whole_tensor */
    unsigned char *chosen;     /* per group: params() has set its scales */
    float *sub;                /* rows x group: a group's values, contiguous */
    float *tmp;                /* rows */
    uint8_t *codes;            /* 4 x rows */
} lb__gptq_spec_grid;

/* mse_scales: each group's scales (and a per-tensor scale) chosen by the
 * spec's clip=mse search (lb_quantize's: the clipping ratio of least
 * squared error per block) instead of its range, where the spec's scale
 * format takes the search (not e8m0, not two-level); the stored tensor
 * keeps spec.
 * A grid for a rows x cols weight w under spec: g holds its state, out
 * the callbacks for lb__gptq (out->ctx = g). w is read here only (per-tensor
 * and two-level scales); tensor_amax: a fused group's shared largest
 * magnitude for a two-level spec's tensor scale, 0 for the weight's own
 * (lb__quantize_ex's rule; lb__qmodel_group_amax gives it). threads: for
 * quantizing groups and the final tensor (0: one per CPU). LB_ERR_ARG for a
 * spec lb_qspec_validate refuses or bad sizes, LB_ERR_NAN for a value of w
 * that is not finite, LB_ERR_NOMEM. On an error g holds nothing to free. */
lb_status lb__gptq_grid_init(lb__gptq_spec_grid *g, const lb_qspec *spec, const float *w, size_t rows, size_t cols,
                             float tensor_amax, int threads, int mse_scales, lb__gptq_grid *out);
void lb__gptq_grid_free(lb__gptq_spec_grid *g);

/* The quantized tensor of q (rows x cols: lb__gptq's output with this grid,
 * every value on its block's grid) under the scales GPTQ used: the tensor
 * lb_qmodel_set_qtensor stores for the writers. lb_dequantize of it gives q
 * back exactly. LB_ERR_ARG if some group's scales were never chosen (GPTQ
 * failed or did not run). */
lb_status lb__gptq_grid_qtensor(const lb__gptq_spec_grid *g, const float *q, lb_qtensor **out);

/* For the tests (tests/algo/test_gptq_grid.py): GPTQ of w (in place, the
 * dequantized result) under the spec named by spec_text, against h (NULL:
 * the grid's plain rounding, every group's scales from w), and in *out (if
 * not NULL) the quantized tensor of the result. report: NULL or 5 doubles
 * as lb__gptq_int_sym_test's. */
lb_status lb__gptq_spec_test(const char *spec_text, float *w, size_t rows, size_t cols, const double *h,
                             float tensor_amax, size_t block, double damp, int actorder, int static_groups,
                             int threads, double *report, lb_qtensor **out);

#endif
