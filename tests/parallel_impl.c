/* tests/parallel_impl.c - the library's implementation in a translation unit of
   its own: the two-line .c file a program with several source files keeps
   (miniaudio's pattern), so the ~21,000 lines of parallel.h are compiled once
   and linked, not compiled again in every file that uses the API.

   The Makefile compiles it once per build flavour (plain, each sanitizer build,
   MPI, bench, fuzz: each with its own flags, in its own directory) and links it
   into every program that uses only the public API; the Makefile lists the
   programs that still compile the implementation themselves, and why.

   _POSIX_C_SOURCE: with it <time.h> declares CLOCK_MONOTONIC, which
   par_trace_now_us prefers to C11's timespec_get (what -std=c11 alone gives). */
#define _POSIX_C_SOURCE 200809L
#define PARALLEL_IMPLEMENTATION
#include "../parallel.h"
