/* Perplexity the way llama.cpp's perplexity tool measures it (see
 * lowbit.h): non-overlapping windows, second half scored. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "eval/eval_internal.h"
#include "model/runner_internal.h"
#include "util/clock.h"
#include "util/error.h"

double lb__log_sum_exp(const float *logits, size_t vocab)
{
    double mx = -INFINITY, sum = 0;
    for (size_t i = 0; i < vocab; i++)
        if (logits[i] > mx) mx = logits[i];
    for (size_t i = 0; i < vocab; i++) sum += exp((double)logits[i] - mx);
    return log(sum) + mx;
}

double lb_nll(const float *logits, size_t vocab, int32_t target)
{
    return lb__log_sum_exp(logits, vocab) - (double)logits[target];
}

void lb_ppl_add(lb_ppl_acc *a, double nll)
{
    a->count++;
    double d = nll - a->mean;
    a->mean += d / (double)a->count;
    a->m2 += d * (nll - a->mean);
}

void lb_ppl_get(const lb_ppl_acc *a, double *ppl, double *err)
{
    double n = (double)a->count, var = n > 0 ? a->m2 / n : 0;
    *ppl = exp(a->mean);
    *err = n > 1 && var > 0 ? *ppl * sqrt(var / (n - 1)) : 0;
}

lb_status lb__eval_windows(size_t n, const lb_eval_options *o, uint32_t *ctx, size_t *chunks)
{
    *ctx = o && o->ctx ? o->ctx : 512;
    if (*ctx < 4) return lb__fail(LB_ERR_ARG, "a window of %u tokens is too short (at least 4)", *ctx);
    *chunks = n / *ctx;
    if (o && o->max_chunks && o->max_chunks < *chunks) *chunks = o->max_chunks;
    if (*chunks == 0)
        return lb__fail(LB_ERR_ARG, "the text has %zu tokens, fewer than one window of %u", n, *ctx);
    return LB_OK;
}

static lb_status keep_rows(void *ctx, size_t pos, const float *logits, size_t count)
{
    (void)ctx, (void)pos, (void)logits, (void)count; /* one chunk: the rows stay in the caller's buffer */
    return LB_OK;
}

lb_status lb__eval_window(lb_runner *r, const int32_t *tokens, uint32_t ctx, int32_t bos, int32_t *window,
                          float *logits)
{
    memcpy(window, tokens, ctx * sizeof *window);
    if (bos >= 0) window[0] = bos;
    lb_runner_reset(r);
    return lb__runner_forward_chunked(r, window, ctx, ctx / 2, ctx - ctx / 2, logits, keep_rows, NULL);
}

/* Positions whose logits are computed at a time: the scored half of a
 * window passes through a buffer of this many rows, not ctx x vocab
 * floats (SmolLM2: 12 MB instead of 96 MB at ctx 512), with the same
 * values (the head's products are per row). */
#define LB_PPL_LOGIT_ROWS 64

typedef struct ppl_window {
    const int32_t *window;
    uint32_t ctx;
    size_t vocab, chunk;
    lb_ppl_acc *acc;
    double *worst;
    size_t *worst_c;
    uint32_t *worst_j;
} ppl_window;

/* Scores positions pos .. pos+count-1 of the window (those with a next
 * token: j + 1 < ctx). */
static lb_status score_rows(void *ctx, size_t pos, const float *logits, size_t count)
{
    ppl_window *w = ctx;
    for (size_t i = 0; i < count && pos + i + 1 < w->ctx; i++) {
        uint32_t j = (uint32_t)(pos + i);
        double nll = lb_nll(logits + i * w->vocab, w->vocab, w->window[j + 1]);
        if (!isfinite(nll)) /* a NaN weight, or an overflow: no perplexity to report */
            return lb__fail(LB_ERR_NAN, "window %zu, position %u: the model's logits are not finite (NaN or "
                            "infinity: a NaN weight, or activations that overflowed)", w->chunk, j);
        lb_ppl_add(w->acc, nll);
        if (nll > *w->worst) *w->worst = nll, *w->worst_c = w->chunk, *w->worst_j = j;
    }
    return LB_OK;
}

lb_status lb_perplexity(lb_runner *r, const int32_t *tokens, size_t n, const lb_eval_options *o, lb_ppl_result *out)
{
    if (!r || !tokens || !out) return lb__fail(LB_ERR_ARG, "lb_perplexity: NULL argument");
    memset(out, 0, sizeof *out);
    uint32_t ctx;
    size_t chunks;
    lb_status st = lb__eval_windows(n, o, &ctx, &chunks);
    if (st != LB_OK) return st;
    size_t vocab = lb_runner_vocab_size(r);
    size_t rows = ctx / 2 < LB_PPL_LOGIT_ROWS ? ctx / 2 : LB_PPL_LOGIT_ROWS;
    float *logits = malloc(rows * vocab * sizeof *logits);
    int32_t *window = malloc(ctx * sizeof *window);
    if (!logits || !window) {
        free(logits), free(window);
        return lb__fail(LB_ERR_NOMEM, "out of memory for %zu x %zu logits", rows, vocab);
    }
    lb_ppl_acc acc = {0};
    double t0 = lb__now(), worst = -INFINITY; /* the largest NLL and where: named if the perplexity overflows */
    size_t worst_c = 0;
    uint32_t worst_j = 0;
    if (o && o->progress) o->progress(o->progress_ctx, 0, chunks);
    for (size_t c = 0; c < chunks && st == LB_OK; c++) {
        memcpy(window, tokens + c * ctx, ctx * sizeof *window);
        if (o && o->bos >= 0) window[0] = o->bos;
        lb_runner_reset(r);
        ppl_window w = {window, ctx, vocab, c, &acc, &worst, &worst_c, &worst_j};
        st = lb__runner_forward_chunked(r, window, ctx, ctx / 2, rows, logits, score_rows, &w);
        if (st == LB_OK && o && o->progress) o->progress(o->progress_ctx, c + 1, chunks);
        if (st == LB_OK && o && o->progress_ppl) {
            double ppl, err;
            lb_ppl_get(&acc, &ppl, &err);
            o->progress_ppl(o->progress_ctx, c + 1, chunks, ppl, err);
        }
    }
    out->seconds = lb__now() - t0;
    free(logits), free(window);
    if (st != LB_OK) return st;
    lb_ppl_get(&acc, &out->ppl, &out->ppl_err);
    if (!isfinite(out->ppl) || !isfinite(out->ppl_err)) /* finite NLLs whose mean is past 709 nats */
        return lb__fail(LB_ERR_NAN, "the perplexity overflows (mean NLL %g nats over %llu tokens; exp overflows past "
                        "709): the largest NLL, %g, is at window %zu, position %u -- logits that large come from "
                        "activations that overflowed", acc.mean, (unsigned long long)acc.count, worst, worst_c, worst_j);
    out->tokens = acc.count, out->chunks = chunks;
    out->tokens_per_s = out->seconds > 0 ? (double)(chunks * ctx) / out->seconds : 0;
    return LB_OK;
}
