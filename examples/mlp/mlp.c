/* examples/mlp/mlp.c - a two-layer MLP trained with data parallel, tensor
   parallel and ZeRO through parallel.h, in one file (build/mlp).

   The model: y = relu(x W1^T) W2^T, W1 [hidden, in] column-parallel, W2
   [out, hidden] row-parallel (Megatron's MLP), mean squared error against a
   fixed random teacher. Everything parallel comes from the header:
     - par_launch: threads in this process, or one rank per process under mpirun
     - par_tp: the linears placed by MindSpore strategies, the row-parallel
       output summed over the tensor-parallel ranks (par_tp_reduce_rows)
     - par_params: gradients reduced in buckets over the data-parallel ranks,
       ZeRO-1/2, AdamW, whole tensors gathered for the output file
   This file holds only the model math and the configuration.

     build/mlp --dp 2 --tp 2 --zero 1 --steps 20 --out w.safetensors
     mpirun -np 4 build/mlp --dp 2 --tp 2 --steps 20

   It prints one line per step ("step 3 loss 0.123456789") and, with --out,
   rank 0 writes the final weights (safetensors, W1 and W2 whole). */
#define PARALLEL_IMPLEMENTATION
#include "parallel.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { IN = 8, HIDDEN = 16, OUT = 4, BATCH = 16, DATA = 64 }; /* BATCH: global samples per step, of DATA */

typedef struct config {
    int dp, tp, zero, steps, micro;
    const char *out;
} config;

static double hash01(uint64_t a, uint64_t b) { /* a fixed pseudo-random value in [-1, 1) */
    uint64_t z = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull) * 0xBF58476D1CE4E5B9ull;
    z ^= z >> 31, z *= 0xD6E8FEB86659FD93ull, z ^= z >> 29;
    return (double)(z >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}
static float input(int64_t sample, int64_t j) { return (float)hash01(1000 + (uint64_t)(sample % DATA), (uint64_t)j); }
static float target(int64_t sample, int64_t k) { /* the teacher: tanh of a fixed projection */
    double s = 0.0;
    for (int j = 0; j < IN; j++) s += hash01(7, (uint64_t)(k * IN + j)) * input(sample, j);
    return (float)tanh(s);
}

/* C[m,n] = A[m,k] B[n,k]^T (transb) or A^T-products through the compute table. */
static par_status gemm(const par_compute_table *ct, int ta, int tb, int64_t m, int64_t n, int64_t k, float beta,
                       const float *a, const float *b, float *c) {
    par_gemm_desc d = {0};
    d.transa = ta, d.transb = tb, d.m = m, d.n = n, d.k = k, d.alpha = 1.0f, d.beta = beta;
    return ct->gemm(ct->user, &d, a, b, c);
}

#define TRY(call) do { par_status s_ = (call); if (s_ != PAR_OK) { st = s_; goto done; } } while (0)

