/* The other direction: a Hugging Face input's tokenizer.json (with
 * tokenizer_config.json and config.json beside it) as GGUF tokenizer.ggml.*
 * keys, so `convert DIR x.gguf` keeps the tokenizer and llama.cpp tokenizes
 * as `tokenizers` does. The file is read by lowbit's own tokenizer.json
 * loader (model/tokenizer_json.c: no new parser, and what it refuses is
 * refused here), and the values are those llama.cpp's convert_hf_to_gguf.py
 * writes (the special ids, add flags, types of added tokens and chat
 * template: hf_tokenizer_to_gguf_meta.c), with two exceptions: the
 * pre-tokenizer is named from what tokenizer.json says, not from a hash of
 * known models' ids, and the SentencePiece form gets scores that merge as
 * its merge list does (the converter's tokenizer.json path writes -1000 for
 * every token, which llama.cpp would merge differently).
 *
 * tokenizer.ggml.pre: llama.cpp picks its pre-tokenizer regex by this name.
 * Byte-level BPE with the GPT-2 regex alone is "gpt-2"; after Digits with
 * individual_digits (SmolLM's) it is "smollm" (the same regex, each digit
 * first split off). Any other byte-level form (add_prefix_space, no regex,
 * digit runs, ignore_merges) has no name llama.cpp runs identically and is
 * refused (LB_ERR_UNSUPPORTED), as is what lowbit's loader refuses
 * (Llama-3 or Qwen2 Split regexes, Metaspace, WordPiece, Unigram).
 *
 * GGUF "llama" says merges by scores: every split of a token into two
 * tokens merges, the best score first. An HF merge list says the same when
 * it holds every such split and each merged token's merges are adjacent in
 * it; the token's score is then minus the rank of its first merge. A list
 * that does not is refused (LB_ERR_UNSUPPORTED), never written as scores
 * that merge differently. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "export/hf_tokenizer_internal.h"
#include "io/json.h"
#include "model/tokenizer_internal.h"
#include "util/error.h"
#include "util/file.h"

static int by_cost(const void *a, const void *b)
{
    const lb__pair *x = *(const lb__pair *const *)a, *y = *(const lb__pair *const *)b;
    return (x->cost > y->cost) - (x->cost < y->cost);
}

/* The merges, lowest cost (HF rank) first; *n receives their count. */
static const lb__pair **ranked_merges(const lb_tokenizer *t, size_t *n)
{
    const lb__pair **m = malloc((t->merges.count ? t->merges.count : 1) * sizeof *m);
    *n = 0;
    for (size_t i = 0; m && t->merges.slots && i <= t->merges.mask; i++)
        if (t->merges.slots[i].key) m[(*n)++] = &t->merges.slots[i];
    if (m) qsort(m, *n, sizeof *m, by_cost);
    return m;
}

/* The token list of m->n_vocab ids: an id without a token (a gap, or one
 * the embedding has beyond the tokenizer's) is "[PAD<id>]", type 5
 * (unused), as the converter writes it. types get 1 (normal) elsewhere;
 * pads: one buffer holding the pad names. */
typedef struct token_list {
    const char **s;
    uint64_t *lens;
    int32_t *types;
    char *pads;
} token_list;

static lb_status token_list_make(const lb_tokenizer *t, const lb__hf_meta *m, token_list *l)
{
    uint32_t n = m->n_vocab, n_pad = 0;
    for (uint32_t i = 0; i < n; i++) n_pad += i >= t->n || t->str_off[i] == SIZE_MAX;
    l->s = malloc((size_t)n * sizeof *l->s), l->lens = malloc((size_t)n * sizeof *l->lens);
    l->types = malloc((size_t)n * sizeof *l->types), l->pads = malloc((size_t)n_pad * 20 + 1);
    if (!l->s || !l->lens || !l->types || !l->pads) return lb__fail(LB_ERR_NOMEM, "out of memory (tokenizer)");
    char *p = l->pads;
    for (uint32_t i = 0; i < n; i++) {
        if (i < t->n && t->str_off[i] != SIZE_MAX) {
            l->s[i] = lb__tok_str(t, i), l->lens[i] = t->str_len[i], l->types[i] = 1;
            continue;
        }
        int len = snprintf(p, 20, "[PAD%u]", i);
        l->s[i] = p, l->lens[i] = (uint64_t)len, l->types[i] = 5;
        p += len + 1;
    }
    return LB_OK;
}

static void token_list_free(token_list *l) { free(l->s), free(l->lens), free(l->types), free(l->pads); }

