/* tests/test_safetensors.c - the safetensors checkpoint layer.

   Round trips of every dtype and rank 0..3 (incl. zero-size tensors), names
   that need JSON escapes, metadata, streamed tensors, partial reads with dtype
   conversion, the read errors, atomic replacement (an existing file survives an
   aborted or failed save), and a corpus of corrupt files: every truncation of a
   valid file, bad length fields, malformed JSON, bad dtypes, shapes, offsets and
   checksums, plus byte flips over the whole header (must never crash).
   Expected values come from the test's own encoders: a bitwise CRC-32 checked
   against the standard "123456789" vector, a hand-built header parser for the
   layout, and exactly representable numbers for the conversions. */
#include "test.h"
#include "test_files.h"
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- independent references ---- */

static uint32_t ref_crc32(const void *data, size_t n) {
    const unsigned char *p = (const unsigned char *)data;
    uint32_t c = 0xffffffffu;
    size_t i;
    int k;
    for (i = 0; i < n; i++) {
        c ^= p[i];
        for (k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    }
    return c ^ 0xffffffffu;
}

/* A safetensors file from header text and data bytes (no padding unless given). */
static int write_raw(const char *path, const char *json, const void *data, size_t ndata) {
    size_t hl = strlen(json), i;
    unsigned char *buf = (unsigned char *)malloc(8 + hl + ndata + 1);
    int ok;
    for (i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(buf + 8, json, hl);
    if (ndata) memcpy(buf + 8 + hl, data, ndata);
    ok = test_write_file(path, buf, 8 + hl + ndata);
    free(buf);
    return ok;
}

/* ---- round trips ---- */

static void fill_pattern(unsigned char *p, size_t n, unsigned seed) {
    size_t i;
    for (i = 0; i < n; i++) p[i] = (unsigned char)((i * 131u + seed * 17u + 7u) >> 1);
}

static void test_crc_reference(void) {
    CHECK_INT(ref_crc32("123456789", 9), 0xCBF43926u); /* the standard check value */
}

static void test_round_trip_all_dtypes(void) {
    static const int64_t shapes[5][3] = {{0, 0, 0}, {5, 0, 0}, {3, 4, 0}, {2, 3, 4}, {3, 0, 2}};
    static const int ndims[5] = {0, 1, 2, 3, 3};
    static const char *const tags[PAR_DTYPE_COUNT] = {"F32", "BF16", "F16", "I32", "I64", "F64"};
    unsigned char *data[PAR_DTYPE_COUNT][5];
    size_t nbytes[PAR_DTYPE_COUNT][5];
    const char *path = test_path("all.safetensors");
    par_st_writer *w = NULL;
    par_st_file *f = NULL;
    int d, s;
    CHECK_OK(par_st_writer_create(path, &w));
    for (d = 0; d < PAR_DTYPE_COUNT; d++) {
        for (s = 0; s < 5; s++) {
            char name[64];
            int64_t numel = 1;
            int k;
            for (k = 0; k < ndims[s]; k++) numel *= shapes[s][k];
            nbytes[d][s] = (size_t)numel * par_dtype_size((par_dtype)d);
            data[d][s] = (unsigned char *)malloc(nbytes[d][s] + 1);
            fill_pattern(data[d][s], nbytes[d][s], (unsigned)(d * 5 + s));
            snprintf(name, sizeof name, "t.%s.%d", tags[d], s);
            CHECK_OK(par_st_writer_add(w, name, (par_dtype)d, ndims[s], shapes[s], data[d][s]));
        }
    }
    CHECK_OK(par_st_writer_finish(w));

    /* the layout, parsed here by hand: tensors in name order, data in that order */
    {
        size_t n = 0, hl = 0, off;
        unsigned char *raw = test_read_file(path, &n);
        char *hdr;
        int i;
        CHECK(raw != NULL && n >= 8);
        if (raw) {
            for (i = 7; i >= 0; i--) hl = hl << 8 | raw[i];
            CHECK((8 + hl) % 8 == 0);
            CHECK(raw[8] == '{');
            CHECK(raw[8 + hl - 1] == ' ' || raw[8 + hl - 1] == '}');
            hdr = (char *)malloc(hl + 1);
            memcpy(hdr, raw + 8, hl);
            hdr[hl] = 0;
            CHECK(strstr(hdr, "\"t.BF16.2\":{\"dtype\":\"BF16\",\"shape\":[3,4],") != NULL);
            CHECK(strstr(hdr, "\"t.F32.0\":{\"dtype\":\"F32\",\"shape\":[],") != NULL);
            /* bytewise name order: t.BF16.* < t.F16.* < t.F32.* < t.F64.* < t.I32.* < t.I64.* */
            off = 8 + hl;
            {
                static const int order[PAR_DTYPE_COUNT] = {PAR_BF16, PAR_F16, PAR_F32, PAR_F64, PAR_I32, PAR_I64};
                int o, ok = 1;
                for (o = 0; o < PAR_DTYPE_COUNT; o++)
                    for (s = 0; s < 5; s++) {
                        d = order[o];
                        ok &= off + nbytes[d][s] <= n && memcmp(raw + off, data[d][s], nbytes[d][s]) == 0;
                        off += nbytes[d][s];
                    }
                CHECK_MSG(ok, "data section is not the tensors in name order");
                CHECK_INT(off, n);
            }
            free(hdr);
            free(raw);
        }
    }

    CHECK_OK(par_st_open(path, &f));
    CHECK_INT(par_st_count(f), PAR_DTYPE_COUNT * 5);
    if (f) {
        int i, checked = -1;
        for (i = 1; i < par_st_count(f); i++)
            CHECK(strcmp(par_st_tensor_at(f, i - 1)->name, par_st_tensor_at(f, i)->name) < 0);
        CHECK(par_st_tensor_at(f, -1) == NULL && par_st_tensor_at(f, par_st_count(f)) == NULL);
        for (d = 0; d < PAR_DTYPE_COUNT; d++) {
            for (s = 0; s < 5; s++) {
                char name[64], key[80];
                const par_st_tensor *t;
                unsigned char *back = (unsigned char *)malloc(nbytes[d][s] + 1);
                int k;
                snprintf(name, sizeof name, "t.%s.%d", tags[d], s);
                t = par_st_find(f, name);
                CHECK_MSG(t != NULL, "%s missing", name);
                if (!t) continue;
                CHECK_STR(t->name, name);
                CHECK_INT(t->dtype, d);
                CHECK_INT(t->ndim, ndims[s]);
                for (k = 0; k < ndims[s]; k++) CHECK_INT(t->shape[k], shapes[s][k]);
                CHECK_INT(t->nbytes, nbytes[d][s]);
                CHECK_INT(t->numel, nbytes[d][s] / par_dtype_size((par_dtype)d));
                CHECK(t->has_checksum);
                CHECK_INT(t->checksum, ref_crc32(data[d][s], nbytes[d][s]));
                snprintf(key, sizeof key, "par.crc32.%s", name);
                {
                    char hex[16];
                    snprintf(hex, sizeof hex, "%08lx", (unsigned long)ref_crc32(data[d][s], nbytes[d][s]));
                    CHECK(par_st_metadata(f, key) && strcmp(par_st_metadata(f, key), hex) == 0);
                }
                CHECK_OK(par_st_read(f, name, ndims[s], shapes[s], 0, t->numel, (par_dtype)d, back));
                CHECK(memcmp(back, data[d][s], nbytes[d][s]) == 0);
                free(back);
            }
        }
        CHECK_OK(par_st_verify(f, &checked));
        CHECK_INT(checked, PAR_DTYPE_COUNT * 5);
    }
    par_st_close(f);
    for (d = 0; d < PAR_DTYPE_COUNT; d++)
        for (s = 0; s < 5; s++) free(data[d][s]);
}

static void test_names_and_metadata(void) {
    const char *path = test_path("names.safetensors");
    static const char *const names[] = {"q\"uote",
                                        "back\\slash",
                                        "new\nline\ttab\x01\x1f",
                                        "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",
                                        "",
                                        "model.layers.0.self_attn.q_proj.weight"};
    const int n = (int)(sizeof names / sizeof names[0]);
    par_st_writer *w = NULL;
    par_st_file *f = NULL;
    float v[6] = {1, 2, 3, 4, 5, 6};
    int64_t shape[1] = {1};
    int i;
    CHECK_OK(par_st_writer_create(path, &w));
    for (i = 0; i < n; i++) CHECK_OK(par_st_writer_add(w, names[i], PAR_F32, 1, shape, &v[i]));
    CHECK_OK(par_st_writer_metadata(w, "format", "pt"));
    CHECK_OK(par_st_writer_metadata(w, "step", "1"));
    CHECK_OK(par_st_writer_metadata(w, "step", "42")); /* replaces */
    CHECK_OK(par_st_writer_metadata(w, "odd \"key\"\n", "va\\lue \xc3\xa9"));
    CHECK_ERR(par_st_writer_metadata(w, "par.crc32.x", "0"), PAR_EINVAL, "reserved");
    CHECK_ERR(par_st_writer_metadata(w, "bad", "\xff"), PAR_EINVAL, "UTF-8");
    CHECK_ERR(par_st_writer_add(w, "__metadata__", PAR_F32, 1, shape, v), PAR_EINVAL, "__metadata__");
    CHECK_ERR(par_st_writer_add(w, "\xc3", PAR_F32, 1, shape, v), PAR_EINVAL, "UTF-8");
    CHECK_OK(par_st_writer_finish(w));
    CHECK_OK(par_st_open(path, &f));
    CHECK_INT(par_st_count(f), n);
    for (i = 0; i < n; i++) {
        float x = 0;
        CHECK_MSG(par_st_find(f, names[i]) != NULL, "name %d", i);
        CHECK_OK(par_st_read(f, names[i], 1, shape, 0, 1, PAR_F32, &x));
        CHECK(x == v[i]);
    }
    CHECK(par_st_metadata(f, "format") && strcmp(par_st_metadata(f, "format"), "pt") == 0);
    CHECK(par_st_metadata(f, "step") && strcmp(par_st_metadata(f, "step"), "42") == 0);
    CHECK(par_st_metadata(f, "odd \"key\"\n") && strcmp(par_st_metadata(f, "odd \"key\"\n"), "va\\lue \xc3\xa9") == 0);
    CHECK(par_st_metadata(f, "absent") == NULL);
    CHECK_INT(par_st_metadata_count(f), 3 + n); /* user keys + one checksum per tensor */
    {
        const char *k = NULL, *val = NULL, *prev = NULL;
        int ok = 1;
        for (i = 0; i < par_st_metadata_count(f); i++) {
            ok &= par_st_metadata_at(f, i, &k, &val) == PAR_OK && (!prev || strcmp(prev, k) < 0);
            prev = k;
        }
        CHECK_MSG(ok, "metadata not in key order");
        CHECK_ERR(par_st_metadata_at(f, par_st_metadata_count(f), &k, &val), PAR_EINVAL, "outside");
    }
    par_st_close(f);

    /* a hand-written header: escapes of every kind, whitespace anywhere, fields in any order */
    {
        const char *json =
            " \n{ \"__metadata__\" : { \"k\\u00e9y\" : \"\\ud83d\\ude00\\/\\b\\f\" } ,\r\n"
            "\t\"a\\u0041\\\"\" : { \"shape\" : [ 1 ] , \"extra\" : {\"x\": [1, -2.5e3, true, null, \"s\"]},"
            " \"data_offsets\" : [ 0 , 4 ] , \"dtype\" : \"F32\" } }   ";
        float one = 1.0f, got = 0;
        CHECK(write_raw(path, json, &one, 4));
        CHECK_OK(par_st_open(path, &f));
        CHECK(par_st_find(f, "aA\"") != NULL);
        CHECK(par_st_metadata(f, "k\xc3\xa9y") &&
              strcmp(par_st_metadata(f, "k\xc3\xa9y"), "\xf0\x9f\x98\x80/\b\f") == 0);
        CHECK_OK(par_st_read(f, "aA\"", 0, NULL, 0, 1, PAR_F32, &got));
        CHECK(got == 1.0f);
        CHECK(par_st_find(f, "aA\"") && !par_st_find(f, "aA\"")->has_checksum);
        {
            int checked = -1;
            CHECK_OK(par_st_verify(f, &checked));
            CHECK_INT(checked, 0); /* no checksums in this file: nothing to verify */
        }
        par_st_close(f);
    }
    /* an empty file of tensors is valid */
    CHECK(write_raw(path, "{}", NULL, 0));
    CHECK_OK(par_st_open(path, &f));
    CHECK_INT(par_st_count(f), 0);
    par_st_close(f);
    CHECK(write_raw(path, "{\"__metadata__\":null}", NULL, 0));
    CHECK_OK(par_st_open(path, &f));
    par_st_close(f);
}

/* ---- partial reads and conversions ---- */

static uint16_t bf16_of(float x) { /* exact for the values used: low 16 bits zero */
    uint32_t u;
    memcpy(&u, &x, 4);
    return (uint16_t)(u >> 16);
}

static void test_partial_reads(void) {
    const char *path = test_path("partial.safetensors");
    enum { R = 4, C = 6 };
    uint16_t bf[R * C], hf[R * C];
    float f32[R * C], got[R * C];
    double f64[R * C], got64[R * C];
    int32_t i32[R * C], gi[R * C];
    int64_t shape[2] = {R, C}, wrong[2] = {C, R};
    par_st_writer *w = NULL;
    par_st_file *f = NULL;
    int i, ok;
    for (i = 0; i < R * C; i++) {
        float x = (float)(i - 10) * 0.25f; /* exact in bf16, f16, f32, f64 */
        bf[i] = bf16_of(x);
        f32[i] = x;
        f64[i] = x;
        i32[i] = i * 1000 - 7;
    }
    /* f16 bits built by hand: sign, exponent 15-biased, 10-bit mantissa */
    for (i = 0; i < R * C; i++) {
        double a = fabs(f32[i]);
        uint16_t h = 0;
        if (a != 0) {
            int e = 0;
            double m = frexp(a, &e); /* a = m * 2^e, m in [0.5,1) */
            h = (uint16_t)(((e - 1 + 15) << 10) | (uint16_t)((m * 2 - 1) * 1024));
        }
        hf[i] = (uint16_t)(h | (f32[i] < 0 ? 0x8000 : 0));
    }
    CHECK_OK(par_st_writer_create(path, &w));
    CHECK_OK(par_st_writer_add(w, "bf", PAR_BF16, 2, shape, bf));
    CHECK_OK(par_st_writer_add(w, "hf", PAR_F16, 2, shape, hf));
    CHECK_OK(par_st_writer_add(w, "f32", PAR_F32, 2, shape, f32));
    CHECK_OK(par_st_writer_add(w, "f64", PAR_F64, 2, shape, f64));
    CHECK_OK(par_st_writer_add(w, "i32", PAR_I32, 2, shape, i32));
    CHECK_OK(par_st_writer_finish(w));
    CHECK_OK(par_st_open(path, &f));

    /* row 1..2 of the bf16 and f16 tensors as f32 */
    memset(got, 0, sizeof got);
    CHECK_OK(par_st_read(f, "bf", 2, shape, C, 2 * C, PAR_F32, got));
    for (ok = 1, i = 0; i < 2 * C; i++) ok &= got[i] == f32[C + i];
    CHECK_MSG(ok, "bf16 -> f32 partial read");
    memset(got, 0, sizeof got);
    CHECK_OK(par_st_read(f, "hf", 2, shape, 5, 7, PAR_F32, got));
    for (ok = 1, i = 0; i < 7; i++) ok &= got[i] == f32[5 + i];
    CHECK_MSG(ok, "f16 -> f32 partial read");
    CHECK(got[7] == 0); /* nothing past the range */
    /* whole tensors, converted: f32 -> bf16, f64 -> f32, bf16 -> f64, f16 -> bf16 */
    {
        uint16_t b2[R * C];
        CHECK_OK(par_st_read(f, "f32", 0, NULL, 0, R * C, PAR_BF16, b2));
        CHECK(memcmp(b2, bf, sizeof bf) == 0);
        CHECK_OK(par_st_read(f, "hf", 0, NULL, 0, R * C, PAR_BF16, b2));
        CHECK(memcmp(b2, bf, sizeof bf) == 0);
        CHECK_OK(par_st_read(f, "f32", 0, NULL, 0, R * C, PAR_F16, b2));
        CHECK(memcmp(b2, hf, sizeof hf) == 0);
    }
    CHECK_OK(par_st_read(f, "f64", 2, shape, 0, R * C, PAR_F32, got));
    CHECK(memcmp(got, f32, sizeof f32) == 0);
    CHECK_OK(par_st_read(f, "bf", 2, shape, 0, R * C, PAR_F64, got64));
    CHECK(memcmp(got64, f64, sizeof f64) == 0);
    CHECK_OK(par_st_read(f, "i32", 2, shape, 3, 4, PAR_I32, gi));
    CHECK(memcmp(gi, i32 + 3, 4 * sizeof *gi) == 0);
    CHECK_OK(par_st_read(f, "i32", 2, shape, R * C, 0, PAR_I32, NULL)); /* empty range at the end */

    /* errors */
    CHECK_ERR(par_st_read(f, "bf", 2, wrong, 0, 1, PAR_F32, got), PAR_ESHAPE,
              "tensor \"bf\" has shape [4,6], expected [6,4]");
    CHECK_ERR(par_st_read(f, "bf", 1, shape, 0, 1, PAR_F32, got), PAR_ESHAPE, "expected [4]");
    CHECK_ERR(par_st_read(f, "nope", 2, shape, 0, 1, PAR_F32, got), PAR_EINVAL, "no tensor \"nope\"");
    CHECK_ERR(par_st_read(f, "bf", 2, shape, 20, 5, PAR_F32, got), PAR_EINVAL, "outside tensor \"bf\"");
    CHECK_ERR(par_st_read(f, "bf", 2, shape, -1, 1, PAR_F32, got), PAR_EINVAL, "outside");
    CHECK_ERR(par_st_read(f, "bf", 2, shape, 0, -1, PAR_F32, got), PAR_EINVAL, "outside");
    CHECK_ERR(par_st_read(f, "bf", 2, shape, INT64_MAX, 2, PAR_F32, got), PAR_EINVAL, "outside");
    CHECK_ERR(par_st_read(f, "i32", 2, shape, 0, 1, PAR_F32, got), PAR_EINVAL, "integer tensors");
    CHECK_ERR(par_st_read(f, "f32", 2, shape, 0, 1, PAR_I32, gi), PAR_EINVAL, "cannot be read as i32");
    CHECK_ERR(par_st_read(f, "f32", 2, shape, 0, 1, PAR_F32, NULL), PAR_EINVAL, "NULL");
    CHECK_ERR(par_st_read(NULL, "f32", 2, shape, 0, 1, PAR_F32, got), PAR_EINVAL, "NULL");
    CHECK_ERR(par_st_read(f, "f32", 2, shape, 0, 1, (par_dtype)99, got), PAR_EINVAL, "dtype");
    par_st_close(f);
}

static void test_streaming(void) {
    const char *path = test_path("stream.safetensors");
    float a[10], b[3] = {7, 8, 9}, back[10];
    int64_t sa[1] = {10}, sb[1] = {3};
    par_st_writer *w = NULL;
    par_st_file *f = NULL;
    int i;
    for (i = 0; i < 10; i++) a[i] = (float)i * 1.5f;
    CHECK_OK(par_st_writer_create(path, &w));
    CHECK_OK(par_st_writer_add(w, "z_streamed", PAR_F32, 1, sa, NULL));
    CHECK_OK(par_st_writer_add(w, "a_pointer", PAR_F32, 1, sb, b));
    CHECK_OK(par_st_writer_write(w, "z_streamed", a, 4));
    CHECK_OK(par_st_writer_write(w, "z_streamed", a + 4, 0));
    CHECK_ERR(par_st_writer_write(w, "z_streamed", a + 4, 7), PAR_EINVAL, "overflow tensor \"z_streamed\"");
    CHECK_ERR(par_st_writer_write(w, "a_pointer", b, 1), PAR_EINVAL, "not for streaming");
    CHECK_ERR(par_st_writer_write(w, "missing", b, 1), PAR_EINVAL, "no tensor \"missing\"");
    CHECK_ERR(par_st_writer_add(w, "late", PAR_F32, 1, sb, b), PAR_EINVAL, "after streaming began");
    CHECK_ERR(par_st_writer_metadata(w, "late", "x"), PAR_EINVAL, "after streaming began");
    CHECK_OK(par_st_writer_write(w, "z_streamed", a + 4, 6));
    CHECK_OK(par_st_writer_finish(w));
    CHECK_OK(par_st_open(path, &f));
    CHECK_OK(par_st_read(f, "z_streamed", 1, sa, 0, 10, PAR_F32, back));
    CHECK(memcmp(back, a, sizeof a) == 0);
    CHECK_OK(par_st_read(f, "a_pointer", 1, sb, 0, 3, PAR_F32, back));
    CHECK(memcmp(back, b, sizeof b) == 0);
    CHECK_OK(par_st_verify(f, NULL));
    par_st_close(f);

    /* a layout error found by the first stream write sticks: finish reports it and writes nothing */
    path = test_path("dup.safetensors");
    CHECK_OK(par_st_writer_create(path, &w));
    CHECK_OK(par_st_writer_add(w, "x", PAR_F32, 1, sb, NULL));
    CHECK_OK(par_st_writer_add(w, "x", PAR_F32, 1, sb, NULL));
    CHECK_ERR(par_st_writer_write(w, "x", b, 1), PAR_EINVAL, "tensor \"x\" was added twice");
    CHECK_ERR(par_st_writer_write(w, "x", b, 1), PAR_EINVAL, "an earlier call failed");
    CHECK_ERR(par_st_writer_finish(w), PAR_EINVAL, "an earlier call failed: par_st_writer_write");
    CHECK(!test_file_exists(path));
}

/* ---- atomic replacement ---- */

static void test_atomic(void) {
    const char *path = test_path("keep.safetensors");
    char tmp[600];
    unsigned char *before, *after;
    size_t nb = 0, na = 0;
    float v[4] = {1, 2, 3, 4}, other = 5;
    int64_t shape[1] = {4}, one[1] = {1};
    par_st_writer *w = NULL;
    par_st_file *f = NULL;

    CHECK_OK(par_st_writer_create(path, &w));
    CHECK_OK(par_st_writer_add(w, "v", PAR_F32, 1, shape, v));
    CHECK_OK(par_st_writer_finish(w));
    before = test_read_file(path, &nb);
    CHECK(before != NULL);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld.0", path, (long)getpid());

    /* aborted: the old file stays, the temporary file is gone */
    CHECK_OK(par_st_writer_create(path, &w));
    CHECK(test_file_exists(tmp));
    CHECK_OK(par_st_writer_add(w, "other", PAR_F32, 1, one, &other));
    par_st_writer_abort(w);
    CHECK(!test_file_exists(tmp));
    after = test_read_file(path, &na);
    CHECK(after && na == nb && memcmp(before, after, nb) == 0);
    free(after);

    /* finish fails (incomplete streamed tensor; a duplicate name): same */
    CHECK_OK(par_st_writer_create(path, &w));
    CHECK_OK(par_st_writer_add(w, "s", PAR_F32, 1, shape, NULL));
    CHECK_OK(par_st_writer_write(w, "s", v, 2));
    CHECK_ERR(par_st_writer_finish(w), PAR_EINVAL, "streamed tensor \"s\" is incomplete (8 of 16 bytes written)");
    CHECK(!test_file_exists(tmp));
    CHECK_OK(par_st_writer_create(path, &w));
    CHECK_OK(par_st_writer_add(w, "d", PAR_F32, 1, shape, v));
    CHECK_OK(par_st_writer_add(w, "d", PAR_F32, 1, one, v));
    CHECK_ERR(par_st_writer_finish(w), PAR_EINVAL, "tensor \"d\" was added twice");
    CHECK(!test_file_exists(tmp));
    after = test_read_file(path, &na);
    CHECK(after && na == nb && memcmp(before, after, nb) == 0);
    free(after);

    /* two writers of one path at once get different temporary files */
    {
        par_st_writer *w2 = NULL;
        CHECK_OK(par_st_writer_create(path, &w));
        CHECK_OK(par_st_writer_create(path, &w2));
        par_st_writer_abort(w2);
        par_st_writer_abort(w);
    }

    /* the target is a directory: rename fails, the directory and the old contents stay */
    {
        const char *d = test_path("adir");
        CHECK(mkdir(d, 0700) == 0);
        CHECK_OK(par_st_writer_create(d, &w));
        CHECK_OK(par_st_writer_add(w, "v", PAR_F32, 1, shape, v));
        CHECK_ERR(par_st_writer_finish(w), PAR_EIO, "cannot rename");
        {
            struct stat st;
            CHECK(stat(d, &st) == 0 && S_ISDIR(st.st_mode));
        }
        snprintf(tmp, sizeof tmp, "%s.tmp.%ld.0", d, (long)getpid());
        CHECK(!test_file_exists(tmp));
        CHECK_ERR(par_st_open(d, &f), PAR_EIO, "directory");
        rmdir(d);
    }
    /* the directory does not exist: create fails and says which file */
    CHECK_ERR(par_st_writer_create(test_path("no/such/dir/x.safetensors"), &w), PAR_EIO,
              "cannot create the temporary file");
    CHECK(w == NULL);
    CHECK_ERR(par_st_writer_create("", &w), PAR_EINVAL, "empty path");
    CHECK_ERR(par_st_writer_finish(NULL), PAR_EINVAL, "NULL");
    par_st_writer_abort(NULL);

    /* the old file still loads */
    CHECK_OK(par_st_open(path, &f));
    CHECK(par_st_find(f, "v") != NULL && par_st_count(f) == 1);
    par_st_close(f);
    free(before);
}

static void test_writer_args(void) {
    par_st_writer *w = NULL;
    int64_t neg[2] = {2, -1}, big[3] = {INT64_MAX / 2, 4, 4}, s1[1] = {1};
    float x = 0;
    CHECK_OK(par_st_writer_create(test_path("args.safetensors"), &w));
    CHECK_ERR(par_st_writer_add(w, "n", PAR_F32, 2, neg, &x), PAR_EINVAL, "dim 1 is negative");
    CHECK_ERR(par_st_writer_add(w, "b", PAR_F32, 3, big, &x), PAR_EINVAL, "larger than 2^63 bytes");
    CHECK_ERR(par_st_writer_add(w, "d", (par_dtype)42, 1, s1, &x), PAR_EINVAL, "unknown dtype");
    CHECK_ERR(par_st_writer_add(w, "m", PAR_F32, PARALLEL_MAX_DIMS + 1, big, &x), PAR_EINVAL, "dims");
    CHECK_ERR(par_st_writer_add(w, "m", PAR_F32, 1, NULL, &x), PAR_EINVAL, "NULL");
    CHECK_ERR(par_st_writer_write(w, "m", NULL, 1), PAR_EINVAL, "NULL");
    par_st_writer_abort(w);
}

/* ---- corrupt files ---- */

/* A small valid file with checksums, as bytes. */
static unsigned char *valid_file(size_t *n) {
    const char *path = test_path("valid.safetensors");
    float a[6] = {1, 2, 3, 4, 5, 6};
    uint16_t b[3] = {0x3f80, 0x4000, 0x4040};
    int64_t sa[2] = {2, 3}, sb[1] = {3};
    par_st_writer *w = NULL;
    if (par_st_writer_create(path, &w) != PAR_OK) return NULL;
    par_st_writer_add(w, "a", PAR_F32, 2, sa, a);
    par_st_writer_add(w, "b", PAR_BF16, 1, sb, b);
    par_st_writer_metadata(w, "format", "pt");
    if (par_st_writer_finish(w) != PAR_OK) return NULL;
    return test_read_file(path, n);
}

static void test_truncations(void) {
    const char *path = test_path("trunc.safetensors");
    size_t n = 0, len;
    unsigned char *good = valid_file(&n);
    int all_fail = 1;
    CHECK(good != NULL && n > 8);
    if (!good) return;
    for (len = 0; len < n; len++) {
        par_st_file *f = NULL;
        par_status st;
        CHECK(test_write_file(path, good, len));
        st = par_st_open(path, &f);
        if (st == PAR_OK || f != NULL) {
            all_fail = 0;
            fprintf(stderr, "truncation to %zu of %zu bytes was accepted\n", len, n);
            par_st_close(f);
        }
        if (len == 0) CHECK_ERR(st, PAR_EIO, "the file is empty");
        if (len == 5) CHECK_ERR(st, PAR_EIO, "fewer than the 8-byte header length");
        if (len == 20) CHECK_ERR(st, PAR_EIO, "only 12 follow");
        if (len == n - 1)
            CHECK_ERR(st, PAR_EIO, "tensor \"b\" ends at data byte 30 but the data section has only 29 bytes");
    }
    CHECK_MSG(all_fail, "every truncation must be rejected");
    /* and the full file is fine */
    {
        par_st_file *f = NULL;
        CHECK(test_write_file(path, good, n));
        CHECK_OK(par_st_open(path, &f));
        par_st_close(f);
    }
    free(good);
}

/* Bad length fields, then the header corpus. */
static void test_corrupt_headers(void) {
    const char *path = test_path("bad.safetensors");
    unsigned char data[64];
    par_st_file *f = NULL;
    memset(data, 0, sizeof data);

    {
        unsigned char buf[32];
        memset(buf, ' ', sizeof buf);
        memset(buf, 0, 8);
        buf[5] = 1; /* 2^40 */
        CHECK(test_write_file(path, buf, sizeof buf));
        CHECK_ERR(par_st_open(path, &f), PAR_EPARSE, "exceeds the 100000000-byte limit");
        memset(buf, 0, 8);
        buf[0] = 200;
        CHECK(test_write_file(path, buf, sizeof buf));
        CHECK_ERR(par_st_open(path, &f), PAR_EIO, "header length says 200 bytes but only 24 follow");
        memset(buf, 0, 8);
        CHECK(test_write_file(path, buf, sizeof buf));
        CHECK_ERR(par_st_open(path, &f), PAR_EPARSE, "header length is 0");
    }
    CHECK(f == NULL);
    CHECK_ERR(par_st_open(test_path("does-not-exist"), &f), PAR_EIO, "cannot open");
    CHECK_ERR(par_st_open(NULL, &f), PAR_EINVAL, "NULL");

    {
        static const struct {
            const char *json;
            size_t ndata;
            par_status status;
            const char *needle;
        } cases[] = {
            {"hello", 0, PAR_EPARSE, "not a JSON object"},
            {"[1,2]", 0, PAR_EPARSE, "not a JSON object"},
            {"{", 0, PAR_EPARSE, "expected a string as a tensor name, found the end of the header"},
            {"{\"a\":}", 0, PAR_EPARSE, "tensor \"a\" is not an object"},
            {"{\"a\" {}}", 0, PAR_EPARSE, "expected ':'"},
            {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}} x", 4, PAR_EPARSE,
             "'x' after the header's JSON object"},
            {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}\0", 4, PAR_EPARSE, "only space padding"},
            {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},}", 4, PAR_EPARSE, "expected a string"},
            {"{\"a", 0, PAR_EPARSE, "unterminated string"},
            {"{\"a\\q\":1}", 0, PAR_EPARSE, "unknown escape \\'q'"},
            {"{\"a\\u12\":1}", 0, PAR_EPARSE, "4 hex digits"},
            {"{\"a\\udc00\":1}", 0, PAR_EPARSE, "lone low surrogate"},
            {"{\"a\\ud800x\":1}", 0, PAR_EPARSE, "high surrogate"},
            {"{\"a\\u0000\":1}", 0, PAR_EPARSE, "\\u0000"},
            {"{\"a\tb\":1}", 0, PAR_EPARSE, "raw control byte 0x09"},
            {"{\"\xc3\x28\":1}", 0, PAR_EPARSE, "invalid UTF-8"},
            {"{\"\xed\xa0\x80\":1}", 0, PAR_EPARSE, "invalid UTF-8"}, /* an encoded surrogate */
            {"{\"a\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, PAR_EPARSE,
             "tensor \"a\" has unknown dtype \"F33\""},
            {"{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4, PAR_EUNSUPPORTED,
             "dtype U8, which parallel.h does not read"},
            {"{\"a\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, PAR_EPARSE,
             "expected a string for tensor \"a\""},
            {"{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, PAR_EPARSE, "tensor \"a\" has no \"dtype\""},
            {"{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, PAR_EPARSE, "has no \"shape\""},
            {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, PAR_EPARSE, "has no \"data_offsets\""},
            {"{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, PAR_EPARSE,
             "\"dtype\" twice"},
            {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, PAR_EPARSE,
             "tensor \"a\" shape entry 0 is negative"},
            {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1.0],\"data_offsets\":[0,4]}}", 4, PAR_EPARSE, "is not an integer"},
            {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1e0],\"data_offsets\":[0,4]}}", 4, PAR_EPARSE, "is not an integer"},
            {"{\"a\":{\"dtype\":\"F32\",\"shape\":[01],\"data_offsets\":[0,4]}}", 4, PAR_EPARSE, "leading zero"},
            {"{\"a\":{\"dtype\":\"F32\",\"shape\":[\"1\"],\"data_offsets\":[0,4]}}", 4, PAR_EPARSE, "is not a number"},
            {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,99999999999999999999]}}", 4, PAR_EPARSE,
             "larger than 2^63-1"},
            {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],\"data_offsets\":[0,4]}}", 4, PAR_EPARSE,
             "more than 2^63 elements"},
            {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2305843009213693952,2],\"data_offsets\":[0,4]}}", 4, PAR_EPARSE,
             "more than 2^63 bytes"},
            {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4, PAR_EUNSUPPORTED,
             "more than 8 dims"},
            {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 4, PAR_EPARSE,
             "data_offsets has more than 2 entries"},
            {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4]}}", 4, PAR_EPARSE,
             "data_offsets has 1 entries, not 2"},
            {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 4, PAR_EPARSE,
             "end before they begin"},
            {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}", 24, PAR_EPARSE,
             "tensor \"a\" has shape [2,3] of F32 (24 bytes) but data_offsets [0,20] span 20 bytes"},
            {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[2],"
             "\"data_offsets\":[4,12]}}",
             12, PAR_EPARSE, "tensor \"b\" (bytes [4,12)) overlaps tensor \"a\" (bytes [0,8))"},
            {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[2],"
             "\"data_offsets\":[0,8]}}",
             8, PAR_EPARSE, "overlaps"},
            {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, PAR_EPARSE,
             "4 unused bytes before tensor \"a\""},
            {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 9, PAR_EPARSE,
             "5 bytes of data after the last tensor"},
            {"{}", 3, PAR_EPARSE, "3 bytes of data follow a header without tensors"},
            {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 6, PAR_EIO, "truncated"},
            {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"a\":{\"dtype\":\"F32\",\"shape\":[1],"
             "\"data_offsets\":[4,8]}}",
             8, PAR_EPARSE, "tensor \"a\" appears twice"},
            {"{\"__metadata__\":{\"k\":1}}", 0, PAR_EPARSE, "value of \"k\" is '1', not a string"},
            {"{\"__metadata__\":{\"k\":{\"x\":\"y\"}}}", 0, PAR_EPARSE, "not a string"},
            {"{\"__metadata__\":[\"k\"]}", 0, PAR_EPARSE, "__metadata__ must be an object of strings"},
            {"{\"__metadata__\":{},\"__metadata__\":{}}", 0, PAR_EPARSE, "__metadata__ appears twice"},
            {"{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0, PAR_EPARSE, "key \"k\" appears twice"},
            {"{\"__metadata__\":{\"par.crc32.a\":\"xyz\"},\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]"
             "}}",
             4, PAR_EPARSE, "\"par.crc32.a\" is \"xyz\", not 8 hex digits"},
            {"{\"__metadata__\":{\"par.crc32.a\":\"123456789\"},\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_"
             "offsets\":[0,4]}}",
             4, PAR_EPARSE, "not 8 hex digits"},
            {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"x\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["
             "[[[[[[[[[[["
             "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]],\"data_offsets\":[0,4]}}",
             4, PAR_EPARSE, "nested more than 64 deep"},
            {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"x\":tru,\"data_offsets\":[0,4]}}", 4, PAR_EPARSE,
             "expected a value, found 't'"},
        };
        size_t i;
        for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            size_t jl = strlen(cases[i].json);
            char json[512];
            par_status st;
            memcpy(json, cases[i].json, jl + 1);
            if (strstr(cases[i].needle, "only space padding")) json[jl++] = 0, json[jl] = 0; /* a NUL byte of padding */
            {
                unsigned char buf[1024];
                size_t k;
                for (k = 0; k < 8; k++) buf[k] = (unsigned char)((uint64_t)jl >> (8 * k));
                memcpy(buf + 8, json, jl);
                memcpy(buf + 8 + jl, data, cases[i].ndata);
                CHECK(test_write_file(path, buf, 8 + jl + cases[i].ndata));
            }
            f = NULL;
            st = par_st_open(path, &f);
            CHECK_MSG(st == cases[i].status && strstr(par_last_error(), cases[i].needle) && f == NULL,
                      "case %zu (%s): got %s \"%s\", want %s with \"%s\"", i, cases[i].json, par_status_string(st),
                      par_last_error(), par_status_string(cases[i].status), cases[i].needle);
            CHECK(strncmp(par_last_error(), "par_st_open: ", 13) == 0 && strstr(par_last_error(), path) != NULL);
            par_st_close(f);
        }
    }
}

