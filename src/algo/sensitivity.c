/* What quantizing each unit of a model costs, each alone (lowbit.h,
 * lb_sensitivity; lb_layer_sensitivity and lb_qmodel_keep_sensitive on top):
 * the KL divergence of the model's next-token distributions from the
 * model as stored, on lb_kld's windows (whole windows, BOS first, the
 * second half scored), so that a unit's figure is the one `lowbit kld`
 * gives a recipe that quantizes that unit alone (the same logits, and the
 * same sums in double).
 *
 * One runner of the model as stored (built from a probe qmodel whose
 * entries are all as stored) does all of it, window by window:
 *   1. the window through the base model: its logits at the scored rows
 *      are kept (scored rows x vocab floats, with each row's log-sum-exp);
 *   2. for L = -1 (the embedding), 0 .. n-1, n (the head), with h the
 *      window's input to layer L (the base model's, advanced one base layer
 *      at a time), every unit whose first changed layer is L, for every
 *      candidate: the unit's entries are lent from the candidate to the
 *      probe (lb__qmodel_borrow: nothing copied), the layers they belong to
 *      (and the embedding and head, the KV cache) are reloaded from the
 *      probe, a copy of h runs through layers L .. n-1 and the head and is
 *      scored against the kept base logits; then the entries go back and
 *      the layers are reloaded as stored.
 * So at most one unit exists twice, layers before a unit never run again
 * for it (about half the layer passes of a loop of full forward passes),
 * and the head runs once per measurement on the scored rows only. The
 * price: each measured unit is quantized again for every window (cheap
 * beside the forward passes). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo/units.h"
#include "eval/eval_internal.h"
#include "model/runner_internal.h"
#include "util/clock.h"
#include "util/error.h"
#include "weights/qmodel_internal.h"

#define SENSITIVITY_DEFAULT_CTX 512
/* Scored rows whose logits the measured model computes at once: the head
 * (a vocab x dim matrix, dequantized panel by panel when packed) is read
 * once per block, and the block takes rows x vocab floats. */
#define SENSITIVITY_ROW_BLOCK 128

typedef struct job {
    const lb_qmodel *const *cands;
    size_t n_cands;
    const lb_units *units;
    lb_qmodel *probe;         /* every tensor as stored, but the entries lent for one measurement */
    lb_runner *r;             /* built from probe */
    size_t n_layers, dim, vocab;
    uint32_t ctx;
    size_t windows, first, scored; /* scored rows: first .. first + scored - 1 of each window */
    int32_t *window;          /* [ctx] the window's ids */
    float *h;                 /* [ctx][dim] the window's input to the current layer (base model) */
    float *tmp;               /* [ctx][dim] the window on its way through the measured model */
    float *base;              /* [scored][vocab] the base model's logits at the scored rows */
    double *base_lse;         /* [scored] their log-sum-exp */
    float *lq;                /* [ROW_BLOCK][vocab] the measured model's logits */
    unsigned char *touched;   /* [n_layers] layers of the unit being measured */
    int *changed;             /* [cands x units] 1: the candidate changes something of the unit */
    double *sum, *sum2, *nll; /* [cands x units] sums over the scored rows: KLD, its square, NLL */
    double base_nll;
} job;

static void free_job(job *j)
{
    lb_runner_free(j->r);
    lb_qmodel_free(j->probe);
    free(j->window), free(j->h), free(j->tmp), free(j->base), free(j->base_lse), free(j->lq);
    free(j->touched), free(j->changed), free(j->sum), free(j->sum2), free(j->nll);
}

/* Whether candidate q changes unit x (a weight quantized, an activation, the KV cache). */
static int unit_changed(const lb_qmodel *q, const lb__unit *x)
{
    if (x->kv && lb_qmodel_kv(q) != LB_FMT_FP32) return 1;
    for (size_t k = 0; k < x->n; k++) {
        lb_qentry e;
        if (lb_qmodel_entry(q, x->entries[k], &e) != LB_OK) continue;
        if (x->act_only ? e.act.mode != LB_ACT_NONE
                        : e.state != LB_QSTATE_STORED || e.ggml != LB_DT_COUNT || e.act.mode != LB_ACT_NONE)
            return 1;
    }
    return 0;
}

