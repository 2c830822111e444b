/* C unit tests for recipes and schemes (src/weights/recipe*.c,
 * scheme.c): glob and regex matching, first match wins, rule parsing,
 * the recipe file's strictness (each unknown key, wrong types, bad
 * version, each named with its line), and the scheme table (every spec
 * validates; bits per weight against a hand computation), and
 * lb_qmodel_apply on stories260K: first match per weight, unmatched weights
 * KEPT, norms untouched, the KV format, and a rule that matches nothing
 * refused (naming it) without changing the qmodel. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "lowbit.h"
#include "weights/recipe_internal.h"

static void test_glob(void)
{
    static const struct {
        const char *pattern, *name;
        int match;
    } cases[] = {
        {"model.layers.*", "model.layers.0.self_attn.q_proj.weight", 1},
        {"*.q_proj.weight", "model.layers.11.self_attn.q_proj.weight", 1},
        {"*", "lm_head.weight", 1},
        {"*", "", 1},
        {"", "", 1},
        {"*.q_proj.weight", "model.layers.0.self_attn.q_proj.bias", 0},
        {"*q_proj*", "model.layers.0.self_attn.q_proj.weight", 1},
        {"model.layers.?.mlp.*", "model.layers.3.mlp.up_proj.weight", 1},
        {"model.layers.?.mlp.*", "model.layers.13.mlp.up_proj.weight", 0},
        {"model.layers.[0-3].*", "model.layers.2.mlp.up_proj.weight", 1},
        {"model.layers.[0-3].*", "model.layers.4.mlp.up_proj.weight", 0},
        {"model.layers.[!0-3].*", "model.layers.4.mlp.up_proj.weight", 1},
        {"model.layers.[^0-3].*", "model.layers.0.mlp.up_proj.weight", 0},
        {"*.[gu]*_proj.weight", "model.layers.0.mlp.gate_proj.weight", 1},
        {"*.[gu]*_proj.weight", "model.layers.0.mlp.down_proj.weight", 0},
        {"lm_head.weight", "lm_head.weight", 1},
        {"lm_head.weight", "lm_head.weightx", 0},
        {"lm_head", "lm_head.weight", 0}, /* whole-name: a prefix is no match */
        {"*a*a*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", 0}, /* no exponential backtracking */
        {"model.layers.[0-3", "model.layers.0", 0}, /* unclosed set: nothing */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CHECK(lb__glob_match(cases[i].pattern, cases[i].name) == cases[i].match, "glob '%s' on '%s': want %d",
              cases[i].pattern, cases[i].name, cases[i].match);
}

static lb_rule keep_rule(const char *pattern)
{
    lb_rule r = {pattern, 1, {0}, {LB_ACT_NONE, {0}}};
    return r;
}

static lb_rule spec_rule(const char *pattern, const char *spec)
{
    lb_rule r = {pattern, 0, {0}, {LB_ACT_NONE, {0}}};
    CHECK(lb_qspec_parse(spec, &r.spec) == LB_OK, "spec %s", spec);
    return r;
}

