/* tests/macro_alloc.h - PARALLEL_MALLOC/REALLOC/FREE that count their calls,
   for tests that check the library allocates through a context's hooks and
   not around them (macro_count() must not move while a context is in use).
   Include before the implementation; thread-safe (rank threads). */
#ifndef TESTS_MACRO_ALLOC_H
#define TESTS_MACRO_ALLOC_H
#include <pthread.h>
#include <stdlib.h>

static pthread_mutex_t macro_mu = PTHREAD_MUTEX_INITIALIZER;
static long macro_calls;
static void macro_count_one(void) {
    pthread_mutex_lock(&macro_mu);
    macro_calls++;
    pthread_mutex_unlock(&macro_mu);
}
static void *macro_malloc(size_t n) { return macro_count_one(), malloc(n); }
static void *macro_realloc(void *p, size_t n) { return macro_count_one(), realloc(p, n); }
static void macro_free(void *p) {
    if (p) macro_count_one();
    free(p);
}
static long macro_count(void) {
    long n;
    pthread_mutex_lock(&macro_mu);
    n = macro_calls;
    pthread_mutex_unlock(&macro_mu);
    return n;
}
#define PARALLEL_MALLOC(sz) macro_malloc(sz)
#define PARALLEL_REALLOC(p, sz) macro_realloc(p, sz)
#define PARALLEL_FREE(p) macro_free(p)
#endif
