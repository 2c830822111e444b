/* LLM.int8()-style outlier columns chosen from calibration (lowbit.h,
 * lb_qmodel_select_outliers). Dettmers et al. 2022 split each matrix
 * product by input feature: the features where the activations reach a
 * magnitude threshold (6.0) are multiplied in 16-bit, the rest in 8-bit.
 * Here a feature is an outlier of a weight when its largest |x| over the
 * calibration tokens exceeds the threshold (the paper also asks that the
 * feature be an outlier in a quarter of the layers and 6% of the sequence
 * positions; one calibrated maximum per weight is the simple form the
 * runner and the bits-per-weight count can hold fixed).
 *
 * The statistics come from lb_runner_set_hook on a runner of the source
 * values (unquantized: the model as stored with the quantized model's
 * replacements; fp32 activations and KV cache), one largest |x|
 * per input feature of each QUANTIZED weight; q/k/v see the same input
 * and so get the same columns, as do gate/up. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h"

#define OUTLIER_DEFAULT_CTX 512

typedef struct stats {
    const lb_qmodel *q;
    float **absmax;      /* per qmodel entry: [cols] largest |x| per feature, or NULL (not collected) */
    size_t *width;       /* per entry: cols */
    size_t bad;          /* an entry whose input was not finite, or SIZE_MAX */
    size_t last;         /* the entry found last (the hook's names come in model order) */
} stats;

static int is_embedding(const char *name)
{
    size_t n = strlen(name), k = strlen("embed_tokens.weight");
    return n >= k && strcmp(name + n - k, "embed_tokens.weight") == 0;
}

static void on_input(void *ctx, const char *name, const float *x, size_t rows, size_t cols)
{
    stats *s = ctx;
    size_t i = s->last;
    const lb_tensor *t = i < lb_qmodel_count(s->q) ? lb_model_tensor(lb_qmodel_model(s->q), i) : NULL;
    if ((!t || strcmp(t->name, name) != 0) && lb_qmodel_find(s->q, name, &i) != LB_OK) return;
    s->last = i;
    float *m = s->absmax[i];
    if (!m || s->width[i] != cols) return;
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < cols; j++) {
            float v = fabsf(x[r * cols + j]);
            if (!isfinite(v)) s->bad = s->bad == SIZE_MAX ? i : s->bad;
            else if (v > m[j]) m[j] = v;
        }
}

/* Room for the statistics of every QUANTIZED weight that has input
 * features (not an embedding). *head: an untied output head among them
 * (its hook runs only when logits are computed). */
static lb_status alloc_stats(stats *s, int *head)
{
    size_t n = lb_qmodel_count(s->q);
    *head = 0;
    s->absmax = calloc(n + 1, sizeof *s->absmax);
    s->width = calloc(n + 1, sizeof *s->width);
    if (!s->absmax || !s->width) return lb__fail(LB_ERR_NOMEM, "lb_qmodel_select_outliers: out of memory");
    for (size_t i = 0; i < n; i++) {
        lb_qentry e;
        lb_status st = lb_qmodel_entry(s->q, i, &e);
        if (st != LB_OK) return st;
        if (e.state != LB_QSTATE_QUANTIZED || e.tensor->n_dims != 2 || is_embedding(e.tensor->name)) continue;
        s->width[i] = (size_t)e.tensor->shape[1];
        if (!(s->absmax[i] = calloc(s->width[i], sizeof **s->absmax)))
            return lb__fail(LB_ERR_NOMEM, "lb_qmodel_select_outliers: out of memory");
        if (strcmp(e.tensor->name, "lm_head.weight") == 0) *head = 1;
    }
    return LB_OK;
}

static void free_stats(stats *s)
{
    for (size_t i = 0; s->absmax && i < lb_qmodel_count(s->q); i++) free(s->absmax[i]);
    free(s->absmax), free(s->width);
}

/* A qmodel of q's source values that a runner holds cheaply: every
 * tensor as stored (a GGUF's blocks computed on in place, not fp32
 * copies of every weight as lb__runner_build's source mode makes), q's
 * replacements (folded scales) copied in at fp32. */
