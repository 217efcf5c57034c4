/* bench/bench_ckpt.c - sharded checkpoint throughput (par_params_save /
   par_params_load) against this disk's own sequential speed, measured in the
   same run.

   1. disk: write a file as big as the checkpoint in 4 MiB write()s + fsync
      (MB/s), drop it from the page cache (posix_fadvise DONTNEED), read it
      back (MB/s).
   2. save: 4 ranks on threads, dp 2 x tp 2 with ZeRO-1: 8 matrices
      [rows, 4096] split over tp (MIB MiB of values in all, AdamW moments
      beside them: 3x MIB on disk), every file fsynced; MB/s of checkpoint
      bytes and the ratio to the disk's write speed. Peak memory: VmHWM reset
      (/proc/self/clear_refs) before the save, growth during it, beside the
      model's bytes (host memory: the shards are written from the parameter
      buffers in place, so the growth is the writers' headers, not a copy).
   3. load: the files dropped from the page cache, then loaded (a) into the
      same configuration and (b) resharded into dp 4 ZeRO-2 (no tp); MB/s and
      the ratio to the disk's read speed; VmHWM growth during the load.
   Median of REPS runs each. Prints a table and JSON lines {"bench":"ckpt",...}.
   BENCH_CKPT_WARM=1 also times the load from the page cache before each cold
   one (is the load bound by the disk or by the CPU: checksums and copies?).
   Usage: build/bench_ckpt [MIB (default 128)] [DIR (default /tmp, must be
   on a disk, not tmpfs, for the ratio to mean anything)] */
#define _DEFAULT_SOURCE
#include "../parallel.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define REPS 3
#define COLS 4096
#define NMAT 8

static int64_t rows;
static const char *root;
static int64_t step_no;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

/* kB of a /proc/self/status line ("VmHWM:", "VmRSS:"). */
static long long status_kb(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long long v = -1;
    if (!f) return -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, strlen(key)) == 0) v = strtoll(line + strlen(key), NULL, 10);
    fclose(f);
    return v;
}

/* Reset VmHWM to the current RSS (Linux >= 4.0); 0 if not possible. */
static int reset_peak(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    int ok;
    if (!f) return 0;
    ok = fputs("5", f) >= 0;
    return fclose(f) == 0 && ok;
}

static void drop_cache(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return;
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
}

static void drop_dir(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *e;
    char p[1200];
    if (!d) return;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        drop_cache(p);
    }
    closedir(d);
}

/* 1. the disk itself: MB/s written (with fsync) and read (cold). */
static int disk_speed(int64_t bytes, double *write_mbs, double *read_mbs) {
    const size_t chunk = 4u << 20;
    char path[1024];
    char *buf = (char *)malloc(chunk);
    int64_t done;
    double t0;
    int fd;
    if (!buf) return -1;
    memset(buf, 0x5a, chunk);
    snprintf(path, sizeof path, "%s/bench_ckpt_disk.bin", root);
    if ((fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644)) < 0) return free(buf), -1;
    t0 = now_s();
    for (done = 0; done < bytes; done += (int64_t)chunk)
        if (write(fd, buf, chunk) != (ssize_t)chunk) return close(fd), free(buf), -1;
    if (fsync(fd) != 0) return close(fd), free(buf), -1;
    *write_mbs = (double)done / 1e6 / (now_s() - t0);
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
    if ((fd = open(path, O_RDONLY)) < 0) return free(buf), -1;
    t0 = now_s();
    for (done = 0;;) {
        ssize_t got = read(fd, buf, chunk);
        if (got <= 0) break;
        done += got;
    }
    *read_mbs = (double)done / 1e6 / (now_s() - t0);
    close(fd);
    unlink(path);
    free(buf);
    return 0;
}

typedef struct job {
    const char *mesh;
    int zero, split, load; /* split: matrices over tp; load: 1 = load instead of save */
    double seconds;
    long long hwm_growth_kb;
} job;

