/* Mesh and layout tests: rank <-> coordinates, groups, text forms, validity
   errors, slices, replica groups, DTensor placements and local reshape. Every
   expected value below is worked out by hand from the MindSpore convention:
   map value v names mesh axis ndim-1-v, ranks are row-major. */
#define PARALLEL_IMPLEMENTATION
#include "test.h"

static par_mesh mesh_of(const char *text) {
    par_mesh m;
    par_status st = par_mesh_parse(text, &m);
    CHECK_MSG(st == PAR_OK, "mesh %s", text);
    return m;
}

static void test_mesh(void) {
    par_mesh m = mesh_of("2,3,4");
    int coords[3], r, ranks[24], n;
    CHECK_INT(par_mesh_size(&m), 24);
    CHECK_INT(par_mesh_dev_size(&m, 0), 4);
    CHECK_INT(par_mesh_dev_size(&m, 2), 2);
    CHECK_INT(par_mesh_dev_size(&m, 3), 0);
    CHECK_OK(par_mesh_coords(&m, 17, coords)); /* 17 = 1*12 + 1*4 + 1 */
    CHECK(coords[0] == 1 && coords[1] == 1 && coords[2] == 1);
    CHECK_OK(par_mesh_rank(&m, coords, &r));
    CHECK_INT(r, 17);
    /* Group along device dim 1 (axis 1, size 3) through rank 17: 13, 17, 21. */
    CHECK_OK(par_mesh_group(&m, 17, 1u << 1, ranks, &n));
    CHECK(n == 3 && ranks[0] == 13 && ranks[1] == 17 && ranks[2] == 21);
    /* Group over device dims 2 and 0 (axes 0 and 2) through rank 5 = (0,1,1):
       axis 0 major: (0,1,0..3) then (1,1,0..3) = 4,5,6,7,16,17,18,19. */
    CHECK_OK(par_mesh_group(&m, 5, (1u << 2) | 1u, ranks, &n));
    CHECK(n == 8 && ranks[0] == 4 && ranks[3] == 7 && ranks[4] == 16 && ranks[7] == 19);
    CHECK_ERR(par_mesh_coords(&m, 24, coords), PAR_EINVAL, "rank 24 is outside");
    CHECK_ERR(par_mesh_group(&m, 0, 1u << 3, ranks, &n), PAR_EINVAL, "beyond the mesh");

    m = mesh_of("dp=2, tp=4");
    CHECK_INT(par_mesh_dev_dim(&m, "dp"), 1);
    CHECK_INT(par_mesh_dev_dim(&m, "tp"), 0);
    CHECK_INT(par_mesh_dev_dim(&m, "cp"), -1);
    {
        char buf[64];
        par_mesh_format(&m, buf, sizeof buf);
        CHECK_STR(buf, "[dp=2,tp=4]");
        m = mesh_of("[2x4]");
        par_mesh_format(&m, buf, sizeof buf);
        CHECK_STR(buf, "[2,4]");
    }
    {
        par_mesh sub, big = mesh_of("dp=2,pp=3,tp=4");
        CHECK_OK(par_mesh_sub(&big, (1u << 2) | 1u, &sub));
        CHECK(sub.ndim == 2 && sub.dims[0] == 2 && sub.dims[1] == 4 && strcmp(sub.names[1], "tp") == 0);
    }
    CHECK_ERR(par_mesh_parse("2,0", &m), PAR_EPARSE, "axis 1 has size 0");
    CHECK_ERR(par_mesh_parse("dp=2,4", &m), PAR_EPARSE, "name every axis or none");
    CHECK_ERR(par_mesh_parse("2,dp=4", &m), PAR_EPARSE, "name every axis or none (position 2)");
    /* a text naming no valid mesh is a parse error, whatever is wrong with it */
    CHECK_ERR(par_mesh_parse("dp=2,dp=4", &m), PAR_EPARSE, "mesh 'dp=2,dp=4': mesh axes 0 and 1 are both named 'dp'");
    CHECK_ERR(par_mesh_parse("2,4]", &m), PAR_EPARSE, "unexpected ']'");
    CHECK_ERR(par_mesh_parse("", &m), PAR_EPARSE, "expected an axis size");
    CHECK_ERR(par_mesh_parse("None=2", &m), PAR_EPARSE, "not an identifier");
    CHECK_ERR(par_mesh_parse("1,2,1,2,1,2,1,2,1", &m), PAR_EPARSE, "more than 8 axes");
    CHECK_ERR(par_mesh_parse("65536,65536", &m), PAR_EPARSE, "more than");
    /* a word where a size belongs is no integer, not a naming problem */
    CHECK_ERR(par_mesh_parse("2,x", &m), PAR_EPARSE, "mesh '2,x': axis 1 size 'x' at position 2 is not an integer");
    CHECK(strstr(par_last_error(), "name every") == NULL);
    CHECK_ERR(par_mesh_parse("2x4,tp", &m), PAR_EPARSE, "axis 2 size 'tp' at position 4 is not an integer");
    CHECK_ERR(par_mesh_parse("x", &m), PAR_EPARSE, "axis 0 size 'x' at position 0 is not an integer (nor name=size)");
    CHECK_ERR(par_mesh_parse("dp=2,tp", &m), PAR_EPARSE, "expected '=' after axis name at position 7");
}

