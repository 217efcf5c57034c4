/* tests/test_ckpt.c - sharded checkpoints of >>params (par_params_save,
   par_params_load, par_ckpt_inspect) on the threads backend.

   Every parameter element, and both AdamW moments, are set from a formula of
   (version, parameter, field, global index) that the test computes itself;
   after a save under one mesh / layout / ZeRO level and a load under another,
   every rank's slice (and, gathered, every moment) must equal the formula.
   Also: the on-disk format (index, total_size, shard count, Hugging Face names
   for whole tensors), keep-k pruning, a crash at each stage of a save (a forked
   child _exit()s from the on_stage hook: the previous checkpoint still loads),
   the device-memory path (bounce buffer), and every error rule. */
#define _POSIX_C_SOURCE 200809L
#include "test.h"
#include "test_files.h"

#include <dirent.h>
#include <stdlib.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NP 4
static const char *const pname[NP] = {"w", "b", "e", "layers.0 odd name/with \"quotes\""};
static const int pndim[NP] = {2, 1, 2, 2};
static const int64_t pshape[NP][2] = {{8, 6}, {6, 0}, {5, 4}, {4, 6}};

typedef struct config {
    const char *name, *mesh;
    int ranks, zero;
    const char *batch;       /* batch map, NULL: none */
    const char *map[NP];     /* each parameter's tensor map */
} config;

static const config cfgs[] = {
    {"one rank", "dp=1", 1, 0, NULL, {"[None,None]", "[None]", "[None,None]", "[None,None]"}},
    {"dp4 zero2", "dp=4", 4, 2, "[dp,None]", {"[None,None]", "[None]", "[None,None]", "[None,None]"}},
    {"dp2 zero1", "dp=2", 2, 1, "[dp,None]", {"[None,None]", "[None]", "[None,None]", "[None,None]"}},
    {"dp2 x tp2", "dp=2,tp=2", 4, 0, "[dp,None]", {"[tp,None]", "[None]", "[None,tp]", "[None,tp]"}},
    {"dp3 zero2", "dp=3", 3, 2, "[dp,None]", {"[None,None]", "[None]", "[None,None]", "[None,None]"}},
    {"tp2", "tp=2", 2, 0, NULL, {"[None,tp]", "[tp]", "[None,None]", "[tp,None]"}},
    {"dp2 x tp2 zero2", "dp=2,tp=2", 4, 2, "[dp,None]", {"[None,tp]", "[tp]", "[None,tp]", "[tp,None]"}},
    {"tp4", "tp=4", 4, 0, NULL, {"[tp,None]", "[None]", "[None,tp]", "[tp,None]"}},
};

/* The expected element: exact in f32 for these sizes. */
static float formula(int version, int param, int field, int64_t e) {
    return (float)(version * 1000 + param * 100 + field * 10) + 0.25f * (float)e;
}

typedef struct job {
    const config *c;
    int mode;          /* 0 save, 1 load and check, 2 errors */
    int version;       /* what save writes / load expects */
    const char *path;  /* checkpoint root or step dir */
    const char *path_odd; /* load: what odd ranks read (NULL: path) */
    int64_t step;
    int keep, device;  /* device: a compute table that says device memory (bounce path) */
    int64_t buffer_bytes;
    void (*on_stage)(void *, const char *);
    int extra_param, drop_param, bad_shape; /* load into a set that differs */
    /* results */
    int mismatches[64], fails[64];
    par_status status[64];
    char error[64][512];
    int64_t step_loaded[64];
    int has_moments[64];
    char meta[64][64];
} job;

static par_status make_set(par_ctx *ctx, const job *j, par_params **ps) {
    const par_mesh *m = par_ctx_mesh(ctx);
    par_param_desc pd[NP + 1];
    par_params_desc d;
    par_layout batch;
    int64_t bshape[2] = {12, 4}, odd[2] = {7, 6};
    int i, n = 0;
    memset(pd, 0, sizeof pd), memset(&d, 0, sizeof d);
    for (i = 0; i < NP; i++) {
        if (j->drop_param && i == NP - 1) continue;
        pd[n].name = pname[i];
        RETURN_IF_ERR(par_layout_parse(&pd[n].layout, m, pndim[i], j->bad_shape && i == 0 ? odd : pshape[i], j->c->map[i]));
        n++;
    }
    if (j->extra_param) {
        pd[n].name = "z";
        RETURN_IF_ERR(par_layout_parse(&pd[n].layout, m, 1, bshape, "[None]"));
        n++;
    }
    if (j->c->batch) {
        RETURN_IF_ERR(par_layout_parse(&batch, m, 2, bshape, j->c->batch));
        d.batch = &batch;
    }
    d.params = pd, d.num_params = n, d.zero_level = j->c->zero, d.bucket_bytes = 100; /* several buckets */
    return par_params_create(ctx, &d, ps);
}