static par_status body(par_ctx *ctx, void *arg) {
    job *j = (job *)arg;
    const par_mesh *m = par_ctx_mesh(ctx);
    par_param_desc pd[NMAT];
    par_params_desc d;
    par_layout batch;
    par_params *ps = NULL;
    int64_t shape[2], bshape[2] = {16, 8};
    long long base = 0;
    double t0 = 0;
    par_status st;
    int i, rank = par_ctx_rank(ctx);
    char names[NMAT][32];
    memset(pd, 0, sizeof pd), memset(&d, 0, sizeof d);
    shape[0] = rows, shape[1] = COLS;
    for (i = 0; i < NMAT; i++) {
        snprintf(names[i], sizeof names[i], "layers.%d.weight", i);
        pd[i].name = names[i];
        if ((st = par_layout_parse(&pd[i].layout, m, 2, shape, j->split ? "[tp,None]" : "[None,None]")) != PAR_OK) return st;
    }
    if ((st = par_layout_parse(&batch, m, 2, bshape, "[dp,None]")) != PAR_OK) return st;
    d.params = pd, d.num_params = NMAT, d.batch = &batch, d.zero_level = j->zero;
    if ((st = par_params_create(ctx, &d, &ps)) != PAR_OK) return st;
    for (i = 0; i < NMAT && !j->load; i++) { /* something that is not zeros */
        par_param_info in;
        float *v = par_params_value(ps, i);
        int64_t k;
        par_params_get_info(ps, i, &in);
        for (k = 0; k < in.numel; k++) v[k] = (float)(k % 1000) * 1e-3f;
    }
    par_params_set_step(ps, 7);
    /* every rank's buffers exist before the peak is reset */
    if ((st = par_ctx_all_reduce_host(ctx, 3u, PAR_REDUCE_SUM, PAR_F64, &t0, 1)) != PAR_OK) return st;
    if (rank == 0) reset_peak(), base = status_kb("VmHWM:"), t0 = now_s();
    if ((st = par_ctx_all_reduce_host(ctx, 3u, PAR_REDUCE_SUM, PAR_F64, &j->seconds, 1)) != PAR_OK) return st;
    if (j->load) {
        st = par_params_load(ps, root, NULL);
    } else {
        par_ckpt_desc cd = {0};
        cd.dir = root, cd.step = step_no, cd.keep = 1;
        st = par_params_save(ps, &cd);
    }
    if (st == PAR_OK) st = par_ctx_all_reduce_host(ctx, 3u, PAR_REDUCE_SUM, PAR_F64, &j->seconds, 1);
    if (rank == 0) j->seconds = now_s() - t0, j->hwm_growth_kb = status_kb("VmHWM:") - base;
    par_params_destroy(ps);
    return st;
}