static void test_match_order(void)
{
    lb_recipe *r;
    CHECK(lb_recipe_new(&r) == LB_OK, "new");
    lb_rule a = keep_rule("re:.*mlp\\.down_proj\\.weight"), b = spec_rule("model.layers.*", "int4:g64"),
            c = spec_rule("re:model\\.layers\\.1[0-9]\\..*", "int8:channel");
    CHECK(lb_recipe_add(r, &a) == LB_OK, "add a");
    CHECK(lb_recipe_add(r, &b) == LB_OK, "add b");
    CHECK(lb_recipe_count(r) == 2, "count");
    CHECK(lb__recipe_match(r, "model.layers.3.mlp.down_proj.weight") == 0, "first match wins (keep)");
    CHECK(lb__recipe_match(r, "model.layers.3.mlp.up_proj.weight") == 1, "second rule");
    CHECK(lb__recipe_match(r, "lm_head.weight") == -1, "no rule");
    /* regexes are anchored at both ends: a prefix or a suffix alone is no match */
    CHECK(lb__recipe_match(r, "model.layers.3.mlp.down_proj.weight_scale") == 1, "regex anchored at the end");
    CHECK(lb_recipe_prepend(r, &c) == LB_OK, "prepend");
    CHECK(lb__recipe_match(r, "model.layers.12.mlp.down_proj.weight") == 0, "prepended rule comes first");
    CHECK(lb__recipe_match(r, "xmodel.layers.12.q") == -1, "regex anchored at the start");
    CHECK(strcmp(lb_recipe_rule(r, 0)->pattern, c.pattern) == 0, "rule 0 is the prepended one");
    CHECK(lb_recipe_rule(r, 3) == NULL, "past the end");
    /* the pattern was copied */
    char buf[32];
    strcpy(buf, "*.o_proj.weight");
    lb_rule d = keep_rule(buf);
    CHECK(lb_recipe_add(r, &d) == LB_OK, "add d");
    strcpy(buf, "zzz");
    CHECK(lb__recipe_match(r, "encoder.o_proj.weight") == 3, "pattern copied");
    CHECK(lb_recipe_kv(r) == LB_FMT_FP32, "no KV by default");
    CHECK(lb_recipe_set_kv(r, LB_FMT_FP8_E4M3) == LB_OK && lb_recipe_kv(r) == LB_FMT_FP8_E4M3, "kv fp8");
    CHECK(lb_recipe_set_kv(r, LB_FMT_INT8) == LB_ERR_ARG, "kv int8 refused");

    /* bad rules are refused when added, naming the pattern */
    lb_rule bad = keep_rule("re:model.(layers");
    CHECK(lb_recipe_add(r, &bad) == LB_ERR_ARG && strstr(lb_last_error(), "re:model.(layers"), "bad regex: %s",
          lb_last_error());
    bad = keep_rule("model.layers.[0-3");
    CHECK(lb_recipe_add(r, &bad) == LB_ERR_ARG && strstr(lb_last_error(), "not closed"), "unclosed set: %s",
          lb_last_error());
    bad = keep_rule("");
    CHECK(lb_recipe_add(r, &bad) == LB_ERR_ARG, "empty pattern");
    bad = keep_rule("re:");
    CHECK(lb_recipe_add(r, &bad) == LB_ERR_ARG, "empty regex");
    bad = spec_rule("*", "int8:channel");
    bad.act.mode = LB_ACT_STATIC;
    CHECK(lb_qspec_parse("int8:token", &bad.act.spec) == LB_OK, "act spec");
    CHECK(lb_recipe_add(r, &bad) == LB_ERR_ARG && strstr(lb_last_error(), "static"), "static per-token: %s",
          lb_last_error());
    bad.act.mode = LB_ACT_DYNAMIC;
    CHECK(lb_recipe_add(r, &bad) == LB_OK, "dynamic per-token is fine");
    lb_rule k = keep_rule("*");
    k.act = bad.act;
    CHECK(lb_recipe_add(r, &k) == LB_ERR_ARG, "keep with activations");
    lb_recipe_free(r);
}

