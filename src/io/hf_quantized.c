/* Planning the logical tensors of a quantized Hugging Face checkpoint: which
 * modules are quantized, under which config group and format, which file
 * tensors make each one, and whether all of them agree (dtypes, shapes,
 * group sizes) before a byte is read. The arithmetic is in
 * hf_quantized_decode.c, the checks of a planned tensor's components in
 * hf_quantized_check.c, the config groups' args and target matching in
 * hf_quantized_args.c; the rules are in hf_quantized.h.
 *
 * compressed-tensors: config.json "quantization_config" with quant_method
 * "compressed-tensors" (config_groups of targets + weights args, a format
 * per group or one for all, ignore). A module <m> is quantized when the
 * file holds <m>.weight_scale. Its group is the first whose targets match
 * (a class name such as "Linear" matches every linear layer, "re:X" is
 * Python's re.match, anything else the exact module name), as the
 * package's match_name does.
 *
 * ModelOpt: quant_method "modelopt" in config.json, or hf_quant_config.json
 * beside it (older exports). Its tensors say the format (fp8 codes with a
 * float scale: FP8; fp8 codes with U8 scales: MXFP8; U8 codes with fp8
 * scales and weight_scale_2: NVFP4); the config gives the group size. */
#define _DEFAULT_SOURCE /* strdup */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/dtype.h"
#include "io/hf_quantized.h"
#include "io/hf_quantized_args.h"
#include "io/model_internal.h"
#include "util/error.h"
#include "util/file.h"

struct lb__hfq {
    lb_model_quant info;
    lb__hfq_kv kv;
    lb_quant_group *groups;
    lb__hfq_tensor *tensors;     /* one per quantized module */
    size_t n_tensors;
    char **strings;              /* every string this owns */
    size_t n_strings, cap_strings;
};

void lb__hfq_free(lb__hfq *q)
{
    if (!q) return;
    for (size_t i = 0; i < q->n_strings; i++) free(q->strings[i]);
    free(q->strings), free(q->groups), free(q->tensors), free(q->kv.k), free(q->kv.v), free(q);
}

static const char *keep_str(lb__hfq *q, const char *s)
{
    if (q->n_strings == q->cap_strings) {
        size_t cap = q->cap_strings ? 2 * q->cap_strings : 32;
        char **g = realloc(q->strings, cap * sizeof *g);
        if (!g) return NULL;
        q->strings = g, q->cap_strings = cap;
    }
    char *d = strdup(s);
    if (d) q->strings[q->n_strings++] = d;
    return d;
}

typedef struct group {
    const char *name, *format;
    const lb__json *targets; /* array of strings */
    lb__hfq_qargs w;
    int has_w;
    lb__hfq_act act;         /* its input_activations (scale tensors are per module) */
} group;

/* ===== Finding tensors by name while the model has no index yet ===== */

typedef struct finder {
    const lb_model *m;
    size_t *order;           /* indices sorted by name */
    char *hidden;            /* per tensor: 1 when taken out of the list */
    long *logical;           /* per tensor: index into hfq->tensors when it becomes the logical weight, else -1 */
} finder;

static const lb_model *sort_m;
static int cmp_idx(const void *a, const void *b)
{
    return strcmp(sort_m->tensors[*(const size_t *)a].name, sort_m->tensors[*(const size_t *)b].name);
}

static long find(const finder *f, const char *module, const char *suffix)
{
    char name[512];
    if ((size_t)snprintf(name, sizeof name, "%s.%s", module, suffix) >= sizeof name) return -1;
    size_t lo = 0, hi = f->m->n_tensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(f->m->tensors[f->order[mid]].name, name);
        if (c == 0) return (long)f->order[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}

static int ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), k = strlen(tail);
    return n >= k && strcmp(s + n - k, tail) == 0;
}

/* ===== Planning one module ===== */

typedef struct planner {
    lb_model *m;
    lb__hfq *q;
    finder f;
    const char *what;
    int modelopt;
    uint64_t mo_group;       /* ModelOpt NVFP4 group size (config), 16 by default */
    const char *mo_algo;     /* ModelOpt quant_algo */
    const lb__json *mo_layers; /* MIXED_PRECISION: quantized_layers {module: {quant_algo, group_size}} */
    lb__json *mo_file;       /* hf_quant_config.json, owned */
} planner;

static void hide(planner *p, long i)
{
    if (i >= 0) p->f.hidden[i] = 1;
}

static lb_status take(planner *p, const char *module, const char *suffix, int required, lb_tensor *out, long *idx)
{
    long i = find(&p->f, module, suffix);
    if (idx) *idx = i;
    if (i < 0) {
        if (required)
            return lb__fail(LB_ERR_PARSE, "%s: module '%s' is quantized (it has a weight_scale) but has no %s.%s", p->what,
                            module, module, suffix);
        return LB_OK;
    }
    *out = p->m->tensors[i];
    hide(p, i);
    return LB_OK;
}

