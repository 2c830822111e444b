/* lowbit report's sections (report_sections.c), one per kind of result:
 * each writes an <h2>, a sentence and its charts. 0, or -1 when out of
 * memory. */
#ifndef LOWBIT_REPORT_H
#define LOWBIT_REPORT_H

#include <stdio.h>

#include "io/json.h"

int report_inspect(FILE *f, const char *path, const lb__json *r);
int report_error(FILE *f, const char *path, const lb__json *r);
int report_compare(FILE *f, const char *path, const lb__json *r);
int report_sensitivity(FILE *f, const char *path, const lb__json *r);
int report_quantize(FILE *f, const char *path, const lb__json *r);
int report_eval(FILE *f, const char *path, const lb__json *r);
int report_bench(FILE *f, const char *path, const lb__json *r);
/* text: a lowbit kld --save-tokens file */
int report_kld_tokens(FILE *f, const char *path, const char *text, size_t len);

#endif
