/* The quantized model a quantized checkpoint holds (lowbit.h,
 * lb_qmodel_from_checkpoint): what an engine computes from the directory,
 * so that `lowbit ppl` on it measures the engine's model, not only its
 * weights.
 *
 * Weights: a module with quantized inputs whose codes and scales are an
 * lb_qtensor layout byte for byte (FP8 and INT8 per tensor, channel or
 * group with f32/f16/bf16 scales; pack-quantized int4/int8, symmetric or
 * with zero points; NVFP4; MXFP4; MXFP8) becomes QUANTIZED with that
 * tensor, so the runner computes on the packed codes, scales applied in
 * fp32 as a W8A8/W4A4 GEMM does, exactly as it does for the model `lowbit
 * quantize` wrote them from (2-D FP8 blocks too). Weight-only modules and
 * anything else (other integer widths) stay STORED: the reader dequantizes
 * them as the format's package does, in the scale's dtype, which is what a
 * weight-only kernel (vLLM's Marlin) multiplies by.
 *
 * Activations and KV cache: the config's input quantization per module
 * with the file's scales turned back into calibrated ranges, and an FP8 KV
 * cache with the file's per-layer scales (weights/engine_scales.h has the
 * conventions and their inverses). The qmodel's dtype is f32, so the runner
 * uses each stored static scale as it is, whatever dtype the file had. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/hf_quantized.h"
#include "quant/quant_internal.h"
#include "util/error.h"
#include "weights/engine_scales.h"
#include "weights/qmodel_internal.h"

/* One value of a float scalar tensor (the reader checked it is one). */
static lb_status scalar(const lb_tensor *t, float *v)
{
    lb_status st = lb_dtype_to_f32(t->dtype, t->data, 1, v);
    if (st != LB_OK) return lb__fail(st, "tensor '%s': %s", t->name, lb_last_error());
    if (!isfinite(*v) || !(*v > 0))
        return lb__fail(LB_ERR_PARSE, "tensor '%s': a scale must be finite and positive, found %g", t->name, (double)*v);
    return LB_OK;
}

/* Every value of a float scale tensor finite. */
static lb_status check_scales(const lb_tensor *t)
{
    uint64_t n = t->n_elements;
    float *v = malloc((n ? n : 1) * sizeof *v);
    if (!v) return lb__fail(LB_ERR_NOMEM, "out of memory reading '%s'", t->name);
    lb_status st = lb_tensor_to_f32(t, v);
    for (uint64_t k = 0; st == LB_OK && k < n; k++)
        /* negative is a scale: symmetric int4/int8 under range=signed (ggml's Q4_0 rule, lowbit's default
         * under 16-bit scales) stores the block's largest magnitude on the negative end, and every engine
         * multiplies code by scale whatever its sign */
        if (!isfinite(v[k]))
            st = lb__fail(LB_ERR_PARSE, "tensor '%s': scale %llu is %g; scales must be finite", t->name,
                          (unsigned long long)k, (double)v[k]);
    lb_tensor_release(t);
    free(v);
    return st;
}

/* E8M0 exponents: 0xFF is NaN. UE4M3 (F8_E4M3 bytes): the sign bit set, or
 * S.1111.111 (NaN), is no scale. */
static lb_status check_byte_scales(const lb_tensor *t, int e8m0)
{
    const uint8_t *b = t->data;
    for (uint64_t k = 0; k < t->n_bytes; k++) {
        if (e8m0 && b[k] == 0xFF)
            return lb__fail(LB_ERR_PARSE, "tensor '%s': E8M0 scale %llu is 0xFF (NaN)", t->name, (unsigned long long)k);
        if (!e8m0 && ((b[k] & 0x80) || (b[k] & 0x7F) == 0x7F))
            return lb__fail(LB_ERR_PARSE, "tensor '%s': E4M3 scale %llu is %s (byte 0x%02X); block scales must be "
                            "positive numbers", t->name, (unsigned long long)k,
                            (b[k] & 0x7F) == 0x7F ? "NaN" : "negative", b[k]);
    }
    return LB_OK;
}

static const char *scale_word(lb_dtype d)
{
    return d == LB_DT_F32 ? "fp32" : d == LB_DT_F16 ? "fp16" : d == LB_DT_BF16 ? "bf16" : NULL;
}

