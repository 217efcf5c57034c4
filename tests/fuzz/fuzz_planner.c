/* tests/fuzz/fuzz_planner.c - the >>planner's text forms on arbitrary text:
   par_graph_parse (then every search mode under a cap from the input's first
   byte), par_cluster_parse and par_model_shape_parse. A graph that parses is
   searched: OK with the chosen plan's memory within the cap, or a clean error
   (a cycle, a cap nothing fits); a cluster that parses passes
   par_cluster_check and its formatted profile parses back to the same
   numbers; a model that parses is searched on a small cluster (OK or a clean
   error). */
#define _POSIX_C_SOURCE 200809L
#include "fuzz.h"

static void graph(const char *text, uint8_t knob) {
    par_graph_desc gd;
    par_graph *g = NULL;
    par_graph_result r;
    par_status st;
    int mode;
    const char *dev = strstr(text, "devices");
    /* keep each run short: the candidate enumeration grows with the device count */
    if (dev && atol(dev + 7) > 64) return;
    memset(&gd, 0, sizeof gd);
    gd.max_candidates = 4;
    par_clear_error();
    st = par_graph_parse(text, &gd, &g);
    fuzz_clean(st, "par_graph_parse");
    FUZZ_REQUIRE((st == PAR_OK) == (g != NULL), "status %s with graph %p", par_status_string(st), (void *)g);
    if (!g || par_graph_num_ops(g) > 12) {
        par_graph_destroy(g);
        return;
    }
    for (mode = 0; mode < PAR_SEARCH_MODE_COUNT; mode++) {
        const double cap = knob < 64 ? 0 : (double)knob * 4096.0;
        par_clear_error();
        st = par_graph_search(g, (par_search_mode)mode, cap, &r);
        fuzz_clean(st, "par_graph_search");
        if (st == PAR_OK) FUZZ_REQUIRE(cap <= 0 || r.memory_bytes <= cap, "memory %g over the cap %g", r.memory_bytes, cap);
    }
    par_graph_destroy(g);
}

static void cluster_and_model(const char *text) {
    par_cluster c, back;
    par_model_shape m;
    char profile[1024];
    par_status st;
    par_clear_error();
    st = par_cluster_parse(text, &c);
    fuzz_clean(st, "par_cluster_parse");
    if (st == PAR_OK) {
        FUZZ_REQUIRE(par_cluster_check(&c) == PAR_OK, "a parsed cluster fails its check: %s", par_last_error());
        par_cluster_format(&c, profile, sizeof profile);
        FUZZ_REQUIRE(par_cluster_parse(profile, &back) == PAR_OK && back.devices == c.devices,
                     "the profile does not parse back: %s", par_last_error());
    }
    par_clear_error();
    st = par_model_shape_parse(text, &m);
    fuzz_clean(st, "par_model_shape_parse");
    if (st == PAR_OK && m.layers <= 4096 && m.heads <= 4096) {
        par_auto_desc d;
        int count = 0;
        memset(&d, 0, sizeof d);
        d.model = m;
        d.cluster.devices = 8, d.cluster.intra_bandwidth = 1e10, d.cluster.memory_bytes = 1e10, d.cluster.flops = 1e12;
        d.max_micro_batches = 4;
        par_clear_error();
        st = par_auto_search(&d, NULL, 0, &count, NULL);
        fuzz_clean(st, "par_auto_search");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text;
    if (size < 1 || size > 4096) return 0;
    text = fuzz_cstr(data + 1, size - 1);
    graph(text, data[0]);
    cluster_and_model(text);
    free(text);
    return 0;
}
