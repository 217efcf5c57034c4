/* tests/tu_static_a.c - PARALLEL_STATIC: this TU and tu_static_b.c each compile
   a private copy of the implementation. They must link together (no duplicate
   symbols), compile warning-free under -Werror (no unused static functions),
   and really be separate copies: an error recorded by one copy is not visible
   through the other's par_last_error(). */
#define PARALLEL_STATIC
#define PARALLEL_IMPLEMENTATION
#include "../parallel.h"
#include <stdio.h>

#ifdef __cplusplus
extern "C"
#endif
int tu_static_b_fail(void); /* in tu_static_b.c: makes its copy record an error */

int main(void) {
    int failed = 0;
    par_mesh mesh;
    int dims[1] = {4};
    if (par_mesh_init(&mesh, 1, dims, NULL) != PAR_OK || par_mesh_size(&mesh) != 4) failed++;
    par_clear_error();
    if (!tu_static_b_fail()) failed++;
    if (par_last_error()[0] != 0) failed++; /* our copy saw no failure */
    printf("tu_static_a+tu_static_b: %s\n", failed ? "FAILED" : "ok");
    return failed ? 1 : 0;
}
