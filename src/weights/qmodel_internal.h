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

/* The ggml blocks an algorithm made for entry i (GPTQ onto its ggml type,
 * algo/gptq_grid_ggml.h): n = lb_dtype_bytes(entry's ggml type, its
 * elements) bytes, the rows in the source's layout (lb_qmodel_source_f32's,
 * before any row move a GGUF needs), copied. tensor_scale: NVFP4's
 * per-tensor scale (the blocks hold the values over it), 1 for the other
 * types. The GGUF writer stores them as they are, lb_qmodel_values_f32
 * gives their values. The entry's ggml type must be set first
 * (lb_qmodel_set_ggml); anything that changes the entry (set_ggml,
 * set_spec, keep, replace, set_imatrix) drops them. LB_ERR_ARG: no ggml
 * block type, a wrong size, a bad scale. */
lb_status lb__qmodel_set_ggml_bytes(lb_qmodel *q, size_t i, const void *bytes, size_t n, float tensor_scale);
/* Those bytes (borrowed, valid until the entry changes), their size and
 * scale; NULL when none were set. */
const void *lb__qmodel_ggml_bytes(const lb_qmodel *q, size_t i, size_t *n, float *tensor_scale);

/* The 16-bit values of entry i's outlier columns (lb_qmodel_set_outliers):
 * dst[rows][n] = the source's columns, rounded to the qmodel's dtype. */
lb_status lb__qmodel_outlier_values(const lb_qmodel *q, size_t i, float *dst);
/* LB_ERR_UNSUPPORTED naming the first entry with outlier columns and the
 * format (a writer's name) that cannot hold it; LB_OK when none has. */
lb_status lb__qmodel_check_no_outliers(const lb_qmodel *q, const char *format);

/* Lending (qmodel_borrow.c): entry i of dst, which must be as
 * lb_qmodel_new made it, becomes src's entry i, shallow (the same
 * quantized tensor, imatrix, replacement: nothing copied), or with
 * act_only its activation quantization alone (the weight as stored).
 * Both qmodels are of one model and keep 16-bit values in one dtype; src
 * must not change or be freed while dst holds the entry, and dst's
 * setters must not touch it; lb__qmodel_return(dst, i) makes it as stored
 * again (lb_qmodel_free of dst never frees a borrowed entry). The same
 * for the KV cache's format and per-layer ranges. What the sensitivity
 * sweep measures a unit of a candidate through. */
lb_status lb__qmodel_borrow(lb_qmodel *dst, const lb_qmodel *src, size_t i, int act_only);
void lb__qmodel_return(lb_qmodel *dst, size_t i);
lb_status lb__qmodel_borrow_kv(lb_qmodel *dst, const lb_qmodel *src);
void lb__qmodel_return_kv(lb_qmodel *dst);

/* The fused group id of a canonical name: 2N for
 * model.layers.N.self_attn.{q,k,v}_proj.weight, 2N + 1 for
 * model.layers.N.mlp.{gate,up}_proj.weight, -1 otherwise. */
long lb__fused_group_of(const char *name);

/* ===== Fake quantization (qmodel_fakeq.c) =====
 * Candidate values quantized and dequantized as one entry would be: what
 * the output-error searches (AWQ) measure each candidate through. */

/* What one weight is quantized as: a lowbit spec, or a ggml type (with the
 * entry's importance vector, borrowed: valid until the entry changes). */
typedef struct lb__fakeq {
    lb_qspec spec;          /* when ggml == LB_DT_COUNT */
    lb_dtype ggml;          /* a ggml block type, or LB_DT_COUNT */
    const float *imatrix;   /* ggml: importance (lb__qmodel_imatrix), or NULL */
    size_t n_imatrix;
    int threads;
} lb__fakeq;

/* Entry i's quantizer: its spec (QUANTIZED) or its ggml type when that is
 * a block type (q4_0, q4_k, mxfp4 ...); LB_ERR_ARG for an entry that is
 * not quantized (STORED, KEPT, REPLACED, or a plain f16/bf16/f32 ggml type). */
lb_status lb__qmodel_fakeq(const lb_qmodel *q, size_t i, int threads, lb__fakeq *out);

/* w (rows x cols, in place) through the quantizer ctx (an lb__fakeq) and
 * back; the signature of an lb__fakeq_fn (algo/awq.h). Two-level specs
 * (NVFP4, spec or ggml type): the tensor scale comes from w's own largest
 * magnitude. The entry's real quantization takes it from its fused group's
 * (q/k/v, gate/up) shared range, which candidate values of one member
 * cannot know; the tensor scale only places the FP8 grid the block scales
 * are rounded on (the same relative step anywhere in E4M3's normal range),
 * so a search ranks candidates the same. */
lb_status lb__fake_quantize(void *ctx, float *w, size_t rows, size_t cols);

/* lb__qmodel_fakeq then lb__fake_quantize: w as entry i would be
 * quantized (LB_ERR_ARG for an entry that is not quantized). */
lb_status lb__qmodel_fake_quantize(const lb_qmodel *q, size_t i, float *w, size_t rows, size_t cols, int threads);

/* Consecutive columns one scale of the quantizer covers along a row (its
 * block; a row for per-channel and per-tensor specs; 256 for K-quant
 * super-blocks, whose 16/32-value sub-block scales share the super-block's
 * scale of scales), at most cols. */
size_t lb__fakeq_block(const lb__fakeq *f, size_t cols);

/* x (rows x cols) through ggml type t and back, as a GGUF holds it:
 * imatrix as lb__ggml_rows_stacked takes it; NVFP4 over the per-tensor
 * scale of x's own range; f32 unchanged. */
lb_status lb__ggml_round_trip(lb_dtype t, float *x, size_t rows, size_t cols, const float *imatrix, size_t n_imatrix,
                              int threads);

#endif
