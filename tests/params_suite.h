/* tests/params_suite.h - the >>params and >>tensor-parallel building blocks
   checked against an independent model of what they must compute, run on
   any backend (tests/test_params.c: threads on several meshes;
   tests/mpi/test_params_mpi.c: mpirun -np 4).

   params: a set of parameters with various layouts on the mesh; every rank
   writes a deterministic gradient h(param, element, step, micro-batch, data
   rank, partial index) for its slice, marking parameters ready in a random
   order of its own. The oracle (plain double loops, no library call) sums
   those over the data-parallel ranks (mean or sum) and the partial groups
   and the micro-batches, takes the global norm with every element once,
   clips, and runs PyTorch's AdamW formula. After each step every rank's
   slice, the whole gathered tensors, the AdamW moments and the norm must
   match it, for ZeRO 0/1/2, any bucket size, sizes not divisible by the
   data-parallel degree, and micro-batches.

   tensor-parallel: a column -> row parallel MLP, the embedding (replicated
   and vocabulary-parallel) and the vocabulary-parallel cross-entropy, with
   and without sequence parallelism, against one-device loops.

   Each rank counts its own checks (test.h's counters are not thread-safe). */
#ifndef PARAMS_SUITE_H
#define PARAMS_SUITE_H
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h" /* rank_counts, RANK_CHECK, RANK_OK */
#include "trace_json.h" /* pl_launch_order reads its trace back */

typedef rank_counts ps_counts; /* test.h's per-rank checks under this suite's names */
#define PS_CHECK RANK_CHECK
#define PS_OK RANK_OK
/* Return a failing status of `call` (the public API's PAR__CHECK: this suite is
   also compiled without the implementation). */
#define PS_TRY(call) do { par_status t_ = (call); if (t_ != PAR_OK) return t_; } while (0)
#define PS_ERR(c, expr, status, needle)                                                  \
    do {                                                                                \
        par_status s_ = (expr);                                                         \
        PS_CHECK(c, s_ == (status) && strstr(par_last_error(), (needle)) != NULL,       \
                 "%s: got %s, want %s with \"%s\"", #expr, par_status_string(s_), par_status_string(status), (needle)); \
    } while (0)

/* ---- the mesh, by hand (the oracle does not ask the library) -------------- */

static int ps_coord(const par_mesh *m, int rank, int dev_dim) {
    int axis = m->ndim - 1 - dev_dim, a, stride = 1;
    for (a = m->ndim - 1; a > axis; a--) stride *= m->dims[a];
    return rank / stride % m->dims[axis];
}

/* index of `rank` among the ranks differing only in the dims of mask (leftmost axis major), and the group size */
static int ps_index(const par_mesh *m, int rank, uint32_t mask, int *size) {
    int v, idx = 0, n = 1;
    for (v = m->ndim - 1; v >= 0; v--)
        if (mask >> v & 1u) idx = idx * m->dims[m->ndim - 1 - v] + ps_coord(m, rank, v), n *= m->dims[m->ndim - 1 - v];
    if (size) *size = n;
    return idx;
}

static double ps_hash(uint64_t a, uint64_t b, uint64_t c) {
    uint64_t z = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull) * 0xBF58476D1CE4E5B9ull ^ c * 0x94D049BB133111EBull;
    z ^= z >> 31, z *= 0xD6E8FEB86659FD93ull, z ^= z >> 29;
    return (double)(z >> 11) / 9007199254740992.0 * 2.0 - 1.0; /* [-1, 1) */
}

/* ---- params ------------------------------------------------------------------ */

#define PS_MAX_P 6

typedef struct ps_param {
    int ndim;
    int64_t shape[3];
    const char *map;        /* layout text on the mesh */
    uint32_t partial;       /* grad_partial (device dims) */
    int new_bucket;
} ps_param;

typedef struct ps_case {
    const char *name;
    const char *batch_map;  /* layout text of a [8, 4] batch (NULL: no batch) */
    int np;
    ps_param p[PS_MAX_P];
    int zero, micro, sum, clip, slots;
    int64_t bucket_bytes;
    int nobc; /* MindSpore's AdamWeightDecay: par_adamw.no_bias_correction */
} ps_case;

static int64_t ps_numel(const ps_param *p) {
    int64_t n = 1;
    int d;
    for (d = 0; d < p->ndim; d++) n *= p->shape[d];
    return n;
}

/* The oracle's state of one parameter: whole tensors in double. */
typedef struct ps_oracle {
    double *p, *m, *v;
} ps_oracle;

static double ps_grad_part(int i, int64_t e, int step, int mb, int dr, int pr) {
    return 0.5 * ps_hash((uint64_t)(i * 1000 + step * 37 + mb), (uint64_t)e, (uint64_t)(dr * 64 + pr));
}

/* One step of the oracle: reduced gradients, norm, clip, AdamW. */
static double ps_oracle_step(const ps_case *k, const par_mesh *mesh, uint32_t data_dims, ps_oracle *o, int step,
                             const par_adamw *opt) {
    double ss = 0.0, clip = 1.0, norm;
    double **g = (double **)calloc((size_t)k->np, sizeof(double *));
    int D = 1, i;
    int64_t e;
    ps_index(mesh, 0, data_dims, &D);
    for (i = 0; i < k->np; i++) {
        const int64_t n = ps_numel(&k->p[i]);
        int P = 1, dr, pr, mb;
        ps_index(mesh, 0, k->p[i].partial & ~data_dims, &P);
        g[i] = (double *)calloc((size_t)n, sizeof(double));
        for (e = 0; e < n; e++) {
            double s = 0.0;
            for (dr = 0; dr < D; dr++)
                for (pr = 0; pr < P; pr++)
                    for (mb = 0; mb < k->micro; mb++) s += ps_grad_part(i, e, step, mb, dr, pr);
            g[i][e] = k->sum ? s : s / D;
            ss += g[i][e] * g[i][e];
        }
    }
    norm = sqrt(ss);
    if (opt->max_grad_norm > 0 && opt->max_grad_norm / (norm + 1e-6) < 1.0) clip = opt->max_grad_norm / (norm + 1e-6);
    for (i = 0; i < k->np; i++) {
        const int64_t n = ps_numel(&k->p[i]);
        const double wd = k->p[i].ndim >= 2 ? opt->weight_decay : 0.0;
        const double bc1 = k->nobc ? 1.0 : 1.0 - pow(opt->beta1, step + 1),
                     bc2 = k->nobc ? 1.0 : 1.0 - pow(opt->beta2, step + 1);
        for (e = 0; e < n; e++) {
            const double gr = (double)(float)(g[i][e] * clip);
            o[i].m[e] = opt->beta1 * o[i].m[e] + (1 - opt->beta1) * gr;
            o[i].v[e] = opt->beta2 * o[i].v[e] + (1 - opt->beta2) * gr * gr;
            o[i].p[e] *= 1.0 - opt->lr * wd;
            o[i].p[e] -= opt->lr / bc1 * o[i].m[e] / (sqrt(o[i].v[e]) / sqrt(bc2) + opt->eps);
        }
        free(g[i]);
    }
    free(g);
    return norm;
}

/* Global flat index of local element j of a slice. */
static int64_t ps_global_index(const par_param_info *in, int64_t j) {
    int64_t e = 0, stride = 1, idx[PARALLEL_MAX_DIMS];
    int d;
    for (d = in->layout.ndim - 1; d >= 0; d--) idx[d] = j % in->local_shape[d], j /= in->local_shape[d];
    for (d = in->layout.ndim - 1; d >= 0; d--) e += (in->start[d] + idx[d]) * stride, stride *= in->layout.shape[d];
    return e;
}

static void ps_shuffle(int *a, int n, uint64_t seed) {
    int i;
    for (i = n - 1; i > 0; i--) {
        int j = (int)((ps_hash(seed, (uint64_t)i, 7) + 1.0) * 0.5 * (i + 1)), t;
        if (j > i) j = i;
        t = a[i], a[i] = a[j], a[j] = t;
    }
}

static void ps_run_case(par_ctx *ctx, const ps_case *k, ps_counts *c) {
    const par_mesh *mesh = par_ctx_mesh(ctx);
    const int rank = par_ctx_rank(ctx), steps = 2;
    const int64_t bshape[2] = {24, 4};
    par_param_desc pd[PS_MAX_P];
    par_params_desc d;
    par_params *ps = NULL;
    par_layout batch;
    ps_oracle o[PS_MAX_P];
    par_adamw opt = {1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.0f, 0};
    char names[PS_MAX_P][16];
    uint32_t data_dims = 0;
    int i, s, mb, order[PS_MAX_P];
    memset(&d, 0, sizeof d);
    memset(pd, 0, sizeof pd);
    opt.max_grad_norm = k->clip ? 0.05f : 0.0f;
    opt.no_bias_correction = k->nobc;
    if (k->batch_map) {
        if (par_layout_parse(&batch, mesh, 2, bshape, k->batch_map) != PAR_OK) {
            PS_CHECK(c, 0, "%s: batch layout %s", k->name, k->batch_map);
            return;
        }
        data_dims = par_layout_split_dims(&batch);
        d.batch = &batch;
    }
    for (i = 0; i < k->np; i++) {
        snprintf(names[i], sizeof names[i], "p%d", i);
        pd[i].name = names[i];
        pd[i].grad_partial = k->p[i].partial, pd[i].new_bucket = k->p[i].new_bucket;
        if (par_layout_parse(&pd[i].layout, mesh, k->p[i].ndim, k->p[i].shape, k->p[i].map) != PAR_OK) {
            PS_CHECK(c, 0, "%s: layout %s", k->name, k->p[i].map);
            return;
        }
        o[i].p = (double *)calloc((size_t)ps_numel(&k->p[i]), sizeof(double));
        o[i].m = (double *)calloc((size_t)ps_numel(&k->p[i]), sizeof(double));
        o[i].v = (double *)calloc((size_t)ps_numel(&k->p[i]), sizeof(double));
    }
    d.params = pd, d.num_params = k->np, d.zero_level = k->zero, d.sum_gradients = k->sum;
    d.bucket_bytes = k->bucket_bytes, d.grad_slots = k->slots;
    PS_OK(c, par_params_create(ctx, &d, &ps));
    if (!ps) goto done;
    PS_CHECK(c, par_params_count(ps) == k->np, "%s: count %d", k->name, par_params_count(ps));
    /* initial values: every rank sets its own slice from the same function */
    for (i = 0; i < k->np; i++) {
        par_param_info in;
        float *buf;
        int64_t j, e;
        for (e = 0; e < ps_numel(&k->p[i]); e++) o[i].p[e] = (double)(float)(0.3 * ps_hash(99, (uint64_t)i, (uint64_t)e));
        if (par_params_get_info(ps, i, &in) != PAR_OK) { PS_CHECK(c, 0, "info"); continue; }
        buf = (float *)malloc((size_t)(in.numel + 1) * sizeof(float));
        for (j = 0; j < in.numel; j++) buf[j] = (float)o[i].p[ps_global_index(&in, j)];
        PS_OK(c, par_params_set_local(ps, PAR_PARAM_VALUE, i, buf));
        free(buf);
    }
    for (s = 0; s < steps; s++) {
        par_step_stats st;
        double norm;
        memset(&st, 0, sizeof st);
        for (mb = 0; mb < k->micro; mb++) {
            PS_OK(c, par_params_grads_begin(ps, mb, k->micro));
            for (i = 0; i < k->np; i++) order[i] = i;
            ps_shuffle(order, k->np, (uint64_t)(rank * 131 + s * 7 + mb)); /* each rank its own order */
            for (i = 0; i < k->np; i++) {
                const int q = order[i];
                par_param_info in;
                float *g = NULL;
                int dr, pr;
                int64_t j;
                if (par_params_get_info(ps, q, &in) != PAR_OK || par_params_grad(ps, q, &g) != PAR_OK || !g) {
                    PS_CHECK(c, 0, "%s: grad of p%d", k->name, q);
                    continue;
                }
                dr = ps_index(mesh, rank, data_dims, NULL);
                pr = ps_index(mesh, rank, k->p[q].partial & ~data_dims, NULL);
                for (j = 0; j < in.numel; j++) g[j] += (float)ps_grad_part(q, ps_global_index(&in, j), s, mb, dr, pr);
                PS_OK(c, par_params_grad_ready(ps, q));
            }
            PS_OK(c, par_params_grads_wait(ps));
        }
        PS_OK(c, par_params_step(ps, &opt, &st));
        norm = ps_oracle_step(k, mesh, data_dims, o, s, &opt);
        PS_CHECK(c, fabs(st.grad_norm - norm) <= 1e-5 * norm, "%s step %d: norm %.9g, oracle %.9g", k->name, s,
                 st.grad_norm, norm);
        PS_CHECK(c, st.step == s + 1, "%s: step count %lld", k->name, (long long)st.step);
    }
    /* this rank's slices, then the whole tensors and the moments gathered */
    for (i = 0; i < k->np; i++) {
        const int64_t n = ps_numel(&k->p[i]);
        par_param_info in;
        float *whole = (float *)malloc((size_t)n * sizeof(float));
        const float *mine = par_params_value(ps, i);
        double worst = 0.0;
        int f;
        int64_t j;
        if (par_params_get_info(ps, i, &in) == PAR_OK && mine)
            for (j = 0; j < in.numel; j++) {
                const double dlt = fabs(mine[j] - o[i].p[ps_global_index(&in, j)]);
                if (dlt > worst) worst = dlt;
            }
        PS_CHECK(c, worst <= 2e-6, "%s: p%d slice differs from the oracle by %g", k->name, i, worst);
        for (f = 0; f < 3; f++) {
            const double *want = f == 0 ? o[i].p : f == 1 ? o[i].m : o[i].v;
            double w2 = 0.0, scale = 0.0;
            PS_OK(c, par_params_gather(ps, (par_param_field)f, i, whole));
            for (j = 0; j < n; j++) {
                if (fabs(whole[j] - want[j]) > w2) w2 = fabs(whole[j] - want[j]);
                if (fabs(want[j]) > scale) scale = fabs(want[j]);
            }
            PS_CHECK(c, w2 <= 2e-6 + 1e-5 * scale, "%s: gathered field %d of p%d differs by %g (scale %g)", k->name, f, i,
                     w2, scale);
        }
        free(whole);
    }
done:
    par_params_destroy(ps);
    for (i = 0; i < k->np; i++) free(o[i].p), free(o[i].m), free(o[i].v);
}

