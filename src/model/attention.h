/* Rotary position embeddings and causal grouped-query attention over the
 * runner's KV cache (kvcache.h: fp32 or a quantized format). */
#ifndef LB_MODEL_ATTENTION_H
#define LB_MODEL_ATTENTION_H

#include <stddef.h>

#include "lowbit.h"
#include "model/kvcache.h"

/* cos and sin of every (position, frequency) pair, computed once in
 * double and stored as fp32. */
typedef struct lb__rope {
    size_t head_dim, half, max_ctx;
    lb_rope_layout layout;
    float *cos, *sin; /* [max_ctx][half] */
} lb__rope;

/* Frequencies theta^(-2i/head_dim), i < head_dim/2, then Llama-3 scaling
 * (arch rope_scale_factor > 0, as transformers' _compute_llama3_parameters)
 * or, when factors is not NULL (GGUF rope_freqs.weight, head_dim/2
 * values), each divided by its factor. */
lb_status lb__rope_init(lb__rope *r, const lb_arch *a, size_t head_dim, const float *factors, size_t max_ctx);
void lb__rope_free(lb__rope *r);
/* Rotates each of n_heads heads of v (n_heads * head_dim floats) for position pos. */
void lb__rope_apply(const lb__rope *r, float *v, size_t n_heads, size_t pos);

typedef struct lb__attn_job {
    const float *q;       /* [n][n_heads * head_dim], rotated */
    const lb__kvcache *kv; /* positions < pos0 + n of the layer filled */
    size_t layer;
    size_t pos0, n, n_heads, n_kv_heads, head_dim;
    float *out;           /* [n][n_heads * head_dim] */
    float *scratch;       /* n_heads * (pos0 + n) floats */
} lb__attn_job;

/* Causal attention: query t (position pos0 + t) sees cache positions
 * 0 .. pos0 + t. Scores q.k / sqrt(head_dim) and the softmax (max
 * subtracted) in fp32; query head h reads kv head h / (n_heads /
 * n_kv_heads). A quantized cache is read as its fp32 values (code times
 * scale, lb__kv_decode), then the same arithmetic: the result is
 * bit-identical to an fp32 cache holding those values. A decode step (n =
 * 1) reads the cache's codes in place (kernel/kvattn.h; fp32: its panels),
 * up to 4 query heads of a KV head as the rows of one product; a prefill
 * reads an fp32 cache in place and decodes the others into fp32 panels
 * once per KV head. Split over heads; each head's arithmetic is the same
 * for any thread count and for a prefill or a token-by-token decode (but
 * for attention.c's two exceptions: a non-finite V value, and the sign of
 * an exact zero in round-toward-minus-infinity). */
lb_status lb__attention(const lb__attn_job *j, int threads);

#endif
