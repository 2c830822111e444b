/* The ModelOpt exporter (lb__exporter_modelopt): what TensorRT-LLM and
 * vLLM's "modelopt" quantization load. The driver (export.c) owns the
 * files; this says which tensors each qmodel entry becomes (the layouts of
 * modelopt_layout.c), the KV-cache scales, config.json's
 * quantization_config and hf_quant_config.json.
 *
 * The JSON follows nvidia-modelopt 0.47's export_hf_checkpoint exactly
 * (key order included): hf_quant_config.json from get_quant_config /
 * process_layer_quant_config, config.json's quantization_config from
 * convert_hf_quant_config_format. One algorithm for every quantized layer
 * gives that quant_algo and an exclude_modules summary; several give
 * MIXED_PRECISION with quantized_layers (as ModelOpt, without
 * exclude_modules: a layer not listed is not quantized). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export/exporter.h"
#include "export/modelopt.h"
#include "util/error.h"
#include "weights/engine_scales.h"

#define MO_NAME_MAX 512

static const char *const producer_name = "lowbit";

/* The module of a weight: its name without ".weight" (ModelOpt's layer
 * names); 0 if the name does not end so or is too long. */
static int module_of(const char *name, char *out, size_t size)
{
    size_t n = strlen(name);
    if (n < 8 || strcmp(name + n - 7, ".weight") != 0 || n - 7 >= size) return 0;
    memcpy(out, name, n - 7);
    out[n - 7] = '\0';
    return 1;
}

/* The algorithm of QUANTIZED entry e (check() has accepted every one). */
static lb_status algo_of(const lb_qentry *e, lb__mo_algo *a)
{
    const lb_tensor *t = e->tensor;
    return lb__mo_classify(t->name, &e->spec, &e->act, t->shape[0], t->shape[1], a);
}

/* Which algorithms the quantized entries use (a bit per lb__mo_algo) and
 * how many entries are quantized. */
static lb_status algos_used(const lb_qmodel *q, unsigned *mask, size_t *count)
{
    *mask = 0, *count = 0;
    for (size_t i = 0; i < lb_qmodel_count(q); i++) {
        lb_qentry e;
        lb_status st = lb_qmodel_entry(q, i, &e);
        if (st != LB_OK) return st;
        if (e.state != LB_QSTATE_QUANTIZED) continue;
        lb__mo_algo a;
        if ((st = algo_of(&e, &a)) != LB_OK) return st;
        *mask |= 1u << a, ++*count;
    }
    return LB_OK;
}

static int single_algo(unsigned mask, lb__mo_algo *a)
{
    for (int k = 0; k < LB_MO_ALGO_COUNT; k++)
        if (mask == 1u << k) return *a = (lb__mo_algo)k, 1;
    return 0;
}

static lb_status mo_check(const lb_qmodel *q)
{
    lb_format kv = lb_qmodel_kv(q);
    if (kv != LB_FMT_FP32 && kv != LB_FMT_FP8_E4M3)
        return lb__fail(LB_ERR_UNSUPPORTED, "a %s KV cache cannot be written in the modelopt format: its KV cache is "
                        "FP8 (--kv fp8) or 16-bit", lb_format_get(kv) ? lb_format_get(kv)->name : "?");
    for (size_t i = 0; i < lb_qmodel_count(q); i++) {
        lb_qentry e;
        lb_status st = lb_qmodel_entry(q, i, &e);
        if (st != LB_OK) return st;
        if (e.state != LB_QSTATE_QUANTIZED) continue;
        char module[MO_NAME_MAX];
        if (!module_of(e.tensor->name, module, sizeof module))
            return lb__fail(LB_ERR_UNSUPPORTED, "tensor '%s' is quantized, but the modelopt format quantizes only "
                            "a module's '.weight' (keep it 16-bit with --keep)", e.tensor->name);
        lb__mo_algo a;
        if ((st = algo_of(&e, &a)) != LB_OK) return st;
    }
    unsigned mask;
    size_t count;
    lb_status st = algos_used(q, &mask, &count);
    if (st != LB_OK) return st;
    if (count == 0)
        return lb__fail(LB_ERR_UNSUPPORTED, "no tensor is quantized: the modelopt format describes a quantized "
                        "model (choose a --scheme or a --rule)");
    return LB_OK;
}

