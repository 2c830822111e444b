/* KL divergence of a quantized model's next-token distributions from the
 * base model's, on llama.cpp's perplexity windows. The base side comes
 * from a runner or from a file saved by an earlier run (its layout:
 * kld_base.h). A result that is not finite is an error naming the window
 * and position it came from, never a number printed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval/eval_internal.h"
#include "eval/kld_base.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/file.h"

/* Returns 0 if a logit is NaN or +inf (-inf is a probability of 0). */
static int log_softmax(const float *logits, size_t vocab, double *out)
{
    double lse = lb__log_sum_exp(logits, vocab);
    if (!isfinite(lse)) return 0; /* a NaN or +inf logit, or every one -inf */
    for (size_t i = 0; i < vocab; i++) out[i] = (double)logits[i] - lse;
    return 1;
}

static uint64_t fnv1a(const int32_t *ids, size_t n, uint64_t h)
{
    const uint8_t *p = (const uint8_t *)ids;
    for (size_t i = 0; i < n * sizeof *ids; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct kld_state {
    size_t vocab;
    double *lp_base, *lp_q;
    double *klds; /* per scored token */
    double *diffs; /* nll_q - nll_base per scored token */
    lb_ppl_acc base, quant;
    uint64_t agree, count;
    lb__outfile *tokens; /* the per-token file, or NULL */
} kld_state;

/* One scored position; LB_ERR_NAN naming it when its KLD or either NLL is
 * not finite (the quantized model gives a probability of 0, or less than
 * a double holds, to what the base finds possible). */
static lb_status score(kld_state *s, int32_t target, size_t window, uint32_t pos)
{
    double kld = 0;
    size_t am_b = 0, am_q = 0;
    for (size_t i = 0; i < s->vocab; i++) {
        double p = exp(s->lp_base[i]);
        if (p > 0) kld += p * (s->lp_base[i] - s->lp_q[i]);
        if (s->lp_base[i] > s->lp_base[am_b]) am_b = i;
        if (s->lp_q[i] > s->lp_q[am_q]) am_q = i;
    }
    double nb = -s->lp_base[target], nq = -s->lp_q[target];
    if (!isfinite(kld) || !isfinite(nb) || !isfinite(nq))
        return lb__fail(LB_ERR_NAN, "window %zu, position %u: %s is not finite (KLD %g, NLL base %g, quant %g): the "
                        "quantized model gives a probability of 0 to what the base model finds possible", window, pos,
                        !isfinite(kld) ? "the KL divergence" : "the negative log-likelihood", kld, nb, nq);
    lb_ppl_add(&s->base, nb), lb_ppl_add(&s->quant, nq);
    s->klds[s->count] = kld > 0 ? kld : 0; /* rounding can leave a tiny negative */
    s->diffs[s->count] = nq - nb;
    s->agree += am_b == am_q;
    s->count++;
    if (s->tokens) {
        /* %.17g: every double read back exactly */
        char line[160];
        int len = snprintf(line, sizeof line, "%zu\t%u\t%.17g\t%.17g\t%.17g\n", window, pos, s->klds[s->count - 1], nb, nq);
        return lb__out_write(s->tokens, line, (size_t)len);
    }
    return LB_OK;
}

static lb_status summarize(kld_state *s, size_t chunks, lb_kld_result *out)
{
    double n = (double)s->count, sum = 0, sum2 = 0, dsum = 0, dsum2 = 0;
    for (uint64_t i = 0; i < s->count; i++) {
        sum += s->klds[i], sum2 += s->klds[i] * s->klds[i];
        dsum += s->diffs[i], dsum2 += s->diffs[i] * s->diffs[i];
    }
    out->tokens = s->count, out->chunks = chunks;
    out->kld_mean = sum / n;
    double var = sum2 / n - out->kld_mean * out->kld_mean;
    out->kld_err = n > 1 && var > 0 ? sqrt(var / (n - 1)) : 0;
    qsort(s->klds, s->count, sizeof *s->klds, cmp_double);
    out->kld_median = s->count % 2 ? s->klds[s->count / 2] : (s->klds[s->count / 2 - 1] + s->klds[s->count / 2]) / 2;
    out->kld_p99 = s->klds[(size_t)floor(0.99 * (n - 1))];
    out->kld_max = s->klds[s->count - 1];
    out->top1_agreement = (double)s->agree / n;
    lb_ppl_get(&s->base, &out->ppl_base, &out->ppl_base_err);
    lb_ppl_get(&s->quant, &out->ppl, &out->ppl_err);
    /* ppl = ppl_base x exp(mean d): its error from the spread of the paired d */
    double dmean = dsum / n, dvar = dsum2 / n - dmean * dmean;
    out->dppl = out->ppl - out->ppl_base;
    out->dppl_err = n > 1 && dvar > 0 ? out->ppl * sqrt(dvar / (n - 1)) : 0;
    /* every position was finite; a mean or an exp of one can still overflow */
    const struct { const char *name; double v; } figs[] = {
        {"the mean KLD", out->kld_mean}, {"the KLD's error", out->kld_err}, {"the base perplexity", out->ppl_base},
        {"the base perplexity's error", out->ppl_base_err}, {"the quantized perplexity", out->ppl},
        {"the quantized perplexity's error", out->ppl_err}, {"the perplexity's change", out->dppl},
        {"its error", out->dppl_err}};
    for (size_t i = 0; i < sizeof figs / sizeof figs[0]; i++)
        if (!isfinite(figs[i].v))
            return lb__fail(LB_ERR_NAN, "%s over %llu scored tokens is not finite (%g): mean NLL base %g, quant %g nats "
                            "(a perplexity overflows past a mean NLL of 709)", figs[i].name,
                            (unsigned long long)s->count, figs[i].v, s->base.mean, s->quant.mean);
    return LB_OK;
}

lb_status lb_kld(lb_runner *base, lb_runner *quant, const int32_t *tokens, size_t n, const lb_eval_options *o,
                 const char *save_base, const char *load_base, lb_kld_result *out)
{
    if (!quant || !tokens || !out || (!base && !load_base))
        return lb__fail(LB_ERR_ARG, "lb_kld: needs a quantized runner and a base (runner or file)");
    memset(out, 0, sizeof *out);
    uint32_t ctx;
    size_t chunks;
    lb_status st = lb__eval_windows(n, o, &ctx, &chunks);
    if (st != LB_OK) return st;
    size_t vocab = lb_runner_vocab_size(quant), per_chunk = ctx - 1 - ctx / 2, pos_bytes = (size_t)lb__kld_position_bytes(vocab);
    if (base && lb_runner_vocab_size(base) != vocab)
        return lb__fail(LB_ERR_ARG, "the models' vocabularies differ (%u and %zu tokens)", lb_runner_vocab_size(base), vocab);
    int32_t bos = o ? o->bos : -1;
    /* the windows as they are run, for the base file's fingerprint */
    uint64_t hash = 0xcbf29ce484222325ull;
    for (size_t c = 0; c < chunks; c++) {
        hash = fnv1a(tokens + c * ctx + 1, ctx - 1, hash);
        int32_t first = bos >= 0 ? bos : tokens[c * ctx];
        hash = fnv1a(&first, 1, hash);
    }
    lb__mapped in = {0};
    if (load_base) {
        if ((st = lb__map_file(load_base, &in)) != LB_OK) return st;
        if ((st = lb__kld_base_check(in.data, in.size, load_base, (uint32_t)vocab, ctx, chunks, hash)) != LB_OK) {
            lb__unmap_file(&in);
            return st;
        }
    }
    lb__outfile outf = {0}, tokf = {0};
    int saving = save_base && base, tokens_out = o && o->save_tokens;
    kld_state s = {.vocab = vocab};
    size_t scored_rows = ctx - ctx / 2; /* lb__eval_window's logits: the scored half of a window */
    float *logits_b = base ? malloc(scored_rows * vocab * sizeof(float)) : NULL;
    float *logits_q = malloc(scored_rows * vocab * sizeof(float));
    int32_t *window = malloc(ctx * sizeof *window);
    uint8_t *packed = saving ? malloc(pos_bytes) : NULL;
    s.lp_base = malloc(vocab * sizeof(double)), s.lp_q = malloc(vocab * sizeof(double));
    s.klds = malloc(chunks * per_chunk * sizeof(double)), s.diffs = malloc(chunks * per_chunk * sizeof(double));
    if ((base && !logits_b) || !logits_q || !window || (saving && !packed) || !s.lp_base || !s.lp_q || !s.klds || !s.diffs)
        st = lb__fail(LB_ERR_NOMEM, "out of memory");
    if (st == LB_OK && saving) {
        st = lb__out_open(save_base, &outf);
        uint8_t h[LB__KLD_HEADER_BYTES];
        lb__kld_base_header(h, (uint32_t)vocab, ctx, chunks, hash);
        if (st == LB_OK) st = lb__out_write(&outf, h, sizeof h);
    }
    if (st == LB_OK && tokens_out) {
        static const char head[] = "# window\tposition\tkld\tnll_base\tnll_quant\n";
        st = lb__out_open(o->save_tokens, &tokf);
        if (st == LB_OK) s.tokens = &tokf, st = lb__out_write(&tokf, head, sizeof head - 1);
    }
    double t0 = lb__now();
    if (st == LB_OK && o && o->progress) o->progress(o->progress_ctx, 0, chunks);
    for (size_t c = 0; c < chunks && st == LB_OK; c++) {
        if (base) st = lb__eval_window(base, tokens + c * ctx, ctx, bos, window, logits_b);
        if (st == LB_OK) st = lb__eval_window(quant, tokens + c * ctx, ctx, bos, window, logits_q);
        for (uint32_t j = ctx / 2; st == LB_OK && j + 1 < ctx; j++) {
            if (base && !log_softmax(logits_b + (size_t)(j - ctx / 2) * vocab, vocab, s.lp_base))
                st = lb__fail(LB_ERR_NAN, "window %zu, position %u: the base model's logits are not finite", c, j);
            else if (!base) {
                uint64_t at = (uint64_t)c * per_chunk + (j - ctx / 2);
                st = lb__kld_base_unpack(in.data + LB__KLD_HEADER_BYTES + at * pos_bytes, vocab, s.lp_base, load_base, at);
            }
            if (st == LB_OK && saving) {
                lb__kld_base_pack(s.lp_base, vocab, packed);
                st = lb__out_write(&outf, packed, pos_bytes);
            }
            if (st == LB_OK && !log_softmax(logits_q + (size_t)(j - ctx / 2) * vocab, vocab, s.lp_q))
                st = lb__fail(LB_ERR_NAN, "window %zu, position %u: the quantized model's logits are not finite", c, j);
            if (st == LB_OK) st = score(&s, window[j + 1], c, j);
        }
        if (o && o->progress) o->progress(o->progress_ctx, c + 1, chunks);
    }
    out->seconds = lb__now() - t0;
    if (saving) {
        if (st == LB_OK) st = lb__out_commit(&outf);
        else lb__out_abort(&outf);
    }
    if (st == LB_OK) st = summarize(&s, chunks, out);
    if (s.tokens) {
        if (st == LB_OK) st = lb__out_commit(&tokf);
        else lb__out_abort(&tokf);
    }
    free(logits_b), free(logits_q), free(window), free(packed);
    free(s.lp_base), free(s.lp_q), free(s.klds), free(s.diffs);
    lb__unmap_file(&in);
    return st;
}
