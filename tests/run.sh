#!/usr/bin/env bash
# tests/run.sh - run every test program and add up their summary lines.
#
# Called by `make test` after it has built what it could (with make -k), so a
# program that failed to compile is simply missing here and counts as failed.
# Every test program prints "<name>: N passed, N failed"; its LAST such line is
# its result. A program that crashes, times out or prints no summary counts as
# 1 failed; so does one that exits non-zero while claiming 0 failed (for example
# LeakSanitizer reporting at exit, after the summary was printed).
#
# Skips. What could not be tested for a missing piece (no mpicc, no mpirun, no
# libyaml, no OpenBLAS, no nvcc, no GPU) is reported as skipped, by name and with
# the reason, and counted; a skip is never a failure, and never silent:
#   - a program reports each part it left out as a line of its output
#     "<what>: skipped (<why>)" (one skipped item per such line, whatever the
#     program's result; tests/llama/test_train.c does it for its mpirun runs);
#   - programs the Makefile did not build for a missing dependency come in
#     $SKIPS, "<name>: <why>" items each ended by '|', one skipped item each;
#   - MPI programs that were built but cannot be launched (no mpirun) and CUDA
#     programs that were linked but are not run here (make test-cuda runs them on
#     a GPU) are one skipped item each.
# The last line of output is exactly "N passed, N failed, N skipped"; the exit
# status is non-zero if anything failed.
#
# Environment (set by the Makefile; defaults allow running it by hand):
#   B           build dir of the test programs (build, or build/san-... for SAN=)
#   EXPLAIN     path of the par-explain binary ("" if examples/explain.c is absent)
#   BENCH_BINS  bench binaries that must have compiled (they are not run here)
#   CBLAS_TEST  test_compute built with PARALLEL_WITH_CBLAS ("" without OpenBLAS)
#   CUDA_BINS   the CUDA programs that must have linked (not run: CI has no GPU)
#   MPI_BINS    MPI test programs, run under $MPIRUN -np 4
#   MPIRUN      default "mpirun --allow-run-as-root --oversubscribe"
#   SKIPS       what the Makefile left out and why (see Skips above)
#   ASAN_CI, TSAN_CI  sanitized test programs (build/ci-asan, build/ci-tsan)
#   FUZZ_BINS   libFuzzer targets, each run FUZZ_CI_SECONDS (default 10) by tests/fuzz/run.sh
#   TEST_TIMEOUT  seconds per program (default 600): a hang is a failure, not a stuck CI
#   VERBOSE=1   show the full output of passing programs too
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

B=${B:-build}
EXPLAIN=${EXPLAIN-$B/par-explain}
BENCH_BINS=${BENCH_BINS-}
CBLAS_TEST=${CBLAS_TEST-}
CUDA_BINS=${CUDA_BINS-}
MPI_BINS=${MPI_BINS-}
SKIPS=${SKIPS-}
ASAN_CI=${ASAN_CI-}
TSAN_CI=${TSAN_CI-}
FUZZ_BINS=${FUZZ_BINS-}
TRAIN=${TRAIN-}
TRAIN_TEST=${TRAIN_TEST-}
MPIRUN=${MPIRUN:-mpirun --allow-run-as-root --oversubscribe}
TEST_TIMEOUT=${TEST_TIMEOUT:-600}
LOGS=$B/logs
mkdir -p "$LOGS"

total_passed=0
total_failed=0
total_skipped=0
failed_names=()

now_ms() { date +%s%3N; }

# record NAME PASSED FAILED DETAIL: add to the totals and print one line.
record() {
    local name=$1 p=$2 f=$3 detail=$4
    total_passed=$((total_passed + p))
    total_failed=$((total_failed + f))
    if [ "$f" -gt 0 ]; then
        failed_names+=("$name")
        printf 'FAIL  %-22s %s\n' "$name" "$detail"
    else
        printf 'ok    %-22s %s\n' "$name" "$detail"
    fi
}

# skip NAME WHY: one skipped item.
skip() {
    total_skipped=$((total_skipped + 1))
    printf 'skip  %-22s %s: skipped (%s)\n' "$1" "$1" "$2"
}

