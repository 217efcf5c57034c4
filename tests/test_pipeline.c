/* tests/test_pipeline.c - >>pipeline: schedules as data, the checker, the executor.

   1. Generators (GPipe, 1F1B, interleaved, ZB-H1, looped BFS, ZB1P) for
      1..8 stages and several micro-batch counts pass the checker, whose
      figures are compared with the textbook counts: 1F1B and GPipe bubble
      (p-1)/(m+p-1) with F = 1, B = 2; 1F1B holds at most min(p-r, m)
      micro-batches on rank r, GPipe all m; ZB-H1's bubble below 1F1B's;
      interleaved's below 1F1B's; looped BFS (p-1)/(mv+p-1) holding all m v
      chunks, ZB1P the published (p-1)/(3mv+p-1) for m >= p.
   2. The text form round-trips, and bad text is a parse error naming the line.
   3. Hand-written bad schedules, each rejected with rank, step and action:
      crossing receives (deadlock), use before produce, a missing backward, an
      unpaired send, receives out of order, W before I; and receives posted
      ahead (PA / PG) wrongly: never waited for, posted twice or late.
      Posting ahead keeps a schedule's figures; blocking where it posts
      scores longer.
   5. PyTorch's own: its ZB1P artifacts (tests/data/pipeline/) are our ZB1P
      generator's order and pass; test_schedule.py's hand-written cases pass
      or are refused as its _validate_schedule says, and three it accepts
      are refused here; its TestSchedulePlan cases all pass.
   4. The executor on threads runs a toy chain y = w_s * x through every
      virtual stage (all kinds, 1/2/4 stages, chunks, receives posted ahead
      too) and its weight
      gradients equal a direct computation in double. With bf16 and f16
      boundaries (par_pp_run_desc.dtype) every bit a stage writes arrives at
      its neighbour unchanged and nothing past count elements moves; a dtype
      that is no activation type is refused; a receive posted twice or never
      waited for fails the run by name.
   6. Placement: the loop, v and list maps against maps written out by hand;
      placements the stages cannot have refused (API and text); the checker
      on hand-written V schedules (a message at the V's turn refused, the
      turn's order checked); ZBV and DualPipeV for p 1..8 pass the checker,
      ZBV's bubble at most ZB-H1's at 1F1B's memory; PyTorch's
      dualpipev_4rank_10mb.csv as a fixture equal to our generator's. The
      executor runs both on the toy (4.), hand-offs at the V's turn copied. */
#include "test.h"
#include "pp_toy.h"

#include <math.h>
#include <stdlib.h>

/* ---- 1. generators ----------------------------------------------------------------- */

static par_pp_schedule *make(int p, int v, int m, par_pp_kind kind) {
    par_pp_schedule_desc d;
    par_pp_schedule *s = NULL;
    memset(&d, 0, sizeof d);
    d.stages = p, d.chunks = v, d.micro_batches = m, d.kind = kind;
    CHECK_MSG(par_pp_schedule_make(&d, &s) == PAR_OK, "%s p %d v %d m %d", par_pp_kind_name(kind), p, v, m);
    return s;
}

/* The chunks per rank kind runs over: 1, else 2 (interleaved, looped_bfs,
   zb1p), whichever it takes at 4 stages and 8 micro-batches, so the loops
   over every kind below need no list of them. */
static int kind_chunks(par_pp_kind kind) {
    par_pp_schedule_desc d;
    par_pp_schedule *s = NULL;
    memset(&d, 0, sizeof d);
    d.stages = 4, d.chunks = 1, d.micro_batches = 8, d.kind = kind;
    if (par_pp_schedule_make(&d, &s) == PAR_OK) return par_pp_schedule_destroy(s), 1;
    return 2;
}

/* A V schedule (zbv, dualpipev): 2 chunks on the v placement, asked for by its zero default. */
static par_pp_schedule *make_v(int p, int m, par_pp_kind kind) {
    par_pp_schedule *s = make(p, 2, m, kind);
    CHECK_MSG(!s || par_pp_schedule_placement(s) == PAR_PP_PLACE_V, "%s p %d m %d: placement %s", par_pp_kind_name(kind),
              p, m, par_pp_placement_name(par_pp_schedule_placement(s)));
    return s;
}

/* Whole-micro-batch slots per rank: with one chunk a slot is exactly what the
   checker counts in flight (F done, B or W not); with v chunks a slot holds
   up to v of them. */
static void check_slots(const par_pp_schedule *s, const par_pp_check *c, const char *what) {
    const int p = par_pp_schedule_stages(s), v = par_pp_schedule_chunks(s), m = par_pp_schedule_micro_batches(s);
    int r, slots = -1;
    CHECK_MSG(c->ranks_listed == (p < PAR_PP_CHECK_RANKS ? p : PAR_PP_CHECK_RANKS), "%s p %d: %d ranks listed", what, p,
              c->ranks_listed);
    for (r = 0; r < c->ranks_listed; r++) {
        CHECK_OK(par_pp_schedule_slots(s, r, &slots));
        if (v == 1)
            CHECK_MSG(slots == c->peak_in_flight[r], "%s p %d m %d rank %d: %d slots, checker %d in flight", what, p,
                      m, r, slots, c->peak_in_flight[r]);
        else
            CHECK_MSG(slots <= m && slots * v >= c->peak_in_flight[r] && slots <= c->peak_in_flight[r],
                      "%s p %d v %d m %d rank %d: %d slots for %d chunks in flight", what, p, v, m, r, slots,
                      c->peak_in_flight[r]);
    }
    CHECK(par_pp_schedule_slots(s, p, &slots) == PAR_EINVAL && slots == 0);
}

/* More stage ranks than par_pp_check lists: the list says how far it goes and
   max_in_flight still covers the ranks past it (1F1B: rank 0 holds the most). */
static void test_check_many_ranks(void) {
    const int p = PAR_PP_CHECK_RANKS + 6, m = 2 * p;
    par_pp_schedule *s = make(p, 1, m, PAR_PP_1F1B);
    par_pp_check c;
    memset(&c, 0xff, sizeof c);
    if (!s) return;
    CHECK_OK(par_pp_schedule_check(s, &c, NULL, 0));
    CHECK_MSG(c.ranks_listed == PAR_PP_CHECK_RANKS, "%d ranks listed of %d", c.ranks_listed, p);
    CHECK_MSG(c.max_in_flight == p && c.peak_in_flight[0] == p, "max %d, rank 0 %d, want %d", c.max_in_flight,
              c.peak_in_flight[0], p);
    CHECK_MSG(c.peak_in_flight[PAR_PP_CHECK_RANKS - 1] == p - (PAR_PP_CHECK_RANKS - 1), "rank %d holds %d",
              PAR_PP_CHECK_RANKS - 1, c.peak_in_flight[PAR_PP_CHECK_RANKS - 1]);
    par_pp_schedule_destroy(s);
}

static void test_generators(void) {
    static const int ps[] = {1, 2, 3, 4, 8};
    size_t i;
    int m;
    for (i = 0; i < sizeof ps / sizeof ps[0]; i++) {
        const int p = ps[i];
        const int ms[] = {1, p, 2 * p, 2 * p + 1, 3};
        size_t j;
        for (j = 0; j < sizeof ms / sizeof ms[0]; j++) {
            par_pp_check c1, cg, cz;
            par_pp_schedule *s1, *sg, *sz;
            char grid[4096];
            int r, ok_peak = 1;
            m = ms[j];
            s1 = make(p, 1, m, PAR_PP_1F1B), sg = make(p, 1, m, PAR_PP_GPIPE), sz = make(p, 1, m, PAR_PP_ZB_H1);
            if (!s1 || !sg || !sz) continue;
            CHECK_MSG(par_pp_schedule_check(s1, &c1, grid, sizeof grid) == PAR_OK, "1f1b p %d m %d:\n%s", p, m, grid);
            CHECK_MSG(par_pp_schedule_check(sg, &cg, grid, sizeof grid) == PAR_OK, "gpipe p %d m %d:\n%s", p, m, grid);
            CHECK_MSG(par_pp_schedule_check(sz, &cz, grid, sizeof grid) == PAR_OK, "zb-h1 p %d m %d:\n%s", p, m, grid);
            /* (p-1)/(m+p-1): the pipeline fills and drains once, every stage's work 3m */
            CHECK_MSG(fabs(c1.bubble - (double)(p - 1) / (m + p - 1)) < 1e-12, "1f1b p %d m %d bubble %.4f", p, m,
                      c1.bubble);
            CHECK_MSG(fabs(cg.bubble - (double)(p - 1) / (m + p - 1)) < 1e-12, "gpipe p %d m %d bubble %.4f", p, m,
                      cg.bubble);
            for (r = 0; r < p; r++) ok_peak &= c1.peak_in_flight[r] == (p - r < m ? p - r : m);
            CHECK_MSG(ok_peak, "1f1b p %d m %d: rank 0 holds %d, want %d", p, m, c1.peak_in_flight[0], p < m ? p : m);
            CHECK_MSG(cg.max_in_flight == m, "gpipe p %d m %d holds %d, want %d", p, m, cg.max_in_flight, m);
            /* zero bubble: at most 1F1B's peak (p, its first stage's) on every
               rank, and a smaller bubble once there is one */
            CHECK_MSG(p == 1 || m < 2 || cz.bubble < c1.bubble, "zb-h1 p %d m %d bubble %.4f vs 1f1b %.4f", p, m,
                      cz.bubble, c1.bubble);
            CHECK_MSG(cz.max_in_flight <= (p < m ? p : m), "zb-h1 p %d m %d holds %d", p, m, cz.max_in_flight);
            /* with m >= p the published ideal: every rank idles p - 1 units of
               its 3m (F = I = W = 1), a third of 1F1B's 3(p - 1) */
            CHECK_MSG(m < p || fabs(cz.bubble - (double)(p - 1) / (3 * m + p - 1)) < 1e-12,
                      "zb-h1 p %d m %d bubble %.4f, ideal %.4f", p, m, cz.bubble, (double)(p - 1) / (3 * m + p - 1));
            check_slots(s1, &c1, "1f1b"), check_slots(sg, &cg, "gpipe"), check_slots(sz, &cz, "zb-h1");
            if (p == 4 && m == 2 * p) printf("  p 4 m 8: bubble 1f1b %.3f, gpipe %.3f, zb-h1 %.3f\n", c1.bubble,
                                             cg.bubble, cz.bubble);
            par_pp_schedule_destroy(s1), par_pp_schedule_destroy(sg), par_pp_schedule_destroy(sz);
        }
        for (m = p; m <= 3 * p && p > 1; m += p) { /* interleaved: m a multiple of p */
            par_pp_schedule *si = make(p, 2, m, PAR_PP_INTERLEAVED), *s1 = make(p, 1, m, PAR_PP_1F1B);
            par_pp_check ci, c1;
            char grid[8192];
            if (!si || !s1) continue;
            CHECK_MSG(par_pp_schedule_check(si, &ci, grid, sizeof grid) == PAR_OK, "interleaved p %d m %d:\n%s", p, m,
                      grid);
            CHECK_MSG(par_pp_schedule_check(s1, &c1, NULL, 0) == PAR_OK, "1f1b");
            check_slots(si, &ci, "interleaved");
            /* chunks of half the work: the fill and drain cost half as much */
            CHECK_MSG(ci.bubble < c1.bubble, "interleaved p %d m %d bubble %.4f vs 1f1b %.4f", p, m, ci.bubble,
                      c1.bubble);
            par_pp_schedule_destroy(si), par_pp_schedule_destroy(s1);
        }
    }
}

/* Interleaved 1F1B in rounds: every (p, v, m) whose micro-batches split into
   max(1, m / p) equal rounds makes a schedule the checker passes (no
   deadlock, every action once, in order), and the others are refused; at
   m = p each rank warms up with (v - 1) p + 2 (p - 1 - r) forwards, so the
   last rank holds fewer chunks than all of them. */
static void test_interleaved_rounds(void) {
    par_pp_schedule_desc d;
    int p, v, m, made = 0, refused = 0;
    for (p = 2; p <= 8; p++)
        for (v = 2; v <= 4; v++)
            for (m = 1; m <= 32; m++) {
                const int rounds = m / p > 1 ? m / p : 1;
                par_pp_schedule *s = NULL;
                par_pp_check c;
                char grid[512];
                memset(&d, 0, sizeof d);
                d.stages = p, d.chunks = v, d.micro_batches = m, d.kind = PAR_PP_INTERLEAVED;
                if (m % rounds) {
                    CHECK_ERR(par_pp_schedule_make(&d, &s), PAR_EINVAL, "do not split into");
                    refused++;
                    continue;
                }
                CHECK_OK(par_pp_schedule_make(&d, &s));
                if (!s) continue;
                CHECK_MSG(par_pp_schedule_check(s, &c, grid, sizeof grid) == PAR_OK, "interleaved p %d v %d m %d:\n%s", p,
                          v, m, grid);
                if (m == p) /* the last rank: (v - 1) p forwards before its first backward, not all v p */
                    CHECK_MSG(c.peak_in_flight[p - 1] < v * m, "interleaved p %d v %d m %d: the last rank holds %d "
                              "micro-batch chunks", p, v, m, c.peak_in_flight[p - 1]);
                par_pp_schedule_destroy(s);
                made++;
            }
    CHECK_MSG(made + refused == 7 * 3 * 32 && made > refused, "%d made, %d refused", made, refused);
}

/* Looped BFS and ZB1P for every p 2..8, v 2..4, m 1..32: made and checked
   (ZB1P refused exactly where interleaved's rounds rule refuses), with the
   published figures. F = 1, B = 2, I = W = 1 per chunk, so a rank's work is
   3 m v units. Looped BFS runs its chunks breadth-first: it fills and drains
   once, (p - 1) chunk forwards and backwards, bubble (p - 1) / (m v + p - 1)
   for m >= p (a GPipe over m v micro-batch chunks), holding every chunk.
   ZB1P (the ZB paper's ZB-1P over chunks): each rank idles only the p - 1
   forward chunks of the fill, bubble (p - 1) / (3 m v + p - 1) for m >= p,
   never above interleaved 1F1B's bubble, at no more chunks held. */
static void test_chunked_kinds(void) {
    par_pp_schedule_desc d;
    int p, v, m, made = 0, refused = 0;
    for (p = 2; p <= 8; p++)
        for (v = 2; v <= 4; v++)
            for (m = 1; m <= 32; m++) {
                const int rounds = m / p > 1 ? m / p : 1;
                par_pp_schedule *sb = NULL, *sz = NULL, *si = NULL;
                par_pp_check cb, cz, ci;
                char grid[512];
                int r, all_held = 1;
                memset(&d, 0, sizeof d);
                d.stages = p, d.chunks = v, d.micro_batches = m, d.kind = PAR_PP_LOOPED_BFS;
                CHECK_OK(par_pp_schedule_make(&d, &sb));
                if (!sb) continue;
                CHECK_MSG(par_pp_schedule_check(sb, &cb, grid, sizeof grid) == PAR_OK, "looped_bfs p %d v %d m %d:\n%s",
                          p, v, m, grid);
                for (r = 0; r < p; r++) all_held &= cb.peak_in_flight[r] == m * v;
                CHECK_MSG(all_held, "looped_bfs p %d v %d m %d: rank 0 holds %d of %d chunks", p, v, m,
                          cb.peak_in_flight[0], m * v);
                CHECK_MSG(m < p || fabs(cb.bubble - (double)(p - 1) / (m * v + p - 1)) < 1e-12,
                          "looped_bfs p %d v %d m %d bubble %.4f", p, v, m, cb.bubble);
                check_slots(sb, &cb, "looped_bfs");
                par_pp_schedule_destroy(sb);
                d.kind = PAR_PP_ZB1P;
                if (m % rounds) {
                    CHECK_ERR(par_pp_schedule_make(&d, &sz), PAR_EINVAL, "the zb1p schedule runs the micro-batches");
                    refused++;
                    continue;
                }
                d.kind = PAR_PP_INTERLEAVED;
                CHECK_OK(par_pp_schedule_make(&d, &si));
                d.kind = PAR_PP_ZB1P;
                CHECK_OK(par_pp_schedule_make(&d, &sz));
                if (!sz || !si) continue;
                CHECK_MSG(par_pp_schedule_check(sz, &cz, grid, sizeof grid) == PAR_OK, "zb1p p %d v %d m %d:\n%s", p, v,
                          m, grid);
                CHECK_OK(par_pp_schedule_check(si, &ci, NULL, 0));
                CHECK_MSG(m < p || fabs(cz.bubble - (double)(p - 1) / (3 * m * v + p - 1)) < 1e-12,
                          "zb1p p %d v %d m %d bubble %.4f, ideal %.4f", p, v, m, cz.bubble,
                          (double)(p - 1) / (3 * m * v + p - 1));
                CHECK_MSG(cz.bubble <= ci.bubble + 1e-12 && cz.max_in_flight <= ci.max_in_flight,
                          "zb1p p %d v %d m %d: bubble %.4f holding %d, interleaved %.4f holding %d", p, v, m,
                          cz.bubble, cz.max_in_flight, ci.bubble, ci.max_in_flight);
                check_slots(sz, &cz, "zb1p");
                if (p == 4 && v == 2 && m == 8)
                    printf("  p 4 v 2 m 8: bubble interleaved %.3f, zb1p %.3f, looped_bfs %.3f\n", ci.bubble, cz.bubble,
                           (double)(p - 1) / (m * v + p - 1));
                par_pp_schedule_destroy(sz), par_pp_schedule_destroy(si);
                made++;
            }
    CHECK_MSG(made + refused == 7 * 3 * 32 && made > refused, "%d made, %d refused", made, refused);
}

