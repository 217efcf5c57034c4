/* bench/bench_comm.c - bus bandwidth of the comm backends.

   Usage: bench_comm [--quick]

   Times all_reduce (f32 sum), all_gather, reduce_scatter (f32 sum), all_to_all
   and broadcast over buffer sizes 4 KiB .. 64 MiB (powers of 4) on 2, 4 and 8
   ranks for the threads backend, and - when built with mpicc -DPARALLEL_WITH_MPI -
   for the MPI backend in the same run: the program re-executes itself as
   `$BENCH_MPIRUN -np K <self> --mpi-worker` (default BENCH_MPIRUN="mpirun
   --allow-run-as-root --oversubscribe") and merges what rank 0 of the workers
   prints. The MPI workers also time a plain blocking MPI_Allreduce ("mpi-raw"),
   so the cost of the backend's non-blocking + bounded-wait design is visible.
   Also measured: the single-thread memcpy bandwidth, the ceiling of one core.

   busbw follows nccl-tests, with bytes = the total buffer (all_gather: the
   gathered recv, reduce_scatter: the n-block send):
     all_reduce  bytes * 2(n-1)/n / t
     all_gather, reduce_scatter, all_to_all  bytes * (n-1)/n / t
     broadcast   bytes / t
   t is the median over several timed repetitions (each a barrier, `iters` ops,
   a barrier, divided by iters) after warm-up ops.

   Output: a table, one JSON line per measurement
     {"bench":"comm","backend":"threads","op":"all_reduce","ranks":8,"bytes":4194304,"busbw_gbps":...}
   and the two acceptance ratios (threads/MPI all_reduce busbw at 8 ranks 4 MiB,
   target >= 3; threads all_reduce busbw at 2 ranks 4 MiB / memcpy, target >= 0.5). */
#define _POSIX_C_SOURCE 200809L
#include "parallel.h"
#ifdef PARALLEL_WITH_MPI
#include <mpi.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NUM_OPS 5
static const char *const op_names[NUM_OPS] = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"};
static const int rank_counts[3] = {2, 4, 8};
#define MAX_SIZES 8
#define NUM_BACKENDS 3 /* threads, mpi, mpi-raw */
static const char *const backend_names[NUM_BACKENDS] = {"threads", "mpi", "mpi-raw"};

typedef struct cfg {
    int quick;
    int nsizes;
    int64_t sizes[MAX_SIZES];
} cfg;

/* busbw[backend][op][ranks index][size index], 0 = not measured */
static double results[NUM_BACKENDS][NUM_OPS][3][MAX_SIZES];

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double busbw_factor(int op, int n) {
    if (op == 0) return 2.0 * (n - 1) / n;
    if (op == 4) return 1.0;
    return (double)(n - 1) / n;
}

static void init_cfg(cfg *c, int quick) {
    int64_t s;
    c->quick = quick;
    c->nsizes = 0;
    if (quick) { /* CI smoke: small, and the size the acceptance ratios use */
        c->sizes[c->nsizes++] = 4096;
        c->sizes[c->nsizes++] = 4 << 20;
        return;
    }
    for (s = 4096; s <= (64 << 20); s *= 4) c->sizes[c->nsizes++] = s;
}

/* Timed repetitions and ops per repetition for a buffer size (keeps the full
   run within a few minutes on 2 cores while small sizes still average). */
static void plan_reps(const cfg *c, int64_t bytes, int *reps, int *iters) {
    *reps = c->quick ? 3 : 5;
    /* enough ops per repetition (~32 MiB moved) that the two barriers around them vanish */
    *iters = bytes <= 65536 ? 50 : (int)((32 << 20) / bytes) > 1 ? (int)((32 << 20) / bytes) : 1;
    if (bytes >= (16 << 20)) *reps = 3;
}

/* One op on the comm table; bytes is the nccl-tests total buffer. */
static par_status run_op(const par_comm_table *t, par_comm_group *g, int n, int index, int op, int64_t bytes,
                         char *send, char *recv) {
    int64_t count = bytes / 4;
    switch (op) {
    case 0: return t->all_reduce(t->user, g, send, recv, count, PAR_F32, PAR_REDUCE_SUM, NULL);
    case 1: return t->all_gather(t->user, g, send, recv, count / n, PAR_F32, NULL);
    case 2: return t->reduce_scatter(t->user, g, send, recv, count / n, PAR_F32, PAR_REDUCE_SUM, NULL);
    case 3: return t->all_to_all(t->user, g, send, recv, count / n, PAR_F32, NULL);
    default: (void)index; return t->broadcast(t->user, g, send, count, PAR_F32, 0, NULL);
    }
}

