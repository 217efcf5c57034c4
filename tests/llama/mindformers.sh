#!/usr/bin/env bash
# tests/llama/mindformers.sh - MindFormers' own configuration files, run as written.
#
# Each file in tests/data/mindformers/FILES (copied unchanged from the
# MindFormers repository; the list says from where) is run by the trainer,
# shrunk in size only by --set model.model_config.K=V, for 2 steps on
# tests/data/train.txt. It must end as the list says: "trains" (exit 0), or
# "refused" (exit 2) with every listed error in the report and no other (the
# report's error count equals the list's).
#
# Usage: tests/llama/mindformers.sh [build/train]   one summary line "mindformers: N passed, N failed"
#        tests/llama/mindformers.sh --table         the Markdown table of docs/mindformers.md
set -u
export LC_ALL=C
cd "$(dirname "$0")/../.." || exit 2
LIST=tests/data/mindformers/FILES
COMMIT=ece44cc45490ec4187b49ccfd9c4288a46fab47c
trim() { local s=$1; s=${s#"${s%%[![:space:]]*}"}; printf '%s' "${s%"${s##*[![:space:]]}"}"; }

if [ "${1:-}" = "--table" ]; then
    echo "| file (MindFormers r1.5.0) | parallel_config as written | shrunk by | outcome | the report's errors |"
    echo "|---|---|---|---|---|"
    while IFS='|' read -r file src shrink outcome errors; do
        case "$file" in '#'* | '') continue ;; esac
        file=$(trim "$file") src=$(trim "$src") shrink=$(trim "$shrink") outcome=$(trim "$outcome")
        par=$(awk '/^parallel_config:/{p=1;next} p&&/^[^ ]/{p=0} p&&/(data_parallel|model_parallel|pipeline_stage|context_parallel|micro_batch_num):/{sub(/#.*/,"");gsub(/ /,"");printf "%s%s", sep, $0; sep=", "}' \
              "tests/data/mindformers/$file")
        reasons=$(trim "$errors" | sed 's/ *;; */; /g')
        echo "| [\`$file\`](https://github.com/mindspore-lab/mindformers/blob/$COMMIT/$src) | $par | \`$shrink\` | $outcome | ${reasons:--} |"
    done <"$LIST"
    exit 0
fi

TRAIN=${1:-build/train}
passed=0 failed=0
fail() { failed=$((failed + 1)); echo "mindformers: FAILED: $*" >&2; }
ERRF=$(mktemp)
trap 'rm -f "$ERRF"' EXIT
while IFS='|' read -r file src shrink outcome errors; do
    case "$file" in '#'* | '') continue ;; esac
    file=$(trim "$file") outcome=$(trim "$outcome")
    sets=()
    for kv in $shrink; do sets+=(--set "model.model_config.$kv"); done
    out=$("$TRAIN" --config "tests/data/mindformers/$file" --data tests/data/train.txt --steps 2 --quiet "${sets[@]}" 2>"$ERRF")
    rc=$?
    err=$(cat "$ERRF")
    if [ "$outcome" = trains ]; then
        if [ $rc -eq 0 ] && [[ "$out" == *"trained 2 steps"* ]]; then passed=$((passed + 1)); else fail "$file: exit $rc, want it to train: $err"; fi
        continue
    fi
    ok=1
    [ $rc -eq 2 ] || { ok=0; fail "$file: exit $rc, want 2 (refused)"; }
    want=0
    IFS=$'\n' read -r -d '' -a reasons < <(trim "$errors" | sed 's/ *;; */\n/g'; printf '\0')
    for r in "${reasons[@]}"; do
        r=$(trim "$r")
        [ -n "$r" ] || continue
        want=$((want + 1))
        [[ "$err" == *"$r"* ]] || { ok=0; fail "$file: the report lacks \"$r\": $err"; }
    done
    got=$(grep -c '^train: error: ' <<<"$err")
    [ "$got" -eq "$want" ] || { ok=0; fail "$file: $got errors reported, $want listed: $err"; }
    [ $ok -eq 1 ] && passed=$((passed + 1))
done <"$LIST"
# the docs table is this list's
table=$(bash "$0" --table)
if [ -e docs/mindformers.md ] && grep -qF -- "$table" docs/mindformers.md; then
    passed=$((passed + 1))
else
    fail "docs/mindformers.md does not hold the table of tests/llama/mindformers.sh --table (regenerate it)"
fi
echo "mindformers: $passed passed, $failed failed"
[ $failed -eq 0 ]
