/* The tokenizer's insides, shared by the files that load and run it:
 * tokenizer.c (public API, GGUF and llama2.c loaders, special tokens),
 * tokenizer_json.c (tokenizer.json), tokenizer_bpe.c (byte-level BPE:
 * the GPT-2 alphabet and pre-tokenizer), tokenizer_spm.c (llama2.c /
 * SentencePiece BPE by scores), tokenizer_merge.c (the merge loop both
 * use) and unicode.c (code point classes). */
#ifndef LB_MODEL_TOKENIZER_INTERNAL_H
#define LB_MODEL_TOKENIZER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "lowbit.h"

/* ===== Unicode ===== */

typedef enum lb__uclass { LB__UC_OTHER, LB__UC_LETTER, LB__UC_NUMBER, LB__UC_SPACE } lb__uclass;

/* Decodes the UTF-8 sequence at p (p < end): its code point and byte
 * length. An invalid or truncated sequence, an overlong form, a surrogate
 * or a value above U+10FFFF is one byte long and decodes to -1: every
 * invalid byte stands alone. */
int32_t lb__utf8_decode(const unsigned char *p, const unsigned char *end, int *len);
/* \p{L}, \p{N}, \s (Unicode White_Space, as Oniguruma's \s), or other;
 * -1 (an invalid byte) is other, as U+FFFD would be. */
lb__uclass lb__uclass_of(int32_t cp);

/* ===== Hash maps ===== */

/* Byte strings to ids: the tokenizer's strings (an arena plus offsets)
 * are the keys; a slot holds id + 1. */
typedef struct lb__strmap {
    uint32_t *slots;
    size_t mask;
} lb__strmap;

/* Token-id pairs to the merge they make: the merged id and its cost
 * (BPE: the merge's rank; SentencePiece: minus the merged token's score);
 * the lowest cost merges first. */
typedef struct lb__pair {
    uint64_t key; /* (left << 32 | right) + 1; 0: empty */
    int32_t id;
    double cost;
} lb__pair;

typedef struct lb__pairmap {
    lb__pair *slots;
    size_t mask, count;
} lb__pairmap;

/* ===== The tokenizer ===== */

typedef enum lb__tok_kind { LB__TOK_BPE, LB__TOK_SPM } lb__tok_kind;

/* Byte-level BPE pre-tokenization (which regex splits the text into words). */
typedef enum lb__pre {
    LB__PRE_GPT2,   /* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
    LB__PRE_NONE,   /* ByteLevel with use_regex=false: each piece is one word */
} lb__pre;

typedef struct lb__special {
    int32_t id;
    uint32_t len;
    const char *text;    /* in the tokenizer's arena */
    int lstrip, rstrip;  /* tokenizer.json: the match swallows whitespace on its left / right */
} lb__special;

struct lb_tokenizer {
    lb__tok_kind kind;
    char *source;            /* the file it was read from (lb_tokenizer_source); NULL from GGUF metadata */
    uint32_t n;              /* vocabulary size (ids 0..n-1) */
    char *arena;             /* every string below, NUL-terminated */
    size_t arena_len, arena_cap;
    size_t *str_off;         /* the token as stored (GPT-2 alphabet; SentencePiece ▁ or llama2.c space) */
    uint32_t *str_len;
    size_t *text_off;        /* the token as it reads in text (lb_token_bytes) */
    uint32_t *text_len;
    float *scores;           /* SPM */
    int32_t bos, eos, unk;
    int add_bos;             /* texts start with BOS (lb_tokenizer_add_bos) */
    lb__strmap vocab;        /* stored string -> id (the first id when a string repeats) */
    lb__pairmap merges;
    int32_t byte_id[256];    /* BPE: the token of one byte; SPM: the <0xNN> token; -1: none */
    /* BPE */
    lb__pre pre;
    int split_digits;        /* Digits first: 1, each \p{N} code point is a piece of its own (individual_digits);
                                2, each run of them */
    int add_prefix_space;    /* ByteLevel add_prefix_space: a piece not starting with ' ' gets one */
    int ignore_merges;       /* a word that is a token is that token */
    /* SPM */
    int space_is_u2581;      /* the vocabulary writes ' ' as U+2581 (GGUF llama; llama2.c files hold spaces) */
    int add_space_prefix;    /* the dummy prefix */
    /* special tokens matched in text before anything else, longest first */
    size_t n_special;
    lb__special *special;
    uint8_t special_first[256]; /* a special token starts with this byte */
};

