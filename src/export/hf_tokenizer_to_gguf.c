/* The other direction: a Hugging Face input's tokenizer.json (and the
 * chat template of tokenizer_config.json) as GGUF tokenizer.ggml.* keys,
 * so `convert DIR x.gguf` keeps the tokenizer. The file is read by
 * lowbit's own tokenizer.json loader (model/tokenizer_json.c: no new
 * parser), and only what lowbit's GGUF loader reads back identically is
 * written: byte-level BPE with the GPT-2 regex, alone ("gpt2") or after
 * individual digits ("smollm"), and the legacy SentencePiece form of
 * transformers' Llama converter ("llama": tokens, scores, token types).
 * Other byte-level variants (add_prefix_space, ignore_merges, digit runs)
 * write no tokenizer keys.
 *
 * GGUF "llama" says merges by scores: every split of a token into two
 * tokens merges, the best score first. An HF merge list says the same when
 * it holds every such split and each merged token's merges are adjacent in
 * it; the token's score is then minus the rank of its first merge. A list
 * that does not is refused (LB_ERR_UNSUPPORTED), never written as scores
 * that merge differently. */
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

static lb_status keys(const lb_tokenizer *t, lb__gguf_writer *w)
{
    const char **s = malloc((size_t)t->n * sizeof *s);
    uint64_t *lens = malloc((size_t)t->n * sizeof *lens);
    int32_t *types = malloc((size_t)t->n * sizeof *types);
    size_t nm = t->merges.count;
    const lb__pair **m = malloc((nm ? nm : 1) * sizeof *m);
    char **ms = calloc(nm ? nm : 1, sizeof *ms);
    lb_status st = s && lens && types && m && ms ? LB_OK : lb__fail(LB_ERR_NOMEM, "out of memory (tokenizer)");
    for (uint32_t i = 0; st == LB_OK && i < t->n; i++) {
        s[i] = t->str_off[i] == SIZE_MAX ? "" : lb__tok_str(t, i);
        lens[i] = t->str_off[i] == SIZE_MAX ? 0 : t->str_len[i];
        types[i] = t->str_off[i] == SIZE_MAX ? 5 : 1; /* an id without a token: unused */
    }
    for (size_t i = 0; st == LB_OK && i < t->n_special; i++) types[t->special[i].id] = 3; /* control: matched in text */
    size_t n = 0;
    for (size_t i = 0; st == LB_OK && t->merges.slots && i <= t->merges.mask; i++)
        if (t->merges.slots[i].key) m[n++] = &t->merges.slots[i];
    if (st == LB_OK) qsort(m, n, sizeof *m, by_cost);
    for (size_t i = 0; st == LB_OK && i < n; i++) { /* "left right", by rank */
        uint64_t key = m[i]->key - 1;
        uint32_t a = (uint32_t)(key >> 32), b = (uint32_t)key;
        size_t la = t->str_len[a], lb = t->str_len[b];
        if (!(ms[i] = malloc(la + lb + 2))) st = lb__fail(LB_ERR_NOMEM, "out of memory (merges)");
        else memcpy(ms[i], lb__tok_str(t, a), la), ms[i][la] = ' ', memcpy(ms[i] + la + 1, lb__tok_str(t, b), lb),
             ms[i][la + lb + 1] = '\0';
    }
    const char *pre = t->split_digits == 1 ? "smollm" : "gpt2";
    if (st == LB_OK) st = lb__gguf_set_str(w, "tokenizer.ggml.model", "gpt2", 4);
    if (st == LB_OK) st = lb__gguf_set_str(w, "tokenizer.ggml.pre", pre, strlen(pre));
    if (st == LB_OK) st = lb__gguf_set_arr_str(w, "tokenizer.ggml.tokens", s, lens, t->n);
    if (st == LB_OK) st = lb__gguf_set_arr(w, "tokenizer.ggml.token_type", LB_GGUF_I32, types, t->n);
    if (st == LB_OK) st = lb__gguf_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)ms, NULL, n);
    if (st == LB_OK && t->bos >= 0) st = lb__gguf_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)t->bos);
    if (st == LB_OK && t->eos >= 0) st = lb__gguf_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)t->eos);
    if (st == LB_OK) st = lb__gguf_set_bool(w, "tokenizer.ggml.add_bos_token", t->add_bos);
    for (size_t i = 0; ms && i < n; i++) free(ms[i]);
    free(s), free(lens), free(types), free(m), free(ms);
    return st;
}

/* GGUF token types: 1 normal, 2 unknown, 3 control, 6 byte. Every token
 * HF matches in text (added_tokens) is 3, as lowbit's GGUF reader then
 * matches it too. */
