/* The quantized model (lowbit.h, "The quantized model"), on the embedded
 * stories260K: states and their transitions, replacement, set_qtensor's
 * ownership, fused groups and the shared two-level range, determinism,
 * values_f32 against lb_quantize/lb_dequantize, and bad requests. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "lowbit.h"
#include "quant/quant_internal.h"
#include "weights/qmodel_internal.h"

#ifndef MODEL
#define MODEL "models/stories260K.bin"
#endif

static size_t idx(const lb_qmodel *q, const char *name)
{
    size_t i = (size_t)-1;
    lb_status st = lb_qmodel_find(q, name, &i);
    CHECK(st == LB_OK, "find %s: %s", name, lb_last_error());
    return i;
}

static float *source(const lb_qmodel *q, size_t i)
{
    lb_qentry e;
    lb_qmodel_entry(q, i, &e);
    float *x = malloc(e.tensor->n_elements * sizeof *x);
    CHECK(lb_qmodel_source_f32(q, i, x) == LB_OK, "source %zu", i);
    return x;
}

static float amax_of(const float *x, size_t n)
{
    float m = 0;
    for (size_t k = 0; k < n; k++) m = fabsf(x[k]) > m ? fabsf(x[k]) : m;
    return m;
}

static void test_new_and_find(const lb_model *m, lb_qmodel *q)
{
    CHECK(lb_qmodel_count(q) == lb_model_tensor_count(m), "count");
    CHECK(lb_qmodel_model(q) == m, "model");
    CHECK(lb_qmodel_dtype(q) == LB_DT_BF16, "default dtype");
    CHECK(lb_qmodel_kv(q) == LB_FMT_FP32, "no kv");
    size_t n = lb_qmodel_count(q), groups = 0;
    for (size_t i = 0; i < n; i++) {
        lb_qentry e;
        CHECK(lb_qmodel_entry(q, i, &e) == LB_OK, "entry");
        CHECK(e.state == LB_QSTATE_STORED && e.act.mode == LB_ACT_NONE && e.input_amax == 0, "fresh %zu", i);
        CHECK(e.tensor == lb_model_tensor(m, i), "same index");
        groups += e.fused_group >= 0;
    }
    CHECK(groups == 5 * 5, "q/k/v + gate/up of 5 layers are grouped: %zu", groups);
    lb_qentry q0, k0, v0, g0, u0, o0, d0, q1;
    lb_qmodel_entry(q, idx(q, "model.layers.0.self_attn.q_proj.weight"), &q0);
    lb_qmodel_entry(q, idx(q, "model.layers.0.self_attn.k_proj.weight"), &k0);
    lb_qmodel_entry(q, idx(q, "model.layers.0.self_attn.v_proj.weight"), &v0);
    lb_qmodel_entry(q, idx(q, "model.layers.0.mlp.gate_proj.weight"), &g0);
    lb_qmodel_entry(q, idx(q, "model.layers.0.mlp.up_proj.weight"), &u0);
    lb_qmodel_entry(q, idx(q, "model.layers.0.self_attn.o_proj.weight"), &o0);
    lb_qmodel_entry(q, idx(q, "model.layers.0.mlp.down_proj.weight"), &d0);
    lb_qmodel_entry(q, idx(q, "model.layers.1.self_attn.q_proj.weight"), &q1);
    CHECK(q0.fused_group >= 0 && q0.fused_group == k0.fused_group && k0.fused_group == v0.fused_group, "qkv");
    CHECK(g0.fused_group >= 0 && g0.fused_group == u0.fused_group && g0.fused_group != q0.fused_group, "gate/up");
    CHECK(o0.fused_group == -1 && d0.fused_group == -1, "o/down alone");
    CHECK(q1.fused_group != q0.fused_group && q1.fused_group >= 0, "per layer");
    size_t i;
    CHECK(lb_qmodel_find(q, "wq[0]", &i) == LB_OK || lb_qmodel_find(q, lb_model_tensor(m, 1)->file_name, &i) == LB_OK,
          "file name");
    i = 12345;
    CHECK(lb_qmodel_find(q, "no.such.weight", &i) == LB_ERR_ARG && i == 12345, "absent: untouched");
    CHECK(lb__fused_group_of("model.layers.7.self_attn.k_proj.weight") == 14, "group id");
    CHECK(lb__fused_group_of("model.layers.7.mlp.up_proj.weight") == 15, "group id");
    CHECK(lb__fused_group_of("model.layers.x.mlp.up_proj.weight") == -1, "not a layer");
    CHECK(lb__fused_group_of("model.layers.99999999999999999999.mlp.up_proj.weight") == -1, "overflowing layer");
}

static void test_states(lb_qmodel *q)
{
    size_t i = idx(q, "model.layers.2.self_attn.o_proj.weight");
    lb_qentry e;
    lb_qspec spec;
    CHECK(lb_qspec_parse("int4:g32", &spec) == LB_OK, "parse");
    CHECK(lb_qmodel_set_spec(q, i, &spec) == LB_OK, "%s", lb_last_error());
    lb_qmodel_entry(q, i, &e);
    CHECK(e.state == LB_QSTATE_QUANTIZED && e.spec.group == 32 && !e.replaced && !e.has_qtensor, "quantized");
    size_t n = e.tensor->n_elements;
    float *x = source(q, i), *v = malloc(n * sizeof *v), *ref = malloc(n * sizeof *ref);

    /* values_f32 = lb_dequantize(lb_quantize(source)) */
    lb_qtensor *qt;
    lb_quantize(&spec, x, 64, 64, 1, &qt);
    lb_dequantize(qt, ref, 1);
    lb_qtensor_free(qt);
    CHECK(lb_qmodel_values_f32(q, i, v, 2) == LB_OK, "values");
    CHECK(memcmp(v, ref, n * sizeof *v) == 0, "dequantized values");

    /* determinism: the same bytes every call, whatever the threads */
    lb_qtensor *a, *b;
    int oa, ob;
    CHECK(lb_qmodel_quantized(q, i, 1, &a, &oa) == LB_OK && oa == 1, "owned");
    CHECK(lb_qmodel_quantized(q, i, 3, &b, &ob) == LB_OK && ob == 1, "owned");
    lb_qtensor_view va, vb;
    lb_qtensor_view_get(a, &va), lb_qtensor_view_get(b, &vb);
    CHECK(va.data_bytes == vb.data_bytes && !memcmp(va.data, vb.data, va.data_bytes) &&
          !memcmp(va.scales, vb.scales, va.scale_bytes), "deterministic");
    lb_qtensor_free(b);

    /* set_qtensor: borrowed back, the qmodel owns it */
    CHECK(lb_qmodel_set_qtensor(q, i, a) == LB_OK, "%s", lb_last_error());
    lb_qmodel_entry(q, i, &e);
    CHECK(e.has_qtensor == 1, "has qtensor");
    CHECK(lb_qmodel_quantized(q, i, 1, &b, &ob) == LB_OK && ob == 0 && b == a, "borrowed");
    /* wrong spec or shape: refused and freed (ASan sees a leak otherwise) */
    lb_qspec other;
    lb_qspec_parse("int4:g64", &other);
    lb_quantize(&other, x, 64, 64, 1, &qt);
    CHECK(lb_qmodel_set_qtensor(q, i, qt) == LB_ERR_ARG, "spec mismatch");
    lb_quantize(&spec, x, 32, 128, 1, &qt);
    CHECK(lb_qmodel_set_qtensor(q, i, qt) == LB_ERR_ARG, "shape mismatch");
    lb_qmodel_entry(q, i, &e);
    CHECK(e.has_qtensor == 1, "the set one stays");
    /* a new spec drops it */
    CHECK(lb_qmodel_set_spec(q, i, &spec) == LB_OK, "respec");
    lb_qmodel_entry(q, i, &e);
    CHECK(e.has_qtensor == 0, "dropped");

    /* replace: stays quantized, now from the replacement */
    float *y = malloc(n * sizeof *y);
    for (size_t k = 0; k < n; k++) y[k] = x[k] * 0.5f;
    CHECK(lb_qmodel_replace(q, i, y) == LB_OK, "replace");
    lb_qmodel_entry(q, i, &e);
    CHECK(e.state == LB_QSTATE_QUANTIZED && e.replaced == 1, "quantized from the replacement");
    float *s2 = source(q, i);
    CHECK(memcmp(s2, y, n * sizeof *y) == 0, "source is the replacement");
    lb_quantize(&spec, y, 64, 64, 1, &qt);
    lb_dequantize(qt, ref, 1);
    lb_qtensor_free(qt);
    lb_qmodel_values_f32(q, i, v, 1);
    CHECK(memcmp(v, ref, n * sizeof *v) == 0, "quantized from the replacement");

    /* keep: replaced values stay, rounded to bf16 */
    CHECK(lb_qmodel_keep(q, i) == LB_OK, "keep");
    lb_qmodel_entry(q, i, &e);
    CHECK(e.state == LB_QSTATE_REPLACED, "replaced, kept");
    lb_qmodel_values_f32(q, i, v, 1);
    uint16_t *codes = malloc(n * 2);
    lb_dtype_from_f32(LB_DT_BF16, y, n, codes);
    lb_dtype_to_f32(LB_DT_BF16, codes, n, ref);
    CHECK(memcmp(v, ref, n * sizeof *v) == 0, "bf16-rounded");
    CHECK(lb_qmodel_set_dtype(q, LB_DT_F32) == LB_OK, "f32");
    lb_qmodel_values_f32(q, i, v, 1);
    CHECK(memcmp(v, y, n * sizeof *v) == 0, "f32: as replaced");
    CHECK(lb_qmodel_set_dtype(q, LB_DT_BF16) == LB_OK, "bf16");

    /* KEPT of a stored weight; STORED is as stored */
    size_t d = idx(q, "model.layers.2.mlp.down_proj.weight");
    CHECK(lb_qmodel_keep(q, d) == LB_OK, "keep");
    lb_qmodel_entry(q, d, &e);
    CHECK(e.state == LB_QSTATE_KEPT && !e.replaced, "kept");
    size_t nrm = idx(q, "model.layers.2.input_layernorm.weight");
    CHECK(lb_qmodel_keep(q, nrm) == LB_ERR_ARG, "a norm is no weight");
    CHECK(lb_qmodel_set_spec(q, nrm, &spec) == LB_ERR_ARG, "a norm has no spec");
    float nv[64], ns[64];
    CHECK(lb_qmodel_values_f32(q, nrm, nv, 1) == LB_OK && lb_qmodel_source_f32(q, nrm, ns) == LB_OK, "stored");
    CHECK(memcmp(nv, ns, sizeof nv) == 0, "stored as stored");
    lb_qtensor *none;
    int own;
    CHECK(lb_qmodel_quantized(q, nrm, 1, &none, &own) == LB_ERR_ARG && none == NULL, "not quantized");

    free(x), free(v), free(ref), free(y), free(s2), free(codes);
}

