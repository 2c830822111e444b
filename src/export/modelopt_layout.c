/* ModelOpt unified checkpoint: the quant_algo of a layer, the tensors of
 * one quantized layer, and the exclude_modules summary (modelopt.h says
 * what each algorithm stores and where that comes from). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export/modelopt.h"
#include "util/error.h"
#include "weights/engine_scales.h"

#define MO_NVFP4_GROUP 16
#define MO_MX_GROUP 32
/* Module names longer than this are not Hugging Face names. */
#define MO_MAX_NAME 512

const char *lb__mo_algo_name(lb__mo_algo a)
{
    switch (a) {
    case LB_MO_FP8: return "FP8";
    case LB_MO_FP8_PC_PT: return "FP8_PER_CHANNEL_PER_TOKEN";
    case LB_MO_NVFP4: return "NVFP4";
    case LB_MO_W4A16_NVFP4: return "W4A16_NVFP4";
    case LB_MO_MXFP8: return "MXFP8";
    case LB_MO_ALGO_COUNT: break;
    }
    return "?";
}

int lb__mo_algo_group(lb__mo_algo a)
{
    switch (a) {
    case LB_MO_NVFP4:
    case LB_MO_W4A16_NVFP4: return MO_NVFP4_GROUP;
    case LB_MO_MXFP8: return MO_MX_GROUP;
    case LB_MO_FP8:
    case LB_MO_FP8_PC_PT:
    case LB_MO_ALGO_COUNT: break;
    }
    return 0;
}

int lb__mo_algo_input_scale(lb__mo_algo a) { return a == LB_MO_FP8 || a == LB_MO_NVFP4; }

/* What the message after a refusal offers: every spec ModelOpt takes. */
#define MO_WHAT_WORKS                                                                                              \
    "ModelOpt writes FP8 (fp8_e4m3:tensor weights, static fp8_e4m3:tensor inputs: W8A8-FP8-STATIC), "            \
    "FP8_PER_CHANNEL_PER_TOKEN (fp8_e4m3:channel, dynamic fp8_e4m3:token inputs: W8A8-FP8), NVFP4 (nvfp4, "        \
    "local nvfp4 inputs: NVFP4), W4A16_NVFP4 (nvfp4, 16-bit inputs: NVFP4A16) and MXFP8 (mxfp8_e4m3, dynamic "   \
    "mxfp8_e4m3 inputs: MXFP8); --format compressed-tensors writes the integer, MXFP4 and FP8-BLOCK schemes"

static const char *act_mode_name(lb_act_mode m)
{
    switch (m) {
    case LB_ACT_NONE: return "16-bit";
    case LB_ACT_DYNAMIC: return "dynamic";
    case LB_ACT_STATIC: return "static";
    case LB_ACT_LOCAL: return "local";
    }
    return "?";
}

static lb_status refuse(const char *name, const lb_qspec *w, const lb_qact *act, const char *why)
{
    char ws[96], as[96] = "";
    lb_qspec_format(w, ws, sizeof ws);
    if (act->mode != LB_ACT_NONE) lb_qspec_format(&act->spec, as, sizeof as);
    return lb__fail(LB_ERR_UNSUPPORTED, "tensor '%s': weights %s with %s%s%s inputs cannot be written in the modelopt "
                    "format: %s. %s",
                    name, ws, act_mode_name(act->mode), as[0] ? " " : "", as, why, MO_WHAT_WORKS);
}

static int is_fp_scale(lb_format f) { return f == LB_FMT_FP32 || f == LB_FMT_FP16 || f == LB_FMT_BF16; }

/* nvfp4 as lb_qspec_parse makes it: E2M1 in blocks of 16, UE4M3 scales under an fp32 tensor scale. */
static int is_nvfp4(const lb_qspec *s)
{
    return s->element == LB_FMT_FP4_E2M1 && s->granularity == LB_GRAN_GROUP && s->group == MO_NVFP4_GROUP &&
           s->scale_format == LB_FMT_UE4M3 && s->two_level && !s->affine && s->group_rows <= 1;
}

static int is_mxfp8(const lb_qspec *s)
{
    return s->element == LB_FMT_FP8_E4M3 && s->granularity == LB_GRAN_GROUP && s->group == MO_MX_GROUP &&
           s->scale_format == LB_FMT_E8M0 && !s->two_level && !s->affine && s->int_frac_bits == 0 &&
           s->group_rows <= 1;
}