static int64_t numel_of(int i) { return pshape[i][0] * (pndim[i] == 2 ? pshape[i][1] : 1); }

/* The slice of parameter i of `field` on this rank, from the formula. */
static void fill_local(par_params *ps, int i, int version, int field, float *buf) {
    par_param_info in;
    int64_t k, r, c;
    par_params_get_info(ps, i, &in);
    for (k = 0; k < in.numel; k++) {
        int64_t g;
        if (in.layout.ndim == 1) g = in.start[0] + k;
        else r = k / in.local_shape[1], c = k % in.local_shape[1], g = (in.start[0] + r) * in.layout.shape[1] + in.start[1] + c;
        buf[k] = formula(version, i, field, g);
    }
}

static par_status rank_body(par_ctx *ctx, void *arg) {
    job *j = (job *)arg;
    const int rank = par_ctx_rank(ctx);
    par_params *ps = NULL;
    par_status st;
    float *buf = (float *)malloc(64 * sizeof(float) * 8), *whole = (float *)malloc(64 * sizeof(float) * 8);
    int i, f;
    if ((st = make_set(ctx, j, &ps)) != PAR_OK) return free(buf), free(whole), st;
    if (j->mode == 0) {
        static const char *const keys[2] = {"data.position", "config"}, *const vals[2] = {"1234", "dim: 64\nlayers: 2"};
        par_ckpt_desc d = {0};
        for (i = 0; i < NP; i++)
            for (f = 0; f < 3; f++) fill_local(ps, i, j->version, f, buf), par_params_set_local(ps, (par_param_field)f, i, buf);
        par_params_set_step(ps, j->step);
        d.dir = j->path, d.step = j->step, d.keep = j->keep, d.meta_keys = keys, d.meta_values = vals, d.num_meta = 2;
        d.on_stage = j->on_stage, d.buffer_bytes = j->buffer_bytes;
        st = par_params_save(ps, &d);
    } else {
        par_ckpt_info info = {0};
        st = par_params_load(ps, (rank & 1) && j->path_odd ? j->path_odd : j->path, &info);
        j->status[rank] = st;
        snprintf(j->error[rank], sizeof j->error[rank], "%s", par_last_error());
        j->step_loaded[rank] = par_params_step_count(ps), j->has_moments[rank] = info.has_moments;
        snprintf(j->meta[rank], sizeof j->meta[rank], "%s", par_ckpt_metadata(&info, "data.position") ? par_ckpt_metadata(&info, "data.position") : "(none)");
        par_ckpt_info_free(&info);
        if (st == PAR_OK && j->mode == 1) {
            for (i = 0; i < NP; i++) { /* every rank's own slice, exactly */
                par_param_info in;
                const float *v = par_params_value(ps, i);
                int64_t k;
                par_params_get_info(ps, i, &in);
                fill_local(ps, i, j->version, 0, buf);
                for (k = 0; k < in.numel; k++) j->mismatches[rank] += v[k] != buf[k];
            }
            for (i = 0; i < NP && st == PAR_OK; i++) /* the moments, gathered (ZeRO shards included) */
                for (f = 1; f < 3 && st == PAR_OK; f++) {
                    int64_t k;
                    st = par_params_gather(ps, (par_param_field)f, i, whole);
                    for (k = 0; k < numel_of(i) && st == PAR_OK; k++) j->mismatches[rank] += whole[k] != formula(j->version, i, f, k);
                }
        }
        if (j->mode == 2) st = PAR_OK; /* the caller checks j->status */
    }
    par_params_destroy(ps);
    free(buf), free(whole);
    return st;
}

