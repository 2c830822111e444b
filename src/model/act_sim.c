/* Simulated activation quantization (see act_sim.h). */
#include "model/act_sim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant_internal.h"
#include "util/error.h"

static lb_status simulate_static(const lb_qspec *spec, float s, const float *x, size_t count, int threads,
                                 float *y)
{
    if (!(s > 0) || isinf(s)) return lb__fail(LB_ERR_ARG, "static activation scale %g is not positive", (double)s);
    for (size_t k = 0; k < count; k++) y[k] = x[k] / s;
    void *codes = malloc(lb_format_bytes(spec->element, count) + 1);
    if (!codes) return lb__fail(LB_ERR_NOMEM, "cannot allocate %zu activation codes", count);
    lb_status st = lb_encode_f32(spec->element, LB_SATURATE, y, count, codes, threads);
    if (st == LB_OK) st = lb_decode_f32(spec->element, codes, count, y, threads);
    free(codes);
    if (st != LB_OK) return st;
    for (size_t k = 0; k < count; k++) y[k] *= s;
    return LB_OK;
}

lb_status lb__act_simulate(const lb_qact *act, float range, const float *x, size_t n, size_t in, int threads, float *y)
{
    lb_qtensor *q = NULL;
    lb_status st = LB_OK;
    switch (act->mode) {
    case LB_ACT_NONE: memcpy(y, x, n * in * sizeof *y); return LB_OK;
    case LB_ACT_STATIC: return simulate_static(&act->spec, range, x, n * in, threads, y);
    case LB_ACT_DYNAMIC: st = lb_quantize(&act->spec, x, n, in, threads, &q); break;
    case LB_ACT_LOCAL: st = lb__quantize_ex(&act->spec, x, n, in, threads, range, &q); break;
    }
    if (st == LB_OK && q) st = lb_dequantize(q, y, threads);
    lb_qtensor_free(q);
    return st;
}
