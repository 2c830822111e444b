/* Files in and out. Inputs are mapped read-only and never opened for
 * writing; outputs go to a temporary file beside the destination and are
 * renamed into place only when complete, so a failure (bad input, full
 * disk, a crash) never leaves a half-written file under the final name.
 * Every output passes the destination rule of util/output.h first, and its
 * temporary is registered (util/sigsafe.h) so a signal handler can remove
 * it: "DEST.lowbit-tmp.PID.N". */
#ifndef LB_UTIL_FILE_H
#define LB_UTIL_FILE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "lowbit.h"
#include "util/output.h"

typedef struct lb__mapped {
    const uint8_t *data; /* NULL for an empty file */
    size_t size;
} lb__mapped;

/* Maps path read-only (LB_ERR_IO naming the path and errno on failure;
 * a directory is an error). The mapping is registered (sigsafe.h) until
 * lb__unmap_file: a SIGBUS inside it names the file, and no output may
 * replace the file meanwhile. */
lb_status lb__map_file(const char *path, lb__mapped *out);
void lb__unmap_file(lb__mapped *m);

/* Reads a whole (small) file into a NUL-terminated malloc'd buffer. */
lb_status lb__read_file(const char *path, size_t max_bytes, char **out, size_t *len);

/* "dir/name" in a malloc'd string (NULL when out of memory). */
char *lb__path_join(const char *dir, const char *name);
/* The directory part of path ("." for a bare name, "/" for one at the root); malloc'd, NULL when out of memory. */
char *lb__path_dir(const char *path);

typedef struct lb__outfile {
    FILE *f;
    char *path;     /* the final name */
    char *tmp_path; /* where the bytes go until commit */
    int failed;     /* a write failed: commit refuses */
    int replace;    /* a file is at path and may be replaced (else commit never replaces one) */
    int slot;       /* tmp_path's entry in the signal-cleanup table */
    uint64_t written_back; /* lb__out_writeback has started the disk writes up to here */
    uint64_t unsynced;     /* bytes appended since */
} lb__outfile;

/* An output made of several files: a fresh directory beside path that
 * receives names[] and is renamed onto path when complete (replacing an
 * empty directory, or with replacing allowed, swapped with an old one that
 * holds only those names). */
typedef struct lb__outdir {
    char *path, *tmp_path;
    const char *const *names;
    size_t n;
    int slots[1 + LB_OUTDIR_MAX_NAMES]; /* the directory and its files (signal cleanup) */
    int exists, empty_dir;
    unsigned mode, child_mode[LB_OUTDIR_MAX_NAMES];
    int child_exists[LB_OUTDIR_MAX_NAMES];
} lb__outdir;

/* Checks path under the destination rule and creates the directory. */
lb_status lb__outdir_open(const char *path, const char *const *names, size_t n, lb__outdir *d);
/* Puts it in place (keeping the old directory's and files' modes); frees d. */
lb_status lb__outdir_commit(lb__outdir *d);
/* Removes the temporary directory and what it holds; safe on a zeroed d. */
void lb__outdir_abort(lb__outdir *d);

/* Checks path under the destination rule and creates a temporary file
 * in its directory (with the mode of the file it will replace). */
lb_status lb__out_open(const char *path, lb__outfile *o);
/* Appends n bytes (LB_ERR_IO, e.g. disk full, is sticky); every
 * LB_OUT_WRITEBACK_BYTES starts the disk writes (lb__out_writeback). */
lb_status lb__out_write(lb__outfile *o, const void *p, size_t n);
/* Appends zero bytes up to the next multiple of align from the start. */
lb_status lb__out_pad(lb__outfile *o, uint64_t align);
uint64_t lb__out_tell(const lb__outfile *o);
/* Starts writing what was appended so far to the disk, without waiting
 * (Linux: sync_file_range), so that commit's fsync finds little left to
 * do; advice only, a no-op elsewhere. lb__out_write calls it every
 * LB_OUT_WRITEBACK_BYTES: the disk then writes while the caller computes
 * the next part (SmolLM2 from F32 to a GGUF, commit's fsync was 54 ms of a
 * 330 ms Q4_K_M run on two threads; Q8_0 0.36-0.41 -> 0.31-0.34 s on one). */
#define LB_OUT_WRITEBACK_BYTES (8u << 20)
void lb__out_writeback(lb__outfile *o);
/* Moves the write position to offset from the start (a later write past the
 * end leaves a hole that must be written before commit). Sticky on failure. */
lb_status lb__out_seek(lb__outfile *o, uint64_t offset);
/* Flushes, syncs and renames into place; on any failure the temporary
 * file is removed and nothing appears under path. Frees o either way. */
lb_status lb__out_commit(lb__outfile *o);
/* Removes the temporary file; safe to call on a committed or zeroed o. */
void lb__out_abort(lb__outfile *o);

#endif
