/* GPTQ onto ggml's block grids (the GGUF types lowbit writes): Q8_0,
 * Q5_0, Q5_1, Q4_0, Q4_1, Q2_K .. Q6_K, IQ4_NL, IQ4_XS, MXFP4, NVFP4.
 *
 * A GPTQ group is one ggml block (32 values; 256 for the K-quants and
 * IQ4_XS; 64 for NVFP4). Its parameters are what lowbit's own ggml
 * quantizer (io/ggml_quants.h, byte-identical to llama.cpp's) chooses for
 * the group's values (with the importance vector's slice when given, as
 * the RTN path): the block it writes is kept, and each column is then
 * rounded onto that block's grid with the quantizer's own rule for its
 * final codes, so that GPTQ with an identity Hessian writes exactly the
 * bytes RTN writes. The rules, per type (the why of each is at
 * code_of() in gptq_grid_ggml.c):
 * - K-quants, MXFP4, NVFP4: the nearest grid point of the stored (fp16 /
 *   E8M0 / UE4M3) scales, ggml's ties (its codes are recomputed from the
 *   rounded scales);
 * - Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 without an importance vector, IQ4_NL and
 *   IQ4_XS: ggml's rounding at the UNROUNDED scale (ggml takes the codes
 *   before rounding the scale to fp16), which the grid recomputes;
 * - Q4_0, Q4_1, Q5_0, Q5_1 with an importance vector: rounding at the
 *   inverse scale of ggml's search that produced the block's codes (the
 *   stored scale is a least-squares refit of them), found among the
 *   search's trial scales by matching the block's codes;
 * - a (sub-)block whose stored scale is zero (every code the same value)
 *   keeps the quantizer's codes.
 * The values are GPTQ's; the bytes (lb__gptq_ggml_bytes) are the kept
 * blocks with each value's code, which dequantize (lb_dtype_to_f32) to
 * exactly those values. */
#ifndef LB_ALGO_GPTQ_GRID_GGML_H
#define LB_ALGO_GPTQ_GRID_GGML_H

#include <stddef.h>

#include "algo/gptq.h"
#include "lowbit.h"

typedef struct lb__gptq_ggml lb__gptq_ggml;

/* Whether t has a GPTQ grid here (the block types above). */
int lb__gptq_ggml_supports(lb_dtype t);

/* A grid for a rows x cols weight stored as t (cols whole blocks of t).
 * w0: the weight before GPTQ (rows x cols): what is chosen once for the
 * whole weight comes from it: NVFP4's tensor scale (lb__ggml_nvfp4_scale,
 * as the GGUF writer takes it) and, for Q4_0/Q4_1/Q5_0/Q5_1 with an
 * importance vector, each row's sigma2 (ggml's mean square of the whole
 * row). imatrix: cols importance weights (one row's, as
 * lb_qmodel_set_imatrix holds them; borrowed until lb__gptq_ggml_free), or
 * NULL. LB_ERR_UNSUPPORTED for other types, LB_ERR_ARG for bad shapes,
 * LB_ERR_NAN for a non-finite w0, LB_ERR_NOMEM. */
lb_status lb__gptq_ggml_new(lb_dtype t, const float *w0, size_t rows, size_t cols, const float *imatrix,
                            lb__gptq_ggml **out);
void lb__gptq_ggml_free(lb__gptq_ggml *g);

/* The callbacks for lb__gptq (group = t's block). */
lb__gptq_grid lb__gptq_ggml_grid(lb__gptq_ggml *g);

/* NVFP4's per-tensor scale (the GGUF's "<name>.scale"): the blocks hold
 * the values divided by it. 1 for the other types. */
float lb__gptq_ggml_tensor_scale(const lb__gptq_ggml *g);

/* Blocks whose codes no trial scale of ggml's search reproduced (classic
 * types with an importance vector; rounded to the nearest point of the
 * stored scale instead): 0 unless something is wrong. For the tests. */
size_t lb__gptq_ggml_fallbacks(const lb__gptq_ggml *g);

/* The row-major ggml bytes (rows * cols / block blocks) of q, the values
 * GPTQ left (each on the grid its group's params() set): every kept block
 * with the codes of q's values. LB_ERR_ARG naming the element when a value
 * is on no point of its block's grid (q is not this grid's output), or a
 * group never got its parameters. */
lb_status lb__gptq_ggml_bytes(const lb__gptq_ggml *g, const float *q, void *dst);

/* The whole way: GPTQ of w (rows x cols, in place: on return its
 * quantized values) onto t's grid against h (as lb__gptq), then its bytes
 * into dst (lb_dtype_bytes(t, rows * cols) bytes) and NVFP4's tensor
 * scale into *tensor_scale (may be NULL; 1 for other types). h NULL:
 * plain rounding through the same grid (each group's parameters from w,
 * then its columns rounded): the RTN blocks. rep may be NULL. */
lb_status lb__gptq_ggml_run(lb_dtype t, float *w, size_t rows, size_t cols, const double *h, const float *imatrix,
                        const lb__gptq_options *o, void *dst, float *tensor_scale, lb__gptq_report *rep);

/* lb__gptq_ggml_run with plain arguments, for the Python tests
 * (tests/algo/test_gptq_ggml.py): stats = NULL or 2 doubles (fallbacks,
 * err_proxy). */
lb_status lb__gptq_ggml_test(int t, float *w, size_t rows, size_t cols, const double *h, const float *imatrix,
                             int actorder, int static_groups, int threads, void *dst, float *tensor_scale,
                             double *stats);

#endif
