/* The signal-readable tables of temporary outputs and mapped inputs (see
 * sigsafe.h). Writers take a mutex among themselves; the handler takes
 * nothing and calls only unlink, rmdir and plain loads. */
#include "util/sigsafe.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "util/error.h"

#if ATOMIC_INT_LOCK_FREE != 2
#error "a signal handler needs lock-free atomic ints"
#endif

enum { FREE = 0, FILLING = 1, READY = 2 };

static struct temp_slot {
    atomic_int state;
    int is_dir;
    char path[LB_TEMP_PATH_MAX];
} temps[LB_MAX_TEMPS];

static struct map_slot {
    atomic_int state;
    uintptr_t start, end;
    unsigned long long dev, ino;
    char path[LB_MAP_PATH_MAX];
} maps[LB_MAX_MAPS];

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

int lb__temp_add(const char *path, int is_dir)
{
    size_t n = strlen(path);
    if (n >= LB_TEMP_PATH_MAX) {
        lb__fail(LB_ERR_IO, "the temporary name beside '%s' is longer than %d bytes", path, LB_TEMP_PATH_MAX - 1);
        return -1;
    }
    pthread_mutex_lock(&lock);
    int slot = -1;
    for (int i = 0; i < LB_MAX_TEMPS && slot < 0; i++)
        if (atomic_load(&temps[i].state) == FREE) slot = i;
    if (slot >= 0) {
        atomic_store(&temps[slot].state, FILLING);
        memcpy(temps[slot].path, path, n + 1);
        temps[slot].is_dir = is_dir;
        atomic_store(&temps[slot].state, READY);
    }
    pthread_mutex_unlock(&lock);
    if (slot < 0) lb__fail(LB_ERR_IO, "more than %d temporary outputs at once (writing '%s')", LB_MAX_TEMPS, path);
    return slot;
}

void lb__temp_forget(int slot)
{
    if (slot < 0 || slot >= LB_MAX_TEMPS) return;
    pthread_mutex_lock(&lock);
    atomic_store(&temps[slot].state, FREE);
    pthread_mutex_unlock(&lock);
}

/* Files first, then directories: a temporary directory's files are
 * registered too, so it is empty by the time rmdir comes. */
void lb_output_remove_temps(void)
{
    for (int dirs = 0; dirs < 2; dirs++)
        for (int i = 0; i < LB_MAX_TEMPS; i++) {
            if (atomic_load(&temps[i].state) != READY || temps[i].is_dir != dirs) continue;
            if (dirs) rmdir(temps[i].path);
            else unlink(temps[i].path);
        }
}

int lb__map_add(const void *addr, size_t size, const char *path, unsigned long long dev, unsigned long long ino)
{
    pthread_mutex_lock(&lock);
    int slot = -1;
    for (int i = 0; i < LB_MAX_MAPS && slot < 0; i++)
        if (atomic_load(&maps[i].state) == FREE) slot = i;
    if (slot >= 0) {
        struct map_slot *m = &maps[slot];
        atomic_store(&m->state, FILLING);
        m->start = (uintptr_t)addr, m->end = (uintptr_t)addr + size;
        m->dev = dev, m->ino = ino;
        size_t n = strlen(path);
        if (n >= LB_MAP_PATH_MAX) n = LB_MAP_PATH_MAX - 1;
        memcpy(m->path, path, n);
        m->path[n] = '\0';
        atomic_store(&m->state, READY);
    }
    pthread_mutex_unlock(&lock);
    return slot;
}

void lb__map_forget(const void *addr)
{
    pthread_mutex_lock(&lock);
    for (int i = 0; i < LB_MAX_MAPS; i++)
        if (atomic_load(&maps[i].state) == READY && maps[i].start == (uintptr_t)addr) {
            atomic_store(&maps[i].state, FREE);
            break;
        }
    pthread_mutex_unlock(&lock);
}

int lb__map_find_file(unsigned long long dev, unsigned long long ino, char *name, size_t size)
{
    int found = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < LB_MAX_MAPS && !found; i++)
        if (atomic_load(&maps[i].state) == READY && maps[i].dev == dev && maps[i].ino == ino) {
            found = 1;
            if (size) snprintf(name, size, "%s", maps[i].path);
        }
    pthread_mutex_unlock(&lock);
    return found;
}

const char *lb_mapped_file_at(const void *addr)
{
    uintptr_t a = (uintptr_t)addr;
    for (int i = 0; i < LB_MAX_MAPS; i++)
        if (atomic_load(&maps[i].state) == READY && a >= maps[i].start && a < maps[i].end) return maps[i].path;
    return NULL;
}
