/* tests/test_mixed.c - mixed precision and loss scaling in >>params.

   Oracles that do not share the implementation's path:
   - the f32 master of a bf16/f16 set follows exactly the f32 set's
     weights when the gradients do not depend on the weights (a linear
     loss): the same f32 AdamW on the same f32 gradients; checked bit for
     bit without ZeRO and with ZeRO-1 and ZeRO-2 over 4 ranks (the master
     then a shard per rank), and on a dp x tp mesh;
   - the compute copy is the master rounded to nearest even, by a converter
     written here from the IEEE formats (not the library's);
   - bytes per parameter from par_params_memory: 16 in f32; 18 in bf16
     (2 + 4 + 4 + 8); ZeRO-1 over 4 ranks 2 + 4 + 4 / 4 + 12 / 4;
   - gradients in the compute type (grad_dtype): accumulated over two
     micro-batches and reduced in bf16 / f16 (values exact in both), the
     master equal to the f32-gradient run's; their bytes;
   - dynamic loss scaling: the scale sequence and skipped steps follow
     PyTorch's GradScaler update rule (aten/src/ATen/native/AmpKernels.cpp,
     _amp_update_scale_: on inf/nan scale *= backoff and the growth tracker
     restarts; else the tracker counts and at growth_interval scale *= growth
     if finite, tracker 0), worked out by hand below; an inf on one rank
     skips the step on every rank with nothing changed but the scale, and
     the run equals an f32 run without that step;
   - a sharded checkpoint of a bf16 ZeRO-1 set loads into f32 and bf16 sets
     of other shapes with the same master;
   - bad input: each refusal's sentence. */
#define _POSIX_C_SOURCE 200809L
#include "test.h"
#include "half.h"
#include <math.h>
#include <stdlib.h>

#define STEPS 6
#define NP 3
static const int64_t shapes[NP][2] = {{8, 6}, {4, 5}, {12, 1}}; /* 48, 20, 12 elements */

static uint16_t ref_bf16(float f) { return half_round(PAR_BF16, f); }
static uint16_t ref_f16(float f) { return half_round(PAR_F16, f); }

static double dec16_test(par_dtype t, uint16_t h) { return half_value(t, h); }

/* The gradient of element e of parameter i at step s on data rank r: a
   linear loss, so it does not read the weights; exactly representable. */
static float grad_of(int s, int r, int i, int64_t e) {
    return (float)(((s * 7 + r * 3 + i * 5 + (int)e * 11) % 23) - 11) / 64.0f;
}

typedef struct job {
    const char *mesh;
    par_dtype dtype, grad_dtype;
    int micro;                        /* micro-batches a step (0 = 1) */
    int zero, skip_step, skip_rank;   /* skip_step >= 0: an inf gradient there (loss scaling on) */
    int omit_step;                    /* the reference: no step at all here */
    int growth_interval;
    float whole[NP][96];              /* rank 0's gathered f32 values after the run */
    uint16_t cvals[8][NP][96];        /* every rank's compute copy */
    float scales[STEPS];
    int skipped[STEPS];
    int64_t mem[8][PAR_MEM_CATEGORY_COUNT];
    int64_t numel_total;
    int bad[8];
    const char *save_dir, *load_dir;
} job;

static par_status make_set(par_ctx *ctx, par_dtype dtype, par_dtype grad_dtype, int zero, par_params **ps,
                           par_layout *batch) {
    par_param_desc pd[NP];
    par_params_desc d;
    const par_mesh *mesh = par_ctx_mesh(ctx);
    int64_t bshape[1] = {8};
    int i;
    memset(pd, 0, sizeof pd);
    memset(&d, 0, sizeof d);
    for (i = 0; i < NP; i++) {
        static const char *const names[NP] = {"a", "b", "c"};
        pd[i].name = names[i], pd[i].new_bucket = 1;
        RETURN_IF_ERR(par_layout_parse(&pd[i].layout, mesh, 2, shapes[i], "[None,None]"));
    }
    RETURN_IF_ERR(par_layout_parse(batch, mesh, 1, bshape, "[dp]"));
    d.params = pd, d.num_params = NP, d.batch = batch, d.zero_level = zero, d.compute_dtype = dtype;
    d.grad_dtype = grad_dtype;
    d.bucket_bytes = -1;
    return par_params_create(ctx, &d, ps);
}

