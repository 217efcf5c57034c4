/* tests/fuzz/fuzz_strategy.c - par_strategy_parse and par_strategy_parse_mesh
   on arbitrary text. Input: line 1 a mesh ("dp=2,tp=4"; when it does not
   parse, only par_strategy_parse runs), the rest the strategy text. A strategy
   that parses must format to text that parses back to the same strategy. */
#define _POSIX_C_SOURCE 200809L /* getpid, unlink */
#include "fuzz.h"

static void round_trip(const par_strategy *s, const char *text) {
    char buf[2048], again[2048];
    par_strategy back;
    int n = par_strategy_format(s, buf, sizeof buf);
    par_status st;
    FUZZ_REQUIRE(n > 0 && (size_t)n < sizeof buf, "par_strategy_format gave %d", n);
    st = par_strategy_parse(buf, &back);
    FUZZ_REQUIRE(st == PAR_OK, "\"%s\" parsed, its format \"%s\" did not: %s", text, buf, par_last_error());
    par_strategy_format(&back, again, sizeof again);
    FUZZ_REQUIRE(strcmp(buf, again) == 0, "format round trip: \"%s\" then \"%s\"", buf, again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = fuzz_cstr(data, size), *rest, *mesh_text;
    par_mesh mesh;
    par_strategy s;
    par_status st;
    mesh_text = fuzz_line(text, &rest);
    par_clear_error(); /* a stale message must not pass for this call's */
    st = par_strategy_parse(rest, &s);
    fuzz_clean(st, "par_strategy_parse");
    if (st == PAR_OK) round_trip(&s, rest);
    if (par_mesh_parse(mesh_text, &mesh) == PAR_OK) {
        par_clear_error();
        st = par_strategy_parse_mesh(rest, &mesh, &s);
        fuzz_clean(st, "par_strategy_parse_mesh");
        if (st == PAR_OK) round_trip(&s, rest);
    }
    free(text);
    return 0;
}
