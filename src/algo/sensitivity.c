/* Which decoder layers cost the most to quantize (lowbit.h,
 * lb_layer_sensitivity, lb_qmodel_keep_sensitive): each layer quantized
 * alone, the KL divergence of the model's next-token distributions from
 * the model as stored, on lb_kld's windows (whole windows, BOS first,
 * the second half scored), so that the figure for layer L is the one
 * `lowbit kld` gives a recipe that quantizes layer L alone.
 *
 * One runner of the model as stored does all of it: layer L is loaded
 * from the quantized model (lb__runner_reload_layer), measured, and
 * loaded back as stored, so at most one layer exists twice. Layers run
 * one at a time on every window's hidden states (lb__runner_layer):
 *   1. each window's input to layer 0 (the embeddings), and its final
 *      hidden states under the base model at the scored positions (from
 *      which the base logits are recomputed when needed: a few hundred
 *      rows x dim floats instead of rows x vocab);
 *   2. for L = 0 .. n-1: with layer L quantized, every window from its
 *      layer-L input through layers L .. n-1 and the head, scored against
 *      the base logits; then layer L as stored advances the windows' input
 *      to layer L + 1.
 * Layers before L are never rerun: about half the layer passes of a loop
 * of full forward passes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval/eval_internal.h"
#include "model/runner_internal.h"
#include "util/error.h"

#define SENSITIVITY_DEFAULT_CTX 512
/* Scored rows whose logits are computed at once: two blocks of this many
 * rows x vocab floats (the base's and the measured model's). */
#define SENSITIVITY_ROW_BLOCK 32

typedef struct job {
    const lb_qmodel *q;       /* what each layer becomes when measured */
    lb_qmodel *base_q;        /* every tensor as stored */
    lb_runner *r;             /* built from base_q; one layer at a time reloaded from q */
    size_t n_layers, dim, vocab;
    uint32_t ctx;
    size_t windows, first, scored; /* scored rows: first .. first + scored - 1 of each window */
    float *x;                 /* [windows][ctx][dim] every window's input to the current layer */
    float *fin;               /* [windows][scored][dim] base final hidden states at the scored rows */
    float *tmp;               /* [ctx][dim] one window on its way through the measured model */
    float *lb, *lq;           /* [ROW_BLOCK][vocab] logits: base, measured */
    double *pb, *pq;          /* [vocab] log-probabilities */
} job;

static void free_job(job *j)
{
    lb_runner_free(j->r);
    lb_qmodel_free(j->base_q);
    free(j->x), free(j->fin), free(j->tmp), free(j->lb), free(j->lq), free(j->pb), free(j->pq);
}

/* 1 if layer l of q holds any weight quantized (under a spec or a ggml type). */
static int layer_quantized(const lb_qmodel *q, size_t l)
{
    char prefix[48];
    int len = snprintf(prefix, sizeof prefix, "model.layers.%zu.", l);
    for (size_t i = 0; i < lb_qmodel_count(q); i++) {
        lb_qentry e;
        if (lb_qmodel_entry(q, i, &e) != LB_OK || strncmp(e.tensor->name, prefix, (size_t)len) != 0 ||
            !lb_tensor_is_weight(e.tensor))
            continue;
        if (e.state == LB_QSTATE_QUANTIZED || e.ggml != LB_DT_COUNT) return 1;
    }
    return 0;
}

/* log softmax of one row into lp; 0 when a logit is NaN or +inf. */
static int log_softmax(const float *logits, size_t vocab, double *lp)
{
    double lse = lb__log_sum_exp(logits, vocab);
    if (!isfinite(lse)) return 0;
    for (size_t i = 0; i < vocab; i++) lp[i] = (double)logits[i] - lse;
    return 1;
}