static par_status rank_body(par_ctx *ctx, void *arg) {
    job *j = (job *)arg;
    const int rank = par_ctx_rank(ctx);
    par_params *ps = NULL;
    par_layout batch;
    par_adamw o;
    par_loss_scale ls;
    par_step_stats st;
    int s, i, shard = 0, shards = 1;
    int64_t e;
    par_status rc;
    memset(&o, 0, sizeof o);
    o.lr = 1e-2f, o.beta1 = 0.9f, o.beta2 = 0.99f, o.eps = 1e-8f, o.weight_decay = 0.1f;
    memset(&ls, 0, sizeof ls);
    ls.growth_interval = j->growth_interval;
    RETURN_IF_ERR(make_set(ctx, j->dtype, j->grad_dtype, j->zero, &ps, &batch));
    if (j->load_dir) {
        if ((rc = par_params_load(ps, j->load_dir, NULL)) != PAR_OK) return par_params_destroy(ps), rc;
        goto report;
    }
    RETURN_IF_ERR(par_params_data_shard(ps, &shard, &shards));
    for (i = 0; i < NP; i++) { /* initial weights, set on every rank alike */
        float init[96];
        for (e = 0; e < shapes[i][0] * shapes[i][1]; e++) init[e] = (float)((int)(e * 13 + i) % 17 - 8) / 16.0f;
        RETURN_IF_ERR(par_params_set_local(ps, PAR_PARAM_VALUE, i, init));
    }
    RETURN_IF_ERR(par_params_broadcast(ps));
    for (s = 0; s < STEPS; s++) {
        const int micro = j->micro ? j->micro : 1;
        int mb;
        if (s == j->omit_step) continue;
        for (mb = 0; mb < micro; mb++) {
            RETURN_IF_ERR(par_params_grads_begin(ps, mb, micro));
            for (i = 0; i < NP; i++) {
                void *g;
                RETURN_IF_ERR(par_params_grad_ptr(ps, i, &g));
                for (e = 0; e < shapes[i][0] * shapes[i][1]; e++) {
                    /* the host's loss scaling: scale x the gradient (exact: a power of 2); every value, sum
                       and mean here is a small multiple of 1/64: exact in bf16 and f16 too */
                    float v = grad_of(s + mb, shard, i, e) * (j->skip_step >= 0 ? ls.scale ? ls.scale : 65536.0f : 1.0f);
                    if (s == j->skip_step && rank == j->skip_rank && i == 1 && e == 3) v = INFINITY;
                    if (j->grad_dtype == PAR_F32) ((float *)g)[e] += v;
                    else { /* accumulate in the type, as a 16-bit host does */
                        uint16_t *h = (uint16_t *)g;
                        const float sum = (float)dec16_test(j->grad_dtype, h[e]) + v;
                        h[e] = j->grad_dtype == PAR_BF16 ? ref_bf16(sum) : ref_f16(sum);
                    }
                }
                RETURN_IF_ERR(par_params_grad_ready(ps, i));
            }
            RETURN_IF_ERR(par_params_grads_wait(ps));
        }
        RETURN_IF_ERR(par_params_step_scaled(ps, &o, j->skip_step >= 0 ? &ls : NULL, &st));
        j->scales[s] = st.loss_scale, j->skipped[s] = st.skipped;
    }
report:
    for (i = 0; i < NP; i++) {
        const void *cv = par_params_compute_value(ps, i);
        const int64_t n = shapes[i][0] * shapes[i][1];
        RETURN_IF_ERR(par_params_gather(ps, PAR_PARAM_VALUE, i, rank == 0 ? j->whole[i] : NULL));
        if (j->dtype != PAR_F32) memcpy(j->cvals[rank][i], cv, (size_t)n * 2);
    }
    if (j->save_dir) {
        par_ckpt_desc cd;
        memset(&cd, 0, sizeof cd);
        cd.dir = j->save_dir, cd.step = 1;
        RETURN_IF_ERR(par_params_save(ps, &cd));
    }
    RETURN_IF_ERR(par_params_memory(ps, j->mem[rank]));
    j->numel_total = 0;
    for (i = 0; i < NP; i++) j->numel_total += shapes[i][0] * shapes[i][1];
    par_params_destroy(ps);
    return PAR_OK;
}

static int run(const char *mesh, int n, job *j) {
    par_ctx_desc d;
    memset(&d, 0, sizeof d);
    d.mesh = mesh, d.timeout_ms = 20000, d.kernel_threads = 1;
    j->mesh = mesh;
    return par_run_threads_desc(&d, n, rank_body, j) == PAR_OK;
}

static job *new_job(par_dtype dt, int zero) {
    job *j = (job *)calloc(1, sizeof(job));
    if (!j) abort();
    j->dtype = dt, j->grad_dtype = PAR_F32, j->zero = zero, j->skip_step = -1, j->omit_step = -1, j->skip_rank = -1;
    return j;
}

