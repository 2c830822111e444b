/* The tokenizer files' insides: the copy (hf_tokenizer.c) and the
 * synthesis from GGUF metadata (hf_tokenizer_gguf.c). */
#ifndef LB_EXPORT_HF_TOKENIZER_INTERNAL_H
#define LB_EXPORT_HF_TOKENIZER_INTERNAL_H

#include <stddef.h>

#include "io/gguf.h"
#include "lowbit.h"

/* The files a Hugging Face directory may carry for its tokenizer and
 * generation settings (an output directory lists them as its names). */
#define LB_HF_TOKENIZER_FILES 8
#define LB_HF_TOKENIZER_NAMES "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", \
    "generation_config.json", "tokenizer.model", "vocab.json", "merges.txt", "chat_template.jinja"
extern const char *const lb__hf_tokenizer_files[LB_HF_TOKENIZER_FILES];

/* The largest tokenizer file copied (Qwen's tokenizer.json is 11 MB; a
 * 256k-token Gemma vocabulary is near 35 MB). */
#define LB_HF_TOKENIZER_MAX_BYTES ((size_t)256 << 20)

/* Writes text as dir/name (through a temporary, renamed into place). */
lb_status lb__hf_write_file(const char *dir, const char *name, const char *text, size_t len);

/* Synthesizes tokenizer.json, tokenizer_config.json, special_tokens_map.json
 * and generation_config.json from a GGUF's tokenizer.ggml.* keys into dir;
 * LB_OK writing nothing when the file has no tokenizer. what names the
 * input; *written counts the files. */
lb_status lb__hf_tokenizer_from_gguf(const lb__gguf_file *f, const char *what, const char *dir, int *written);

#endif