# run_program NAME CMD...: run one test program, parse its summary line.
run_program() {
    local name=$1
    shift
    local log=$LOGS/$name.log t0 t1 rc summary p f secs
    t0=$(now_ms)
    timeout "$TEST_TIMEOUT" "$@" >"$log" 2>&1 </dev/null
    rc=$?
    t1=$(now_ms)
    secs=$(awk -v ms=$((t1 - t0)) 'BEGIN { printf "%.2fs", ms / 1000 }')

    # The program's own skips, "<what>: skipped (<why>)": shown and counted.
    local skips n_skips
    skips=$(grep -E ': skipped \(.+\)$' "$log")
    if [ -n "$skips" ]; then
        n_skips=$(wc -l <<<"$skips")
        total_skipped=$((total_skipped + n_skips))
        while IFS= read -r line; do echo "      skip: $line"; done <<<"$skips"
    fi

    summary=$(grep -E '^.+: [0-9]+ passed, [0-9]+ failed$' "$log" | tail -n 1)
    if [ -z "$summary" ]; then
        p=0 f=1
        if [ $rc -eq 124 ]; then
            summary="timed out after ${TEST_TIMEOUT}s"
        elif [ $rc -gt 128 ]; then
            summary="crashed (signal $((rc - 128)))"
        else
            summary="no summary line (exit status $rc)"
        fi
    else
        p=$(sed -E 's/.*: ([0-9]+) passed, ([0-9]+) failed$/\1/' <<<"$summary")
        f=$(sed -E 's/.*: ([0-9]+) passed, ([0-9]+) failed$/\2/' <<<"$summary")
        if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then
            f=1
            summary="$summary, but exit status $rc"
        fi
    fi
    if [ "$f" -gt 0 ] || [ "${VERBOSE:-0}" = 1 ]; then
        # Enough of the log to see what went wrong without opening the file:
        # the failed checks first (a CI summary may show only the tail of its
        # output, and a long program's failure can be far from its last lines).
        if [ "$f" -gt 0 ] && grep -q 'FAILED' "$log"; then
            grep -n -A 2 'FAILED' "$log" | head -n 40 | sed 's/^/    ! /'
        fi
        tail -n 60 "$log" | sed 's/^/    | /'
    fi
    record "$name" "$p" "$f" "$summary  ($secs, log: $log)"
}

# 1. The C test programs: one per tests/test_*.c.
for src in tests/test_*.c; do
    [ -e "$src" ] || continue
    name=$(basename "$src" .c)
    if [ -x "$B/$name" ]; then
        run_program "$name" "$B/$name"
    else
        record "$name" 0 1 "did not build (see the compiler errors above)"
    fi
done

# 1b. test_compute again with the library's GEMM through OpenBLAS (when found).
for bin in $CBLAS_TEST; do
    name=$(basename "$bin")
    if [ -x "$bin" ]; then
        run_program "$name" "$bin"
    else
        record "$name" 0 1 "did not build (see the compiler errors above)"
    fi
done

# 2. Header conventions: C11/C++17 under gcc and clang, two-TU link, PARALLEL_STATIC,
#    allocator all-or-none, exported symbols.
run_program conventions bash tests/conventions.sh

# 2b. Markdown links: every relative link of every *.md file resolves to a file in
#     the repository, and its #anchor to a heading there (tests/links.sh, which
#     first checks itself on a directory with known broken links).
run_program links bash tests/links.sh

# 3. The CLI's own tests (tests/test_cli.sh drives par-explain), if both exist.
if [ -e tests/test_cli.sh ]; then
    if [ -n "$EXPLAIN" ] && [ -x "$EXPLAIN" ]; then
        PAR_EXPLAIN=$EXPLAIN run_program test_cli bash tests/test_cli.sh "$EXPLAIN"
    else
        record test_cli 0 1 "par-explain did not build (examples/explain.c)"
    fi
fi

# 4. Programs that are built but not run here (benches; par-explain when no
#    test_cli.sh exists to cover it): one check each that it compiled.
build_p=0 build_f=0 build_missing=()
unrun=$BENCH_BINS
[ -e tests/test_cli.sh ] || unrun="$EXPLAIN $unrun"
for bin in $unrun; do
    if [ -x "$bin" ]; then
        build_p=$((build_p + 1))
    else
        build_f=$((build_f + 1))
        build_missing+=("$bin")
    fi