/* A flipped data byte: the file opens (the header is fine), partial reads work,
   whole-tensor reads and verify report the checksum mismatch. */
static void test_checksum_mismatch(void) {
    const char *path = test_path("flip.safetensors");
    size_t n = 0;
    unsigned char *good = valid_file(&n);
    par_st_file *f = NULL;
    float a[6];
    double a64[6];
    int checked = -1;
    CHECK(good != NULL);
    if (!good) return;
    good[n - 6 - 24 + 5] ^= 0x10; /* a byte of tensor "a" (24 bytes, before "b"'s 6) */
    CHECK(test_write_file(path, good, n));
    CHECK_OK(par_st_open(path, &f));
    CHECK_OK(par_st_read(f, "b", 0, NULL, 0, 3, PAR_F32, a));
    CHECK_OK(par_st_read(f, "a", 0, NULL, 0, 1, PAR_F32, a)); /* partial: not checked */
    CHECK_ERR(par_st_read(f, "a", 0, NULL, 0, 6, PAR_F32, a), PAR_EIO, "checksum mismatch in tensor \"a\"");
    CHECK_ERR(par_st_read(f, "a", 0, NULL, 0, 6, PAR_F64, a64), PAR_EIO, "checksum mismatch in tensor \"a\"");
    CHECK_ERR(par_st_verify(f, &checked), PAR_EIO, "par_st_verify");
    CHECK_ERR(par_st_verify(f, &checked), PAR_EIO, "checksum mismatch in tensor \"a\"");
    CHECK_INT(checked, 0);
    par_st_close(f);
    /* a bad checksum value in the header is caught the same way */
    good[n - 6 - 24 + 5] ^= 0x10;
    {
        char *hit = NULL;
        size_t i;
        for (i = 8; i + 10 < n && !hit; i++)
            if (memcmp(good + i, "par.crc32.b\":\"", 14) == 0) hit = (char *)good + i + 14;
        CHECK(hit != NULL);
        if (hit) hit[0] = hit[0] == '0' ? '1' : '0';
    }
    CHECK(test_write_file(path, good, n));
    CHECK_OK(par_st_open(path, &f));
    CHECK_ERR(par_st_read(f, "b", 0, NULL, 0, 3, PAR_BF16, a), PAR_EIO, "checksum mismatch in tensor \"b\"");
    CHECK_OK(par_st_read(f, "a", 0, NULL, 0, 6, PAR_F32, a));
    CHECK(a[5] == 6.0f);
    par_st_close(f);
    free(good);
}

