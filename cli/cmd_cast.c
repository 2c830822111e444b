/* lowbit cast: what a value becomes in a format, and what that costs. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli.h"

/* Values on stdin beyond this are refused rather than buffered forever. */
#define CAST_MAX_VALUES 1000000
#define CAST_MAX_TOKEN 256

typedef struct cast_row {
    const char *text; /* the value as the user wrote it */
    double x;
    uint32_t code;
    float decoded;
} cast_row;

/* A value, not an option: "-1.5", "-inf", ".5" start with '-' or '.' too. */
static int looks_numeric(const char *s)
{
    if (s[0] != '-') return 1;
    return isdigit((unsigned char)s[1]) || s[1] == '.' || strncasecmp(s + 1, "inf", 3) == 0 ||
           strncasecmp(s + 1, "nan", 3) == 0;
}

static int parse_value(const char *s, double *out)
{
    char *end;
    errno = 0;
    *out = strtod(s, &end);
    /* ERANGE on overflow gives +-inf, which is what a huge literal means;
     * on underflow strtod returns the correctly rounded tiny value. */
    return end != s && *end == '\0';
}

static int hex_digits(const lb_format_info *f) { return (f->bits + 3) / 4; }

static void print_human(const lb_format_info *f, lb_overflow mode, const cast_row *rows, size_t n)
{
    printf("%s (%s)\n", f->name, mode == LB_SATURATE ? "saturate" : "ieee");
    printf("%-16s %-10s %-16s %-14s %s\n", "input", "code", "decoded", "abs error", "rel error");
    for (size_t i = 0; i < n; i++) {
        char dec[64], ae[64], re[64], code[16];
        double abs_err = fabs((double)rows[i].decoded - rows[i].x);
        double rel_err = rows[i].x != 0 ? abs_err / fabs(rows[i].x) : (abs_err == 0 ? 0 : INFINITY);
        snprintf(code, sizeof code, "0x%0*X", hex_digits(f), rows[i].code);
        cli_format_float(dec, sizeof dec, rows[i].decoded);
        cli_format_error(ae, sizeof ae, abs_err);
        cli_format_error(re, sizeof re, rel_err);
        printf("%-16s %-10s %-16s %-14s %s\n", rows[i].text, code, dec, ae, re);
    }
}

static void print_json(const lb_format_info *f, lb_overflow mode, const cast_row *rows, size_t n)
{
    printf("{\"format\": \"%s\", \"mode\": \"%s\", \"results\": [", f->name, mode == LB_SATURATE ? "saturate" : "ieee");
    for (size_t i = 0; i < n; i++) {
        double abs_err = fabs((double)rows[i].decoded - rows[i].x);
        double rel_err = rows[i].x != 0 ? abs_err / fabs(rows[i].x) : (abs_err == 0 ? 0 : INFINITY);
        printf("%s\n  {\"input\": ", i ? "," : "");
        json_string(stdout, rows[i].text);
        printf(", \"value\": ");
        json_number(stdout, rows[i].x);
        printf(", \"code\": \"0x%0*X\", \"decoded\": ", hex_digits(f), rows[i].code);
        json_number(stdout, rows[i].decoded);
        printf(", \"abs_error\": ");
        json_number(stdout, abs_err);
        printf(", \"rel_error\": ");
        json_number(stdout, rel_err);
        printf("}");
    }
    printf("\n]}\n");
}

/* Reads whitespace-separated tokens from stdin into a growing array. */
static int read_stdin_values(char ***tokens, size_t *count)
{
    size_t cap = 0;
    char buf[CAST_MAX_TOKEN + 1];
    *tokens = NULL;
    *count = 0;
    while (scanf("%256s", buf) == 1) {
        if (strlen(buf) == CAST_MAX_TOKEN) return -1;
        if (*count == CAST_MAX_VALUES) return -2;
        if (*count == cap) {
            cap = cap ? cap * 2 : 64;
            char **t = realloc(*tokens, cap * sizeof *t);
            if (!t) return -3;
            *tokens = t;
        }
        (*tokens)[(*count)++] = strdup(buf);
        if (!(*tokens)[*count - 1]) return -3;
    }
    return 0;
}