done
if [ $((build_p + build_f)) -gt 0 ]; then
    detail="build: $build_p passed, $build_f failed"
    [ $build_f -gt 0 ] && detail="$detail (missing: ${build_missing[*]})"
    record build "$build_p" "$build_f" "$detail"
fi

# 5. MPI: every tests/mpi/test_*.c under mpirun -np 4 (its rank 0 prints the summary).
#    Built with mpicc but no mpirun to launch them: each one is skipped.
mpirun_bin=${MPIRUN%% *}
no_mpirun=
command -v "$mpirun_bin" >/dev/null 2>&1 || no_mpirun="no mpirun: '$mpirun_bin' (first word of MPIRUN) not found; install openmpi-bin"
for bin in $MPI_BINS; do
    name=$(basename "$bin")
    if [ -x "$bin" ] && [ -n "$no_mpirun" ]; then
        skip "$name" "built, but $no_mpirun"
    elif [ -x "$bin" ]; then
        # OpenMPI leaks its own buffers at exit (LeakSanitizer flags frames in
        # libmpi/libopen-pal), so sanitized MPI runs skip only the leak check;
        # the non-MPI tests keep it, and the backend is the same code.
        # shellcheck disable=SC2086 # MPIRUN is a command line
        run_program "$name" env ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" $MPIRUN -np 4 "$bin"
    else
        record "$name" 0 1 "did not build (see the compiler errors above)"
    fi
done

# 5b. A rank that crashes mid-collective under mpirun (tests/mpi/crash.sh): the
#     job must end quickly, never hang, never pass the op as a success.
for bin in $MPI_BINS; do
    [ "$(basename "$bin")" = mpi_test_fault_mpi ] || continue
    if [ -x "$bin" ] && [ -n "$no_mpirun" ]; then
        skip mpi_crash "built, but $no_mpirun"
    elif [ -x "$bin" ]; then
        MPIRUN=$MPIRUN run_program mpi_crash env ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
            bash tests/mpi/crash.sh "$bin"
    fi
done

# 6. The Llama trainer (built when libyaml exists): its config unit test and the
#    end-to-end test, which runs $TRAIN and, when the trainer was built with MPI
#    and mpirun exists, $MPIRUN -np 2/3/4 (otherwise it reports those runs as
#    skipped, with MPIRUN_SKIP as the reason).
trainer_mpirun='' trainer_why=''
if [ -z "$MPI_BINS" ]; then
    trainer_why="build/train was built without mpicc: install libopenmpi-dev openmpi-bin"
elif [ -n "$no_mpirun" ]; then
    trainer_why=${no_mpirun#no mpirun: }
else
    trainer_mpirun=$MPIRUN
fi
for bin in $TRAIN_TEST; do
    name=$(basename "$bin")
    if [ -x "$bin" ] && { [ "$name" != llama_test_train ] || [ -x "$TRAIN" ]; }; then
        run_program "$name" env TRAIN="$TRAIN" MPIRUN="$trainer_mpirun" MPIRUN_SKIP="$trainer_why" "$bin"
    else
        record "$name" 0 1 "did not build (see the compiler errors above)"
    fi
done

# 6a. MindFormers' own configuration files (tests/data/mindformers), shrunk in
#     size only: each trains, or is refused with exactly the listed errors.
if [ -n "$TRAIN" ] && [ -x "$TRAIN" ]; then
    run_program mindformers bash tests/llama/mindformers.sh "$TRAIN"
elif [ -n "$TRAIN_TEST" ]; then
    record mindformers 0 1 "build/train did not build (see the compiler errors above)"
fi

# 6b. The trainer when a rank stalls past the timeout under mpirun
#     (tests/llama/fault.sh): a named error, non-zero exit, checkpoint intact.
if [ -n "$TRAIN" ] && [ -x "$TRAIN" ]; then
    if [ -n "$trainer_mpirun" ]; then
        MPIRUN=$trainer_mpirun run_program train_fault bash tests/llama/fault.sh "$TRAIN"
    else
        skip train_fault "$trainer_why"
    fi
fi

# 6c. Resuming from a root another run is saving into (tests/llama/resume_race.sh):
#     refused by name, never a mix of two checkpoints.
if [ -n "$TRAIN" ] && [ -x "$TRAIN" ]; then
    run_program resume_race bash tests/llama/resume_race.sh "$TRAIN"
fi

# 7. CUDA: parallel_cuda.cu + the CUDA tests must compile and link wherever nvcc
#    exists. They are not run here (CI has no GPU; `make test-cuda` runs them):
#    each linked one is also one skipped item.
cuda_p=0 cuda_f=0 cuda_missing=() cuda_linked=()
for bin in $CUDA_BINS; do
    if [ -x "$bin" ]; then
        cuda_p=$((cuda_p + 1))
        cuda_linked+=("$(basename "$bin")")
    else
        cuda_f=$((cuda_f + 1))
        cuda_missing+=("$bin")
    fi
done
if [ $((cuda_p + cuda_f)) -gt 0 ]; then
    detail="cuda_link: $cuda_p passed, $cuda_f failed (linked, not run here)"
    [ $cuda_f -gt 0 ] && detail="$detail (missing: ${cuda_missing[*]})"
    record cuda_link "$cuda_p" "$cuda_f" "$detail"
fi
for name in "${cuda_linked[@]}"; do
    case $name in
    bench_*) skip "$name" "linked, not run: needs a GPU; make bench-cuda runs it" ;;
    *) skip "$name" "linked, not run: needs a GPU; make test-cuda runs it" ;;
    esac