/* Cases for a mesh: data-parallel dims and copies on the other dims. */
static void ps_params_cases(par_ctx *ctx, ps_counts *c) {
    const par_mesh *m = par_ctx_mesh(ctx);
    int z, mb, k;
    if (m->ndim == 1) {
        /* "dp=N": sizes not divisible by the degree, several buckets */
        for (z = 0; z <= 2; z++)
            for (mb = 1; mb <= 3; mb += 2)
                for (k = 0; k < 3; k++) {
                    ps_case pc;
                    memset(&pc, 0, sizeof pc);
                    pc.name = "dp";
                    pc.batch_map = "[0,-1]";
                    pc.np = 4;
                    pc.p[0].ndim = 1, pc.p[0].shape[0] = 7, pc.p[0].map = "[-1]";
                    pc.p[1].ndim = 2, pc.p[1].shape[0] = 3, pc.p[1].shape[1] = 5, pc.p[1].map = "[-1,-1]";
                    pc.p[2].ndim = 1, pc.p[2].shape[0] = 13, pc.p[2].map = "[-1]", pc.p[2].new_bucket = 1;
                    pc.p[3].ndim = 3, pc.p[3].shape[0] = 2, pc.p[3].shape[1] = 3, pc.p[3].shape[2] = 3, pc.p[3].map = "[-1,-1,-1]";
                    pc.zero = z, pc.micro = mb, pc.sum = k == 1, pc.clip = k != 0;
                    pc.bucket_bytes = k == 2 ? 40 : k == 1 ? -1 : 0;
                    pc.slots = k == 2 ? 1 : 0; /* ZeRO-2 with one slot and out-of-order readiness: slots grow */
                    pc.nobc = k == 2;
                    ps_run_case(ctx, &pc, c);
                }
        return;
    }
    if (m->ndim == 3) {
        /* a=2,b=2,c=2: batch over a; copies over b and c in different ways */
        for (z = 0; z <= 2; z++)
            for (mb = 1; mb <= 2; mb++) {
                ps_case pc;
                memset(&pc, 0, sizeof pc);
                pc.name = "3-D";
                pc.batch_map = "[2,-1]";
                pc.np = 5;
                pc.p[0].ndim = 1, pc.p[0].shape[0] = 5, pc.p[0].map = "[-1]";                  /* copies on b, c */
                pc.p[1].ndim = 2, pc.p[1].shape[0] = 4, pc.p[1].shape[1] = 3, pc.p[1].map = "[1,-1]"; /* split b, copies c */
                pc.p[2].ndim = 2, pc.p[2].shape[0] = 4, pc.p[2].shape[1] = 6, pc.p[2].map = "[(1,0),-1]"; /* split b,c */
                pc.p[3].ndim = 1, pc.p[3].shape[0] = 9, pc.p[3].map = "[-1]", pc.p[3].partial = 2u; /* partial on b */
                pc.p[4].ndim = 2, pc.p[4].shape[0] = 3, pc.p[4].shape[1] = 4, pc.p[4].map = "[-1,0]", pc.p[4].partial = 2u;
                pc.p[3].new_bucket = 1;
                pc.zero = z, pc.micro = mb, pc.clip = 1, pc.bucket_bytes = mb == 2 ? 24 : 0;
                ps_run_case(ctx, &pc, c);
            }
        return;
    }
    /* 2-D "dp x tp": the Llama-like set */
    for (z = 0; z <= 2; z++) {
        ps_case pc;
        memset(&pc, 0, sizeof pc);
        pc.name = "2-D";
        pc.batch_map = "[1,-1]";
        pc.np = 4;
        pc.p[0].ndim = 2, pc.p[0].shape[0] = 8, pc.p[0].shape[1] = 3, pc.p[0].map = "[0,-1]";  /* column */
        pc.p[1].ndim = 2, pc.p[1].shape[0] = 3, pc.p[1].shape[1] = 8, pc.p[1].map = "[-1,0]";  /* row */
        pc.p[2].ndim = 1, pc.p[2].shape[0] = 4, pc.p[2].map = "[-1]", pc.p[2].partial = 1u;     /* sp norm */
        pc.p[3].ndim = 1, pc.p[3].shape[0] = 3, pc.p[3].map = "[-1]";                           /* copies over tp */
        pc.zero = z, pc.micro = 2, pc.clip = 1, pc.nobc = z == 1;
        ps_run_case(ctx, &pc, c);
    }
}

/* Bad input: one check per rule. */
static void ps_params_bad(par_ctx *ctx, ps_counts *c) {
    const par_mesh *m = par_ctx_mesh(ctx);
    const int64_t shape[2] = {4, 4}, bshape[2] = {24, 4};
    par_param_desc pd[2];
    par_params_desc d;
    par_params *ps = NULL;
    par_layout batch, other;
    par_mesh om;
    par_adamw opt = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.0f, 0.0f, 0};
    float *g = NULL, buf[16];
    double sum = 1, cnt = 1;
    memset(&d, 0, sizeof d);
    memset(pd, 0, sizeof pd);
    if (m->ndim != 1) return;
    par_layout_parse(&batch, m, 2, bshape, "[0,-1]");
    pd[0].name = "w", pd[1].name = "b";
    par_layout_parse(&pd[0].layout, m, 2, shape, "[-1,-1]");
    par_layout_parse(&pd[1].layout, m, 1, shape, "[-1]");
    d.params = pd, d.num_params = 2, d.batch = &batch;
    PS_ERR(c, par_params_create(NULL, &d, &ps), PAR_EINVAL, "NULL argument");
    d.zero_level = 3;
    PS_ERR(c, par_params_create(ctx, &d, &ps), PAR_EUNSUPPORTED, "zero_level 3 (parameter sharding) is not supported");
    d.zero_level = 7;
    PS_ERR(c, par_params_create(ctx, &d, &ps), PAR_EINVAL, "zero_level 7 is not 0, 1 or 2");
    d.zero_level = 0, d.grad_slots = -1;
    PS_ERR(c, par_params_create(ctx, &d, &ps), PAR_EINVAL, "grad_slots -1 < 0");
    d.grad_slots = 0, d.num_params = -2;
    PS_ERR(c, par_params_create(ctx, &d, &ps), PAR_EINVAL, "-2 parameters");
    d.num_params = 2, pd[1].name = "w";
    PS_ERR(c, par_params_create(ctx, &d, &ps), PAR_EINVAL, "parameters 0 and 1 are both called \"w\"");
    pd[1].name = "";
    PS_ERR(c, par_params_create(ctx, &d, &ps), PAR_EINVAL, "parameter 1 has no name");
    pd[1].name = "b";
    if (m->dims[0] > 1) {
        const int64_t twelve = 12;
        par_layout_parse(&pd[1].layout, m, 1, &twelve, "[0]");
        PS_ERR(c, par_params_create(ctx, &d, &ps), PAR_ELAYOUT, "splits the batch");
        par_layout_parse(&pd[1].layout, m, 1, shape, "[-1] partial=0");
        PS_ERR(c, par_params_create(ctx, &d, &ps), PAR_ELAYOUT, "has partial dims");
        pd[1].layout = pd[0].layout, pd[1].layout.shape[0] = 5, pd[1].layout.map.count[0] = 1, pd[1].layout.map.dev[0][0] = 0;
        PS_ERR(c, par_params_create(ctx, &d, &ps), PAR_ELAYOUT, "parameter \"b\"");
    }
    par_layout_parse(&pd[1].layout, m, 1, shape, "[-1]");
    pd[1].grad_partial = 1u << 5;
    PS_ERR(c, par_params_create(ctx, &d, &ps), PAR_EINVAL, "grad_partial 0x20 names device dims the mesh does not have");
    pd[1].grad_partial = 0, pd[1].decay = (par_decay)9;
    PS_ERR(c, par_params_create(ctx, &d, &ps), PAR_EINVAL, "unknown decay 9");
    pd[1].decay = PAR_DECAY_AUTO;
    par_mesh_parse("3", &om);
    par_layout_init(&other, &om, 2, bshape, NULL, 0);
    d.batch = &other;
    if (m->dims[0] != 3) PS_ERR(c, par_params_create(ctx, &d, &ps), PAR_EINVAL, "batch layout is on another mesh");
    d.batch = &batch;
    PS_OK(c, par_params_create(ctx, &d, &ps));
    if (!ps) return;
    PS_CHECK(c, par_params_find(ps, "b") == 1 && par_params_find(ps, "zz") == -1, "find");
    PS_ERR(c, par_params_grad(ps, 0, &g), PAR_EINVAL, "no micro-batch begun");
    PS_ERR(c, par_params_grad_ready(ps, 0), PAR_EINVAL, "no micro-batch begun");
    PS_ERR(c, par_params_grads_wait(ps), PAR_EINVAL, "no micro-batch begun");
    PS_ERR(c, par_params_grads_begin(ps, 2, 2), PAR_EINVAL, "micro-batch 2 of 2");
    PS_ERR(c, par_params_grads_begin(ps, 1, 2), PAR_EINVAL, "(they go in order)");
    PS_OK(c, par_params_grads_begin(ps, 0, 2));
    PS_ERR(c, par_params_grads_begin(ps, 1, 2), PAR_EINVAL, "was not ended with par_params_grads_wait");
    PS_ERR(c, par_params_grad(ps, 5, &g), PAR_EINVAL, "parameter index 5 is not in [0, 2)");
    PS_OK(c, par_params_grad(ps, 0, &g));
    PS_OK(c, par_params_grad_ready(ps, 0));
    PS_ERR(c, par_params_grad_ready(ps, 0), PAR_EINVAL, "parameter \"w\" is marked ready twice in micro-batch 0");
    PS_ERR(c, par_params_grad(ps, 0, &g), PAR_EINVAL, "was already marked ready");
    PS_ERR(c, par_params_step(ps, &opt, NULL), PAR_EINVAL, "micro-batch 0 is still open");
    PS_ERR(c, par_params_grads_wait(ps), PAR_EINVAL, "parameter \"b\" was never marked ready in micro-batch 0");
    opt.beta1 = 1.0f;
    PS_ERR(c, par_params_step(ps, &opt, NULL), PAR_EINVAL, "AdamW settings out of range");
    PS_ERR(c, par_params_set_step(ps, -1), PAR_EINVAL, "step -1 < 0");
    PS_ERR(c, par_params_gather(ps, (par_param_field)5, 0, NULL), PAR_EINVAL, "unknown field 5");
    PS_ERR(c, par_params_gather(ps, PAR_PARAM_VALUE, -1, NULL), PAR_EINVAL, "parameter index -1");
    PS_ERR(c, par_params_set_local(ps, PAR_PARAM_VALUE, 0, NULL), PAR_EINVAL, "NULL data");
    PS_ERR(c, par_params_reduce_loss(ps, NULL, &cnt), PAR_EINVAL, "NULL argument");
    PS_ERR(c, par_ctx_all_reduce_host(ctx, 1u, PAR_REDUCE_SUM, (par_dtype)99, buf, 1), PAR_EINVAL, "dtype 99");
    PS_ERR(c, par_ctx_all_reduce_host(ctx, 1u, PAR_REDUCE_SUM, PAR_F32, buf, -1), PAR_EINVAL, "count -1");
    PS_ERR(c, par_ctx_all_reduce_host(NULL, 1u, PAR_REDUCE_SUM, PAR_F32, buf, 1), PAR_EINVAL, "NULL argument");
    PS_ERR(c, par_params_data_shard(ps, NULL, NULL), PAR_EINVAL, "NULL argument");
    {
        int sid = -1, ns = -1;
        PS_OK(c, par_params_data_shard(ps, &sid, &ns));
        PS_CHECK(c, ns == m->dims[0] && sid == par_ctx_rank(ctx), "data shard %d of %d", sid, ns);
    }
    PS_ERR(c, par_params_get_info(ps, 2, NULL), PAR_EINVAL, "parameter index 2 is not in [0, 2)");
    PS_ERR(c, par_params_get_info(ps, 0, NULL), PAR_EINVAL, "NULL info");
    PS_ERR(c, par_params_memory(ps, NULL), PAR_EINVAL, "NULL argument");
    PS_CHECK(c, par_params_value(ps, 9) == NULL, "value of a bad index");
    /* the loss: sums over the data-parallel ranks */
    sum = 1.5 * (par_ctx_rank(ctx) + 1), cnt = 10;
    PS_OK(c, par_params_reduce_loss(ps, &sum, &cnt));
    PS_CHECK(c, cnt == 10.0 * m->dims[0] && sum == 1.5 * m->dims[0] * (m->dims[0] + 1) / 2, "loss %g / %g", sum, cnt);
    /* broadcast: copies take their group's first rank's values */
    buf[0] = (float)par_ctx_rank(ctx);
    PS_OK(c, par_params_set_local(ps, PAR_PARAM_VALUE, 1, buf));
    PS_OK(c, par_params_broadcast(ps));
    PS_CHECK(c, par_params_value(ps, 1)[0] == 0.0f, "broadcast gave %g", (double)par_params_value(ps, 1)[0]);
    par_params_destroy(ps);

    /* a non-finite gradient on one rank: every rank refuses the step (the norm is
       all-reduced), and no parameter, moment or step count changes */
    ps = NULL;
    PS_OK(c, par_params_create(ctx, &d, &ps));
    if (!ps) return;
    {
        float before[16], *gw = NULL, *gb = NULL;
        par_step_stats st;
        par_param_info in;
        opt.beta1 = 0.9f;
        PS_OK(c, par_params_get_info(ps, 0, &in));
        memcpy(before, par_params_value(ps, 0), (size_t)in.numel * sizeof(float));
        PS_OK(c, par_params_grads_begin(ps, 0, 1));
        PS_OK(c, par_params_grad(ps, 0, &gw));
        PS_OK(c, par_params_grad(ps, 1, &gb));
        if (gw && gb) gw[0] = par_ctx_rank(ctx) == 0 ? nanf("") : 1.0f, gb[0] = 1.0f;
        PS_OK(c, par_params_grad_ready(ps, 0));
        PS_OK(c, par_params_grad_ready(ps, 1));
        PS_OK(c, par_params_grads_wait(ps));
        PS_ERR(c, par_params_step(ps, &opt, &st), PAR_ENONFINITE, "nan at optimizer step 1 (training diverged)");
        PS_CHECK(c, isnan(st.grad_norm) && par_params_step_count(ps) == 0, "norm %g, step count %lld", st.grad_norm,
                 (long long)par_params_step_count(ps));
        PS_CHECK(c, memcmp(before, par_params_value(ps, 0), (size_t)in.numel * sizeof(float)) == 0,
                 "a refused step changed the parameters");
    }
    par_params_destroy(ps);
}