static void test_errors(lb_qmodel *q)
{
    size_t i = idx(q, "model.layers.3.self_attn.o_proj.weight");
    lb_qspec bad = {0};
    bad.element = LB_FMT_BF16; /* plain: nothing to scale */
    CHECK(lb_qmodel_set_spec(q, i, &bad) == LB_ERR_ARG, "plain spec");
    lb_qspec_parse("int4:g32", &bad);
    bad.group = 0;
    CHECK(lb_qmodel_set_spec(q, i, &bad) != LB_OK, "invalid spec");
    CHECK(lb_qmodel_set_spec(q, 100000, &bad) == LB_ERR_ARG, "index");
    CHECK(lb_qmodel_set_spec(NULL, 0, &bad) == LB_ERR_ARG, "NULL");
    lb_qentry e;
    lb_qmodel_entry(q, i, &e);
    CHECK(e.state == LB_QSTATE_STORED, "unchanged by failures");
    float *x = source(q, i);
    x[7] = NAN;
    CHECK(lb_qmodel_replace(q, i, x) == LB_ERR_NAN, "NaN replacement");
    lb_qmodel_entry(q, i, &e);
    CHECK(e.state == LB_QSTATE_STORED && !e.replaced, "unchanged");
    free(x);
    CHECK(lb_qmodel_set_qtensor(q, i, NULL) == LB_ERR_ARG, "NULL qtensor");
    CHECK(lb_qmodel_set_input_amax(q, i, -1) == LB_ERR_ARG, "negative amax");
    CHECK(lb_qmodel_set_input_amax(q, i, INFINITY) == LB_ERR_ARG, "inf amax");
    CHECK(lb_qmodel_set_input_amax(q, i, 3.5f) == LB_OK, "amax");
    lb_qmodel_entry(q, i, &e);
    CHECK(e.input_amax == 3.5f, "recorded");
    lb_qact act = {LB_ACT_STATIC, {0}};
    lb_qspec_parse("fp8_e4m3:token", &act.spec);
    CHECK(lb_qmodel_set_act(q, i, &act) == LB_ERR_ARG, "static needs tensor");
    act.mode = LB_ACT_DYNAMIC;
    CHECK(lb_qmodel_set_act(q, i, &act) == LB_OK, "%s", lb_last_error());
    act.mode = (lb_act_mode)9;
    CHECK(lb_qmodel_set_act(q, i, &act) == LB_ERR_ARG, "unknown mode");
    lb_qmodel_entry(q, i, &e);
    CHECK(e.act.mode == LB_ACT_DYNAMIC && e.act.spec.element == LB_FMT_FP8_E4M3, "act kept");
    CHECK(lb_qmodel_set_dtype(q, LB_DT_Q8_0) == LB_ERR_ARG, "dtype");
    CHECK(lb_qmodel_set_kv(q, LB_FMT_INT8) == LB_ERR_ARG, "kv int8");
    CHECK(lb_qmodel_set_kv_amax(q, 0, 1, 1) == LB_ERR_ARG, "no kv yet");
    CHECK(lb_qmodel_set_kv(q, LB_FMT_FP8_E4M3) == LB_OK, "kv");
    CHECK(lb_qmodel_set_kv_amax(q, 5, 1, 1) == LB_ERR_ARG, "layer 5 of 5");
    CHECK(lb_qmodel_set_kv_amax(q, 4, 2.5f, NAN) == LB_ERR_ARG, "NaN");
    CHECK(lb_qmodel_set_kv_amax(q, 4, 2.5f, 0.75f) == LB_OK, "kv amax");
    float k, v;
    CHECK(lb_qmodel_kv_amax(q, 4, &k, &v) == LB_OK && k == 2.5f && v == 0.75f, "read back");
    CHECK(lb_qmodel_kv_amax(q, 3, &k, &v) == LB_OK && k == 0 && v == 0, "uncalibrated");
    CHECK(lb_qmodel_set_kv(q, LB_FMT_FP32) == LB_OK, "kv off");
}

