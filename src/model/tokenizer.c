/* Tokenizers: the public API, the common tables, the GGUF and llama2.c
 * loaders, and special tokens.
 *
 * Two algorithms cover the supported files: GPT-2 style byte-level BPE
 * (GGUF tokenizer.ggml.model "gpt2", tokenizer.json BPE with a ByteLevel
 * pre-tokenizer; tokenizer_bpe.c) and SentencePiece-style BPE by scores
 * (llama2.c tokenizer files, GGUF "llama"; tokenizer_spm.c). Special tokens
 * (GGUF token types 3 control and 4 user-defined, tokenizer.json
 * added_tokens) are cut out of the text first, leftmost-longest as HF
 * tokenizers matches them; llama2.c files have none. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/model_internal.h"
#include "model/tokenizer_internal.h"
#include "util/error.h"

#define U2581 "\xE2\x96\x81"

/* ===== Common tables ===== */

lb_status lb__tok_alloc(lb_tokenizer *t, uint32_t n)
{
    t->n = n;
    t->bos = t->eos = t->unk = -1;
    t->str_off = malloc((size_t)n * sizeof *t->str_off);
    t->str_len = calloc(n, sizeof *t->str_len);
    t->text_off = malloc((size_t)n * sizeof *t->text_off);
    t->text_len = calloc(n, sizeof *t->text_len);
    if (!t->str_off || !t->str_len || !t->text_off || !t->text_len)
        return lb__fail(LB_ERR_NOMEM, "tokenizer: out of memory (%u tokens)", n);
    for (uint32_t i = 0; i < n; i++) t->str_off[i] = t->text_off[i] = SIZE_MAX;
    for (int b = 0; b < 256; b++) t->byte_id[b] = -1;
    return LB_OK;
}

lb_status lb__tok_store(lb_tokenizer *t, const char *s, size_t len, size_t *off)
{
    if (len > UINT32_MAX - 1) return lb__fail(LB_ERR_PARSE, "tokenizer: a token of %zu bytes", len);
    if (t->arena_cap - t->arena_len < len + 1) {
        size_t cap = t->arena_cap ? t->arena_cap : 1 << 16;
        while (cap - t->arena_len < len + 1) cap *= 2;
        char *a = realloc(t->arena, cap);
        if (!a) return lb__fail(LB_ERR_NOMEM, "tokenizer: out of memory (%zu bytes of token strings)", cap);
        t->arena = a, t->arena_cap = cap;
    }
    if (len) memcpy(t->arena + t->arena_len, s, len);
    t->arena[t->arena_len + len] = '\0';
    *off = t->arena_len;
    t->arena_len += len + 1;
    return LB_OK;
}

lb_status lb__tok_set(lb_tokenizer *t, uint32_t id, const char *s, size_t len)
{
    lb_status st = lb__tok_store(t, s, len, &t->str_off[id]);
    if (st == LB_OK) t->str_len[id] = (uint32_t)len;
    return st;
}

/* How token id reads in text. Byte-level BPE: decoded from the GPT-2
 * alphabet (a special token, or a string outside the alphabet, as it is
 * stored). SentencePiece: <0xNN> is the byte, U+2581 a space. */
