/* tests/test_trace.c - the Chrome trace writer (>>trace).

   Nesting with begin/end, spans recorded after the fact, JSON read back by an
   independent parser (tests/trace_json.h: strict JSON, escapes decoded) with
   every event's fields checked, names with quotes, backslashes, control
   characters and UTF-8 (and cut at a character boundary), timestamps
   non-decreasing per track and equal to the times given, overlapping comm
   spans on separate tracks, coverage (exposed communication), bounded memory
   (capacity and depth overflow counted as dropped), the error sentences, and
   par_trace_gather_write over 4 thread ranks (equal to par_trace_write of the
   same traces, byte for byte) incl. collective failures that end every rank. */
#define _POSIX_C_SOURCE 200809L
#include "test.h"
#include "test_files.h"
#include "trace_json.h"
#include <math.h>
#include <stdlib.h>
#include <unistd.h>

static par_trace *make(int rank, int capacity) {
    par_trace_desc d = {0};
    par_trace *t = NULL;
    d.rank = rank, d.capacity = capacity;
    CHECK_OK(par_trace_create(&d, &t));
    return t;
}

static const tj_event *find(const tj_trace *tr, const char *ph, const char *name, long long pid) {
    int i;
    for (i = 0; i < tr->count; i++)
        if (!strcmp(tr->events[i].ph, ph) && !strcmp(tr->events[i].name, name) && tr->events[i].pid == pid)
            return &tr->events[i];
    return NULL;
}

/* The thread_name metadata of (pid, tid), or "" */
static const char *track_name(const tj_trace *tr, long long pid, long long tid) {
    int i;
    for (i = 0; i < tr->count; i++) {
        const tj_event *e = &tr->events[i];
        if (!strcmp(e->ph, "M") && !strcmp(e->name, "thread_name") && e->pid == pid && e->tid == tid) return e->arg_name;
    }
    return "";
}

/* In file order, ts never decreases within one (pid, tid). */
static int monotone_per_track(const tj_trace *tr) {
    int i, j;
    for (i = 0; i < tr->count; i++)
        for (j = i + 1; j < tr->count; j++) {
            const tj_event *a = &tr->events[i], *b = &tr->events[j];
            if (strcmp(a->ph, "X") || strcmp(b->ph, "X") || a->pid != b->pid || a->tid != b->tid) continue;
            if (b->ts < a->ts) return 0;
        }
    return 1;
}

static int load_ok(const char *path, tj_trace *tr) {
    int rc = tj_load(path, tr);
    CHECK_MSG(rc == 0, "%s does not parse: %s", path, tr->error);
    if (rc == 0) {
        CHECK_MSG(tj_first_malformed(tr) < 0, "event %d lacks a field", tj_first_malformed(tr));
        CHECK(tr->has_display_unit);
        CHECK(monotone_per_track(tr));
    }
    return rc == 0;
}

/* ---- tests ---- */

static void test_create_errors(void) {
    par_trace_desc d = {0};
    par_trace *t = (par_trace *)&d;
    CHECK_ERR(par_trace_create(NULL, &t), PAR_EINVAL, "NULL argument");
    CHECK(t == NULL);
    CHECK_ERR(par_trace_create(&d, NULL), PAR_EINVAL, "NULL argument");
    d.rank = -1;
    CHECK_ERR(par_trace_create(&d, &t), PAR_EINVAL, "rank -1 is negative");
    d.rank = 0, d.capacity = -5;
    CHECK_ERR(par_trace_create(&d, &t), PAR_EINVAL, "capacity -5");
    CHECK_ERR(par_trace_begin(NULL, "a", "compute"), PAR_EINVAL, "par_trace_begin: NULL argument");
    CHECK_ERR(par_trace_end(NULL), PAR_EINVAL, "par_trace_end: NULL argument");
    CHECK_ERR(par_trace_span(NULL, "a", "comm", 0, 1), PAR_EINVAL, "par_trace_span: NULL argument");
    CHECK_ERR(par_trace_write(NULL, 1, "x.json"), PAR_EINVAL, "NULL argument");
    CHECK_INT(par_trace_count(NULL), 0);
    CHECK_INT(par_trace_dropped(NULL), 0);
    par_trace_destroy(NULL); /* ignored */
}

static void test_clock(void) {
    double a = par_trace_now_us(), b = par_trace_now_us();
    CHECK(a > 0 && b >= a);
}