/* llama.cpp's name for t's byte-level pre-tokenizer (see the top). */
static lb_status pre_name(const lb_tokenizer *t, const char *what, const char **name)
{
    const char *why = t->pre != LB__PRE_GPT2   ? "ByteLevel use_regex false"
                      : t->add_prefix_space  ? "ByteLevel add_prefix_space"
                      : t->ignore_merges     ? "BPE ignore_merges"
                      : t->split_digits == 2 ? "Digits without individual_digits"
                                             : NULL;
    if (why)
        return lb__fail(LB_ERR_UNSUPPORTED, "%s: pre-tokenizer with %s: llama.cpp has no tokenizer.ggml.pre that "
                        "splits text the same way (lowbit names gpt-2: ByteLevel alone; smollm: Digits(individual) "
                        "then ByteLevel); no tokenizer written", what, why);
    *name = t->split_digits == 1 ? "smollm" : "gpt-2";
    return LB_OK;
}

static lb_status bpe_keys(const lb_tokenizer *t, const lb__hf_meta *m, const char *what, lb__gguf_writer *w)
{
    const char *pre = NULL;
    token_list l = {0};
    size_t n = 0;
    const lb__pair **mg = ranked_merges(t, &n);
    char **ms = calloc(n ? n : 1, sizeof *ms);
    lb_status st = mg && ms ? pre_name(t, what, &pre) : lb__fail(LB_ERR_NOMEM, "out of memory (merges)");
    if (st == LB_OK) st = token_list_make(t, m, &l);
    if (st == LB_OK) lb__hf_meta_added_types(m, 1, l.types);
    for (size_t i = 0; st == LB_OK && i < n; i++) { /* "left right", by rank */
        uint64_t key = mg[i]->key - 1;
        uint32_t a = (uint32_t)(key >> 32), b = (uint32_t)key;
        size_t la = t->str_len[a], lb = t->str_len[b];
        if (!(ms[i] = malloc(la + lb + 2))) st = lb__fail(LB_ERR_NOMEM, "out of memory (merges)");
        else memcpy(ms[i], lb__tok_str(t, a), la), ms[i][la] = ' ', memcpy(ms[i] + la + 1, lb__tok_str(t, b), lb),
             ms[i][la + lb + 1] = '\0';
    }
    if (st == LB_OK) st = lb__gguf_set_str(w, "tokenizer.ggml.model", "gpt2", 4);
    if (st == LB_OK) st = lb__gguf_set_str(w, "tokenizer.ggml.pre", pre, strlen(pre));
    if (st == LB_OK) st = lb__gguf_set_arr_str(w, "tokenizer.ggml.tokens", l.s, l.lens, m->n_vocab);
    if (st == LB_OK) st = lb__gguf_set_arr(w, "tokenizer.ggml.token_type", LB_GGUF_I32, l.types, m->n_vocab);
    if (st == LB_OK) st = lb__gguf_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)ms, NULL, n);
    /* inert for byte-level BPE in llama.cpp; written as the converter writes it */
    const lb__json *aps = m->cfg ? lb__json_get(m->cfg, "add_prefix_space") : NULL;
    if (st == LB_OK && aps && (aps->type == LB_JSON_TRUE || aps->type == LB_JSON_FALSE))
        st = lb__gguf_set_bool(w, "tokenizer.ggml.add_space_prefix", aps->type == LB_JSON_TRUE);
    for (size_t i = 0; ms && i < n; i++) free(ms[i]);
    free(mg), free(ms);
    token_list_free(&l);
    return st;
}

/* Scores that make the SentencePiece merge rule (lb__spm_build_merges)
 * merge as t's ranked merges do; LB_ERR_UNSUPPORTED when none can. */
