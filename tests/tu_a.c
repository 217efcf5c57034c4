/* tests/tu_a.c - the implementation translation unit of the two-TU link test
   (tests/conventions.sh). tu_b.c includes the header without the implementation;
   linking both proves the header defines nothing outside PARALLEL_IMPLEMENTATION
   and that declarations and definitions agree (also when compiled as C++, and
   mixed: this file as C, tu_b.c as C++, which exercises the extern "C" block). */
#define PARALLEL_IMPLEMENTATION
#include "../parallel.h"
#include <stdio.h>
#include <string.h>

#ifdef __cplusplus
extern "C"
#endif
int tu_b_checks(void); /* in tu_b.c: number of failed checks */

int main(void) {
    int failed = tu_b_checks();
    par_mesh mesh;
    int dims[2] = {2, 3};
    if (strcmp(par_status_string(PAR_OK), "ok") != 0) failed++;
    if (par_mesh_init(&mesh, 2, dims, NULL) != PAR_OK || par_mesh_size(&mesh) != 6) failed++;
    printf("tu_a+tu_b: %s\n", failed ? "FAILED" : "ok");
    return failed ? 1 : 0;
}