static lb_status setup(job *j, size_t n, const lb_sensitivity_options *o)
{
    const lb_model *m = lb_qmodel_model(j->cands[0]);
    for (size_t c = 1; c < j->n_cands; c++)
        if (lb_qmodel_model(j->cands[c]) != m)
            return lb__fail(LB_ERR_ARG, "lb_sensitivity: candidate %zu is of another model than candidate 0", c);
    uint32_t model_ctx = lb_model_arch(m)->max_seq_len;
    lb_eval_options eo = {.ctx = o->ctx ? o->ctx
                                        : model_ctx && model_ctx < SENSITIVITY_DEFAULT_CTX ? model_ctx
                                                                                          : SENSITIVITY_DEFAULT_CTX,
                          .max_chunks = o->max_windows};
    lb_status st = lb__eval_windows(n, &eo, &j->ctx, &j->windows);
    if (st != LB_OK) return st;
    j->first = j->ctx / 2, j->scored = j->ctx - 1 - j->ctx / 2;
    if ((st = lb_qmodel_new(m, &j->probe)) != LB_OK) return st;
    if ((st = lb_qmodel_set_dtype(j->probe, lb_qmodel_dtype(j->cands[0]))) != LB_OK) return st;
    lb_runner_options ro = {.threads = o->threads, .max_ctx = j->ctx};
    if ((st = lb__runner_build(j->probe, &ro, 0, &j->r)) != LB_OK) return st;
    j->n_layers = lb__runner_n_layers(j->r), j->dim = lb__runner_dim(j->r), j->vocab = lb_runner_vocab_size(j->r);
    size_t block = j->scored < SENSITIVITY_ROW_BLOCK ? j->scored : SENSITIVITY_ROW_BLOCK;
    size_t cells = j->n_cands * j->units->n;
    j->window = malloc(j->ctx * sizeof *j->window);
    j->h = malloc(j->ctx * j->dim * sizeof *j->h);
    j->tmp = malloc(j->ctx * j->dim * sizeof *j->tmp);
    j->base = malloc(j->scored * j->vocab * sizeof *j->base);
    j->base_lse = malloc(j->scored * sizeof *j->base_lse);
    j->lq = malloc(block * j->vocab * sizeof *j->lq);
    j->touched = calloc(j->n_layers + 1, 1);
    j->changed = calloc(cells + 1, sizeof *j->changed);
    j->sum = calloc(cells + 1, sizeof *j->sum), j->sum2 = calloc(cells + 1, sizeof *j->sum2);
    j->nll = calloc(cells + 1, sizeof *j->nll);
    if (!j->window || !j->h || !j->tmp || !j->base || !j->base_lse || !j->lq || !j->touched || !j->changed ||
        !j->sum || !j->sum2 || !j->nll)
        return lb__fail(LB_ERR_NOMEM, "lb_sensitivity: out of memory for windows of %u over a vocabulary of %zu",
                        j->ctx, j->vocab);
    for (size_t c = 0; c < j->n_cands; c++)
        for (size_t u = 0; u < j->units->n; u++) j->changed[c * j->units->n + u] = unit_changed(j->cands[c], &j->units->u[u]);
    return LB_OK;
}

/* NLL of the token after scored row t. */
static double row_nll(const job *j, const float *logits, double lse, size_t t)
{
    return lse - (double)logits[j->window[j->first + t + 1]];
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
        else j->base_nll += row_nll(j, j->base + t * j->vocab, j->base_lse[t], t);
    }
    return st;
}

/* KL(base || measured) of scored row t (lb_kld's sum: p_base x (log p_base
 * - log p_measured) in double over the tokens the base finds possible),
 * and the measured model's NLL of the next token. */
static lb_status row_kld(const job *j, size_t t, const float *lq, size_t w, double *out, double *nll)
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
        return lb__fail(LB_ERR_NAN, "window %zu, position %zu: the KL divergence is not finite (the quantized unit "
                        "gives a probability of 0 to what the base model finds possible)", w, j->first + t);
    *out = kld > 0 ? kld : 0; /* rounding can leave a tiny negative, as in lb_kld */
    *nll = row_nll(j, lq, lse_q, t);
    return LB_OK;
}

/* Reloads what unit x touches from the probe: its layers, the embedding
 * and head, the KV cache. */