/* ----- tensors ----- */

/* A 16-bit (or fp32) tensor in the qmodel's output dtype. */
static lb_status emit_plain(const lb_qmodel *q, const lb_tensor *t, const float *values, lb__emit_fn emit,
                            void *sink)
{
    lb_dtype dt = lb_qmodel_dtype(q);
    const lb_dtype_info *di = lb_dtype_get(dt);
    uint64_t bytes;
    lb_status st = lb_dtype_bytes(dt, t->n_elements, &bytes);
    if (st != LB_OK) return st;
    if (t->n_dims < 0 || t->n_dims > 4)
        return lb__fail(LB_ERR_UNSUPPORTED, "tensor '%s' has %d dimensions; the writer takes up to 4", t->name,
                        t->n_dims);
    void *buf = values ? malloc(bytes ? bytes : 1) : NULL; /* no values: describing (exporter.h) */
    if (values && !buf) return lb__fail(LB_ERR_NOMEM, "out of memory for tensor '%s' (%llu bytes)", t->name,
                                        (unsigned long long)bytes);
    if (values) st = lb_dtype_from_f32(dt, values, t->n_elements, buf);
    if (st == LB_OK) {
        lb__out_tensor o = {.name = t->name, .dtype = di->st_name, .n_dims = t->n_dims, .data = buf, .bytes = bytes};
        for (int d = 0; d < t->n_dims; d++) o.shape[d] = t->shape[d];
        st = emit(sink, &o);
    }
    free(buf);
    return st;
}

/* The input range ModelOpt writes for entry i: the largest over the layers
 * of its fused group under the same algorithm (ModelOpt unifies input_amax
 * across q/k/v and gate/up; they read the same input, so lowbit's
 * calibration gives them one range anyway). */
static lb_status group_input_amax(const lb_qmodel *q, size_t i, const lb_qentry *e, lb__mo_algo a, float *out)
{
    *out = e->input_amax;
    if (e->fused_group < 0) return LB_OK;
    for (size_t j = 0; j < lb_qmodel_count(q); j++) {
        lb_qentry o;
        lb_status st = lb_qmodel_entry(q, j, &o);
        if (st != LB_OK) return st;
        if (j == i || o.state != LB_QSTATE_QUANTIZED || o.fused_group != e->fused_group) continue;
        lb__mo_algo b;
        if (algo_of(&o, &b) != LB_OK || b != a) continue;
        if (o.input_amax > *out) *out = o.input_amax;
    }
    return LB_OK;
}

static lb_status mo_tensor(const lb_qmodel *q, size_t i, const float *values, const lb_qtensor_view *qv,
                           lb__emit_fn emit, void *sink)
{
    lb_qentry e;
    lb_status st = lb_qmodel_entry(q, i, &e);
    if (st != LB_OK) return st;
    if (e.state != LB_QSTATE_QUANTIZED) return emit_plain(q, e.tensor, values, emit, sink);
    if (!qv) return lb__fail(LB_ERR_ARG, "tensor '%s': no quantized tensor to write", e.tensor->name);
    char module[MO_NAME_MAX];
    if (!module_of(e.tensor->name, module, sizeof module))
        return lb__fail(LB_ERR_UNSUPPORTED, "tensor '%s' is not a module's weight", e.tensor->name);
    lb__mo_algo a;
    if ((st = algo_of(&e, &a)) != LB_OK) return st;
    float amax = 0;
    if (lb__mo_algo_input_scale(a) && (st = group_input_amax(q, i, &e, a, &amax)) != LB_OK) return st;
    /* FP8's input scale is the one the runner evaluated: amax / 448 rounded
     * to the qmodel's dtype (engine_scales.h); the layout writes amax / 448 */
    if (a == LB_MO_FP8)
        amax = lb__amax_for_scale(lb__static_input_scale(LB_FMT_FP8_E4M3, amax, lb_qmodel_dtype(q)), LB__E4M3_MAX);
    return lb__mo_emit_weight(module, a, qv, amax, emit, sink);
}

/* KV cache: per layer, ModelOpt's k_bmm/v_bmm amax over the FP8 maxbound,
 * stored as <layer>.self_attn.k_proj.k_scale and v_proj.v_scale
 * (quant_utils.py _KV_CACHE_REPLACEMENTS), F32 scalars. */
