/* tests/fuzz/fuzz_config.c - the Llama trainer's YAML config (llama_config_load
   with a file built from the input; examples/llama/config.h on libyaml). A
   failure must be -1 with a sentence in err; a success must pass
   llama_config_validate and print. */
#define _POSIX_C_SOURCE 200809L
#define LLAMA_CONFIG_IMPLEMENTATION
#include "examples/llama/config.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file("yaml", data, size);
    llama_config cfg;
    char err[1024] = "";
    int rc = llama_config_load(path, NULL, 0, &cfg, NULL, err, sizeof err);
    FUZZ_REQUIRE(rc == 0 || rc == -1, "llama_config_load returned %d", rc);
    if (rc) FUZZ_REQUIRE(err[0] != 0, "llama_config_load failed without a message");
    if (rc == 0) {
        char mesh[256];
        par_mesh m;
        FUZZ_REQUIRE(llama_config_validate(&cfg, err, sizeof err) == 0, "loaded config does not validate: %s", err);
        FUZZ_REQUIRE(llama_config_global_batch(&cfg) >= 1, "global batch %d", llama_config_global_batch(&cfg));
        llama_config_mesh(&cfg, mesh, sizeof mesh);
        FUZZ_REQUIRE(par_mesh_parse(mesh, &m) == PAR_OK, "mesh \"%s\": %s", mesh, par_last_error());
        {
            FILE *null = fopen("/dev/null", "w");
            if (null) llama_config_print(&cfg, null), fclose(null);
        }
    }
    return 0;
}
