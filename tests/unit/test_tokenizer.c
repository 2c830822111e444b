/* Tokenizer hand cases: a tiny llama2.c vocabulary and a tiny
 * tokenizer.json whose ids can be worked out by hand, UTF-8 decoding edge
 * cases, and bad input (each failure with a message). The comparisons with
 * the reference tokenizers are in tests/model/test_tokenizer.py. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "lowbit.h"
#include "model/tokenizer_internal.h"

static char dir[64];

static const char *path_of(const char *name)
{
    static char p[128];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return p;
}

static void write_file(const char *name, const void *data, size_t n)
{
    FILE *f = fopen(path_of(name), "wb");
    if (!f) { perror("fopen"); exit(2); }
    fwrite(data, 1, n, f);
    fclose(f);
}

/* A llama2.c vocabulary: <unk>, BOS, EOS, 256 byte tokens, then pieces. */
static const struct { const char *s; float score; } pieces[] = {
    {" ", -1}, {"a", -2}, {"b", -3}, {"c", -4}, {"ab", -5}, {" a", -6}, {" ab", -7}, {"bc", -0.5f}, {"\xc3\xa9", -8},
};
#define N_L2C (3 + 256 + (int)(sizeof pieces / sizeof pieces[0]))

static void add_token(unsigned char **p, size_t *n, float score, const char *s, int len)
{
    *p = realloc(*p, *n + 8 + (size_t)len);
    memcpy(*p + *n, &score, 4), memcpy(*p + *n + 4, &len, 4), memcpy(*p + *n + 8, s, (size_t)len);
    *n += 8 + (size_t)len;
}

static void make_l2c(void)
{
    unsigned char *buf = malloc(4);
    size_t n = 4;
    int maxlen = 6;
    memcpy(buf, &maxlen, 4);
    add_token(&buf, &n, 0, "<unk>", 5);
    add_token(&buf, &n, 0, "\n<s>\n", 5);
    add_token(&buf, &n, 0, "\n</s>\n", 6);
    for (int b = 0; b < 256; b++) {
        char s[8];
        snprintf(s, sizeof s, "<0x%02X>", b);
        add_token(&buf, &n, 0, s, 6);
    }
    for (size_t i = 0; i < sizeof pieces / sizeof pieces[0]; i++)
        add_token(&buf, &n, pieces[i].score, pieces[i].s, (int)strlen(pieces[i].s));
    write_file("tok.bin", buf, n);
    write_file("cut.bin", buf, n - 3);
    free(buf);
}

static int id_of(const char *s)
{
    for (size_t i = 0; i < sizeof pieces / sizeof pieces[0]; i++)
        if (strcmp(pieces[i].s, s) == 0) return 259 + (int)i;
    return -1;
}

/* ids of text; n_out = count, or -1 on failure */
static int encode(lb_tokenizer *t, const char *text, int32_t *out, int max)
{
    int32_t *ids;
    size_t n;
    if (lb_tokenize(t, text, strlen(text), 0, &ids, &n) != LB_OK) return -1;
    int k = (int)n < max ? (int)n : max;
    memcpy(out, ids, (size_t)k * sizeof *ids);
    free(ids);
    return (int)n;
}

static void test_l2c(void)
{
    make_l2c();
    lb_tokenizer *t;
    CHECK(lb_tokenizer_from_file(path_of("tok.bin"), N_L2C, &t) == LB_OK, "%s", lb_last_error());
    if (!t) return;
    CHECK(lb_tokenizer_vocab_size(t) == N_L2C && lb_tokenizer_bos(t) == 1 && lb_tokenizer_eos(t) == 2, "header");
    int32_t v[16];
    /* " ab": dummy prefix, a, b -> "ab" (-5) beats " a" (-6) -> " " + "ab" -> " ab" (-7) */
    CHECK(encode(t, "ab", v, 16) == 1 && v[0] == id_of(" ab"), "ab -> ' ab' got %d", v[0]);
    /* "abc": " ","a","b","c": bc (-0.5) first, then " a" (-6): [" a", "bc"] */
    CHECK(encode(t, "abc", v, 16) == 2 && v[0] == id_of(" a") && v[1] == id_of("bc"), "abc");
    /* é is a token; è is not: its bytes C3 A8 fall back to ids 3 + byte */
    CHECK(encode(t, "\xc3\xa9", v, 16) == 2 && v[1] == id_of("\xc3\xa9"), "e-acute");
    CHECK(encode(t, "\xc3\xa8", v, 16) == 3 && v[1] == 3 + 0xC3 && v[2] == 3 + 0xA8, "e-grave falls back to bytes");
    CHECK(encode(t, "", v, 16) == 0, "empty text, no dummy prefix");
    /* run.c groups a space with stray continuation bytes after it; not a token, so bytes (found by libFuzzer) */
    CHECK(encode(t, " \x80", v, 16) == 3 && v[0] == id_of(" ") && v[1] == 3 + ' ' && v[2] == 3 + 0x80, "space+0x80");
    int32_t *ids;
    size_t n;
    CHECK(lb_tokenize(t, "a", 1, 1, &ids, &n) == LB_OK && n == 2 && ids[0] == 1, "add_bos");
    free(ids);
    const char *b;
    size_t len;
    CHECK(lb_token_bytes(t, 3 + 0x41, &b, &len) == LB_OK && len == 1 && b[0] == 'A', "<0x41> is 'A'");
    CHECK(lb_token_bytes(t, id_of(" ab"), &b, &len) == LB_OK && len == 3 && memcmp(b, " ab", 3) == 0, "' ab'");
    CHECK(lb_token_bytes(t, N_L2C, &b, &len) == LB_ERR_ARG && strstr(lb_last_error(), "outside"), "id range");
    CHECK(lb_token_bytes(t, -1, &b, &len) == LB_ERR_ARG, "negative id");
    lb_tokenizer_free(t);
    CHECK(lb_tokenizer_from_file(path_of("tok.bin"), 0, &t) == LB_ERR_ARG && strstr(lb_last_error(), "vocab_size"),
          "vocab size needed: %s", lb_last_error());
    CHECK(lb_tokenizer_from_file(path_of("cut.bin"), N_L2C, &t) == LB_ERR_PARSE && t == NULL, "cut file");
    CHECK(lb_tokenizer_from_file(path_of("tok.bin"), N_L2C + 1, &t) == LB_ERR_PARSE, "too many tokens");
}

