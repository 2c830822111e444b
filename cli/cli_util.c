#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int cli_fail(const char *cmd, int json, int exit_code, const char *status, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (json) {
        printf("{\"error\": {\"status\": ");
        json_string(stdout, status);
        printf(", \"message\": ");
        json_string(stdout, msg);
        printf(", \"exit_code\": %d}}\n", exit_code);
    } else {
        char safe[4 * sizeof msg + 4]; /* each byte escapes to at most 4 */
        cli_progress_clear();
        /* messages quote names and strings from files: escaped, but the
         * lines of a usage text appended to a message stay lines */
        fprintf(stderr, "lowbit %s: %s\n", cmd, cli_escape_keep(safe, sizeof safe, msg, "\n\t"));
    }
    return exit_code;
}

int cli_fail_lb(const char *cmd, int json, int exit_code, lb_status s)
{
    return cli_fail(cmd, json, exit_code, lb_status_name(s), "%s", lb_last_error());
}

int cli_parse_specs(const char *cmd, int json, const char *text, lb_qspec *specs, char (*names)[256], size_t max,
                    size_t *n, int allow_plain)
{
    char list[1024];
    size_t len = strlen(text);
    *n = 0;
    if (len >= sizeof list) return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "--spec is too long");
    if (len == 0 || text[0] == ',' || text[len - 1] == ',' || strstr(text, ",,"))
        return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "--spec '%s' has an empty item", text);
    strcpy(list, text);
    for (char *save = NULL, *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (*n == max) return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "at most %zu specs at once", max);
        if (!(allow_plain && cli_plain_float_spec(t, &specs[*n]))) {
            lb_status s = lb_qspec_parse(t, &specs[*n]);
            if (s != LB_OK) return cli_fail_lb(cmd, json, EXIT_USAGE, s);
        }
        snprintf(names[*n], 256, "%s", t);
        (*n)++;
    }
    return EXIT_OK;
}

int cli_plain_float_spec(const char *text, lb_qspec *spec)
{
    lb_format f;
    if (lb_format_by_name(text, &f) != LB_OK || (f != LB_FMT_BF16 && f != LB_FMT_FP16 && f != LB_FMT_FP32)) return 0;
    lb_qspec_parse("int8", spec); /* the defaults (tensor granularity), then the element */
    spec->element = f;
    return 1;
}

int cli_is_plain_float(const lb_qspec *spec)
{
    lb_format e = spec->element;
    return (e == LB_FMT_BF16 || e == LB_FMT_FP16 || e == LB_FMT_FP32) && spec->granularity == LB_GRAN_TENSOR &&
           !spec->affine && !spec->two_level;
}

int cli_read_file(const char *cmd, int json, const char *path, size_t max_bytes, char **text, size_t *len)
{
    *text = NULL, *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return cli_fail(cmd, json, EXIT_RUNTIME, "io", "cannot open '%s': %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0, got;
    char *buf = malloc(cap);
    while (buf && n <= max_bytes && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            char *t = realloc(buf, cap *= 2);
            if (!t) free(buf);
            buf = t;
        }
    }
    int bad = ferror(f);
    fclose(f);
    if (buf && !bad && n <= max_bytes) {
        *text = buf, *len = n;
        return EXIT_OK;
    }
    free(buf);
    if (bad) return cli_fail(cmd, json, EXIT_RUNTIME, "io", "cannot read '%s' (is it a file?)", path);
    if (!buf) return cli_fail(cmd, json, EXIT_RUNTIME, "out_of_memory", "out of memory reading '%s'", path);
    return cli_fail(cmd, json, EXIT_RUNTIME, "io", "'%s' is longer than %zu bytes", path, max_bytes);
}

int cli_parse_threads(const char *cmd, int json, const char *value, int *threads)
{
    char *end = NULL;
    errno = 0;
    long t = value && value[0] >= '0' && value[0] <= '9' ? strtol(value, &end, 10) : -1;
    if (t < 0 || *end || errno || t > LB_MAX_THREADS)
        return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "--threads takes 0..%d (0: one per CPU), not '%s'",
                        LB_MAX_THREADS, value ? value : "");
    *threads = (int)t;
    return EXIT_OK;
}

int cli_is_help(const char *arg) { return strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0; }

/* Shortest "%.Ng" that reads back exactly; plain notation is preferred
 * for magnitudes a person reads as plain numbers (240, not 2.4e+02). */
static void shortest(char *buf, size_t size, double v, int max_prec, int is_float)
{
    if (isnan(v)) { snprintf(buf, size, "nan"); return; }
    if (isinf(v)) { snprintf(buf, size, v < 0 ? "-inf" : "inf"); return; }
    double a = fabs(v);
    int plain = a == 0 || (a >= 1e-4 && a < 1e15);
    for (int prec = 1; prec <= max_prec; prec++) {
        snprintf(buf, size, "%.*g", prec, v);
        if (plain && strchr(buf, 'e')) continue;
        if (is_float ? strtof(buf, NULL) == (float)v : strtod(buf, NULL) == v) return;
    }
    snprintf(buf, size, "%.*g", max_prec, v);
}

void cli_format_double(char *buf, size_t size, double v) { shortest(buf, size, v, 17, 0); }

void cli_format_float(char *buf, size_t size, float v) { shortest(buf, size, v, 9, 1); }

void cli_format_error(char *buf, size_t size, double v)
{
    if (isnan(v)) snprintf(buf, size, "nan");
    else snprintf(buf, size, "%.6g", v);
}

void json_string(FILE *out, const char *s)
{
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        uint32_t c;
        size_t len = cli_utf8_next(p, &c);
        if (len == 0) fprintf(out, "\\\\x%02x", *p), len = 1;
        else if (c == '"' || c == '\\') fprintf(out, "\\%c", (int)c);
        else if (cli_is_control(c)) fprintf(out, "\\u%04x", (unsigned)c);
        else fwrite(p, 1, len, out);
        p += len;
    }
    fputc('"', out);
}

void json_number(FILE *out, double v)
{
    char buf[64];
    cli_format_double(buf, sizeof buf, isnan(v) ? fabs(v) : v);
    if (isnan(v) || isinf(v)) json_string(out, buf);
    else fputs(buf, out);
}

void json_field(FILE *out, const char *name, double v)
{
    fprintf(out, ", \"%s\": ", name);
    json_number(out, v);
}
