/* Few-shot prompts: k solved examples before each item's context, drawn
 * deterministically (lm-eval's "context + delimiter + answer" blocks
 * separated by a blank line). */
#include <stdlib.h>
#include <string.h>

#include "eval/task_internal.h"
#include "util/error.h"

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int same_item(const lb__task_item *a, const lb__task_item *b)
{
    if (a->n_choices != b->n_choices || a->label != b->label) return 0;
    for (uint32_t c = 0; c < a->n_choices; c++)
        if (strcmp(a->context[c], b->context[c]) != 0 || strcmp(a->continuation[c], b->continuation[c]) != 0) return 0;
    return 1;
}

/* The k examples' text for item i, malloc'd. */
static char *examples_text(const lb__task_item *item, const lb_task *ex, uint32_t k, uint64_t seed, size_t i)
{
    size_t picked[64], n_picked = 0, len = 0;
    uint64_t s = seed ^ (0xD1B54A32D192ED03ull * (i + 1));
    for (uint64_t tries = 0; n_picked < k && tries < 64ull * k + 1024; tries++) {
        size_t j = (size_t)(splitmix64(&s) % ex->n);
        int dup = same_item(&ex->items[j], item);
        for (size_t q = 0; q < n_picked && !dup; q++) dup = picked[q] == j;
        if (dup) continue;
        picked[n_picked++] = j;
        len += strlen(ex->items[j].context[ex->items[j].label]) + 1 + strlen(ex->items[j].continuation[ex->items[j].label]) + 2;
    }
    if (n_picked < k) return NULL;
    char *text = malloc(len + 1), *p = text;
    if (!text) return NULL;
    for (size_t q = 0; q < n_picked; q++) {
        const lb__task_item *e = &ex->items[picked[q]];
        size_t a = strlen(e->context[e->label]), b = strlen(e->continuation[e->label]);
        memcpy(p, e->context[e->label], a), p += a, *p++ = ' ';
        memcpy(p, e->continuation[e->label], b), p += b, *p++ = '\n', *p++ = '\n';
    }
    *p = 0;
    return text;
}

lb_status lb_task_fewshot(lb_task *t, const lb_task *examples, uint32_t k, uint64_t seed)
{
    if (!t || !examples) return lb__fail(LB_ERR_ARG, "lb_task_fewshot: NULL task");
    if (k == 0) return LB_OK;
    if (k > 64 || k >= examples->n)
        return lb__fail(LB_ERR_ARG, "%u few-shot examples from %zu items (at most 64, and fewer than the items)", k,
                        examples->n);
    /* every item's new contexts first: examples may be t itself */
    const char **fresh = calloc(t->n * LB_TASK_MAX_CHOICES, sizeof *fresh);
    if (!fresh) return lb__fail(LB_ERR_NOMEM, "out of memory");
    lb_status st = LB_OK;
    for (size_t i = 0; st == LB_OK && i < t->n; i++) {
        lb__task_item *it = &t->items[i];
        char *shots = examples_text(it, examples, k, seed, i);
        if (!shots) {
            st = lb__fail(LB_ERR_ARG, "%s: item %zu: not %u distinct examples other than the item itself", t->what, i, k);
            break;
        }
        size_t a = strlen(shots);
        for (uint32_t c = 0; st == LB_OK && c < it->n_choices; c++) {
            if (c > 0 && it->context[c] == it->context[c - 1]) { /* a shared context stays shared */
                fresh[i * LB_TASK_MAX_CHOICES + c] = fresh[i * LB_TASK_MAX_CHOICES + c - 1];
                continue;
            }
            size_t b = strlen(it->context[c]);
            char *s = lb__arena_alloc(&t->strings, a + b + 1, 1);
            if (!s) st = lb__fail(LB_ERR_NOMEM, "out of memory");
            else memcpy(s, shots, a), memcpy(s + a, it->context[c], b + 1), fresh[i * LB_TASK_MAX_CHOICES + c] = s;
        }
        free(shots);
    }
    for (size_t i = 0; st == LB_OK && i < t->n; i++)
        for (uint32_t c = 0; c < t->items[i].n_choices; c++) t->items[i].context[c] = fresh[i * LB_TASK_MAX_CHOICES + c];
    free(fresh);
    return st;
}
