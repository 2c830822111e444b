/* Scoring multiple-choice items by log-likelihood, the way
 * lm-evaluation-harness defines the numbers, at the cost of one context
 * plus the continuations: the tokens every choice shares run once, then
 * each choice continues from that KV cache (lb_runner_rewind). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "eval/eval_internal.h"
#include "eval/task_internal.h"
#include "util/error.h"

/* One choice's tokens: the whole text, and where its continuation starts
 * (lm-eval: the tokens of context + " " + continuation after as many as
 * the context alone has). */
typedef struct choice_tokens {
    int32_t *ids;
    size_t n, start;
} choice_tokens;

static char *join(const char *a, const char *b, const char *sep, const char *c)
{
    size_t na = strlen(a), nb = strlen(b), ns = strlen(sep), nc = c ? strlen(c) : 0;
    char *s = malloc(na + nb + ns + nc + 1);
    if (!s) return NULL;
    memcpy(s, a, na), memcpy(s + na, b, nb), memcpy(s + na + nb, sep, ns);
    if (c) memcpy(s + na + nb + ns, c, nc);
    s[na + nb + ns + nc] = 0;
    return s;
}

static lb_status tokenize_item(const lb_tokenizer *tok, const lb__task_item *it, choice_tokens *ct)
{
    int bos = lb_tokenizer_add_bos(tok);
    size_t ctx_n = 0;
    for (uint32_t c = 0; c < it->n_choices; c++) {
        lb_status st = LB_OK;
        if (c == 0 || it->context[c] != it->context[c - 1]) { /* a shared context is tokenized once */
            char *ctx = join(it->preamble, it->context[c], "", NULL);
            int32_t *ids = NULL;
            st = ctx ? lb_tokenize(tok, ctx, strlen(ctx), bos, &ids, &ctx_n) : lb__fail(LB_ERR_NOMEM, "out of memory");
            free(ctx), free(ids);
        }
        char *full = st == LB_OK ? join(it->preamble, it->context[c], " ", it->continuation[c]) : NULL;
        if (st == LB_OK && !full) st = lb__fail(LB_ERR_NOMEM, "out of memory");
        if (st == LB_OK) st = lb_tokenize(tok, full, strlen(full), bos, &ct[c].ids, &ct[c].n);
        free(full);
        if (st != LB_OK) return st;
        /* a continuation that merged into the context's last token still
         * scores its last token */
        ct[c].start = ctx_n < ct[c].n ? ctx_n : (ct[c].n ? ct[c].n - 1 : 0);
    }
    return LB_OK;
}

static size_t argmax(const float *v, size_t n)
{
    size_t best = 0;
    for (size_t i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return best;
}

static int all_finite(const float *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(v[i])) return 0;
    return 1;
}

/* The winner of score[c] (the first of equals), or of score[c] / norm[c]. */
static uint32_t best_choice(const double *score, const double *norm, uint32_t n)
{
    uint32_t best = 0;
    for (uint32_t c = 1; c < n; c++)
        if ((norm ? score[c] / norm[c] : score[c]) > (norm ? score[best] / norm[best] : score[best])) best = c;
    return best;
}

