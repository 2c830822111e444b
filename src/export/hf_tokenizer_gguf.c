/* tokenizer.json and friends from a GGUF's tokenizer.ggml.* metadata or
 * a llama2.c tokenizer file.
 *
 * The input is read by lowbit's own tokenizer loader first (model/
 * tokenizer.c), so the file written says exactly what lowbit tokenizes
 * with: the same vocabulary, merges (by rank), special tokens (token types
 * 3 control and 4 user-defined, matched in text before anything else),
 * pre-tokenizer and BOS rule. Byte-level BPE ("gpt2") is written as HF
 * tokenizers' BPE model with a ByteLevel pre-tokenizer (after
 * Digits(individual_digits) for the pre-tokenizers that isolate each
 * \p{N}: smollm, starcoder, ...) and a ByteLevel decoder.
 *
 * SentencePiece-style vocabularies (GGUF "llama", llama2.c tokenizer files)
 * are written as transformers' Llama converter writes them in its legacy
 * form (hf_tokenizer_spm.c says how, and what it refuses). As that converter
 * does, <unk>, <s> and </s> are added tokens: HF matches their text in the
 * input, where run.c (llama2.c files) and sentencepiece read it as text. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export/exporter.h"
#include "export/hf_tokenizer_internal.h"
#include "model/tokenizer_internal.h"
#include "util/error.h"

typedef struct synth {
    const lb__gguf_file *f; /* NULL: not from a GGUF */
    const char *what;
    const lb_tokenizer *t;
    int spm;                /* SentencePiece-style: the names and merges of hf */
    lb__hf_spm hf;
    lb__special *added;     /* tokenizer.json's added_tokens, by id */
    size_t n_added;
    char *buf; /* one NUL-terminated string at a time */
    size_t cap;
    int32_t pad, unk;       /* a byte-level GGUF's padding and unknown tokens (HF's BPE model has no unk) */
    unsigned char *special; /* id -> 1 control, 2 user-defined */
} synth;

/* A token's stored string as a C string for the JSON writer: JSON holds
 * UTF-8 text only, so an embedded NUL or an invalid sequence is refused. */
static lb_status cstr(synth *s, const char *p, size_t len, const char *whose, const char **out)
{
    if (len + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 256;
        while (cap < len + 1) cap *= 2;
        char *b = realloc(s->buf, cap);
        if (!b) return lb__fail(LB_ERR_NOMEM, "out of memory");
        s->buf = b, s->cap = cap;
    }
    const unsigned char *u = (const unsigned char *)p, *end = u + len;
    while (u < end) {
        int n;
        if (*u == 0 || lb__utf8_decode(u, end, &n) < 0)
            return lb__fail(LB_ERR_UNSUPPORTED, "%s: %s is not UTF-8 text (byte %zu = 0x%02X); tokenizer.json "
                            "cannot hold it", s->what, whose, (size_t)(u - (const unsigned char *)p), *u);
        u += n;
    }
    memcpy(s->buf, p, len);
    s->buf[len] = '\0';
    *out = s->buf;
    return LB_OK;
}

static lb_status tok_cstr(synth *s, int32_t id, const char **out)
{
    char whose[48];
    snprintf(whose, sizeof whose, "token %d", id);
    if (s->spm) return cstr(s, s->hf.names[id], strlen(s->hf.names[id]), whose, out);
    return cstr(s, lb__tok_str(s->t, (uint32_t)id), s->t->str_len[id], whose, out);
}

/* "<|im_start|>": a token's content as a JSON string value. */
static lb_status put_tok(synth *s, lb__jsonw *w, int32_t id)
{
    const char *c;
    lb_status st = tok_cstr(s, id, &c);
    if (st == LB_OK) lb__jsonw_str(w, c);
    return st;
}

/* ----- tokenizer.json ----- */

static lb_status added_token(synth *s, lb__jsonw *w, const lb__special *sp, int with_id)
{
    lb__jsonw_object(w);
    if (with_id) lb__jsonw_key(w, "id"), lb__jsonw_int(w, sp->id);
    lb__jsonw_key(w, "content");
    lb_status st = put_tok(s, w, sp->id);
    lb__jsonw_key(w, "single_word"), lb__jsonw_bool(w, 0);
    lb__jsonw_key(w, "lstrip"), lb__jsonw_bool(w, sp->lstrip);
    lb__jsonw_key(w, "rstrip"), lb__jsonw_bool(w, sp->rstrip);
    lb__jsonw_key(w, "normalized"), lb__jsonw_bool(w, 0);
    lb__jsonw_key(w, "special"), lb__jsonw_bool(w, s->special[sp->id] == 1);
    lb__jsonw_end(w);
    return st;
}

