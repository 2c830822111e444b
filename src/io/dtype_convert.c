/* Conversions between the storage types of model files and fp32: the
 * plain types here, ggml's block types through the loops in ggml_blocks.c
 * and ggml_blocks_k.c. Results match the Python tools that write these
 * files (numpy casts, the gguf package) bit for bit, so a tensor read by
 * lowbit is the tensor every other tool sees. Multi-byte values are
 * little-endian in every file format, whatever the host. */
#include <math.h>
#include <string.h>

#include "io/ggml_blocks.h"
#include "io/ggml_quants.h"
#include "util/error.h"

/* The checks both directions share; *info is the type's row. */
static lb_status check_args(const char *fn, lb_dtype t, const void *src, size_t n, const void *dst,
                            const lb_dtype_info **info)
{
    const lb_dtype_info *d = lb_dtype_get(t);
    if (!d) return lb__fail(LB_ERR_ARG, "%s: unknown dtype id %d", fn, (int)t);
    if (!src || !dst)
        return lb__fail(LB_ERR_ARG, "%s: %s is NULL (%s, %zu elements)", fn, !src ? "src" : "dst", d->name, n);
    if (n % d->block)
        return lb__fail(LB_ERR_ARG, "%s: %zu %s elements are not whole blocks of %u", fn, n, d->name, d->block);
    *info = d;
    return LB_OK;
}

/* ===== To fp32 ===== */

static void from_f64(const uint8_t *s, size_t n, float *y)
{
    for (size_t i = 0; i < n; i++, s += 8) {
        uint64_t u = (uint64_t)lb__le32(s) | (uint64_t)lb__le32(s + 4) << 32;
        double v;
        memcpy(&v, &u, sizeof v);
        y[i] = (float)v; /* round to nearest, as numpy's astype */
    }
}

static void from_i16(const uint8_t *s, size_t n, float *y)
{
    for (size_t i = 0; i < n; i++) y[i] = (float)(int16_t)(uint16_t)lb__le16(s + 2 * i);
}

static void from_i32(const uint8_t *s, size_t n, float *y)
{
    for (size_t i = 0; i < n; i++) y[i] = (float)(int32_t)lb__le32(s + 4 * i);
}

static void from_i64(const uint8_t *s, size_t n, float *y)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t u = (uint64_t)lb__le32(s + 8 * i) | (uint64_t)lb__le32(s + 8 * i + 4) << 32;
        y[i] = (float)(int64_t)u; /* nearest fp32 beyond 2^24 */
    }
}

lb_status lb_dtype_to_f32(lb_dtype t, const void *src, size_t n, float *dst)
{
    const lb_dtype_info *info;
    lb_status st = check_args("lb_dtype_to_f32", t, src, n, dst, &info);
    if (st != LB_OK) return st;
    const uint8_t *s = src;
    size_t nb = n / info->block;
    switch (t) {
    case LB_DT_F32:
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        memcpy(dst, s, n * sizeof *dst); /* the file's little-endian bytes are the host's */
#else
        for (size_t i = 0; i < n; i++) dst[i] = lb__f32_from_bits(lb__le32(s + 4 * i));
#endif
        return LB_OK;
    case LB_DT_F16: return lb_decode_f32(LB_FMT_FP16, src, n, dst, 1);
    case LB_DT_BF16: return lb_decode_f32(LB_FMT_BF16, src, n, dst, 1);
    case LB_DT_F8_E4M3: return lb_decode_f32(LB_FMT_FP8_E4M3, src, n, dst, 1);
    case LB_DT_F8_E5M2: return lb_decode_f32(LB_FMT_FP8_E5M2, src, n, dst, 1);
    case LB_DT_F64: from_f64(s, n, dst); return LB_OK;
    case LB_DT_I8:
        for (size_t i = 0; i < n; i++) dst[i] = (float)(int8_t)s[i];
        return LB_OK;
    case LB_DT_U8:
        for (size_t i = 0; i < n; i++) dst[i] = (float)s[i];
        return LB_OK;
    case LB_DT_BOOL: /* any nonzero byte is true, as numpy reads it */
        for (size_t i = 0; i < n; i++) dst[i] = s[i] != 0 ? 1.0f : 0.0f;
        return LB_OK;
    case LB_DT_I16: from_i16(s, n, dst); return LB_OK;
    case LB_DT_I32: from_i32(s, n, dst); return LB_OK;
    case LB_DT_I64: from_i64(s, n, dst); return LB_OK;
    case LB_DT_Q4_0: lb__dequantize_q4_0(src, nb, dst); return LB_OK;
    case LB_DT_Q4_1: lb__dequantize_q4_1(src, nb, dst); return LB_OK;
    case LB_DT_Q5_0: lb__dequantize_q5_0(src, nb, dst); return LB_OK;
    case LB_DT_Q5_1: lb__dequantize_q5_1(src, nb, dst); return LB_OK;
    case LB_DT_Q8_0: lb__dequantize_q8_0(src, nb, dst); return LB_OK;
    case LB_DT_Q2_K: lb__dequantize_q2_k(src, nb, dst); return LB_OK;
    case LB_DT_Q3_K: lb__dequantize_q3_k(src, nb, dst); return LB_OK;
    case LB_DT_Q4_K: lb__dequantize_q4_k(src, nb, dst); return LB_OK;
    case LB_DT_Q5_K: lb__dequantize_q5_k(src, nb, dst); return LB_OK;
    case LB_DT_Q6_K: lb__dequantize_q6_k(src, nb, dst); return LB_OK;
    case LB_DT_MXFP4: lb__dequantize_mxfp4(src, nb, dst); return LB_OK;
    case LB_DT_NVFP4: lb__dequantize_nvfp4(src, nb, dst); return LB_OK;
    case LB_DT_IQ4_NL: lb__dequantize_iq4_nl(src, nb, dst); return LB_OK;
    case LB_DT_IQ4_XS: lb__dequantize_iq4_xs(src, nb, dst); return LB_OK;
    case LB_DT_QUANTIZED:
        return lb__fail(LB_ERR_UNSUPPORTED, "lb_dtype_to_f32: a quantized checkpoint's weight is made of several "
                                            "tensors; read it with lb_tensor_to_f32");
    case LB_DT_COUNT: break;
    }
    return lb__fail(LB_ERR_UNSUPPORTED, "lb_dtype_to_f32: %s cannot be read", info->name);
}