static par_status run_job(job *j) {
    par_ctx_desc d = {0};
    par_compute_table ct;
    par_cpu_desc cd = {0};
    par_status st;
    d.mesh = j->c->mesh, d.timeout_ms = 20000, d.kernel_threads = 1;
    if (j->device) { /* the CPU table, flagged as device memory: the save streams through its bounce buffer.
                        One rank only: the ranks of par_run_threads_desc would share the table's state */
        cd.threads = 1;
        if (j->c->ranks != 1 || par_compute_cpu(&cd, &ct) != PAR_OK) return PAR_EINVAL;
        ct.device_memory = 1, d.compute = &ct;
    }
    st = par_run_threads_desc(&d, j->c->ranks, rank_body, j);
    if (j->device) ct.destroy(ct.user);
    return st;
}

static void save(const config *c, const char *root, int64_t step, int version, int keep) {
    job j;
    memset(&j, 0, sizeof j);
    j.c = c, j.mode = 0, j.path = root, j.step = step, j.version = version, j.keep = keep;
    CHECK_MSG(run_job(&j) == PAR_OK, "save under %s", c->name);
}

static void load_check(const config *c, const char *path, int version, int64_t step, const char *what) {
    job j;
    int r, bad = 0;
    memset(&j, 0, sizeof j);
    j.c = c, j.mode = 1, j.path = path, j.version = version;
    CHECK_MSG(run_job(&j) == PAR_OK, "%s: load under %s", what, c->name);
    for (r = 0; r < c->ranks; r++) {
        bad += j.mismatches[r];
        CHECK_MSG(j.status[r] == PAR_OK, "%s: rank %d: %s", what, r, j.error[r]);
        CHECK_MSG(j.step_loaded[r] == step, "%s: rank %d step %lld, want %lld", what, r, (long long)j.step_loaded[r], (long long)step);
        CHECK_MSG(j.has_moments[r] == 1, "%s: rank %d sees no moments", what, r);
        CHECK_MSG(strcmp(j.meta[r], "1234") == 0, "%s: rank %d host metadata %s", what, r, j.meta[r]);
    }
    CHECK_MSG(bad == 0, "%s: %d elements differ from the formula", what, bad);
}

static void test_matrix(void) {
    static const int pairs[][2] = {{0, 1}, {1, 0}, {1, 2}, {3, 4}, {4, 3}, {5, 6}, {6, 5}, {2, 7}, {7, 0}, {3, 3}};
    size_t k;
    char root[600], what[200];
    for (k = 0; k < sizeof pairs / sizeof pairs[0]; k++) {
        const config *a = &cfgs[pairs[k][0]], *b = &cfgs[pairs[k][1]];
        snprintf(root, sizeof root, "%s", test_path("m"));
        snprintf(what, sizeof what, "%s -> %s", a->name, b->name);
        save(a, root, 5, (int)k + 1, 0);
        load_check(b, root, (int)k + 1, 5, what);
        printf("  %-28s ok\n", what);
    }
}

/* The index and shard files, checked against numbers computed here. */
static void test_format(void) {
    char root[600], idx[700], *text;
    size_t n;
    int64_t total = 0;
    int i, shards = 0;
    DIR *d;
    struct dirent *e;
    par_st_file *f = NULL;
    snprintf(root, sizeof root, "%s", test_path("fmt"));
    save(&cfgs[1], root, 20, 1, 0); /* dp 4, ZeRO-2: whole values, moments in pieces */
    for (i = 0; i < NP; i++) total += 3 * numel_of(i) * 4;
    snprintf(idx, sizeof idx, "%s/step-00000020/model.safetensors.index.json", root);
    text = (char *)test_read_file(idx, &n);
    CHECK_MSG(text != NULL, "no index %s", idx);
    if (text) {
        char want[64];
        snprintf(want, sizeof want, "\"total_size\": %lld", (long long)total);
        CHECK_MSG(strstr(text, want) != NULL, "index lacks %s: %s", want, text);
        CHECK(strstr(text, "\"weight_map\"") != NULL);
        CHECK(strstr(text, "\"w\": \"shard-00000-of-00004.safetensors\"") != NULL);
        CHECK(strstr(text, "\"host.config\": \"dim: 64\\nlayers: 2\"") != NULL);
        CHECK(strstr(text, "\"layers.0 odd name/with \\\"quotes\\\"\": ") != NULL);
        free(text);
    }
    snprintf(idx, sizeof idx, "%s/step-00000020", root);
    if ((d = opendir(idx))) {
        while ((e = readdir(d))) shards += strncmp(e->d_name, "shard-", 6) == 0;
        closedir(d);
    }
    CHECK_INT(shards, 4);
    snprintf(idx, sizeof idx, "%s/step-00000020/shard-00000-of-00004.safetensors", root);
    CHECK_OK(par_st_open(idx, &f));
    if (f) {
        const par_st_tensor *t = par_st_find(f, "w");
        CHECK_MSG(t && t->ndim == 2 && t->shape[0] == 8 && t->shape[1] == 6, "w is stored whole under its own name");
        CHECK_MSG(par_st_find(f, "exp_avg.w") == NULL && par_st_find(f, "exp_avg.w@0") != NULL, "ZeRO moments in pieces");
        par_st_close(f);
    }
    snprintf(idx, sizeof idx, "%s/latest", root);
    text = (char *)test_read_file(idx, &n);
    CHECK_MSG(text && strcmp(text, "step-00000020\n") == 0, "latest: %s", text ? text : "(none)");
    free(text);
}

