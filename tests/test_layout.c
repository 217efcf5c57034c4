/* Mesh and layout tests: rank <-> coordinates, groups, text forms, validity
   errors, slices, replica groups, DTensor placements and local reshape. Every
   expected value below is worked out by hand from the MindSpore convention:
   map value v names mesh axis ndim-1-v, ranks are row-major. */
#include "test.h"

#include <stdint.h>
#include <stdlib.h>

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
    /* issue 14: the partial set is a set, so the bare list form is accepted too */
    CHECK_OK(par_layout_parse(&l, &m, 2, shape, "[-1,-1] partial=0,1"));
    CHECK_INT(l.map.partial, 3);
    CHECK_OK(par_layout_parse(&l, &m, 2, shape, "[-1,-1] partial=1, 0"));
    CHECK_INT(l.map.partial, 3);
    CHECK_ERR(par_layout_parse(&l, &m, 2, shape, "[-1,-1] partial=0,0"), PAR_ELAYOUT, "device dim 0 is listed twice");
    CHECK_ERR(par_layout_parse(&l, &m, 2, shape, "[-1,-1] partial=0,"), PAR_EPARSE, "expected a device dim");
    CHECK_ERR(par_layout_parse(&l, &m, 2, shape, "[-1,-1] partial=0;1"), PAR_EPARSE, "several as 0,2 or (0,2)");
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
        /* a layout has no name: its errors say which tensor by shape, map and mesh */
        CHECK_ERR(par_layout_parse(&l, &m, 2, odd, "[0,-1]"), PAR_ELAYOUT, "(a [6,16] tensor laid out [0,-1] on mesh [2,4])");
        CHECK_ERR(par_layout_parse(&l, &m, 2, shape, "[1,-1] partial=1"), PAR_ELAYOUT,
                  "(tensor dim 0 and the partial set) (a [8,16] tensor laid out [1,-1] partial=1 on mesh [2,4])");
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

/* par_layout_copy_slice / place_slice on real element types, checked against the
   mesh simulator: par_sim_scatter of a tensor whose value is its flat index says
   which global element every local element must be. The element types: f32,
   i64 and a 3-byte struct-like element (bytes derived from the index). */
static void elem_bytes(size_t size, int64_t index, unsigned char *out) {
    if (size == 4) {
        float f = (float)index + 0.5f;
        memcpy(out, &f, 4);
    } else if (size == 8) {
        int64_t v = index * 1000003 + 7;
        memcpy(out, &v, 8);
    } else {
        out[0] = (unsigned char)(index & 0xff), out[1] = (unsigned char)(index >> 8), out[2] = (unsigned char)(index * 7 + 1);
    }
}

static void check_slices_of(const char *mesh_text, int ndim, const int64_t *shape, const char *map) {
    static const size_t sizes[3] = {4, 8, 3};
    par_mesh m = mesh_of(mesh_text);
    par_layout l;
    int64_t numel = 1, local_numel, i;
    int ranks = par_mesh_size(&m), r, z;
    double *global, *locals[64];
    unsigned char *g, *back, *loc, *want, *fill;
    for (i = 0; i < ndim; i++) numel *= shape[i];
    CHECK_OK(par_layout_parse(&l, &m, ndim, shape, map));
    local_numel = par_layout_local_numel(&l);
    global = (double *)malloc(sizeof(double) * (size_t)numel);
    for (i = 0; i < numel; i++) global[i] = (double)i;
    for (r = 0; r < ranks; r++) locals[r] = (double *)malloc(sizeof(double) * (size_t)local_numel);
    CHECK_OK(par_sim_scatter(&l, global, locals));
    g = (unsigned char *)malloc(8 * (size_t)numel);
    back = (unsigned char *)malloc(8 * (size_t)numel);
    fill = (unsigned char *)malloc(8 * (size_t)numel);
    loc = (unsigned char *)malloc(8 * (size_t)local_numel);
    want = (unsigned char *)malloc(8 * (size_t)local_numel);
    for (z = 0; z < 3; z++) {
        size_t es = sizes[z];
        for (i = 0; i < numel; i++) elem_bytes(es, i, g + (size_t)i * es);
        memset(back, 0xEE, es * (size_t)numel);
        for (r = 0; r < ranks; r++) {
            int64_t changed = 0, expect_changed = 0;
            /* the slice: element j is global element locals[r][j] */
            for (i = 0; i < local_numel; i++) elem_bytes(es, (int64_t)locals[r][i], want + (size_t)i * es);
            memset(loc, 0xCD, es * (size_t)local_numel);
            CHECK_OK(par_layout_copy_slice(&l, r, es, g, loc));
            CHECK_MSG(memcmp(loc, want, es * (size_t)local_numel) == 0, "copy_slice %s %s elem %zu rank %d", mesh_text,
                      map, es, r);
            /* placing it alone touches exactly its elements */
            memset(fill, 0xEE, es * (size_t)numel);
            CHECK_OK(par_layout_place_slice(&l, r, es, loc, fill));
            for (i = 0; i < numel; i++) {
                int differs = memcmp(fill + (size_t)i * es, g + (size_t)i * es, es) != 0;
                int untouched = fill[(size_t)i * es] == 0xEE && fill[(size_t)i * es + es - 1] == 0xEE;
                if (!differs) changed++;
                else if (!untouched) expect_changed = -1000000; /* wrote a wrong value */
            }
            for (i = 0; i < local_numel; i++) expect_changed += 1;
            CHECK_MSG(changed == expect_changed, "place_slice %s %s elem %zu rank %d: %lld elements right, want %lld",
                      mesh_text, map, es, r, (long long)changed, (long long)expect_changed);
            CHECK_OK(par_layout_place_slice(&l, r, es, loc, back));
        }
        /* every rank's slice placed: the whole tensor is back */
        CHECK_MSG(memcmp(back, g, es * (size_t)numel) == 0, "place_slice %s %s elem %zu: all ranks", mesh_text, map, es);
    }
    for (r = 0; r < ranks; r++) free(locals[r]);
    free(global), free(g), free(back), free(fill), free(loc), free(want);
}

