/* Rotary embeddings and causal GQA attention (see attention.h). */
#include "model/attention.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernel/matmul.h"
#include "kernel/softmax.h"
#include "util/error.h"
#include "util/parallel.h"

/* transformers' _compute_llama3_parameters: long wavelengths slowed by
 * the factor, short ones kept, the band between blended smoothly */
static double llama3_freq(const lb_arch *a, double f)
{
    const double pi = 3.14159265358979323846;
    double factor = a->rope_scale_factor, lo = a->rope_low_freq_factor, hi = a->rope_high_freq_factor;
    double old_ctx = a->rope_original_ctx;
    double low_wavelen = old_ctx / lo, high_wavelen = old_ctx / hi, wavelen = 2 * pi / f;
    if (wavelen > low_wavelen) return f / factor;
    if (wavelen < high_wavelen) return f;
    double smooth = (old_ctx / wavelen - lo) / (hi - lo);
    return (1 - smooth) * f / factor + smooth * f;
}

lb_status lb__rope_init(lb__rope *r, const lb_arch *a, size_t head_dim, const float *factors, size_t max_ctx)
{
    memset(r, 0, sizeof *r);
    r->head_dim = head_dim;
    r->half = head_dim / 2;
    r->max_ctx = max_ctx;
    r->layout = a->rope_layout;
    double *freq = malloc((r->half ? r->half : 1) * sizeof *freq);
    size_t entries = max_ctx * r->half + 1; /* + 1: never a zero-byte malloc */
    r->cos = malloc(entries * sizeof *r->cos);
    r->sin = malloc(entries * sizeof *r->sin);
    if (!freq || !r->cos || !r->sin) {
        free(freq);
        lb__rope_free(r);
        return lb__fail(LB_ERR_NOMEM, "cannot allocate rotary tables for %zu positions", max_ctx);
    }
    for (size_t i = 0; i < r->half; i++) {
        double f = pow(a->rope_theta, -(double)(2 * i) / (double)head_dim);
        if (factors) f /= factors[i];
        else if (a->rope_scale_factor > 0) f = llama3_freq(a, f);
        freq[i] = f;
    }
    for (size_t p = 0; p < max_ctx; p++)
        for (size_t i = 0; i < r->half; i++) {
            double angle = (double)p * freq[i];
            r->cos[p * r->half + i] = (float)cos(angle);
            r->sin[p * r->half + i] = (float)sin(angle);
        }
    free(freq);
    return LB_OK;
}

void lb__rope_free(lb__rope *r)
{
    free(r->cos);
    free(r->sin);
    r->cos = r->sin = NULL;
}

void lb__rope_apply(const lb__rope *r, float *v, size_t n_heads, size_t pos)
{
    const float *c = r->cos + pos * r->half, *s = r->sin + pos * r->half;
    /* the pair (a, b) for frequency i: adjacent (2i, 2i+1) or split (i, i + half) */
    size_t step = r->layout == LB_ROPE_ADJACENT ? 2 : 1, other = r->layout == LB_ROPE_ADJACENT ? 1 : r->half;
    for (size_t h = 0; h < n_heads; h++) {
        float *head = v + h * r->head_dim;
        for (size_t i = 0; i < r->half; i++) {
            float *a = head + i * step, *b = a + other;
            float x0 = *a, x1 = *b;
            *a = x0 * c[i] - x1 * s[i];
            *b = x0 * s[i] + x1 * c[i];
        }
    }
}

/* Queries per step: bounds the score block at QCHUNK x positions floats. */
#define QCHUNK 128

/* A quantized cache's K and V of one KV head, positions 0 .. total-1,
 * decoded into the fp32 cache's panel layout (lb__kv_panel_index) for a
 * prefill's products: K panel by panel (the cache keeps K's codes in that
 * layout), V row by row (rows: head_dim floats), each row's runs of NR
 * values where they go. The last K panel's lanes past total are computed
 * by the products and read by no output. */
