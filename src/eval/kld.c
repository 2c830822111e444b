/* KL divergence of a quantized model's next-token distributions from the
 * base model's, on llama.cpp's perplexity windows. The base side comes
 * from a runner or from a file saved by an earlier run:
 *
 *   "LBKLD001" | u32 vocab | u32 ctx | u64 chunks | u64 FNV-1a of the
 *   windows' token ids | per scored position: f32 lo, f32 step,
 *   u16[vocab] with log p = lo + code * step (little-endian)
 *
 * 16 bits over each position's range of finite log-probabilities keep the
 * error below range / 131070 (~3e-4 nats for a range of 40). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "eval/eval_internal.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/file.h"

#define KLD_MAGIC "LBKLD001"
#define HEADER_BYTES 32

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

static void put32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static void put64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static uint32_t get32(const uint8_t *p) { uint32_t v = 0; for (int i = 3; i >= 0; i--) v = v << 8 | p[i]; return v; }
static uint64_t get64(const uint8_t *p) { uint64_t v = 0; for (int i = 7; i >= 0; i--) v = v << 8 | p[i]; return v; }

/* One position's log-probabilities packed into 8 + 2 vocab bytes, and
 * back: 16-bit steps over the range of the finite values; a probability
 * of exactly 0 (-inf) is stored as the bottom of the range. */
static void pack_position(const double *lp, size_t vocab, uint8_t *out)
{
    double lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < vocab; i++)
        if (isfinite(lp[i])) {
            if (lp[i] < lo) lo = lp[i];
            if (lp[i] > hi) hi = lp[i];
        }
    float flo = (float)lo, step = (float)((hi - lo) / 65535.0);
    if (!(step > 0) || !isfinite(step)) step = 1;
    memcpy(out, &flo, 4), memcpy(out + 4, &step, 4);
    for (size_t i = 0; i < vocab; i++) {
        double q = isfinite(lp[i]) ? floor((lp[i] - flo) / step + 0.5) : 0;
        uint16_t c = (uint16_t)(q < 0 ? 0 : q > 65535 ? 65535 : q);
        out[8 + 2 * i] = (uint8_t)c, out[9 + 2 * i] = (uint8_t)(c >> 8);
    }
}

static lb_status unpack_position(const uint8_t *in, size_t vocab, double *lp, const char *path)
{
    float lo, step;
    memcpy(&lo, in, 4), memcpy(&step, in + 4, 4);
    if (!isfinite(lo) || !(step > 0) || !isfinite(step))
        return lb__fail(LB_ERR_PARSE, "%s: a position's range (%g, step %g) is not valid", path, lo, step);
    double sum = 0;
    for (size_t i = 0; i < vocab; i++) {
        lp[i] = lo + (double)(in[8 + 2 * i] | in[9 + 2 * i] << 8) * step;
        sum += exp(lp[i]);
    }
    double fix = log(sum); /* renormalize what the rounding moved */
    for (size_t i = 0; i < vocab; i++) lp[i] -= fix;
    return LB_OK;
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
} kld_state;

static void score(kld_state *s, int32_t target)
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
    lb_ppl_add(&s->base, nb), lb_ppl_add(&s->quant, nq);
    s->klds[s->count] = kld > 0 ? kld : 0; /* rounding can leave a tiny negative */
    s->diffs[s->count] = nq - nb;
    s->agree += am_b == am_q;
    s->count++;
}