/* Every header byte replaced by a few values: never a crash, and when the file
   still opens every tensor reads or fails cleanly. */
static void test_byte_flips(void) {
    static const unsigned char values[] = {0,   ' ', '"', '\\', '{', '}', '[',  ']',
                                           ',', ':', '0', '9',  '-', 'e', 0x80, 0xff};
    const char *path = test_path("fuzz.safetensors");
    size_t n = 0, i, v, opened = 0, runs = 0;
    unsigned char *good = valid_file(&n);
    FILE *io;
    CHECK(good != NULL);
    if (!good) return;
    CHECK(test_write_file(path, good, n));
    io = fopen(path, "r+b"); /* one byte changed in place per run (rewriting the file is slow) */
    CHECK(io != NULL);
    for (i = 0; io && i < n - 30; i++) {
        for (v = 0; v < sizeof values; v++) {
            par_st_file *f = NULL;
            if (good[i] == values[v]) continue;
            fseek(io, (long)i, SEEK_SET);
            fputc(values[v], io);
            fflush(io);
            runs++;
            if (par_st_open(path, &f) == PAR_OK) {
                int t;
                opened++;
                for (t = 0; t < par_st_count(f); t++) {
                    const par_st_tensor *x = par_st_tensor_at(f, t);
                    double buf[16];
                    if (x->numel <= 16) (void)par_st_read(f, x->name, 0, NULL, 0, x->numel, x->dtype, buf);
                }
                par_st_close(f);
            } else {
                CHECK_MSG(f == NULL && par_last_error()[0], "byte %zu = 0x%02x failed without a message", i, values[v]);
            }
        }
        fseek(io, (long)i, SEEK_SET);
        fputc(good[i], io);
        fflush(io);
    }
    if (io) fclose(io);
    CHECK(runs > 1000);
    CHECK(opened > 0 && opened < runs); /* most flips break the header; some (checksum digits) do not */
    free(good);
}

