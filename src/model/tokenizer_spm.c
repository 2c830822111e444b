/* SentencePiece-style BPE by scores: the algorithm of llama2.c's run.c
 * encode() (which llama.cpp's SPM tokenizer also follows).
 *
 *   1. A dummy prefix: one space before non-empty text.
 *   2. Each UTF-8 character (a byte and the continuation bytes after it,
 *      at most four in all, exactly as run.c groups them) is looked up as
 *      a token; a character that is not a token becomes its bytes' <0xNN>
 *      tokens (ids 3..258 in llama vocabularies).
 *   3. Repeatedly, the adjacent pair whose concatenated string is a token
 *      with the highest score merges (the leftmost among equal scores);
 *      run.c never merges a pair scoring -1e10 or less.
 *
 * llama2.c tokenizer files store U+2581 as a space; GGUF vocabularies keep
 * U+2581, so there spaces in the text are written as U+2581 first. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/tokenizer_internal.h"
#include "util/error.h"

#define U2581 "\xE2\x96\x81"

/* Every token that splits into two tokens is the merge of that pair (the
 * merged id is the first token with that string, as run.c's lookup of the
 * concatenation would find it). */
lb_status lb__spm_build_merges(lb_tokenizer *t)
{
    for (uint32_t id = 0; id < t->n; id++) {
        if (t->str_off[id] == SIZE_MAX || t->str_len[id] < 2) continue;
        const char *s = lb__tok_str(t, id);
        size_t len = t->str_len[id];
        int32_t whole = lb__strmap_get(t, s, len);
        float score = t->scores[whole];
        if (!(score > -1e10f)) continue;
        for (size_t k = 1; k < len; k++) {
            int32_t a = lb__strmap_get(t, s, k);
            if (a < 0) continue;
            int32_t b = lb__strmap_get(t, s + k, len - k);
            if (b < 0) continue;
            lb_status st = lb__pairmap_put(&t->merges, a, b, whole, -(double)score);
            if (st != LB_OK) return st;
        }
    }
    return LB_OK;
}

static lb_status push_char(const lb_tokenizer *t, const char *c, size_t len, lb__ids *out)
{
    int32_t id = lb__strmap_get(t, c, len);
    if (id >= 0) return lb__ids_push(out, id);
    for (size_t i = 0; i < len; i++) {
        id = t->byte_id[(unsigned char)c[i]];
        if (id < 0) id = t->unk; /* no byte tokens: the unknown token, else nothing */
        if (id < 0) continue;
        lb_status st = lb__ids_push(out, id);
        if (st != LB_OK) return st;
    }
    return LB_OK;
}

lb_status lb__spm_encode(const lb_tokenizer *t, const char *text, size_t len, int prefix, lb__ids *out,
                         lb__merge_scratch *s)
{
    if (len == 0) return LB_OK;
    size_t start = out->n;
    const char *space = t->space_is_u2581 ? U2581 : " ";
    size_t space_len = strlen(space);
    lb_status st = LB_OK;
    if (prefix && t->add_space_prefix) st = push_char(t, space, space_len, out);
    for (size_t i = 0; i < len && st == LB_OK;) {
        size_t j = i + 1;
        while (j < len && j - i < 4 && ((unsigned char)text[j] & 0xC0) == 0x80) j++;
        if (text[i] == ' ' && space_len > 1) {
            /* a space and any stray continuation bytes after it (run.c's grouping), the space written U+2581 */
            char c[8];
            memcpy(c, space, space_len);
            memcpy(c + space_len, text + i + 1, j - i - 1);
            st = push_char(t, c, space_len + j - i - 1, out);
        } else {
            st = push_char(t, text + i, j - i, out);
        }
        i = j;
    }
    if (st != LB_OK) return st;
    size_t n = out->n - start;
    if (n == 0) return LB_OK; /* nothing pushed (out->v may still be NULL) */
    st = lb__merge(t, out->v + start, &n, s);
    out->n = start + n;
    return st;
}
