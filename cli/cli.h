/* What the command files share: exit codes, option helpers, number and
 * JSON printing. The CLI is thin: it parses, calls the library, prints. */
#ifndef LOWBIT_CLI_H
#define LOWBIT_CLI_H

#include <stdio.h>

#include "lowbit.h"

enum { EXIT_OK = 0, EXIT_RUNTIME = 1, EXIT_USAGE = 2 };

typedef struct cli_command {
    const char *name;
    const char *summary;
    const char *usage; /* full --help text */
    int (*run)(int argc, char **argv);
} cli_command;

extern const cli_command cmd_formats, cmd_cast, cmd_grid, cmd_quant, cmd_inspect, cmd_error, cmd_convert, cmd_plan,
    cmd_ppl, cmd_kld, cmd_generate, cmd_compare, cmd_bench;

/* Reports an error: on stderr as "lowbit CMD: message", or with json set
 * as {"error": {...}} on stdout. Returns exit_code for `return fail(...)`. */
int cli_fail(const char *cmd, int json, int exit_code, const char *status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;

/* Same, for a failed library call: status name and lb_last_error(). */
int cli_fail_lb(const char *cmd, int json, int exit_code, lb_status s);

/* Parses a comma-separated list of specs ("int8:channel,mxfp4") into
 * specs[] and their texts into names[]; at most max. allow_plain also
 * takes plain floats (cli_plain_float_spec). Returns EXIT_OK or, after
 * reporting, EXIT_USAGE. */
int cli_parse_specs(const char *cmd, int json, const char *text, lb_qspec *specs, char (*names)[256], size_t max,
                    size_t *n, int allow_plain);

/* "bf16", "fp16" or "fp32" as a spec of its own: the element alone, no
 * scale (what lb_qspec_parse refuses, since there is nothing to scale):
 * weights are rounded to it. 1 if text is one. */
int cli_plain_float_spec(const char *text, lb_qspec *spec);
/* Whether spec is such a plain float. */
int cli_is_plain_float(const lb_qspec *spec);

/* Reads a whole file (at most max_bytes) into a malloc'd buffer; reports
 * a failure and returns its exit code (EXIT_RUNTIME), else EXIT_OK. */
int cli_read_file(const char *cmd, int json, const char *path, size_t max_bytes, char **text, size_t *len);

/* True if arg is --help or -h. */
int cli_is_help(const char *arg);

/* Shortest decimal that reads back as the same double ("448", "0.1",
 * "3.4028235e+38"); "nan", "inf", "-inf" for the specials. */
void cli_format_double(char *buf, size_t size, double v);

/* Same for a float (at most 9 significant digits): "240", "3.4028235e+38". */
void cli_format_float(char *buf, size_t size, float v);

/* An error magnitude to 6 significant digits; "nan" without a sign. */
void cli_format_error(char *buf, size_t size, double v);

/* Writes a JSON string literal, escaped. */
void json_string(FILE *out, const char *s);
/* Writes a JSON number, or the string "nan"/"inf"/"-inf" (JSON has none). */
void json_number(FILE *out, double v);

/* Writes `, "name": v` (the separator first: for fields after the first). */
void json_field(FILE *out, const char *name, double v);

#endif
