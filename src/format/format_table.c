/* The format table: one row per number format, like ggml's type traits.
 * Every constant is exact and is checked by the tests against an
 * independent oracle (ml_dtypes' finfo and a walk over every code). */
#include <stddef.h>
#include <string.h>
#include <strings.h>

#include "lowbit.h"
#include "format/codec.h"
#include "util/error.h"


#define MINIFLOAT_CODEC lb__encode_minifloat, lb__decode_minifloat
#define E8M0_CODEC lb__encode_e8m0, lb__decode_e8m0
#define INT_CODEC lb__encode_int, lb__decode_int

static const lb_format_info format_table[LB_FMT_COUNT] = {
    [LB_FMT_FP32] = {LB_FMT_FP32, "fp32", LB_KIND_FLOAT, 32, 1, 8, 23, 127, LB_SPECIALS_IEEE,
                     0x1.fffffep127, -0x1.fffffep127, 0x1p-126, 0x1p-149, 4278190079ull,
                     "IEEE binary32: master weights, accumulators", MINIFLOAT_CODEC},
    [LB_FMT_FP16] = {LB_FMT_FP16, "fp16", LB_KIND_FLOAT, 16, 1, 5, 10, 15, LB_SPECIALS_IEEE,
                     65504.0, -65504.0, 0x1p-14, 0x1p-24, 63487,
                     "IEEE binary16: activations, KV cache, older GPUs", MINIFLOAT_CODEC},
    [LB_FMT_BF16] = {LB_FMT_BF16, "bf16", LB_KIND_FLOAT, 16, 1, 8, 7, 127, LB_SPECIALS_IEEE,
                     0x1.fep127, -0x1.fep127, 0x1p-126, 0x1p-133, 65279,
                     "bfloat16, top half of fp32: the usual checkpoint dtype", MINIFLOAT_CODEC},
    [LB_FMT_FP8_E4M3] = {LB_FMT_FP8_E4M3, "fp8_e4m3", LB_KIND_FLOAT, 8, 1, 4, 3, 7, LB_SPECIALS_FN,
                         448.0, -448.0, 0x1p-6, 0x1p-9, 253,
                         "OCP FP8 E4M3FN: W8A8 weights and activations, FP8 KV cache", MINIFLOAT_CODEC},
    [LB_FMT_FP8_E5M2] = {LB_FMT_FP8_E5M2, "fp8_e5m2", LB_KIND_FLOAT, 8, 1, 5, 2, 15, LB_SPECIALS_IEEE,
                         57344.0, -57344.0, 0x1p-14, 0x1p-16, 247,
                         "OCP FP8 E5M2: gradients, wide-range KV cache", MINIFLOAT_CODEC},
    [LB_FMT_FP8_E4M3FNUZ] = {LB_FMT_FP8_E4M3FNUZ, "fp8_e4m3fnuz", LB_KIND_FLOAT, 8, 1, 4, 3, 8,
                             LB_SPECIALS_FNUZ, 240.0, -240.0, 0x1p-7, 0x1p-10, 255,
                             "AMD MI300 FP8 E4M3: bias 8, NaN 0x80, no -0", MINIFLOAT_CODEC},
    [LB_FMT_FP8_E5M2FNUZ] = {LB_FMT_FP8_E5M2FNUZ, "fp8_e5m2fnuz", LB_KIND_FLOAT, 8, 1, 5, 2, 16,
                             LB_SPECIALS_FNUZ, 57344.0, -57344.0, 0x1p-15, 0x1p-17, 255,
                             "AMD MI300 FP8 E5M2: bias 16, NaN 0x80, no -0", MINIFLOAT_CODEC},
    [LB_FMT_FP6_E2M3] = {LB_FMT_FP6_E2M3, "fp6_e2m3", LB_KIND_FLOAT, 6, 1, 2, 3, 1, LB_SPECIALS_NONE,
                         7.5, -7.5, 1.0, 0.125, 63, "OCP MXFP6 element (E2M3)", MINIFLOAT_CODEC},
    [LB_FMT_FP6_E3M2] = {LB_FMT_FP6_E3M2, "fp6_e3m2", LB_KIND_FLOAT, 6, 1, 3, 2, 3, LB_SPECIALS_NONE,
                         28.0, -28.0, 0.25, 0.0625, 63, "OCP MXFP6 element (E3M2)", MINIFLOAT_CODEC},
    [LB_FMT_FP4_E2M1] = {LB_FMT_FP4_E2M1, "fp4_e2m1", LB_KIND_FLOAT, 4, 1, 2, 1, 1, LB_SPECIALS_NONE,
                         6.0, -6.0, 1.0, 0.5, 15, "OCP MXFP4 and NVFP4 element: +-{0,.5,1,1.5,2,3,4,6}", MINIFLOAT_CODEC},
    [LB_FMT_E8M0] = {LB_FMT_E8M0, "e8m0", LB_KIND_FLOAT, 8, 0, 8, 0, 127, LB_SPECIALS_E8M0,
                     0x1p127, 0x1p-127, 0x1p-127, 0x1p-127, 255,
                     "OCP MX block scale: 2^(code-127), 0xFF is NaN, no zero", E8M0_CODEC},
    [LB_FMT_UE4M3] = {LB_FMT_UE4M3, "ue4m3", LB_KIND_FLOAT, 8, 0, 4, 3, 7, LB_SPECIALS_FN,
                      448.0, 0.0, 0x1p-6, 0x1p-9, 127,
                      "NVFP4 block scale: E4M3 with sign bit 0; 0x7F and 0x80-0xFF are NaN", MINIFLOAT_CODEC},
    [LB_FMT_INT8] = {LB_FMT_INT8, "int8", LB_KIND_INT, 8, 1, 0, 0, 0, LB_SPECIALS_NONE,
                     127.0, -128.0, 1.0, 1.0, 256, "two's complement: W8A8 INT8, Q8_0", INT_CODEC},
    [LB_FMT_UINT8] = {LB_FMT_UINT8, "uint8", LB_KIND_INT, 8, 0, 0, 0, 0, LB_SPECIALS_NONE,
                      255.0, 0.0, 1.0, 1.0, 256, "unsigned: affine (zero-point) INT8", INT_CODEC},
    [LB_FMT_INT4] = {LB_FMT_INT4, "int4", LB_KIND_INT, 4, 1, 0, 0, 0, LB_SPECIALS_NONE,
                     7.0, -8.0, 1.0, 1.0, 16, "two's complement: symmetric W4A16 (GPTQ, AWQ)", INT_CODEC},
    [LB_FMT_UINT4] = {LB_FMT_UINT4, "uint4", LB_KIND_INT, 4, 0, 0, 0, 0, LB_SPECIALS_NONE,
                      15.0, 0.0, 1.0, 1.0, 16, "unsigned: affine W4A16 with zero point (Q4_1)", INT_CODEC},
};