static void test_rule_parse(void)
{
    char pat[64];
    lb_rule r;
    CHECK(lb_rule_parse("*.down_proj.weight=int4:g64:scale=bf16", &r, pat, sizeof pat) == LB_OK, "%s", lb_last_error());
    CHECK(strcmp(r.pattern, "*.down_proj.weight") == 0 && r.pattern == pat, "pattern '%s'", r.pattern);
    CHECK(!r.keep && r.spec.element == LB_FMT_INT4 && r.spec.group == 64 && r.spec.scale_format == LB_FMT_BF16,
          "spec (the first '=' splits: scale=bf16 stays in the spec)");
    CHECK(r.act.mode == LB_ACT_NONE, "weight-only");
    CHECK(lb_rule_parse("lm_head.weight=keep", &r, pat, sizeof pat) == LB_OK && r.keep, "keep");
    CHECK(lb_rule_parse("re:.*\\.q_proj\\.weight=nvfp4", &r, pat, sizeof pat) == LB_OK && r.spec.two_level, "regex");
    CHECK(lb_rule_parse("nothing", &r, pat, sizeof pat) == LB_ERR_ARG && strstr(lb_last_error(), "PATTERN=SPEC"),
          "no '=': %s", lb_last_error());
    CHECK(lb_rule_parse("=int8:channel", &r, pat, sizeof pat) == LB_ERR_ARG, "empty pattern");
    CHECK(lb_rule_parse("*=int9", &r, pat, sizeof pat) != LB_OK && strstr(lb_last_error(), "int9"), "bad spec: %s",
          lb_last_error());
    CHECK(lb_rule_parse("*=", &r, pat, sizeof pat) != LB_OK, "empty spec");
    CHECK(lb_rule_parse("re:(=keep", &r, pat, sizeof pat) == LB_ERR_ARG, "bad regex");
    CHECK(lb_rule_parse("model.layers.0.self_attn.q_proj.weight=keep", &r, pat, 8) == LB_ERR_ARG, "buffer too small");
}

static lb_status parse(const char *json, lb_recipe **r)
{
    return lb_recipe_parse(json, strlen(json), "r.json", r);
}

/* a document that must be refused with status st and a message holding
 * each of the words */
static void refused(const char *json, lb_status st, const char *word1, const char *word2, int line)
{
    lb_recipe *r = (lb_recipe *)1;
    lb_status got = parse(json, &r);
    CHECK(got == st, "line %d: status %d, want %d (%s)", line, got, st, lb_last_error());
    CHECK(r == NULL, "line %d: out set to NULL", line);
    CHECK(strstr(lb_last_error(), word1) != NULL, "line %d: '%s' not in: %s", line, word1, lb_last_error());
    if (word2) CHECK(strstr(lb_last_error(), word2) != NULL, "line %d: '%s' not in: %s", line, word2, lb_last_error());
}

