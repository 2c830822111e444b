/* GPT-2 style byte-level BPE: the byte-to-unicode alphabet its
 * vocabularies are written in, the pre-tokenizer regex (hand-compiled
 * into a scanner), and the per-word merges.
 *
 * Text is split first into pieces (special tokens are cut out before
 * this file sees the text; with Digits(individual_digits=True), which
 * SmolLM2 and llama.cpp's "smollm" use, every \p{N} code point is a piece
 * of its own; with individual_digits=False each run of them), then each piece by the regex
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * into words, and each word's bytes are merged by rank. Invalid UTF-8:
 * each invalid byte is a code point of its own in the class of U+FFFD
 * (not a letter, number or space), and its byte is kept as it is, so the
 * ids always decode back to the input bytes. */
#include <stdlib.h>
#include <string.h>

#include "model/tokenizer_internal.h"
#include "util/error.h"

/* Bytes that are printable Latin-1 stand for themselves; the other 68
 * (0..32, 127..160, 173) are written as U+0100.. in byte order. */
uint32_t lb__bpe_byte_cp(unsigned b)
{
    if (b <= 32) return 256 + b;
    if (b >= 127 && b <= 160) return 256 + 33 + (b - 127);
    if (b == 173) return 256 + 67;
    return b;
}

static int cp_byte(int32_t cp)
{
    if ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 255)) return cp;
    if (cp >= 256 && cp <= 288) return cp - 256;
    if (cp >= 289 && cp <= 322) return 127 + (cp - 289);
    if (cp == 323) return 173;
    return -1;
}

int lb__bpe_decode_alphabet(const char *s, size_t len, char *out, size_t *out_len)
{
    const unsigned char *p = (const unsigned char *)s, *end = p + len;
    size_t n = 0;
    while (p < end) {
        int l;
        int b = cp_byte(lb__utf8_decode(p, end, &l));
        if (b < 0) return 0;
        out[n++] = (char)b;
        p += l;
    }
    *out_len = n;
    return 1;
}

lb_status lb__bpe_add_merge(lb_tokenizer *t, const char *a, size_t a_len, const char *b, size_t b_len,
                            uint32_t rank, const char *what)
{
    int32_t ia = lb__strmap_get(t, a, a_len), ib = lb__strmap_get(t, b, b_len);
    if (ia < 0 || ib < 0)
        return lb__fail(LB_ERR_PARSE, "%s: merge %u ('%.*s' '%.*s'): '%.*s' is not a token", what, rank, (int)a_len, a,
                        (int)b_len, b, ia < 0 ? (int)a_len : (int)b_len, ia < 0 ? a : b);
    char small[256], *ab = a_len + b_len <= sizeof small ? small : malloc(a_len + b_len);
    if (!ab) return lb__fail(LB_ERR_NOMEM, "%s: out of memory (merge %u)", what, rank);
    memcpy(ab, a, a_len);
    memcpy(ab + a_len, b, b_len);
    int32_t id = lb__strmap_get(t, ab, a_len + b_len);
    if (ab != small) free(ab);
    if (id < 0)
        return lb__fail(LB_ERR_PARSE, "%s: merge %u ('%.*s' '%.*s'): the merged string is not a token", what, rank,
                        (int)a_len, a, (int)b_len, b);
    return lb__pairmap_put(&t->merges, ia, ib, id, (double)rank);
}

/* ===== Words ===== */

static lb_status grow(lb__merge_scratch *s, size_t need)
{
    if (need <= s->buf_cap) return LB_OK;
    size_t cap = s->buf_cap ? s->buf_cap : 256;
    while (cap < need) cap *= 2;
    char *b = realloc(s->buf, cap);
    if (!b) return lb__fail(LB_ERR_NOMEM, "tokenize: out of memory (%zu bytes)", cap);
    s->buf = b, s->buf_cap = cap;
    return LB_OK;
}

/* A word that is a token (ignore_merges): its bytes in the alphabet. */
static int32_t whole_word(const lb_tokenizer *t, const unsigned char *w, size_t len, lb__merge_scratch *s)
{
    if (grow(s, len * 2 + 1) != LB_OK) return -1;
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        uint32_t cp = lb__bpe_byte_cp(w[i]);
        if (cp < 0x80) s->buf[n++] = (char)cp;
        else s->buf[n++] = (char)(0xC0 | cp >> 6), s->buf[n++] = (char)(0x80 | (cp & 0x3F));
    }
    return lb__strmap_get(t, s->buf, n);
}

