/* The config side of a quantized checkpoint: compressed-tensors'
 * quantization args, the input quantization an engine applies, and which
 * config group's targets name a module (hf_quantized_args.h). */
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/hf_quantized_args.h"
#include "util/error.h"



static const char *strat_name(lb__hfq_strat s)
{
    switch (s) {
    case S_TENSOR: return "per tensor";
    case S_CHANNEL: return "per channel";
    case S_GROUP: return "group";
    case S_TENSOR_GROUP: return "group";
    case S_BLOCK: return "block";
    case S_TOKEN: return "per token";
    }
    return "?";
}

lb_status lb__hfq_parse_args(const lb__json *a, const char *what, lb__hfq_qargs *out)
{
    memset(out, 0, sizeof *out);
    out->symmetric = 1;
    if (!a || a->type != LB_JSON_OBJECT) return lb__fail(LB_ERR_PARSE, "%s: not an object", what);
    int64_t v;
    const lb__json *nb = lb__json_get(a, "num_bits");
    if (!nb || !lb__json_i64(nb, &v) || v < 1 || v > 8)
        return lb__fail(LB_ERR_PARSE, "%s: \"num_bits\" must be an integer 1..8", what);
    out->bits = (int)v;
    const char *type = lb__json_str(a, "type");
    if (!type || (strcmp(type, "int") && strcmp(type, "float")))
        return lb__fail(LB_ERR_PARSE, "%s: \"type\" must be \"int\" or \"float\"", what);
    out->is_float = strcmp(type, "float") == 0;
    const lb__json *sym = lb__json_get(a, "symmetric");
    if (sym && sym->type != LB_JSON_NULL) {
        if (sym->type != LB_JSON_TRUE && sym->type != LB_JSON_FALSE)
            return lb__fail(LB_ERR_PARSE, "%s: \"symmetric\" must be true or false", what);
        out->symmetric = sym->type == LB_JSON_TRUE;
    }
    const lb__json *gs = lb__json_get(a, "group_size"), *bs = lb__json_get(a, "block_structure");
    int64_t g = 0;
    if (gs && gs->type != LB_JSON_NULL && (!lb__json_i64(gs, &g) || g == 0 || g < -1 || g > (1 << 24)))
        return lb__fail(LB_ERR_PARSE, "%s: \"group_size\" must be -1 or a positive integer", what);
    if (bs && bs->type != LB_JSON_NULL) {
        uint64_t h, w;
        if (bs->type != LB_JSON_ARRAY || bs->len != 2 || !lb__json_u64(&bs->items[0], &h) ||
            !lb__json_u64(&bs->items[1], &w) || h == 0 || w == 0 || h > (1u << 24) || w > (1u << 24))
            return lb__fail(LB_ERR_PARSE, "%s: \"block_structure\" must be [rows, cols] of positive integers", what);
        out->bh = h, out->bw = w;
    }
    const char *s = lb__json_str(a, "strategy");
    if (!s) s = out->bh ? "block" : g > 0 ? "group" : g == -1 ? "channel" : "tensor"; /* the package's inference */
    if (strcmp(s, "tensor") == 0) out->strategy = S_TENSOR;
    else if (strcmp(s, "channel") == 0) out->strategy = S_CHANNEL;
    else if (strcmp(s, "group") == 0) out->strategy = S_GROUP;
    else if (strcmp(s, "tensor_group") == 0) out->strategy = S_TENSOR_GROUP;
    else if (strcmp(s, "block") == 0) out->strategy = S_BLOCK;
    else if (strcmp(s, "token") == 0) out->strategy = S_TOKEN;
    else return lb__fail(LB_ERR_UNSUPPORTED, "%s: weight strategy \"%s\" is not one lowbit reads (tensor, channel, "
                                             "group, tensor_group, block)", what, s);
    if ((out->strategy == S_GROUP || out->strategy == S_TENSOR_GROUP) && g <= 0)
        return lb__fail(LB_ERR_PARSE, "%s: strategy \"%s\" needs a positive \"group_size\"", what, s);
    if (out->strategy == S_BLOCK && !out->bh)
        return lb__fail(LB_ERR_PARSE, "%s: strategy \"block\" needs \"block_structure\"", what);
    out->group = g > 0 ? (uint64_t)g : 0;
    const char *ao = lb__json_str(a, "actorder");
    if (ao && strcmp(ao, "group") == 0) /* g_idx permutes groups: removed from compressed-tensors 0.20 and vLLM */
        return lb__fail(LB_ERR_UNSUPPORTED, "%s: actorder \"group\" (weight_g_idx) is not read: compressed-tensors 0.20 "
                                            "and vLLM removed it", what);
    return LB_OK;
}

