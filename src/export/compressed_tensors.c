/* The compressed-tensors format (vLLM, SGLang; the llm-compressor package
 * writes it): which safetensors tensors a quantized linear layer becomes,
 * and config.json's "quantization_config". The package (0.20.1) is the
 * judge: every layout here was read from its compressors
 * (compressors/{naive_quantized,pack_quantized,nvfp4,mxfp4,mxfp8}) and is
 * checked by tests/interop/test_compressed_tensors.py, which decompresses
 * lowbit's output with the package.
 *
 *   float-quantized  FP8 weights + activations: weight F8_E4M3 [out, in],
 *                    weight_scale [1] | [out, 1] | [out, in/g] in the model
 *                    dtype, input_scale [1] when activations are static
 *   naive-quantized  the same for FP8 weight-only
 *   int-quantized    int8 (or int4) weights + activations: weight I8
 *   pack-quantized   integer weight-only, 1..8 bits: weight_packed I32
 *                    [out, ceil(in*b/32)] (q + 2^(b-1) as a little-endian
 *                    bit stream along the row), weight_shape I64 [2],
 *                    weight_scale in the model dtype, and for affine
 *                    weight_zero_point I32 packed the same way along dim 0
 *   nvfp4-pack-quantized  weight_packed U8 [out, in/2] (even element in the
 *                    low nibble), weight_scale F8_E4M3 [out, in/16],
 *                    weight_global_scale F32 [1] = 1 / lowbit's tensor
 *                    multiplier (a divisor), input_global_scale F32 [1]
 *   mxfp4-pack-quantized  weight_packed U8, weight_scale U8 (E8M0) [out, in/32]
 *   mxfp8-quantized  weight F8_E4M3, weight_scale U8 (E8M0) [out, in/32]
 *
 * Scales of the first four are stored in the model's dtype (the package
 * and vLLM create them so and cast what they load), so a spec whose scales
 * are in another dtype is refused rather than rounded: lowbit would then
 * have evaluated weights the file does not hold. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export/exporter.h"
#include "quant/quant_internal.h"
#include "util/error.h"
#include "weights/engine_scales.h"

/* The compressed-tensors version whose models this writer follows. */
#define CT_VERSION "0.20.1"
/* Group sizes vLLM's Marlin kernels take for integer weight-only layers
 * (-1 is per channel). */
static const size_t marlin_groups[] = {32, 64, 128};

typedef enum ct_format {
    CT_DENSE = 0,
    CT_FLOAT,
    CT_NAIVE,
    CT_INT,
    CT_PACK,
    CT_NVFP4,
    CT_MXFP4,
    CT_MXFP8,
    CT_FORMAT_COUNT
} ct_format;

static const char *const ct_format_names[CT_FORMAT_COUNT] = {
    "dense", "float-quantized", "naive-quantized", "int-quantized", "pack-quantized",
    "nvfp4-pack-quantized", "mxfp4-pack-quantized", "mxfp8-quantized"};

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static const char *fmt_name(lb_format f)
{
    const lb_format_info *i = lb_format_get(f);
    return i ? i->name : "?";
}

/* 2-D blocks (bRxC): compressed-tensors' strategy "block". */
static int is_2d(const lb_qspec *s) { return lb__block_rows(s) > 1; }

static int is_int(lb_format f) { return f == LB_FMT_INT8 || f == LB_FMT_UINT8 || f == LB_FMT_INT4 || f == LB_FMT_UINT4; }
static int int_bits(lb_format f) { return f == LB_FMT_INT8 || f == LB_FMT_UINT8 ? 8 : 4; }

/* The 16-bit (or fp32) output dtype as a scale format. */
static lb_format dtype_format(lb_dtype d) { return d == LB_DT_F16 ? LB_FMT_FP16 : d == LB_DT_F32 ? LB_FMT_FP32 : LB_FMT_BF16; }

static const char *st_float_name(lb_format f)
{
    return f == LB_FMT_FP16 ? "F16" : f == LB_FMT_FP32 ? "F32" : "BF16";
}

/* Which format an entry's weight spec is; CT_DENSE with *why set when
 * none holds it. */