static lb_status token_text(lb_tokenizer *t, uint32_t id, const unsigned char *special)
{
    if (t->str_off[id] == SIZE_MAX) return lb__tok_store(t, "", 0, &t->text_off[id]);
    size_t len = t->str_len[id];
    char *buf = malloc(len + 1), *s = buf;
    if (!buf) return lb__fail(LB_ERR_NOMEM, "tokenizer: out of memory");
    memcpy(buf, lb__tok_str(t, id), len + 1); /* the arena may move while storing */
    size_t out = len;
    char *dec = malloc(len + 1);
    if (!dec) {
        free(buf);
        return lb__fail(LB_ERR_NOMEM, "tokenizer: out of memory");
    }
    unsigned v;
    char tail;
    if (t->kind == LB__TOK_BPE) {
        if (!special[id] && lb__bpe_decode_alphabet(s, len, dec, &out)) s = dec;
        else out = len;
    } else if (len == 6 && sscanf(s, "<0x%2X>%c", &v, &tail) == 1 && s[5] == '>') {
        dec[0] = (char)v, out = 1, s = dec;
    } else if (t->space_is_u2581) {
        out = 0;
        for (size_t i = 0; i < len;)
            if (len - i >= 3 && memcmp(s + i, U2581, 3) == 0) dec[out++] = ' ', i += 3;
            else dec[out++] = s[i++];
        s = dec;
    }
    lb_status st = lb__tok_store(t, s, out, &t->text_off[id]);
    if (st == LB_OK) t->text_len[id] = (uint32_t)out;
    free(buf), free(dec);
    return st;
}

lb_status lb__tok_finish(lb_tokenizer *t, const char *what)
{
    (void)what;
    lb_status st = lb__strmap_build(t);
    if (st != LB_OK) return st;
    unsigned char *special = calloc(t->n ? t->n : 1, 1);
    if (!special) return lb__fail(LB_ERR_NOMEM, "tokenizer: out of memory");
    for (size_t i = 0; i < t->n_special; i++) special[t->special[i].id] = 1;
    for (uint32_t id = 0; id < t->n && st == LB_OK; id++) st = token_text(t, id, special);
    free(special);
    for (int b = 0; b < 256; b++) {
        char s[8];
        int n;
        if (t->kind == LB__TOK_BPE) {
            uint32_t cp = lb__bpe_byte_cp((unsigned)b);
            if (cp < 0x80) s[0] = (char)cp, n = 1;
            else s[0] = (char)(0xC0 | cp >> 6), s[1] = (char)(0x80 | (cp & 0x3F)), n = 2;
        } else {
            n = snprintf(s, sizeof s, "<0x%02X>", b);
        }
        t->byte_id[b] = lb__strmap_get(t, s, (size_t)n);
    }
    return st;
}

lb_status lb__tok_add_special(lb_tokenizer *t, int32_t id, int lstrip, int rstrip)
{
    if (id < 0 || (uint32_t)id >= t->n || t->str_off[id] == SIZE_MAX || t->str_len[id] == 0) return LB_OK;
    for (size_t i = 0; i < t->n_special; i++)
        if (t->special[i].id == id) return LB_OK;
    lb__special *s = realloc(t->special, (t->n_special + 1) * sizeof *s);
    if (!s) return lb__fail(LB_ERR_NOMEM, "tokenizer: out of memory (special tokens)");
    t->special = s;
    s[t->n_special++] = (lb__special){id, t->str_len[id], NULL, lstrip, rstrip};
    return LB_OK;
}