/* One line for lb_quant_group.weights / .input: "int4 group 128 asymmetric". */
void lb__hfq_describe(const lb__hfq_qargs *a, int has, char *buf, size_t n)
{
    if (!has) {
        snprintf(buf, n, "none");
        return;
    }
    char el[16], g[48] = "";
    if (a->is_float) snprintf(el, sizeof el, "%s", a->bits == 8 ? "fp8_e4m3" : a->bits == 4 ? "fp4_e2m1" : "float");
    else snprintf(el, sizeof el, "int%d", a->bits);
    if (a->strategy == S_GROUP || a->strategy == S_TENSOR_GROUP) snprintf(g, sizeof g, " %llu", (unsigned long long)a->group);
    if (a->strategy == S_BLOCK) snprintf(g, sizeof g, " %llux%llu", (unsigned long long)a->bh, (unsigned long long)a->bw);
    snprintf(buf, n, "%s %s%s%s%s", el, strat_name(a->strategy), g,
             a->strategy == S_TENSOR_GROUP ? " + tensor scale" : "", a->symmetric ? "" : " asymmetric");
}

/* ===== The engine's input quantization ===== */

/* compressed-tensors input_activations (and output_activations, which no
 * engine lowbit knows quantizes) as an lb__hfq_act; what lowbit cannot
 * simulate is not an error here (the weights still read) but a sentence in
 * act->unsupported, which the evaluation reports. */
void lb__hfq_ct_act(const lb__json *ia, const lb__json *oa, const char *what, lb__hfq_act *act, char *why, size_t n)
{
    memset(act, 0, sizeof *act);
    why[0] = 0;
    if (oa && oa->type != LB_JSON_NULL) snprintf(why, n, "%s: output_activations are quantized", what);
    act->quantized_inputs = ia && ia->type != LB_JSON_NULL;
    if (!why[0] && act->quantized_inputs) {
        lb__hfq_qargs a;
        char w[300];
        snprintf(w, sizeof w, "%s.input_activations", what);
        lb_status st = lb__hfq_parse_args(ia, w, &a);
        const lb__json *dyn = st == LB_OK ? lb__json_get(ia, "dynamic") : NULL;
        const char *sd = st == LB_OK ? lb__json_str(ia, "scale_dtype") : NULL;
        int dynamic = dyn && dyn->type == LB_JSON_TRUE, local = dyn && dyn->type == LB_JSON_STRING &&
                      dyn->str && strcmp(dyn->str, "local") == 0;
        act->bits = a.bits, act->is_float = a.is_float, act->group = a.group;
        act->e8m0 = sd && strcmp(sd, "torch.uint8") == 0;
        if (st != LB_OK) snprintf(why, n, "%s", lb_last_error());
        else if (dyn && dyn->type != LB_JSON_TRUE && dyn->type != LB_JSON_FALSE && !local)
            snprintf(why, n, "%s: \"dynamic\" must be true, false or \"local\"", w);
        else if (!a.symmetric)
            snprintf(why, n, "%s: asymmetric activations (input_zero_point) are not simulated", w);
        else if (!(a.is_float ? a.bits == 8 || a.bits == 4 : a.bits == 8))
            snprintf(why, n, "%s: %s%d activations are not simulated (fp8, int8, fp4)", w,
                     a.is_float ? "float" : "int", a.bits);
        else if (local) {
            act->mode = LB__HFQ_A_LOCAL;
            if (!(a.is_float && a.bits == 4 && a.strategy == S_TENSOR_GROUP && a.group == 16))
                snprintf(why, n, "%s: \"local\" activations are simulated as NVFP4 (fp4, tensor_group 16)", w);
        } else if (dynamic) {
            act->mode = LB__HFQ_A_DYNAMIC;
            act->per_token = a.strategy == S_TOKEN;
            if (a.strategy != S_TOKEN && a.strategy != S_GROUP)
                snprintf(why, n, "%s: dynamic activations %s are not simulated (per token or per group)", w,
                         strat_name(a.strategy));
            else if (a.bits == 4 && !(act->e8m0 && a.strategy == S_GROUP && a.group == 32))
                snprintf(why, n, "%s: dynamic fp4 activations are simulated as MXFP4 (group 32, uint8 "
                         "scales)", w);
            else if (act->e8m0 && !(a.is_float && a.strategy == S_GROUP && a.group == 32))
                snprintf(why, n, "%s: power-of-two activation scales are simulated for MX (float, group "
                         "32)", w);
        } else {
            act->mode = LB__HFQ_A_STATIC;
            if (a.strategy != S_TENSOR || a.bits != 8)
                snprintf(why, n, "%s: static activations %s are not simulated (8-bit per tensor)", w,
                         strat_name(a.strategy));
        }
    }
}