static int same_weights(const job *a, const job *b) {
    int i;
    for (i = 0; i < NP; i++)
        if (memcmp(a->whole[i], b->whole[i], (size_t)(shapes[i][0] * shapes[i][1]) * sizeof(float))) return 0;
    return 1;
}

/* Every rank's compute copy is its master rounded (replicated parameters: the whole tensor). */
static int compute_copies_match(const job *j, int ranks) {
    int r, i;
    int64_t e;
    for (r = 0; r < ranks; r++)
        for (i = 0; i < NP; i++)
            for (e = 0; e < shapes[i][0] * shapes[i][1]; e++) {
                const uint16_t want = j->dtype == PAR_BF16 ? ref_bf16(j->whole[i][e]) : ref_f16(j->whole[i][e]);
                if (j->cvals[r][i][e] != want) return 0;
            }
    return 1;
}

static void test_master_follows_f32(void) {
    static const struct {
        const char *mesh;
        int n, zero;
        par_dtype dt;
    } cases[] = {{"dp=1", 1, 0, PAR_BF16}, {"dp=4", 4, 0, PAR_BF16}, {"dp=4", 4, 1, PAR_BF16},
                 {"dp=4", 4, 2, PAR_BF16}, {"dp=2,tp=2", 4, 1, PAR_BF16}, {"dp=4", 4, 1, PAR_F16}};
    size_t c;
    for (c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        job *ref = new_job(PAR_F32, cases[c].zero), *mix = new_job(cases[c].dt, cases[c].zero);
        CHECK_MSG(run(cases[c].mesh, cases[c].n, ref), "%s f32: %s", cases[c].mesh, par_last_error());
        if (cases[c].dt == PAR_F16) mix->skip_step = STEPS + 1, mix->growth_interval = -1; /* f16 needs a (here fixed) scale */
        CHECK_MSG(run(cases[c].mesh, cases[c].n, mix), "%s %s: %s", cases[c].mesh, par_dtype_name(cases[c].dt),
                  par_last_error());
        CHECK_MSG(same_weights(ref, mix), "%s zero %d %s: the master differs from the f32 run", cases[c].mesh,
                  cases[c].zero, par_dtype_name(cases[c].dt));
        CHECK_MSG(compute_copies_match(mix, cases[c].n), "%s zero %d %s: a compute copy is not the master rounded",
                  cases[c].mesh, cases[c].zero, par_dtype_name(cases[c].dt));
        free(ref), free(mix);
    }
}

/* Gradients in the compute type (grad_dtype): accumulated over micro-batches and reduced in
   bf16 / f16, widened for AdamW. The values are exact in both types, so the master equals the
   f32-gradient run's bit for bit; ZeRO 0, 1 and 2 (its fold), 2 micro-batches, dp x tp. The
   gradients cost 2 bytes a parameter, plus the f32 copy AdamW reads (whole without ZeRO, a
   shard with it). */
static void test_grads_in_compute_type(void) {
    static const struct {
        const char *mesh;
        int n, zero;
        par_dtype dt;
    } cases[] = {{"dp=4", 4, 0, PAR_BF16}, {"dp=4", 4, 1, PAR_BF16}, {"dp=4", 4, 2, PAR_BF16},
                 {"dp=2,tp=2", 4, 2, PAR_F16}, {"dp=1", 1, 1, PAR_BF16}};
    size_t c;
    for (c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        job *ref = new_job(cases[c].dt, cases[c].zero), *g16 = new_job(cases[c].dt, cases[c].zero);
        int64_t want;
        ref->micro = g16->micro = 2;
        g16->grad_dtype = cases[c].dt;
        if (cases[c].dt == PAR_F16) ref->skip_step = g16->skip_step = STEPS + 1, ref->growth_interval = g16->growth_interval = -1;
        CHECK_MSG(run(cases[c].mesh, cases[c].n, ref), "%s f32 grads: %s", cases[c].mesh, par_last_error());
        CHECK_MSG(run(cases[c].mesh, cases[c].n, g16), "%s %s grads: %s", cases[c].mesh, par_dtype_name(cases[c].dt),
                  par_last_error());
        CHECK_MSG(same_weights(ref, g16), "%s zero %d: 16-bit gradients trained another master", cases[c].mesh,
                  cases[c].zero);
        CHECK_MSG(compute_copies_match(g16, cases[c].n), "%s zero %d: compute copies", cases[c].mesh, cases[c].zero);
        /* grads: 2 bytes (the 16-bit buffer; ZeRO-2: its slots) plus the f32 the optimizer reads */
        if (cases[c].zero == 1 && cases[c].n == 4)
            want = 2 * g16->numel_total + 4 * g16->numel_total / 4;
        else if (cases[c].zero == 0)
            want = 6 * g16->numel_total;
        else
            want = -1;
        if (want >= 0)
            CHECK_MSG(g16->mem[0][PAR_MEM_GRADS] == want, "%s zero %d: %lld gradient bytes, want %lld", cases[c].mesh,
                      cases[c].zero, (long long)g16->mem[0][PAR_MEM_GRADS], (long long)want);
        free(ref), free(g16);
    }
}