static lb_status setup(job *j, const int32_t *tokens, size_t n, const lb_sensitivity_options *o)
{
    const lb_model *m = lb_qmodel_model(j->q);
    uint32_t model_ctx = lb_model_arch(m)->max_seq_len;
    lb_eval_options eo = {.ctx = o->ctx ? o->ctx
                                        : model_ctx && model_ctx < SENSITIVITY_DEFAULT_CTX ? model_ctx
                                                                                          : SENSITIVITY_DEFAULT_CTX,
                          .max_chunks = o->max_windows};
    lb_status st = lb__eval_windows(n, &eo, &j->ctx, &j->windows);
    if (st != LB_OK) return st;
    j->first = j->ctx / 2, j->scored = j->ctx - 1 - j->ctx / 2;
    if ((st = lb_qmodel_new(m, &j->base_q)) != LB_OK) return st;
    lb_runner_options ro = {.threads = o->threads, .max_ctx = j->ctx};
    if ((st = lb__runner_build(j->base_q, &ro, 0, &j->r)) != LB_OK) return st;
    j->n_layers = lb__runner_n_layers(j->r), j->dim = lb__runner_dim(j->r), j->vocab = lb_runner_vocab_size(j->r);
    size_t rows = j->windows * j->ctx;
    j->x = malloc(rows * j->dim * sizeof *j->x);
    j->fin = malloc(j->windows * j->scored * j->dim * sizeof *j->fin);
    j->tmp = malloc(j->ctx * j->dim * sizeof *j->tmp);
    j->lb = malloc(SENSITIVITY_ROW_BLOCK * j->vocab * sizeof *j->lb);
    j->lq = malloc(SENSITIVITY_ROW_BLOCK * j->vocab * sizeof *j->lq);
    j->pb = malloc(j->vocab * sizeof *j->pb), j->pq = malloc(j->vocab * sizeof *j->pq);
    int32_t *window = malloc(j->ctx * sizeof *window);
    if (!j->x || !j->fin || !j->tmp || !j->lb || !j->lq || !j->pb || !j->pq || !window) {
        free(window);
        return lb__fail(LB_ERR_NOMEM, "lb_layer_sensitivity: out of memory for %zu windows of %u", j->windows, j->ctx);
    }
    /* the embeddings, and the base model's final hidden states at the scored rows */
    for (size_t w = 0; w < j->windows && st == LB_OK; w++) {
        memcpy(window, tokens + w * j->ctx, j->ctx * sizeof *window);
        if (o->bos >= 0) window[0] = o->bos;
        float *xw = j->x + w * j->ctx * j->dim;
        st = lb__runner_embed(j->r, window, j->ctx, xw);
        if (st == LB_OK) memcpy(j->tmp, xw, j->ctx * j->dim * sizeof *j->tmp);
        for (size_t l = 0; l < j->n_layers && st == LB_OK; l++) st = lb__runner_layer(j->r, l, j->tmp, j->ctx);
        if (st == LB_OK)
            memcpy(j->fin + w * j->scored * j->dim, j->tmp + j->first * j->dim, j->scored * j->dim * sizeof *j->fin);
    }
    free(window);
    return st;
}

/* Window w's scored rows: the measured model's final states in j->tmp
 * against the base's; the sum of KLDs and of their squares. */
static lb_status score_window(job *j, size_t w, double *sum, double *sum2)
{
    lb_status st = LB_OK;
    for (size_t b = 0; b < j->scored && st == LB_OK; b += SENSITIVITY_ROW_BLOCK) {
        size_t rows = j->scored - b < SENSITIVITY_ROW_BLOCK ? j->scored - b : SENSITIVITY_ROW_BLOCK;
        st = lb__runner_logits(j->r, j->fin + (w * j->scored + b) * j->dim, rows, j->lb);
        if (st == LB_OK) st = lb__runner_logits(j->r, j->tmp + (j->first + b) * j->dim, rows, j->lq);
        for (size_t t = 0; t < rows && st == LB_OK; t++) {
            if (!log_softmax(j->lb + t * j->vocab, j->vocab, j->pb) || !log_softmax(j->lq + t * j->vocab, j->vocab, j->pq))
                return lb__fail(LB_ERR_NAN, "window %zu, position %zu: the logits are not finite", w, j->first + b + t);
            double kld = 0;
            for (size_t i = 0; i < j->vocab; i++) {
                double p = exp(j->pb[i]);
                if (p > 0) kld += p * (j->pb[i] - j->pq[i]);
            }
            if (!isfinite(kld))
                return lb__fail(LB_ERR_NAN, "window %zu, position %zu: the KL divergence is not finite (the quantized "
                                "layer gives a probability of 0 to what the base model finds possible)", w,
                                j->first + b + t);
            if (kld < 0) kld = 0; /* rounding can leave a tiny negative, as in lb_kld */
            *sum += kld, *sum2 += kld * kld;
        }
    }
    return st;
}

