/* Large zeroed buffers (quantized tensors of a model's size). */
#ifndef LB_UTIL_ALLOC_H
#define LB_UTIL_ALLOC_H

#include <stddef.h>

/* Zero-filled like calloc; from 4 MiB up, mapped with transparent huge
 * pages advised, which cuts the page faults of first touch 512-fold. */
void *lb__alloc_large(size_t bytes);
void lb__free_large(void *p, size_t bytes);

#endif
