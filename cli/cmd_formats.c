/* lowbit formats: the format table, one row per format. */
#include <string.h>

#include "cli.h"

static const char *specials_text(const lb_format_info *f)
{
    if (f->kind == LB_KIND_INT) return "none";
    switch (f->specials) {
    case LB_SPECIALS_IEEE: return "inf, nan";
    case LB_SPECIALS_FN: return f->sign_bits ? "nan=S.1111.111" : "nan=0x7F,0x80-0xFF";
    case LB_SPECIALS_FNUZ: return "nan=0x80, no -0";
    case LB_SPECIALS_NONE: return "none";
    case LB_SPECIALS_E8M0: return "nan=0xFF, no 0";
    }
    return "?";
}

static const char *specials_key(const lb_format_info *f)
{
    static const char *const keys[] = {"ieee", "fn", "fnuz", "none", "e8m0"};
    return f->kind == LB_KIND_INT ? "none" : keys[f->specials];
}

static void print_json(void)
{
    printf("{\"formats\": [");
    for (int i = 0; i < LB_FMT_COUNT; i++) {
        const lb_format_info *f = lb_format_get((lb_format)i);
        printf("%s\n  {\"name\": ", i ? "," : "");
        json_string(stdout, f->name);
        printf(", \"kind\": \"%s\", \"bits\": %d, \"sign_bits\": %d, \"exponent_bits\": %d, "
               "\"mantissa_bits\": %d, \"bias\": %d, \"specials\": \"%s\"",
               f->kind == LB_KIND_INT ? "int" : "float", f->bits, f->sign_bits, f->exp_bits, f->man_bits,
               f->bias, specials_key(f));
        json_field(stdout, "max_finite", f->max_finite);
        json_field(stdout, "min_finite", f->min_finite);
        json_field(stdout, "min_normal", f->min_normal);
        json_field(stdout, "min_subnormal", f->min_subnormal);
        printf(", \"finite_values\": %llu, \"bytes_per_1024\": %zu, \"summary\": ",
               (unsigned long long)f->finite_values, lb_format_bytes(f->id, 1024));
        json_string(stdout, f->summary);
        printf("}");
    }
    printf("\n]}\n");
}

static void print_table(void)
{
    printf("%-13s %4s  %-7s %4s  %-19s %-14s %-14s %-14s %s\n", "name", "bits", "s/e/m", "bias", "specials",
           "max finite", "min normal", "min subn.", "finite values");
    for (int i = 0; i < LB_FMT_COUNT; i++) {
        const lb_format_info *f = lb_format_get((lb_format)i);
        char sem[16], bias[8], maxv[32], minn[32], mins[32];
        if (f->kind == LB_KIND_INT) {
            snprintf(sem, sizeof sem, "%s", f->sign_bits ? "int" : "uint");
            snprintf(bias, sizeof bias, "-");
        } else {
            snprintf(sem, sizeof sem, "%d/%d/%d", f->sign_bits, f->exp_bits, f->man_bits);
            snprintf(bias, sizeof bias, "%d", f->bias);
        }
        cli_format_float(maxv, sizeof maxv, (float)f->max_finite);
        cli_format_float(minn, sizeof minn, (float)f->min_normal);
        cli_format_float(mins, sizeof mins, (float)f->min_subnormal);
        printf("%-13s %4d  %-7s %4s  %-19s %-14s %-14s %-14s %llu\n", f->name, f->bits, sem, bias,
               specials_text(f), maxv, minn, mins, (unsigned long long)f->finite_values);
    }
}

static int run(int argc, char **argv)
{
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) json = 1;
    }
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--json") != 0)
            return cli_fail("formats", json, EXIT_USAGE, "bad_argument", "unexpected argument '%s'", argv[i]);
    if (json) print_json();
    else print_table();
    return EXIT_OK;
}

const cli_command cmd_formats = {
    "formats", "list every number format: bits, layout, range, specials",
    "usage: lowbit formats [--json]\n\n"
    "Prints the format table: one row per number format with its bit layout\n"
    "(sign/exponent/mantissa), exponent bias, inf/NaN policy, largest finite\n"
    "value, smallest normal and subnormal, and how many distinct finite values\n"
    "it has (+0 and -0 count once).\n\n"
    "  --json   one JSON object {\"formats\": [...]} instead of the table\n",
    run};
