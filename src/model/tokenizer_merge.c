/* The merge loop both BPE flavours share, and the hash maps behind it.
 *
 * A word starts as a list of symbols (token ids). Every adjacent pair that
 * the merge table knows is a candidate, kept in a min-heap by (cost, left
 * position): the cheapest merge wins, the leftmost among equals. That is
 * HF tokenizers' order (rank, then position) and also run.c's (the
 * highest score, the first pair found scanning left to right), since a
 * merged symbol keeps its left symbol's position. Merging invalidates the
 * candidates that used either symbol; they are recognized as stale when
 * popped (a symbol gone, or its id changed) instead of being removed. */
#include <stdlib.h>
#include <string.h>

#include "model/tokenizer_internal.h"
#include "util/error.h"

struct lb__sym {
    int32_t id;
    int32_t prev, next; /* -1 at the ends */
    int alive;
};

struct lb__cand {
    double cost;
    uint32_t left, right;
    int32_t a, b, id;
};

/* ===== Hash maps ===== */

static uint64_t hash_bytes(const char *s, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    return h ^ h >> 29;
}

int32_t lb__strmap_get(const lb_tokenizer *t, const char *s, size_t len)
{
    const lb__strmap *m = &t->vocab;
    if (!m->slots) return -1;
    for (size_t h = (size_t)hash_bytes(s, len) & m->mask; m->slots[h]; h = (h + 1) & m->mask) {
        uint32_t id = m->slots[h] - 1;
        if (t->str_len[id] == len && memcmp(t->arena + t->str_off[id], s, len) == 0) return (int32_t)id;
    }
    return -1;
}

/* The first id keeps a string that repeats. */
lb_status lb__strmap_build(lb_tokenizer *t)
{
    size_t cap = 16;
    while (cap < (size_t)t->n * 2) cap <<= 1;
    t->vocab.slots = calloc(cap, sizeof *t->vocab.slots);
    if (!t->vocab.slots) return lb__fail(LB_ERR_NOMEM, "tokenizer: out of memory (vocabulary map of %u tokens)", t->n);
    t->vocab.mask = cap - 1;
    for (uint32_t id = 0; id < t->n; id++) {
        if (t->str_off[id] == SIZE_MAX) continue;
        const char *s = t->arena + t->str_off[id];
        size_t h = (size_t)hash_bytes(s, t->str_len[id]) & t->vocab.mask;
        int dup = 0;
        for (; t->vocab.slots[h]; h = (h + 1) & t->vocab.mask) {
            uint32_t o = t->vocab.slots[h] - 1;
            if (t->str_len[o] == t->str_len[id] && memcmp(t->arena + t->str_off[o], s, t->str_len[id]) == 0) {
                dup = 1;
                break;
            }
        }
        if (!dup) t->vocab.slots[h] = id + 1;
    }
    return LB_OK;
}

static size_t pair_slot(uint64_t key, size_t mask)
{
    key ^= key >> 33, key *= 0xff51afd7ed558ccdull, key ^= key >> 33;
    return (size_t)key & mask;
}

const lb__pair *lb__pairmap_get(const lb__pairmap *m, int32_t a, int32_t b)
{
    if (!m->slots) return NULL;
    uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
    for (size_t h = pair_slot(key, m->mask); m->slots[h].key; h = (h + 1) & m->mask)
        if (m->slots[h].key == key) return &m->slots[h];
    return NULL;
}

/* The first merge of a pair stays (HF keeps the lowest rank too). */
lb_status lb__pairmap_put(lb__pairmap *m, int32_t a, int32_t b, int32_t id, double cost)
{
    if ((m->count + 1) * 2 > m->mask + 1 || !m->slots) {
        size_t cap = m->slots ? (m->mask + 1) * 2 : 1024;
        lb__pair *s = calloc(cap, sizeof *s);
        if (!s) return lb__fail(LB_ERR_NOMEM, "tokenizer: out of memory (merge table of %zu pairs)", m->count);
        for (size_t i = 0; m->slots && i <= m->mask; i++) {
            if (!m->slots[i].key) continue;
            size_t h = pair_slot(m->slots[i].key, cap - 1);
            while (s[h].key) h = (h + 1) & (cap - 1);
            s[h] = m->slots[i];
        }
        free(m->slots);
        m->slots = s, m->mask = cap - 1;
    }
    uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
    size_t h = pair_slot(key, m->mask);
    for (; m->slots[h].key; h = (h + 1) & m->mask)
        if (m->slots[h].key == key) return LB_OK;
    m->slots[h] = (lb__pair){key, id, cost};
    m->count++;
    return LB_OK;
}

