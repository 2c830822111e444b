/* A SentencePiece-style tokenizer (llama2.c tokenizer files, GGUF
 * "llama") as the tokenizer.json that transformers' Llama converter writes
 * in its "legacy" form: a BPE model with byte_fallback, the normalizer
 * Prepend("\u2581") + Replace(" " -> "\u2581"), no pre-tokenizer, and the
 * decoder Replace("\u2581" -> " "), ByteFallback, Fuse, Strip(1 leading
 * space). That is lowbit's own algorithm (model/tokenizer_spm.c) once the
 * merges are listed in the order HF's converter derives from the scores:
 * every split of a token into two tokens, the best score first; among equal
 * scores the longer left part, then the longer right part (in characters),
 * then the merged token's id.
 *
 * What is refused, because HF would tokenize differently: a vocabulary
 * without all 256 <0xNN> byte tokens (HF writes one <unk> for a character
 * whose bytes are not all tokens, lowbit one id per byte), two different
 * merged tokens with the same score (HF's ranks then decide between them
 * where sentencepiece takes the leftmost), an empty <unk>, BOS or EOS (it
 * cannot be named), and names that would map a string to another id than
 * lowbit's lookup does. */
#include <stdlib.h>
#include <string.h>

#include "export/hf_tokenizer_internal.h"
#include "model/tokenizer_internal.h"
#include "util/error.h"

#define U2581 "\xE2\x96\x81"

/* llama2.c's export writes BOS and EOS as "\n<s>\n" and "\n</s>\n"; the
 * SentencePiece piece is the part between the newlines. */
static int wrapped_control(const char *s, size_t len)
{
    return len >= 4 && s[0] == '\n' && s[1] == '<' && s[len - 2] == '>' && s[len - 1] == '\n';
}

/* The token as tokenizer.json writes it: llama2.c files store U+2581 as a
 * space, so each space goes back to U+2581. */
static char *hf_name(const lb_tokenizer *t, uint32_t id)
{
    const char *s = lb__tok_str(t, id);
    size_t len = t->str_len[id];
    if (t->space_is_u2581) {
        char *c = malloc(len + 1);
        if (c) memcpy(c, s, len), c[len] = '\0';
        return c;
    }
    if (((int32_t)id == t->bos || (int32_t)id == t->eos) && wrapped_control(s, len)) s++, len -= 2;
    char *c = malloc(3 * len + 1), *o = c;
    if (!c) return NULL;
    for (size_t i = 0; i < len; i++)
        if (s[i] == ' ') memcpy(o, U2581, 3), o += 3;
        else *o++ = s[i];
    *o = '\0';
    return c;
}

