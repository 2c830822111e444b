/* lowbit grid: every value a small format can hold, in order. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

typedef struct grid_point {
    uint32_t code;
    float value;
} grid_point;

/* Ascending by value; -0 before +0. */
static int by_value(const void *pa, const void *pb)
{
    const grid_point *a = pa, *b = pb;
    if (a->value != b->value) return a->value < b->value ? -1 : 1;
    int sa = signbit(a->value) != 0, sb = signbit(b->value) != 0;
    if (sa != sb) return sa ? -1 : 1;
    return a->code < b->code ? -1 : a->code > b->code;
}

static int run(int argc, char **argv)
{
    int json = 0;
    const char *name = NULL;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--json") == 0) json = 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) continue;
        if (argv[i][0] == '-' || name)
            return cli_fail("grid", json, EXIT_USAGE, "bad_argument", "unexpected argument '%s'", argv[i]);
        name = argv[i];
    }
    if (!name) return cli_fail("grid", json, EXIT_USAGE, "bad_argument", "which format? usage: lowbit grid FORMAT");
    lb_format fmt;
    lb_status s = lb_format_by_name(name, &fmt);
    if (s != LB_OK) return cli_fail_lb("grid", json, EXIT_USAGE, s);
    const lb_format_info *f = lb_format_get(fmt);
    if (f->bits > 8)
        return cli_fail("grid", json, EXIT_USAGE, "bad_argument",
                        "grid lists formats of 8 bits or fewer; %s has %d-bit codes (try 'lowbit cast')", f->name,
                        f->bits);

    grid_point pts[256];
    uint32_t nans[256];
    size_t n = 0, n_nan = 0, n_codes = (size_t)1 << f->bits;
    for (uint32_t c = 0; c < n_codes; c++) {
        float v;
        lb_decode_value(fmt, c, &v);
        if (isnan(v)) nans[n_nan++] = c;
        else pts[n++] = (grid_point){c, v};
    }
    qsort(pts, n, sizeof pts[0], by_value);
    int digits = (f->bits + 3) / 4;

    if (json) {
        printf("{\"format\": \"%s\", \"codes\": %zu, \"finite_values\": %llu, \"values\": [", f->name, n_codes,
               (unsigned long long)f->finite_values);
        for (size_t i = 0; i < n; i++) {
            printf("%s\n  {\"code\": \"0x%0*X\", \"value\": ", i ? "," : "", digits, pts[i].code);
            json_number(stdout, pts[i].value);
            printf("}");
        }
        printf("\n], \"nan_codes\": [");
        for (size_t i = 0; i < n_nan; i++) printf("%s\"0x%0*X\"", i ? ", " : "", digits, nans[i]);
        printf("]}\n");
        return EXIT_OK;
    }
    printf("%s: %zu codes, %llu distinct finite values\n", f->name, n_codes, (unsigned long long)f->finite_values);
    printf("%-6s %s\n", "code", "value");
    for (size_t i = 0; i < n; i++) {
        char buf[64];
        cli_format_float(buf, sizeof buf, pts[i].value);
        if (pts[i].value == 0 && signbit(pts[i].value)) snprintf(buf, sizeof buf, "-0");
        printf("0x%0*X%*s %s\n", digits, pts[i].code, 4 - digits, "", buf);
    }
    if (n_nan) {
        printf("nan:  ");
        /* runs of consecutive codes print as ranges: ue4m3 has 129 NaN codes */
        for (size_t i = 0; i < n_nan;) {
            size_t j = i;
            while (j + 1 < n_nan && nans[j + 1] == nans[j] + 1) j++;
            if (j > i + 1) printf("%s0x%0*X-0x%0*X", i ? ", " : "", digits, nans[i], digits, nans[j]);
            else {
                printf("%s0x%0*X", i ? ", " : "", digits, nans[i]);
                if (j == i + 1) printf(", 0x%0*X", digits, nans[j]);
            }
            i = j + 1;
        }
        printf("\n");
    }
    return EXIT_OK;
}

const cli_command cmd_grid = {
    "grid", "every value a format of 8 bits or fewer can hold, in order",
    "usage: lowbit grid FORMAT [--json]\n\n"
    "Lists every code of FORMAT (8 bits or fewer) with the value it decodes\n"
    "to, in ascending order of value (-0 before +0, infinities at the ends),\n"
    "then the codes that are NaN.\n\n"
    "  --json   one JSON object: {\"format\", \"values\": [{\"code\", \"value\"}], \"nan_codes\"}\n",
    run};
