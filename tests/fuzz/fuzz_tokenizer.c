/* Fuzz harness for the tokenizers (src/model/tokenizer*.c). Every input is
 * used twice:
 *   (a) as text, tokenized by the llama2.c tokenizer models/tok512.bin and,
 *       when .cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf is there, by
 *       SmolLM2's GGUF tokenizer (byte-level BPE; each loaded once): every
 *       id lies in the vocabulary, and the ids' bytes (lb_token_bytes) put
 *       together give back the text: for llama2.c with the one leading
 *       space of the dummy prefix, for SmolLM2 without the 21 bytes its
 *       vocabulary lacks (a byte with no token is dropped, as HF does);
 *   (b) as a tokenizer file (tokenizer.json, byte-level or in the legacy
 *       SentencePiece form, GGUF or a llama2.c tokenizer of a few
 *       vocabulary sizes): it is refused with a message, or it
 *       loads and then tokenizes a fixed text into ids that lie in the
 *       vocabulary and have bytes; a SentencePiece-style one is then
 *       written as Hugging Face files (export/hf_tokenizer_gguf.c): that
 *       is refused with a message, or its tokenizer.json loads back.
 *
 * With -DLB_LIBFUZZER (`make fuzz`) it is a libFuzzer target (run it from
 * the repository root, where models/ is); otherwise its main() mutates
 * built-in texts and tokenizer files (`make test`). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lowbit.h"
#include "export/hf_tokenizer_internal.h"
#include "model/tokenizer_internal.h"
#include "util/error.h"

#define L2C_PATH "models/tok512.bin"
#define SMOL_PATH ".cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

/* The bytes SmolLM2's vocabulary has no token for. */
static const uint8_t smol_missing[] = {0x04, 0x06, 0x13, 0x14, 0x16, 0x1D, 0xC0, 0xC1, 0xF1, 0xF2, 0xF5,
                                       0xF6, 0xF7, 0xF8, 0xF9, 0xFA, 0xFB, 0xFC, 0xFD, 0xFE, 0xFF};

static void fail(const char *what, const uint8_t *data, size_t size)
{
    fprintf(stderr, "fuzz_tokenizer: %s\ninput (%zu bytes):", what, size);
    for (size_t i = 0; i < size && i < 256; i++) fprintf(stderr, " %02x", data[i]);
    fprintf(stderr, "%s\n", size > 256 ? " ..." : "");
    abort();
}

static lb_tokenizer *l2c_tok, *smol_tok;
static int loaded;
static char tmp_dir[64], tmp_json[96], tmp_config[112], out_dir[96];
static const char *const out_files[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                        "generation_config.json"};

static void remove_out(void)
{
    for (size_t i = 0; i < sizeof out_files / sizeof *out_files; i++) {
        char p[160];
        snprintf(p, sizeof p, "%s/%s", out_dir, out_files[i]);
        unlink(p);
    }
}

static void remove_tmp(void)
{
    remove_out(), rmdir(out_dir);
    unlink(tmp_json), unlink(tmp_config), rmdir(tmp_dir);
}

static void load_once(void)
{
    if (loaded) return;
    loaded = 1;
    if (lb_tokenizer_from_file(L2C_PATH, 512, &l2c_tok) != LB_OK) {
        fprintf(stderr, "fuzz_tokenizer: cannot load %s (run from the repository root): %s\n", L2C_PATH,
                lb_last_error());
        abort();
    }
    if (access(SMOL_PATH, R_OK) == 0) {
        if (lb_tokenizer_from_file(SMOL_PATH, 0, &smol_tok) != LB_OK) {
            fprintf(stderr, "fuzz_tokenizer: cannot load %s: %s\n", SMOL_PATH, lb_last_error());
            abort();
        }
        uint8_t missing[256] = {0};
        for (size_t i = 0; i < sizeof smol_missing; i++) missing[smol_missing[i]] = 1;
        for (int b = 0; b < 256; b++)
            if ((smol_tok->byte_id[b] < 0) != missing[b]) {
                fprintf(stderr, "fuzz_tokenizer: SmolLM2 byte 0x%02X %s a token, not as expected\n", b,
                        missing[b] ? "has" : "lacks");
                abort();
            }
    }
    /* tmpfs when there is one: rewriting a file on ext4 flushes it at every close */
    strcpy(tmp_dir, access("/dev/shm", W_OK) == 0 ? "/dev/shm/fuzz_tokenizer.XXXXXX" : "/tmp/fuzz_tokenizer.XXXXXX");
    if (!mkdtemp(tmp_dir)) {
        perror("fuzz_tokenizer: mkdtemp");
        abort();
    }
    atexit(remove_tmp);
    snprintf(tmp_json, sizeof tmp_json, "%s/tokenizer.json", tmp_dir);
    snprintf(tmp_config, sizeof tmp_config, "%s/tokenizer_config.json", tmp_dir);
    snprintf(out_dir, sizeof out_dir, "%s/out", tmp_dir);
    if (mkdir(out_dir, 0700) != 0) {
        perror("fuzz_tokenizer: mkdir");
        abort();
    }
}

