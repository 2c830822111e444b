/* ggml's scale searches, op for op (see ggml_quant_search.h for why the
 * order matters). Integers meet floats exactly where ggml's C converts
 * them: a code l in a product is (float)l, and each product is evaluated
 * left to right. */
#include <math.h>

#include "io/ggml_quant_search.h"
#include "util/cpu.h"

/* ggml's MIN(hi, v) then MAX(lo, .): the same as clamp_int for ints. */
static inline int clamp_int(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

float lb__ggml_signed_max(const float *x, int n, float *amax)
{
    float max = 0, a = 0;
    for (int i = 0; i < n; ++i) {
        float ax = fabsf(x[i]);
        if (ax > a) {
            a = ax;
            max = x[i];
        }
    }
    *amax = a;
    return max;
}

float lb__ggml_make_qx_quants(int n, int nmax, const float *x, int8_t *L, const float *qw)
{
    float amax;
    const float max = lb__ggml_signed_max(x, n, &amax);
    if (amax < LB__GGML_GROUP_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = (float)-nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = clamp_int(lb__nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)(l + nmax);
        float w = qw ? qw[i] : x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0) continue;
        iscale = -((float)nmax + 0.1f * (float)is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; ++i) {
            int l = clamp_int(lb__nearest_int(iscale * x[i]), -nmax, nmax - 1);
            float w = qw ? qw[i] : x[i] * x[i];
            sumlx += w * x[i] * (float)l;
            suml2 += w * (float)l * (float)l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; ++i)
                L[i] = (int8_t)(nmax + clamp_int(lb__nearest_int(iscale * x[i]), -nmax, nmax - 1));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

float lb__ggml_make_q3_quants(int n, int nmax, const float *x, int8_t *L, int do_rmse)
{
    float amax;
    const float max = lb__ggml_signed_max(x, n, &amax);
    if (amax < LB__GGML_GROUP_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = (float)-nmax / max;
    if (!do_rmse) {
        for (int i = 0; i < n; ++i)
            L[i] = (int8_t)(clamp_int(lb__nearest_int(iscale * x[i]), -nmax, nmax - 1) + nmax);
        return 1 / iscale;
    }
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = clamp_int(lb__nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)l;
        float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    for (int itry = 0; itry < 5; ++itry) {
        int n_changed = 0;
        for (int i = 0; i < n; ++i) {
            float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * (float)L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * (float)L[i] * (float)L[i];
                int new_l = clamp_int(lb__nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
                if (new_l != L[i]) {
                    slx += w * x[i] * (float)new_l;
                    sl2 += w * (float)new_l * (float)new_l;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        ++n_changed;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    for (int i = 0; i < n; ++i) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* The shared body of make_qkx2_quants and make_qkx3_quants; they differ in
 * the default weights (qkx3: x^2 when weights is NULL) and the flat-group
 * test (qkx2: max == min, qkx3: max <= min, the same for finite input
 * since min <= max always, but kept literal). */
static float qkx_search(int n, int nmax, const float *x, const float *weights, uint8_t *L, float *the_min,
                        uint8_t *Laux, float rmin, float rdelta, int nstep, int use_mad, int flat_le, float *rule)
{
#define WEIGHT(i) (weights ? weights[i] : x[i] * x[i])
    float min = x[0], max = x[0];
    float sum_w = WEIGHT(0);
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        float w = WEIGHT(i);
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0) min = 0;
    if (flat_le ? max <= min : max == min) {
        memset(L, 0, (size_t)n);
        *the_min = -min;
        if (rule) rule[0] = 0.f, rule[1] = min;
        return 0.f;
    }
    float iscale = (float)nmax / (max - min);
    if (rule) rule[0] = iscale, rule[1] = min;
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; ++i) {
        int l = lb__nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)clamp_int(l, 0, nmax);
        float diff = scale * (float)L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        best_error += WEIGHT(i) * diff;
    }
    if (nstep < 1) {
        *the_min = -min;
        return scale;
    }
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * (float)is + (float)nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            int l = clamp_int(lb__nearest_int(iscale * (x[i] - min)), 0, nmax);
            Laux[i] = (uint8_t)l;
            float w = WEIGHT(i);
            sum_l += w * (float)l;
            sum_l2 += w * (float)l * (float)l;
            sum_xl += w * (float)l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; ++i) {
                float diff = this_scale * (float)Laux[i] + this_min - x[i];
                diff = use_mad ? fabsf(diff) : diff * diff;
                cur_error += WEIGHT(i) * diff;
            }
            if (cur_error < best_error) {
                if (rule) rule[0] = iscale, rule[1] = min; /* the min these codes were taken from */
                memcpy(L, Laux, (size_t)n);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
#undef WEIGHT
}

float lb__ggml_make_qkx2_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L,
                                float *the_min, uint8_t *Laux, float rmin, float rdelta, int nstep, int use_mad)
{
    return qkx_search(n, nmax, x, weights, L, the_min, Laux, rmin, rdelta, nstep, use_mad, 0, NULL);
}

float lb__ggml_make_qkx3_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L,
                                float *the_min, uint8_t *Laux, float rmin, float rdelta, int nstep, int use_mad)
{
    return qkx_search(n, nmax, x, weights, L, the_min, Laux, rmin, rdelta, nstep, use_mad, 1, NULL);
}

float lb__ggml_make_qkx3_quants_rule(int n, int nmax, const float *x, const float *weights, uint8_t *L,
                                     float *the_min, uint8_t *Laux, float rmin, float rdelta, int nstep,
                                     int use_mad, float rule[2])
{
    return qkx_search(n, nmax, x, weights, L, the_min, Laux, rmin, rdelta, nstep, use_mad, 1, rule);
}

float lb__ggml_make_qp_quants(int n, int nmax, const float *x, uint8_t *L, const float *quant_weights)
{
    float max = 0;
    for (int i = 0; i < n; ++i) max = max > x[i] ? max : x[i];
    if (max < LB__GGML_GROUP_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = (float)nmax / max;
    /* ggml stores the unclamped code into a byte (a negative x wraps). */
    for (int i = 0; i < n; ++i) L[i] = (uint8_t)lb__nearest_int(iscale * x[i]);
    float scale = 1 / iscale;
    float best_mse = 0;
    for (int i = 0; i < n; ++i) {
        float diff = x[i] - scale * (float)L[i];
        best_mse += quant_weights[i] * diff * diff;
    }
    for (int is = -4; is <= 4; ++is) {
        if (is == 0) continue;
        float iscale_is = (0.1f * (float)is + (float)nmax) / max;
        float scale_is = 1 / iscale_is;
        float mse = 0;
        for (int i = 0; i < n; ++i) {
            int l = lb__nearest_int(iscale_is * x[i]);
            if (l > nmax) l = nmax;
            float diff = x[i] - scale_is * (float)l;
            mse += quant_weights[i] * diff * diff;
        }
        if (mse < best_mse) {
            best_mse = mse;
            iscale = iscale_is;
        }
    }
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = lb__nearest_int(iscale * x[i]);
        if (l > nmax) l = nmax;
        L[i] = (uint8_t)l;
        float w = quant_weights[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    for (int itry = 0; itry < 5; ++itry) {
        int n_changed = 0;
        for (int i = 0; i < n; ++i) {
            float w = quant_weights[i];
            float slx = sumlx - w * x[i] * (float)L[i];
            float sl2 = suml2 - w * (float)L[i] * (float)L[i];
            if (slx > 0 && sl2 > 0) {
                int new_l = lb__nearest_int(x[i] * sl2 / slx);
                if (new_l > nmax) new_l = nmax;
                if (new_l != L[i]) {
                    slx += w * x[i] * (float)new_l;
                    sl2 += w * (float)new_l * (float)new_l;
                    if (slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (uint8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        ++n_changed;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* ===== Eight groups at once: the scalar twin ===== */

static void qkx8_scalar(int n, int nmax, const float *x, const float *weights, uint8_t *L, float *scale,
                        float *the_min, float rmin, float rdelta, int nstep, int use_mad, int flat_le)
{
    float xs[32], ws[32];
    uint8_t Ls[32], aux[32];
    for (int g = 0; g < 8; ++g) {
        for (int i = 0; i < n; ++i) {
            xs[i] = x[8 * i + g];
            ws[i] = weights[8 * i + g];
        }
        scale[g] = qkx_search(n, nmax, xs, ws, Ls, &the_min[g], aux, rmin, rdelta, nstep, use_mad, flat_le, NULL);
        for (int i = 0; i < n; ++i) L[8 * i + g] = Ls[i];
    }
}

static void qx8_scalar(int n, int nmax, const float *x, const float *qw, int8_t *L, float *scale)
{
    float xs[32], ws[32];
    int8_t Ls[32];
    for (int g = 0; g < 8; ++g) {
        for (int i = 0; i < n; ++i) {
            xs[i] = x[8 * i + g];
            if (qw) ws[i] = qw[8 * i + g];
        }
        scale[g] = lb__ggml_make_qx_quants(n, nmax, xs, Ls, qw ? ws : NULL);
        for (int i = 0; i < n; ++i) L[8 * i + g] = Ls[i];
    }
}

static void q3_8_scalar(int n, int nmax, const float *x, int8_t *L, float *scale)
{
    float xs[32] = {0}; /* n <= 32 are set; the rest quiets a warning */
    int8_t Ls[32];
    for (int g = 0; g < 8; ++g) {
        for (int i = 0; i < n; ++i) xs[i] = x[8 * i + g];
        scale[g] = lb__ggml_make_q3_quants(n, nmax, xs, Ls, 1);
        for (int i = 0; i < n; ++i) L[8 * i + g] = Ls[i];
    }
}

static void requant_scalar(const float *x, int n, float d, float m, int add_m, int lo, int hi, int offset, uint8_t *L)
{
    for (int i = 0; i < n; ++i)
        L[i] = (uint8_t)(clamp_int(lb__nearest_int((add_m ? x[i] + m : x[i]) / d), lo, hi) + offset);
}

static void imatrix_weights_scalar(const float *qw, const float *x, float sigma2, int n, float *w)
{
    for (int i = 0; i < n; ++i) w[i] = qw[i] * sqrtf(sigma2 + x[i] * x[i]);
}

const lb__ggml_search8 lb__ggml_search8_scalar = {qkx8_scalar, qx8_scalar, lb__ggml_make_qx_quants, q3_8_scalar,
                                                  requant_scalar, imatrix_weights_scalar};

const lb__ggml_search8 *lb__ggml_search8_get(lb_isa isa)
{
    /* AVX-512 machines run the AVX2 set (and lb__ggml_search16's); an
     * empty set (not compiled for this target) leaves the scalar one */
    if (lb__isa_x86(isa) >= LB_ISA_AVX2 && lb__ggml_search8_avx2.qkx) return &lb__ggml_search8_avx2;
    return &lb__ggml_search8_scalar;
}

const lb__ggml_search16 *lb__ggml_search16_get(lb_isa isa)
{
    return lb__isa_x86(isa) >= LB_ISA_AVX512 && lb__ggml_search16_avx512.qkx ? &lb__ggml_search16_avx512 : NULL;
}
