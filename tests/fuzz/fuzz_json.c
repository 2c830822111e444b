/* Fuzz harness for the strict JSON reader (src/io/json.h), the parser
 * every model file's metadata goes through. Every input must either be
 * refused with LB_ERR_PARSE and a message, or parse to a tree that
 *   (1) keeps the invariants: counts, NUL-terminated strings and keys with
 *       matching lengths, no duplicate keys, offsets that point at the
 *       value's first byte, numbers whose double and exact integer agree;
 *   (2) answers every accessor on every node consistently; and
 *   (3) written back out by the small serializer below, parses again to
 *       an equal tree.
 *
 * Built with -DLB_LIBFUZZER and clang -fsanitize=fuzzer,address (`make fuzz`)
 * it is a libFuzzer target; built plainly (`make test`) its main() runs a
 * deterministic mutation loop over built-in seeds, so CI exercises it too. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/json.h"
#include "lowbit.h"

static void fail(const char *what, size_t off)
{
    fprintf(stderr, "fuzz_json: %s (node at byte %zu)\n", what, off);
    abort();
}

/* ===== Invariants and accessors ===== */

typedef struct key_ref {
    const char *s;
    size_t n, i;
} key_ref;

static int key_cmp(const void *a, const void *b)
{
    const key_ref *x = a, *y = b;
    if (x->n != y->n) return x->n < y->n ? -1 : 1;
    return memcmp(x->s, y->s, x->n);
}

static void check_number(const lb__json *v)
{
    if (!v->str || v->num_len == 0) fail("number without text", v->offset);
    for (size_t i = 0; i < v->num_len; i++)
        if (!strchr("0123456789+-.eE", v->str[i]) || v->str[i] == '\0') fail("number text has a stray byte", v->offset);
    char *copy = malloc(v->num_len + 1);
    memcpy(copy, v->str, v->num_len);
    copy[v->num_len] = '\0';
    char *end;
    double d = strtod(copy, &end);
    if (end != copy + v->num_len) fail("number text is not a whole strtod number", v->offset);
    if (memcmp(&d, &v->number, sizeof d) != 0) fail("number differs from strtod of its text", v->offset);
    free(copy);
    uint64_t u;
    int64_t s;
    /* an exact integer and the correctly rounded double of the same text round alike */
    if (lb__json_u64(v, &u) && (double)u != v->number) fail("u64 disagrees with the double", v->offset);
    if (lb__json_i64(v, &s) && (double)s != v->number) fail("i64 disagrees with the double", v->offset);
    if (lb__json_u64(v, &u) && lb__json_i64(v, &s) && (uint64_t)s != u) fail("u64 and i64 disagree", v->offset);
    if (isnan(v->number)) fail("NaN number", v->offset);
}

static void check_object(const lb__json *v)
{
    if (v->len && (!v->items || !v->keys || !v->key_lens)) fail("object without arrays", v->offset);
    key_ref *refs = malloc((v->len ? v->len : 1) * sizeof *refs);
    for (size_t i = 0; i < v->len; i++) {
        if (!v->keys[i] || v->keys[i][v->key_lens[i]] != '\0') fail("key not NUL-terminated at key_len", v->offset);
        refs[i] = (key_ref){v->keys[i], v->key_lens[i], i};
        size_t c_len = strlen(v->keys[i]);
        const lb__json *got = lb__json_get(v, v->keys[i]);
        if (c_len == v->key_lens[i] && got != &v->items[i]) fail("lookup by key misses its member", v->offset);
        if (c_len < v->key_lens[i] && got) { /* a key holding \u0000: the lookup finds the prefix, if present */
            size_t j = (size_t)(got - v->items);
            if (j >= v->len || v->key_lens[j] != c_len || memcmp(v->keys[j], v->keys[i], c_len) != 0)
                fail("lookup of a NUL-cut key returned the wrong member", v->offset);
        }
        const char *s = lb__json_str(v, v->keys[i]);
        if (c_len == v->key_lens[i] && (s != NULL) != (v->items[i].type == LB_JSON_STRING))
            fail("lb__json_str disagrees with the member's type", v->offset);
    }
    qsort(refs, v->len, sizeof *refs, key_cmp);
    for (size_t i = 1; i < v->len; i++)
        if (key_cmp(&refs[i - 1], &refs[i]) == 0) fail("duplicate keys in a parsed object", v->offset);
    free(refs);
    if (lb__json_get(v, "\x01no such key\x02")) fail("lookup of an absent key", v->offset);
}