/* Granularity from the args and the logical shape. */
static void set_blocks(lb__hfq_tensor *t, const lb__hfq_qargs *a)
{
    switch (a->strategy) {
    case S_TENSOR: t->brows = t->rows, t->bcols = t->cols; break;
    case S_CHANNEL: t->brows = 1, t->bcols = t->cols; break;
    case S_GROUP: case S_TENSOR_GROUP: t->brows = 1, t->bcols = a->group; break;
    case S_BLOCK: t->brows = a->bh, t->bcols = a->bw; break;
    case S_TOKEN: t->brows = t->bcols = 0; break; /* refused by plan_ct before */
    }
}

static lb_status plan_ct(planner *p, const char *module, const group *g, lb__hfq_tensor *t, long *codes_at)
{
    const char *fmt = g->format;
    const lb__hfq_qargs *a = &g->w;
    lb_status st;
    long shape_at = -1;
    t->math = LB__HFQ_M_CT;
    t->bits = a->bits;
    if (a->strategy == S_TOKEN)
        return lb__fail(LB_ERR_PARSE, "%s: module '%s': weights cannot have strategy \"token\"", p->what, module);
    if (strcmp(fmt, "pack-quantized") == 0) {
        if (a->is_float) return lb__fail(LB_ERR_PARSE, "%s: module '%s': pack-quantized holds integer codes, but the "
                                                       "group's weights are float", p->what, module);
        lb_tensor shape;
        if ((st = take(p, module, "weight_packed", 1, &t->codes, codes_at)) != LB_OK) return st;
        if ((st = take(p, module, "weight_shape", 1, &shape, &shape_at)) != LB_OK) return st;
        if (shape.n_elements != 2 || (shape.dtype != LB_DT_I64 && shape.dtype != LB_DT_I32))
            return lb__fail(LB_ERR_PARSE, "tensor '%s': expected 2 integers [out, in], found %llu %s", shape.name,
                            (unsigned long long)shape.n_elements, lb__dtype_name(shape.dtype));
        float v[2];
        if ((st = lb_dtype_to_f32(shape.dtype, shape.data, 2, v)) != LB_OK) return st;
        if (!(v[0] >= 1 && v[1] >= 1 && v[0] <= 4294967296.0f && v[1] <= 4294967296.0f))
            return lb__fail(LB_ERR_PARSE, "tensor '%s': weight shape [%g, %g] is not two positive sizes", shape.name,
                            (double)v[0], (double)v[1]);
        t->rows = (uint64_t)v[0], t->cols = (uint64_t)v[1];
        t->elem = LB__HFQ_E_PACKED;
        t->zp_packed = !a->symmetric && (a->strategy == S_GROUP || a->strategy == S_CHANNEL);
    } else if (strcmp(fmt, "float-quantized") == 0 || strcmp(fmt, "naive-quantized") == 0 ||
               strcmp(fmt, "int-quantized") == 0 || strcmp(fmt, "mxfp8-quantized") == 0) {
        if ((st = take(p, module, "weight", 1, &t->codes, codes_at)) != LB_OK) return st;
        if (a->bits != 8) return lb__fail(LB_ERR_UNSUPPORTED, "%s: module '%s': %s with %d-bit weights is not read "
                                                              "(8-bit codes only)", p->what, module, fmt, a->bits);
        t->elem = a->is_float ? LB__HFQ_E_FP8 : LB__HFQ_E_INT8;
        t->rows = t->codes.n_dims == 2 ? t->codes.shape[0] : 0, t->cols = t->codes.n_dims == 2 ? t->codes.shape[1] : 0;
        t->e8m0 = strcmp(fmt, "mxfp8-quantized") == 0;
    } else if (strcmp(fmt, "nvfp4-pack-quantized") == 0 || strcmp(fmt, "mxfp4-pack-quantized") == 0) {
        if (!a->is_float || a->bits != 4)
            return lb__fail(LB_ERR_PARSE, "%s: module '%s': %s holds fp4 codes, but the group's weights are %s%d", p->what,
                            module, fmt, a->is_float ? "float" : "int", a->bits);
        if ((st = take(p, module, "weight_packed", 1, &t->codes, codes_at)) != LB_OK) return st;
        t->elem = LB__HFQ_E_FP4;
        t->rows = t->codes.n_dims == 2 ? t->codes.shape[0] : 0, t->cols = t->codes.n_dims == 2 ? 2 * t->codes.shape[1] : 0;
        t->e8m0 = fmt[1] == 'x';
        if (!t->e8m0) {
            t->math = LB__HFQ_M_CT_FP4G;
            if ((st = take(p, module, "weight_global_scale", a->strategy == S_TENSOR_GROUP, &t->global, NULL)) != LB_OK)
                return st;
            t->has_global = t->global.name != NULL;
        }
    } else {
        return lb__fail(LB_ERR_UNSUPPORTED, "%s: module '%s': format \"%s\" is not one lowbit reads (float-quantized, "
                        "int-quantized, naive-quantized, pack-quantized, nvfp4-pack-quantized, mxfp4-pack-quantized, "
                        "mxfp8-quantized)", p->what, module, fmt);
    }
    if ((st = take(p, module, "weight_scale", 1, &t->scale, NULL)) != LB_OK) return st;
    long zp_at;
    if ((st = take(p, module, "weight_zero_point", 0, &t->zero_point, &zp_at)) != LB_OK) return st;
    t->has_zp = zp_at >= 0;
    if (a->symmetric && t->has_zp)
        return lb__fail(LB_ERR_PARSE, "%s: module '%s' has a weight_zero_point but its group's weights are symmetric",
                        p->what, module);
    if (!a->symmetric && !t->has_zp)
        return lb__fail(LB_ERR_PARSE, "%s: module '%s': asymmetric weights need %s.weight_zero_point", p->what, module,
                        module);
    if (!t->zp_packed && t->has_zp && t->elem == LB__HFQ_E_PACKED)
        return lb__fail(LB_ERR_UNSUPPORTED, "%s: module '%s': asymmetric pack-quantized weights are read for the group "
                                            "and channel strategies only", p->what, module);
    if (find(&p->f, module, "weight_g_idx") >= 0)
        return lb__fail(LB_ERR_UNSUPPORTED, "%s: module '%s' has a weight_g_idx (group act-order), which "
                                            "compressed-tensors 0.20 and vLLM removed; lowbit does not read it", p->what, module);
    /* the dtype the package multiplies in: the scale's, or bf16 where it converts the scale first (fp8, MX) */
    t->scale_dtype = t->e8m0 || t->scale.dtype == LB_DT_F8_E4M3 ? LB_DT_BF16 : t->scale.dtype;
    if (t->has_global && t->math != LB__HFQ_M_CT_FP4G)
        return lb__fail(LB_ERR_UNSUPPORTED, "%s: module '%s': a weight_global_scale outside NVFP4", p->what, module);
    if ((a->strategy == S_GROUP || a->strategy == S_TENSOR_GROUP) && t->cols % a->group)
        return lb__fail(LB_ERR_PARSE, "%s: module '%s': %llu input columns are not whole groups of %llu (the package "
                        "refuses them too)", p->what, module, (unsigned long long)t->cols, (unsigned long long)a->group);
    set_blocks(t, a);
    return lb__hfq_check(t, module);
}

