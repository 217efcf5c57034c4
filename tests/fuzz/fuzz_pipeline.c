/* tests/fuzz/fuzz_pipeline.c - par_pp_schedule_parse on arbitrary text, then
   the checker on whatever parsed. A schedule that parses must format and
   parse back to the same text; the checker returns OK (with a bubble in
   [0, 1) and an in-flight count no larger than the micro-batch chunks) or a
   clean error naming what is wrong. */
#define _POSIX_C_SOURCE 200809L
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = fuzz_cstr(data, size), grid[2048];
    par_pp_schedule *s = NULL, *back = NULL;
    par_pp_check c;
    par_status st;
    if (size > 65536) return free(text), 0; /* keep each run short: the checker is linear in the actions */
    par_clear_error();
    st = par_pp_schedule_parse(text, &s);
    fuzz_clean(st, "par_pp_schedule_parse");
    FUZZ_REQUIRE((st == PAR_OK) == (s != NULL), "status %s with schedule %p", par_status_string(st), (void *)s);
    if (s) {
        const int n = par_pp_schedule_format(s, NULL, 0);
        char *a = (char *)malloc((size_t)n + 1), *b;
        FUZZ_REQUIRE(a != NULL, "out of memory");
        par_pp_schedule_format(s, a, (size_t)n + 1);
        st = par_pp_schedule_parse(a, &back);
        FUZZ_REQUIRE(st == PAR_OK, "its own text form did not parse: %s", par_last_error());
        b = (char *)malloc((size_t)n + 1);
        FUZZ_REQUIRE(b != NULL && par_pp_schedule_format(back, b, (size_t)n + 1) == n && strcmp(a, b) == 0,
                     "the text form does not round-trip");
        par_clear_error();
        st = par_pp_schedule_check(s, &c, grid, sizeof grid);
        fuzz_clean(st, "par_pp_schedule_check");
        if (st == PAR_OK)
            FUZZ_REQUIRE(c.bubble >= 0 && c.bubble < 1 && c.max_in_flight <= par_pp_schedule_micro_batches(s) *
                                                                                par_pp_schedule_chunks(s),
                         "bubble %g, in flight %d", c.bubble, c.max_in_flight);
        free(a), free(b);
        par_pp_schedule_destroy(back), par_pp_schedule_destroy(s);
    }
    free(text);
    return 0;
}
