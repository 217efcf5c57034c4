#!/usr/bin/env bash
# tests/conventions.sh - the header conventions (parallel.h's top doc block), checked
# by compiling and linking parallel.h the ways users will. Each check is counted;
# the last line is "conventions: N passed, N failed" (tests/run.sh adds it up).
#
#   - compiles as C11 (gcc, clang) and C++17 (g++, clang++) under
#     -Wall -Wextra -Wpedantic -Werror, with and without PARALLEL_IMPLEMENTATION
#   - two TUs (tests/tu_a.c with the implementation, tests/tu_b.c without) link
#     and run: as C, as C++, and mixed C/C++ (exercises the extern "C" blocks)
#   - PARALLEL_STATIC: two TUs with private copies link and run, warning-free
#   - PARALLEL_MALLOC/REALLOC/FREE are all-or-none (the #error fires)
#   - an object with the implementation exports only par_ symbols
#   - the zero-init idiom of every public struct (`T d = {0};` in C, `T d = {};`
#     in C++) is warning-free; `= {0}` still compiles as C++ for the desc structs
#   - the CONTENTS list of the top doc block names exactly the section banners
#   - files that comments cite exist in the repository
#   - the maintainer's map holds: layers, private prefixes (tests/layers.awk)
#   - each PARALLEL_NO_* section macro (and all of them at once): the header still
#     compiles warning-free (C11 and C++17), tests/tu_sections.c links and runs,
#     and the object defines none of the omitted section's public functions
#
# Environment: B (build dir), CC, CXX (for the link tests), SANFLAGS (sanitizer
# flags for the link-and-run tests; the compile checks are about warnings only).
set -u
cd "$(dirname "$0")/.."

B=${B:-build}
CC=${CC:-cc}
CXX=${CXX:-c++}
SANFLAGS=${SANFLAGS:-}
OUT=$B/conventions
mkdir -p "$OUT"

# -O2 because some warnings (-Wmaybe-uninitialized, ...) only appear when optimizing.
WARN="-O2 -Wall -Wextra -Wpedantic -Werror"
C11="-std=c11 $WARN"
CXX17="-std=c++17 $WARN"
LIBS="-lm -lpthread"

passed=0
failed=0

