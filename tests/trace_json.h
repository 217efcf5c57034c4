/* tests/trace_json.h - an independent reader of Chrome trace JSON for the tests.

   A strict little JSON parser (RFC 8259: objects, arrays, strings with every
   escape incl. \uXXXX surrogate pairs, numbers, true/false/null, nothing after
   the value) that keeps, for each element of "traceEvents", the fields the
   tests look at. It shares no code with the library's writer, so a writer bug
   (a missing escape, a stray comma) shows as a parse failure here.

   tj_load(path, &trace) -> 0 on success, -1 with trace.error set. */
#ifndef PAR_TRACE_JSON_H
#define PAR_TRACE_JSON_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct tj_event {
    char name[256], cat[64], ph[8];
    double ts, dur;
    long long pid, tid;
    int has_name, has_cat, has_ph, has_ts, has_dur, has_pid, has_tid, has_args;
    char arg_name[256];    /* args.name when it is a string (metadata events) */
    long long arg_dropped; /* args.dropped when present */
    int has_arg_dropped;
} tj_event;

typedef struct tj_trace {
    tj_event *events;
    int count, cap;
    int has_display_unit;
    char error[256];
} tj_trace;

typedef struct tj_parser {
    const char *start, *p, *end;
    tj_trace *out;
    int failed;
} tj_parser;

static void tj_fail(tj_parser *ps, const char *what) {
    if (!ps->failed) snprintf(ps->out->error, sizeof ps->out->error, "%s at byte offset %ld", what, (long)(ps->p - ps->start));
    ps->failed = 1;
}

static void tj_ws(tj_parser *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\n' || *ps->p == '\r' || *ps->p == '\t')) ps->p++;
}

static int tj_hex(tj_parser *ps, unsigned *v) {
    int i;
    *v = 0;
    if (ps->end - ps->p < 4) return tj_fail(ps, "short \\u escape"), -1;
    for (i = 0; i < 4; i++) {
        char c = *ps->p++;
        *v <<= 4;
        if (c >= '0' && c <= '9') *v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') *v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') *v |= (unsigned)(c - 'A' + 10);
        else return tj_fail(ps, "bad hex digit in \\u escape"), -1;
    }
    return 0;
}

/* Parse a string into buf (UTF-8, cut to size; NULL buf = skip). */
static void tj_string(tj_parser *ps, char *buf, size_t size) {
    size_t n = 0;
    if (ps->p >= ps->end || *ps->p != '"') { tj_fail(ps, "expected a string"); return; }
    ps->p++;
    for (;;) {
        unsigned char c;
        unsigned cp = 0;
        char enc[4];
        int len = 0, i;
        if (ps->p >= ps->end) { tj_fail(ps, "unterminated string"); return; }
        c = (unsigned char)*ps->p++;
        if (c == '"') break;
        if (c < 0x20) { tj_fail(ps, "raw control character in a string"); return; }
        if (c != '\\') {
            enc[0] = (char)c, len = 1;
        } else {
            if (ps->p >= ps->end) { tj_fail(ps, "unterminated escape"); return; }
            c = (unsigned char)*ps->p++;
            switch (c) {
            case '"': case '\\': case '/': enc[0] = (char)c, len = 1; break;
            case 'b': enc[0] = '\b', len = 1; break;
            case 'f': enc[0] = '\f', len = 1; break;
            case 'n': enc[0] = '\n', len = 1; break;
            case 'r': enc[0] = '\r', len = 1; break;
            case 't': enc[0] = '\t', len = 1; break;
            case 'u':
                if (tj_hex(ps, &cp)) return;
                if (cp >= 0xd800 && cp < 0xdc00) {
                    unsigned lo;
                    if (ps->end - ps->p < 2 || ps->p[0] != '\\' || ps->p[1] != 'u') { tj_fail(ps, "lone high surrogate"); return; }
                    ps->p += 2;
                    if (tj_hex(ps, &lo)) return;
                    if (lo < 0xdc00 || lo > 0xdfff) { tj_fail(ps, "bad low surrogate"); return; }
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                } else if (cp >= 0xdc00 && cp < 0xe000) {
                    { tj_fail(ps, "lone low surrogate"); return; }
                }
                if (cp < 0x80) enc[0] = (char)cp, len = 1;
                else if (cp < 0x800) enc[0] = (char)(0xc0 | (cp >> 6)), enc[1] = (char)(0x80 | (cp & 0x3f)), len = 2;
                else if (cp < 0x10000)
                    enc[0] = (char)(0xe0 | (cp >> 12)), enc[1] = (char)(0x80 | ((cp >> 6) & 0x3f)),
                    enc[2] = (char)(0x80 | (cp & 0x3f)), len = 3;
                else
                    enc[0] = (char)(0xf0 | (cp >> 18)), enc[1] = (char)(0x80 | ((cp >> 12) & 0x3f)),
                    enc[2] = (char)(0x80 | ((cp >> 6) & 0x3f)), enc[3] = (char)(0x80 | (cp & 0x3f)), len = 4;
                break;
            default: { tj_fail(ps, "unknown escape"); return; }
            }
        }
        for (i = 0; i < len; i++)
            if (buf && n + 1 < size) buf[n++] = enc[i];
    }
    if (buf && size) buf[n] = 0;
}