/* ---- host-owned buffers ---------------------------------------------------------
   The same training (2 steps of 2 micro-batches, clipping, then a fixed loss
   scale) with the set's own buffers and with the host's, as one region per
   kind and as one buffer per parameter with gaps between some (where the
   host's memory breaks, a new bucket starts: the library-owned run gets
   new_bucket there, so both have the same buckets). Host-owned must equal
   library-owned bit for bit, and must reduce in the host's memory: the
   pointers handed out are the host's, the compute table allocates no
   gradient bytes but the ZeRO shard, and after the last micro-batch a ZeRO-0
   buffer holds the mean over the data-parallel ranks while a ZeRO-1/2 one
   keeps this rank's own sum. */

enum { PH_NP = 4, PH_MAXL = 512, PH_GAP = 4 };

typedef struct ph_out {
    float val[PH_MAXL], mom[4 * PH_MAXL];
    double norm[2];
    int bucket[PH_NP];
    int64_t grad_bytes, param_bytes;
} ph_out;

/* The four parameters on this mesh: every local element count a multiple
   of 12 (so of the data-parallel degree 1..4: ZeRO may reduce-scatter the
   host's buckets unpadded). */
static int ph_params(par_ctx *ctx, par_param_desc *pd, par_layout *batch, uint32_t *data_dims) {
    const par_mesh *m = par_ctx_mesh(ctx);
    const int64_t bshape[2] = {24, 4};
    static const char *const names[PH_NP] = {"w", "b", "v", "n"};
    int64_t sh[PH_NP][2];
    const char *map[PH_NP];
    int nd[PH_NP], i, ok = 1;
    if (m->ndim == 1) { /* dp=N */
        ok &= par_layout_parse(batch, m, 2, bshape, "[0,-1]") == PAR_OK;
        nd[0] = 2, sh[0][0] = 12, sh[0][1] = 6, map[0] = "[-1,-1]";
        nd[1] = 1, sh[1][0] = 12, map[1] = "[-1]";
        nd[2] = 2, sh[2][0] = 6, sh[2][1] = 12, map[2] = "[-1,-1]";
        nd[3] = 1, sh[3][0] = 24, map[3] = "[-1]";
    } else { /* dp x tp: column, row, a sequence-parallel norm (partial over tp), a bias */
        ok &= par_layout_parse(batch, m, 2, bshape, "[1,-1]") == PAR_OK;
        nd[0] = 2, sh[0][0] = 24, sh[0][1] = 6, map[0] = "[0,-1]";
        nd[1] = 2, sh[1][0] = 6, sh[1][1] = 24, map[1] = "[-1,0]";
        nd[2] = 1, sh[2][0] = 12, map[2] = "[-1]";
        nd[3] = 1, sh[3][0] = 12, map[3] = "[-1]";
    }
    memset(pd, 0, PH_NP * sizeof *pd);
    for (i = 0; i < PH_NP; i++) {
        pd[i].name = names[i];
        ok &= par_layout_parse(&pd[i].layout, m, nd[i], sh[i], map[i]) == PAR_OK;
    }
    if (m->ndim == 2) pd[2].grad_partial = 1u;
    pd[2].new_bucket = 1;
    *data_dims = par_layout_split_dims(batch);
    return ok;
}

/* One run: host 0 = the set's buffers, 1 = host regions, 2 = a host buffer per
   parameter with gaps before "v" and "n", 3 = a host region for the
   gradients only, 4 = for the values only. Fills *out; checks the in-place
   rules on the way (host runs). */
static void ph_run(par_ctx *ctx, int zero, int host, ph_out *out, ps_counts *c) {
    const par_mesh *mesh = par_ctx_mesh(ctx);
    const par_compute_table *ct = par_ctx_compute(ctx);
    const int rank = par_ctx_rank(ctx);
    par_param_desc pd[PH_NP];
    par_params_desc d;
    par_params *ps = NULL;
    par_layout batch;
    par_mem_report r0, r1;
    par_adamw opt = {1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.05f, 0};
    par_loss_scale ls;
    int64_t numel[PH_NP], at[PH_NP], sum = 0, bytes[PAR_MEM_CATEGORY_COUNT];
    float *vals = NULL, *grads = NULL, *first[PH_NP];
    uint32_t data_dims;
    int i, s, mb, order[PH_NP], D = 1, dr;
    const int hv = host == 1 || host == 2 || host == 4, hg = host == 1 || host == 2 || host == 3;
    memset(out, 0, sizeof *out);
    memset(&d, 0, sizeof d), memset(&ls, 0, sizeof ls);
    ls.scale = 4.0f, ls.growth_interval = -1;
    if (!ph_params(ctx, pd, &batch, &data_dims)) { PS_CHECK(c, 0, "host: layouts"); return; }
    ps_index(mesh, rank, data_dims, &D);
    dr = ps_index(mesh, rank, data_dims, NULL);
    for (i = 0; i < PH_NP; i++) {
        numel[i] = par_layout_local_numel(&pd[i].layout);
        at[i] = sum + (host == 2 && i >= 2 ? PH_GAP * (i - 1) : 0); /* gaps before "v" and "n" */
        sum += numel[i];
    }
    pd[3].new_bucket = host != 2; /* where host 2's memory breaks: it must start a bucket by itself */
    if (host) { /* NaN-filled: any element the set forgets to zero or write shows */
        const int64_t n = at[PH_NP - 1] + numel[PH_NP - 1];
        vals = (float *)malloc((size_t)n * sizeof(float)), grads = (float *)malloc((size_t)n * sizeof(float));
        for (i = 0; i < n; i++) vals[i] = grads[i] = nanf("");
        if (host != 2) {
            if (hv) d.host_values = vals, d.host_values_numel = n;
            if (hg) d.host_grads = grads, d.host_grads_numel = n;
        } else
            for (i = 0; i < PH_NP; i++) pd[i].host_value = vals + at[i], pd[i].host_grad = grads + at[i];
    }
    d.params = pd, d.num_params = PH_NP, d.batch = &batch, d.zero_level = zero;
    PS_OK(c, ct->memory_report(ct->user, &r0));
    PS_OK(c, par_params_create(ctx, &d, &ps));
    if (!ps) goto done;
    PS_OK(c, ct->memory_report(ct->user, &r1));
    for (i = 0; i < PH_NP; i++) first[i] = par_params_value(ps, i);
    PS_OK(c, par_params_memory(ps, bytes));
    out->grad_bytes = r1.current[PAR_MEM_GRADS] - r0.current[PAR_MEM_GRADS];
    out->param_bytes = r1.current[PAR_MEM_PARAMS] - r0.current[PAR_MEM_PARAMS];
    PS_CHECK(c, out->grad_bytes == bytes[PAR_MEM_GRADS], "host %d: the table's gradient bytes %lld, the plan's %lld", host,
             (long long)out->grad_bytes, (long long)bytes[PAR_MEM_GRADS]);
    if (hg) { /* no gradient buffer but the ZeRO shard (sum / D elements) */
        const int64_t want = zero ? sum / D * (int64_t)sizeof(float) : 0;
        PS_CHECK(c, out->grad_bytes == want, "host %d ZeRO-%d: the set allocated %lld gradient bytes (want %lld)", host,
                 zero, (long long)out->grad_bytes, (long long)want);
    }
    PS_CHECK(c, (out->param_bytes == 0) == hv, "host %d: the set allocated %lld parameter bytes", host,
             (long long)out->param_bytes);
    for (i = 0; i < PH_NP; i++) { /* initial values differ by rank: broadcast makes the copies equal */
        par_param_info in;
        float init[PH_MAXL];
        int64_t j;
        if (par_params_get_info(ps, i, &in) != PAR_OK || in.numel > PH_MAXL) { PS_CHECK(c, 0, "info"); continue; }
        out->bucket[i] = in.bucket;
        for (j = 0; j < in.numel; j++) init[j] = (float)(0.3 * ps_hash(98, (uint64_t)i, (uint64_t)ps_global_index(&in, j))) + (float)rank;
        if (hv) memcpy(vals + at[i], init, (size_t)in.numel * sizeof(float));
        else PS_OK(c, par_params_set_local(ps, PAR_PARAM_VALUE, i, init));
        if (hv) PS_CHECK(c, par_params_value(ps, i) == vals + at[i], "host %d: par_params_value(%d) is not the host's", host, i);
    }
    PS_OK(c, par_params_broadcast(ps));
    for (s = 0; s < 2; s++) {
        par_step_stats st;
        for (mb = 0; mb < 2; mb++) {
            PS_OK(c, par_params_grads_begin(ps, mb, 2));
            for (i = 0; i < PH_NP; i++) order[i] = i;
            ps_shuffle(order, PH_NP, (uint64_t)(rank * 131 + s * 7 + mb));
            for (i = 0; i < PH_NP; i++) {
                const int q = order[i];
                const int pr = ps_index(mesh, rank, pd[q].grad_partial & ~data_dims, NULL);
                par_param_info in;
                float *g = NULL;
                int64_t j;
                if (par_params_get_info(ps, q, &in) != PAR_OK) continue;
                PS_OK(c, par_params_grad(ps, q, &g));
                if (hg) { /* the set hands out the host's own memory */
                    PS_CHECK(c, g == grads + at[q], "host %d: par_params_grad(%d) is not the host's buffer", host, q);
                    g = grads + at[q];
                }
                if (!g) continue;
                for (j = 0; j < in.numel; j++)
                    g[j] += (float)ps_grad_part(q, ps_global_index(&in, j), s, mb, dr, pr) * (s == 1 ? ls.scale : 1.0f);
                PS_OK(c, par_params_grad_ready(ps, q));
            }
            PS_OK(c, par_params_grads_wait(ps));
        }
        if (hg && s == 0) { /* what the host's gradients hold after the reduction */
            double worst = 0.0;
            for (i = 0; i < PH_NP; i++) {
                const int P = pd[i].grad_partial ? mesh->dims[1] : 1;
                par_param_info in;
                int64_t j;
                par_params_get_info(ps, i, &in);
                for (j = 0; j < in.numel; j++) {
                    const int64_t e = ps_global_index(&in, j);
                    const float g = grads[at[i] + j];
                    double want = 0.0;
                    int a, p2;
                    for (a = 0; a < D; a++) /* ZeRO 0: the mean over the data ranks; 1/2: this rank's own */
                        for (p2 = 0; p2 < P; p2++) { /* partial sums over tp are added in place first */
                            if (zero && a != dr) continue;
                            want += ps_grad_part(i, e, 0, 1, a, p2) + (zero == 2 ? 0.0 : ps_grad_part(i, e, 0, 0, a, p2));
                        }
                    if (zero == 0) want /= D;
                    if (!(fabs(g - want) <= worst)) worst = isnan(g) ? INFINITY : fabs(g - want);
                }
            }
            PS_CHECK(c, worst <= 1e-6, "host %d ZeRO-%d: after the reduction the host's gradient is off by %g from %s", host,
                     zero, worst, zero == 0 ? "the mean over the data ranks" : zero == 1 ? "this rank's own sum" :
                     "this rank's own last micro-batch");
        }
        if (s == 0) PS_OK(c, par_params_step(ps, &opt, &st));
        else PS_OK(c, par_params_step_scaled(ps, &opt, &ls, &st));
        out->norm[s] = st.grad_norm;
    }
    {
        int64_t off = 0, moff = 0;
        for (i = 0; i < PH_NP; i++) {
            par_param_info in;
            const float *v = par_params_value(ps, i);
            int f;
            par_params_get_info(ps, i, &in);
            PS_CHECK(c, v && v == first[i], "host %d: par_params_value(%d) moved during training (lifetime rule)", host, i);
            if (v && off + in.numel <= PH_MAXL) memcpy(out->val + off, v, (size_t)in.numel * sizeof(float));
            off += in.numel;
            for (f = 1; f < 3; f++) { /* the moments, gathered whole */
                int64_t n = 1;
                int dd;
                for (dd = 0; dd < in.layout.ndim; dd++) n *= in.layout.shape[dd];
                if (moff + n > 4 * PH_MAXL) break;
                PS_OK(c, par_params_gather(ps, (par_param_field)f, i, out->mom + moff));
                moff += n;
            }
        }
    }
done:
    par_params_destroy(ps);
    free(vals), free(grads);
}