# check NAME CMD...: run CMD as one counted check, in the background, at most
# JOBS at a time (each compiles the whole header; serially they were a fifth of
# `make test`); report() prints the results in order, and on failure why.
JOBS=${CONVENTIONS_JOBS:-$(nproc 2>/dev/null || echo 2)}
names=()
rm -f "$OUT"/*.status
check() {
    local name=$1
    shift
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n 2>/dev/null || true; done
    (if "$@" >"$OUT/$name.log" 2>&1; then echo ok; else echo FAIL; fi >"$OUT/$name.status") &
    names+=("$name")
}
report() {
    local name
    wait
    for name in "${names[@]}"; do
        if [ "$(cat "$OUT/$name.status" 2>/dev/null)" = ok ]; then
            passed=$((passed + 1))
            echo "ok    $name"
        else
            failed=$((failed + 1))
            echo "FAIL  $name"
            head -n 40 "$OUT/$name.log" | sed 's/^/    /'
        fi
    done
}

have() { command -v "$1" >/dev/null 2>&1; }

# Translation units as users write them: the #define in the source, not -D.
printf '#define PARALLEL_IMPLEMENTATION\n#include "parallel.h"\n' >"$OUT/impl.c"
printf '#include "parallel.h"\n' >"$OUT/decl.c"

# --- 1. C11 and C++17, each compiler, with and without the implementation ----
compile() { # compile COMPILER LANG STD_FLAGS SOURCE OBJECT
    $1 -x "$2" $3 -I. -c "$4" -o "$5"
}
for cc in gcc clang; do
    if have $cc; then
        check "c11-$cc-impl" compile $cc c "$C11" "$OUT/impl.c" "$OUT/impl-$cc.o"
        check "c11-$cc-decl" compile $cc c "$C11" "$OUT/decl.c" "$OUT/decl-$cc.o"
    else
        echo "c11-$cc: skipped (no $cc)"
    fi
done
for cxx in g++ clang++; do
    if have $cxx; then
        check "cxx17-$cxx-impl" compile $cxx c++ "$CXX17" "$OUT/impl.c" "$OUT/impl-$cxx.o"
        check "cxx17-$cxx-decl" compile $cxx c++ "$CXX17" "$OUT/decl.c" "$OUT/decl-$cxx.o"
    else
        echo "cxx17-$cxx: skipped (no $cxx)"
    fi
done

# --- 2. two translation units, one implementation ----------------------------
# link_run NAME LANG_A LANG_B FILE_A FILE_B: compile A and B (each as C or C++),
# link with the C++ driver when either is C++, run the program.
link_run() {
    local name=$1 la=$2 lb=$3 a=$4 b=$5 ld=$CC
    local fa="$C11" fb="$C11" ca=$CC cb=$CC
    [ "$la" = c++ ] && { fa="$CXX17"; ca=$CXX; ld=$CXX; }
    [ "$lb" = c++ ] && { fb="$CXX17"; cb=$CXX; ld=$CXX; }
    $ca -x "$la" $fa $SANFLAGS -I. -c "$a" -o "$OUT/$name-a.o" &&
        $cb -x "$lb" $fb $SANFLAGS -I. -c "$b" -o "$OUT/$name-b.o" &&
        $ld $SANFLAGS "$OUT/$name-a.o" "$OUT/$name-b.o" -o "$OUT/$name" $LIBS &&
        "$OUT/$name"
}
check two-tu-c link_run two-tu-c c c tests/tu_a.c tests/tu_b.c
check two-tu-cxx link_run two-tu-cxx c++ c++ tests/tu_a.c tests/tu_b.c
check two-tu-impl-c-user-cxx link_run two-tu-mixed1 c c++ tests/tu_a.c tests/tu_b.c
check two-tu-impl-cxx-user-c link_run two-tu-mixed2 c++ c tests/tu_a.c tests/tu_b.c

# --- 3. PARALLEL_STATIC: a private copy per TU ---------------------------------
check static-two-tu-c link_run static-c c c tests/tu_static_a.c tests/tu_static_b.c
check static-two-tu-cxx link_run static-cxx c++ c++ tests/tu_static_a.c tests/tu_static_b.c

# --- 4. allocator macros: all three or none ------------------------------------
# must_reject NAME SOURCE_TEXT: the compile must fail, and with the library's own
# message (which names PARALLEL_REALLOC, a macro these sources never define).
# Files per NAME: checks run side by side.
must_reject() {
    local f="$OUT/alloc-$1"
    printf '%s\n#define PARALLEL_IMPLEMENTATION\n#include "parallel.h"\n' "$2" >"$f.c"
    if $CC -x c $C11 -I. -c "$f.c" -o "$f.o" >"$f.err" 2>&1; then
        echo "compiled, but a partial allocator set must be an #error"
        return 1
    fi
    cat "$f.err"
    grep -q 'PARALLEL_REALLOC' "$f.err"
}
check alloc-only-malloc-rejected must_reject only-malloc '#include <stdlib.h>
#define PARALLEL_MALLOC(sz) malloc(sz)'
check alloc-malloc-free-rejected must_reject malloc-free '#include <stdlib.h>
#define PARALLEL_MALLOC(sz) malloc(sz)
#define PARALLEL_FREE(p) free(p)'
# All three, pointing at the user's own functions, must compile and link.
printf '%s\n' '#include <stdlib.h>' \
    'static void *my_malloc(size_t n) { return malloc(n); }' \
    'static void *my_realloc(void *p, size_t n) { return realloc(p, n); }' \
    'static void my_free(void *p) { free(p); }' \
    '#define PARALLEL_MALLOC(sz) my_malloc(sz)' \
    '#define PARALLEL_REALLOC(p, sz) my_realloc(p, sz)' \
    '#define PARALLEL_FREE(p) my_free(p)' \
    '#define PARALLEL_IMPLEMENTATION' \
    '#include "parallel.h"' \
    'int main(void) { (void)my_malloc; (void)my_realloc; (void)my_free; return par_status_string(PAR_OK)[0] != 0 ? 0 : 1; }' \
    >"$OUT/alloc_all.c"
check alloc-all-three-accepted link_run alloc-all c c "$OUT/alloc_all.c" "$OUT/decl.c"

# --- 5. exported symbols --------------------------------------------------------
# only_par_symbols OBJECT: every defined global is a public par_ name (private
# helpers are par__ and must be static; anything else could clash in user programs;
# a C++ mangled name means a definition escaped the extern "C" block).
only_par_symbols() {
    local bad
    nm -g --defined-only "$1" | awk '{ print $NF }' >"$1.symbols" || return 1
    bad=$(grep -v -E '^par_[a-z0-9]' "$1.symbols")
    if [ -n "$bad" ]; then
        echo "exported symbols without the public par_ prefix:"
        echo "$bad"
        return 1
    fi
    echo "$(wc -l <"$1.symbols") exported symbols, all par_*"
}
no_symbols() {
    local syms
    syms=$(nm -g --defined-only "$1") || return 1
    [ -z "$syms" ] || { echo "the header alone defines: $syms"; return 1; }
}
compile_then() { # compile_then CHECKFN COMPILER LANG FLAGS SOURCE OBJECT
    local fn=$1
    shift
    compile "$@" && $fn "$5"
}
check nm-impl-c-only-par compile_then only_par_symbols "$CC" c "$C11" "$OUT/impl.c" "$OUT/nm-c.o"
check nm-impl-cxx-only-par compile_then only_par_symbols "$CXX" c++ "$CXX17" "$OUT/impl.c" "$OUT/nm-cxx.o"
check nm-decl-defines-nothing compile_then no_symbols "$CC" c "$C11" "$OUT/decl.c" "$OUT/nm-decl.o"

# --- 6. the zero-init idiom, for every public struct ------------------------------
# The structs come from the header itself (its declaration part), so a struct added
# later is covered without touching this script.
DECLS=$(sed '/^#endif \/\* PARALLEL_H \*\//q' parallel.h)
STRUCTS=$(printf '%s\n' "$DECLS" | sed -n -E 's/^[[:space:]]*typedef struct (par_[a-z0-9][a-z0-9_]*) \{.*/\1/p')
DESCS=$(printf '%s\n' "$STRUCTS" | grep -E '_desc$')
# zero_init_src INIT STRUCT...: a program zero-initialising each struct with INIT.
zero_init_src() {
    local init=$1 s
    shift
    printf '#include "parallel.h"\nint main(void) {\n'
    for s in "$@"; do printf '    { %s v = %s; (void)v; }\n' "$s" "$init"; done
    printf '    return 0;\n}\n'
}
zero_init_list_ok() { # the grep found the structs (and the desc structs among them)
    printf '%s\n' $STRUCTS | grep -qx par_ctx_desc && printf '%s\n' $DESCS | grep -qx par_op_desc &&
        echo "$(echo $STRUCTS | wc -w) public structs, $(echo $DESCS | wc -w) of them *_desc"
}
check zero-init-struct-list zero_init_list_ok
# shellcheck disable=SC2086 # word splitting of the struct lists is intended
{
    zero_init_src '{0}' $STRUCTS >"$OUT/zero_c.c"
    zero_init_src '{}' $STRUCTS >"$OUT/zero_cxx.c"
    zero_init_src '{0}' $DESCS >"$OUT/zero0_cxx.c"
}
for cc in gcc clang; do
    have $cc && check "zero-init-c11-$cc" compile $cc c "$C11" "$OUT/zero_c.c" "$OUT/zero_c-$cc.o"
