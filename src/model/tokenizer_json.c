/* tokenizer.json (Hugging Face tokenizers): a BPE model, in one of two
 * styles; anything else is LB_ERR_UNSUPPORTED naming what the file asks
 * for, never a silently different tokenizer.
 *
 *   - byte-level: a ByteLevel pre-tokenizer (alone, or after Digits as
 *     SmolLM2's Sequence has it), no normalizer;
 *   - SentencePiece (what transformers' Llama converter writes in its
 *     "legacy" form): normalizer Prepend("\u2581") then Replace(" " ->
 *     "\u2581") (or the Replace alone: no dummy prefix), no pre-tokenizer,
 *     byte_fallback with all 256 <0xNN> tokens. That is lowbit's SPM
 *     algorithm (tokenizer_spm.c) with the merges' ranks as costs: the
 *     lowest rank merges first, the leftmost among equals, as HF's BPE
 *     does. The non-legacy Metaspace pre-tokenizer is refused (it drops the
 *     dummy prefix before a leading space, which lowbit does not model).
 *
 * BOS and EOS are not in tokenizer.json: they come from
 * tokenizer_config.json beside it (bos_token / eos_token, a string or an
 * object with "content"), else config.json (bos_token_id / eos_token_id). */
#include <stdlib.h>
#include <string.h>

#include "io/json.h"
#include "model/tokenizer_internal.h"
#include "util/error.h"
#include "util/file.h"

#define MAX_JSON_BYTES (512u << 20)

static int is_null(const lb__json *v) { return !v || v->type == LB_JSON_NULL; }

static int flag(const lb__json *obj, const char *key, int dflt)
{
    const lb__json *v = lb__json_get(obj, key);
    if (v && v->type == LB_JSON_TRUE) return 1;
    if (v && v->type == LB_JSON_FALSE) return 0;
    return dflt;
}

static lb_status byte_level(const lb__json *p, const char *what, lb_tokenizer *t)
{
    t->add_prefix_space = flag(p, "add_prefix_space", 1);
    t->pre = flag(p, "use_regex", 1) ? LB__PRE_GPT2 : LB__PRE_NONE;
    (void)what;
    return LB_OK;
}

static lb_status pre_tokenizer(const lb__json *p, const char *what, lb_tokenizer *t)
{
    const char *type = lb__json_str(p, "type");
    if (!type) return lb__fail(LB_ERR_UNSUPPORTED, "%s: a BPE model without a ByteLevel pre_tokenizer", what);
    if (strcmp(type, "ByteLevel") == 0) return byte_level(p, what, t);
    if (strcmp(type, "Sequence") == 0) {
        const lb__json *seq = lb__json_get(p, "pretokenizers");
        if (!seq || seq->type != LB_JSON_ARRAY) return lb__fail(LB_ERR_PARSE, "%s: Sequence without pretokenizers", what);
        const char *t0 = seq->len == 2 ? lb__json_str(&seq->items[0], "type") : NULL;
        const char *t1 = seq->len == 2 ? lb__json_str(&seq->items[1], "type") : NULL;
        if (seq->len == 1) return pre_tokenizer(&seq->items[0], what, t);
        if (t0 && t1 && strcmp(t0, "Digits") == 0 && strcmp(t1, "ByteLevel") == 0) {
            t->split_digits = flag(&seq->items[0], "individual_digits", 0) ? 1 : 2;
            return byte_level(&seq->items[1], what, t);
        }
        return lb__fail(LB_ERR_UNSUPPORTED, "%s: pre_tokenizer Sequence [%s, %s%s] is not supported (ByteLevel, or "
                                            "Digits then ByteLevel)", what, seq->len ? (t0 ? t0 : "?") : "",
                        seq->len > 1 ? (t1 ? t1 : "?") : "", seq->len > 2 ? ", ..." : "");
    }
    return lb__fail(LB_ERR_UNSUPPORTED, "%s: pre_tokenizer %s is not supported (ByteLevel, or Digits then ByteLevel)",
                    what, type);
}

#define U2581 "\xE2\x96\x81"

static int is_str(const lb__json *v, const char *s)
{
    return v && v->type == LB_JSON_STRING && v->len == strlen(s) && memcmp(v->str, s, v->len) == 0;
}

