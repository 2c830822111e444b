/* Calibration (lowbit.h, lb_calibrate): the tokens run in windows through
 * a runner built from the quantized model with fp32 activations and an
 * fp32 KV cache (lb__runner_build's calibration mode), so that what is
 * measured is the input each layer sees in the quantized model before its
 * own activations are quantized -- as llm-compressor's observers see it.
 * The activation hook records every QUANTIZED linear layer's largest
 * |input| (of the features that are not 16-bit outlier columns: the rest
 * is what its activations quantize); the KV hook each layer's largest |k| (after the rotary
 * embedding: what the cache stores) and |v|. Maxima collect in scratch
 * and reach the qmodel only when every window ran and every value was
 * finite: a failed call records nothing. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/runner_internal.h"
#include "util/error.h"

/* The window when none is asked for (and the model's context allows). */
#define LB_CALIB_DEFAULT_CTX 512

typedef struct calib {
    const lb_qmodel *q;
    float *amax;          /* per qmodel entry; -1: a non-finite input was seen */
    float *kv;            /* [layer][k, v]; -1 likewise */
    size_t n_layers;
    size_t last;          /* the entry found last (the hook's names come in model order) */
} calib;

static float range_of(const float *x, size_t n)
{
    float m = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(x[i])) return -1.0f;
        if (fabsf(x[i]) > m) m = fabsf(x[i]);
    }
    return m;
}

/* range_of over the columns that are not outlier columns (cols ascending):
 * a layer with 16-bit outlier columns quantizes only the rest of its
 * input (runner.c's split product). */
static float range_of_rest(const float *x, size_t rows, size_t width, const uint32_t *cols, size_t n)
{
    float m = 0;
    for (size_t r = 0; r < rows; r++) {
        const float *row = x + r * width;
        for (size_t j = 0, k = 0; j < width; j++) {
            if (k < n && cols[k] == j) {
                k++;
                continue;
            }
            if (!isfinite(row[j])) return -1.0f;
            if (fabsf(row[j]) > m) m = fabsf(row[j]);
        }
    }
    return m;
}

static void merge(float *slot, float m)
{
    if (*slot < 0) return;
    if (m < 0 || m > *slot) *slot = m;
}

static void on_input(void *ctx, const char *name, const float *x, size_t rows, size_t cols)
{
    calib *c = ctx;
    size_t i = c->last;
    const lb_tensor *t = i < lb_qmodel_count(c->q) ? lb_model_tensor(lb_qmodel_model(c->q), i) : NULL;
    if ((!t || strcmp(t->name, name) != 0) && lb_qmodel_find(c->q, name, &i) != LB_OK) return;
    c->last = i;
    size_t n = 0;
    const uint32_t *outliers = lb_qmodel_outliers(c->q, i, &n);
    merge(&c->amax[i], outliers ? range_of_rest(x, rows, cols, outliers, n) : range_of(x, rows * cols));
}

static void on_kv(void *ctx, size_t layer, const float *k, const float *v, size_t n, size_t kv_dim)
{
    calib *c = ctx;
    if (layer >= c->n_layers) return;
    merge(&c->kv[2 * layer], range_of(k, n * kv_dim));
    merge(&c->kv[2 * layer + 1], range_of(v, n * kv_dim));
}

/* 1 if the output head's input is wanted: a quantized head with quantized
 * activations (its hook runs only when logits are computed). */
static int head_wanted(const lb_qmodel *q)
{
    const char *names[2] = {"lm_head.weight", "model.embed_tokens.weight"};
    for (int k = 0; k < 2; k++) {
        size_t i;
        lb_qentry e;
        if (lb_qmodel_find(q, names[k], &i) == LB_OK && lb_qmodel_entry(q, i, &e) == LB_OK &&
            e.state == LB_QSTATE_QUANTIZED && e.act.mode != LB_ACT_NONE)
            return 1;
    }
    return 0;
}

/* Writes the collected maxima into the qmodel (running maxima), or fails
 * naming the first non-finite input. */
