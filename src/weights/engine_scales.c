/* The engines' activation, NVFP4 and KV scales (engine_scales.h). */
#include "weights/engine_scales.h"

#include <math.h>

float lb__static_qmax(lb_format el) { return el == LB_FMT_INT8 ? LB__INT8_MAX : LB__E4M3_MAX; }

float lb__static_input_scale(lb_format el, float amax, lb_dtype dt)
{
    float s = amax / lb__static_qmax(el);
    if (dt != LB_DT_BF16 && dt != LB_DT_F16) return s;
    uint16_t code;
    if (lb_dtype_from_f32(dt, &s, 1, &code) != LB_OK || lb_dtype_to_f32(dt, &code, 1, &s) != LB_OK) return s;
    return s;
}

float lb__kv_scale(float amax) { return amax / LB__E4M3_MAX; }

float lb__nvfp4_tensor_scale(float amax) { return amax / (LB__E2M1_MAX * LB__E4M3_MAX); }

float lb__ct_global_divisor(float ts) { return 1.0f / ts; }

/* Steps of one ulp either way from a start, up to this many: fl() of a
 * product or quotient is within a few ulps of the exact inverse. */
#define INVERSE_STEPS 8

float lb__amax_for_scale(float s, float qmax)
{
    float a0 = s * qmax;
    if (!isfinite(a0) || !(a0 > 0)) return a0;
    for (int k = 0; k <= INVERSE_STEPS; k++) {
        float up = a0, down = a0;
        for (int j = 0; j < k; j++) up = nextafterf(up, INFINITY), down = nextafterf(down, 0.0f);
        if (up / qmax == s) return up;
        if (down / qmax == s) return down;
    }
    return a0;
}

float lb__scale_for_divisor(float g)
{
    float t0 = 1.0f / g;
    if (!isfinite(t0) || !(t0 > 0)) return t0;
    double want = 1.0 / (double)g;
    float best = t0;
    int found = 0;
    for (int k = -INVERSE_STEPS; k <= INVERSE_STEPS; k++) {
        float t = t0;
        for (int j = 0; j < (k < 0 ? -k : k); j++) t = nextafterf(t, k < 0 ? 0.0f : INFINITY);
        if (1.0f / t != g) continue;
        if (!found || fabs((double)t - want) < fabs((double)best - want)) best = t, found = 1;
    }
    return best;
}
