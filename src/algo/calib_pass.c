/* The calibration pass (calib_pass.h): windows carried through the model
 * one decoder layer at a time.
 *
 * The runner is built layerwise: it holds no decoder layer until its turn
 * and drops each after, and drops the embeddings once the windows are
 * embedded, so the pass holds one layer's weights (fp32 in SOURCE mode),
 * not the model's. Per layer li:
 *   1. the runner's layer li is loaded with its source values: in
 *      QUANTIZED mode the layer's own statistics are taken with the layer
 *      itself unquantized and the layers before it quantized
 *      (llm-compressor's sequential pipeline, and GPTQ's reference code
 *      without --true-sequential: every site of the layer sees the inputs
 *      its weight sees in the float layer whose input comes from the
 *      already quantized layers); it also picks up whatever a callback
 *      changed in later layers;
 *   2. every window runs through the layer with the hooks collecting the
 *      statistics: for the layer's inputs alone when a second run follows
 *      (lb__runner_layer_inputs: the hidden states stay as they are and
 *      down_proj's product, which that run replaces, is not computed),
 *      else in place;
 *   3. the callback sees the statistics and may change the layer in q;
 *   4. the layer is loaded again as the runner's build mode says (what the
 *      callback left; in QUANTIZED mode as the quantized model holds it)
 *      and every window runs through it in place, hooks off: the hidden
 *      states go on to layer li + 1 through the changed layer.
 * (SUBLAYERS mode runs the layer in stages instead: run_sublayers.)
 * Step 4 is skipped when nothing can have changed (SOURCE mode without a
 * callback): the collecting run's outputs are then the layer's outputs.
 * With a callback they are not kept (every method changes the layer it is
 * called on, so keeping them would only cost a second buffer
 * of all hidden states), unless keep_outputs says the callback's changes
 * leave the layer's function as it was (SmoothQuant's folds): then the
 * layer runs once, in place, as without a callback. Step 4 is skipped for
 * the last layer (nothing reads its outputs).
 *
 * Statistics: per site, per column, the largest |x|, and sum |x| and sum
 * x^2 in double (finite fp32 inputs cannot overflow them, so a
 * non-finite sum after a window is how a NaN or infinity is found); the
 * q/k/v (and gate/up) hooks deliver the same rows, so a site counts the
 * first call of each window only. Hessians: each window's X^T X is one
 * fp32 matrix product on the runner's matmul kernels (X^T packed as a
 * weight: every element one sum over the window's rows in row order), and
 * the windows' products are summed in double. Row samples: of the T =
 * n_windows x window token positions (window w's row t is position
 * w * window + t), n = min(sample_rows, T), one drawn in each of n equal
 * slices of the stream (lb__calib_sample_positions; all rows when n = T). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo/calib_pass.h"
#include "algo/calib_stats.h"
#include "kernel/matmul.h"
#include "model/runner_internal.h"
#include "util/error.h"

/* The windows' seed ("lowbit!!"); the samples' is the next value. */
#define LB_CALIB_SEED 0x6c6f776269742121ull

static const char *const site_what[LB__SITE_COUNT] = {
    "the input of q_proj, k_proj and v_proj (input_layernorm's output)",
    "the input of o_proj (the attention output)",
    "the input of gate_proj and up_proj (post_attention_layernorm's output)",
    "the input of down_proj (silu(gate) * up)",
};

/* The weights reading each site, in model order. */
static const struct {
    const char *suffix;
    lb__calib_site site;
} weight_sites[] = {
    {"self_attn.q_proj.weight", LB__SITE_ATTN_IN}, {"self_attn.k_proj.weight", LB__SITE_ATTN_IN},
    {"self_attn.v_proj.weight", LB__SITE_ATTN_IN}, {"self_attn.o_proj.weight", LB__SITE_O_IN},
    {"mlp.gate_proj.weight", LB__SITE_MLP_IN},     {"mlp.up_proj.weight", LB__SITE_MLP_IN},
    {"mlp.down_proj.weight", LB__SITE_DOWN_IN},
};
#define N_WEIGHTS (sizeof weight_sites / sizeof weight_sites[0])