/* Host-owned equals library-owned, bit for bit, for ZeRO 0, 1 and 2 (dp and dp x tp meshes). */
static void ph_cases(par_ctx *ctx, ps_counts *c) {
    ph_out *ref, *got;
    int zero, host;
    if (par_ctx_mesh(ctx)->ndim > 2) return;
    ref = (ph_out *)malloc(sizeof *ref), got = (ph_out *)malloc(sizeof *got);
    for (zero = 0; zero <= 2 && ref && got; zero++) {
        ph_run(ctx, zero, 0, ref, c);
        for (host = 1; host <= 4; host++) {
            ph_run(ctx, zero, host, got, c);
            PS_CHECK(c, memcmp(ref->val, got->val, sizeof ref->val) == 0 && memcmp(ref->mom, got->mom, sizeof ref->mom) == 0 &&
                     ref->norm[0] == got->norm[0] && ref->norm[1] == got->norm[1] &&
                     memcmp(ref->bucket, got->bucket, sizeof ref->bucket) == 0,
                     "ZeRO-%d: host-owned (%s) differs from library-owned (norms %.17g %.17g vs %.17g %.17g, buckets of "
                     "\"n\" %d vs %d)", zero,
                     host == 1 ? "regions" : host == 2 ? "per-parameter buffers" : host == 3 ? "gradients" : "values", got->norm[0], got->norm[1],
                     ref->norm[0], ref->norm[1], got->bucket[3], ref->bucket[3]);
            PS_CHECK(c, ref->norm[0] > 0 && ref->val[0] == ref->val[0], "ZeRO-%d: the reference trained nothing", zero);
        }
    }
    free(ref), free(got);
}

/* Bad host buffers: one check per rule. */
static void ph_bad(par_ctx *ctx, ps_counts *c) {
    const par_mesh *m = par_ctx_mesh(ctx);
    par_param_desc pd[PH_NP];
    par_params_desc d;
    par_params *ps = NULL;
    par_layout batch;
    uint32_t dd;
    float *buf;
    int i;
    if (m->ndim != 1 || !ph_params(ctx, pd, &batch, &dd)) return;
    buf = (float *)calloc(1024, sizeof(float));
    if (!buf) return;
    memset(&d, 0, sizeof d);
    d.params = pd, d.num_params = PH_NP, d.batch = &batch;
    pd[0].host_grad = buf;
    PS_ERR(c, par_params_create(ctx, &d, &ps), PAR_EINVAL, "parameter \"b\" has no host_grad while \"w\" has one");
    for (i = 0; i < PH_NP; i++) pd[i].host_grad = buf + 256 * i;
    pd[1].host_grad = (float *)(void *)((char *)pd[1].host_grad + 2);
    PS_ERR(c, par_params_create(ctx, &d, &ps), PAR_EINVAL, "parameter \"b\": its host_grad");
    PS_ERR(c, par_params_create(ctx, &d, &ps), PAR_EINVAL, "is not aligned to 4 bytes");
    pd[1].host_grad = pd[0].host_grad + 71; /* "w" has 72 elements */
    PS_ERR(c, par_params_create(ctx, &d, &ps), PAR_EINVAL,
           "the host_grad of parameter \"w\" and the host_grad of parameter \"b\" overlap in memory");
    pd[1].host_grad = buf + 256;
    for (i = 0; i < PH_NP; i++) pd[i].host_value = buf + 600 + 100 * i;
    pd[0].host_value = buf + 250; /* [250, 322) holds "b"'s gradient at 256 */
    PS_ERR(c, par_params_create(ctx, &d, &ps), PAR_EINVAL,
           "the host_value of parameter \"w\" and the host_grad of parameter \"b\" overlap in memory");
    for (i = 0; i < PH_NP; i++) pd[i].host_value = NULL;
    d.host_grads = buf, d.host_grads_numel = 1024;
    PS_ERR(c, par_params_create(ctx, &d, &ps), PAR_EINVAL, "host_grads (a region) and parameter \"w\"'s host_grad are both given");
    for (i = 0; i < PH_NP; i++) pd[i].host_grad = NULL;
    d.host_grads_numel = 100; /* w 72, b 12, v 72: "v" ends at 156 */
    PS_ERR(c, par_params_create(ctx, &d, &ps), PAR_EINVAL,
           "host_grads holds 100 elements, too few: parameter \"v\" ends at element 156");
    d.host_grads = (float *)(void *)((char *)buf + 1), d.host_grads_numel = 1000;
    PS_ERR(c, par_params_create(ctx, &d, &ps), PAR_EINVAL, "parameter \"w\": its host_grad");
    d.host_grads = NULL, d.host_grads_numel = 5;
    PS_ERR(c, par_params_create(ctx, &d, &ps), PAR_EINVAL, "host_grads_numel is 5 but host_grads is NULL");
    d.host_grads_numel = 0, d.host_values = buf, d.host_values_numel = 180;
    PS_OK(c, par_params_create(ctx, &d, &ps)); /* exactly long enough */
    par_params_destroy(ps), ps = NULL;
    d.compute_dtype = PAR_BF16;
    PS_ERR(c, par_params_create(ctx, &d, &ps), PAR_EUNSUPPORTED, "host values under compute_dtype bf16");
    d.host_values = NULL, d.host_values_numel = 0, d.host_grads = buf, d.host_grads_numel = 1024, d.grad_dtype = PAR_BF16;
    PS_ERR(c, par_params_create(ctx, &d, &ps), PAR_EUNSUPPORTED, "host gradients with grad_dtype bf16");
    d.compute_dtype = d.grad_dtype = PAR_F32;
    if (m->dims[0] > 1) { /* "b" of 13: the bucket "w".."b" holds 85 = 5 x 17, no multiple of 2, 3 or 4 */
        const int64_t thirteen = 13;
        par_layout_parse(&pd[1].layout, m, 1, &thirteen, "[-1]");
        d.zero_level = 1;
        PS_ERR(c, par_params_create(ctx, &d, &ps), PAR_EINVAL, "the bucket of parameters \"w\" .. \"b\" holds 85 elements, "
               "not a multiple of the data-parallel degree");
        d.zero_level = 2;
        PS_ERR(c, par_params_create(ctx, &d, &ps), PAR_EINVAL, "holds 85 elements");
        d.host_grads = NULL, d.host_grads_numel = 0, d.host_values = buf, d.host_values_numel = 1024;
        d.zero_level = 1; /* host values alone: the all-gather would write the padding */
        PS_ERR(c, par_params_create(ctx, &d, &ps), PAR_EINVAL, "the host's buffers cannot be padded");
        d.zero_level = 0; /* without ZeRO nothing is padded: fine */
        PS_OK(c, par_params_create(ctx, &d, &ps));
        par_params_destroy(ps), ps = NULL;
    }
    free(buf);
}

/* ---- tensor parallel ---------------------------------------------------------- */

enum { TS_N = 8, TS_C = 4, TS_F = 8, TS_V = 16 }; /* rows per data rank, hidden, ffn, vocab */

static double ts_x(int64_t r, int64_t j) { return 0.5 * ps_hash(1, (uint64_t)r, (uint64_t)j); }
static double ts_w1(int64_t f, int64_t j) { return 0.5 * ps_hash(2, (uint64_t)f, (uint64_t)j); }
static double ts_w2(int64_t j, int64_t f) { return 0.5 * ps_hash(3, (uint64_t)j, (uint64_t)f); }
static double ts_dy(int64_t r, int64_t j) { return 0.5 * ps_hash(4, (uint64_t)r, (uint64_t)j); }
static double ts_emb(int64_t v, int64_t j) { return 0.5 * ps_hash(5, (uint64_t)v, (uint64_t)j); }
static int32_t ts_id(int64_t r) { return (int32_t)((r * 7 + 3) % TS_V); }