/* Layer l as q holds it, every window from its input to layer l on. */
static lb_status measure_layer(job *j, size_t l, lb_layer_kld *out)
{
    lb_status st = lb__runner_reload_layer(j->r, j->q, l);
    if (st != LB_OK) return st;
    double sum = 0, sum2 = 0;
    for (size_t w = 0; w < j->windows && st == LB_OK; w++) {
        memcpy(j->tmp, j->x + w * j->ctx * j->dim, j->ctx * j->dim * sizeof *j->tmp);
        for (size_t k = l; k < j->n_layers && st == LB_OK; k++) st = lb__runner_layer(j->r, k, j->tmp, j->ctx);
        if (st == LB_OK) st = score_window(j, w, &sum, &sum2);
    }
    /* back as stored, whatever happened */
    lb_status back = lb__runner_reload_layer(j->r, j->base_q, l);
    if (st != LB_OK) return lb__fail(st, "layer %zu: %s", l, lb_last_error());
    if (back != LB_OK) return back;
    double n = (double)(j->windows * j->scored), mean = sum / n, var = sum2 / n - mean * mean;
    out->measured = 1;
    out->kld = mean;
    out->kld_err = n > 1 && var > 0 ? sqrt(var / (n - 1)) : 0;
    return LB_OK;
}

/* Largest KLD first; unmeasured last; ties by layer index. */
static int by_kld(const void *pa, const void *pb)
{
    const lb_layer_kld *a = pa, *b = pb;
    if (a->measured != b->measured) return b->measured - a->measured;
    if (a->kld != b->kld) return a->kld < b->kld ? 1 : -1;
    return (a->layer > b->layer) - (a->layer < b->layer);
}

lb_status lb_layer_sensitivity(const lb_qmodel *q, const int32_t *tokens, size_t n, const lb_sensitivity_options *o,
                               lb_layer_kld *out)
{
    if (!q || !out) return lb__fail(LB_ERR_ARG, "lb_layer_sensitivity: NULL argument");
    if (!tokens || n == 0) return lb__fail(LB_ERR_ARG, "lb_layer_sensitivity: no tokens");
    lb_sensitivity_options defaults = {.bos = -1};
    if (!o) o = &defaults;
    job j = {.q = q};
    lb_status st = setup(&j, tokens, n, o);
    for (size_t l = 0; l < j.n_layers && st == LB_OK; l++) {
        lb_layer_kld *e = &out[l];
        memset(e, 0, sizeof *e);
        e->layer = (uint32_t)l;
        if (layer_quantized(q, l)) st = measure_layer(&j, l, e);
        /* the windows' input to layer l + 1, through layer l as stored */
        for (size_t w = 0; w < j.windows && l + 1 < j.n_layers && st == LB_OK; w++)
            st = lb__runner_layer(j.r, l, j.x + w * j.ctx * j.dim, j.ctx);
        if (st == LB_OK && o->progress) o->progress(o->progress_ctx, l + 1, j.n_layers);
    }
    if (st == LB_OK) qsort(out, j.n_layers, sizeof *out, by_kld);
    free_job(&j);
    return st;
}

lb_status lb_qmodel_keep_sensitive(lb_qmodel *q, const int32_t *tokens, size_t n, size_t keep,
                                   const lb_sensitivity_options *o, lb_layer_kld *ranking_out)
{
    if (!q) return lb__fail(LB_ERR_ARG, "lb_qmodel_keep_sensitive: qmodel is NULL");
    size_t n_layers = lb_model_arch(lb_qmodel_model(q))->n_layers;
    if (keep > n_layers)
        return lb__fail(LB_ERR_ARG, "lb_qmodel_keep_sensitive: keeping %zu layers of a model of %zu", keep, n_layers);
    lb_layer_kld *rank = ranking_out ? ranking_out : malloc((n_layers + 1) * sizeof *rank);
    if (!rank) return lb__fail(LB_ERR_NOMEM, "lb_qmodel_keep_sensitive: out of memory");
    lb_status st = lb_layer_sensitivity(q, tokens, n, o, rank);
    static const lb_qact none = {LB_ACT_NONE, {0}};
    for (size_t k = 0; k < keep && k < n_layers && st == LB_OK && rank[k].measured; k++) {
        char prefix[48];
        int len = snprintf(prefix, sizeof prefix, "model.layers.%u.", rank[k].layer);
        for (size_t i = 0; i < lb_qmodel_count(q) && st == LB_OK; i++) {
            const lb_tensor *t = lb_model_tensor(lb_qmodel_model(q), i);
            if (strncmp(t->name, prefix, (size_t)len) != 0 || !lb_tensor_is_weight(t)) continue;
            st = lb_qmodel_keep(q, i);
            if (st == LB_OK) st = lb_qmodel_set_act(q, i, &none);
        }
        rank[k].kept = st == LB_OK;
    }
    if (rank != ranking_out) free(rank);
    return st;
}