static int dir_exists(const char *path) {
    DIR *d = opendir(path);
    if (d) closedir(d);
    return d != NULL;
}

static void test_keep(void) {
    char root[600], p[700];
    int s;
    snprintf(root, sizeof root, "%s", test_path("keep"));
    for (s = 1; s <= 4; s++) save(&cfgs[0], root, s, s, 2);
    for (s = 1; s <= 4; s++) {
        snprintf(p, sizeof p, "%s/step-%08d", root, s);
        CHECK_MSG(dir_exists(p) == (s >= 3), "keep 2: step %d %s", s, dir_exists(p) ? "kept" : "removed");
    }
    save(&cfgs[0], root, 5, 5, -1); /* keep all */
    snprintf(p, sizeof p, "%s/step-00000003", root);
    CHECK_MSG(dir_exists(p), "keep -1 removed step 3");
    save(&cfgs[0], root, 5, 6, 1); /* the same step again, keep 1 */
    snprintf(p, sizeof p, "%s/step-00000004", root);
    CHECK_MSG(!dir_exists(p), "keep 1 left step 4");
    load_check(&cfgs[1], root, 6, 5, "re-saved step");
}

static const char *kill_at;
static void die_at(void *user, const char *stage) {
    (void)user;
    if (strcmp(stage, kill_at) == 0) _exit(9);
}

/* A child process saves version 2 over a root holding version 1 and dies at a stage. */
static void test_crash(void) {
    static const char *const stages[5] = {"shards written", "index written", "renamed", "latest", "pruned"};
    char root[600];
    int s;
    for (s = 0; s < 5; s++) {
        pid_t pid;
        int status = 0;
        par_ckpt_info info = {0};
        snprintf(root, sizeof root, "%s/crash%d", test_dir, s);
        save(&cfgs[3], root, 10, 1, 1);
        fflush(stdout);
        pid = fork();
        if (pid == 0) {
            job j;
            memset(&j, 0, sizeof j);
            kill_at = stages[s];
            j.c = &cfgs[3], j.mode = 0, j.path = root, j.step = 20, j.version = 2, j.keep = 1, j.on_stage = die_at;
            run_job(&j);
            _exit(0);
        }
        CHECK_MSG(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 9,
                  "the child did not die at \"%s\"", stages[s]);
        /* before `latest` moves, the old checkpoint; from then on, the new one */
        CHECK_OK(par_ckpt_inspect(root, 1, &info));
        CHECK_MSG(info.step == (s >= 3 ? 20 : 10), "killed at \"%s\": latest is step %lld", stages[s], (long long)info.step);
        par_ckpt_info_free(&info);
        load_check(&cfgs[4], root, s >= 3 ? 2 : 1, s >= 3 ? 20 : 10, stages[s]);
        { /* the old one is kept until the new one is complete */
            char p[700];
            snprintf(p, sizeof p, "%s/step-00000010", root);
            CHECK_MSG(dir_exists(p) == (s < 4), "killed at \"%s\": step 10 %s", stages[s], dir_exists(p) ? "exists" : "is gone");
        }
        /* a later save cleans up after the crashed one */
        save(&cfgs[3], root, 30, 3, 1);
        load_check(&cfgs[0], root, 3, 30, "save after a crash");
        {
            char p[700];
            snprintf(p, sizeof p, "%s/step-00000020.tmp", root);
            CHECK_MSG(!dir_exists(p), "killed at \"%s\": the next save left %s", stages[s], p);
        }
    }
}

