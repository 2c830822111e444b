/* What a Hugging Face directory says about its tokenizer beside the
 * vocabulary and merges, as GGUF keys: the token types of added tokens, the
 * special token ids, whether BOS/EOS/SEP are added, the chat template, and
 * how many ids the model's embedding has. Read the way llama.cpp's
 * converter reads it (gguf-py's SpecialVocab, convert_hf_to_gguf.py's
 * get_vocab_base), so both write the same values; where its reading would
 * tokenize differently from `tokenizers`, lowbit refuses instead (a
 * post-processor template it cannot say, an added token that strips
 * whitespace). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "export/hf_tokenizer_internal.h"
#include "io/json.h"
#include "util/error.h"
#include "util/file.h"

static const char *const special_names[LB__HF_N_SPECIAL] = {"bos", "eos", "unk", "sep", "pad", "mask"};
static const char *const special_keys[LB__HF_N_SPECIAL] = {
    "tokenizer.ggml.bos_token_id",        "tokenizer.ggml.eos_token_id",     "tokenizer.ggml.unknown_token_id",
    "tokenizer.ggml.seperator_token_id", "tokenizer.ggml.padding_token_id", "tokenizer.ggml.mask_token_id"};
enum { BOS, EOS, UNK, SEP, PAD, MASK };

static int is_true(const lb__json *v) { return v && v->type == LB_JSON_TRUE; }

/* A token named by a string or by an object's "content" (tokenizer_config's form). */
static const char *content_of(const lb__json *v)
{
    if (v && v->type == LB_JSON_OBJECT) v = lb__json_get(v, "content");
    return v && v->type == LB_JSON_STRING ? v->str : NULL;
}

/* The added token whose content is s (the first, as SpecialVocab takes it); NULL: none. */
static const lb__json *added_named(const lb__hf_meta *m, const char *s)
{
    const lb__json *added = lb__json_get(m->tok, "added_tokens");
    for (size_t i = 0; s && added && added->type == LB_JSON_ARRAY && i < added->len; i++) {
        const char *c = lb__json_str(&added->items[i], "content");
        if (c && strcmp(c, s) == 0) return &added->items[i];
    }
    return NULL;
}

static int32_t added_id(const lb__hf_meta *m, const char *s)
{
    uint64_t id;
    const lb__json *a = added_named(m, s);
    return a && lb__json_u64(lb__json_get(a, "id"), &id) && id < m->n_vocab ? (int32_t)id : -1;
}

/* The id of template entry e when it is a special token of one id; -1 otherwise. */
static int64_t template_token(const lb__json *p, const lb__json *e)
{
    const char *tok = lb__json_str(lb__json_get(e, "SpecialToken"), "id");
    const lb__json *ids = lb__json_get(lb__json_get(lb__json_get(p, "special_tokens"), tok ? tok : ""), "ids");
    uint64_t id;
    return tok && ids && ids->type == LB_JSON_ARRAY && ids->len == 1 && lb__json_u64(&ids->items[0], &id) &&
                   id < INT32_MAX ? (int64_t)id : -1;
}

/* add_sep as the converter reads the pair template: between A and B (what
 * the single template adds set aside), a separator that is the SEP or EOS
 * token. It changes no single text's ids (llama.cpp adds SEP only when
 * joining a pair, as for rerankers). */
static void template_sep(lb__hf_meta *m, const lb__json *p)
{
    const lb__json *pair = lb__json_get(p, "pair");
    size_t n = pair && pair->type == LB_JSON_ARRAY ? pair->len : 0, a = m->add[BOS] > 0, b = n - (m->add[EOS] > 0);
    if (n < 2 || b <= a + 1 || !lb__json_get(&pair->items[a], "Sequence") ||
        !lb__json_get(&pair->items[b - 1], "Sequence"))
        return;
    size_t mid = b - a - 2; /* entries between A and B */
    if (mid == 0) return;
    int64_t e0 = template_token(p, &pair->items[a + 1]), e1 = mid == 2 ? template_token(p, &pair->items[a + 2]) : -1;
    int sep0 = e0 >= 0 && (e0 == m->special[SEP] || e0 == m->special[EOS]);
    int sep1 = e1 >= 0 && (e1 == m->special[SEP] || e1 == m->special[EOS]);
    m->add[2] = (sep0 && m->add[EOS] <= 0) || sep1;
}