static void test_json(void)
{
    lb_recipe *r;
    const char *good = "{\"lowbit_recipe\": 1, \"description\": \"x\", \"kv_cache\": \"fp8\",\n"
                       " \"rules\": [{\"match\": \"re:.*mlp.down_proj.weight\", \"keep\": true},\n"
                       "  {\"match\": [\"*.q_proj.weight\", \"*.k_proj.weight\"], \"weights\": \"int4:g64\",\n"
                       "   \"input_activations\": {\"spec\": \"fp8_e4m3:token\", \"mode\": \"dynamic\"}},\n"
                       "  {\"match\": \"*.v_proj.weight\", \"keep\": false, \"weights\": \"nvfp4\",\n"
                       "   \"input_activations\": {\"spec\": \"nvfp4\", \"mode\": \"local\"}, \"description\": \"v\"}],\n"
                       " \"scheme\": \"W8A8-FP8-STATIC\"}";
    CHECK(parse(good, &r) == LB_OK, "good: %s", lb_last_error());
    if (r) {
        CHECK(lb_recipe_count(r) == 5, "5 rules (a list of 2 makes 2, then the scheme's), got %zu", lb_recipe_count(r));
        CHECK(lb_recipe_rule(r, 0)->keep, "rule 1 keep");
        CHECK(strcmp(lb_recipe_rule(r, 2)->pattern, "*.k_proj.weight") == 0, "the list's second pattern");
        CHECK(lb_recipe_rule(r, 2)->act.mode == LB_ACT_DYNAMIC && lb_recipe_rule(r, 2)->spec.group == 64, "rule 3");
        CHECK(lb_recipe_rule(r, 3)->act.mode == LB_ACT_LOCAL, "local");
        CHECK(strcmp(lb_recipe_rule(r, 4)->pattern, "model.layers.*") == 0 &&
                  lb_recipe_rule(r, 4)->act.mode == LB_ACT_STATIC, "the scheme's rule last");
        CHECK(lb_recipe_kv(r) == LB_FMT_FP8_E4M3, "kv");
        lb_recipe_free(r);
    }
    CHECK(parse("{\"lowbit_recipe\": 1, \"scheme\": \"w4a16:g32\", \"kv_cache\": null}", &r) == LB_OK, "scheme only");
    if (r) {
        CHECK(lb_recipe_count(r) == 1 && lb_recipe_rule(r, 0)->spec.group == 32, "scheme group");
        lb_recipe_free(r);
    }
    /* every unknown key is refused, naming the key and its line */
    refused("{\"lowbit_recipe\": 1,\n \"rulez\": []}", LB_ERR_PARSE, "'rulez'", "line 2", __LINE__);
    refused("{\"lowbit_recipe\": 1, \"rules\": [\n{\"match\": \"*\",\n \"wieghts\": \"int8:channel\"}]}", LB_ERR_PARSE,
            "'wieghts'", "line 3", __LINE__);
    refused("{\"lowbit_recipe\": 1, \"rules\": [{\"match\": \"*\", \"weights\": \"int8:channel\",\n"
            "\"input_activations\": {\"spec\": \"int8:token\", \"mode\": \"dynamic\", \"observer\": \"minmax\"}}]}",
            LB_ERR_PARSE, "'observer'", "line 2", __LINE__);
    /* version */
    refused("{\"rules\": []}", LB_ERR_PARSE, "lowbit_recipe", NULL, __LINE__);
    refused("{\"lowbit_recipe\": 2, \"scheme\": \"W4A16\"}", LB_ERR_PARSE, "version", "'2'", __LINE__);
    refused("{\"lowbit_recipe\": \"1\", \"scheme\": \"W4A16\"}", LB_ERR_PARSE, "version", NULL, __LINE__);
    refused("{\"lowbit_recipe\": 1.5, \"scheme\": \"W4A16\"}", LB_ERR_PARSE, "version", NULL, __LINE__);
    /* types */
    refused("[1]", LB_ERR_PARSE, "an object", NULL, __LINE__);
    refused("{\"lowbit_recipe\": 1, \"rules\": {}}", LB_ERR_PARSE, "\"rules\" must be", NULL, __LINE__);
    refused("{\"lowbit_recipe\": 1, \"rules\": [\"*\"]}", LB_ERR_PARSE, "rule 1 must be", NULL, __LINE__);
    refused("{\"lowbit_recipe\": 1, \"rules\": [{\"match\": 3, \"keep\": true}]}", LB_ERR_PARSE, "\"match\"", NULL,
            __LINE__);
    refused("{\"lowbit_recipe\": 1, \"rules\": [{\"match\": [], \"keep\": true}]}", LB_ERR_PARSE, "non-empty", NULL,
            __LINE__);
    refused("{\"lowbit_recipe\": 1, \"rules\": [{\"match\": [\"a\", 1], \"keep\": true}]}", LB_ERR_PARSE,
            "must be a string", NULL, __LINE__);
    refused("{\"lowbit_recipe\": 1, \"rules\": [{\"match\": \"*\", \"keep\": 1}]}", LB_ERR_PARSE, "true or false",
            NULL, __LINE__);
    refused("{\"lowbit_recipe\": 1, \"rules\": [{\"match\": \"*\", \"weights\": 8}]}", LB_ERR_PARSE, "\"weights\"",
            NULL, __LINE__);
    refused("{\"lowbit_recipe\": 1, \"rules\": [{\"match\": \"*\"}]}", LB_ERR_PARSE, "needs \"weights\"", NULL,
            __LINE__);
    refused("{\"lowbit_recipe\": 1, \"rules\": [{\"match\": \"*\", \"keep\": true, \"weights\": \"int8:channel\"}]}",
            LB_ERR_PARSE, "choose one", NULL, __LINE__);
    refused("{\"lowbit_recipe\": 1, \"rules\": [{\"keep\": true}]}", LB_ERR_PARSE, "no \"match\"", NULL, __LINE__);
    refused("{\"lowbit_recipe\": 1, \"rules\": [{\"match\": \"*\", \"weights\": \"int8:chanel\"}]}", LB_ERR_PARSE,
            "chanel", NULL, __LINE__);
    refused("{\"lowbit_recipe\": 1, \"rules\": [{\"match\": \"*\", \"weights\": \"int8:channel\", "
            "\"input_activations\": {\"spec\": \"int8:token\"}}]}", LB_ERR_PARSE, "\"mode\"", NULL, __LINE__);
    refused("{\"lowbit_recipe\": 1, \"rules\": [{\"match\": \"*\", \"weights\": \"int8:channel\", "
            "\"input_activations\": {\"spec\": \"int8:token\", \"mode\": \"fast\"}}]}", LB_ERR_PARSE, "'fast'", NULL,
            __LINE__);
    refused("{\"lowbit_recipe\": 1, \"rules\": [{\"match\": \"*\", \"weights\": \"int8:channel\", "
            "\"input_activations\": \"int8:token\"}]}", LB_ERR_PARSE, "input_activations", NULL, __LINE__);
    refused("{\"lowbit_recipe\": 1, \"rules\": [{\"match\": \"*\", \"weights\": \"int8:channel\", "
            "\"input_activations\": {\"spec\": \"int8:token\", \"mode\": \"static\"}}]}", LB_ERR_PARSE, "static", NULL,
            __LINE__);
    refused("{\"lowbit_recipe\": 1, \"rules\": [{\"match\": \"*\", \"keep\": true, "
            "\"input_activations\": {\"spec\": \"int8:token\", \"mode\": \"dynamic\"}}]}", LB_ERR_PARSE, "16-bit", NULL,
            __LINE__);
    refused("{\"lowbit_recipe\": 1, \"rules\": [{\"match\": \"*\", \"weights\": \"fp8_e4m3:b128x128\", "
            "\"input_activations\": {\"spec\": \"fp8_e4m3:b2x128\", \"mode\": \"dynamic\"}}]}", LB_ERR_PARSE,
            "not 2-D bRxC blocks", NULL, __LINE__);
    refused("{\"lowbit_recipe\": 1, \"rules\": [{\"match\": \"re:(\", \"keep\": true}]}", LB_ERR_PARSE, "regex", NULL,
            __LINE__);
    refused("{\"lowbit_recipe\": 1, \"scheme\": \"W5A16\"}", LB_ERR_PARSE, "W5A16", NULL, __LINE__);
    refused("{\"lowbit_recipe\": 1, \"scheme\": 4}", LB_ERR_PARSE, "\"scheme\"", NULL, __LINE__);
    refused("{\"lowbit_recipe\": 1, \"rules\": []}", LB_ERR_PARSE, "no rules", NULL, __LINE__);
    refused("{\"lowbit_recipe\": 1, \"scheme\": \"W4A16\", \"kv_cache\": \"int8\"}", LB_ERR_PARSE, "'int8'", NULL,
            __LINE__);
    refused("{\"lowbit_recipe\": 1, \"scheme\": \"W4A16\", \"kv_cache\": true}", LB_ERR_PARSE, "kv_cache", NULL,
            __LINE__);
    refused("{\"lowbit_recipe\": 1, \"scheme\": \"W4A16\", \"description\": 1}", LB_ERR_PARSE, "description", NULL,
            __LINE__);
    /* the JSON parser's own rules (a repeated key, a trailing comma) stay */
    refused("{\"lowbit_recipe\": 1, \"lowbit_recipe\": 1, \"scheme\": \"W4A16\"}", LB_ERR_PARSE, "line 1", NULL,
            __LINE__);
    refused("{\"lowbit_recipe\": 1, \"scheme\": \"W4A16\",}", LB_ERR_PARSE, "line 1", NULL, __LINE__);
    CHECK(lb_recipe_load("/nonexistent/recipe.json", &r) == LB_ERR_IO, "missing file");
}