static lb_status mo_extras(const lb_qmodel *q, lb__emit_fn emit, void *sink)
{
    if (lb_qmodel_kv(q) != LB_FMT_FP8_E4M3) return LB_OK;
    uint32_t layers = lb_model_arch(lb_qmodel_model(q))->n_layers;
    for (uint32_t l = 0; l < layers; l++) {
        float amax[2];
        lb_status st = lb_qmodel_kv_amax(q, l, &amax[0], &amax[1]);
        if (st != LB_OK) return st;
        for (int kv = 0; kv < 2; kv++) {
            if (!(amax[kv] > 0 && isfinite(amax[kv])))
                return lb__fail(LB_ERR_ARG, "layer %u: the FP8 KV cache needs a calibrated %c range (amax %g): "
                                "calibrate with --calib", l, kv ? 'v' : 'k', (double)amax[kv]);
            char name[96];
            snprintf(name, sizeof name, "model.layers.%u.self_attn.%c_proj.%c_scale", l, kv ? 'v' : 'k',
                     kv ? 'v' : 'k');
            float s = lb__kv_scale(amax[kv]);
            lb__out_tensor t = {.name = name, .dtype = "F32", .n_dims = 0, .data = &s, .bytes = sizeof s};
            if ((st = emit(sink, &t)) != LB_OK) return st;
        }
    }
    return LB_OK;
}

/* ----- JSON ----- */

/* The modules exclude_modules summarizes: every weight matrix not
 * quantized (embeddings, a kept head, kept layers), and "lm_head" for a
 * tied head (a Hugging Face model still has that module; ModelOpt lists
 * it). */
static lb_status exclude_modules(const lb_qmodel *q, lb__jsonw *w)
{
    size_t n = lb_qmodel_count(q), nu = 0, nq = 0;
    char **unq = calloc(n + 1, sizeof *unq), **qn = calloc(n + 1, sizeof *qn);
    lb_status st = unq && qn ? LB_OK : lb__fail(LB_ERR_NOMEM, "out of memory");
    int has_head = 0;
    for (size_t i = 0; i < n && st == LB_OK; i++) {
        lb_qentry e;
        if ((st = lb_qmodel_entry(q, i, &e)) != LB_OK) break;
        if (strcmp(e.tensor->name, "lm_head.weight") == 0) has_head = 1;
        if (!lb_tensor_is_weight(e.tensor)) continue;
        char module[MO_NAME_MAX];
        if (!module_of(e.tensor->name, module, sizeof module)) continue;
        char *s = strdup(module);
        if (!s) {
            st = lb__fail(LB_ERR_NOMEM, "out of memory");
            break;
        }
        if (e.state == LB_QSTATE_QUANTIZED) qn[nq++] = s;
        else unq[nu++] = s;
    }
    if (st == LB_OK && !has_head && !(unq[nu++] = strdup("lm_head"))) st = lb__fail(LB_ERR_NOMEM, "out of memory");
    if (st == LB_OK) st = lb__mo_exclude_json((const char *const *)unq, nu, (const char *const *)qn, nq, w);
    for (size_t i = 0; unq && i < nu; i++) free(unq[i]);
    for (size_t i = 0; qn && i < nq; i++) free(qn[i]);
    free(unq), free(qn);
    return st;
}

static void producer(lb__jsonw *w)
{
    lb__jsonw_key(w, "producer"), lb__jsonw_object(w);
    lb__jsonw_key(w, "name"), lb__jsonw_str(w, producer_name);
    lb__jsonw_key(w, "version"), lb__jsonw_str(w, LOWBIT_VERSION_STRING);
    lb__jsonw_end(w);
}

/* One quantized_layers value: {"quant_algo", "group_size"?}. */
static void layer_config(lb__jsonw *w, lb__mo_algo a)
{
    lb__jsonw_object(w);
    lb__jsonw_key(w, "quant_algo"), lb__jsonw_str(w, lb__mo_algo_name(a));
    if (lb__mo_algo_group(a)) lb__jsonw_key(w, "group_size"), lb__jsonw_int(w, lb__mo_algo_group(a));
    lb__jsonw_end(w);
}

