/* Append-only arena (see arena.h). */
#include "util/arena.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Blocks of 1 MiB: large enough that their headers do not matter, small
 * enough that a file with few names does not reserve much. */
#define BLOCK_BYTES ((size_t)1 << 20)

struct lb__arena_block {
    lb__arena_block *next;
    _Alignas(16) unsigned char bytes[];
};

void *lb__arena_alloc(lb__arena *a, size_t n, size_t align)
{
    if (align == 0 || align > 16 || (align & (align - 1)) || n > SIZE_MAX / 2) return NULL;
    size_t at = (a->used + align - 1) & ~(align - 1);
    if (!a->head || at > a->cap || n > a->cap - at) {
        size_t cap = n > BLOCK_BYTES ? n : BLOCK_BYTES; /* an outsized request gets a block of its own */
        lb__arena_block *b = malloc(sizeof *b + cap);
        if (!b) return NULL;
        b->next = a->head;
        a->head = b, a->cap = cap, at = 0;
    }
    a->used = at + n;
    return a->head->bytes + at;
}

char *lb__arena_strndup(lb__arena *a, const char *s, size_t n)
{
    if (n == SIZE_MAX) return NULL;
    char *p = lb__arena_alloc(a, n + 1, 1);
    if (!p) return NULL;
    if (n) memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

void lb__arena_free(lb__arena *a)
{
    lb__arena_block *b = a->head;
    while (b) {
        lb__arena_block *next = b->next;
        free(b);
        b = next;
    }
    memset(a, 0, sizeof *a);
}
