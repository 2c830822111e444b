/* The tokenizer files' insides: the copy (hf_tokenizer.c), the synthesis
 * from a GGUF's metadata or a llama2.c tokenizer file (hf_tokenizer_gguf.c,
 * with hf_tokenizer_spm.c for SentencePiece-style vocabularies) and the
 * other direction (hf_tokenizer_to_gguf.c). */
#ifndef LB_EXPORT_HF_TOKENIZER_INTERNAL_H
#define LB_EXPORT_HF_TOKENIZER_INTERNAL_H

#include <stddef.h>

#include "export/exporter.h"
#include "io/gguf.h"
#include "io/json.h"
#include "lowbit.h"
#include "model/tokenizer_internal.h"

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

/* Synthesizes the same four files from a loaded tokenizer: a llama2.c
 * tokenizer file's (f NULL) or a GGUF's (f: the file, for its chat template
 * and context length). */
lb_status lb__hf_tokenizer_from_tok(const lb_tokenizer *t, const lb__gguf_file *f, const char *what, const char *dir,
                                    int *written);

/* A SentencePiece-style vocabulary as tokenizer.json says it
 * (hf_tokenizer_spm.c): each token's name (U+2581 for spaces) and the
 * merges in HF's rank order. lb__hf_spm_prepare refuses (LB_ERR_UNSUPPORTED,
 * naming why) what HF would tokenize differently. */
typedef struct lb__hf_spm {
    char **names;            /* by id; NULL: an id without a token */
    const lb__pair **merges; /* into t->merges, by rank */
    size_t n_merges;
} lb__hf_spm;
lb_status lb__hf_spm_prepare(const lb_tokenizer *t, const char *what, lb__hf_spm *h);
void lb__hf_spm_free(lb__hf_spm *h, uint32_t n);
/* The legacy Llama normalizer and decoder (prefix: the dummy prefix). */
void lb__hf_spm_normalizer(lb__jsonw *w, int prefix);
void lb__hf_spm_decoder(lb__jsonw *w, int prefix);

/* Adds tokenizer.ggml.* keys (and tokenizer.chat_template) from the
 * tokenizer.json / tokenizer_config.json / config.json in src_dir, with the
 * values llama.cpp's convert_hf_to_gguf.py writes, so that llama.cpp
 * tokenizes as `tokenizers` does (hf_tokenizer_to_gguf.c). LB_OK adding
 * nothing when there is no tokenizer.json; LB_ERR_UNSUPPORTED, naming why
 * and writing nothing, for a tokenizer llama.cpp would run differently. */
lb_status lb__hf_tokenizer_to_gguf(const char *src_dir, lb__gguf_writer *w);

/* What the directory says beside the vocabulary, read as llama.cpp's
 * converter (gguf-py SpecialVocab) reads it (hf_tokenizer_to_gguf_meta.c).
 * special: bos, eos, unk, sep, pad, mask ids (-1: none); add: whether BOS,
 * EOS, SEP are added (-1: unsaid). */
#define LB__HF_N_SPECIAL 6
typedef struct lb__hf_meta {
    lb__json *tok, *cfg, *config; /* tokenizer.json, tokenizer_config.json, config.json (NULL: absent) */
    uint32_t n_vocab;             /* ids to write: config.json vocab_size when above the tokenizer's */
    int32_t special[LB__HF_N_SPECIAL];
    int add[3];
} lb__hf_meta;
/* t: the tokenizer read from dir's tokenizer.json; what names it. */
lb_status lb__hf_meta_read(const char *dir, const lb_tokenizer *t, const char *what, lb__hf_meta *m);
void lb__hf_meta_free(lb__hf_meta *m);
/* Sets types[id] of every added token: 3 (control) when special or (looks:
 * as the converter's byte-level path judges) when it looks special to
 * convert_hf_to_gguf.py (<|...|>), else 4 (user-defined). */
void lb__hf_meta_added_types(const lb__hf_meta *m, int looks, int32_t *types);
/* The special ids, add_bos/add_eos (always) and add_sep (when said) and
 * the chat template (tokenizer_config.json's, else chat_template.jinja). */
lb_status lb__hf_meta_keys(const lb__hf_meta *m, const char *dir, lb__gguf_writer *w);

#endif