/* The spec text of a plan's layout, or 0 when it has none (stays STORED). */
static int spec_text(const lb__hfq_tensor *h, char *buf, size_t n)
{
    char gran[32];
    if (h->brows == h->rows && h->bcols == h->cols && h->rows > 1) snprintf(gran, sizeof gran, "tensor");
    else if (h->brows == 1 && h->bcols == h->cols) snprintf(gran, sizeof gran, "channel");
    else if (h->brows == 1 && h->bcols < h->cols && h->cols % h->bcols == 0)
        snprintf(gran, sizeof gran, "g%llu", (unsigned long long)h->bcols);
    else if (h->brows > 1 && h->elem == LB__HFQ_E_FP8 && !h->e8m0 && h->bcols <= h->cols && h->cols % h->bcols == 0)
        /* 2-D FP8 blocks (FP8-BLOCK): the file's [ceil(rows/R), cols/C] scales are lowbit's 2-D layout */
        snprintf(gran, sizeof gran, "b%llux%llu", (unsigned long long)h->brows, (unsigned long long)h->bcols);
    else return 0;
    const char *sw = scale_word(h->scale.dtype);
    switch (h->elem) {
    case LB__HFQ_E_FP8:
        if (h->e8m0) return h->brows == 1 && h->bcols == 32 && !h->has_global && !h->has_zp
                                ? snprintf(buf, n, "%s", lb_scheme_find("MXFP8")->weights) > 0 : 0;
        if (!sw || h->has_zp || h->has_global) return 0;
        return snprintf(buf, n, "fp8_e4m3:%s:scale=%s", gran, sw) > 0;
    case LB__HFQ_E_INT8:
        if (!sw || h->has_zp || h->has_global) return 0;
        return snprintf(buf, n, "int8:%s:scale=%s", gran, sw) > 0;
    case LB__HFQ_E_PACKED:
        if (!sw || (h->bits != 4 && h->bits != 8) || h->has_global || (h->has_zp && !h->zp_packed)) return 0;
        if (h->has_zp && strcmp(gran, "tensor") == 0) return 0;
        return snprintf(buf, n, "int%d:%s%s:scale=%s", h->bits, gran, h->has_zp ? ":affine" : "", sw) > 0;
    case LB__HFQ_E_FP4:
        if (h->e8m0) return h->brows == 1 && h->bcols == 32 && !h->has_global
                                ? snprintf(buf, n, "%s", lb_scheme_find("MXFP4")->weights) > 0 : 0;
        return h->has_global && h->brows == 1 && h->bcols == 16 && h->scale.dtype == LB_DT_F8_E4M3
                   ? snprintf(buf, n, "nvfp4") > 0 : 0;
    }
    return 0;
}

/* A pack-quantized value (code + 2^(b-1)) as the element's code. */
static uint32_t element_code(lb_format el, uint32_t v)
{
    switch (el) {
    case LB_FMT_INT4: return (v - 8u) & 15u;
    case LB_FMT_INT8: return (v - 128u) & 255u;
    case LB_FMT_UINT4: case LB_FMT_UINT8: return v;
    case LB_FMT_FP32: case LB_FMT_FP16: case LB_FMT_BF16: case LB_FMT_FP8_E4M3: case LB_FMT_FP8_E5M2:
    case LB_FMT_FP8_E4M3FNUZ: case LB_FMT_FP8_E5M2FNUZ: case LB_FMT_FP6_E2M3: case LB_FMT_FP6_E3M2:
    case LB_FMT_FP4_E2M1: case LB_FMT_E8M0: case LB_FMT_UE4M3: case LB_FMT_COUNT: break;
    }
    return 0;
}

static void put_code(uint8_t *row, int bits, size_t j, uint32_t c)
{
    if (bits == 8) row[j] = (uint8_t)c;
    else row[j / 2] = (uint8_t)(j & 1 ? (row[j / 2] & 0x0F) | (c << 4) : (row[j / 2] & 0xF0) | c);
}

