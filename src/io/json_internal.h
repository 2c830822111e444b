/* Shared between json_parse.c (which builds the member index of large
 * objects while it checks for duplicate keys) and json_access.c (which
 * looks members up through it). Nothing outside src/io/json*.c uses this. */
#ifndef LB_IO_JSON_INTERNAL_H
#define LB_IO_JSON_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "io/json.h"

/* Objects with at least this many members get a hash index; smaller ones
 * are searched linearly, which is faster at that size. */
#define LB__JSON_INDEX_MIN 9

/* Lives in the tree's arena immediately before an indexed object's keys
 * array, so the fixed node struct needs no extra field to reach it. The
 * hash is keyed per document so that a hostile file cannot be crafted to
 * make every key collide (which would make parsing quadratic). */
typedef struct lb__json_index {
    uint64_t k0, k1;  /* hash key */
    size_t mask;      /* slot count - 1 (a power of two, at least twice the member count) */
    uint32_t *slots;  /* 0 = empty, else member index + 1 */
} lb__json_index;

static inline const lb__json_index *lb__json_index_of(const lb__json *obj)
{
    return (const lb__json_index *)(const void *)obj->keys - 1;
}

/* Keyed hash of len bytes (SipHash-1-3). */
uint64_t lb__json_hash(uint64_t k0, uint64_t k1, const char *key, size_t len);

#endif
