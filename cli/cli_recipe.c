/* The quantization choices quantize, ppl, kld, generate and compare
 * share (cli_recipe.h): options, the recipe they build, calibration of a
 * quantized model, and the scheme list of `lowbit quantize --list`. */
#include "cli_recipe.h"

#include <stdlib.h>
#include <string.h>

/* --keep-sensitive N and --outlier-threshold T: 1 taken, -1 reported. */
static int refine_option(const char *cmd, int json, const char *o, const char *v, cli_recipe_args *a)
{
    char *end = NULL;
    if (strcmp(o, "--keep-sensitive") == 0) {
        long long n = strtoll(v, &end, 10);
        if (*end || !(v[0] >= '0' && v[0] <= '9') || n < 1 || n > CLI_KEEP_SENSITIVE_MAX)
            return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "--keep-sensitive takes a layer count 1..%d, not '%s'",
                            CLI_KEEP_SENSITIVE_MAX, v), -1;
        if (a->keep_sensitive) return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "%s is given twice", o), -1;
        a->keep_sensitive = (size_t)n;
        return 1;
    }
    double t = strtod(v, &end);
    if (*end || end == v || !(t > 0) || !(t < 1e30))
        return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "--outlier-threshold takes a positive activation "
                        "magnitude (LLM.int8(): 6), not '%s'", v), -1;
    if (a->outlier_threshold > 0) return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "%s is given twice", o), -1;
    a->outlier_threshold = (float)t;
    return 1;
}

int cli_recipe_option(const char *cmd, int json, int argc, char **argv, int *i, cli_recipe_args *a)
{
    int m = cli_method_option(cmd, json, argc, argv, i, a);
    if (m) return m;
    const char *o = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    if (strcmp(o, "--keep-sensitive") == 0 || strcmp(o, "--outlier-threshold") == 0) {
        if (!v) return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "%s needs a value", o), -1;
        int r = refine_option(cmd, json, o, v, a);
        if (r > 0) *i += 1;
        return r;
    }
    int scheme = strcmp(o, "--scheme") == 0, recipe = strcmp(o, "--recipe") == 0, rule = strcmp(o, "--rule") == 0,
        keep = strcmp(o, "--keep") == 0, kv = strcmp(o, "--kv") == 0;
    if (!scheme && !recipe && !rule && !keep && !kv) return 0;
    if (!v) return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "%s needs a value", o), -1;
    if ((scheme && a->scheme) || (recipe && a->recipe_file) || (kv && a->kv))
        return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "%s is given twice", o), -1;
    if (scheme) a->scheme = v;
    else if (recipe) a->recipe_file = v;
    else if (kv) {
        if (strcmp(v, "fp8") != 0 && strcmp(v, "fp8_e4m3") != 0)
            return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "--kv takes fp8 (FP8 E4M3 with calibrated "
                            "per-layer scales), not '%s'", v), -1;
        a->kv = v;
    } else {
        if (a->n_rules >= CLI_RECIPE_MAX_RULES)
            return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "more than %d --rule and --keep options (use a "
                            "--recipe file)", CLI_RECIPE_MAX_RULES), -1;
        a->rules[a->n_rules] = v;
        a->rule_is_keep[a->n_rules] = keep;
        a->n_rules++;
    }
    *i += 1;
    return 1;
}

int cli_recipe_given(const cli_recipe_args *a)
{
    return a->scheme || a->recipe_file || a->n_rules || a->kv;
}

static int append_all(const char *cmd, int json, lb_recipe *dst, const lb_recipe *src)
{
    for (size_t k = 0; k < lb_recipe_count(src); k++) {
        lb_status st = lb_recipe_add(dst, lb_recipe_rule(src, k));
        if (st != LB_OK) return cli_fail_lb(cmd, json, EXIT_USAGE, st);
    }
    return EXIT_OK;
}