static lb_status encode_word(const lb_tokenizer *t, const unsigned char *w, size_t len, lb__ids *out,
                             lb__merge_scratch *s)
{
    if (t->ignore_merges) {
        int32_t id = whole_word(t, w, len, s);
        if (id >= 0) return lb__ids_push(out, id);
    }
    size_t start = out->n;
    for (size_t i = 0; i < len; i++) {
        int32_t id = t->byte_id[w[i]];
        if (id < 0) id = t->unk; /* HF: the unknown token, or nothing when there is none */
        if (id < 0) continue;
        lb_status st = lb__ids_push(out, id);
        if (st != LB_OK) return st;
    }
    size_t n = out->n - start;
    if (n == 0) return LB_OK; /* nothing pushed (out->v may still be NULL) */
    lb_status st = lb__merge(t, out->v + start, &n, s);
    out->n = start + n;
    return st;
}

/* ===== The GPT-2 regex ===== */

typedef struct scan {
    const unsigned char *p, *end;
} scan;

static lb__uclass class_at(const scan *sc, const unsigned char *q, int *len)
{
    if (q >= sc->end) {
        *len = 0;
        return (lb__uclass)-1;
    }
    return lb__uclass_of(lb__utf8_decode(q, sc->end, len));
}

/* The end of a run of class c starting at q. */
static const unsigned char *run_of(const scan *sc, const unsigned char *q, lb__uclass c)
{
    int l;
    while (q < sc->end && class_at(sc, q, &l) == c) q += l;
    return q;
}

/* The length of the match at p (p < end). */
static size_t gpt2_match(const scan *sc)
{
    const unsigned char *p = sc->p, *end = sc->end;
    if (p[0] == '\'' && end - p >= 2) {
        unsigned c = p[1];
        if (c == 's' || c == 't' || c == 'm' || c == 'd') return 2;
        if (end - p >= 3 && ((c == 'r' && p[2] == 'e') || (c == 'v' && p[2] == 'e') || (c == 'l' && p[2] == 'l')))
            return 3;
    }
    int l;
    lb__uclass c0 = class_at(sc, p, &l);
    const unsigned char *q = p;
    lb__uclass c = c0;
    if (p[0] == ' ') { /* ' ?X+': the space joins a following letter, number or other run */
        int l1;
        lb__uclass c1 = class_at(sc, p + 1, &l1);
        if (c1 == LB__UC_LETTER || c1 == LB__UC_NUMBER || c1 == LB__UC_OTHER) q = p + 1, c = c1;
    }
    if (c == LB__UC_LETTER || c == LB__UC_NUMBER || c == LB__UC_OTHER) return (size_t)(run_of(sc, q, c) - p);
    /* whitespace: \s+(?!\S) leaves the last space of a run to the word it precedes; \s+ takes a lone one */
    const unsigned char *e = p, *last = p;
    while (e < end && class_at(sc, e, &l) == LB__UC_SPACE) last = e, e += l;
    if (e == end || last == p) return (size_t)(e - p);
    return (size_t)(last - p);
}

static lb_status encode_piece(const lb_tokenizer *t, const unsigned char *p, size_t len, lb__ids *out,
                              lb__merge_scratch *s)
{
    if (len == 0) return LB_OK;
    if (t->add_prefix_space && p[0] != ' ') {
        /* the word loop below may reuse s->buf (whole_word), so the piece goes to its own copy */
        unsigned char *copy = malloc(len + 1);
        if (!copy) return lb__fail(LB_ERR_NOMEM, "tokenize: out of memory (%zu bytes)", len + 1);
        copy[0] = ' ';
        memcpy(copy + 1, p, len);
        lb_status st;
        lb_tokenizer u = *t;
        u.add_prefix_space = 0;
        st = encode_piece(&u, copy, len + 1, out, s);
        free(copy);
        return st;
    }
    if (t->pre == LB__PRE_NONE) return encode_word(t, p, len, out, s);
    scan sc = {p, p + len};
    while (sc.p < sc.end) {
        size_t m = gpt2_match(&sc);
        lb_status st = encode_word(t, sc.p, m, out, s);
        if (st != LB_OK) return st;
        sc.p += m;
    }
    return LB_OK;
}

lb_status lb__bpe_encode(const lb_tokenizer *t, const char *text, size_t len, lb__ids *out, lb__merge_scratch *s)
{
    const unsigned char *p = (const unsigned char *)text, *end = p + len, *piece = p;
    if (!t->split_digits) return encode_piece(t, p, len, out, s);
    while (p < end) {
        int l;
        if (lb__uclass_of(lb__utf8_decode(p, end, &l)) != LB__UC_NUMBER) {
            p += l;
            continue;
        }
        /* Digits: each number code point (individual_digits), or each run of them, is a piece */
        const unsigned char *q = p + l;
        while (t->split_digits == 2 && q < end && lb__uclass_of(lb__utf8_decode(q, end, &l)) == LB__UC_NUMBER) q += l;
        lb_status st = encode_piece(t, piece, (size_t)(p - piece), out, s);
        if (st == LB_OK) st = encode_piece(t, p, (size_t)(q - p), out, s);
        if (st != LB_OK) return st;
        piece = p = q;
    }
    return encode_piece(t, piece, (size_t)(end - piece), out, s);
}
