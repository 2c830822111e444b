/* Reading quantized Hugging Face checkpoints: compressed-tensors
 * (llm-compressor, vLLM's format) and NVIDIA ModelOpt directories.
 *
 * A quantized module <m> is stored as several tensors (codes in
 * <m>.weight or <m>.weight_packed, <m>.weight_scale, maybe a zero point,
 * a global scale, <m>.weight_shape). The model view shows ONE tensor,
 * <m>.weight, of the original [out, in] shape and dtype LB_DT_QUANTIZED,
 * whose lb_tensor_to_f32 dequantizes it as the format's own package does,
 * bit for bit:
 *   compressed-tensors  (q - zp) * s computed in the scale's dtype and
 *                       returned in it (bf16 scales give bf16 values); NVFP4
 *                       x * fp32(s / global) rounded to bf16 (its unpacking
 *                       dtype); MX scales 2^(e-127) in bf16. The global scale
 *                       is a divisor.
 *   ModelOpt            fp32: x * s, NVFP4 x * fp32(s * weight_scale_2) (a
 *                       multiplier), MXFP8 x * 2^(e-127).
 * The component tensors and the engines' activation and KV scales are
 * taken out of the tensor list (a writer must not copy them beside the
 * weight it writes anew); lb_model_quantization counts and describes them.
 * Every shape, dtype and group size is checked against the config before
 * anything is read: LB_ERR_PARSE naming the tensor, what was expected and
 * what was found. */
#ifndef LB_IO_HF_QUANTIZED_H
#define LB_IO_HF_QUANTIZED_H

#include "io/json.h"
#include "lowbit.h"

/* Bounds on what a config may ask for (a hostile config.json must not make
 * lowbit loop or allocate without end). */
#define LB__HFQ_MAX_GROUPS 256      /* config_groups entries */
#define LB__HFQ_MAX_TARGETS 256     /* targets or ignore entries of one list */

typedef struct lb__hfq lb__hfq;

/* If config.json (cfg, read from dir) declares a quantization_config, or dir
 * holds hf_quant_config.json, replaces m's quantized modules by logical
 * tensors and removes the components from m->tensors. Leaves m untouched
 * for a plain checkpoint. `what` names the config in messages. */
lb_status lb__hfq_apply(lb_model *m, const lb__json *cfg, const char *dir, const char *what);
void lb__hfq_free(lb__hfq *q);

/* lb_tensor_to_f32 and lb_tensor_release of an LB_DT_QUANTIZED tensor. */
lb_status lb__hfq_to_f32(const lb_tensor *t, float *dst);
void lb__hfq_release(const lb_tensor *t);

/* ----- shared by hf_quantized.c (planning), hf_quantized_check.c and hf_quantized_decode.c ----- */

typedef enum lb__hfq_elem {
    LB__HFQ_E_FP8,     /* F8_E4M3 codes [rows, cols] */
    LB__HFQ_E_INT8,    /* I8 codes [rows, cols] */
    LB__HFQ_E_PACKED,  /* I32 words [rows, ceil(cols*bits/32)]: dense little-endian bit stream per row, code + 2^(bits-1) */
    LB__HFQ_E_FP4      /* U8 [rows, cols/2]: E2M1 nibbles, the even element in the low nibble */
} lb__hfq_elem;

typedef enum lb__hfq_math {
    LB__HFQ_M_CT,       /* compressed-tensors: arithmetic and result in the scale's dtype */
    LB__HFQ_M_CT_FP4G,  /* compressed-tensors NVFP4: bf16(x * fp32(s / global)) */
    LB__HFQ_M_F32       /* ModelOpt: fp32, s * global when there is one */
} lb__hfq_math;

/* How the engine quantizes a quantized module's input, as the config and
 * the module's tensors say (compressed-tensors input_activations, ModelOpt's
 * quant_algo). weights/qmodel_checkpoint.c turns it into an lb_qact. */
typedef enum lb__hfq_amode {
    LB__HFQ_A_NONE = 0,     /* 16-bit inputs */
    LB__HFQ_A_DYNAMIC = 1,  /* scales from each input: per token, or per group */
    LB__HFQ_A_STATIC = 2,   /* one per-tensor scale, the file's input_scale (x_hat = q * s) */
    LB__HFQ_A_LOCAL = 3     /* NVFP4 W4A4: block scales at run time under a static tensor scale */
} lb__hfq_amode;

typedef struct lb__hfq_act {
    lb__hfq_amode mode;
    int bits, is_float;
    int per_token;          /* DYNAMIC: one scale per token (else per group of `group`) */
    uint64_t group;         /* DYNAMIC per group, LOCAL: values per block */
    int e8m0;               /* MX (power-of-two scales, "scale_dtype": uint8 or ModelOpt MXFP8) */
    lb_tensor scale;        /* STATIC: input_scale; LOCAL: input_global_scale (compressed-tensors, a divisor)
                               or input_scale (ModelOpt, a multiplier) */
    int has_scale, scale_divisor;
    const char *unsupported;/* what lowbit cannot simulate of it (a sentence), or NULL */
    int quantized_inputs;   /* the config quantizes the inputs (even in a way lowbit cannot simulate): the
                               weights meet a low-precision GEMM, not a weight-only kernel */
} lb__hfq_act;

typedef struct lb__hfq_tensor {
    lb__hfq_elem elem;
    lb__hfq_math math;
    int bits;                /* code width (PACKED: 1..8) */
    uint64_t rows, cols;     /* the logical [out, in] shape */
    uint64_t brows, bcols;   /* elements sharing one scale: tensor rows x cols, channel 1 x cols, group 1 x g, block */
    int e8m0;                /* the scale is U8 biased exponents (MX) */
    lb_dtype scale_dtype;    /* M_CT: the dtype the package computes in (bf16 for MX) */
    /* copies of the file's tensors (the model's table no longer lists them) */
    lb_tensor codes, scale, zero_point, global;
    int has_zp, has_global;
    int zp_packed;           /* the zero point is a PACKED bit stream along the output rows */
    lb__hfq_act act;         /* the engine's quantization of the module's input */
} lb__hfq_tensor;

/* The KV cache: compressed-tensors kv_cache_scheme, ModelOpt
 * kv_cache_quant_algo; per layer the file's k_scale and v_scale
 * (model.layers.N.self_attn.k_scale, ModelOpt ...self_attn.k_proj.k_scale).
 * Lives as long as the model. */
typedef struct lb__hfq_kv {
    int fp8;                 /* FP8 E4M3 with static per-layer scales */
    const char *unsupported; /* a KV format lowbit cannot simulate (a sentence), or NULL */
    uint32_t n_layers;
    lb_tensor *k, *v;        /* [n_layers]; .name NULL where the file has none */
} lb__hfq_kv;

/* The KV cache of m's checkpoint (NULL: not a quantized checkpoint). */
const lb__hfq_kv *lb__hfq_kv_of(const lb_model *m);
/* The plan of an LB_DT_QUANTIZED tensor of a model (NULL for any other). */
const lb__hfq_tensor *lb__hfq_tensor_of(const lb_tensor *t);

/* Element i of a dense little-endian bit stream of `bits`-bit values held
 * in 32-bit words; `stride` bytes between consecutive words (4: a row of
 * weight_packed; 4 x groups: a column of weight_zero_point). */
uint32_t lb__hfq_stream_at(const uint8_t *words, size_t stride, uint64_t i, int bits);

/* Checks a planned tensor's components against its shape (all of them:
 * dtypes, shapes, sizes); LB_ERR_PARSE naming the module. */
lb_status lb__hfq_check(const lb__hfq_tensor *q, const char *module);

#endif