/* Tokenizes text; every id in range; returns the ids' bytes put together (malloc'd). */
static char *round_trip(const lb_tokenizer *t, const uint8_t *data, size_t size, size_t *out_len)
{
    int32_t *ids;
    size_t n;
    if (lb_tokenize(t, (const char *)data, size, 0, &ids, &n) != LB_OK) fail("lb_tokenize failed", data, size);
    if (!ids) fail("lb_tokenize gave no id array", data, size);
    uint32_t vocab = lb_tokenizer_vocab_size(t);
    size_t cap = 64, len = 0;
    char *out = malloc(cap);
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || (uint32_t)ids[i] >= vocab) fail("an id outside the vocabulary", data, size);
        const char *b;
        size_t bl;
        if (lb_token_bytes(t, ids[i], &b, &bl) != LB_OK) fail("lb_token_bytes refused an id", data, size);
        while (len + bl > cap) out = realloc(out, cap *= 2);
        memcpy(out + len, b, bl);
        len += bl;
    }
    free(ids);
    *out_len = len;
    return out;
}

static void check_text(const uint8_t *data, size_t size)
{
    size_t len;
    char *got = round_trip(l2c_tok, data, size, &len);
    /* the dummy prefix: one space before non-empty text */
    if (size == 0 ? len != 0 : len != size + 1 || got[0] != ' ' || memcmp(got + 1, data, size) != 0)
        fail("llama2.c tokenizer: the ids' bytes are not ' ' + the text", data, size);
    free(got);
    if (!smol_tok) return;
    got = round_trip(smol_tok, data, size, &len);
    /* the text less the bytes with no token */
    char *want = malloc(size + 1);
    size_t want_len = 0;
    for (size_t i = 0; i < size; i++)
        if (smol_tok->byte_id[data[i]] >= 0) want[want_len++] = (char)data[i];
    if (len != want_len || memcmp(got, want, len) != 0)
        fail("SmolLM2 tokenizer: the ids' bytes are not the text (less the bytes it has no token for)", data, size);
    free(got), free(want);
}

static const char fixed_text[] = "Hello, world! It's 2024: caf\xC3\xA9 \xE2\x96\x81x <s> </s> <|endoftext|>\n\n  "
                                 "\xF0\x9F\x98\x80 \xFF\xC3 12345 ab";

static void check_loaded(const lb_tokenizer *t, const uint8_t *data, size_t size)
{
    uint32_t n = lb_tokenizer_vocab_size(t);
    if (n == 0) fail("a tokenizer with no vocabulary loaded", data, size);
    int32_t bos = lb_tokenizer_bos(t), eos = lb_tokenizer_eos(t);
    if (bos < -1 || bos >= (int64_t)n || eos < -1 || eos >= (int64_t)n) fail("BOS or EOS outside the vocabulary", data, size);
    for (uint32_t id = 0; id < n && id < 4096; id++) {
        const char *b;
        size_t bl;
        if (lb_token_bytes(t, (int32_t)id, &b, &bl) != LB_OK) fail("lb_token_bytes refused an id in range", data, size);
        if (bl && (b[0] == 0x7F || b[bl - 1] == 0x7F)) (void)0; /* touch both ends */
    }
    for (int add_bos = 0; add_bos < 2; add_bos++) {
        int32_t *ids;
        size_t k;
        lb__fail(LB_OK, "%s", "");
        lb_status st = lb_tokenize(t, fixed_text, sizeof fixed_text - 1, add_bos, &ids, &k);
        if (st != LB_OK) {
            if (lb_last_error()[0] == '\0') fail("lb_tokenize failed without a message", data, size);
            continue;
        }
        for (size_t i = 0; i < k; i++) {
            const char *b;
            size_t bl;
            if (ids[i] < 0 || (uint32_t)ids[i] >= n || lb_token_bytes(t, ids[i], &b, &bl) != LB_OK)
                fail("a loaded tokenizer gave an id outside its vocabulary", data, size);
        }
        free(ids);
    }
}