done
for cxx in g++ clang++; do
    have $cxx || continue
    check "zero-init-cxx17-$cxx" compile $cxx c++ "$CXX17" "$OUT/zero_cxx.c" "$OUT/zero_cxx-$cxx.o"
    # `= {0}` in C++ warns (missing initializers) but must not be an error: no
    # desc struct may start with an enum member.
    check "zero-init-0-compiles-cxx17-$cxx" compile $cxx c++ \
        "$CXX17 -Wno-missing-field-initializers -Wno-missing-braces" "$OUT/zero0_cxx.c" "$OUT/zero0_cxx-$cxx.o"
done

# --- 7. the table of contents names every section banner, and only those -------
# Banners: "// >>name" in the implementation (a parenthesised sub-banner such as
# "// >>compute-cpu (attention)" counts as its section) and ">>name" headings
# right after a "/* ===" rule in the declarations. CONTENTS: the ">>name" entries
# of the top doc block.
toc_matches_banners() {
    local toc banners missing extra
    toc=$(sed -n "/^   CONTENTS/,/^   MAINTAINER'S MAP/p" parallel.h | sed -n -E 's/^ +>>([a-z][a-z0-9-]*).*/\1/p' | sort -u)
    banners=$({
        sed -n -E 's/^\/\/ >>([a-z][a-z0-9-]*).*/\1/p' parallel.h
        awk '/^\/\* =====/ { rule = 1; next } rule && /^   >>[a-z]/ { sub(/^   >>/, ""); print $1 } { rule = 0 }' parallel.h
    } | sort -u)
    [ -n "$toc" ] || { echo "no CONTENTS entries found in the top doc block"; return 1; }
    missing=$(comm -13 <(printf '%s\n' "$toc") <(printf '%s\n' "$banners"))
    extra=$(comm -23 <(printf '%s\n' "$toc") <(printf '%s\n' "$banners"))
    [ -z "$missing" ] || echo "banners missing from CONTENTS: $missing"
    [ -z "$extra" ] || echo "CONTENTS entries with no banner: $extra"
    [ -z "$missing$extra" ] && echo "$(echo $toc | wc -w) sections: $(echo $toc)"
}
check toc-matches-banners toc_matches_banners

