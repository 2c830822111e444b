/* Which decoder layers cost the most to quantize (lowbit.h,
 * lb_layer_sensitivity, lb_qmodel_keep_sensitive): each layer quantized
 * alone, the KL divergence of the model's next-token distributions from
 * the model as stored, on lb_kld's windows (whole windows, BOS first,
 * the second half scored), so that the figure for layer L is the one
 * `lowbit kld` gives a recipe that quantizes layer L alone (the same
 * logits, and the same sums in double).
 *
 * One runner of the model as stored does all of it, window by window:
 *   1. the window through the base model: its logits at the scored rows
 *      are kept (scored rows x vocab floats, with each row's log-sum-exp);
 *   2. for L = 0 .. n-1, with h the window's input to layer L (the base
 *      model's: the embeddings, then advanced one base layer at a time):
 *      layer L is loaded from the quantized model (lb__runner_reload_layer),
 *      a copy of h runs through layers L .. n-1 and the head, is scored
 *      against the kept base logits, and layer L is loaded back as stored.
 * So at most one layer exists twice, layers before L never run again for
 * L (about half the layer passes of a loop of full forward passes), and
 * the head runs once per layer on the scored rows only. The price: each
 * measured layer is quantized again for every window (cheap beside the
 * forward passes). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval/eval_internal.h"
#include "model/runner_internal.h"
#include "util/error.h"

#define SENSITIVITY_DEFAULT_CTX 512
/* Scored rows whose logits the measured model computes at once: the head
 * (a vocab x dim matrix, dequantized panel by panel when packed) is read
 * once per block, and the block takes rows x vocab floats. */
#define SENSITIVITY_ROW_BLOCK 128

typedef struct job {
    const lb_qmodel *q;       /* what each layer becomes when measured */
    lb_qmodel *base_q;        /* every tensor as stored */
    lb_runner *r;             /* built from base_q; one layer at a time reloaded from q */
    size_t n_layers, dim, vocab;
    uint32_t ctx;
    size_t windows, first, scored; /* scored rows: first .. first + scored - 1 of each window */
    int32_t *window;          /* [ctx] the window's ids */
    float *h;                 /* [ctx][dim] the window's input to the current layer (base model) */
    float *tmp;               /* [ctx][dim] the window on its way through the measured model */
    float *base;              /* [scored][vocab] the base model's logits at the scored rows */
    double *base_lse;         /* [scored] their log-sum-exp */
    float *lq;                /* [ROW_BLOCK][vocab] the measured model's logits */
    int *measured;            /* [n_layers] 1: the layer has something quantized */
    double *sum, *sum2;       /* [n_layers] sums of the scored rows' KLD and its square */
} job;

static void free_job(job *j)
{
    lb_runner_free(j->r);
    lb_qmodel_free(j->base_q);
    free(j->window), free(j->h), free(j->tmp), free(j->base), free(j->base_lse), free(j->lq);
    free(j->measured), free(j->sum), free(j->sum2);
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

static lb_status setup(job *j, size_t n, const lb_sensitivity_options *o)
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
    size_t block = j->scored < SENSITIVITY_ROW_BLOCK ? j->scored : SENSITIVITY_ROW_BLOCK;
    j->window = malloc(j->ctx * sizeof *j->window);
    j->h = malloc(j->ctx * j->dim * sizeof *j->h);
    j->tmp = malloc(j->ctx * j->dim * sizeof *j->tmp);
    j->base = malloc(j->scored * j->vocab * sizeof *j->base);
    j->base_lse = malloc(j->scored * sizeof *j->base_lse);
    j->lq = malloc(block * j->vocab * sizeof *j->lq);
    j->measured = calloc(j->n_layers + 1, sizeof *j->measured);
    j->sum = calloc(j->n_layers + 1, sizeof *j->sum), j->sum2 = calloc(j->n_layers + 1, sizeof *j->sum2);
    if (!j->window || !j->h || !j->tmp || !j->base || !j->base_lse || !j->lq || !j->measured || !j->sum || !j->sum2)
        return lb__fail(LB_ERR_NOMEM, "lb_layer_sensitivity: out of memory for windows of %u over a vocabulary of %zu",
                        j->ctx, j->vocab);
    for (size_t l = 0; l < j->n_layers; l++) j->measured[l] = layer_quantized(j->q, l);
    return LB_OK;
}

/* Window w: its embeddings in j->h, and the base model's logits at the
 * scored rows with their log-sum-exp. */
