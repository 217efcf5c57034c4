#!/usr/bin/env bash
# bench/soak.sh [STEPS] [INTERVAL_S] - a long trainer run with its memory watched.
#
# The demo configuration (examples/configs/demo.yaml) as pure data parallel
# (dp 2: model_parallel 1, no sequence parallel), 2 ranks as threads in one
# process, STEPS steps (default 2000) on README.md + parallel.h. Every
# INTERVAL_S seconds (default 2) the process's resident set (VmRSS from
# /proc/PID/status, read from outside: the run itself is untouched) is logged
# with the step reached. Then the same run again without sampling: its final
# loss must equal the sampled run's at that step, bit for bit. The second run
# may be shorter (SOAK_COMPARE_STEPS, default STEPS; 0 skips it): the cosine
# schedule is pinned to STEPS (lr_schedule.total_steps), so its first steps
# are exactly the long run's.
#
# Reports RSS after warm-up (the first 10% of the steps) and at the end, the
# growth between them, the largest sample, and the final losses; exit status 1
# if the losses differ or RSS grew by more than SOAK_MAX_GROWTH_KIB (default
# 1024, a leak of ~0.5 KiB per step over 2000 steps). Files: build/soak/.
# Not part of make test (minutes of wall time); needs build/train (libyaml).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
steps=${1:-2000}
interval=${2:-2}
max_growth=${SOAK_MAX_GROWTH_KIB:-1024}
train=${TRAIN:-build/train}
out=build/soak
[ -x "$train" ] || { echo "soak: $train not built (make build/train; needs libyaml)" >&2; exit 2; }
mkdir -p "$out"
rm -f "$out/sampled.jsonl" "$out/plain.jsonl" # a stale file would give the first samples wrong steps
cat README.md parallel.h >"$out/data.txt"
args=(--config examples/configs/demo.yaml --set parallel_config.model_parallel=1
      --set parallel_config.use_seq_parallel=false --set lr_schedule.total_steps="$steps" --data "$out/data.txt" --quiet)
compare_steps=${SOAK_COMPARE_STEPS:-$steps}

echo "soak: $train ${args[*]}"
t0=$(date +%s)
"$train" "${args[@]}" --steps "$steps" --metrics "$out/sampled.jsonl" >"$out/sampled.log" 2>&1 &
pid=$!
printf 'elapsed_s\tsteps_done\tvmrss_kib\n' >"$out/rss.tsv"
while kill -0 "$pid" 2>/dev/null; do
    rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status" 2>/dev/null)
    step=$(grep -c '"step"' "$out/sampled.jsonl" 2>/dev/null)
    [ -n "$rss" ] && printf '%d\t%d\t%d\n' $(($(date +%s) - t0)) "${step:-0}" "$rss" >>"$out/rss.tsv"
    sleep "$interval"
done
wait "$pid"
rc=$?
wall=$(($(date +%s) - t0))
[ $rc -eq 0 ] || { echo "soak: the sampled run failed (exit $rc), see $out/sampled.log" >&2; exit 1; }

# loss_at FILE STEP: the loss logged for step STEP (0-based)
loss_at() { grep "^{\"step\":$2," "$1" | sed -E 's/.*"loss":([^,]*),.*/\1/'; }
loss_sampled=$(loss_at "$out/sampled.jsonl" $((steps - 1)))
loss_plain=skipped loss_sampled_cmp=$loss_sampled
if [ "$compare_steps" -gt 0 ]; then
    "$train" "${args[@]}" --steps "$compare_steps" --metrics "$out/plain.jsonl" >"$out/plain.log" 2>&1 ||
        { echo "soak: the plain run failed" >&2; exit 1; }
    loss_plain=$(loss_at "$out/plain.jsonl" $((compare_steps - 1)))
    loss_sampled_cmp=$(loss_at "$out/sampled.jsonl" $((compare_steps - 1)))
fi

# RSS after warm-up: the first sample at or past 10% of the steps; the end: the last sample
read -r warm_step warm_rss end_step end_rss max_rss < <(awk -v w=$((steps / 10)) -F'\t' '
    NR > 1 { if (!ws && $2 >= w && $2 > 0) { ws = $2; wr = $3 } if (ws && $3 > mx) mx = $3; es = $2; er = $3 }
    END { print ws + 0, wr + 0, es + 0, er + 0, mx + 0 }' "$out/rss.tsv")
growth=$((end_rss - warm_rss))
samples=$(($(wc -l <"$out/rss.tsv") - 1))
echo "soak: $steps steps in $wall s, $samples RSS samples every $interval s ($out/rss.tsv)"
printf '  %-28s %s\n' "RSS after warm-up" "$warm_rss KiB (after $warm_step steps)" \
    "RSS at the end" "$end_rss KiB (after $end_step steps)" "largest after warm-up" "$max_rss KiB" \
    "growth after warm-up" "$growth KiB" "final loss (sampled run)" "$loss_sampled (step $((steps - 1)))" \
    "sampled run at step $((compare_steps - 1))" "$loss_sampled_cmp" \
    "plain run at step $((compare_steps - 1))" "$loss_plain"
printf '{"bench":"soak","steps":%d,"wall_s":%d,"rss_warm_kib":%d,"rss_end_kib":%d,"rss_max_kib":%d,"growth_kib":%d,"loss_final":"%s","compare_step":%d,"loss_sampled":"%s","loss_plain":"%s"}\n' \
    "$steps" "$wall" "$warm_rss" "$end_rss" "$max_rss" "$growth" "$loss_sampled" $((compare_steps - 1)) "$loss_sampled_cmp" "$loss_plain"
bad=0
if [ "$loss_plain" != skipped ] && [ "$loss_plain" != "$loss_sampled_cmp" ]; then
    echo "soak: FAILED: the final losses differ" >&2
    bad=1
fi
if [ "$growth" -gt "$max_growth" ]; then
    echo "soak: FAILED: RSS grew by $growth KiB after warm-up (limit $max_growth)" >&2
    bad=1
fi
exit $bad
