/* Quantization specs: the compact text form and its validation. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "lowbit.h"
#include "quant/quant_internal.h"
#include "util/error.h"

/* The named block formats. MX: OCP Microscaling Formats v1.0, sec. 5
 * (block of 32, one E8M0 scale) and sec. 6.3 (scale from the block's
 * largest magnitude). NVFP4: NVIDIA's 16-value blocks with an E4M3 scale
 * and an fp32 tensor scale (ModelOpt nvfp4_tensor.py). */
static const struct preset {
    const char *name;
    lb_qspec spec;
} presets[] = {
    {"mxfp8_e4m3", {LB_FMT_FP8_E4M3, LB_GRAN_GROUP, 32, LB_FMT_E8M0, 0, 0, LB_SEARCH_ABSMAX, LB_MX_FLOOR, 0}},
    {"mxfp8_e5m2", {LB_FMT_FP8_E5M2, LB_GRAN_GROUP, 32, LB_FMT_E8M0, 0, 0, LB_SEARCH_ABSMAX, LB_MX_FLOOR, 0}},
    {"mxfp6_e2m3", {LB_FMT_FP6_E2M3, LB_GRAN_GROUP, 32, LB_FMT_E8M0, 0, 0, LB_SEARCH_ABSMAX, LB_MX_FLOOR, 0}},
    {"mxfp6_e3m2", {LB_FMT_FP6_E3M2, LB_GRAN_GROUP, 32, LB_FMT_E8M0, 0, 0, LB_SEARCH_ABSMAX, LB_MX_FLOOR, 0}},
    {"mxfp4", {LB_FMT_FP4_E2M1, LB_GRAN_GROUP, 32, LB_FMT_E8M0, 0, 0, LB_SEARCH_ABSMAX, LB_MX_FLOOR, 0}},
    {"mxint8", {LB_FMT_INT8, LB_GRAN_GROUP, 32, LB_FMT_E8M0, 0, 0, LB_SEARCH_ABSMAX, LB_MX_FLOOR, 6}},
    {"nvfp4", {LB_FMT_FP4_E2M1, LB_GRAN_GROUP, 16, LB_FMT_UE4M3, 0, 1, LB_SEARCH_ABSMAX, LB_MX_FLOOR, 0}},
};
#define N_PRESETS (sizeof presets / sizeof presets[0])

static const char *const gran_names[] = {"tensor", "channel", "token", "g"};
static const char *const round_names[] = {"floor", "ceil", "even", "rceil"};

static int is_scale_format(lb_format f)
{
    return f == LB_FMT_FP32 || f == LB_FMT_FP16 || f == LB_FMT_BF16 || f == LB_FMT_E8M0 || f == LB_FMT_UE4M3;
}

/* The range a spec gets when its text names none: SIGNED (ggml's rule) for
 * symmetric int4 under an fp32, fp16 or bf16 scale, single level, where it
 * measured best (BENCHMARKS.md, "Round-to-nearest grids"); FULL otherwise
 * (int8: signed measured only 4% lower KLD, and int8's figures stay as they
 * were; ue4m3 and two-level scales are unsigned). */
static lb_int_range default_range(const lb_qspec *q)
{
    int sf = q->scale_format == LB_FMT_FP32 || q->scale_format == LB_FMT_FP16 || q->scale_format == LB_FMT_BF16;
    return q->element == LB_FMT_INT4 && !q->affine && !q->two_level && sf ? LB_RANGE_SIGNED : LB_RANGE_FULL;
}

/* The combinations that are defined; everything else is refused with the
 * reason, so a typo never silently becomes a different recipe. `text`
 * names the spec in messages. */