static lb_status spm_scores(const lb_tokenizer *t, const char *what, float *scores)
{
    size_t n = 0;
    const lb__pair **m = ranked_merges(t, &n);
    unsigned char *done = calloc(t->n, 1); /* 1: the token's merges began, 2: and ended */
    lb_status st = m && done ? LB_OK : lb__fail(LB_ERR_NOMEM, "out of memory (tokenizer)");
    for (uint32_t i = 0; i < t->n; i++) scores[i] = 0;
    for (size_t i = 0; st == LB_OK && i < n; i++) {
        int32_t id = m[i]->id;
        if (i && m[i - 1]->id != id) done[m[i - 1]->id] = 2;
        if (done[id] == 2)
            st = lb__fail(LB_ERR_UNSUPPORTED, "%s: the merges making token %d '%s' are not adjacent in model.merges "
                          "(rank %.0f): GGUF scores cannot order them; no tokenizer written", what, id,
                          lb__tok_str(t, (uint32_t)id), m[i]->cost);
        if (!done[id]) done[id] = 1, scores[id] = -(float)m[i]->cost;
    }
    /* every split into two tokens must be one of the merges: scores would merge it */
    for (uint32_t id = 0; st == LB_OK && id < t->n; id++) {
        if (t->str_off[id] == SIZE_MAX || lb__strmap_get(t, lb__tok_str(t, id), t->str_len[id]) != (int32_t)id)
            continue;
        const char *s = lb__tok_str(t, id);
        for (size_t k = 1; st == LB_OK && k < t->str_len[id]; k++) {
            int32_t a = lb__strmap_get(t, s, k), b = a < 0 ? -1 : lb__strmap_get(t, s + k, t->str_len[id] - k);
            if (b < 0) continue;
            const lb__pair *p = lb__pairmap_get(&t->merges, a, b);
            if (!p || p->id != (int32_t)id)
                st = lb__fail(LB_ERR_UNSUPPORTED, "%s: token %u '%s' is tokens %d and %d put together, but no merge "
                              "makes it: GGUF scores would; no tokenizer written", what, id, s, a, b);
        }
    }
    free(m), free(done);
    return st;
}

/* GGUF "llama": token types 1 normal, 2 unknown, 3 control, 4 user-defined,
 * 5 unused, 6 byte (an added token's type is the converter's: 3 or 4). */
static lb_status spm_keys(const lb_tokenizer *t, const lb__hf_meta *m, const char *what, lb__gguf_writer *w)
{
    token_list l = {0};
    float *scores = malloc((size_t)m->n_vocab * sizeof *scores);
    lb_status st = scores ? spm_scores(t, what, scores) : lb__fail(LB_ERR_NOMEM, "out of memory (tokenizer)");
    if (st == LB_OK) st = token_list_make(t, m, &l);
    if (st == LB_OK) {
        for (uint32_t i = t->n; i < m->n_vocab; i++) scores[i] = -1000.0f;
        for (int b = 0; b < 256; b++) l.types[t->byte_id[b]] = 6;
        if (t->unk >= 0) l.types[t->unk] = 2;
        lb__hf_meta_added_types(m, 0, l.types); /* as LlamaHfVocab: by the special flag alone */
    }
    if (st == LB_OK) st = lb__gguf_set_str(w, "tokenizer.ggml.model", "llama", 5);
    if (st == LB_OK) st = lb__gguf_set_str(w, "tokenizer.ggml.pre", "default", 7);
    if (st == LB_OK) st = lb__gguf_set_arr_str(w, "tokenizer.ggml.tokens", l.s, l.lens, m->n_vocab);
    if (st == LB_OK) st = lb__gguf_set_arr(w, "tokenizer.ggml.scores", LB_GGUF_F32, scores, m->n_vocab);
    if (st == LB_OK) st = lb__gguf_set_arr(w, "tokenizer.ggml.token_type", LB_GGUF_I32, l.types, m->n_vocab);
    /* the dummy prefix as the normalizer says it (tokenizer_config's add_prefix_space does not change tokenizers) */
    if (st == LB_OK) st = lb__gguf_set_bool(w, "tokenizer.ggml.add_space_prefix", t->add_space_prefix);
    token_list_free(&l);
    free(scores);
    return st;
}

lb_status lb__hf_tokenizer_to_gguf(const char *src_dir, lb__gguf_writer *w)
{
    char *json = lb__path_join(src_dir, "tokenizer.json");
    lb_status st = json ? LB_OK : lb__fail(LB_ERR_NOMEM, "out of memory");
    lb_tokenizer *t = NULL;
    lb__hf_meta m = {0};
    if (st == LB_OK && access(json, R_OK) == 0) {
        st = lb_tokenizer_from_file(json, 0, &t);
        if (st == LB_OK) st = lb__hf_meta_read(src_dir, t, json, &m);
        if (st == LB_OK) st = t->kind == LB__TOK_SPM ? spm_keys(t, &m, json, w) : bpe_keys(t, &m, json, w);
        if (st == LB_OK) st = lb__hf_meta_keys(&m, src_dir, w);
    }
    lb__hf_meta_free(&m);
    lb_tokenizer_free(t);
    free(json);
    return st;
}