static void walk(const lb__json *v, const uint8_t *text, size_t size, int depth)
{
    if (depth > LB_JSON_MAX_DEPTH + 1) fail("tree deeper than the limit", v->offset);
    if (v->offset >= size) fail("offset outside the input", v->offset);
    uint8_t c = text[v->offset];
    uint64_t u;
    int64_t s;
    if (v->type != LB_JSON_NUMBER && (lb__json_u64(v, &u) || lb__json_i64(v, &s))) fail("integer of a non-number", v->offset);
    if (v->type != LB_JSON_OBJECT && (lb__json_get(v, "") || lb__json_str(v, "a"))) fail("member of a non-object", v->offset);
    switch (v->type) {
    case LB_JSON_NULL: if (c != 'n') fail("null offset", v->offset); break;
    case LB_JSON_FALSE: if (c != 'f') fail("false offset", v->offset); break;
    case LB_JSON_TRUE: if (c != 't') fail("true offset", v->offset); break;
    case LB_JSON_NUMBER:
        if (c != '-' && (c < '0' || c > '9')) fail("number offset", v->offset);
        if (v->offset + v->num_len > size || memcmp(text + v->offset, v->str, v->num_len) != 0)
            fail("number text is not the source text", v->offset);
        check_number(v);
        break;
    case LB_JSON_STRING:
        if (c != '"') fail("string offset", v->offset);
        if (!v->str || v->str[v->len] != '\0') fail("string not NUL-terminated at len", v->offset);
        break;
    case LB_JSON_ARRAY:
        if (c != '[') fail("array offset", v->offset);
        if (v->len && !v->items) fail("array without items", v->offset);
        for (size_t i = 0; i < v->len; i++) walk(&v->items[i], text, size, depth + 1);
        break;
    case LB_JSON_OBJECT:
        if (c != '{') fail("object offset", v->offset);
        check_object(v);
        for (size_t i = 0; i < v->len; i++) walk(&v->items[i], text, size, depth + 1);
        break;
    default: fail("bad type", v->offset);
    }
}

/* ===== A tiny serializer, and tree equality ===== */

typedef struct out {
    char *p;
    size_t n, cap;
} out;

static void emit(out *o, const char *s, size_t n)
{
    if (o->n + n > o->cap) {
        o->cap = (o->n + n) * 2 + 64;
        o->p = realloc(o->p, o->cap);
    }
    memcpy(o->p + o->n, s, n);
    o->n += n;
}

static void emit_string(out *o, const char *s, size_t n)
{
    emit(o, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[8];
        if (c == '"' || c == '\\') esc[0] = '\\', esc[1] = (char)c, emit(o, esc, 2);
        else if (c < 0x20) snprintf(esc, sizeof esc, "\\u%04x", c), emit(o, esc, 6);
        else emit(o, s + i, 1); /* UTF-8 passes through: the parser checked it */
    }
    emit(o, "\"", 1);
}

/* `pretty` varies the whitespace, which must not change the tree. */
static void serialize(out *o, const lb__json *v, int pretty)
{
    switch (v->type) {
    case LB_JSON_NULL: emit(o, "null", 4); break;
    case LB_JSON_FALSE: emit(o, "false", 5); break;
    case LB_JSON_TRUE: emit(o, "true", 4); break;
    case LB_JSON_NUMBER: emit(o, v->str, v->num_len); break;
    case LB_JSON_STRING: emit_string(o, v->str, v->len); break;
    case LB_JSON_ARRAY:
        emit(o, "[", 1);
        for (size_t i = 0; i < v->len; i++) {
            if (i) emit(o, pretty ? ",\r\n\t" : ",", pretty ? 4 : 1);
            serialize(o, &v->items[i], pretty);
        }
        emit(o, "]", 1);
        break;
    case LB_JSON_OBJECT:
        emit(o, pretty ? "{ " : "{", pretty ? 2 : 1);
        for (size_t i = 0; i < v->len; i++) {
            if (i) emit(o, ",", 1);
            emit_string(o, v->keys[i], v->key_lens[i]);
            emit(o, pretty ? " : " : ":", pretty ? 3 : 1);
            serialize(o, &v->items[i], pretty);
        }
        emit(o, pretty ? " }" : "}", pretty ? 2 : 1);
        break;
    }
}

static int same_tree(const lb__json *a, const lb__json *b)
{
    if (a->type != b->type) return 0;
    switch (a->type) {
    case LB_JSON_NUMBER:
        return a->num_len == b->num_len && memcmp(a->str, b->str, a->num_len) == 0 &&
               memcmp(&a->number, &b->number, sizeof a->number) == 0;
    case LB_JSON_STRING: return a->len == b->len && memcmp(a->str, b->str, a->len) == 0;
    case LB_JSON_ARRAY:
    case LB_JSON_OBJECT:
        if (a->len != b->len) return 0;
        for (size_t i = 0; i < a->len; i++) {
            if (a->type == LB_JSON_OBJECT &&
                (a->key_lens[i] != b->key_lens[i] || memcmp(a->keys[i], b->keys[i], a->key_lens[i]) != 0))
                return 0;
            if (!same_tree(&a->items[i], &b->items[i])) return 0;
        }
        return 1;
    case LB_JSON_NULL:
    case LB_JSON_FALSE:
    case LB_JSON_TRUE: return 1;
    }
    return 0;
}