static ct_format classify(const lb_qentry *e, const char **why)
{
    const lb_qspec *s = &e->spec;
    int acts = e->act.mode != LB_ACT_NONE;
    *why = NULL;
    if (is_2d(s)) { /* strategy "block": FP8_BLOCK's layout, the one vLLM runs */
        if (s->element == LB_FMT_FP8_E4M3 && !s->two_level &&
            (s->scale_format == LB_FMT_FP32 || s->scale_format == LB_FMT_BF16 || s->scale_format == LB_FMT_FP16))
            return acts ? CT_FLOAT : CT_NAIVE;
        *why = "2-D blocks (bRxC) are written as compressed-tensors' FP8 block strategy only: fp8_e4m3 elements "
               "with fp32/bf16/fp16 scales, e.g. fp8_e4m3:b128x128 (the FP8-BLOCK scheme)";
        return CT_DENSE;
    }
    if (s->element == LB_FMT_FP4_E2M1 && s->two_level && s->scale_format == LB_FMT_UE4M3 &&
        s->granularity == LB_GRAN_GROUP && s->group == 16)
        return CT_NVFP4;
    if (s->element == LB_FMT_FP4_E2M1 && !s->two_level && s->scale_format == LB_FMT_E8M0 &&
        s->granularity == LB_GRAN_GROUP && s->group == 32)
        return CT_MXFP4;
    if (s->element == LB_FMT_FP8_E4M3 && !s->two_level && s->scale_format == LB_FMT_E8M0 &&
        s->granularity == LB_GRAN_GROUP && s->group == 32)
        return CT_MXFP8;
    if (s->two_level || s->scale_format == LB_FMT_E8M0 || s->scale_format == LB_FMT_UE4M3) {
        *why = "its two-level or power-of-two scales are not those of NVFP4 (fp4_e2m1, g16, ue4m3 + fp32), "
               "MXFP4 (fp4_e2m1, g32, e8m0) or MXFP8 (fp8_e4m3, g32, e8m0): use nvfp4, mxfp4 or mxfp8_e4m3";
        return CT_DENSE;
    }
    if (s->element == LB_FMT_FP8_E4M3) return acts ? CT_FLOAT : CT_NAIVE;
    if (is_int(s->element)) {
        if (s->int_frac_bits) {
            *why = "MXINT8 has no compressed-tensors format: use int8:channel or mxfp8_e4m3";
            return CT_DENSE;
        }
        if ((s->element == LB_FMT_UINT8 || s->element == LB_FMT_UINT4) && !s->affine) {
            *why = "unsigned integers without a zero point have no compressed-tensors format: use int4/int8 "
                   "(symmetric) or add :affine";
            return CT_DENSE;
        }
        return acts ? CT_INT : CT_PACK;
    }
    *why = "compressed-tensors stores fp8_e4m3, fp4_e2m1 (NVFP4/MXFP4) and int4/int8 weights, not this element "
           "type: use fp8_e4m3:channel, int4:g128, nvfp4 or mxfp4";
    return CT_DENSE;
}

/* The one message every refusal has: tensor, format, what would work. */
static lb_status refuse(const lb_qentry *e, const char *what)
{
    char spec[96];
    lb_qspec_format(&e->spec, spec, sizeof spec);
    return lb__fail(LB_ERR_UNSUPPORTED, "tensor '%s' (%s): compressed-tensors cannot express it: %s",
                    e->tensor->name, spec, what);
}

static lb_status check_act(const lb_qentry *e)
{
    const lb_qact *a = &e->act;
    const lb_qspec *s = &a->spec;
    switch (a->mode) {
    case LB_ACT_NONE: return LB_OK;
    case LB_ACT_DYNAMIC:
        if (s->element != LB_FMT_FP8_E4M3 && s->element != LB_FMT_INT8 && s->element != LB_FMT_FP4_E2M1)
            return refuse(e, "dynamic activations are fp8_e4m3, int8 or fp4 (MXFP4) in compressed-tensors");
        if (s->granularity != LB_GRAN_TOKEN && s->granularity != LB_GRAN_GROUP && s->granularity != LB_GRAN_CHANNEL)
            return refuse(e, "dynamic activations are per token or per group");
        return LB_OK;
    case LB_ACT_STATIC:
        if (s->element != LB_FMT_FP8_E4M3 && s->element != LB_FMT_INT8)
            return refuse(e, "static activations are fp8_e4m3 or int8 per tensor");
        if (!(e->input_amax > 0))
            return refuse(e, "its static input scale needs calibration: give --calib TEXT");
        return LB_OK;
    case LB_ACT_LOCAL:
        if (s->element != LB_FMT_FP4_E2M1)
            return refuse(e, "locally scaled activations are NVFP4 (fp4_e2m1, g16) only");
        if (!(e->input_amax > 0))
            return refuse(e, "NVFP4 activations need a calibrated input global scale: give --calib TEXT");
        return LB_OK;
    }
    return refuse(e, "unknown activation mode");
}