static int longer_first(const void *a, const void *b)
{
    const lb__special *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

void lb__tok_specials_done(lb_tokenizer *t)
{
    if (t->n_special) qsort(t->special, t->n_special, sizeof *t->special, longer_first);
    memset(t->special_first, 0, sizeof t->special_first);
    for (size_t i = 0; i < t->n_special; i++) {
        t->special[i].text = lb__tok_str(t, (uint32_t)t->special[i].id);
        t->special_first[(unsigned char)t->special[i].text[0]] = 1;
    }
}

void lb__tok_destroy(lb_tokenizer *t)
{
    free(t->arena), free(t->str_off), free(t->str_len), free(t->text_off), free(t->text_len);
    free(t->scores), free(t->vocab.slots), free(t->merges.slots), free(t->special), free(t->source);
    memset(t, 0, sizeof *t);
}

/* ===== GGUF ===== */

static lb_status gguf_id(const lb__gguf_file *f, const char *key, const char *what, uint32_t n, int32_t *out)
{
    const lb__gguf_kv *kv = lb__gguf_find(f, key);
    if (!kv) return LB_OK;
    int64_t v;
    if (!lb__gguf_get_i64(f, key, &v)) return lb__fail(LB_ERR_PARSE, "%s: %s is not an integer", what, key);
    if (v == -1) return LB_OK; /* some converters write -1 for "none" */
    if (v < 0 || (uint64_t)v >= n)
        return lb__fail(LB_ERR_PARSE, "%s: %s = %lld is not a token id (the vocabulary has %u)", what, key,
                        (long long)v, n);
    *out = (int32_t)v;
    return LB_OK;
}

static lb_status gguf_array(const lb__gguf_file *f, const char *key, const char *what, int strings, uint64_t n,
                            const lb__gguf_kv **out)
{
    const lb__gguf_kv *kv = lb__gguf_find(f, key);
    *out = kv;
    if (!kv) return LB_OK;
    if (kv->type != LB_GGUF_ARRAY || (strings != (kv->arr_type == LB_GGUF_STRING)))
        return lb__fail(LB_ERR_PARSE, "%s: %s is not an array of %s", what, key, strings ? "strings" : "numbers");
    if (n && kv->n != n)
        return lb__fail(LB_ERR_PARSE, "%s: %s has %llu elements, tokenizer.ggml.tokens %llu", what, key,
                        (unsigned long long)kv->n, (unsigned long long)n);
    return LB_OK;
}

/* Pre-tokenizers by llama.cpp's tokenizer.ggml.pre names: those that are
 * the GPT-2 regex alone ("gpt2": lowbit's own older files, which llama.cpp
 * refuses), and those that first isolate each \p{N}. Not "default", nor a
 * missing name: llama.cpp then runs other regexes (punctuation runs, digit
 * runs and triples split first). */
static const char *const pre_gpt2[] = {"gpt2", "gpt-2", NULL};
static const char *const pre_digits[] = {"smollm", "starcoder", "refact", "command-r", "codeshell", NULL};

static int in_list(const char *const *list, const char *s, size_t len)
{
    for (; *list; list++)
        if (strlen(*list) == len && memcmp(*list, s, len) == 0) return 1;
    return 0;
}

static lb_status gguf_bpe(const lb__gguf_file *f, const char *what, lb_tokenizer *t)
{
    const char *pre = "default";
    uint64_t pre_len = 7;
    if (lb__gguf_find(f, "tokenizer.ggml.pre") && !lb__gguf_get_str(f, "tokenizer.ggml.pre", &pre, &pre_len))
        return lb__fail(LB_ERR_PARSE, "%s: tokenizer.ggml.pre is not a string", what);
    if (in_list(pre_digits, pre, pre_len)) t->split_digits = 1;
    else if (!in_list(pre_gpt2, pre, pre_len))
        return lb__fail(LB_ERR_UNSUPPORTED,
                        "%s: pre-tokenizer tokenizer.ggml.pre = '%.*s' (absent: 'default') is not supported (supported: "
                        "gpt-2, gpt2, smollm, starcoder, refact, command-r, codeshell)", what, (int)pre_len, pre);
    t->pre = LB__PRE_GPT2;
    const lb__gguf_kv *merges;
    lb_status st = gguf_array(f, "tokenizer.ggml.merges", what, 1, 0, &merges);
    if (st != LB_OK) return st;
    if (!merges) return lb__fail(LB_ERR_PARSE, "%s: a gpt2 tokenizer without tokenizer.ggml.merges", what);
    for (uint64_t i = 0; i < merges->n; i++) {
        const char *s;
        uint64_t len;
        lb__gguf_arr_str(merges, i, &s, &len);
        /* the two halves split at a space after the first byte (neither half is empty) */
        const char *sp = len > 1 ? memchr(s + 1, ' ', len - 1) : NULL;
        if (!sp)
            return lb__fail(LB_ERR_PARSE, "%s: tokenizer.ggml.merges[%llu] '%.*s' is not two tokens and a space", what,
                            (unsigned long long)i, (int)(len > 200 ? 200 : len), s);
        size_t a = (size_t)(sp - s);
        st = lb__bpe_add_merge(t, s, a, sp + 1, len - a - 1, (uint32_t)i, what);
        if (st != LB_OK) return st;
    }
    return LB_OK;
}

static lb_status load_gguf(const lb__gguf_file *f, const char *what, lb_tokenizer *t)
{
    const char *model;
    uint64_t model_len;
    if (!lb__gguf_get_str(f, "tokenizer.ggml.model", &model, &model_len))
        return lb__fail(LB_ERR_PARSE, "%s: no tokenizer.ggml.model string: the file carries no tokenizer", what);
    if (model_len == 4 && memcmp(model, "gpt2", 4) == 0) t->kind = LB__TOK_BPE;
    else if (model_len == 5 && memcmp(model, "llama", 5) == 0) t->kind = LB__TOK_SPM;
    else
        return lb__fail(LB_ERR_UNSUPPORTED, "%s: tokenizer.ggml.model = '%.*s' is not supported (gpt2, llama)", what,
                        (int)model_len, model);
    const lb__gguf_kv *tokens, *types, *scores = NULL;
    lb_status st = gguf_array(f, "tokenizer.ggml.tokens", what, 1, 0, &tokens);
    if (st != LB_OK) return st;
    if (!tokens || tokens->n == 0 || tokens->n > INT32_MAX)
        return lb__fail(LB_ERR_PARSE, "%s: tokenizer.ggml.tokens is missing or holds %llu tokens", what,
                        tokens ? (unsigned long long)tokens->n : 0ull);
    uint32_t n = (uint32_t)tokens->n;
    if ((st = gguf_array(f, "tokenizer.ggml.token_type", what, 0, n, &types)) != LB_OK) return st;
    if (t->kind == LB__TOK_SPM) {
        if ((st = gguf_array(f, "tokenizer.ggml.scores", what, 0, n, &scores)) != LB_OK) return st;
        if (!scores) return lb__fail(LB_ERR_PARSE, "%s: a llama tokenizer without tokenizer.ggml.scores", what);
    }
    if ((st = lb__tok_alloc(t, n)) != LB_OK) return st;
    if (scores && !(t->scores = malloc((size_t)n * sizeof *t->scores)))
        return lb__fail(LB_ERR_NOMEM, "%s: out of memory (%u scores)", what, n);
    for (uint32_t i = 0; i < n; i++) {
        const char *s;
        uint64_t len;
        lb__gguf_arr_str(tokens, i, &s, &len);
        if ((st = lb__tok_set(t, i, s, len)) != LB_OK) return st;
        double score;
        if (scores) {
            if (!lb__gguf_arr_f64(scores, i, &score))
                return lb__fail(LB_ERR_PARSE, "%s: tokenizer.ggml.scores[%u] is not a number", what, i);
            t->scores[i] = (float)score;
        }
        int64_t type;
        if (types && !lb__gguf_arr_i64(types, i, &type))
            return lb__fail(LB_ERR_PARSE, "%s: tokenizer.ggml.token_type[%u] is not an integer", what, i);
        if (types && (type == 3 || type == 4) && (st = lb__tok_add_special(t, (int32_t)i, 0, 0)) != LB_OK) return st;
    }
    if ((st = gguf_id(f, "tokenizer.ggml.bos_token_id", what, n, &t->bos)) != LB_OK) return st;
    if ((st = gguf_id(f, "tokenizer.ggml.eos_token_id", what, n, &t->eos)) != LB_OK) return st;
    if ((st = gguf_id(f, "tokenizer.ggml.unknown_token_id", what, n, &t->unk)) != LB_OK) return st;
    if (t->kind == LB__TOK_BPE) t->unk = -1; /* HF: a byte missing from the vocabulary is dropped */
    /* llama.cpp: SentencePiece vocabularies start texts with BOS, byte-level
     * BPE ones do not, unless the file says otherwise */
    int add_bos;
    t->add_bos = t->kind == LB__TOK_SPM;
    if (lb__gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &add_bos)) t->add_bos = add_bos;
    if (t->kind == LB__TOK_SPM) {
        t->space_is_u2581 = 1;
        t->add_space_prefix = 1;
        int flag;
        if (lb__gguf_get_bool(f, "tokenizer.ggml.add_space_prefix", &flag)) t->add_space_prefix = flag;
    }
    if ((st = lb__tok_finish(t, what)) != LB_OK) return st;
    lb__tok_specials_done(t);
    if (t->kind == LB__TOK_BPE) return gguf_bpe(f, what, t);
    return lb__spm_build_merges(t);
}

