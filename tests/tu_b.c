/* tests/tu_b.c - a user translation unit: header only, no implementation.
   Calls public functions that tu_a.c's implementation defines. */
#include "../parallel.h"
#include <string.h>

#ifdef __cplusplus
extern "C"
#endif
int tu_b_checks(void);

int tu_b_checks(void) {
    int failed = 0;
    par_mesh mesh;
    int dims[3] = {2, 2, 2};
    if (strcmp(par_status_string(PAR_EINVAL), "invalid argument") != 0) failed++;
    if (par_mesh_init(&mesh, 3, dims, NULL) != PAR_OK || par_mesh_size(&mesh) != 8) failed++;
    /* A bad mesh is an error with a sentence, not a crash. */
    dims[1] = 0;
    if (par_mesh_init(&mesh, 3, dims, NULL) == PAR_OK || par_last_error()[0] == 0) failed++;
    return failed;
}
