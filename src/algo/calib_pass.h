/* The calibration pass that outlier methods (SmoothQuant, AWQ) and GPTQ
 * build on: calibration windows run through the model one decoder layer
 * at a time, every window's hidden states carried from layer to layer, so
 * that at layer i the method sees statistics of that layer's four linear
 * inputs, may change the layer in the quantized model (fold scales,
 * replace or quantize weights), and the windows then continue through the
 * layer as changed. Memory: the hidden states of all windows (n_windows x
 * window x dim floats: 151 MB for SmolLM2 at 128 x 512) plus one layer's
 * weights (the runner loads each layer in its turn and drops it after),
 * statistics and row samples -- never a layer's full activations (but see
 * SUBLAYERS mode's carry).
 *
 * Which model the inputs of layer i come from (lb__calib_mode):
 *   SOURCE     layers < i as the method left them, unquantized (the folded
 *              and clipped source values): AutoAWQ's and SmoothQuant's
 *              calibration (scaling is an equivalence, so these are the
 *              original model's inputs up to fp rounding and clipping);
 *   QUANTIZED  layers < i as the quantized model holds them (GPTQ's
 *              sequential mode: each layer corrects the error of those
 *              before it).
 * In both, layer i's own statistics (all four sites, and K/V) are taken
 * with layer i's source values: o_proj's input comes from the float
 * q/k/v of layer i, as llm-compressor's sequential pipeline and GPTQ's
 * reference code (without --true-sequential) take them. After fn, the
 * windows continue through layer i as q then holds it (QUANTIZED: as
 * quantized, e.g. with the tensors GPTQ set).
 *   SUBLAYERS  QUANTIZED, and inside layer i too: the four sites one after
 *              another, site s's statistics taken with the weights of the
 *              sites before it as q holds them, and fn called after each
 *              site (lb__layer_stats.partial) -- GPTQ's reference code
 *              with --true-sequential: o_proj is rounded against the
 *              inputs the rounded q/k/v make, down_proj against those of
 *              the rounded gate/up. Every window goes through each stage
 *              of the layer once (lb__runner_layer_stage), so the layer's
 *              products are computed once, not twice as in QUANTIZED mode;
 *              the price is a carry buffer of every window's attention
 *              output, then MLP activation (n_windows x window x
 *              max(q_dim, hidden) floats: 403 MB for SmolLM2 at 128 x 512).
 *              K/V maxima come from the rounded k/v projections.
 * Activations and the KV cache stay fp32 in both (what a quantizer of
 * layer i must see is its input before its own activation quantization).
 *
 * Cost: every window runs through every layer once to collect, and once
 * more after fn (or in QUANTIZED mode) to carry the hidden states on
 * through the changed layer; SOURCE mode without fn runs once, and
 * SUBLAYERS mode once in stages. */
#ifndef LB_ALGO_CALIB_PASS_H
#define LB_ALGO_CALIB_PASS_H

#include <stddef.h>
#include <stdint.h>

#include "lowbit.h"

/* The linear inputs of a Llama-family decoder layer, in the order the
 * forward pass meets them. */
typedef enum lb__calib_site {
    LB__SITE_ATTN_IN = 0, /* input_layernorm's output: q_proj, k_proj, v_proj */
    LB__SITE_O_IN = 1,    /* the attention output: o_proj */
    LB__SITE_MLP_IN = 2,  /* post_attention_layernorm's output: gate_proj, up_proj */
    LB__SITE_DOWN_IN = 3, /* silu(gate) * up: down_proj */
    LB__SITE_COUNT = 4
} lb__calib_site;

typedef enum lb__calib_mode { LB__CALIB_SOURCE = 0, LB__CALIB_QUANTIZED = 1, LB__CALIB_SUBLAYERS = 2 } lb__calib_mode;

/* One linear input of one layer over all calibration tokens. */
typedef struct lb__site_stats {
    size_t cols;          /* input features */
    uint64_t rows;        /* tokens seen (n_windows x window) */
    float *absmax;        /* [cols] max |x_j| */
    float *mean_abs;      /* [cols] mean |x_j| (summed in double) */
    float *mean_sq;       /* [cols] mean x_j^2 (summed in double) */
    float *sample;        /* [n_sample][cols] rows of X: the same token positions at every site and
                             layer, for output-error searches. Of the T = n_windows x window positions
                             (window w's token t is position w * window + t), n = min(sample_rows, T)
                             positions, lb__calib_sample_positions(n, T): one drawn in each of n equal
                             slices (every row, in order, when n = T) */
    size_t n_sample;
    double *hessian;      /* [cols][cols] sum over all rows of x x^T (options.hessian), else NULL:
                             each window's X^T X one fp32 product on the matmul kernels (within
                             window x 2^-24 x sum |x_i x_j| of exact), the windows summed in double;
                             exactly symmetric */
    size_t weight[3];     /* qmodel indices of the weights that read this input, in model order */
    size_t n_weights;     /* (q, k, v) | (o) | (gate, up) | (down) */
} lb__site_stats;