static lb_status check_entry(const lb_qmodel *q, const lb_qentry *e)
{
    const lb_tensor *t = e->tensor;
    const char *why;
    if (!ends_with(t->name, ".weight") || t->n_dims != 2)
        return refuse(e, "only the 2-D weights of linear layers are quantized");
    if (!ends_with(t->name, "_proj.weight") && strcmp(t->name, "lm_head.weight") != 0)
        return refuse(e, "compressed-tensors quantizes linear layers (*_proj, lm_head), not embeddings: keep it "
                         "(--keep)");
    ct_format f = classify(e, &why);
    if (f == CT_DENSE) return refuse(e, why);
    const lb_qspec *s = &e->spec;
    uint64_t cols = t->shape[1];
    if (s->granularity == LB_GRAN_TOKEN) return refuse(e, "weights are per tensor, per channel or per group");
    if (s->granularity == LB_GRAN_GROUP && cols % s->group) {
        char msg[240];
        if (is_2d(s)) /* partial blocks of rows are fine: vLLM's block kernels need whole ones along the inputs */
            snprintf(msg, sizeof msg, "blocks %zu columns wide do not divide its %llu inputs (vLLM's block FP8 "
                                      "kernels need whole blocks along the inputs): use a width that divides %llu, "
                                      "e.g. FP8-BLOCK:g64 for 64x64", s->group, (unsigned long long)cols,
                     (unsigned long long)cols);
        else
            snprintf(msg, sizeof msg, "group %zu does not divide its %llu inputs (compressed-tensors and vLLM need "
                                      "whole groups): use a group size that divides %llu",
                     s->group, (unsigned long long)cols, (unsigned long long)cols);
        return refuse(e, msg);
    }
    if (f == CT_PACK && s->granularity == LB_GRAN_GROUP) {
        int ok = 0;
        for (size_t k = 0; k < sizeof marlin_groups / sizeof marlin_groups[0]; k++) ok |= s->group == marlin_groups[k];
        if (!ok) return refuse(e, "vLLM's kernels (Marlin) take integer weight-only groups of 32, 64 or 128, or "
                                  "per channel: use g32, g64, g128 or channel");
    }
    if (f == CT_INT && s->affine)
        return refuse(e, "int-quantized (integer weights with quantized activations) is written symmetric: drop "
                         ":affine");
    if (f == CT_PACK && s->affine && s->granularity == LB_GRAN_TENSOR)
        return refuse(e, "asymmetric pack-quantized weights have zero points per channel or group: use channel or gN");
    if (f == CT_FLOAT || f == CT_NAIVE || f == CT_INT || f == CT_PACK) {
        lb_format want = dtype_format(lb_qmodel_dtype(q));
        if (s->scale_format != want) {
            char msg[240];
            snprintf(msg, sizeof msg, "this format stores its scales in the model dtype (%s), the spec's are %s: "
                                      "add :scale=%s to the spec",
                     fmt_name(want), fmt_name(s->scale_format), fmt_name(want));
            return refuse(e, msg);
        }
    }
    return check_act(e);
}

static lb_status ct_check(const lb_qmodel *q)
{
    size_t n = lb_qmodel_count(q);
    for (size_t i = 0; i < n; i++) {
        lb_qentry e;
        lb_status st = lb_qmodel_entry(q, i, &e);
        if (st != LB_OK) return st;
        if (e.state != LB_QSTATE_QUANTIZED) continue;
        if ((st = check_entry(q, &e)) != LB_OK) return st;
    }
    lb_format kv = lb_qmodel_kv(q);
    if (kv != LB_FMT_FP32 && kv != LB_FMT_FP8_E4M3)
        return lb__fail(LB_ERR_UNSUPPORTED, "KV cache %s: compressed-tensors (and vLLM) take an fp8_e4m3 KV cache: "
                                            "use --kv fp8", fmt_name(kv));
    if (kv == LB_FMT_FP8_E4M3) {
        const lb_arch *a = lb_model_arch(lb_qmodel_model(q));
        for (uint32_t l = 0; l < a->n_layers; l++) {
            float k = 0, v = 0;
            if (lb_qmodel_kv_amax(q, l, &k, &v) != LB_OK || !(k > 0) || !(v > 0))
                return lb__fail(LB_ERR_UNSUPPORTED, "layer %u: the fp8 KV cache scales need calibration "
                                                    "(give --calib TEXT)", l);
        }
    }
    return LB_OK;
}

/* ----- tensors ----- */

typedef struct emitter {
    lb__emit_fn emit;
    void *sink;
    char name[256];
} emitter;

static lb_status put(emitter *o, const char *module, const char *suffix, const char *dtype, int n_dims,
                     uint64_t d0, uint64_t d1, const void *data, uint64_t bytes)
{
    if (snprintf(o->name, sizeof o->name, "%s%s", module, suffix) >= (int)sizeof o->name)
        return lb__fail(LB_ERR_UNSUPPORTED, "tensor name '%s%s' is too long", module, suffix);
    lb__out_tensor t = {.name = o->name, .dtype = dtype, .n_dims = n_dims, .shape = {d0, d1}, .data = data, .bytes = bytes};
    return o->emit(o->sink, &t);
}

/* The signed value of code c of an integer element (CT's q is signed;
 * an unsigned lowbit code with its zero point shifts both by 2^(b-1)). */
static int32_t signed_code(lb_format f, uint32_t c)
{
    switch (f) {
    case LB_FMT_INT8: return (int32_t)(int8_t)(uint8_t)c;
    case LB_FMT_UINT8: return (int32_t)c - 128;
    case LB_FMT_INT4: return c >= 8 ? (int32_t)c - 16 : (int32_t)c;
    case LB_FMT_UINT4: return (int32_t)c - 8;
    case LB_FMT_FP32: case LB_FMT_FP16: case LB_FMT_BF16: case LB_FMT_FP8_E4M3: case LB_FMT_FP8_E5M2:
    case LB_FMT_FP8_E4M3FNUZ: case LB_FMT_FP8_E5M2FNUZ: case LB_FMT_FP6_E2M3: case LB_FMT_FP6_E3M2:
    case LB_FMT_FP4_E2M1: case LB_FMT_E8M0: case LB_FMT_UE4M3: case LB_FMT_COUNT: break;
    }
    return 0;
}

/* Code j of a row of int4/int8 codes in lowbit's layout. */
static uint32_t code_at(const uint8_t *row, int bits, size_t j)
{
    return bits == 8 ? row[j] : (row[j / 2] >> (4 * (j & 1))) & 15u;
}