/* {"dynamic": false, "num_bits": b, "type": "float"[, "strategy"][, "group_size"]} */
static void args(lb__jsonw *w, int bits, const char *strategy, int group)
{
    lb__jsonw_object(w);
    lb__jsonw_key(w, "dynamic"), lb__jsonw_bool(w, 0);
    lb__jsonw_key(w, "num_bits"), lb__jsonw_int(w, bits);
    lb__jsonw_key(w, "type"), lb__jsonw_str(w, "float");
    if (strategy) lb__jsonw_key(w, "strategy"), lb__jsonw_str(w, strategy);
    if (group) lb__jsonw_key(w, "group_size"), lb__jsonw_int(w, group);
    lb__jsonw_end(w);
}

/* A config group's body (convert_hf_config.py _quant_algo_to_group_config;
 * mixed = 0: the single-algorithm branch of convert_hf_quant_config_format,
 * which writes no group for FP8_PER_CHANNEL_PER_TOKEN and MXFP8). */
static void group_body(lb__jsonw *w, lb__mo_algo a)
{
    switch (a) {
    case LB_MO_FP8:
        lb__jsonw_key(w, "input_activations"), args(w, 8, NULL, 0);
        lb__jsonw_key(w, "weights"), args(w, 8, NULL, 0);
        break;
    case LB_MO_FP8_PC_PT:
        lb__jsonw_key(w, "input_activations"), args(w, 8, NULL, 0);
        lb__jsonw_key(w, "weights"), args(w, 8, "channel", 0);
        break;
    case LB_MO_NVFP4:
        lb__jsonw_key(w, "input_activations"), args(w, 4, NULL, 16);
        lb__jsonw_key(w, "weights"), args(w, 4, NULL, 16);
        break;
    case LB_MO_W4A16_NVFP4:
        lb__jsonw_key(w, "weights"), args(w, 4, NULL, 16);
        break;
    case LB_MO_MXFP8:
        lb__jsonw_key(w, "input_activations"), args(w, 8, NULL, 32);
        lb__jsonw_key(w, "weights"), args(w, 8, NULL, 32);
        break;
    case LB_MO_ALGO_COUNT: break;
    }
}

/* The quantized layers of algorithm a, sorted (a group's "targets"), or
 * every quantized layer in model order with its config (sorted = 0). */
static int by_name(const void *x, const void *y) { return strcmp(*(char *const *)x, *(char *const *)y); }

static lb_status layers_of(const lb_qmodel *q, int a, char ***out, size_t *n_out)
{
    size_t n = lb_qmodel_count(q), k = 0;
    char **v = calloc(n + 1, sizeof *v);
    if (!v) return lb__fail(LB_ERR_NOMEM, "out of memory");
    lb_status st = LB_OK;
    for (size_t i = 0; i < n && st == LB_OK; i++) {
        lb_qentry e;
        lb__mo_algo b;
        if ((st = lb_qmodel_entry(q, i, &e)) != LB_OK || e.state != LB_QSTATE_QUANTIZED) continue;
        if ((st = algo_of(&e, &b)) != LB_OK || (a >= 0 && (int)b != a)) continue;
        char module[MO_NAME_MAX];
        if (!module_of(e.tensor->name, module, sizeof module)) continue;
        if (!(v[k] = strdup(module))) st = lb__fail(LB_ERR_NOMEM, "out of memory");
        else k++;
    }
    if (st != LB_OK) {
        for (size_t i = 0; i < k; i++) free(v[i]);
        free(v);
        return st;
    }
    *out = v, *n_out = k;
    return LB_OK;
}

static void free_list(char **v, size_t n)
{
    for (size_t i = 0; v && i < n; i++) free(v[i]);
    free(v);
}

/* Hugging Face module order, which ModelOpt's quantized_layers and config
 * groups follow (named_modules: layer by layer, q k v o gate up down),
 * whatever order the file stored the tensors in. */
static const char *const roles[] = {".self_attn.q_proj.", ".self_attn.k_proj.", ".self_attn.v_proj.",
                                    ".self_attn.o_proj.", ".mlp.gate_proj.",     ".mlp.up_proj.",
                                    ".mlp.down_proj."};