/* ===== From fp32 ===== */

/* fp32 -> bf16 as the gguf package writes it (ggml_compute_fp32_to_bf16):
 * a NaN keeps its sign and top payload bits and is made quiet, everything
 * else rounds to nearest even (overflowing to inf). */
static void to_bf16(const float *x, size_t n, uint8_t *y)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t u = lb__bits_from_f32(x[i]);
        if ((u & 0x7FFFFFFFu) > 0x7F800000u) u = (u & 0xFFFF0000u) | 0x00400000u;
        uint32_t h = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
        y[2 * i] = (uint8_t)h, y[2 * i + 1] = (uint8_t)(h >> 8);
    }
}

lb_status lb_dtype_from_f32(lb_dtype t, const float *src, size_t n, void *dst)
{
    const lb_dtype_info *info;
    lb_status st = check_args("lb_dtype_from_f32", t, src, n, dst, &info);
    if (st != LB_OK) return st;
    if (!info->can_write)
        return lb__fail(LB_ERR_UNSUPPORTED,
                        "lb_dtype_from_f32: lowbit does not write %s (it writes f32, f16, bf16 and every ggml "
                        "block type: q4_0 .. q8_0, q2_k .. q6_k, mxfp4, nvfp4, iq4_nl, iq4_xs)", info->name);
    if (info->block > 1) /* block scales need a finite range */
        for (size_t i = 0; i < n; i++)
            if (!isfinite(src[i]))
                return lb__fail(LB_ERR_NAN, "lb_dtype_from_f32: element %zu is %s; %s blocks need finite values", i,
                                isnan(src[i]) ? "NaN" : "infinite", info->name);
    uint8_t *d = dst;
    switch (t) {
    case LB_DT_F32:
        for (size_t i = 0; i < n; i++) {
            uint32_t u = lb__bits_from_f32(src[i]);
            d[4 * i] = (uint8_t)u, d[4 * i + 1] = (uint8_t)(u >> 8);
            d[4 * i + 2] = (uint8_t)(u >> 16), d[4 * i + 3] = (uint8_t)(u >> 24);
        }
        return LB_OK;
    case LB_DT_F16: /* ieee: overflow becomes inf and NaN keeps its top payload bits, as numpy */
        return lb_encode_f32(LB_FMT_FP16, LB_IEEE, src, n, dst, 1);
    case LB_DT_BF16: to_bf16(src, n, d); return LB_OK;
    /* the block types: ggml's quantizers, the n values as one row */
    case LB_DT_Q4_0: case LB_DT_Q4_1: case LB_DT_Q5_0: case LB_DT_Q5_1: case LB_DT_Q8_0: case LB_DT_MXFP4:
    case LB_DT_NVFP4: case LB_DT_IQ4_NL: case LB_DT_IQ4_XS: case LB_DT_Q2_K: case LB_DT_Q3_K: case LB_DT_Q4_K:
    case LB_DT_Q5_K: case LB_DT_Q6_K:
        return lb__ggml_quantize_rows(t, src, 1, n, NULL, dst);
    /* the rest are not writable (refused above); listed so a new dtype is a compile error here */
    case LB_DT_F64: case LB_DT_F8_E4M3: case LB_DT_F8_E5M2: case LB_DT_I8: case LB_DT_I16: case LB_DT_I32:
    case LB_DT_I64: case LB_DT_U8: case LB_DT_BOOL: case LB_DT_QUANTIZED: case LB_DT_COUNT: break;
    }
    return lb__fail(LB_ERR_UNSUPPORTED, "lb_dtype_from_f32: %s is marked writable but has no encoder", info->name);
}