/* Replace(" " -> U+2581): {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"} */
static int is_space_replace(const lb__json *n)
{
    const char *type = lb__json_str(n, "type");
    const lb__json *pat = lb__json_get(n, "pattern");
    return type && strcmp(type, "Replace") == 0 && pat && pat->type == LB_JSON_OBJECT &&
           is_str(lb__json_get(pat, "String"), " ") && is_str(lb__json_get(n, "content"), U2581);
}

static int is_prepend(const lb__json *n)
{
    const char *type = lb__json_str(n, "type");
    return type && strcmp(type, "Prepend") == 0 && is_str(lb__json_get(n, "prepend"), U2581);
}

/* The SentencePiece normalizer (see the top): 1 when norm is one, with
 * *prefix saying whether the dummy prefix is prepended. */
static int spm_normalizer(const lb__json *norm, int *prefix)
{
    const char *type = lb__json_str(norm, "type");
    if (type && strcmp(type, "Sequence") == 0) {
        const lb__json *seq = lb__json_get(norm, "normalizers");
        if (!seq || seq->type != LB_JSON_ARRAY) return 0;
        if (seq->len == 2 && is_prepend(&seq->items[0]) && is_space_replace(&seq->items[1])) return *prefix = 1;
        if (seq->len == 1 && is_space_replace(&seq->items[0])) return (*prefix = 0), 1;
        return 0;
    }
    if (is_space_replace(norm)) return (*prefix = 0), 1;
    return 0;
}

static lb_status id_of(const lb__json *v, const char *what, const char *where, uint32_t *out)
{
    uint64_t id;
    if (!lb__json_u64(v, &id) || id >= INT32_MAX)
        return lb__fail(LB_ERR_PARSE, "%s: %s: the id (byte %zu) is not a token id 0..2^31-2", what, where,
                        v ? v->offset : 0);
    *out = (uint32_t)id;
    return LB_OK;
}

/* The id of a token named by a string, or by an object's "content". */
static int32_t named(const lb_tokenizer *t, const lb__json *v)
{
    if (v && v->type == LB_JSON_OBJECT) v = lb__json_get(v, "content");
    if (!v || v->type != LB_JSON_STRING) return -1;
    return lb__strmap_get(t, v->str, v->len);
}

static void bos_eos(const char *path, lb_tokenizer *t)
{
    const char *slash = strrchr(path, '/');
    size_t dl = slash ? (size_t)(slash - path) : 1;
    char *dir = malloc(dl + 2); /* "/" for a file in the root: two bytes even when dl is 0 */
    if (!dir) return;
    memcpy(dir, slash ? path : ".", dl), dir[dl] = '\0';
    if (slash == path) dir[0] = '/', dir[1] = '\0';
    char *cfg = lb__path_join(dir, "tokenizer_config.json");
    lb__json *j = NULL;
    if (cfg && lb__json_read_file(cfg, 64u << 20, &j) == LB_OK) {
        t->bos = named(t, lb__json_get(j, "bos_token"));
        t->eos = named(t, lb__json_get(j, "eos_token"));
        const lb__json *add = lb__json_get(j, "add_bos_token"); /* transformers' flag; absent: no */
        t->add_bos = add && add->type == LB_JSON_TRUE;
    } else {
        free(cfg);
        cfg = lb__path_join(dir, "config.json");
        if (cfg && lb__json_read_file(cfg, 64u << 20, &j) == LB_OK) {
            uint64_t v;
            if (lb__json_u64(lb__json_get(j, "bos_token_id"), &v) && v < t->n) t->bos = (int32_t)v;
            if (lb__json_u64(lb__json_get(j, "eos_token_id"), &v) && v < t->n) t->eos = (int32_t)v;
        }
    }
    lb__json_free(j);
    free(cfg), free(dir);
}