static void ts_case(par_ctx *ctx, int sp, int vocab_par, ps_counts *c) {
    const par_mesh *m = par_ctx_mesh(ctx);
    const int rank = par_ctx_rank(ctx);
    int D = m->ndim == 2 ? m->dims[0] : 1, T = m->dims[m->ndim - 1];
    char col[64], row[64];
    par_tp_desc d;
    par_tp *tp = NULL;
    par_tp_info info;
    par_linear l1, l2, head;
    par_embedding emb;
    int64_t held, r0, j, f, r, hl = 0, kvl = 0;
    float x[TS_N * TS_C], work[TS_N * TS_V * 2], a[TS_N * TS_F], yp[TS_N * TS_C], dy[TS_N * TS_C], da[TS_N * TS_F];
    float dh[TS_N * TS_C], w1[TS_F * TS_C], w2[TS_C * TS_F], dw1[TS_F * TS_C], dw2[TS_C * TS_F], tab[TS_V * TS_C];
    float dtab[TS_V * TS_C], logits[TS_N * TS_V], losses[TS_N];
    int32_t ids[TS_N];
    const float *full = NULL;
    float *out = NULL;
    const void *fullp = NULL; /* the helpers' void out-arguments (f32 here: the region's default dtype) */
    void *outp = NULL;
    double worst;
    int dr, ti;
    if (m->ndim == 1) D = 1;
    memset(&d, 0, sizeof d);
    snprintf(col, sizeof col, "((%d,1),(%d,1))", D, T);
    snprintf(row, sizeof row, "((%d,%d),(1,%d))", D, T, T);
    d.rows = (int64_t)TS_N * D, d.hidden = TS_C, d.column = col, d.row = row, d.sequence_parallel = sp;
    PS_OK(c, par_tp_create(ctx, &d, &tp));
    if (!tp) return;
    PS_OK(c, par_tp_get_info(tp, &info));
    PS_CHECK(c, info.degree == T && info.data_degree == D, "degree %d data %d", info.degree, info.data_degree);
    ti = info.index;
    dr = ps_index(m, rank, info.data_dims, NULL);
    PS_CHECK(c, ti == ps_index(m, rank, info.tp_dims, NULL), "tp index %d", ti);
    held = par_tp_rows(tp, TS_N);
    PS_CHECK(c, held == (sp ? TS_N / T : TS_N), "rows held %lld", (long long)held);
    r0 = (int64_t)dr * TS_N + (sp ? ti * held : 0); /* global row of this rank's first residual row */
    PS_OK(c, par_tp_linear(tp, "w1", PAR_LINEAR_COLUMN, TS_C, TS_F, &l1));
    PS_OK(c, par_tp_linear(tp, "w2", PAR_LINEAR_ROW, TS_F, TS_C, &l2));
    PS_CHECK(c, l1.out_local == TS_F / T && l1.out_start == ti * (TS_F / T) && l1.in_local == TS_C, "column slice");
    PS_CHECK(c, l2.in_local == TS_F / T && l2.in_start == ti * (TS_F / T) && l2.out_local == TS_C, "row slice");
    for (f = 0; f < l1.out_local; f++)
        for (j = 0; j < TS_C; j++) w1[f * TS_C + j] = (float)ts_w1(l1.out_start + f, j);
    for (j = 0; j < TS_C; j++)
        for (f = 0; f < l2.in_local; f++) w2[j * l2.in_local + f] = (float)ts_w2(j, l2.in_start + f);
    for (r = 0; r < held; r++)
        for (j = 0; j < TS_C; j++) x[r * TS_C + j] = (float)ts_x(r0 + r, j), dy[r * TS_C + j] = (float)ts_dy(r0 + r, j);
    /* forward: h = gather(x); a = h W1^T; y = reduce(a W2^T) */
    PS_OK(c, par_tp_gather_rows(tp, TS_N, TS_C, x, work, &fullp));
    full = (const float *)fullp;
    for (r = 0; r < TS_N; r++)
        for (f = 0; f < l1.out_local; f++) {
            double s = 0;
            for (j = 0; j < TS_C; j++) s += full[r * TS_C + j] * w1[f * TS_C + j];
            a[r * l1.out_local + f] = (float)s;
        }
    for (r = 0; r < TS_N; r++)
        for (j = 0; j < TS_C; j++) {
            double s = 0;
            for (f = 0; f < l2.in_local; f++) s += a[r * l2.in_local + f] * w2[j * l2.in_local + f];
            yp[r * TS_C + j] = (float)s;
        }
    PS_OK(c, par_tp_reduce_rows(tp, TS_N, TS_C, yp, work + TS_N * TS_C, &outp));
    out = (float *)outp;
    worst = 0;
    for (r = 0; r < held && out; r++)
        for (j = 0; j < TS_C; j++) {
            double s = 0;
            for (f = 0; f < TS_F; f++) {
                double h = 0;
                int64_t k;
                for (k = 0; k < TS_C; k++) h += (double)(float)ts_x(r0 + r, k) * (double)(float)ts_w1(f, k);
                s += h * (double)(float)ts_w2(j, f);
            }
            if (fabs(out[r * TS_C + j] - s) > worst) worst = fabs(out[r * TS_C + j] - s);
        }
    PS_CHECK(c, worst < 1e-5, "sp %d: MLP output differs from one device by %g", sp, worst);
    /* backward: dyf = gather(dy); dA = dyf W2; dW2 = dyf^T a; dH = reduce(dA W1); dW1 = dA^T h */
    PS_OK(c, par_tp_gather_rows(tp, TS_N, TS_C, dy, work, &fullp));
    full = (const float *)fullp;
    memset(dw1, 0, sizeof dw1), memset(dw2, 0, sizeof dw2);
    for (r = 0; r < TS_N; r++)
        for (f = 0; f < l2.in_local; f++) {
            double s = 0;
            for (j = 0; j < TS_C; j++) s += full[r * TS_C + j] * w2[j * l2.in_local + f];
            da[r * l2.in_local + f] = (float)s;
            for (j = 0; j < TS_C; j++) dw2[j * l2.in_local + f] += full[r * TS_C + j] * a[r * l2.in_local + f];
        }
    for (r = 0; r < TS_N; r++)
        for (j = 0; j < TS_C; j++) {
            double s = 0;
            for (f = 0; f < l1.out_local; f++) s += da[r * l1.out_local + f] * w1[f * TS_C + j];
            dh[r * TS_C + j] = (float)s;
        }
    PS_OK(c, par_tp_reduce_rows(tp, TS_N, TS_C, dh, work + TS_N * TS_C, &outp));
    out = (float *)outp;
    worst = 0;
    for (r = 0; r < held && out; r++)
        for (j = 0; j < TS_C; j++) {
            double s = 0;
            for (f = 0; f < TS_F; f++) {
                double g = 0;
                int64_t k;
                for (k = 0; k < TS_C; k++) g += (double)(float)ts_dy(r0 + r, k) * (double)(float)ts_w2(k, f);
                s += g * (double)(float)ts_w1(f, j);
            }
            if (fabs(out[r * TS_C + j] - s) > worst) worst = fabs(out[r * TS_C + j] - s);
        }
    PS_CHECK(c, worst < 1e-5, "sp %d: input gradient differs from one device by %g", sp, worst);
    /* dW2 of this data rank's rows (identical on its tp ranks' shards) */
    worst = 0;
    for (j = 0; j < TS_C; j++)
        for (f = 0; f < l2.in_local; f++) {
            double s = 0;
            for (r = 0; r < TS_N; r++) {
                double h = 0;
                int64_t k, gr = (int64_t)dr * TS_N + r;
                for (k = 0; k < TS_C; k++) h += (double)(float)ts_x(gr, k) * (double)(float)ts_w1(l2.in_start + f, k);
                s += (double)(float)ts_dy(gr, j) * h;
            }
            if (fabs(dw2[j * l2.in_local + f] - s) > worst) worst = fabs(dw2[j * l2.in_local + f] - s);
        }
    PS_CHECK(c, worst < 1e-5, "sp %d: dW2 shard differs by %g", sp, worst);
    (void)dw1;
    /* heads */
    PS_OK(c, par_tp_heads(tp, 4 * T, 2 * T, &hl, &kvl));
    PS_CHECK(c, hl == 4 && kvl == 2, "heads %lld %lld", (long long)hl, (long long)kvl);
    if (T > 1) {
        PS_ERR(c, par_tp_heads(tp, 4 * T + 1, 1, &hl, &kvl), PAR_ESHAPE, "heads are not divisible by the tensor-parallel degree");
        PS_ERR(c, par_tp_heads(tp, 4 * T, 1, &hl, &kvl), PAR_ESHAPE, "kv heads are not divisible");
    }
    /* embedding: out rows = table rows of this rank's ids */
    PS_OK(c, par_tp_embedding(tp, "emb", TS_V, TS_C, vocab_par, &emb));
    for (r = 0; r < emb.rows_local; r++)
        for (j = 0; j < TS_C; j++) tab[r * TS_C + j] = (float)ts_emb(emb.row_start + r, j);
    for (r = 0; r < TS_N; r++) ids[r] = ts_id((int64_t)dr * TS_N + r);
    PS_OK(c, par_tp_embedding_fwd(tp, &emb, TS_N, ids, tab, x, work));
    worst = 0;
    for (r = 0; r < held; r++)
        for (j = 0; j < TS_C; j++)
            if (fabs(x[r * TS_C + j] - (float)ts_emb(ts_id(r0 + r), j)) > worst) worst = fabs(x[r * TS_C + j] - (float)ts_emb(ts_id(r0 + r), j));
    PS_CHECK(c, worst < 1e-6, "embedding sp %d vocab %d differs by %g", sp, vocab_par, worst);
    memset(dtab, 0, sizeof dtab);
    PS_OK(c, par_tp_embedding_bwd(tp, &emb, TS_N, ids, dy, dtab, work));
    { /* the table gradient: summed over ranks sharing a data rank (partial where rows are split) */
        double want, got;
        int64_t v;
        worst = 0;
        for (v = 0; v < emb.rows_local; v++)
            for (j = 0; j < TS_C; j++) {
                want = 0;
                for (r = 0; r < (emb.vocab_parallel ? TS_N : held); r++) {
                    const int64_t gr = emb.vocab_parallel ? (int64_t)dr * TS_N + r : r0 + r;
                    if (ts_id(gr) == emb.row_start + v) want += (double)(float)ts_dy(gr, j);
                }
                got = dtab[v * TS_C + j];
                if (fabs(got - want) > worst) worst = fabs(got - want);
            }
        PS_CHECK(c, worst < 1e-5, "embedding grad sp %d vocab %d differs by %g", sp, vocab_par, worst);
    }
    /* vocabulary-parallel cross-entropy of logits z[r, v] = ts_x(r, v) */
    PS_OK(c, par_tp_linear(tp, "lm_head", PAR_LINEAR_COLUMN, TS_C, TS_V, &head));
    for (r = 0; r < TS_N; r++)
        for (j = 0; j < head.out_local; j++) logits[r * head.out_local + j] = (float)ts_x(dr * TS_N + r, head.out_start + j);
    PS_OK(c, par_tp_cross_entropy(tp, &head, TS_N, logits, ids, losses, 0.5f, work));
    worst = 0;
    for (r = 0; r < TS_N; r++) {
        double mx = -1e30, se = 0, want;
        int64_t v, gr = (int64_t)dr * TS_N + r;
        for (v = 0; v < TS_V; v++) mx = fmax(mx, (double)(float)ts_x(gr, v));
        for (v = 0; v < TS_V; v++) se += exp((double)(float)ts_x(gr, v) - mx);
        want = log(se) + mx - (double)(float)ts_x(gr, ids[r]);
        if (fabs(losses[r] - want) > worst) worst = fabs(losses[r] - want);
        for (j = 0; j < head.out_local; j++) {
            const int64_t vv = head.out_start + j;
            const double p = exp((double)(float)ts_x(gr, vv) - mx) / se, g = 0.5 * (p - (vv == ids[r]));
            if (fabs(logits[r * head.out_local + j] - g) > worst) worst = fabs(logits[r * head.out_local + j] - g);
        }
    }
    PS_CHECK(c, worst < 1e-5, "cross-entropy differs by %g", worst);
    /* gather the columns of one row of logits */
    {
        float row1[TS_V];
        for (j = 0; j < head.out_local; j++) logits[j] = (float)(head.out_start + j);
        PS_OK(c, par_tp_gather_columns(tp, &head, 1, logits, row1));
        worst = 0;
        for (j = 0; j < TS_V; j++) worst = fmax(worst, fabs(row1[j] - (float)j));
        PS_CHECK(c, worst == 0, "gathered columns differ by %g", worst);
    }
    /* parameter descriptions: norms partial over the rows' split dims */
    {
        par_param_desc pd;
        PS_OK(c, par_tp_norm_param(tp, "ln", TS_C, &pd));
        PS_CHECK(c, pd.grad_partial == (info.data_dims | (sp ? info.tp_dims : 0u)), "norm grad_partial 0x%x", (unsigned)pd.grad_partial);
        PS_OK(c, par_tp_linear_param(&l1, "w1", &pd));
        PS_CHECK(c, par_layout_equal(&pd.layout, &l1.weight) && pd.grad_partial == info.data_dims, "linear param");
    }
    /* a linear's bias: a column-parallel one goes with the output columns this
       rank computes (W's rows), a row-parallel one is whole and, like a norm,
       partial over the dims that split the rows it is added to */
    {
        par_param_desc pd;
        par_linear odd;
        int64_t shp[PARALLEL_MAX_DIMS], off[PARALLEL_MAX_DIMS];
        PS_OK(c, par_tp_linear_bias_param(tp, &l1, "b1", &pd));
        par_layout_local_shape(&pd.layout, shp);
        PS_OK(c, par_layout_local_offset(&pd.layout, rank, off));
        PS_CHECK(c, pd.layout.ndim == 1 && pd.layout.shape[0] == TS_F && par_layout_shards(&pd.layout, 0) == T,
                 "column bias layout: ndim %d shape %lld shards %lld", pd.layout.ndim, (long long)pd.layout.shape[0],
                 (long long)par_layout_shards(&pd.layout, 0));
        PS_CHECK(c, shp[0] == l1.out_local && off[0] == l1.out_start, "column bias slice [%lld, +%lld), W rows [%lld, +%lld)",
                 (long long)off[0], (long long)shp[0], (long long)l1.out_start, (long long)l1.out_local);
        PS_CHECK(c, pd.grad_partial == info.data_dims && pd.decay == PAR_DECAY_AUTO && strcmp(pd.name, "b1") == 0,
                 "column bias grad_partial 0x%x", (unsigned)pd.grad_partial);
        PS_OK(c, par_tp_linear_bias_param(tp, &l2, "b2", &pd));
        par_layout_local_shape(&pd.layout, shp);
        PS_CHECK(c, pd.layout.ndim == 1 && shp[0] == TS_C && par_layout_shards(&pd.layout, 0) == 1 &&
                        pd.grad_partial == (info.data_dims | (sp ? info.tp_dims : 0u)),
                 "row bias: local %lld, grad_partial 0x%x", (long long)shp[0], (unsigned)pd.grad_partial);
        PS_ERR(c, par_tp_linear_bias_param(tp, NULL, "b", &pd), PAR_EINVAL, "NULL argument");
        odd = l2, odd.kind = PAR_LINEAR_COLUMN; /* a column-parallel linear whose input is split */
        if (T > 1) PS_ERR(c, par_tp_linear_bias_param(tp, &odd, "b3", &pd), PAR_EINVAL, "b3: the column strategy splits");
        odd = l1, odd.weight.ndim = 1;
        PS_ERR(c, par_tp_linear_bias_param(tp, &odd, "b4", &pd), PAR_EINVAL, "b4: not a linear placed by par_tp_linear");
    }
    /* biases on the output: a row-parallel linear's once per row of the reduced sum (this rank's rows,
       all columns, b whole), a column-parallel one's on all rows of this rank's columns (b its slice);
       their gradients the column sums over the same rows, in f32 */
    {
        const int64_t rr = par_tp_rows(tp, TS_N);
        float yb[TS_N * TS_F], y0[TS_N * TS_F], bias[TS_F], db[TS_F];
        int64_t cols, k2;
        double bad = 0;
        int pass;
        for (pass = 0; pass < 2; pass++) {
            const par_linear *lin = pass ? &l1 : &l2; /* row-parallel first, then column-parallel */
            const int64_t rows = pass ? TS_N : rr;
            cols = pass ? l1.out_local : l2.out;
            for (k2 = 0; k2 < rows * cols; k2++) y0[k2] = yb[k2] = (float)((k2 * 7 + rank) % 13) - 6.0f;
            for (k2 = 0; k2 < cols; k2++) bias[k2] = 0.25f * (float)(k2 + 1), db[k2] = 1.0f;
            PS_OK(c, par_tp_bias_fwd(tp, lin, TS_N, bias, yb));
            for (k2 = 0, bad = 0; k2 < rows * cols; k2++) bad = fmax(bad, fabs(yb[k2] - (y0[k2] + bias[k2 % cols])));
            PS_CHECK(c, bad == 0, "%s bias: y differs from y + b by %g", pass ? "column" : "row", bad);
            PS_OK(c, par_tp_bias_bwd(tp, lin, TS_N, y0, db));
            for (k2 = 0, bad = 0; k2 < cols; k2++) {
                double want = 1.0;
                int64_t r2;
                for (r2 = 0; r2 < rows; r2++) want += y0[r2 * cols + k2];
                bad = fmax(bad, fabs(db[k2] - want));
            }
            PS_CHECK(c, bad == 0, "%s bias gradient differs from the column sums by %g", pass ? "column" : "row", bad);
        }
        PS_ERR(c, par_tp_bias_fwd(tp, NULL, TS_N, bias, yb), PAR_EINVAL, "par_tp_bias_fwd: NULL argument");
        PS_ERR(c, par_tp_bias_fwd(tp, &l1, TS_N, NULL, yb), PAR_EINVAL, "NULL b or y");
        if (T > 1) {
            par_linear odd = l2;
            odd.kind = PAR_LINEAR_COLUMN; /* its input split: a partial sum */
            PS_ERR(c, par_tp_bias_bwd(tp, &odd, TS_N, y0, db), PAR_EINVAL, "the column strategy splits the linear's input");
            if (sp) PS_ERR(c, par_tp_bias_fwd(tp, &l2, T + 1, bias, yb), PAR_ESHAPE, "not divisible by the tensor-parallel degree");
        }
    }
    /* a stack of L layers' weights [L, out, in] (a host's layer-stacked buffer): this rank's slice is
       each layer's 2-D slice, layer after layer; grad_partial and the decay rule carry over */
    {
        enum { L = 3 };
        par_param_desc one, st;
        int64_t shp[PARALLEL_MAX_DIMS], off[PARALLEL_MAX_DIMS], k, n2 = (int64_t)TS_F * TS_C;
        float whole[L * TS_F * TS_C], mine[L * TS_F * TS_C], layer[TS_F * TS_C];
        int same = 1, l;
        PS_OK(c, par_tp_linear_param(&l1, "w1", &one));
        PS_OK(c, par_tp_stack_param(&one, L, &st));
        par_layout_local_shape(&st.layout, shp);
        PS_OK(c, par_layout_local_offset(&st.layout, rank, off));
        PS_CHECK(c, st.layout.ndim == 3 && st.layout.shape[0] == L && shp[0] == L && shp[1] == l1.out_local &&
                        shp[2] == l1.in_local && off[0] == 0 && off[1] == l1.out_start && off[2] == l1.in_start,
                 "stacked linear: local [%lld, %lld, %lld] at [%lld, %lld, %lld]", (long long)shp[0], (long long)shp[1],
                 (long long)shp[2], (long long)off[0], (long long)off[1], (long long)off[2]);
        PS_CHECK(c, st.grad_partial == one.grad_partial && st.decay == PAR_DECAY_ON && strcmp(st.name, "w1") == 0,
                 "stacked linear: grad_partial 0x%x decay %d", (unsigned)st.grad_partial, (int)st.decay);
        for (k = 0; k < L * n2; k++) whole[k] = (float)k;
        PS_OK(c, par_layout_copy_slice(&st.layout, rank, sizeof(float), whole, mine));
        for (l = 0; l < L; l++) { /* layer l's part of the slice is its 2-D slice */
            PS_OK(c, par_layout_copy_slice(&l1.weight, rank, sizeof(float), whole + l * n2, layer));
            same &= memcmp(layer, mine + l * l1.out_local * l1.in_local,
                           (size_t)(l1.out_local * l1.in_local) * sizeof(float)) == 0;
        }
        PS_CHECK(c, same, "the stacked slice is not the layers' slices one after another");
        PS_OK(c, par_tp_norm_param(tp, "ln", TS_C, &one));
        PS_OK(c, par_tp_stack_param(&one, L, &st));
        PS_CHECK(c, st.layout.ndim == 2 && st.decay == PAR_DECAY_OFF && st.grad_partial == one.grad_partial,
                 "stacked norms stay undecayed (decay %d)", (int)st.decay);
        PS_ERR(c, par_tp_stack_param(&one, 0, &st), PAR_EINVAL, "par_tp_stack_param: ln: count 0 must be >= 1");
        one.layout.ndim = PARALLEL_MAX_DIMS;
        PS_ERR(c, par_tp_stack_param(&one, 2, &st), PAR_EINVAL, "ln has 8 dims already");
        PS_ERR(c, par_tp_stack_param(NULL, 2, &st), PAR_EINVAL, "NULL argument");
    }
    /* bad input */
    PS_ERR(c, par_tp_linear(tp, "w3", PAR_LINEAR_COLUMN, TS_C, 0, &l1), PAR_EINVAL, "w3: in 4 and out 0 must be >= 1");
    if (T > 1) {
        PS_ERR(c, par_tp_linear(tp, "w3", PAR_LINEAR_COLUMN, TS_C, T * 2 + 1, &l1), PAR_ESTRATEGY, "w3");
        PS_ERR(c, par_tp_gather_columns(tp, &l2, 1, yp, work), PAR_EINVAL, "is not column-parallel");
        if (sp) PS_ERR(c, par_tp_gather_rows(tp, T + 1, 2, x, work, &fullp), PAR_ESHAPE, "not divisible by the tensor-parallel degree");
    }
    PS_ERR(c, par_tp_gather_rows(tp, -1, 2, x, work, &fullp), PAR_EINVAL, "n -1 and cols 2 must be >= 0");
    PS_ERR(c, par_tp_norm_param(tp, "ln", 0, NULL), PAR_EINVAL, "NULL argument");
    {
        par_param_desc pd;
        PS_ERR(c, par_tp_norm_param(tp, "ln", 0, &pd), PAR_EINVAL, "ln: dim 0 < 1");
    }
    PS_ERR(c, par_tp_embedding(tp, "emb", 0, TS_C, 0, &emb), PAR_EINVAL, "emb: vocab 0 and dim 4 must be >= 1");
    PS_ERR(c, par_tp_embedding_fwd(tp, &emb, TS_N, NULL, tab, x, work), PAR_EINVAL, "NULL argument");
    PS_ERR(c, par_tp_embedding_bwd(tp, &emb, TS_N, ids, NULL, dtab, work), PAR_EINVAL, "NULL argument");
    PS_ERR(c, par_tp_cross_entropy(tp, &head, -1, logits, ids, losses, 1.0f, work), PAR_EINVAL, "n -1 < 0");
    PS_ERR(c, par_tp_cross_entropy(tp, &head, TS_N, NULL, ids, losses, 1.0f, work), PAR_EINVAL, "NULL argument");
    if (T > 1) PS_ERR(c, par_tp_cross_entropy(tp, &head, TS_N, logits, ids, losses, 1.0f, NULL), PAR_EINVAL, "NULL work");
    PS_ERR(c, par_tp_heads(tp, 4, 3, &hl, &kvl), PAR_EINVAL, "kv heads must divide heads");
    PS_ERR(c, par_tp_get_info(tp, NULL), PAR_EINVAL, "NULL argument");
    PS_ERR(c, par_tp_linear(tp, "w", (par_linear_kind)7, 4, 4, &l1), PAR_EINVAL, "unknown kind 7");
    PS_ERR(c, par_tp_reduce_rows(NULL, TS_N, TS_C, yp, work, &outp), PAR_EINVAL, "NULL argument");
    if (sp) /* the sum lands in work: a NULL out would lose it (refused at degree 1 too) */
        PS_ERR(c, par_tp_reduce_rows(tp, TS_N, TS_C, yp, work, NULL), PAR_EINVAL,
               "NULL out under sequence parallelism (the sum lands in work, not in p)");
    if (sp && T > 1) PS_ERR(c, par_tp_reduce_rows(tp, TS_N, TS_C, yp, NULL, &outp), PAR_EINVAL, "NULL work");
    if (!sp) { /* out NULL: the sum is p itself, as with an out */
        float p2[TS_N * TS_C];
        for (r = 0; r < TS_N * TS_C; r++) yp[r] = (float)ts_x(rank, r), p2[r] = yp[r];
        PS_OK(c, par_tp_reduce_rows(tp, TS_N, TS_C, yp, NULL, NULL));
        PS_OK(c, par_tp_reduce_rows(tp, TS_N, TS_C, p2, NULL, &outp));
        PS_CHECK(c, outp == (void *)p2 && memcmp(yp, p2, sizeof p2) == 0, "reduce in place with out NULL differs");
    }
    PS_CHECK(c, par_tp_pad_rows(tp, 5) == (sp && T > 1 ? (5 + T - 1) / T * T : 5), "pad rows %lld", (long long)par_tp_pad_rows(tp, 5));
    PS_CHECK(c, par_tp_workspace_bytes(tp, 8, 4) == (T > 1 ? 4 * 8 * 4 * 4 : 0), "workspace bytes");
    PS_CHECK(c, info.dtype == PAR_F32, "a zero desc.dtype reads back as %s", par_dtype_name(info.dtype));
    par_tp_destroy(tp);
    /* strategies that do not fit together */
    snprintf(row, sizeof row, "((%d,1),(%d,1))", D, T);
    if (T > 1) PS_ERR(c, par_tp_create(ctx, &d, &tp), PAR_ESTRATEGY, "the row strategy");
    d.row = "((2,";
    PS_ERR(c, par_tp_create(ctx, &d, &tp), PAR_ESTRATEGY, "row strategy \"((2,\"");
    d.row = row, d.rows = 0;
    PS_ERR(c, par_tp_create(ctx, &d, &tp), PAR_EINVAL, "rows 0 and hidden 4 must be >= 1");
}