static double tj_number(tj_parser *ps) {
    const char *s = ps->p;
    char tmp[64];
    size_t n;
    if (ps->p < ps->end && *ps->p == '-') ps->p++;
    if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') return tj_fail(ps, "bad number"), 0.0;
    if (*ps->p == '0') ps->p++;
    else while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') ps->p++;
    if (ps->p < ps->end && *ps->p == '.') {
        ps->p++;
        if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') return tj_fail(ps, "bad fraction"), 0.0;
        while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') ps->p++;
    }
    if (ps->p < ps->end && (*ps->p == 'e' || *ps->p == 'E')) {
        ps->p++;
        if (ps->p < ps->end && (*ps->p == '+' || *ps->p == '-')) ps->p++;
        if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') return tj_fail(ps, "bad exponent"), 0.0;
        while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') ps->p++;
    }
    n = (size_t)(ps->p - s) < sizeof tmp - 1 ? (size_t)(ps->p - s) : sizeof tmp - 1;
    memcpy(tmp, s, n);
    tmp[n] = 0;
    return strtod(tmp, NULL);
}

static void tj_value(tj_parser *ps, int depth);

/* An object; calls back per key when `ev` is set (an event object). */
static void tj_object(tj_parser *ps, int depth, tj_event *ev, int is_args) {
    int first = 1;
    ps->p++; /* { */
    tj_ws(ps);
    if (ps->p < ps->end && *ps->p == '}') {
        ps->p++;
        return;
    }
    while (!ps->failed) {
        char key[64];
        tj_ws(ps);
        if (!first) {
            if (ps->p < ps->end && *ps->p == '}') { tj_fail(ps, "trailing comma in an object"); return; }
        }
        first = 0;
        tj_string(ps, key, sizeof key);
        tj_ws(ps);
        if (ps->failed) return;
        if (ps->p >= ps->end || *ps->p != ':') { tj_fail(ps, "expected ':'"); return; }
        ps->p++;
        tj_ws(ps);
        if (ev && !is_args && (!strcmp(key, "name") || !strcmp(key, "cat") || !strcmp(key, "ph"))) {
            char *dst = !strcmp(key, "name") ? ev->name : !strcmp(key, "cat") ? ev->cat : ev->ph;
            size_t sz = !strcmp(key, "name") ? sizeof ev->name : !strcmp(key, "cat") ? sizeof ev->cat : sizeof ev->ph;
            tj_string(ps, dst, sz);
            if (!strcmp(key, "name")) ev->has_name = 1;
            else if (!strcmp(key, "cat")) ev->has_cat = 1;
            else ev->has_ph = 1;
        } else if (ev && !is_args && (!strcmp(key, "ts") || !strcmp(key, "dur") || !strcmp(key, "pid") || !strcmp(key, "tid"))) {
            double v = tj_number(ps);
            if (!strcmp(key, "ts")) ev->ts = v, ev->has_ts = 1;
            else if (!strcmp(key, "dur")) ev->dur = v, ev->has_dur = 1;
            else if (!strcmp(key, "pid")) ev->pid = (long long)v, ev->has_pid = 1;
            else ev->tid = (long long)v, ev->has_tid = 1;
        } else if (ev && !is_args && !strcmp(key, "args") && ps->p < ps->end && *ps->p == '{') {
            ev->has_args = 1;
            tj_object(ps, depth + 1, ev, 1);
        } else if (ev && is_args && !strcmp(key, "name") && ps->p < ps->end && *ps->p == '"') {
            tj_string(ps, ev->arg_name, sizeof ev->arg_name);
        } else if (ev && is_args && !strcmp(key, "dropped") && ps->p < ps->end && *ps->p != '"') {
            ev->arg_dropped = (long long)tj_number(ps), ev->has_arg_dropped = 1;
        } else {
            tj_value(ps, depth + 1);
        }
        tj_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            continue;
        }
        if (ps->p < ps->end && *ps->p == '}') {
            ps->p++;
            return;
        }
        { tj_fail(ps, "expected ',' or '}'"); return; }
    }
}