typedef struct pass {
    lb__layer_stats st;                   /* the statistics handed to fn (buffers reused by every layer) */
    double *sum_abs[LB__SITE_COUNT];      /* [cols] */
    double *sum_sq[LB__SITE_COUNT];
    size_t counted[LB__SITE_COUNT];       /* windows counted at the site in this layer */
    size_t kv_counted;
    uint64_t *sample_pos;                 /* [n_sample] increasing */
    size_t n_sample, sample_lo, sample_hi; /* sample_pos[lo, hi) lie in the running window */
    size_t window, win, layer;            /* window length, the running window, the running layer */
    int collecting;
    int threads;
    lb__column_stats_fn column_stats;     /* the active ISA's (calib_stats.h) */
    float *xt;                            /* [max_cols][window]: X^T of one window */
    float *packed;                        /* X^T of one window as the matmul's packed weight (64-byte aligned) */
    float *gram;                          /* [GRAM_BLOCK][max_cols]: a block of rows of one window's X^T X */
    lb_status status;                     /* the first failure inside a hook */
} pass;

static int site_of(const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; i < N_WEIGHTS; i++) {
        size_t m = strlen(weight_sites[i].suffix);
        if (n > m && name[n - m - 1] == '.' && strcmp(name + n - m, weight_sites[i].suffix) == 0)
            return (int)weight_sites[i].site;
    }
    return -1;
}

/* Rows of H per matmul in add_gram: each block of rows is multiplied
 * against the columns up to its end only, so about half of X^T X is
 * computed (55% at 64 for 576 columns; the diagonal blocks whole). */
#define GRAM_BLOCK 64

/* H += X^T X for one window's rows x (rows x cols), lower triangle only
 * (site_end mirrors it): X^T is packed as a cols x rows weight straight
 * from x (panel q holds, for each row r, x[r][q*NR .. q*NR+NR), contiguous
 * in x), and each block of GRAM_BLOCK features of X^T is multiplied on the
 * matmul kernels against the panels of the features before its end. Every
 * element is the same one sum over the window's rows, in row order, as a
 * whole product gives. */
static lb_status add_gram(pass *p, const float *x, size_t rows, size_t cols, double *h)
{
    size_t panels = (cols + LB__MM_NR - 1) / LB__MM_NR;
    for (size_t q = 0; q < panels; q++) {
        size_t c0 = q * LB__MM_NR, n = cols - c0 < LB__MM_NR ? cols - c0 : LB__MM_NR;
        float *panel = p->packed + q * rows * LB__MM_NR;
        for (size_t r = 0; r < rows; r++) {
            memcpy(panel + r * LB__MM_NR, x + r * cols + c0, n * sizeof *x);
            if (n < LB__MM_NR) memset(panel + r * LB__MM_NR + n, 0, (LB__MM_NR - n) * sizeof *x);
        }
    }
    /* X^T row-major for the matmul's left operand, in tiles that stay in cache */
    for (size_t r0 = 0; r0 < rows; r0 += 16)
        for (size_t j0 = 0; j0 < cols; j0 += 16)
            for (size_t r = r0; r < r0 + 16 && r < rows; r++)
                for (size_t j = j0; j < j0 + 16 && j < cols; j++) p->xt[j * rows + r] = x[r * cols + j];
    for (size_t i0 = 0; i0 < cols; i0 += GRAM_BLOCK) {
        size_t i1 = cols - i0 < GRAM_BLOCK ? cols : i0 + GRAM_BLOCK;
        lb__packed head = {.out = i1, .in = rows, .panels = (i1 + LB__MM_NR - 1) / LB__MM_NR, .data = p->packed};
        head.bytes = head.panels * LB__MM_NR * rows * sizeof(float);
        lb_status st = lb__matmul(p->xt + i0 * rows, i1 - i0, &head, p->gram, p->threads);
        if (st != LB_OK) return lb__fail(st, "lb__calib_pass: out of memory for a %zu x %zu Hessian", cols, cols);
        for (size_t i = i0; i < i1; i++) {
            const float *g = p->gram + (i - i0) * i1;
            double *hi = h + i * cols;
            for (size_t j = 0; j <= i; j++) hi[j] += g[j];
        }
    }
    return LB_OK;
}

