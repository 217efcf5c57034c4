/* tests/tu_static_b.c - second PARALLEL_STATIC copy; see tu_static_a.c. */
#define PARALLEL_STATIC
#define PARALLEL_IMPLEMENTATION
#include "../parallel.h"

#ifdef __cplusplus
extern "C"
#endif
int tu_static_b_fail(void);

/* Returns 1 if this copy rejected a bad mesh and recorded why. */
int tu_static_b_fail(void) {
    par_mesh mesh;
    int dims[1] = {0};
    return par_mesh_init(&mesh, 1, dims, NULL) != PAR_OK && par_last_error()[0] != 0;
}
