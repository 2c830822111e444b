/* What the model commands (inspect, error, convert) share. */
#ifndef LOWBIT_CLI_MODEL_H
#define LOWBIT_CLI_MODEL_H

#include <stdint.h>

#include "cli.h"

const char *cli_model_kind_name(lb_model_kind k);

/* A tensor as a matrix: rows = the first dimension, cols = the rest (a
 * vector or scalar is one row). */
void cli_tensor_matrix(const lb_tensor *t, uint64_t *rows, uint64_t *cols);

/* "[49152, 576]" */
void cli_shape_string(const lb_tensor *t, char *buf, size_t size);

/* The tensor as fp32 in *buf (grown as needed; never NULL on success,
 * even for an empty tensor). */
lb_status cli_tensor_f32(const lb_tensor *t, float **buf, size_t *cap);

/* x (rows x cols) under spec, dequantized into xhat, and what it cost:
 * lb_qstats_compute's figures; for a plain float spec (cli_plain_float_spec)
 * the weights are rounded and only count, mse, sqnr_db and bits_per_value
 * are filled. */
lb_status cli_quant_stats(const lb_qspec *spec, const float *x, uint64_t rows, uint64_t cols, int threads, float *xhat,
                          lb_qstats *qs);

/* The architecture as JSON fields (after an opening brace was written). */
void cli_arch_json(FILE *out, const lb_arch *a);

#endif
