/* tests/test.h - the tiny harness every C test program uses.

   Each CHECK is one counted assertion. A failing check prints file:line, the
   expression and par_last_error(). TEST_END() prints the program's summary line
   "<name>: N passed, N failed" (tests/run.sh adds them up) and yields the exit
   status. Tests must be able to fail: every CHECK compares against something
   computed independently, never against a value copied from the code under test. */
#ifndef PAR_TEST_H
#define PAR_TEST_H
#include <stdio.h>
#include <string.h>
#include "../parallel.h"

#if defined(__GNUC__) || defined(__clang__)
#define TEST_MAYBE_UNUSED __attribute__((unused)) /* a suite included by an MPI program counts per rank instead */
#else
#define TEST_MAYBE_UNUSED
#endif
static int test_passed_ TEST_MAYBE_UNUSED, test_failed_ TEST_MAYBE_UNUSED;

#define CHECK_MSG(cond, ...)                                                        \
    do {                                                                            \
        if (cond) {                                                                 \
            test_passed_++;                                                         \
        } else {                                                                    \
            test_failed_++;                                                         \
            fprintf(stderr, "%s:%d: FAILED: %s -- ", __FILE__, __LINE__, #cond);    \
            fprintf(stderr, __VA_ARGS__);                                           \
            fprintf(stderr, " (last error: %s)\n", par_last_error());               \
        }                                                                           \
    } while (0)

#define CHECK(cond) CHECK_MSG(cond, "%s", "")

/* expr must return PAR_OK. */
#define CHECK_OK(expr)                                                              \
    do {                                                                            \
        par_status st_ = (expr);                                                    \
        CHECK_MSG(st_ == PAR_OK, "got %s", par_status_string(st_));                 \
    } while (0)

/* expr must fail with `status` and a last-error sentence containing `needle`. */
#define CHECK_ERR(expr, status, needle)                                             \
    do {                                                                            \
        par_status st_ = (expr);                                                    \
        CHECK_MSG(st_ == (status) && strstr(par_last_error(), (needle)) != NULL,     \
                  "got %s, want %s with \"%s\"", par_status_string(st_),            \
                  par_status_string(status), (needle));                             \
    } while (0)

#define CHECK_STR(got, want)                                                        \
    do {                                                                            \
        const char *g_ = (got), *w_ = (want);                                       \
        CHECK_MSG(strcmp(g_, w_) == 0, "got \"%s\", want \"%s\"", g_, w_);          \
    } while (0)

#define CHECK_INT(got, want)                                                        \
    do {                                                                            \
        long long g_ = (long long)(got), w_ = (long long)(want);                    \
        CHECK_MSG(g_ == w_, "got %lld, want %lld", g_, w_);                         \
    } while (0)

/* Return a failing status of `call` from the enclosing function (which returns
   par_status). Tests use it instead of the implementation's private PAR__CHECK,
   so that they link the implementation compiled once (see the Makefile). */
#define RETURN_IF_ERR(call)                                                         \
    do {                                                                            \
        par_status rie_ = (call);                                                   \
        if (rie_ != PAR_OK) return rie_;                                            \
    } while (0)

/* Checks on rank threads (the threads backend): each rank counts into its own
   rank_counts, summed after the join; a failure names the rank. */
typedef struct rank_counts {
    int passed, failed, rank;
} rank_counts;

#define RANK_CHECK(c, cond, ...)                                                    \
    do {                                                                            \
        if (cond) (c)->passed++;                                                    \
        else {                                                                      \
            (c)->failed++;                                                          \
            fprintf(stderr, "%s:%d: rank %d: FAILED: %s -- ", __FILE__, __LINE__, (c)->rank, #cond); \
            fprintf(stderr, __VA_ARGS__);                                           \
            fprintf(stderr, " (last error: %s)\n", par_last_error());               \
        }                                                                           \
    } while (0)
#define RANK_OK(c, expr)                                                            \
    do {                                                                            \
        par_status rok_ = (expr);                                                   \
        RANK_CHECK(c, rok_ == PAR_OK, "%s: %s", #expr, par_status_string(rok_));    \
    } while (0)

#define TEST_END(name)                                                              \
    (printf("%s: %d passed, %d failed\n", (name), test_passed_, test_failed_),      \
     fflush(stdout), test_failed_ ? 1 : 0)

#endif
