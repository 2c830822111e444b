/* llama2.c checkpoints (the legacy "v0" layout of Karpathy's run.c) and
 * their tokenizer files. */
#ifndef LB_IO_LLAMA2C_H
#define LB_IO_LLAMA2C_H

#include <stddef.h>
#include <stdint.h>

#include "lowbit.h"

/* The file's tensors, per layer, under canonical names, pointing into buf.
 * names holds the strings the tensors' name fields point to. */
typedef struct lb__l2c_model {
    lb_arch arch;
    int shared_classifier; /* vocab_size was positive in the header: the output head is the embedding */
    size_t n_tensors;
    lb_tensor *tensors;
    char *names;
} lb__l2c_model;

/* Parses a checkpoint held in buf (the whole file). `what` names it in
 * messages. Every header field is bounded and the file size must equal the
 * layout's exactly (with or without a separate classifier). */
lb_status lb__l2c_parse(const uint8_t *buf, size_t len, const char *what, lb__l2c_model *out);
void lb__l2c_free(lb__l2c_model *m);

/* A tokenizer .bin: int32 max_token_length, then per token a float32
 * score, an int32 length and that many bytes. */
typedef struct lb__l2c_vocab {
    uint32_t n, max_token_length;
    float *scores;
    char **tokens;     /* NUL-terminated copies */
    uint32_t *lengths; /* bytes, not counting the NUL */
} lb__l2c_vocab;

lb_status lb__l2c_vocab_parse(const uint8_t *buf, size_t len, uint32_t n_tokens, const char *what, lb__l2c_vocab *out);
void lb__l2c_vocab_free(lb__l2c_vocab *v);

#endif