static void test_parse_format(void) {
    par_mesh m = mesh_of("2,4");
    par_mesh named = mesh_of("dp=2,tp=4");
    int64_t shape[2] = {8, 16}, shape3[3] = {8, 16, 4};
    par_layout l;
    char buf[128];
    CHECK_OK(par_layout_parse(&l, &m, 2, shape, "[1,0]"));
    CHECK(l.map.count[0] == 1 && l.map.dev[0][0] == 1 && l.map.count[1] == 1 && l.map.dev[1][0] == 0);
    CHECK_OK(par_layout_parse(&l, &m, 2, shape, " [ (1, 0) , -1 ] "));
    CHECK(l.map.count[0] == 2 && l.map.dev[0][0] == 1 && l.map.dev[0][1] == 0 && l.map.count[1] == 0);
    par_layout_format(&l, buf, sizeof buf);
    CHECK_STR(buf, "[(1,0),-1]");
    CHECK_OK(par_layout_parse(&l, &m, 2, shape, "[-1,-1] partial=(1,0)"));
    CHECK_INT(l.map.partial, 3);
    par_layout_format(&l, buf, sizeof buf);
    CHECK_STR(buf, "[-1,-1] partial=(1,0)");
    CHECK_OK(par_layout_parse(&l, &named, 2, shape, "[dp,None] partial=tp"));
    par_layout_format(&l, buf, sizeof buf);
    CHECK_STR(buf, "[1,-1] partial=0");
    CHECK_OK(par_layout_parse(&l, &named, 3, shape3, "[(dp,tp),None,-1]"));
    par_layout_format(&l, buf, sizeof buf);
    CHECK_STR(buf, "[(1,0),-1,-1]");
    {
        int map[2] = {-1, 0};
        CHECK_OK(par_layout_init(&l, &m, 2, shape, map, 2u));
        par_layout_format(&l, buf, sizeof buf);
        CHECK_STR(buf, "[-1,0] partial=1");
    }
    /* Errors name the entry, the dim and the rule. */
    CHECK_ERR(par_layout_parse(&l, &m, 2, shape, "[1,1]"), PAR_ELAYOUT, "device dim 1 is used twice");
    CHECK_ERR(par_layout_parse(&l, &m, 2, shape, "[2,-1]"), PAR_ELAYOUT, "device dim 2 is out of range 0..1");
    CHECK_ERR(par_layout_parse(&l, &m, 2, shape, "[1]"), PAR_ELAYOUT, "has 1 entries; the tensor has 2 dims");
    CHECK_ERR(par_layout_parse(&l, &m, 2, shape, "[1,-1,0]"), PAR_ELAYOUT, "more entries than");
    CHECK_ERR(par_layout_parse(&l, &m, 2, shape, "[1,-1"), PAR_EPARSE, "expected ',' or ']' at position 5");
    CHECK_ERR(par_layout_parse(&l, &m, 2, shape, "1,-1]"), PAR_EPARSE, "expected '['");
    CHECK_ERR(par_layout_parse(&l, &m, 2, shape, "[(1,-1),0]"), PAR_ELAYOUT, "device dim -1 is out of range");
    CHECK_ERR(par_layout_parse(&l, &m, 2, shape, "[dp,-1]"), PAR_EPARSE, "'dp' at position 1 is not an axis name");
    CHECK_ERR(par_layout_parse(&l, &m, 2, shape, "[1,-1] partial=1"), PAR_ELAYOUT, "device dim 1 is used twice");
    CHECK_ERR(par_layout_parse(&l, &m, 2, shape, "[1,-1] partial"), PAR_EPARSE, "expected '=' after 'partial'");
    CHECK_ERR(par_layout_parse(&l, &m, 2, shape, "[1,-1] junk"), PAR_EPARSE, "unexpected 'j'");
    {
        int64_t odd[2] = {6, 16};
        CHECK_ERR(par_layout_parse(&l, &m, 2, odd, "[0,-1]"), PAR_ELAYOUT,
                  "tensor dim 0 (size 6) is not divisible by its shard 4");
        CHECK_ERR(par_layout_parse(&l, &m, 2, odd, "[(1,0),-1]"), PAR_ELAYOUT, "not divisible by its shard 8");
        odd[0] = 0;
        CHECK_ERR(par_layout_parse(&l, &m, 2, odd, "[-1,-1]"), PAR_ELAYOUT, "tensor dim 0 has size 0");
    }
}

