/* The storage types of model files, one row each (ggml type-traits
 * style): names in lowbit, safetensors and GGUF, and block geometry. The
 * conversions to and from fp32 live in dtype_convert.c. */
#include <strings.h>

#include "io/dtype.h"
#include "util/error.h"

/* ggml's block types read back every one; lowbit writes those whose
 * quantizer it has (src/io/ggml_quants.c, byte-identical to ggml's). */
static const lb_dtype_info table[LB_DT_COUNT] = {
    /* id            name       safetensors ggml block bytes read write */
    {LB_DT_F32, "f32", "F32", 0, 1, 4, 1, 1},
    {LB_DT_F16, "f16", "F16", 1, 1, 2, 1, 1},
    {LB_DT_BF16, "bf16", "BF16", 30, 1, 2, 1, 1},
    {LB_DT_F64, "f64", "F64", 28, 1, 8, 1, 0},
    {LB_DT_F8_E4M3, "f8_e4m3", "F8_E4M3", -1, 1, 1, 1, 0},
    {LB_DT_F8_E5M2, "f8_e5m2", "F8_E5M2", -1, 1, 1, 1, 0},
    {LB_DT_I8, "i8", "I8", 24, 1, 1, 1, 0},
    {LB_DT_I16, "i16", "I16", 25, 1, 2, 1, 0},
    {LB_DT_I32, "i32", "I32", 26, 1, 4, 1, 0},
    {LB_DT_I64, "i64", "I64", 27, 1, 8, 1, 0},
    {LB_DT_U8, "u8", "U8", -1, 1, 1, 1, 0},
    {LB_DT_BOOL, "bool", "BOOL", -1, 1, 1, 1, 0},
    {LB_DT_Q4_0, "q4_0", NULL, 2, 32, 18, 1, 1},
    {LB_DT_Q4_1, "q4_1", NULL, 3, 32, 20, 1, 1},
    {LB_DT_Q5_0, "q5_0", NULL, 6, 32, 22, 1, 1},
    {LB_DT_Q5_1, "q5_1", NULL, 7, 32, 24, 1, 1},
    {LB_DT_Q8_0, "q8_0", NULL, 8, 32, 34, 1, 1},
    {LB_DT_Q2_K, "q2_k", NULL, 10, 256, 84, 1, 1},
    {LB_DT_Q3_K, "q3_k", NULL, 11, 256, 110, 1, 1},
    {LB_DT_Q4_K, "q4_k", NULL, 12, 256, 144, 1, 1},
    {LB_DT_Q5_K, "q5_k", NULL, 13, 256, 176, 1, 1},
    {LB_DT_Q6_K, "q6_k", NULL, 14, 256, 210, 1, 1},
    {LB_DT_MXFP4, "mxfp4", NULL, 39, 32, 17, 1, 1},
    {LB_DT_NVFP4, "nvfp4", NULL, 40, 64, 36, 1, 1},
    {LB_DT_IQ4_NL, "iq4_nl", NULL, 20, 32, 18, 1, 1},
    {LB_DT_IQ4_XS, "iq4_xs", NULL, 23, 256, 136, 1, 1},
    /* a quantized checkpoint's logical weight (hf_quantized.c): no bytes of its own, read by lb_tensor_to_f32 */
    {LB_DT_QUANTIZED, "quantized", NULL, -1, 1, 0, 1, 0},
};

const lb_dtype_info *lb_dtype_get(lb_dtype t)
{
    if ((unsigned)t >= LB_DT_COUNT) return NULL;
    return &table[t];
}

const char *lb__dtype_name(lb_dtype t)
{
    const lb_dtype_info *d = lb_dtype_get(t);
    return d ? d->name : "?";
}

lb_status lb_dtype_by_name(const char *name, lb_dtype *out)
{
    if (!name || !out) return lb__fail(LB_ERR_ARG, "lb_dtype_by_name: NULL argument");
    for (int i = 0; i < LB_DT_COUNT; i++)
        if (strcasecmp(name, table[i].name) == 0 || (table[i].st_name && strcasecmp(name, table[i].st_name) == 0)) {
            *out = (lb_dtype)i;
            return LB_OK;
        }
    return lb__fail(LB_ERR_FORMAT, "unknown tensor dtype '%s'", name);
}

lb_status lb_dtype_from_ggml(int ggml_type, lb_dtype *out)
{
    if (!out) return lb__fail(LB_ERR_ARG, "lb_dtype_from_ggml: NULL argument");
    for (int i = 0; i < LB_DT_COUNT; i++)
        if (table[i].ggml_type >= 0 && table[i].ggml_type == ggml_type) {
            *out = (lb_dtype)i;
            return LB_OK;
        }
    return lb__fail(LB_ERR_PARSE, "ggml tensor type %d is not one lowbit reads", ggml_type);
}

lb_status lb_dtype_bytes(lb_dtype t, uint64_t n, uint64_t *bytes)
{
    if (!bytes) return lb__fail(LB_ERR_ARG, "lb_dtype_bytes: NULL argument");
    const lb_dtype_info *d = lb_dtype_get(t);
    if (!d) return lb__fail(LB_ERR_ARG, "unknown dtype id %d", (int)t);
    if (d->block_bytes == 0)
        return lb__fail(LB_ERR_ARG, "a %s tensor has no size per element: its components are other tensors", d->name);
    if (n % d->block) return lb__fail(LB_ERR_ARG, "%llu %s values are not whole blocks of %u",
                                      (unsigned long long)n, d->name, d->block);
    uint64_t blocks = n / d->block;
    if (blocks > UINT64_MAX / d->block_bytes)
        return lb__fail(LB_ERR_ARG, "%llu %s values overflow 64-bit byte counts", (unsigned long long)n, d->name);
    *bytes = blocks * d->block_bytes;
    return LB_OK;
}