/* A module's quant_algo and group size: its quantized_layers entry under
 * MIXED_PRECISION, else the config's. */
static lb_status modelopt_layer(planner *p, const char *module, const char **algo, uint64_t *gsize)
{
    *algo = p->mo_algo, *gsize = p->mo_group;
    if (!p->mo_layers) return LB_OK;
    const lb__json *l = lb__json_get(p->mo_layers, module);
    if (!l || l->type != LB_JSON_OBJECT)
        return lb__fail(LB_ERR_PARSE, "%s: module '%s' has quantized tensors but no quantized_layers entry (MIXED_PRECISION)",
                        p->what, module);
    *algo = lb__json_str(l, "quant_algo");
    if (!*algo) return lb__fail(LB_ERR_PARSE, "%s: quantized_layers.%s has no \"quant_algo\"", p->what, module);
    const lb__json *g = lb__json_get(l, "group_size");
    if (g && g->type != LB_JSON_NULL && (!lb__json_u64(g, gsize) || *gsize == 0 || *gsize > 4096))
        return lb__fail(LB_ERR_PARSE, "%s: quantized_layers.%s.group_size must be a positive integer", p->what, module);
    if (!g || g->type == LB_JSON_NULL) *gsize = strstr(*algo, "NVFP4") ? 16 : strcmp(*algo, "MXFP8") == 0 ? 32 : 0;
    return LB_OK;
}

static lb_status plan_modelopt(planner *p, const char *module, lb__hfq_tensor *t, long *codes_at)
{
    lb_status st;
    const char *algo;
    uint64_t gsize;
    if ((st = modelopt_layer(p, module, &algo, &gsize)) != LB_OK) return st;
    t->math = LB__HFQ_M_F32;
    if ((st = take(p, module, "weight", 1, &t->codes, codes_at)) != LB_OK) return st;
    if ((st = take(p, module, "weight_scale", 1, &t->scale, NULL)) != LB_OK) return st;
    long g_at;
    if ((st = take(p, module, "weight_scale_2", 0, &t->global, &g_at)) != LB_OK) return st;
    t->has_global = g_at >= 0;
    if (find(&p->f, module, "pre_quant_scale") >= 0)
        return lb__fail(LB_ERR_UNSUPPORTED, "%s: module '%s' has a pre_quant_scale (ModelOpt AWQ / SmoothQuant "
                                            "export for TensorRT-LLM); lowbit reads ModelOpt FP8, NVFP4 and MXFP8", p->what, module);
    const lb_tensor *c = &t->codes, *s = &t->scale;
    if (c->n_dims != 2) return lb__fail(LB_ERR_PARSE, "tensor '%s': expected a 2-D weight", c->name);
    t->rows = c->shape[0];
    if (c->dtype == LB_DT_F8_E4M3 && s->dtype == LB_DT_U8) { /* MXFP8 */
        t->elem = LB__HFQ_E_FP8, t->e8m0 = 1, t->cols = c->shape[1], t->brows = 1, t->bcols = 32;
    } else if (c->dtype == LB_DT_F8_E4M3) { /* FP8: per tensor, per channel, or 128x128 blocks */
        t->elem = LB__HFQ_E_FP8, t->cols = c->shape[1];
        if (s->n_elements == 1) t->brows = t->rows, t->bcols = t->cols;
        else if (s->n_elements == t->rows && (s->n_dims == 1 || (s->n_dims == 2 && s->shape[1] == 1)))
            t->brows = 1, t->bcols = t->cols;
        else t->brows = 128, t->bcols = 128;
    } else if (c->dtype == LB_DT_U8 && s->dtype == LB_DT_F8_E4M3 && t->has_global) { /* NVFP4 */
        if (!gsize) gsize = 16;
        t->elem = LB__HFQ_E_FP4, t->cols = 2 * c->shape[1], t->brows = 1, t->bcols = gsize;
        if (t->cols % gsize)
            return lb__fail(LB_ERR_PARSE, "%s: module '%s': %llu input columns are not whole NVFP4 groups of %llu",
                            p->what, module, (unsigned long long)t->cols, (unsigned long long)gsize);
    } else {
        return lb__fail(LB_ERR_UNSUPPORTED, "%s: module '%s': a ModelOpt weight of %s with %s scales%s is not a format "
                        "lowbit reads (FP8, NVFP4, MXFP8; INT4 AWQ targets TensorRT-LLM)", p->what, module, lb__dtype_name(c->dtype),
                        lb__dtype_name(s->dtype), t->has_global ? " and weight_scale_2" : "");
    }
    t->scale_dtype = LB_DT_F32;
    char why[160];
    lb__hfq_modelopt_act(algo, gsize, &t->act, why, sizeof why);
    if (why[0]) t->act.unsupported = keep_str(p->q, why);
    return lb__hfq_check(t, module);
}