static void test_generator_errors(void) {
    par_pp_schedule_desc d;
    par_pp_schedule *s = NULL;
    par_pp_kind k;
    memset(&d, 0, sizeof d);
    d.stages = 4, d.chunks = 2, d.micro_batches = 9, d.kind = PAR_PP_INTERLEAVED;
    CHECK_ERR(par_pp_schedule_make(&d, &s), PAR_EINVAL, "9 micro-batches do not split into 2 (PyTorch's constraint");
    d.chunks = 1;
    CHECK_ERR(par_pp_schedule_make(&d, &s), PAR_EINVAL, "at least 2 model chunks");
    d.kind = PAR_PP_1F1B, d.chunks = 2;
    CHECK_ERR(par_pp_schedule_make(&d, &s), PAR_EINVAL, "need the interleaved schedule");
    d.chunks = 1, d.micro_batches = 0;
    CHECK_ERR(par_pp_schedule_make(&d, &s), PAR_EINVAL, "must be >= 1");
    CHECK(s == NULL);
    CHECK_ERR(par_pp_kind_parse("dualpipe", &k), PAR_EINVAL, "accepted: gpipe, 1f1b, interleaved");
    CHECK_OK(par_pp_kind_parse("ZB-H1", &k));
    CHECK(k == PAR_PP_ZB_H1);
    CHECK_OK(par_pp_kind_parse("interleaved_1f1b", &k));
    CHECK(k == PAR_PP_INTERLEAVED);
    /* the chunked kinds: one chunk refused, ZB1P's rounds rule named */
    d.stages = 4, d.chunks = 1, d.micro_batches = 8, d.kind = PAR_PP_LOOPED_BFS;
    CHECK_ERR(par_pp_schedule_make(&d, &s), PAR_EINVAL, "the looped_bfs schedule needs at least 2 model chunks");
    d.kind = PAR_PP_ZB1P;
    CHECK_ERR(par_pp_schedule_make(&d, &s), PAR_EINVAL, "the zb1p schedule needs at least 2 model chunks");
    d.chunks = 2, d.micro_batches = 9;
    CHECK_ERR(par_pp_schedule_make(&d, &s), PAR_EINVAL,
              "the zb1p schedule runs the micro-batches in micro-batches / stages = 2 rounds of equal size, and 9 "
              "micro-batches do not split into 2");
    d.kind = PAR_PP_LOOPED_BFS; /* no rounds: any m */
    CHECK_OK(par_pp_schedule_make(&d, &s));
    par_pp_schedule_destroy(s), s = NULL;
    d.kind = PAR_PP_ZB_H1;
    CHECK_ERR(par_pp_schedule_make(&d, &s), PAR_EINVAL, "2 model chunks per rank need the interleaved schedule (or "
                                                        "looped_bfs, zb1p), not zb-h1");
    { /* every spelling: ours and PyTorch's class names (get_schedule_class lower-cases them) */
        static const struct {
            const char *name;
            par_pp_kind kind;
        } names[] = {{"looped_bfs", PAR_PP_LOOPED_BFS},       {"LoopedBFS", PAR_PP_LOOPED_BFS},
                     {"bfs", PAR_PP_LOOPED_BFS},              {"zb1p", PAR_PP_ZB1P},
                     {"ZB1P", PAR_PP_ZB1P},                   {"interleaved_zb", PAR_PP_ZB1P},
                     {"interleaved_zero_bubble", PAR_PP_ZB1P}, {"InterleavedZeroBubble", PAR_PP_ZB1P}};
        size_t i;
        for (i = 0; i < sizeof names / sizeof names[0]; i++) {
            k = PAR_PP_GPIPE;
            CHECK_MSG(par_pp_kind_parse(names[i].name, &k) == PAR_OK && k == names[i].kind, "%s", names[i].name);
        }
    }
    CHECK_STR(par_pp_kind_name(PAR_PP_LOOPED_BFS), "looped_bfs");
    CHECK_STR(par_pp_kind_name(PAR_PP_ZB1P), "zb1p");
    CHECK_ERR(par_pp_kind_parse("zb2p", &k), PAR_EINVAL, "looped_bfs (loopedbfs, bfs), zb1p (interleaved_zb");
    /* the V kinds by our names, MindFormers-style and PyTorch's get_schedule_class names */
    CHECK_OK(par_pp_kind_parse("zero_bubble_v", &k));
    CHECK(k == PAR_PP_ZBV);
    CHECK_OK(par_pp_kind_parse("ZBVZeroBubble", &k));
    CHECK(k == PAR_PP_ZBV);
    CHECK_OK(par_pp_kind_parse("DualPipeV", &k));
    CHECK(k == PAR_PP_DUALPIPEV);
    CHECK_STR(par_pp_kind_name(PAR_PP_ZBV), "zbv");
    CHECK_STR(par_pp_kind_name(PAR_PP_DUALPIPEV), "dualpipev");
    CHECK_STR(par_pp_placement_name(PAR_PP_PLACE_V), "v");
}

/* ---- 2. text ------------------------------------------------------------------------- */

static void test_text(void) {
    par_pp_schedule *s = make(4, 2, 8, PAR_PP_INTERLEAVED), *t = NULL;
    static char a[65536], b[65536];
    if (!s) return;
    CHECK((size_t)par_pp_schedule_format(s, a, sizeof a) < sizeof a);
    CHECK_OK(par_pp_schedule_parse(a, &t));
    if (t) {
        par_pp_schedule_format(t, b, sizeof b);
        CHECK_STR(b, a);
        CHECK_OK(par_pp_schedule_check(t, NULL, NULL, 0));
    }
    par_pp_schedule_destroy(t), t = NULL;
    CHECK_ERR(par_pp_schedule_parse("pipeline stages=2 chunks=1 micro_batches=1\nrank 0: F 0 0, X 0 0\n", &t),
              PAR_EPARSE, "line 2, action 2");
    CHECK_ERR(par_pp_schedule_parse("pipeline stages=2 chunks=1 micro_batches=1\nrank 2: F 0 0\n", &t), PAR_EPARSE,
              "rank 2 of 2 stages");
    CHECK_ERR(par_pp_schedule_parse("pipeline stages=2 chunks=1 micro_batches=1\nrank 0: F 1 0\n", &t), PAR_EPARSE,
              "micro-batch 1");
    CHECK_ERR(par_pp_schedule_parse("stages=2\n", &t), PAR_EPARSE, "line 1");
    { /* posts round-trip too */
        static const char posted[] = "pipeline stages=2 chunks=1 micro_batches=1\n"
                                     "rank 0: F 0 0, SA 0 0, PG 0 0, RG 0 0, B 0 0\n"
                                     "rank 1: PA 0 0, RA 0 0, F 0 0, B 0 0, SG 0 0\n";
        CHECK_OK(par_pp_schedule_parse(posted, &t));
        if (t) {
            par_pp_schedule_format(t, b, sizeof b);
            CHECK_STR(b, posted);
            CHECK_OK(par_pp_schedule_check(t, NULL, NULL, 0));
        }
        par_pp_schedule_destroy(t), t = NULL;
        CHECK_ERR(par_pp_schedule_parse("pipeline stages=2 chunks=1 micro_batches=1\nrank 0: F 0 0, PX 0 0\n", &t),
                  PAR_EPARSE, "OP one of F B I W SA RA SG RG PA PG");
    }
    /* past int: refused, never wrapped (sscanf's %d read 4294967298 as 2) */
    CHECK_ERR(par_pp_schedule_parse("pipeline stages=4294967298 chunks=1 micro_batches=2\nrank 0: F 0 0\n", &t),
              PAR_EPARSE, "whole numbers up to 2147483647");
    CHECK_ERR(par_pp_schedule_parse("pipeline stages=2 chunks=1 micro_batches=-1\n", &t), PAR_EPARSE, "line 1");
    CHECK(t == NULL);
    par_pp_schedule_destroy(s);
}

/* ---- 3. bad schedules -------------------------------------------------------------- */

static void bad(const char *text, const char *needle, const char *label) {
    par_pp_schedule *s = NULL;
    char grid[2048];
    CHECK_MSG(par_pp_schedule_parse(text, &s) == PAR_OK, "%s: parse", label);
    if (!s) return;
    CHECK_MSG(par_pp_schedule_check(s, NULL, grid, sizeof grid) == PAR_EINVAL &&
                  strstr(par_last_error(), needle) != NULL,
              "%s: want \"%s\"", label, needle);
    CHECK_MSG(strstr(grid, "rank 0:") && strstr(grid, "rank 1:"), "%s: no grid", label);
    par_pp_schedule_destroy(s);
}

static void test_bad_schedules(void) {
    /* both stages receive before they send: each waits for the other */
    bad("pipeline stages=2 chunks=1 micro_batches=1\n"
        "rank 0: F 0 0, RG 0 0, SA 0 0, B 0 0\n"
        "rank 1: RA 0 0, F 0 0, B 0 0, SG 0 0\n",
        "deadlock: every unfinished rank waits for a message no rank will send: rank 0 step 1 (RG 0 0), rank 1 "
        "step 0 (RA 0 0)", "crossing receives");
    bad("pipeline stages=2 chunks=1 micro_batches=1\n"
        "rank 0: F 0 0, SA 0 0, RG 0 0, B 0 0\n"
        "rank 1: F 0 0, RA 0 0, B 0 0, SG 0 0\n",
        "rank 1, step 0 (F 0 0): its input activation has not been received", "use before produce");
    bad("pipeline stages=2 chunks=1 micro_batches=2\n"
        "rank 0: F 0 0, SA 0 0, F 1 0, SA 1 0, RG 0 0, B 0 0, RG 1 0, B 1 0\n"
        "rank 1: RA 0 0, F 0 0, RA 1 0, F 1 0, B 0 0, SG 0 0, SG 1 0\n",
        "rank 1, step 6 (SG 1 0): sends a gradient its backward has not produced", "missing backward");
    bad("pipeline stages=2 chunks=1 micro_batches=1\n"
        "rank 0: F 0 0, SA 0 0, SA 0 0, RG 0 0, B 0 0\n"
        "rank 1: RA 0 0, F 0 0, B 0 0, SG 0 0\n",
        "rank 0 sends the activation of micro-batch 0 chunk 0 to rank 1, which never receives it", "unpaired send");
    bad("pipeline stages=2 chunks=1 micro_batches=2\n"
        "rank 0: F 0 0, SA 0 0, F 1 0, SA 1 0, RG 0 0, B 0 0, RG 1 0, B 1 0\n"
        "rank 1: RA 1 0, F 1 0, RA 0 0, F 0 0, B 0 0, SG 0 0, B 1 0, SG 1 0\n",
        "rank 1, step 0 (RA 1 0): the next activation from rank 0 is for micro-batch 0 chunk 0", "out of order");
    bad("pipeline stages=2 chunks=1 micro_batches=1\n"
        "rank 0: F 0 0, SA 0 0, RG 0 0, B 0 0\n"
        "rank 1: RA 0 0, F 0 0, W 0 0, I 0 0, SG 0 0\n",
        "rank 1, step 2 (W 0 0): weight gradient before its input gradient", "W before I");
    bad("pipeline stages=2 chunks=1 micro_batches=1\n"
        "rank 0: F 0 0, SA 0 0, RG 0 0, B 0 0\n"
        "rank 1: RA 0 0, F 0 0, I 0 0, SG 0 0\n",
        "rank 1 never runs the weight gradient (W) of micro-batch 0 chunk 0", "I without W");
}

/* Receives posted ahead (PA / PG) and waited for later (RA / RG): each
   rule, refused by name. */
static void test_bad_posts(void) {
    bad("pipeline stages=2 chunks=1 micro_batches=1\n"
        "rank 0: F 0 0, SA 0 0, RG 0 0, B 0 0\n"
        "rank 1: PA 0 0, F 0 0, B 0 0, SG 0 0\n",
        "rank 1, step 1 (F 0 0): its input activation was posted (PA) but not waited for (no RA before it)",
        "post without its wait");
    bad("pipeline stages=2 chunks=1 micro_batches=2\n"
        "rank 0: F 0 0, SA 0 0, F 1 0, SA 1 0, RG 0 0, B 0 0, RG 1 0, B 1 0\n"
        "rank 1: PA 0 0, RA 0 0, F 0 0, B 0 0, SG 0 0, RA 1 0, PA 1 0, F 1 0, B 1 0, SG 1 0\n",
        "rank 1, step 6 (PA 1 0): posts the receive of this activation after receiving it", "post after the receive");
    bad("pipeline stages=2 chunks=1 micro_batches=1\n"
        "rank 0: F 0 0, SA 0 0, RG 0 0, B 0 0\n"
        "rank 1: PA 0 0, PA 0 0, RA 0 0, F 0 0, B 0 0, SG 0 0\n",
        "rank 1, step 1 (PA 0 0): a second post of this activation's receive", "two posts");
    bad("pipeline stages=2 chunks=1 micro_batches=1\n"
        "rank 0: F 0 0, SA 0 0, PG 0 0, B 0 0\n"
        "rank 1: RA 0 0, F 0 0, B 0 0, SG 0 0\n",
        "rank 0, step 3 (B 0 0): its output gradient was posted (PG) but not waited for (no RG before it)",
        "gradient posted, never waited");
    bad("pipeline stages=2 chunks=1 micro_batches=2\n" /* posted in another order than sent: matched in post order */
        "rank 0: F 0 0, SA 0 0, F 1 0, SA 1 0, RG 0 0, B 0 0, RG 1 0, B 1 0\n"
        "rank 1: PA 1 0, PA 0 0, RA 0 0, F 0 0, RA 1 0, F 1 0, B 0 0, SG 0 0, B 1 0, SG 1 0\n",
        "rank 1, step 0 (PA 1 0): the next activation from rank 0 is for micro-batch 0 chunk 0", "posts out of order");
    bad("pipeline stages=2 chunks=1 micro_batches=1\n"
        "rank 0: PA 0 0, F 0 0, SA 0 0, RG 0 0, B 0 0\n"
        "rank 1: RA 0 0, F 0 0, B 0 0, SG 0 0\n",
        "rank 0, step 0 (PA 0 0): the first virtual stage receives no activation", "post on the first stage");
    bad("pipeline stages=2 chunks=1 micro_batches=1\n" /* posted, then the rank stops: never waited for */
        "rank 0: F 0 0, SA 0 0, PG 0 0\n"
        "rank 1: RA 0 0, F 0 0, B 0 0, SG 0 0\n",
        "rank 0 posts the receive of the gradient of micro-batch 0 chunk 0 (PG) and never waits for it (RG)",
        "posted, never waited");
    bad("pipeline stages=2 chunks=1 micro_batches=1\n"
        "rank 0: F 0 0, SA 0 0, RG 0 0, B 0 0\n"
        "rank 1: RA 0 0, RA 0 0, F 0 0, B 0 0, SG 0 0\n",
        "rank 1, step 1 (RA 0 0): a second receive of this activation", "two receives");
}

/* Posting ahead changes where a receive blocks, not what runs: every
   generator's schedule with all its receives posted at the start of each
   list (tests/pp_toy.h's toy_post_ahead) passes with the same makespan and
   bubble, while the same receives made blocking at those early places (RA /
   RG at the start) deadlock or score longer. */