static int by_id(const void *a, const void *b)
{
    const lb__special *x = a, *y = b;
    return (x->id > y->id) - (x->id < y->id);
}

static int by_cost(const void *a, const void *b)
{
    const lb__pair *x = *(const lb__pair *const *)a, *y = *(const lb__pair *const *)b;
    return (x->cost > y->cost) - (x->cost < y->cost);
}

static void byte_level(lb__jsonw *w, int add_prefix_space, int trim_offsets)
{
    lb__jsonw_object(w);
    lb__jsonw_key(w, "type"), lb__jsonw_str(w, "ByteLevel");
    lb__jsonw_key(w, "add_prefix_space"), lb__jsonw_bool(w, add_prefix_space);
    lb__jsonw_key(w, "trim_offsets"), lb__jsonw_bool(w, trim_offsets);
    lb__jsonw_key(w, "use_regex"), lb__jsonw_bool(w, 1);
    lb__jsonw_end(w);
}

static lb_status post_processor(synth *s, lb__jsonw *w)
{
    const lb_tokenizer *t = s->t;
    if (!(t->add_bos && t->bos >= 0)) {
        if (s->spm) lb__jsonw_null(w);
        else byte_level(w, 1, 0); /* what HF's own gpt2-style files carry: adds nothing */
        return LB_OK;
    }
    /* texts start with BOS (tokenizer.ggml.add_bos_token) */
    const char *names[] = {"single", "pair"};
    lb__jsonw_object(w);
    lb__jsonw_key(w, "type"), lb__jsonw_str(w, "TemplateProcessing");
    lb_status st = LB_OK;
    for (int k = 0; k < 2; k++) {
        lb__jsonw_key(w, names[k]);
        lb__jsonw_array(w);
        for (int seq = 0; seq <= k; seq++) {
            lb__jsonw_object(w), lb__jsonw_key(w, "SpecialToken"), lb__jsonw_object(w);
            lb__jsonw_key(w, "id"), st = st == LB_OK ? put_tok(s, w, t->bos) : st;
            lb__jsonw_key(w, "type_id"), lb__jsonw_int(w, seq);
            lb__jsonw_end(w), lb__jsonw_end(w);
            lb__jsonw_object(w), lb__jsonw_key(w, "Sequence"), lb__jsonw_object(w);
            lb__jsonw_key(w, "id"), lb__jsonw_str(w, seq ? "B" : "A");
            lb__jsonw_key(w, "type_id"), lb__jsonw_int(w, seq);
            lb__jsonw_end(w), lb__jsonw_end(w);
        }
        lb__jsonw_end(w);
    }
    const char *bos;
    if (st == LB_OK) st = tok_cstr(s, t->bos, &bos);
    if (st != LB_OK) return st;
    char *b = strdup(bos);
    if (!b) return lb__fail(LB_ERR_NOMEM, "out of memory");
    lb__jsonw_key(w, "special_tokens"), lb__jsonw_object(w), lb__jsonw_key(w, b), lb__jsonw_object(w);
    lb__jsonw_key(w, "id"), lb__jsonw_str(w, b);
    lb__jsonw_key(w, "ids"), lb__jsonw_array(w), lb__jsonw_int(w, t->bos), lb__jsonw_end(w);
    lb__jsonw_key(w, "tokens"), lb__jsonw_array(w), lb__jsonw_str(w, b), lb__jsonw_end(w);
    lb__jsonw_end(w), lb__jsonw_end(w), lb__jsonw_end(w);
    free(b);
    return LB_OK;
}

