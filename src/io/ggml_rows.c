/* lb__ggml_rows (ggml_rows.h): the writer's and the qmodel's one way into
 * the ggml quantizers (io/ggml_quants.h), serial or split over threads by rows. */
#include "io/ggml_rows.h"

#include <math.h>

#include "io/ggml_quants.h"
#include "quant/qkernels.h"
#include "util/error.h"
#include "util/parallel.h"
#include "weights/engine_scales.h"

int lb__ggml_rows_can(lb_dtype t)
{
    const lb_dtype_info *d = lb_dtype_get(t);
    return d && d->ggml_type >= 0 && d->can_write;
}

lb_status lb__ggml_rows(lb_dtype t, const float *src, size_t rows, size_t cols, const float *imatrix, void *dst)
{
    const lb_dtype_info *d = lb_dtype_get(t);
    if (!d || d->ggml_type < 0) return lb__fail(LB_ERR_UNSUPPORTED, "no ggml type for dtype %d", (int)t);
    if (!lb__ggml_rows_can(t)) return lb__fail(LB_ERR_UNSUPPORTED, "lowbit does not write %s", d->name);
    return lb__ggml_quantize_rows(t, src, rows, cols, imatrix, dst); /* checks the blocks and finiteness */
}

/* The largest magnitude of x, NaN skipped: the quantizers' block maximum
 * (vector code on AVX2 and AVX-512; the float loop, which -ftrapping-math
 * keeps scalar, took 30% of a one-thread NVFP4 GGUF write, this 6%), and
 * where it flags a NaN or infinity, the loop itself. */
static float absmax_skipping_nan(const float *x, size_t n)
{
    float amax = 0;
    if (n && lb__qkernels_get(lb_isa_active())->block_absmax(x, n, n, &amax) == 0) return amax;
    amax = 0;
    for (size_t k = 0; k < n; k++) amax = fabsf(x[k]) > amax ? fabsf(x[k]) : amax;
    return amax;
}

float lb__ggml_nvfp4_scale(const float *x, size_t n)
{
    const float amax = absmax_skipping_nan(x, n);
    return amax > 0 ? lb__nvfp4_tensor_scale(amax) : 1.0f; /* the engines' convention (weights/engine_scales.h) */
}

typedef struct rows_job {
    lb_dtype t;
    const float *src;
    size_t cols, row_bytes;
    const float *imatrix;
    unsigned char *dst;
} rows_job;

static lb_status rows_range(void *ctx, size_t begin, size_t end)
{
    const rows_job *j = ctx;
    return lb__ggml_rows(j->t, j->src + begin * j->cols, end - begin, j->cols, j->imatrix, j->dst + begin * j->row_bytes);
}

lb_status lb__ggml_rows_parallel(lb_dtype t, const float *src, size_t rows, size_t cols, const float *imatrix,
                                 void *dst, int threads)
{
    const lb_dtype_info *d = lb_dtype_get(t);
    if (!d || d->ggml_type < 0 || !d->block) return lb__ggml_rows(t, src, rows, cols, imatrix, dst);
    if (cols % d->block) return lb__ggml_rows(t, src, rows, cols, imatrix, dst); /* its error */
    rows_job j = {t, src, cols, cols / d->block * d->block_bytes, imatrix, dst};
    int n = lb__threads_for(threads, rows * cols * sizeof *src);
    return lb__parallel_for(rows, 1, n, rows_range, &j);
}

lb_status lb__ggml_rows_stacked(lb_dtype t, const float *src, size_t rows, size_t cols, const float *imatrix,
                                size_t n_imatrix, void *dst, int threads)
{
    size_t m = imatrix && cols && n_imatrix % cols == 0 ? n_imatrix / cols : 0;
    if (m <= 1 || rows % m) return lb__ggml_rows_parallel(t, src, rows, cols, m == 1 ? imatrix : NULL, dst, threads);
    const lb_dtype_info *d = lb_dtype_get(t);
    if (!d || !d->block || cols % d->block) return lb__ggml_rows(t, src, rows, cols, NULL, dst); /* its error */
    size_t per = rows / m, row_bytes = cols / d->block * d->block_bytes;
    for (size_t e = 0; e < m; e++) { /* each stack with its own slice, as llama-quantize's chunks never cross one */
        lb_status st = lb__ggml_rows_parallel(t, src + e * per * cols, per, cols, imatrix + e * cols,
                                              (unsigned char *)dst + e * per * row_bytes, threads);
        if (st != LB_OK) return st;
    }
    return LB_OK;
}