static void module_rank(const char *name, long *layer, int *role)
{
    static const char prefix[] = "model.layers.";
    *layer = -1, *role = (int)(sizeof roles / sizeof roles[0]);
    if (strncmp(name, prefix, sizeof prefix - 1) != 0) {
        if (strncmp(name, "lm_head", 7) == 0) *layer = 1L << 30; /* the head comes last */
        return;
    }
    char *end;
    *layer = strtol(name + sizeof prefix - 1, &end, 10);
    for (int r = 0; r < (int)(sizeof roles / sizeof roles[0]); r++)
        if (strncmp(end, roles[r], strlen(roles[r])) == 0) *role = r;
}

typedef struct ordered {
    const char *name;
    size_t index;
} ordered;

static int by_module_order(const void *x, const void *y)
{
    const ordered *a = x, *b = y;
    long la, lb;
    int ra, rb;
    module_rank(a->name, &la, &ra);
    module_rank(b->name, &lb, &rb);
    if (la != lb) return la < lb ? -1 : 1;
    if (ra != rb) return ra < rb ? -1 : 1;
    return strcmp(a->name, b->name);
}

/* The QUANTIZED entries in Hugging Face module order (caller frees). */
static lb_status quantized_in_order(const lb_qmodel *q, ordered **out, size_t *n_out)
{
    size_t n = lb_qmodel_count(q), k = 0;
    ordered *v = calloc(n + 1, sizeof *v);
    if (!v) return lb__fail(LB_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        lb_qentry e;
        lb_status st = lb_qmodel_entry(q, i, &e);
        if (st != LB_OK) return free(v), st;
        if (e.state == LB_QSTATE_QUANTIZED) v[k].name = e.tensor->name, v[k].index = i, k++;
    }
    qsort(v, k, sizeof *v, by_module_order);
    *out = v, *n_out = k;
    return LB_OK;
}

/* "quantized_layers": {module: {quant_algo, group_size?}} in model order. */
static lb_status quantized_layers(const lb_qmodel *q, lb__jsonw *w)
{
    ordered *v;
    size_t n;
    lb_status st = quantized_in_order(q, &v, &n);
    if (st != LB_OK) return st;
    lb__jsonw_key(w, "quantized_layers"), lb__jsonw_object(w);
    for (size_t k = 0; k < n && st == LB_OK; k++) {
        lb_qentry e;
        lb__mo_algo a;
        char module[MO_NAME_MAX];
        if ((st = lb_qmodel_entry(q, v[k].index, &e)) != LB_OK || (st = algo_of(&e, &a)) != LB_OK) break;
        if (!module_of(e.tensor->name, module, sizeof module)) continue;
        lb__jsonw_key(w, module), layer_config(w, a);
    }
    lb__jsonw_end(w);
    free(v);
    return st;
}

/* The order ModelOpt's groups come in for MIXED_PRECISION: by the first
 * layer of each algorithm in module order. */
static lb_status mixed_groups(const lb_qmodel *q, lb__jsonw *w)
{
    int order[LB_MO_ALGO_COUNT], n_order = 0;
    unsigned seen = 0;
    ordered *v;
    size_t n_q;
    lb_status st = quantized_in_order(q, &v, &n_q);
    if (st != LB_OK) return st;
    for (size_t k = 0; k < n_q && st == LB_OK; k++) {
        lb_qentry e;
        lb__mo_algo a;
        if ((st = lb_qmodel_entry(q, v[k].index, &e)) != LB_OK || (st = algo_of(&e, &a)) != LB_OK) break;
        if (!(seen & 1u << a)) seen |= 1u << a, order[n_order++] = a;
    }
    free(v);
    if (st != LB_OK) return st;
    lb__jsonw_key(w, "config_groups"), lb__jsonw_object(w);
    for (int g = 0; g < n_order; g++) {
        char key[32];
        snprintf(key, sizeof key, "group_%d", g);
        char **names = NULL;
        size_t n = 0;
        st = layers_of(q, order[g], &names, &n);
        if (st != LB_OK) return st;
        qsort(names, n, sizeof *names, by_name);
        lb__jsonw_key(w, key), lb__jsonw_object(w);
        group_body(w, (lb__mo_algo)order[g]);
        lb__jsonw_key(w, "targets"), lb__jsonw_array(w);
        for (size_t k = 0; k < n; k++) lb__jsonw_str(w, names[k]);
        lb__jsonw_end(w), lb__jsonw_end(w);
        free_list(names, n);
    }
    lb__jsonw_end(w);
    return LB_OK;
}