static int run(int argc, char **argv)
{
    const char *to = NULL, *mode_name = "saturate";
    int json = 0, values_only = 0;
    char **vals = calloc((size_t)argc, sizeof *vals), **stdin_vals = NULL;
    size_t n_vals = 0, n_stdin = 0;
    int rc = EXIT_OK;
    cast_row *rows = NULL;
    if (!vals) return cli_fail("cast", 0, EXIT_RUNTIME, "out_of_memory", "out of memory");
    for (int i = 1; i < argc; i++) /* --json first, so that every error honours it */
        if (strcmp(argv[i], "--json") == 0) json = 1;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (values_only || looks_numeric(a)) vals[n_vals++] = argv[i];
        else if (strcmp(a, "--") == 0) values_only = 1;
        else if (strcmp(a, "--json") == 0) continue;
        else if (strcmp(a, "--to") == 0 || strcmp(a, "--mode") == 0) {
            if (i + 1 >= argc || strncmp(argv[i + 1], "--", 2) == 0) {
                rc = cli_fail("cast", json, EXIT_USAGE, "bad_argument", "%s needs a value", a);
                goto done;
            }
            if (a[2] == 't') to = argv[++i];
            else mode_name = argv[++i];
        } else if (strncmp(a, "--to=", 5) == 0) to = a + 5;
        else if (strncmp(a, "--mode=", 7) == 0) mode_name = a + 7;
        else { rc = cli_fail("cast", json, EXIT_USAGE, "bad_argument", "unknown option '%s'", a); goto done; }
    }
    if (!to) { rc = cli_fail("cast", json, EXIT_USAGE, "bad_argument", "--to FORMAT is required (see 'lowbit formats')"); goto done; }

    lb_format fmt;
    lb_status s = lb_format_by_name(to, &fmt);
    if (s != LB_OK) { rc = cli_fail_lb("cast", json, EXIT_USAGE, s); goto done; }
    lb_overflow mode;
    if (strcmp(mode_name, "saturate") == 0) mode = LB_SATURATE;
    else if (strcmp(mode_name, "ieee") == 0) mode = LB_IEEE;
    else { rc = cli_fail("cast", json, EXIT_USAGE, "bad_argument", "unknown --mode '%s'; valid modes: saturate, ieee", mode_name); goto done; }

    if (n_vals == 0) {
        int r = read_stdin_values(&stdin_vals, &n_stdin);
        if (r == -1) { rc = cli_fail("cast", json, EXIT_USAGE, "bad_argument", "a value on stdin is longer than %d characters", CAST_MAX_TOKEN - 1); goto done; }
        if (r == -2) { rc = cli_fail("cast", json, EXIT_USAGE, "bad_argument", "more than %d values on stdin", CAST_MAX_VALUES); goto done; }
        if (r == -3) { rc = cli_fail("cast", json, EXIT_RUNTIME, "out_of_memory", "out of memory"); goto done; }
        if (n_stdin == 0) { rc = cli_fail("cast", json, EXIT_USAGE, "bad_argument", "no values given (as arguments or on stdin)"); goto done; }
    }
    char **list = n_vals ? vals : stdin_vals;
    size_t n = n_vals ? n_vals : n_stdin;
    rows = calloc(n, sizeof *rows);
    if (!rows) { rc = cli_fail("cast", json, EXIT_RUNTIME, "out_of_memory", "out of memory"); goto done; }

    const lb_format_info *f = lb_format_get(fmt);
    for (size_t i = 0; i < n; i++) {
        rows[i].text = list[i];
        if (!parse_value(list[i], &rows[i].x)) {
            rc = cli_fail("cast", json, EXIT_USAGE, "bad_argument", "'%s' is not a number", list[i]);
            goto done;
        }
        s = lb_encode_value(fmt, rows[i].x, mode, &rows[i].code);
        if (s != LB_OK) {
            rc = cli_fail("cast", json, EXIT_RUNTIME, lb_status_name(s), "value '%s': %s", list[i], lb_last_error());
            goto done;
        }
        lb_decode_value(fmt, rows[i].code, &rows[i].decoded);
    }
    if (json) print_json(f, mode, rows, n);
    else print_human(f, mode, rows, n);
done:
    for (size_t i = 0; i < n_stdin; i++) free(stdin_vals[i]);
    free(stdin_vals);
    free(vals);
    free(rows);
    return rc;
}

const cli_command cmd_cast = {
    "cast", "round values into a format: code, decoded value, error",
    "usage: lowbit cast --to FORMAT [--mode saturate|ieee] [--json] VALUE...\n"
    "       ... | lowbit cast --to FORMAT [--mode saturate|ieee] [--json]\n\n"
    "Rounds each VALUE (read as binary64, then rounded once: to nearest, ties\n"
    "to even) into FORMAT and prints the code in hex, the value it decodes to,\n"
    "and the absolute and relative error. Without VALUE arguments, values are\n"
    "read from stdin, separated by white space. Values may be decimal, hex\n"
    "floats (0x1.8p3), inf, -inf or nan.\n\n"
    "  --to FORMAT   target format (see 'lowbit formats')\n"
    "  --mode MODE   what happens past the largest finite value:\n"
    "                saturate  clamp to +-max finite (the default; inf too)\n"
    "                ieee      ml_dtypes semantics: inf or NaN as the format allows\n"
    "                NaN into a format without NaN is an error in both modes.\n"
    "  --json        print one JSON object (errors too)\n\n"
    "example: lowbit cast --to fp8_e4m3 237.4\n",
    run};