/* ===== Ids ===== */

lb_status lb__ids_push(lb__ids *ids, int32_t id)
{
    if (ids->n == ids->cap) {
        size_t cap = ids->cap ? ids->cap * 2 : 64;
        int32_t *v = realloc(ids->v, cap * sizeof *v);
        if (!v) return lb__fail(LB_ERR_NOMEM, "tokenize: out of memory (%zu ids)", cap);
        ids->v = v, ids->cap = cap;
    }
    ids->v[ids->n++] = id;
    return LB_OK;
}

void lb__merge_scratch_free(lb__merge_scratch *s)
{
    free(s->sym);
    free(s->heap);
    free(s->buf);
    memset(s, 0, sizeof *s);
}

/* ===== The merge loop ===== */

static int cand_less(const struct lb__cand *x, const struct lb__cand *y)
{
    return x->cost < y->cost || (x->cost == y->cost && x->left < y->left);
}

static lb_status heap_push(lb__merge_scratch *s, size_t *n, struct lb__cand c)
{
    if (*n == s->heap_cap) {
        size_t cap = s->heap_cap ? s->heap_cap * 2 : 256;
        struct lb__cand *h = realloc(s->heap, cap * sizeof *h);
        if (!h) return lb__fail(LB_ERR_NOMEM, "tokenize: out of memory (merge heap)");
        s->heap = h, s->heap_cap = cap;
    }
    size_t i = (*n)++;
    while (i > 0 && cand_less(&c, &s->heap[(i - 1) / 2])) {
        s->heap[i] = s->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    s->heap[i] = c;
    return LB_OK;
}

static struct lb__cand heap_pop(lb__merge_scratch *s, size_t *n)
{
    struct lb__cand top = s->heap[0], last = s->heap[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && cand_less(&s->heap[c + 1], &s->heap[c])) c++;
        if (!cand_less(&s->heap[c], &last)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (*n > 0) s->heap[i] = last;
    return top;
}

static lb_status consider(const lb_tokenizer *t, lb__merge_scratch *s, size_t *nh, int32_t l, int32_t r)
{
    if (l < 0 || r < 0) return LB_OK;
    const lb__pair *p = lb__pairmap_get(&t->merges, s->sym[l].id, s->sym[r].id);
    if (!p) return LB_OK;
    return heap_push(s, nh, (struct lb__cand){p->cost, (uint32_t)l, (uint32_t)r, s->sym[l].id, s->sym[r].id, p->id});
}

lb_status lb__merge(const lb_tokenizer *t, int32_t *ids, size_t *n, lb__merge_scratch *s)
{
    size_t count = *n;
    if (count < 2) return LB_OK;
    if (count > INT32_MAX) return lb__fail(LB_ERR_ARG, "tokenize: a word of %zu symbols is too long", count);
    if (count > s->sym_cap) {
        struct lb__sym *sym = realloc(s->sym, count * sizeof *sym);
        if (!sym) return lb__fail(LB_ERR_NOMEM, "tokenize: out of memory (%zu symbols)", count);
        s->sym = sym, s->sym_cap = count;
    }
    for (size_t i = 0; i < count; i++)
        s->sym[i] = (struct lb__sym){ids[i], (int32_t)i - 1, i + 1 < count ? (int32_t)i + 1 : -1, 1};
    size_t nh = 0;
    lb_status st = LB_OK;
    for (size_t i = 0; i + 1 < count && st == LB_OK; i++) st = consider(t, s, &nh, (int32_t)i, (int32_t)i + 1);
    while (nh > 0 && st == LB_OK) {
        struct lb__cand c = heap_pop(s, &nh);
        struct lb__sym *L = &s->sym[c.left], *R = &s->sym[c.right];
        if (!L->alive || !R->alive || L->next != (int32_t)c.right || L->id != c.a || R->id != c.b) continue;
        L->id = c.id;
        R->alive = 0;
        L->next = R->next;
        if (R->next >= 0) s->sym[R->next].prev = (int32_t)c.left;
        st = consider(t, s, &nh, L->prev, (int32_t)c.left);
        if (st == LB_OK) st = consider(t, s, &nh, (int32_t)c.left, L->next);
    }
    if (st != LB_OK) return st;
    size_t out = 0;
    for (int32_t i = 0; i >= 0; i = s->sym[i].next) ids[out++] = s->sym[i].id;
    *n = out;
    return LB_OK;
}