static lb_status validate(const char *text, const lb_qspec *q)
{
    /* a hand-filled struct: every enum and flag in range first */
    if ((unsigned)q->element >= LB_FMT_COUNT || (unsigned)q->scale_format >= LB_FMT_COUNT)
        return lb__fail(LB_ERR_FORMAT, "spec %s: format id out of range", text);
    if ((unsigned)q->granularity > LB_GRAN_GROUP || (unsigned)q->search > LB_SEARCH_MSE ||
        (unsigned)q->mx_rounding > LB_MX_RCEIL || (q->affine != 0 && q->affine != 1) ||
        (q->two_level != 0 && q->two_level != 1) || (q->int_frac_bits != 0 && q->int_frac_bits != 6) ||
        (unsigned)q->range > LB_RANGE_SIGNED)
        return lb__fail(LB_ERR_ARG, "spec %s: a field is out of range (granularity, search, mx_rounding, affine, "
                                    "two_level, int_frac_bits or range)", text);
    const lb_format_info *e = lb_format_get(q->element);
    if (q->element == LB_FMT_E8M0 || q->element == LB_FMT_UE4M3)
        return lb__fail(LB_ERR_ARG, "spec %s: %s is a scale format, not an element format", text, e->name);
    if (q->element == LB_FMT_FP32 || q->element == LB_FMT_BF16)
        return lb__fail(LB_ERR_ARG, "spec %s: %s elements keep fp32's whole exponent range, so a scale would be "
                                    "an fp32 subnormal; convert with 'lowbit cast' instead", text, e->name);
    if (q->granularity == LB_GRAN_GROUP && q->group == 0)
        return lb__fail(LB_ERR_ARG, "spec %s: block size must be at least 1", text);
    if (q->granularity == LB_GRAN_GROUP && q->group > LB_QUANT_MAX_GROUP)
        return lb__fail(LB_ERR_ARG, "spec %s: block size %zu is above the limit %u", text, q->group,
                        (unsigned)LB_QUANT_MAX_GROUP);
    if (q->group_rows > 1 && (q->granularity != LB_GRAN_GROUP || q->group_rows > LB_QUANT_MAX_GROUP))
        return lb__fail(LB_ERR_ARG, "spec %s: %zu rows per block: 2-D blocks are a block granularity (bRxC) of at "
                                    "most %u rows", text, q->group_rows, (unsigned)LB_QUANT_MAX_GROUP);
    if (q->group_rows > 1 && (q->affine || q->two_level || q->search != LB_SEARCH_ABSMAX))
        return lb__fail(LB_ERR_ARG, "spec %s: 2-D blocks (bRxC) are symmetric, single level and clip=absmax (one "
                                    "scale per block from its largest magnitude); use gN blocks for the rest", text);
    if (!is_scale_format(q->scale_format))
        return lb__fail(LB_ERR_ARG, "spec %s: scale format must be fp32, fp16, bf16, e8m0 or ue4m3", text);
    if (q->affine && e->kind != LB_KIND_INT)
        return lb__fail(LB_ERR_ARG, "spec %s: affine (zero point) is defined for integer elements only "
                                    "(int8, uint8, int4, uint4), not %s", text, e->name);
    if (!q->affine && e->kind == LB_KIND_INT && !e->sign_bits)
        return lb__fail(LB_ERR_ARG, "spec %s: %s is unsigned: it needs :affine (a zero point)", text, e->name);
    if (q->affine && (q->scale_format == LB_FMT_E8M0 || q->scale_format == LB_FMT_UE4M3 || q->two_level))
        return lb__fail(LB_ERR_ARG, "spec %s: affine takes an fp32, fp16 or bf16 scale, single level", text);
    if (q->two_level && q->scale_format != LB_FMT_UE4M3 && q->scale_format != LB_FMT_FP16)
        return lb__fail(LB_ERR_ARG, "spec %s: twolevel is defined for ue4m3 and fp16 block scales (the tensor "
                                    "scale maps blocks onto their range; fp32, bf16 and e8m0 need none)", text);
    if (q->two_level && q->granularity == LB_GRAN_TENSOR)
        return lb__fail(LB_ERR_ARG, "spec %s: twolevel needs blocks or channels under the tensor scale", text);
    if (q->search == LB_SEARCH_MSE && (q->scale_format == LB_FMT_E8M0 || q->two_level))
        return lb__fail(LB_ERR_ARG, "spec %s: clip=mse is defined for single-level fp32, fp16, bf16 and ue4m3 "
                                    "scales", text);
    if (q->mx_rounding != LB_MX_FLOOR && q->scale_format != LB_FMT_E8M0)
        return lb__fail(LB_ERR_ARG, "spec %s: round= applies to e8m0 (power of two) scales only", text);
    if (q->int_frac_bits && (q->element != LB_FMT_INT8 || q->scale_format != LB_FMT_E8M0 || q->affine))
        return lb__fail(LB_ERR_ARG, "spec %s: implied fraction bits are MXINT8's alone (int8 elements, e8m0 "
                                    "scales, symmetric)", text);
    if (q->range != LB_RANGE_FULL && (e->kind != LB_KIND_INT || q->affine || q->scale_format == LB_FMT_E8M0))
        return lb__fail(LB_ERR_ARG, "spec %s: range= applies to symmetric int8/int4 with an fp32, fp16, bf16 or "
                                    "ue4m3 scale (affine grids and MXINT8 use their element's codes as defined)", text);
    if (q->range == LB_RANGE_SIGNED && (q->two_level || q->scale_format == LB_FMT_UE4M3))
        return lb__fail(LB_ERR_ARG, "spec %s: range=signed needs a signed scale format, single level (fp32, fp16 "
                                    "or bf16): ue4m3 and two-level scales are unsigned", text);
    if (q->scale_format == LB_FMT_E8M0 && e->kind == LB_KIND_INT && !q->int_frac_bits)
        return lb__fail(LB_ERR_ARG, "spec %s: e8m0 scales with integer elements: use the mxint8 preset", text);
    return LB_OK;
}