static void check_round_trip(const lb__json *root, int pretty)
{
    out o = {0};
    serialize(&o, root, pretty);
    char *exact = malloc(o.n ? o.n : 1); /* exactly sized: ASan sees any overread */
    memcpy(exact, o.p, o.n);
    lb__json *back;
    if (lb__json_parse(exact, o.n, "round trip", &back) != LB_OK) {
        fprintf(stderr, "fuzz_json: %s\n", lb_last_error());
        fail("serialized tree does not parse", 0);
    }
    if (!same_tree(root, back)) fail("serialized tree parses to a different tree", 0);
    lb__json_free(back);
    free(exact);
    free(o.p);
}

static long n_parsed; /* how many inputs parsed (the rest were refused) */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    lb__json *root = (lb__json *)1;
    lb_status st = lb__json_parse((const char *)data, size, "fuzz input", &root);
    if (st != LB_OK) {
        if (root != NULL) fail("failure left *out set", 0);
        if (st != LB_ERR_PARSE && st != LB_ERR_NOMEM) fail("unexpected status", 0);
        const char *msg = lb_last_error();
        if (msg[0] == '\0' || strncmp(msg, "fuzz input: ", 12) != 0) fail("refused without a proper message", 0);
        return 0;
    }
    if (!root) fail("success without a tree", 0);
    n_parsed++;
    walk(root, data, size, 0);
    check_round_trip(root, (int)(size & 1));
    lb__json_free(root);
    return 0;
}

#ifndef LB_LIBFUZZER
static const char *const seeds[] = {
    "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":4096,\"rms_norm_eps\":1e-05,\"rope_theta\":500000.0,"
    "\"tie_word_embeddings\":false,\"torch_dtype\":\"bfloat16\",\"eos_token_id\":[128001,128008],\"rope_scaling\":null}",
    "{\"__metadata__\":{\"format\":\"pt\"},\"a.weight\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,12]}}",
    "{\"metadata\":{\"total_size\":16060522496},\"weight_map\":{\"lm_head.weight\":\"model-00004-of-00004.safetensors\"}}",
    "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"!\":0,\"\\u0120the\":1,\"\xC4\xA0" "a\":2,\"\\\"\":3},\"merges\":[\"\xC4\xA0 t\",\"h e\"]}}",
    "[0,-0,1.5,-2.5e-3,1E+2,18446744073709551615,-9223372036854775808,9007199254740993,1e400,1e-400]",
    "\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u0000\\u00e9\\uD83D\\uDE00\\uDBFF\\uDFFF\"",
    "\"\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\xF4\x8F\xBF\xBF\xEF\xBF\xBF\xC2\x80\"",
    "[[[[[[[[[[[[[[[[{\"a\":[{\"b\":{}}]}]]]]]]]]]]]]]]]]",
    "{\"k0\":0,\"k1\":1,\"k2\":2,\"k3\":3,\"k4\":4,\"k5\":5,\"k6\":6,\"k7\":7,\"k8\":8,\"k9\":9,\"k10\":10,\"k11\":11}",
    "{\"a\":1,\"a\":2}",
    "{\"a\\u0000b\":1,\"a\":2,\"\":3}",
    " \t\r\n[ true , false , null ] \n",
    "[1,2,]",
    "{\"a\":1,}",
    "01",
    "\"\\uD800\"",
    "\"\xED\xA0\x80\"",
    "[\"unterminated",
    "NaN",
    "{\"a\":[1,{\"b\":\"c\"}],\"d\":-0.0e-0}",
    "{\"x\":{\"x\":{\"x\":{\"x\":{\"x\":{\"x\":{\"x\":{\"x\":{\"x\":{\"x\":1}}}}}}}}}}",
};