lb_status lb__tok_load_gguf(const lb__gguf_file *f, const char *what, lb_tokenizer *t)
{
    return load_gguf(f, what, t);
}

/* ===== llama2.c ===== */

static lb_status load_l2c(const uint8_t *buf, size_t len, uint32_t vocab_size, const char *what, lb_tokenizer *t)
{
    lb__l2c_vocab v;
    lb_status st = lb__l2c_vocab_parse(buf, len, vocab_size, what, &v);
    if (st != LB_OK) return st;
    t->kind = LB__TOK_SPM;
    st = lb__tok_alloc(t, v.n);
    if (st == LB_OK && !(t->scores = malloc((size_t)v.n * sizeof *t->scores)))
        st = lb__fail(LB_ERR_NOMEM, "%s: out of memory", what);
    for (uint32_t i = 0; i < v.n && st == LB_OK; i++) {
        st = lb__tok_set(t, i, v.tokens[i], v.lengths[i]);
        t->scores[i] = v.scores[i];
    }
    lb__l2c_vocab_free(&v);
    if (st != LB_OK) return st;
    /* run.c: <unk> 0, BOS 1, EOS 2 (sentencepiece's llama convention) */
    t->unk = 0;
    if (t->n > 1) t->bos = 1;
    if (t->n > 2) t->eos = 2;
    t->add_space_prefix = 1;
    t->add_bos = 1; /* run.c encodes with bos = 1 */
    if ((st = lb__tok_finish(t, what)) != LB_OK) return st;
    return lb__spm_build_merges(t);
}