lb_status lb_qspec_validate(const lb_qspec *spec)
{
    if (!spec) return lb__fail(LB_ERR_ARG, "lb_qspec_validate: NULL spec");
    return validate("(struct)", spec);
}

/* A block granularity token: g or b (or "block") then a digit. */
static int block_token(const char *t)
{
    if (strncmp(t, "block", 5) == 0) return t[5] >= '0' && t[5] <= '9';
    return (t[0] == 'g' || t[0] == 'b') && t[1] >= '0' && t[1] <= '9';
}

/* Decimal digits only, no sign, no overflow. */
static int parse_size(const char *s, size_t *out)
{
    if (!*s) return 0;
    size_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9' || v > (SIZE_MAX - 9) / 10) return 0;
        v = v * 10 + (size_t)(*s - '0');
    }
    *out = v;
    return 1;
}

lb_status lb_qspec_parse(const char *text, lb_qspec *out)
{
    if (!text || !out) return lb__fail(LB_ERR_ARG, "lb_qspec_parse: NULL argument");
    char buf[256];
    if (strlen(text) >= sizeof buf) return lb__fail(LB_ERR_ARG, "spec '%.40s...' is too long", text);
    strcpy(buf, text);
    lb_qspec q = {LB_FMT_FP32, LB_GRAN_TENSOR, 0, LB_FMT_FP32, 0, 0, LB_SEARCH_ABSMAX, LB_MX_FLOOR, 0};

    if (buf[0] == '\0') return lb__fail(LB_ERR_ARG, "empty spec; e.g. int8:channel, int4:g128:affine, mxfp4, nvfp4");
    size_t len = strlen(buf);
    if (buf[0] == ':' || buf[len - 1] == ':' || strstr(buf, "::"))
        return lb__fail(LB_ERR_ARG, "spec '%s' has an empty part (between ':')", text);
    char quoted[280];
    snprintf(quoted, sizeof quoted, "'%s'", text);
    char *save = NULL, *tok = strtok_r(buf, ":", &save);
    int found = 0, range_given = 0;
    for (size_t i = 0; i < N_PRESETS && !found; i++)
        if (strcasecmp(tok, presets[i].name) == 0) q = presets[i].spec, found = 1;
    if (!found && lb_format_by_name(tok, &q.element) != LB_OK) {
        char names[256] = "";
        for (size_t i = 0; i < N_PRESETS; i++) {
            strcat(names, i ? ", " : "");
            strcat(names, presets[i].name);
        }
        return lb__fail(LB_ERR_FORMAT, "spec '%s': '%s' is neither a format nor a preset (presets: %s; formats: "
                                       "see 'lowbit formats')", text, tok, names);
    }
    while ((tok = strtok_r(NULL, ":", &save))) {
        char *eq = strchr(tok, '=');
        if (strcmp(tok, "tensor") == 0) q.granularity = LB_GRAN_TENSOR;
        else if (strcmp(tok, "channel") == 0) q.granularity = LB_GRAN_CHANNEL;
        else if (strcmp(tok, "token") == 0) q.granularity = LB_GRAN_TOKEN;
        else if (block_token(tok)) {
            /* gN / bN: N along a row; bRxC (gRxC, blockRxC): R rows by C columns */
            char *num = tok + (strncmp(tok, "block", 5) == 0 ? 5 : 1), *x = strchr(num, 'x');
            if (x) *x = '\0';
            q.group_rows = 0;
            if (!parse_size(x ? x + 1 : num, &q.group) || (x && (!parse_size(num, &q.group_rows) || !q.group_rows)))
                return lb__fail(LB_ERR_ARG, "spec '%s': bad block size in '%s%s%s' (gN, or bRxC with R, C >= 1)", text,
                                tok, x ? "x" : "", x ? x + 1 : "");
            if (q.group_rows == 1) q.group_rows = 0; /* b1xC is gC */
            q.granularity = LB_GRAN_GROUP;
        } else if (strcmp(tok, "sym") == 0) q.affine = 0;
        else if (strcmp(tok, "affine") == 0) q.affine = 1;
        else if (strcmp(tok, "twolevel") == 0) q.two_level = 1;
        else if (eq && strncmp(tok, "scale=", 6) == 0) {
            lb_format f;
            const char *v = strcmp(eq + 1, "e4m3") == 0 ? "ue4m3" : eq + 1; /* NVFP4 says E4M3 */
            if (lb_format_by_name(v, &f) != LB_OK || !is_scale_format(f))
                return lb__fail(LB_ERR_ARG, "spec '%s': unknown scale format in '%s' (fp32, fp16, bf16, e8m0, ue4m3)",
                                text, tok);
            q.scale_format = f;
        } else if (eq && strncmp(tok, "clip=", 5) == 0) {
            if (strcmp(eq + 1, "absmax") == 0) q.search = LB_SEARCH_ABSMAX;
            else if (strcmp(eq + 1, "mse") == 0) q.search = LB_SEARCH_MSE;
            else return lb__fail(LB_ERR_ARG, "spec '%s': unknown clipping rule in '%s' (absmax, mse)", text, tok);
        } else if (eq && strncmp(tok, "range=", 6) == 0) {
            range_given = 1;
            if (strcmp(eq + 1, "full") == 0) q.range = LB_RANGE_FULL;
            else if (strcmp(eq + 1, "restricted") == 0) q.range = LB_RANGE_RESTRICTED;
            else if (strcmp(eq + 1, "signed") == 0) q.range = LB_RANGE_SIGNED;
            else return lb__fail(LB_ERR_ARG, "spec '%s': unknown integer range in '%s' (full, restricted, signed)", text, tok);
        } else if (eq && strncmp(tok, "round=", 6) == 0) {
            int r = -1;
            for (int i = 0; i < 4; i++)
                if (strcmp(eq + 1, round_names[i]) == 0) r = i;
            if (r < 0) return lb__fail(LB_ERR_ARG, "spec '%s': unknown rounding in '%s' (floor, ceil, even, rceil)", text, tok);
            q.mx_rounding = (lb_mx_rounding)r;
        } else {
            return lb__fail(LB_ERR_ARG, "spec '%s': unknown part '%s' (granularity: tensor, channel, token, gN, bRxC; "
                                        "options: sym, affine, twolevel, scale=, clip=, round=, range=)", text, tok);
        }
    }
    if (q.granularity != LB_GRAN_GROUP) q.group = q.group_rows = 0; /* "g744:tensor": the last granularity wins, whole */
    if (!range_given) q.range = default_range(&q);
    lb_status s = validate(quoted, &q);
    if (s == LB_OK) *out = q;
    return s;
}