static lb_status model_bpe(synth *s, lb__jsonw *w)
{
    const lb_tokenizer *t = s->t;
    lb__jsonw_object(w);
    lb__jsonw_key(w, "type"), lb__jsonw_str(w, "BPE");
    lb__jsonw_key(w, "dropout"), lb__jsonw_null(w);
    lb_status st = LB_OK;
    lb__jsonw_key(w, "unk_token");
    if (s->spm && t->unk >= 0) st = put_tok(s, w, t->unk);
    else lb__jsonw_null(w); /* byte-level: a byte the vocabulary lacks is dropped, as lowbit does */
    lb__jsonw_key(w, "continuing_subword_prefix"), lb__jsonw_null(w);
    lb__jsonw_key(w, "end_of_word_suffix"), lb__jsonw_null(w);
    /* SentencePiece: every byte has its <0xNN> token (lb__hf_spm_prepare), so no <unk> is ever written */
    lb__jsonw_key(w, "fuse_unk"), lb__jsonw_bool(w, s->spm);
    lb__jsonw_key(w, "byte_fallback"), lb__jsonw_bool(w, s->spm);
    lb__jsonw_key(w, "ignore_merges"), lb__jsonw_bool(w, t->ignore_merges);
    lb__jsonw_key(w, "vocab");
    lb__jsonw_object(w);
    for (uint32_t id = 0; id < t->n && st == LB_OK; id++) {
        if (t->str_off[id] == SIZE_MAX) continue;
        /* a string that repeats maps to its first id (lowbit's rule); JSON keys are unique */
        if (lb__strmap_get(t, lb__tok_str(t, id), t->str_len[id]) != (int32_t)id) continue;
        const char *c;
        if ((st = tok_cstr(s, (int32_t)id, &c)) == LB_OK) lb__jsonw_key(w, c), lb__jsonw_int(w, id);
    }
    lb__jsonw_end(w);
    /* merges by rank, each a pair of strings (tokenizers >= 0.20) */
    const lb__pair **m = malloc((t->merges.count ? t->merges.count : 1) * sizeof *m);
    if (!m) return lb__fail(LB_ERR_NOMEM, "out of memory (%zu merges)", t->merges.count);
    size_t n = 0;
    if (s->spm) { /* in the order hf_tokenizer_spm.c derived from the scores */
        n = s->hf.n_merges;
        if (n) memcpy(m, s->hf.merges, n * sizeof *m);
    } else {
        for (size_t i = 0; t->merges.slots && i <= t->merges.mask; i++)
            if (t->merges.slots[i].key) m[n++] = &t->merges.slots[i];
        qsort(m, n, sizeof *m, by_cost);
    }
    lb__jsonw_key(w, "merges");
    lb__jsonw_array(w);
    for (size_t i = 0; i < n && st == LB_OK; i++) {
        uint64_t key = m[i]->key - 1;
        lb__jsonw_array(w);
        st = put_tok(s, w, (int32_t)(key >> 32));
        if (st == LB_OK) st = put_tok(s, w, (int32_t)(uint32_t)key);
        lb__jsonw_end(w);
    }
    free(m);
    lb__jsonw_end(w);
    lb__jsonw_end(w);
    return st;
}

static lb_status tokenizer_json(synth *s, lb__jsonw *w)
{
    const lb_tokenizer *t = s->t;
    lb__jsonw_object(w);
    lb__jsonw_key(w, "version"), lb__jsonw_str(w, "1.0");
    lb__jsonw_key(w, "truncation"), lb__jsonw_null(w);
    lb__jsonw_key(w, "padding"), lb__jsonw_null(w);
    lb__jsonw_key(w, "added_tokens");
    lb__jsonw_array(w);
    lb_status st = LB_OK;
    for (size_t i = 0; i < s->n_added && st == LB_OK; i++) st = added_token(s, w, &s->added[i], 1);
    lb__jsonw_end(w);
    lb__jsonw_key(w, "normalizer");
    if (s->spm) lb__hf_spm_normalizer(w, t->add_space_prefix);
    else lb__jsonw_null(w);
    lb__jsonw_key(w, "pre_tokenizer");
    if (s->spm) {
        lb__jsonw_null(w);
    } else if (t->split_digits) {
        lb__jsonw_object(w);
        lb__jsonw_key(w, "type"), lb__jsonw_str(w, "Sequence");
        lb__jsonw_key(w, "pretokenizers"), lb__jsonw_array(w);
        lb__jsonw_object(w);
        lb__jsonw_key(w, "type"), lb__jsonw_str(w, "Digits");
        lb__jsonw_key(w, "individual_digits"), lb__jsonw_bool(w, t->split_digits == 1);
        lb__jsonw_end(w);
        byte_level(w, t->add_prefix_space, 1);
        lb__jsonw_end(w), lb__jsonw_end(w);
    } else {
        byte_level(w, t->add_prefix_space, 1);
    }
    lb__jsonw_key(w, "post_processor");
    if (st == LB_OK) st = post_processor(s, w);
    lb__jsonw_key(w, "decoder");
    if (s->spm) lb__hf_spm_decoder(w, t->add_space_prefix);
    else byte_level(w, 1, 1);
    lb__jsonw_key(w, "model");
    if (st == LB_OK) st = model_bpe(s, w);
    lb__jsonw_end(w);
    return st;
}