/* ---- multi-copy ------------------------------------------------------------------ */

enum { TC_LAYERS = 3, TC_MAXK = 3 };

typedef struct tc_state {
    par_tp *tp[TC_MAXK + 1];     /* one region per copy; [TC_MAXK] without copies */
    float x[TC_MAXK + 1][TS_N * TS_C], w1[TS_F * TS_C], w2[TS_C * TS_F];
    float work[TC_MAXK + 1][TS_N * TS_C * 2], a[TC_MAXK + 1][TS_N * TS_F], yp[TC_MAXK + 1][TS_N * TS_C];
    int log[TC_MAXK * TC_LAYERS * 2], nlog; /* the order compute ran in: copy * 100 + step */
    int fail_copy;                          /* this copy fails at its start (-1: none) */
    par_status st[TC_MAXK + 1];
} tc_state;

/* TC_LAYERS MLP layers on copy k's rows (k = TC_MAXK: the region without
   copies): x = reduce(gather(x) W1^T W2^T), local math in float. */
static par_status tc_layers(void *user, int k) {
    tc_state *s = (tc_state *)user;
    par_tp *tp = s->tp[k];
    const par_linear_kind col = PAR_LINEAR_COLUMN;
    par_linear l1, l2;
    int64_t r, f, j;
    int layer;
    (void)col;
    if (k == s->fail_copy) return par_set_error(PAR_EINVAL, "copy %d fails on purpose", k);
    PS_TRY(par_tp_linear(tp, "w1", PAR_LINEAR_COLUMN, TS_C, TS_F, &l1));
    PS_TRY(par_tp_linear(tp, "w2", PAR_LINEAR_ROW, TS_F, TS_C, &l2));
    for (layer = 0; layer < TC_LAYERS; layer++) {
        const void *fullp;
        const float *full;
        void *out;
        PS_TRY(par_tp_gather_rows(tp, TS_N, TS_C, s->x[k], s->work[k], &fullp));
        full = (const float *)fullp;
        if (k < TC_MAXK) s->log[s->nlog++] = k * 100 + 2 * layer; /* holds the turn: one writer at a time */
        for (r = 0; r < TS_N; r++)
            for (f = 0; f < l1.out_local; f++) {
                float acc = 0;
                for (j = 0; j < TS_C; j++) acc += full[r * TS_C + j] * s->w1[(l1.out_start + f) * TS_C + j];
                s->a[k][r * l1.out_local + f] = acc;
            }
        for (r = 0; r < TS_N; r++)
            for (j = 0; j < TS_C; j++) {
                float acc = 0;
                for (f = 0; f < l2.in_local; f++) acc += s->a[k][r * l2.in_local + f] * s->w2[j * TS_F + l2.in_start + f];
                s->yp[k][r * TS_C + j] = acc;
            }
        PS_TRY(par_tp_reduce_rows(tp, TS_N, TS_C, s->yp[k], s->work[k] + TS_N * TS_C, &out));
        if (k < TC_MAXK) s->log[s->nlog++] = k * 100 + 2 * layer + 1;
        memcpy(s->x[k], out, (size_t)par_tp_rows(tp, TS_N) * TS_C * sizeof(float));
    }
    return PAR_OK;
}