done

# 8. Sanitizers on a bounded subset (the Makefile's ASAN_CI, TSAN_CI; `make test
#    SAN=...` runs everything): ASan + UBSan, then TSan on the threads backend.
#    A report fails the program: ASan and UBSan (-fno-sanitize-recover) abort,
#    TSan exits non-zero at the end (counted above as "but exit status").
#    test_comm_threads and test_comm_mover run --quick under TSan: the 1M-element
#    sizes add minutes there and no new interleavings.
for bin in $ASAN_CI $TSAN_CI; do
    case $bin in
        */ci-tsan/*) flavour=tsan ;;
        *) flavour=asan ;;
    esac
    name="$flavour:$(basename "$bin")"
    args=()
    case "$flavour/$(basename "$bin")" in tsan/test_comm_threads | tsan/test_comm_mover) args=(--quick) ;; esac
    if [ -x "$bin" ]; then
        run_program "$name" "$bin" "${args[@]}"
    else
        record "$name" 0 1 "did not build (see the compiler errors above)"
    fi
done

# 9. libFuzzer targets (tests/fuzz/run.sh): every seed replayed, then
#    FUZZ_CI_SECONDS of new inputs each, from a fresh corpus directory.
for bin in $FUZZ_BINS; do
    name=$(basename "$bin")
    if [ -x "$bin" ]; then
        rm -rf "$B/fuzz-ci/${name#fuzz_}"
        run_program "$name" bash tests/fuzz/run.sh "${name#fuzz_}" "$bin" "${FUZZ_CI_SECONDS:-10}" "$B/fuzz-ci/${name#fuzz_}"
        grep -E '^(replay|fuzz):' "$LOGS/$name.log" | sed 's/^/      /'
    else
        record "$name" 0 1 "did not build (see the compiler errors above)"
    fi
done

# 10. What the Makefile left out for a missing piece (SKIPS: "name: why|...").
IFS='|' read -ra skip_items <<<"$SKIPS"
for item in "${skip_items[@]}"; do
    item=$(sed -E 's/^ +//; s/ +$//' <<<"$item")
    [ -n "$item" ] || continue
    skip "${item%%: *}" "${item#*: }"
done

echo
if [ ${#failed_names[@]} -gt 0 ]; then
    echo "failed: ${failed_names[*]}"
    # Again at the end, where a truncated CI log still shows it: each failed
    # program's first failed checks.
    for name in "${failed_names[@]}"; do
        [ -f "$LOGS/$name.log" ] || continue
        grep -m 5 'FAILED' "$LOGS/$name.log" | sed "s/^/  $name: /"
    done
fi
echo "$total_passed passed, $total_failed failed, $total_skipped skipped"
[ "$total_failed" -eq 0 ]