/* H's upper triangle from its lower one (add_gram fills only that). */
static void mirror_lower(double *h, size_t cols)
{
    for (size_t i = 0; i < cols; i++)
        for (size_t j = 0; j < i; j++) h[j * cols + i] = h[i * cols + j];
}

static void on_input(void *ctx, const char *name, const float *x, size_t rows, size_t cols)
{
    pass *p = ctx;
    int site = site_of(name);
    if (!p->collecting || p->status != LB_OK || site < 0 || p->counted[site] == p->win + 1) return;
    if (p->st.partial && site != p->st.current) return; /* a stage's norm hooked again: not its site */
    lb__site_stats *s = &p->st.site[site];
    if (cols != s->cols || rows != p->window) {
        p->status = lb__fail(LB_ERR_ARG, "lb__calib_pass: layer %zu: %s came as %zu x %zu, not %zu x %zu", p->layer,
                             name, rows, cols, p->window, s->cols);
        return;
    }
    double *sa = p->sum_abs[site], *sq = p->sum_sq[site];
    p->column_stats(x, rows, cols, s->absmax, sa, sq);
    /* a NaN or infinity in x makes its column's sums non-finite (finite fp32 never does) */
    for (size_t j = 0; j < cols; j++)
        if (!isfinite(sa[j]) || !isfinite(sq[j])) {
            p->status = lb__fail(LB_ERR_NAN, "lb__calib_pass: layer %zu: %s is not finite (NaN or infinity) in "
                                 "calibration window %zu, column %zu", p->layer, site_what[site], p->win, j);
            return;
        }
    uint64_t first = (uint64_t)p->win * p->window;
    for (size_t k = p->sample_lo; k < p->sample_hi; k++)
        memcpy(s->sample + k * cols, x + (size_t)(p->sample_pos[k] - first) * cols, cols * sizeof *x);
    if (s->hessian) p->status = add_gram(p, x, rows, cols, s->hessian);
    p->counted[site] = p->win + 1;
}

static void on_kv(void *ctx, size_t layer, const float *k, const float *v, size_t n, size_t kv_dim)
{
    pass *p = ctx;
    if (!p->collecting || p->status != LB_OK) return;
    size_t hd = p->st.head_dim, heads = p->st.n_kv_heads;
    if (layer != p->layer || kv_dim != heads * hd) {
        p->status = lb__fail(LB_ERR_ARG, "lb__calib_pass: layer %zu: keys and values of layer %zu, %zu wide (not %zu)",
                             p->layer, layer, kv_dim, heads * hd);
        return;
    }
    for (int which = 0; which < 2; which++) {
        const float *x = which ? v : k;
        float *amax = which ? p->st.v_absmax : p->st.k_absmax;
        for (size_t t = 0; t < n; t++)
            for (size_t h = 0; h < heads; h++)
                for (size_t d = 0; d < hd; d++) {
                    float a = fabsf(x[t * kv_dim + h * hd + d]);
                    if (!(a <= 3.4028235e38f)) { /* NaN or infinity */
                        p->status = lb__fail(LB_ERR_NAN, "lb__calib_pass: layer %zu: the %s (after the rotary embedding) "
                                             "are not finite (NaN or infinity) in calibration window %zu", p->layer,
                                             which ? "values" : "keys", p->win);
                        return;
                    }
                    amax[h] = a > amax[h] ? a : amax[h];
                }
    }
    p->kv_counted = p->win + 1;
}

/* After each window: the hooks saw every site and the keys and values. */
static lb_status check_window(const pass *p)
{
    for (int s = 0; s < LB__SITE_COUNT; s++)
        if ((!p->st.partial || s == p->st.current) && p->counted[s] != p->win + 1)
            return lb__fail(LB_ERR_ARG, "lb__calib_pass: layer %zu: the forward pass did not show %s", p->layer,
                            site_what[s]);
    /* the keys and values come with o_proj's input (SUBLAYERS: that stage) */
    if ((!p->st.partial || p->st.current == LB__SITE_O_IN) && p->kv_counted != p->win + 1)
        return lb__fail(LB_ERR_ARG, "lb__calib_pass: layer %zu: the forward pass did not show its keys and values",
                        p->layer);
    return LB_OK;
}