static lb_status mo_quant_config(const lb_qmodel *q, lb__jsonw *w)
{
    unsigned mask;
    size_t count;
    lb_status st = algos_used(q, &mask, &count);
    if (st != LB_OK) return st;
    lb__mo_algo a = LB_MO_FP8;
    int single = single_algo(mask, &a);
    lb__jsonw_object(w);
    if (!single) {
        if ((st = mixed_groups(q, w)) != LB_OK) return st;
        if ((st = quantized_layers(q, w)) != LB_OK) return st;
        lb__jsonw_key(w, "ignore"), lb__jsonw_array(w), lb__jsonw_end(w);
    } else {
        if (a == LB_MO_FP8 || a == LB_MO_NVFP4 || a == LB_MO_W4A16_NVFP4) {
            lb__jsonw_key(w, "config_groups"), lb__jsonw_object(w);
            lb__jsonw_key(w, "group_0"), lb__jsonw_object(w);
            group_body(w, a);
            lb__jsonw_key(w, "targets"), lb__jsonw_array(w), lb__jsonw_str(w, "Linear"), lb__jsonw_end(w);
            lb__jsonw_end(w), lb__jsonw_end(w);
        }
        lb__jsonw_key(w, "ignore");
        if ((st = exclude_modules(q, w)) != LB_OK) return st;
    }
    lb__jsonw_key(w, "quant_algo"), lb__jsonw_str(w, single ? lb__mo_algo_name(a) : "MIXED_PRECISION");
    if (lb_qmodel_kv(q) == LB_FMT_FP8_E4M3) {
        lb__jsonw_key(w, "kv_cache_scheme"), lb__jsonw_object(w);
        lb__jsonw_key(w, "dynamic"), lb__jsonw_bool(w, 0);
        lb__jsonw_key(w, "num_bits"), lb__jsonw_int(w, 8);
        lb__jsonw_key(w, "type"), lb__jsonw_str(w, "float");
        lb__jsonw_end(w);
    }
    producer(w);
    lb__jsonw_key(w, "quant_method"), lb__jsonw_str(w, "modelopt");
    lb__jsonw_end(w);
    return lb__jsonw_status(w);
}

/* hf_quant_config.json: {"producer", "quantization": {quant_algo,
 * kv_cache_quant_algo, group_size?, exclude_modules} or, for several
 * algorithms, {quant_algo MIXED_PRECISION, kv_cache_quant_algo,
 * quantized_layers}}. */
static lb_status hf_quant_config(const lb_qmodel *q, lb__jsonw *w)
{
    unsigned mask;
    size_t count;
    lb_status st = algos_used(q, &mask, &count);
    if (st != LB_OK) return st;
    lb__mo_algo a = LB_MO_FP8;
    int single = single_algo(mask, &a);
    lb__jsonw_object(w);
    producer(w);
    lb__jsonw_key(w, "quantization"), lb__jsonw_object(w);
    lb__jsonw_key(w, "quant_algo"), lb__jsonw_str(w, single ? lb__mo_algo_name(a) : "MIXED_PRECISION");
    lb__jsonw_key(w, "kv_cache_quant_algo");
    if (lb_qmodel_kv(q) == LB_FMT_FP8_E4M3) lb__jsonw_str(w, "FP8");
    else lb__jsonw_null(w);
    if (single) {
        if (lb__mo_algo_group(a)) lb__jsonw_key(w, "group_size"), lb__jsonw_int(w, lb__mo_algo_group(a));
        lb__jsonw_key(w, "exclude_modules");
        if ((st = exclude_modules(q, w)) != LB_OK) return st;
    } else if ((st = quantized_layers(q, w)) != LB_OK) {
        return st;
    }
    lb__jsonw_end(w), lb__jsonw_end(w);
    return lb__jsonw_status(w);
}

static int mo_extra_file(const lb_qmodel *q, int k, const char **name, lb__jsonw *w)
{
    if (k != 0) return 0;
    *name = "hf_quant_config.json";
    return hf_quant_config(q, w) == LB_OK ? 1 : -1;
}

const lb__exporter lb__exporter_modelopt = {
    .name = "modelopt",
    .check = mo_check,
    .tensor = mo_tensor,
    .extras = mo_extras,
    .quant_config = mo_quant_config,
    .extra_file = mo_extra_file,
};