/* Allocation of the common arrays for n tokens (all ids absent, bos/eos/unk -1). */
lb_status lb__tok_alloc(lb_tokenizer *t, uint32_t n);
/* Copies len bytes into the arena; *off receives where. */
lb_status lb__tok_store(lb_tokenizer *t, const char *s, size_t len, size_t *off);
/* Sets token id's stored string (its text is set by lb__tok_finish). */
lb_status lb__tok_set(lb_tokenizer *t, uint32_t id, const char *s, size_t len);
static inline const char *lb__tok_str(const lb_tokenizer *t, uint32_t id) { return t->arena + t->str_off[id]; }
/* The vocabulary map, byte tokens and token texts; the merges are the
 * loader's (lb__bpe_add_merge / lb__spm_build_merges). what names the input. */
lb_status lb__tok_finish(lb_tokenizer *t, const char *what);
/* Marks id as a special token matched in text. */
lb_status lb__tok_add_special(lb_tokenizer *t, int32_t id, int lstrip, int rstrip);
/* Sorts the special tokens (longest first) and fills special_first. */
void lb__tok_specials_done(lb_tokenizer *t);
void lb__tok_destroy(lb_tokenizer *t);

/* Builds the vocabulary map over every id that has a string. */
lb_status lb__strmap_build(lb_tokenizer *t);
int32_t lb__strmap_get(const lb_tokenizer *t, const char *s, size_t len);
const lb__pair *lb__pairmap_get(const lb__pairmap *m, int32_t a, int32_t b);
lb_status lb__pairmap_put(lb__pairmap *m, int32_t a, int32_t b, int32_t id, double cost);

/* ===== Loaders ===== */

/* tokenizer.json (the path of the file; bos/eos from tokenizer_config.json
 * or config.json beside it). */
lb_status lb__tok_load_json(const char *path, lb_tokenizer *t);
/* GGUF tokenizer.ggml.* metadata (what names the file); t zeroed first,
 * lb__tok_destroy after, whatever the result. */
struct lb__gguf_file;
lb_status lb__tok_load_gguf(const struct lb__gguf_file *f, const char *what, lb_tokenizer *t);

/* ===== Byte-level BPE (tokenizer_bpe.c) ===== */

/* The GPT-2 byte-to-unicode alphabet: the code point byte b is written as. */
uint32_t lb__bpe_byte_cp(unsigned b);
/* Decodes a stored string written in the alphabet into bytes (out has
 * room for len bytes); 0 if some character is not in the alphabet. */
int lb__bpe_decode_alphabet(const char *s, size_t len, char *out, size_t *out_len);
/* Adds merge `rank` from the two stored strings (LB_ERR_PARSE naming what
 * and the merge if a part or the merged string is not a token). */
lb_status lb__bpe_add_merge(lb_tokenizer *t, const char *a, size_t a_len, const char *b, size_t b_len,
                            uint32_t rank, const char *what);

/* ===== Encoding ===== */

/* A growing list of ids. */
typedef struct lb__ids {
    int32_t *v;
    size_t n, cap;
} lb__ids;
lb_status lb__ids_push(lb__ids *ids, int32_t id);

/* Scratch space of the merge loop (reused between words). */
typedef struct lb__merge_scratch {
    struct lb__sym *sym;
    struct lb__cand *heap;
    size_t sym_cap, heap_cap;
    char *buf;               /* BPE: a piece with a prefix space / a word in the alphabet */
    size_t buf_cap;
} lb__merge_scratch;
void lb__merge_scratch_free(lb__merge_scratch *s);

/* Merges ids[0..n) in place by t->merges (lowest cost first, the
 * leftmost among equals); returns the new count through *n. */
lb_status lb__merge(const lb_tokenizer *t, int32_t *ids, size_t *n, lb__merge_scratch *s);

/* Text with no special tokens in it, appended to out. */
lb_status lb__bpe_encode(const lb_tokenizer *t, const char *text, size_t len, lb__ids *out, lb__merge_scratch *s);
/* prefix: add the dummy prefix (when the text is not empty). */
lb_status lb__spm_encode(const lb_tokenizer *t, const char *text, size_t len, int prefix, lb__ids *out,
                         lb__merge_scratch *s);
/* The SentencePiece merge table: every token that splits into two tokens. */
lb_status lb__spm_build_merges(lb_tokenizer *t);

#endif