static void test_post_ahead_time(void) {
    int k, p;
    for (k = 0; k < (int)PAR_PP_KIND_COUNT; k++)
        for (p = 2; p <= 4; p += 2) {
            const int v = kind_chunks((par_pp_kind)k);
            par_pp_schedule *s = make(p, v, 2 * p, (par_pp_kind)k), *t = s ? toy_post_ahead(s) : NULL;
            par_pp_check a, b;
            char grid[4096];
            CHECK_MSG(t != NULL, "%s p %d: posted ahead", par_pp_kind_name((par_pp_kind)k), p);
            if (t) {
                CHECK_OK(par_pp_schedule_check(s, &a, NULL, 0));
                CHECK_MSG(par_pp_schedule_check(t, &b, grid, sizeof grid) == PAR_OK, "%s p %d posted:\n%s",
                          par_pp_kind_name((par_pp_kind)k), p, grid);
                CHECK_MSG(a.makespan == b.makespan && a.bubble == b.bubble && a.max_in_flight == b.max_in_flight,
                          "%s p %d: makespan %g posted %g", par_pp_kind_name((par_pp_kind)k), p, a.makespan,
                          b.makespan);
            }
            par_pp_schedule_destroy(s), par_pp_schedule_destroy(t);
        }
    { /* 1F1B p 2 m 2, rank 1 posting both activations' receives first: as a
         blocking receive the second one waits for rank 0's second forward
         before rank 1 may run its first, 1 unit later than posted */
        par_pp_schedule *s = NULL;
        par_pp_check a, b;
        CHECK_OK(par_pp_schedule_parse("pipeline stages=2 chunks=1 micro_batches=2\n"
                                       "rank 0: F 0 0, SA 0 0, F 1 0, SA 1 0, RG 0 0, B 0 0, RG 1 0, B 1 0\n"
                                       "rank 1: PA 0 0, PA 1 0, RA 0 0, F 0 0, B 0 0, SG 0 0, RA 1 0, F 1 0, B 1 0, "
                                       "SG 1 0\n", &s));
        if (s) CHECK_OK(par_pp_schedule_check(s, &a, NULL, 0));
        par_pp_schedule_destroy(s), s = NULL;
        CHECK_OK(par_pp_schedule_parse("pipeline stages=2 chunks=1 micro_batches=2\n"
                                       "rank 0: F 0 0, SA 0 0, F 1 0, SA 1 0, RG 0 0, B 0 0, RG 1 0, B 1 0\n"
                                       "rank 1: RA 0 0, RA 1 0, F 0 0, B 0 0, SG 0 0, F 1 0, B 1 0, SG 1 0\n", &s));
        if (s) CHECK_OK(par_pp_schedule_check(s, &b, NULL, 0));
        par_pp_schedule_destroy(s);
        /* posted: rank 1 runs F0 1..2, B0 2..4, F1 4..5, B1 5..7, rank 0 B1 7..9;
           blocking: rank 1 waits for both activations (2), all 1 later: 10 */
        CHECK_MSG(a.makespan == 9.0 && b.makespan == 10.0, "posted %g, blocking %g", a.makespan, b.makespan);
    }
}

/* ---- 5. PyTorch's schedules ------------------------------------------------------------- */

/* PyTorch writes an action "<stage><type><micro-batch>" (_Action.from_str:
   "2F0", "3I1", "0W3", "1B0", "0SEND_F0", "2RECV_B1"), its stage s on rank
   s % p as chunk s / p (the loop placement, generate_stage_to_rank_mapping's
   default). pt_append adds one to rank r's list in our form. form 0 is a
   compute-only list (F, I, W, B), lowered as our generators do: a receive
   just before the compute that needs it, a send just after. form 1 is
   PyTorch's lowered list: SEND_F / SEND_B are SA / SG, RECV_F / RECV_B are
   posted (PA / PG) and the compute that needs them waits first (RA / RG).
   form 2 takes those receives as blocking where they stand (RA / RG), how
   our checker read every receive before posts. 0 on a token it cannot read. */
/* Whether virtual stage vs exists and lives on a rank other than r (a message; else a local hand-off or none). */
static int pt_remote(const par_pp_schedule *s, int r, int vs) {
    int rank = -1;
    return vs >= 0 && par_pp_schedule_stage_rank(s, vs, &rank, NULL) == PAR_OK && rank != r;
}

static int pt_append(par_pp_schedule *s, int p, const char *tok, int form, unsigned char *pending) {
    static const struct {
        const char *text;
        int op; /* par_pp_op, or -1/-2 for RECV_F/RECV_B */
    } types[] = {{"SEND_F", PAR_PP_SEND_ACT}, {"RECV_F", -1}, {"SEND_B", PAR_PP_SEND_GRAD}, {"RECV_B", -2},
                 {"F", PAR_PP_F}, {"I", PAR_PP_I}, {"W", PAR_PP_W}, {"B", PAR_PP_B}};
    const int v = par_pp_schedule_chunks(s), m = par_pp_schedule_micro_batches(s), last = p * v - 1;
    char *end;
    long stage = strtol(tok, &end, 10), mb;
    size_t i;
    int r, c, vs, op = -9;
    for (i = 0; i < sizeof types / sizeof types[0] && op == -9; i++)
        if (!strncmp(end, types[i].text, strlen(types[i].text))) op = types[i].op, end += strlen(types[i].text);
    mb = strtol(end, &end, 10);
    if (op == -9 || stage < 0 || stage > last || mb < 0 || mb >= m) return 0;
    vs = (int)stage;
    if (par_pp_schedule_stage_rank(s, vs, &r, &c) != PAR_OK) return 0; /* the schedule's placement */
    if (op == -1 || op == -2) { /* a receive */
        const int g = op == -2;
        if (form == 2)
            return par_pp_schedule_append(s, r, g ? PAR_PP_RECV_GRAD : PAR_PP_RECV_ACT, (int)mb, c) == PAR_OK;
        pending[(g * last + vs) * m + mb] = 1;
        return par_pp_schedule_append(s, r, g ? PAR_PP_POST_GRAD : PAR_PP_POST_ACT, (int)mb, c) == PAR_OK;
    }
    if (op == PAR_PP_F && (form == 0 ? pt_remote(s, r, vs - 1) : pending[vs * m + mb])) {
        pending[vs * m + mb] = 0;
        if (par_pp_schedule_append(s, r, PAR_PP_RECV_ACT, (int)mb, c) != PAR_OK) return 0;
    }
    if ((op == PAR_PP_B || op == PAR_PP_I) && (form == 0 ? pt_remote(s, r, vs + 1) : pending[(last + vs) * m + mb])) {
        pending[(last + vs) * m + mb] = 0;
        if (par_pp_schedule_append(s, r, PAR_PP_RECV_GRAD, (int)mb, c) != PAR_OK) return 0;
    }
    if (par_pp_schedule_append(s, r, (par_pp_op)op, (int)mb, c) != PAR_OK) return 0;
    if (form == 0 && op == PAR_PP_F && pt_remote(s, r, vs + 1))
        return par_pp_schedule_append(s, r, PAR_PP_SEND_ACT, (int)mb, c) == PAR_OK;
    if (form == 0 && (op == PAR_PP_B || op == PAR_PP_I) && pt_remote(s, r, vs - 1))
        return par_pp_schedule_append(s, r, PAR_PP_SEND_GRAD, (int)mb, c) == PAR_OK;
    return 1;
}

/* A PyTorch schedule, one text line per rank of comma-separated actions (a
   CSV artifact's rows, or a test's lists), in our form; NULL if unreadable. */
static par_pp_schedule *pt_schedule_placed(const char *csv, int p, int v, int m, int form, const int *ranks) {
    par_pp_schedule *s = NULL;
    unsigned char pending[2 * 64 * 16];
    int row = 0;
    memset(pending, 0, sizeof pending);
    if (p * v * m > 64 * 16 || par_pp_schedule_create(p, v, m, &s) != PAR_OK) return NULL;
    if (ranks && par_pp_schedule_set_placement(s, PAR_PP_PLACE_LIST, ranks) != PAR_OK)
        return par_pp_schedule_destroy(s), NULL;
    while (*csv) {
        char tok[32];
        size_t n = strcspn(csv, ",\n");
        if (n < sizeof tok) {
            memcpy(tok, csv, n), tok[n] = 0;
            if (strspn(tok, " \r") < n && !pt_append(s, p, tok + strspn(tok, " "), form, pending)) {
                CHECK_MSG(0, "PyTorch action \"%s\" on row %d: %s", tok, row, par_last_error());
                return par_pp_schedule_destroy(s), NULL;
            }
        }
        csv += n;
        if (*csv == '\n') row++;
        if (*csv) csv++;
    }
    return s;
}

/* The same on PyTorch's default placement (stage s on rank s mod p: our loop). */
static par_pp_schedule *pt_schedule(const char *csv, int p, int v, int m, int form) {
    return pt_schedule_placed(csv, p, v, m, form, NULL);
}

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    char *text = NULL;
    long n;
    if (!f) return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (text = (char *)malloc((size_t)n + 1)) != NULL) {
        if (fread(text, 1, (size_t)n, f) != (size_t)n) free(text), text = NULL;
        else text[n] = 0;
    }
    fclose(f);
    return text;
}

/* Rank r's compute actions (F, B, I, W) as text, "F 0 0, I 0 1, ..."; with
   merge_bw an I directly followed by the W of the same micro-batch chunk is
   one B (PyTorch's _merge_bw). */
static void compute_text(const par_pp_schedule *s, int r, int merge_bw, char *buf, size_t size) {
    int n, k;
    size_t used = 0;
    const par_pp_action *a = par_pp_schedule_actions(s, r, &n);
    buf[0] = 0;
    for (k = 0; k < n && used < size; k++) {
        static const char *const name[] = {"F", "B", "I", "W"};
        int op = (int)a[k].op, j = k + 1;
        if (op > PAR_PP_W) continue;
        while (j < n && a[j].op > PAR_PP_W) j++; /* the next compute action */
        if (merge_bw && op == PAR_PP_I && j < n && a[j].op == PAR_PP_W && a[j].micro_batch == a[k].micro_batch &&
            a[j].chunk == a[k].chunk)
            op = PAR_PP_B, k = j;
        used += (size_t)snprintf(buf + used, size - used, "%s%s %d %d", used ? ", " : "", name[op], a[k].micro_batch,
                                 a[k].chunk);
    }
}

/* test/distributed/pipelining/artifacts/zb1p_2rank_2stagep_{compute,comms}.csv
   (copied to tests/data/pipeline/), read by PyTorch's
   TestScheduleLowering.test_csv in test_schedule.py: 2 ranks, 2 stages per
   rank, 8 micro-batches of ScheduleInterleavedZeroBubble. The compute
   order is exactly our ZB1P generator's (p 2, v 2, m 8) and passes our
   checker; the lowered one (I + W merged into B where adjacent, receives
   posted ahead) passes with its receives as posts, its compute order our
   ZB1P's merged the same way; read as blocking receives where PyTorch posts
   them (the checker before PA / PG) it scores longer. */
static void test_pytorch_artifacts(void) {
    char *compute = read_text("tests/data/pipeline/zb1p_2rank_2stagep_compute.csv");
    char *comms = read_text("tests/data/pipeline/zb1p_2rank_2stagep_comms.csv");
    par_pp_schedule *ours = make(2, 2, 8, PAR_PP_ZB1P), *pc = NULL, *pl = NULL, *pb = NULL;
    par_pp_check co, cc, cl, cb;
    static char a[4096], b[4096], grid[4096];
    int r;
    CHECK_MSG(compute && comms, "tests/data/pipeline/zb1p_2rank_2stagep_*.csv (run from the repository root)");
    if (compute) pc = pt_schedule(compute, 2, 2, 8, 0);
    if (comms) pl = pt_schedule(comms, 2, 2, 8, 1), pb = pt_schedule(comms, 2, 2, 8, 2);
    if (ours && pc && pl && pb) {
        CHECK_OK(par_pp_schedule_check(ours, &co, NULL, 0));
        CHECK_MSG(par_pp_schedule_check(pc, &cc, grid, sizeof grid) == PAR_OK, "zb1p compute.csv:\n%s", grid);
        CHECK_MSG(par_pp_schedule_check(pl, &cl, grid, sizeof grid) == PAR_OK, "zb1p comms.csv (posted):\n%s", grid);
        for (r = 0; r < 2; r++) {
            compute_text(ours, r, 0, a, sizeof a), compute_text(pc, r, 0, b, sizeof b);
            CHECK_MSG(!strcmp(a, b), "rank %d: our zb1p\n  %s\nPyTorch's compute.csv\n  %s", r, a, b);
            compute_text(ours, r, 1, a, sizeof a), compute_text(pl, r, 0, b, sizeof b);
            CHECK_MSG(!strcmp(a, b), "rank %d: our zb1p, I+W merged\n  %s\nPyTorch's comms.csv\n  %s", r, a, b);
        }
        CHECK_MSG(cc.makespan == co.makespan && cc.bubble == co.bubble, "compute.csv: makespan %g, ours %g",
                  cc.makespan, co.makespan);
        /* blocking where posted: a deadlock or a longer run */
        if (par_pp_schedule_check(pb, &cb, NULL, 0) == PAR_OK) {
            CHECK_MSG(cb.makespan > cl.makespan, "comms.csv blocking %g vs posted %g", cb.makespan, cl.makespan);
            printf("  PyTorch zb1p_2rank_2stagep: ours/compute.csv makespan %g (bubble %.3f), comms.csv posted %g "
                   "(bubble %.3f), the same receives blocking %g (+%.0f%%)\n", co.makespan, co.bubble, cl.makespan,
                   cl.bubble, cb.makespan, 100.0 * (cb.makespan / cl.makespan - 1));
        } else {
            CHECK_MSG(strstr(par_last_error(), "deadlock") != NULL, "comms.csv blocking: %s", par_last_error());
            printf("  PyTorch zb1p_2rank_2stagep: ours/compute.csv makespan %g (bubble %.3f), comms.csv posted %g "
                   "(bubble %.3f); its receives blocking where posted deadlock\n", co.makespan, co.bubble,
                   cl.makespan, cl.bubble);
        }
    }
    par_pp_schedule_destroy(ours), par_pp_schedule_destroy(pc), par_pp_schedule_destroy(pl);
    par_pp_schedule_destroy(pb), free(compute), free(comms);
}

/* One PyTorch case: want NULL to pass our checker, else refused with want
   in the message. */
static void pt_case(const char *label, const char *lists, int p, int v, int m, int form, const char *want) {
    par_pp_schedule *s = pt_schedule(lists, p, v, m, form);
    char grid[4096];
    CHECK_MSG(s != NULL, "%s: unreadable", label);
    if (!s) return;
    if (!want)
        CHECK_MSG(par_pp_schedule_check(s, NULL, grid, sizeof grid) == PAR_OK, "%s:\n%s", label, grid);
    else
        CHECK_MSG(par_pp_schedule_check(s, NULL, NULL, 0) == PAR_EINVAL && strstr(par_last_error(), want),
                  "%s: want \"%s\", got \"%s\"", label, want, par_last_error());
    par_pp_schedule_destroy(s);
}

/* The hand-written cases of PyTorch's test/distributed/pipelining/
   test_schedule.py, each passing or refused as its _validate_schedule (or
   its lowering test) says, then three it accepts and ours refuses. */
static void test_pytorch_cases(void) {
    /* TestValidateSchedule.test_valid_schedule: both lists valid (2 ranks, 2 stages, 1 micro-batch) */
    pt_case("test_valid_schedule[0]", "0F0,0B0\n1F0,1B0\n", 2, 1, 1, 0, NULL);
    pt_case("test_valid_schedule[1]", "0F0,0I0,0W0\n1F0,1I0,1W0\n", 2, 1, 1, 0, NULL);
    /* TestValidateSchedule.test_invalid_schedule_missing_rank: rank 1 has no
       list; ours: rank 0 waits for a gradient nobody sends */
    pt_case("test_invalid_schedule_missing_rank", "0F0,0B0\n", 2, 1, 1, 0,
            "deadlock: every unfinished rank waits for a message no rank will send: rank 0 step 2 (RG 0 0)");
    /* TestValidateSchedule.test_invalid_schedule_missing_action: forwards only */
    pt_case("test_invalid_schedule_missing_action", "0F0\n1F0\n", 2, 1, 1, 0,
            "rank 0 never runs the backward (B or I) of micro-batch 0 chunk 0");
    /* TestScheduleLowering.test_send_recv, "simple_2_rank_2_stage": the
       compute lists and PyTorch's lowering of them (rank 1 posts both
       receives before its first forward) */
    pt_case("test_send_recv simple_2_rank_2_stage compute", "0F0,0F1,   ,0B0,   ,0B1\n   ,1F0,1B0,1F1,1B1,   \n", 2, 1,
            2, 0, NULL);
    pt_case("test_send_recv simple_2_rank_2_stage comms",
            "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n"
            "1RECV_F0,1RECV_F1,1F0,1B0,1SEND_B0,1F1,1B1,1SEND_B1\n", 2, 1, 2, 1, NULL);

    /* Accepted by PyTorch's _validate_schedule, refused by ours. It counts
       each stage's F, B, I and W micro-batches in sets and compares counts,
       so (1) a forward run twice counts once, and (2) B of micro-batch 0
       plus I and W of micro-batch 0 again add up to the 2 backwards of
       m = 2 while micro-batch 1 never has one; and (3) it checks each rank
       alone: the order across ranks (here a wait cycle: rank 0's B0 needs
       rank 1's, which comes after rank 1's F1, which needs rank 0's F1,
       which comes after its B0) is not its concern. */
    pt_case("a forward twice", "0F0,0F0,0F1,0B0,0B1\n1F0,1F1,1B0,1B1\n", 2, 1, 2, 0,
            "rank 0, step 2 (F 0 0): a second forward of this micro-batch chunk");
    pt_case("B and I+W of one micro-batch, none of the other", "0F0,0F1,0B0,0I0,0W0\n1F0,1F1,1B0,1B1\n", 2, 1, 2, 0,
            "rank 0, step 6 (RG 0 0): a second receive of this gradient");
    pt_case("a wait cycle across ranks", "0F0,0B0,0F1,0B1\n1F0,1F1,1B0,1B1\n", 2, 1, 2, 0, "deadlock");
}

