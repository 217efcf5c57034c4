/* tests/test_recompute.c - the recomputation policy (>>recompute).

   Mode names; every layer under `all`; MindFormers' per-stage list, checked
   against its own rule written out independently here (mindformers
   models/utils.py check_recompute_rule: layer i of pipeline stage s
   recomputes iff i < first layer of s + recompute[s]), with uneven stages
   (an offset) and with chunks (interleaved: one count per virtual stage);
   Megatron's block method (the first N layers of every stage); full and
   selective together (full wins); and each bad input's sentence. */
#include "test.h"

/* MindFormers' rule for one layer, from the stage sizes alone. */
static int mindformers_picks(const int *sizes, int nvs, const int *counts, int layer) {
    int v, first = 0;
    for (v = 0; v < nvs; v++) {
        if (layer < first + sizes[v]) return layer < first + counts[v];
        first += sizes[v];
    }
    return 0;
}

static void test_names(void) {
    par_recompute_mode m = PAR_RECOMPUTE_NONE;
    CHECK_STR(par_recompute_mode_name(PAR_RECOMPUTE_NONE), "none");
    CHECK_STR(par_recompute_mode_name(PAR_RECOMPUTE_SELECTIVE), "selective");
    CHECK_STR(par_recompute_mode_name(PAR_RECOMPUTE_FULL), "full");
    CHECK_STR(par_recompute_mode_name((par_recompute_mode)7), "?");
    CHECK_OK(par_recompute_mode_parse("Full", &m));
    CHECK_INT(m, PAR_RECOMPUTE_FULL);
    CHECK_OK(par_recompute_mode_parse("selective", &m));
    CHECK_INT(m, PAR_RECOMPUTE_SELECTIVE);
    CHECK_ERR(par_recompute_mode_parse("block", &m), PAR_EINVAL, "unknown recompute mode 'block' (expected none, selective or full)");
    CHECK_ERR(par_recompute_mode_parse(NULL, &m), PAR_EINVAL, "NULL");
}

static void test_all_and_none(void) {
    par_recompute_desc d = {0};
    par_recompute_mode modes[6];
    int i, ok = 1;
    memset(modes, 0xff, sizeof modes);
    CHECK_OK(par_recompute_layers(&d, modes, 6));
    for (i = 0; i < 6; i++) ok &= modes[i] == PAR_RECOMPUTE_NONE;
    CHECK_MSG(ok, "zero desc: every layer keeps everything");
    d.selective.all = 1;
    CHECK_OK(par_recompute_layers(&d, modes, 6));
    for (i = 0, ok = 1; i < 6; i++) ok &= modes[i] == PAR_RECOMPUTE_SELECTIVE;
    CHECK_MSG(ok, "selective.all");
    d.full.first_layers = 2; /* Megatron block method, one stage: layers 0 and 1 full, the rest selective */
    CHECK_OK(par_recompute_layers(&d, modes, 6));
    for (i = 0, ok = 1; i < 6; i++) ok &= modes[i] == (i < 2 ? PAR_RECOMPUTE_FULL : PAR_RECOMPUTE_SELECTIVE);
    CHECK_MSG(ok, "full first 2, selective the rest");
    CHECK_OK(par_recompute_layers(&d, NULL, 0)); /* no layers: nothing to write */
}