int cli_recipe_build(const char *cmd, int json, const cli_recipe_args *a, lb_recipe **out)
{
    *out = NULL;
    /* no rule at all (only --kv fp8, or nothing) is a recipe too: every weight 16-bit */
    lb_recipe *r = NULL, *file = NULL, *scheme = NULL;
    lb_status st = lb_recipe_new(&r);
    if (st != LB_OK) return cli_fail_lb(cmd, json, EXIT_RUNTIME, st);
    int rc = EXIT_OK;
    /* command-line rules first, in the order given (first match wins) */
    for (size_t k = 0; k < a->n_rules && rc == EXIT_OK; k++) {
        char pattern[1100];
        lb_rule rule;
        if (a->rule_is_keep[k]) {
            if (strlen(a->rules[k]) >= sizeof pattern)
                rc = cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "--keep pattern '%.40s...' is too long", a->rules[k]);
            else {
                strcpy(pattern, a->rules[k]);
                rule = (lb_rule){pattern, 1, {0}, {LB_ACT_NONE, {0}}};
                st = lb_recipe_add(r, &rule);
                if (st != LB_OK) rc = cli_fail_lb(cmd, json, EXIT_USAGE, st);
            }
        } else {
            st = lb_rule_parse(a->rules[k], &rule, pattern, sizeof pattern);
            if (st == LB_OK) st = lb_recipe_add(r, &rule);
            if (st != LB_OK) rc = cli_fail_lb(cmd, json, EXIT_USAGE, st);
        }
    }
    if (rc == EXIT_OK && a->recipe_file) {
        st = lb_recipe_load(a->recipe_file, &file);
        if (st != LB_OK) rc = cli_fail_lb(cmd, json, st == LB_ERR_IO ? EXIT_RUNTIME : EXIT_USAGE, st);
        else {
            rc = append_all(cmd, json, r, file);
            if (rc == EXIT_OK) st = lb_recipe_set_kv(r, lb_recipe_kv(file));
        }
    }
    if (rc == EXIT_OK && a->scheme) {
        st = lb_scheme_recipe_named(a->scheme, &scheme);
        if (st != LB_OK) rc = cli_fail_lb(cmd, json, EXIT_USAGE, st);
        else rc = append_all(cmd, json, r, scheme);
    }
    if (rc == EXIT_OK && a->kv) {
        st = lb_recipe_set_kv(r, LB_FMT_FP8_E4M3);
        if (st != LB_OK) rc = cli_fail_lb(cmd, json, EXIT_USAGE, st);
    }
    lb_recipe_free(file);
    lb_recipe_free(scheme);
    if (rc != EXIT_OK) {
        lb_recipe_free(r);
        return rc;
    }
    *out = r;
    return EXIT_OK;
}

/* "fp8_e4m3:token, dynamic" or "16-bit" */
static void act_text(const lb_scheme *s, char *buf, size_t size)
{
    const char *mode = "16-bit";
    switch (s->act_mode) {
    case LB_ACT_NONE: break;
    case LB_ACT_DYNAMIC: mode = "dynamic"; break;
    case LB_ACT_STATIC: mode = "static"; break;
    case LB_ACT_LOCAL: mode = "local"; break;
    }
    if (s->act) snprintf(buf, size, "%s, %s", s->act, mode);
    else snprintf(buf, size, "%s", mode);
}

static const char *mode_name(lb_act_mode m)
{
    switch (m) {
    case LB_ACT_NONE: return "none";
    case LB_ACT_DYNAMIC: return "dynamic";
    case LB_ACT_STATIC: return "static";
    case LB_ACT_LOCAL: return "local";
    }
    return "?";
}

int cli_scheme_list(int json)
{
    const uint64_t n = CLI_SCHEME_BPW_SIZE;
    if (json) printf("{\"bits_per_weight_matrix\": [%llu, %llu], \"schemes\": [", (unsigned long long)n,
                     (unsigned long long)n);
    else printf("%-16s %-32s %-32s %6s  %s\n", "scheme", "weights", "activations", "bits/w", "also");
    for (size_t i = 0; i < lb_scheme_count(); i++) {
        const lb_scheme *s = lb_scheme_at(i);
        lb_qspec w;
        double bpw = lb_qspec_parse(s->weights, &w) == LB_OK ? lb_qspec_bits_per_value(&w, n, n) : 0;
        if (json) {
            printf("%s{\"name\": ", i ? ", " : "");
            json_string(stdout, s->name);
            printf(", \"summary\": ");
            json_string(stdout, s->summary);
            printf(", \"weights\": ");
            json_string(stdout, s->weights);
            printf(", \"act_mode\": \"%s\", \"act\": ", mode_name(s->act_mode));
            if (s->act) json_string(stdout, s->act);
            else printf("null");
            printf(", \"needs_calibration\": %s", s->needs_calibration ? "true" : "false");
            json_field(stdout, "bits_per_weight", bpw);
            printf(", \"aliases\": [");
            const char *a = s->aliases;
            for (int k = 0; *a; k++) {
                size_t len = strcspn(a, " ");
                printf("%s\"%.*s\"", k ? ", " : "", (int)len, a);
                a += len;
                while (*a == ' ') a++;
            }
            printf("]}");
        } else {
            char act[64], also[128];
            act_text(s, act, sizeof act);
            snprintf(also, sizeof also, "%s%s%s", s->aliases, s->needs_calibration && *s->aliases ? "; " : "",
                     s->needs_calibration ? "needs --calib" : "");
            printf("%-16s %-32s %-32s %6.3f%s%s\n", s->name, s->weights, act, bpw, *also ? "  " : "", also);
        }
    }
    if (json) printf("]}\n");
    else printf("bits/w: bits per weight of a %llux%llu weight matrix, every scale and zero point counted\n"
                "(lb_qspec_bits_per_value). The output head and the embeddings stay 16-bit. W4A16, W4A16-ASYM,\n"
                "W8A16, W8A8-INT8 and FP8-BLOCK take a group size: W4A16:g64 (576-wide layers need 64 or 32).\n",
                (unsigned long long)n, (unsigned long long)n);
    return EXIT_OK;
}
