/* C unit tests for the exporters' JSON writer (src/export/export_json.c):
 * the exact text (commas, indentation, escapes, numbers that read back
 * to the same double), and misuse reported instead of bad JSON. The text is
 * also parsed back with lowbit's strict JSON reader. */
#undef NDEBUG
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "export/exporter.h"
#include "io/json.h"

static void parses(const lb__jsonw *w, int line)
{
    size_t len;
    const char *t = lb__jsonw_text(w, &len);
    lb__json *j = NULL;
    lb_status st = lb__json_parse(t, len, "jsonw", &j);
    CHECK(st == LB_OK, "line %d: the strict reader refuses the text: %s\n%s", line, lb_last_error(), t);
    lb__json_free(j);
}

static void nested(void)
{
    lb__jsonw *w = lb__jsonw_new();
    lb__jsonw_object(w);
    lb__jsonw_key(w, "quant_method"), lb__jsonw_str(w, "compressed-tensors");
    lb__jsonw_key(w, "ignore"), lb__jsonw_array(w), lb__jsonw_str(w, "lm_head"), lb__jsonw_end(w);
    lb__jsonw_key(w, "empty"), lb__jsonw_object(w), lb__jsonw_end(w);
    lb__jsonw_key(w, "none"), lb__jsonw_array(w), lb__jsonw_end(w);
    lb__jsonw_key(w, "n"), lb__jsonw_int(w, -42);
    lb__jsonw_key(w, "x"), lb__jsonw_num(w, 0.1);
    lb__jsonw_key(w, "one"), lb__jsonw_num(w, 1.0);
    lb__jsonw_key(w, "b"), lb__jsonw_bool(w, 1);
    lb__jsonw_key(w, "z"), lb__jsonw_null(w);
    lb__jsonw_key(w, "raw"), lb__jsonw_raw(w, "[1, 2]");
    lb__jsonw_end(w);
    CHECK(lb__jsonw_status(w) == LB_OK, "%s", lb_last_error());
    const char *want = "{\n  \"quant_method\": \"compressed-tensors\",\n  \"ignore\": [\n    \"lm_head\"\n  ],\n"
                       "  \"empty\": {},\n  \"none\": [],\n  \"n\": -42,\n  \"x\": 0.1,\n  \"one\": 1.0,\n"
                       "  \"b\": true,\n  \"z\": null,\n  \"raw\": [1, 2]\n}";
    size_t len;
    const char *got = lb__jsonw_text(w, &len);
    CHECK(strcmp(got, want) == 0 && len == strlen(want), "got:\n%s", got);
    parses(w, __LINE__);
    lb__jsonw_free(w);
}

static void escapes(void)
{
    lb__jsonw *w = lb__jsonw_new();
    lb__jsonw_str(w, "a\"b\\c\n\t\x01\xc3\xa9");
    CHECK(lb__jsonw_status(w) == LB_OK, "%s", lb_last_error());
    const char *got = lb__jsonw_text(w, NULL);
    CHECK(strcmp(got, "\"a\\\"b\\\\c\\n\\t\\u0001\xc3\xa9\"") == 0, "got %s", got);
    parses(w, __LINE__);
    lb__jsonw_free(w);
}

/* Every double comes back exactly (the scales in a config must). */
static void numbers(void)
{
    const double v[] = {0.0, -0.0, 1e-300, 3.0517578125e-05, 1.0 / 3.0, 448.0, 2688.0 / 7.0, 1e300, -123456789.125};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        lb__jsonw *w = lb__jsonw_new();
        lb__jsonw_num(w, v[i]);
        const char *t = lb__jsonw_text(w, NULL);
        double back = strtod(t, NULL);
        CHECK(lb__jsonw_status(w) == LB_OK && back == v[i] && signbit(back) == signbit(v[i]), "%.17g -> %s", v[i], t);
        CHECK(strpbrk(t, ".eE") != NULL, "%s reads as an integer", t);
        lb__jsonw_free(w);
    }
}

static void misuse(void)
{
    lb__jsonw *w = lb__jsonw_new();
    lb__jsonw_object(w);
    lb__jsonw_str(w, "a value where a key belongs");
    lb__jsonw_end(w);
    CHECK(lb__jsonw_status(w) == LB_ERR_ARG, "a value without a key is accepted");
    lb__jsonw_free(w);

    w = lb__jsonw_new();
    lb__jsonw_object(w);
    CHECK(lb__jsonw_status(w) == LB_ERR_ARG, "an unclosed object is accepted");
    lb__jsonw_free(w);

    w = lb__jsonw_new();
    lb__jsonw_array(w), lb__jsonw_key(w, "k"), lb__jsonw_int(w, 1), lb__jsonw_end(w);
    CHECK(lb__jsonw_status(w) == LB_ERR_ARG, "a key in an array is accepted");
    lb__jsonw_free(w);

    w = lb__jsonw_new();
    lb__jsonw_num(w, NAN);
    CHECK(lb__jsonw_status(w) == LB_ERR_ARG, "NaN is accepted");
    lb__jsonw_free(w);

    w = lb__jsonw_new();
    lb__jsonw_int(w, 1), lb__jsonw_int(w, 2);
    CHECK(lb__jsonw_status(w) == LB_ERR_ARG, "two top-level values are accepted");
    lb__jsonw_free(w);
}

/* A large document grows the buffer many times. */
static void large(void)
{
    lb__jsonw *w = lb__jsonw_new();
    lb__jsonw_object(w);
    char key[64];
    for (int i = 0; i < 20000; i++) {
        snprintf(key, sizeof key, "model.layers.%d.mlp.up_proj.weight", i);
        lb__jsonw_key(w, key), lb__jsonw_str(w, "model-00001-of-00002.safetensors");
    }
    lb__jsonw_end(w);
    CHECK(lb__jsonw_status(w) == LB_OK, "%s", lb_last_error());
    parses(w, __LINE__);
    lb__jsonw_free(w);
}

int main(void)
{
    nested();
    escapes();
    numbers();
    misuse();
    large();
    return check_summary();
}