/* Byte-level BPE: the GPT-2 alphabet writes ' ' as U+0120 (Ġ). */
static const char tiny_json[] =
    "{\"added_tokens\": [{\"id\": 9, \"content\": \"<|x|>\", \"special\": true}],\n"
    " \"normalizer\": null,\n"
    " \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true},\n"
    " \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"c\": 2, \"\\u0120\": 3, \"ab\": 4,\n"
    "   \"\\u0120ab\": 5, \"1\": 6, \"2\": 7, \"12\": 8},\n"
    "   \"merges\": [\"a b\", [\"\\u0120\", \"ab\"], \"1 2\"]}}";

static void test_json(void)
{
    write_file("tokenizer.json", tiny_json, strlen(tiny_json));
    write_file("tokenizer_config.json", "{\"eos_token\": \"<|x|>\"}", 22);
    lb_tokenizer *t;
    CHECK(lb_tokenizer_from_file(dir, 0, &t) == LB_OK, "a directory means its tokenizer.json: %s", lb_last_error());
    if (!t) return;
    CHECK(lb_tokenizer_vocab_size(t) == 10 && lb_tokenizer_bos(t) == -1 && lb_tokenizer_eos(t) == 9, "header");
    int32_t v[16];
    /* " ab c": words " ab", " c" -> [Ġab] [Ġ, c] */
    CHECK(encode(t, " ab c", v, 16) == 3 && v[0] == 5 && v[1] == 3 && v[2] == 2, "' ab c'");
    /* the special token is cut out first; "12" merges (no Digits pre-tokenizer) */
    CHECK(encode(t, "ab<|x|>12", v, 16) == 3 && v[0] == 4 && v[1] == 9 && v[2] == 8, "special and digits");
    /* a byte missing from the vocabulary is dropped, as HF tokenizers does */
    CHECK(encode(t, "azb", v, 16) == 1 && v[0] == 4, "missing byte dropped (a and b then merge, as in HF)");
    const char *b;
    size_t len;
    CHECK(lb_token_bytes(t, 5, &b, &len) == LB_OK && len == 3 && memcmp(b, " ab", 3) == 0, "Ġab reads ' ab'");
    CHECK(lb_token_bytes(t, 9, &b, &len) == LB_OK && len == 5 && memcmp(b, "<|x|>", 5) == 0, "special as written");
    lb_tokenizer_free(t);
    unlink(path_of("tokenizer_config.json"));

    static const struct { const char *json; lb_status st; const char *msg; } bad[] = {
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}", LB_ERR_PARSE, "line 1"},
        {"{\"model\": {\"type\": \"Unigram\"}}", LB_ERR_UNSUPPORTED, "Unigram"},
        {"{\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": {\"vocab\": {\"a\": 0}, \"merges\": [\"a z\"]}}",
         LB_ERR_PARSE, "'z' is not a token"},
        {"{\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": {\"vocab\": {\"a\": 0, \"b\": 0}, \"merges\": []}}",
         LB_ERR_PARSE, "repeats"},
        {"{\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": {\"vocab\": {\"a\": 99999999}, \"merges\": []}}",
         LB_ERR_PARSE, "gaps"},
        {"{\"pre_tokenizer\": {\"type\": \"Whitespace\"}, \"model\": {\"vocab\": {}, \"merges\": []}}",
         LB_ERR_UNSUPPORTED, "Whitespace"},
        {"{\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": {\"vocab\": {\"a\": 0}, \"merges\": [7]}}",
         LB_ERR_PARSE, "merges[0]"},
        {"{\"model\": 3}", LB_ERR_PARSE, "model"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_file("bad.json", bad[i].json, strlen(bad[i].json));
        lb_status st = lb_tokenizer_from_file(path_of("bad.json"), 0, &t);
        CHECK(st == bad[i].st && strstr(lb_last_error(), bad[i].msg) && strstr(lb_last_error(), "bad.json"),
              "bad json %zu: status %d, '%s'", i, st, lb_last_error());
    }
    CHECK(lb_tokenizer_from_file(path_of("missing.json"), 0, &t) == LB_ERR_IO &&
              strstr(lb_last_error(), "missing.json"), "missing file: %s", lb_last_error());
}

static void test_utf8(void)
{
    static const struct { const char *s; int len; int32_t cp; } cases[] = {
        {"a", 1, 'a'}, {"\xc3\xa9", 2, 0xE9}, {"\xe2\x82\xac", 3, 0x20AC}, {"\xf0\x9f\x98\x80", 4, 0x1F600},
        {"\xc0\xaf", 1, -1},         /* overlong */
        {"\xe0\x80\xaf", 1, -1},     /* overlong */
        {"\xed\xa0\x80", 1, -1},     /* surrogate */
        {"\xf4\x90\x80\x80", 1, -1}, /* above U+10FFFF */
        {"\xe2\x82", 1, -1},         /* cut off (decoded within its two bytes) */
        {"\x80", 1, -1}, {"\xff", 1, -1}, {"\xc3(", 1, -1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const unsigned char *p = (const unsigned char *)cases[i].s;
        int len;
        int32_t cp = lb__utf8_decode(p, p + strlen(cases[i].s), &len);
        CHECK(cp == cases[i].cp && len == cases[i].len, "utf8 case %zu: %d/%d", i, (int)cp, len);
    }
    CHECK(lb__uclass_of('x') == LB__UC_LETTER && lb__uclass_of('7') == LB__UC_NUMBER, "ascii classes");
    CHECK(lb__uclass_of(0x4E2D) == LB__UC_LETTER && lb__uclass_of(0xBD) == LB__UC_NUMBER, "CJK letter, 1/2 number");
    CHECK(lb__uclass_of(0x3000) == LB__UC_SPACE && lb__uclass_of(0x1C) == LB__UC_OTHER, "U+3000 space, U+1C not");
    CHECK(lb__uclass_of(0x301) == LB__UC_OTHER && lb__uclass_of(-1) == LB__UC_OTHER, "combining mark, invalid");
}

/* The tables by hand: a byte-level vocabulary of "a", "b", "ab", merged. */
static void test_tables(void)
{
    lb_tokenizer t;
    memset(&t, 0, sizeof t);
    t.kind = LB__TOK_BPE;
    CHECK(lb__tok_alloc(&t, 4) == LB_OK, "alloc");
    lb__tok_set(&t, 0, "a", 1), lb__tok_set(&t, 1, "b", 1), lb__tok_set(&t, 2, "ab", 2);
    lb__tok_set(&t, 3, "\xc4\xa0", 2); /* U+0120, the alphabet's space */
    CHECK(lb__tok_finish(&t, "hand") == LB_OK, "finish");
    CHECK(t.byte_id['a'] == 0 && t.byte_id[' '] == 3 && t.byte_id['c'] == -1, "byte tokens");
    CHECK(lb__bpe_add_merge(&t, "a", 1, "b", 1, 0, "hand") == LB_OK, "merge");
    CHECK(lb__bpe_add_merge(&t, "b", 1, "a", 1, 1, "hand") == LB_ERR_PARSE && strstr(lb_last_error(), "merge 1"),
          "'ba' is not a token: %s", lb_last_error());
    const lb__pair *p = lb__pairmap_get(&t.merges, 0, 1);
    CHECK(p && p->id == 2 && p->cost == 0, "pair map");
    CHECK(lb__bpe_byte_cp(' ') == 0x120 && lb__bpe_byte_cp('!') == '!' && lb__bpe_byte_cp(0xAD) == 0x143, "alphabet");
    lb__tok_destroy(&t);
}

static void test_null(void)
{
    lb_tokenizer *t = (lb_tokenizer *)1;
    CHECK(lb_tokenizer_from_file(NULL, 0, &t) == LB_ERR_ARG && t == NULL, "NULL path");
    CHECK(lb_tokenizer_from_file("x", 0, NULL) == LB_ERR_ARG, "NULL out");
    CHECK(lb_tokenizer_from_model(NULL, "x", &t) == LB_ERR_ARG, "NULL model");
    int32_t *ids;
    size_t n;
    CHECK(lb_tokenize(NULL, "x", 1, 0, &ids, &n) == LB_ERR_ARG, "NULL tokenizer");
    CHECK(lb_tokenizer_vocab_size(NULL) == 0 && lb_tokenizer_bos(NULL) == -1 && lb_tokenizer_eos(NULL) == -1, "NULL");
    lb_tokenizer_free(NULL);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/lb_test_tokenizer_%ld", (long)getpid());
    char cmd[128];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
    if (system(cmd) != 0) return 2;
    test_utf8();
    test_tables();
    test_l2c();
    test_json();
    test_null();
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return check_summary();
}