/* One PyTorch case on a placement of its own (ranks[stage]: its stage_to_rank). */
static void pt_case_placed(const char *label, const char *lists, int p, int v, int m, int form, const int *ranks,
                           const char *want) {
    par_pp_schedule *s = pt_schedule_placed(lists, p, v, m, form, ranks);
    char grid[4096];
    CHECK_MSG(s != NULL, "%s: unreadable", label);
    if (!s) return;
    if (!want)
        CHECK_MSG(par_pp_schedule_check(s, NULL, grid, sizeof grid) == PAR_OK, "%s:\n%s", label, grid);
    else
        CHECK_MSG(par_pp_schedule_check(s, NULL, NULL, 0) == PAR_EINVAL && strstr(par_last_error(), want),
                  "%s: want \"%s\", got \"%s\"", label, want, par_last_error());
    par_pp_schedule_destroy(s);
}

/* TestScheduleLowering.test_send_recv, "v_2_rank_4_stage": 2 ranks, stages
   0..3 on ranks 0, 1, 1, 0 (stage_to_rank; our v placement written as a
   list), 2 micro-batches; the compute lists and PyTorch's lowering of them,
   which posts rank 1's receives ahead and has no message between stages 1
   and 2 (rank 1's local hand-off). Its lists run a stage's "B" and later its
   "W": PyTorch's simulator takes B there as the input half, ours needs that
   said (B is the whole backward, a W after it is refused), so the ported
   lists write I where PyTorch writes B, and PyTorch's own spelling is
   refused by name. The lowered lists, with the receives as posts (form 1),
   pass and run the compute order of the compute lists; the same lists
   posting a receive across the hand-off (rank 1's "2RECV_F0", which
   PyTorch's lowering rightly leaves out) are refused. */
static void test_pytorch_v_case(void) {
    static const int v_ranks[4] = {0, 1, 1, 0};
    static const char *const compute = "0F0,0F1,   ,3F0,3I0,3F1,3I1,0I0,3W0,0I1,3W1,0W0,0W1\n"
                                       "   ,1F0,2F0,1F1,2F1,2I0,1I0,2I1,1I1,2W0,2W1,1W0,1W1\n";
    static const char *const comms =
        "0F0,0SEND_F0,0F1,0SEND_F1,3RECV_F0,3F0,3I0,3SEND_B0,3RECV_F1,3F1,3I1,3SEND_B1,0RECV_B0,0I0,3W0,0RECV_B1,0I1,"
        "3W1,0W0,0W1\n"
        "1RECV_F0,1RECV_F1,1F0,2F0,2SEND_F0,1F1,2RECV_B0,2F1,2SEND_F1,2I0,2RECV_B1,1I0,1SEND_B0,2I1,1I1,1SEND_B1,2W0,"
        "2W1,1W0,1W1\n";
    par_pp_schedule *pc = pt_schedule_placed(compute, 2, 2, 2, 0, v_ranks);
    par_pp_schedule *pl = pt_schedule_placed(comms, 2, 2, 2, 1, v_ranks);
    static char a[1024], b[1024];
    int r;
    pt_case_placed("test_send_recv v_2_rank_4_stage compute", compute, 2, 2, 2, 0, v_ranks, NULL);
    pt_case_placed("test_send_recv v_2_rank_4_stage comms (posted)", comms, 2, 2, 2, 1, v_ranks, NULL);
    CHECK_MSG(pc && pl && par_pp_schedule_placement(pc) == PAR_PP_PLACE_LIST, "v_2_rank_4_stage: read");
    for (r = 0; pc && pl && r < 2; r++) {
        compute_text(pc, r, 0, a, sizeof a), compute_text(pl, r, 0, b, sizeof b);
        CHECK_MSG(!strcmp(a, b), "rank %d: compute lists\n  %s\nlowered\n  %s", r, a, b);
    }
    /* stage 3's list in PyTorch's spelling: a whole backward (B), then its W */
    pt_case_placed("v_2_rank_4_stage, B then W", "0F0,0F1,3F0,3B0,3F1,3B1,0I0,3W0,0I1,3W1,0W0,0W1\n"
                                                 "1F0,2F0,1F1,2F1,2I0,1I0,2I1,1I1,2W0,2W1,1W0,1W1\n",
                   2, 2, 2, 0, v_ranks, "rank 0, step 14 (W 0 1): weight gradient before its input gradient (I)");
    pt_case_placed("v_2_rank_4_stage, a receive posted across the hand-off",
                   "0F0,0SEND_F0,0F1,0SEND_F1,3RECV_F0,3F0,3I0,3SEND_B0,3RECV_F1,3F1,3I1,3SEND_B1,0RECV_B0,0I0,3W0,"
                   "0RECV_B1,0I1,3W1,0W0,0W1\n"
                   "1RECV_F0,1RECV_F1,2RECV_F0,1F0,2F0,2SEND_F0,1F1,2RECV_B0,2F1,2SEND_F1,2I0,2RECV_B1,1I0,1SEND_B0,"
                   "2I1,1I1,1SEND_B1,2W0,2W1,1W0,1W1\n",
                   2, 2, 2, 1, v_ranks,
                   "rank 1, step 2 (PA 0 1): virtual stages 1 and 2 are both on this rank: the hand-off is local (the "
                   "executor copies it), there is nothing to post a receive for");
    par_pp_schedule_destroy(pc), par_pp_schedule_destroy(pl);
}

/* TestSchedulePlan in test_schedule.py: its (stages per rank, micro-batches,
   ranks) cases. test_pipeline_order runs ScheduleInterleaved1F1B and
   ScheduleLoopedBFS on those where p divides m; test_pipeline_order_flex_
   and_zero_bubble ScheduleInterleaved1F1B and ScheduleInterleavedZeroBubble
   on all; PyTorch simulates each (_simulate_comms_compute). Ours: made and
   passed by the checker, every one. */
static void test_pytorch_plan_cases(void) {
    static const int cases[][3] = {{2, 2, 2},  {2, 4, 4},   {2, 8, 2},    {2, 8, 4},  {2, 8, 8},  {4, 4, 4},
                                   {4, 8, 4},  {4, 8, 8},   {4, 16, 4},   {4, 32, 4}, {4, 64, 4}, {4, 16, 16},
                                   {4, 32, 32}, {4, 128, 64}, {3, 2, 2},  {3, 8, 2},  {3, 12, 4}, {4, 6, 3},
                                   {4, 10, 5}, {2, 3, 4},   {2, 4, 4},    {2, 10, 4}, {2, 15, 4}};
    size_t i;
    int checked = 0;
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int v = cases[i][0], m = cases[i][1], p = cases[i][2];
        const par_pp_kind kinds[3] = {PAR_PP_INTERLEAVED, PAR_PP_LOOPED_BFS, PAR_PP_ZB1P};
        int k;
        for (k = 0; k < 3; k++) {
            par_pp_schedule *s;
            if (kinds[k] == PAR_PP_LOOPED_BFS && m % p) continue; /* test_pipeline_order's filter */
            s = make(p, v, m, kinds[k]);
            if (!s) continue;
            CHECK_MSG(par_pp_schedule_check(s, NULL, NULL, 0) == PAR_OK, "%s v %d m %d p %d: %s",
                      par_pp_kind_name(kinds[k]), v, m, p, par_last_error());
            par_pp_schedule_destroy(s);
            checked++;
        }
    }
    CHECK_MSG(checked == 23 * 2 + 20, "%d schedules checked", checked); /* looped BFS: 20 cases with p | m */
    /* test_pipeline_order_for_v_schedules: ScheduleDualPipeV and
       ScheduleZBVZeroBubble on the same cases raise ValueError unless 2
       stages per rank, DualPipeV also for m < 2p; the rest pass its
       _validate_schedule. Ours: the same refused, the rest made and passed by
       the checker. */
    checked = 0;
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int v = cases[i][0], m = cases[i][1], p = cases[i][2];
        const par_pp_kind kinds[2] = {PAR_PP_DUALPIPEV, PAR_PP_ZBV};
        int k;
        for (k = 0; k < 2; k++) {
            par_pp_schedule_desc d;
            par_pp_schedule *s = NULL;
            const int refused = v != 2 || (kinds[k] == PAR_PP_DUALPIPEV && m < 2 * p);
            memset(&d, 0, sizeof d);
            d.stages = p, d.chunks = v, d.micro_batches = m, d.kind = kinds[k];
            if (refused) {
                CHECK_MSG(par_pp_schedule_make(&d, &s) == PAR_EINVAL && !s, "%s v %d m %d p %d: not refused",
                          par_pp_kind_name(kinds[k]), v, m, p);
                continue;
            }
            s = make(p, v, m, kinds[k]);
            if (!s) continue;
            CHECK_MSG(par_pp_schedule_check(s, NULL, NULL, 0) == PAR_OK, "%s v %d m %d p %d: %s",
                      par_pp_kind_name(kinds[k]), v, m, p, par_last_error());
            par_pp_schedule_destroy(s);
            checked++;
        }
    }
    CHECK_MSG(checked == 9 + 4, "%d V schedules checked", checked); /* 9 cases of 2 stages per rank, 4 with m >= 2p */
}

/* ---- 4. the executor ----------------------------------------------------------------- */

/* The toy through kind's schedule (with post_ahead: every receive posted at
   the start of each rank's list, waited for where it was received). */
static void run_toy_posted(int p, int v, int m, par_pp_kind kind, int post_ahead) {
    toy t;
    par_ctx_desc pd;
    par_pp_schedule *posted = NULL;
    char mesh[32];
    int s, ok = 1;
    toy_init(&t, p, v, m, kind);
    if (post_ahead) {
        par_pp_schedule *g = make(p, v, m, kind);
        t.schedule = posted = g ? toy_post_ahead(g) : NULL;
        par_pp_schedule_destroy(g);
        CHECK_MSG(posted != NULL, "%s p %d v %d m %d: posted ahead", par_pp_kind_name(kind), p, v, m);
        if (!posted) return;
    }
    snprintf(mesh, sizeof mesh, "pp=%d", p);
    memset(&pd, 0, sizeof pd);
    pd.mesh = mesh, pd.timeout_ms = 20000, pd.kernel_threads = 1;
    CHECK_MSG(par_run_threads_desc(&pd, p, toy_body, &t) == PAR_OK, "%s p %d v %d m %d", par_pp_kind_name(kind), p,
              v, m);
    for (s = 0; s < p; s++) ok &= toy_stage_ok(&t, s);
    CHECK_MSG(ok, "%s p %d v %d m %d%s: dw[0] %.9g, want %.9g", par_pp_kind_name(kind), p, v, m,
              post_ahead ? " (posted ahead)" : "", t.got_dw[0], t.want_dw[0]);
    par_pp_schedule_destroy(posted);
}

static void run_toy(int p, int v, int m, par_pp_kind kind) { run_toy_posted(p, v, m, kind, 0); }

static void test_executor(void) {
    static const int ps[] = {1, 2, 4};
    size_t i;
    int k;
    for (i = 0; i < sizeof ps / sizeof ps[0]; i++)
        for (k = 0; k < (int)PAR_PP_KIND_COUNT; k++) {
            const int p = ps[i];
            if (k == PAR_PP_ZBV || k == PAR_PP_DUALPIPEV) { /* the V placement: a local hand-off at its turn */
                if (k == PAR_PP_ZBV) run_toy(p, 2, p, (par_pp_kind)k), run_toy(p, 2, 1, (par_pp_kind)k);
                run_toy(p, 2, 2 * p, (par_pp_kind)k);
                run_toy(p, 2, 2 * p + 1, (par_pp_kind)k);
                if (p > 1) run_toy_posted(p, 2, 2 * p, (par_pp_kind)k, 1); /* posts to the V's peers */
                continue;
            }
            if (kind_chunks((par_pp_kind)k) == 2) {
                run_toy(p, 2, p, (par_pp_kind)k);
                run_toy(p, 2, 2 * p, (par_pp_kind)k);
                run_toy(p, 2, k == PAR_PP_LOOPED_BFS ? 2 * p + 1 : 3, (par_pp_kind)k); /* odd: bfs any, rounds 1 */
                if (p > 1) run_toy_posted(p, 2, 2 * p, (par_pp_kind)k, 1);
                continue;
            }
            run_toy(p, 1, p, (par_pp_kind)k);
            run_toy(p, 1, 2 * p + 1, (par_pp_kind)k);
            run_toy(p, 1, 1, (par_pp_kind)k);
            if (p > 1) run_toy_posted(p, 1, 2 * p + 1, (par_pp_kind)k, 1);
        }
}

/* The executor on schedules the checker refuses (par_pp_run does not run
   the checker): a receive posted twice is refused at the second post, one
   never waited for after the list (its message is waited for first, so no
   request outlives the run). */
static void test_executor_bad_posts(void) {
    static const struct {
        const char *text, *want;
    } cases[] = {{"pipeline stages=2 chunks=1 micro_batches=1\n"
                  "rank 0: F 0 0, SA 0 0, RG 0 0, B 0 0\n"
                  "rank 1: PA 0 0, F 0 0, B 0 0, SG 0 0\n",
                  "stage 1 posts a receive (PA / PG) and never waits for it (RA / RG)"},
                 {"pipeline stages=2 chunks=1 micro_batches=1\n"
                  "rank 0: F 0 0, SA 0 0, RG 0 0, B 0 0\n"
                  "rank 1: PA 0 0, PA 0 0, RA 0 0, F 0 0, B 0 0, SG 0 0\n",
                  "par_pp_run: stage 1, step 1 (PA 0 0): a second post of this receive"}};
    size_t i;
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        par_pp_schedule *s = NULL;
        par_ctx_desc pd;
        toy t;
        par_status st;
        CHECK_OK(par_pp_schedule_parse(cases[i].text, &s));
        if (!s) continue;
        CHECK(par_pp_schedule_check(s, NULL, NULL, 0) == PAR_EINVAL);
        toy_init(&t, 2, 1, 1, PAR_PP_1F1B);
        t.schedule = s;
        memset(&pd, 0, sizeof pd);
        pd.mesh = "pp=2", pd.timeout_ms = 5000, pd.kernel_threads = 1;
        st = par_run_threads_desc(&pd, 2, toy_body, &t);
        CHECK_MSG(st != PAR_OK && t.bad[1] && strstr(par_last_error(), cases[i].want), "case %d: %s, want \"%s\"",
                  (int)i, par_last_error(), cases[i].want);
        par_pp_schedule_destroy(s);
    }
}

/* A schedule whose stage count is not the ranks along the stage dims: refused
   by every rank before any message moves (3 stages on pp=2; 2 stages on pp=4). */
static par_status noop_fwd(void *u, int mb, int c) { return (void)u, (void)mb, (void)c, PAR_OK; }
static par_status noop_bwd(void *u, int mb, int c, par_pp_op op) { return (void)u, (void)mb, (void)c, (void)op, PAR_OK; }
static par_status noop_buf(void *u, int mb, int c, int g, int in, void **p, int64_t *n) {
    static float cell[4];
    (void)u, (void)mb, (void)c, (void)g, (void)in;
    *p = cell, *n = 1;
    return PAR_OK;
}

static par_status mismatch_body(par_ctx *ctx, void *arg) {
    const int stages = *(const int *)arg;
    int *ok = (int *)arg + 1 + par_ctx_rank(ctx);
    par_pp_schedule_desc sd;
    par_pp_schedule *s = NULL;
    par_pp_run_desc d;
    char want[128];
    memset(&sd, 0, sizeof sd);
    sd.stages = stages, sd.micro_batches = stages, sd.kind = PAR_PP_1F1B;
    RETURN_IF_ERR(par_pp_schedule_make(&sd, &s));
    memset(&d, 0, sizeof d);
    d.schedule = s, d.stage_dims = 1u;
    d.callbacks.forward = noop_fwd, d.callbacks.backward = noop_bwd, d.callbacks.buffer = noop_buf;
    snprintf(want, sizeof want, "the schedule has %d stages but the stage dims (mask 0x1) hold %d ranks", stages,
             par_ctx_size(ctx));
    *ok = par_pp_run(ctx, &d) == PAR_EINVAL && strstr(par_last_error(), want) != NULL;
    par_pp_schedule_destroy(s);
    return PAR_OK;
}