static par_status tc_nested(void *user, int k) {
    (void)k;
    return par_copies_run((par_copies *)user, tc_layers, NULL);
}

/* K copies of a tensor-parallel MLP, each its own rows, against the same
   copies run one after another on a region without copies: bit-identical,
   and (with collectives to hand over at) interleaved: a copy computed before
   the one before it finished. A failing copy is reported with its number. */
static void tc_case(par_ctx *ctx, int sp, int K, ps_counts *c) {
    const par_mesh *m = par_ctx_mesh(ctx);
    int D = m->ndim == 2 ? m->dims[0] : 1, T = m->dims[m->ndim - 1];
    static tc_state s_[64];
    tc_state *s = &s_[par_ctx_rank(ctx) % 64];
    char col[64], row[64];
    par_copies *mc = NULL;
    par_tp_desc d;
    int k, i, r, interleaved = 0, same = 1;
    if (m->ndim == 1) D = 1;
    memset(s, 0, sizeof *s);
    s->fail_copy = -1;
    snprintf(col, sizeof col, "((%d,1),(%d,1))", D, T);
    snprintf(row, sizeof row, "((%d,%d),(1,%d))", D, T, T);
    memset(&d, 0, sizeof d);
    d.rows = (int64_t)TS_N * D, d.hidden = TS_C, d.column = col, d.row = row, d.sequence_parallel = sp;
    PS_OK(c, par_copies_create(ctx, K, NULL, &mc));
    if (!mc) return;
    for (k = 0; k <= K; k++) {
        d.copies = k < K ? mc : NULL, d.copy = k < K ? k : 0;
        PS_OK(c, par_tp_create(ctx, &d, &s->tp[k < K ? k : TC_MAXK]));
    }
    for (i = 0; i < TS_F * TS_C; i++) s->w1[i] = (float)ts_w1(i / TS_C, i % TS_C), s->w2[i] = (float)ts_w2(i / TS_F, i % TS_F);
    for (k = 0; k < K; k++)
        for (i = 0; i < TS_N * TS_C; i++) s->x[k][i] = (float)ts_x(1000 * k + par_ctx_rank(ctx), i);
    PS_OK(c, par_copies_run(mc, tc_layers, s));
    for (k = 0; k < K; k++) { /* the same copy alone, on the plain region */
        for (i = 0; i < TS_N * TS_C; i++) s->x[TC_MAXK][i] = (float)ts_x(1000 * k + par_ctx_rank(ctx), i);
        PS_OK(c, tc_layers(s, TC_MAXK));
        for (i = 0; i < (int)par_tp_rows(s->tp[TC_MAXK], TS_N) * TS_C; i++) same &= s->x[k][i] == s->x[TC_MAXK][i];
    }
    PS_CHECK(c, same, "sp %d, %d copies: results differ from the copies run one after another", sp, K);
    PS_CHECK(c, s->nlog == 2 * K * TC_LAYERS, "%d compute steps logged", s->nlog);
    for (i = 1; i < s->nlog; i++) interleaved |= s->log[i] / 100 < s->log[i - 1] / 100;
    for (r = 0, i = 0; i < s->nlog; i++) r += s->log[i] / 100 != (i ? s->log[i - 1] / 100 : 0);
    if (T > 1 && K > 1)
        PS_CHECK(c, interleaved && r >= 2 * TC_LAYERS, "sp %d, %d copies: no interleaving (%d switches)", sp, K, r);
    else PS_CHECK(c, !interleaved, "one copy, or one tp rank (no collective): no hand-over expected");
    /* a failing copy: named, the others run to the end */
    s->fail_copy = K - 1, s->nlog = 0;
    PS_ERR(c, par_copies_run(mc, tc_layers, s), PAR_EINVAL, "fails on purpose");
    PS_CHECK(c, strstr(par_last_error(), "copy") != NULL, "error names the copy: %s", par_last_error());
    PS_ERR(c, par_copies_run(mc, tc_nested, mc), PAR_EINVAL, "do not nest");
    for (k = 0; k < K; k++) par_tp_destroy(s->tp[k]);
    par_tp_destroy(s->tp[TC_MAXK]);
    d.copies = mc, d.copy = K;
    PS_ERR(c, par_tp_create(ctx, &d, &s->tp[0]), PAR_EINVAL, "copy");
    par_copies_destroy(mc);
    PS_ERR(c, par_copies_create(ctx, 0, NULL, &mc), PAR_EINVAL, "0 copies; use 1 to 64");
}

/* Everything for this rank's mesh; returns the failures (and *passed). */

/* ---- stacked layers, data_axes, gather_all / write_raw, par_args_take, tp defaults ----
   A: [4, 3] (rows split over tp where the mesh has it), PL_L layers in one
   host buffer; B: [5] replicated, a buffer of its own. Expectations from the
   mesh by hand (ps_coord), not from the set's info. */
#define PL_L 3

/* Element e of A's layer (global flat index) held at local j on tp index t of T. */
static int64_t pl_global(int64_t j, int t, int T) { return (t * (4 / T) + j / 3) * 3 + j % 3; }

static void pl_bad(par_ctx *ctx, ps_counts *c, const par_params_desc *good) {
    par_param_desc pd[2];
    par_params_desc d = *good;
    par_params *ps = NULL;
    par_layout batch;
    const int64_t bshape[1] = {24}; /* divides every dp of tests/test_params.c */
    char longname[300];
    memcpy(pd, good->params, sizeof pd);
    d.params = pd;
    pd[0].layers = -1;
    PS_ERR(c, par_params_create(ctx, &d, &ps), PAR_EINVAL, "\"A\": layers -1 < 0");
    memset(longname, 'x', sizeof longname - 1), longname[sizeof longname - 1] = 0;
    pd[0].layers = PL_L, pd[0].name = longname;
    PS_ERR(c, par_params_create(ctx, &d, &ps), PAR_EINVAL, "needs a name shorter than");
    pd[0].name = "A", d.data_axes = "nope";
    PS_ERR(c, par_params_create(ctx, &d, &ps), PAR_EINVAL, "data_axes \"nope\": \"nope\" is not an axis of the mesh");
    if (par_mesh_dev_dim(par_ctx_mesh(ctx), "dp") >= 0) {
        d.data_axes = "dp,";
        PS_ERR(c, par_params_create(ctx, &d, &ps), PAR_EINVAL, "data_axes \"dp,\": \"\" is not an axis");
        d.data_axes = "dp";
        PS_OK(c, par_layout_parse(&batch, par_ctx_mesh(ctx), 1, bshape, "[dp]"));
        d.batch = &batch;
        PS_ERR(c, par_params_create(ctx, &d, &ps), PAR_EINVAL, "both batch and data_axes \"dp\" are given");
    }
    PS_CHECK(c, ps == NULL, "a refused create left a set");
}

