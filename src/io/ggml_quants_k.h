/* ggml's K-quant quantizers (Q2_K .. Q6_K) and the importance-weighted
 * quantizers of the classic types (Q4_0, Q4_1, Q5_0, Q5_1), one row at a
 * time, byte-identical to ggml_quantize_chunk of the pinned llama.cpp.
 *
 * x: cols fp32 values (finite: the caller checks); dst: cols / block
 * blocks of the type (ggml_blocks.h); cols a multiple of the block (256
 * for the K-quants, 32 for the classic types; the caller checks).
 * imatrix: cols importance weights, or NULL for the K-quants, which then
 * follow ggml's reference path (quantize_row_qN_K_ref), as
 * ggml_quantize_chunk does. The classic *_imatrix functions need a
 * non-NULL imatrix (without one ggml uses the plain reference quantizers,
 * which live elsewhere). Single-threaded; rows are independent. */
#ifndef LB_IO_GGML_QUANTS_K_H
#define LB_IO_GGML_QUANTS_K_H

#include <stddef.h>

void lb__ggml_quantize_row_q2_k(const float *x, void *dst, size_t cols, const float *imatrix);
void lb__ggml_quantize_row_q3_k(const float *x, void *dst, size_t cols, const float *imatrix);
void lb__ggml_quantize_row_q4_k(const float *x, void *dst, size_t cols, const float *imatrix);
void lb__ggml_quantize_row_q5_k(const float *x, void *dst, size_t cols, const float *imatrix);
void lb__ggml_quantize_row_q6_k(const float *x, void *dst, size_t cols, const float *imatrix);

void lb__ggml_quantize_row_q4_0_imatrix(const float *x, void *dst, size_t cols, const float *imatrix);
void lb__ggml_quantize_row_q4_1_imatrix(const float *x, void *dst, size_t cols, const float *imatrix);
void lb__ggml_quantize_row_q5_0_imatrix(const float *x, void *dst, size_t cols, const float *imatrix);
void lb__ggml_quantize_row_q5_1_imatrix(const float *x, void *dst, size_t cols, const float *imatrix);

/* The four above on part of a row: blocks of 32 of x (cols values) with
 * the row's sigma2 given (ggml's is the mean square of the whole row,
 * sum x^2 / cols in element order, which part of a row cannot compute).
 * GPTQ quantizes a row one block at a time (algo/gptq_grid_ggml.c). */
typedef enum { LB__CLASSIC_Q4_0, LB__CLASSIC_Q4_1, LB__CLASSIC_Q5_0, LB__CLASSIC_Q5_1 } lb__ggml_classic;
void lb__ggml_quantize_classic_sigma2(lb__ggml_classic t, const float *x, void *dst, size_t cols,
                                      const float *imatrix, float sigma2);

#endif