const lb_format_info *lb_format_get(lb_format f)
{
    if ((unsigned)f >= LB_FMT_COUNT) return NULL;
    return &format_table[f];
}

/* Other spellings users bring from ml_dtypes, PyTorch and papers. */
static const struct { const char *alias; lb_format id; } aliases[] = {
    {"float32", LB_FMT_FP32},          {"f32", LB_FMT_FP32},
    {"float16", LB_FMT_FP16},          {"f16", LB_FMT_FP16},
    {"half", LB_FMT_FP16},             {"bfloat16", LB_FMT_BF16},
    {"e4m3", LB_FMT_FP8_E4M3},         {"float8_e4m3fn", LB_FMT_FP8_E4M3},
    {"fp8_e4m3fn", LB_FMT_FP8_E4M3},   {"e5m2", LB_FMT_FP8_E5M2},
    {"float8_e5m2", LB_FMT_FP8_E5M2},  {"float8_e4m3fnuz", LB_FMT_FP8_E4M3FNUZ},
    {"float8_e5m2fnuz", LB_FMT_FP8_E5M2FNUZ},
    {"e2m3", LB_FMT_FP6_E2M3},         {"float6_e2m3fn", LB_FMT_FP6_E2M3},
    {"e3m2", LB_FMT_FP6_E3M2},         {"float6_e3m2fn", LB_FMT_FP6_E3M2},
    {"e2m1", LB_FMT_FP4_E2M1},         {"float4_e2m1fn", LB_FMT_FP4_E2M1},
    {"fp4", LB_FMT_FP4_E2M1},          {"float8_e8m0fnu", LB_FMT_E8M0},
};

lb_status lb_format_by_name(const char *name, lb_format *out)
{
    if (!name || !out) return lb__fail(LB_ERR_ARG, "lb_format_by_name: NULL argument");
    for (int i = 0; i < LB_FMT_COUNT; i++)
        if (strcasecmp(name, format_table[i].name) == 0) return *out = (lb_format)i, LB_OK;
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (strcasecmp(name, aliases[i].alias) == 0) return *out = aliases[i].id, LB_OK;

    char valid[512] = "";
    for (int i = 0; i < LB_FMT_COUNT; i++) {
        if (i) strncat(valid, ", ", sizeof valid - strlen(valid) - 1);
        strncat(valid, format_table[i].name, sizeof valid - strlen(valid) - 1);
    }
    return lb__fail(LB_ERR_FORMAT, "unknown format '%.64s'; valid formats: %s", name, valid);
}

size_t lb_format_bytes(lb_format f, size_t n)
{
    const lb_format_info *fi = lb_format_get(f);
    if (!fi) return 0;
    switch (fi->bits) {
    case 4: return n / 2 + (n & 1);
    case 6: case 8: return n;
    case 16: return n > SIZE_MAX / 2 ? 0 : n * 2;
    case 32: return n > SIZE_MAX / 4 ? 0 : n * 4;
    }
    return 0;
}