static lb_status base_window(job *j, const int32_t *tokens, size_t w, int32_t bos)
{
    memcpy(j->window, tokens + w * j->ctx, j->ctx * sizeof *j->window);
    if (bos >= 0) j->window[0] = bos;
    lb_status st = lb__runner_embed(j->r, j->window, j->ctx, j->h);
    if (st == LB_OK) memcpy(j->tmp, j->h, j->ctx * j->dim * sizeof *j->tmp);
    for (size_t l = 0; l < j->n_layers && st == LB_OK; l++) st = lb__runner_layer(j->r, l, j->tmp, j->ctx);
    if (st == LB_OK) st = lb__runner_logits(j->r, j->tmp + j->first * j->dim, j->scored, j->base);
    for (size_t t = 0; t < j->scored && st == LB_OK; t++) {
        j->base_lse[t] = lb__log_sum_exp(j->base + t * j->vocab, j->vocab);
        if (!isfinite(j->base_lse[t]))
            st = lb__fail(LB_ERR_NAN, "window %zu, position %zu: the base model's logits are not finite", w, j->first + t);
    }
    return st;
}

/* KL(base || measured) of scored row t (lb_kld's sum: p_base x (log p_base
 * - log p_measured) in double over the tokens the base finds possible). */
static lb_status row_kld(const job *j, size_t t, const float *lq, size_t w, double *out)
{
    const float *lb = j->base + t * j->vocab;
    double lse_q = lb__log_sum_exp(lq, j->vocab), kld = 0;
    if (!isfinite(lse_q))
        return lb__fail(LB_ERR_NAN, "window %zu, position %zu: the logits are not finite", w, j->first + t);
    for (size_t i = 0; i < j->vocab; i++) {
        double pb = (double)lb[i] - j->base_lse[t], p = exp(pb);
        if (p > 0) kld += p * (pb - ((double)lq[i] - lse_q));
    }
    if (!isfinite(kld))
        return lb__fail(LB_ERR_NAN, "window %zu, position %zu: the KL divergence is not finite (the quantized layer "
                        "gives a probability of 0 to what the base model finds possible)", w, j->first + t);
    *out = kld > 0 ? kld : 0; /* rounding can leave a tiny negative, as in lb_kld */
    return LB_OK;
}

/* Layer l as q holds it on window w, from the window's input to layer l. */
static lb_status measure_layer(job *j, size_t l, size_t w)
{
    lb_status st = lb__runner_reload_layer(j->r, j->q, l);
    if (st != LB_OK) return st;
    memcpy(j->tmp, j->h, j->ctx * j->dim * sizeof *j->tmp);
    for (size_t k = l; k < j->n_layers && st == LB_OK; k++) st = lb__runner_layer(j->r, k, j->tmp, j->ctx);
    for (size_t b = 0; b < j->scored && st == LB_OK; b += SENSITIVITY_ROW_BLOCK) {
        size_t rows = j->scored - b < SENSITIVITY_ROW_BLOCK ? j->scored - b : SENSITIVITY_ROW_BLOCK;
        st = lb__runner_logits(j->r, j->tmp + (j->first + b) * j->dim, rows, j->lq);
        for (size_t t = 0; t < rows && st == LB_OK; t++) {
            double kld = 0;
            st = row_kld(j, b + t, j->lq + t * j->vocab, w, &kld);
            if (st == LB_OK) j->sum[l] += kld, j->sum2[l] += kld * kld;
        }
    }
    /* back as stored, whatever happened */
    lb_status back = lb__runner_reload_layer(j->r, j->base_q, l);
    if (st != LB_OK) return lb__fail(st, "layer %zu: %s", l, lb_last_error());
    return back;
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
    lb_status st = setup(&j, n, o);
    size_t steps = j.windows * j.n_layers;
    for (size_t w = 0; w < j.windows && st == LB_OK; w++) {
        st = base_window(&j, tokens, w, o->bos);
        for (size_t l = 0; l < j.n_layers && st == LB_OK; l++) {
            if (j.measured[l]) st = measure_layer(&j, l, w);
            /* the window's input to layer l + 1, through layer l as stored */
            if (st == LB_OK && l + 1 < j.n_layers) st = lb__runner_layer(j.r, l, j.h, j.ctx);
            if (st == LB_OK && o->progress) o->progress(o->progress_ctx, w * j.n_layers + l + 1, steps);
        }
    }
    double count = (double)(j.windows * j.scored);
    for (size_t l = 0; l < j.n_layers && st == LB_OK; l++) {
        double mean = j.sum[l] / count, var = j.sum2[l] / count - mean * mean;
        out[l] = (lb_layer_kld){.layer = (uint32_t)l, .measured = j.measured[l]};
        if (j.measured[l]) out[l].kld = mean, out[l].kld_err = count > 1 && var > 0 ? sqrt(var / (count - 1)) : 0;
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