static par_status rank_main(par_ctx *ctx, void *arg) {
    const config *c = (const config *)arg;
    const par_compute_table *ct = par_ctx_compute(ctx);
    const int64_t batch_shape[2] = {BATCH, IN};
    par_tp_desc td = {0};
    par_params_desc pd = {0};
    par_param_desc w[2];
    par_tp *tp = NULL;
    par_params *ps = NULL;
    par_linear l1, l2;
    par_layout batch;
    par_param_info info;
    float *x = NULL, *a = NULL, *y = NULL, *dy = NULL, *dh = NULL, *whole = NULL;
    int shard = 0, shards = 1, step, mb, i;
    int64_t n, r, j, local[PARALLEL_MAX_DIMS];
    par_status st = PAR_OK;
    /* strategies, MindSpore style, on the mesh "dp=..,tp=..": rows over dp;
       W1's out (column-parallel) and W2's in (row-parallel) over tp */
    td.rows = BATCH / c->micro, td.hidden = IN, td.column = "((dp,1),(tp,1))", td.row = "((dp,tp),(1,tp))";
    TRY(par_tp_create(ctx, &td, &tp));
    TRY(par_tp_linear(tp, "w1", PAR_LINEAR_COLUMN, IN, HIDDEN, &l1));
    TRY(par_tp_linear(tp, "w2", PAR_LINEAR_ROW, HIDDEN, OUT, &l2));
    TRY(par_tp_linear_param(&l1, "w1", &w[0]));
    TRY(par_tp_linear_param(&l2, "w2", &w[1]));
    TRY(par_layout_parse(&batch, par_ctx_mesh(ctx), 2, batch_shape, "[dp,None]"));
    pd.params = w, pd.num_params = 2, pd.batch = &batch, pd.zero_level = c->zero;
    TRY(par_params_create(ctx, &pd, &ps));
    TRY(par_params_data_shard(ps, &shard, &shards));
    par_layout_local_shape(&batch, local);
    n = local[0] / c->micro; /* this rank's samples (its slice of the batch), per micro-batch */
    /* init: every rank draws its slice of N(0, 0.3)-ish weights from the global index */
    for (i = 0; i < 2; i++) {
        float *v;
        TRY(par_params_get_info(ps, i, &info));
        v = (float *)malloc((size_t)info.numel * sizeof(float));
        if (!v) { st = par_set_error(PAR_ENOMEM, "out of memory"); goto done; }
        for (j = 0; j < info.numel; j++) {
            const int64_t gr = info.start[0] + j / info.local_shape[1], gc = info.start[1] + j % info.local_shape[1];
            v[j] = (float)(0.5 * hash01(100 + (uint64_t)i, (uint64_t)(gr * info.layout.shape[1] + gc)));
        }
        st = par_params_set_local(ps, PAR_PARAM_VALUE, i, v);
        free(v);
        if (st != PAR_OK) goto done;
    }
    x = (float *)malloc((size_t)(n * IN) * 4), a = (float *)malloc((size_t)(n * HIDDEN) * 4);
    y = (float *)malloc((size_t)(n * OUT) * 4), dy = (float *)malloc((size_t)(n * OUT) * 4);
    dh = (float *)malloc((size_t)(n * HIDDEN) * 4);
    if (!x || !a || !y || !dy || !dh) { st = par_set_error(PAR_ENOMEM, "out of memory"); goto done; }
    for (step = 0; step < c->steps; step++) {
        par_adamw opt = {1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f, 1.0f, 0};
        double loss = 0.0, count = 0.0;
        for (mb = 0; mb < c->micro; mb++) {
            float *g1, *g2;
            TRY(par_params_grads_begin(ps, mb, c->micro));
            /* this rank's samples: shard s of S takes samples i*S + s (round robin) */
            for (r = 0; r < n; r++)
                for (j = 0; j < IN; j++) x[r * IN + j] = input(step * BATCH + (mb * n + r) * shards + shard, j);
            /* forward: a = relu(x W1^T) on this rank's hidden columns; y = sum over tp of a W2^T */
            TRY(gemm(ct, 0, 1, n, l1.out_local, IN, 0.0f, x, par_params_value(ps, 0), a));
            for (j = 0; j < n * l1.out_local; j++) a[j] = a[j] > 0 ? a[j] : 0.0f;
            TRY(gemm(ct, 0, 1, n, OUT, l2.in_local, 0.0f, a, par_params_value(ps, 1), y));
            /* no sequence parallelism: the sum lands in y itself (out NULL says so) */
            TRY(par_tp_reduce_rows(tp, n, OUT, y, NULL, NULL));
            /* loss 1/2 (y - t)^2 per output, averaged over all of the global batch's outputs */
            for (r = 0; r < n; r++)
                for (j = 0; j < OUT; j++) {
                    const float e = y[r * OUT + j] - target(step * BATCH + (mb * n + r) * shards + shard, j);
                    loss += 0.5 * e * e, count += 1.0;
                    dy[r * OUT + j] = e / (float)(n * OUT * c->micro);
                }
            /* backward: dW2 += dy^T a; dh = dy W2 (masked by relu); dW1 += dh^T x */
            TRY(par_params_grad(ps, 1, &g2));
            TRY(gemm(ct, 1, 0, OUT, l2.in_local, n, 1.0f, dy, a, g2));
            TRY(gemm(ct, 0, 0, n, l2.in_local, OUT, 0.0f, dy, par_params_value(ps, 1), dh));
            TRY(par_params_grad_ready(ps, 1));
            for (j = 0; j < n * l1.out_local; j++) dh[j] = a[j] > 0 ? dh[j] : 0.0f;
            TRY(par_params_grad(ps, 0, &g1));
            TRY(gemm(ct, 1, 0, l1.out_local, IN, n, 1.0f, dh, x, g1));
            TRY(par_params_grad_ready(ps, 0));
            TRY(par_params_grads_wait(ps));
        }
        TRY(par_params_reduce_loss(ps, &loss, &count));
        TRY(par_params_step(ps, &opt, NULL));
        if (par_ctx_rank(ctx) == 0) printf("step %d loss %.9g\n", step, loss / count);
    }
    if (c->out) { /* the whole weights, gathered, written by rank 0 */
        par_st_writer *wr = NULL;
        const int64_t shape[2][2] = {{HIDDEN, IN}, {OUT, HIDDEN}};
        whole = (float *)malloc((size_t)(HIDDEN * IN + OUT * HIDDEN) * sizeof(float));
        if (!whole) { st = par_set_error(PAR_ENOMEM, "out of memory"); goto done; }
        TRY(par_params_gather(ps, PAR_PARAM_VALUE, 0, whole));
        TRY(par_params_gather(ps, PAR_PARAM_VALUE, 1, whole + HIDDEN * IN));
        if (par_ctx_rank(ctx) == 0) {
            TRY(par_st_writer_create(c->out, &wr));
            if ((st = par_st_writer_add(wr, "w1", PAR_F32, 2, shape[0], whole)) != PAR_OK ||
                (st = par_st_writer_add(wr, "w2", PAR_F32, 2, shape[1], whole + HIDDEN * IN)) != PAR_OK) {
                par_st_writer_abort(wr);
                goto done;
            }
            TRY(par_st_writer_finish(wr));
        }
    }
done:
    free(x), free(a), free(y), free(dy), free(dh), free(whole);
    par_params_destroy(ps);
    par_tp_destroy(tp);
    return st;
}