/* TemplateProcessing's single-sequence template: a special token before
 * the text is an added BOS, one after it an added EOS. GGUF can say only
 * those, with the tokenizer's own BOS/EOS. */
static lb_status template_processing(lb__hf_meta *m, const lb__json *p, const char *what)
{
    const lb__json *single = lb__json_get(p, "single");
    size_t n = single && single->type == LB_JSON_ARRAY ? single->len : 0, seq = n;
    for (size_t i = 0; i < n; i++)
        if (lb__json_get(&single->items[i], "Sequence")) seq = i;
    if (seq == n || seq > 1 || n - seq > 2)
        return lb__fail(LB_ERR_UNSUPPORTED, "%s: post_processor TemplateProcessing: the single template is not "
                        "[special] text [special]; GGUF cannot say it (no tokenizer written)", what);
    for (int side = 0; side < 2; side++) {
        size_t i = side ? seq + 1 : 0;
        int which = side ? EOS : BOS;
        if (side ? i >= n : seq == 0) {
            m->add[which] = 0;
            continue;
        }
        const char *tok = lb__json_str(lb__json_get(&single->items[i], "SpecialToken"), "id");
        int64_t id = template_token(p, &single->items[i]);
        if (id < 0)
            return lb__fail(LB_ERR_UNSUPPORTED, "%s: post_processor TemplateProcessing adds '%s', not one known token; "
                            "GGUF cannot say it (no tokenizer written)", what, tok ? tok : "?");
        if (m->special[which] < 0) m->special[which] = (int32_t)id;
        if (m->special[which] != (int32_t)id)
            return lb__fail(LB_ERR_UNSUPPORTED, "%s: post_processor TemplateProcessing adds '%s' (id %lld) %s the "
                            "text, but the %s token is id %d; GGUF adds only that one (no tokenizer written)", what,
                            tok, (long long)id, side ? "after" : "before", special_names[which], m->special[which]);
        m->add[which] = 1;
    }
    template_sep(m, p);
    return LB_OK;
}

static lb_status post_processor(lb__hf_meta *m, const lb__json *p, const char *what)
{
    const char *type = lb__json_str(p, "type");
    if (!p || p->type == LB_JSON_NULL) return LB_OK;
    if (type && strcmp(type, "ByteLevel") == 0) { /* offsets only: adds nothing */
        for (int k = BOS; k <= EOS; k++)
            if (m->add[k] < 0) m->add[k] = 0;
        return LB_OK;
    }
    if (type && strcmp(type, "TemplateProcessing") == 0) return template_processing(m, p, what);
    if (type && strcmp(type, "Sequence") == 0) {
        const lb__json *list = lb__json_get(p, "processors");
        lb_status st = LB_OK;
        for (size_t i = 0; st == LB_OK && list && list->type == LB_JSON_ARRAY && i < list->len; i++)
            st = post_processor(m, &list->items[i], what);
        return st;
    }
    return lb__fail(LB_ERR_UNSUPPORTED, "%s: post_processor %s is not supported (ByteLevel, TemplateProcessing); no "
                    "tokenizer written", what, type ? type : "?");
}

static lb_status read_json(const char *dir, const char *name, lb__json **out)
{
    char *path = lb__path_join(dir, name);
    lb_status st = path ? LB_OK : lb__fail(LB_ERR_NOMEM, "out of memory");
    if (st == LB_OK && access(path, R_OK) == 0) st = lb__json_read_file(path, LB_HF_TOKENIZER_MAX_BYTES, out);
    free(path);
    return st;
}