/* ----- tokenizer_config.json, special_tokens_map.json, generation_config.json ----- */

static lb_status named_tokens(synth *s, lb__jsonw *w)
{
    const char *keys[] = {"bos_token", "eos_token", "unk_token", "pad_token"};
    int32_t ids[] = {s->t->bos, s->t->eos, s->unk, s->pad};
    lb_status st = LB_OK;
    for (int k = 0; k < 4 && st == LB_OK; k++)
        if (ids[k] >= 0) lb__jsonw_key(w, keys[k]), st = put_tok(s, w, ids[k]);
    return st;
}

static lb_status tokenizer_config(synth *s, lb__jsonw *w)
{
    const lb_tokenizer *t = s->t;
    lb__jsonw_object(w);
    lb__jsonw_key(w, "tokenizer_class"), lb__jsonw_str(w, "PreTrainedTokenizerFast");
    lb__jsonw_key(w, "add_bos_token"), lb__jsonw_bool(w, lb_tokenizer_add_bos(t));
    lb__jsonw_key(w, "add_eos_token"), lb__jsonw_bool(w, 0);
    lb__jsonw_key(w, "clean_up_tokenization_spaces"), lb__jsonw_bool(w, 0);
    /* a GGUF that says add_space_prefix: the ByteLevel flag of the tokenizer.json written beside (as HF's own
     * SmolLM2 files say it; a GGUF written back carries it again) */
    int aps;
    if (!s->spm && s->f && lb__gguf_get_bool(s->f, "tokenizer.ggml.add_space_prefix", &aps))
        lb__jsonw_key(w, "add_prefix_space"), lb__jsonw_bool(w, t->add_prefix_space);
    lb_status st = named_tokens(s, w);
    lb__jsonw_key(w, "added_tokens_decoder");
    lb__jsonw_object(w);
    for (size_t i = 0; i < s->n_added && st == LB_OK; i++) {
        char id[16];
        snprintf(id, sizeof id, "%d", s->added[i].id);
        lb__jsonw_key(w, id);
        st = added_token(s, w, &s->added[i], 0);
    }
    lb__jsonw_end(w);
    const char *arch, *tmpl;
    uint64_t arch_len, tmpl_len;
    if (s->f && lb__gguf_get_str(s->f, "general.architecture", &arch, &arch_len) && arch_len < 64) {
        char key[96];
        uint64_t ctx;
        snprintf(key, sizeof key, "%.*s.context_length", (int)arch_len, arch);
        if (lb__gguf_get_u64(s->f, key, &ctx)) lb__jsonw_key(w, "model_max_length"), lb__jsonw_int(w, (long long)ctx);
    }
    if (st == LB_OK && s->f && lb__gguf_get_str(s->f, "tokenizer.chat_template", &tmpl, &tmpl_len)) {
        const char *c;
        if ((st = cstr(s, tmpl, tmpl_len, "tokenizer.chat_template", &c)) == LB_OK)
            lb__jsonw_key(w, "chat_template"), lb__jsonw_str(w, c);
    }
    lb__jsonw_end(w);
    return st;
}

static lb_status special_tokens_map(synth *s, lb__jsonw *w)
{
    lb__jsonw_object(w);
    lb_status st = named_tokens(s, w);
    lb__jsonw_end(w);
    return st;
}

static lb_status generation_config(synth *s, lb__jsonw *w)
{
    lb__jsonw_object(w);
    if (s->t->bos >= 0) lb__jsonw_key(w, "bos_token_id"), lb__jsonw_int(w, s->t->bos);
    if (s->t->eos >= 0) lb__jsonw_key(w, "eos_token_id"), lb__jsonw_int(w, s->t->eos);
    if (s->pad >= 0) lb__jsonw_key(w, "pad_token_id"), lb__jsonw_int(w, s->pad);
    lb__jsonw_end(w);
    return LB_OK;
}