/* Packs n unsigned b-bit values (value i from get(i)) into the little-endian
 * bit stream of int32 words compressed-tensors uses: value i in bits
 * [i*b, i*b + b) counting from bit 0 of word 0. words: ceil(n*b/32). */
static void pack_bits(uint32_t *words, size_t n_words, const uint32_t *vals, size_t n, int bits)
{
    memset(words, 0, n_words * sizeof *words);
    for (size_t i = 0; i < n; i++) {
        uint64_t bit = (uint64_t)i * (uint64_t)bits;
        size_t w = (size_t)(bit / 32), s = (size_t)(bit % 32);
        words[w] |= vals[i] << s;
        if (s + (size_t)bits > 32) words[w + 1] |= vals[i] >> (32 - s);
    }
}

/* Little-endian int32 words in memory (the safetensors byte order). */
static void to_le32(uint32_t *w, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t v = w[i];
        uint8_t *b = (uint8_t *)&w[i];
        b[0] = (uint8_t)v, b[1] = (uint8_t)(v >> 8), b[2] = (uint8_t)(v >> 16), b[3] = (uint8_t)(v >> 24);
    }
}

/* One row of 4- or 8-bit codes in compressed-tensors' packing, bytes at a
 * time: the fast twin of the code_at/signed_code/pack_bits loop (which
 * stays the path for other widths). Its stream puts value i at bits
 * [i*b, i*b + b) of little-endian words, so its bytes hold the values in
 * lowbit's order, low nibble first, exactly as lowbit's rows do; only the
 * code changes: CT stores q + 2^(b-1), which for a signed (two's
 * complement) code is flipping its top bit, and for an unsigned one (the
 * affine codes, stored with the zero point) is the code itself. An odd
 * int4 row's pad nibble, and the rest of the last word, stay zero. */
static void pack_row(const uint8_t *row, size_t cols, int bits, int is_signed, uint8_t *dst, size_t dst_bytes)
{
    uint8_t flip = is_signed ? (bits == 4 ? 0x88 : 0x80) : 0;
    size_t whole = bits == 4 ? cols / 2 : cols, k = 0;
    for (; k < whole; k++) dst[k] = row[k] ^ flip;
    if (bits == 4 && cols % 2) dst[k] = (uint8_t)((row[k] ^ flip) & 0x0F), k++;
    memset(dst + k, 0, dst_bytes - k);
}

/* weight_scale of the float/int/pack formats: lowbit's scale codes are
 * already the model dtype's bytes (check() made sure). */
static lb_status put_scale(emitter *o, const char *m, const lb_qtensor_view *v)
{
    const char *dt = st_float_name(v->spec.scale_format);
    if (v->spec.granularity == LB_GRAN_TENSOR) return put(o, m, ".weight_scale", dt, 1, 1, 0, v->scales, v->scale_bytes);
    /* [rows, groups]; 2-D blocks: [ceil(rows / R), ceil(cols / C)] */
    return put(o, m, ".weight_scale", dt, 2, v->scale_rows, v->scales_per_row, v->scales, v->scale_bytes);
}

static lb_status put_packed(emitter *o, const char *m, const lb_qtensor_view *v)
{
    int bits = int_bits(v->spec.element);
    uint32_t bias = 1u << (bits - 1);
    size_t rows = v->rows, cols = v->cols, wpr = (cols * (size_t)bits + 31) / 32;
    int describe = !v->data; /* sizes only (exporter.h): nothing to pack */
    /* vals: one zero-point column (affine only) */
    uint32_t *vals = describe || !v->spec.affine ? NULL : malloc(rows * sizeof *vals);
    uint32_t *words = describe ? NULL : malloc(rows * wpr * sizeof *words + sizeof *words);
    lb_status st = LB_OK;
    if (!describe && (!words || (v->spec.affine && !vals))) st = lb__fail(LB_ERR_NOMEM, "out of memory packing '%s'", m);
    for (size_t r = 0; r < rows && st == LB_OK && !describe; r++) /* int4/int8 (int_bits): a byte at a time */
        pack_row(v->data + r * v->row_bytes, cols, bits, v->spec.element == LB_FMT_INT4 || v->spec.element == LB_FMT_INT8,
                 (uint8_t *)(words + r * wpr), wpr * 4);
    if (st == LB_OK) {
        st = put(o, m, ".weight_packed", "I32", 2, rows, wpr, words, (uint64_t)rows * wpr * 4);
    }
    if (st == LB_OK) {
        int64_t shape[2] = {(int64_t)rows, (int64_t)cols};
        uint8_t le[16];
        for (int k = 0; k < 16; k++) le[k] = (uint8_t)((uint64_t)shape[k / 8] >> (8 * (k % 8)));
        st = put(o, m, ".weight_shape", "I64", 1, 2, 0, le, sizeof le);
    }
    if (st == LB_OK) st = put_scale(o, m, v);
    if (st == LB_OK && v->spec.affine) {
        /* zero points [rows, groups] packed along dim 0: column g's words
         * hold rows 0.. of that column as one bit stream */
        size_t groups = v->scales_per_row, zw = (rows * (size_t)bits + 31) / 32;
        uint32_t *zwords = describe ? NULL : malloc(zw * groups * sizeof *zwords + sizeof *zwords);
        uint32_t *col = describe ? NULL : malloc(zw * sizeof *col + 4);
        if (!describe && (!zwords || !col)) st = lb__fail(LB_ERR_NOMEM, "out of memory packing '%s'", m);
        for (size_t g = 0; g < groups && st == LB_OK && !describe; g++) {
            for (size_t r = 0; r < rows; r++) {
                const uint8_t *zrow = v->zero_points + r * v->zero_point_row_bytes;
                vals[r] = (uint32_t)(signed_code(v->spec.element, code_at(zrow, bits, g)) + (int32_t)bias) &
                          ((1u << bits) - 1);
            }
            pack_bits(col, zw, vals, rows, bits);
            for (size_t w = 0; w < zw; w++) zwords[w * groups + g] = col[w];
        }
        if (st == LB_OK) {
            if (!describe) to_le32(zwords, zw * groups);
            st = put(o, m, ".weight_zero_point", "I32", 2, zw, groups, zwords, (uint64_t)zw * groups * 4);
        }
        free(zwords), free(col);
    }
    free(vals), free(words);
    return st;
}