static void test_device_path(void) {
    job j;
    char root[600];
    memset(&j, 0, sizeof j);
    snprintf(root, sizeof root, "%s", test_path("dev"));
    j.c = &cfgs[0], j.mode = 0, j.path = root, j.step = 3, j.version = 4, j.device = 1, j.buffer_bytes = 12;
    CHECK_MSG(run_job(&j) == PAR_OK, "save through a 3-float bounce buffer: %s", par_last_error());
    load_check(&cfgs[2], root, 4, 3, "bounce-buffer save");
}

/* A load that must fail on every rank with `needle` in the message. */
static void load_fails(const config *c, const char *path, par_status want, const char *needle, int extra, int drop,
                       int bad_shape) {
    job j;
    int r;
    memset(&j, 0, sizeof j);
    j.c = c, j.mode = 2, j.path = path, j.extra_param = extra, j.drop_param = drop, j.bad_shape = bad_shape;
    CHECK_OK(run_job(&j));
    for (r = 0; r < c->ranks; r++) CHECK_MSG(j.status[r] != PAR_OK, "rank %d loaded a bad checkpoint (%s)", r, needle);
    CHECK_MSG(j.status[0] == want && strstr(j.error[0], needle), "rank 0: %s; want %s with \"%s\"",
              j.error[0], par_status_string(want), needle);
}

static par_status err_body(par_ctx *ctx, void *arg) {
    par_params *ps = NULL;
    job j;
    par_ckpt_desc d = {0};
    static const char *const k2[2] = {"a", "a"}, *const v2[2] = {"1", "2"};
    (void)arg;
    memset(&j, 0, sizeof j);
    j.c = &cfgs[0];
    RETURN_IF_ERR(make_set(ctx, &j, &ps));
    CHECK_ERR(par_params_save(NULL, &d), PAR_EINVAL, "NULL argument");
    CHECK_ERR(par_params_save(ps, NULL), PAR_EINVAL, "NULL argument");
    CHECK_ERR(par_params_save(ps, &d), PAR_EINVAL, "desc.dir is empty");
    d.dir = test_path("errs"), d.step = -1;
    CHECK_ERR(par_params_save(ps, &d), PAR_EINVAL, "desc.step -1 is not in [0, 99999999]");
    d.step = 1, d.num_meta = 2;
    CHECK_ERR(par_params_save(ps, &d), PAR_EINVAL, "desc.num_meta 2 without meta_keys and meta_values");
    d.meta_keys = k2, d.meta_values = v2;
    CHECK_ERR(par_params_save(ps, &d), PAR_EINVAL, "host metadata key \"a\" given twice");
    d.num_meta = 0, d.buffer_bytes = -5;
    CHECK_ERR(par_params_save(ps, &d), PAR_EINVAL, "desc.buffer_bytes -5 < 0");
    d.buffer_bytes = 0, d.dir = "/proc/no/such/dir";
    CHECK_ERR(par_params_save(ps, &d), PAR_EIO, "cannot create the checkpoint directory /proc/no/such/dir");
    CHECK_ERR(par_params_load(NULL, "x", NULL), PAR_EINVAL, "NULL parameter set");
    CHECK_ERR(par_params_load(ps, "", NULL), PAR_EINVAL, "empty checkpoint path");
    CHECK_ERR(par_params_load(ps, test_dir, NULL), PAR_EIO, "not a checkpoint (no model.safetensors.index.json and no latest)");
    par_params_destroy(ps);
    return PAR_OK;
}

static void flip_byte(const char *path, long at_from_end) {
    FILE *f = fopen(path, "r+b");
    int c;
    if (!f) return;
    fseek(f, -at_from_end, SEEK_END);
    c = fgetc(f);
    fseek(f, -at_from_end, SEEK_END);
    fputc(c ^ 0x40, f);
    fclose(f);
}