lb_status lb__mo_classify(const char *name, const lb_qspec *w, const lb_qact *act, uint64_t rows, uint64_t cols,
                          lb__mo_algo *out)
{
    if (!name || !w || !act || !out) return lb__fail(LB_ERR_ARG, "lb__mo_classify: NULL argument");
    (void)rows;
    int fp8_plain = w->element == LB_FMT_FP8_E4M3 && is_fp_scale(w->scale_format) && !w->affine && !w->two_level;
    if (fp8_plain && w->granularity == LB_GRAN_TENSOR) {
        if (act->mode == LB_ACT_STATIC && act->spec.element == LB_FMT_FP8_E4M3 &&
            act->spec.granularity == LB_GRAN_TENSOR)
            return *out = LB_MO_FP8, LB_OK;
        return refuse(name, w, act, "per-tensor FP8 weights are ModelOpt's FP8, whose inputs are static per-tensor "
                      "FP8 (calibrated input_scale)");
    }
    if (fp8_plain && w->granularity == LB_GRAN_CHANNEL) {
        if (act->mode == LB_ACT_DYNAMIC && act->spec.element == LB_FMT_FP8_E4M3 &&
            act->spec.granularity == LB_GRAN_TOKEN)
            return *out = LB_MO_FP8_PC_PT, LB_OK;
        return refuse(name, w, act, "per-channel FP8 weights are ModelOpt's FP8_PER_CHANNEL_PER_TOKEN, whose inputs "
                      "are dynamic per-token FP8");
    }
    if (fp8_plain && w->granularity == LB_GRAN_GROUP && w->group_rows > 1)
        return refuse(name, w, act, "2-D FP8 blocks (FP8-BLOCK) have no ModelOpt checkpoint lowbit writes: ModelOpt "
                      "0.47's block FP8 (FP8_PB_WO) is a weight-only export with 16-bit inputs, not FP8-BLOCK's "
                      "dynamic per-group FP8 inputs; write FP8-BLOCK with --format compressed-tensors (strategy "
                      "\"block\", which vLLM and SGLang load)");
    if (is_nvfp4(w)) {
        if (cols % MO_NVFP4_GROUP != 0) {
            char why[160];
            snprintf(why, sizeof why, "its %llu columns are not a multiple of 16 (ModelOpt's NVFP4 has no partial "
                     "blocks)", (unsigned long long)cols);
            return refuse(name, w, act, why);
        }
        if (act->mode == LB_ACT_NONE) return *out = LB_MO_W4A16_NVFP4, LB_OK;
        if (act->mode == LB_ACT_LOCAL && is_nvfp4(&act->spec)) return *out = LB_MO_NVFP4, LB_OK;
        return refuse(name, w, act, "NVFP4 weights take 16-bit inputs (W4A16_NVFP4) or NVFP4 inputs with a "
                      "calibrated global scale (NVFP4)");
    }
    if (is_mxfp8(w)) {
        if (cols % MO_MX_GROUP != 0) {
            char why[160];
            snprintf(why, sizeof why, "its %llu columns are not a multiple of 32 (ModelOpt's MXFP8 has no partial "
                     "blocks)", (unsigned long long)cols);
            return refuse(name, w, act, why);
        }
        if (act->mode == LB_ACT_DYNAMIC && is_mxfp8(&act->spec)) return *out = LB_MO_MXFP8, LB_OK;
        return refuse(name, w, act, "ModelOpt's MXFP8 quantizes the inputs to dynamic MXFP8 too (there is no "
                      "weight-only MXFP8)");
    }
    return refuse(name, w, act, "ModelOpt has no format for these weights");
}

/* ----- the tensors of one layer ----- */

static lb_status emit2(lb__emit_fn emit, void *sink, const char *module, const char *suffix, const char *dtype,
                       int n_dims, uint64_t d0, uint64_t d1, const void *data, uint64_t bytes)
{
    char name[MO_MAX_NAME + 32];
    if (strlen(module) > MO_MAX_NAME) return lb__fail(LB_ERR_ARG, "module name '%.64s...' is too long", module);
    snprintf(name, sizeof name, "%s.%s", module, suffix);
    lb__out_tensor t = {.name = name, .dtype = dtype, .n_dims = n_dims, .shape = {d0, d1}, .data = data, .bytes = bytes};
    return emit(sink, &t);
}

static lb_status emit_scalar(lb__emit_fn emit, void *sink, const char *module, const char *suffix, float v)
{
    return emit2(emit, sink, module, suffix, "F32", 0, 0, 0, &v, sizeof v);
}