static lb_status score_item(lb_runner *r, const lb__task_item *it, choice_tokens *ct, size_t index, size_t vocab,
                            float *first, float **buf, size_t *buf_rows, lb_item_score *out)
{
    uint32_t n = it->n_choices;
    size_t shared = ct[0].n, min_start = ct[0].start;
    for (uint32_t c = 0; c < n; c++) {
        size_t k = 0;
        while (k < shared && k < ct[c].n && ct[c].ids[k] == ct[0].ids[k]) k++;
        shared = k;
        if (ct[c].start < min_start) min_start = ct[c].start;
        if (ct[c].start < 1)
            return lb__fail(LB_ERR_ARG, "item %zu (line %llu): nothing before the continuation to predict it from "
                            "(an empty context and no BOS)", index, (unsigned long long)it->line);
        if (ct[c].n > lb_runner_context(r))
            return lb__fail(LB_ERR_ARG, "item %zu (line %llu): %zu tokens, beyond the runner's context of %u", index,
                            (unsigned long long)it->line, ct[c].n, lb_runner_context(r));
    }
    size_t s = shared < min_start ? shared : min_start; /* run once: tokens [0, s) */
    lb_runner_reset(r);
    lb_status st = LB_OK;
    /* s == 0: the choices differ from their first token (no BOS, a
     * Winogrande blank at the start); each runs from an empty cache, and
     * token 0 is never scored (every continuation starts at 1 or later) */
    if (s > 0 && (st = lb_runner_forward(r, ct[0].ids, s, first, 1)) != LB_OK) return st;
    if (s > 0 && !all_finite(first, vocab))
        return lb__fail(LB_ERR_NAN, "item %zu (line %llu): the model's logits are not finite", index, (unsigned long long)it->line);
    memset(out, 0, sizeof *out);
    out->tokens_run = (uint32_t)s;
    double chars[LB_TASK_MAX_CHOICES];
    for (uint32_t c = 0; c < n; c++) {
        /* tokens s .. n-2 predict s+1 .. n-1; the last token is never run */
        size_t rows = ct[c].n - 1 - s;
        if (rows > *buf_rows) {
            float *grown = realloc(*buf, rows * vocab * sizeof **buf);
            if (!grown) return lb__fail(LB_ERR_NOMEM, "out of memory");
            *buf = grown, *buf_rows = rows;
        }
        if (rows) {
            if ((st = lb_runner_rewind(r, (uint32_t)s)) != LB_OK) return st;
            if ((st = lb_runner_forward(r, ct[c].ids + s, rows, *buf, 0)) != LB_OK) return st;
            if (!all_finite(*buf, rows * vocab))
                return lb__fail(LB_ERR_NAN, "item %zu (line %llu): the model's logits are not finite", index,
                                (unsigned long long)it->line);
        }
        out->tokens_run += (uint32_t)rows;
        /* the token-normalized score skips what every choice shares (llama.cpp) */
        size_t tok_from = shared > ct[c].start && shared < ct[c].n ? shared : ct[c].start;
        double sum = 0, sum_tok = 0;
        int greedy = 1;
        for (size_t j = ct[c].start; j < ct[c].n; j++) {
            const float *row = j == s ? first : *buf + (j - 1 - s) * vocab;
            double lp = -lb_nll(row, vocab, ct[c].ids[j]);
            sum += lp;
            if (j >= tok_from) sum_tok += lp;
            greedy &= argmax(row, vocab) == (size_t)ct[c].ids[j];
        }
        out->loglik[c] = sum;
        out->tokens[c] = (uint32_t)(ct[c].n - ct[c].start);
        out->loglik_tok[c] = sum_tok / (double)(ct[c].n - tok_from);
        out->greedy[c] = (uint8_t)greedy;
        size_t len = strlen(it->continuation[c]);
        chars[c] = len ? (double)len : 1;
    }
    if (n == 1) { /* LAMBADA: right when the model would have written the word */
        out->correct = out->correct_norm = out->correct_norm_tok = out->greedy[0];
        return LB_OK;
    }
    out->correct = best_choice(out->loglik, NULL, n) == it->label;
    out->correct_norm = best_choice(out->loglik, chars, n) == it->label;
    out->correct_norm_tok = best_choice(out->loglik_tok, NULL, n) == it->label;
    return LB_OK;
}

lb_status lb_task_score(lb_runner *r, const lb_tokenizer *tok, const lb_task *t, const lb_task_score_options *o,
                        lb_item_score *scores)
{
    if (!r || !tok || !t || !scores) return lb__fail(LB_ERR_ARG, "lb_task_score: NULL argument");
    size_t vocab = lb_runner_vocab_size(r);
    float *first = malloc(vocab * sizeof *first), *buf = NULL;
    size_t buf_rows = 0;
    lb_status st = first ? LB_OK : lb__fail(LB_ERR_NOMEM, "out of memory");
    for (size_t i = 0; st == LB_OK && i < t->n; i++) {
        choice_tokens ct[LB_TASK_MAX_CHOICES] = {{0}};
        const lb__task_item *it = &t->items[i];
        st = tokenize_item(tok, it, ct);
        if (st == LB_OK) st = score_item(r, it, ct, i, vocab, first, &buf, &buf_rows, &scores[i]);
        for (uint32_t c = 0; c < it->n_choices; c++) free(ct[c].ids);
        if (st == LB_OK && o && o->progress) o->progress(o->progress_ctx, i + 1, t->n);
    }
    lb_runner_reset(r);
    free(first), free(buf);
    return st;
}