static void test_nesting(void) {
    par_trace *t = make(0, 0), *ts[1];
    tj_trace tr;
    const tj_event *outer, *inner, *second;
    CHECK_OK(par_trace_begin(t, "step 0", "compute"));
    CHECK_OK(par_trace_begin(t, "fwd block 0", "compute"));
    CHECK_OK(par_trace_end(t));
    CHECK_OK(par_trace_begin(t, "fwd block 1", "compute"));
    CHECK_OK(par_trace_end(t));
    CHECK_OK(par_trace_end(t));
    CHECK_INT(par_trace_count(t), 3);
    CHECK_INT(par_trace_dropped(t), 0);
    ts[0] = t;
    CHECK_OK(par_trace_write(ts, 1, test_path("nest.json")));
    if (load_ok(test_path("nest.json"), &tr)) {
        outer = find(&tr, "X", "step 0", 0), inner = find(&tr, "X", "fwd block 0", 0);
        second = find(&tr, "X", "fwd block 1", 0);
        CHECK(outer && inner && second);
        if (outer && inner && second) {
            CHECK(inner->ts >= outer->ts && inner->ts + inner->dur <= outer->ts + outer->dur + 1e-9);
            CHECK(second->ts >= inner->ts + inner->dur - 1e-9);
            CHECK(second->ts + second->dur <= outer->ts + outer->dur + 1e-9);
            CHECK_INT(outer->tid, inner->tid); /* nested: one track */
            CHECK_STR(outer->cat, "compute");
            CHECK(outer->ts == 0.0); /* times count from the earliest span */
        }
        CHECK(find(&tr, "M", "process_name", 0) != NULL);
        if (find(&tr, "M", "process_name", 0)) CHECK_STR(find(&tr, "M", "process_name", 0)->arg_name, "rank 0");
        if (outer) CHECK_STR(track_name(&tr, 0, outer->tid), "compute");
        tj_free(&tr);
    }
    par_trace_destroy(t);
}

/* After-the-fact spans: the file holds exactly the times given, relative to the earliest. */
static void test_after_the_fact(void) {
    par_trace *t = make(3, 0);
    tj_trace tr;
    const double base = 5000000.0;
    CHECK_OK(par_trace_span(t, "bwd block 2", "compute", base + 10.0, base + 30.0));
    CHECK_OK(par_trace_span(t, "all_reduce bucket 2", "comm", base + 20.25, base + 45.5));
    CHECK_OK(par_trace_span(t, "all_reduce bucket 1", "comm", base + 35.0, base + 60.125)); /* overlaps bucket 2 */
    CHECK_OK(par_trace_span(t, "all_reduce bucket 0", "comm", base + 70.0, base + 71.0));  /* after both */
    CHECK_OK(par_trace_span(t, "adamw", "optimizer", base + 61.0, base + 69.0));
    CHECK_OK(par_trace_span(t, "zero", "io", base + 80.0, base + 80.0));
    CHECK_ERR(par_trace_span(t, "backwards", "comm", base + 2.0, base + 1.0), PAR_EINVAL, "ends (");
    CHECK_ERR(par_trace_span(t, "nan", "comm", NAN, base), PAR_EINVAL, "non-finite");
    CHECK_OK(par_trace_write(&t, 1, test_path("after.json")));
    if (load_ok(test_path("after.json"), &tr)) {
        const tj_event *c = find(&tr, "X", "bwd block 2", 3), *b2 = find(&tr, "X", "all_reduce bucket 2", 3);
        const tj_event *b1 = find(&tr, "X", "all_reduce bucket 1", 3), *b0 = find(&tr, "X", "all_reduce bucket 0", 3);
        const tj_event *z = find(&tr, "X", "zero", 3);
        CHECK(c && b2 && b1 && b0 && z);
        if (c && b2 && b1 && b0 && z) {
            CHECK(c->ts == 0.0 && c->dur == 20.0);
            CHECK(fabs(b2->ts - 10.25) < 1e-9 && fabs(b2->dur - 25.25) < 1e-9);
            CHECK(fabs(b1->ts - 25.0) < 1e-9 && fabs(b1->dur - 25.125) < 1e-9);
            CHECK(z->dur == 0.0);
            CHECK_STR(b2->cat, "comm");
            CHECK(c->tid != b2->tid);                            /* comm beside compute */
            CHECK(b1->tid == b2->tid + 1);                       /* overlapping, not nested: next track */
            CHECK(b0->tid == b2->tid);                           /* after both: back on the first */
            CHECK_STR(track_name(&tr, 3, b2->tid), "comm");
            CHECK_STR(track_name(&tr, 3, b1->tid), "comm #2");
        }
        CHECK_INT(tj_count_spans(&tr, 3, NULL), 6);
        tj_free(&tr);
    }
    par_trace_destroy(t);
}