typedef struct lb__layer_stats {
    size_t layer;
    lb__site_stats site[LB__SITE_COUNT];
    size_t n_kv_heads, head_dim;
    float *k_absmax;      /* [n_kv_heads] max |k| per KV head (after the rotary embedding, as cached) */
    float *v_absmax;      /* [n_kv_heads] max |v| per KV head */
    /* qmodel indices of the norms in front of ATTN_IN and MLP_IN (input_layernorm,
     * post_attention_layernorm): where SmoothQuant and AWQ fold 1/s */
    size_t attn_norm, ffn_norm;
    int partial;          /* 0: every site's statistics are taken; 1 (SUBLAYERS mode): only site[current]'s
                             are (the others' are stale or zero), and fn changes that site's weights only */
    int current;
} lb__layer_stats;

/* Called once per layer, in order, after the layer's statistics are
 * taken and before the windows continue through it; whatever it changes
 * in q (lb_qmodel_replace, _set_spec, _set_qtensor ...) in this layer is
 * what the next layers' inputs are computed with (a change to a later
 * layer is seen when that layer's turn comes; one to an earlier layer is
 * not seen by this pass). The statistics' buffers are reused for the next
 * layer: copy what must outlive the call. A status other than LB_OK stops
 * the pass (and is returned). */
typedef lb_status (*lb__calib_layer_fn)(void *ctx, lb_qmodel *q, const lb__layer_stats *s);

typedef struct lb__calib_pass_options {
    lb__calib_mode mode;
    size_t sample_rows;   /* rows of X kept per site (0: none) */
    int hessian;          /* 1: accumulate each site's X^T X */
    int keep_outputs;     /* SOURCE mode only: 1 when fn changes a layer only by transforms that leave its
                             outputs as they were in exact arithmetic (SmoothQuant's folds): the windows
                             then run through each layer once, in place, and its outputs before fn go on to
                             the next layer (the original model's, as SmoothQuant's reference collects its
                             statistics), instead of a second run through the changed layer */
    int threads;          /* 0: one per CPU */
    lb_progress_fn progress; /* optional: after each layer (done of n_layers) */
    void *progress_ctx;
} lb__calib_pass_options;

/* Runs n_windows windows of `window` tokens each (windows: n_windows x
 * window ids, each window from position 0) through q's model layer by
 * layer, calling fn (may be NULL: the pass then only checks that every
 * activation is finite) at every layer. A non-finite activation is
 * LB_ERR_NAN naming the layer and input. o NULL: SOURCE mode, no sample
 * rows, no Hessians. Llama-family models that lb_runner_supports. */
lb_status lb__calib_pass(lb_qmodel *q, const int32_t *windows, size_t n_windows, size_t window,
                         const lb__calib_pass_options *o, lb__calib_layer_fn fn, void *ctx);

/* Deterministic calibration windows from a token stream (the tokenized
 * calibration text): `seqs` windows of `len` tokens whose start positions
 * are drawn without replacement from the S = n / len non-overlapping
 * window slots of the stream (slot s: tokens s*len .. s*len + len - 1;
 * the tail past the last whole slot is never used): a partial
 * Fisher-Yates shuffle of 0 .. S-1 driven by splitmix64 from the fixed
 * seed 0x6c6f776269742121 ("lowbit!!"), each index drawn uniformly by
 * rejection, the first min(seqs, S) kept and sorted, so the windows come
 * in text order and the same text gives the same windows on every
 * machine. Every slot, in order, when seqs >= S (*n_out says how many;
 * LB_ERR_ARG when not even one fits). With bos >= 0 each window's first
 * token is replaced by bos. *out: n_out x len ids, the caller frees it. */
lb_status lb__calib_windows(const int32_t *tokens, size_t n, size_t seqs, size_t len, int32_t bos, int32_t **out,
                            size_t *n_out);

/* The rows sampled for the output-error searches: pos[k] for k < n (n <= T,
 * the token positions of the calibration stream), one drawn uniformly from
 * each slice [floor(k T / n), floor((k + 1) T / n)) by splitmix64 from a
 * fixed seed (0x6c6f776269742122, the windows' plus one), so increasing,
 * distinct, every row when n = T, and the same everywhere. Jittered, not
 * the slices' centres: n evenly spaced rows of windows whose length is a
 * multiple of the spacing fall on the same few positions of every window
 * (at 128 x 512 tokens and 4096 rows: 8, 24, ..., 504, never a window's
 * first 8); AWQ chose its scales by the error on those rows alone, and
 * SmolLM2's W4A16:g64 came out at KLD 0.257 instead of 0.183 (0.177 with
 * 4097 centres, which drift through the window). */
void lb__calib_sample_positions(uint64_t *pos, size_t n, uint64_t total);

#endif
