/* tests/fuzz/fuzz_layout.c - par_layout_parse on arbitrary text.
   Input: line 1 a mesh ("dp=2,tp=4"), line 2 the global shape as comma-separated
   integers (passed as written, so 0, negative and too many dims are tried too),
   the rest the layout text. A layout that parses must pass par_layout_check and
   format to text that parses back to the same layout. */
#define _POSIX_C_SOURCE 200809L /* getpid, unlink */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = fuzz_cstr(data, size), *rest, *mesh_text, *shape_text, *p, buf[1024], again[1024];
    int64_t shape[PARALLEL_MAX_DIMS + 2];
    int ndim = 0, t;
    par_mesh mesh;
    par_layout l, back;
    par_status st;
    mesh_text = fuzz_line(text, &rest);
    shape_text = fuzz_line(rest, &rest);
    if (par_mesh_parse(mesh_text, &mesh) != PAR_OK) goto out;
    /* the shape is this harness's own input format, not the library's: read leniently */
    for (p = shape_text; *p && ndim < PARALLEL_MAX_DIMS + 2;) {
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p) break;
        shape[ndim++] = v;
        p = *end == ',' ? end + 1 : end;
        if (*end != ',') break;
    }
    par_clear_error(); /* a stale message must not pass for this call's */
    st = par_layout_parse(&l, &mesh, ndim, shape, rest);
    fuzz_clean(st, "par_layout_parse");
    if (st == PAR_OK) {
        int n = par_layout_format(&l, buf, sizeof buf);
        FUZZ_REQUIRE(n > 0 && (size_t)n < sizeof buf, "par_layout_format gave %d", n);
        FUZZ_REQUIRE(par_layout_check(&l) == PAR_OK, "parsed layout fails its check: %s", par_last_error());
        for (t = 0; t < l.ndim; t++)
            FUZZ_REQUIRE(par_layout_shards(&l, t) >= 1 && l.shape[t] % par_layout_shards(&l, t) == 0, "dim %d", t);
        st = par_layout_parse(&back, &mesh, ndim, shape, buf);
        FUZZ_REQUIRE(st == PAR_OK, "\"%s\" parsed, its format \"%s\" did not: %s", rest, buf, par_last_error());
        par_layout_format(&back, again, sizeof again);
        FUZZ_REQUIRE(strcmp(buf, again) == 0, "format round trip: \"%s\" then \"%s\"", buf, again);
    }
out:
    free(text);
    return 0;
}