/* ===== The config ===== */

static lb_status read_groups(lb__hfq *q, const lb__json *qc, const char *what, group **out, size_t *n_out)
{
    const lb__json *cg = lb__json_get(qc, "config_groups");
    *out = NULL, *n_out = 0;
    if (!cg || cg->type != LB_JSON_OBJECT || cg->len == 0)
        return lb__fail(LB_ERR_PARSE, "%s: quantization_config has no \"config_groups\" object", what);
    if (cg->len > LB__HFQ_MAX_GROUPS)
        return lb__fail(LB_ERR_PARSE, "%s: %zu config groups (at most %d)", what, cg->len, LB__HFQ_MAX_GROUPS);
    const char *top = lb__json_str(qc, "format");
    group *g = calloc(cg->len, sizeof *g);
    if (!g) return lb__fail(LB_ERR_NOMEM, "out of memory");
    lb_status st = LB_OK;
    for (size_t i = 0; i < cg->len && st == LB_OK; i++) {
        const lb__json *v = &cg->items[i];
        char w[256];
        snprintf(w, sizeof w, "%s: config_groups.%.64s", what, cg->keys[i]);
        if (v->type != LB_JSON_OBJECT) {
            st = lb__fail(LB_ERR_PARSE, "%s: not an object", w);
            break;
        }
        g[i].name = keep_str(q, cg->keys[i]);
        const char *f = lb__json_str(v, "format");
        if (!f || strcmp(f, "mixed-precision") == 0) f = top;
        if (!f || strcmp(f, "mixed-precision") == 0) {
            st = lb__fail(LB_ERR_PARSE, "%s: no \"format\" (the config's is \"%s\")", w, top ? top : "absent");
            break;
        }
        g[i].format = keep_str(q, f);
        if (!g[i].name || !g[i].format) st = lb__fail(LB_ERR_NOMEM, "out of memory");
        g[i].targets = lb__json_get(v, "targets");
        char tw[300];
        snprintf(tw, sizeof tw, "%s.targets", w);
        if (st == LB_OK) st = lb__hfq_check_string_list(g[i].targets, tw);
        const lb__json *wa = lb__json_get(v, "weights");
        if (st == LB_OK && wa && wa->type != LB_JSON_NULL) {
            snprintf(tw, sizeof tw, "%s.weights", w);
            st = lb__hfq_parse_args(wa, tw, &g[i].w);
            g[i].has_w = 1;
        }
        if (st == LB_OK)
            {
                char why[768];
                lb__hfq_ct_act(lb__json_get(v, "input_activations"), lb__json_get(v, "output_activations"), w, &g[i].act,
                               why, sizeof why);
                if (why[0]) g[i].act.unsupported = keep_str(q, why);
            }
    }
    if (st != LB_OK) {
        free(g);
        return st;
    }
    *out = g, *n_out = cg->len;
    return LB_OK;
}