static void test_escapes(void) {
    const char *weird = "say \"hi\" \\ path\\to\tx\n\x01 \xce\xb1\xce\xb2 end";
    char longname[200], want[PAR_TRACE_NAME_MAX];
    par_trace *t = make(1, 0);
    tj_trace tr;
    int i;
    /* 46 ASCII bytes then a 2-byte character: it does not fit in 47, so the cut drops it whole */
    memset(longname, 'a', 46);
    memcpy(longname + 46, "\xce\xb1zzzz", 7);
    longname[53] = 0;
    memcpy(want, longname, 46);
    want[46] = 0;
    CHECK_OK(par_trace_span(t, weird, "comm", 1.0, 2.0));
    CHECK_OK(par_trace_span(t, longname, "compute", 1.0, 2.0));
    CHECK_OK(par_trace_span(t, "bad \xff byte", "io", 1.0, 2.0));
    CHECK_OK(par_trace_span(t, "cat \"q\"", "my \"cat\"", 1.0, 2.0));
    CHECK_OK(par_trace_write(&t, 1, test_path("esc.json")));
    if (load_ok(test_path("esc.json"), &tr)) {
        CHECK(find(&tr, "X", weird, 1) != NULL);
        CHECK(find(&tr, "X", want, 1) != NULL);
        CHECK(find(&tr, "X", "bad ? byte", 1) != NULL);
        CHECK(find(&tr, "X", "cat \"q\"", 1) != NULL);
        if (find(&tr, "X", "cat \"q\"", 1)) CHECK_STR(find(&tr, "X", "cat \"q\"", 1)->cat, "my \"cat\"");
        for (i = 0; i < tr.count; i++) CHECK(strlen(tr.events[i].name) < PAR_TRACE_NAME_MAX);
        tj_free(&tr);
    }
    par_trace_destroy(t);
}

static void test_capacity(void) {
    par_trace *t = make(2, 4);
    tj_trace tr;
    const tj_event *e;
    int i;
    for (i = 0; i < 10; i++) {
        char name[32];
        snprintf(name, sizeof name, "span %d", i);
        CHECK_OK(par_trace_span(t, name, "compute", i, i + 0.5));
    }
    CHECK_INT(par_trace_count(t), 4);
    CHECK_INT(par_trace_dropped(t), 6);
    /* nesting deeper than the stack: the extra spans are dropped, the rest kept */
    par_trace_destroy(t);
    t = make(2, 0);
    for (i = 0; i < PAR_TRACE_MAX_DEPTH + 6; i++) CHECK_OK(par_trace_begin(t, "deep", "compute"));
    for (i = 0; i < PAR_TRACE_MAX_DEPTH + 6; i++) CHECK_OK(par_trace_end(t));
    CHECK_INT(par_trace_count(t), PAR_TRACE_MAX_DEPTH);
    CHECK_INT(par_trace_dropped(t), 6);
    CHECK_OK(par_trace_write(&t, 1, test_path("deep.json")));
    par_trace_destroy(t);
    /* a big one grows in steps, and the file says what was dropped */
    t = make(0, 5000);
    for (i = 0; i < 6000; i++) par_trace_span(t, "s", "comm", i, i + 1);
    CHECK_INT(par_trace_count(t), 5000);
    CHECK_INT(par_trace_dropped(t), 1000);
    CHECK_OK(par_trace_write(&t, 1, test_path("cap.json")));
    if (load_ok(test_path("cap.json"), &tr)) {
        CHECK_INT(tj_count_spans(&tr, 0, "comm"), 5000);
        e = find(&tr, "M", "trace_dropped_spans", 0);
        CHECK(e && e->has_arg_dropped && e->arg_dropped == 1000);
        CHECK(find(&tr, "M", "process_labels", 0) != NULL);
        tj_free(&tr);
    }
    par_trace_destroy(t);
}

static void test_categories(void) {
    par_trace *t = make(0, 0);
    int i;
    char cat[32];
    for (i = 0; i < PAR_TRACE_MAX_CATEGORIES - 4; i++) { /* four are built in */
        snprintf(cat, sizeof cat, "extra%d", i);
        CHECK_OK(par_trace_span(t, "x", cat, 0, 1));
    }
    CHECK_ERR(par_trace_span(t, "x", "one too many", 0, 1), PAR_ECAPACITY, "at most");
    CHECK_ERR(par_trace_begin(t, "x", "one too many"), PAR_ECAPACITY, "one too many");
    CHECK_OK(par_trace_span(t, "x", "extra0", 0, 1)); /* known ones still work */
    CHECK_OK(par_trace_write(&t, 1, test_path("cats.json")));
    par_trace_destroy(t);
}

