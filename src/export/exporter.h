/* The writers of engine checkpoints share one driver (export.c): it makes
 * the temporary output directory, streams tensors one at a time into
 * size-bounded safetensors shards (+ model.safetensors.index.json), writes config.json
 * with the format's quantization_config, copies or synthesizes the
 * tokenizer and generation files, reads everything back to verify, and
 * renames the directory into place (util/output.h's rule).
 *
 * A format is one lb__exporter: it says what it can express (check), which
 * safetensors tensors one qmodel entry becomes (tensor), and the JSON it
 * adds (quant_config, extra_files). The driver owns I/O; a format never
 * touches a file. */
#ifndef LB_EXPORT_EXPORTER_H
#define LB_EXPORT_EXPORTER_H

#include <stddef.h>
#include <stdint.h>

#include "lowbit.h"

/* One tensor to store: safetensors dtype string ("F8_E4M3", "U8", "I32",
 * "I64", "BF16", "F16", "F32", "I8"), shape outermost first, bytes
 * row-major little-endian. The driver is done with data when emit returns
 * (it writes the bytes to their place in the file then). data is NULL when
 * describing (below). */
typedef struct lb__out_tensor {
    const char *name;
    const char *dtype;
    int n_dims;
    uint64_t shape[4];
    const void *data;
    uint64_t bytes;
} lb__out_tensor;

typedef lb_status (*lb__emit_fn)(void *sink, const lb__out_tensor *t);

/* A growing JSON text the formats append to (export_json.c): commas and
 * indentation (2 spaces) are automatic; an allocation failure is sticky
 * and reported by lb__jsonw_status. Strings are escaped as JSON requires. */
typedef struct lb__jsonw lb__jsonw;
lb__jsonw *lb__jsonw_new(void);
void lb__jsonw_free(lb__jsonw *w);
void lb__jsonw_object(lb__jsonw *w);       /* { */
void lb__jsonw_array(lb__jsonw *w);        /* [ */
void lb__jsonw_end(lb__jsonw *w);          /* } or ] */
void lb__jsonw_key(lb__jsonw *w, const char *key);
void lb__jsonw_str(lb__jsonw *w, const char *s);
void lb__jsonw_int(lb__jsonw *w, long long v);
void lb__jsonw_num(lb__jsonw *w, double v); /* shortest text that reads back to v (%.17g) */
void lb__jsonw_bool(lb__jsonw *w, int v);
void lb__jsonw_null(lb__jsonw *w);
void lb__jsonw_raw(lb__jsonw *w, const char *json); /* an already-formed JSON value */
lb_status lb__jsonw_status(const lb__jsonw *w);
const char *lb__jsonw_text(const lb__jsonw *w, size_t *len);

typedef struct lb__exporter {
    const char *name; /* "compressed-tensors", "modelopt" */
    /* Every entry expressible? LB_ERR_UNSUPPORTED naming the tensor, the
     * format and what would work. */
    lb_status (*check)(const lb_qmodel *q);
    /* The stored tensors of entry i: values (fp32, n_elements) for
     * STORED/KEPT/REPLACED entries; qv for QUANTIZED ones (lb_qtensor_view
     * layout). Both are in Hugging Face row order: the driver has already
     * moved q/k rows of a model read in the adjacent rotary layout (GGUF,
     * llama2.c) into the half-split one Hugging Face uses, codes, scales and
     * zero points alike (every lowbit granularity is row-wise, so moving
     * quantized rows is exactly quantizing moved rows).
     *
     * Describing: the driver first calls tensor() for every entry with
     * values NULL, or with a qv that has its sizes (lb__qtensor_layout) but
     * NULL data, scales and zero points, to write every shard's header
     * before any tensor is quantized. The exporter then emits the same
     * tensors (names, dtypes, shapes, bytes) in the same order with data
     * NULL, doing no work on values; the driver refuses a later emission
     * that differs from what was described. */
    lb_status (*tensor)(const lb_qmodel *q, size_t i, const float *values, const lb_qtensor_view *qv,
                        lb__emit_fn emit, void *sink);
    /* Extra per-model tensors (KV scales), after all entries; may be NULL. */
    lb_status (*extras)(const lb_qmodel *q, lb__emit_fn emit, void *sink);
    /* The value of config.json's "quantization_config" (one JSON object). */
    lb_status (*quant_config)(const lb_qmodel *q, lb__jsonw *w);
    /* Other files of the format (hf_quant_config.json): name and content,
     * called with k = 0, 1, ... until it returns 0; -1: failed (lb__fail
     * said why). May be NULL. */
    int (*extra_file)(const lb_qmodel *q, int k, const char **name, lb__jsonw *w);
} lb__exporter;

extern const lb__exporter lb__exporter_compressed_tensors;
extern const lb__exporter lb__exporter_modelopt;

#endif