/* Median seconds per op, measured by every rank, meaningful on rank 0. `raw`
   (MPI builds only) replaces the table's op. */
typedef par_status (*raw_fn)(int64_t bytes, char *send, char *recv);

static double time_op(const cfg *c, const par_comm_table *t, par_comm_group *g, int n, int index, int op,
                      int64_t bytes, char *send, char *recv, raw_fn raw, par_status *st) {
    double times[8], t0;
    int reps, iters, r, i;
    plan_reps(c, bytes, &reps, &iters);
    *st = PAR_OK;
    for (i = 0; i < 2 && *st == PAR_OK; i++) *st = raw ? raw(bytes, send, recv) : run_op(t, g, n, index, op, bytes, send, recv);
    for (r = 0; r < reps && *st == PAR_OK; r++) {
        if ((*st = t->barrier(t->user, g)) != PAR_OK) break;
        t0 = now_s();
        for (i = 0; i < iters && *st == PAR_OK; i++)
            *st = raw ? raw(bytes, send, recv) : run_op(t, g, n, index, op, bytes, send, recv);
        if (*st == PAR_OK) *st = t->barrier(t->user, g);
        times[r] = (now_s() - t0) / iters;
    }
    if (*st != PAR_OK) return 0;
    qsort(times, (size_t)reps, sizeof times[0], cmp_double);
    return times[reps / 2];
}

typedef struct job {
    const cfg *c;
    int backend, ri;
    raw_fn raw; /* MPI: plain MPI_Allreduce, timed as backend "mpi-raw" */
    FILE *out;  /* MPI workers: where rank 0 reports */
} job;

static par_status bench_rank(par_ctx *ctx, void *arg) {
    job *j = (job *)arg;
    const par_comm_table *t = par_ctx_comm(ctx);
    par_comm_group *g = NULL;
    int n = 0, index = 0, op, si;
    int64_t max_bytes = j->c->sizes[j->c->nsizes - 1];
    char *send, *recv;
    par_status st;
    if ((st = par_ctx_group(ctx, 1u, &g, &index, &n)) != PAR_OK) return st;
    send = (char *)malloc((size_t)max_bytes);
    recv = (char *)malloc((size_t)max_bytes);
    if (!send || !recv) {
        free(send);
        free(recv);
        return PAR_ENOMEM;
    }
    memset(send, 0, (size_t)max_bytes); /* fault the pages in before timing */
    memset(recv, 0, (size_t)max_bytes);
    for (op = 0; op < NUM_OPS + (j->raw ? 1 : 0); op++) {
        for (si = 0; si < j->c->nsizes; si++) {
            int64_t bytes = j->c->sizes[si];
            int raw = op == NUM_OPS, real_op = raw ? 0 : op;
            double sec = time_op(j->c, t, g, n, index, real_op, bytes, send, recv, raw ? j->raw : NULL, &st);
            double bw = st == PAR_OK && sec > 0 ? bytes * busbw_factor(real_op, n) / sec / 1e9 : 0;
            if (st != PAR_OK) break;
            if (par_ctx_rank(ctx) != 0) continue;
            if (j->out)
                fprintf(j->out, "@@ %d %d %d %.6f\n", raw ? 2 : j->backend, real_op, si, bw);
            else
                results[j->backend][real_op][j->ri][si] = bw;
        }
        if (st != PAR_OK) break;
    }
    if (j->out) fflush(j->out);
    free(send);
    free(recv);
    return st;
}

/* Single-thread memcpy: bytes / t, median of 5. */
static double memcpy_gbps(int64_t bytes) {
    char *a = (char *)malloc((size_t)bytes), *b = (char *)malloc((size_t)bytes);
    double times[5], t0;
    int r, i, iters = bytes <= (1 << 20) ? 50 : 5;
    if (!a || !b) {
        free(a);
        free(b);
        return 0;
    }
    memset(a, 1, (size_t)bytes);
    memset(b, 0, (size_t)bytes);
    for (r = 0; r < 5; r++) {
        t0 = now_s();
        for (i = 0; i < iters; i++) memcpy(i & 1 ? a : b, i & 1 ? b : a, (size_t)bytes);
        times[r] = (now_s() - t0) / iters;
    }
    free(a);
    free(b);
    qsort(times, 5, sizeof times[0], cmp_double);
    return bytes / times[2] / 1e9;
}

