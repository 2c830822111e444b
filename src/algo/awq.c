/* STUB, replaced by AWQ (awq.h). */
#include "algo/awq.h"
#include "util/error.h"

lb_status lb__awq_search_scale(const float *w, const size_t *member_rows, size_t n_members, size_t cols,
                               const float *x, size_t n, const float *x_mean, int grid, lb__fakeq_fn q,
                               void *const *qctx, float *s, double *err, int *best, int threads)
{
    (void)w, (void)member_rows, (void)n_members, (void)cols, (void)x, (void)n, (void)x_mean, (void)grid, (void)q;
    (void)qctx, (void)s, (void)err, (void)best, (void)threads;
    return lb__fail(LB_ERR_UNSUPPORTED, "AWQ is not built yet");
}

lb_status lb__awq_search_clip(const float *w, size_t rows, size_t cols, size_t group, const float *x, size_t n,
                              int grid, float max_shrink, lb__fakeq_fn q, void *qctx, float *clip, int threads)
{
    (void)w, (void)rows, (void)cols, (void)group, (void)x, (void)n, (void)grid, (void)max_shrink, (void)q;
    (void)qctx, (void)clip, (void)threads;
    return lb__fail(LB_ERR_UNSUPPORTED, "AWQ is not built yet");
}

lb_status lb__awq_layer(void *ctx, lb_qmodel *q, const lb__layer_stats *s)
{
    (void)ctx, (void)q, (void)s;
    return lb__fail(LB_ERR_UNSUPPORTED, "AWQ is not built yet");
}
