/* The runner's fp32 matrix products: Y[n][out] = X[n][in] . W[out][in]^T.
 *
 * Weights are packed once into panels of LB__MM_NR output features: panel
 * p holds, for k = 0 .. in-1, the LB__MM_NR values W[p*NR + j][k] side by
 * side (zero where p*NR + j >= out). A kernel then reads one panel as a
 * contiguous stream and keeps a block of X rows times one panel of
 * outputs in vector registers.
 *
 * Every output element is one sum over k in increasing order, started
 * from 0 (each product added as x*w, fused in the vector kernels, rounded
 * twice in the scalar one). No thread split, row block or panel changes
 * that order, so results are bit-identical for any thread count and for
 * any number of rows n (a decode step gives the same bits as the same
 * token inside a prefill). The vector and scalar paths differ only by
 * fusing: at most in * 2^-24 * sum |x*w| apart, in practice far less. */
#ifndef LB_KERNEL_MATMUL_H
#define LB_KERNEL_MATMUL_H

#include <stddef.h>

#include "lowbit.h"

#define LB__MM_NR 32 /* output features per packed panel */

typedef struct lb__packed {
    size_t out, in;
    size_t panels;   /* ceil(out / NR) */
    float *data;     /* panels * in * NR floats, 64-byte aligned */
    size_t bytes;
} lb__packed;

/* Packs w [out][in] (row-major). LB_ERR_NOMEM if the copy cannot be made. */
lb_status lb__pack_weight(const float *w, size_t out, size_t in, lb__packed *p);
void lb__packed_free(lb__packed *p);
/* Row o of the original W (in floats): the embedding lookup of a tied head. */
void lb__packed_row(const lb__packed *p, size_t o, float *dst);

/* Y[n][out] = X[n][in] . W^T (y row stride: out). threads <= 0: one per CPU.
 * Dispatches on lb_isa_active(). LB_ERR_NOMEM only. */
lb_status lb__matmul(const float *x, size_t n, const lb__packed *w, float *y, int threads);
/* The same with a given instruction set (tests compare them); a set this
 * build or CPU lacks falls back to the next one down. */
lb_status lb__matmul_isa(const float *x, size_t n, const lb__packed *w, float *y, int threads, lb_isa isa);

/* Where the panels come from: stored (lb__packed) or made on demand (a
 * packed quantized matrix dequantizes LB__MM_NR rows into panel layout).
 * panel(ctx, p, scratch) returns panel p; scratch is scratch_bytes of
 * per-thread room (64-byte aligned; NULL when scratch_bytes is 0). With
 * a scratch, each thread asks for each of its panels exactly once. */
typedef struct lb__panel_source {
    const float *(*panel)(void *ctx, size_t p, void *scratch);
    void *ctx;
    size_t scratch_bytes;
} lb__panel_source;

/* Y[n][out] = X[n][in] . W^T with W's panels from src: the same kernels
 * and the same order of sums as lb__matmul_isa. */
lb_status lb__matmul_source(const float *x, size_t n, size_t out, size_t in, const lb__panel_source *src, float *y,
                            int threads, lb_isa isa);

/* A vector kernel set: the row block it keeps in registers, and the call
 * computing rows [0, mr) (1 <= mr <= MR) of X, packed k-major
 * (xp[k*mr + r] = X[r][k]), against one panel into y[r*ldy + j] for the
 * first ncols (<= NR) columns: the sums over k < in started from 0, or
 * with acc != 0 from the values already in y (a later slice of k adds
 * on, in the same order as one call over all of k would). */
typedef struct lb__mm_kernel {
    size_t mr;
    void (*block)(const float *xp, size_t mr, size_t in, const float *panel, float *y, size_t ldy, size_t ncols,
                  int acc);
} lb__mm_kernel;

extern const lb__mm_kernel lb__mm_avx512; /* .block NULL when not compiled */
extern const lb__mm_kernel lb__mm_avx2;

#endif
