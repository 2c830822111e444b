/* The tokenizer and generation files of a Hugging Face model directory:
 * copied from beside a Hugging Face input, synthesized from a GGUF's
 * tokenizer metadata (tokenizer.json, tokenizer_config.json,
 * special_tokens_map.json, generation_config.json). */
#ifndef LB_EXPORT_HF_TOKENIZER_H
#define LB_EXPORT_HF_TOKENIZER_H

#include "lowbit.h"

/* Writes the files into dir (an existing directory being built: the
 * caller renames it into place). model_path: where m was opened from
 * (NULL: the path lb_model_open was given).
 * LB_OK also when the input carries no tokenizer (nothing to write);
 * *written (may be NULL) counts the files written. */
lb_status lb__hf_tokenizer_write(const lb_model *m, const char *model_path, const char *dir, int *written);

#endif
