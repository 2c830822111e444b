/* Rotary embeddings and causal GQA attention (see attention.h). */
#include "model/attention.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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
    r->cos = malloc((max_ctx * r->half ? max_ctx * r->half : 1) * sizeof *r->cos);
    r->sin = malloc((max_ctx * r->half ? max_ctx * r->half : 1) * sizeof *r->sin);
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

/* Head dot products: 8 partial sums, lane i % 8, added pairwise at the end,
 * so the compiler may keep the lanes in one vector (fp32, fixed order). */
static float dot(const float *a, const float *b, size_t n)
{
    float acc[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (size_t l = 0; l < 8; l++) acc[l] += a[i + l] * b[i + l];
    for (; i < n; i++) acc[i % 8] += a[i] * b[i];
    float s4[4], s2[2];
    for (size_t l = 0; l < 4; l++) s4[l] = acc[l] + acc[l + 4];
    for (size_t l = 0; l < 2; l++) s2[l] = s4[l] + s4[l + 2];
    return s2[0] + s2[1];
}

static lb_status heads(void *ctx, size_t h0, size_t h1)
{
    const lb__attn_job *j = ctx;
    size_t hd = j->head_dim, q_stride = j->n_heads * hd, kv_stride = j->n_kv_heads * hd;
    size_t group = j->n_heads / j->n_kv_heads;
    float scale = 1.0f / sqrtf((float)hd);
    for (size_t h = h0; h < h1; h++) {
        float *att = j->scratch + h * (j->pos0 + j->n);
        size_t kvh = h / group;
        for (size_t t = 0; t < j->n; t++) {
            const float *q = j->q + t * q_stride + h * hd;
            size_t len = j->pos0 + t + 1;
            float max = -INFINITY;
            for (size_t p = 0; p < len; p++) {
                att[p] = dot(q, j->kcache + p * kv_stride + kvh * hd, hd) * scale;
                if (att[p] > max) max = att[p];
            }
            float sum = 0.0f;
            for (size_t p = 0; p < len; p++) {
                att[p] = expf(att[p] - max);
                sum += att[p];
            }
            float inv = 1.0f / sum;
            float *o = j->out + t * q_stride + h * hd;
            memset(o, 0, hd * sizeof *o);
            for (size_t p = 0; p < len; p++) {
                float w = att[p] * inv;
                const float *v = j->vcache + p * kv_stride + kvh * hd;
                for (size_t d = 0; d < hd; d++) o[d] += w * v[d];
            }
        }
    }
    return LB_OK;
}

lb_status lb__attention(const lb__attn_job *j, int threads)
{
    return lb__parallel_for(j->n_heads, 1, threads, heads, (void *)j);
}