static void test_slices(void) {
    par_mesh m = mesh_of("2,4");
    int64_t shape[2] = {8, 16}, local[2], off[2];
    par_layout l;
    int ranks[8], n;
    /* [1,0]: dim 0 by axis 0 (2), dim 1 by axis 1 (4). Rank 5 = (1,1). */
    CHECK_OK(par_layout_parse(&l, &m, 2, shape, "[1,0]"));
    par_layout_local_shape(&l, local);
    CHECK(local[0] == 4 && local[1] == 4);
    CHECK_INT(par_layout_local_numel(&l), 16);
    CHECK_OK(par_layout_local_offset(&l, 5, off));
    CHECK(off[0] == 4 && off[1] == 4);
    CHECK_OK(par_layout_replica_group(&l, 5, ranks, &n));
    CHECK(n == 1 && ranks[0] == 5);
    /* [(0,1),-1]: dim 0 split 8 ways, axis 1 major. Rank 6 = (1,2): index 2*2+1 = 5. */
    CHECK_OK(par_layout_parse(&l, &m, 2, shape, "[(0,1),-1]"));
    CHECK_OK(par_layout_local_offset(&l, 6, off));
    CHECK(off[0] == 5 && off[1] == 0);
    /* [0,-1]: axis 0 repeats; replicas of rank 6 = (1,2) are 2 and 6. */
    CHECK_OK(par_layout_parse(&l, &m, 2, shape, "[0,-1]"));
    CHECK_OK(par_layout_replica_group(&l, 6, ranks, &n));
    CHECK(n == 2 && ranks[0] == 2 && ranks[1] == 6);
    /* A partial dim holds different values: no replicas along it. */
    CHECK_OK(par_layout_parse(&l, &m, 2, shape, "[0,-1] partial=1"));
    CHECK_OK(par_layout_replica_group(&l, 6, ranks, &n));
    CHECK(n == 1 && ranks[0] == 6);
    CHECK_INT(par_layout_split_dims(&l), 1);
    /* Equality ignores size-1 device dims. */
    {
        par_mesh m3 = mesh_of("2,1,4");
        par_layout a, b;
        CHECK_OK(par_layout_parse(&a, &m3, 2, shape, "[(2,1),0]"));
        CHECK_OK(par_layout_parse(&b, &m3, 2, shape, "[2,0]"));
        CHECK(par_layout_equal(&a, &b));
        CHECK_OK(par_layout_parse(&b, &m3, 2, shape, "[0,2]"));
        CHECK(!par_layout_equal(&a, &b));
    }
    /* An invalid layout has no slice: zeros and 0 elements, never a division by a
       zero shard (device dim 5 of a 2-D mesh has size 0). */
    CHECK_OK(par_layout_parse(&l, &m, 2, shape, "[1,0]"));
    l.map.dev[1][0] = 5;
    local[0] = local[1] = 77;
    par_clear_error();
    par_layout_local_shape(&l, local);
    CHECK(local[0] == 0 && local[1] == 0);
    CHECK(strstr(par_last_error(), "device dim 5 is out of range") != NULL);
    CHECK_INT(par_layout_local_numel(&l), 0);
    CHECK_OK(par_layout_parse(&l, &m, 2, shape, "[1,0]"));
    l.shape[1] = 6; /* not divisible by its shard 4 */
    local[0] = local[1] = 77;
    par_layout_local_shape(&l, local);
    CHECK(local[0] == 0 && local[1] == 0);
    CHECK_INT(par_layout_local_numel(&l), 0);
    l.ndim = 9; /* beyond PARALLEL_MAX_DIMS: the caller's array size is unknown, nothing written */
    local[0] = 77;
    par_layout_local_shape(&l, local);
    CHECK_INT(local[0], 77);
    CHECK_INT(par_layout_local_numel(&l), 0);
    CHECK_INT(par_layout_local_numel(NULL), 0);
    par_layout_local_shape(NULL, local); /* ignored */
    /* a 0-D tensor is one element */
    CHECK_OK(par_layout_init(&l, &m, 0, NULL, NULL, 0));
    CHECK_INT(par_layout_local_numel(&l), 1);
}