/* int-quantized: one signed int8 per element (int4 widened). */
static lb_status put_int(emitter *o, const char *m, const lb_qtensor_view *v)
{
    int bits = int_bits(v->spec.element);
    size_t n = v->rows * v->cols;
    if (v->spec.element == LB_FMT_INT8 && v->row_bytes == v->cols) { /* lowbit's int8 rows are CT's tensor */
        lb_status st = put(o, m, ".weight", "I8", 2, v->rows, v->cols, v->data, n);
        return st == LB_OK ? put_scale(o, m, v) : st;
    }
    int8_t *w = v->data ? malloc(n ? n : 1) : NULL; /* no data: describing (exporter.h) */
    if (v->data && !w) return lb__fail(LB_ERR_NOMEM, "out of memory writing '%s'", m);
    for (size_t r = 0; r < v->rows && w; r++)
        for (size_t j = 0; j < v->cols; j++)
            w[r * v->cols + j] = (int8_t)signed_code(v->spec.element, code_at(v->data + r * v->row_bytes, bits, j));
    lb_status st = put(o, m, ".weight", "I8", 2, v->rows, v->cols, w, n);
    free(w);
    return st == LB_OK ? put_scale(o, m, v) : st;
}

/* lowbit's packed rows are whole bytes: FP8 rows are the F8_E4M3 tensor,
 * FP4 rows (two per byte, even element low) the U8 one. */
static lb_status put_rows(emitter *o, const char *m, const char *suffix, const char *dtype, const lb_qtensor_view *v)
{
    return put(o, m, suffix, dtype, 2, v->rows, v->row_bytes, v->data, v->data_bytes);
}

static lb_status input_scales(emitter *o, const char *m, const lb_qentry *e, lb_dtype out)
{
    if (e->act.mode == LB_ACT_STATIC) {
        /* x_hat = q * input_scale with q at most the element's max, in the
         * model dtype: the value the runner evaluated (engine_scales.h) */
        uint8_t b[4];
        lb_dtype d = out == LB_DT_F16 || out == LB_DT_F32 ? out : LB_DT_BF16;
        float s = lb__static_input_scale(e->act.spec.element, e->input_amax, d);
        lb_status st = lb_dtype_from_f32(d, &s, 1, b);
        if (st != LB_OK) return st;
        return put(o, m, ".input_scale", st_float_name(dtype_format(d)), 1, 1, 0, b, d == LB_DT_F32 ? 4 : 2);
    }
    if (e->act.mode == LB_ACT_LOCAL) { /* a divisor, as the weight's global scale: 1 / the runner's tensor scale */
        float g = lb__ct_global_divisor(lb__nvfp4_tensor_scale(e->input_amax));
        return put(o, m, ".input_global_scale", "F32", 1, 1, 0, &g, 4);
    }
    return LB_OK;
}