static void tj_array(tj_parser *ps, int depth, int is_events) {
    ps->p++; /* [ */
    tj_ws(ps);
    if (ps->p < ps->end && *ps->p == ']') {
        ps->p++;
        return;
    }
    while (!ps->failed) {
        tj_ws(ps);
        if (is_events) {
            tj_trace *t = ps->out;
            if (ps->p >= ps->end || *ps->p != '{') { tj_fail(ps, "an event is not an object"); return; }
            if (t->count == t->cap) {
                t->cap = t->cap ? 2 * t->cap : 256;
                t->events = (tj_event *)realloc(t->events, (size_t)t->cap * sizeof *t->events);
                if (!t->events) { tj_fail(ps, "out of memory"); return; }
            }
            memset(&t->events[t->count], 0, sizeof t->events[0]);
            tj_object(ps, depth + 1, &t->events[t->count++], 0);
        } else {
            tj_value(ps, depth + 1);
        }
        tj_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            tj_ws(ps);
            if (ps->p < ps->end && *ps->p == ']') { tj_fail(ps, "trailing comma in an array"); return; }
            continue;
        }
        if (ps->p < ps->end && *ps->p == ']') {
            ps->p++;
            return;
        }
        { tj_fail(ps, "expected ',' or ']'"); return; }
    }
}

static void tj_value(tj_parser *ps, int depth) {
    tj_ws(ps);
    if (depth > 64) { tj_fail(ps, "nesting too deep"); return; }
    if (ps->p >= ps->end) { tj_fail(ps, "unexpected end"); return; }
    switch (*ps->p) {
    case '{': tj_object(ps, depth, NULL, 0); return;
    case '[': tj_array(ps, depth, 0); return;
    case '"': tj_string(ps, NULL, 0); return;
    case 't': if (ps->end - ps->p >= 4 && !memcmp(ps->p, "true", 4)) { ps->p += 4; return; } break;
    case 'f': if (ps->end - ps->p >= 5 && !memcmp(ps->p, "false", 5)) { ps->p += 5; return; } break;
    case 'n': if (ps->end - ps->p >= 4 && !memcmp(ps->p, "null", 4)) { ps->p += 4; return; } break;
    default: tj_number(ps); return;
    }
    tj_fail(ps, "unexpected token");
}