static lb_status summarize_ct(lb__hfq *q, const lb__json *qc, const group *g, size_t n)
{
    q->groups = calloc(n, sizeof *q->groups);
    if (!q->groups) return lb__fail(LB_ERR_NOMEM, "out of memory");
    const lb__json *cg = lb__json_get(qc, "config_groups");
    for (size_t i = 0; i < n; i++) {
        char w[160], in[160];
        lb__hfq_describe(&g[i].w, g[i].has_w, w, sizeof w);
        lb__hfq_qargs ia;
        const lb__json *ij = lb__json_get(&cg->items[i], "input_activations");
        int has_in = ij && ij->type == LB_JSON_OBJECT && lb__hfq_parse_args(ij, "input_activations", &ia) == LB_OK;
        const lb__json *dyn = ij ? lb__json_get(ij, "dynamic") : NULL;
        lb__hfq_describe(&ia, has_in, in, sizeof in);
        if (has_in)
            strncat(in, dyn && dyn->type == LB_JSON_TRUE ? " dynamic" : dyn && dyn->type == LB_JSON_STRING ? " dynamic local"
                                                                                                   : " static",
                    sizeof in - strlen(in) - 1);
        q->groups[i].name = g[i].name, q->groups[i].format = g[i].format;
        q->groups[i].weights = keep_str(q, w), q->groups[i].input = keep_str(q, in);
    }
    q->info.groups = q->groups, q->info.n_groups = n;
    return LB_OK;
}

/* ModelOpt's config: quant_algo and group size, from config.json's
 * quantization_config or hf_quant_config.json's "quantization". */
static lb_status modelopt_config(lb__hfq *q, const lb__json *qc, const char *dir, planner *p)
{
    lb__json *file = NULL;
    const lb__json *src = qc;
    char *path = lb__path_join(dir, "hf_quant_config.json");
    if (!path) return lb__fail(LB_ERR_NOMEM, "out of memory");
    struct stat sb;
    lb_status st = LB_OK;
    if (stat(path, &sb) == 0) { /* its "quantization" has group_size and kv_cache_quant_algo; config.json's may not */
        st = lb__json_read_file(path, 16u << 20, &file);
        if (st == LB_OK) src = lb__json_get(file, "quantization");
        if (st == LB_OK && (!src || src->type != LB_JSON_OBJECT))
            st = lb__fail(LB_ERR_PARSE, "%s: no \"quantization\" object", path);
    }
    free(path);
    const char *algo = src ? lb__json_str(src, "quant_algo") : NULL;
    if (st == LB_OK && !algo) st = lb__fail(LB_ERR_PARSE, "%s: ModelOpt config without \"quant_algo\"", p->what);
    uint64_t gs = 16;
    const lb__json *g = src ? lb__json_get(src, "group_size") : NULL;
    if (st == LB_OK && g && g->type != LB_JSON_NULL && (!lb__json_u64(g, &gs) || gs == 0 || gs > 4096))
        st = lb__fail(LB_ERR_PARSE, "%s: ModelOpt \"group_size\" must be a positive integer", p->what);
    if (st == LB_OK && (strcmp(algo, "W4A16_AWQ") == 0 || strcmp(algo, "INT4_AWQ") == 0 ||
                        strcmp(algo, "W4A8_AWQ") == 0 || strcmp(algo, "W8A8_SQ_PER_CHANNEL") == 0))
        st = lb__fail(LB_ERR_UNSUPPORTED, "%s: ModelOpt quant_algo %s (a TensorRT-LLM export) is not read; lowbit reads "
                                          "FP8, FP8_PER_CHANNEL_PER_TOKEN, FP8_PB_WO, NVFP4, W4A16_NVFP4, MXFP8 and "
                                          "MIXED_PRECISION of those", p->what, algo);
    if (st == LB_OK && strcmp(algo, "MIXED_PRECISION") == 0) {
        /* per-layer algorithms and group sizes (the config's group_size is not theirs) */
        p->mo_layers = lb__json_get(src, "quantized_layers");
        if (!p->mo_layers || p->mo_layers->type != LB_JSON_OBJECT)
            st = lb__fail(LB_ERR_PARSE, "%s: ModelOpt MIXED_PRECISION without a \"quantized_layers\" object", p->what);
    }
    if (st == LB_OK) {
        p->mo_group = gs;
        p->mo_algo = keep_str(q, algo);
        q->info.format = keep_str(q, algo);
        const char *kv = lb__json_str(src, "kv_cache_quant_algo");
        const lb__json *kvs = kv ? NULL : lb__json_get(src, "kv_cache_scheme"); /* newer config.json-only exports */
        int64_t kb = 0;
        const char *kt = kvs && kvs->type == LB_JSON_OBJECT ? lb__json_str(kvs, "type") : NULL;
        if (kt && lb__json_get(kvs, "num_bits") && lb__json_i64(lb__json_get(kvs, "num_bits"), &kb) && kb == 8 &&
            strcmp(kt, "float") == 0)
            kv = "FP8";
        char kvd[64];
        snprintf(kvd, sizeof kvd, "%s", kv ? kv : "none");
        q->info.kv_cache = keep_str(q, kvd);
        q->kv.fp8 = kv && strcmp(kv, "FP8") == 0;
        if (kv && !q->kv.fp8 && strcmp(kv, "none") != 0) {
            char why[128];
            snprintf(why, sizeof why, "ModelOpt kv_cache_quant_algo %.40s is not simulated (FP8 is)", kv);
            q->kv.unsupported = keep_str(q, why);
        }
        q->groups = calloc(1, sizeof *q->groups);
        if (!q->groups || !q->info.format || !q->info.kv_cache) st = lb__fail(LB_ERR_NOMEM, "out of memory");
    }
    if (st == LB_OK) {
        int nv = strstr(algo, "NVFP4") != NULL, mx = strcmp(algo, "MXFP8") == 0;
        char w[96];
        snprintf(w, sizeof w, nv ? "fp4_e2m1 group %llu + tensor scale" : mx ? "fp8_e4m3 group 32 (E8M0 scales)"
                                                                             : "fp8_e4m3", (unsigned long long)gs);
        q->groups[0].name = q->info.format, q->groups[0].format = q->info.format;
        q->groups[0].weights = keep_str(q, w);
        q->groups[0].input = keep_str(q, strncmp(algo, "W4A16", 5) == 0 ? "none" : nv ? "fp4_e2m1 (static tensor scale)"
                                                                               : "fp8_e4m3");
        q->info.groups = q->groups, q->info.n_groups = 1;
    }
    p->mo_file = file; /* quantized_layers lives in it: freed after planning */
    return st;
}