static void test_bytes_per_parameter(void) {
    job *f32 = new_job(PAR_F32, 0), *b0 = new_job(PAR_BF16, 0), *b1 = new_job(PAR_BF16, 1);
    int64_t sum32 = 0, sum0 = 0, sum1 = 0;
    int k;
    CHECK(run("dp=4", 4, f32) && run("dp=4", 4, b0) && run("dp=4", 4, b1));
    for (k = 0; k < PAR_MEM_CATEGORY_COUNT; k++) sum32 += f32->mem[0][k], sum0 += b0->mem[0][k], sum1 += b1->mem[0][k];
    /* 80 elements, every bucket a multiple of 4: no padding */
    CHECK_MSG(sum32 == 16 * f32->numel_total, "f32: %lld bytes for %lld parameters", (long long)sum32, (long long)f32->numel_total);
    CHECK_MSG(sum0 == 18 * b0->numel_total, "bf16: %lld bytes for %lld parameters", (long long)sum0, (long long)b0->numel_total);
    /* ZeRO-1 over 4: the bf16 copy 2, the f32 gradient 4 and its reduce-scattered shard 4 / 4, master and
       moments 12 / 4 */
    CHECK_MSG(sum1 == (2 + 4 + 1 + 3) * b1->numel_total, "bf16 ZeRO-1 over 4: %lld bytes for %lld parameters",
              (long long)sum1, (long long)b1->numel_total);
    CHECK_MSG(b0->mem[0][PAR_MEM_PARAMS] == 2 * b0->numel_total && b0->mem[0][PAR_MEM_GRADS] == 4 * b0->numel_total &&
                  b0->mem[0][PAR_MEM_OPTIMIZER] == 12 * b0->numel_total,
              "bf16 categories: params %lld, grads %lld, optimizer %lld", (long long)b0->mem[0][PAR_MEM_PARAMS],
              (long long)b0->mem[0][PAR_MEM_GRADS], (long long)b0->mem[0][PAR_MEM_OPTIMIZER]);
    free(f32), free(b0), free(b1);
}

static void test_loss_scaling(void) {
    /* growth_interval 2; an inf on rank 2 at step 3. GradScaler's rule from 65536:
       step 0 good (tracker 1), 1 good (2 = interval: x2 -> 131072, tracker 0), 2 good (1),
       3 inf (skip, x0.5 -> 65536, tracker 0), 4 good (1), 5 good (2: x2 -> 131072) */
    static const float want_scale[STEPS] = {65536, 131072, 131072, 65536, 65536, 131072};
    static const int want_skip[STEPS] = {0, 0, 0, 1, 0, 0};
    job *mix = new_job(PAR_F16, 1), *ref = new_job(PAR_F32, 1);
    int s, ok = 1;
    mix->skip_step = 3, mix->skip_rank = 2, mix->growth_interval = 2;
    ref->omit_step = 3;
    CHECK_MSG(run("dp=4", 4, mix), "f16 scaled: %s", par_last_error());
    CHECK_MSG(run("dp=4", 4, ref), "f32 without step 3: %s", par_last_error());
    for (s = 0; s < STEPS; s++) ok &= mix->scales[s] == want_scale[s] && mix->skipped[s] == want_skip[s];
    CHECK_MSG(ok, "scale sequence %g %g %g %g %g %g, skipped %d%d%d%d%d%d", (double)mix->scales[0], (double)mix->scales[1],
              (double)mix->scales[2], (double)mix->scales[3], (double)mix->scales[4], (double)mix->scales[5],
              mix->skipped[0], mix->skipped[1], mix->skipped[2], mix->skipped[3], mix->skipped[4], mix->skipped[5]);
    CHECK_MSG(same_weights(mix, ref), "the skipped step changed the master (or unscaling is not exact)");
    CHECK_MSG(compute_copies_match(mix, 4), "f16 compute copies");
    free(mix), free(ref);
}

