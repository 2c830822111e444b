/* An append-only arena: many small allocations (tensor names, shapes)
 * packed into large blocks that never move, so pointers into it stay valid
 * while it grows, and freed all at once. A million 10-byte names cost
 * their bytes, not a million malloc headers. */
#ifndef LB_UTIL_ARENA_H
#define LB_UTIL_ARENA_H

#include <stddef.h>

typedef struct lb__arena_block lb__arena_block;

typedef struct lb__arena {
    lb__arena_block *head; /* the block being filled; earlier ones follow its `next` */
    size_t used, cap;      /* in the head block */
} lb__arena;

/* n bytes aligned to `align` (a power of two, at most 16); NULL when out of
 * memory or n is absurd. Zero-initialise the arena ({0}) before first use. */
void *lb__arena_alloc(lb__arena *a, size_t n, size_t align);
/* A NUL-terminated copy of s[0..n). */
char *lb__arena_strndup(lb__arena *a, const char *s, size_t n);
void lb__arena_free(lb__arena *a);

#endif
