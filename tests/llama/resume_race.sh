#!/usr/bin/env bash
# tests/llama/resume_race.sh TRAIN - resuming from a checkpoint root while another run saves into it.
#
# Each trial starts a run that saves every step into a fresh --save-dir, waits
# until it has saved, then resumes from that root: the resume must be refused
# by name (another live run owns the root: parallel.h par_ckpt_check_idle)
# rather than load a mix of two checkpoints. RACE_RUNS trials (default 3;
# docs/reliability.md quotes 20). Prints "resume_race: N passed, N failed".
set -uo pipefail
train=$1
passed=0 failed=0
base=(--config examples/configs/tiny.yaml --data tests/data/train.txt --quiet)
for i in $(seq 1 "${RACE_RUNS:-3}"); do
    d=$(mktemp -d)
    "$train" "${base[@]}" --steps 100000 --save-dir "$d" --save-every 1 >/dev/null 2>&1 &
    writer=$!
    for _ in $(seq 1 200); do [ -e "$d/latest" ] && break; sleep 0.05; done
    out=$("$train" "${base[@]}" --steps 1 --init-from "$d" 2>&1)
    rc=$?
    if [ $rc -ne 0 ] && grep -q "is being written by another run (pid=$writer " <<<"$out"; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        echo "FAILED: trial $i: exit $rc: $(tail -2 <<<"$out")"
    fi
    kill -9 "$writer" 2>/dev/null
    wait "$writer" 2>/dev/null
    rm -rf "$d"
done
echo "resume_race: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