static void test_copy_slice(void) {
    static const int64_t s1[1] = {24}, s2[2] = {8, 16}, s3[3] = {4, 8, 4}, s4[4] = {2, 6, 4, 3};
    par_mesh m = mesh_of("2,4");
    par_layout l;
    int64_t shape[2] = {4, 8}, i;
    float g[32], loc[16];
    int r;
    check_slices_of("2,4", 1, s1, "[(1,0)]");
    check_slices_of("2,4", 1, s1, "[(0,1)]");
    check_slices_of("2,4", 1, s1, "[0]");
    check_slices_of("2,4", 1, s1, "[-1]");
    check_slices_of("2,4", 2, s2, "[1,0]");
    check_slices_of("2,4", 2, s2, "[(0,1),-1]");
    check_slices_of("2,4", 2, s2, "[-1,(1,0)]");
    check_slices_of("2,4", 2, s2, "[0,-1]");
    check_slices_of("2,2,2", 3, s3, "[2,-1,(1,0)]");
    check_slices_of("2,2,2", 3, s3, "[(0,2),1,-1]");
    check_slices_of("2,2,2", 3, s3, "[-1,(2,1,0),-1]");
    check_slices_of("2,3,2", 4, s4, "[-1,1,(2,0),-1]");
    check_slices_of("2,3,2", 4, s4, "[2,(1,0),-1,-1]");
    check_slices_of("2,3,2", 4, s4, "[-1,-1,0,1]");
    check_slices_of("2,3,2", 4, s4, "[-1,-1,-1,-1]");
    check_slices_of("4", 0, NULL, "[]");

    /* partial: copied as is, every rank of the partial group gets the full values */
    for (i = 0; i < 32; i++) g[i] = (float)i;
    CHECK_OK(par_layout_parse(&l, &m, 2, shape, "[1,-1] partial=0"));
    for (r = 0; r < 8; r++) {
        CHECK_OK(par_layout_copy_slice(&l, r, sizeof(float), g, loc));
        /* rank r = (a, b): rows 2a and 2a+1 (elements 16a..16a+15) whatever b is */
        CHECK_MSG(loc[0] == (float)(r / 4 * 16) && loc[9] == (float)(r / 4 * 16 + 9) && loc[15] == (float)(r / 4 * 16 + 15),
                  "partial rank %d", r);
    }

    /* errors */
    CHECK_ERR(par_layout_copy_slice(&l, 8, 4, g, loc), PAR_EINVAL,
              "par_layout_copy_slice: rank 8 is outside the layout's mesh of 8 devices");
    CHECK_ERR(par_layout_place_slice(&l, -1, 4, loc, g), PAR_EINVAL, "par_layout_place_slice: rank -1 is outside");
    CHECK_ERR(par_layout_copy_slice(&l, 0, 0, g, loc), PAR_EINVAL, "elem_size is 0");
    CHECK_ERR(par_layout_copy_slice(&l, 0, 4, NULL, loc), PAR_EINVAL, "par_layout_copy_slice: NULL global");
    CHECK_ERR(par_layout_copy_slice(&l, 0, 4, g, NULL), PAR_EINVAL, "par_layout_copy_slice: NULL local");
    CHECK_ERR(par_layout_place_slice(&l, 0, 4, loc, NULL), PAR_EINVAL, "par_layout_place_slice: NULL global");
    CHECK_ERR(par_layout_place_slice(&l, 0, 4, NULL, g), PAR_EINVAL, "par_layout_place_slice: NULL local");
    CHECK_ERR(par_layout_copy_slice(NULL, 0, 4, g, loc), PAR_EINVAL, "par_layout_copy_slice: NULL layout");
    CHECK_ERR(par_layout_copy_slice(&l, 0, SIZE_MAX / 2, g, loc), PAR_EINVAL, "do not fit in memory addresses");
    l.shape[0] = 3; /* not divisible by 2 */
    CHECK_ERR(par_layout_copy_slice(&l, 0, 4, g, loc), PAR_ELAYOUT, "tensor dim 0 (size 3) is not divisible by its shard 2");
}