/* NVFP4 q/k/v of one layer: one tensor scale from the largest |w| of the
 * three; a member under another spec does not count. */
static void test_fused_group(lb_qmodel *q)
{
    const char *names[3] = {"model.layers.1.self_attn.q_proj.weight", "model.layers.1.self_attn.k_proj.weight",
                            "model.layers.1.self_attn.v_proj.weight"};
    size_t id[3];
    float m[3];
    lb_qspec nv;
    lb_qspec_parse("nvfp4", &nv);
    for (int t = 0; t < 3; t++) {
        id[t] = idx(q, names[t]);
        float *x = source(q, id[t]);
        lb_qentry e;
        lb_qmodel_entry(q, id[t], &e);
        m[t] = amax_of(x, e.tensor->n_elements);
        free(x);
        CHECK(lb_qmodel_set_spec(q, id[t], &nv) == LB_OK, "nvfp4");
    }
    float gmax = fmaxf(m[0], fmaxf(m[1], m[2]));
    CHECK(m[0] != m[1] || m[1] != m[2], "the members differ (else the test shows nothing)");
    float ts[3];
    for (int t = 0; t < 3; t++) {
        lb_qentry e;
        lb_qmodel_entry(q, id[t], &e);
        CHECK(e.group_amax == gmax, "group amax %g vs %g", e.group_amax, gmax);
        lb_qtensor *qt;
        int own;
        CHECK(lb_qmodel_quantized(q, id[t], 1, &qt, &own) == LB_OK, "%s", lb_last_error());
        lb_qtensor_view v;
        lb_qtensor_view_get(qt, &v);
        ts[t] = v.tensor_scale;
        lb_qtensor_free(qt);
    }
    CHECK(ts[0] == ts[1] && ts[1] == ts[2], "one tensor scale: %g %g %g", ts[0], ts[1], ts[2]);
    CHECK(ts[0] == gmax / (6.0f * 448.0f), "amax / (6 * 448): %g", ts[0]);
    /* a member under another spec leaves the group */
    lb_qspec i4;
    lb_qspec_parse("int4:g32", &i4);
    size_t argmax = m[0] == gmax ? 0 : m[1] == gmax ? 1 : 2, other = (argmax + 1) % 3;
    CHECK(lb_qmodel_set_spec(q, id[argmax], &i4) == LB_OK, "int4");
    lb_qentry e;
    lb_qmodel_entry(q, id[other], &e);
    float rest = 0;
    for (int t = 0; t < 3; t++)
        if ((size_t)t != argmax && m[t] > rest) rest = m[t];
    CHECK(e.group_amax == rest, "without the int4 member: %g vs %g", e.group_amax, rest);
    lb_qmodel_entry(q, id[argmax], &e);
    CHECK(e.group_amax == 0, "not two-level: 0");
    /* a replacement changes the range */
    lb_qmodel_entry(q, id[other], &e);
    size_t n = e.tensor->n_elements;
    float *x = source(q, id[other]);
    x[0] = 40.0f;
    CHECK(lb_qmodel_replace(q, id[other], x) == LB_OK, "replace");
    free(x);
    size_t third = 3 - argmax - other;
    lb_qmodel_entry(q, id[third], &e);
    CHECK(e.group_amax == 40.0f, "the replaced member's 40: %g", e.group_amax);
    (void)n;
    /* lb_quantize without the override: the tensor's own */
    float *own = source(q, id[third]);
    lb_qtensor *qt;
    lb_quantize(&nv, own, e.tensor->shape[0], e.tensor->shape[1], 1, &qt);
    lb_qtensor_view v;
    lb_qtensor_view_get(qt, &v);
    CHECK(v.tensor_scale == m[third] / (6.0f * 448.0f), "lb_quantize unchanged");
    lb_qtensor_free(qt);
    free(own);
}