static void decode_group(const lb__attn_job *j, size_t kvh, size_t total, float *kbuf, float *vbuf, float *rows)
{
    size_t hd = j->head_dim, nr = LB__MM_NR;
    for (size_t p = 0; p * nr < total; p++) lb__kv_decode_k_panel(j->kv, j->layer, kvh, p, kbuf + p * hd * nr);
    for (size_t t = 0; t < total; t++) {
        const float *v = lb__kv_decode(j->kv, LB__KV_V, j->layer, t, kvh, rows);
        /* plain loops: a memcpy of a run's 128 bytes went through rep movs */
        for (size_t d0 = 0; d0 < hd; d0 += nr) {
            float *dst = vbuf + lb__kv_panel_index(LB__KV_V, hd, total, t, d0);
            for (size_t d = 0; d < nr && d0 + d < hd; d++) dst[d] = v[d0 + d];
        }
    }
}

/* A decode step (one query): each run of query heads in [h0, h1) that
 * share a KV head as the rows of two products on that head's codes in
 * place (kernel/kvattn.h; an fp32 cache's panels), which compute what the
 * products below compute on the decoded values, bit for bit, and read the
 * cache once per LB__KV_ROWS (4) query heads of the run instead of once
 * per head. */
static lb_status decode_heads(const lb__attn_job *j, size_t h0, size_t h1)
{
    size_t hd = j->head_dim, group = j->n_heads / j->n_kv_heads, total = j->pos0 + 1;
    float scale = 1.0f / sqrtf((float)hd);
    size_t most = group < h1 - h0 ? group : h1 - h0;
    float *sc = malloc(most * total * sizeof *sc);
    if (!sc) return lb__fail(LB_ERR_NOMEM, "attention: cannot allocate scores for %zu positions", total);
    lb_isa isa = lb_isa_active();
    for (size_t h = h0; h < h1;) {
        size_t kvh = h / group, end = (kvh + 1) * group < h1 ? (kvh + 1) * group : h1, rows = end - h;
        lb__kv_view k = lb__kv_head_view(j->kv, LB__KV_K, j->layer, kvh);
        lb__kv_view v = lb__kv_head_view(j->kv, LB__KV_V, j->layer, kvh);
        lb__kv_scores(&k, j->q + h * hd, hd, rows, total, sc, total, isa);
        for (size_t r = 0; r < rows; r++) lb__softmax(sc + r * total, total, total, scale, isa);
        lb__kv_mix(&v, sc, total, rows, total, j->out + h * hd, hd, isa);
        h = end;
    }
    free(sc);
    return LB_OK;
}

/* A chunk's P . V runs over the positions its last query sees; an earlier
 * query's weights past its own position are exact zeros, which add nothing
 * unless the V value there is not finite (0 x inf and 0 x NaN are NaN).
 * So a row that came out with a NaN is done again over its own positions
 * only: what a decode step of that query computes (the products are the
 * same bits for any number of rows), NaN again only where a position it
 * sees holds a non-finite value. */
static lb_status redo_nan_rows(const float *sc, size_t rows, size_t len, size_t first_valid, const lb__packed *vview,
                               float *oh)
{
    size_t width = vview->out;
    for (size_t t = 0; t < rows; t++) {
        size_t valid = first_valid + t, d = 0;
        while (d < width && !isnan(oh[t * width + d])) d++;
        if (d == width || valid == len) continue;
        lb__packed own = *vview;
        own.in = valid;
        lb_status st = lb__matmul(sc + t * len, 1, &own, oh + t * width, 1);
        if (st != LB_OK) return st;
    }
    return LB_OK;
}

/* One head's attention as two matrix products through the matmul kernels
 * (matmul.h): scores S = Q . K^T with K as a "weight" of positions x
 * head_dim in panels, then O = P . V with V^T as a weight of head_dim x
 * positions, one panel of NR values at a time. An fp32 cache holds both in
 * that layout (kvcache.h) and is read in place; the other formats' values
 * are decoded into it once per group of heads sharing a KV head. Every
 * score is a sum over head_dim in order, every output a sum over positions
 * in order in which the causally masked ones are exact zeros, so a query's
 * result is the same bits in any chunk, prefill or decode, from either
 * layout -- with two exceptions: a non-finite V value behind the mask
 * (0 x inf is NaN: redo_nan_rows), and rounding toward -inf, where an
 * output whose sum is exactly +0 becomes -0 when a masked position's V is
 * negative (+0 + -0 is -0 in that mode only). */
