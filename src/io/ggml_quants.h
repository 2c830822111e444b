/* Quantizing fp32 rows into ggml's storage types, byte-identical to the
 * pinned llama.cpp's ggml_quantize_chunk (ggml-quants.c), so a GGUF lowbit
 * writes holds the bytes llama-quantize would. */
#ifndef LB_IO_GGML_QUANTS_H
#define LB_IO_GGML_QUANTS_H

#include <stddef.h>

#include "lowbit.h"

/* Quantizes rows x cols fp32 values (row-major) into ggml type t at dst
 * (rows * cols / block blocks, back to back). imatrix: cols importance
 * weights shared by every row, or NULL; the types whose ggml quantizer
 * ignores it (q8_0, mxfp4, nvfp4, the plain types) ignore it here too.
 * Single-threaded: callers parallelize over rows.
 * LB_ERR_NAN on a non-finite input (naming row and column), LB_ERR_ARG when
 * cols is not a multiple of the block or a pointer is NULL,
 * LB_ERR_UNSUPPORTED for types lowbit cannot write. */
lb_status lb__ggml_quantize_rows(lb_dtype t, const float *src, size_t rows, size_t cols, const float *imatrix,
                                 void *dst);

#endif
