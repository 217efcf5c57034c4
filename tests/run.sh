#!/usr/bin/env bash
# tests/run.sh - run every test program and add up their summary lines.
#
# Called by `make test` after it has built what it could (with make -k), so a
# program that failed to compile is simply missing here and counts as failed.
# Every test program prints "<name>: N passed, N failed"; its LAST such line is
# its result. A program that crashes, times out or prints no summary counts as
# 1 failed; so does one that exits non-zero while claiming 0 failed (for example
# LeakSanitizer reporting at exit, after the summary was printed).
# The last line of output is exactly "N passed, N failed"; the exit status is
# non-zero if anything failed.
#
# Environment (set by the Makefile; defaults allow running it by hand):
#   B           build dir of the test programs (build, or build/san-... for SAN=)
#   EXPLAIN     path of the par-explain binary ("" if examples/explain.c is absent)
#   BENCH_BINS  bench binaries that must have compiled (they are not run here)
#   CUDA_SKIP   why the CUDA programs were not built ("" = they should be linked)
#   CUDA_BINS   the CUDA test programs that must have linked (not run: CI has no GPU)
#   MPI_BINS    MPI test programs, run under $MPIRUN -np 4
#   MPIRUN      default "mpirun --allow-run-as-root --oversubscribe"
#   TEST_TIMEOUT  seconds per program (default 600): a hang is a failure, not a stuck CI
#   VERBOSE=1   show the full output of passing programs too
set -uo pipefail
cd "$(dirname "$0")/.."

B=${B:-build}
EXPLAIN=${EXPLAIN-$B/par-explain}
BENCH_BINS=${BENCH_BINS-}
CUDA_SKIP=${CUDA_SKIP-}
CUDA_BINS=${CUDA_BINS-build/test_cuda_smoke}
MPI_BINS=${MPI_BINS-}
TRAIN=${TRAIN-}
TRAIN_TEST=${TRAIN_TEST-}
MPIRUN=${MPIRUN:-mpirun --allow-run-as-root --oversubscribe}
TEST_TIMEOUT=${TEST_TIMEOUT:-600}
LOGS=$B/logs
mkdir -p "$LOGS"

total_passed=0
total_failed=0
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

    # Skips are reported by the programs as "<what>: skipped (<why>)"; keep them visible.
    grep -E ': skipped( |$)' "$log" | sed 's/^/      /'

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
        # Enough of the log to see what went wrong without opening the file.
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

# 2. Header conventions: C11/C++17 under gcc and clang, two-TU link, PARALLEL_STATIC,
#    allocator all-or-none, exported symbols.
run_program conventions bash tests/conventions.sh

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
for bin in $MPI_BINS; do
    name=$(basename "$bin")
    if [ -x "$bin" ]; then
        # OpenMPI leaks its own buffers at exit (LeakSanitizer flags frames in
        # libmpi/libopen-pal), so sanitized MPI runs skip only the leak check;
        # the non-MPI tests keep it, and the backend is the same code.
        # shellcheck disable=SC2086 # MPIRUN is a command line
        run_program "$name" env ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" $MPIRUN -np 4 "$bin"
    else
        record "$name" 0 1 "did not build (see the compiler errors above)"
    fi
done

# 6. The Llama trainer (built when libyaml exists): its config unit test and the
#    end-to-end test, which runs $TRAIN (and, when MPI was built, $MPIRUN -np 2).
if [ -n "$TRAIN_TEST" ]; then
    trainer_mpirun=
    [ -n "$MPI_BINS" ] && trainer_mpirun=$MPIRUN
    for bin in $TRAIN_TEST; do
        name=$(basename "$bin")
        if [ -x "$bin" ] && { [ "$name" != llama_test_train ] || [ -x "$TRAIN" ]; }; then
            # shellcheck disable=SC2086
            run_program "$name" env TRAIN="$TRAIN" MPIRUN="$trainer_mpirun" "$bin"
        else
            record "$name" 0 1 "did not build (see the compiler errors above)"
        fi
    done
else
    printf 'skip  %-22s %s\n' trainer "trainer: skipped (no libyaml: install libyaml-dev)"
fi

# 7. CUDA: parallel_cuda.cu + the CUDA tests must compile and link wherever nvcc
#    exists (CI has no GPU, so they are not run here; `make test-cuda` runs them).
if [ -n "$CUDA_SKIP" ]; then
    printf 'skip  %-22s %s\n' cuda_link "cuda_link: skipped ($CUDA_SKIP)"
else
    cuda_p=0 cuda_f=0 cuda_missing=()
    for bin in $CUDA_BINS; do
        if [ -x "$bin" ]; then cuda_p=$((cuda_p + 1)); else cuda_f=$((cuda_f + 1)); cuda_missing+=("$bin"); fi
    done
    detail="cuda_link: $cuda_p passed, $cuda_f failed (linked, not run: needs a GPU)"
    [ $cuda_f -gt 0 ] && detail="$detail (missing: ${cuda_missing[*]})"
    record cuda_link "$cuda_p" "$cuda_f" "$detail"
fi

echo
if [ ${#failed_names[@]} -gt 0 ]; then
    echo "failed: ${failed_names[*]}"
fi
echo "$total_passed passed, $total_failed failed"
[ "$total_failed" -eq 0 ]