static lb_status ct_tensor(const lb_qmodel *q, size_t i, const float *values, const lb_qtensor_view *qv,
                           lb__emit_fn emit, void *sink)
{
    lb_qentry e;
    lb_status st = lb_qmodel_entry(q, i, &e);
    if (st != LB_OK) return st;
    emitter o = {.emit = emit, .sink = sink};
    const lb_tensor *t = e.tensor;
    if (e.state != LB_QSTATE_QUANTIZED) {
        /* as stored when the file holds a float type; KEPT and REPLACED
         * tensors in the output dtype; anything else (a GGUF block type
         * left STORED) as fp32, which holds its values exactly */
        lb_dtype d = e.state == LB_QSTATE_STORED
                         ? (t->dtype == LB_DT_F16 || t->dtype == LB_DT_BF16 || t->dtype == LB_DT_F32 ? t->dtype : LB_DT_F32)
                         : lb_qmodel_dtype(q);
        if (t->dtype >= LB_DT_I8 && t->dtype <= LB_DT_BOOL)
            return lb__fail(LB_ERR_UNSUPPORTED, "tensor '%s': integer tensors are not written", t->name);
        size_t n = (size_t)t->n_elements, es = d == LB_DT_F32 ? 4 : 2;
        void *b = values ? malloc(n * es + 1) : NULL; /* no values: describing (exporter.h) */
        if (values && !b) return lb__fail(LB_ERR_NOMEM, "out of memory writing '%s'", t->name);
        if (values) st = lb_dtype_from_f32(d, values, n, b);
        if (st == LB_OK) {
            lb__out_tensor ot = {.name = t->name, .dtype = lb_dtype_get(d)->st_name, .n_dims = t->n_dims,
                                 .data = b, .bytes = n * es};
            if (t->n_dims > 4) st = lb__fail(LB_ERR_UNSUPPORTED, "tensor '%s' has %d dims", t->name, t->n_dims);
            for (int k = 0; k < t->n_dims && k < 4; k++) ot.shape[k] = t->shape[k];
            if (st == LB_OK) st = emit(sink, &ot);
        }
        free(b);
        return st;
    }
    if ((st = check_entry(q, &e)) != LB_OK) return st;
    char m[200];
    size_t len = strlen(t->name) - strlen(".weight");
    if (len >= sizeof m) return lb__fail(LB_ERR_UNSUPPORTED, "tensor name '%s' is too long", t->name);
    memcpy(m, t->name, len), m[len] = '\0';
    const char *why;
    switch (classify(&e, &why)) {
    case CT_FLOAT:
    case CT_NAIVE:
        st = put_rows(&o, m, ".weight", "F8_E4M3", qv);
        if (st == LB_OK) st = put_scale(&o, m, qv);
        break;
    case CT_INT: st = put_int(&o, m, qv); break;
    case CT_PACK: st = put_packed(&o, m, qv); break;
    case CT_NVFP4: {
        st = put_rows(&o, m, ".weight_packed", "U8", qv);
        if (st == LB_OK) st = put(&o, m, ".weight_scale", "F8_E4M3", 2, qv->rows, qv->scales_per_row, qv->scales, qv->scale_bytes);
        /* compressed-tensors divides by its global scale; lowbit multiplies */
        float g = lb__ct_global_divisor(qv->tensor_scale);
        if (st == LB_OK) st = put(&o, m, ".weight_global_scale", "F32", 1, 1, 0, &g, 4);
        break;
    }
    case CT_MXFP4:
    case CT_MXFP8:
        st = put_rows(&o, m, e.spec.element == LB_FMT_FP8_E4M3 ? ".weight" : ".weight_packed",
                      e.spec.element == LB_FMT_FP8_E4M3 ? "F8_E4M3" : "U8", qv);
        if (st == LB_OK) st = put(&o, m, ".weight_scale", "U8", 2, qv->rows, qv->scales_per_row, qv->scales, qv->scale_bytes);
        break;
    case CT_DENSE:
    case CT_FORMAT_COUNT: return refuse(&e, why ? why : "no format");
    }
    if (st == LB_OK) st = input_scales(&o, m, &e, lb_qmodel_dtype(q));
    return st;
}

static lb_status ct_extras(const lb_qmodel *q, lb__emit_fn emit, void *sink)
{
    if (lb_qmodel_kv(q) != LB_FMT_FP8_E4M3) return LB_OK;
    const lb_arch *a = lb_model_arch(lb_qmodel_model(q));
    emitter o = {.emit = emit, .sink = sink};
    for (uint32_t l = 0; l < a->n_layers; l++) {
        float k, v;
        lb_status st = lb_qmodel_kv_amax(q, l, &k, &v);
        if (st != LB_OK) return st;
        /* vLLM's semantics: x_hat = fp8 * scale, scale = amax / 448, fp32 */
        float ks = lb__kv_scale(k), vs = lb__kv_scale(v);
        char m[64];
        snprintf(m, sizeof m, "model.layers.%u.self_attn", l);
        if ((st = put(&o, m, ".k_scale", "F32", 1, 1, 0, &ks, 4)) != LB_OK) return st;
        if ((st = put(&o, m, ".v_scale", "F32", 1, 1, 0, &vs, 4)) != LB_OK) return st;
    }
    return LB_OK;
}

/* ----- quantization_config ----- */

/* One QuantizationArgs, with only the keys its pydantic model allows. */
static void args_json(lb__jsonw *w, int bits, int is_float, int symmetric, const char *strategy, long long group,
                      const char *dynamic, const char *scale_dtype, const lb_qspec *block)
{
    lb__jsonw_object(w);
    lb__jsonw_key(w, "num_bits"), lb__jsonw_int(w, bits);
    lb__jsonw_key(w, "type"), lb__jsonw_str(w, is_float ? "float" : "int");
    lb__jsonw_key(w, "symmetric"), lb__jsonw_bool(w, symmetric);
    lb__jsonw_key(w, "group_size");
    if (group && !block) lb__jsonw_int(w, group);
    else lb__jsonw_null(w);
    lb__jsonw_key(w, "strategy"), lb__jsonw_str(w, block ? "block" : strategy);
    lb__jsonw_key(w, "block_structure");
    if (block) { /* [rows, cols] of one block */
        lb__jsonw_array(w);
        lb__jsonw_int(w, (long long)block->group_rows), lb__jsonw_int(w, (long long)block->group);
        lb__jsonw_end(w);
    } else {
        lb__jsonw_null(w);
    }
    lb__jsonw_key(w, "dynamic");
    if (strcmp(dynamic, "local") == 0) lb__jsonw_str(w, "local");
    else lb__jsonw_bool(w, strcmp(dynamic, "true") == 0);
    lb__jsonw_key(w, "actorder"), lb__jsonw_null(w);
    lb__jsonw_key(w, "scale_dtype");
    if (scale_dtype) lb__jsonw_str(w, scale_dtype);
    else lb__jsonw_null(w);
    lb__jsonw_key(w, "zp_dtype"), lb__jsonw_null(w);
    lb__jsonw_key(w, "observer"), lb__jsonw_null(w);
    lb__jsonw_key(w, "observer_kwargs"), lb__jsonw_object(w), lb__jsonw_end(w);
    lb__jsonw_end(w);
}