int main(int argc, char **argv) {
    config c = {1, 1, 0, 20, 1, NULL};
    par_ctx_desc desc = {0};
    char mesh[64];
    par_status st;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int *field = !strcmp(argv[i], "--dp") ? &c.dp : !strcmp(argv[i], "--tp") ? &c.tp : !strcmp(argv[i], "--zero") ? &c.zero
                   : !strcmp(argv[i], "--steps") ? &c.steps : !strcmp(argv[i], "--micro") ? &c.micro : NULL;
        if (!strcmp(argv[i], "--help")) {
#ifdef PARALLEL_WITH_MPI
            const char *how = "threads, or mpi when launched by mpirun";
#else
            const char *how = "threads";
#endif
            return printf("usage: mlp [--dp N] [--tp N] [--zero 0|1|2] [--steps N] [--micro N] [--out FILE]\n"
                          "ranks: %s\n", how), 0;
        }
        if (!strcmp(argv[i], "--out") && v) c.out = v, i++;
        else if (field && v && (*field = atoi(v)) >= 0) i++;
        else return fprintf(stderr, "mlp: bad argument %s (--dp N --tp N --zero 0|1|2 --steps N --micro N --out FILE)\n", argv[i]), 2;
    }
    if (c.dp < 1 || c.tp < 1 || c.micro < 1 || BATCH % (c.dp * c.micro) != 0)
        return fprintf(stderr, "mlp: --dp %d x --micro %d must divide the batch of %d (and both >= 1)\n", c.dp, c.micro, BATCH), 2;
    snprintf(mesh, sizeof mesh, "dp=%d,tp=%d", c.dp, c.tp);
    desc.mesh = mesh;
    /* threads in this process, or this process's rank under mpirun */
    st = par_launch(&desc, 0, rank_main, &c);
    if (st != PAR_OK) fprintf(stderr, "mlp: %s\n", par_last_error());
    return st == PAR_OK ? 0 : 1;
}