/* ===== Public API ===== */

static lb_status finish_new(lb_tokenizer *t, lb_status st, lb_tokenizer **out)
{
    if (st != LB_OK) {
        lb__tok_destroy(t);
        free(t);
        return st;
    }
    *out = t;
    return LB_OK;
}

static int is_dir(const char *path)
{
    struct stat s;
    return stat(path, &s) == 0 && S_ISDIR(s.st_mode);
}

lb_status lb_tokenizer_from_file(const char *path, uint32_t vocab_size, lb_tokenizer **out)
{
    if (!out) return lb__fail(LB_ERR_ARG, "lb_tokenizer_from_file: out is NULL");
    *out = NULL;
    if (!path) return lb__fail(LB_ERR_ARG, "lb_tokenizer_from_file: path is NULL");
    if (is_dir(path)) {
        char *json = lb__path_join(path, "tokenizer.json");
        if (!json) return lb__fail(LB_ERR_NOMEM, "out of memory");
        lb_status st = lb_tokenizer_from_file(json, vocab_size, out);
        free(json);
        return st;
    }
    lb__mapped m;
    lb_status st = lb__map_file(path, &m);
    if (st != LB_OK) return st;
    lb_tokenizer *t = calloc(1, sizeof *t);
    if (!t) {
        lb__unmap_file(&m);
        return lb__fail(LB_ERR_NOMEM, "out of memory");
    }
    size_t i = 0;
    while (i < m.size && (m.data[i] == ' ' || m.data[i] == '\t' || m.data[i] == '\n' || m.data[i] == '\r')) i++;
    if (m.size >= 4 && memcmp(m.data, "GGUF", 4) == 0) {
        lb__gguf_file f;
        st = lb__gguf_parse(m.data, m.size, path, &f);
        if (st == LB_OK) st = load_gguf(&f, path, t);
        lb__gguf_close(&f);
    } else if (i < m.size && m.data[i] == '{') {
        st = lb__tok_load_json(path, t);
    } else if (vocab_size == 0) {
        st = lb__fail(LB_ERR_ARG, "%s: not JSON or GGUF, so a llama2.c tokenizer, whose vocabulary size the file "
                                  "does not say: pass vocab_size", path);
    } else {
        st = load_l2c(m.data, m.size, vocab_size, path, t);
    }
    lb__unmap_file(&m);
    if (st == LB_OK && !(t->source = strdup(path))) st = lb__fail(LB_ERR_NOMEM, "out of memory");
    return finish_new(t, st, out);
}

