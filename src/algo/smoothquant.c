/* SmoothQuant (smoothquant.h), run by the calibration pass in SOURCE
 * mode, one decoder layer at a time.
 *
 * Which inputs. A group (the weights that read one input) is smoothed only
 * when at least one of its weights is QUANTIZED with quantized input
 * activations (lb_qentry.act.mode != NONE): the method moves difficulty
 * from activations into weights, which gains nothing when the activations
 * stay 16-bit (weight-only specs: that is AWQ's job). The paper smooths
 * the inputs that have a norm in front (q/k/v: 1/s into input_layernorm;
 * gate/up: into post_attention_layernorm), as llm-compressor's Llama
 * mappings do; lowbit by default also smooths o_proj's input (1/s into
 * v_proj's rows) and down_proj's (into up_proj's rows: silu(gate) * up is
 * linear in up), because it measurably helps: SmolLM2-135M, int8 weights
 * per channel and static per-tensor int8 activations, alpha 0.5, KLD to
 * the unquantized model on wiki.test (10 x 512 tokens; calibration 32 x
 * 512 of wiki.train): RTN 0.953, q/k/v + gate/up 0.818, down_proj alone
 * 0.419, all but o_proj 0.291, all four 0.304; stories260K (TinyStories,
 * 40 x 512 held out): RTN 0.0185, q/k/v + gate/up 0.0209, all four 0.0158.
 * Folding into rows costs v_proj and up_proj nothing under a per-channel
 * weight spec (a row's scale takes the factor).
 *
 * GQA. o_proj's input channel (head h, d) is attention-weighted v channel
 * (h / (n_heads / n_kv_heads), d), so the scale v_proj's row takes must
 * serve all q heads of the kv group: the per-kv-channel maxima are the
 * maxima over the group's channels (of max|X| and of max|W|), the formula
 * is applied to those and its scale repeated over the group's heads.
 *
 * The search (lb__smooth_options.search): for each group its own alpha
 * from the grid of smoothquant.h (the paper picks one alpha per model by
 * hand; this picks per group), by the group's output error on the sample
 * rows with weights and activations quantized as the entries say
 * (smooth_error.h). "No smoothing" is a candidate too, tried first and
 * kept on ties, so a group is changed only when that lowers its error.
 * Measured on SmolLM2, W8A8 static (KLD to the unquantized model):
 * test_smoothquant_e2e.py's setting (16 windows for the method, static
 * ranges from the first 8192 tokens, as quantize calibrates them on other
 * tokens than the method's, 2 x 512 held-out tokens, 1024 sample rows):
 * RTN 0.96, alpha 0.5 0.37, the search 0.23. A harness with statistics
 * and static ranges from the same 32 consecutive windows, 10 x 512
 * held-out tokens (lb_kld): RTN 0.95, alpha 0.5 0.30, the search 0.045
 * (1024 or 4096 sample rows; 330 s of search with 4096 on 2 busy cores),
 * 0.14 with the static ranges from 32 other windows: the search's large
 * alphas flatten every channel up to the calibration's maxima, so they
 * gain most when the static ranges see the same tokens. stories260K
 * (TinyStories): alpha 0.5 0.0158, the search 0.030: the large alphas clip
 * more on held-out text (20x more clipped inputs; on the calibration text
 * itself the search wins, 0.0065 -> 0.0034). */
#include "algo/smoothquant.h"

#include <math.h>
#include <stdlib.h>

#include "algo/fold.h"
#include "algo/smooth_error.h"
#include "util/error.h"

#define LB__SMOOTH_MIN_SCALE 1e-5f
#define LB__SMOOTH_MAX_SCALE 1e5f

void lb__smoothquant_scales(const float *x_absmax, const float *w_absmax, size_t cols, float alpha, float *s)
{
    for (size_t j = 0; j < cols; j++) {
        float x = x_absmax[j], w = w_absmax[j];
        if (!(x > 0) || !(w > 0) || isinf(x) || isinf(w)) {
            s[j] = 1.0f;
            continue;
        }
        double v = pow((double)x, (double)alpha) / pow((double)w, 1.0 - (double)alpha);
        s[j] = v < LB__SMOOTH_MIN_SCALE ? LB__SMOOTH_MIN_SCALE : v > LB__SMOOTH_MAX_SCALE ? LB__SMOOTH_MAX_SCALE : (float)v;
    }
}

/* One input of the layer: its weights' source values and what the
 * scales are computed from. */
