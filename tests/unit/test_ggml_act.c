/* llama.cpp's activation rounding (src/model/ggml_act.h) on hand-made
 * inputs whose answers follow from the rules: Q8_0/Q8_1 codes at 127/amax,
 * ties to even, the scale through fp16; Q8_K at -127/max with its fp32
 * scale; f16 and bf16 ties to even; the weight -> vec_dot type table; the
 * block checks. (Bit-for-bit against libggml-cpu itself:
 * tests/llamacpp/test_gguf_act.py.) */
#include <math.h>
#include <string.h>

#include "check.h"
#include "lowbit.h"
#include "model/ggml_act.h"

static void q8_0_cases(void)
{
    float x[32] = {127.0f, 0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 3.0f}, y[32];
    CHECK(lb__ggml_act_round(LB__GGML_ACT_Q8_0, x, 32, y) == LB_OK, "q8_0");
    /* amax 127: the scale 1 (exact in fp16), ties to even */
    const float want[8] = {127.0f, 0.0f, 2.0f, 2.0f, -0.0f, -2.0f, -2.0f, 3.0f};
    for (int j = 0; j < 8; j++) CHECK(y[j] == want[j], "q8_0[%d]: %g, not %g", j, (double)y[j], (double)want[j]);
    /* amax 1: the scale 1/127 rounds to fp16 (1032 x 2^-17) */
    float one[32] = {1.0f}, z[32];
    lb__ggml_act_round(LB__GGML_ACT_Q8_1, one, 32, z);
    CHECK(z[0] == 127.0f * 0.00787353515625f, "q8_1 scale through fp16: %.9g", (double)z[0]);
    CHECK(z[1] == 0.0f, "zeros stay zero");
    float zero[32] = {0}, w[32];
    lb__ggml_act_round(LB__GGML_ACT_Q8_0, zero, 32, w);
    CHECK(w[5] == 0.0f, "an all-zero block");
    CHECK(lb__ggml_act_round(LB__GGML_ACT_Q8_0, x, 31, y) == LB_ERR_ARG, "31 values are no block");
}

static void q8_k_cases(void)
{
    float x[256] = {0}, y[256];
    x[0] = -127.0f; /* max -127: iscale 1, scale 1 */
    x[1] = 0.5f, x[2] = 1.5f, x[3] = -2.5f, x[4] = 126.5f;
    CHECK(lb__ggml_act_round(LB__GGML_ACT_Q8_K, x, 256, y) == LB_OK, "q8_k");
    CHECK(y[0] == -127.0f && y[1] == 0.0f && y[2] == 2.0f && y[3] == -2.0f && y[4] == 126.0f,
          "q8_k ties to even: %g %g %g %g %g", (double)y[0], (double)y[1], (double)y[2], (double)y[3], (double)y[4]);
    x[0] = 3.0f, x[4] = 0.0f; /* max +3: iscale -127/3, the scale its fp32 reciprocal */
    lb__ggml_act_round(LB__GGML_ACT_Q8_K, x, 256, y);
    float iscale = -127.0f / 3.0f, d = 1.0f / iscale;
    CHECK(y[0] == d * -127.0f, "q8_k scale 1/iscale in fp32: %.9g", (double)y[0]);
    CHECK(lb__ggml_act_round(LB__GGML_ACT_Q8_K, x, 128, y) == LB_ERR_ARG, "128 values are no 256-block");
}

static void float_cases(void)
{
    float x[6] = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 65519.0f, 65520.0f, 0x1p-25f, 0x1.8p-24f}, y[6];
    lb__ggml_act_round(LB__GGML_ACT_F16, x, 6, y);
    CHECK(y[0] == 1.0f && y[1] == 1.0f + 0x1p-9f, "f16 ties to even: %.9g %.9g", (double)y[0], (double)y[1]);
    CHECK(y[2] == 65504.0f && isinf(y[3]), "f16 overflow: %g %g", (double)y[2], (double)y[3]);
    CHECK(y[4] == 0.0f && y[5] == 0x1p-23f, "f16 subnormal ties: %g %g", (double)y[4], (double)y[5]);
    float b[2] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f}, c[2];
    lb__ggml_act_round(LB__GGML_ACT_BF16, b, 2, c);
    CHECK(c[0] == 1.0f && c[1] == 1.0f + 0x1p-6f, "bf16 ties to even: %.9g %.9g", (double)c[0], (double)c[1]);
    float same[3] = {0.1f, -7.0f, 1e30f}, out[3];
    lb__ggml_act_round(LB__GGML_ACT_F32, same, 3, out);
    CHECK(memcmp(same, out, sizeof same) == 0, "f32 copies");
    CHECK(lb__ggml_act_round(99, same, 3, out) == LB_ERR_ARG, "an unknown type");
}

static void table_cases(void)
{
    CHECK(lb__ggml_act_type(LB_DT_Q4_0) == LB__GGML_ACT_Q8_0 && lb__ggml_act_type(LB_DT_NVFP4) == LB__GGML_ACT_Q8_0 &&
          lb__ggml_act_type(LB_DT_IQ4_NL) == LB__GGML_ACT_Q8_0, "Q8_0 family");
    CHECK(lb__ggml_act_type(LB_DT_Q5_1) == LB__GGML_ACT_Q8_1, "Q8_1");
    CHECK(lb__ggml_act_type(LB_DT_Q3_K) == LB__GGML_ACT_Q8_K && lb__ggml_act_type(LB_DT_IQ4_XS) == LB__GGML_ACT_Q8_K,
          "Q8_K");
    CHECK(lb__ggml_act_type(LB_DT_F16) == LB__GGML_ACT_F16 && lb__ggml_act_type(LB_DT_F32) == LB__GGML_ACT_F32,
          "floats");
}

int main(void)
{
    q8_0_cases();
    q8_k_cases();
    float_cases();
    table_cases();
    return check_summary();
}