/* fp32/fp16/bf16 scale codes as fp32 values (exact: each widens). */
static lb_status scales_f32(const lb_qtensor_view *qv, float **out)
{
    *out = NULL;
    if (!qv->scales) return LB_OK; /* describing (exporter.h): no values */
    *out = malloc(qv->scale_count * sizeof(float));
    if (!*out) return lb__fail(LB_ERR_NOMEM, "out of memory for %zu scales", qv->scale_count);
    lb_status st = lb_decode_f32(qv->spec.scale_format, qv->scales, qv->scale_count, *out, 1);
    if (st != LB_OK) free(*out), *out = NULL;
    return st;
}

lb_status lb__mo_emit_weight(const char *module, lb__mo_algo a, const lb_qtensor_view *qv, float input_amax,
                             lb__emit_fn emit, void *sink)
{
    if (!module || !qv || !emit) return lb__fail(LB_ERR_ARG, "lb__mo_emit_weight: NULL argument");
    uint64_t rows = qv->rows, cols = qv->cols;
    if (lb__mo_algo_input_scale(a) && !(input_amax > 0 && isfinite(input_amax)))
        return lb__fail(LB_ERR_ARG, "module '%s': %s needs a calibrated input range (input amax %g): calibrate "
                        "with --calib", module, lb__mo_algo_name(a), (double)input_amax);
    lb_status st = LB_OK;
    float *s = NULL;
    switch (a) {
    case LB_MO_FP8:
    case LB_MO_FP8_PC_PT: {
        size_t want_scales = a == LB_MO_FP8 ? 1 : (size_t)rows;
        if (qv->row_bytes != cols || qv->scale_count != want_scales)
            return lb__fail(LB_ERR_ARG, "module '%s': not an %s tensor (%zu bytes a row, %zu scales)", module,
                            lb__mo_algo_name(a), qv->row_bytes, qv->scale_count);
        st = emit2(emit, sink, module, "weight", "F8_E4M3", 2, rows, cols, qv->data, qv->data_bytes);
        if (st == LB_OK) st = scales_f32(qv, &s);
        if (st == LB_OK)
            st = a == LB_MO_FP8 ? emit_scalar(emit, sink, module, "weight_scale", s ? s[0] : 0)
                                : emit2(emit, sink, module, "weight_scale", "F32", 1, rows, 0, s, rows * sizeof(float));
        free(s);
        /* ModelOpt's FP8 input scale: amax / maxbound, in fp32 */
        if (st == LB_OK && a == LB_MO_FP8)
            st = emit_scalar(emit, sink, module, "input_scale",
                             lb__static_input_scale(LB_FMT_FP8_E4M3, input_amax, LB_DT_F32));
        return st;
    }
    case LB_MO_NVFP4:
    case LB_MO_W4A16_NVFP4:
        if (cols % MO_NVFP4_GROUP || qv->row_bytes != cols / 2 || qv->scales_per_row != cols / MO_NVFP4_GROUP)
            return lb__fail(LB_ERR_ARG, "module '%s': not an NVFP4 tensor (%llu columns, %zu bytes a row)", module,
                            (unsigned long long)cols, qv->row_bytes);
        /* lowbit packs element 2i in the low nibble, as ModelOpt does; UE4M3
         * codes are E4M3 codes with the sign bit clear */
        st = emit2(emit, sink, module, "weight", "U8", 2, rows, cols / 2, qv->data, qv->data_bytes);
        if (st == LB_OK)
            st = emit2(emit, sink, module, "weight_scale", "F8_E4M3", 2, rows, cols / MO_NVFP4_GROUP, qv->scales,
                       qv->scale_bytes);
        if (st == LB_OK) st = emit_scalar(emit, sink, module, "weight_scale_2", qv->tensor_scale);
        /* NVFP4QTensor.get_activation_scaling_factor: amax / (6 * 448) */
        if (st == LB_OK && a == LB_MO_NVFP4)
            st = emit_scalar(emit, sink, module, "input_scale", lb__nvfp4_tensor_scale(input_amax));
        return st;
    case LB_MO_MXFP8:
        if (cols % MO_MX_GROUP || qv->row_bytes != cols || qv->scales_per_row != cols / MO_MX_GROUP)
            return lb__fail(LB_ERR_ARG, "module '%s': not an MXFP8 tensor (%llu columns)", module,
                            (unsigned long long)cols);
        st = emit2(emit, sink, module, "weight", "F8_E4M3", 2, rows, cols, qv->data, qv->data_bytes);
        if (st == LB_OK)
            st = emit2(emit, sink, module, "weight_scale", "U8", 2, rows, cols / MO_MX_GROUP, qv->scales,
                       qv->scale_bytes);
        return st;
    case LB_MO_ALGO_COUNT: break;
    }
    return lb__fail(LB_ERR_ARG, "module '%s': unknown ModelOpt algorithm %d", module, (int)a);
}