typedef struct site_work {
    const lb__site_stats *ss;
    size_t cols;
    lb_qentry e[3];
    float *w[3];        /* the members' source values */
    float *w_absmax;    /* cols: max |w| per column over the members */
    size_t group, hd;   /* O_IN: q heads per kv head and head_dim (else 1 and cols) */
    float *x_kv, *w_kv, *s_kv; /* per (kv) channel: cols / group each */
} site_work;

static void site_work_free(site_work *sw)
{
    for (size_t k = 0; k < 3; k++) free(sw->w[k]);
    free(sw->w_absmax), free(sw->x_kv), free(sw->w_kv), free(sw->s_kv);
}

/* 1 when some weight of the input is quantized with quantized inputs. */
static int wants_smoothing(const site_work *sw)
{
    for (size_t k = 0; k < sw->ss->n_weights; k++)
        if (sw->e[k].state == LB_QSTATE_QUANTIZED && sw->e[k].act.mode != LB_ACT_NONE) return 1;
    return 0;
}

static lb_status site_work_load(lb_qmodel *q, const lb__layer_stats *s, lb__calib_site site, site_work *sw)
{
    const lb__site_stats *ss = &s->site[site];
    sw->ss = ss;
    sw->cols = ss->cols;
    sw->group = 1, sw->hd = ss->cols;
    if (site == LB__SITE_O_IN) {
        size_t n_heads = s->head_dim ? ss->cols / s->head_dim : 0;
        if (!s->n_kv_heads || !n_heads || n_heads * s->head_dim != ss->cols || n_heads % s->n_kv_heads)
            return lb__fail(LB_ERR_ARG, "layer %zu: o_proj's %zu inputs are not heads of %zu over %zu kv heads",
                            s->layer, ss->cols, s->head_dim, s->n_kv_heads);
        sw->group = n_heads / s->n_kv_heads, sw->hd = s->head_dim;
    }
    if (ss->n_weights == 0 || ss->n_weights > 3)
        return lb__fail(LB_ERR_ARG, "layer %zu: input %d has %zu weights", s->layer, (int)site, ss->n_weights);
    lb_status st = LB_OK;
    for (size_t k = 0; k < ss->n_weights && st == LB_OK; k++) st = lb_qmodel_entry(q, ss->weight[k], &sw->e[k]);
    if (st != LB_OK || !wants_smoothing(sw)) return st;
    size_t cols = sw->cols, kv = cols / sw->group;
    sw->w_absmax = calloc(cols, sizeof *sw->w_absmax);
    sw->x_kv = malloc(kv * sizeof *sw->x_kv);
    sw->w_kv = malloc(kv * sizeof *sw->w_kv);
    sw->s_kv = malloc(kv * sizeof *sw->s_kv);
    if (!sw->w_absmax || !sw->x_kv || !sw->w_kv || !sw->s_kv)
        return lb__fail(LB_ERR_NOMEM, "cannot allocate the scales of layer %zu", s->layer);
    for (size_t k = 0; k < ss->n_weights; k++) {
        const lb_tensor *t = sw->e[k].tensor;
        if (t->n_dims != 2 || t->shape[1] != cols)
            return lb__fail(LB_ERR_ARG, "layer %zu: %s is not a matrix of %zu columns", s->layer, t->name, cols);
        size_t rows = (size_t)t->shape[0], n = rows * cols;
        if (!(sw->w[k] = malloc((n ? n : 1) * sizeof *sw->w[k])))
            return lb__fail(LB_ERR_NOMEM, "cannot allocate a copy of %s", t->name);
        if ((st = lb_qmodel_source_f32(q, ss->weight[k], sw->w[k])) != LB_OK) return st;
        for (size_t r = 0; r < rows; r++)
            for (size_t c = 0; c < cols; c++) {
                float a = fabsf(sw->w[k][r * cols + c]);
                if (a > sw->w_absmax[c]) sw->w_absmax[c] = a;
            }
    }
    /* per kv channel (g, d): the maxima over the group's q heads */
    for (size_t i = 0; i < kv; i++) sw->x_kv[i] = 0, sw->w_kv[i] = 0;
    for (size_t c = 0; c < cols; c++) {
        size_t i = (c / sw->hd) / sw->group * sw->hd + c % sw->hd;
        float x = ss->absmax[c];
        if (x > sw->x_kv[i] || isnan(x)) sw->x_kv[i] = x; /* a NaN maximum: s = 1 there */
        if (sw->w_absmax[c] > sw->w_kv[i]) sw->w_kv[i] = sw->w_absmax[c];
    }
    return LB_OK;
}

