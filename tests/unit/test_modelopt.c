/* The ModelOpt exporter (src/export/modelopt*.c) on the embedded
 * stories260K (5 layers, 64 wide, MLP 172 wide, tied head), without the
 * driver: check()'s refusals name the tensor, the format and what works;
 * the tensors of an NVFP4 q/k/v group share weight_scale_2 and the group's
 * largest input range; FP8 KV scales are amax/448 under ModelOpt's names;
 * the JSON is strict JSON with ModelOpt's keys, a tied head is excluded as
 * lm_head, and MIXED_PRECISION lists layers in module order. The package
 * itself judges the layouts in tests/interop/test_modelopt*.py. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "export/exporter.h"
#include "export/modelopt.h"
#include "io/json.h"
#include "lowbit.h"

#ifndef MODEL
#define MODEL "models/stories260K.bin"
#endif

#define MAX_OUT 64

typedef struct sink {
    int n;
    char name[MAX_OUT][128];
    char dtype[MAX_OUT][16];
    int n_dims[MAX_OUT];
    uint64_t shape[MAX_OUT][4];
    float first[MAX_OUT]; /* F32 tensors: the first value */
} sink;

static lb_status collect(void *ctx, const lb__out_tensor *t)
{
    sink *s = ctx;
    if (s->n == MAX_OUT) return LB_ERR_ARG;
    snprintf(s->name[s->n], sizeof s->name[0], "%s", t->name);
    snprintf(s->dtype[s->n], sizeof s->dtype[0], "%s", t->dtype);
    s->n_dims[s->n] = t->n_dims;
    for (int d = 0; d < t->n_dims; d++) s->shape[s->n][d] = t->shape[d];
    s->first[s->n] = strcmp(t->dtype, "F32") == 0 ? *(const float *)t->data : 0;
    s->n++;
    return LB_OK;
}

static int find(const sink *s, const char *name)
{
    for (int k = 0; k < s->n; k++)
        if (strcmp(s->name[k], name) == 0) return k;
    return -1;
}

static size_t idx(const lb_qmodel *q, const char *name)
{
    size_t i = (size_t)-1;
    CHECK(lb_qmodel_find(q, name, &i) == LB_OK, "find %s", name);
    return i;
}

static void set(lb_qmodel *q, const char *name, const char *w, lb_act_mode mode, const char *a, float amax)
{
    size_t i = idx(q, name);
    lb_qspec s;
    CHECK(lb_qspec_parse(w, &s) == LB_OK, "%s", w);
    CHECK(lb_qmodel_set_spec(q, i, &s) == LB_OK, "set_spec %s: %s", name, lb_last_error());
    lb_qact act = {.mode = mode};
    if (a) CHECK(lb_qspec_parse(a, &act.spec) == LB_OK, "%s", a);
    CHECK(lb_qmodel_set_act(q, i, &act) == LB_OK, "set_act %s: %s", name, lb_last_error());
    if (amax > 0) CHECK(lb_qmodel_set_input_amax(q, i, amax) == LB_OK, "amax");
}