/* bits per weight of a 4096 x 4096 matrix, by hand: element bits plus
 * scale bits over the values that share the scale (plus zero points). */
static void test_schemes(void)
{
    const double n = 4096.0 * 4096.0;
    static const struct {
        const char *name;
        double bpw;
    } want[] = {
        {"W8A8-FP8", 8 + 16 / 4096.0}, {"W8A8-FP8-STATIC", 8 + 16 / (4096.0 * 4096.0)}, {"FP8-BLOCK", 8 + 16 / (128.0 * 128.0)}, /* bf16 scales */
        {"W8A8-INT8", 8 + 16 / 4096.0}, {"W8A16", 8 + 16 / 128.0}, {"W4A16", 4 + 16 / 128.0},
        {"W4A16-ASYM", 4 + (16 + 4) / 128.0}, {"NVFP4", 4 + 8 / 16.0 + 32 / (4096.0 * 4096.0)},
        {"NVFP4A16", 4 + 8 / 16.0 + 32 / (4096.0 * 4096.0)}, {"MXFP4", 4 + 8 / 32.0}, {"MXFP4A16", 4 + 8 / 32.0},
        {"MXFP8", 8 + 8 / 32.0},
    };
    (void)n;
    CHECK(lb_scheme_count() == sizeof want / sizeof want[0], "%zu schemes", lb_scheme_count());
    for (size_t i = 0; i < lb_scheme_count(); i++) {
        const lb_scheme *s = lb_scheme_at(i);
        CHECK(strcmp(s->name, want[i].name) == 0, "scheme %zu is %s, want %s", i, s->name, want[i].name);
        lb_qspec w, a;
        CHECK(lb_qspec_parse(s->weights, &w) == LB_OK && lb_qspec_validate(&w) == LB_OK, "%s weights", s->name);
        double bpw = lb_qspec_bits_per_value(&w, 4096, 4096);
        CHECK(fabs(bpw - want[i].bpw) < 1e-12, "%s: %.9f bits per weight, by hand %.9f", s->name, bpw, want[i].bpw);
        CHECK((s->act != NULL) == (s->act_mode != LB_ACT_NONE), "%s: act text iff act mode", s->name);
        if (s->act) CHECK(lb_qspec_parse(s->act, &a) == LB_OK, "%s act", s->name);
        CHECK(s->needs_calibration == (s->act_mode == LB_ACT_STATIC || s->act_mode == LB_ACT_LOCAL),
              "%s: calibration iff static scales", s->name);
        CHECK(lb_scheme_find(s->name) == s, "find %s", s->name);
        lb_recipe *r;
        CHECK(lb_scheme_recipe(s, &r) == LB_OK, "%s recipe: %s", s->name, lb_last_error());
        if (r) {
            const lb_rule *rule = lb_recipe_rule(r, 0);
            CHECK(lb_recipe_count(r) == 1 && !rule->keep && rule->act.mode == s->act_mode, "%s rule", s->name);
            CHECK(lb__recipe_match(r, "model.layers.0.self_attn.q_proj.weight") == 0, "%s: q_proj", s->name);
            CHECK(lb__recipe_match(r, "lm_head.weight") < 0 && lb__recipe_match(r, "model.embed_tokens.weight") < 0,
                  "%s: head and embeddings stay 16-bit", s->name);
            lb_recipe_free(r);
        }
    }
    /* the spellings of llm-compressor, case and '-'/'_' ignored */
    CHECK(lb_scheme_find("FP8_DYNAMIC") == lb_scheme_find("W8A8-FP8"), "FP8_DYNAMIC");
    CHECK(lb_scheme_find("fp8") == lb_scheme_find("W8A8-FP8-STATIC"), "FP8");
    CHECK(lb_scheme_find("w4a16_asym") == lb_scheme_find("W4A16-ASYM"), "w4a16_asym");
    CHECK(lb_scheme_find("INT8") == lb_scheme_find("W8A8-INT8"), "INT8");
    CHECK(lb_scheme_find("W4A16:g64") == NULL && lb_scheme_find("W4A1") == NULL && lb_scheme_find("") == NULL, "none");
    /* group suffix */
    lb_recipe *r;
    CHECK(lb_scheme_recipe_named("W4A16:g64", &r) == LB_OK, "W4A16:g64");
    if (r) {
        CHECK(lb_recipe_rule(r, 0)->spec.group == 64 && lb_recipe_rule(r, 0)->spec.element == LB_FMT_INT4, "g64");
        lb_recipe_free(r);
    }
    CHECK(lb_scheme_recipe_named("W8A8-INT8:g32", &r) == LB_OK, "channel -> groups");
    if (r) {
        CHECK(lb_recipe_rule(r, 0)->spec.granularity == LB_GRAN_GROUP && lb_recipe_rule(r, 0)->spec.group == 32 &&
                  lb_recipe_rule(r, 0)->act.spec.granularity == LB_GRAN_TOKEN, "int8 g32, acts per token");
        lb_recipe_free(r);
    }
    CHECK(lb_scheme_recipe_named("fp8_block:g64", &r) == LB_OK, "FP8-BLOCK:g64");
    if (r) {
        CHECK(lb_recipe_rule(r, 0)->spec.group == 64 && lb_recipe_rule(r, 0)->spec.group_rows == 64 &&
                  lb_recipe_rule(r, 0)->act.spec.group == 64 && lb_recipe_rule(r, 0)->act.spec.group_rows == 0,
              "64x64 weight blocks, activation groups of 64");
        lb_recipe_free(r);
    }
    CHECK(lb_scheme_recipe_named("NVFP4:g32", &r) == LB_ERR_ARG && strstr(lb_last_error(), "no group size"),
          "NVFP4 fixed: %s", lb_last_error());
    CHECK(lb_scheme_recipe_named("W4A16:64", &r) == LB_ERR_ARG && strstr(lb_last_error(), "gN"), "bad suffix");
    CHECK(lb_scheme_recipe_named("W4A16:g0", &r) == LB_ERR_ARG, "g0");
    CHECK(lb_scheme_recipe_named("W4A16:g64x", &r) == LB_ERR_ARG, "g64x");
    CHECK(lb_scheme_recipe_named("W9A16", &r) == LB_ERR_ARG && strstr(lb_last_error(), "W4A16-ASYM"),
          "unknown names the schemes: %s", lb_last_error());
}

