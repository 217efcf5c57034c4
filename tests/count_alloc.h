/* tests/count_alloc.h - counting allocators, for tests that check the library
   allocates through a context's hooks and not around them (test_alloc.c,
   mpi/test_comm_mpi.c). Include before the implementation; thread-safe (rank
   threads).
     - PARALLEL_MALLOC/REALLOC/FREE that count their calls: macro_count() must
       not move while a context with hooks is in use;
     - hook_malloc/hook_realloc/hook_free for a par_allocator whose user is a
       `counter`: a header on every block says whose it is, so a free or
       realloc of a block the hooks did not give (or of NULL) counts as bad. */
#ifndef TESTS_COUNT_ALLOC_H
#define TESTS_COUNT_ALLOC_H
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
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

#define BLOCK_MAGIC 0x616c6c6f63ull /* "alloc" */

typedef struct counter {
    pthread_mutex_t mu;
    long mallocs, reallocs, frees, live, bad; /* bad: free/realloc of a block not ours, or of NULL */
} counter;

typedef union block_hdr {
    struct {
        uint64_t magic;
        counter *owner;
    } h;
    max_align_t align_; /* keep the user's pointer aligned like malloc's */
} block_hdr;

static void count(counter *c, long *field, long live_delta) {
    pthread_mutex_lock(&c->mu);
    (*field)++;
    c->live += live_delta;
    pthread_mutex_unlock(&c->mu);
}

static block_hdr *ours(counter *c, void *p) {
    block_hdr *b = (block_hdr *)p - 1;
    if (b->h.magic != BLOCK_MAGIC || b->h.owner != c) return count(c, &c->bad, 0), (block_hdr *)NULL;
    return b;
}

static void *hook_malloc(size_t size, void *user) {
    counter *c = (counter *)user;
    block_hdr *b = (block_hdr *)malloc(sizeof *b + size);
    if (!b) return NULL;
    b->h.magic = BLOCK_MAGIC, b->h.owner = c;
    count(c, &c->mallocs, 1);
    return b + 1;
}

static void *hook_realloc(void *ptr, size_t size, void *user) {
    counter *c = (counter *)user;
    block_hdr *b = ptr ? ours(c, ptr) : NULL, *q;
    if (!b) return count(c, &c->bad, 0), (void *)NULL; /* realloc(NULL) is promised never to happen */
    if (!(q = (block_hdr *)realloc(b, sizeof *q + size))) return NULL;
    count(c, &c->reallocs, 0);
    return q + 1;
}

static void hook_free(void *ptr, void *user) {
    counter *c = (counter *)user;
    block_hdr *b;
    if (!ptr) {
        count(c, &c->bad, 0); /* free(NULL) is promised never to happen */
        return;
    }
    if ((b = ours(c, ptr)) == NULL) return;
    b->h.magic = 0;
    count(c, &c->frees, -1);
    free(b);
}
#endif