static void pass_free(pass *p)
{
    for (int s = 0; s < LB__SITE_COUNT; s++) {
        lb__site_stats *ss = &p->st.site[s];
        free(ss->absmax);
        free(ss->mean_abs);
        free(ss->mean_sq);
        free(ss->sample);
        free(ss->hessian);
        free(p->sum_abs[s]);
        free(p->sum_sq[s]);
    }
    free(p->st.k_absmax);
    free(p->st.v_absmax);
    free(p->sample_pos);
    free(p->xt);
    free(p->packed);
    free(p->gram);
}

/* One buffer of count elements of size bytes each, or NULL (count 0: a
 * valid one-element buffer, never a zero-byte malloc). */
static void *alloc_n(size_t count, size_t size)
{
    if (count && size > (SIZE_MAX - size) / count) return NULL;
    return calloc(count + 1, size);
}

static lb_status pass_alloc(pass *p, const size_t cols[LB__SITE_COUNT], size_t n_sample, int hessian, size_t window)
{
    size_t max_cols = 0;
    int ok = 1;
    for (int s = 0; s < LB__SITE_COUNT; s++) {
        lb__site_stats *ss = &p->st.site[s];
        ss->cols = cols[s];
        ss->n_sample = n_sample;
        ss->absmax = alloc_n(cols[s], sizeof(float));
        ss->mean_abs = alloc_n(cols[s], sizeof(float));
        ss->mean_sq = alloc_n(cols[s], sizeof(float));
        ss->sample = n_sample > SIZE_MAX / cols[s] ? NULL : alloc_n(n_sample * cols[s], sizeof(float));
        ss->hessian = !hessian ? NULL : cols[s] > SIZE_MAX / cols[s] ? NULL : alloc_n(cols[s] * cols[s], sizeof(double));
        p->sum_abs[s] = alloc_n(cols[s], sizeof(double));
        p->sum_sq[s] = alloc_n(cols[s], sizeof(double));
        ok = ok && ss->absmax && ss->mean_abs && ss->mean_sq && ss->sample && (!hessian || ss->hessian) &&
             p->sum_abs[s] && p->sum_sq[s];
        max_cols = cols[s] > max_cols ? cols[s] : max_cols;
    }
    p->st.k_absmax = alloc_n(p->st.n_kv_heads, sizeof(float));
    p->st.v_absmax = alloc_n(p->st.n_kv_heads, sizeof(float));
    if (hessian) {
        size_t panels = (max_cols + LB__MM_NR - 1) / LB__MM_NR;
        p->xt = max_cols > SIZE_MAX / window ? NULL : alloc_n(max_cols * window, sizeof(float));
        p->packed = panels > SIZE_MAX / sizeof(float) / LB__MM_NR / window
                        ? NULL
                        : aligned_alloc(64, (panels * LB__MM_NR * window * sizeof(float) + 63) / 64 * 64);
        p->gram = alloc_n(GRAM_BLOCK * max_cols, sizeof(float));
    }
    if (!ok || !p->st.k_absmax || !p->st.v_absmax || (hessian && (!p->xt || !p->packed || !p->gram)))
        return lb__fail(LB_ERR_NOMEM, "lb__calib_pass: cannot allocate one layer's statistics (%zu sample rows%s)",
                        n_sample, hessian ? ", Hessians" : "");
    return LB_OK;
}

