/* Which ggml type each tensor of a GGUF gets for a llama.cpp file type
 * ("Q4_K_M", ...): llama-quantize's choice, rule for rule, so that
 * `lowbit quantize --format gguf --type T` writes the tensors llama.cpp's
 * own tool would (the pinned llama.cpp's src/llama-quant.cpp is the
 * reference; tests/llamacpp/test_gguf_mix.py compares the two).
 *
 * Everything here speaks llama.cpp's terms: GGUF tensor names and ggml
 * type ids (not lb_dtype), because the rules are written over those and
 * because a type may be chosen that lowbit cannot write yet; the writer
 * maps ids to lb_dtype and refuses what it cannot write. */
#ifndef LB_EXPORT_GGUF_MIX_H
#define LB_EXPORT_GGUF_MIX_H

#include <stddef.h>
#include <stdint.h>

#include "lowbit.h"

/* ggml type ids (ggml.h's enum ggml_type, as GGUF stores them) the mixes
 * name. */
enum {
    LB_GGML_F32 = 0, LB_GGML_F16 = 1, LB_GGML_Q4_0 = 2, LB_GGML_Q4_1 = 3, LB_GGML_Q5_0 = 6, LB_GGML_Q5_1 = 7,
    LB_GGML_Q8_0 = 8, LB_GGML_Q2_K = 10, LB_GGML_Q3_K = 11, LB_GGML_Q4_K = 12, LB_GGML_Q5_K = 13, LB_GGML_Q6_K = 14,
    LB_GGML_IQ4_NL = 20, LB_GGML_IQ4_XS = 23, LB_GGML_BF16 = 30, LB_GGML_MXFP4 = 39, LB_GGML_NVFP4 = 40
};

/* llama.h's llama_ftype values (general.file_type) of the mixes lowbit
 * offers; NVFP4 (39) is in llama.h's enum, but llama-quantize has no
 * target for it: lowbit's own. */
typedef enum lb__ftype {
    LB_FTYPE_ALL_F32 = 0, LB_FTYPE_F16 = 1, LB_FTYPE_Q4_0 = 2, LB_FTYPE_Q4_1 = 3, LB_FTYPE_Q8_0 = 7,
    LB_FTYPE_Q5_0 = 8, LB_FTYPE_Q5_1 = 9, LB_FTYPE_Q2_K = 10, LB_FTYPE_Q3_K_S = 11, LB_FTYPE_Q3_K_M = 12,
    LB_FTYPE_Q3_K_L = 13, LB_FTYPE_Q4_K_S = 14, LB_FTYPE_Q4_K_M = 15, LB_FTYPE_Q5_K_S = 16, LB_FTYPE_Q5_K_M = 17,
    LB_FTYPE_Q6_K = 18, LB_FTYPE_IQ4_NL = 25, LB_FTYPE_IQ4_XS = 30, LB_FTYPE_BF16 = 32, LB_FTYPE_MXFP4_MOE = 38,
    LB_FTYPE_NVFP4 = 39
} lb__ftype;

typedef struct lb__ftype_info {
    const char *name;   /* as llama-quantize spells it ("Q4_K_M") */
    lb__ftype ftype;
    int default_type;   /* the ggml type most tensors get */
} lb__ftype_info;

/* By name, case-insensitive, llama-quantize's aliases included (Q3_K is
 * Q3_K_M, Q4_K is Q4_K_M, Q5_K is Q5_K_M); NULL if unknown. */
const lb__ftype_info *lb__ftype_by_name(const char *name);
/* The k-th row of the table (k = 0, 1, ...; NULL past the end), aliases
 * excluded: for --help and error messages. */
const lb__ftype_info *lb__ftype_at(size_t k);

/* ggml's type names ("q4_K", "iq4_nl", "bf16"): name -> id, case-
 * insensitive (-1 if not one the mixes know), id -> name ("?" if not). */
int lb__ggml_type_by_name(const char *name);
const char *lb__ggml_type_name(int type);
/* Elements per block of a ggml type the mixes know (1 for f32/f16/bf16). */
unsigned lb__ggml_type_block(int type);

/* One tensor, as the GGUF holds it. */
typedef struct lb__mix_tensor {
    const char *name; /* the GGUF name ("blk.3.ffn_down.weight") */
    int n_dims;
    uint64_t ne[4];   /* ggml order: ne[0] is the row length; unused = 1 */
    int type;         /* the source's ggml type (kept by tensors not quantized) */
} lb__mix_tensor;

/* What the mixes read of the model (llama.cpp's hparams). */
typedef struct lb__mix_model {
    const char *arch; /* general.architecture ("llama", "falcon", ...) */
    uint32_t n_layer, n_head, n_head_kv, n_expert;
} lb__mix_model;

/* --tensor-type PATTERN=TYPE: the first pattern that matches a name
 * anywhere in it (llama.cpp's std::regex_search over ECMAScript syntax;
 * here POSIX extended regexes with \d \w \s and their negations added,
 * which covers what its users write). Patterns are lowercased, as
 * llama-quantize does. */
typedef struct lb__mix_override {
    const char *pattern;
    int type;
} lb__mix_override;

typedef struct lb__mix_options {
    lb__ftype ftype;
    int pure;                   /* --pure: every quantized tensor the default type */
    int output_type;            /* --output-tensor-type, or -1 */
    int token_embd_type;        /* --token-embedding-type, or -1 */
    int leave_output;           /* --leave-output-tensor: output.weight keeps its type */
    int has_imatrix;            /* an importance matrix is given (llama-quantize's --imatrix): some rules differ */
    const lb__mix_override *overrides;
    size_t n_overrides;
} lb__mix_options;

/* Why a tensor got its type, for --dry-run. */
typedef enum lb__mix_reason {
    LB_MIX_KEPT = 0,      /* not quantized (1-D, a norm, ...): the source's type */
    LB_MIX_DEFAULT = 1,   /* the file type's default */
    LB_MIX_RULE = 2,      /* a rule of the mix (output, attn_v in some layers, ...) */
    LB_MIX_OVERRIDE = 3,  /* --tensor-type, --output-tensor-type, --token-embedding-type */
    LB_MIX_FALLBACK = 4   /* its rows do not fit the chosen type's block: llama.cpp's fallback */
} lb__mix_reason;

/* The order llama-quantize writes tensors in (and the order its per-layer
 * counters run over): by layer number ("blk.N.", -1 for the rest), then by
 * name (byte order). order[k] = index into t of the k-th tensor. */
lb_status lb__gguf_order(const lb__mix_tensor *t, size_t n, size_t *order);

/* The ggml type of every tensor (types[i] for t[i]; t in any order) and
 * why (reasons may be NULL). LB_ERR_ARG for an override pattern that does
 * not compile, LB_ERR_PARSE for a "blk.N." tensor whose N is not below the
 * model's layer count in a mixture of experts (llama.cpp refuses it too).
 * A type whose block a row does not fit falls back as llama.cpp does; where
 * llama.cpp has no fallback (NVFP4, which it cannot write) lowbit takes
 * Q8_0, or F16 when 32 does not divide the row either. */
lb_status lb__gguf_mix(const lb__mix_model *m, const lb__mix_tensor *t, size_t n, const lb__mix_options *o,
                       int *types, lb__mix_reason *reasons);

#endif
