/* STUB, replaced by SmoothQuant (smoothquant.h). */
#include "algo/smoothquant.h"
#include "util/error.h"

void lb__smoothquant_scales(const float *x_absmax, const float *w_absmax, size_t cols, float alpha, float *s)
{
    (void)x_absmax, (void)w_absmax, (void)alpha;
    for (size_t j = 0; j < cols; j++) s[j] = 1.0f;
}

lb_status lb__smoothquant_layer(void *ctx, lb_qmodel *q, const lb__layer_stats *s)
{
    (void)ctx, (void)q, (void)s;
    return lb__fail(LB_ERR_UNSUPPORTED, "SmoothQuant is not built yet");
}
