# tests/layers.awk - the maintainer's map of parallel.h, checked (tests/conventions.sh).
# Reads the header twice: awk -f tests/layers.awk parallel.h parallel.h
#
#   1. layering: a function of the implementation is called only from its own
#      section or a later one ("// >>name" banners; sub-banners such as
#      "// >>compute-cpu (attention)" belong to their section). Calls listed in
#      the map's "exceptions:" line are allowed.
#   2. private prefixes: every static function (par__*) starts with one of the
#      prefixes the map gives its section, and no prefix is another section's
#      (nor a prefix of one).
# Prints one line per violation ("parallel.h:LINE: ...") and a last line
# "layers: N sections, N functions, N calls checked".
function fail(msg) { print FILENAME ":" FNR ": " msg; bad++ }
function owner_of(fn,   s, k) {
    for (s in prefixes) {
        n = split(prefixes[s], p, " ")
        for (k = 1; k <= n; k++) if (index(fn, p[k]) == 1) return s
    }
    return ""
}
FNR == 1 { pass++; sec = ""; impl = 0; inmap = 0 }
# --- the map (top doc block): "     >>name   prefixes..." plus continuation lines
pass == 1 && /^   MAINTAINER'S MAP/ { inmap = 1; next }
pass == 1 && inmap && /^\*\// { inmap = 0 }
pass == 1 && inmap && /exceptions:/ {
    line = $0; sub(/.*exceptions:/, "", line)
    n = split(line, w, /[ ,.]+/)
    for (k = 1; k <= n; k++) if (w[k] ~ /^par_/) allowed[w[k]] = 1
    next
}
pass == 1 && inmap && /^     >>[a-z-]+/ { cur = $1; sub(/^>>/, "", cur); mapsec[cur] = 1; prefixes[cur] = "" }
pass == 1 && inmap && cur != "" && !/types:|tests:/ {
    for (k = 1; k <= NF; k++) if ($k ~ /^par__/) prefixes[cur] = prefixes[cur] " " $k
}
pass == 1 && inmap && /^   [^ ]/ { cur = "" }
/^#ifdef PARALLEL_IMPLEMENTATION/ { impl = 1 }
impl && /^\/\/ >>[a-z-]+/ {
    sec = $2; sub(/^>>/, "", sec)
    if (!(sec in order)) order[sec] = ++nsec
    if (pass == 1 && !(sec in mapsec)) fail("section >>" sec " is not in the MAINTAINER'S MAP")
    next
}
!impl || sec == "" { next }
# --- pass 1: definitions (at column 0; not prototypes)
pass == 1 && /^(static|PARALLEL_DEF)[^=;]*[ *]par_[a-z0-9_]+\(/ && !/;[ \t]*$/ {
    s = $0; sub(/\(.*/, "", s); n = split(s, w, /[ *]+/); fn = w[n]
    if (fn !~ /^par_/ && match($0, /par_[a-z0-9_]+\(/)) { fn = substr($0, RSTART, RLENGTH - 1) }
    if (!(fn in def)) { def[fn] = sec; defs++ }
    if (fn ~ /^par__/) {
        o = owner_of(fn)
        if (o == "") fail(fn " (>>" sec ") starts with none of the map's private prefixes")
        else if (o != sec) fail(fn " is in >>" sec " but its prefix is >>" o "'s")
    }
    next
}
# --- pass 2: calls into a later section
pass == 2 {
    line = $0; sub(/\/\/.*/, "", line)
    while (match(line, /par_[a-z0-9_]+[ \t]*\(/)) {
        fn = substr(line, RSTART, RLENGTH); sub(/[ \t]*\($/, "", fn)
        line = substr(line, RSTART + RLENGTH)
        calls++
        if ((fn in def) && order[def[fn]] > order[sec] && !(fn in allowed))
            fail(">>" sec " calls " fn " of the later >>" def[fn])
    }
}
END {
    for (a in prefixes) for (b in prefixes) if (a != b) {
        na = split(prefixes[a], pa, " "); nb = split(prefixes[b], pb, " ")
        for (i = 1; i <= na; i++) for (j = 1; j <= nb; j++)
            if (index(pb[j], pa[i]) == 1) { print "map: prefix " pa[i] " of >>" a " is also " pb[j] " of >>" b; bad++ }
    }
    if (nsec == 0 || defs == 0) { print "layers: no sections or definitions found"; bad++ }
    print "layers: " nsec " sections, " defs " functions, " calls " calls checked"
    exit bad > 0
}