static void test_checkpoint_across(void) {
    char dir[] = "/tmp/par_mixed_XXXXXX", cmd[128];
    job *src = new_job(PAR_BF16, 1), *into32 = new_job(PAR_F32, 0), *into16 = new_job(PAR_BF16, 2);
    if (!mkdtemp(dir)) {
        CHECK_MSG(0, "mkdtemp");
        return;
    }
    src->save_dir = dir;
    into32->load_dir = dir, into16->load_dir = dir;
    CHECK_MSG(run("dp=4", 4, src), "save: %s", par_last_error());
    CHECK_MSG(run("dp=1", 1, into32), "load into f32 dp 1: %s", par_last_error());
    CHECK_MSG(run("dp=2", 2, into16), "load into bf16 ZeRO-2 dp 2: %s", par_last_error());
    CHECK_MSG(same_weights(src, into32) && same_weights(src, into16), "the master did not survive the checkpoint");
    CHECK_MSG(compute_copies_match(into16, 2), "the loaded set's compute copies");
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    free(src), free(into32), free(into16);
}

static par_status bad_body(par_ctx *ctx, void *arg) {
    par_params *ps = NULL;
    par_layout batch;
    par_adamw o;
    par_loss_scale ls;
    float *g32;
    (void)arg;
    memset(&o, 0, sizeof o);
    o.lr = 1e-3f, o.beta1 = 0.9f, o.beta2 = 0.99f, o.eps = 1e-8f;
    CHECK_ERR(make_set(ctx, PAR_I32, PAR_F32, 0, &ps, &batch), PAR_EINVAL,
              "par_params_create: compute_dtype i32: the weights compute in f32, bf16 or f16");
    CHECK_ERR(make_set(ctx, PAR_BF16, PAR_F16, 0, &ps, &batch), PAR_EINVAL,
              "par_params_create: grad_dtype f16: gradients are f32 or the compute_dtype (bf16)");
    CHECK_ERR(make_set(ctx, PAR_F32, PAR_BF16, 0, &ps, &batch), PAR_EINVAL, "grad_dtype bf16");
    RETURN_IF_ERR(make_set(ctx, PAR_BF16, PAR_BF16, 1, &ps, &batch));
    RETURN_IF_ERR(par_params_grads_begin(ps, 0, 1));
    CHECK_ERR(par_params_grad(ps, 0, &g32), PAR_EINVAL, "the set's gradients are bf16 (grad_dtype): use par_params_grad_ptr");
    par_params_destroy(ps);
    RETURN_IF_ERR(make_set(ctx, PAR_F16, PAR_F32, 0, &ps, &batch));
    CHECK(par_params_value(ps, 0) == NULL && strstr(par_last_error(), "mixed precision"));
    CHECK_INT(par_params_compute_dtype(ps), PAR_F16);
    CHECK_ERR(par_params_step(ps, &o, NULL), PAR_EINVAL, "compute_dtype f16 needs a loss scale");
    memset(&ls, 0, sizeof ls);
    ls.backoff_factor = 1.5f;
    CHECK_ERR(par_params_step_scaled(ps, &o, &ls, NULL), PAR_EINVAL, "backoff_factor 1.5 must be in (0, 1)");
    memset(&ls, 0, sizeof ls);
    ls.scale = -1;
    CHECK_ERR(par_loss_scale_init(&ls), PAR_EINVAL, "scale -1 must be finite and > 0");
    memset(&ls, 0, sizeof ls);
    CHECK_OK(par_loss_scale_init(&ls));
    CHECK(ls.scale == 65536.0f && ls.growth_factor == 2.0f && ls.backoff_factor == 0.5f && ls.growth_interval == 2000);
    par_params_destroy(ps);
    return PAR_OK;
}

static void test_bad_input(void) {
    par_ctx_desc d;
    par_compute_table t;
    par_cpu_desc cd;
    memset(&d, 0, sizeof d);
    d.mesh = "dp=1", d.kernel_threads = 1;
    CHECK_OK(par_run_threads_desc(&d, 1, bad_body, NULL));
    /* a table without convert cannot keep a compute copy */
    memset(&cd, 0, sizeof cd);
    CHECK_OK(par_compute_cpu(&cd, &t));
    t.convert = NULL, d.compute = &t;
    {
        job *j = new_job(PAR_BF16, 0);
        par_ctx_desc d2 = d;
        d2.compute = &t;
        CHECK(par_run_threads_desc(&d2, 1, rank_body, j) != PAR_OK &&
              strstr(par_last_error(), "compute_dtype bf16 needs the compute table's convert hook"));
        free(j);
    }
    t.destroy(t.user);
}

int main(void) {
    test_master_follows_f32();
    test_bytes_per_parameter();
    test_grads_in_compute_type();
    test_loss_scaling();
    test_checkpoint_across();
    test_bad_input();
    return TEST_END("mixed");
}