/* The plan's file tensors as lb_qtensor bytes. */
static lb_status fill_qtensor(const lb__hfq_tensor *h, const lb_qspec *spec, lb_qtensor **out)
{
    lb_qtensor *qt = NULL;
    lb_status st = lb__qtensor_alloc(spec, (size_t)h->rows, (size_t)h->cols, &qt);
    if (st != LB_OK) return st;
    size_t scale_bytes = lb_format_bytes(spec->scale_format, qt->scale_count);
    if (h->elem == LB__HFQ_E_PACKED) {
        size_t wpr = (size_t)((h->cols * (uint64_t)h->bits + 31) / 32);
        for (size_t r = 0; r < qt->rows; r++) {
            const uint8_t *words = (const uint8_t *)h->codes.data + r * wpr * 4;
            uint8_t *row = qt->data + r * qt->row_bytes;
            memset(row, 0, qt->row_bytes);
            for (size_t j = 0; j < qt->cols; j++) put_code(row, h->bits, j, element_code(spec->element, lb__hfq_stream_at(words, 4, j, h->bits)));
        }
        if (h->has_zp) { /* [ceil(rows*b/32), groups]: column g's words hold the rows' zero points */
            size_t groups = qt->scales_per_row;
            const uint8_t *zp = h->zero_point.data;
            memset(qt->zero_points, 0, qt->rows * qt->zp_row_bytes);
            for (size_t g = 0; g < groups; g++) /* column g: its words are groups x 4 bytes apart */
                for (size_t r = 0; r < qt->rows; r++)
                    put_code(qt->zero_points + r * qt->zp_row_bytes, h->bits, g,
                             element_code(spec->element, lb__hfq_stream_at(zp + 4 * g, 4 * groups, r, h->bits)));
        }
    } else {
        if (h->codes.n_bytes != qt->rows * qt->row_bytes)
            st = lb__fail(LB_ERR_PARSE, "tensor '%s': %llu bytes, expected %zu", h->codes.name,
                          (unsigned long long)h->codes.n_bytes, qt->rows * qt->row_bytes);
        else memcpy(qt->data, h->codes.data, qt->rows * qt->row_bytes);
    }
    if (st == LB_OK && h->scale.n_bytes != scale_bytes)
        st = lb__fail(LB_ERR_PARSE, "tensor '%s': %llu bytes of scales, expected %zu", h->scale.name,
                      (unsigned long long)h->scale.n_bytes, scale_bytes);
    if (st == LB_OK) memcpy(qt->scales, h->scale.data, scale_bytes);
    if (st == LB_OK && h->has_global) {
        float g;
        st = scalar(&h->global, &g);
        /* compressed-tensors divides by its global scale, ModelOpt multiplies */
        if (st == LB_OK) qt->tensor_scale = h->math == LB__HFQ_M_F32 ? g : lb__scale_for_divisor(g);
    }
    lb_tensor_release(&h->codes);
    if (st != LB_OK) return lb_qtensor_free(qt), st;
    *out = qt;
    return LB_OK;
}

/* Weight entry i as the file stores it: QUANTIZED when its inputs are
 * quantized too and lowbit's layout holds it exactly (a W8A8 or W4A4 GEMM
 * applies the scales in fp32, as lowbit's packed kernels do); else left
 * STORED, dequantized as the package does (a weight-only kernel such as
 * vLLM's Marlin dequantizes to 16 bits in the scale's dtype first). */
static lb_status set_weight(lb_qmodel *q, size_t i, const lb__hfq_tensor *h, const char *name)
{
    lb_status st = h->e8m0 || h->scale.dtype == LB_DT_F8_E4M3 ? check_byte_scales(&h->scale, h->e8m0)
                                                              : check_scales(&h->scale);
    char text[96];
    if (st != LB_OK || !h->act.quantized_inputs || !spec_text(h, text, sizeof text)) return st;
    lb_qspec spec;
    if ((st = lb_qspec_parse(text, &spec)) != LB_OK) return lb__fail(st, "%s: spec %s: %s", name, text, lb_last_error());
    lb_qtensor *qt = NULL;
    if ((st = fill_qtensor(h, &spec, &qt)) != LB_OK) return st;
    if ((st = lb_qmodel_set_spec(q, i, &spec)) != LB_OK) return lb_qtensor_free(qt), st;
    return lb_qmodel_set_qtensor(q, i, qt);
}

/* The lb_qact of the module's input quantization, and its calibrated range. */
static lb_status set_act(lb_qmodel *q, size_t i, const lb__hfq_act *a, const char *name)
{
    lb_qact act = {.mode = LB_ACT_NONE};
    char text[64] = "";
    float amax = 0;
    lb_status st = LB_OK;
    const char *el = a->is_float ? "fp8_e4m3" : "int8";
    switch (a->mode) {
    case LB__HFQ_A_NONE: return LB_OK;
    case LB__HFQ_A_DYNAMIC:
        act.mode = LB_ACT_DYNAMIC;
        if (a->e8m0) snprintf(text, sizeof text, "%s", lb_scheme_find(a->bits == 4 ? "MXFP4" : "MXFP8")->act);
        else if (a->per_token) snprintf(text, sizeof text, "%s:token", el);
        else snprintf(text, sizeof text, "%s:g%llu", el, (unsigned long long)a->group);
        break;
    case LB__HFQ_A_STATIC: {
        act.mode = LB_ACT_STATIC;
        snprintf(text, sizeof text, "%s:tensor", el);
        float s;
        if ((st = scalar(&a->scale, &s)) == LB_OK)
            amax = lb__amax_for_scale(s, lb__static_qmax(a->is_float ? LB_FMT_FP8_E4M3 : LB_FMT_INT8));
        break;
    }
    case LB__HFQ_A_LOCAL: {
        act.mode = LB_ACT_LOCAL;
        snprintf(text, sizeof text, "%s", lb_scheme_find("NVFP4")->act);
        float s;
        if ((st = scalar(&a->scale, &s)) == LB_OK) /* back to the multiplier amax / (6 * 448), then to amax */
            amax = lb__amax_for_scale(a->scale_divisor ? lb__scale_for_divisor(s) : s, LB__E2M1_MAX * LB__E4M3_MAX);
        break;
    }
    }
    if (st != LB_OK) return st;
    if ((st = lb_qspec_parse(text, &act.spec)) != LB_OK)
        return lb__fail(st, "%s: activation spec %s: %s", name, text, lb_last_error());
    if ((st = lb_qmodel_set_act(q, i, &act)) != LB_OK) return st;
    if (!isfinite(amax)) return lb__fail(LB_ERR_PARSE, "%s: its input scale gives no finite range", name);
    return amax > 0 ? lb_qmodel_set_input_amax(q, i, amax) : LB_OK;
}