/* ModelOpt: the input quantization each quant_algo implies (vLLM's
 * modelopt.py). */
void lb__hfq_modelopt_act(const char *algo, uint64_t gsize, lb__hfq_act *act, char *why, size_t n)
{
    memset(act, 0, sizeof *act);
    why[0] = 0;
    if (strcmp(algo, "FP8") == 0) act->mode = LB__HFQ_A_STATIC, act->bits = 8, act->is_float = 1;
    else if (strcmp(algo, "FP8_PER_CHANNEL_PER_TOKEN") == 0)
        act->mode = LB__HFQ_A_DYNAMIC, act->bits = 8, act->is_float = 1, act->per_token = 1;
    else if (strcmp(algo, "NVFP4") == 0) act->mode = LB__HFQ_A_LOCAL, act->bits = 4, act->is_float = 1, act->group = gsize;
    else if (strcmp(algo, "MXFP8") == 0)
        act->mode = LB__HFQ_A_DYNAMIC, act->bits = 8, act->is_float = 1, act->group = 32, act->e8m0 = 1;
    else if (strcmp(algo, "W4A16_NVFP4") != 0 && strcmp(algo, "FP8_PB_WO") != 0) {
        snprintf(why, n, "ModelOpt quant_algo %.40s: its input quantization is not simulated", algo);
    }
    act->quantized_inputs = act->mode != LB__HFQ_A_NONE || why[0];
    if (act->mode == LB__HFQ_A_LOCAL && gsize != 16)
        snprintf(why, n, "ModelOpt NVFP4 with group_size %llu: activations are simulated in groups of 16",
                 (unsigned long long)gsize);
}

/* ----- Matching module names (compressed-tensors' match_name) ----- */

static int re_match_start(const char *pattern, const char *name, const char *what, lb_status *st)
{
    size_t n = strlen(pattern);
    char *anchored = malloc(n + 4);
    if (!anchored) {
        *st = lb__fail(LB_ERR_NOMEM, "out of memory");
        return 0;
    }
    snprintf(anchored, n + 4, "^(%s)", pattern); /* re.match: anchored at the start only */
    regex_t re;
    int rc = regcomp(&re, anchored, REG_EXTENDED | REG_NOSUB);
    free(anchored);
    if (rc != 0) {
        *st = lb__fail(LB_ERR_UNSUPPORTED, "%s: the regex \"re:%s\" does not compile as a POSIX extended regex", what,
                       pattern);
        return 0;
    }
    int hit = regexec(&re, name, 0, NULL, 0) == 0;
    regfree(&re);
    return hit;
}

/* A target that is a class name: Linear matches every quantized module (all
 * of lowbit's weights with scales are linear layers); other classes
 * (Embedding, LlamaAttention ...) match none of them. */
static int target_matches(const char *t, const char *module, const char *what, lb_status *st)
{
    if (strncmp(t, "re:", 3) == 0) return re_match_start(t + 3, module, what, st);
    if (strcmp(t, module) == 0) return 1;
    return strcmp(t, "Linear") == 0;
}

int lb__hfq_list_matches(const lb__json *list, const char *module, const char *what, lb_status *st)
{
    for (size_t i = 0; list && i < list->len && *st == LB_OK; i++)
        if (target_matches(list->items[i].str, module, what, st)) return 1;
    return 0;
}

lb_status lb__hfq_check_string_list(const lb__json *l, const char *what)
{
    if (!l || l->type == LB_JSON_NULL) return LB_OK;
    if (l->type != LB_JSON_ARRAY) return lb__fail(LB_ERR_PARSE, "%s: must be an array of strings", what);
    if (l->len > LB__HFQ_MAX_TARGETS)
        return lb__fail(LB_ERR_PARSE, "%s: %zu entries (at most %d)", what, l->len, LB__HFQ_MAX_TARGETS);
    for (size_t i = 0; i < l->len; i++)
        if (l->items[i].type != LB_JSON_STRING || l->items[i].len == 0 || strlen(l->items[i].str) != l->items[i].len)
            return lb__fail(LB_ERR_PARSE, "%s[%zu]: must be a non-empty string", what, i);
    return LB_OK;
}