static lb_status reload(job *j, const lb__unit *x)
{
    memset(j->touched, 0, j->n_layers);
    int ends = 0;
    const lb_model *m = lb_qmodel_model(j->probe);
    for (size_t k = 0; k < x->n; k++) {
        long l = lb__unit_layer_of(lb_model_tensor(m, x->entries[k])->name);
        if (l >= 0 && (size_t)l < j->n_layers) j->touched[l] = 1;
        else ends = 1;
    }
    lb_status st = LB_OK;
    for (size_t l = 0; l < j->n_layers && st == LB_OK; l++)
        if (j->touched[l]) st = lb__runner_reload_layer(j->r, j->probe, l);
    if (st == LB_OK && ends) st = lb__runner_reload_ends(j->r, j->probe);
    if (st == LB_OK && x->kv) st = lb__runner_reload_kv(j->r, j->probe);
    return st;
}

/* Unit x as candidate c holds it, from the window's input to layer L (the
 * embedding for L = -1) on. */
static lb_status measure(job *j, size_t c, size_t u, long L, size_t w)
{
    const lb__unit *x = &j->units->u[u];
    const lb_qmodel *cand = j->cands[c];
    lb_status st = LB_OK;
    for (size_t k = 0; k < x->n && st == LB_OK; k++) st = lb__qmodel_borrow(j->probe, cand, x->entries[k], x->act_only);
    if (st == LB_OK && x->kv) st = lb__qmodel_borrow_kv(j->probe, cand);
    if (st == LB_OK) st = reload(j, x);
    size_t start = L < 0 ? 0 : (size_t)L;
    if (st == LB_OK && L < 0) st = lb__runner_embed(j->r, j->window, j->ctx, j->tmp);
    else if (st == LB_OK) memcpy(j->tmp, j->h, j->ctx * j->dim * sizeof *j->tmp);
    for (size_t k = start; k < j->n_layers && st == LB_OK; k++) st = lb__runner_layer(j->r, k, j->tmp, j->ctx);
    size_t cell = c * j->units->n + u;
    for (size_t b = 0; b < j->scored && st == LB_OK; b += SENSITIVITY_ROW_BLOCK) {
        size_t rows = j->scored - b < SENSITIVITY_ROW_BLOCK ? j->scored - b : SENSITIVITY_ROW_BLOCK;
        st = lb__runner_logits(j->r, j->tmp + (j->first + b) * j->dim, rows, j->lq);
        for (size_t t = 0; t < rows && st == LB_OK; t++) {
            double kld = 0, nll = 0;
            st = row_kld(j, b + t, j->lq + t * j->vocab, w, &kld, &nll);
            if (st == LB_OK) j->sum[cell] += kld, j->sum2[cell] += kld * kld, j->nll[cell] += nll;
        }
    }
    /* back as stored, whatever happened */
    for (size_t k = 0; k < x->n; k++) lb__qmodel_return(j->probe, x->entries[k]);
    if (x->kv) lb__qmodel_return_kv(j->probe);
    lb_status back = reload(j, x);
    if (st != LB_OK) return lb__fail(st, "%s: %s", x->name, lb_last_error());
    return back;
}

/* Every (candidate, unit) whose first changed layer is L. */
static lb_status measure_at(job *j, long L, size_t w, const lb_sensitivity_options *o, size_t *done, size_t steps)
{
    lb_status st = LB_OK;
    for (size_t u = 0; u < j->units->n && st == LB_OK; u++) {
        if (j->units->u[u].first_layer != L) continue;
        for (size_t c = 0; c < j->n_cands && st == LB_OK; c++) {
            if (j->changed[c * j->units->n + u] && !(o->skip && o->skip[c * j->units->n + u])) st = measure(j, c, u, L, w);
            ++*done;
            if (st == LB_OK && o->progress) o->progress(o->progress_ctx, *done, steps);
        }
    }
    return st;
}

static lb_status unit_bits(const job *j, const lb_qmodel *q, const lb__unit *x, double *bits)
{
    *bits = 0;
    for (size_t k = 0; k < x->n; k++) {
        if (!lb_tensor_is_weight(lb_model_tensor(lb_qmodel_model(q), x->entries[k]))) continue;
        double b;
        lb_status st = lb_qmodel_entry_bits(x->act_only ? j->probe : q, x->entries[k], &b);
        if (st != LB_OK) return st;
        *bits += b;
    }
    return LB_OK;
}