static lb_status source_view(const lb_qmodel *q, lb_qmodel **out)
{
    lb_qmodel *v = NULL;
    lb_status st = lb_qmodel_new(lb_qmodel_model(q), &v);
    if (st == LB_OK) st = lb_qmodel_set_dtype(v, LB_DT_F32);
    float *x = NULL;
    for (size_t i = 0; st == LB_OK && i < lb_qmodel_count(q); i++) {
        lb_qentry e;
        if ((st = lb_qmodel_entry(q, i, &e)) != LB_OK || !e.replaced) continue;
        free(x);
        if (!(x = malloc(e.tensor->n_elements * sizeof *x))) {
            st = lb__fail(LB_ERR_NOMEM, "cannot allocate an fp32 copy of %s", e.tensor->name);
            break;
        }
        st = lb_qmodel_source_f32(q, i, x);
        if (st == LB_OK) st = lb_qmodel_replace(v, i, x);
    }
    free(x);
    if (st != LB_OK) lb_qmodel_free(v), v = NULL;
    *out = v;
    return st;
}

/* The windows through a runner of the source values with the hook on. */
static lb_status collect(const lb_qmodel *q, const int32_t *tokens, size_t n, const lb_outlier_options *o,
                         uint32_t ctx, int head, stats *s)
{
    lb_runner_options ro = {.threads = o->threads, .max_ctx = ctx};
    lb_runner *r = NULL;
    lb_qmodel *view = NULL;
    lb_status st = source_view(q, &view);
    if (st == LB_OK) st = lb_runner_from_qmodel(view, &ro, &r);
    if (st != LB_OK) {
        lb_qmodel_free(view);
        return st;
    }
    float *logits = head ? malloc(((size_t)ctx * lb_runner_vocab_size(r) + 1) * sizeof *logits) : NULL;
    if (head && !logits) st = lb__fail(LB_ERR_NOMEM, "lb_qmodel_select_outliers: out of memory for logits");
    lb_runner_set_hook(r, on_input, s);
    size_t windows = (n + ctx - 1) / ctx;
    for (size_t w = 0; w < windows && st == LB_OK; w++) {
        size_t at = w * ctx, len = n - at < ctx ? n - at : ctx;
        lb_runner_reset(r);
        st = lb_runner_forward(r, tokens + at, len, logits, 0);
        if (st == LB_OK && o->progress) o->progress(o->progress_ctx, w + 1, windows);
    }
    free(logits);
    lb_runner_free(r);
    lb_qmodel_free(view);
    return st;
}

lb_status lb_qmodel_select_outliers(lb_qmodel *q, const int32_t *tokens, size_t n, const lb_outlier_options *o,
                                    uint64_t *n_columns)
{
    if (n_columns) *n_columns = 0;
    if (!q || !o) return lb__fail(LB_ERR_ARG, "lb_qmodel_select_outliers: NULL argument");
    if (!tokens || n == 0) return lb__fail(LB_ERR_ARG, "lb_qmodel_select_outliers: no tokens");
    if (!(o->threshold > 0) || isinf(o->threshold))
        return lb__fail(LB_ERR_ARG, "lb_qmodel_select_outliers: the threshold %g is not a positive magnitude",
                        (double)o->threshold);
    uint32_t ctx = o->ctx, model_ctx = lb_model_arch(lb_qmodel_model(q))->max_seq_len;
    if (!ctx) ctx = model_ctx && model_ctx < OUTLIER_DEFAULT_CTX ? model_ctx : OUTLIER_DEFAULT_CTX;
    stats s = {.q = q, .bad = SIZE_MAX};
    int head = 0;
    lb_status st = alloc_stats(&s, &head);
    if (st == LB_OK) st = collect(q, tokens, n, o, ctx, head, &s);
    if (st == LB_OK && s.bad != SIZE_MAX)
        st = lb__fail(LB_ERR_NAN, "lb_qmodel_select_outliers: the input of %s is not finite (NaN or infinity)",
                      lb_model_tensor(lb_qmodel_model(q), s.bad)->name);
    uint32_t *cols = NULL;
    uint64_t total = 0;
    for (size_t i = 0; st == LB_OK && i < lb_qmodel_count(q); i++) {
        if (!s.absmax[i]) continue;
        free(cols);
        if (!(cols = malloc(s.width[i] * sizeof *cols))) {
            st = lb__fail(LB_ERR_NOMEM, "lb_qmodel_select_outliers: out of memory");
            break;
        }
        size_t k = 0;
        for (size_t j = 0; j < s.width[i]; j++)
            if (s.absmax[i][j] > o->threshold) cols[k++] = (uint32_t)j;
        if (k == s.width[i]) { /* nothing left to quantize */
            static const lb_qact none = {LB_ACT_NONE, {0}};
            st = lb_qmodel_keep(q, i);
            if (st == LB_OK) st = lb_qmodel_set_act(q, i, &none);
        } else {
            st = lb_qmodel_set_outliers(q, i, cols, k);
            total += k;
        }
    }
    free(cols);
    free_stats(&s);
    if (st == LB_OK && n_columns) *n_columns = total;
    return st;
}
