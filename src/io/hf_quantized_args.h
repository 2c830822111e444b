/* The quantization args of a compressed-tensors config group (weights,
 * input_activations, kv_cache_scheme) and what an engine does with a
 * module's inputs under them or under a ModelOpt quant_algo: the config
 * side of reading a quantized checkpoint (hf_quantized.c plans the file
 * tensors from it). */
#ifndef LOWBIT_IO_HF_QUANTIZED_ARGS_H
#define LOWBIT_IO_HF_QUANTIZED_ARGS_H

#include "io/hf_quantized.h"
#include "io/json_internal.h"

typedef enum lb__hfq_strat { S_TENSOR, S_CHANNEL, S_GROUP, S_TENSOR_GROUP, S_BLOCK, S_TOKEN } lb__hfq_strat; /* S_TOKEN: activations only */

typedef struct lb__hfq_qargs {
    int bits;
    int is_float;            /* type "float" (else "int") */
    int symmetric;
    lb__hfq_strat strategy;
    uint64_t group;          /* S_GROUP / S_TENSOR_GROUP */
    uint64_t bh, bw;         /* S_BLOCK */
} lb__hfq_qargs;

lb_status lb__hfq_parse_args(const lb__json *a, const char *what, lb__hfq_qargs *out);
/* One line for lb_quant_group.weights / .input: "int4 group 128 asymmetric". */
void lb__hfq_describe(const lb__hfq_qargs *a, int has, char *buf, size_t n);

/* The input quantization a compressed-tensors group (input_activations,
 * output_activations) or a ModelOpt quant_algo implies. What lowbit cannot
 * simulate is not an error (the weights still read): the reason goes to
 * why[0..n) (empty when everything is simulated), for act->unsupported. */
void lb__hfq_ct_act(const lb__json *ia, const lb__json *oa, const char *what, lb__hfq_act *act, char *why, size_t n);
void lb__hfq_modelopt_act(const char *algo, uint64_t gsize, lb__hfq_act *act, char *why, size_t n);

/* 1 when a target of `list` (an array of strings, or NULL) matches module
 * as compressed-tensors' match_name does: "re:X" is Python's re.match of X,
 * a class name ("Linear") matches every quantized module, anything else
 * the exact name. A pattern that does not compile sets *st (naming `what`). */
int lb__hfq_list_matches(const lb__json *list, const char *module, const char *what, lb_status *st);
/* LB_OK when l is absent, null or an array of at most LB__HFQ_MAX_TARGETS
 * non-empty strings; else LB_ERR_PARSE naming `what`. */
lb_status lb__hfq_check_string_list(const lb__json *l, const char *what);

#endif
