/* The one output routine (util/file.h, util/output.h) and the tables a
 * signal handler reads (util/sigsafe.h): registered inputs and mapped files
 * are never written over, an existing file needs replacing allowed and keeps
 * its mode, lb_output_remove_temps removes what is in progress, and
 * lb_mapped_file_at finds the file behind an address; a large output has its
 * disk writes started as it goes, and its bytes are still exactly those
 * written (seeks back included). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "util/file.h"
#include "util/sigsafe.h"

static char dir[64];

static const char *in_dir(const char *name)
{
    static char buf[4][128];
    static int k;
    char *p = buf[k++ % 4];
    snprintf(p, 128, "%s/%s", dir, name);
    return p;
}

static void put_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    fputs(text, f);
    fclose(f);
}

static int holds(const char *path, const char *text)
{
    char buf[64] = "";
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return strcmp(buf, text) == 0;
}

/* How many entries dir holds (temporaries included). */
static int count_entries(const char *d)
{
    char cmd[160];
    snprintf(cmd, sizeof cmd, "ls -A %s | wc -l", d);
    FILE *p = popen(cmd, "r");
    int n = -1;
    if (p && fscanf(p, "%d", &n) != 1) n = -1;
    if (p) pclose(p);
    return n;
}

static lb_status write_text(const char *path, const char *text)
{
    lb__outfile o;
    lb_status st = lb__out_open(path, &o);
    if (st != LB_OK) return st;
    st = lb__out_write(&o, text, strlen(text));
    if (st != LB_OK) {
        lb__out_abort(&o);
        return st;
    }
    return lb__out_commit(&o);
}

static void test_inputs_are_never_outputs(void)
{
    const char *in = in_dir("input.txt"), *link = in_dir("link.txt");
    put_file(in, "input");
    CHECK(symlink("input.txt", link) == 0, "symlink");
    CHECK(lb_output_protect(in, "the --text file") == LB_OK, "%s", lb_last_error());
    CHECK(lb_output_protect(in_dir("missing"), "nothing") == LB_OK, "a missing input is ignored");
    lb_output_allow_replace(1);
    char dotted[160];
    snprintf(dotted, sizeof dotted, "%s/./input.txt", dir);
    const char *dests[] = {in, dotted, link};
    for (size_t i = 0; i < 3; i++) {
        lb_status st = write_text(dests[i], "clobbered");
        CHECK(st == LB_ERR_ARG && strstr(lb_last_error(), "it is the same file as the --text file"), "%zu: %d %s", i,
              (int)st, lb_last_error());
        CHECK(lb_output_check(dests[i]) == LB_ERR_ARG, "%zu: checked before any work too", i);
    }
    CHECK(holds(in, "input") && count_entries(dir) == 2, "input untouched, nothing else created");
    lb_output_reset();
    unlink(link), unlink(in);
}

static void test_mapped_files_are_inputs(void)
{
    const char *p = in_dir("model.bin");
    put_file(p, "0123456789abcdef");
    lb__mapped m;
    CHECK(lb__map_file(p, &m) == LB_OK, "%s", lb_last_error());
    CHECK(lb_mapped_file_at(m.data) && strcmp(lb_mapped_file_at(m.data + 15), p) == 0, "address -> file");
    CHECK(lb_mapped_file_at(m.data + 4096) == NULL && lb_mapped_file_at(&m) == NULL, "outside: none");
    lb_output_allow_replace(1);
    lb_status st = write_text(p, "x");
    CHECK(st == LB_ERR_ARG && strstr(lb_last_error(), "which is being read (mapped)"), "%s", lb_last_error());
    const uint8_t *at = m.data;
    lb__unmap_file(&m);
    CHECK(lb_mapped_file_at(at) == NULL, "forgotten when unmapped");
    CHECK(write_text(p, "new") == LB_OK && holds(p, "new"), "%s", lb_last_error());
    lb_output_reset();
    unlink(p);
}

static void test_existing_files(void)
{
    const char *p = in_dir("out.bin"), *other = in_dir("other.bin");
    put_file(p, "old");
    chmod(p, 0640);
    lb_status st = write_text(p, "new");
    CHECK(st == LB_ERR_ARG && strstr(lb_last_error(), "already exists"), "%s", lb_last_error());
    CHECK(holds(p, "old"), "refused: untouched");
    lb_output_allow_replace(1);
    CHECK(write_text(p, "new") == LB_OK && holds(p, "new"), "%s", lb_last_error());
    struct stat sb;
    CHECK(stat(p, &sb) == 0 && (sb.st_mode & 0777) == 0640, "mode kept: %o", (unsigned)(sb.st_mode & 0777));
    CHECK(link(p, other) == 0, "link");
    st = write_text(p, "newer");
    CHECK(st == LB_ERR_ARG && strstr(lb_last_error(), "has 2 hard links"), "%s", lb_last_error());
    CHECK(holds(p, "new") && holds(other, "new"), "both names untouched");
    unlink(other);
    /* without replacing allowed, a file that appears while the output is
     * written survives it */
    lb_output_allow_replace(0);
    const char *q = in_dir("late.bin");
    lb__outfile o;
    CHECK(lb__out_open(q, &o) == LB_OK && lb__out_write(&o, "mine", 4) == LB_OK, "%s", lb_last_error());
    put_file(q, "theirs");
    st = lb__out_commit(&o);
    CHECK(st == LB_ERR_IO && strstr(lb_last_error(), "appeared while it was being written"), "%s", lb_last_error());
    CHECK(holds(q, "theirs") && count_entries(dir) == 2, "kept, no temporary left");
    unlink(q), unlink(p);
}