static const char *gran_strategy(const lb_qspec *s)
{
    switch (s->granularity) {
    case LB_GRAN_TENSOR: return "tensor";
    case LB_GRAN_CHANNEL: return "channel";
    case LB_GRAN_TOKEN: return "token";
    case LB_GRAN_GROUP: return "group";
    }
    return "tensor";
}

static void weights_json(lb__jsonw *w, const lb_qentry *e, ct_format f)
{
    const lb_qspec *s = &e->spec;
    long long g = s->granularity == LB_GRAN_GROUP ? (long long)s->group : 0;
    switch (f) {
    case CT_NVFP4: args_json(w, 4, 1, 1, "tensor_group", 16, "false", "torch.float8_e4m3fn", NULL); break;
    case CT_MXFP4: args_json(w, 4, 1, 1, "group", 32, "false", "torch.uint8", NULL); break;
    case CT_MXFP8: args_json(w, 8, 1, 1, "group", 32, "false", "torch.uint8", NULL); break;
    case CT_FLOAT:
    case CT_NAIVE: args_json(w, 8, 1, 1, gran_strategy(s), g, "false", NULL, is_2d(s) ? s : NULL); break;
    case CT_INT:
    case CT_PACK: args_json(w, int_bits(s->element), 0, !s->affine, gran_strategy(s), g, "false", NULL, NULL); break;
    case CT_DENSE:
    case CT_FORMAT_COUNT: lb__jsonw_null(w); break;
    }
}

static void acts_json(lb__jsonw *w, const lb_qentry *e)
{
    const lb_qspec *s = &e->act.spec;
    int is_float = s->element != LB_FMT_INT8, bits = s->element == LB_FMT_FP4_E2M1 ? 4 : 8;
    long long g = s->granularity == LB_GRAN_GROUP ? (long long)s->group : 0;
    const char *scale = s->scale_format == LB_FMT_E8M0 ? "torch.uint8" : NULL;
    switch (e->act.mode) {
    case LB_ACT_NONE: lb__jsonw_null(w); break;
    case LB_ACT_DYNAMIC:
        args_json(w, bits, is_float, 1, s->granularity == LB_GRAN_GROUP ? "group" : "token", g, "true", scale, NULL);
        break;
    case LB_ACT_STATIC: args_json(w, bits, is_float, 1, "tensor", 0, "false", NULL, NULL); break;
    case LB_ACT_LOCAL: args_json(w, 4, 1, 1, "tensor_group", 16, "local", "torch.float8_e4m3fn", NULL); break;
    }
}

/* Two entries belong to one config group when everything the group says
 * is the same. */
static int same_group(const lb_qentry *a, const lb_qentry *b)
{
    const lb_qspec *x = &a->spec, *y = &b->spec, *ax = &a->act.spec, *ay = &b->act.spec;
    int acts = a->act.mode == b->act.mode &&
               (a->act.mode == LB_ACT_NONE ||
                (ax->element == ay->element && ax->granularity == ay->granularity &&
                 (ax->granularity != LB_GRAN_GROUP || ax->group == ay->group) && ax->scale_format == ay->scale_format));
    return acts && x->element == y->element && x->granularity == y->granularity &&
           (x->granularity != LB_GRAN_GROUP || (x->group == y->group && lb__block_rows(x) == lb__block_rows(y))) &&
           x->scale_format == y->scale_format &&
           x->affine == y->affine && x->two_level == y->two_level;
}

static void module_name(const char *weight, char *buf, size_t size)
{
    size_t len = strlen(weight) - (ends_with(weight, ".weight") ? strlen(".weight") : 0);
    snprintf(buf, size, "%.*s", (int)len, weight);
}

