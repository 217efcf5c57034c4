/* tests/fuzz/fuzz_safetensors.c - par_st_open on arbitrary file bytes (the
   reader takes a path, so the input is written to a per-process temp file).
   A file that opens is walked the way the trainer does: every tensor and
   metadata entry, par_st_verify, and a converted read of each tensor's first
   elements; each call returns OK or a clean error. */
#define _POSIX_C_SOURCE 200809L /* getpid, unlink */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file("st", data, size);
    par_st_file *f = NULL;
    par_status st;
    par_clear_error(); /* a stale message must not pass for this call's */
    st = par_st_open(path, &f);
    int i, n, checked = 0;
    fuzz_clean(st, "par_st_open");
    FUZZ_REQUIRE((st == PAR_OK) == (f != NULL), "status %s with file %p", par_status_string(st), (void *)f);
    if (!f) return 0;
    n = par_st_count(f);
    for (i = 0; i < n; i++) {
        const par_st_tensor *t = par_st_tensor_at(f, i);
        float dst[64];
        int64_t numel = 1, want;
        int d;
        FUZZ_REQUIRE(t != NULL && par_st_find(f, t->name) == t, "tensor %d not found by its name", i);
        for (d = 0; d < t->ndim; d++) numel *= t->shape[d];
        want = numel < 64 ? numel : 64;
        par_clear_error();
        st = par_st_read(f, t->name, t->ndim, t->shape, 0, want, PAR_F32, dst);
        fuzz_clean(st, "par_st_read");
        par_clear_error();
        st = par_st_read(f, t->name, 0, NULL, numel, 1, PAR_F32, dst); /* one past the end: must be refused */
        FUZZ_REQUIRE(st != PAR_OK, "read past the end of %s accepted", t->name);
        fuzz_clean(st, "par_st_read");
    }
    for (i = 0; i < par_st_metadata_count(f); i++) {
        const char *k, *v;
        FUZZ_REQUIRE(par_st_metadata_at(f, i, &k, &v) == PAR_OK && par_st_metadata(f, k) == v, "metadata %d", i);
    }
    par_clear_error();
    st = par_st_verify(f, &checked);
    fuzz_clean(st, "par_st_verify");
    par_st_close(f);
    return 0;
}
