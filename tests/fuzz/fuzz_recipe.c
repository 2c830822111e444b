/* Fuzz harness for the recipe file (src/weights/recipe_json.c) and the
 * --rule parser. Every input must either be refused with a message (a
 * recipe error names its line) or give a recipe whose every rule
 *   (1) has a pattern that matches names without crashing, and a weight
 *       spec that validates (unless it keeps) and prints canonically;
 *   (2) is found again by matching: the first rule that matches its own
 *       literal pattern (a glob without wildcards) is at or before it.
 *
 * Built with -DLB_LIBFUZZER and clang -fsanitize=fuzzer,address (`make fuzz`)
 * it is a libFuzzer target; built plainly (`make test`) its main() runs a
 * deterministic mutation loop over built-in seeds, so CI exercises it too. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lowbit.h"
#include "weights/recipe_internal.h"

static void fail(const char *what, const char *input)
{
    fprintf(stderr, "fuzz_recipe: %s for input '%.200s'\n", what, input);
    abort();
}

static const char *const names[] = {
    "model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight", "model.layers.10.mlp.down_proj.weight",
    "model.norm.weight", "lm_head.weight", "", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
};

static void check_recipe(const lb_recipe *r, const char *input)
{
    for (size_t k = 0; k < lb_recipe_count(r); k++) {
        const lb_rule *rule = lb_recipe_rule(r, k);
        if (!rule || !rule->pattern || !rule->pattern[0]) fail("a rule without a pattern", input);
        if (!rule->keep && lb_qspec_validate(&rule->spec) != LB_OK) fail("a rule's spec does not validate", input);
        char text[256];
        if (!rule->keep && lb_qspec_format(&rule->spec, text, sizeof text) <= 0) fail("spec does not print", input);
        if (strpbrk(rule->pattern, "*?[") == NULL && strncmp(rule->pattern, "re:", 3) != 0) {
            long m = lb__recipe_match(r, rule->pattern);
            if (m < 0 || (size_t)m > k) fail("a literal pattern does not match itself", input);
        }
    }
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) (void)lb__recipe_match(r, names[i]);
    lb_format kv = lb_recipe_kv(r);
    if (kv != LB_FMT_FP32 && kv != LB_FMT_FP8_E4M3) fail("a KV format other than none or fp8", input);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    lb_recipe *r = NULL;
    if (lb_recipe_parse(text, size, "fuzz.json", &r) != LB_OK) {
        if (r) fail("refused but returned a recipe", text);
        if (lb_last_error()[0] == '\0') fail("refused without a message", text);
    } else {
        check_recipe(r, text);
        lb_recipe_free(r);
    }
    /* the same bytes as a --rule */
    char pat[LB_RECIPE_MAX_PATTERN + 1];
    lb_rule rule;
    if (lb_rule_parse(text, &rule, pat, sizeof pat) == LB_OK) {
        if (lb_recipe_new(&r) != LB_OK) fail("lb_recipe_new", text);
        if (lb_recipe_add(r, &rule) != LB_OK) fail("a parsed --rule is refused by lb_recipe_add", text);
        check_recipe(r, text);
        lb_recipe_free(r);
    } else if (lb_last_error()[0] == '\0') fail("--rule refused without a message", text);
    free(text);
    return 0;
}

#ifndef LB_LIBFUZZER
static const char *const seeds[] = {
    ("{\"lowbit_recipe\": 1, \"kv_cache\": \"fp8\", \"rules\": [{\"match\": \"re:.*mlp.down_proj.weight\", \"keep\": "
     "true}, {\"match\": \"*.self_attn.*\", \"weights\": \"int4:g64\", \"input_activations\": {\"spec\": "
     "\"fp8_e4m3:token\", \"mode\": \"dynamic\"}}]}"),
    "{\"lowbit_recipe\": 1, \"scheme\": \"W4A16:g64\"}",
    ("{\"lowbit_recipe\": 1, \"scheme\": \"NVFP4\", \"rules\": [{\"match\": [\"lm_head.weight\", \"model.[ab]*\"], "
     "\"keep\": true}]}"),
    "{\"lowbit_recipe\": 1, \"rules\": [{\"match\": \"model.norm.weight\", \"weights\": \"mxfp4:round=even\"}]}",
    "*.q_proj.weight=int8:channel:scale=bf16",
    "re:model\\.layers\\.[0-9]+\\..*=nvfp4",
    "lm_head.weight=keep",
};

int main(void)
{
    uint64_t s = 0x9E3779B97F4A7C15ull;
    const char alphabet[] = "{}[]\":,*?.^!-=re0123456789 abcdgiklmnprstuwx\\";
    long runs = 0;
    for (size_t k = 0; k < sizeof seeds / sizeof seeds[0]; k++, runs++)
        LLVMFuzzerTestOneInput((const uint8_t *)seeds[k], strlen(seeds[k]));
    for (int it = 0; it < 100000; it++, runs++) {
        char buf[600];
        strcpy(buf, seeds[it % (sizeof seeds / sizeof seeds[0])]);
        for (int m = 0; m < 1 + it % 6; m++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            size_t len = strlen(buf), pos = len ? (size_t)(s >> 8) % (len + 1) : 0;
            char c = (s >> 40) % 7 == 0 ? (char)((s >> 48) & 0xFF) : alphabet[(s >> 32) % (sizeof alphabet - 1)];
            switch ((s >> 20) % 3) {
            case 0: if (len < sizeof buf - 2) memmove(buf + pos + 1, buf + pos, len - pos + 1), buf[pos] = c; break;
            case 1: if (pos < len) memmove(buf + pos, buf + pos + 1, len - pos); break;
            default: if (pos < len && c) buf[pos] = c;
            }
        }
        LLVMFuzzerTestOneInput((const uint8_t *)buf, strlen(buf));
    }
    printf("fuzz_recipe: %ld inputs\n%ld passed, 0 failed\n", runs, runs);
    return 0;
}
#endif
