/* What the forward pass implements: the architectures it runs, with their
 * variants, and the features a model file may ask for that it does not
 * implement (arch_support.c). Opening a model only notes them; the runner
 * refuses (lb__model_runnable), while reading, converting and quantizing
 * (lowbit inspect, error, convert) work on any architecture. */
#ifndef LB_IO_ARCH_SUPPORT_H
#define LB_IO_ARCH_SUPPORT_H

#include <stddef.h>

#include "io/gguf.h"
#include "io/json.h"

/* What a model's description asks of the forward pass beyond the plain
 * Llama layer, noted when the model is opened. */
typedef struct lb__arch_notes {
    char lacking[256];       /* the first feature the forward pass does not implement; "" if none */
    char hf_class[64];       /* config.json architectures[] entry the table does not know; "" if none */
    int described;           /* a config.json or GGUF metadata names the architecture */
    uint32_t sliding_window; /* attention window in positions; 0: full attention */
    uint32_t rotary_dim;     /* dimensions rotated per head ({arch}.rope.dimension_count); 0: not said */
} lb__arch_notes;

/* Notes from GGUF metadata (arch is general.architecture, "" if absent). */
void lb__arch_notes_from_gguf(const lb__gguf_file *f, const char *arch, lb__arch_notes *n);
/* Notes from a Hugging Face config.json object. */
void lb__arch_notes_from_config(const lb__json *cfg, lb__arch_notes *n);

/* The Hugging Face class (config.json architectures[]) of an architecture
 * the forward pass runs; NULL for any other. */
const char *lb__arch_hf_class(const char *name);

/* LB_OK if the forward pass implements the model as opened, over a
 * context of ctx positions; otherwise
 * LB_ERR_UNSUPPORTED naming the architecture or feature and what is
 * implemented. */
lb_status lb__model_runnable(const lb_model *m, size_t ctx);

#endif