/* The size-only view export writes headers from (lb__qtensor_layout) is
 * the view of the tensor lb_quantize then makes, for every kind of spec. */
static void test_layout(void)
{
    static const char *const specs[] = {"int8:channel", "int4:g32:scale=bf16", "int4:g32:affine", "uint4:g16:affine",
                                        "fp8_e4m3:tensor", "fp8_e4m3:channel:scale=bf16", "nvfp4", "mxfp4", "mxfp8_e4m3",
                                        "int8:g64", "mxfp6_e2m3", "fp8_e4m3:b2x32", "int8:b3x16:scale=bf16"};
    const size_t shapes[][2] = {{3, 64}, {5, 96}, {1, 224}, {7, 33}};
    float x[7 * 224];
    for (size_t k = 0; k < sizeof x / sizeof x[0]; k++) x[k] = (float)((int)(k * 37 % 101) - 50) / 7.0f;
    for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++)
        for (size_t h = 0; h < sizeof shapes / sizeof shapes[0]; h++) {
            lb_qspec spec;
            lb_status st = lb_qspec_parse(specs[s], &spec);
            CHECK(st == LB_OK, "%s: %s", specs[s], lb_last_error());
            if (st != LB_OK) continue;
            lb_qtensor *qt = NULL;
            if (lb_quantize(&spec, x, shapes[h][0], shapes[h][1], 1, &qt) != LB_OK) continue; /* blocks that do not fit */
            lb_qtensor_view got, want;
            lb__qtensor_layout(&spec, shapes[h][0], shapes[h][1], &got);
            lb_qtensor_view_get(qt, &want);
            CHECK(got.rows == want.rows && got.cols == want.cols && got.row_bytes == want.row_bytes &&
                      got.data_bytes == want.data_bytes && got.scales_per_row == want.scales_per_row &&
                      got.scale_count == want.scale_count && got.scale_bytes == want.scale_bytes &&
                      got.scale_rows == want.scale_rows &&
                      got.zero_point_row_bytes == want.zero_point_row_bytes &&
                      got.zero_point_bytes == want.zero_point_bytes && !got.data && !got.scales && !got.zero_points,
                  "%s on %zu x %zu", specs[s], shapes[h][0], shapes[h][1]);
            lb_qtensor_free(qt);
        }
}

int main(void)
{
    lb_model *m = NULL;
    if (lb_model_open(MODEL, &m) != LB_OK) {
        fprintf(stderr, "cannot open %s: %s\n", MODEL, lb_last_error());
        return 1;
    }
    lb_qmodel *q = NULL;
    CHECK(lb_qmodel_new(NULL, &q) == LB_ERR_ARG && q == NULL, "NULL model");
    CHECK(lb_qmodel_new(m, &q) == LB_OK, "%s", lb_last_error());
    test_new_and_find(m, q);
    test_states(q);
    test_errors(q);
    test_fused_group(q);
    test_layout();
    lb_qmodel_free(q);
    lb_qmodel_free(NULL);
    lb_model_close(m);
    return check_summary();
}