static void test_placements(void) {
    par_mesh m = mesh_of("2,2,4");
    int64_t shape[2] = {8, 16};
    par_layout l, back;
    par_placement p[3];
    char buf[128];
    CHECK_OK(par_layout_parse(&l, &m, 2, shape, "[(2,0),-1] partial=1"));
    CHECK_OK(par_layout_to_placements(&l, p));
    par_placements_format(p, 3, buf, sizeof buf);
    CHECK_STR(buf, "(Shard(0), Partial(), Shard(0))");
    CHECK_OK(par_layout_from_placements(&back, &m, 2, shape, p));
    CHECK(par_layout_equal(&l, &back));
    CHECK_OK(par_layout_parse(&l, &m, 2, shape, "[(0,2),-1]"));
    CHECK_ERR(par_layout_to_placements(&l, p), PAR_EUNSUPPORTED, "shard in mesh-axis order");
    p[0].kind = PAR_SHARD;
    p[0].dim = 2;
    p[1].kind = PAR_REPLICATE;
    p[2].kind = PAR_REPLICATE;
    CHECK_ERR(par_layout_from_placements(&back, &m, 2, shape, p), PAR_ELAYOUT, "Shard(2); the tensor has 2 dims");
}

static void test_reshape(void) {
    par_mesh m = mesh_of("dp=2,tp=4");
    par_layout l, r;
    char buf[128];
    int64_t bsh[3] = {4, 6, 32}, bshd[4] = {4, 6, 8, 4}, flat[2] = {24, 32}, odd[4] = {4, 6, 2, 16};
    /* [B,S,H*D] split by tp on the last dim -> [B,S,H,D] split by tp on H. */
    CHECK_OK(par_layout_parse(&l, &m, 3, bsh, "[1,-1,0]"));
    CHECK_OK(par_layout_reshape(&l, 4, bshd, &r));
    par_layout_format(&r, buf, sizeof buf);
    CHECK_STR(buf, "[1,-1,0,-1]");
    /* ...and back. */
    CHECK_OK(par_layout_reshape(&r, 3, bsh, &l));
    par_layout_format(&l, buf, sizeof buf);
    CHECK_STR(buf, "[1,-1,0]");
    /* Merging B and S keeps a B split local. */
    CHECK_OK(par_layout_parse(&l, &m, 3, bsh, "[1,-1,0]"));
    CHECK_OK(par_layout_reshape(&l, 2, flat, &r));
    par_layout_format(&r, buf, sizeof buf);
    CHECK_STR(buf, "[1,0]");
    /* An S split with B whole is strided in B*S: refused. */
    CHECK_OK(par_layout_parse(&l, &m, 3, bsh, "[-1,1,0]"));
    CHECK_ERR(par_layout_reshape(&l, 2, flat, &r), PAR_EUNSUPPORTED, "not contiguous");
    /* H = 2 cannot take the 4-way tp split: it would cross into D. */
    CHECK_OK(par_layout_parse(&l, &m, 3, bsh, "[1,-1,0]"));
    CHECK_ERR(par_layout_reshape(&l, 4, odd, &r), PAR_EUNSUPPORTED, "device dim 0 (size 4)");
    CHECK_ERR(par_layout_reshape(&l, 2, bsh, &r), PAR_ESHAPE, "elements");
    /* Partial sets carry over; size-1 dims are free to appear. */
    {
        int64_t with_ones[5] = {4, 1, 6, 32, 1};
        CHECK_OK(par_layout_parse(&l, &m, 3, bsh, "[1,-1,-1] partial=0"));
        CHECK_OK(par_layout_reshape(&l, 5, with_ones, &r));
        par_layout_format(&r, buf, sizeof buf);
        CHECK_STR(buf, "[1,-1,-1,-1,-1] partial=0");
    }
}

int main(void) {
    test_mesh();
    test_parse_format();
    test_slices();
    test_placements();
    test_reshape();
    /* par_set_error: what host-written hook tables use to report failures */
    CHECK(par_set_error(PAR_ECOMM, "rank %d gone", 3) == PAR_ECOMM);
    CHECK_STR(par_last_error(), "rank 3 gone");
    return TEST_END("layout");
}
