/* tests/fuzz/parallel_impl.c - the library's implementation, compiled once
   for all fuzz targets (with the fuzzer's coverage instrumentation, not its
   main): each target then compiles only its own few lines. Every other program
   includes the implementation itself; here one sanitized, instrumented build of
   parallel.h per target would cost ~15 s each, which `make test` cannot spare. */
#define _POSIX_C_SOURCE 200809L
#define PARALLEL_IMPLEMENTATION
#include "../../parallel.h"