/* tensor_layout_test.cc (MindSpore): ExpandTensorShape and
   ReshapeExpandDeviceArrangement expect a layout, viewed on a finer tensor shape
   (and device arrangement), to have a given map. Here the mesh is the finer
   arrangement from the start (MindSpore's [8,4] on [4,2,2,2] is the tuples
   (3,2) and (1,0)) and the view is par_layout_reshape, which must find the same
   map and call it local. */
static void test_mindspore_tensor_layout(void) {
    static const struct {
        const char *test, *mesh, *map, *want;
        int ndim, new_ndim;
        int64_t shape[4], new_shape[4];
    } cases[] = {
        {"ExpandTensorShape1", "4,2,4", "[(2,1),0]", "[2,1,0]", 2, 3, {512, 1024}, {4, 128, 1024}},
        {"ExpandTensorShape2", "8,4", "[1,0]", "[1,0,-1]", 2, 3, {128, 4096}, {128, 4, 1024}},
        {"ReshapeExpandDeviceArrangement1", "4,2,2,2", "[(3,2),(1,0)]", "[3,2,1,0]", 2, 4, {512, 1024}, {4, 128, 2, 512}},
        {"ReshapeExpandDeviceArrangement2", "4,2,2,2", "[(1,0),(3,2)]", "[1,0,3,2]", 2, 4, {512, 1024}, {2, 256, 4, 256}},
        {"ReshapeExpandDeviceArrangement3", "4,2,2,2", "[(3,2),-1]", "[3,2,-1]", 2, 3, {512, 1024}, {4, 128, 1024}},
        {"ReshapeExpandDeviceArrangement4", "4,2,4", "[0,(2,1)]", "[0,2,1]", 2, 3, {512, 1024}, {512, 4, 256}},
        {"ReshapeExpandDeviceArrangement5", "8,4", "[1,-1,0]", "[1,-1,0]", 3, 3, {128, 4, 1024}, {128, 4, 1024}},
    };
    size_t i;
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        par_mesh m = mesh_of(cases[i].mesh);
        par_layout from, view;
        char buf[128];
        CHECK_OK(par_layout_parse(&from, &m, cases[i].ndim, cases[i].shape, cases[i].map));
        CHECK_MSG(par_layout_reshape(&from, cases[i].new_ndim, cases[i].new_shape, &view) == PAR_OK,
                  "tensor_layout_test.cc %s: %s", cases[i].test, par_last_error());
        par_layout_format(&view, buf, sizeof buf);
        CHECK_MSG(strcmp(buf, cases[i].want) == 0, "tensor_layout_test.cc %s: got %s, want %s", cases[i].test, buf,
                  cases[i].want);
    }
    { /* GetSliceShape: [8,4], [1,-1] on [512,1024] -> slice [64,1024] */
        par_mesh m = mesh_of("8,4");
        par_layout l;
        int64_t shape[2] = {512, 1024}, slice[2];
        CHECK_OK(par_layout_parse(&l, &m, 2, shape, "[1,-1]"));
        par_layout_local_shape(&l, slice);
        CHECK(slice[0] == 64 && slice[1] == 1024);
    }
}

int main(void) {
    test_mesh();
    test_parse_format();
    test_slices();
    test_placements();
    test_reshape();
    test_copy_slice();
    test_mindspore_tensor_layout();
    /* par_set_error: what host-written hook tables use to report failures */
    CHECK(par_set_error(PAR_ECOMM, "rank %d gone", 3) == PAR_ECOMM);
    CHECK_STR(par_last_error(), "rank 3 gone");
    return TEST_END("layout");
}