static int run(job *j) {
    par_ctx_desc d = {0};
    d.mesh = j->mesh, d.kernel_threads = 1;
    if (par_run_threads_desc(&d, 4, body, j) != PAR_OK) {
        fprintf(stderr, "bench_ckpt: %s\n", par_last_error());
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    const int mib = argc > 1 ? atoi(argv[1]) : 128;
    char dir[1024], stepdir[1100];
    double w[REPS], r_same[REPS], r_re[REPS], disk_w[REPS], disk_r[REPS], wmbs, rmbs;
    long long hwm_save = 0, hwm_load = 0, hwm_re = 0;
    int64_t values, ckpt_bytes;
    int k;
    if (mib < 1) return fprintf(stderr, "usage: build/bench_ckpt [MIB >= 1] [DIR]\n"), 2;
    snprintf(dir, sizeof dir, "%s/bench_ckpt.%ld", argc > 2 ? argv[2] : "/tmp", (long)getpid());
    root = dir;
    if (mkdir(dir, 0755) != 0) return fprintf(stderr, "bench_ckpt: cannot create %s\n", dir), 1;
    rows = ((int64_t)mib << 20) / 4 / COLS / NMAT;
    rows -= rows % 4;
    if (rows < 4) rows = 4;
    values = rows * COLS * NMAT * 4;
    ckpt_bytes = 3 * values;
    for (k = 0; k < REPS; k++) {
        job s = {"dp=2,tp=2", 1, 1, 0, 0, 0}, a = {"dp=2,tp=2", 1, 1, 1, 0, 0}, b = {"dp=4,tp=1", 2, 0, 1, 0, 0};
        if (disk_speed(ckpt_bytes, &disk_w[k], &disk_r[k]) != 0) return fprintf(stderr, "bench_ckpt: disk test failed in %s\n", dir), 1;
        step_no = k + 1;
        if (run(&s) != 0) return 1;
        snprintf(stepdir, sizeof stepdir, "%s/step-%08lld", dir, (long long)step_no);
        if (getenv("BENCH_CKPT_WARM")) { /* investigation: the same load from the page cache */
            job wa = {"dp=2,tp=2", 1, 1, 1, 0, 0};
            if (run(&wa) != 0) return 1;
            printf("  (warm load %.1f MB/s)\n", (double)ckpt_bytes / 1e6 / wa.seconds);
        }
        drop_dir(stepdir);
        if (run(&a) != 0) return 1;
        drop_dir(stepdir);
        if (run(&b) != 0) return 1;
        w[k] = (double)ckpt_bytes / 1e6 / s.seconds, r_same[k] = (double)ckpt_bytes / 1e6 / a.seconds;
        r_re[k] = (double)ckpt_bytes / 1e6 / b.seconds;
        if (s.hwm_growth_kb > hwm_save) hwm_save = s.hwm_growth_kb;
        if (a.hwm_growth_kb > hwm_load) hwm_load = a.hwm_growth_kb;
        if (b.hwm_growth_kb > hwm_re) hwm_re = b.hwm_growth_kb;
    }
    wmbs = median(disk_w, REPS), rmbs = median(disk_r, REPS);
    {
        const double ws = median(w, REPS), ra = median(r_same, REPS), rb = median(r_re, REPS);
        printf("sharded checkpoint, 4 ranks (threads), %d x [%lld, %d] f32: %.1f MiB of values, %.1f MiB on disk with the "
               "AdamW moments; median of %d\n", NMAT, (long long)rows, COLS, (double)values / 1048576.0,
               (double)ckpt_bytes / 1048576.0, REPS);
        printf("  disk (same directory)      write+fsync %8.1f MB/s   cold read %8.1f MB/s\n", wmbs, rmbs);
        printf("  save  dp2 x tp2 ZeRO-1     %8.1f MB/s   %.2f of the disk's write   peak memory +%.1f MiB (values %.1f MiB/process)\n",
               ws, ws / wmbs, (double)hwm_save / 1024.0, (double)values / 1048576.0);
        printf("  load  same configuration   %8.1f MB/s   %.2f of the disk's read    peak memory +%.1f MiB\n", ra, ra / rmbs,
               (double)hwm_load / 1024.0);
        printf("  load  resharded: dp4 ZeRO-2 %7.1f MB/s   %.2f of the disk's read    peak memory +%.1f MiB\n", rb, rb / rmbs,
               (double)hwm_re / 1024.0);
        printf("{\"bench\":\"ckpt\",\"values_bytes\":%lld,\"ckpt_bytes\":%lld,\"disk_write_mbs\":%.1f,\"disk_read_mbs\":%.1f,"
               "\"save_mbs\":%.1f,\"save_ratio\":%.3f,\"load_mbs\":%.1f,\"load_ratio\":%.3f,\"reshard_load_mbs\":%.1f,"
               "\"reshard_load_ratio\":%.3f,\"save_peak_growth_kib\":%lld,\"load_peak_growth_kib\":%lld,"
               "\"reshard_load_peak_growth_kib\":%lld}\n",
               (long long)values, (long long)ckpt_bytes, wmbs, rmbs, ws, ws / wmbs, ra, ra / rmbs, rb, rb / rmbs, hwm_save,
               hwm_load, hwm_re);
    }
    {
        char cmd[1200];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    }
    return 0;
}