static void test_stage_mismatch(void) {
    static const int cases[2][2] = {{2, 3}, {4, 2}}; /* ranks, schedule stages */
    int c, r;
    for (c = 0; c < 2; c++) {
        int arg[1 + 8] = {0};
        par_ctx_desc pd;
        char mesh[16];
        memset(&pd, 0, sizeof pd);
        snprintf(mesh, sizeof mesh, "pp=%d", cases[c][0]);
        pd.mesh = mesh, pd.timeout_ms = 20000, pd.kernel_threads = 1;
        arg[0] = cases[c][1];
        CHECK_OK(par_run_threads_desc(&pd, cases[c][0], mismatch_body, arg));
        for (r = 0; r < cases[c][0]; r++)
            CHECK_MSG(arg[1 + r], "%d ranks, %d-stage schedule: rank %d not refused as expected", cases[c][0],
                      cases[c][1], r);
    }
}

/* The executor's own refusals at a local hand-off: boundary buffers of two
   sizes for one boundary (one rank, its chunks 0 and 1 are stages 0 and 1),
   and an unchecked schedule that sends across the V's turn (2 ranks: rank 1
   holds stages 1 and 2). */
static par_status uneven_buf(void *u, int mb, int c, int g, int in, void **p, int64_t *n) {
    static float cell[8];
    (void)u, (void)mb, (void)g, (void)in;
    *p = cell + 4 * c, *n = c ? 2 : 1; /* chunk 1's input: 2 elements; chunk 0's output: 1 */
    return PAR_OK;
}

static par_status local_body(par_ctx *ctx, void *arg) {
    int *got = (int *)arg;
    par_pp_schedule *s = NULL;
    par_pp_run_desc d;
    RETURN_IF_ERR(par_pp_schedule_parse("pipeline stages=1 chunks=2 micro_batches=1\n"
                                        "rank 0: F 0 0, F 0 1, B 0 1, B 0 0\n", &s));
    memset(&d, 0, sizeof d);
    d.schedule = s;
    d.callbacks.forward = noop_fwd, d.callbacks.backward = noop_bwd, d.callbacks.buffer = uneven_buf;
    got[0] = par_pp_run(ctx, &d) == PAR_EINVAL &&
             strstr(par_last_error(), "step 0 (F 0 0): local hand-off of micro-batch 0 from chunk 0 to chunk 1: the "
                                      "buffer callback gave 1 and 2 elements") != NULL;
    par_pp_schedule_destroy(s);
    return PAR_OK;
}

/* An unchecked V schedule (2 ranks) whose rank 1 does something across the
   V's turn (stages 1 and 2 are both its own): rank 0 runs, rank 1 is refused
   with `want` before anything waits on it. */
typedef struct turn_case {
    const char *rank1, *want;
    int got[2];
} turn_case;

static par_status turn_body(par_ctx *ctx, void *arg) {
    turn_case *c = (turn_case *)arg;
    char text[256];
    par_pp_schedule *s = NULL;
    par_pp_run_desc d;
    snprintf(text, sizeof text, "pipeline stages=2 chunks=2 micro_batches=1\nplacement v\nrank 0: F 0 0, SA 0 0\n"
                                "rank 1: %s\n", c->rank1);
    RETURN_IF_ERR(par_pp_schedule_parse(text, &s));
    memset(&d, 0, sizeof d);
    d.schedule = s, d.stage_dims = 1u;
    d.callbacks.forward = noop_fwd, d.callbacks.backward = noop_bwd, d.callbacks.buffer = noop_buf;
    c->got[par_ctx_rank(ctx)] = par_ctx_rank(ctx) == 0 ? par_pp_run(ctx, &d) == PAR_OK
                                                       : par_pp_run(ctx, &d) == PAR_EINVAL &&
                                                             strstr(par_last_error(), c->want) != NULL;
    par_pp_schedule_destroy(s);
    return PAR_OK;
}

static void test_local_handoff_errors(void) {
    int got[2] = {0, 0};
    par_ctx_desc pd;
    memset(&pd, 0, sizeof pd);
    pd.mesh = "pp=1", pd.timeout_ms = 20000, pd.kernel_threads = 1;
    CHECK_OK(par_run_threads_desc(&pd, 1, local_body, got));
    CHECK_MSG(got[0], "uneven local hand-off not refused: %s", par_last_error());
    pd.mesh = "pp=2";
    {
        /* rank 1 sends its stage 1's activation although stage 2 is its own;
           then posts a receive for stage 2 although stage 1 hands it over */
        turn_case send = {"RA 0 0, F 0 0, SA 0 0",
                          "step 2 (SA 0 0): virtual stage 1 has that neighbour on this rank (a local hand-off): "
                          "nothing to send", {0, 0}};
        turn_case post = {"RA 0 0, PA 0 1, F 0 0",
                          "step 1 (PA 0 1): virtual stage 2 has that neighbour on this rank (a local hand-off): "
                          "nothing to receive", {0, 0}};
        CHECK_OK(par_run_threads_desc(&pd, 2, turn_body, &send));
        CHECK_MSG(send.got[0] && send.got[1], "a send at the V's turn: rank 0 %d, rank 1 %d", send.got[0], send.got[1]);
        CHECK_OK(par_run_threads_desc(&pd, 2, turn_body, &post));
        CHECK_MSG(post.got[0] && post.got[1], "a post at the V's turn: rank 0 %d, rank 1 %d (%s)", post.got[0],
                  post.got[1], par_last_error());
    }
}

/* ---- 4b. boundaries in a 16-bit compute type (par_pp_run_desc.dtype) ------------------- */

/* Each virtual stage writes a pattern of 16-bit words into its output (and,
   backward, its input gradient): -0, a nan with a payload, the smallest
   subnormal, the largest finite value and a hash of (stage, micro-batch,
   element), none of which survives a trip through f32 arithmetic unchanged
   for both types. The next stage's forward (the previous stage's backward)
   checks that every bit arrived. Every buffer has GUARD words after it,
   different per rank and buffer: moving count f32s (twice the bytes) would
   write the sender's guard over the receiver's. */
#define BITS_N 6
#define BITS_GUARD 6
#define BITS_MB 6

typedef struct bits_rank {
    int p, v, m, stage, bad;
    par_dtype t;
    uint16_t buf[BITS_MB][2][4][BITS_N + BITS_GUARD]; /* [mb][chunk][in, out, gin, gout] */
} bits_rank;

static uint16_t bits_word(par_dtype t, int vs, int mb, int grad, int i) {
    static const uint16_t special[2][4] = {{0x8000u, 0x7fc1u, 0x0001u, 0x7f7fu}, {0x8000u, 0x7e01u, 0x0001u, 0x7bffu}};
    uint32_t h = (uint32_t)(vs * 131 + mb * 17 + grad * 7 + i) * 2654435761u;
    if (i < 4) return special[t == PAR_F16][(i + vs + mb) % 4];
    return (uint16_t)(h >> 16);
}

static uint16_t bits_guard(const bits_rank *r, int mb, int c, int k, int i) {
    return (uint16_t)(0xa000u + r->stage * 0x100 + mb * 0x20 + c * 0x8 + k * 2 + (i & 1));
}

/* 1 when buf[mb][c][k] holds the words of virtual stage vs. */
static int bits_match(const bits_rank *r, int mb, int c, int k, int vs, int grad) {
    int i;
    for (i = 0; i < BITS_N; i++)
        if (r->buf[mb][c][k][i] != bits_word(r->t, vs, mb, grad, i)) return 0;
    return 1;
}

static void bits_fill(bits_rank *r, int mb, int c, int k, int vs, int grad) {
    int i;
    for (i = 0; i < BITS_N; i++) r->buf[mb][c][k][i] = bits_word(r->t, vs, mb, grad, i);
}

static par_status bits_fwd(void *u, int mb, int c) {
    bits_rank *r = (bits_rank *)u;
    const int vs = c * r->p + r->stage;
    if (vs > 0 && !bits_match(r, mb, c, 0, vs - 1, 0)) r->bad |= 1;
    bits_fill(r, mb, c, 1, vs, 0);
    return PAR_OK;
}

static par_status bits_bwd(void *u, int mb, int c, par_pp_op op) {
    bits_rank *r = (bits_rank *)u;
    const int vs = c * r->p + r->stage;
    if (op == PAR_PP_W) return PAR_OK;
    if (vs < r->p * r->v - 1 && !bits_match(r, mb, c, 3, vs + 1, 1)) r->bad |= 2;
    bits_fill(r, mb, c, 2, vs, 1);
    return PAR_OK;
}

static par_status bits_buf(void *u, int mb, int c, int is_grad, int is_input, void **ptr, int64_t *count) {
    bits_rank *r = (bits_rank *)u;
    *ptr = r->buf[mb][c][is_grad * 2 + !is_input];
    *count = BITS_N;
    return PAR_OK;
}

typedef struct bits_run {
    int p, v, m;
    par_pp_kind kind;
    par_dtype t;
    int bad[8];
} bits_run;

static par_status bits_body(par_ctx *ctx, void *arg) {
    bits_run *w = (bits_run *)arg;
    bits_rank *r = (bits_rank *)calloc(1, sizeof(bits_rank));
    par_pp_schedule_desc sd;
    par_pp_schedule *s = NULL;
    par_pp_run_desc d;
    par_status st;
    int mb, c, k, i;
    if (!r) return PAR_ENOMEM;
    r->p = w->p, r->v = w->v, r->m = w->m, r->stage = par_ctx_rank(ctx), r->t = w->t;
    for (mb = 0; mb < BITS_MB; mb++)
        for (c = 0; c < 2; c++)
            for (k = 0; k < 4; k++)
                for (i = 0; i < BITS_N + BITS_GUARD; i++) r->buf[mb][c][k][i] = i < BITS_N ? 0 : bits_guard(r, mb, c, k, i);
    memset(&sd, 0, sizeof sd);
    sd.stages = w->p, sd.chunks = w->v, sd.micro_batches = w->m, sd.kind = w->kind;
    st = par_pp_schedule_make(&sd, &s);
    memset(&d, 0, sizeof d);
    d.schedule = s, d.stage_dims = 1u, d.dtype = w->t;
    d.callbacks.user = r, d.callbacks.forward = bits_fwd, d.callbacks.backward = bits_bwd, d.callbacks.buffer = bits_buf;
    if (st == PAR_OK) st = par_pp_run(ctx, &d);
    for (mb = 0; mb < BITS_MB; mb++)
        for (c = 0; c < 2; c++)
            for (k = 0; k < 4; k++)
                for (i = BITS_N; i < BITS_N + BITS_GUARD; i++) r->bad |= r->buf[mb][c][k][i] != bits_guard(r, mb, c, k, i) ? 4 : 0;
    w->bad[r->stage] = st != PAR_OK ? 8 : r->bad;
    par_pp_schedule_destroy(s);
    free(r);
    return st;
}

static void test_executor_16bit(void) {
    static const struct {
        int p, v, m;
        par_pp_kind kind;
    } runs[] = {{2, 1, 3, PAR_PP_1F1B}, {4, 1, 5, PAR_PP_1F1B}, {4, 1, 4, PAR_PP_ZB_H1}, {2, 2, 4, PAR_PP_INTERLEAVED}};
    static const par_dtype types[] = {PAR_BF16, PAR_F16};
    size_t i, j;
    int r;
    for (i = 0; i < sizeof runs / sizeof runs[0]; i++)
        for (j = 0; j < 2; j++) {
            bits_run w;
            par_ctx_desc pd;
            char mesh[16];
            int bad = 0;
            memset(&w, 0, sizeof w);
            w.p = runs[i].p, w.v = runs[i].v, w.m = runs[i].m, w.kind = runs[i].kind, w.t = types[j];
            snprintf(mesh, sizeof mesh, "pp=%d", w.p);
            memset(&pd, 0, sizeof pd);
            pd.mesh = mesh, pd.timeout_ms = 20000, pd.kernel_threads = 1;
            CHECK_MSG(par_run_threads_desc(&pd, w.p, bits_body, &w) == PAR_OK, "%s %s p %d: %s",
                      par_dtype_name(w.t), par_pp_kind_name(w.kind), w.p, par_last_error());
            for (r = 0; r < w.p; r++) bad |= w.bad[r];
            /* 1: an activation's bits changed, 2: a gradient's, 4: a guard was overwritten, 8: the run failed */
            CHECK_MSG(bad == 0, "%s %s p %d v %d m %d: failure bits 0x%x", par_dtype_name(w.t),
                      par_pp_kind_name(w.kind), w.p, w.v, w.m, bad);
        }
}

/* A boundary dtype that is no activation type is refused by every rank before any message moves. */
static par_status bad_dtype_body(par_ctx *ctx, void *arg) {
    int *ok = (int *)arg + par_ctx_rank(ctx);
    static const par_dtype bad_types[] = {PAR_I32, PAR_F64, (par_dtype)77};
    static const char *const want[] = {"desc->dtype i32 (3) is not an activation type: f32, bf16 or f16",
                                       "desc->dtype f64 (5) is not an activation type", "desc->dtype ? (77)"};
    par_pp_schedule_desc sd;
    par_pp_schedule *s = NULL;
    par_pp_run_desc d;
    int k;
    memset(&sd, 0, sizeof sd);
    sd.stages = 2, sd.micro_batches = 2, sd.kind = PAR_PP_1F1B;
    RETURN_IF_ERR(par_pp_schedule_make(&sd, &s));
    memset(&d, 0, sizeof d);
    d.schedule = s, d.stage_dims = 1u;
    d.callbacks.forward = noop_fwd, d.callbacks.backward = noop_bwd, d.callbacks.buffer = noop_buf;
    *ok = 1;
    for (k = 0; k < 3; k++) {
        d.dtype = bad_types[k];
        *ok &= par_pp_run(ctx, &d) == PAR_EINVAL && strstr(par_last_error(), want[k]) != NULL;
    }
    par_pp_schedule_destroy(s);
    return PAR_OK;
}

static void test_bad_dtype(void) {
    int ok[2] = {0, 0};
    par_ctx_desc pd;
    memset(&pd, 0, sizeof pd);
    pd.mesh = "pp=2", pd.timeout_ms = 20000, pd.kernel_threads = 1;
    CHECK_OK(par_run_threads_desc(&pd, 2, bad_dtype_body, ok));
    CHECK_MSG(ok[0] && ok[1], "a bad par_pp_run_desc.dtype not refused as expected: %s", par_last_error());
}

/* ---- 5. parameter sets per stage (par_params_desc.stage_dims) ------------------------- */

typedef struct stage_run {
    double norm[8], loss_sum[8], loss_count[8];
    uint32_t replica[8];
    int bad[8];
} stage_run;

/* A deterministic gradient of element e of tensor `which` on data rank d. */
static float stage_grad(int which, int e, int d) { return (float)((which + 1) * 0.25 + e * 0.125 - d * 0.5); }

static par_status stage_body(par_ctx *ctx, void *arg) {
    stage_run *w = (stage_run *)arg;
    const par_mesh *mesh = par_ctx_mesh(ctx);
    const int rank = par_ctx_rank(ctx);
    const uint32_t pp = 1u << par_mesh_dev_dim(mesh, "pp");
    int coords[8], stage, d, n, i, e;
    static const int64_t sizes[3][2] = {{3, 4}, {5, 1}, {7, 1}}; /* stage 0: tensors 0 and 1; stage 1: tensor 2 */
    const int64_t bshape[2] = {4, 8};
    par_layout batch;
    par_param_desc pd[2];
    par_params_desc desc;
    par_params *ps = NULL;
    par_adamw opt;
    par_step_stats stats;
    par_param_info info;
    double sum, count;
    RETURN_IF_ERR(par_mesh_coords(mesh, rank, coords));
    stage = coords[0], d = coords[1];
    RETURN_IF_ERR(par_layout_parse(&batch, mesh, 2, bshape, "[dp,None]"));
    memset(pd, 0, sizeof pd);
    n = stage == 0 ? 2 : 1;
    for (i = 0; i < n; i++) {
        const int which = stage == 0 ? i : 2;
        static const char *const names[3] = {"a", "b", "c"};
        pd[i].name = names[which];
        RETURN_IF_ERR(par_layout_init(&pd[i].layout, mesh, sizes[which][1] > 1 ? 2 : 1, sizes[which], NULL, 0));
    }
    memset(&desc, 0, sizeof desc);
    desc.params = pd, desc.num_params = n, desc.batch = &batch, desc.stage_dims = pp;
    RETURN_IF_ERR(par_params_create(ctx, &desc, &ps));
    RETURN_IF_ERR(par_params_grads_begin(ps, 0, 1));
    for (i = n - 1; i >= 0; i--) {
        float *g;
        const int which = stage == 0 ? i : 2;
        RETURN_IF_ERR(par_params_grad(ps, i, &g));
        for (e = 0; e < (int)(sizes[which][0] * sizes[which][1]); e++) g[e] += stage_grad(which, e, d);
        RETURN_IF_ERR(par_params_grad_ready(ps, i));
    }
    RETURN_IF_ERR(par_params_grads_wait(ps));
    memset(&opt, 0, sizeof opt);
    opt.lr = 1e-3f, opt.beta1 = 0.9f, opt.beta2 = 0.95f, opt.eps = 1e-8f;
    RETURN_IF_ERR(par_params_step(ps, &opt, &stats));
    RETURN_IF_ERR(par_params_get_info(ps, 0, &info));
    sum = stage == 1 ? 10.0 + d : 0.0, count = stage == 1 ? 4.0 : 0.0; /* the loss lives on the last stage */
    RETURN_IF_ERR(par_params_reduce_loss(ps, &sum, &count));
    w->norm[rank] = stats.grad_norm, w->loss_sum[rank] = sum, w->loss_count[rank] = count;
    w->replica[rank] = info.replica_dims;
    par_params_destroy(ps);
    /* a parameter split over the stage dim is refused */
    RETURN_IF_ERR(par_layout_parse(&pd[0].layout, mesh, 1, bshape, "[pp]"));
    pd[0].name = "split";
    desc.num_params = 1;
    w->bad[rank] = par_params_create(ctx, &desc, &ps) == PAR_ELAYOUT && strstr(par_last_error(), "stage dim") != NULL;
    desc.params = NULL, desc.num_params = 0, desc.stage_dims = 1u; /* dp is the right dim of "pp=2,dp=2" */
    w->bad[rank] &= par_params_create(ctx, &desc, &ps) == PAR_EINVAL && strstr(par_last_error(), "overlap") != NULL;
    return PAR_OK;
}

