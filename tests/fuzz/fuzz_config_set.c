/* tests/fuzz/fuzz_config_set.c - the trainer's command line: each input line
   is one argument. llama_parse_args sees them as argv; then every line is
   also tried as a --set key.path=value override (llama_config_load without a
   file). A failure must be -1 with a sentence in err; a success must pass
   llama_config_validate. */
#define _POSIX_C_SOURCE 200809L
#define LLAMA_CONFIG_IMPLEMENTATION
#include "examples/llama/config.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = fuzz_cstr(data, size), *p = text, *argv[LLAMA_MAX_SETS + 2], err[1024] = "";
    const char *sets[LLAMA_MAX_SETS];
    int argc = 1, rc, i;
    llama_options opts;
    llama_config cfg;
    argv[0] = (char *)"train";
    while (*p && argc < LLAMA_MAX_SETS + 1) argv[argc++] = fuzz_line(p, &p);
    argv[argc] = NULL;
    memset(&opts, 0, sizeof opts);
    rc = llama_parse_args(argc, argv, &opts, err, sizeof err);
    FUZZ_REQUIRE(rc == 0 || rc == -1, "llama_parse_args returned %d", rc);
    if (rc) FUZZ_REQUIRE(err[0] != 0, "llama_parse_args failed without a message");
    for (i = 1; i < argc; i++) sets[i - 1] = argv[i];
    err[0] = 0;
    rc = llama_config_load(NULL, sets, argc - 1, &cfg, NULL, err, sizeof err);
    FUZZ_REQUIRE(rc == 0 || rc == -1, "llama_config_load returned %d", rc);
    if (rc) FUZZ_REQUIRE(err[0] != 0, "llama_config_load failed without a message");
    else FUZZ_REQUIRE(llama_config_validate(&cfg, err, sizeof err) == 0, "loaded --set config does not validate: %s", err);
    free(text);
    return 0;
}
