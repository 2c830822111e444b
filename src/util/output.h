/* The one rule for every destination the library writes (lowbit.h,
 * "Outputs"): never an input, never an existing file unless replacing is
 * allowed, and never one whose replacement would break something (a hard
 * link, another user's file, a symbolic link). lb__out_open and
 * lb__outdir_open (file.h) call these; nothing else writes. */
#ifndef LB_UTIL_OUTPUT_H
#define LB_UTIL_OUTPUT_H

#include <stddef.h>

#include "lowbit.h"

/* The most files one output directory holds (a Hugging Face directory:
 * config.json, the weights and up to eight tokenizer and generation files;
 * lowbit quantize's: also the shard index and up to 36 shards). */
#define LB_OUTDIR_MAX_NAMES 48

typedef struct lb__dest {
    int exists;        /* something is there and will be replaced (an empty directory too) */
    unsigned mode;     /* its permission bits, which the replacement keeps */
    int empty_dir;     /* a directory with nothing in it: a plain rename replaces it */
    int child_exists[LB_OUTDIR_MAX_NAMES];
    unsigned child_mode[LB_OUTDIR_MAX_NAMES];
} lb__dest;

/* A destination file: LB_OK when it may be written (d says what is there),
 * LB_ERR_ARG naming the reason when not. */
lb_status lb__dest_check_file(const char *path, lb__dest *d);
/* A destination directory that will hold names[0..n): free when absent or
 * empty; otherwise it may be replaced only when replacing is allowed and it
 * holds nothing but those names, each a file that could be replaced. */
lb_status lb__dest_check_dir(const char *path, const char *const *names, size_t n, lb__dest *d);

#endif
