/* Importance matrices for the commands that quantize (lowbit imatrix, and
 * lowbit quantize --imatrix FILE | --imatrix-from TEXT). */
#ifndef LOWBIT_CLI_IMATRIX_H
#define LOWBIT_CLI_IMATRIX_H

#include "cli.h"

/* Computes the imatrix of model m on the text file at path as
 * llama-imatrix does (tokenized with tok, BOS first when the model adds
 * one; windows of ctx tokens, at most chunks of them when chunks > 0), with
 * progress lines. *n_tokens (may be NULL) gets the text's token count.
 * Returns EXIT_OK or the reported exit code (EXIT_USAGE for a text
 * shorter than two windows). */
int cli_imatrix_compute(const char *cmd, int json, const lb_model *m, const lb_tokenizer *tok, const char *path,
                        uint32_t ctx, size_t chunks, int threads, int process_output, lb_imatrix **out,
                        size_t *n_tokens);

/* The imatrix a quantizing command was given: --imatrix FILE (GGUF or
 * legacy .dat) when file is set, else --imatrix-from TEXT computed on m
 * with llama-imatrix's defaults (windows of 512); *out NULL when neither
 * is set. Returns EXIT_OK or the reported exit code. */
int cli_imatrix_get(const char *cmd, int json, const char *file, const char *text, const lb_model *m,
                    const lb_tokenizer *tok, int threads, lb_imatrix **out);

#endif
