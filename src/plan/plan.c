/* lowbit plan's arithmetic: weight memory, KV cache, concurrency, and the
 * bandwidth and compute bounds of decode and prefill. Every figure is a
 * closed formula of the request; the CLI prints the formulas beside them. */
#include <math.h>
#include <string.h>

#include "plan/plan_internal.h"
#include "util/error.h"

/* A weight matrix of the model: rows x cols (output x input features),
 * `count` of them, `active` of which a token uses (MoE experts). */
typedef struct matrix {
    uint64_t rows, cols;
    double count;
    int expert; /* routed expert: how many a batch touches depends on routing */
} matrix;

#define MAX_MATRICES 16

/* Bits per value as the runner holds the matrix: lb_qspec_bits_per_value,
 * the one figure every command reports (a plain 16-bit or fp32 spec is its
 * codes alone). */
static double spec_bits(const lb_qspec *spec, uint64_t rows, uint64_t cols)
{
    return lb_qspec_bits_per_value(spec, rows, cols);
}

static size_t model_matrices(const lb_shape *s, matrix *m)
{
    size_t n = 0;
    uint64_t d = s->dim, h = s->n_heads, L = s->n_layers;
    if (s->kv_lora_rank) { /* multi-head latent attention */
        uint64_t qk = s->qk_nope_head_dim + s->qk_rope_head_dim;
        if (s->q_lora_rank) {
            m[n++] = (matrix){s->q_lora_rank, d, (double)L, 0};
            m[n++] = (matrix){h * qk, s->q_lora_rank, (double)L, 0};
        } else {
            m[n++] = (matrix){h * qk, d, (double)L, 0};
        }
        m[n++] = (matrix){s->kv_lora_rank + s->qk_rope_head_dim, d, (double)L, 0};
        m[n++] = (matrix){h * (s->qk_nope_head_dim + s->v_head_dim), s->kv_lora_rank, (double)L, 0};
        m[n++] = (matrix){d, h * s->v_head_dim, (double)L, 0};
    } else {
        m[n++] = (matrix){h * s->head_dim, d, (double)L, 0};                     /* q */
        m[n++] = (matrix){s->n_kv_heads * s->head_dim, d, 2.0 * (double)L, 0};   /* k, v */
        m[n++] = (matrix){d, h * s->head_dim, (double)L, 0};                     /* o */
    }
    uint64_t moe = s->n_experts ? L - s->n_dense_layers : 0, dense = L - moe;
    if (dense) {
        m[n++] = (matrix){s->hidden_dim, d, 2.0 * (double)dense, 0}; /* gate, up */
        m[n++] = (matrix){d, s->hidden_dim, (double)dense, 0};       /* down */
    }
    if (moe) {
        m[n++] = (matrix){s->moe_hidden_dim, d, 2.0 * (double)(moe * s->n_experts), 1};
        m[n++] = (matrix){d, s->moe_hidden_dim, (double)(moe * s->n_experts), 1};
        if (s->n_shared_experts) {
            m[n++] = (matrix){s->shared_hidden_dim, d, 2.0 * (double)(moe * s->n_shared_experts), 0};
            m[n++] = (matrix){d, s->shared_hidden_dim, (double)(moe * s->n_shared_experts), 0};
        }
    }
    return n;
}

/* Expected distinct experts per MoE layer that a batch of `tokens` routes
 * to, if each token picks k of n uniformly: n (1 - (1 - k/n)^tokens). */
static double experts_touched(const lb_shape *s, double tokens)
{
    if (!s->n_experts) return 0;
    double n = (double)s->n_experts, k = (double)s->experts_per_token;
    return n * (1 - pow(1 - k / n, tokens));
}

/* Attention FLOPs of one token attending to `len` earlier positions in
 * every KV layer: q.k and p.v, a multiply and an add each. */
static double attention_flops(const lb_shape *s, double len)
{
    double qk = s->kv_lora_rank ? (double)(s->qk_nope_head_dim + s->qk_rope_head_dim) : (double)s->head_dim;
    double v = s->kv_lora_rank ? (double)s->v_head_dim : (double)s->head_dim;
    double sliding = s->sliding_window ? fmin(len, (double)s->sliding_window) : len;
    return 2.0 * (double)s->n_heads * (qk + v) * ((double)s->n_full_layers * len + (double)s->n_sliding_layers * sliding);
}

/* The same summed over a prefill: position i attends to i positions. */
static double prefill_attention_flops(const lb_shape *s, double ctx)
{
    double per = attention_flops(s, 1.0) / ((double)s->n_full_layers + (double)s->n_sliding_layers);
    double full = ctx * (ctx + 1) / 2, w = (double)s->sliding_window;
    double sliding = ctx <= w || w == 0 ? full : w * (w + 1) / 2 + (ctx - w) * w;
    return per * ((double)s->n_full_layers * full + (double)s->n_sliding_layers * sliding);
}

