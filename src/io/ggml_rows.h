/* Rows of fp32 into a ggml type, the one place lowbit's GGUF writer and
 * the quantized model's round trip (weights/qmodel_ggml.c) quantize through, so
 * that what `ppl` evaluates is what the file holds: the ggml quantizers
 * (io/ggml_quants.h: lb__ggml_quantize_rows, byte-identical to
 * ggml_quantize_chunk, imatrix included), split over threads by rows. */
#ifndef LB_IO_GGML_ROWS_H
#define LB_IO_GGML_ROWS_H

#include <stddef.h>

#include "lowbit.h"

/* rows x cols fp32 (row-major) into dst (rows * the row's bytes); imatrix:
 * cols importance weights or NULL. LB_ERR_ARG when cols is not whole
 * blocks, LB_ERR_UNSUPPORTED for a type lowbit cannot write, LB_ERR_NAN
 * for a non-finite value. Single-threaded. */
lb_status lb__ggml_rows(lb_dtype t, const float *src, size_t rows, size_t cols, const float *imatrix, void *dst);
/* The same over up to `threads` threads (<= 0: one per CPU), split on
 * whole rows: the bytes do not depend on the thread count. */
lb_status lb__ggml_rows_parallel(lb_dtype t, const float *src, size_t rows, size_t cols, const float *imatrix,
                                 void *dst, int threads);
/* The same for a tensor of stacked matrices (the experts of a mixture),
 * rows in all, given the importance as llama-quantize hands it out:
 * n_imatrix = cols (one vector for every row), or cols x m (matrix-major:
 * the e-th of m equal stacks of rows weighed by the e-th slice). imatrix
 * NULL or any other length: no importance. */
lb_status lb__ggml_rows_stacked(lb_dtype t, const float *src, size_t rows, size_t cols, const float *imatrix,
                                size_t n_imatrix, void *dst, int threads);
/* NVFP4 weights go into their blocks divided by one per-tensor scale
 * (GGUF: the "<name>.scale" tensor llama.cpp multiplies back): the largest
 * magnitude over 6 * 448, so the largest block scale is E4M3's largest;
 * 1 when every value is 0. */
float lb__ggml_nvfp4_scale(const float *x, size_t n);
/* Whether lb__ggml_rows takes type t (the writer asks before writing). */
int lb__ggml_rows_can(lb_dtype t);

#endif