static void test_mindformers_lists(void) {
    /* pp 2 with offset 1 (1 + 3 layers), pp 4 even, and pp 2 x 2 chunks of 2, 1, 1, 2 layers */
    static const int sizes_a[] = {1, 3}, counts_a[] = {1, 2};
    static const int sizes_b[] = {2, 2, 2, 2}, counts_b[] = {2, 1, 0, 2};
    static const int sizes_c[] = {2, 1, 1, 2}, counts_c[] = {1, 1, 0, 2};
    static const struct {
        const int *sizes, *counts;
        int stages, chunks, layers;
    } cases[] = {{sizes_a, counts_a, 2, 1, 4}, {sizes_b, counts_b, 4, 1, 8}, {sizes_c, counts_c, 2, 2, 6}};
    size_t c;
    for (c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        par_recompute_desc d = {0};
        par_recompute_mode modes[8];
        int i, ok = 1;
        d.full.counts = cases[c].counts, d.full.num_counts = cases[c].stages * cases[c].chunks;
        d.stage_layers = cases[c].sizes, d.stages = cases[c].stages, d.chunks = cases[c].chunks;
        CHECK_OK(par_recompute_layers(&d, modes, cases[c].layers));
        for (i = 0; i < cases[c].layers; i++)
            ok &= modes[i] == (mindformers_picks(cases[c].sizes, d.full.num_counts, cases[c].counts, i)
                                   ? PAR_RECOMPUTE_FULL : PAR_RECOMPUTE_NONE);
        CHECK_MSG(ok, "case %d: the layers MindFormers' rule picks", (int)c);
    }
    { /* both rules as lists: full wins where both pick */
        static const int sizes[] = {3, 3}, full[] = {1, 0}, sel[] = {2, 3};
        static const par_recompute_mode want[] = {PAR_RECOMPUTE_FULL, PAR_RECOMPUTE_SELECTIVE, PAR_RECOMPUTE_NONE,
                                                  PAR_RECOMPUTE_SELECTIVE, PAR_RECOMPUTE_SELECTIVE,
                                                  PAR_RECOMPUTE_SELECTIVE};
        par_recompute_desc d = {0};
        par_recompute_mode modes[6];
        d.stage_layers = sizes, d.stages = 2;
        d.full.counts = full, d.full.num_counts = 2, d.selective.counts = sel, d.selective.num_counts = 2;
        CHECK_OK(par_recompute_layers(&d, modes, 6));
        CHECK(!memcmp(modes, want, sizeof want));
    }
}

static void test_errors(void) {
    static const int sizes[] = {2, 2}, three[] = {1, 1, 1}, neg[] = {1, -1}, over[] = {1, 3}, bad_sizes[] = {2, 3};
    par_recompute_desc d = {0};
    par_recompute_mode modes[8];
    d.stage_layers = sizes, d.stages = 2;
    d.full.counts = three, d.full.num_counts = 3;
    CHECK_ERR(par_recompute_layers(&d, modes, 4), PAR_EINVAL,
              "full recompute: a list of 3 counts for 2 pipeline stages x 1 chunk: one count per virtual stage (2)");
    d.full.counts = neg, d.full.num_counts = 2;
    CHECK_ERR(par_recompute_layers(&d, modes, 4), PAR_EINVAL, "full recompute counts[1] = -1: a count of layers is >= 0");
    d.full.num_counts = 0, d.selective.counts = over, d.selective.num_counts = 2;
    CHECK_ERR(par_recompute_layers(&d, modes, 4), PAR_EINVAL,
              "selective recompute counts[1] = 3: virtual stage 1 (stage 1, chunk 0) has 2 layers");
    d.selective.num_counts = 0, d.selective.first_layers = -2;
    CHECK_ERR(par_recompute_layers(&d, modes, 4), PAR_EINVAL, "selective recompute first_layers = -2");
    d.selective.first_layers = 0, d.stage_layers = bad_sizes;
    CHECK_ERR(par_recompute_layers(&d, modes, 4), PAR_EINVAL, "stage_layers sum to 5 layers, the model has 4");
    d.stage_layers = NULL;
    CHECK_ERR(par_recompute_layers(&d, modes, 4), PAR_EINVAL, "2 virtual stages need stage_layers");
    d.stages = 1, d.full.counts = NULL, d.full.num_counts = 1;
    CHECK_ERR(par_recompute_layers(&d, modes, 4), PAR_EINVAL, "full recompute: num_counts = 1 with counts NULL");
    CHECK_ERR(par_recompute_layers(NULL, modes, 4), PAR_EINVAL, "NULL desc");
}

int main(void) {
    test_names();
    test_all_and_none();
    test_mindformers_lists();
    test_errors();
    return TEST_END("recompute");
}
