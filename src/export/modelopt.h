/* The ModelOpt "unified Hugging Face checkpoint" (quant_method "modelopt"),
 * the parts that do not need a whole quantized model: which quant_algo a
 * layer's weight spec and input quantization are, the tensors one
 * quantized layer becomes, and hf_quant_config.json's exclude_modules
 * summary. modelopt.c is the exporter built from them; the tests call
 * these directly on lb_quantize tensors.
 *
 * What the layouts follow (nvidia-modelopt 0.47, modelopt/torch/export/
 * quant_utils.py, unified_export_hf.py, qtensor/nvfp4_tensor.py and
 * mxfp8_tensor.py; checked against checkpoints export_hf_checkpoint wrote
 * for a tiny Llama in tests/interop/test_modelopt.py), per module <m>:
 *   FP8        <m>.weight F8_E4M3 [out,in]; <m>.weight_scale F32 [] (amax/448);
 *              <m>.input_scale F32 [] (input amax/448)
 *   FP8_PER_CHANNEL_PER_TOKEN  <m>.weight F8_E4M3; <m>.weight_scale F32 [out]
 *   NVFP4      <m>.weight U8 [out,in/2] (even element in the low nibble);
 *              <m>.weight_scale F8_E4M3 [out,in/16]; <m>.weight_scale_2 F32 []
 *              (multiplier: amax/(6*448), over the fused group);
 *              <m>.input_scale F32 [] (input amax/(6*448))
 *   W4A16_NVFP4  NVFP4 without input_scale
 *   MXFP8      <m>.weight F8_E4M3; <m>.weight_scale U8 [out,in/32] (E8M0)
 * Scalars have shape [] as ModelOpt writes them. */
#ifndef LB_EXPORT_MODELOPT_H
#define LB_EXPORT_MODELOPT_H

#include <stddef.h>
#include <stdint.h>

#include "export/exporter.h"
#include "lowbit.h"

typedef enum lb__mo_algo {
    LB_MO_FP8 = 0,
    LB_MO_FP8_PC_PT = 1,   /* FP8_PER_CHANNEL_PER_TOKEN */
    LB_MO_NVFP4 = 2,
    LB_MO_W4A16_NVFP4 = 3,
    LB_MO_MXFP8 = 4,
    LB_MO_ALGO_COUNT = 5
} lb__mo_algo;

/* "FP8", "FP8_PER_CHANNEL_PER_TOKEN", "NVFP4", "W4A16_NVFP4", "MXFP8". */
const char *lb__mo_algo_name(lb__mo_algo a);
/* The group_size ModelOpt records (16, 32), or 0 for none. */
int lb__mo_algo_group(lb__mo_algo a);
/* 1 when the algorithm carries a static input_scale (FP8, NVFP4). */
int lb__mo_algo_input_scale(lb__mo_algo a);

/* The algorithm of a weight (name: for the message; rows x cols) quantized
 * under w with inputs as act says; LB_ERR_UNSUPPORTED naming the tensor,
 * the format and what would work. */
lb_status lb__mo_classify(const char *name, const lb_qspec *w, const lb_qact *act, uint64_t rows, uint64_t cols,
                          lb__mo_algo *out);

/* The tensors of quantized module `module` (the weight's name without
 * ".weight"): weight and scales from qv, input_scale from input_amax
 * (> 0, finite) when the algorithm has one. */
lb_status lb__mo_emit_weight(const char *module, lb__mo_algo a, const lb_qtensor_view *qv, float input_amax,
                             lb__emit_fn emit, void *sink);

/* hf_quant_config.json's exclude_modules: the modules that stay 16-bit,
 * summarized with prefix wildcards exactly as ModelOpt's
 * _prefix_wildcard_summarize_exclude_modules does (a wildcard never
 * matches a quantized module), as a sorted JSON array of strings. */
lb_status lb__mo_exclude_json(const char *const *unquantized, size_t n_unquantized, const char *const *quantized,
                              size_t n_quantized, lb__jsonw *w);

#endif