static void spm_types(const lb_tokenizer *t, int32_t *types)
{
    for (uint32_t i = 0; i < t->n; i++) types[i] = t->str_off[i] == SIZE_MAX ? 5 : 1;
    for (int b = 0; b < 256; b++) types[t->byte_id[b]] = 6;
    if (t->unk >= 0) types[t->unk] = 2;
    for (size_t i = 0; i < t->n_special; i++) types[t->special[i].id] = 3;
}

/* Scores that make the SentencePiece merge rule (lb__spm_build_merges)
 * merge as t's ranked merges do; LB_ERR_UNSUPPORTED when none can. */
static lb_status spm_scores(const lb_tokenizer *t, const char *what, float *scores)
{
    size_t n = 0;
    const lb__pair **m = malloc((t->merges.count ? t->merges.count : 1) * sizeof *m);
    unsigned char *done = calloc(t->n, 1); /* 1: the token's merges began, 2: and ended */
    lb_status st = m && done ? LB_OK : lb__fail(LB_ERR_NOMEM, "out of memory (tokenizer)");
    for (size_t i = 0; st == LB_OK && t->merges.slots && i <= t->merges.mask; i++)
        if (t->merges.slots[i].key) m[n++] = &t->merges.slots[i];
    if (st == LB_OK) qsort(m, n, sizeof *m, by_cost);
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

static lb_status spm_keys(const lb_tokenizer *t, const char *what, lb__gguf_writer *w)
{
    const char **s = malloc((size_t)t->n * sizeof *s);
    uint64_t *lens = malloc((size_t)t->n * sizeof *lens);
    int32_t *types = malloc((size_t)t->n * sizeof *types);
    float *scores = malloc((size_t)t->n * sizeof *scores);
    lb_status st = s && lens && types && scores ? LB_OK : lb__fail(LB_ERR_NOMEM, "out of memory (tokenizer)");
    if (st == LB_OK) st = spm_scores(t, what, scores);
    for (uint32_t i = 0; st == LB_OK && i < t->n; i++) {
        s[i] = t->str_off[i] == SIZE_MAX ? "" : lb__tok_str(t, i);
        lens[i] = t->str_off[i] == SIZE_MAX ? 0 : t->str_len[i];
    }
    if (st == LB_OK) spm_types(t, types);
    if (st == LB_OK) st = lb__gguf_set_str(w, "tokenizer.ggml.model", "llama", 5);
    if (st == LB_OK) st = lb__gguf_set_arr_str(w, "tokenizer.ggml.tokens", s, lens, t->n);
    if (st == LB_OK) st = lb__gguf_set_arr(w, "tokenizer.ggml.scores", LB_GGUF_F32, scores, t->n);
    if (st == LB_OK) st = lb__gguf_set_arr(w, "tokenizer.ggml.token_type", LB_GGUF_I32, types, t->n);
    if (st == LB_OK && t->bos >= 0) st = lb__gguf_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)t->bos);
    if (st == LB_OK && t->eos >= 0) st = lb__gguf_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)t->eos);
    if (st == LB_OK && t->unk >= 0) st = lb__gguf_set_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)t->unk);
    if (st == LB_OK) st = lb__gguf_set_bool(w, "tokenizer.ggml.add_bos_token", t->add_bos);
    if (st == LB_OK) st = lb__gguf_set_bool(w, "tokenizer.ggml.add_space_prefix", t->add_space_prefix);
    free(s), free(lens), free(types), free(scores);
    return st;
}

lb_status lb__hf_tokenizer_to_gguf(const char *src_dir, lb__gguf_writer *w)
{
    char *json = lb__path_join(src_dir, "tokenizer.json"), *cfg = lb__path_join(src_dir, "tokenizer_config.json");
    lb_status st = json && cfg ? LB_OK : lb__fail(LB_ERR_NOMEM, "out of memory");
    lb_tokenizer *t = NULL;
    if (st == LB_OK && access(json, R_OK) == 0) {
        st = lb_tokenizer_from_file(json, 0, &t);
        int spm = t && t->kind == LB__TOK_SPM;
        int sayable = spm || (t && t->kind == LB__TOK_BPE && t->pre == LB__PRE_GPT2 && t->split_digits != 2 &&
                              !t->add_prefix_space && !t->ignore_merges);
        if (st == LB_OK && spm) st = spm_keys(t, json, w);
        else if (st == LB_OK && sayable) st = keys(t, w);
        /* the chat template, when tokenizer_config.json has one as a string */
        lb__json *c = NULL;
        if (st == LB_OK && sayable && access(cfg, R_OK) == 0 &&
            (st = lb__json_read_file(cfg, LB_HF_TOKENIZER_MAX_BYTES, &c)) == LB_OK) {
            const char *tmpl = lb__json_str(c, "chat_template");
            if (tmpl) st = lb__gguf_set_str(w, "tokenizer.chat_template", tmpl, strlen(tmpl));
            lb__json_free(c);
        }
    }
    lb_tokenizer_free(t);
    free(json), free(cfg);
    return st;
}