lb_status lb__hf_meta_read(const char *dir, const lb_tokenizer *t, const char *what, lb__hf_meta *m)
{
    memset(m, 0, sizeof *m);
    for (int k = 0; k < LB__HF_N_SPECIAL; k++) m->special[k] = -1;
    for (int k = 0; k < 3; k++) m->add[k] = -1;
    m->n_vocab = t->n;
    lb_status st = read_json(dir, "tokenizer.json", &m->tok);
    if (st == LB_OK) st = read_json(dir, "tokenizer_config.json", &m->cfg);
    if (st == LB_OK) st = read_json(dir, "config.json", &m->config);
    uint64_t v;
    /* ids the embedding has beyond the tokenizer's: written as unused [PAD<id>] tokens */
    if (st == LB_OK && lb__json_u64(lb__json_get(m->config, "vocab_size"), &v) && v > t->n && v < INT32_MAX)
        m->n_vocab = (uint32_t)v;
    /* fewer: llama.cpp would refuse the embedding's shape (and the converter refuses the directory) */
    if (st == LB_OK && lb__json_u64(lb__json_get(m->config, "vocab_size"), &v) && v < t->n)
        st = lb__fail(LB_ERR_UNSUPPORTED, "%s: %u token ids, but config.json's vocab_size is %llu; no tokenizer "
                      "written", what, t->n, (unsigned long long)v);
    /* an added token whose match swallows neighbouring whitespace: GGUF has no key for it */
    const lb__json *added = m->tok ? lb__json_get(m->tok, "added_tokens") : NULL;
    for (size_t i = 0; st == LB_OK && added && added->type == LB_JSON_ARRAY && i < added->len; i++)
        if (is_true(lb__json_get(&added->items[i], "lstrip")) || is_true(lb__json_get(&added->items[i], "rstrip")))
            st = lb__fail(LB_ERR_UNSUPPORTED, "%s: added token '%s' strips whitespace (lstrip/rstrip), which llama.cpp "
                          "does not read from GGUF; no tokenizer written", what,
                          lb__json_str(&added->items[i], "content") ? lb__json_str(&added->items[i], "content") : "?");
    /* tokenizer_config.json: <kind>_token names an added token (cls and sep stand in for missing bos and eos) */
    char key[32];
    for (int k = 0; st == LB_OK && m->cfg && k < LB__HF_N_SPECIAL; k++) {
        snprintf(key, sizeof key, "%s_token", special_names[k]);
        m->special[k] = added_id(m, content_of(lb__json_get(m->cfg, key)));
    }
    if (m->cfg && m->special[BOS] < 0) m->special[BOS] = added_id(m, content_of(lb__json_get(m->cfg, "cls_token")));
    if (m->cfg && m->special[EOS] < 0) m->special[EOS] = m->special[SEP];
    if (st == LB_OK && m->tok) st = post_processor(m, lb__json_get(m->tok, "post_processor"), what);
    static const char *const add_keys[3] = {"add_bos_token", "add_eos_token", "add_sep_token"};
    for (int k = 0; st == LB_OK && m->cfg && k < 3; k++) {
        const lb__json *a = lb__json_get(m->cfg, add_keys[k]);
        if (m->add[k] < 0 && a && (a->type == LB_JSON_TRUE || a->type == LB_JSON_FALSE)) m->add[k] = is_true(a);
    }
    /* config.json: <kind>_token_id for the kinds still unnamed */
    for (int k = 0; st == LB_OK && m->config && k < LB__HF_N_SPECIAL; k++) {
        snprintf(key, sizeof key, "%s_token_id", special_names[k]);
        if (m->special[k] < 0 && lb__json_u64(lb__json_get(m->config, key), &v) && v < m->n_vocab)
            m->special[k] = (int32_t)v;
    }
    if (st != LB_OK) lb__hf_meta_free(m);
    return st;
}

void lb__hf_meta_free(lb__hf_meta *m)
{
    lb__json_free(m->tok), lb__json_free(m->cfg), lb__json_free(m->config);
    m->tok = m->cfg = m->config = NULL;
}

/* convert_hf_to_gguf.py's list of added tokens that are control tokens
 * whatever their "special" flag says: <|...|>, <｜...｜>, <unused...>, and a few names. */
