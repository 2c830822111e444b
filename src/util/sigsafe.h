/* What a signal handler may need to know, kept where it can read it safely:
 * the temporary outputs in progress (removed on SIGINT/SIGTERM/SIGBUS) and
 * the mapped input files (a SIGBUS address names the file that shrank).
 *
 * Both are fixed-size static tables, so that a handler never allocates or
 * locks: each slot's state is an atomic int (0 free, 1 being filled, 2 in
 * use) and the handler reads only slots in state 2. All the limits are
 * here. */
#ifndef LB_UTIL_SIGSAFE_H
#define LB_UTIL_SIGSAFE_H

#include <stddef.h>

#include "lowbit.h"

/* Temporary outputs alive at once: a Hugging Face directory takes four
 * (the directory, its two files, one file's temporary), a command writes
 * one output at a time; a sharded quantize output up to 48 files. */
#define LB_MAX_TEMPS 64
/* Longest temporary path (bytes, NUL included); a longer one is refused
 * before anything is created. */
#define LB_TEMP_PATH_MAX 4096
/* Mapped files named in a SIGBUS message; past this many, mapping still
 * works but the message says only "a mapped input file". */
#define LB_MAX_MAPS 256
/* A mapped file's name as kept for that message (longer names are cut). */
#define LB_MAP_PATH_MAX 512

/* Registers a temporary file (is_dir 0) or directory (1) before it is
 * created; returns its slot, or -1 (LB_ERR_IO set) when the table is full
 * or the path too long. */
int lb__temp_add(const char *path, int is_dir);
/* Forgets the slot (after the temporary was renamed or removed); -1 is
 * ignored. */
void lb__temp_forget(int slot);

/* Records a mapping of path (device, inode) at [addr, addr + size);
 * returns the slot or -1 when the table is full (nothing else changes). */
int lb__map_add(const void *addr, size_t size, const char *path, unsigned long long dev, unsigned long long ino);
/* Forgets the mapping that starts at addr. */
void lb__map_forget(const void *addr);
/* Whether a file (device, inode) is mapped now; its name into name. */
int lb__map_find_file(unsigned long long dev, unsigned long long ino, char *name, size_t size);

#endif