static lb_qentry entry(const lb_qmodel *q, const char *name)
{
    size_t i = 0;
    lb_qentry e;
    memset(&e, 0, sizeof e);
    CHECK(lb_qmodel_find(q, name, &i) == LB_OK, "find %s", name);
    CHECK(lb_qmodel_entry(q, i, &e) == LB_OK, "entry %s", name);
    return e;
}

static void test_apply(void)
{
    lb_model *m;
    if (lb_model_open("models/stories260K.bin", &m) != LB_OK) {
        CHECK(0, "stories260K: %s", lb_last_error());
        return;
    }
    lb_qmodel *q;
    CHECK(lb_qmodel_new(m, &q) == LB_OK, "qmodel: %s", lb_last_error());
    lb_recipe *r;
    CHECK(lb_recipe_new(&r) == LB_OK, "recipe");
    lb_rule keep = keep_rule("*.mlp.down_proj.weight"), w = spec_rule("model.layers.*", "int4:g32"),
            norms = spec_rule("re:.*norm.*", "int8:channel");
    w.act.mode = LB_ACT_DYNAMIC;
    CHECK(lb_qspec_parse("fp8_e4m3:token", &w.act.spec) == LB_OK, "act");
    CHECK(lb_recipe_add(r, &keep) == LB_OK && lb_recipe_add(r, &w) == LB_OK, "rules");
    CHECK(lb_recipe_set_kv(r, LB_FMT_FP8_E4M3) == LB_OK, "kv");
    CHECK(lb_qmodel_apply(q, r) == LB_OK, "apply: %s", lb_last_error());
    lb_qentry e = entry(q, "model.layers.0.mlp.down_proj.weight");
    CHECK(e.state == LB_QSTATE_KEPT && e.act.mode == LB_ACT_NONE, "first match wins: down_proj kept (%d)", e.state);
    e = entry(q, "model.layers.1.self_attn.q_proj.weight");
    CHECK(e.state == LB_QSTATE_QUANTIZED && e.spec.group == 32 && e.spec.element == LB_FMT_INT4, "q_proj quantized");
    CHECK(e.act.mode == LB_ACT_DYNAMIC && e.act.spec.element == LB_FMT_FP8_E4M3, "q_proj activations");
    e = entry(q, "model.embed_tokens.weight");
    CHECK(e.state == LB_QSTATE_KEPT, "unmatched weight kept (%d)", e.state);
    e = entry(q, "model.layers.0.input_layernorm.weight");
    CHECK(e.state == LB_QSTATE_STORED, "norm as stored (%d)", e.state);
    CHECK(lb_qmodel_kv(q) == LB_FMT_FP8_E4M3, "kv set");

    /* a rule that matches only norms: refused, naming it, the qmodel unchanged */
    lb_recipe *bad;
    CHECK(lb_recipe_new(&bad) == LB_OK && lb_recipe_add(bad, &norms) == LB_OK, "bad recipe");
    CHECK(lb_qmodel_apply(q, bad) == LB_ERR_ARG, "norms only");
    CHECK(strstr(lb_last_error(), "re:.*norm.*") && strstr(lb_last_error(), "never"), "%s", lb_last_error());
    e = entry(q, "model.layers.1.self_attn.q_proj.weight");
    CHECK(e.state == LB_QSTATE_QUANTIZED && e.spec.group == 32, "unchanged after a refused recipe");
    lb_recipe_free(bad);
    /* a rule shadowed by an earlier one matches nothing */
    lb_rule late = spec_rule("*.q_proj.weight", "int8:channel");
    CHECK(lb_recipe_add(r, &late) == LB_OK, "late rule");
    CHECK(lb_qmodel_apply(q, r) == LB_ERR_ARG && strstr(lb_last_error(), "rule 3") &&
              strstr(lb_last_error(), "model.embed_tokens.weight"), "shadowed: %s", lb_last_error());
    /* activations on the embedding (a lookup) */
    lb_recipe *emb;
    lb_rule ew = w;
    ew.pattern = "model.embed_tokens.weight";
    CHECK(lb_recipe_new(&emb) == LB_OK && lb_recipe_add(emb, &ew) == LB_OK, "emb recipe");
    CHECK(lb_qmodel_apply(q, emb) == LB_ERR_ARG && strstr(lb_last_error(), "embedding"), "%s", lb_last_error());
    lb_recipe_free(emb);
    /* an empty recipe keeps every weight 16-bit */
    lb_recipe *none;
    CHECK(lb_recipe_new(&none) == LB_OK && lb_qmodel_apply(q, none) == LB_OK, "empty recipe");
    e = entry(q, "model.layers.1.self_attn.q_proj.weight");
    CHECK(e.state == LB_QSTATE_KEPT && e.act.mode == LB_ACT_NONE, "empty recipe: kept");
    CHECK(lb_qmodel_kv(q) == LB_FMT_FP32, "empty recipe: no KV format");
    lb_recipe_free(none);
    lb_recipe_free(r);
    lb_qmodel_free(q);
    lb_model_close(m);
}

int main(void)
{
    test_glob();
    test_match_order();
    test_rule_parse();
    test_json();
    test_schemes();
    test_apply();
    return check_summary();
}