static void test_remove_temps(void)
{
    const char *p = in_dir("big.bin");
    lb__outfile o;
    CHECK(lb__out_open(p, &o) == LB_OK, "%s", lb_last_error());
    char want[160];
    snprintf(want, sizeof want, "%s.lowbit-tmp.%ld.", p, (long)getpid());
    CHECK(strncmp(o.tmp_path, want, strlen(want)) == 0, "temporary name says what it is: %s", o.tmp_path);
    CHECK(access(o.tmp_path, F_OK) == 0, "temporary exists");
    const char *names[] = {"config.json", "model.safetensors"};
    lb__outdir d;
    CHECK(lb__outdir_open(in_dir("hf"), names, 2, &d) == LB_OK, "%s", lb_last_error());
    char *inner = lb__path_join(d.tmp_path, "model.safetensors");
    lb__outfile oi;
    CHECK(inner && lb__out_open(inner, &oi) == LB_OK && lb__out_write(&oi, "x", 1) == LB_OK, "%s", lb_last_error());
    char *cfg = lb__path_join(d.tmp_path, "config.json");
    CHECK(cfg && write_text(cfg, "{}") == LB_OK, "a finished file inside the temporary directory");
    CHECK(count_entries(dir) == 2 && count_entries(d.tmp_path) == 2, "in progress");
    lb_output_remove_temps(); /* what the SIGINT handler calls */
    CHECK(count_entries(dir) == 0, "everything in progress is gone");
    lb__out_abort(&oi), lb__outdir_abort(&d), lb__out_abort(&o);
    free(inner), free(cfg);
    CHECK(count_entries(dir) == 0, "abort after removal is harmless");
}

static void test_writeback(void)
{
    enum { CHUNK = 1u << 20, CHUNKS = 20 };
    const char *p = in_dir("big.bin");
    unsigned char *chunk = malloc(CHUNK), *back = malloc(CHUNK);
    lb__outfile o;
    CHECK(lb__out_open(p, &o) == LB_OK, "%s", lb_last_error());
    for (unsigned c = 0; c < CHUNKS; c++) {
        for (unsigned i = 0; i < CHUNK; i++) chunk[i] = (unsigned char)(c * 131 + i * 7 + (i >> 11));
        CHECK(lb__out_write(&o, chunk, 3) == LB_OK && lb__out_write(&o, chunk + 3, CHUNK - 3) == LB_OK, "chunk %u", c);
    }
#ifdef __linux__
    CHECK(o.written_back >= (uint64_t)(CHUNKS - 8) * CHUNK, "the disk writes were started as it went (up to %llu)",
          (unsigned long long)o.written_back);
#endif
    /* a part rewritten after its writeback started: the file holds the new bytes */
    CHECK(lb__out_seek(&o, 5 * (uint64_t)CHUNK + 100) == LB_OK && lb__out_write(&o, "rewritten", 9) == LB_OK, "seek");
    CHECK(lb__out_seek(&o, (uint64_t)CHUNKS * CHUNK) == LB_OK && lb__out_write(&o, "end", 3) == LB_OK, "tail");
    CHECK(lb__out_commit(&o) == LB_OK, "%s", lb_last_error());
    FILE *f = fopen(p, "rb");
    int same = f != NULL;
    for (unsigned c = 0; same && c < CHUNKS; c++) {
        for (unsigned i = 0; i < CHUNK; i++) chunk[i] = (unsigned char)(c * 131 + i * 7 + (i >> 11));
        if (c == 5) memcpy(chunk + 100, "rewritten", 9);
        same = fread(back, 1, CHUNK, f) == CHUNK && memcmp(chunk, back, CHUNK) == 0;
    }
    char tail[4] = {0};
    same = same && fread(tail, 1, 4, f) == 3 && memcmp(tail, "end", 3) == 0;
    if (f) fclose(f);
    CHECK(same, "the file holds exactly the bytes written");
    unlink(p);
    free(chunk), free(back);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/lb_test_out_XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_inputs_are_never_outputs();
    test_mapped_files_are_inputs();
    test_existing_files();
    test_remove_temps();
    test_writeback();
    rmdir(dir);
    return check_summary();
}