static lb_status commit(lb_qmodel *q, const calib *c)
{
    size_t n = lb_qmodel_count(q);
    for (size_t i = 0; i < n; i++)
        if (c->amax[i] < 0)
            return lb__fail(LB_ERR_NAN, "lb_calibrate: the input of %s is not finite (NaN or infinity)",
                            lb_model_tensor(lb_qmodel_model(q), i)->name);
    for (size_t l = 0; c->kv && l < c->n_layers; l++)
        if (c->kv[2 * l] < 0 || c->kv[2 * l + 1] < 0)
            return lb__fail(LB_ERR_NAN, "lb_calibrate: the %s of layer %zu are not finite (NaN or infinity)",
                            c->kv[2 * l] < 0 ? "keys" : "values", l);
    lb_status st = LB_OK;
    for (size_t i = 0; i < n && st == LB_OK; i++) {
        lb_qentry e;
        if ((st = lb_qmodel_entry(q, i, &e)) != LB_OK) break;
        if (e.state != LB_QSTATE_QUANTIZED || c->amax[i] <= e.input_amax) continue;
        st = lb_qmodel_set_input_amax(q, i, c->amax[i]);
    }
    for (size_t l = 0; c->kv && l < c->n_layers && st == LB_OK; l++) {
        float k, v;
        if ((st = lb_qmodel_kv_amax(q, (uint32_t)l, &k, &v)) != LB_OK) break;
        st = lb_qmodel_set_kv_amax(q, (uint32_t)l, fmaxf(k, c->kv[2 * l]), fmaxf(v, c->kv[2 * l + 1]));
    }
    return st;
}

lb_status lb_calibrate(lb_qmodel *q, const int32_t *tokens, size_t n, const lb_calib_options *o)
{
    if (!q) return lb__fail(LB_ERR_ARG, "lb_calibrate: qmodel is NULL");
    if (!tokens || n == 0) return lb__fail(LB_ERR_ARG, "lb_calibrate: no tokens");
    lb_calib_options defaults = {0};
    if (!o) o = &defaults;
    uint32_t ctx = o->ctx;
    if (!ctx) {
        uint32_t model_ctx = lb_model_arch(lb_qmodel_model(q))->max_seq_len;
        ctx = model_ctx && model_ctx < LB_CALIB_DEFAULT_CTX ? model_ctx : LB_CALIB_DEFAULT_CTX;
    }
    lb_runner_options ro = {.threads = o->threads, .max_ctx = ctx};
    lb_runner *r = NULL;
    lb_status st = lb__runner_build(q, &ro, LB__RUNNER_CALIB, &r);
    if (st != LB_OK) return st;
    calib c = {.q = q, .n_layers = lb_model_arch(lb_qmodel_model(q))->n_layers};
    c.amax = calloc(lb_qmodel_count(q) + 1, sizeof *c.amax);
    if (lb_qmodel_kv(q) != LB_FMT_FP32) c.kv = calloc(2 * c.n_layers + 1, sizeof *c.kv);
    int want_head = head_wanted(q);
    float *logits = want_head ? malloc(((size_t)ctx * lb_runner_vocab_size(r) + 1) * sizeof *logits) : NULL;
    if (!c.amax || (lb_qmodel_kv(q) != LB_FMT_FP32 && !c.kv) || (want_head && !logits))
        st = lb__fail(LB_ERR_NOMEM, "lb_calibrate: out of memory");
    lb_runner_set_hook(r, on_input, &c);
    if (c.kv) lb__runner_set_kv_hook(r, on_kv, &c);
    size_t windows = (n + ctx - 1) / ctx, done = 0;
    for (size_t at = 0; at < n && st == LB_OK; at += ctx) {
        lb_runner_reset(r);
        st = lb_runner_forward(r, tokens + at, n - at < ctx ? n - at : ctx, logits, 0);
        if (st == LB_OK && o->progress) o->progress(o->progress_ctx, ++done, windows);
    }
    if (st == LB_OK) st = commit(q, &c);
    free(logits);
    free(c.amax);
    free(c.kv);
    lb_runner_free(r);
    return st;
}