static lb_status merges(const lb__json *list, const char *what, lb_tokenizer *t)
{
    if (!list || list->type != LB_JSON_ARRAY) return lb__fail(LB_ERR_PARSE, "%s: model.merges is not an array", what);
    for (size_t i = 0; i < list->len; i++) {
        const lb__json *m = &list->items[i];
        const char *a, *b;
        size_t al, bl;
        if (m->type == LB_JSON_STRING) {
            const char *sp = memchr(m->str, ' ', m->len);
            if (!sp || memchr(sp + 1, ' ', m->len - (size_t)(sp - m->str) - 1))
                return lb__fail(LB_ERR_PARSE, "%s: model.merges[%zu] (byte %zu) is not two tokens and a space", what, i,
                                m->offset);
            a = m->str, al = (size_t)(sp - m->str), b = sp + 1, bl = m->len - al - 1;
        } else if (m->type == LB_JSON_ARRAY && m->len == 2 && m->items[0].type == LB_JSON_STRING &&
                   m->items[1].type == LB_JSON_STRING) {
            a = m->items[0].str, al = m->items[0].len, b = m->items[1].str, bl = m->items[1].len;
        } else {
            return lb__fail(LB_ERR_PARSE, "%s: model.merges[%zu] (byte %zu) is neither \"a b\" nor [\"a\", \"b\"]",
                            what, i, m->offset);
        }
        if (i > UINT32_MAX) return lb__fail(LB_ERR_PARSE, "%s: too many merges", what);
        lb_status st = lb__bpe_add_merge(t, a, al, b, bl, (uint32_t)i, what);
        if (st != LB_OK) return st;
    }
    return LB_OK;
}