static void summarize(kld_state *s, size_t chunks, lb_kld_result *out)
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
    size_t vocab = lb_runner_vocab_size(quant), per_chunk = ctx - 1 - ctx / 2, pos_bytes = 8 + 2 * vocab;
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
        uint64_t want = HEADER_BYTES + (uint64_t)chunks * per_chunk * pos_bytes;
        if (in.size < HEADER_BYTES || memcmp(in.data, KLD_MAGIC, 8) != 0) st = lb__fail(LB_ERR_PARSE, "%s: not a lowbit base-logits file", load_base);
        else if (get32(in.data + 8) != vocab || get32(in.data + 12) != ctx || get64(in.data + 16) != chunks)
            st = lb__fail(LB_ERR_ARG, "%s was saved for vocab %u, ctx %u, %llu windows; this run has vocab %zu, ctx %u, %zu windows",
                          load_base, get32(in.data + 8), get32(in.data + 12), (unsigned long long)get64(in.data + 16), vocab, ctx, chunks);
        else if (get64(in.data + 24) != hash)
            st = lb__fail(LB_ERR_ARG, "%s was saved for other text (its token ids differ)", load_base);
        else if (in.size != want)
            st = lb__fail(LB_ERR_PARSE, "%s is %zu bytes; its header says %llu", load_base, in.size, (unsigned long long)want);
        if (st != LB_OK) {
            lb__unmap_file(&in);
            return st;
        }
    }
    lb__outfile outf = {0};
    int saving = save_base && base;
    kld_state s = {.vocab = vocab};
    float *logits_b = base ? malloc((size_t)ctx * vocab * sizeof(float)) : NULL;
    float *logits_q = malloc((size_t)ctx * vocab * sizeof(float));
    int32_t *window = malloc(ctx * sizeof *window);
    uint8_t *packed = saving ? malloc(pos_bytes) : NULL;
    s.lp_base = malloc(vocab * sizeof(double)), s.lp_q = malloc(vocab * sizeof(double));
    s.klds = malloc(chunks * per_chunk * sizeof(double)), s.diffs = malloc(chunks * per_chunk * sizeof(double));
    if ((base && !logits_b) || !logits_q || !window || (saving && !packed) || !s.lp_base || !s.lp_q || !s.klds || !s.diffs)
        st = lb__fail(LB_ERR_NOMEM, "out of memory");
    if (st == LB_OK && saving) {
        st = lb__out_open(save_base, &outf);
        uint8_t h[HEADER_BYTES];
        memcpy(h, KLD_MAGIC, 8), put32(h + 8, (uint32_t)vocab), put32(h + 12, ctx), put64(h + 16, chunks), put64(h + 24, hash);
        if (st == LB_OK) st = lb__out_write(&outf, h, sizeof h);
    }
    double t0 = lb__now();
    if (st == LB_OK && o && o->progress) o->progress(o->progress_ctx, 0, chunks);
    for (size_t c = 0; c < chunks && st == LB_OK; c++) {
        if (base) st = lb__eval_window(base, tokens + c * ctx, ctx, bos, window, logits_b);
        if (st == LB_OK) st = lb__eval_window(quant, tokens + c * ctx, ctx, bos, window, logits_q);
        for (uint32_t j = ctx / 2; st == LB_OK && j + 1 < ctx; j++) {
            if (base && !log_softmax(logits_b + (size_t)j * vocab, vocab, s.lp_base))
                st = lb__fail(LB_ERR_NAN, "window %zu, position %u: the base model's logits are not finite", c, j);
            else if (!base)
                st = unpack_position(in.data + HEADER_BYTES + ((uint64_t)c * per_chunk + (j - ctx / 2)) * pos_bytes,
                                     vocab, s.lp_base, load_base);
            if (st == LB_OK && saving) {
                pack_position(s.lp_base, vocab, packed);
                st = lb__out_write(&outf, packed, pos_bytes);
            }
            if (st == LB_OK && !log_softmax(logits_q + (size_t)j * vocab, vocab, s.lp_q))
                st = lb__fail(LB_ERR_NAN, "window %zu, position %u: the quantized model's logits are not finite", c, j);
            if (st == LB_OK) score(&s, window[j + 1]);
        }
        if (o && o->progress) o->progress(o->progress_ctx, c + 1, chunks);
    }
    out->seconds = lb__now() - t0;
    if (saving) {
        if (st == LB_OK) st = lb__out_commit(&outf);
        else lb__out_abort(&outf);
    }
    if (st == LB_OK) summarize(&s, chunks, out);
    free(logits_b), free(logits_q), free(window), free(packed);
    free(s.lp_base), free(s.lp_q), free(s.klds), free(s.diffs);
    lb__unmap_file(&in);
    return st;
}