/* Zeroes a layer's accumulators and names its weights and norms. */
static lb_status layer_begin(pass *p, const lb_qmodel *q, size_t li)
{
    lb__layer_stats *st = &p->st;
    st->layer = li;
    p->layer = li;
    for (int s = 0; s < LB__SITE_COUNT; s++) {
        lb__site_stats *ss = &st->site[s];
        memset(ss->absmax, 0, ss->cols * sizeof *ss->absmax);
        memset(p->sum_abs[s], 0, ss->cols * sizeof *p->sum_abs[s]);
        memset(p->sum_sq[s], 0, ss->cols * sizeof *p->sum_sq[s]);
        if (ss->hessian) memset(ss->hessian, 0, ss->cols * ss->cols * sizeof *ss->hessian);
        ss->n_weights = 0;
        p->counted[s] = 0;
    }
    memset(st->k_absmax, 0, st->n_kv_heads * sizeof *st->k_absmax);
    memset(st->v_absmax, 0, st->n_kv_heads * sizeof *st->v_absmax);
    p->kv_counted = 0;
    char name[128];
    lb_status status = LB_OK;
    for (size_t i = 0; i < N_WEIGHTS && status == LB_OK; i++) {
        lb__site_stats *ss = &st->site[weight_sites[i].site];
        snprintf(name, sizeof name, "model.layers.%zu.%s", li, weight_sites[i].suffix);
        status = lb_qmodel_find(q, name, &ss->weight[ss->n_weights++]);
    }
    if (status == LB_OK) {
        snprintf(name, sizeof name, "model.layers.%zu.input_layernorm.weight", li);
        status = lb_qmodel_find(q, name, &st->attn_norm);
    }
    if (status == LB_OK) {
        snprintf(name, sizeof name, "model.layers.%zu.post_attention_layernorm.weight", li);
        status = lb_qmodel_find(q, name, &st->ffn_norm);
    }
    return status;
}

/* Site s's statistics complete after all windows. */
static void site_end(pass *p, int s, uint64_t rows)
{
    lb__site_stats *ss = &p->st.site[s];
    ss->rows = rows;
    if (ss->hessian) mirror_lower(ss->hessian, ss->cols);
    for (size_t j = 0; j < ss->cols; j++) {
        ss->mean_abs[j] = (float)(p->sum_abs[s][j] / (double)rows);
        ss->mean_sq[j] = (float)(p->sum_sq[s][j] / (double)rows);
    }
}

/* splitmix64 (Steele, Lea and Flood 2014): the windows' and the samples'
 * generator, so the same text gives the same choices everywhere. */
static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, n) (n > 0): draws at or past the last whole multiple of n
 * are drawn again, so no value is favoured. */
static uint64_t below(uint64_t *state, uint64_t n)
{
    uint64_t limit = UINT64_MAX - UINT64_MAX % n, z;
    do z = splitmix64(state);
    while (z >= limit);
    return z % n;
}

/* floor(k T / n) without overflow (k <= n <= T): with T = a n + b,
 * k T / n = k a + k b / n, and k b < n^2. */
static uint64_t slice_start(uint64_t k, uint64_t n, uint64_t total)
{
    return k * (total / n) + k * (total % n) / n;
}

void lb__calib_sample_positions(uint64_t *pos, size_t n, uint64_t total)
{
    uint64_t rng = LB_CALIB_SEED + 1;
    for (size_t k = 0; k < n; k++) {
        uint64_t lo = slice_start(k, n, total), hi = slice_start(k + 1, n, total);
        pos[k] = lo + below(&rng, hi - lo);
    }
}

/* The input width of each site, from layer 0's weights: q_proj's, o_proj's,
 * gate_proj's and down_proj's rows (the runner checked every layer's). */
static lb_status site_cols(const lb_qmodel *q, size_t cols[LB__SITE_COUNT])
{
    const char *first[LB__SITE_COUNT] = {"self_attn.q_proj.weight", "self_attn.o_proj.weight", "mlp.gate_proj.weight",
                                         "mlp.down_proj.weight"};
    for (int s = 0; s < LB__SITE_COUNT; s++) {
        char name[96];
        size_t i;
        lb_qentry e;
        snprintf(name, sizeof name, "model.layers.0.%s", first[s]);
        lb_status st = lb_qmodel_find(q, name, &i);
        if (st == LB_OK) st = lb_qmodel_entry(q, i, &e);
        if (st != LB_OK) return st;
        if (e.tensor->n_dims != 2 || e.tensor->shape[1] == 0)
            return lb__fail(LB_ERR_PARSE, "lb__calib_pass: %s is not a matrix", name);
        cols[s] = (size_t)e.tensor->shape[1];
    }
    return LB_OK;
}