static size_t utf8_chars(const char *s)
{
    size_t n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

typedef struct rank_key {
    const lb__pair *p;
    size_t la, lr; /* characters of the left and right parts */
} rank_key;

static int by_rank(const void *a, const void *b)
{
    const rank_key *x = a, *y = b;
    if (x->p->cost != y->p->cost) return x->p->cost < y->p->cost ? -1 : 1;
    if (x->la != y->la) return x->la > y->la ? -1 : 1;
    if (x->lr != y->lr) return x->lr > y->lr ? -1 : 1;
    if (x->p->id != y->p->id) return x->p->id < y->p->id ? -1 : 1;
    return (x->p->key > y->p->key) - (x->p->key < y->p->key);
}

void lb__hf_spm_free(lb__hf_spm *h, uint32_t n)
{
    for (uint32_t i = 0; h->names && i < n; i++) free(h->names[i]);
    free(h->names), free(h->merges);
    memset(h, 0, sizeof *h);
}

/* The names' own string -> id map (a scratch tokenizer holding only them). */
static lb_status check_names(const lb_tokenizer *t, const char *what, const lb__hf_spm *h, lb_tokenizer *x)
{
    lb_status st = lb__tok_alloc(x, t->n);
    for (uint32_t i = 0; st == LB_OK && i < t->n; i++)
        if (h->names[i]) st = lb__tok_set(x, i, h->names[i], strlen(h->names[i]));
    if (st == LB_OK) st = lb__strmap_build(x);
    for (uint32_t i = 0; st == LB_OK && i < t->n; i++) {
        if (!h->names[i]) continue;
        int32_t want = lb__strmap_get(t, lb__tok_str(t, i), t->str_len[i]);
        int32_t got = lb__strmap_get(x, h->names[i], strlen(h->names[i]));
        if (want != got)
            st = lb__fail(LB_ERR_UNSUPPORTED, "%s: token %u would be written '%s', a string that names token %d in "
                          "tokenizer.json but token %d in the tokenizer it comes from: not converted", what, i,
                          h->names[i], got, want);
    }
    return st;
}

lb_status lb__hf_spm_prepare(const lb_tokenizer *t, const char *what, lb__hf_spm *h)
{
    memset(h, 0, sizeof *h);
    if (t->kind != LB__TOK_SPM) return lb__fail(LB_ERR_ARG, "lb__hf_spm_prepare: not a SentencePiece tokenizer");
    for (int b = 0; b < 256; b++)
        if (t->byte_id[b] < 0)
            return lb__fail(LB_ERR_UNSUPPORTED, "%s: the vocabulary has no byte token <0x%02X>: HF's byte fallback "
                            "would write one <unk> for a character holding that byte where this tokenizer writes one "
                            "id per byte; no tokenizer.json written", what, b);
    int32_t named[] = {t->unk, t->bos, t->eos};
    for (int k = 0; k < 3; k++)
        if (named[k] >= 0 && (t->str_off[named[k]] == SIZE_MAX || t->str_len[named[k]] == 0))
            return lb__fail(LB_ERR_UNSUPPORTED, "%s: the %s token (id %d) is empty: tokenizer.json cannot name it", what,
                            k == 0 ? "unknown" : k == 1 ? "BOS" : "EOS", named[k]);
    if (!(h->names = calloc(t->n, sizeof *h->names))) return lb__fail(LB_ERR_NOMEM, "out of memory");
    lb_status st = LB_OK;
    for (uint32_t i = 0; st == LB_OK && i < t->n; i++)
        if (t->str_off[i] != SIZE_MAX && !(h->names[i] = hf_name(t, i))) st = lb__fail(LB_ERR_NOMEM, "out of memory");
    lb_tokenizer x = {0};
    if (st == LB_OK) st = check_names(t, what, h, &x);
    size_t n = 0;
    rank_key *k = NULL;
    if (st == LB_OK && !(k = malloc((t->merges.count ? t->merges.count : 1) * sizeof *k)))
        st = lb__fail(LB_ERR_NOMEM, "out of memory (%zu merges)", t->merges.count);
    for (size_t i = 0; st == LB_OK && t->merges.slots && i <= t->merges.mask; i++) {
        const lb__pair *p = &t->merges.slots[i];
        if (!p->key) continue;
        uint32_t a = (uint32_t)((p->key - 1) >> 32), b = (uint32_t)(p->key - 1);
        k[n++] = (rank_key){p, utf8_chars(h->names[a]), utf8_chars(h->names[b])};
        /* HF finds the merged token by the two names put together */
        size_t la = strlen(h->names[a]), lb = strlen(h->names[b]);
        char *ab = malloc(la + lb + 1);
        if (!ab) {
            st = lb__fail(LB_ERR_NOMEM, "out of memory");
            break;
        }
        memcpy(ab, h->names[a], la), memcpy(ab + la, h->names[b], lb + 1);
        if (lb__strmap_get(&x, ab, la + lb) != p->id)
            st = lb__fail(LB_ERR_UNSUPPORTED, "%s: the merge '%s' '%s' makes token %d, which tokenizer.json would "
                          "write as '%s': not converted", what, h->names[a], h->names[b], p->id,
                          h->names[p->id] ? h->names[p->id] : "");
        free(ab);
    }
    if (st == LB_OK) qsort(k, n, sizeof *k, by_rank);
    for (size_t i = 1; st == LB_OK && i < n; i++)
        if (k[i].p->cost == k[i - 1].p->cost && k[i].p->id != k[i - 1].p->id)
            st = lb__fail(LB_ERR_UNSUPPORTED, "%s: tokens %d '%s' and %d '%s' have the same score: HF's BPE would rank "
                          "one merge first where SentencePiece takes the leftmost; no tokenizer.json written", what,
                          k[i - 1].p->id, h->names[k[i - 1].p->id], k[i].p->id, h->names[k[i].p->id]);
    if (st == LB_OK && !(h->merges = malloc((n ? n : 1) * sizeof *h->merges)))
        st = lb__fail(LB_ERR_NOMEM, "out of memory");
    for (size_t i = 0; st == LB_OK && i < n; i++) h->merges[i] = k[i].p;
    h->n_merges = st == LB_OK ? n : 0;
    free(k);
    lb__tok_destroy(&x);
    if (st != LB_OK) lb__hf_spm_free(h, t->n);
    return st;
}

static void replace(lb__jsonw *w, const char *from, const char *to)
{
    lb__jsonw_object(w);
    lb__jsonw_key(w, "type"), lb__jsonw_str(w, "Replace");
    lb__jsonw_key(w, "pattern"), lb__jsonw_object(w), lb__jsonw_key(w, "String"), lb__jsonw_str(w, from);
    lb__jsonw_end(w);
    lb__jsonw_key(w, "content"), lb__jsonw_str(w, to);
    lb__jsonw_end(w);
}

void lb__hf_spm_normalizer(lb__jsonw *w, int prefix)
{
    lb__jsonw_object(w);
    lb__jsonw_key(w, "type"), lb__jsonw_str(w, "Sequence");
    lb__jsonw_key(w, "normalizers"), lb__jsonw_array(w);
    if (prefix) {
        lb__jsonw_object(w);
        lb__jsonw_key(w, "type"), lb__jsonw_str(w, "Prepend");
        lb__jsonw_key(w, "prepend"), lb__jsonw_str(w, U2581);
        lb__jsonw_end(w);
    }
    replace(w, " ", U2581);
    lb__jsonw_end(w), lb__jsonw_end(w);
}

void lb__hf_spm_decoder(lb__jsonw *w, int prefix)
{
    lb__jsonw_object(w);
    lb__jsonw_key(w, "type"), lb__jsonw_str(w, "Sequence");
    lb__jsonw_key(w, "decoders"), lb__jsonw_array(w);
    replace(w, U2581, " ");
    const char *plain[] = {"ByteFallback", "Fuse"};
    for (int i = 0; i < 2; i++) lb__jsonw_object(w), lb__jsonw_key(w, "type"), lb__jsonw_str(w, plain[i]), lb__jsonw_end(w);
    if (prefix) { /* the dummy prefix's space goes */
        lb__jsonw_object(w);
        lb__jsonw_key(w, "type"), lb__jsonw_str(w, "Strip");
        lb__jsonw_key(w, "content"), lb__jsonw_str(w, " ");
        lb__jsonw_key(w, "start"), lb__jsonw_int(w, 1);
        lb__jsonw_key(w, "stop"), lb__jsonw_int(w, 0);
        lb__jsonw_end(w);
    }
    lb__jsonw_end(w), lb__jsonw_end(w);
}
