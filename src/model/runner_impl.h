/* The runner's private state, shared by its loading (runner_load.c) and
 * its forward pass (runner.c): one weight matrix as the runner holds it,
 * a layer, the runner. Nothing outside src/model/runner*.c includes it. */
#ifndef LB_MODEL_RUNNER_IMPL_H
#define LB_MODEL_RUNNER_IMPL_H

#include "kernel/matmul.h"
#include "kernel/qmat.h"
#include "kernel/w8a8.h"
#include "model/attention.h"
#include "model/ggml_act.h"
#include "model/kvcache.h"
#include "model/runner_internal.h"

enum { W_Q, W_K, W_V, W_O, W_GATE, W_UP, W_DOWN, W_COUNT };

/* One weight matrix as the runner holds it: fp32 panels (as stored, or
 * fake-quantized) or packed codes, optionally with W8A8 activations. */
typedef struct linear {
    size_t out, in;
    int packed;          /* 1: q, else f */
    lb__packed f;
    lb__qmat q;
    int has_a8;          /* W8A8 on q */
    int act8;            /* options.decode_act int8 on q (its kernels take it: qdot8.h) */
    lb_format a8_fmt;    /* its activation element: int8 or fp8_e4m3 */
    lb__w8a8 a8;
    lb_qact sim;         /* simulated activation quantization (act_sim.h); mode NONE: none */
    float sim_amax;      /* STATIC: its static input scale; LOCAL: its calibrated input range */
    float act_absmax;    /* calibration: largest input magnitude seen (finished calls) */
    float calib_absmax;  /* the same within the current lb_runner_calibrate call; -1: a non-finite input */
    float act_scale;     /* static activation scale; 0: per token */
    int has_out_scale;   /* a GGUF's per-tensor "<weight>.scale" (NVFP4's second-level scale): */
    float out_scale;     /* the product's outputs are multiplied by it, as llama.cpp does */
    lb__ggml_act ggml_act; /* options.ggml_act: inputs rounded as llama.cpp would (ggml_act.h); F32: not */
    size_t n_outliers;   /* 16-bit outlier columns (lb_qmodel_set_outliers); 0: none */
    uint32_t *outliers;  /* [n_outliers] their input features, ascending */
    lb__packed out_w;    /* [out][n_outliers] their 16-bit values as fp32 panels */
} linear;

typedef struct layer {
    linear w[W_COUNT];
    char name[W_COUNT][80];          /* canonical weight names, for the hook */
    float *attn_norm, *ffn_norm;     /* dim */
    float *q_bias, *k_bias, *v_bias; /* Qwen2; NULL otherwise */
    float *q_norm, *k_norm;          /* Qwen3: head_dim; NULL otherwise */
    int loaded;                      /* 0: not loaded (a layerwise runner's layer out of its turn) */
} layer;

struct lb_runner {
    lb_arch a;
    size_t dim, hidden, n_heads, n_kv_heads, head_dim, q_dim, kv_dim, vocab, n_layers;
    int threads;
    float *embed;      /* [vocab][dim] fp32; NULL when packed (embed_q) or tied (rows come from head) */
    lb__qmat embed_q;  /* an untied embedding stored packed */
    linear head;       /* [vocab][dim] */
    char head_name[32];
    float *final_norm;
    layer *layers;
    lb__kvcache kv;    /* layers x max_ctx x kv heads, in options.kv's format */
    size_t max_ctx, pos;
    lb__rope rope;
    float *scratch;    /* attention scores: n_heads * max_ctx */
    lb_activation_hook hook;
    void *hook_ctx;
    lb__kv_hook kv_hook;
    void *kv_hook_ctx;
    lb_format act;          /* W8A8 activations, or LB_FMT_FP32 */
    int calibrating;        /* lb_runner_calibrate: fp32 activations, maxima recorded */
    lb_runner_memory mem;
    uint64_t act_saturated, act_values; /* W8A8 inputs clipped to the code range, of those quantized */
    lb_runner_options opts; /* as built (progress dropped): lb__runner_reload_layer loads alike */
    int calibration;        /* as built: lb__runner_build_ex's mode */
    int ends_unloaded;      /* lb__runner_unload_ends: no embedding or head */
};

#endif