static void test_errors(void) {
    char root[600], p[800], text[64];
    par_ckpt_desc none = {0};
    (void)none;
    CHECK_OK(par_run_threads(1, err_body, NULL));
    snprintf(root, sizeof root, "%s", test_path("bad"));
    save(&cfgs[3], root, 7, 1, 0);
    load_fails(&cfgs[0], root, PAR_EINVAL, "parameter \"z\" has no value in the checkpoint", 1, 0, 0);
    load_fails(&cfgs[0], root, PAR_EINVAL, "which is not a parameter of the set", 0, 1, 0);
    load_fails(&cfgs[0], root, PAR_ESHAPE, "another shape than parameter \"w\"", 0, 0, 1);
    /* one flipped byte in the data: the checksum error names the file and the tensor */
    snprintf(p, sizeof p, "%s/step-00000007/shard-00001-of-00004.safetensors", root); /* dp index 1: no tensors in shards 2, 3 */
    flip_byte(p, 3);
    load_fails(&cfgs[1], root, PAR_EIO, "shard-00001-of-00004.safetensors: checksum mismatch in tensor \"", 0, 0, 0);
    {
        par_ckpt_info info = {0};
        CHECK_ERR(par_ckpt_inspect(root, 1, &info), PAR_EIO, "shard-00001-of-00004.safetensors: checksum mismatch in tensor");
        CHECK_OK(par_ckpt_inspect(root, 0, &info)); /* headers only: fine */
        CHECK_INT(info.num_shards, 4);
        CHECK_STR(par_ckpt_metadata(&info, "config") ? par_ckpt_metadata(&info, "config") : "", "dim: 64\nlayers: 2");
        CHECK(par_ckpt_metadata(&info, "nope") == NULL);
        par_ckpt_info_free(&info);
    }
    /* a missing shard */
    remove(p);
    load_fails(&cfgs[0], root, PAR_EIO, "shard-00001-of-00004.safetensors", 0, 0, 0);
    /* latest naming a directory that is not there */
    snprintf(p, sizeof p, "%s/latest", root);
    snprintf(text, sizeof text, "step-00000099\n");
    test_write_file(p, text, strlen(text));
    load_fails(&cfgs[0], root, PAR_EIO, "which has no model.safetensors.index.json (incomplete or removed)", 0, 0, 0);
    test_write_file(p, "../x\n", 5);
    load_fails(&cfgs[0], root, PAR_EPARSE, "is not a step directory name", 0, 0, 0);
    /* a malformed index */
    snprintf(root, sizeof root, "%s", test_path("bad2"));
    save(&cfgs[0], root, 1, 1, 0);
    snprintf(p, sizeof p, "%s/step-00000001/model.safetensors.index.json", root);
    test_write_file(p, "{}", 2);
    load_fails(&cfgs[0], root, PAR_EPARSE, "not a parallel.h sharded index", 0, 0, 0);
}

/* Replace the first `from` after the first `after` (NULL: from the start) in
   file path by `to`, which has the same length (a safetensors header keeps its
   size). 1 if found. */
static int patch_file(const char *path, const char *after, const char *from, const char *to) {
    size_t n = 0, k = 0, len = strlen(from);
    unsigned char *bytes = test_read_file(path, &n);
    int found = 0;
    if (!bytes || strlen(to) != len) return free(bytes), 0;
    if (after) /* a byte search: the header length before the JSON holds zero bytes */
        for (k = 0; k + strlen(after) <= n && memcmp(bytes + k, after, strlen(after)) != 0; k++) continue;
    for (; k + len <= n; k++)
        if (memcmp(bytes + k, from, len) == 0) {
            memcpy(bytes + k, to, len), found = 1;
            break;
        }
    if (found) found = test_write_file(path, bytes, n);
    free(bytes);
    return found;
}

/* The checks of opening a checkpoint (the index, each shard against it, each
   piece description against its tensor), through par_ckpt_inspect and
   par_params_load: a fresh one-rank save, one edit each, the error naming
   the file and the rule. */