/* The range option's spelling; the spec's default range has none. */
static const char *range_suffix(const lb_qspec *q)
{
    lb_int_range r = q->range;
    if (r == default_range(q)) return "";
    switch (r) {
    case LB_RANGE_FULL: return ":range=full";
    case LB_RANGE_RESTRICTED: return ":range=restricted";
    case LB_RANGE_SIGNED: return ":range=signed";
    }
    return "";
}

int lb_qspec_format(const lb_qspec *q, char *buf, size_t size)
{
    if (!q || validate("(struct)", q) != LB_OK) return snprintf(buf, size, "invalid");
    for (size_t i = 0; i < N_PRESETS; i++) {
        const lb_qspec *p = &presets[i].spec;
        if (p->element == q->element && p->granularity == q->granularity && p->group == q->group &&
            p->scale_format == q->scale_format && p->affine == q->affine && p->two_level == q->two_level &&
            p->int_frac_bits == q->int_frac_bits && q->search == LB_SEARCH_ABSMAX && q->group_rows <= 1) {
            if (q->mx_rounding == LB_MX_FLOOR) return snprintf(buf, size, "%s", presets[i].name);
            return snprintf(buf, size, "%s:round=%s", presets[i].name, round_names[q->mx_rounding]);
        }
    }
    char gran[32];
    if (q->granularity == LB_GRAN_GROUP && q->group_rows > 1) snprintf(gran, sizeof gran, "b%zux%zu", q->group_rows, q->group);
    else if (q->granularity == LB_GRAN_GROUP) snprintf(gran, sizeof gran, "g%zu", q->group);
    else snprintf(gran, sizeof gran, "%s", gran_names[q->granularity]);
    if (q->int_frac_bits) /* MXINT8's implied fraction has no spelling but the preset's name */
        return snprintf(buf, size, "mxint8:%s%s%s", gran, q->mx_rounding != LB_MX_FLOOR ? ":round=" : "",
                        q->mx_rounding != LB_MX_FLOOR ? round_names[q->mx_rounding] : "");
    return snprintf(buf, size, "%s:%s%s%s%s%s%s%s%s%s", lb_format_get(q->element)->name, gran,
                    q->affine ? ":affine" : "", q->scale_format != LB_FMT_FP32 ? ":scale=" : "",
                    q->scale_format != LB_FMT_FP32 ? lb_format_get(q->scale_format)->name : "",
                    q->two_level ? ":twolevel" : "", q->search == LB_SEARCH_MSE ? ":clip=mse" : "",
                    q->mx_rounding != LB_MX_FLOOR ? ":round=" : "",
                    q->mx_rounding != LB_MX_FLOOR ? round_names[q->mx_rounding] : "",
                    range_suffix(q));
}
