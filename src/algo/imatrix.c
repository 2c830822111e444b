/* Importance matrices from lowbit's own forward pass (lowbit.h,
 * lb_imatrix_compute), accumulated as llama-imatrix accumulates them:
 *   - the text's tokens are cut into n / ctx windows of ctx tokens (the
 *     rest dropped), each window's first token replaced by BOS when the
 *     model adds one, each run from an empty cache;
 *   - every matrix product whose weight is named blk.* records its input:
 *     per row (token), in order, sum[j] += x[j] * x[j] in fp32, and the
 *     weight's count grows by the rows; the output head only when asked
 *     and only as output.weight (a head tied to token_embd is not
 *     recorded, as llama.cpp's name filter skips it);
 *   - q, k and v see the same normed input and each records it, as do gate
 *     and up;
 *   - chunk_count is the largest count over the chunk size (the windows run).
 * The summation order per column is llama.cpp's (token order within and
 * across windows), so the sums differ only by how the two forward passes
 * round the activations themselves. The runner's activation hook delivers
 * every input before its matmul (src/model/runner.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "io/imatrix.h"
#include "util/error.h"

#define LB_IMATRIX_DEFAULT_CTX 512

typedef struct collect {
    lb_imatrix *im;
    int process_output;
    lb_status st;       /* the first failure inside the hook */
    size_t last;        /* the entry found last (the hook's names come in model order) */
} collect;

static lb__imatrix_entry *entry_for(collect *c, const char *gguf, size_t cols)
{
    lb_imatrix *im = c->im;
    for (size_t k = 0; k < im->n; k++) {
        size_t i = (c->last + k) % im->n;
        if (strcmp(im->e[i].name, gguf) == 0) return c->last = i, &im->e[i];
    }
    lb__imatrix_entry *e;
    c->st = lb__imatrix_add(im, gguf, strlen(gguf), cols, 1, &e);
    if (c->st != LB_OK) return NULL;
    c->last = im->n - 1;
    return e;
}

static void on_input(void *ctx, const char *name, const float *x, size_t rows, size_t cols)
{
    collect *c = ctx;
    if (c->st != LB_OK) return;
    char gguf[256];
    lb_name_to_gguf(name, gguf, sizeof gguf);
    int wanted = strncmp(gguf, "blk.", 4) == 0 || (c->process_output && strcmp(gguf, "output.weight") == 0);
    if (!wanted) return;
    if (strlen(gguf) > LB_IMATRIX_MAX_NAME) {
        c->st = lb__fail(LB_ERR_UNSUPPORTED, "lb_imatrix_compute: weight name '%s' is too long for an imatrix", gguf);
        return;
    }
    lb__imatrix_entry *e = entry_for(c, gguf, cols);
    if (!e) return;
    if (e->cols != cols) {
        c->st = lb__fail(LB_ERR_ARG, "lb_imatrix_compute: %s has %zu input columns, then %zu", gguf, e->cols, cols);
        return;
    }
    float *acc = e->sums;
    for (size_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        for (size_t j = 0; j < cols; j++) acc[j] += xr[j] * xr[j];
    }
    e->counts[0] += (int64_t)rows;
    for (size_t j = 0; j < cols; j++)
        if (!isfinite(acc[j])) {
            c->st = lb__fail(LB_ERR_NAN, "lb_imatrix_compute: the input of %s (%s) is not finite (NaN or infinity)",
                             gguf, name);
            return;
        }
}

lb_status lb_imatrix_compute(const lb_model *m, const int32_t *tokens, size_t n, const lb_imatrix_options *o,
                             lb_imatrix **out)
{
    if (!out) return lb__fail(LB_ERR_ARG, "lb_imatrix_compute: NULL output");
    *out = NULL;
    if (!m) return lb__fail(LB_ERR_ARG, "lb_imatrix_compute: model is NULL");
    if (!tokens || n == 0) return lb__fail(LB_ERR_ARG, "lb_imatrix_compute: no tokens");
    lb_imatrix_options defaults = {.bos = -1};
    if (!o) o = &defaults;
    size_t ctx = o->ctx ? o->ctx : LB_IMATRIX_DEFAULT_CTX;
    if (n < 2 * ctx)
        return lb__fail(LB_ERR_ARG, "lb_imatrix_compute: %zu tokens; a window of %zu needs at least %zu (as "
                        "llama-imatrix demands)", n, ctx, 2 * ctx);
    size_t chunks = n / ctx;
    if (o->max_chunks && o->max_chunks < chunks) chunks = o->max_chunks;

    lb_runner_options ro = {.threads = o->threads, .max_ctx = (uint32_t)ctx};
    lb_runner *r = NULL;
    lb_status st = lb_runner_new(m, &ro, &r);
    if (st != LB_OK) return st;
    collect c = {.im = lb__imatrix_new(), .process_output = o->process_output};
    int32_t *window = malloc(ctx * sizeof *window);
    float *logits = o->process_output ? malloc(ctx * (size_t)lb_runner_vocab_size(r) * sizeof *logits) : NULL;
    if (!c.im || !window || (o->process_output && !logits))
        st = lb__fail(LB_ERR_NOMEM, "lb_imatrix_compute: out of memory");
    lb_runner_set_hook(r, on_input, &c);
    for (size_t w = 0; w < chunks && st == LB_OK; w++) {
        memcpy(window, tokens + w * ctx, ctx * sizeof *window);
        if (o->bos >= 0) window[0] = o->bos;
        lb_runner_reset(r);
        st = lb_runner_forward(r, window, ctx, logits, 0);
        if (st == LB_OK) st = c.st;
        if (st == LB_OK && o->progress) o->progress(o->progress_ctx, w + 1, chunks);
    }
    lb_runner_free(r);
    free(window);
    free(logits);
    if (st == LB_OK && c.im->n == 0) st = lb__fail(LB_ERR_ARG, "lb_imatrix_compute: the model has no blk.* weights");
    if (st == LB_OK) {
        int64_t max_count = 0;
        for (size_t i = 0; i < c.im->n; i++) max_count = c.im->e[i].counts[0] > max_count ? c.im->e[i].counts[0] : max_count;
        c.im->chunk_size = (uint32_t)ctx;
        c.im->has_metadata = 1; /* what lb_imatrix_save writes */
        c.im->chunk_count = (uint32_t)(max_count / (int64_t)ctx);
        if (o->dataset) st = lb__imatrix_add_dataset(c.im, o->dataset, strlen(o->dataset));
    }
    if (st == LB_OK) st = lb__imatrix_finish(c.im, "lb_imatrix_compute");
    if (st != LB_OK) {
        lb_imatrix_free(c.im);
        return st;
    }
    *out = c.im;
    return LB_OK;
}