#ifdef PARALLEL_WITH_MPI
static MPI_Comm raw_comm;
static par_status raw_allreduce(int64_t bytes, char *send, char *recv) {
    return MPI_Allreduce(send, recv, (int)(bytes / 4), MPI_FLOAT, MPI_SUM, raw_comm) == MPI_SUCCESS ? PAR_OK : PAR_ECOMM;
}

/* Under mpirun: one rank of the MPI measurement; rank 0 prints "@@" lines. */
static int mpi_worker(const cfg *c) {
    par_ctx *ctx = NULL;
    job j;
    par_status st;
    int ok;
    if (par_ctx_init_mpi(NULL, &ctx) != PAR_OK) {
        fprintf(stderr, "bench_comm worker: %s\n", par_last_error());
        return 1;
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &raw_comm);
    memset(&j, 0, sizeof j);
    j.c = c;
    j.backend = 1;
    j.raw = raw_allreduce;
    j.out = stdout;
    st = bench_rank(ctx, &j);
    ok = st == PAR_OK;
    if (!ok) fprintf(stderr, "bench_comm worker rank %d: %s\n", par_ctx_rank(ctx), par_last_error());
    MPI_Comm_free(&raw_comm);
    par_ctx_destroy(ctx); /* finalizes MPI: the context initialized it */
    return ok ? 0 : 1;
}

/* Launch the workers on k ranks and merge rank 0's lines. */
static int run_mpi(const cfg *c, const char *self, int ri) {
    const char *mpirun = getenv("BENCH_MPIRUN");
    char cmd[8400], line[256];
    FILE *p;
    int got = 0, b, op, si;
    double bw;
    if (!mpirun || !*mpirun) mpirun = "mpirun --allow-run-as-root --oversubscribe";
    snprintf(cmd, sizeof cmd, "%s -np %d '%s' --mpi-worker%s", mpirun, rank_counts[ri], self, c->quick ? " --quick" : "");
    fflush(stdout);
    if (!(p = popen(cmd, "r"))) {
        fprintf(stderr, "bench_comm: cannot run %s\n", cmd);
        return 0;
    }
    while (fgets(line, sizeof line, p)) {
        if (sscanf(line, "@@ %d %d %d %lf", &b, &op, &si, &bw) == 4 && b >= 1 && b < NUM_BACKENDS && op >= 0 &&
            op < NUM_OPS && si >= 0 && si < c->nsizes) {
            results[b][op][ri][si] = bw;
            got++;
        } else {
            fputs(line, stderr);
        }
    }
    if (pclose(p) != 0 || !got) fprintf(stderr, "bench_comm: `%s` failed (%d results)\n", cmd, got);
    return got;
}
#endif

static void print_size(int64_t b, char *out, size_t n) {
    if (b >= (1 << 20)) snprintf(out, n, "%lldM", (long long)(b >> 20));
    else snprintf(out, n, "%lldK", (long long)(b >> 10));
}

int main(int argc, char **argv) {
    cfg c;
    int quick = 0, worker = 0, i, ri, op, si, b, have_mpi = 0, si4 = -1;
    double mc, mc64;
    char sz[32];
    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) quick = 1;
        else if (strcmp(argv[i], "--mpi-worker") == 0) worker = 1;
        else {
            fprintf(stderr, "usage: %s [--quick]\n", argv[0]);
            return 2;
        }
    }
    init_cfg(&c, quick);
#ifdef PARALLEL_WITH_MPI
    if (worker) return mpi_worker(&c);
#else
    if (worker) {
        fprintf(stderr, "bench_comm: built without PARALLEL_WITH_MPI\n");
        return 2;
    }
#endif
    for (si = 0; si < c.nsizes; si++)
        if (c.sizes[si] == (4 << 20)) si4 = si;
    for (ri = 0; ri < 3; ri++) {
        job j;
        par_status st;
        memset(&j, 0, sizeof j);
        j.c = &c;
        j.backend = 0;
        j.ri = ri;
        st = par_run_threads(rank_counts[ri], bench_rank, &j);
        if (st != PAR_OK) fprintf(stderr, "bench_comm: threads on %d ranks: %s\n", rank_counts[ri], par_last_error());
    }