static int readable(const char *path)
{
    struct stat s;
    return stat(path, &s) == 0 && S_ISREG(s.st_mode);
}

static lb_status beside(const char *model_path, const char *name, uint32_t vocab, lb_tokenizer **out)
{
    char *dir = lb__path_dir(model_path), *p = dir ? lb__path_join(dir, name) : NULL;
    free(dir);
    if (!p) return lb__fail(LB_ERR_NOMEM, "out of memory");
    lb_status st = lb_tokenizer_from_file(p, vocab, out);
    free(p);
    return st;
}

lb_status lb_tokenizer_from_model(const lb_model *m, const char *model_path, lb_tokenizer **out)
{
    if (!out) return lb__fail(LB_ERR_ARG, "lb_tokenizer_from_model: out is NULL");
    *out = NULL;
    if (!m) return lb__fail(LB_ERR_ARG, "lb_tokenizer_from_model: model is NULL");
    lb_model_kind kind = lb_model_get_kind(m);
    if (kind == LB_MODEL_GGUF) {
        lb_tokenizer *t = calloc(1, sizeof *t);
        if (!t) return lb__fail(LB_ERR_NOMEM, "out of memory");
        return finish_new(t, load_gguf(&m->gguf, model_path ? model_path : "GGUF model", t), out);
    }
    if (!model_path) return lb__fail(LB_ERR_ARG, "lb_tokenizer_from_model: model_path is NULL (the tokenizer is a "
                                                 "file beside the model)");
    if (kind == LB_MODEL_HF_DIR) {
        char *p = lb__path_join(model_path, "tokenizer.json");
        if (!p) return lb__fail(LB_ERR_NOMEM, "out of memory");
        lb_status st = readable(p) ? lb_tokenizer_from_file(p, 0, out)
                                   : lb__fail(LB_ERR_IO, "%s: no tokenizer.json in the model directory", model_path);
        free(p);
        return st;
    }
    if (kind == LB_MODEL_SAFETENSORS) return beside(model_path, "tokenizer.json", 0, out);
    /* llama2.c: tokenizer.bin, else tok<vocab>.bin */
    uint32_t vocab = lb_model_arch(m)->vocab_size;
    char *dir = lb__path_dir(model_path), name[32];
    snprintf(name, sizeof name, "tok%u.bin", vocab);
    char *a = dir ? lb__path_join(dir, "tokenizer.bin") : NULL, *b = dir ? lb__path_join(dir, name) : NULL;
    lb_status st;
    if (!a || !b) st = lb__fail(LB_ERR_NOMEM, "out of memory");
    else if (readable(a)) st = lb_tokenizer_from_file(a, vocab, out);
    else if (readable(b)) st = lb_tokenizer_from_file(b, vocab, out);
    else st = lb__fail(LB_ERR_IO, "%s: no llama2.c tokenizer beside the model (looked for %s and %s)", model_path, a, b);
    free(dir), free(a), free(b);
    return st;
}

void lb_tokenizer_free(lb_tokenizer *t)
{
    if (!t) return;
    lb__tok_destroy(t);
    free(t);
}