static lb_status results(job *j, const lb_sensitivity_options *o, lb_unit_cost *costs, lb_sensitivity_summary *summary,
                         double t0)
{
    double count = (double)(j->windows * j->scored);
    size_t nu = j->units->n;
    for (size_t c = 0; c < j->n_cands; c++)
        for (size_t u = 0; u < nu; u++) {
            size_t cell = c * nu + u;
            lb_unit_cost *k = &costs[cell];
            int measured = j->changed[cell] && !(o->skip && o->skip[cell]);
            *k = (lb_unit_cost){.measured = measured, .nll = j->base_nll / count};
            if (measured) {
                double mean = j->sum[cell] / count, var = j->sum2[cell] / count - mean * mean;
                k->kld = mean, k->kld_err = count > 1 && var > 0 ? sqrt(var / (count - 1)) : 0;
                k->nll = j->nll[cell] / count;
            }
            lb_status st = unit_bits(j, j->cands[c], &j->units->u[u], &k->bits);
            if (st == LB_OK) st = unit_bits(j, j->probe, &j->units->u[u], &k->bits_stored);
            if (st != LB_OK) return st;
        }
    if (summary)
        *summary = (lb_sensitivity_summary){.windows = j->windows, .ctx = j->ctx,
                                            .scored_tokens = (uint64_t)(j->windows * j->scored),
                                            .base_nll = j->base_nll / count, .seconds = lb__now() - t0};
    return LB_OK;
}

lb_status lb_sensitivity(const lb_qmodel *const *cands, size_t n_cands, const lb_units *units, const int32_t *tokens,
                         size_t n, const lb_sensitivity_options *o, lb_unit_cost *costs, lb_sensitivity_summary *summary)
{
    if (!cands || !n_cands || !units || !costs) return lb__fail(LB_ERR_ARG, "lb_sensitivity: NULL argument");
    for (size_t c = 0; c < n_cands; c++)
        if (!cands[c]) return lb__fail(LB_ERR_ARG, "lb_sensitivity: candidate %zu is NULL", c);
    if (!tokens || n == 0) return lb__fail(LB_ERR_ARG, "lb_sensitivity: no tokens");
    lb_sensitivity_options defaults = {.bos = -1};
    if (!o) o = &defaults;
    double t0 = lb__now();
    job j = {.cands = cands, .n_cands = n_cands, .units = units};
    lb_status st = setup(&j, n, o);
    size_t steps = j.windows * n_cands * units->n, done = 0;
    for (size_t w = 0; w < j.windows && st == LB_OK; w++) {
        st = base_window(&j, tokens, w, o->bos);
        if (st == LB_OK) st = measure_at(&j, -1, w, o, &done, steps);
        for (size_t l = 0; l <= j.n_layers && st == LB_OK; l++) {
            st = measure_at(&j, (long)l, w, o, &done, steps);
            /* the window's input to layer l + 1, through layer l as stored */
            if (st == LB_OK && l < j.n_layers) st = lb__runner_layer(j.r, l, j.h, j.ctx);
        }
    }
    if (st == LB_OK) st = results(&j, o, costs, summary, t0);
    free_job(&j);
    return st;
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
    size_t n_layers = lb_model_arch(lb_qmodel_model(q))->n_layers;
    for (size_t l = 0; l < n_layers; l++) out[l] = (lb_layer_kld){.layer = (uint32_t)l};
    lb_units *u = NULL;
    lb_status st = lb__units_make(q, LB_UNIT_LAYER, 1, &u);
    if (st != LB_OK) return lb__fail(st, "lb_layer_sensitivity: %s", lb_last_error());
    /* the decoder layers only (the embedding and head are not layers to keep) */
    size_t kept = 0;
    for (size_t i = 0; i < u->n; i++) {
        if (strncmp(u->u[i].name, "layer ", 6) == 0) u->u[kept++] = u->u[i];
        else free(u->u[i].entries);
    }
    u->n = kept;
    lb_unit_cost *costs = malloc((kept + 1) * sizeof *costs);
    if (!costs) st = lb__fail(LB_ERR_NOMEM, "lb_layer_sensitivity: out of memory");
    if (st == LB_OK && kept) st = lb_sensitivity(&q, 1, u, tokens, n, o, costs, NULL);
    for (size_t i = 0; i < kept && st == LB_OK; i++) {
        long l = u->u[i].first_layer;
        out[l].measured = costs[i].measured;
        out[l].kld = costs[i].kld, out[l].kld_err = costs[i].kld_err;
    }
    if (st == LB_OK) qsort(out, n_layers, sizeof *out, by_kld);
    free(costs);
    lb_units_free(u);
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
