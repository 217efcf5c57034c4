/* tests/fuzz/fuzz_mesh.c - par_mesh_parse on arbitrary text. A mesh that
   parses must format and parse back to the same mesh, with a size in range. */
#define _POSIX_C_SOURCE 200809L /* getpid, unlink */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = fuzz_cstr(data, size), buf[512];
    par_mesh m, back;
    par_status st;
    par_clear_error(); /* a stale message must not pass for this call's */
    st = par_mesh_parse(text, &m);
    fuzz_clean(st, "par_mesh_parse");
    if (st == PAR_OK) {
        int n = par_mesh_format(&m, buf, sizeof buf), i;
        FUZZ_REQUIRE(n > 0 && (size_t)n < sizeof buf, "par_mesh_format gave %d", n);
        FUZZ_REQUIRE(par_mesh_size(&m) >= 1 && par_mesh_size(&m) <= (1 << 24), "size %d", par_mesh_size(&m));
        /* the text form is bracketed; the parser takes the inside */
        buf[n - 1] = 0;
        st = par_mesh_parse(buf + 1, &back);
        FUZZ_REQUIRE(st == PAR_OK, "\"%s\" parsed, its format \"%s\" did not: %s", text, buf + 1, par_last_error());
        FUZZ_REQUIRE(back.ndim == m.ndim, "ndim %d vs %d", back.ndim, m.ndim);
        for (i = 0; i < m.ndim; i++)
            FUZZ_REQUIRE(back.dims[i] == m.dims[i] && strcmp(back.names[i], m.names[i]) == 0, "axis %d differs", i);
        for (i = 0; i < m.ndim; i++)
            if (m.names[i][0]) FUZZ_REQUIRE(par_mesh_dev_dim(&m, m.names[i]) == m.ndim - 1 - i, "name %s", m.names[i]);
    }
    free(text);
    return 0;
}