uint32_t lb_tokenizer_vocab_size(const lb_tokenizer *t) { return t ? t->n : 0; }
const char *lb_tokenizer_source(const lb_tokenizer *t) { return t ? t->source : NULL; }
int32_t lb_tokenizer_bos(const lb_tokenizer *t) { return t ? t->bos : -1; }
int32_t lb_tokenizer_eos(const lb_tokenizer *t) { return t ? t->eos : -1; }
int lb_tokenizer_add_bos(const lb_tokenizer *t) { return t && t->add_bos && t->bos >= 0; }

lb_status lb_token_bytes(const lb_tokenizer *t, int32_t id, const char **bytes, size_t *len)
{
    if (!t || !bytes || !len) return lb__fail(LB_ERR_ARG, "lb_token_bytes: NULL argument");
    if (id < 0 || (uint32_t)id >= t->n)
        return lb__fail(LB_ERR_ARG, "lb_token_bytes: id %d is outside the vocabulary (0..%u)", id, t->n - 1);
    *bytes = t->arena + t->text_off[id];
    *len = t->text_len[id];
    return LB_OK;
}

static int ascii_space(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

static lb_status encode_text(const lb_tokenizer *t, const char *s, size_t len, int prefix, lb__ids *out,
                             lb__merge_scratch *sc)
{
    if (t->kind == LB__TOK_BPE) return lb__bpe_encode(t, s, len, out, sc);
    return lb__spm_encode(t, s, len, prefix, out, sc);
}

/* The text between special tokens goes to the model's encoder. A special
 * token's lstrip / rstrip swallow ASCII whitespace beside it. SentencePiece:
 * the first piece and each piece after a special token get the dummy
 * prefix (llama.cpp's rule). */
static lb_status tokenize(const lb_tokenizer *t, const char *text, size_t len, lb__ids *out, lb__merge_scratch *sc)
{
    size_t seg = 0, pos = 0;
    int prefix = 1;
    while (pos < len) {
        const lb__special *hit = NULL;
        if (t->special_first[(unsigned char)text[pos]])
            for (size_t k = 0; k < t->n_special && !hit; k++)
                if (t->special[k].len <= len - pos && memcmp(text + pos, t->special[k].text, t->special[k].len) == 0)
                    hit = &t->special[k];
        if (!hit) {
            pos++;
            continue;
        }
        size_t end = pos;
        if (hit->lstrip)
            while (end > seg && ascii_space((unsigned char)text[end - 1])) end--;
        lb_status st = encode_text(t, text + seg, end - seg, prefix, out, sc);
        if (st == LB_OK) st = lb__ids_push(out, hit->id);
        if (st != LB_OK) return st;
        pos += hit->len;
        if (hit->rstrip)
            while (pos < len && ascii_space((unsigned char)text[pos])) pos++;
        seg = pos;
        prefix = 1;
    }
    return encode_text(t, text + seg, len - seg, prefix, out, sc);
}

lb_status lb_tokenize(const lb_tokenizer *t, const char *text, size_t len, int add_bos, int32_t **ids, size_t *n)
{
    if (!ids || !n) return lb__fail(LB_ERR_ARG, "lb_tokenize: ids or n is NULL");
    *ids = NULL, *n = 0;
    if (!t) return lb__fail(LB_ERR_ARG, "lb_tokenize: tokenizer is NULL");
    if (!text && len) return lb__fail(LB_ERR_ARG, "lb_tokenize: text is NULL with length %zu", len);
    lb__ids out = {0};
    lb__merge_scratch sc = {0};
    lb_status st = LB_OK;
    if (add_bos && t->bos >= 0) st = lb__ids_push(&out, t->bos);
    if (st == LB_OK && len) st = tokenize(t, text, len, &out, &sc);
    if (st == LB_OK && !out.v) st = lb__ids_push(&out, 0), out.n = 0; /* a valid pointer even for no ids */
    lb__merge_scratch_free(&sc);
    if (st != LB_OK) {
        free(out.v);
        return st;
    }
    *ids = out.v, *n = out.n;
    return LB_OK;
}
