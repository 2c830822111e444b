/* The C tests' one assertion: counts, reports with file:line, goes on.
 * Each test program ends with check_summary(), which prints the closing
 * "N passed, N failed" line CI reads. */
#ifndef LB_TESTS_CHECK_H
#define LB_TESTS_CHECK_H

#include <stdio.h>

static int passed, failed;

#define CHECK(cond, ...)                                                     \
    do {                                                                     \
        if (cond) passed++;                                                  \
        else {                                                               \
            failed++;                                                        \
            fprintf(stderr, "%s:%d: FAIL %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                    \
            fputc('\n', stderr);                                             \
        }                                                                    \
    } while (0)

static inline int check_summary(void)
{
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}

#endif