static void test_stage_params(void) {
    stage_run w;
    par_ctx_desc pd;
    double want = 0;
    int which, e, d, r, ok = 1;
    memset(&w, 0, sizeof w);
    for (which = 0; which < 3; which++) { /* mean over the 2 data ranks, every tensor of both stages once */
        const int n = which == 0 ? 12 : which == 1 ? 5 : 7;
        for (e = 0; e < n; e++) {
            double g = 0;
            for (d = 0; d < 2; d++) g += stage_grad(which, e, d);
            want += (g / 2) * (g / 2);
        }
    }
    want = sqrt(want);
    memset(&pd, 0, sizeof pd);
    pd.mesh = "pp=2,dp=2", pd.timeout_ms = 20000, pd.kernel_threads = 1;
    CHECK_OK(par_run_threads_desc(&pd, 4, stage_body, &w));
    for (r = 0; r < 4; r++) {
        ok &= fabs(w.norm[r] - want) <= 1e-6 * want && w.loss_sum[r] == 21.0 && w.loss_count[r] == 8.0;
        ok &= w.replica[r] == 1u && w.bad[r]; /* copies only over dp */
    }
    CHECK_MSG(ok, "stage params: norm %.9g (want %.9g), loss %g / %g (want 21 / 8), replica 0x%x, errors %d", w.norm[0],
              want, w.loss_sum[0], w.loss_count[0], (unsigned)w.replica[0], w.bad[0]);
}


/* ---- 6. placement and the V schedules ------------------------------------------------ */

/* The named placements against the maps written out by hand: loop s = c p +
   r; v (p 4, 2 chunks) down 0 1 2 3 and back 3 2 1 0, (p 3, 4 chunks) down,
   up, down, up; and a list. The queries agree both ways. */
static void test_placement_maps(void) {
    static const int v4x2[8] = {0, 1, 2, 3, 3, 2, 1, 0}, v3x4[12] = {0, 1, 2, 2, 1, 0, 0, 1, 2, 2, 1, 0};
    static const int list[6] = {1, 0, 2, 2, 0, 1}; /* rank 0: stages 1, 4; rank 1: 0, 5; rank 2: 2, 3 */
    par_pp_schedule *s = NULL;
    int st, r, c, ok = 1;
    CHECK_OK(par_pp_schedule_create(4, 2, 4, &s));
    if (!s) return;
    CHECK(par_pp_schedule_placement(s) == PAR_PP_PLACE_LOOP);
    for (st = 0; st < 8; st++) {
        CHECK_OK(par_pp_schedule_stage_rank(s, st, &r, &c));
        ok &= r == st % 4 && c == st / 4 && par_pp_schedule_stage(s, r, c) == st;
    }
    CHECK_MSG(ok, "loop placement");
    CHECK_OK(par_pp_schedule_set_placement(s, PAR_PP_PLACE_V, NULL));
    CHECK(par_pp_schedule_placement(s) == PAR_PP_PLACE_V);
    for (st = 0, ok = 1; st < 8; st++) {
        CHECK_OK(par_pp_schedule_stage_rank(s, st, &r, &c));
        ok &= r == v4x2[st] && c == st / 4 && par_pp_schedule_stage(s, r, c) == st;
    }
    CHECK_MSG(ok, "v placement p 4: the last stage on rank 0, stages 3 and 4 on rank 3");
    CHECK_ERR(par_pp_schedule_stage_rank(s, 8, &r, &c), PAR_EINVAL, "virtual stage 8 outside the schedule's 8");
    CHECK(r == -1 && c == -1 && par_pp_schedule_stage(s, 4, 0) == -1 && par_pp_schedule_stage(s, 0, 2) == -1);
    par_pp_schedule_destroy(s), s = NULL;
    CHECK_OK(par_pp_schedule_create(3, 4, 1, &s));
    if (!s) return;
    CHECK_OK(par_pp_schedule_set_placement(s, PAR_PP_PLACE_V, NULL));
    for (st = 0, ok = 1; st < 12; st++) {
        CHECK_OK(par_pp_schedule_stage_rank(s, st, &r, &c));
        ok &= r == v3x4[st] && c == st / 3;
    }
    CHECK_MSG(ok, "v placement p 3 with 4 chunks: down, up, down, up");
    par_pp_schedule_destroy(s), s = NULL;
    CHECK_OK(par_pp_schedule_create(3, 2, 1, &s));
    if (!s) return;
    CHECK_OK(par_pp_schedule_set_placement(s, PAR_PP_PLACE_LIST, list));
    CHECK(par_pp_schedule_placement(s) == PAR_PP_PLACE_LIST);
    CHECK(par_pp_schedule_stage(s, 0, 0) == 1 && par_pp_schedule_stage(s, 0, 1) == 4);
    CHECK(par_pp_schedule_stage(s, 1, 0) == 0 && par_pp_schedule_stage(s, 1, 1) == 5);
    CHECK(par_pp_schedule_stage(s, 2, 0) == 2 && par_pp_schedule_stage(s, 2, 1) == 3);
    par_pp_schedule_destroy(s);
}

/* Placements the stages cannot have, through the API and through the text. */
static void test_placement_errors(void) {
    static const int out_of_range[4] = {0, 1, 2, 1}, twice[4] = {0, 0, 0, 1};
    par_pp_schedule *s = NULL, *t = NULL;
    par_pp_schedule_desc d;
    CHECK_OK(par_pp_schedule_create(2, 3, 2, &s));
    if (!s) return;
    CHECK_ERR(par_pp_schedule_set_placement(s, PAR_PP_PLACE_V, NULL), PAR_EINVAL, "3 chunks per rank, but the V");
    CHECK(par_pp_schedule_placement(s) == PAR_PP_PLACE_LOOP); /* refused: unchanged */
    par_pp_schedule_destroy(s), s = NULL;
    CHECK_OK(par_pp_schedule_create(2, 2, 2, &s));
    if (!s) return;
    CHECK_ERR(par_pp_schedule_set_placement(s, PAR_PP_PLACE_LIST, NULL), PAR_EINVAL, "NULL rank_of_stage");
    CHECK_ERR(par_pp_schedule_set_placement(s, PAR_PP_PLACE_LIST, out_of_range), PAR_EINVAL,
              "virtual stage 2 on rank 2, outside the 2 ranks (the stage has no rank)");
    CHECK_ERR(par_pp_schedule_set_placement(s, PAR_PP_PLACE_LIST, twice), PAR_EINVAL,
              "rank 0 holds 3 virtual stages, but every rank holds chunks = 2");
    CHECK_ERR(par_pp_schedule_set_placement(s, (par_pp_placement)7, NULL), PAR_EINVAL, "placement 7 is unknown");
    CHECK(par_pp_schedule_placement(s) == PAR_PP_PLACE_LOOP && par_pp_schedule_stage(s, 1, 1) == 3);
    par_pp_schedule_destroy(s);
    /* the text: a V over an odd chunk count, a list too short or too long, a rank out of range */
    CHECK_ERR(par_pp_schedule_parse("pipeline stages=2 chunks=1 micro_batches=1\nplacement v\nrank 0: F 0 0\n", &t),
              PAR_EPARSE, "line 2: pipeline placement v: 1 chunks per rank");
    CHECK_ERR(par_pp_schedule_parse("pipeline stages=2 chunks=2 micro_batches=1\n# c\nplacement 0,1,1\n", &t),
              PAR_EPARSE, "line 3: placement lists 3 ranks for 2 x 2 = 4 virtual stages (the rest have no rank)");
    CHECK_ERR(par_pp_schedule_parse("pipeline stages=2 chunks=2 micro_batches=1\nplacement 0,1,1,0,1\n", &t),
              PAR_EPARSE, "placement lists 5 ranks for 2 x 2 = 4 virtual stages (a stage past the last)");
    CHECK_ERR(par_pp_schedule_parse("pipeline stages=2 chunks=2 micro_batches=1\nplacement 0,1,3,0\n", &t),
              PAR_EPARSE, "virtual stage 2 on rank 3, outside the 2 ranks");
    CHECK_ERR(par_pp_schedule_parse("pipeline stages=2 chunks=2 micro_batches=1\nplacement 0,0,0,1\n", &t),
              PAR_EPARSE, "rank 0 holds 3 virtual stages");
    CHECK_ERR(par_pp_schedule_parse("pipeline stages=2 chunks=2 micro_batches=1\nplacement zigzag\n", &t),
              PAR_EPARSE, "expected loop, v or a comma-separated rank per virtual stage");
    CHECK_ERR(par_pp_schedule_parse("pipeline stages=2 chunks=2 micro_batches=1\nplacement v v\n", &t),
              PAR_EPARSE, "line 2: expected \"placement loop\"");
    CHECK(t == NULL);
    /* the generators: zbv and dualpipev on a V of 2 chunks, the others on loop */
    memset(&d, 0, sizeof d);
    d.stages = 4, d.chunks = 4, d.micro_batches = 8, d.kind = PAR_PP_ZBV;
    CHECK_ERR(par_pp_schedule_make(&d, &s), PAR_EINVAL, "the zbv schedule runs exactly 2 model chunks per rank");
    d.chunks = 2, d.placement = PAR_PP_PLACE_LIST;
    CHECK_ERR(par_pp_schedule_make(&d, &s), PAR_EINVAL, "the zbv schedule runs on the v placement, not list");
    d.kind = PAR_PP_INTERLEAVED, d.placement = PAR_PP_PLACE_V;
    CHECK_ERR(par_pp_schedule_make(&d, &s), PAR_EINVAL, "the interleaved schedule runs on the loop placement, not v");
    d.kind = PAR_PP_DUALPIPEV, d.placement = PAR_PP_PLACE_V, d.micro_batches = 7;
    CHECK_ERR(par_pp_schedule_make(&d, &s), PAR_EINVAL, "2 x 4 = 8, not 7 (PyTorch's rule)");
    CHECK(s == NULL);
}

/* The checker on hand-written V schedules (p 2, 2 chunks: stages 0 1 | 2 3 on
   ranks 0 1 1 0): rank 1's two stages hand off locally, so a send or
   receive between them is refused, and a forward of stage 2 before stage 1's
   on that rank too; the plain form passes, with activations going both ways
   (0 -> 1 for stage 0, 1 -> 0 for stage 2) and gradients too. */
static void test_placement_check(void) {
    static const char ok_text[] = "pipeline stages=2 chunks=2 micro_batches=1\n"
                                  "placement v\n"
                                  "rank 0: F 0 0, SA 0 0, RA 0 1, F 0 1, B 0 1, SG 0 1, RG 0 0, B 0 0\n"
                                  "rank 1: RA 0 0, F 0 0, F 0 1, SA 0 1, RG 0 1, B 0 1, B 0 0, SG 0 0\n";
    par_pp_schedule *s = NULL, *t = NULL;
    par_pp_check c;
    static char a[4096];
    CHECK_OK(par_pp_schedule_parse(ok_text, &s));
    if (!s) return;
    CHECK_OK(par_pp_schedule_check(s, &c, NULL, 0));
    /* rank 0: F 0 0 ends at 1; rank 1's F 0 0, F 0 1 at 2, 3; rank 0's F 0 1, B 0 1 at 4, 6; rank 1's
       B 0 1, B 0 0 at 8, 10; rank 0's B 0 0 at 12. Each rank holds both its chunks at once. */
    CHECK_MSG(fabs(c.makespan - 12.0) < 1e-12 && c.peak_in_flight[0] == 2 && c.peak_in_flight[1] == 2,
              "makespan %g, peaks %d %d", c.makespan, c.peak_in_flight[0], c.peak_in_flight[1]);
    CHECK((size_t)par_pp_schedule_format(s, a, sizeof a) < sizeof a);
    CHECK_STR(a, ok_text);
    CHECK_OK(par_pp_schedule_parse(a, &t));
    CHECK(t && par_pp_schedule_placement(t) == PAR_PP_PLACE_V);
    par_pp_schedule_destroy(t), par_pp_schedule_destroy(s);
    bad("pipeline stages=2 chunks=2 micro_batches=1\nplacement v\n"
        "rank 0: F 0 0, SA 0 0, RA 0 1, F 0 1, B 0 1, SG 0 1, RG 0 0, B 0 0\n"
        "rank 1: RA 0 0, F 0 0, SA 0 0, RA 0 1, F 0 1, SA 0 1, RG 0 1, B 0 1, B 0 0, SG 0 0\n",
        "rank 1, step 2 (SA 0 0): virtual stages 1 and 2 are both on this rank: the hand-off is local",
        "a send at the V's turn");
    bad("pipeline stages=2 chunks=2 micro_batches=1\nplacement v\n"
        "rank 0: F 0 0, SA 0 0, RA 0 1, F 0 1, B 0 1, SG 0 1, RG 0 0, B 0 0\n"
        "rank 1: RA 0 0, RA 0 1, F 0 1, F 0 0, SA 0 1, RG 0 1, B 0 1, B 0 0, SG 0 0\n",
        "rank 1, step 1 (RA 0 1): virtual stages 1 and 2 are both on this rank: the hand-off is local (the executor "
        "copies it), there is nothing to receive", "a receive at the V's turn");
    bad("pipeline stages=2 chunks=2 micro_batches=1\nplacement v\n"
        "rank 0: F 0 0, SA 0 0, RA 0 1, F 0 1, B 0 1, SG 0 1, RG 0 0, B 0 0\n"
        "rank 1: RA 0 0, F 0 1, F 0 0, SA 0 1, RG 0 1, B 0 1, B 0 0, SG 0 0\n",
        "rank 1, step 1 (F 0 1): the forward of chunk 0 (virtual stage 1, its input, on this rank) has not run",
        "the V's turn out of order");
    bad("pipeline stages=2 chunks=2 micro_batches=1\nplacement v\n"
        "rank 0: F 0 0, SA 0 0, RA 0 1, F 0 1, B 0 1, SG 0 1, RG 0 0, B 0 0\n"
        "rank 1: RA 0 0, F 0 0, F 0 1, SA 0 1, RG 0 1, B 0 0, B 0 1, SG 0 0\n",
        "rank 1, step 5 (B 0 0): the backward of chunk 1 (virtual stage 2, its output gradient, on this rank) has "
        "not run", "the V's turn backward out of order");
    /* posted receives at the V's turn: refused like a plain receive there (nothing to post a receive for), and
       a post of a message that does cross ranks matched to the V's peer (rank 0's chunk 1 posts before its
       chunk 0 has even run: the same timing as the blocking schedule, a post takes no time) */
    bad("pipeline stages=2 chunks=2 micro_batches=1\nplacement v\n"
        "rank 0: F 0 0, SA 0 0, RA 0 1, F 0 1, B 0 1, SG 0 1, RG 0 0, B 0 0\n"
        "rank 1: RA 0 0, PA 0 1, F 0 0, F 0 1, SA 0 1, RG 0 1, B 0 1, B 0 0, SG 0 0\n",
        "rank 1, step 1 (PA 0 1): virtual stages 1 and 2 are both on this rank: the hand-off is local (the executor "
        "copies it), there is nothing to post a receive for", "a posted activation receive at the V's turn");
    bad("pipeline stages=2 chunks=2 micro_batches=1\nplacement v\n"
        "rank 0: F 0 0, SA 0 0, RA 0 1, F 0 1, B 0 1, SG 0 1, RG 0 0, B 0 0\n"
        "rank 1: RA 0 0, F 0 0, F 0 1, SA 0 1, RG 0 1, B 0 1, PG 0 0, B 0 0, SG 0 0\n",
        "rank 1, step 6 (PG 0 0): virtual stages 1 and 2 are both on this rank: the hand-off is local (the executor "
        "copies it), there is nothing to post a receive for", "a posted gradient receive at the V's turn");
    {
        par_pp_check cp;
        CHECK_OK(par_pp_schedule_parse("pipeline stages=2 chunks=2 micro_batches=1\nplacement v\n"
                                       "rank 0: PA 0 1, PG 0 0, F 0 0, SA 0 0, RA 0 1, F 0 1, B 0 1, SG 0 1, RG 0 0, "
                                       "B 0 0\n"
                                       "rank 1: PA 0 0, PG 0 1, RA 0 0, F 0 0, F 0 1, SA 0 1, RG 0 1, B 0 1, B 0 0, "
                                       "SG 0 0\n", &s));
        CHECK_MSG(s && par_pp_schedule_check(s, &cp, NULL, 0) == PAR_OK && cp.makespan == c.makespan,
                  "V posted ahead: makespan %g, blocking %g (%s)", cp.makespan, c.makespan, par_last_error());
        par_pp_schedule_destroy(s), s = NULL;
    }
    /* the same actions without the placement line (loop): rank 1's chunk 1 is stage 3, whose input comes from
       stage 2 on rank 0, so its forward needs a receive first */
    bad("pipeline stages=2 chunks=2 micro_batches=1\n"
        "rank 0: F 0 0, SA 0 0, RA 0 1, F 0 1, B 0 1, SG 0 1, RG 0 0, B 0 0\n"
        "rank 1: RA 0 0, F 0 0, F 0 1, SA 0 1, RG 0 1, B 0 1, B 0 0, SG 0 0\n",
        "rank 1, step 2 (F 0 1): its input activation has not been received", "the V's text on loop");
}