static long hf_written; /* tokenizers written as Hugging Face files (the seeds must reach there) */

/* A SentencePiece-style tokenizer as Hugging Face files: refused with a
 * message, or written so that lowbit reads the tokenizer.json back. */
static void check_hf_files(const lb_tokenizer *t, const uint8_t *data, size_t size)
{
    int written = 0;
    lb__fail(LB_OK, "%s", "");
    if (lb__hf_tokenizer_from_tok(t, NULL, "fuzz input", out_dir, &written) != LB_OK) {
        if (lb_last_error()[0] == '\0') fail("Hugging Face files refused without a message", data, size);
    } else {
        char p[160];
        snprintf(p, sizeof p, "%s/tokenizer.json", out_dir);
        lb_tokenizer *back = NULL;
        if (written != 4 || lb_tokenizer_from_file(p, 0, &back) != LB_OK)
            fail("a written tokenizer.json does not load back", data, size);
        if (lb_tokenizer_vocab_size(back) != lb_tokenizer_vocab_size(t))
            fail("a written tokenizer.json has another vocabulary size", data, size);
        lb_tokenizer_free(back);
        hf_written++;
    }
    remove_out();
}

static void check_file(const uint8_t *data, size_t size)
{
    FILE *f = fopen(tmp_json, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
        perror("fuzz_tokenizer: writing the input");
        abort();
    }
    /* odd sizes: a tokenizer_config.json beside it naming BOS and EOS */
    if (size % 2) {
        static const char cfg[] = "{\"bos_token\": \"a\", \"eos_token\": {\"content\": \"<|endoftext|>\"}, "
                                  "\"add_bos_token\": true}";
        FILE *c = fopen(tmp_config, "wb");
        if (!c || fwrite(cfg, 1, sizeof cfg - 1, c) != sizeof cfg - 1 || fclose(c) != 0) abort();
    } else {
        unlink(tmp_config);
    }
    size_t i = 0;
    while (i < size && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r')) i++;
    int self_sized = (size >= 4 && memcmp(data, "GGUF", 4) == 0) || (i < size && data[i] == '{');
    static const uint32_t vocabs[] = {1, 3, 16, 271, 300}; /* 271: the llama2.c seed's own */
    for (size_t v = 0; v < (self_sized ? 1 : sizeof vocabs / sizeof vocabs[0]); v++) {
        lb_tokenizer *t = NULL;
        lb__fail(LB_OK, "%s", "");
        if (lb_tokenizer_from_file(tmp_json, vocabs[v], &t) == LB_OK) {
            if (!t) fail("a tokenizer loaded as NULL", data, size);
            check_loaded(t, data, size);
            if (t->kind == LB__TOK_SPM) check_hf_files(t, data, size);
            lb_tokenizer_free(t);
        } else {
            if (t) fail("a refused tokenizer was handed out", data, size);
            if (lb_last_error()[0] == '\0') fail("a tokenizer file refused without a message", data, size);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    load_once();
    check_text(data, size);
    check_file(data, size);
    return 0;
}

#ifndef LB_LIBFUZZER
/* A llama2.c tokenizer: max_token_length, then (score, length, bytes) per
 * token: <unk>, BOS, EOS, <0x00>..<0xFF>, then a few merges. */
static uint8_t *make_l2c(size_t *len)
{
    static const char *const extra[] = {" ", "a", "b", "ab", " ab", "\xC3\xA9", " a", "ba", "aba", "<", "s", "<s"};
    size_t cap = 4 + 300 * 16, at = 4;
    uint8_t *b = calloc(cap, 1);
    int32_t maxlen = 6;
    memcpy(b, &maxlen, 4);
    for (int i = 0; i < 3 + 256 + (int)(sizeof extra / sizeof *extra); i++) {
        char s[8];
        const char *p = s;
        if (i == 0) p = "<unk>";
        else if (i == 1) p = "\n<s>\n";
        else if (i == 2) p = "\n</s>\n";
        else if (i < 259) snprintf(s, sizeof s, "<0x%02X>", i - 3);
        else p = extra[i - 259];
        float score = i < 259 ? 0.0f : (float)-(i - 259);
        int32_t n = (int32_t)strlen(p);
        memcpy(b + at, &score, 4), memcpy(b + at + 4, &n, 4), memcpy(b + at + 8, p, (size_t)n);
        at += 8 + (size_t)n;
    }
    *len = at;
    return b;
}

/* A tokenizer.json in transformers' legacy Llama form: <unk>, <s>, </s>,
 * the 256 byte tokens, then a few pieces and their merges. */
static char *make_spm_json(size_t *len)
{
    static const char *const extra[] = {"\u2581", "a", "b", "ab", "\u2581a", "\u2581ab", "\u00e9", "ba"};
    static const char *const merges[] = {"\"a b\"", "[\"\u2581\", \"a\"]", "\"\u2581a b\"", "\"b a\""};
    size_t cap = 16384, at = 0;
    char *b = malloc(cap);
    at += (size_t)snprintf(b + at, cap - at, "{\"version\": \"1.0\", \"added_tokens\": [{\"id\": 0, \"content\": "
                           "\"<unk>\", \"special\": true}, {\"id\": 1, \"content\": \"<s>\", \"special\": true}, "
                           "{\"id\": 2, \"content\": \"</s>\", \"special\": true}], \"normalizer\": {\"type\": "
                           "\"Sequence\", \"normalizers\": [{\"type\": \"Prepend\", \"prepend\": \"\\u2581\"}, "
                           "{\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"\\u2581\"}]}, "
                           "\"pre_tokenizer\": null, \"model\": {\"type\": \"BPE\", \"unk_token\": \"<unk>\", "
                           "\"fuse_unk\": true, \"byte_fallback\": true, \"vocab\": {\"<unk>\": 0, \"<s>\": 1, "
                           "\"</s>\": 2");
    for (int i = 0; i < 256; i++) at += (size_t)snprintf(b + at, cap - at, ", \"<0x%02X>\": %d", i, 3 + i);
    for (int i = 0; i < (int)(sizeof extra / sizeof *extra); i++)
        at += (size_t)snprintf(b + at, cap - at, ", \"%s\": %d", extra[i], 259 + i);
    at += (size_t)snprintf(b + at, cap - at, "}, \"merges\": [");
    for (int i = 0; i < (int)(sizeof merges / sizeof *merges); i++)
        at += (size_t)snprintf(b + at, cap - at, "%s%s", i ? ", " : "", merges[i]);
    at += (size_t)snprintf(b + at, cap - at, "]}}");
    *len = at;
    return b;
}

static const char json_seed[] =
    "{\"version\": \"1.0\", \"added_tokens\": [{\"id\": 7, \"content\": \"<|endoftext|>\", \"special\": true, "
    "\"lstrip\": false, \"rstrip\": true}], \"normalizer\": null, \"pre_tokenizer\": {\"type\": \"Sequence\", "
    "\"pretokenizers\": [{\"type\": \"Digits\", \"individual_digits\": true}, {\"type\": \"ByteLevel\", "
    "\"add_prefix_space\": false, \"use_regex\": true}]}, \"model\": {\"type\": \"BPE\", \"dropout\": null, "
    "\"unk_token\": null, \"continuing_subword_prefix\": \"\", \"end_of_word_suffix\": \"\", \"ignore_merges\": "
    "false, \"vocab\": {\"a\": 0, \"b\": 1, \"\\u0120\": 2, \"ab\": 3, \"\\u0120a\": 4, \"\\u0120ab\": 5, \"1\": 6}, "
    "\"merges\": [\"a b\", [\"\\u0120\", \"a\"], \"\\u0120a b\"]}}";

static const char *const text_seeds[] = {
    "Once upon a time, there was a little girl named Lily. She loved to play outside.",
    "caf\xC3\xA9 na\xC3\xAFve \xE2\x80\x94 \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xF0\x9F\x98\x80  \t\n\n x",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n<s></s><0x41> 123456 it's I'll",
};
static const char binary_seed[] = "\x00\x01\x04\x80\xBF\xC0\xC1\xC3\xE2\x96\xF0\x9F\xF5\xFF  \xE2\x96\x81 \x0B\x0C\r\n";

int main(void)
{
    uint64_t s = 0x9E3779B97F4A7C15ull;
    long runs = 0;
    enum { CAP = 16384, SEEDS = 8 };
    size_t lens[SEEDS];
    const uint8_t *seeds[SEEDS];
    uint8_t *l2c = make_l2c(&lens[0]);
    char *spm_json = make_spm_json(&lens[7]);
    seeds[7] = (const uint8_t *)spm_json;
    seeds[0] = l2c;
    seeds[1] = (const uint8_t *)json_seed, lens[1] = sizeof json_seed - 1;
    for (int k = 0; k < 3; k++) seeds[2 + k] = (const uint8_t *)text_seeds[k], lens[2 + k] = strlen(text_seeds[k]);
    seeds[5] = (const uint8_t *)binary_seed, lens[5] = sizeof binary_seed - 1; /* it holds NULs */
    seeds[6] = (const uint8_t *)"", lens[6] = 0;
    load_once();
    /* the seed tokenizers must load */
    lb_tokenizer *t;
    FILE *f = fopen(tmp_json, "wb");
    fwrite(l2c, 1, lens[0], f), fclose(f);
    if (lb_tokenizer_from_file(tmp_json, 271, &t) != LB_OK) {
        fprintf(stderr, "fuzz_tokenizer: the llama2.c seed must load: %s\n", lb_last_error());
        return 1;
    }
    lb_tokenizer_free(t);
    f = fopen(tmp_json, "wb");
    fwrite(json_seed, 1, lens[1], f), fclose(f);
    if (lb_tokenizer_from_file(tmp_json, 0, &t) != LB_OK) {
        fprintf(stderr, "fuzz_tokenizer: the tokenizer.json seed must load: %s\n", lb_last_error());
        return 1;
    }
    lb_tokenizer_free(t);
    f = fopen(tmp_json, "wb");
    fwrite(spm_json, 1, lens[7], f), fclose(f);
    if (lb_tokenizer_from_file(tmp_json, 0, &t) != LB_OK) {
        fprintf(stderr, "fuzz_tokenizer: the SentencePiece tokenizer.json seed must load: %s\n", lb_last_error());
        return 1;
    }
    lb_tokenizer_free(t);
    uint8_t *buf = malloc(CAP);
    static const uint8_t interesting[] = {' ', '\n', '{', '}', '"', ',', ':', '[', ']', '\\', '0', '1', 'a', 'b',
                                          '<', '>', '|', 0x00, 0x80, 0xC3, 0xE2, 0xF0, 0xFF, 0x96, 0x81};
    for (int it = 0; it < 24000; it++, runs++) {
        size_t k = (size_t)it % SEEDS, len = lens[k];
        memcpy(buf, seeds[k], len);
        for (int mu = 0; mu < 1 + (it / SEEDS) % 4; mu++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            size_t pos = len ? (size_t)(s >> 8) % len : 0;
            uint8_t byte = (s >> 40) & 1 ? interesting[(s >> 48) % sizeof interesting] : (uint8_t)(s >> 56);
            switch ((s >> 32) % 5) {
            case 0: if (len) buf[pos] ^= (uint8_t)(1u << ((s >> 50) % 8)); break;
            case 1: if (len) buf[pos] = byte; break;
            case 2: if ((k < 2 || k == 7) && len) len = pos; /* truncate (a tokenizer file) */
                    else if (len) len -= (s >> 50) % (len + 1 < 8 ? len + 1 : 8);
                    break;
            case 3: /* insert */
                if (len < CAP) {
                    memmove(buf + pos + 1, buf + pos, len - pos);
                    buf[pos] = byte, len++;
                }
                break;
            default: /* repeat a span */
                if (len && len * 2 <= CAP) {
                    size_t n = 1 + (s >> 44) % (len - pos < 16 ? len - pos : 16);
                    memmove(buf + pos + n, buf + pos, len - pos);
                    len += n;
                }
            }
        }
        LLVMFuzzerTestOneInput(buf, len);
    }
    free(buf), free(l2c), free(spm_json);
    lb_tokenizer_free(l2c_tok), lb_tokenizer_free(smol_tok);
    if (hf_written < 100) {
        fprintf(stderr, "fuzz_tokenizer: only %ld inputs were written as Hugging Face files\n", hf_written);
        return 1;
    }
    printf("fuzz_tokenizer: %ld inputs (%ld written as Hugging Face files)\n%ld passed, 0 failed\n", runs, hf_written,
           runs);
    return 0;
}
#endif