/* How a collecting run takes window w through layer li: in place, for
 * its inputs alone (h left as it is), or one stage (SUBLAYERS mode). */
typedef enum run_kind { RUN_IN_PLACE, RUN_INPUTS_ONLY, RUN_STAGE } run_kind;

static lb_status run_window(lb_runner *r, pass *p, float *h, float *carry, size_t w, run_kind kind,
                            lb__layer_stage stage)
{
    size_t dim = lb__runner_dim(r);
    float *x = h + w * p->window * dim;
    switch (kind) {
    case RUN_IN_PLACE: return lb__runner_layer(r, p->layer, x, p->window);
    case RUN_INPUTS_ONLY: return lb__runner_layer_inputs(r, p->layer, x, p->window);
    case RUN_STAGE:
        return lb__runner_layer_stage(r, p->layer, stage, x, carry + w * p->window * lb__runner_carry_width(r),
                                      p->window);
    }
    return lb__fail(LB_ERR_ARG, "lb__calib_pass: run kind %d", (int)kind);
}

/* Every window through layer p->layer with the hooks collecting. */
static lb_status collect(lb_runner *r, pass *p, float *h, float *carry, size_t n_windows, run_kind kind,
                         lb__layer_stage stage)
{
    lb_status st = LB_OK;
    p->collecting = 1;
    p->sample_lo = p->sample_hi = 0;
    for (size_t w = 0; w < n_windows && st == LB_OK; w++) {
        p->win = w;
        uint64_t end = (uint64_t)(w + 1) * p->window;
        p->sample_lo = p->sample_hi;
        while (p->sample_hi < p->n_sample && p->sample_pos[p->sample_hi] < end) p->sample_hi++;
        st = run_window(r, p, h, carry, w, kind, stage);
        if (st == LB_OK) st = p->status;
        if (st == LB_OK) st = check_window(p);
    }
    p->collecting = 0;
    return st;
}

/* SUBLAYERS mode, layer li: each site in turn collected over every window
 * (the stage that ends at its input), handed to fn alone, and that site's
 * weights reloaded from q (fn changes no others) so that the next stage
 * computes with what fn set; then the windows' outputs (not for the last
 * layer). */
static lb_status run_sublayers(lb_qmodel *q, lb_runner *r, pass *p, float *h, float *carry, size_t n_windows,
                               lb__calib_layer_fn fn, void *ctx, int last)
{
    static const lb__layer_stage ends_at[LB__SITE_COUNT] = {LB__STAGE_ATTN_IN, LB__STAGE_O_IN, LB__STAGE_MLP_IN,
                                                            LB__STAGE_DOWN_IN};
    /* the runner's weights reading each site, in its model order (q, k, v, o, gate, up, down) */
    static const int first_weight[LB__SITE_COUNT + 1] = {0, 3, 4, 6, 7};
    uint64_t rows = (uint64_t)n_windows * p->window;
    lb_status st = LB_OK;
    for (int s = 0; s < LB__SITE_COUNT && st == LB_OK; s++) {
        p->st.partial = 1, p->st.current = s;
        st = collect(r, p, h, carry, n_windows, RUN_STAGE, ends_at[s]);
        if (st != LB_OK) break;
        site_end(p, s, rows);
        if (fn && (st = fn(ctx, q, &p->st)) == LB_OK && !(last && s + 1 == LB__SITE_COUNT))
            st = lb__runner_reload_weights(r, q, p->layer, first_weight[s], first_weight[s + 1]);
    }
    p->st.partial = p->st.current = 0;
    for (size_t w = 0; w < n_windows && st == LB_OK && !last; w++)
        st = run_window(r, p, h, carry, w, RUN_STAGE, LB__STAGE_OUT);
    return st;
}