static uint64_t next(uint64_t *s)
{
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

static void put(uint8_t *b, size_t *n, size_t cap, const char *s)
{
    size_t k = strlen(s);
    if (*n + k <= cap) memcpy(b + *n, s, k), *n += k;
}

/* A random document that is mostly valid: the mutations alone rarely keep
 * the text JSON, and the accept path (walk, round trip) needs traffic too.
 * Small key sets make duplicate keys common; long chains probe the depth
 * limit from both sides. */
static void gen_value(uint8_t *b, size_t *n, size_t cap, uint64_t *s, int depth)
{
    static const char *const pieces[] = {"a", "k", " ", "\\n", "\\u00e9", "\\uD83D\\uDE00", "\xC3\xA9", "\\u0000",
                                         "\\\"", "\\/", "\xF0\x9F\x98\x80", "\\t", "\\u001F", "\x7F"};
    static const char *const numbers[] = {"0", "-1", "1.5e3", "18446744073709551615", "1e400", "-0.0", "7",
                                          "123456789012345678901", "2.5E-3", "-9223372036854775808", "1e-400", "42"};
    uint64_t r = next(s);
    int kind = depth > 12 ? (int)(r % 5) : (int)(r % 8);
    if (r % 97 == 0) { /* a chain around the depth limit */
        int d = LB_JSON_MAX_DEPTH - 3 + (int)(r >> 32) % 6;
        for (int i = 0; i < d; i++) put(b, n, cap, "[");
        for (int i = 0; i < d; i++) put(b, n, cap, "]");
        return;
    }
    switch (kind) {
    case 0: put(b, n, cap, (r >> 8) % 3 == 0 ? "null" : (r >> 8) % 3 == 1 ? "true" : "false"); break;
    case 1:
    case 2: put(b, n, cap, numbers[(r >> 8) % (sizeof numbers / sizeof numbers[0])]); break;
    case 3:
    case 4:
        put(b, n, cap, "\"");
        for (int i = 0; i < (int)((r >> 16) % 6); i++)
            put(b, n, cap, pieces[next(s) % (sizeof pieces / sizeof pieces[0])]);
        put(b, n, cap, "\"");
        break;
    case 5:
    case 6: {
        put(b, n, cap, "[");
        int k = (int)((r >> 16) % 5);
        for (int i = 0; i < k; i++) {
            if (i) put(b, n, cap, (r >> 24) & 1 ? ", " : ",");
            gen_value(b, n, cap, s, depth + 1);
        }
        put(b, n, cap, "]");
        break;
    }
    default: {
        put(b, n, cap, "{");
        int k = (int)((r >> 16) % 14);
        for (int i = 0; i < k; i++) {
            char key[24];
            snprintf(key, sizeof key, "%s\"k%u\":", i ? "," : "", (unsigned)(next(s) % 40));
            put(b, n, cap, key);
            gen_value(b, n, cap, s, depth + 1);
        }
        put(b, n, cap, "}");
    }
    }
}

int main(void)
{
    const size_t n_seeds = sizeof seeds / sizeof seeds[0];
    uint64_t s = 0x9E3779B97F4A7C15ull;
    static const char alphabet[] = "{}[]:,\" \\/-+.0123456789eEtrufalsn\x01\x80\xC3\xA9\xED\xF4\xFFubdfx";
    long runs = 0;
    for (size_t k = 0; k < n_seeds; k++, runs++) LLVMFuzzerTestOneInput((const uint8_t *)seeds[k], strlen(seeds[k]));
    enum { CAP = 4096 };
    static uint8_t buf[CAP];
    for (int it = 0; it < 50000; it++, runs++) {
        size_t len = 0;
        int mutations = 1 + it % 6;
        if (it % 3 == 0) { /* a generated document, mutated once in four */
            gen_value(buf, &len, CAP, &s, 0);
            mutations = it % 4 == 0;
        } else {
            len = strlen(seeds[it % n_seeds]);
            memcpy(buf, seeds[it % n_seeds], len);
        }
        for (int m = 0; m < mutations; m++) {
            next(&s);
            size_t pos = len ? (size_t)(s >> 8) % (len + 1) : 0;
            uint8_t c = (s >> 40) % 6 == 0 ? (uint8_t)(s >> 48) : (uint8_t)alphabet[(s >> 32) % (sizeof alphabet - 1)];
            switch ((s >> 20) % 5) {
            case 0: /* insert */
                if (len < CAP) memmove(buf + pos + 1, buf + pos, len - pos), buf[pos] = c, len++;
                break;
            case 1: /* delete */
                if (pos < len) memmove(buf + pos, buf + pos + 1, len - pos - 1), len--;
                break;
            case 2: /* replace */
                if (pos < len) buf[pos] = c;
                break;
            case 3: { /* duplicate a span (repeats keys, deepens nesting) */
                size_t span = 1 + (s >> 56) % 16;
                if (pos + span <= len && len + span <= CAP)
                    memmove(buf + pos + span, buf + pos, len - pos), len += span;
                break;
            }
            default: /* truncate */
                len = pos;
            }
        }
        /* exactly sized copy, so the sanitizers see any read past len */
        uint8_t *exact = malloc(len ? len : 1);
        memcpy(exact, buf, len);
        LLVMFuzzerTestOneInput(exact, len);
        free(exact);
    }
    printf("fuzz_json: %ld inputs, %ld parsed and round-tripped, the rest refused with a message\n", runs, n_parsed);
    printf("%ld passed, 0 failed\n", runs);
    return 0;
}
#endif