static void test_coverage(void) {
    par_trace *t = make(0, 0);
    const char *compute = "compute";
    double busy = -1, exposed = -1;
    CHECK_OK(par_trace_span(t, "c1", "compute", 0, 10));
    CHECK_OK(par_trace_span(t, "c2", "compute", 20, 30));
    CHECK_OK(par_trace_span(t, "a", "comm", 5, 25));
    CHECK_OK(par_trace_span(t, "b", "comm", 8, 12)); /* inside a: counts once */
    CHECK_OK(par_trace_span(t, "o", "optimizer", 12, 14));
    CHECK_OK(par_trace_coverage(t, "comm", &compute, 1, 0, 100, &busy, &exposed));
    CHECK(busy == 20.0 && exposed == 10.0); /* [10,20] is not under compute */
    CHECK_OK(par_trace_coverage(t, "comm", NULL, 0, 0, 100, &busy, &exposed));
    CHECK(busy == 20.0 && exposed == 8.0); /* the optimizer hides [12,14] too */
    CHECK_OK(par_trace_coverage(t, "comm", &compute, 1, 0, 15, &busy, &exposed));
    CHECK(busy == 10.0 && exposed == 5.0);
    CHECK_OK(par_trace_coverage(t, "io", NULL, 0, 0, 100, &busy, &exposed));
    CHECK(busy == 0.0 && exposed == 0.0);
    CHECK_ERR(par_trace_coverage(t, "comm", NULL, 0, 10, 5, &busy, &exposed), PAR_EINVAL, "bad window");
    CHECK_ERR(par_trace_coverage(t, NULL, NULL, 0, 0, 5, &busy, &exposed), PAR_EINVAL, "NULL");
    par_trace_destroy(t);
}

static void test_write_errors(void) {
    par_trace *t = make(0, 0), *u = make(0, 0), *two[2];
    FILE *f;
    char keep[16] = "";
    /* an existing file survives every failed write */
    f = fopen(test_path("keep.json"), "wb");
    if (f) fputs("KEEP", f), fclose(f);
    CHECK_OK(par_trace_begin(t, "open span", "compute"));
    CHECK_ERR(par_trace_write(&t, 1, test_path("keep.json")), PAR_EINVAL, "still open (innermost \"open span\")");
    CHECK_OK(par_trace_end(t));
    CHECK_ERR(par_trace_end(t), PAR_EINVAL, "rank 0: no span is open");
    CHECK_ERR(par_trace_write(&t, 1, test_path("keep.json")), PAR_EINVAL, "without its begin");
    two[0] = u, two[1] = u;
    CHECK_ERR(par_trace_write(two, 2, test_path("keep.json")), PAR_EINVAL, "both have rank 0");
    CHECK_ERR(par_trace_write(two, 0, test_path("keep.json")), PAR_EINVAL, "count 0");
    CHECK_ERR(par_trace_write(&u, 1, "/nonexistent_dir_par/t.json"), PAR_EIO, "/nonexistent_dir_par/t.json");
    CHECK_ERR(par_trace_write(&u, 1, test_dir), PAR_EIO, "cannot rename"); /* a directory */
    f = fopen(test_path("keep.json"), "rb");
    if (f) keep[fread(keep, 1, sizeof keep - 1, f)] = 0, fclose(f);
    CHECK_STR(keep, "KEEP");
    par_trace_destroy(t);
    par_trace_destroy(u);
}

/* ---- gather over 4 thread ranks ---- */

typedef struct gather_arg {
    par_trace *traces[4];
    const char *path;
    int mode; /* 0 normal, 1 rank 2 leaves a span open, 2 unwritable path, 3 rank 1 passes NULL */
    par_status result[4];
    char error[4][512];
} gather_arg;