static lb_status run_pass(lb_qmodel *q, lb_runner *r, pass *p, float *h, float *carry, size_t n_windows,
                          const lb__calib_pass_options *o, lb__calib_layer_fn fn, void *ctx)
{
    size_t n_layers = lb__runner_n_layers(r);
    uint64_t rows = (uint64_t)n_windows * p->window;
    lb_status st = LB_OK;
    for (size_t li = 0; li < n_layers && st == LB_OK; li++) {
        int last = li + 1 == n_layers;
        if ((st = layer_begin(p, q, li)) != LB_OK) break;
        if (o->mode == LB__CALIB_SUBLAYERS) {
            st = lb__runner_reload_layer_as(r, q, li, LB__RUNNER_CALIB);
            if (st == LB_OK) st = run_sublayers(q, r, p, h, carry, n_windows, fn, ctx, last);
        } else {
            int twice = (fn && !o->keep_outputs) || o->mode == LB__CALIB_QUANTIZED;
            st = lb__runner_reload_layer_as(r, q, li, LB__RUNNER_SOURCE);
            if (st == LB_OK) st = collect(r, p, h, NULL, n_windows, twice ? RUN_INPUTS_ONLY : RUN_IN_PLACE, 0);
            if (st != LB_OK) break;
            for (int s = 0; s < LB__SITE_COUNT; s++) site_end(p, s, rows);
            if (fn && (st = fn(ctx, q, &p->st)) != LB_OK) break;
            if (twice && !last) {
                st = lb__runner_reload_layer(r, q, li);
                for (size_t w = 0; w < n_windows && st == LB_OK; w++)
                    st = run_window(r, p, h, NULL, w, RUN_IN_PLACE, 0);
            }
        }
        lb__runner_unload_layer(r, li); /* one layer's weights at a time */
        if (st == LB_OK && o->progress) o->progress(o->progress_ctx, li + 1, n_layers);
    }
    return st;
}

lb_status lb__calib_pass(lb_qmodel *q, const int32_t *windows, size_t n_windows, size_t window,
                         const lb__calib_pass_options *o, lb__calib_layer_fn fn, void *ctx)
{
    if (!q || !windows) return lb__fail(LB_ERR_ARG, "lb__calib_pass: NULL %s", q ? "windows" : "quantized model");
    if (n_windows == 0 || window == 0)
        return lb__fail(LB_ERR_ARG, "lb__calib_pass: %zu windows of %zu tokens", n_windows, window);
    lb__calib_pass_options defaults = {0};
    if (!o) o = &defaults;
    int build = 0;
    switch (o->mode) {
    case LB__CALIB_SOURCE: build = LB__RUNNER_SOURCE; break;
    case LB__CALIB_QUANTIZED:
    case LB__CALIB_SUBLAYERS: build = LB__RUNNER_CALIB; break;
    }
    if (!build) return lb__fail(LB_ERR_ARG, "lb__calib_pass: mode %d", (int)o->mode);
    if (o->keep_outputs && o->mode != LB__CALIB_SOURCE)
        return lb__fail(LB_ERR_ARG, "lb__calib_pass: keep_outputs is for SOURCE mode (in QUANTIZED mode the next "
                                    "layer's inputs come from the quantized layer)");
    if (window > UINT32_MAX) return lb__fail(LB_ERR_ARG, "lb__calib_pass: a window of %zu tokens", window);
    const lb_arch *a = lb_model_arch(lb_qmodel_model(q));
    size_t cols[LB__SITE_COUNT];
    lb_status st = site_cols(q, cols);
    if (st != LB_OK) return st;

    lb_runner_options ro = {.threads = o->threads, .max_ctx = (uint32_t)window};
    lb_runner *r = NULL;
    if ((st = lb__runner_build_layerwise(q, &ro, build, &r)) != LB_OK) return st;
    size_t dim = lb__runner_dim(r);
    uint64_t total = (uint64_t)n_windows * window;
    pass p = {.window = window, .threads = o->threads, .column_stats = lb__column_stats_for(lb_isa_active())};
    p.st.n_kv_heads = a->n_kv_heads ? a->n_kv_heads : a->n_heads; /* as the runner reads the architecture */
    p.st.head_dim = a->head_dim ? a->head_dim : a->dim / a->n_heads;
    p.n_sample = o->sample_rows < total ? o->sample_rows : (size_t)total;
    size_t carry_width = o->mode == LB__CALIB_SUBLAYERS ? lb__runner_carry_width(r) : 0;
    float *h = NULL, *carry = NULL;
    if (n_windows > SIZE_MAX / window || n_windows * window > SIZE_MAX / sizeof(float) / dim ||
        (carry_width && n_windows * window > SIZE_MAX / sizeof(float) / carry_width) ||
        p.n_sample > ((size_t)1 << 31))
        st = lb__fail(LB_ERR_NOMEM, "lb__calib_pass: %zu windows of %zu tokens (%zu sample rows) are too many",
                      n_windows, window, p.n_sample);
    if (st == LB_OK) st = pass_alloc(&p, cols, p.n_sample, o->hessian, window);
    if (st == LB_OK) {
        h = malloc(n_windows * window * dim * sizeof *h);
        p.sample_pos = alloc_n(p.n_sample, sizeof *p.sample_pos);
        if (carry_width) carry = malloc(n_windows * window * carry_width * sizeof *carry);
        if (!h || !p.sample_pos || (carry_width && !carry))
            st = lb__fail(LB_ERR_NOMEM, "lb__calib_pass: cannot allocate the hidden states%s of %zu x %zu tokens",
                          carry_width ? " and the stages' carry" : "", n_windows, window);
    }
    if (st == LB_OK) lb__calib_sample_positions(p.sample_pos, p.n_sample, total);
    for (size_t w = 0; w < n_windows && st == LB_OK; w++)
        st = lb__runner_embed(r, windows + w * window, window, h + w * window * dim);
    if (st == LB_OK) {
        lb__runner_unload_ends(r); /* the windows are embedded; no logits are wanted */
        lb_runner_set_hook(r, on_input, &p);
        lb__runner_set_kv_hook(r, on_kv, &p);
        st = run_pass(q, r, &p, h, carry, n_windows, o, fn, ctx);
    }
    lb_runner_free(r);
    free(h);
    free(carry);
    pass_free(&p);
    return st;
}