/* s (cols) for migration strength alpha. */
static void site_scales(site_work *sw, float alpha, float *s)
{
    size_t kv = sw->cols / sw->group;
    lb__smoothquant_scales(sw->x_kv, sw->w_kv, kv, alpha, sw->s_kv);
    for (size_t c = 0; c < sw->cols; c++) s[c] = sw->s_kv[(c / sw->hd) / sw->group * sw->hd + c % sw->hd];
}

/* The alpha of the grid with the lowest output error, or -1 for none
 * (no smoothing). */
static lb_status search_alpha(const lb__smooth_options *o, const lb_qmodel *q, const lb__layer_stats *s,
                              site_work *sw, float *s_buf, float *best_alpha)
{
    const lb__site_stats *ss = sw->ss;
    if (!ss->sample || ss->n_sample == 0)
        return lb__fail(LB_ERR_ARG, "layer %zu: the alpha search needs sample rows of the inputs", s->layer);
    lb__smooth_group g = {.x = ss->sample, .n = ss->n_sample, .cols = sw->cols, .x_absmax = ss->absmax,
                          .n_members = ss->n_weights, .scale_dtype = lb_qmodel_dtype(q), .threads = o->threads};
    for (size_t k = 0; k < ss->n_weights; k++) {
        const lb_qentry *e = &sw->e[k];
        g.m[k] = (lb__smooth_member){.w = sw->w[k], .rows = (size_t)e->tensor->shape[0],
                                     .quantized = e->state == LB_QSTATE_QUANTIZED, .spec = e->spec, .act = e->act};
    }
    lb_status st = lb__smooth_group_init(&g);
    double best = 0;
    *best_alpha = -1;
    for (int k = 0; k <= LB__SMOOTH_GRID && st == LB_OK; k++) {
        float alpha = (float)k * LB__SMOOTH_GRID_STEP;
        if (k == 0)
            for (size_t c = 0; c < sw->cols; c++) s_buf[c] = 1.0f;
        else
            site_scales(sw, alpha, s_buf);
        double err = 0;
        if ((st = lb__smooth_group_error(&g, s_buf, &err)) != LB_OK) break;
        if (k == 0 || err < best) best = err, *best_alpha = k == 0 ? -1 : alpha;
    }
    lb__smooth_group_free(&g);
    return st;
}

/* The scale of a loaded input (alpha, or the search's), folded. */
static lb_status smooth_loaded(const lb__smooth_options *o, lb_qmodel *q, const lb__layer_stats *s,
                               lb__calib_site site, site_work *sw, float *scale)
{
    float alpha = o->alpha;
    lb_status st = o->search ? search_alpha(o, q, s, sw, scale, &alpha) : LB_OK;
    if (st != LB_OK || alpha < 0) return st; /* alpha < 0: the search kept the group as it is */
    site_scales(sw, alpha, scale);
    return lb__fold_input_scale(q, s, site, scale, o->threads);
}

static lb_status smooth_site(const lb__smooth_options *o, lb_qmodel *q, const lb__layer_stats *s,
                             lb__calib_site site)
{
    site_work sw = {0};
    float *scale = NULL;
    lb_status st = site_work_load(q, s, site, &sw);
    if (st == LB_OK && sw.w_absmax) { /* else nothing to smooth */
        scale = malloc(sw.cols * sizeof *scale);
        st = scale ? smooth_loaded(o, q, s, site, &sw, scale)
                   : lb__fail(LB_ERR_NOMEM, "cannot allocate %zu scales", sw.cols);
    }
    free(scale);
    site_work_free(&sw);
    return st;
}

lb_status lb__smoothquant_layer(void *ctx, lb_qmodel *q, const lb__layer_stats *s)
{
    const lb__smooth_options *o = ctx;
    if (!o || !q || !s) return lb__fail(LB_ERR_ARG, "lb__smoothquant_layer: NULL argument");
    if (!o->search && !(o->alpha >= 0 && o->alpha <= 1))
        return lb__fail(LB_ERR_ARG, "SmoothQuant's alpha must be in [0, 1], not %g", (double)o->alpha);
    unsigned sites = o->sites ? o->sites : LB__SMOOTH_DEFAULT_SITES;
    lb_status st = LB_OK;
    for (int site = 0; site < LB__SITE_COUNT && st == LB_OK; site++)
        if (sites & LB__SMOOTH_SITE(site)) st = smooth_site(o, q, s, (lb__calib_site)site);
    return st;
}