/* ----- exclude_modules ----- */

typedef struct strset {
    char **s;
    size_t n, cap;
} strset;

static int strset_has(const strset *set, const char *x)
{
    for (size_t i = 0; i < set->n; i++)
        if (strcmp(set->s[i], x) == 0) return 1;
    return 0;
}

static lb_status strset_add(strset *set, const char *x)
{
    if (strset_has(set, x)) return LB_OK;
    if (set->n == set->cap) {
        size_t cap = set->cap ? set->cap * 2 : 16;
        char **s = realloc(set->s, cap * sizeof *s);
        if (!s) return lb__fail(LB_ERR_NOMEM, "out of memory");
        set->s = s, set->cap = cap;
    }
    if (!(set->s[set->n] = strdup(x))) return lb__fail(LB_ERR_NOMEM, "out of memory");
    set->n++;
    return LB_OK;
}

static void strset_free(strset *set)
{
    for (size_t i = 0; i < set->n; i++) free(set->s[i]);
    free(set->s);
}

/* ModelOpt's negative set: every quantized name and every prefix of one
 * followed by '*'. So "P*" is negative when a quantized name starts with
 * P, and a plain name when it is a quantized name. */
static int negative(const char *w, const char *const *quantized, size_t nq)
{
    size_t n = strlen(w);
    int star = n > 0 && w[n - 1] == '*';
    for (size_t i = 0; i < nq; i++) {
        if (star ? strncmp(quantized[i], w, n - 1) == 0 : strcmp(quantized[i], w) == 0) return 1;
    }
    return 0;
}

static int by_strcmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The candidates of _prefix_wildcard_summarize_exclude_modules, in its
 * order: at each '.' of the name, [prefix*] then [prefix, prefix.*]; last
 * the name alone. The chosen one adds prefix.* for a pair, else itself. */
static lb_status summarize_one(const char *name, const char *const *quantized, size_t nq, strset *res)
{
    size_t len = strlen(name);
    if (len > MO_MAX_NAME) return lb__fail(LB_ERR_ARG, "module name '%.64s...' is too long", name);
    char a[MO_MAX_NAME + 3], b[MO_MAX_NAME + 3];
    for (size_t i = 0; i < len; i++) {
        if (name[i] != '.') continue;
        snprintf(a, sizeof a, "%.*s*", (int)i, name);
        if (!negative(a, quantized, nq)) { /* a single wildcard */
            return strset_has(res, a) ? LB_OK : strset_add(res, a);
        }
        snprintf(a, sizeof a, "%.*s", (int)i, name);
        snprintf(b, sizeof b, "%.*s.*", (int)i, name);
        if (!negative(a, quantized, nq) && !negative(b, quantized, nq)) {
            if (strset_has(res, a) && strset_has(res, b)) return LB_OK; /* covered already */
            return strset_add(res, b); /* ModelOpt emits only prefix.* of the pair */
        }
    }
    if (negative(name, quantized, nq)) return LB_OK; /* a quantized name itself: nothing to exclude */
    return strset_add(res, name);
}

lb_status lb__mo_exclude_json(const char *const *unquantized, size_t n_unquantized, const char *const *quantized,
                              size_t n_quantized, lb__jsonw *w)
{
    if ((!unquantized && n_unquantized) || (!quantized && n_quantized) || !w)
        return lb__fail(LB_ERR_ARG, "lb__mo_exclude_json: NULL argument");
    strset res = {0};
    lb_status st = LB_OK;
    for (size_t i = 0; i < n_unquantized && st == LB_OK; i++) st = summarize_one(unquantized[i], quantized, n_quantized, &res);
    if (st == LB_OK) {
        if (res.n) qsort(res.s, res.n, sizeof *res.s, by_strcmp);
        lb__jsonw_array(w);
        for (size_t i = 0; i < res.n; i++) lb__jsonw_str(w, res.s[i]);
        lb__jsonw_end(w);
    }
    strset_free(&res);
    return st;
}