static lb_status heads(void *ctx, size_t h0, size_t h1)
{
    const lb__attn_job *j = ctx;
    if (j->n == 1) return decode_heads(j, h0, h1);
    size_t hd = j->head_dim, q_stride = j->n_heads * hd;
    size_t group = j->n_heads / j->n_kv_heads, total = j->pos0 + j->n, nr = LB__MM_NR;
    size_t kpanels = (total + nr - 1) / nr, vpanels = (hd + nr - 1) / nr, chunk = j->n < QCHUNK ? j->n : QCHUNK;
    int in_place = j->kv->format == LB_FMT_FP32;
    float scale = 1.0f / sqrtf((float)hd);
    size_t kfloats = in_place ? 0 : kpanels * nr * hd, vfloats = in_place ? 0 : vpanels * nr * total;
    float *buf = malloc((kfloats + vfloats + chunk * hd + chunk * nr + chunk * total + hd) * sizeof(float));
    if (!buf) return lb__fail(LB_ERR_NOMEM, "attention: cannot allocate buffers for %zu positions", total);
    float *kbuf = buf, *vbuf = kbuf + kfloats, *qh = vbuf + vfloats, *oh = qh + chunk * hd, *sc = oh + chunk * nr;
    float *vrow = sc + chunk * total; /* a V row decoded (quantized caches) */
    const float *kp = kbuf, *vp = vbuf;
    size_t vstride = total * nr; /* floats from one V panel to the next */
    lb_status st = LB_OK;
    size_t last_kvh = (size_t)-1;
    for (size_t h = h0; h < h1 && st == LB_OK; h++) {
        size_t kvh = h / group;
        if (in_place) {
            kp = lb__kv_panels(j->kv, LB__KV_K, j->layer, kvh);
            vp = lb__kv_panels(j->kv, LB__KV_V, j->layer, kvh);
            vstride = j->kv->ctx * nr;
        } else if (kvh != last_kvh) { /* heads of one group share the decoded K and V */
            decode_group(j, kvh, total, kbuf, vbuf, vrow);
            last_kvh = kvh;
        }
        for (size_t t0 = 0; t0 < j->n && st == LB_OK; t0 += chunk) {
            size_t rows = j->n - t0 < chunk ? j->n - t0 : chunk;
            size_t len = j->pos0 + t0 + rows; /* positions the chunk's last query sees */
            for (size_t t = 0; t < rows; t++) memcpy(qh + t * hd, j->q + (t0 + t) * q_stride + h * hd, hd * sizeof *qh);
            lb__packed kview = {.out = len, .in = hd, .panels = (len + nr - 1) / nr, .data = (float *)kp};
            st = lb__matmul(qh, rows, &kview, sc, 1);
            if (st != LB_OK) break;
            for (size_t t = 0; t < rows; t++)
                lb__softmax(sc + t * len, j->pos0 + t0 + t + 1, len, scale, lb_isa_active());
            /* V^T panel by panel: each a weight of up to NR outputs over
             * the first len positions, read where it lies */
            for (size_t pn = 0; pn < vpanels && st == LB_OK; pn++) {
                size_t d0 = pn * nr, width = hd - d0 < nr ? hd - d0 : nr;
                lb__packed vview = {.out = width, .in = len, .panels = 1, .data = (float *)vp + pn * vstride};
                st = lb__matmul(sc, rows, &vview, oh, 1);
                if (st == LB_OK) st = redo_nan_rows(sc, rows, len, j->pos0 + t0 + 1, &vview, oh);
                for (size_t t = 0; t < rows && st == LB_OK; t++)
                    memcpy(j->out + (t0 + t) * q_stride + h * hd + d0, oh + t * width, width * sizeof *oh);
            }
        }
    }
    free(buf);
    return st;
}

lb_status lb__attention(const lb__attn_job *j, int threads)
{
    /* scores and weighted sums: about 2 x n x heads x positions x head_dim multiply-adds */
    size_t work = 2 * j->n * j->n_heads * (j->pos0 + j->n) * j->head_dim;
    return lb__parallel_for(j->n_heads, 1, lb__threads_for(threads, work), heads, (void *)j);
}