static lb_status set_kv(lb_qmodel *q, const lb__hfq_kv *kv)
{
    if (!kv->fp8) return LB_OK;
    lb_status st = lb_qmodel_set_kv(q, LB_FMT_FP8_E4M3);
    for (uint32_t l = 0; st == LB_OK && l < kv->n_layers; l++) {
        float s[2];
        for (int w = 0; st == LB_OK && w < 2; w++) {
            const lb_tensor *t = w ? &kv->v[l] : &kv->k[l];
            if (!t->name)
                return lb__fail(LB_ERR_PARSE, "the checkpoint's KV cache is fp8, but layer %u has no %c_scale "
                                "(model.layers.%u.self_attn.%c_scale)", l, w ? 'v' : 'k', l, w ? 'v' : 'k');
            st = scalar(t, &s[w]);
        }
        if (st == LB_OK)
            st = lb_qmodel_set_kv_amax(q, l, lb__amax_for_scale(s[0], LB__E4M3_MAX),
                                       lb__amax_for_scale(s[1], LB__E4M3_MAX));
    }
    return st;
}

lb_status lb_qmodel_from_checkpoint(const lb_model *m, unsigned flags, lb_qmodel **out)
{
    if (!out) return lb__fail(LB_ERR_ARG, "lb_qmodel_from_checkpoint: out is NULL");
    *out = NULL;
    if (flags & ~LB_CKPT_WEIGHTS_ONLY) return lb__fail(LB_ERR_ARG, "lb_qmodel_from_checkpoint: unknown flags 0x%x", flags);
    lb_qmodel *q;
    lb_status st = lb_qmodel_new(m, &q);
    if (st != LB_OK) return st;
    const lb__hfq_kv *kv = lb__hfq_kv_of(m);
    int weights_only = (flags & LB_CKPT_WEIGHTS_ONLY) != 0;
    if (kv && !weights_only && kv->unsupported)
        st = lb__fail(LB_ERR_UNSUPPORTED, "%s: lowbit cannot simulate it (evaluate the weights alone with "
                      "--weights-only)", kv->unsupported);
    /* every module first, so a message names the first module that is not simulated before any work */
    for (size_t i = 0; st == LB_OK && !weights_only && i < lb_qmodel_count(q); i++) {
        const lb__hfq_tensor *h = lb__hfq_tensor_of(lb_model_tensor(m, i));
        if (h && h->act.unsupported)
            st = lb__fail(LB_ERR_UNSUPPORTED, "%s: %s: lowbit cannot simulate it (evaluate the weights alone with "
                          "--weights-only)", lb_model_tensor(m, i)->name, h->act.unsupported);
    }
    if (st == LB_OK && lb_model_quantization(m)) st = lb_qmodel_set_dtype(q, LB_DT_F32); /* static scales as stored (engine_scales.h) */
    for (size_t i = 0; st == LB_OK && i < lb_qmodel_count(q); i++) {
        const lb_tensor *t = lb_model_tensor(m, i);
        const lb__hfq_tensor *h = lb__hfq_tensor_of(t);
        if (!h) continue;
        st = set_weight(q, i, h, t->name);
        if (st == LB_OK && !weights_only) st = set_act(q, i, &h->act, t->name);
    }
    if (st == LB_OK && kv && !weights_only) st = set_kv(q, kv);
    /* the tensor scales are the file's: no fused-group range to compute */
    if (st == LB_OK) lb__qmodel_unfuse(q);
    if (st != LB_OK) {
        lb_qmodel_free(q);
        return st;
    }
    *out = q;
    return LB_OK;
}