static double peak(const lb_gpu *g, lb_compute c)
{
    switch (c) {
    case LB_COMPUTE_FP8: return g->fp8_flops;
    case LB_COMPUTE_FP4: return g->fp4_flops;
    case LB_COMPUTE_INT8: return g->int8_ops;
    case LB_COMPUTE_BF16: return g->bf16_flops;
    }
    return 0; /* not an lb_compute (lb_plan_compute refuses it first) */
}

/* Huge shapes or GPU figures can still overflow a double: every figure is
 * finite, or the plan is refused naming the first that is not. */
static lb_status check_finite(const lb_plan *p)
{
    const struct { const char *name; double v; } f[] = {
        {"the weight bytes", p->bytes_weights}, {"the bits per weight", p->weight_bits},
        {"the KV bytes per token", p->kv_bytes_per_token}, {"the KV bytes per sequence", p->kv_bytes_per_seq},
        {"the GPU memory", p->mem_total}, {"the memory left for the KV cache", p->mem_for_kv},
        {"the decode bytes at batch 1", p->decode_bytes_1}, {"the decode FLOPs at batch 1", p->decode_flops_1},
        {"the decode tokens/s at batch 1", p->decode_tps_1}, {"the decode bytes at the batch", p->decode_bytes_b},
        {"the decode FLOPs at the batch", p->decode_flops_b}, {"the decode tokens/s at the batch", p->decode_tps_b},
        {"the prefill FLOPs", p->prefill_flops}, {"the prefill time", p->prefill_s}, {"the prefill tokens/s", p->prefill_tps},
        {"the bandwidth", p->bandwidth}, {"the peak FLOPs", p->peak_flops}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (!isfinite(f[i].v))
            return lb__fail(LB_ERR_ARG, "%s is not finite (%g): the request's figures are too large to plan", f[i].name, f[i].v);
    return LB_OK;
}

lb_status lb_plan_compute(const lb_plan_request *r, lb_plan *out)
{
    if (!r || !out) return lb__fail(LB_ERR_ARG, "lb_plan_compute: NULL argument");
    memset(out, 0, sizeof *out);
    const lb_shape *s = &r->shape;
    const lb_gpu *g = &r->gpu;
    if (r->n_gpus == 0 || g->mem_bytes <= 0 || g->bw_bytes_s <= 0)
        return lb__fail(LB_ERR_ARG, "the GPU needs memory and bandwidth figures (and at least one GPU)");
    if (r->ctx == 0) return lb__fail(LB_ERR_ARG, "the context must be at least one token");
    if (r->reserve < 0 || r->reserve >= 1) return lb__fail(LB_ERR_ARG, "the reserve is a fraction in [0, 1)");
    static const char *const names[] = {"BF16", "FP8", "FP4", "INT8"};
    if ((unsigned)r->compute >= sizeof names / sizeof names[0])
        return lb__fail(LB_ERR_ARG, "compute %d is not an lb_compute", (int)r->compute);
    if (peak(g, r->compute) <= 0)
        return lb__fail(LB_ERR_ARG, "%s has no dense %s figure (no such tensor cores, or unknown)", g->display,
                        names[r->compute]);
    lb_status st = lb__shape_check(s, s->name);
    if (st != LB_OK) return st;
    lb_shape_params(s, &out->params);
    const lb_param_count *p = &out->params;
    double gpus = (double)r->n_gpus, ctx = (double)r->ctx;

    /* weights */
    matrix m[MAX_MATRICES];
    size_t nm = model_matrices(s, m);
    double mat_params = 0, mat_bits = 0, expert_bytes = 0, dense_bytes = 0;
    for (size_t i = 0; i < nm; i++) {
        double bits = spec_bits(&r->weights, m[i].rows, m[i].cols);
        if (bits <= 0) return lb__fail(LB_ERR_ARG, "the weight spec is not valid: %s", lb_last_error());
        double n = (double)m[i].rows * (double)m[i].cols * m[i].count;
        mat_params += n, mat_bits += n * bits;
        if (m[i].expert) expert_bytes += n * bits / 8 / ((double)s->n_experts * (double)(s->n_layers - s->n_dense_layers));
        else dense_bytes += n * bits / 8;
    }
    /* embedding and head: quantized like the matrices, or 16-bit */
    double emb = (double)p->embedding, head = (double)p->lm_head;
    double emb_bits = r->quantize_embeddings ? spec_bits(&r->weights, s->vocab_size, s->dim) : 16;
    double other_params = (double)p->total - mat_params - emb - head; /* norms, biases, routers: 16-bit */
    out->weight_bits = mat_params > 0 ? mat_bits / mat_params : 0;
    out->bytes_matrices = mat_bits / 8 + (r->quantize_embeddings ? (emb + head) * emb_bits / 8 : 0);
    out->bytes_16bit = other_params * 2 + (r->quantize_embeddings ? 0 : (emb + head) * 2);
    out->bytes_weights = out->bytes_matrices + out->bytes_16bit;

    /* KV cache */
    double per_layer = s->kv_lora_rank ? (double)(s->kv_lora_rank + s->qk_rope_head_dim)
                                       : 2.0 * (double)s->n_kv_heads * (double)s->head_dim;
    uint64_t kv_cols = s->kv_lora_rank ? s->kv_lora_rank + s->qk_rope_head_dim : s->head_dim;
    /* one scale for the whole cache costs nothing per element; finer ones
     * are counted (rows: tokens x KV heads, many) */
    out->kv_bits = r->kv.granularity == LB_GRAN_TENSOR && !r->kv.two_level ? lb_format_get(r->kv.element)->bits
                                                                          : spec_bits(&r->kv, 1u << 30, kv_cols);
    if (out->kv_bits <= 0) return lb__fail(LB_ERR_ARG, "the KV cache spec is not valid: %s", lb_last_error());
    double kv_layers = (double)s->n_full_layers + (double)s->n_sliding_layers;
    out->kv_bytes_per_token = per_layer * kv_layers * out->kv_bits / 8;
    double window = s->sliding_window ? fmin(ctx, (double)s->sliding_window) : ctx;
    out->kv_bytes_per_seq = per_layer * out->kv_bits / 8 * ((double)s->n_full_layers * ctx + (double)s->n_sliding_layers * window);

    /* memory */
    out->mem_total = gpus * g->mem_bytes;
    out->mem_reserve = r->reserve * out->mem_total;
    out->mem_for_kv = out->mem_total - out->mem_reserve - out->bytes_weights;
    out->fits = out->mem_for_kv > 0;
    double max_batch = out->fits && out->kv_bytes_per_seq > 0 ? floor(out->mem_for_kv / out->kv_bytes_per_seq) : 0;
    if (!(max_batch < 0x1p64)) /* the conversion would be undefined */
        return lb__fail(LB_ERR_ARG, "%g sequences of %llu tokens fit in %g bytes: beyond 64 bits, not a plan (the GPU "
                        "memory or the model's KV figures are not plausible)", max_batch, (unsigned long long)r->ctx,
                        out->mem_for_kv);
    out->max_batch = (uint64_t)max_batch;
    out->batch = r->batch ? r->batch : out->max_batch;

    /* decode: bytes and FLOPs of one step */
    out->bandwidth = gpus * g->bw_bytes_s;
    out->peak_flops = gpus * peak(g, r->compute);
    double head_bytes = s->tied_embeddings ? emb * emb_bits / 8 : head * emb_bits / 8; /* the head reads its whole matrix */
    double small = other_params * 2;
    double moe_layers = s->n_experts ? (double)(s->n_layers - s->n_dense_layers) : 0;
    double matmul_active = (double)p->active - emb + (s->tied_embeddings ? emb : 0); /* the head is a matmul */
    for (int k = 0; k < 2; k++) {
        double b = k == 0 ? 1 : (double)out->batch;
        double bytes = dense_bytes + moe_layers * experts_touched(s, b) * expert_bytes + head_bytes + small +
                       b * (double)s->dim * emb_bits / 8 /* embedding rows */ + b * out->kv_bytes_per_seq;
        double flops = b * (2 * matmul_active + attention_flops(s, ctx));
        double t = fmax(bytes / out->bandwidth, flops / out->peak_flops);
        double tps = b > 0 ? b / t : 0;
        int compute_bound = flops / out->peak_flops > bytes / out->bandwidth;
        if (k == 0) out->decode_bytes_1 = bytes, out->decode_flops_1 = flops, out->decode_tps_1 = tps,
                    out->decode_compute_bound_1 = compute_bound;
        else out->decode_bytes_b = b > 0 ? bytes : 0, out->decode_flops_b = b > 0 ? flops : 0, out->decode_tps_b = tps,
             out->decode_compute_bound_b = compute_bound;
    }

    /* prefill of ctx tokens: every matmul once per token, attention over the causal triangle */
    out->prefill_flops = ctx * 2 * matmul_active + prefill_attention_flops(s, ctx);
    double prefill_bytes = dense_bytes + moe_layers * experts_touched(s, ctx) * expert_bytes + head_bytes + small +
                           ctx * out->kv_bytes_per_token;
    out->prefill_compute_s = out->prefill_flops / out->peak_flops;
    out->prefill_memory_s = prefill_bytes / out->bandwidth;
    out->prefill_s = fmax(out->prefill_compute_s, out->prefill_memory_s);
    out->prefill_compute_bound = out->prefill_compute_s >= out->prefill_memory_s;
    out->prefill_tps = ctx / out->prefill_s;
    return check_finite(out);
}