/* par_st_read_slice: every rank's slice of a 3-D tensor under tuple and
   plain maps equals the elements at its offsets (computed here by hand), read
   as f32 and converted to f64; wrong shapes and names are refused. */
static void test_read_slice(void) {
    static const char *const maps[] = {"[1,0,-1]", "[(1,0),-1,-1]", "[-1,-1,(0,1)]", "[-1,1,-1]", "[-1,-1,-1]"};
    const char *path = test_path("slice.safetensors");
    const int64_t shape[3] = {8, 4, 8}, bad[3] = {8, 4, 4};
    float data[256];
    double got[256];
    par_st_writer *w = NULL;
    par_st_file *f = NULL;
    par_mesh mesh;
    size_t m;
    int i, r;
    for (i = 0; i < 256; i++) data[i] = (float)i;
    CHECK_OK(par_st_writer_create(path, &w));
    CHECK_OK(par_st_writer_add(w, "t", PAR_F32, 3, shape, data));
    CHECK_OK(par_st_writer_finish(w));
    CHECK_OK(par_st_open(path, &f));
    CHECK_OK(par_mesh_parse("2,4", &mesh));
    for (m = 0; m < sizeof maps / sizeof maps[0]; m++) {
        par_layout l;
        CHECK_OK(par_layout_parse(&l, &mesh, 3, shape, maps[m]));
        for (r = 0; r < 8; r++) {
            int64_t off[3], ls[3], a, b, c, k = 0;
            int bad_count = 0;
            CHECK_OK(par_layout_local_offset(&l, r, off));
            par_layout_local_shape(&l, ls);
            CHECK_OK(par_st_read_slice(f, "t", &l, r, PAR_F64, got));
            for (a = 0; a < ls[0]; a++)
                for (b = 0; b < ls[1]; b++)
                    for (c = 0; c < ls[2]; c++, k++)
                        bad_count += got[k] != (double)(((off[0] + a) * 4 + off[1] + b) * 8 + off[2] + c);
            CHECK_MSG(bad_count == 0, "map %s rank %d: %d elements wrong", maps[m], r, bad_count);
        }
        if (m == 0) {
            par_layout lb;
            CHECK_OK(par_layout_parse(&lb, &mesh, 3, bad, maps[m]));
            CHECK_ERR(par_st_read_slice(f, "t", &lb, 0, PAR_F32, got), PAR_ESHAPE, "tensor \"t\" has shape [8,4,8], the layout [8,4,4]");
            CHECK_ERR(par_st_read_slice(f, "nope", &l, 0, PAR_F32, got), PAR_EINVAL, "no tensor \"nope\"");
            lb = l, lb.shape[0] = 7; /* an invalid layout: the error names the tensor it was meant for */
            CHECK_ERR(par_st_read_slice(f, "t", &lb, 0, PAR_F32, got), PAR_ELAYOUT,
                      "par_st_read_slice: tensor \"t\": tensor dim 0 (size 7) is not divisible by its shard");
            CHECK_ERR(par_st_read_slice(f, "t", &l, 0, (par_dtype)42, got), PAR_EINVAL, "unknown dtype 42");
            CHECK_ERR(par_st_read_slice(NULL, "t", &l, 0, PAR_F32, got), PAR_EINVAL, "NULL argument");
        }
    }
    par_st_close(f);
}

int main(void) {
    const char *base = getenv("TMPDIR");
    snprintf(test_dir, sizeof test_dir, "%s/par_st_test_%ld", base && base[0] ? base : "/tmp", (long)getpid());
    if (mkdir(test_dir, 0700) != 0) {
        fprintf(stderr, "cannot create %s\n", test_dir);
        return 1;
    }
    test_crc_reference();
    test_round_trip_all_dtypes();
    test_names_and_metadata();
    test_partial_reads();
    test_streaming();
    test_atomic();
    test_writer_args();
    test_truncations();
    test_corrupt_headers();
    test_checksum_mismatch();
    test_byte_flips();
    test_read_slice();
    {
        static const char *const files[] = {
            "all.safetensors",   "names.safetensors", "partial.safetensors", "stream.safetensors", "keep.safetensors",
            "valid.safetensors", "trunc.safetensors", "bad.safetensors",     "flip.safetensors",   "fuzz.safetensors",
            "slice.safetensors"};
        size_t i;
        for (i = 0; i < sizeof files / sizeof files[0]; i++) remove(test_path(files[i]));
        CHECK_MSG(rmdir(test_dir) == 0, "%s is not empty: a temporary file was left behind", test_dir);
    }
    return TEST_END("safetensors");
}