static int looks_special(const char *s)
{
    size_t n = strlen(s);
    static const char *const names[] = {"<pad>", "<mask>", "<2mass>", "[@BOS@]"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (strcmp(s, names[i]) == 0) return 1;
    static const char *const ends[][2] = {{"<|", "|>"}, {"<\xEF\xBD\x9C", "\xEF\xBD\x9C>"}, {"<unused", ">"}};
    for (size_t i = 0; i < sizeof ends / sizeof *ends; i++) {
        size_t a = strlen(ends[i][0]), b = strlen(ends[i][1]);
        if (n >= a && n >= b && memcmp(s, ends[i][0], a) == 0 && memcmp(s + n - b, ends[i][1], b) == 0)
            return 1; /* the ends may overlap, as Python's startswith/endswith let them ("<|>") */
    }
    return 0;
}

void lb__hf_meta_added_types(const lb__hf_meta *m, int looks, int32_t *types)
{
    const lb__json *added = m->tok ? lb__json_get(m->tok, "added_tokens") : NULL;
    for (size_t i = 0; added && added->type == LB_JSON_ARRAY && i < added->len; i++) {
        uint64_t id;
        const char *c = lb__json_str(&added->items[i], "content");
        if (!c || !lb__json_u64(lb__json_get(&added->items[i], "id"), &id) || id >= m->n_vocab) continue;
        types[id] = is_true(lb__json_get(&added->items[i], "special")) || (looks && looks_special(c)) ? 3 : 4;
    }
}

/* The chat template: tokenizer_config.json's (a string, or a list of named
 * templates), else chat_template.jinja beside it. */
static lb_status chat_template(const lb__hf_meta *m, const char *dir, lb__gguf_writer *w)
{
    const lb__json *c = m->cfg ? lb__json_get(m->cfg, "chat_template") : NULL;
    lb_status st = LB_OK;
    if (c && c->type == LB_JSON_STRING) return lb__gguf_set_str(w, "tokenizer.chat_template", c->str, c->len);
    if (c && c->type == LB_JSON_ARRAY) { /* named templates, as gguf-py writes them */
        char **names = calloc(c->len ? c->len : 1, sizeof *names);
        size_t n = 0;
        char key[160];
        st = names ? LB_OK : lb__fail(LB_ERR_NOMEM, "out of memory");
        for (size_t i = 0; st == LB_OK && i < c->len; i++) {
            const char *name = lb__json_str(&c->items[i], "name");
            const lb__json *tmpl = lb__json_get(&c->items[i], "template");
            if (!name || !name[0] || !tmpl || tmpl->type != LB_JSON_STRING || strlen(name) > 100) continue;
            if (strcmp(name, "default") == 0) {
                st = lb__gguf_set_str(w, "tokenizer.chat_template", tmpl->str, tmpl->len);
                continue;
            }
            if (!(names[n] = strdup(name))) {
                st = lb__fail(LB_ERR_NOMEM, "out of memory");
                break;
            }
            for (char *q = names[n]; *q; q++) /* only letters and digits in a name */
                if (!((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9'))) *q = '_';
            snprintf(key, sizeof key, "tokenizer.chat_template.%s", names[n++]);
            st = lb__gguf_set_str(w, key, tmpl->str, tmpl->len);
        }
        if (st == LB_OK && n)
            st = lb__gguf_set_arr_str(w, "tokenizer.chat_templates", (const char *const *)names, NULL, n);
        for (size_t i = 0; i < n; i++) free(names[i]);
        free(names);
        return st;
    }
    char *path = lb__path_join(dir, "chat_template.jinja");
    char *text = NULL;
    size_t len = 0;
    st = path ? LB_OK : lb__fail(LB_ERR_NOMEM, "out of memory");
    if (st == LB_OK && m->cfg && access(path, R_OK) == 0 &&
        (st = lb__read_file(path, LB_HF_TOKENIZER_MAX_BYTES, &text, &len)) == LB_OK)
        st = lb__gguf_set_str(w, "tokenizer.chat_template", text, len);
    free(text), free(path);
    return st;
}

lb_status lb__hf_meta_keys(const lb__hf_meta *m, const char *dir, lb__gguf_writer *w)
{
    lb_status st = LB_OK;
    for (int k = 0; st == LB_OK && k < LB__HF_N_SPECIAL; k++)
        if (m->special[k] >= 0) st = lb__gguf_set_u32(w, special_keys[k], (uint32_t)m->special[k]);
    /* unsaid: nothing is added, as tokenizers adds nothing without a post-processor; nor without the token
     * (llama.cpp would stop on an added BOS it has no id for) */
    if (st == LB_OK) st = lb__gguf_set_bool(w, "tokenizer.ggml.add_bos_token", m->add[BOS] > 0 && m->special[BOS] >= 0);
    if (st == LB_OK) st = lb__gguf_set_bool(w, "tokenizer.ggml.add_eos_token", m->add[EOS] > 0 && m->special[EOS] >= 0);
    if (st == LB_OK && m->add[2] >= 0) st = lb__gguf_set_bool(w, "tokenizer.ggml.add_sep_token", m->add[2]);
    if (st == LB_OK) st = chat_template(m, dir, w);
    return st;
}