/* Tensors the engines read beside the weights: hidden, counted. */
static int engine_scale(const char *name)
{
    static const char *const tails[] = {".input_scale", ".input_global_scale", ".input_zero_point", ".output_scale",
                                        ".k_scale", ".v_scale", ".q_scale", ".prob_scale", ".weight_global_scale",
                                        ".weight_scale_2", ".weight_shape"};
    for (size_t i = 0; i < sizeof tails / sizeof *tails; i++)
        if (ends_with(name, tails[i])) return 1;
    return 0;
}

/* A scale the engine reads as one number: one element of a float dtype
 * (its value is checked where it is used). */
static lb_status want_scalar(const lb_tensor *t, const char *why)
{
    if (t->n_elements == 1 && (t->dtype == LB_DT_F32 || t->dtype == LB_DT_BF16 || t->dtype == LB_DT_F16) &&
        t->n_dims <= 2)
        return LB_OK;
    char shape[64] = "[";
    for (int d = 0; d < t->n_dims && d < 4; d++)
        snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%llu", d ? ", " : "",
                 (unsigned long long)t->shape[d]);
    strncat(shape, "]", sizeof shape - strlen(shape) - 1);
    return lb__fail(LB_ERR_PARSE, "tensor '%s': expected one f32, bf16 or f16 value (%s), found %s %s", t->name, why,
                    lb__dtype_name(t->dtype), shape);
}

/* The input scale tensor of a module whose activations are static or
 * local: required, one value. (Its tail is hidden by engine_scale.) */
static lb_status plan_act(planner *p, const char *module, lb__hfq_tensor *t)
{
    lb__hfq_act *a = &t->act;
    if (a->mode != LB__HFQ_A_STATIC && a->mode != LB__HFQ_A_LOCAL) return LB_OK;
    const char *tail = a->mode == LB__HFQ_A_LOCAL && !p->modelopt ? "input_global_scale" : "input_scale";
    long i = find(&p->f, module, tail);
    if (i < 0) {
        if (a->unsupported) return LB_OK; /* not simulated anyway: reported as such */
        return lb__fail(LB_ERR_PARSE, "%s: module '%s' has %s input activations but no %s.%s", p->what, module,
                        a->mode == LB__HFQ_A_STATIC ? "static" : "NVFP4", module, tail);
    }
    a->scale = p->m->tensors[i];
    a->has_scale = 1;
    a->scale_divisor = a->mode == LB__HFQ_A_LOCAL && !p->modelopt;
    return want_scalar(&a->scale, a->scale_divisor ? "the activations' global scale, a divisor"
                                                   : "the activations' static scale");
}

/* The KV cache's per-layer scales (compressed-tensors
 * model.layers.N.self_attn.{k,v}_scale, ModelOpt ...self_attn.{k,v}_proj.{k,v}_scale). */
static lb_status plan_kv(planner *p)
{
    lb__hfq_kv *kv = &p->q->kv;
    uint32_t n = p->m->arch.n_layers;
    if (!kv->fp8) return LB_OK;
    if (n == 0 || n > p->m->n_tensors)
        return lb__fail(LB_ERR_PARSE, "%s: an FP8 KV cache over %u layers and %zu tensors", p->what, n, p->m->n_tensors);
    kv->k = calloc(n, sizeof *kv->k), kv->v = calloc(n, sizeof *kv->v);
    if (!kv->k || !kv->v) return lb__fail(LB_ERR_NOMEM, "out of memory");
    kv->n_layers = n;
    for (uint32_t l = 0; l < n; l++)
        for (int w = 0; w < 2; w++) {
            char module[96];
            snprintf(module, sizeof module, p->modelopt ? "model.layers.%u.self_attn.%c_proj" : "model.layers.%u.self_attn",
                     l, w ? 'v' : 'k');
            long i = find(&p->f, module, w ? "v_scale" : "k_scale");
            if (i < 0) continue; /* the evaluation names a missing one */
            lb_tensor *t = w ? &kv->v[l] : &kv->k[l];
            *t = p->m->tensors[i];
            lb_status st = want_scalar(t, "a KV cache scale");
            if (st != LB_OK) return st;
        }
    return LB_OK;
}

