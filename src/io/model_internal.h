/* The model view's insides, shared by the files that fill it in. */
#ifndef LB_IO_MODEL_INTERNAL_H
#define LB_IO_MODEL_INTERNAL_H

#include "io/arch_support.h"
#include "io/gguf.h"
#include "io/hf_quantized.h"
#include "io/json.h"
#include "io/llama2c.h"
#include "io/safetensors.h"
#include "util/file.h"

struct lb_model {
    lb_model_kind kind;
    lb_arch arch;
    lb__arch_notes notes;        /* what the forward pass would lack (arch_support.c) */
    size_t n_tensors;
    lb_tensor *tensors;
    char **owned_names;          /* names the model allocated (GGUF canonical names) */
    lb__gguf_file gguf;          /* LB_MODEL_GGUF */
    size_t n_shards;             /* LB_MODEL_SAFETENSORS / HF_DIR */
    lb__st_file *shards;
    lb__mapped l2c_map;          /* LB_MODEL_LLAMA2C */
    lb__l2c_model l2c;
    size_t *by_name, *by_file_name; /* tensor indices sorted by name and by file name (lookups) */
    size_t n_sources;            /* the files read: lb_model_save refuses to overwrite them */
    struct lb__file_id { unsigned long long dev, ino; } *sources;
    char *path;                  /* what lb_model_open was given (finds the files beside it: the tokenizer) */
    lb__hfq *hfq;                /* a quantized HF checkpoint's logical tensors (hf_quantized.c), or NULL */
};

/* Rotary layouts (model_save.c): the one llama.cpp runs architecture a in
 * (adjacent pairs for llama and mistral, half-split for the rest); the
 * heads whose q/k rows move when t is written in layout `to` (*heads = 0:
 * none; LB_ERR_PARSE when rows must move but the heads do not say how);
 * and the move itself (src and dst: rows x cols, distinct). */
lb_rope_layout lb__gguf_rope_layout(const lb_arch *a);
/* Maps a stored tensor's pages in one call before it is read whole (advice
 * only: without it the reads fault them in, a few pages a fault). */
void lb__tensor_prefetch(const lb_tensor *t);
lb_status lb__rotary_permute_heads(const lb_model *m, const lb_tensor *t, lb_rope_layout to, uint32_t *heads);
void lb__permute_rotary_rows(const float *src, float *dst, uint64_t rows, uint64_t cols, uint32_t heads,
                             int to_adjacent);
/* The metadata of a GGUF written from m: a GGUF input's keys (as_quantize:
 * all of them in order, as llama-quantize copies them, less file type,
 * quantization version and split keys, which the caller sets; else less
 * alignment and file type, plus the architecture keys lowbit can state
 * that it lacks), or for other inputs the architecture keys and the
 * tokenizer converted from tokenizer.json. reset (NULL-terminated, may
 * be NULL): more keys the caller sets again, so a GGUF input's copies are
 * left out (ggml's gguf_set_* moves a key it sets to the end). */
lb_status lb__gguf_model_metadata(const lb_model *m, lb__gguf_writer *w, int as_quantize, const char *const *reset);

/* Whether path is one of the files the model was read from. */
int lb__model_reads(const lb_model *m, const char *path);

/* Architecture from GGUF metadata ({arch}.block_count and friends). */
lb_status lb__arch_from_gguf(const lb__gguf_file *f, const char *what, lb_arch *a);
/* Architecture from a Hugging Face config.json. */
lb_status lb__arch_from_config(const lb__json *cfg, const char *what, lb_arch *a);
/* What the tensors themselves say (layers, dim, vocab, biases, q/k norms,
 * tied head); fills only fields still 0. */
void lb__arch_from_tensors(const lb_model *m, lb_arch *a);

/* config.json of a Hugging Face directory (model_save.c): the
 * architecture, torch_dtype and, when quant_json is not NULL, that JSON
 * value as "quantization_config". */
lb_status lb__hf_config_write(const lb_model *m, const char *path, const char *torch_dtype_name, const char *quant_json);

#endif