typedef lb_status (*file_fn)(synth *s, lb__jsonw *w);

static lb_status write_json(synth *s, const char *dir, const char *name, file_fn fn)
{
    lb__jsonw *w = lb__jsonw_new();
    if (!w) return lb__fail(LB_ERR_NOMEM, "out of memory");
    lb_status st = fn(s, w);
    if (st == LB_OK) st = lb__jsonw_status(w);
    if (st == LB_OK) {
        size_t len;
        const char *text = lb__jsonw_text(w, &len);
        st = lb__hf_write_file(dir, name, text, len);
    }
    lb__jsonw_free(w);
    return st;
}

/* The added tokens: the tokenizer's special tokens and, for SentencePiece
 * (as HF's Llama converter adds them), <unk>, <s> and </s>. */
static lb_status added_list(synth *s)
{
    const lb_tokenizer *t = s->t;
    if (!(s->special = calloc(t->n, 1)) || !(s->added = malloc((t->n_special + 3) * sizeof *s->added)))
        return lb__fail(LB_ERR_NOMEM, "out of memory");
    const lb__gguf_kv *types = s->f ? lb__gguf_find(s->f, "tokenizer.ggml.token_type") : NULL;
    for (size_t i = 0; i < t->n_special; i++) {
        int64_t type = 3;
        if (types) lb__gguf_arr_i64(types, (uint64_t)t->special[i].id, &type);
        s->special[t->special[i].id] = type == 3 ? 1 : 2;
        s->added[s->n_added++] = t->special[i];
    }
    int32_t named[] = {t->unk, t->bos, t->eos};
    for (int k = 0; s->spm && k < 3; k++) {
        int32_t id = named[k];
        if (id < 0 || s->special[id] || t->str_off[id] == SIZE_MAX) continue;
        s->special[id] = 1;
        s->added[s->n_added++] = (lb__special){id, t->str_len[id], NULL, 0, 0};
    }
    qsort(s->added, s->n_added, sizeof *s->added, by_id);
    return LB_OK;
}

lb_status lb__hf_tokenizer_from_tok(const lb_tokenizer *t, const lb__gguf_file *f, const char *what, const char *dir,
                                    int *written)
{
    synth s = {.f = f, .what = what, .t = t, .pad = -1, .unk = t->unk, .spm = t->kind == LB__TOK_SPM};
    lb_status st = s.spm ? lb__hf_spm_prepare(t, what, &s.hf) : LB_OK;
    int64_t pad;
    if (st == LB_OK && f && lb__gguf_get_i64(f, "tokenizer.ggml.padding_token_id", &pad) && pad >= 0 && pad < t->n)
        s.pad = (int32_t)pad;
    /* named in tokenizer_config.json only, so that a GGUF written back carries it (it changes no ids) */
    if (st == LB_OK && !s.spm && f && lb__gguf_get_i64(f, "tokenizer.ggml.unknown_token_id", &pad) && pad >= 0 &&
        pad < t->n)
        s.unk = (int32_t)pad;
    if (st == LB_OK) st = added_list(&s);
    static const struct { const char *name; file_fn fn; } files[] = {
        {"tokenizer.json", tokenizer_json},
        {"tokenizer_config.json", tokenizer_config},
        {"special_tokens_map.json", special_tokens_map},
        {"generation_config.json", generation_config},
    };
    for (size_t i = 0; st == LB_OK && i < sizeof files / sizeof *files; i++) {
        st = write_json(&s, dir, files[i].name, files[i].fn);
        if (st == LB_OK) (*written)++;
    }
    free(s.special), free(s.buf), free(s.added);
    if (s.spm) lb__hf_spm_free(&s.hf, t->n);
    return st;
}

lb_status lb__hf_tokenizer_from_gguf(const lb__gguf_file *f, const char *what, const char *dir, int *written)
{
    if (!lb__gguf_find(f, "tokenizer.ggml.model")) return LB_OK; /* no tokenizer */
    lb_tokenizer t = {0};
    lb_status st = lb__tok_load_gguf(f, what, &t);
    if (st == LB_OK) st = lb__hf_tokenizer_from_tok(&t, f, what, dir, written);
    lb__tok_destroy(&t);
    return st;
}