/* ---- windows ---- */

static int by_value(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return (x > y) - (x < y);
}

lb_status lb__calib_windows(const int32_t *tokens, size_t n, size_t seqs, size_t len, int32_t bos, int32_t **out,
                            size_t *n_out)
{
    if (!out || !n_out) return lb__fail(LB_ERR_ARG, "lb__calib_windows: NULL output");
    *out = NULL;
    *n_out = 0;
    if (!tokens && n) return lb__fail(LB_ERR_ARG, "lb__calib_windows: tokens is NULL");
    if (seqs == 0 || len == 0)
        return lb__fail(LB_ERR_ARG, "lb__calib_windows: %zu windows of %zu tokens asked for", seqs, len);
    size_t slots = n / len;
    if (slots == 0)
        return lb__fail(LB_ERR_ARG, "the calibration text has %zu tokens, fewer than one window of %zu (give more "
                        "text, or shorter windows)", n, len);
    size_t count = seqs < slots ? seqs : slots;
    size_t *slot = malloc(slots * sizeof *slot);
    int32_t *w = slot ? malloc(count * len * sizeof *w) : NULL;
    if (!w) {
        free(slot);
        return lb__fail(LB_ERR_NOMEM, "lb__calib_windows: cannot allocate %zu windows of %zu tokens", count, len);
    }
    /* a partial Fisher-Yates shuffle: slot[0 .. count) is a uniform draw
     * without replacement; then sorted, so the windows keep text order */
    for (size_t i = 0; i < slots; i++) slot[i] = i;
    uint64_t rng = LB_CALIB_SEED;
    for (size_t i = 0; i < count && count < slots; i++) {
        size_t j = i + (size_t)below(&rng, slots - i), t = slot[i];
        slot[i] = slot[j], slot[j] = t;
    }
    qsort(slot, count, sizeof *slot, by_value);
    for (size_t i = 0; i < count; i++) {
        memcpy(w + i * len, tokens + slot[i] * len, len * sizeof *w);
        if (bos >= 0) w[i * len] = bos;
    }
    free(slot);
    *out = w;
    *n_out = count;
    return LB_OK;
}