static void test_open_rules(void) {
    static const struct {
        const char *file, *after, *from, *to; /* the edit */
        par_status want;
        const char *needle;
    } cases[] = {
        {"model.safetensors.index.json", NULL, "\"par.num_shards\": \"1\"", "\"par.num_shards\": \"x\"", PAR_EPARSE,
         "model.safetensors.index.json: par.num_shards \"x\" is not a positive count"},
        {"model.safetensors.index.json", NULL, "\"par.step\": \"3\"", "\"par.step\": \"-\"", PAR_EPARSE,
         "model.safetensors.index.json: par.step \"-\" is not a step in [0, 99999999]"},
        {"model.safetensors.index.json", NULL, "\"par.step\": \"3\"", "\"par.step\": \"4\"", PAR_EPARSE,
         "shard-00000-of-00001.safetensors: par.num_shards or par.step differ from the index's (1, 4)"},
        {"shard-00000-of-00001.safetensors", NULL, "par.piece.w\"", "par.pieXe.w\"", PAR_EPARSE,
         "shard-00000-of-00001.safetensors: tensor \"w\": no piece description (par.piece.<name>)"},
        {"shard-00000-of-00001.safetensors", "par.piece.w\"", "value ", "valuX ", PAR_EPARSE,
         "shard-00000-of-00001.safetensors: tensor \"w\": malformed piece description"},
        {"shard-00000-of-00001.safetensors", "par.piece.w\"", " 0 48 w\"", " 0 47 w\"", PAR_EPARSE,
         "shard-00000-of-00001.safetensors: tensor \"w\" holds 48 f32 elements, its description says 47 F32"},
    };
    char root[600], path[800];
    size_t i;
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        par_ckpt_info info;
        memset(&info, 0, sizeof info);
        snprintf(root, sizeof root, "%s/open_rule_%d", test_dir, (int)i);
        save(&cfgs[0], root, 3, 1, 0);
        snprintf(path, sizeof path, "%s/step-00000003/%s", root, cases[i].file);
        CHECK_MSG(patch_file(path, cases[i].after, cases[i].from, cases[i].to), "case %d: %s not in %s", (int)i,
                  cases[i].from, path);
        CHECK_ERR(par_ckpt_inspect(root, 0, &info), cases[i].want, cases[i].needle);
        CHECK(info.meta_ == NULL); /* nothing left to free after a failure */
        load_fails(&cfgs[0], root, cases[i].want, cases[i].needle, 0, 0, 0);
    }
}

/* Ranks that read different step directories (a root's `latest` replaced
   between their reads) all fail, naming it, rather than mix two checkpoints. */
static void test_mixed_dirs(void) {
    char root[600], a[700], b[700];
    job j;
    int r;
    snprintf(root, sizeof root, "%s/mixed", test_dir);
    save(&cfgs[1], root, 1, 1, 0);
    save(&cfgs[1], root, 2, 2, 0);
    snprintf(a, sizeof a, "%s/step-00000001", root);
    snprintf(b, sizeof b, "%s/step-00000002", root);
    memset(&j, 0, sizeof j);
    j.c = &cfgs[1], j.mode = 2, j.path = a, j.path_odd = b;
    CHECK(run_job(&j) == PAR_OK);
    for (r = 0; r < cfgs[1].ranks; r++) {
        CHECK_MSG(j.status[r] == PAR_EIO, "rank %d loaded (status %d)", r, (int)j.status[r]);
        CHECK_MSG(strstr(j.error[r], "the ranks read different step directories") != NULL, "rank %d: %s", r, j.error[r]);
    }
    load_check(&cfgs[1], b, 2, 2, "the newer one, alone"); /* and the same directory on every rank loads */
}

/* Shards that do not belong: one copied in from another save of the same
   configuration and step (another run) is refused by its save identity; a
   tensor whose checksum key was renamed away is refused as unverifiable,
   unless PARALLEL_CKPT_UNCHECKED=1. */
static void test_foreign_shards(void) {
    char a[600], b[600], src[800], dst[800], cmd[2000];
    size_t n = 0, k;
    unsigned char *bytes;
    snprintf(a, sizeof a, "%s/run_a", test_dir);
    snprintf(b, sizeof b, "%s/run_b", test_dir);
    save(&cfgs[2], a, 5, 1, 0);
    save(&cfgs[2], b, 5, 2, 0);
    load_check(&cfgs[2], a, 1, 5, "run a as saved");
    snprintf(src, sizeof src, "%s/step-00000005/shard-00001-of-00002.safetensors", b);
    snprintf(dst, sizeof dst, "%s/step-00000005/shard-00001-of-00002.safetensors", a);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", src, dst);
    CHECK(system(cmd) == 0);
    load_fails(&cfgs[2], a, PAR_EIO, "shard-00001-of-00002.safetensors belongs to another save (par.save ", 0, 0, 0);
    /* b's shard 0 with a checksum key renamed (same length: the header stays valid) */
    snprintf(src, sizeof src, "%s/step-00000005/shard-00000-of-00002.safetensors", b);
    bytes = test_read_file(src, &n);
    for (k = 0; bytes && k + 10 < n; k++)
        if (memcmp(bytes + k, "par.crc32.", 10) == 0) {
            bytes[k + 8] = 'X'; /* "par.crcX2.": no longer a checksum */
            break;
        }
    CHECK(bytes && k + 10 < n);
    if (bytes) test_write_file(src, bytes, n);
    free(bytes);
    load_fails(&cfgs[2], b, PAR_EIO, "carries no checksum (par.crc32.", 0, 0, 0);
    setenv("PARALLEL_CKPT_UNCHECKED", "1", 1);
    load_check(&cfgs[2], b, 2, 5, "unchecked on request");
    unsetenv("PARALLEL_CKPT_UNCHECKED");
}

