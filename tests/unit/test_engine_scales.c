/* The engines' scale conventions and their inverses (weights/
 * engine_scales.h): a checkpoint's stored scale must give back the
 * calibrated range the writer started from, so that evaluating the file
 * repeats the arithmetic lowbit evaluated before writing it. The oracle is
 * the defining property (the forward formula applied to the inverse gives
 * the stored value again), checked over many ranges, plus the exact
 * relations of values that are exactly representable. Also
 * lb_qmodel_from_checkpoint on a model that is no checkpoint. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "lowbit.h"
#include "weights/engine_scales.h"

#ifndef MODEL
#define MODEL "models/stories260K.bin"
#endif

static uint32_t state = 12345u;
static float rnd_range(void) /* magnitudes from 2^-20 to 2^20, every mantissa */
{
    state = state * 1664525u + 1013904223u;
    uint32_t m = state >> 9;
    state = state * 1664525u + 1013904223u;
    int e = (int)(state >> 27) - 20 + (int)((state >> 22) & 15);
    float x;
    uint32_t bits = ((uint32_t)(127 + e) << 23) | m;
    memcpy(&x, &bits, sizeof x);
    return x;
}

static void test_static(void)
{
    /* a bf16 scale times 448 or 127 is exact in fp32: the inverse is that product */
    CHECK(lb__amax_for_scale(0.0078125f, 448.0f) == 3.5f, "bf16 scale x 448");
    CHECK(lb__amax_for_scale(0.5f, 127.0f) == 63.5f, "x 127");
    CHECK(lb__static_qmax(LB_FMT_FP8_E4M3) == 448.0f && lb__static_qmax(LB_FMT_INT8) == 127.0f, "qmax");
    int bad = 0, rounded = 0;
    for (int i = 0; i < 20000; i++) {
        float amax = rnd_range();
        for (int el = 0; el < 2; el++) {
            lb_format f = el ? LB_FMT_INT8 : LB_FMT_FP8_E4M3;
            float s = lb__static_input_scale(f, amax, LB_DT_F32);
            float back = lb__amax_for_scale(s, lb__static_qmax(f));
            bad += lb__static_input_scale(f, back, LB_DT_F32) != s;
            /* bf16 as the compressed-tensors writer stores it: the inverse gives it back too */
            float sb = lb__static_input_scale(f, amax, LB_DT_BF16);
            uint32_t bits;
            memcpy(&bits, &sb, sizeof bits);
            rounded += (bits & 0xFFFF) != 0;
            bad += lb__static_input_scale(f, lb__amax_for_scale(sb, lb__static_qmax(f)), LB_DT_BF16) != sb;
        }
    }
    CHECK(bad == 0, "%d ranges whose stored static scale does not come back", bad);
    CHECK(rounded == 0, "%d bf16 scales with low bits set", rounded);
}

static void test_kv_and_nvfp4(void)
{
    int bad = 0, divisor_off = 0;
    for (int i = 0; i < 20000; i++) {
        float amax = rnd_range();
        float k = lb__kv_scale(amax);
        bad += lb__kv_scale(lb__amax_for_scale(k, LB__E4M3_MAX)) != k;
        float ts = lb__nvfp4_tensor_scale(amax);
        bad += lb__nvfp4_tensor_scale(lb__amax_for_scale(ts, LB__E2M1_MAX * LB__E4M3_MAX)) != ts;
        /* a divisor's inverse is always one whose reciprocal is the divisor
         * (the original itself, or its neighbour with the same reciprocal) */
        float g = lb__ct_global_divisor(ts), t = lb__scale_for_divisor(g);
        bad += 1.0f / t != g;
        divisor_off += t != ts;
        if (t != ts) bad += fabsf(t - ts) > ts * 1.2e-7f; /* one ulp at most */
    }
    CHECK(bad == 0, "%d KV / NVFP4 scales that do not come back", bad);
    CHECK(divisor_off < 20000 / 3, "%d of 20000 divisors inverted to the neighbour", divisor_off);
    CHECK(lb__nvfp4_tensor_scale(2688.0f) == 1.0f && lb__kv_scale(448.0f) == 1.0f, "the constants");
}

static void test_not_a_checkpoint(void)
{
    lb_model *m;
    if (lb_model_open(MODEL, &m) != LB_OK) {
        CHECK(0, "cannot open %s: %s", MODEL, lb_last_error());
        return;
    }
    lb_qmodel *q = (lb_qmodel *)&q;
    CHECK(lb_qmodel_from_checkpoint(m, 0, NULL) == LB_ERR_ARG, "NULL out");
    CHECK(lb_qmodel_from_checkpoint(m, 4, &q) == LB_ERR_ARG && q == NULL, "unknown flag");
    CHECK(lb_qmodel_from_checkpoint(m, 0, &q) == LB_OK && q, "%s", lb_last_error());
    size_t quantized = 0;
    for (size_t i = 0; q && i < lb_qmodel_count(q); i++) {
        lb_qentry e;
        lb_qmodel_entry(q, i, &e);
        quantized += e.state != LB_QSTATE_STORED || e.act.mode != LB_ACT_NONE;
    }
    CHECK(quantized == 0 && lb_qmodel_kv(q) == LB_FMT_FP32, "a plain model gives every tensor as stored");
    lb_qmodel_free(q);
    lb_model_close(m);
}

int main(void)
{
    test_static();
    test_kv_and_nvfp4();
    test_not_a_checkpoint();
    return check_summary();
}