/* ZBV and DualPipeV for p 1..8 and m 1..4p (DualPipeV from m = 2p, its
   rule): every schedule passes the checker; ZBV's bubble is at most ZB-H1's
   at the same p and m (the ZB paper's claim for ZB-V), and it holds at most
   2p micro-batch chunks of half a stage each on any rank: 1F1B's peak of p
   whole stages. DualPipeV runs an overlapped pair as F then B, so its F adds
   a chunk before the B frees one: at most 2p + 1. */
static void test_v_generators(void) {
    int p, m, made = 0;
    for (p = 1; p <= 8; p++)
        for (m = 1; m <= 4 * p; m++) {
            par_pp_schedule *sv = make_v(p, m, PAR_PP_ZBV), *sz = make(p, 1, m, PAR_PP_ZB_H1);
            par_pp_schedule *s1 = make(p, 1, m, PAR_PP_1F1B), *sd = m >= 2 * p ? make_v(p, m, PAR_PP_DUALPIPEV) : NULL;
            par_pp_check cv, cz, c1, cd;
            char grid[4096];
            if (sv && sz && s1) {
                CHECK_MSG(par_pp_schedule_check(sv, &cv, grid, sizeof grid) == PAR_OK, "zbv p %d m %d: %s\n%s", p, m,
                          par_last_error(), grid);
                CHECK_OK(par_pp_schedule_check(sz, &cz, NULL, 0));
                CHECK_OK(par_pp_schedule_check(s1, &c1, NULL, 0));
                CHECK_MSG(cv.bubble <= cz.bubble + 1e-12, "zbv p %d m %d bubble %.4f > zb-h1's %.4f", p, m, cv.bubble,
                          cz.bubble);
                CHECK_MSG(cv.max_in_flight <= 2 * c1.max_in_flight, "zbv p %d m %d holds %d half-stage chunks, 1f1b %d "
                          "stages", p, m, cv.max_in_flight, c1.max_in_flight);
                made++;
            }
            if (sd) {
                CHECK_MSG(par_pp_schedule_check(sd, &cd, grid, sizeof grid) == PAR_OK, "dualpipev p %d m %d: %s\n%s", p,
                          m, par_last_error(), grid);
                CHECK_MSG(cd.max_in_flight <= 2 * p + 1, "dualpipev p %d m %d holds %d", p, m, cd.max_in_flight);
                made++;
            }
            if (p == 4 && m == 8)
                printf("  p 4 m 8: bubble zbv %.3f (peak %d chunks), dualpipev %.3f (peak %d), zb-h1 %.3f\n", cv.bubble,
                       cv.max_in_flight, cd.bubble, cd.max_in_flight, cz.bubble);
            par_pp_schedule_destroy(sv), par_pp_schedule_destroy(sz), par_pp_schedule_destroy(s1);
            par_pp_schedule_destroy(sd);
        }
    CHECK_MSG(made == 144 + 80, "%d schedules made", made); /* zbv: 4 (1 + ... + 8) = 144; dualpipev: 2p + 1 each, 80 */
}

/* PyTorch's artifact test/distributed/pipelining/artifacts/dualpipev_4rank_10mb.csv
   (test/distributed/pipelining/test_schedule.py, TestScheduleCsv.test_csv_compare:
   ScheduleDualPipeV, 4 ranks, 8 stages, 10 micro-batches), a line per rank of
   STAGE OP MICRO_BATCH (F forward, B full backward, I input, W weight) and
   overlapped pairs "(F;B)OVERLAP_F_B". Converted here to our text form (the
   stage's rank and chunk on the V written out: stage s < 4 is rank s chunk 0,
   else rank 7 - s chunk 1; a pair as its F then its B; the messages added
   where a neighbouring stage is on another rank), it passes our checker, and
   our generator's compute order is the same on every rank. */
static const char *const dualpipev_csv[4] = {
    "0F0,0F1,0F2,0F3,0F4,0F5,0F6,7F0,7I0,7W0,7F1,7I1,7W1,7F2,7I2,7W2,7F3,(0F7;7B3)OVERLAP_F_B,(7F4;0B0)OVERLAP_F_B,"
    "(0F8;7B4)OVERLAP_F_B,(7F5;0B1)OVERLAP_F_B,(0F9;7B5)OVERLAP_F_B,(7F6;0B2)OVERLAP_F_B,7B6,(7F7;0B3)OVERLAP_F_B,7B7,"
    "(7F8;0B4)OVERLAP_F_B,7B8,(7F9;0B5)OVERLAP_F_B,7B9,0I6,0W6,0I7,0W7,0I8,0W8,0I9,0W9",
    "1F0,1F1,1F2,1F3,1F4,6F0,1F5,6F1,6I0,6W0,6F2,6I1,6W1,6F3,(1F6;6B2)OVERLAP_F_B,(6F4;1B0)OVERLAP_F_B,"
    "(1F7;6B3)OVERLAP_F_B,(6F5;1B1)OVERLAP_F_B,(1F8;6B4)OVERLAP_F_B,(6F6;1B2)OVERLAP_F_B,(1F9;6B5)OVERLAP_F_B,"
    "(6F7;1B3)OVERLAP_F_B,6B6,(6F8;1B4)OVERLAP_F_B,6B7,(6F9;1B5)OVERLAP_F_B,6B8,1B6,6I9,1I7,6W9,1I8,1W7,1I9,1W8,1W9",
    "2F0,2F1,2F2,5F0,2F3,5F1,2F4,5F2,5I0,5W0,5F3,(2F5;5B1)OVERLAP_F_B,(5F4;2B0)OVERLAP_F_B,(2F6;5B2)OVERLAP_F_B,"
    "(5F5;2B1)OVERLAP_F_B,(2F7;5B3)OVERLAP_F_B,(5F6;2B2)OVERLAP_F_B,(2F8;5B4)OVERLAP_F_B,(5F7;2B3)OVERLAP_F_B,"
    "(2F9;5B5)OVERLAP_F_B,(5F8;2B4)OVERLAP_F_B,5B6,(5F9;2B5)OVERLAP_F_B,5B7,2B6,5B8,2I7,5I9,2I8,2W7,2I9,5W9,2W8,2W9",
    "3F0,4F0,3F1,4F1,3F2,4F2,3F3,4F3,3F4,4B0,(4F4;3B0)OVERLAP_F_B,(3F5;4B1)OVERLAP_F_B,(4F5;3B1)OVERLAP_F_B,"
    "(3F6;4B2)OVERLAP_F_B,(4F6;3B2)OVERLAP_F_B,(3F7;4B3)OVERLAP_F_B,(4F7;3B3)OVERLAP_F_B,(3F8;4B4)OVERLAP_F_B,"
    "(4F8;3B4)OVERLAP_F_B,(3F9;4B5)OVERLAP_F_B,(4F9;3B5)OVERLAP_F_B,4B6,3B6,4B7,3B7,4I8,3I8,4I9,3I9,4W8,3W8,4W9,3W9"};

static int v_rank(int p, int stage) { return stage < p ? stage : 2 * p - 1 - stage; }

/* One CSV compute action as our text, with its messages; and as "F 3 0" in `order`. */
static void csv_action(int p, int stage, char op, int mb, char *text, size_t n, char *order, size_t on) {
    const int c = stage < p ? 0 : 1, r = v_rank(p, stage), fwd = op == 'F', wgt = op == 'W';
    const int before = fwd ? stage - 1 : stage + 1, after = fwd ? stage + 1 : stage - 1;
    const int remote_before = before >= 0 && before < 2 * p && v_rank(p, before) != r;
    const int remote_after = after >= 0 && after < 2 * p && v_rank(p, after) != r;
    size_t u = strlen(text);
    if (!wgt && remote_before) u += (size_t)snprintf(text + u, n - u, ", %s %d %d", fwd ? "RA" : "RG", mb, c);
    u += (size_t)snprintf(text + u, n - u, ", %c %d %d", op, mb, c);
    if (!wgt && remote_after) snprintf(text + u, n - u, ", %s %d %d", fwd ? "SA" : "SG", mb, c);
    u = strlen(order);
    snprintf(order + u, on - u, "%s%c %d %d", u ? ", " : "", op, mb, c);
}

static void csv_to_text(char *text, size_t n, char orders[4][2048]) {
    int r;
    snprintf(text, n, "pipeline stages=4 chunks=2 micro_batches=10\nplacement v\n");
    for (r = 0; r < 4; r++) {
        const char *q = dualpipev_csv[r];
        size_t line;
        orders[r][0] = 0;
        snprintf(text + strlen(text), n - strlen(text), "rank %d:", r);
        line = strlen(text);
        while (*q) {
            int k, pair = *q == '(';
            if (pair) q++;
            for (k = 0; k < 1 + pair; k++) { /* STAGE OP MB, then after ';' the pair's backward */
                char *end;
                const int stage = (int)strtol(q, &end, 10);
                const char op = *end;
                const int mb = (int)strtol(end + 1, &end, 10);
                csv_action(4, stage, op, mb, text, n, orders[r], sizeof orders[r]);
                q = end + (*end == ';');
            }
            if (pair) q = strchr(q, ',') ? strchr(q, ',') : q + strlen(q);
            if (*q == ',') q++;
        }
        memmove(text + line, text + line + 1, strlen(text + line + 1) + 1); /* the first ", " */
        snprintf(text + strlen(text), n - strlen(text), "\n");
    }
}

static void test_dualpipev_fixture(void) {
    static char text[16384], mine[2048];
    static char orders[4][2048];
    par_pp_schedule *s = NULL, *g = make_v(4, 10, PAR_PP_DUALPIPEV);
    par_pp_check c;
    char grid[4096];
    int r, k, n;
    csv_to_text(text, sizeof text, orders);
    CHECK_MSG(par_pp_schedule_parse(text, &s) == PAR_OK, "%s\n%s", par_last_error(), text);
    if (s) CHECK_MSG(par_pp_schedule_check(s, &c, grid, sizeof grid) == PAR_OK, "%s\n%s", par_last_error(), grid);
    /* 10 micro-batches x 8 stages: 80 F, and B or I + W for each */
    for (r = 0, n = 0; s && r < 4; r++) {
        const par_pp_action *a = par_pp_schedule_actions(s, r, &k);
        while (k--) n += a[k].op == PAR_PP_F;
    }
    CHECK_MSG(n == 80, "%d forwards", n);
    for (r = 0; g && r < 4; r++) {
        const par_pp_action *a = par_pp_schedule_actions(g, r, &n);
        mine[0] = 0;
        for (k = 0; k < n; k++)
            if (a[k].op <= PAR_PP_W)
                snprintf(mine + strlen(mine), sizeof mine - strlen(mine), "%s%c %d %d", mine[0] ? ", " : "",
                         "FBIW"[a[k].op], a[k].micro_batch, a[k].chunk);
        CHECK_MSG(!strcmp(mine, orders[r]), "rank %d: ours\n%s\nPyTorch's\n%s", r, mine, orders[r]);
    }
    if (s && g) { /* and with the messages: our generator's text is the converted fixture's */
        static char ours[16384];
        par_pp_schedule_format(g, ours, sizeof ours);
        CHECK_STR(ours, text);
    }
    par_pp_schedule_destroy(s), par_pp_schedule_destroy(g);
}

/* ---- 7. boundary buffer sets --------------------------------------------------------- */

/* The executor's buffer lifetimes in time, in a timed run independent of
   par_pp_schedule_buffer_sets's vector clocks: each rank walks its list, an
   action starting when the rank is free and (a receive's wait) its message
   has arrived; actions take random times at a random speed per rank, and
   messages a random latency. A received buffer is written when its message
   lands (after its post, or its RA), a hand-off copy at the end of the F /
   B / I that makes it; a sent buffer is read until its message lands. */
typedef struct bs_run {
    const par_pp_schedule *s;
    int p, v, m, *idx, *first;
    double *t0, *t1, *land; /* per action (first[r] + k): start, end, and a receive's landing */
    unsigned rng;
} bs_run;

static double bs_rand(bs_run *b) {
    b->rng = b->rng * 1103515245u + 12345u;
    return (double)((b->rng >> 8) & 0xffff) / 65536.0;
}

static int bs_at(const bs_run *b, par_pp_op op, int r, int c, int mb) {
    return b->idx[(((size_t)op * (size_t)b->v + (size_t)c) * (size_t)b->m + (size_t)mb) * (size_t)b->p + (size_t)r];
}

static int bs_row(const bs_run *b, par_pp_op op, int r, int c, int mb) {
    const int k = bs_at(b, op, r, c, mb);
    return k < 0 ? -1 : b->first[r] + k;
}

/* The rank and chunk of virtual stage vs. */
static void bs_where(const par_pp_schedule *s, int vs, int *r, int *c) { par_pp_schedule_stage_rank(s, vs, r, c); }

/* One timed run (trial 0: the checker's F = 1, B = 2, I = W = 1, no latency).
   0 when a receive never gets its message (not for a checked schedule). */
static int bs_time(bs_run *b, int trial) {
    const par_pp_schedule *s = b->s;
    double clock[64], speed[64], *sent;
    int done[64], r, left = 0, progress = 1, total = b->first[b->p];
    sent = (double *)calloc((size_t)total, sizeof(double));
    for (r = 0; r < b->p; r++) clock[r] = 0, done[r] = 0, speed[r] = trial ? 0.2 + 4.8 * bs_rand(b) : 1.0;
    for (r = 0, left = 0; r < b->p; r++) left += b->first[r + 1] - b->first[r];
    while (left > 0 && progress)
        for (r = 0, progress = 0; r < b->p; r++) {
            int n;
            const par_pp_action *a = par_pp_schedule_actions(s, r, &n);
            for (; done[r] < n; done[r]++, left--, progress = 1) {
                const par_pp_action *x = &a[done[r]];
                const int row = b->first[r] + done[r], vs = par_pp_schedule_stage(s, r, x->chunk);
                double t = clock[r], d = 0;
                if (x->op == PAR_PP_RECV_ACT || x->op == PAR_PP_RECV_GRAD) {
                    const int g = x->op == PAR_PP_RECV_GRAD, post = bs_row(b, g ? PAR_PP_POST_GRAD : PAR_PP_POST_ACT, r,
                                                                           x->chunk, x->micro_batch);
                    int q, qc, e;
                    bs_where(s, g ? vs + 1 : vs - 1, &q, &qc);
                    e = bs_row(b, g ? PAR_PP_SEND_GRAD : PAR_PP_SEND_ACT, q, qc, x->micro_batch);
                    if (e < 0 || e >= b->first[q] + done[q]) break; /* its send has not run yet */
                    /* lands once sent and posted (posted here: at this RA, or at its PA) */
                    b->land[row] = fmax(sent[e], post >= 0 ? b->t0[post] : t);
                    if (post >= 0) b->land[post] = b->land[row];
                    t = fmax(t, b->land[row]), d = 0.01;
                } else if (x->op == PAR_PP_SEND_ACT || x->op == PAR_PP_SEND_GRAD) {
                    sent[row] = t + (trial ? 3.0 * bs_rand(b) : 0.0), d = 0.01;
                } else if (x->op != PAR_PP_POST_ACT && x->op != PAR_PP_POST_GRAD) {
                    d = (x->op == PAR_PP_B ? 2.0 : 1.0) * speed[r] * (trial ? 0.5 + bs_rand(b) : 1.0);
                }
                b->t0[row] = t, b->t1[row] = clock[r] = t + d;
            }
        }
    free(sent);
    return left == 0;
}