static par_status gather_rank(par_ctx *ctx, void *varg) {
    gather_arg *a = (gather_arg *)varg;
    const int r = par_ctx_rank(ctx);
    par_trace_desc d = {0};
    par_trace *t = NULL;
    char name[48];
    int s;
    d.rank = r;
    if (par_trace_create(&d, &t) != PAR_OK) return PAR_ENOMEM;
    a->traces[r] = t;
    for (s = 0; s < 2 + r; s++) { /* rank r: 2 + r steps */
        double t0;
        snprintf(name, sizeof name, "r%d fwd %d", r, s);
        par_trace_begin(t, name, "compute");
        par_trace_end(t);
        t0 = par_trace_now_us();
        snprintf(name, sizeof name, "r%d all_reduce %d", r, s);
        par_trace_span(t, name, "comm", t0, par_trace_now_us());
    }
    if (a->mode == 1 && r == 2) par_trace_begin(t, "left open", "compute");
    a->result[r] = par_trace_gather_write(ctx, a->mode == 3 && r == 1 ? NULL : t,
                                          a->mode == 2 ? "/nonexistent_dir_par/g.json" : r == 0 ? a->path : NULL);
    snprintf(a->error[r], sizeof a->error[r], "%s", par_last_error());
    if (a->mode == 1 && r == 2) par_trace_end(t);
    return PAR_OK; /* the results are checked by the caller */
}

static void test_gather(void) {
    gather_arg a;
    tj_trace tr;
    int r, mode;
    memset(&a, 0, sizeof a);
    a.path = test_path("gather.json");
    CHECK_OK(par_run_threads(4, gather_rank, &a));
    for (r = 0; r < 4; r++) CHECK_MSG(a.result[r] == PAR_OK, "rank %d: %s", r, a.error[r]);
    if (load_ok(a.path, &tr)) {
        for (r = 0; r < 4; r++) {
            char name[64];
            const tj_event *pn = find(&tr, "M", "process_name", r);
            CHECK_INT(tj_count_spans(&tr, r, "compute"), 2 + r);
            CHECK_INT(tj_count_spans(&tr, r, "comm"), 2 + r);
            snprintf(name, sizeof name, "r%d fwd 1", r);
            CHECK_MSG(find(&tr, "X", name, r) != NULL, "%s missing from pid %d", name, r);
            snprintf(name, sizeof name, "rank %d", r);
            CHECK(pn && !strcmp(pn->arg_name, name));
        }
        tj_free(&tr);
    }
    /* the same traces through the in-process writer: the same bytes */
    CHECK_OK(par_trace_write(a.traces, 4, test_path("direct.json")));
    CHECK_MSG(test_files_identical(test_path("direct.json"), a.path), "gather_write and write differ");
    for (r = 0; r < 4; r++) par_trace_destroy(a.traces[r]);

    /* failures end every rank with an error, and write nothing */
    for (mode = 1; mode <= 3; mode++) {
        static const char *const want0[4] = {"", "rank 2 could not contribute", "/nonexistent_dir_par/g.json",
                                             "rank 1 could not contribute"};
        memset(&a, 0, sizeof a);
        a.mode = mode;
        a.path = test_path("failed.json");
        CHECK_OK(par_run_threads(4, gather_rank, &a));
        for (r = 0; r < 4; r++) CHECK_MSG(a.result[r] != PAR_OK, "mode %d rank %d succeeded", mode, r);
        CHECK_MSG(strstr(a.error[0], want0[mode]) != NULL, "mode %d rank 0: %s", mode, a.error[0]);
        if (mode == 1) CHECK_MSG(strstr(a.error[2], "still open") != NULL, "rank 2: %s", a.error[2]);
        if (mode == 3) CHECK_MSG(strstr(a.error[1], "NULL trace") != NULL, "rank 1: %s", a.error[1]);
        if (mode == 2) CHECK_MSG(strstr(a.error[3], "rank 0 could not contribute") != NULL, "rank 3: %s", a.error[3]);
        CHECK(!test_file_exists(test_path("failed.json")));
        for (r = 0; r < 4; r++) par_trace_destroy(a.traces[r]);
    }
    CHECK_ERR(par_trace_gather_write(NULL, NULL, "x"), PAR_EINVAL, "NULL context");
}

int main(void) {
    char tmpl[] = "/tmp/par_trace_test_XXXXXX", cmd[600];
    if (!mkdtemp(tmpl)) return printf("trace: 0 passed, 1 failed\n"), 1;
    snprintf(test_dir, sizeof test_dir, "%s", tmpl);
    test_create_errors();
    test_clock();
    test_nesting();
    test_after_the_fact();
    test_escapes();
    test_capacity();
    test_categories();
    test_coverage();
    test_write_errors();
    test_gather();
    if (getenv("TRACE_TEST_KEEP")) printf("kept %s\n", test_dir);
    else {
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", test_dir);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", test_dir);
    }
    return TEST_END("trace");
}