/* The top level: {"traceEvents":[...], other keys...} */
static int tj_parse(const char *text, size_t len, tj_trace *out) {
    tj_parser ps;
    int saw_events = 0, first = 1;
    memset(out, 0, sizeof *out);
    ps.start = ps.p = text, ps.end = text + len, ps.out = out, ps.failed = 0;
    tj_ws(&ps);
    if (ps.p >= ps.end || *ps.p != '{') return tj_fail(&ps, "the file is not a JSON object"), -1;
    ps.p++;
    while (!ps.failed) {
        char key[64];
        tj_ws(&ps);
        if (first && ps.p < ps.end && *ps.p == '}') break;
        first = 0;
        tj_string(&ps, key, sizeof key);
        tj_ws(&ps);
        if (ps.failed) break;
        if (ps.p >= ps.end || *ps.p != ':') {
            tj_fail(&ps, "expected ':'");
            break;
        }
        ps.p++;
        tj_ws(&ps);
        if (!strcmp(key, "traceEvents")) {
            if (ps.p >= ps.end || *ps.p != '[') {
                tj_fail(&ps, "traceEvents is not an array");
                break;
            }
            saw_events = 1;
            tj_array(&ps, 1, 1);
        } else {
            if (!strcmp(key, "displayTimeUnit")) out->has_display_unit = 1;
            tj_value(&ps, 1);
        }
        tj_ws(&ps);
        if (ps.p < ps.end && *ps.p == ',') {
            ps.p++;
            continue;
        }
        if (ps.p < ps.end && *ps.p == '}') {
            ps.p++;
            break;
        }
        tj_fail(&ps, "expected ',' or '}' at the top level");
    }
    tj_ws(&ps);
    if (!ps.failed && ps.p != ps.end) tj_fail(&ps, "text after the JSON value");
    if (!ps.failed && !saw_events) tj_fail(&ps, "no traceEvents");
    return ps.failed ? -1 : 0;
}

static void tj_free(tj_trace *t) {
    free(t->events);
    t->events = NULL;
    t->count = t->cap = 0;
}

static int tj_load(const char *path, tj_trace *out) {
    FILE *f = fopen(path, "rb");
    char *text;
    long n;
    int rc;
    memset(out, 0, sizeof *out);
    if (!f) return snprintf(out->error, sizeof out->error, "cannot open %s", path), -1;
    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return snprintf(out->error, sizeof out->error, "cannot size %s", path), -1;
    }
    text = (char *)malloc((size_t)n + 1);
    if (!text || fread(text, 1, (size_t)n, f) != (size_t)n) {
        free(text), fclose(f);
        return snprintf(out->error, sizeof out->error, "cannot read %s", path), -1;
    }
    fclose(f);
    rc = tj_parse(text, (size_t)n, out);
    free(text);
    return rc;
}

/* Every "X" event has name, ph, ts, dur, pid, tid, and dur >= 0; every "M"
   event has name, pid, tid and args. Returns the index of the first bad one, or -1. */
static int tj_first_malformed(const tj_trace *t) {
    int i;
    for (i = 0; i < t->count; i++) {
        const tj_event *e = &t->events[i];
        if (!e->has_ph || !e->has_name || !e->has_pid || !e->has_tid) return i;
        if (!strcmp(e->ph, "X") && (!e->has_ts || !e->has_dur || e->dur < 0)) return i;
        if (!strcmp(e->ph, "M") && !e->has_args) return i;
        if (strcmp(e->ph, "X") && strcmp(e->ph, "M")) return i;
    }
    return -1;
}

/* Number of "X" events of process pid whose cat is `cat` (NULL = any). */
static int tj_count_spans(const tj_trace *t, long long pid, const char *cat) {
    int i, n = 0;
    for (i = 0; i < t->count; i++) {
        const tj_event *e = &t->events[i];
        if (!strcmp(e->ph, "X") && e->pid == pid && (!cat || !strcmp(e->cat, cat))) n++;
    }
    return n;
}

#endif
