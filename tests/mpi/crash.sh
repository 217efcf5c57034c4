#!/usr/bin/env bash
# tests/mpi/crash.sh BINARY - what MPI does when a rank crashes mid-collective.
#
# build/mpi_test_fault_mpi --crash under mpirun -np 2: rank 1 posts an
# all_reduce and aborts; rank 0 waits in it (library timeout 60 s). A crashed
# process is not the library's to detect: mpirun sees the death and kills the
# job. Checked here: the job ends non-zero, quickly (well inside the library's
# timeout: no hang), mpirun names the dead rank and its signal, and rank 0 never
# reports the half-done all_reduce as a success.
# Prints "mpi_crash: N passed, N failed" (tests/run.sh counts it).
set -uo pipefail
bin=$1
MPIRUN=${MPIRUN:-mpirun --allow-run-as-root --oversubscribe}
passed=0 failed=0
check() { # check WHAT COND...
    local what=$1
    shift
    if "$@"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED: $what"; fi
}
# run_np2 MODE: the binary in MODE under mpirun -np 2 (watchdog 90 s); sets
# out, rc and the wall time in ms (elapsed) and seconds (secs)
run_np2() {
    local t0 t1
    t0=$(date +%s%3N)
    # shellcheck disable=SC2086 # MPIRUN is a command line
    out=$(timeout 90 $MPIRUN -np 2 "$bin" "$1" 2>&1)
    rc=$?
    t1=$(date +%s%3N)
    elapsed=$((t1 - t0))
    secs=$(awk -v ms=$elapsed 'BEGIN { printf "%.1f", ms / 1000 }')
}
run_np2 --crash
echo "$out" | grep -E 'crashing|mpirun noticed|rank 0:' | sed 's/^/  | /'
echo "mpirun exit status $rc after $secs s"
check "the job ends with a non-zero status (got $rc)" test "$rc" -ne 0
check "no hang: mpirun ended the job itself (got $rc, 124 is the watchdog)" test "$rc" -ne 124
check "ended within 30 s of the crash (took $secs s)" test "$elapsed" -lt 30000
check "mpirun names the crashed rank and its signal" grep -q 'process rank 1 .*exited on signal 6' <<<"$out"
check "rank 0 did not take the all_reduce as a success" bash -c '! grep -q "passed as success" <<<"$1"' _ "$out"

# A rank stopped for good (SIGSTOP) before an all_reduce: rank 0 times out
# (2 s), names the op and the group, and par_ctx_destroy ends the job with
# MPI_Abort; mpirun then kills the stopped rank. No hang, no SIGSEGV.
run_np2 --stall
echo "$out" | grep -E 'stopping|rank 0:|parallel.h:' | sed 's/^/  | /'
echo "mpirun exit status $rc after $secs s (stall)"
check "a stalled rank: the job ends non-zero (got $rc)" test "$rc" -ne 0
check "a stalled rank: no hang (got $rc, 124 is the watchdog)" test "$rc" -ne 124
check "a stalled rank: ended within the 2 s timeout + 30 s (took $secs s)" test "$elapsed" -lt 32000
check "rank 0 names the op, the group and the timeout" \
    grep -q 'rank 0: mpi all_reduce on group \[0,1\] (rank 0, collective #2 on this group) timed out after 2000 ms' <<<"$out"
check "the job was ended by MPI_Abort from par_ctx_destroy" grep -q 'ending the MPI job (MPI_Abort) after mpi all_reduce on group \[0,1\]' <<<"$out"
check "par_ctx_destroy did not return" bash -c '! grep -q "par_ctx_destroy returned" <<<"$1"' _ "$out"
check "no rank died of SIGSEGV" bash -c '! grep -q "signal 11" <<<"$1"' _ "$out"
echo "mpi_crash: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