/* Does the file hold `needle`? */
static int test_file_contains(const char *path, const char *needle) {
    size_t n = 0;
    unsigned char *data = test_read_file(path, &n);
    int found = data && strstr((const char *)data, needle) != NULL;
    free(data);
    return found;
}

/* One run per checkpoint root: the lock file, its owner named, a live one
   (pid 1 on this host: init) refused, a dead one (a reaped child) taken
   over, a damaged one refused, and unlock removing only this process's. */
static void test_lock(void) {
    char dir[600], lock[700], text[400];
    struct utsname u;
    pid_t child;
    snprintf(dir, sizeof dir, "%s/locked", test_dir);
    snprintf(lock, sizeof lock, "%s/.lock", dir);
    CHECK_OK(par_ckpt_check_idle(dir)); /* no directory yet: idle */
    CHECK_OK(par_ckpt_lock(dir));
    CHECK_OK(par_ckpt_lock(dir)); /* ours already */
    CHECK_OK(par_ckpt_check_idle(dir));
    snprintf(text, sizeof text, "pid=%ld", (long)getpid());
    CHECK(test_file_contains(lock, text));
    par_ckpt_unlock(dir);
    CHECK(access(lock, F_OK) != 0);
    CHECK(uname(&u) == 0);
    snprintf(text, sizeof text, "pid=1 host=%s since=0\n", u.nodename);
    test_write_file(lock, text, strlen(text));
    CHECK_ERR(par_ckpt_lock(dir), PAR_EIO, "belongs to another run (pid=1 host=");
    CHECK_ERR(par_ckpt_check_idle(dir), PAR_EIO, "is being written by another run (pid=1 host=");
    par_ckpt_unlock(dir); /* not ours: left alone */
    CHECK(access(lock, F_OK) == 0);
    snprintf(text, sizeof text, "pid=1 host=another-host-%s since=0\n", u.nodename);
    test_write_file(lock, text, strlen(text));
    CHECK_ERR(par_ckpt_lock(dir), PAR_EIO, "belongs to another run (pid=1 host=another-host-");
    test_write_file(lock, "garbage", 7);
    CHECK_ERR(par_ckpt_lock(dir), PAR_EIO, "belongs to another run (garbage");
    child = fork(); /* a process that is gone: its lock is stale */
    if (child == 0) _exit(0);
    CHECK(child > 0 && waitpid(child, NULL, 0) == child);
    snprintf(text, sizeof text, "pid=%ld host=%s since=0\n", (long)child, u.nodename);
    test_write_file(lock, text, strlen(text));
    CHECK_OK(par_ckpt_check_idle(dir));
    CHECK_OK(par_ckpt_lock(dir));
    snprintf(text, sizeof text, "pid=%ld", (long)getpid());
    CHECK(test_file_contains(lock, text));
    par_ckpt_unlock(dir);
    child = fork(); /* a zombie (a killed run nobody reaped, as under a container's init): stale too */
    if (child == 0) _exit(0);
    if (child > 0) {
        struct timespec ts = {0, 100000000};
        nanosleep(&ts, NULL); /* it has exited, unreaped */
        snprintf(text, sizeof text, "pid=%ld host=%s since=0\n", (long)child, u.nodename);
        test_write_file(lock, text, strlen(text));
        CHECK_OK(par_ckpt_check_idle(dir));
        CHECK(waitpid(child, NULL, 0) == child);
    }
    (void)unlink(lock);
    CHECK_ERR(par_ckpt_lock(""), PAR_EINVAL, "empty directory");
}

int main(void) {
    char tmpl[] = "/tmp/par_ckpt_test_XXXXXX";
    char cmd[600];
    if (!mkdtemp(tmpl)) return fprintf(stderr, "mkdtemp failed\n"), 1;
    snprintf(test_dir, sizeof test_dir, "%s", tmpl);
    test_matrix();
    test_format();
    test_keep();
    test_crash();
    test_device_path();
    test_errors();
    test_open_rules();
    test_lock();
    test_mixed_dirs();
    test_foreign_shards();
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", test_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", test_dir);
    return TEST_END("ckpt");
}
