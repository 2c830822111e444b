/* Files in and out. Inputs are mapped read-only and never opened for
 * writing; outputs go to a temporary file beside the destination and are
 * renamed into place only when complete, so a failure (bad input, full
 * disk, a crash) never leaves a half-written file under the final name. */
#ifndef LB_UTIL_FILE_H
#define LB_UTIL_FILE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "lowbit.h"

typedef struct lb__mapped {
    const uint8_t *data; /* NULL for an empty file */
    size_t size;
} lb__mapped;

/* Maps path read-only (LB_ERR_IO naming the path and errno on failure;
 * a directory is an error). */
lb_status lb__map_file(const char *path, lb__mapped *out);
void lb__unmap_file(lb__mapped *m);

/* Reads a whole (small) file into a NUL-terminated malloc'd buffer. */
lb_status lb__read_file(const char *path, size_t max_bytes, char **out, size_t *len);

/* "dir/name" in a malloc'd string (NULL when out of memory). */
char *lb__path_join(const char *dir, const char *name);

typedef struct lb__outfile {
    FILE *f;
    char *path;     /* the final name */
    char *tmp_path; /* where the bytes go until commit */
    int failed;     /* a write failed: commit refuses */
} lb__outfile;

/* Creates a fresh directory beside path (for outputs made of several
 * files, renamed onto path when complete); *out is malloc'd. */
lb_status lb__make_temp_dir(const char *path, char **out);

/* Creates a temporary file in path's directory. */
lb_status lb__out_open(const char *path, lb__outfile *o);
/* Appends n bytes (LB_ERR_IO, e.g. disk full, is sticky). */
lb_status lb__out_write(lb__outfile *o, const void *p, size_t n);
/* Appends zero bytes up to the next multiple of align from the start. */
lb_status lb__out_pad(lb__outfile *o, uint64_t align);
uint64_t lb__out_tell(const lb__outfile *o);
/* Flushes, syncs and renames into place; on any failure the temporary
 * file is removed and nothing appears under path. Frees o either way. */
lb_status lb__out_commit(lb__outfile *o);
/* Removes the temporary file; safe to call on a committed or zeroed o. */
void lb__out_abort(lb__outfile *o);

#endif