static lb_status plan_all(planner *p, const lb__json *qc, const group *g, size_t ng)
{
    lb_model *m = p->m;
    lb__hfq *q = p->q;
    size_t n_mod = 0;
    for (size_t i = 0; i < m->n_tensors; i++) n_mod += ends_with(m->tensors[i].name, ".weight_scale");
    q->tensors = calloc(n_mod ? n_mod : 1, sizeof *q->tensors);
    if (!q->tensors) return lb__fail(LB_ERR_NOMEM, "out of memory");
    const lb__json *ignore = qc ? lb__json_get(qc, "ignore") : NULL;
    char iw[300];
    snprintf(iw, sizeof iw, "%s: quantization_config.ignore", p->what);
    lb_status st = p->modelopt ? LB_OK : lb__hfq_check_string_list(ignore, iw);
    size_t *per_group = calloc(ng ? ng : 1, sizeof *per_group);
    if (!per_group) return lb__fail(LB_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < m->n_tensors && st == LB_OK; i++) {
        const char *name = m->tensors[i].name;
        if (!ends_with(name, ".weight_scale")) continue;
        char module[480];
        size_t len = strlen(name) - strlen(".weight_scale");
        if (len == 0 || len >= sizeof module) {
            st = lb__fail(LB_ERR_PARSE, "%s: tensor name '%.80s' is not <module>.weight_scale", p->what, name);
            break;
        }
        memcpy(module, name, len), module[len] = 0;
        lb__hfq_tensor *t = &q->tensors[q->n_tensors];
        long codes_at = -1;
        if (p->modelopt) {
            st = plan_modelopt(p, module, t, &codes_at);
        } else {
            int ignored = lb__hfq_list_matches(ignore, module, iw, &st);
            if (st != LB_OK) break;
            if (ignored) {
                st = lb__fail(LB_ERR_PARSE, "%s: module '%s' is in \"ignore\" but has quantized tensors", p->what,
                              module);
                break;
            }
            size_t k = 0;
            for (; k < ng && st == LB_OK; k++)
                if (g[k].has_w && lb__hfq_list_matches(g[k].targets, module, p->what, &st)) break;
            if (st != LB_OK) break;
            if (k == ng) {
                st = lb__fail(LB_ERR_PARSE, "%s: module '%s' has quantized tensors but no config group with weights "
                                            "targets it", p->what, module);
                break;
            }
            per_group[k]++;
            st = plan_ct(p, module, &g[k], t, &codes_at);
            t->act = g[k].act;
        }
        if (st == LB_OK) st = plan_act(p, module, t);
        if (st != LB_OK) break;
        p->f.hidden[codes_at] = 0; /* the codes' slot becomes the logical weight */
        p->f.logical[codes_at] = (long)q->n_tensors;
        q->n_tensors++;
    }
    for (size_t k = 0; st == LB_OK && k < ng && q->groups; k++) q->groups[k].modules = per_group[k];
    if (st == LB_OK && p->modelopt && q->groups) q->groups[0].modules = q->n_tensors;
    free(per_group);
    for (size_t i = 0; st == LB_OK && i < m->n_tensors; i++)
        if (p->f.logical[i] < 0 && engine_scale(m->tensors[i].name)) p->f.hidden[i] = 1;
    return st;
}

/* Rewrites m->tensors: logical weights in their codes' place, components out. */
static lb_status rewrite(planner *p)
{
    lb_model *m = p->m;
    lb__hfq *q = p->q;
    size_t w = 0, hidden = 0;
    for (size_t i = 0; i < m->n_tensors; i++) {
        if (p->f.hidden[i]) {
            hidden++;
            continue;
        }
        lb_tensor t = m->tensors[i];
        long k = p->f.logical[i];
        if (k >= 0) {
            lb__hfq_tensor *h = &q->tensors[k];
            size_t n = strlen(t.name);
            const char *name = t.name;
            if (ends_with(t.name, "_packed")) {
                char buf[512];
                snprintf(buf, sizeof buf, "%.*s", (int)(n - strlen("_packed")), t.name);
                if (!(name = keep_str(q, buf))) return lb__fail(LB_ERR_NOMEM, "out of memory");
            }
            uint64_t bytes = h->codes.n_bytes + h->scale.n_bytes + (h->has_zp ? h->zero_point.n_bytes : 0) +
                             (h->has_global ? h->global.n_bytes : 0);
            memset(&t, 0, sizeof t);
            t.name = t.file_name = name;
            t.dtype = LB_DT_QUANTIZED;
            t.n_dims = 2, t.shape[0] = h->rows, t.shape[1] = h->cols;
            t.n_elements = h->rows * h->cols, t.n_bytes = bytes;
            t.data = h;
        }
        m->tensors[w++] = t;
    }
    m->n_tensors = w;
    q->info.quantized = q->n_tensors, q->info.hidden = hidden;
    return LB_OK;
}