static void pl_cases(par_ctx *ctx, ps_counts *c) {
    const par_mesh *mesh = par_ctx_mesh(ctx);
    const int rank = par_ctx_rank(ctx), dpd = par_mesh_dev_dim(mesh, "dp"), tpd = par_mesh_dev_dim(mesh, "tp");
    const int T = tpd >= 0 ? par_mesh_dev_size(mesh, tpd) : 1, t = tpd >= 0 ? ps_coord(mesh, rank, tpd) : 0;
    const int S = dpd >= 0 ? par_mesh_dev_size(mesh, dpd) : 1, sh = dpd >= 0 ? ps_coord(mesh, rank, dpd) : 0;
    const int64_t shape[2] = {4, 3}, bshape[1] = {5}, n = 12 / T;
    par_param_desc pd[2];
    par_params_desc d;
    par_params *ps = NULL;
    par_param_info in;
    float hv[PL_L * 12], hg[PL_L * 12], bv[5], bg[5], whole[PL_L * 12 + 5], back[PL_L * 12 + 5];
    char name[16], path[96];
    int64_t j;
    int l, shard = -1, shards = -1;
    memset(pd, 0, sizeof pd), memset(&d, 0, sizeof d);
    PS_OK(c, par_layout_parse(&pd[0].layout, mesh, 2, shape, tpd >= 0 ? "[tp,None]" : "[None,None]"));
    PS_OK(c, par_layout_parse(&pd[1].layout, mesh, 1, bshape, "[None]"));
    pd[0].name = "A", pd[0].layers = PL_L, pd[0].host_value = hv, pd[0].host_grad = hg;
    pd[1].name = "B", pd[1].host_value = bv, pd[1].host_grad = bg;
    d.params = pd, d.num_params = 2, d.data_axes = dpd >= 0 ? "dp" : NULL;
    pl_bad(ctx, c, &d);
    PS_OK(c, par_params_create(ctx, &d, &ps));
    if (!ps) return;
    /* the layers: parameters of their own, named, in the host's buffer, a bucket each */
    PS_CHECK(c, par_params_count(ps) == PL_L + 1, "%d parameters, want %d layers + 1", par_params_count(ps), PL_L);
    for (l = 0; l <= PL_L; l++) {
        if (l < PL_L) snprintf(name, sizeof name, "A.%d", l);
        else snprintf(name, sizeof name, "B");
        PS_CHECK(c, par_params_find(ps, name) == l, "\"%s\" is parameter %d, want %d", name, par_params_find(ps, name),
                 l);
        PS_OK(c, par_params_get_info(ps, l, &in));
        PS_CHECK(c, in.bucket == l, "%s: bucket %d, want %d (one per layer)", name, in.bucket, l);
        PS_CHECK(c, in.numel == (l < PL_L ? n : 5), "%s: %lld elements", name, (long long)in.numel);
        PS_CHECK(c, par_params_value(ps, l) == (l < PL_L ? hv + l * n : bv), "%s: not the host's buffer", name);
    }
    PS_OK(c, par_params_data_shard(ps, &shard, &shards));
    PS_CHECK(c, shard == sh && shards == S, "data shard %d of %d, want %d of %d (data_axes)", shard, shards, sh, S);
    /* the whole values: the layers' wholes one after another, then B */
    for (l = 0; l < PL_L; l++)
        for (j = 0; j < n; j++) hv[l * n + j] = (float)(1000 * l + pl_global(j, t, T));
    for (j = 0; j < 5; j++) bv[j] = (float)(5000 + j);
    PS_CHECK(c, par_params_global_numel(ps) == PL_L * 12 + 5, "global numel %lld",
             (long long)par_params_global_numel(ps));
    for (j = 0; j < PL_L * 12 + 5; j++) whole[j] = -1.0f;
    PS_OK(c, par_params_gather_all(ps, PAR_PARAM_VALUE, whole));
    for (j = 0; j < PL_L * 12 + 5; j++) {
        const float want = j < PL_L * 12 ? (float)(1000 * (j / 12) + j % 12) : (float)(5000 + j - PL_L * 12);
        if (whole[j] != want) {
            PS_CHECK(c, 0, "gather_all: element %lld is %g, want %g", (long long)j, whole[j], want);
            break;
        }
    }
    /* rank 0 writes them; an unwritable path is PAR_EIO there, nothing elsewhere */
    snprintf(path, sizeof path, "/tmp/par_write_raw_%p_%d.bin", (void *)ps, (int)mesh->ndim);
    PS_OK(c, par_params_write_raw(ps, path));
    if (rank == 0) {
        FILE *f = fopen(path, "rb");
        size_t got = f ? fread(back, sizeof(float), PL_L * 12 + 6, f) : 0;
        if (f) fclose(f);
        remove(path);
        PS_CHECK(c, got == PL_L * 12 + 5 && memcmp(back, whole, sizeof whole) == 0, "write_raw: %zu values read back",
                 got);
        PS_ERR(c, par_params_write_raw(ps, "/nonexistent_par_dir/w.bin"), PAR_EIO,
               "cannot write /nonexistent_par_dir/w.bin");
    } else {
        PS_OK(c, par_params_write_raw(ps, "/nonexistent_par_dir/w.bin"));
    }
    /* gradients: each layer marked ready by itself, reduced in place in the host's buffer */
    PS_OK(c, par_params_grads_begin(ps, 0, 1));
    for (l = 0; l < PL_L; l++)
        for (j = 0; j < n; j++) hg[l * n + j] += (float)((sh + 1) * (l + 1) + pl_global(j, t, T));
    for (j = 0; j < 5; j++) bg[j] += (float)((sh + 1) * 10 + j);
    for (l = PL_L - 1; l >= 0; l--) PS_OK(c, par_params_grad_ready(ps, l)); /* the backward's order */
    PS_OK(c, par_params_grad_ready(ps, PL_L));
    PS_OK(c, par_params_grads_wait(ps));
    for (l = 0; l < PL_L; l++)
        for (j = 0; j < n; j++) {
            const float want = (float)((S + 1) / 2.0 * (l + 1) + (double)pl_global(j, t, T));
            if (hg[l * n + j] != want) {
                PS_CHECK(c, 0, "layer %d gradient %lld is %g, want %g (the mean over %d data ranks)", l, (long long)j,
                         hg[l * n + j], want, S);
                l = PL_L;
                break;
            }
        }
    PS_CHECK(c, bg[4] == (float)((S + 1) / 2.0 * 10 + 4), "B's gradient %g", bg[4]);
    par_params_destroy(ps);
}

/* Wait until the trace clock has moved 20 us: "compute" between two marks, so
   launches a mark makes get distinct, ordered timestamps. */
static void pl_compute(void) {
    const double t0 = par_trace_now_us();
    while (par_trace_now_us() < t0 + 20.0) {}
}

/* Two stacked kinds, A and C (3 layers each), marked ready as a backward makes
   them (C.2 A.2 C.1 A.1 C.0 A.0) launch in that order, each as it is marked:
   the comm spans' starts (launch times, from the trace written back) are
   buckets 5 2 4 1 3 0, strictly increasing. Declaration order would be
   5 4 3 2 1 0, A's waiting for C.0. Data-parallel meshes only (no launch
   without a data-parallel group). */
static void pl_launch_order(par_ctx *ctx, ps_counts *c) {
    static const int want[6] = {5, 2, 4, 1, 3, 0};
    const par_mesh *mesh = par_ctx_mesh(ctx);
    const int dpd = par_mesh_dev_dim(mesh, "dp"), rank = par_ctx_rank(ctx);
    const int64_t shape[2] = {2, 2};
    par_param_desc pd[2];
    par_params_desc d;
    par_params *ps = NULL;
    par_trace *tr = NULL;
    tj_trace t;
    double at[6];
    char path[128];
    int l, i, b;
    if (dpd < 0 || par_mesh_dev_size(mesh, dpd) < 2) return;
    memset(pd, 0, sizeof pd), memset(&d, 0, sizeof d), memset(&t, 0, sizeof t);
    PS_OK(c, par_layout_parse(&pd[0].layout, mesh, 2, shape, "[None,None]"));
    pd[1].layout = pd[0].layout;
    pd[0].name = "A", pd[1].name = "C", pd[0].layers = pd[1].layers = 3;
    PS_OK(c, par_trace_create(&(par_trace_desc){.rank = rank}, &tr));
    d.params = pd, d.num_params = 2, d.data_axes = "dp", d.trace = tr;
    PS_OK(c, par_params_create(ctx, &d, &ps));
    if (!ps || !tr) goto done;
    PS_OK(c, par_params_grads_begin(ps, 0, 1));
    for (l = 2; l >= 0; l--) {
        pl_compute();
        PS_OK(c, par_params_grad_ready(ps, 3 + l)); /* C.l */
        pl_compute();
        PS_OK(c, par_params_grad_ready(ps, l)); /* A.l */
    }
    PS_OK(c, par_params_grads_wait(ps));
    snprintf(path, sizeof path, "/tmp/par_launch_order_%d_%p.json", rank, (void *)tr);
    PS_OK(c, par_trace_write(&tr, 1, path));
    PS_CHECK(c, tj_load(path, &t) == 0 && tj_first_malformed(&t) < 0, "%s: %s", path, t.error);
    remove(path);
    PS_CHECK(c, tj_count_spans(&t, rank, "comm") == 6, "%d comm spans, want 6", tj_count_spans(&t, rank, "comm"));
    for (b = 0; b < 6; b++) {
        char name[64];
        snprintf(name, sizeof name, "all_reduce bucket %d", b);
        at[b] = -1.0;
        for (i = 0; i < t.count; i++)
            if (!strcmp(t.events[i].name, name) && !strcmp(t.events[i].cat, "comm")) at[b] = t.events[i].ts;
    }
    for (i = 1; i < 6; i++)
        PS_CHECK(c, at[want[i - 1]] >= 0 && at[want[i - 1]] < at[want[i]], "bucket %d launched at %.3f us, not before "
                 "bucket %d (%.3f us): not the backward's order", want[i - 1], at[want[i - 1]], want[i], at[want[i]]);
done:
    tj_free(&t);
    par_params_destroy(ps), par_trace_destroy(tr);
}

/* The parallel options out of argv, the rest left in order. Local: rank 0 only. */
static void pl_args(ps_counts *c) {
    char *argv[] = {"prog", "--steps", "3", "--dp", "2", "--trace", "t.json", "--tp", "4", "--zero", "1", "--out", "x",
                    NULL};
    char *none[] = {"prog", NULL}, *bad[] = {"prog", "--dp", "0", NULL}, *nan_tp[] = {"prog", "--tp", "2x", NULL};
    char *z3[] = {"prog", "--zero", "3", NULL}, *last[] = {"prog", "--steps", "3", "--dp", NULL};
    int argc = 13, one = 1, three = 3, five = 5;
    par_args a;
    PS_OK(c, par_args_take(&a, &argc, argv));
    PS_CHECK(c, argc == 5 && !strcmp(argv[1], "--steps") && !strcmp(argv[2], "3") && !strcmp(argv[3], "--out") &&
                    !strcmp(argv[4], "x") && argv[5] == NULL, "argv left: %d arguments", argc);
    PS_CHECK(c, a.dp == 2 && a.tp == 4 && a.zero == 1 && a.trace && !strcmp(a.trace, "t.json") &&
                    !strcmp(a.mesh, "dp=2,tp=4"), "took dp %d tp %d zero %d mesh %s", a.dp, a.tp, a.zero, a.mesh);
    PS_OK(c, par_args_take(&a, &one, none));
    PS_CHECK(c, one == 1 && a.dp == 1 && a.tp == 1 && a.zero == 0 && !a.trace && !strcmp(a.mesh, "dp=1,tp=1"),
             "defaults: dp %d tp %d zero %d mesh %s", a.dp, a.tp, a.zero, a.mesh);
    PS_ERR(c, par_args_take(&a, &three, bad), PAR_EINVAL, "--dp \"0\" is not a whole number in 1..");
    PS_ERR(c, par_args_take(&a, &three, nan_tp), PAR_EINVAL, "--tp \"2x\" is not a whole number");
    PS_ERR(c, par_args_take(&a, &three, z3), PAR_EINVAL, "--zero \"3\" is not a whole number in 0..2");
    PS_ERR(c, par_args_take(&a, &five, last), PAR_EINVAL, "--dp needs a value");
}

/* par_tp_desc without strategies: Megatron's dp x tp ones, the same linears. */
static void pl_tp_defaults(par_ctx *ctx, ps_counts *c) {
    const int named = par_mesh_dev_dim(par_ctx_mesh(ctx), "dp") >= 0 && par_mesh_dev_dim(par_ctx_mesh(ctx), "tp") >= 0;
    par_tp *a = NULL, *b = NULL;
    par_linear la, lb, ra, rb;
    par_tp_info ia, ib;
    if (!named) {
        PS_CHECK(c, par_tp_create(ctx, &(par_tp_desc){.rows = 8, .hidden = 8}, &a) != PAR_OK && !a,
                 "default strategies on a mesh without dp and tp axes must be refused");
        return;
    }
    PS_ERR(c, par_tp_create(ctx, &(par_tp_desc){.rows = 8, .hidden = 8, .column = "((dp,1),(tp,1))"}, &a), PAR_EINVAL,
           "the row strategy is NULL but the column one is given");
    PS_OK(c, par_tp_create(ctx, &(par_tp_desc){.rows = 8, .hidden = 8}, &a));
    PS_OK(c, par_tp_create(ctx, &(par_tp_desc){.rows = 8, .hidden = 8, .column = "((dp,1),(tp,1))",
                                               .row = "((dp,tp),(1,tp))"}, &b));
    if (!a || !b) goto done;
    PS_OK(c, par_tp_linear(a, "c", PAR_LINEAR_COLUMN, 8, 16, &la));
    PS_OK(c, par_tp_linear(b, "c", PAR_LINEAR_COLUMN, 8, 16, &lb));
    PS_OK(c, par_tp_linear(a, "r", PAR_LINEAR_ROW, 16, 8, &ra));
    PS_OK(c, par_tp_linear(b, "r", PAR_LINEAR_ROW, 16, 8, &rb));
    PS_OK(c, par_tp_get_info(a, &ia));
    PS_OK(c, par_tp_get_info(b, &ib));
    PS_CHECK(c, la.out_local == lb.out_local && la.out_start == lb.out_start && ra.in_local == rb.in_local &&
                    ia.degree == ib.degree && ia.index == ib.index && ia.data_degree == ib.data_degree,
             "defaults differ from the explicit strategies: out_local %lld vs %lld", (long long)la.out_local,
             (long long)lb.out_local);
done:
    par_tp_destroy(a), par_tp_destroy(b);
}

static int params_suite_run(par_ctx *ctx, int *passed) {
    ps_counts c;
    const par_mesh *m = par_ctx_mesh(ctx);
    memset(&c, 0, sizeof c);
    c.rank = par_ctx_rank(ctx);
    ps_params_cases(ctx, &c);
    ps_params_bad(ctx, &c);
    ph_cases(ctx, &c);
    ph_bad(ctx, &c);
    pl_cases(ctx, &c);
    pl_launch_order(ctx, &c);
    pl_tp_defaults(ctx, &c);
    if (c.rank == 0) pl_args(&c);
    if (m->ndim == 2 || (m->ndim == 1 && strcmp(m->names[0], "tp") == 0)) {
        int sp, vp;
        for (sp = 0; sp < 2; sp++)
            for (vp = 0; vp < 2; vp++) ts_case(ctx, sp, vp, &c);
        for (sp = 0; sp < 2; sp++)
            for (vp = 1; vp <= TC_MAXK; vp++) tc_case(ctx, sp, vp, &c);
    }
    *passed = c.passed;
    return c.failed;
}

#endif