#ifdef PARALLEL_WITH_MPI
    {
        char self[4096];
        ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
        if (len > 0) self[len] = 0;
        else snprintf(self, sizeof self, "%s", argv[0]);
        for (ri = 0; ri < 3; ri++) have_mpi += run_mpi(&c, self, ri) > 0;
    }
#endif
    mc = memcpy_gbps(4 << 20);
    mc64 = c.quick ? 0 : memcpy_gbps(64 << 20);

    printf("comm bus bandwidth, GB/s (nccl-tests busbw; median of repetitions)%s\n", quick ? " [quick]" : "");
    printf("%-8s %-15s %5s", "backend", "op", "ranks");
    for (si = 0; si < c.nsizes; si++) {
        print_size(c.sizes[si], sz, sizeof sz);
        printf(" %7s", sz);
    }
    printf("\n");
    for (b = 0; b < NUM_BACKENDS; b++)
        for (op = 0; op < NUM_OPS; op++)
            for (ri = 0; ri < 3; ri++) {
                int any = 0;
                for (si = 0; si < c.nsizes; si++) any |= results[b][op][ri][si] > 0;
                if (!any) continue;
                printf("%-8s %-15s %5d", backend_names[b], op_names[op], rank_counts[ri]);
                for (si = 0; si < c.nsizes; si++) printf(" %7.2f", results[b][op][ri][si]);
                printf("\n");
            }
    printf("memcpy (1 thread): 4M %.2f GB/s (the ratio's ceiling: same size, cache-resident)", mc);
    if (mc64 > 0) printf(", 64M %.2f GB/s (DRAM)", mc64);
    printf("\n");
    for (b = 0; b < NUM_BACKENDS; b++)
        for (op = 0; op < NUM_OPS; op++)
            for (ri = 0; ri < 3; ri++)
                for (si = 0; si < c.nsizes; si++)
                    if (results[b][op][ri][si] > 0)
                        printf("{\"bench\":\"comm\",\"backend\":\"%s\",\"op\":\"%s\",\"ranks\":%d,\"bytes\":%lld,"
                               "\"busbw_gbps\":%.4f}\n",
                               backend_names[b], op_names[op], rank_counts[ri], (long long)c.sizes[si],
                               results[b][op][ri][si]);
    printf("{\"bench\":\"comm\",\"backend\":\"memcpy\",\"op\":\"memcpy\",\"ranks\":1,\"bytes\":%d,\"busbw_gbps\":%.4f}\n",
           4 << 20, mc);
    if (mc64 > 0)
        printf("{\"bench\":\"comm\",\"backend\":\"memcpy\",\"op\":\"memcpy\",\"ranks\":1,\"bytes\":%d,\"busbw_gbps\":%.4f}\n",
               64 << 20, mc64);
    if (si4 >= 0) {
        double thr8 = results[0][0][2][si4], mpi8 = results[1][0][2][si4], raw8 = results[2][0][2][si4];
        double thr2 = results[0][0][0][si4];
        if (have_mpi && mpi8 > 0)
            printf("ratio threads/mpi all_reduce 8 ranks 4M: %.2f (target >= 3; vs plain MPI_Allreduce: %.2f)\n",
                   thr8 / mpi8, raw8 > 0 ? thr8 / raw8 : 0.0);
        else
            printf("ratio threads/mpi all_reduce 8 ranks 4M: n/a (built without MPI)\n");
        printf("ratio threads all_reduce 2 ranks 4M / memcpy: %.2f (target >= 0.5)\n", mc > 0 ? thr2 / mc : 0.0);
        printf("{\"bench\":\"comm\",\"ratio\":\"threads_over_mpi_all_reduce_8r_4m\",\"value\":%.4f}\n",
               have_mpi && mpi8 > 0 ? thr8 / mpi8 : 0.0);
        printf("{\"bench\":\"comm\",\"ratio\":\"threads_all_reduce_2r_4m_over_memcpy\",\"value\":%.4f}\n",
               mc > 0 ? thr2 / mc : 0.0);
    }
    return 0;
}