lb_status lb__hfq_apply(lb_model *m, const lb__json *cfg, const char *dir, const char *what)
{
    const lb__json *qc = lb__json_get(cfg, "quantization_config");
    const char *method = qc ? lb__json_str(qc, "quant_method") : NULL;
    char *hfq_path = dir ? lb__path_join(dir, "hf_quant_config.json") : NULL;
    struct stat sb;
    int has_hfq_file = hfq_path && stat(hfq_path, &sb) == 0;
    free(hfq_path);
    if (qc && qc->type != LB_JSON_OBJECT) return lb__fail(LB_ERR_PARSE, "%s: \"quantization_config\" is not an object", what);
    if (!qc && !has_hfq_file) return LB_OK;
    if (qc && !method) return lb__fail(LB_ERR_PARSE, "%s: quantization_config has no \"quant_method\"", what);
    int modelopt = method ? strcmp(method, "modelopt") == 0 : 1;
    if (method && !modelopt && strcmp(method, "compressed-tensors") != 0)
        return lb__fail(LB_ERR_UNSUPPORTED, "%s: quant_method \"%s\" is not one lowbit reads (compressed-tensors, "
                                            "modelopt)", what, method);
    if (!modelopt) {
        const lb__json *sp = lb__json_get(qc, "sparsity_config"), *tr = lb__json_get(qc, "transform_config");
        if ((sp && sp->type == LB_JSON_OBJECT && sp->len) || (tr && tr->type == LB_JSON_OBJECT && tr->len))
            return lb__fail(LB_ERR_UNSUPPORTED, "%s: a %s is not read (lowbit reads quantization only)", what,
                            sp && sp->len ? "sparsity_config" : "transform_config");
    }
    lb__hfq *q = calloc(1, sizeof *q);
    if (!q) return lb__fail(LB_ERR_NOMEM, "out of memory");
    planner p = {.m = m, .q = q, .what = what, .modelopt = modelopt, .mo_group = 16};
    size_t n = m->n_tensors;
    p.f.m = m;
    p.f.order = malloc((n + 1) * sizeof *p.f.order);
    p.f.hidden = calloc(n + 1, 1);
    p.f.logical = malloc((n + 1) * sizeof *p.f.logical);
    group *g = NULL;
    size_t ng = 0;
    lb_status st = p.f.order && p.f.hidden && p.f.logical ? LB_OK : lb__fail(LB_ERR_NOMEM, "out of memory");
    if (st == LB_OK) {
        for (size_t i = 0; i < n; i++) p.f.order[i] = i, p.f.logical[i] = -1;
        sort_m = m;
        qsort(p.f.order, n, sizeof *p.f.order, cmp_idx);
        sort_m = NULL;
        q->info.method = modelopt ? "modelopt" : "compressed-tensors";
    }
    if (st == LB_OK && modelopt) st = modelopt_config(q, qc, dir ? dir : ".", &p);
    if (st == LB_OK && !modelopt) {
        st = read_groups(q, qc, what, &g, &ng);
        const char *fmt = lb__json_str(qc, "format");
        if (st == LB_OK) q->info.format = keep_str(q, fmt ? fmt : ng ? g[0].format : "?");
        const lb__json *kv = lb__json_get(qc, "kv_cache_scheme");
        char kvd[160] = "none";
        lb__hfq_qargs ka;
        if (st == LB_OK && kv && kv->type == LB_JSON_OBJECT && lb__hfq_parse_args(kv, "kv_cache_scheme", &ka) == LB_OK) {
            lb__hfq_describe(&ka, 1, kvd, sizeof kvd);
            const lb__json *dyn = lb__json_get(kv, "dynamic");
            q->kv.fp8 = ka.is_float && ka.bits == 8 && ka.symmetric && ka.strategy == S_TENSOR &&
                        !(dyn && dyn->type == LB_JSON_TRUE);
            if (!q->kv.fp8) {
                char why[256];
                snprintf(why, sizeof why, "kv_cache_scheme %s%s is not simulated (fp8 per tensor, static scales is)",
                         kvd, dyn && dyn->type == LB_JSON_TRUE ? " dynamic" : "");
                q->kv.unsupported = keep_str(q, why);
            }
        } else if (st == LB_OK && kv && kv->type != LB_JSON_NULL) {
            q->kv.unsupported = keep_str(q, "kv_cache_scheme is not a QuantizationArgs object lowbit reads");
        }
        if (st == LB_OK) q->info.kv_cache = keep_str(q, kvd);
        if (st == LB_OK) st = summarize_ct(q, qc, g, ng);
    }
    if (st == LB_OK) st = plan_all(&p, qc, g, ng);
    if (st == LB_OK) st = plan_kv(&p);
    if (st == LB_OK) st = rewrite(&p);
    free(g), free(p.f.order), free(p.f.hidden), free(p.f.logical);
    lb__json_free(p.mo_file);
    if (st != LB_OK) {
        lb__hfq_free(q);
        return st;
    }
    m->hfq = q;
    return LB_OK;
}

const lb_model_quant *lb_model_quantization(const lb_model *m)
{
    return m && m->hfq ? &m->hfq->info : NULL;
}

const lb__hfq_kv *lb__hfq_kv_of(const lb_model *m)
{
    return m && m->hfq ? &m->hfq->kv : NULL;
}

const lb__hfq_tensor *lb__hfq_tensor_of(const lb_tensor *t)
{
    return t && t->dtype == LB_DT_QUANTIZED ? (const lb__hfq_tensor *)t->data : NULL;
}