static const char *layer_names[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                                    "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};

/* Every linear layer of every decoder block under one scheme. */
static void set_all(lb_qmodel *q, uint32_t layers, const char *w, lb_act_mode mode, const char *a, float amax)
{
    char name[96];
    for (uint32_t l = 0; l < layers; l++)
        for (int r = 0; r < 7; r++) {
            snprintf(name, sizeof name, "model.layers.%u.%s.weight", l, layer_names[r]);
            set(q, name, w, mode, a, amax);
        }
}

/* Emits entry i as the driver does. */
static lb_status write_entry(const lb_qmodel *q, size_t i, sink *s)
{
    lb_qentry e;
    lb_qmodel_entry(q, i, &e);
    if (e.state != LB_QSTATE_QUANTIZED) {
        float *v = malloc(e.tensor->n_elements * sizeof *v);
        lb_status st = lb_qmodel_values_f32(q, i, v, 1);
        if (st == LB_OK) st = lb__exporter_modelopt.tensor(q, i, v, NULL, collect, s);
        free(v);
        return st;
    }
    lb_qtensor *qt;
    int owned;
    lb_status st = lb_qmodel_quantized(q, i, 1, &qt, &owned);
    if (st != LB_OK) return st;
    lb_qtensor_view view;
    lb_qtensor_view_get(qt, &view);
    st = lb__exporter_modelopt.tensor(q, i, NULL, &view, collect, s);
    if (owned) lb_qtensor_free(qt);
    return st;
}

static lb__json *parse(lb__jsonw *w, const char *what)
{
    size_t len;
    const char *t = lb__jsonw_text(w, &len);
    lb__json *j = NULL;
    CHECK(lb__json_parse(t, len, what, &j) == LB_OK, "%s is not strict JSON: %s\n%s", what, lb_last_error(), t);
    return j;
}

static void test_refusals(const lb_model *m)
{
    lb_qmodel *q;
    CHECK(lb_qmodel_new(m, &q) == LB_OK, "new");
    CHECK(lb__exporter_modelopt.check(q) == LB_ERR_UNSUPPORTED && strstr(lb_last_error(), "no tensor is quantized"),
          "nothing quantized: %s", lb_last_error());
    /* NVFP4 everywhere: down_proj's 172 columns are not a multiple of 16 */
    set_all(q, 5, "nvfp4", LB_ACT_NONE, NULL, 0);
    CHECK(lb__exporter_modelopt.check(q) == LB_ERR_UNSUPPORTED, "partial nvfp4 block");
    const char *e = lb_last_error();
    CHECK(strstr(e, "model.layers.0.mlp.down_proj.weight") && strstr(e, "172 columns") && strstr(e, "modelopt") &&
              strstr(e, "--format compressed-tensors"),
          "message: %s", e);
    /* int4 weights: not a ModelOpt format (W4A16_AWQ is not written) */
    lb_qmodel_free(q);
    CHECK(lb_qmodel_new(m, &q) == LB_OK, "new");
    set(q, "model.layers.2.self_attn.o_proj.weight", "int4:g32", LB_ACT_NONE, NULL, 0);
    CHECK(lb__exporter_modelopt.check(q) == LB_ERR_UNSUPPORTED &&
              strstr(lb_last_error(), "model.layers.2.self_attn.o_proj.weight") &&
              strstr(lb_last_error(), "int4") && strstr(lb_last_error(), "ModelOpt has no format"),
          "int4: %s", lb_last_error());
    /* FP8-BLOCK's 2-D blocks: no ModelOpt checkpoint; the message says where they go */
    set(q, "model.layers.2.self_attn.o_proj.weight", "fp8_e4m3:b32x32:scale=bf16", LB_ACT_DYNAMIC, "fp8_e4m3:g32", 0);
    CHECK(lb__exporter_modelopt.check(q) == LB_ERR_UNSUPPORTED && strstr(lb_last_error(), "2-D FP8 blocks") &&
              strstr(lb_last_error(), "FP8_PB_WO") && strstr(lb_last_error(), "--format compressed-tensors"),
          "fp8 block: %s", lb_last_error());
    /* e8m0 scales over 32x32 blocks are not MXFP8 (1x32) */
    set(q, "model.layers.2.self_attn.o_proj.weight", "fp8_e4m3:b32x32:scale=e8m0", LB_ACT_DYNAMIC,
        "mxfp8_e4m3", 0);
    CHECK(lb__exporter_modelopt.check(q) == LB_ERR_UNSUPPORTED && strstr(lb_last_error(), "ModelOpt has no format"),
          "2-D e8m0: %s", lb_last_error());
    /* per-tensor FP8 with dynamic inputs */
    set(q, "model.layers.2.self_attn.o_proj.weight", "fp8_e4m3:tensor", LB_ACT_DYNAMIC, "fp8_e4m3:token", 0);
    CHECK(lb__exporter_modelopt.check(q) == LB_ERR_UNSUPPORTED && strstr(lb_last_error(), "static per-tensor"),
          "fp8 dynamic: %s", lb_last_error());
    /* static FP8: check passes before calibration, writing needs the range */
    set(q, "model.layers.2.self_attn.o_proj.weight", "fp8_e4m3:tensor", LB_ACT_STATIC, "fp8_e4m3:tensor", 0);
    CHECK(lb__exporter_modelopt.check(q) == LB_OK, "fp8 static: %s", lb_last_error());
    sink s = {0};
    CHECK(write_entry(q, idx(q, "model.layers.2.self_attn.o_proj.weight"), &s) == LB_ERR_ARG &&
              strstr(lb_last_error(), "--calib"),
          "uncalibrated: %s", lb_last_error());
    lb_qmodel_free(q);
}

static void test_nvfp4_group_and_kv(const lb_model *m)
{
    lb_qmodel *q;
    CHECK(lb_qmodel_new(m, &q) == LB_OK, "new");
    /* q/k/v of layer 1 in NVFP4 W4A4 with different calibrated ranges */
    set(q, "model.layers.1.self_attn.q_proj.weight", "nvfp4", LB_ACT_LOCAL, "nvfp4", 2.0f);
    set(q, "model.layers.1.self_attn.k_proj.weight", "nvfp4", LB_ACT_LOCAL, "nvfp4", 3.0f);
    set(q, "model.layers.1.self_attn.v_proj.weight", "nvfp4", LB_ACT_LOCAL, "nvfp4", 1.0f);
    CHECK(lb__exporter_modelopt.check(q) == LB_OK, "check: %s", lb_last_error());
    sink s = {0};
    const char *mods[] = {"model.layers.1.self_attn.q_proj", "model.layers.1.self_attn.k_proj",
                          "model.layers.1.self_attn.v_proj"};
    for (int k = 0; k < 3; k++) {
        char name[96];
        snprintf(name, sizeof name, "%s.weight", mods[k]);
        CHECK(write_entry(q, idx(q, name), &s) == LB_OK, "write %s: %s", name, lb_last_error());
    }
    CHECK(s.n == 12, "4 tensors a module: %d", s.n);
    float ws2 = -1;
    for (int k = 0; k < 3; k++) {
        char n[128];
        snprintf(n, sizeof n, "%s.weight", mods[k]);
        int w = find(&s, n);
        CHECK(w >= 0 && strcmp(s.dtype[w], "U8") == 0 && s.n_dims[w] == 2 && s.shape[w][1] == 32, "%s packed", n);
        snprintf(n, sizeof n, "%s.weight_scale", mods[k]);
        int bs = find(&s, n);
        CHECK(bs >= 0 && strcmp(s.dtype[bs], "F8_E4M3") == 0 && s.shape[bs][1] == 4, "%s block scales", n);
        snprintf(n, sizeof n, "%s.weight_scale_2", mods[k]);
        int t2 = find(&s, n);
        CHECK(t2 >= 0 && s.n_dims[t2] == 0 && s.first[t2] > 0, "%s scalar", n);
        if (t2 >= 0) {
            if (ws2 < 0) ws2 = s.first[t2];
            CHECK(s.first[t2] == ws2, "%s: weight_scale_2 %g shared with q_proj's %g", n, s.first[t2], ws2);
        }
        snprintf(n, sizeof n, "%s.input_scale", mods[k]);
        int is = find(&s, n);
        CHECK(is >= 0 && s.first[is] == 3.0f / (6.0f * 448.0f), "%s: the group's largest range / (6*448)", n);
    }
    /* weight_scale_2 is the group's amax / (6*448) */
    lb_qentry e;
    lb_qmodel_entry(q, idx(q, "model.layers.1.self_attn.k_proj.weight"), &e);
    CHECK(e.group_amax > 0 && ws2 == e.group_amax / (6.0f * 448.0f), "ws2 %g from group amax %g", ws2, e.group_amax);

    /* FP8 KV cache: uncalibrated is an error, calibrated gives amax/448 */
    CHECK(lb_qmodel_set_kv(q, LB_FMT_FP8_E4M3) == LB_OK, "kv");
    sink kv = {0};
    CHECK(lb__exporter_modelopt.extras(q, collect, &kv) == LB_ERR_ARG && strstr(lb_last_error(), "--calib"),
          "uncalibrated kv: %s", lb_last_error());
    for (uint32_t l = 0; l < 5; l++) CHECK(lb_qmodel_set_kv_amax(q, l, 0.5f + l, 0.25f + l) == LB_OK, "kv amax");
    memset(&kv, 0, sizeof kv);
    CHECK(lb__exporter_modelopt.extras(q, collect, &kv) == LB_OK, "kv: %s", lb_last_error());
    CHECK(kv.n == 10, "k and v for 5 layers: %d", kv.n);
    int k3 = find(&kv, "model.layers.3.self_attn.k_proj.k_scale"), v3 = find(&kv, "model.layers.3.self_attn.v_proj.v_scale");
    CHECK(k3 >= 0 && kv.n_dims[k3] == 0 && kv.first[k3] == 3.5f / 448.0f, "k_scale");
    CHECK(v3 >= 0 && kv.first[v3] == 3.25f / 448.0f, "v_scale");

    /* JSON: hf_quant_config with NVFP4's group and the tied head excluded */
    lb__jsonw *w = lb__jsonw_new();
    const char *fname = NULL;
    CHECK(lb__exporter_modelopt.extra_file(q, 0, &fname, w) == 1 && fname && strcmp(fname, "hf_quant_config.json") == 0,
          "extra file");
    lb__json *j = parse(w, "hf_quant_config.json");
    const lb__json *qz = j ? lb__json_get(j, "quantization") : NULL;
    CHECK(qz && lb__json_str(qz, "quant_algo") && strcmp(lb__json_str(qz, "quant_algo"), "NVFP4") == 0, "algo");
    CHECK(qz && lb__json_str(qz, "kv_cache_quant_algo") && strcmp(lb__json_str(qz, "kv_cache_quant_algo"), "FP8") == 0,
          "kv algo");
    uint64_t g = 0;
    CHECK(qz && lb__json_u64(lb__json_get(qz, "group_size"), &g) && g == 16, "group_size");
    const char *text = lb__jsonw_text(w, NULL);
    CHECK(strstr(text, "\"lm_head\"") && strstr(text, "\"model.embed_tokens\""), "excluded: %s", text);
    lb__json_free(j);
    lb__jsonw_free(w);
    w = lb__jsonw_new();
    CHECK(lb__exporter_modelopt.extra_file(q, 1, &fname, w) == 0, "one extra file");
    lb__jsonw_free(w);

    w = lb__jsonw_new();
    CHECK(lb__exporter_modelopt.quant_config(q, w) == LB_OK, "quant_config");
    j = parse(w, "quantization_config");
    CHECK(j && lb__json_str(j, "quant_method") && strcmp(lb__json_str(j, "quant_method"), "modelopt") == 0, "method");
    CHECK(j && lb__json_get(j, "config_groups") && lb__json_get(j, "kv_cache_scheme"), "groups and kv");
    lb__json_free(j);
    lb__jsonw_free(w);
    lb_qmodel_free(q);
}

static void test_mixed(const lb_model *m)
{
    lb_qmodel *q;
    CHECK(lb_qmodel_new(m, &q) == LB_OK, "new");
    /* set in reverse module order: the JSON lists them in module order */
    set(q, "model.layers.0.mlp.up_proj.weight", "nvfp4", LB_ACT_NONE, NULL, 0);
    set(q, "model.layers.0.mlp.gate_proj.weight", "nvfp4", LB_ACT_NONE, NULL, 0);
    set(q, "model.layers.0.self_attn.v_proj.weight", "fp8_e4m3:channel", LB_ACT_DYNAMIC, "fp8_e4m3:token", 0);
    set(q, "model.layers.0.self_attn.q_proj.weight", "fp8_e4m3:channel", LB_ACT_DYNAMIC, "fp8_e4m3:token", 0);
    CHECK(lb__exporter_modelopt.check(q) == LB_OK, "check: %s", lb_last_error());
    lb__jsonw *w = lb__jsonw_new();
    const char *fname;
    CHECK(lb__exporter_modelopt.extra_file(q, 0, &fname, w) == 1, "hf_quant_config");
    lb__json *j = parse(w, "hf_quant_config.json");
    const lb__json *qz = j ? lb__json_get(j, "quantization") : NULL;
    CHECK(qz && strcmp(lb__json_str(qz, "quant_algo"), "MIXED_PRECISION") == 0, "mixed");
    CHECK(qz && lb__json_get(qz, "quantized_layers") && !lb__json_get(qz, "exclude_modules"),
          "quantized_layers, no exclude_modules (as ModelOpt)");
    const char *t = lb__jsonw_text(w, NULL);
    const char *pq = strstr(t, "self_attn.q_proj"), *pv = strstr(t, "self_attn.v_proj"),
               *pg = strstr(t, "mlp.gate_proj"), *pu = strstr(t, "mlp.up_proj");
    CHECK(pq && pv && pg && pu && pq < pv && pv < pg && pg < pu, "module order:\n%s", t);
    CHECK(strstr(t, "\"FP8_PER_CHANNEL_PER_TOKEN\"") && strstr(t, "\"W4A16_NVFP4\""), "both algorithms:\n%s", t);
    lb__json_free(j);
    lb__jsonw_free(w);
    w = lb__jsonw_new();
    CHECK(lb__exporter_modelopt.quant_config(q, w) == LB_OK, "quant_config");
    j = parse(w, "quantization_config");
    const lb__json *groups = j ? lb__json_get(j, "config_groups") : NULL;
    CHECK(groups && lb__json_get(groups, "group_0") && lb__json_get(groups, "group_1") &&
              !lb__json_get(groups, "group_2"),
          "two groups");
    t = lb__jsonw_text(w, NULL);
    CHECK(strstr(t, "\"strategy\": \"channel\""), "FP8 per channel's group says channel:\n%s", t);
    lb__json_free(j);
    lb__jsonw_free(w);
    lb_qmodel_free(q);
}

int main(void)
{
    lb_model *m = NULL;
    if (lb_model_open(MODEL, &m) != LB_OK) {
        fprintf(stderr, "cannot open %s: %s\n", MODEL, lb_last_error());
        return 1;
    }
    test_refusals(m);
    test_nvfp4_group_and_kv(m);
    test_mixed(m);
    lb_model_close(m);
    return check_summary();
}
