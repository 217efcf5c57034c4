/* tests/fuzz/fuzz.h - what every libFuzzer target (tests/fuzz/fuzz_*.c) shares.

   The targets are built by `make fuzz` (and, briefly, by `make test`) with
   clang -fsanitize=fuzzer,address,undefined. Beyond "no crash, no sanitizer
   report", each target holds the library to its bad-input rule: a failing call
   returns a status from PAR_STATUS_LIST with a non-empty par_last_error()
   sentence. A violation calls FUZZ_REQUIRE, which prints why and aborts, so
   libFuzzer stops and saves the input like any other crash.
   The library itself comes from tests/parallel_impl.c, compiled once (with
   the fuzzer's instrumentation) and linked into every target.
   Seed corpora: tests/fuzz/<target>/ (valid inputs, tricky ones, and every
   input that once crashed, as a regression test); tests/fuzz/run.sh runs one
   target (replay of its seeds, then a timed run). */
#ifndef PAR_FUZZ_H
#define PAR_FUZZ_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "../../parallel.h"

#define FUZZ_REQUIRE(cond, ...)                                             \
    do {                                                                    \
        if (!(cond)) {                                                      \
            fprintf(stderr, "%s:%d: fuzz invariant broken: %s -- ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                   \
            fprintf(stderr, "\n");                                          \
            abort();                                                        \
        }                                                                   \
    } while (0)

static inline int fuzz_status_known(par_status st) {
    switch (st) {
#define FUZZ_STATUS_CASE(name, value, text) \
    case name:                              \
        return 1;
        PAR_STATUS_LIST(FUZZ_STATUS_CASE)
#undef FUZZ_STATUS_CASE
    default:
        return 0;
    }
}

/* A failed call must be a known status with a sentence saying why. */
static inline void fuzz_clean(par_status st, const char *call) {
    FUZZ_REQUIRE(fuzz_status_known(st), "%s returned unknown status %d", call, (int)st);
    if (st != PAR_OK) FUZZ_REQUIRE(par_last_error()[0] != 0, "%s failed with %s but left no message", call,
                                   par_status_string(st));
}

/* The input as a NUL-terminated string (the parsers take C strings; an
   embedded NUL simply ends the text early, as it would for a caller). */
static inline char *fuzz_cstr(const uint8_t *data, size_t size) {
    char *s = (char *)malloc(size + 1);
    if (!s) abort();
    if (size) memcpy(s, data, size);
    s[size] = 0;
    return s;
}

/* Split at the first '\n': *rest points past it (or to the end). */
static inline char *fuzz_line(char *s, char **rest) {
    char *nl = strchr(s, '\n');
    if (nl) *nl = 0, *rest = nl + 1;
    else *rest = s + strlen(s);
    return s;
}

/* The input as a file (for the entry points that take a path): one path per
   process, rewritten on every input, removed at exit. */
static char fuzz_path_[256];
static inline void fuzz_unlink_(void) {
    if (fuzz_path_[0]) unlink(fuzz_path_);
}
static inline const char *fuzz_file(const char *tag, const uint8_t *data, size_t size) {
    FILE *f;
    if (!fuzz_path_[0]) {
        const char *dir = getenv("TMPDIR");
        snprintf(fuzz_path_, sizeof fuzz_path_, "%s/par_fuzz_%s_%ld", dir && *dir ? dir : "/tmp", tag, (long)getpid());
        atexit(fuzz_unlink_);
    }
    if (!(f = fopen(fuzz_path_, "wb"))) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    if (fclose(f) != 0) abort();
    return fuzz_path_;
}

#endif