# --- 8. files that comments cite exist --------------------------------------------
# Paths with a directory (not <system/headers.h>) and bare names of non-header
# files (.md, .py, .cu, .sh); a path outside the repository (../...) is refused
# even where it happens to exist: a user's clone has only the repository.
cited_files_exist() {
    local f bad=""
    for f in $({
        grep -oE '(^|[^<A-Za-z0-9_./-])(\.\./)?[A-Za-z0-9_-]+(/[A-Za-z0-9_.-]+)+\.(c|h|md|py|cu|sh|yaml)\b' parallel.h
        grep -oE '(^|[^<A-Za-z0-9_./-])[A-Za-z0-9_-]+\.(md|py|cu|sh)\b' parallel.h
    } | sed -E 's/^[^A-Za-z0-9_.]//' | sort -u); do
        case $f in ../*) bad="$bad $f (outside the repository)"; continue ;; esac
        [ -e "$f" ] || bad="$bad $f"
    done
    [ -z "$bad" ] || { echo "parallel.h cites files that are not in the repository:$bad"; return 1; }
}
check cited-files-exist cited_files_exist

# --- 9. leaving sections out: PARALLEL_NO_CHECKPOINT, _NO_TRACE, _NO_CPU_KERNELS ---
# sections_src NAME MACRO...: tests/tu_sections.c under the macros, #defined in
# the source as a user would.
sections_src() {
    local name=$1 m
    shift
    { for m in "$@"; do echo "#define $m"; done; echo '#include "tests/tu_sections.c"'; } >"$OUT/$name.c"
}
# sections_run NAME PREFIX...: build as C11, link, run; the object must define no
# public function whose name starts with one of the omitted sections' prefixes.
sections_run() {
    local name=$1 prefix syms
    shift
    $CC -x c $C11 $SANFLAGS -I. -c "$OUT/$name.c" -o "$OUT/$name.o" &&
        $CC $SANFLAGS "$OUT/$name.o" -o "$OUT/$name" $LIBS && "$OUT/$name" || return 1
    syms=$(nm -g --defined-only "$OUT/$name.o" | awk '{ print $NF }')
    for prefix in "$@"; do
        if printf '%s\n' "$syms" | grep -q "^$prefix"; then
            echo "still defined with the section left out: $(printf '%s\n' "$syms" | grep "^$prefix" | head -3)"
            return 1
        fi
    done
}
# section_checks NAME "MACROS" "SYMBOL_PREFIXES" CXX_COMPILERS C_COMPILERS
section_checks() {
    local name=$1 macros=$2 prefixes=$3 cxxs=$4 ccs=$5 c
    # shellcheck disable=SC2086 # the lists are word lists
    sections_src "$name" $macros
    check "$name-link-run" sections_run "$name" $prefixes
    for c in $ccs; do
        have $c && check "$name-c11-$c" compile $c c "$C11" "$OUT/$name.c" "$OUT/$name-$c.o"
    done
    for c in $cxxs; do
        have $c && check "$name-cxx17-$c" compile $c c++ "$CXX17" "$OUT/$name.c" "$OUT/$name-$c.o"
    done
}
section_checks no-checkpoint PARALLEL_NO_CHECKPOINT par_st_ g++ ""
section_checks no-trace PARALLEL_NO_TRACE par_trace_ g++ ""
section_checks no-cpu-kernels PARALLEL_NO_CPU_KERNELS "" g++ ""
section_checks no-all-sections "PARALLEL_NO_CHECKPOINT PARALLEL_NO_TRACE PARALLEL_NO_CPU_KERNELS" \
    "par_st_ par_trace_" "g++ clang++" clang

# --- 10. the version macros agree ------------------------------------------------
printf '%s\n' '#include "parallel.h"' '#include <stdio.h>' '#include <string.h>' \
    'int main(void) {' '    char v[32];' \
    '    snprintf(v, sizeof v, "%d.%d.%d", PARALLEL_VERSION_MAJOR, PARALLEL_VERSION_MINOR, PARALLEL_VERSION_PATCH);' \
    '    return strcmp(v, PARALLEL_VERSION) != 0;' '}' >"$OUT/version.c"
version_agrees() { $CC -x c $C11 -I. "$OUT/version.c" -o "$OUT/version" && "$OUT/version"; }
check version-macros-agree version_agrees

# --- 11. the maintainer's map: layers and private prefixes -------------------------
# tests/layers.awk reads the MAINTAINER'S MAP of the top doc block: no section of
# the implementation calls a later one (but the listed exceptions), every static
# function carries its section's prefix, no prefix is two sections'.
layers_hold() { awk -f tests/layers.awk parallel.h parallel.h; }
check layers-and-prefixes layers_hold
# The checker must be able to fail: a two-section header whose first section
# calls the second, whose second defines a function with the first's prefix, and
# whose map gives both the same prefix; each must be reported.
layers_catch() {
    local f="$OUT/layers_bad.h" out
    printf '%s\n' "/* MAP" "   MAINTAINER'S MAP" "     >>alpha  par__a_" "     >>beta   par__b_ par__a_x" "*/" \
        '#ifdef PARALLEL_IMPLEMENTATION' '// >>alpha' 'static int par__a_one(void) { return par__b_two(); }' \
        '// >>beta' 'static int par__b_two(void) { return 2; }' 'static int par__a_three(void) { return 3; }' \
        '// >>gamma' 'static int par__c_four(void) { return par__a_one(); }' >"$f"
    if out=$(awk -f tests/layers.awk "$f" "$f"); then echo "accepted a header that breaks the map:"; echo "$out"; return 1; fi
    echo "$out"
    echo "$out" | grep -q '>>alpha calls par__b_two of the later >>beta' &&
        echo "$out" | grep -q 'par__a_three is in >>beta but its prefix is >>alpha' &&
        echo "$out" | grep -q 'section >>gamma is not in the' &&
        echo "$out" | grep -q 'par__c_four (>>gamma) starts with none' &&
        echo "$out" | grep -q 'prefix par__a_ of >>alpha is also par__a_x of >>beta'
}
check layers-checker-can-fail layers_catch

report
echo "conventions: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
