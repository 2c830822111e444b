/* GPTQ's dense linear algebra: the matrix products of the lazy batch
 * update and of the blocked Cholesky, the blocked Cholesky itself and the
 * inverse of its factor. Each has a scalar reference (_ref), the plain
 * textbook loop, which the tests compare the fast paths against.
 *
 * The products compute C[m x n] -= A[m x k] . B[k x n] (all row-major,
 * leading dimensions lda, ldb, ldc) element by element as
 *     acc = 0; for kk = 0 .. k-1: acc += A[i][kk] * B[kk][j]; C[i][j] -= acc
 * in that order. The vector kernels fuse each multiply-add (one rounding),
 * the reference rounds twice; nothing else differs, so results are the same
 * for every tile position and every thread split (determinism), and fast
 * and reference agree to k * 2^-p * sum |a b| (p = 24 or 53). */
#ifndef LB_ALGO_GPTQ_LINALG_H
#define LB_ALGO_GPTQ_LINALG_H

#include <stddef.h>

#include "lowbit.h"

/* Columns per panel of the blocked Cholesky and of the triangular inverse:
 * 64 doubles of 64 rows (32 KiB) stay in L1/L2 while the trailing matrix
 * streams past them. */
#define LB__GPTQ_CHOL_NB 64

typedef void (*lb__gptq_gemm_f32_fn)(size_t m, size_t n, size_t k, const float *a, size_t lda, const float *b,
                                      size_t ldb, float *c, size_t ldc);
typedef void (*lb__gptq_gemm_f64_fn)(size_t m, size_t n, size_t k, const double *a, size_t lda, const double *b,
                                      size_t ldb, double *c, size_t ldc);

/* The vector kernels of one instruction set (NULL where this build or
 * target has none). */
typedef struct lb__gptq_kernels {
    lb__gptq_gemm_f32_fn gemm_f32;
    lb__gptq_gemm_f64_fn gemm_f64;
} lb__gptq_kernels;
extern const lb__gptq_kernels lb__gptq_kernels_avx2;

void lb__gptq_gemm_f32_ref(size_t m, size_t n, size_t k, const float *a, size_t lda, const float *b, size_t ldb,
                           float *c, size_t ldc);
void lb__gptq_gemm_f64_ref(size_t m, size_t n, size_t k, const double *a, size_t lda, const double *b, size_t ldb,
                           double *c, size_t ldc);

/* The products with the kernels of isa (scalar: the references), split
 * over up to `threads` threads (0: one per CPU) along the longer side of
 * C. Bit-identical for any thread count. LB_OK, or a thread-start failure. */
lb_status lb__gptq_gemm_f32(size_t m, size_t n, size_t k, const float *a, size_t lda, const float *b, size_t ldb,
                            float *c, size_t ldc, int threads, lb_isa isa);
lb_status lb__gptq_gemm_f64(size_t m, size_t n, size_t k, const double *a, size_t lda, const double *b, size_t ldb,
                            double *c, size_t ldc, int threads, lb_isa isa);

/* Lower Cholesky factor in place: a (n x n, row-major, lower triangle
 * read) becomes L with A = L L^T in its lower triangle (the strict upper
 * triangle is left as scratch). *ok = 0 when A is not positive definite
 * to working precision (a pivot <= 0 or not finite): a is then garbage. */
void lb__gptq_chol_ref(double *a, size_t n, int *ok);
lb_status lb__gptq_chol(double *a, size_t n, int threads, lb_isa isa, int *ok);

/* x = L^-1 (n x n, lower; the strict upper triangle set to 0) for a lower
 * triangular l with a positive diagonal (only its lower triangle read). */
void lb__gptq_trinv_ref(const double *l, size_t n, double *x);
lb_status lb__gptq_trinv(const double *l, size_t n, double *x, int threads, lb_isa isa);

#endif
