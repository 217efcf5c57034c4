#!/usr/bin/env bash
# tests/fuzz/run.sh NAME BINARY SECONDS WORKDIR - one libFuzzer target, as a test.
#
#   1. replay: every seed in tests/fuzz/NAME/ (valid inputs, tricky ones, and
#      each input that once crashed: the regression corpus) runs once;
#   2. fuzz: SECONDS of new inputs, starting from WORKDIR (kept between runs
#      by `make fuzz`; new finds are written there, never into tests/) and the
#      seeds. A crash, sanitizer report, leak, timeout (10 s per input) or
#      broken invariant (tests/fuzz/fuzz.h) stops it; the input is saved as
#      WORKDIR/../crash-NAME-* and named in the output.
# Prints the executions done and "fuzz_NAME: N passed, N failed" (the replay
# is one check per seed, the timed run one check), which tests/run.sh counts.
set -uo pipefail
name=$1 bin=$2 seconds=$3 work=$4
seeds=tests/fuzz/$name
mkdir -p "$work"
passed=0 failed=0
opts=(-timeout=10 -rss_limit_mb=2048 -artifact_prefix="$(dirname "$work")/crash-$name-")

mapfile -t files < <(find "$seeds" -type f | sort)
if [ ${#files[@]} -eq 0 ]; then
    echo "fuzz_$name: no seed inputs in $seeds"
    failed=$((failed + 1))
elif "$bin" "${opts[@]}" "${files[@]}" >"$work.replay.log" 2>&1; then
    passed=$((passed + ${#files[@]}))
    echo "replay: ${#files[@]} seeds of $seeds ran clean"
else
    failed=$((failed + 1))
    echo "replay: a seed of $seeds failed:"
    grep -E 'Running:|ERROR|invariant|runtime error|SUMMARY' "$work.replay.log" | tail -n 8
fi

if "$bin" "${opts[@]}" -max_total_time="$seconds" -print_final_stats=1 "$work" "$seeds" >"$work.log" 2>&1; then
    passed=$((passed + 1))
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work.log")
    corpus=$(find "$work" -type f | wc -l)
    echo "fuzz: ${execs:-?} inputs in ${seconds} s, no crash (corpus $work: $corpus inputs)"
else
    failed=$((failed + 1))
    echo "fuzz: FAILED after $(sed -n 's/^stat::number_of_executed_units: *//p' "$work.log") inputs:"
    grep -E 'ERROR|invariant|runtime error|SUMMARY|Test unit written|Base64' "$work.log" | head -n 12
fi
echo "fuzz_$name: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