/* The interval [*w, *e) buffer `kind` (0 input, 1 output, 2 input gradient,
   3 output gradient, as par_pp_run's buffer callback) of (mb, c) on rank r
   is in use; 0 when that stage has none. */
static int bs_use(const bs_run *b, int r, int c, int mb, int kind, double *w, double *e) {
    const par_pp_schedule *s = b->s;
    const int vs = par_pp_schedule_stage(s, r, c), nb = vs + (kind == 0 || kind == 2 ? -1 : 1);
    int q, qc, k, last = -1;
    if (nb < 0 || nb >= b->p * b->v) return 0;
    bs_where(s, nb, &q, &qc);
    for (k = PAR_PP_B; k <= PAR_PP_W; k++) /* the last backward: B, or W after I */
        if (bs_row(b, (par_pp_op)k, r, c, mb) > last) last = bs_row(b, (par_pp_op)k, r, c, mb);
    if (kind == 0 || kind == 3) { /* received, or copied in by the neighbour's F / B / I here */
        int from = kind == 0 ? bs_row(b, PAR_PP_F, r, qc, mb) : bs_row(b, PAR_PP_B, r, qc, mb);
        if (kind == 3 && from < 0) from = bs_row(b, PAR_PP_I, r, qc, mb);
        *w = q == r ? b->t1[from] : b->land[bs_row(b, kind == 0 ? PAR_PP_RECV_ACT : PAR_PP_RECV_GRAD, r, c, mb)];
        *e = b->t1[last];
        return 1;
    }
    k = kind == 1 ? bs_row(b, PAR_PP_F, r, c, mb) : bs_row(b, PAR_PP_B, r, c, mb);
    if (k < 0) k = bs_row(b, PAR_PP_I, r, c, mb);
    *w = b->t0[k];
    *e = q == r ? b->t1[k] : b->land[bs_row(b, kind == 1 ? PAR_PP_RECV_ACT : PAR_PP_RECV_GRAD, q, qc, mb)];
    return 1;
}

/* The first clash with `sets` sets (two micro-batches of one set in one
   buffer at once), in text; "" when none. */
static void bs_clash(const bs_run *b, int sets, char *why, size_t n) {
    int r, c, kind, i, j;
    why[0] = 0;
    for (r = 0; r < b->p; r++)
        for (c = 0; c < b->v; c++)
            for (kind = 0; kind < 4; kind++)
                for (i = 0; i < b->m; i++)
                    for (j = i + sets; j < b->m; j += sets) {
                        double wi, ei, wj, ej;
                        if (!bs_use(b, r, c, i, kind, &wi, &ei) || !bs_use(b, r, c, j, kind, &wj, &ej)) continue;
                        if (wi < ej && wj < ei) {
                            snprintf(why, n, "rank %d chunk %d buffer %d: micro-batch %d [%g, %g) and %d [%g, %g)", r,
                                     c, kind, i, wi, ei, j, wj, ej);
                            return;
                        }
                    }
}

static int bs_init(bs_run *b, const par_pp_schedule *s, unsigned seed) {
    int r, k, n;
    size_t nidx;
    memset(b, 0, sizeof *b);
    b->s = s, b->p = par_pp_schedule_stages(s), b->v = par_pp_schedule_chunks(s), b->m = par_pp_schedule_micro_batches(s);
    b->rng = seed;
    nidx = (size_t)PAR_PP_OP_COUNT * (size_t)b->v * (size_t)b->m * (size_t)b->p;
    b->idx = (int *)malloc(sizeof(int) * nidx), b->first = (int *)malloc(sizeof(int) * (size_t)(b->p + 1));
    if (!b->idx || !b->first || b->p > 64) return 0;
    memset(b->idx, 0xff, sizeof(int) * nidx);
    for (r = 0, b->first[0] = 0; r < b->p; r++) {
        const par_pp_action *a = par_pp_schedule_actions(s, r, &n);
        for (k = 0; k < n; k++)
            b->idx[(((size_t)a[k].op * (size_t)b->v + (size_t)a[k].chunk) * (size_t)b->m + (size_t)a[k].micro_batch) *
                       (size_t)b->p + (size_t)r] = k;
        b->first[r + 1] = b->first[r] + n;
    }
    b->t0 = (double *)calloc((size_t)b->first[b->p] + 1, sizeof(double));
    b->t1 = (double *)calloc((size_t)b->first[b->p] + 1, sizeof(double));
    b->land = (double *)calloc((size_t)b->first[b->p] + 1, sizeof(double));
    return b->t0 && b->t1 && b->land;
}

static void bs_free(bs_run *b) { free(b->idx), free(b->first), free(b->t0), free(b->t1), free(b->land); }

/* par_pp_schedule_buffer_sets of s, checked against timed runs: no clash
   in any of them. Returns the sets (0 on failure). */
static int bs_check(const par_pp_schedule *s, const char *label, int trials) {
    bs_run b;
    char why[256];
    int sets = 0, t;
    CHECK_MSG(par_pp_schedule_buffer_sets(s, &sets) == PAR_OK, "%s: %s", label, par_last_error());
    CHECK_MSG(sets >= 1 && sets <= par_pp_schedule_micro_batches(s), "%s: %d sets for %d micro-batches", label, sets,
              par_pp_schedule_micro_batches(s));
    if (!bs_init(&b, s, 12345u)) {
        CHECK_MSG(0, "%s: out of memory", label);
        return bs_free(&b), 0;
    }
    for (t = 0; t < trials; t++) {
        CHECK_MSG(bs_time(&b, t), "%s: the timed run stalls", label);
        bs_clash(&b, sets, why, sizeof why);
        CHECK_MSG(!why[0], "%s, trial %d: %d sets clash: %s", label, t, sets, why);
        if (why[0]) break;
    }
    bs_free(&b);
    return sets;
}

/* Every generated kind over p 1..8, its chunks, m 1..32 where it is valid:
   the timed runs see no two micro-batches of a set in one buffer at once,
   and the sets never exceed the busiest rank's slots (the host's in-flight
   count, which the rule had before it was computed exactly). */
static void test_buffer_sets_generated(void) {
    char figures[512] = "";
    int k, p, m, vi, runs = 0;
    for (k = 0; k < (int)PAR_PP_KIND_COUNT; k++)
        for (vi = 0; vi < 2; vi++)
            for (p = 1; p <= 8; p++)
                for (m = 1; m <= 32; m++) {
                    const int v = kind_chunks((par_pp_kind)k) == 1 ? 1 : k == PAR_PP_ZBV || k == PAR_PP_DUALPIPEV ? 2 : 2 + vi;
                    par_pp_schedule_desc d;
                    par_pp_schedule *s = NULL;
                    char label[96];
                    int sets, r, n, slots = 1;
                    if (vi && v < 3) continue;
                    memset(&d, 0, sizeof d);
                    d.stages = p, d.chunks = v, d.micro_batches = m, d.kind = (par_pp_kind)k;
                    if (par_pp_schedule_make(&d, &s) != PAR_OK) continue; /* m the kind cannot split */
                    snprintf(label, sizeof label, "%s p %d v %d m %d", par_pp_kind_name((par_pp_kind)k), p, v, m);
                    sets = bs_check(s, label, 3);
                    for (r = 0; r < p; r++)
                        if (par_pp_schedule_slots(s, r, &n) == PAR_OK && n > slots) slots = n;
                    CHECK_MSG(sets <= slots, "%s: %d sets, the busiest rank holds %d", label, sets, slots);
                    if (p == 4 && m == 8 && v <= 2) /* docs/pipeline.md quotes these */
                        snprintf(figures + strlen(figures), sizeof figures - strlen(figures), "%s%s %d/%d",
                                 figures[0] ? ", " : "", par_pp_kind_name((par_pp_kind)k), sets, slots);
                    runs++;
                    par_pp_schedule_destroy(s);
                }
    CHECK_MSG(runs > 1500, "%d schedules", runs);
    printf("  buffer sets: %d generated schedules, each timed 3 ways without a clash\n", runs);
    printf("  p 4 m 8: buffer sets / slots of the busiest rank: %s\n", figures);
}

/* Schedules written by hand, the sets derived by hand, and one set fewer
   clashes in a timed run (the rule cannot return too few). */
static void bs_hand(const char *text, int want, const char *label) {
    par_pp_schedule *s = NULL;
    bs_run b;
    char why[256];
    int t, clash = 0;
    CHECK_MSG(par_pp_schedule_parse(text, &s) == PAR_OK, "%s: %s", label, par_last_error());
    if (!s) return;
    CHECK_INT(bs_check(s, label, 4), want);
    if (want > 1 && bs_init(&b, s, 777u)) {
        for (t = 1; t < 40 && !clash; t++) { /* random timings until one clashes */
            CHECK_MSG(bs_time(&b, t), "%s: the timed run stalls", label);
            bs_clash(&b, want - 1, why, sizeof why);
            clash = why[0] != 0;
        }
        CHECK_MSG(clash, "%s: %d sets never clash", label, want - 1);
        bs_free(&b);
    }
    par_pp_schedule_destroy(s);
}

static void test_buffer_sets_hand(void) {
    /* micro-batch 1 first: F 0 on rank 0 would overwrite the output of 1
       before rank 1 received it (one set each, m = 2) */
    bs_hand("pipeline stages=2 chunks=1 micro_batches=2\n"
            "rank 0: F 1 0, SA 1 0, F 0 0, SA 0 0, RG 1 0, B 1 0, RG 0 0, B 0 0\n"
            "rank 1: RA 1 0, F 1 0, B 1 0, SG 1 0, RA 0 0, F 0 0, B 0 0, SG 0 0\n",
            2, "out of order");
    /* 1F1B holding one micro-batch on each rank, but rank 1 posts every
       receive at its start: micro-batch 1's activation lands while 0 is
       still in use (rank 0 sends it before it waits for anything); 2's only
       after rank 0 got 0's gradient: two sets, as without the posts */
    bs_hand("pipeline stages=2 chunks=1 micro_batches=4\n"
            "rank 0: F 0 0, SA 0 0, F 1 0, SA 1 0, RG 0 0, B 0 0, F 2 0, SA 2 0, RG 1 0, B 1 0, F 3 0, SA 3 0, "
            "RG 2 0, B 2 0, RG 3 0, B 3 0\n"
            "rank 1: PA 0 0, PA 1 0, PA 2 0, PA 3 0, RA 0 0, F 0 0, B 0 0, SG 0 0, RA 1 0, F 1 0, B 1 0, SG 1 0, "
            "RA 2 0, F 2 0, B 2 0, SG 2 0, RA 3 0, F 3 0, B 3 0, SG 3 0\n",
            2, "posted ahead");
    /* GPipe: every forward before any backward, each output still unsent
       when the next is written: a set per micro-batch */
    bs_hand("pipeline stages=2 chunks=1 micro_batches=3\n"
            "rank 0: F 0 0, SA 0 0, F 1 0, SA 1 0, F 2 0, SA 2 0, RG 0 0, B 0 0, RG 1 0, B 1 0, RG 2 0, B 2 0\n"
            "rank 1: RA 0 0, F 0 0, RA 1 0, F 1 0, RA 2 0, F 2 0, B 0 0, SG 0 0, B 1 0, SG 1 0, B 2 0, SG 2 0\n",
            3, "gpipe");
    /* one stage: no boundary buffer, one set */
    bs_hand("pipeline stages=1 chunks=1 micro_batches=3\nrank 0: F 0 0, F 1 0, F 2 0, B 0 0, B 1 0, B 2 0\n", 1,
            "one stage");
}

/* Refused: NULL, and a schedule the checker refuses (a missing backward). */
static void test_buffer_sets_errors(void) {
    par_pp_schedule *s = NULL;
    int sets = 7;
    CHECK_INT(par_pp_schedule_buffer_sets(NULL, &sets), PAR_EINVAL);
    CHECK_INT(sets, 0);
    CHECK_OK(par_pp_schedule_parse("pipeline stages=1 chunks=1 micro_batches=2\nrank 0: F 0 0, F 1 0, B 0 0\n", &s));
    CHECK_INT(par_pp_schedule_buffer_sets(s, NULL), PAR_EINVAL);
    CHECK_INT(par_pp_schedule_buffer_sets(s, &sets), PAR_EINVAL);
    CHECK_MSG(strstr(par_last_error(), "par_pp_schedule_check") != NULL, "%s", par_last_error());
    par_pp_schedule_destroy(s);
}

/* The executor with the toy's buffers reused: micro-batch mb in set
   mb % sets, every kind at 1, 2, 4 stages (posted ahead too): the weight
   gradients equal the direct computation, as with a set per micro-batch. */
static void run_toy_sets(int p, int v, int m, par_pp_kind kind, int post_ahead) {
    toy t;
    par_ctx_desc pd;
    par_pp_schedule *g = make(p, v, m, kind), *posted = NULL;
    char mesh[32];
    int s, ok = 1;
    if (!g) return;
    toy_init(&t, p, v, m, kind);
    t.schedule = g;
    if (post_ahead) t.schedule = posted = toy_post_ahead(g);
    CHECK_MSG(t.schedule && par_pp_schedule_buffer_sets(t.schedule, &t.sets) == PAR_OK, "%s p %d m %d: %s",
              par_pp_kind_name(kind), p, m, par_last_error());
    snprintf(mesh, sizeof mesh, "pp=%d", p);
    memset(&pd, 0, sizeof pd);
    pd.mesh = mesh, pd.timeout_ms = 20000, pd.kernel_threads = 1;
    if (t.schedule)
        CHECK_MSG(par_run_threads_desc(&pd, p, toy_body, &t) == PAR_OK, "%s p %d v %d m %d, %d sets: %s",
                  par_pp_kind_name(kind), p, v, m, t.sets, par_last_error());
    for (s = 0; s < p; s++) ok &= toy_stage_ok(&t, s);
    CHECK_MSG(ok, "%s p %d v %d m %d, %d sets%s: dw[0] %.9g, want %.9g", par_pp_kind_name(kind), p, v, m, t.sets,
              post_ahead ? " (posted ahead)" : "", t.got_dw[0], t.want_dw[0]);
    CHECK_MSG(p == 1 || m <= 2 || t.sets < m || post_ahead || kind == PAR_PP_GPIPE || kind == PAR_PP_LOOPED_BFS,
              "%s p %d m %d: %d sets, no reuse", par_pp_kind_name(kind), p, m, t.sets);
    par_pp_schedule_destroy(posted), par_pp_schedule_destroy(g);
}

static void test_executor_buffer_sets(void) {
    static const int ps[] = {1, 2, 4};
    size_t i;
    int k;
    for (i = 0; i < sizeof ps / sizeof ps[0]; i++)
        for (k = 0; k < (int)PAR_PP_KIND_COUNT; k++) {
            const int p = ps[i], v = kind_chunks((par_pp_kind)k) == 1 ? 1 : 2;
            run_toy_sets(p, v, k == PAR_PP_DUALPIPEV || v == 2 ? 4 * p : 3 * p + 1, (par_pp_kind)k, 0);
            if (p > 1) run_toy_sets(p, v, k == PAR_PP_DUALPIPEV || v == 2 ? 2 * p : 2 * p + 1, (par_pp_kind)k, 1);
        }
}

int main(void) {
    test_generators();
    test_check_many_ranks();
    test_generator_errors();
    test_interleaved_rounds();
    test_chunked_kinds();
    test_text();
    test_bad_schedules();
    test_bad_posts();
    test_post_ahead_time();
    test_pytorch_artifacts();
    test_pytorch_cases();
    test_pytorch_plan_cases();
    test_pytorch_v_case();
    test_executor();
    test_executor_bad_posts();
    test_stage_mismatch();
    test_local_handoff_errors();
    test_executor_16bit();
    test_bad_dtype();
    test_stage_params();
    test_placement_maps();
    test_placement_errors();
    test_placement_check();
    test_v_generators();
    test_dualpipev_fixture();
    test_buffer_sets_errors();
    test_buffer_sets_hand();
    test_buffer_sets_generated();
    test_executor_buffer_sets();
    return TEST_END("pipeline");
}
