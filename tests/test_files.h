/* tests/test_files.h - a temporary directory and small file helpers for the
   tests that write files (safetensors, traces, the trainer). Include after
   test.h. Every helper is static and may go unused in a given test. */
#ifndef PAR_TEST_FILES_H
#define PAR_TEST_FILES_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static char test_dir[256]; /* the test's temporary directory */

/* "<test_dir>/<name>" in one of 8 rotating buffers (a few may be live at once). */
static PAR__MAYBE_UNUSED const char *test_path(const char *name) {
    static char buf[8][512];
    static int next;
    char *p = buf[next++ & 7];
    snprintf(p, sizeof buf[0], "%s/%s", test_dir, name);
    return p;
}

/* 1 when the whole file was written. */
static PAR__MAYBE_UNUSED int test_write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    int ok;
    if (!f) return 0;
    ok = fwrite(data, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

/* The file's bytes (malloc'd, with a NUL after them; *n their count), or NULL. */
static PAR__MAYBE_UNUSED unsigned char *test_read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    unsigned char *buf = NULL;
    long len;
    *n = 0;
    if (!f) return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
        buf = (unsigned char *)malloc((size_t)len + 1);
        if (buf && fread(buf, 1, (size_t)len, f) != (size_t)len) free(buf), buf = NULL;
        if (buf) buf[len] = 0, *n = (size_t)len;
    }
    fclose(f);
    return buf;
}

static PAR__MAYBE_UNUSED int test_file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* 1 when both files exist and hold the same bytes. */
static PAR__MAYBE_UNUSED int test_files_identical(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa && fb, ca, cb;
    while (same) {
        ca = fgetc(fa), cb = fgetc(fb);
        if (ca != cb) same = 0;
        if (ca == EOF || cb == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

#endif
