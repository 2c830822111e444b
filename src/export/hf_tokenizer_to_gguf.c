/* The other direction: a Hugging Face input's tokenizer.json (and the
 * chat template of tokenizer_config.json) as GGUF tokenizer.ggml.* keys,
 * so `convert DIR x.gguf` keeps the tokenizer. The file is read by
 * lowbit's own tokenizer.json loader (model/tokenizer_json.c: no new
 * parser), and only what lowbit's GGUF loader reads back identically is
 * written: byte-level BPE with the GPT-2 regex, alone ("gpt2") or after
 * individual digits ("smollm"). Anything else (SentencePiece-style files,
 * add_prefix_space, ignore_merges, digit runs) writes no tokenizer keys. */
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

lb_status lb__hf_tokenizer_to_gguf(const char *src_dir, lb__gguf_writer *w)
{
    char *json = lb__path_join(src_dir, "tokenizer.json"), *cfg = lb__path_join(src_dir, "tokenizer_config.json");
    lb_status st = json && cfg ? LB_OK : lb__fail(LB_ERR_NOMEM, "out of memory");
    lb_tokenizer *t = NULL;
    if (st == LB_OK && access(json, R_OK) == 0) {
        st = lb_tokenizer_from_file(json, 0, &t);
        int sayable = t && t->kind == LB__TOK_BPE && t->pre == LB__PRE_GPT2 && t->split_digits != 2 &&
                      !t->add_prefix_space && !t->ignore_merges;
        if (st == LB_OK && sayable) st = keys(t, w);
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
