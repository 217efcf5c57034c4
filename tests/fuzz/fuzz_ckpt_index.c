/* tests/fuzz/fuzz_ckpt_index.c - a sharded checkpoint's index
   (model.safetensors.index.json) as arbitrary bytes: par_ckpt_inspect on a
   directory holding only that file must fail cleanly (no shard can be
   found) or, never, succeed; the index's own fields are parsed on the way. */
#define _POSIX_C_SOURCE 200809L /* getpid, mkdir */
#include "fuzz.h"
#include <sys/stat.h>

static char dir_[256], file_[320];

static void remove_dir_(void) {
    unlink(file_);
    rmdir(dir_);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    par_ckpt_info info;
    par_status st;
    FILE *f;
    if (!dir_[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(dir_, sizeof dir_, "%s/par_fuzz_ckpt_%ld", t && *t ? t : "/tmp", (long)getpid());
        snprintf(file_, sizeof file_, "%s/model.safetensors.index.json", dir_);
        if (mkdir(dir_, 0700) != 0) abort();
        atexit(remove_dir_);
    }
    if (!(f = fopen(file_, "wb"))) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    if (fclose(f) != 0) abort();
    memset(&info, 0, sizeof info);
    par_clear_error();
    st = par_ckpt_inspect(dir_, 0, &info);
    fuzz_clean(st, "par_ckpt_inspect");
    FUZZ_REQUIRE(st != PAR_OK, "an index without shards was accepted");
    par_ckpt_info_free(&info);
    return 0;
}