static lb_status ct_quant_config(const lb_qmodel *q, lb__jsonw *w)
{
    size_t n = lb_qmodel_count(q);
    /* group[i]: the config group of quantized entry i (its first member's index), else SIZE_MAX */
    size_t *group = malloc((n ? n : 1) * sizeof *group);
    if (!group) return lb__fail(LB_ERR_NOMEM, "out of memory");
    size_t n_groups = 0, first_fmt_set = 0;
    ct_format fmt = CT_DENSE;
    int mixed = 0, has_lm_head = 0, lm_head_quantized = 0;
    lb_status st = LB_OK;
    for (size_t i = 0; i < n && st == LB_OK; i++) {
        lb_qentry e;
        group[i] = SIZE_MAX;
        if ((st = lb_qmodel_entry(q, i, &e)) != LB_OK) break;
        if (strcmp(e.tensor->name, "lm_head.weight") == 0) has_lm_head = 1, lm_head_quantized = e.state == LB_QSTATE_QUANTIZED;
        if (e.state != LB_QSTATE_QUANTIZED) continue;
        const char *why;
        ct_format f = classify(&e, &why);
        if (!first_fmt_set) fmt = f, first_fmt_set = 1;
        else if (f != fmt) mixed = 1;
        for (size_t j = 0; j < i && group[i] == SIZE_MAX; j++) {
            if (group[j] != j) continue;
            lb_qentry g;
            if ((st = lb_qmodel_entry(q, j, &g)) != LB_OK) break;
            if (same_group(&e, &g) && classify(&g, &why) == f) group[i] = j;
        }
        if (group[i] == SIZE_MAX) group[i] = i, n_groups++;
    }
    (void)has_lm_head;
    char name[200];
    if (st == LB_OK) {
        lb__jsonw_object(w);
        lb__jsonw_key(w, "quant_method"), lb__jsonw_str(w, "compressed-tensors");
        lb__jsonw_key(w, "format"), lb__jsonw_str(w, mixed ? "mixed-precision" : ct_format_names[fmt]);
        lb__jsonw_key(w, "quantization_status"), lb__jsonw_str(w, "compressed");
        lb__jsonw_key(w, "global_compression_ratio"), lb__jsonw_null(w);
        /* the linear layers left 16-bit: kept *_proj layers and the head
         * (a Linear module in transformers even when tied) */
        lb__jsonw_key(w, "ignore"), lb__jsonw_array(w);
        for (size_t i = 0; i < n && st == LB_OK; i++) {
            lb_qentry e;
            if ((st = lb_qmodel_entry(q, i, &e)) != LB_OK) break;
            if (e.state == LB_QSTATE_QUANTIZED || !ends_with(e.tensor->name, "_proj.weight")) continue;
            module_name(e.tensor->name, name, sizeof name);
            lb__jsonw_str(w, name);
        }
        if (!lm_head_quantized) lb__jsonw_str(w, "lm_head");
        lb__jsonw_end(w);
        lb__jsonw_key(w, "kv_cache_scheme");
        if (lb_qmodel_kv(q) == LB_FMT_FP8_E4M3) {
            lb__jsonw_object(w);
            lb__jsonw_key(w, "num_bits"), lb__jsonw_int(w, 8);
            lb__jsonw_key(w, "type"), lb__jsonw_str(w, "float");
            lb__jsonw_key(w, "symmetric"), lb__jsonw_bool(w, 1);
            lb__jsonw_key(w, "group_size"), lb__jsonw_null(w);
            lb__jsonw_key(w, "strategy"), lb__jsonw_str(w, "tensor");
            lb__jsonw_key(w, "dynamic"), lb__jsonw_bool(w, 0);
            lb__jsonw_end(w);
        } else lb__jsonw_null(w);
        lb__jsonw_key(w, "config_groups"), lb__jsonw_object(w);
        size_t k = 0;
        for (size_t i = 0; i < n && st == LB_OK; i++) {
            if (group[i] != i) continue;
            lb_qentry e;
            if ((st = lb_qmodel_entry(q, i, &e)) != LB_OK) break;
            const char *why;
            ct_format f = classify(&e, &why);
            char gname[32];
            snprintf(gname, sizeof gname, "group_%zu", k++);
            lb__jsonw_key(w, gname), lb__jsonw_object(w);
            /* one group: every Linear not ignored; several: each by name */
            lb__jsonw_key(w, "targets"), lb__jsonw_array(w);
            if (n_groups == 1) lb__jsonw_str(w, "Linear");
            else
                for (size_t j = i; j < n; j++) {
                    if (group[j] != i) continue;
                    lb_qentry m;
                    if ((st = lb_qmodel_entry(q, j, &m)) != LB_OK) break;
                    module_name(m.tensor->name, name, sizeof name);
                    lb__jsonw_str(w, name);
                }
            lb__jsonw_end(w);
            lb__jsonw_key(w, "weights"), weights_json(w, &e, f);
            lb__jsonw_key(w, "input_activations"), acts_json(w, &e);
            lb__jsonw_key(w, "output_activations"), lb__jsonw_null(w);
            lb__jsonw_key(w, "format"), lb__jsonw_str(w, ct_format_names[f]);
            lb__jsonw_end(w);
        }
        lb__jsonw_end(w);
        lb__jsonw_key(w, "sparsity_config"), lb__jsonw_object(w), lb__jsonw_end(w);
        lb__jsonw_key(w, "transform_config"), lb__jsonw_object(w), lb__jsonw_end(w);
        lb__jsonw_key(w, "version"), lb__jsonw_str(w, CT_VERSION);
        lb__jsonw_end(w);
    }
    free(group);
    return st == LB_OK ? lb__jsonw_status(w) : st;
}

const lb__exporter lb__exporter_compressed_tensors = {
    .name = "compressed-tensors",
    .check = ct_check,
    .tensor = ct_tensor,
    .extras = ct_extras,
    .quant_config = ct_quant_config,
    .extra_file = NULL,
};