static lb_status load(const lb__json *root, const char *what, lb_tokenizer *t)
{
    const lb__json *model = lb__json_get(root, "model");
    if (!model || model->type != LB_JSON_OBJECT) return lb__fail(LB_ERR_PARSE, "%s: no \"model\" object", what);
    const char *type = lb__json_str(model, "type");
    if (type && strcmp(type, "BPE") != 0)
        return lb__fail(LB_ERR_UNSUPPORTED, "%s: model type %s is not supported (BPE)", what, type);
    const lb__json *norm = lb__json_get(root, "normalizer"), *pre = lb__json_get(root, "pre_tokenizer");
    int spm = !is_null(norm) && spm_normalizer(norm, &t->add_space_prefix);
    if (!is_null(norm) && !spm)
        return lb__fail(LB_ERR_UNSUPPORTED, "%s: normalizer %s is not supported (none, or SentencePiece's "
                        "Prepend(\u2581) + Replace(' ' -> \u2581))", what,
                        lb__json_str(norm, "type") ? lb__json_str(norm, "type") : "?");
    if (spm && !is_null(pre))
        return lb__fail(LB_ERR_UNSUPPORTED, "%s: a SentencePiece normalizer with pre_tokenizer %s is not supported "
                        "(none)", what, lb__json_str(pre, "type") ? lb__json_str(pre, "type") : "?");
    if (spm && !flag(model, "byte_fallback", 0))
        return lb__fail(LB_ERR_UNSUPPORTED, "%s: a SentencePiece-style BPE without byte_fallback is not supported "
                        "(an unknown character would be one <unk>)", what);
    const lb__json *drop = lb__json_get(model, "dropout");
    if (!is_null(drop) && !(drop->type == LB_JSON_NUMBER && drop->number == 0))
        return lb__fail(LB_ERR_UNSUPPORTED, "%s: BPE dropout (random merges) is not supported", what);
    const char *keys[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int k = 0; k < 2; k++) {
        const char *s = lb__json_str(model, keys[k]);
        if (s && s[0]) return lb__fail(LB_ERR_UNSUPPORTED, "%s: model.%s '%s' is not supported", what, keys[k], s);
    }
    lb_status st = LB_OK;
    t->ignore_merges = flag(model, "ignore_merges", 0);
    if (spm) {
        t->kind = LB__TOK_SPM;
        t->space_is_u2581 = 1;
        if (t->ignore_merges)
            return lb__fail(LB_ERR_UNSUPPORTED, "%s: ignore_merges with a SentencePiece normalizer", what);
    } else {
        t->kind = LB__TOK_BPE;
        const char *pre_type = lb__json_str(pre, "type");
        if (pre_type && strcmp(pre_type, "Metaspace") == 0)
            return lb__fail(LB_ERR_UNSUPPORTED, "%s: pre_tokenizer Metaspace (SentencePiece, non-legacy) is not "
                            "supported (the legacy normalizer Prepend + Replace is)", what);
        if ((st = pre_tokenizer(pre, what, t)) != LB_OK) return st;
    }
    const lb__json *vocab = lb__json_get(model, "vocab"), *added = lb__json_get(root, "added_tokens");
    if (!vocab || vocab->type != LB_JSON_OBJECT) return lb__fail(LB_ERR_PARSE, "%s: model.vocab is not an object", what);
    if (!is_null(added) && added->type != LB_JSON_ARRAY)
        return lb__fail(LB_ERR_PARSE, "%s: added_tokens is not an array", what);
    size_t n_added = is_null(added) ? 0 : added->len;
    uint32_t n = 0, id = 0;
    for (size_t i = 0; i < vocab->len; i++) {
        if ((st = id_of(&vocab->items[i], what, "model.vocab", &id)) != LB_OK) return st;
        if (id + 1 > n) n = id + 1;
    }
    for (size_t i = 0; i < n_added; i++) {
        if ((st = id_of(lb__json_get(&added->items[i], "id"), what, "added_tokens", &id)) != LB_OK) return st;
        if (id + 1 > n) n = id + 1;
    }
    if (n == 0) return lb__fail(LB_ERR_PARSE, "%s: the vocabulary is empty", what);
    if (vocab->len > n || n - vocab->len > n_added + (n >> 4) + 1024)
        return lb__fail(LB_ERR_PARSE, "%s: ids up to %u for %zu tokens: the vocabulary has gaps or repeats", what,
                        n - 1, vocab->len + n_added);
    if ((st = lb__tok_alloc(t, n)) != LB_OK) return st;
    for (size_t i = 0; i < vocab->len; i++) {
        id_of(&vocab->items[i], what, "model.vocab", &id);
        if (t->str_off[id] != SIZE_MAX)
            return lb__fail(LB_ERR_PARSE, "%s: model.vocab gives id %u to two tokens (the second at byte %zu)", what, id,
                            vocab->items[i].offset);
        if ((st = lb__tok_set(t, id, vocab->keys[i], vocab->key_lens[i])) != LB_OK) return st;
    }
    /* tokenizers ignores the id of an added token that is not in model.vocab: it numbers it after the
     * vocabulary and the added tokens before it. A file whose ids say otherwise is refused. */
    uint32_t max_added = 0;
    for (size_t i = 0; i < n_added; i++) {
        const lb__json *a = &added->items[i], *content = lb__json_get(a, "content");
        id_of(lb__json_get(a, "id"), what, "added_tokens", &id);
        if (!content || content->type != LB_JSON_STRING || content->len == 0)
            return lb__fail(LB_ERR_PARSE, "%s: added_tokens[%zu] (byte %zu) has no content", what, i, a->offset);
        uint32_t next = i && max_added >= vocab->len ? max_added + 1 : (uint32_t)vocab->len;
        if (t->str_off[id] == SIZE_MAX && id != next)
            return lb__fail(LB_ERR_UNSUPPORTED, "%s: added token '%s' says id %u, but tokenizers gives it id %u (the "
                            "next after the vocabulary and the added tokens before it)", what, content->str, id, next);
        if (!i || id > max_added) max_added = id;
        if (t->str_off[id] == SIZE_MAX && (st = lb__tok_set(t, id, content->str, content->len)) != LB_OK) return st;
        if (t->str_len[id] != content->len || memcmp(lb__tok_str(t, id), content->str, content->len) != 0)
            return lb__fail(LB_ERR_UNSUPPORTED, "%s: added token '%s' reuses id %u of another vocabulary token", what,
                            content->str, id);
        if ((st = lb__tok_add_special(t, (int32_t)id, flag(a, "lstrip", 0), flag(a, "rstrip", 0))) != LB_OK) return st;
    }
    const char *unk = lb__json_str(model, "unk_token");
    if ((st = lb__tok_finish(t, what)) != LB_OK) return st;
    lb__tok_specials_done(t);
    if (unk) t->unk = lb__strmap_get(t, unk, strlen(unk));
    for (int b = 0; spm && b < 256; b++)
        if (t->byte_id[b] < 0)
            return lb__fail(LB_ERR_UNSUPPORTED, "%s: byte_fallback without the token <0x%02X> (HF would write one "
                            "<unk> for the character)", what, b);
    return merges(lb__json_get(model, "merges"), what, t);
}

lb_status lb__tok_load_json(const char *path, lb_tokenizer *t)
{
    lb__json *root;
    lb_status st = lb__json_read_file(path, MAX_JSON_BYTES, &root);
    if (st != LB_OK) return st;
    st = load(root, path, t);
    lb__json_free(root);
    if (st == LB_OK) bos_eos(path, t);
    return st;
}
