/* What the library's own layers need of a quantized model beyond
 * lowbit.h's lb_qmodel_*: the runner's legacy class specs and the fused
 * group's shared range for algorithms that quantize themselves (GPTQ). */
#ifndef LB_WEIGHTS_QMODEL_INTERNAL_H
#define LB_WEIGHTS_QMODEL_INTERNAL_H

#include <stddef.h>

#include "lowbit.h"

/* lb_runner_new's class specs may be a "plain" bf16/fp16/fp32 spec
 * (kernel/qmat.h, lb__qspec_is_plain): the weights are rounded to that
 * format and held as 16-bit codes, as the runner always did. This keeps
 * tensor i (KEPT) with that plain spec remembered; the runner honours it.
 * Writers never see such an entry (only lb_runner_new makes them). */
lb_status lb__qmodel_keep_plain(lb_qmodel *q, size_t i, const lb_qspec *plain);
/* The plain spec of a KEPT entry made by lb__qmodel_keep_plain, or NULL. */
const lb_qspec *lb__qmodel_plain(const lb_qmodel *q, size_t i);

/* The largest magnitude from which a two-level entry's tensor (global)
 * scale is made: the maximum over the members of its fused group that are
 * QUANTIZED under the same spec (vLLM loads one global scale per fused
 * q/k/v and gate/up), else the tensor's own; 0 for an entry that is not
 * QUANTIZED under a two-level spec. Computed once and cached until a
 * member changes (thread-safe). */
lb_status lb__qmodel_group_amax(const lb_qmodel *q, size_t i, float *amax);

/* Every tensor on its own: no fused groups (lb_runner_new's class specs
 * keep lb_quantize's per-tensor two-level scales, bit for bit as before). */
void lb__qmodel_unfuse(lb_qmodel *q);

/* lb_qmodel_quantized reading the source into scratch (n_elements floats,
 * the caller's, overwritten) instead of a fresh fp32 copy: export quantizes
 * tensor after tensor through one buffer, so the pages are faulted in once,
 * not once per tensor. NULL scratch: lb_qmodel_quantized. */
lb_status lb__qmodel_quantized_scratch(const lb_qmodel *q, size_t i, int threads, float *scratch, lb_qtensor **out,
                                       int *owned);
/* lb_qmodel_quantized, always a tensor the caller owns (a copy of one an
 * algorithm set): a runner outlives nothing it borrowed. */
lb_status lb__qmodel_quantized_owned(const lb_qmodel *q, size_t i, int threads, lb_qtensor **out);

/* The importance vector of entry i (lb_qmodel_set_imatrix) and its
 * length, or NULL. Borrowed: valid until the entry changes. */
const float *lb__qmodel_imatrix(const lb_qmodel *q, size_t i, size_t *n);

/* The 16-bit values of entry i's outlier columns (lb_qmodel_set_outliers):
 * dst[rows][n] = the source's columns, rounded to the qmodel's dtype. */
lb_status lb__qmodel_outlier_values(const lb_qmodel *q, size_t i, float *dst);
/* LB_ERR_UNSUPPORTED naming the first entry with outlier columns and the
 * format (a writer's name) that cannot hold it; LB_OK when none has. */
lb_status lb__qmodel_check_no_outliers(const lb_qmodel *q, const char *format);

/* The fused group id of a canonical name: 2N for
 * model.layers.N.self_attn.{q,k,v}_proj.weight, 2N + 1 for
 * model.layers.N.mlp.{gate,up}_proj.weight, -1 otherwise. */
long lb__fused_group_of(const char *name);

#endif
