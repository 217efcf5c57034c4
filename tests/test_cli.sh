#!/usr/bin/env bash
# tests/test_cli.sh - checks par-explain's output against values worked out by hand.
# Usage: tests/test_cli.sh [path/to/par-explain]   (default build/par-explain)
# Prints one summary line "cli: N passed, N failed"; exits non-zero if any failed.
set -u
export LC_ALL=C

BIN=${1:-build/par-explain}
passed=0
failed=0
OUT=""
ERR=""
RC=0

fail() {
    failed=$((failed + 1))
    echo "test_cli: FAILED: $*" >&2
}
pass() { passed=$((passed + 1)); }

ERRF=$(mktemp)
trap 'rm -f "$ERRF"' EXIT

# run ARGS...: runs the tool, keeping stdout, stderr (trailing newlines dropped) and
# the exit status. Few forks: the nasty-value loop below runs it hundreds of times.
run() {
    OUT=$("$BIN" "$@" 2>"$ERRF")
    RC=$?
    ERR=""
    IFS= read -r -d '' ERR <"$ERRF"
    while [[ "$ERR" == *$'\n' ]]; do ERR=${ERR%$'\n'}; done
}

# ok NAME ARGS...: the command succeeds with exit status 0 and no stderr.
ok() {
    local name=$1
    shift
    run "$@"
    if [ "$RC" -eq 0 ] && [ -z "$ERR" ]; then pass; else fail "$name: exit $RC, stderr: $ERR"; fi
}

# has_line NAME LINE: the last output contains exactly this line.
has_line() {
    if printf '%s\n' "$OUT" | grep -qxF -- "$2"; then pass; else
        fail "$1: no line '$2' in output:"$'\n'"$OUT"
    fi
}

# has_match NAME REGEX: some line of the last output matches the extended regex.
has_match() {
    if printf '%s\n' "$OUT" | grep -qE -- "$2"; then pass; else
        fail "$1: no line matching /$2/ in output:"$'\n'"$OUT"
    fi
}

# same NAME GOT WANT
same() {
    if [ "$2" == "$3" ]; then pass; else fail "$1: got"$'\n'"$2"$'\n'"want"$'\n'"$3"; fi
}

# bad NAME ARGS...: exit status 2, nothing on stdout, one stderr line starting "error:".
bad() {
    local name=$1
    shift
    run "$@"
    if [ "$RC" -eq 2 ] && [ -z "$OUT" ] && [[ "$ERR" == error:\ ?* && "$ERR" != *$'\n'* ]]; then pass; else
        fail "$name: want exit 2 and one 'error:' line, got exit $RC, stdout '$OUT', stderr '$ERR'"
    fi
}

# bad_says NAME NEEDLE ARGS...: as bad, and the message contains NEEDLE.
bad_says() {
    local name=$1 needle=$2
    shift 2
    bad "$name" "$@"
    if [[ "$ERR" == *"$needle"* ]]; then pass; else fail "$name: error '$ERR' does not mention '$needle'"; fi
}

if [ ! -x "$BIN" ]; then
    echo "test_cli: FAILED: $BIN is not an executable (build it first)" >&2
    echo "cli: 0 passed, 1 failed"
    exit 1
fi

# ---------------------------------------------------------------------------
# usage
ok "help" --help
has_match "help" '^usage: par-explain'
bad "no args"

# ---------------------------------------------------------------------------
# layout: mesh [2,4], map [1,0]: tensor dim 0 is split by device dim 1 = mesh axis 0
# (size 2, rows of 4), dim 1 by device dim 0 = axis 1 (size 4, columns of 4).
# Rank r has coordinates (r/4, r%4).
ok "layout" layout --mesh 2,4 --shape 8,16 --map "[1,0]"
same "layout first lines" "$(printf '%s\n' "$OUT" | head -n 3)" "layout: [1,0] mesh=[2,4] shape=[8,16]
placements: (Shard(0), Shard(1))
slice shape: [4,4]"
got=$(printf '%s\n' "$OUT" | grep '^rank ')
want="rank 0: [0:4, 0:4]
rank 1: [0:4, 4:8]
rank 2: [0:4, 8:12]
rank 3: [0:4, 12:16]
rank 4: [4:8, 0:4]
rank 5: [4:8, 4:8]
rank 6: [4:8, 8:12]
rank 7: [4:8, 12:16]"
same "layout rank lines" "$got" "$want"
has_line "layout" "rank 5: [4:8, 4:8]"
has_match "layout" '^repeated: none'
has_line "layout bytes" "bytes per rank: 64 (f32)"

# Named mesh, rows over dp (axis 0), columns whole: ranks of one dp row share data.
ok "layout named" layout --mesh dp=2,tp=4 --shape 8,16 --map "[dp,None]" --dtype bf16
has_line "layout named" "layout: [1,-1] mesh=[dp=2,tp=4] shape=[8,16]"
has_line "layout named" "placements: (Shard(0), Replicate())"
has_line "layout named" "slice shape: [4,16]"
has_line "layout named" "rank 6: [4:8, 0:16]"
has_line "layout named" "bytes per rank: 128 (bf16)"
has_line "layout named" "repeated: each slice is held by 4 ranks; groups: [0,1,2,3] [4,5,6,7]"

# Tuple entry: dim 0 split over both dims, axis 0 major: shard = c0*4 + c1 = rank.
ok "layout tuple" layout --mesh 2,4 --shape 16,4 --map "[(1,0),-1]"
has_line "layout tuple" "slice shape: [2,4]"
has_line "layout tuple" "rank 3: [6:8, 0:4]"
has_line "layout tuple" "rank 7: [14:16, 0:4]"

# Partial: every rank holds a whole-shape slice of partial sums.
ok "layout partial" layout --mesh 4 --shape 16,16 --map "[-1,-1] partial=0"
has_line "layout partial" "placements: (Partial())"
has_line "layout partial" "rank 3: [0:16, 0:16]"
has_match "layout partial" '^partial: '

# ---------------------------------------------------------------------------
# redistribute: MindSpore's examples on 4 devices, 16x16 f32 (full tensor B = 1024 bytes).
# [0,-1] -> [-1,-1]: all_gather of the 4x16 row slices (256 bytes): sends (n-1)*256 = 768.
ok "all_gather" redistribute --mesh 4 --shape 16,16 --from "[0,-1]" --to "[-1,-1]"
same "all_gather plan" "$OUT" "all_gather tensor_dim=0 device_dim=0 group=4 bytes=768
total bytes=768 ops=1"

# [-1,0] -> [0,-1]: one all_to_all, (n-1)/n * 256 = 192 bytes.
ok "all_to_all" redistribute --mesh 4 --shape 16,16 --from "[-1,0]" --to "[0,-1]" --dtype f32
same "all_to_all plan" "$OUT" "all_to_all tensor_dim=1 to_dim=0 device_dim=0 group=4 bytes=192
total bytes=192 ops=1"

# Matching layouts: nothing to do.
ok "identity" redistribute --mesh 4 --shape 16,16 --from "[0,-1]" --to "[0,-1]"
same "identity plan" "$OUT" "total bytes=0 ops=0"

# Partial over device dim 0 -> rows split: reduce_scatter, (n-1)/n * 1024 = 768.
ok "reduce_scatter" redistribute --mesh 4 --shape 16,16 --from "[-1,-1] partial=0" --to "[0,-1]"
same "reduce_scatter plan" "$OUT" "reduce_scatter tensor_dim=0 device_dim=0 group=4 bytes=768
total bytes=768 ops=1"

# Partial -> replicated: all_reduce, 2(n-1)/n * 1024 = 1536.
ok "all_reduce" redistribute --mesh 4 --shape 16,16 --from "[-1,-1] partial=0" --to "[-1,-1]"
has_match "all_reduce plan" '^all_reduce( tensor_dim=-1)? device_dim=0 group=4 bytes=1536$'
has_line "all_reduce total" "total bytes=1536 ops=1"
same "all_reduce ops" "$(printf '%s\n' "$OUT" | wc -l | tr -d ' ')" "2"

# Replicated -> split is a local split: no bytes.
ok "split" redistribute --mesh 4 --shape 16,16 --from "[-1,-1]" --to "[-1,0]"
has_match "split plan" '^split tensor_dim=1 device_dim=0 group=4 bytes=0$'
has_line "split total" "total bytes=0 ops=1"

# dtype scales bytes: bf16 halves the all_gather (384), f64 doubles it (1536).
ok "bf16" redistribute --mesh 4 --shape 16,16 --from "[0,-1]" --to "[-1,-1]" --dtype bf16
has_line "bf16" "total bytes=384 ops=1"
ok "f64" redistribute --mesh 4 --shape 16,16 --from "[0,-1]" --to "[-1,-1]" --dtype f64
has_line "f64" "total bytes=1536 ops=1"

# --independent: pp holds other stages' data. Free, the plan borrows pp for the
# tp reduction (20,480 bytes); told, it keeps to tp (one all_reduce, 24,576).
ok "borrows pp" redistribute --mesh pp=2,tp=4 --shape 64,64 --from "[-1,-1] partial=0" --to "[-1,-1]"
has_line "borrows pp" "total bytes=20480 ops=3"
ok "independent pp" redistribute --mesh pp=2,tp=4 --shape 64,64 --from "[-1,-1] partial=0" --to "[-1,-1]" --independent pp
has_line "independent pp" "total bytes=24576 ops=1"
bad "split over independent" redistribute --mesh pp=2,tp=4 --shape 64,64 --from "[pp,None]" --to "[-1,-1]" --independent pp
same "split over independent" "$(printf '%s' "$ERR" | grep -c 'which the cost model names independent')" "1"

# Named mesh and named maps.
ok "named" redistribute --mesh dp=2,tp=4 --shape 8,16 --from "[dp,None]" --to "[None,None]"
has_line "named" "all_gather tensor_dim=0 device_dim=1 group=2 bytes=256"
has_line "named" "total bytes=256 ops=1"

# Greedy: all_reduce then split, 1536 bytes, never cheaper than the optimal 768.
ok "greedy" redistribute --mesh 4 --shape 16,16 --from "[-1,-1] partial=0" --to "[0,-1]" --greedy
has_match "greedy" '^all_reduce'
has_match "greedy" '^total bytes=1536 ops=2$'

# Layout-preserving reshape [B,S,H*D] -> [B,S,H,D] on tp=4: one local reshape, no bytes.
ok "reshape" redistribute --mesh tp=4 --shape 2,8,32 --from "[None,None,tp]" --to "[None,None,tp,None]" --to-shape 2,8,4,8
has_match "reshape" '^reshape'
has_line "reshape" "total bytes=0 ops=1"

# A reshape that is not local needs data movement between local view changes (one
# reshape, or two around ops on the unified shape, here [2,8,2,2,2,4] with tp factored
# 2 x 2); it must not cost more than gathering the whole 2x8x32 f32 tensor (2048
# bytes): 3/4 * 2048.
ok "reshape moving data" redistribute --mesh tp=4 --shape 2,8,32 --from "[None,None,tp]" --to "[None,None,None,tp]" --to-shape 2,8,2,16
views=$(printf '%s\n' "$OUT" | grep -c '^reshape group=1 bytes=0$')
if [ "$views" -ge 1 ] && [ "$views" -le 2 ]; then pass; else fail "reshape moving data: $views reshapes, want 1 or 2"; fi
bytes=$(printf '%s\n' "$OUT" | sed -n 's/^total bytes=\([0-9]*\) ops=[0-9]*$/\1/p')
if [ -n "$bytes" ] && [ "$bytes" -gt 0 ] && [ "$bytes" -le 1536 ]; then pass; else
    fail "reshape moving data: total bytes '$bytes' not in 1..1536"
fi

# Cost model options are accepted (values per device dim, by number or axis name).
ok "latency" redistribute --mesh dp=2,tp=4 --shape 8,16 --from "[1,0]" --to "[-1,-1]" --latency tp=1,dp=10 --bandwidth 0=100,1=1
has_match "latency" '^total bytes=[0-9]+ ops=[0-9]+$'

# ---------------------------------------------------------------------------
# strategy: MatMul 16x32 x 32x64 on 8 devices, ((2,1),(1,4)): device matrix [M,K,N] =
# [2,1,4]; A [M,K] -> map [2,1], B [K,N] -> [1,0], out [M,N] -> [2,0]. B (a parameter)
# does not use device dim 2 (size 2): its gradient is all-reduced over 2 ranks.
ok "strategy" strategy --op matmul --devices 8 --shapes 16x32,32x64 --strategy "((2,1),(1,4))" --param 1
has_line "strategy" "device_matrix: [2,1,4]"
has_line "strategy" "input0 tensor_map: [2,1]"
has_line "strategy" "input0 slice: [8,32]"
has_line "strategy" "input1 tensor_map: [1,0]"
has_line "strategy" "input1 slice: [32,16]"
has_line "strategy" "output tensor_map: [2,0]"
has_line "strategy" "output slice: [8,16]"
has_line "strategy" "forward_comm: none"
has_line "strategy" "mirror: input1 all_reduce group=2"
# A [M,K] uses M and K; the output's N split (4 ways) makes dA = dY B^T partial over it.
has_line "strategy" "backward: input0 all_reduce group=4"
# 2*8*32*16 flops; slices (256+512+128)*4 bytes; mirror 2(n-1)/n * 2048 bytes.
has_match "strategy cost" '^cost: compute_flops=8192 comm_bytes=2048 memory_bytes=3584 total=[0-9.e+-]+$'

# --param may repeat; bf16 halves the bytes: memory (256+512+128)*2 = 1792; mirrors
# 2(4-1)/4 * (8*32*2) for A plus 2(2-1)/2 * (32*16*2) for B = 768 + 1024 = 1792.
ok "strategy param repeat" strategy --op matmul --devices 8 --shapes 16x32,32x64 --strategy "((2,1),(1,4))" --param 0 --param 1 --dtype bf16
has_line "strategy param repeat" "mirror: input0 all_reduce group=4"
has_line "strategy param repeat" "mirror: input1 all_reduce group=2"
has_match "strategy bf16 cost" '^cost: compute_flops=8192 comm_bytes=1792 memory_bytes=1792 total='

# --mesh: the same op on the model's mesh dp=2,tp=4 (dp = device dim 1, tp = 0). The
# device matrix [2,1,4] drops its size-1 axis: A [M,K] -> [1,-1], B -> [-1,0], out [1,0].
ok "strategy on mesh" strategy --op matmul --devices 8 --shapes 16x32,32x64 --strategy "((2,1),(1,4))" --param 1 --mesh dp=2,tp=4
has_line "strategy on mesh" "device_matrix: [dp=2,tp=4]"
has_line "strategy on mesh" "input0 tensor_map: [1,-1]"
has_line "strategy on mesh" "input1 tensor_map: [-1,0]"
has_line "strategy on mesh" "output tensor_map: [1,0]"
has_line "strategy on mesh" "mirror: input1 all_reduce group=2"
bad_says "strategy mesh order" "axis_map" strategy --op matmul --devices 8 --shapes 16x32,32x64 --strategy "((2,1),(1,4))" --mesh tp=4,dp=2
bad_says "strategy mesh size" "mesh 4" strategy --op matmul --devices 8 --shapes 16x32,32x64 --strategy "((2,1),(1,4))" --mesh 2,2
# With --mesh the strategy may name its axes (docs/concepts.md's form): the names map the
# device matrix onto the mesh whatever the mesh's axis order. Column-parallel
# x W^T: on tp=4,dp=2 dp is device dim 0, tp device dim 1.
ok "strategy named" strategy --op matmul --devices 8 --shapes 16x32,64x32 --transpose-b --strategy "((dp,1),(tp,1))" --param 1 --mesh tp=4,dp=2
has_line "strategy named" "device_matrix: [tp=4,dp=2]"
has_line "strategy named" "input0 tensor_map: [0,-1]"
has_line "strategy named" "input1 tensor_map: [1,-1]"
has_line "strategy named" "output tensor_map: [0,1]"
has_line "strategy named" "mirror: input1 all_reduce group=2"
has_line "strategy named" "backward: input0 all_reduce group=4"
# Row parallel ((dp,tp),(1,tp)): x uses both split dims, its gradient needs nothing.
ok "strategy row backward" strategy --op matmul --devices 8 --shapes 16x64,32x64 --transpose-b --strategy "((dp,tp),(1,tp))" --param 1 --mesh dp=2,tp=4
has_line "strategy row backward" "backward: none"
has_line "strategy row backward" "forward_comm: all_reduce group=4"
# x[8,16] + b[16], b no parameter: db sums over the 2-way dim b does not use.
ok "strategy bias backward" strategy --op add --devices 8 --shapes 8x16,16 --strategy "((2,4),(4,))"
has_line "strategy bias backward" "backward: input1 all_reduce group=2"
bad_says "strategy unknown name" "'sp' at position 9 is not an axis of the mesh (its axes: dp, tp)" strategy --op matmul --devices 8 --shapes 16x32,64x32 --transpose-b --strategy "((dp,1),(sp,1))" --mesh dp=2,tp=4
bad_says "strategy name without mesh" "par_strategy_parse_mesh" strategy --op matmul --devices 8 --shapes 16x32,64x32 --strategy "((dp,1),(tp,1))"
bad_says "strategies no mesh" "--mesh is for" strategies --op matmul --devices 8 --shapes 16x32,32x64 --mesh 2,4

# The same without --param: no mirror.
ok "strategy no param" strategy --op MatMul --devices 8 --shapes 16x32,32x64 --strategy "((2,1),(1,4))"
has_line "strategy no param" "mirror: none"

# Contraction split 4 ways: forward all_reduce over 4 ranks (MindSpore example c).
ok "strategy K split" strategy --op matmul --devices 4 --shapes 16x16,16x16 --strategy "((1,4),(4,1))"
has_line "strategy K split" "forward_comm: all_reduce group=4"
has_line "strategy K split" "device_matrix: [1,4,1]"
has_line "strategy K split" "input0 slice: [16,4]"
has_line "strategy K split" "output slice: [16,16]"
# ... or a reduce_scatter on request (Megatron sequence parallel).
ok "strategy RS" strategy --op matmul --devices 4 --shapes 16x16,16x16 --strategy "((1,4),(4,1))" --reduce-scatter
has_line "strategy RS" "forward_comm: reduce_scatter group=4"

# Repeated calculation: 2 of 8 devices used -> repeated dim of 4 appended on the right.
ok "strategy repeated" strategy --op matmul --devices 8 --shapes 16x32,32x64 --strategy "((2,1),(1,1))" --param 0,1
has_match "strategy repeated" '^device_matrix: \[2,1,1,4\]'
has_line "strategy repeated" "input0 tensor_map: [3,2]"
has_line "strategy repeated" "mirror: input0 all_reduce group=4"
has_line "strategy repeated" "mirror: input1 all_reduce group=8"

# Other operators parse and infer.
ok "strategy transpose_b" strategy --op matmul --devices 4 --shapes 16x32,64x32 --strategy "((2,1),(2,1))" --transpose-b
has_line "strategy transpose_b" "output slice: [8,32]"
ok "strategy elementwise" strategy --op add --devices 4 --shapes 8x16,8x16 --strategy "((2,2),(2,2))"
has_line "strategy elementwise" "output slice: [4,8]"
ok "strategy softmax" strategy --op softmax --devices 4 --shapes 8x16 --strategy "((4,1),)" --axes -1
has_line "strategy softmax" "forward_comm: none"
ok "strategy reduce" strategy --op reduce_sum --devices 4 --shapes 8x16 --strategy "((1,4),)" --axes 1
has_match "strategy reduce" '^forward_comm: all_reduce group=4'
ok "strategy transpose" strategy --op transpose --devices 4 --shapes 8x16 --strategy "((4,1),)" --perm 1,0
has_line "strategy transpose" "output slice: [16,2]"

# ---------------------------------------------------------------------------
# strategies: every valid strategy, cheapest first, then a count line.
ok "strategies" strategies --op matmul --devices 8 --shapes 16x32,32x64
n_lines=$(printf '%s\n' "$OUT" | grep -c '^((')
has_line "strategies count" "count: $n_lines"
has_match "strategies has example" '^\(\(2,1\),\(1,4\)\) compute_flops='
sorted=$(printf '%s\n' "$OUT" | grep '^((' | sed 's/.*total=//' | sort -g -c 2>&1 && echo sorted)
same "strategies sorted by cost" "$sorted" "sorted"
if [ "$n_lines" -ge 10 ]; then pass; else fail "strategies: only $n_lines strategies for 8 devices"; fi
# 6 devices: non-power-of-two divisors appear (3 splits 48).
ok "strategies 6" strategies --op matmul --devices 6 --shapes 48x12,12x6
has_match "strategies 6" '^\(\(3,'

# ---------------------------------------------------------------------------
# tour
ok "tour" tour
for w in all_gather all_to_all reduce_scatter all_reduce "forward_comm: all_reduce group=4" reshape "rank 5: [4:8, 4:8]"; do
    if [[ "$OUT" == *"$w"* ]]; then pass; else fail "tour: no '$w'"; fi
done
has_line "tour all_gather" "all_gather tensor_dim=0 device_dim=0 group=4 bytes=768"

# ---------------------------------------------------------------------------
# errors: exit 2 and one "error:" line
bad_says "unknown command" "frobnicate" frobnicate
bad_says "unknown op" "--op" strategy --op convolution --devices 4 --shapes 16x16,16x16 --strategy "((1,4),(4,1))"
bad_says "bad map text" "--map" layout --mesh 2,4 --shape 8,16 --map "[1,0"
bad "bad map text 2" layout --mesh 2,4 --shape 8,16 --map "[x,0]"
bad "map out of range" layout --mesh 2,4 --shape 8,16 --map "[2,0]"
bad "map repeated dim" layout --mesh 2,4 --shape 8,16 --map "[0,0]"
bad "map wrong length" layout --mesh 2,4 --shape 8,16 --map "[0]"
bad "named map on unnamed mesh" layout --mesh 2,4 --shape 8,16 --map "[dp,None]"
bad_says "non-dividing shape" "divisible" layout --mesh 2,4 --shape 8,6 --map "[1,0]"
bad_says "missing flag value" "--map" layout --mesh 2,4 --shape 8,16 --map
bad_says "missing flag value mid" "--mesh" layout --mesh --shape 8,16 --map "[1,0]"
bad_says "missing flag" "--shape" layout --mesh 2,4 --map "[1,0]"
bad_says "unknown flag" "--frob" layout --mesh 2,4 --shape 8,16 --map "[1,0]" --frob 1
bad "unknown flag strategy" strategy --op matmul --devices 4 --shapes 16x16,16x16 --strategy "((1,4),(4,1))" --bogus
bad "positional" layout --mesh 2,4 --shape 8,16 --map "[1,0]" extra
bad "flag twice" layout --mesh 2,4 --mesh 2,4 --shape 8,16 --map "[1,0]"
bad "flag given value" redistribute --mesh 4 --shape 16,16 --from "[0,-1]" --to "[-1,-1]" --greedy=1
bad "mesh with 0" layout --mesh 2,0 --shape 8,16 --map "[1,0]"
bad "mesh text" layout --mesh 2,,4 --shape 8,16 --map "[1,0]"
bad "mesh negative" layout --mesh -2 --shape 8 --map "[0]"
bad "shape with 0" layout --mesh 2,4 --shape 8,0 --map "[1,-1]"
bad "shape text" layout --mesh 2,4 --shape 8,abc --map "[1,0]"
bad "shape huge" layout --mesh 2,4 --shape 8,99999999999999999999999 --map "[1,0]"
bad "shape too many dims" layout --mesh 2 --shape 1,1,1,1,1,1,1,1,1 --map "[-1,-1,-1,-1,-1,-1,-1,-1,-1]"
bad "newline in a value" layout --mesh 2,4 --shape $'8\n16' --map "[1,0]"
bad "newline in a map" layout --mesh 2,4 --shape 8,16 --map $'[1,\n0'
bad "bad dtype" layout --mesh 2,4 --shape 8,16 --map "[1,0]" --dtype f8
bad_says "strategy wrong input count" "strategy" strategy --op matmul --devices 4 --shapes 16x16,16x16 --strategy "((1,4),)"
bad "strategy too few shapes" strategy --op matmul --devices 4 --shapes 16x16 --strategy "((1,4),(4,1))"
bad "strategy text" strategy --op matmul --devices 4 --shapes 16x16,16x16 --strategy "((1,4),(4,1)"
bad "strategy contraction mismatch" strategy --op matmul --devices 4 --shapes 16x16,16x16 --strategy "((1,4),(2,2))"
bad "strategy too many devices" strategy --op matmul --devices 4 --shapes 16x16,16x16 --strategy "((2,4),(4,1))"
bad "strategy devices not a multiple" strategy --op matmul --devices 6 --shapes 16x16,16x16 --strategy "((1,4),(4,1))"
bad "strategy not dividing shape" strategy --op matmul --devices 3 --shapes 16x16,16x16 --strategy "((3,1),(1,1))"
bad "strategy shape mismatch" strategy --op matmul --devices 4 --shapes 16x32,16x16 --strategy "((1,4),(4,1))"
bad "devices 0" strategy --op matmul --devices 0 --shapes 16x16,16x16 --strategy "((1,4),(4,1))"
bad "devices text" strategy --op matmul --devices four --shapes 16x16,16x16 --strategy "((1,4),(4,1))"
bad "param out of range" strategy --op matmul --devices 4 --shapes 16x16,16x16 --strategy "((1,4),(4,1))" --param 2
bad "shapes empty input" strategy --op matmul --devices 4 --shapes 16x16,,16x16 --strategy "((1,4),(4,1))"
bad "strategies with strategy" strategies --op matmul --devices 4 --shapes 16x16,16x16 --strategy "((1,4),(4,1))"
bad "strategies unknown op" strategies --op nope --devices 4 --shapes 16x16
bad "redistribute bad from" redistribute --mesh 4 --shape 16,16 --from "[0,-1] partial=" --to "[-1,-1]"
bad "redistribute bad to" redistribute --mesh 4 --shape 16,16 --from "[0,-1]" --to "[-1,-1,-1]"
bad "redistribute partial clash" redistribute --mesh 4 --shape 16,16 --from "[0,-1] partial=0" --to "[-1,-1]"
bad "redistribute to-shape count" redistribute --mesh 4 --shape 16,16 --from "[0,-1]" --to "[-1,-1]" --to-shape 16,15
bad "redistribute bad latency" redistribute --mesh 4 --shape 16,16 --from "[0,-1]" --to "[-1,-1]" --latency 5=1
bad "redistribute bad bandwidth" redistribute --mesh 4 --shape 16,16 --from "[0,-1]" --to "[-1,-1]" --bandwidth 0=-1
bad "tour with args" tour --mesh 2

# ---------------------------------------------------------------------------
# Nasty values in every option of a few valid commands: exit 0, or exit 2 with one
# "error:" line; never a crash. One check per command.
# ---------------------------------------------------------------------------
# pipeline: generated schedules with the textbook figures, a file, bad input

ok "pipeline 1f1b" pipeline --schedule 1f1b --stages 4 --micro-batches 8
has_line "1f1b bubble" "# bubble 0.2727 of the ranks' time, makespan 33 (F = 1, B = 2, I = W = 1; transfers free)"
has_line "1f1b memory" "# peak micro-batches in flight per rank: 4 3 2 1"
has_match "1f1b last rank" "^rank 3: RA 0 0, F 0 0, B 0 0, SG 0 0, RA 1 0, F 1 0,"
ok "pipeline gpipe" pipeline --schedule gpipe --stages 2 --micro-batches 3
has_line "gpipe memory" "# peak micro-batches in flight per rank: 3 3"
has_line "gpipe bubble" "# bubble 0.2500 of the ranks' time, makespan 12 (F = 1, B = 2, I = W = 1; transfers free)"
PIPEF=$(mktemp)
ok "pipeline zb-h1" pipeline --schedule zb-h1 --stages 4 --micro-batches 8
has_line "zb-h1 bubble" "# bubble 0.1111 of the ranks' time, makespan 27 (F = 1, B = 2, I = W = 1; transfers free)"
printf '%s\n' "$OUT" >"$PIPEF"
ok "pipeline output read back" pipeline --file "$PIPEF"
has_line "read back bubble" "# bubble 0.1111 of the ranks' time, makespan 27 (F = 1, B = 2, I = W = 1; transfers free)"
printf 'pipeline stages=2 chunks=1 micro_batches=1\n# a comment\nrank 0: F 0 0, SA 0 0, RG 0 0, B 0 0\nrank 1: RA 0 0, F 0 0, B 0 0, SG 0 0\n' >"$PIPEF"
ok "pipeline file" pipeline --file "$PIPEF"
has_line "file bubble" "# bubble 0.5000 of the ranks' time, makespan 6 (F = 1, B = 2, I = W = 1; transfers free)"
printf 'pipeline stages=2 chunks=1 micro_batches=1\nrank 0: F 0 0, RG 0 0, SA 0 0, B 0 0\nrank 1: RA 0 0, F 0 0, B 0 0, SG 0 0\n' >"$PIPEF"
bad_says "pipeline deadlock" "deadlock: every unfinished rank waits for a message no rank will send: rank 0 step 1 (RG 0 0)" \
    pipeline --file "$PIPEF"
bad_says "pipeline interleaved m" "the interleaved schedule runs the micro-batches in micro-batches / stages = 2 rounds of equal size, and 5 micro-batches do not split into 2" \
    pipeline --schedule interleaved --stages 2 --micro-batches 5 --chunks 2
ok "pipeline interleaved m < 2p" pipeline --schedule interleaved --stages 4 --micro-batches 6 --chunks 2
has_match "pipeline interleaved m < 2p checked" '^# check: ok'
# ZB1P: the ZB paper's (p - 1) / (3 m v + p - 1) = 3 / 51; looped BFS needs chunks
ok "pipeline zb1p" pipeline --schedule zb1p --stages 4 --micro-batches 8 --chunks 2
has_line "zb1p bubble" "# bubble 0.0588 of the ranks' time, makespan 51 (F = 1, B = 2, I = W = 1; transfers free)"
bad_says "pipeline looped_bfs one chunk" "the looped_bfs schedule needs at least 2 model chunks per rank, not 1" \
    pipeline --schedule looped_bfs --stages 4 --micro-batches 8
# receives posted ahead (PyTorch's lowering of its simple_2_rank_2_stage case) and one never waited for
printf 'pipeline stages=2 chunks=1 micro_batches=2\nrank 0: F 0 0, SA 0 0, F 1 0, SA 1 0, PG 0 0, RG 0 0, B 0 0, PG 1 0, RG 1 0, B 1 0\nrank 1: PA 0 0, PA 1 0, RA 0 0, F 0 0, B 0 0, SG 0 0, RA 1 0, F 1 0, B 1 0, SG 1 0\n' >"$PIPEF"
ok "pipeline posted file" pipeline --file "$PIPEF"
has_line "posted bubble" "# bubble 0.3333 of the ranks' time, makespan 9 (F = 1, B = 2, I = W = 1; transfers free)"
printf 'pipeline stages=2 chunks=1 micro_batches=1\nrank 0: F 0 0, SA 0 0, PG 0 0\nrank 1: RA 0 0, F 0 0, B 0 0, SG 0 0\n' >"$PIPEF"
bad_says "pipeline post never waited" "rank 0 posts the receive of the gradient of micro-batch 0 chunk 0 (PG) and never waits for it (RG)" \
    pipeline --file "$PIPEF"
# --table: a row per kind, a cell per (p, m): 1F1B's (p-1)/(m+p-1) holding p micro-batches,
# ZB1P's (p-1)/(3mv+p-1) at 1F1B's memory (the ZB paper's ZB-1P)
ok "pipeline table" pipeline --table
has_line "table zb1p" "| zb1p | 2 | 0.111 / 4.0 | 0.059 / 4.0 | 0.030 / 4.0 | 0.127 / 8.0 | 0.068 / 8.0 | 0.035 / 8.0 |"
has_line "table 1f1b" "| 1f1b | 1 | 0.429 / 4.0 | 0.273 / 4.0 | 0.158 / 4.0 | 0.467 / 8.0 | 0.304 / 8.0 | 0.179 / 8.0 |"
has_match "table looped_bfs" '^\| looped_bfs \| 2 \| '
bad_says "pipeline table and schedule" "--table prints every kind; drop the other options" pipeline --table --stages 4

bad_says "pipeline name" "accepted: gpipe, 1f1b, interleaved" pipeline --schedule dualpipe --stages 2 --micro-batches 2
# the V kinds: 2 chunks on the V placement (rank r holds stages r and 2p-1-r), written out and read back
ok "pipeline zbv" pipeline --schedule zbv --stages 4 --micro-batches 8
has_line "zbv placement line" "placement v"
has_line "zbv placement" "# placement v: virtual stages per rank (chunk 0, 1, ...): 0 7; 1 6; 2 5; 3 4"
has_match "zbv checked" '^# check: ok'
printf '%s\n' "$OUT" >"$PIPEF"
ok "pipeline zbv read back" pipeline --file "$PIPEF"
has_line "zbv read back placement" "# placement v: virtual stages per rank (chunk 0, 1, ...): 0 7; 1 6; 2 5; 3 4"
ok "pipeline dualpipev" pipeline --schedule dualpipev --stages 4 --micro-batches 10
has_match "dualpipev checked" '^# check: ok'
bad_says "pipeline dualpipev m" "needs at least as many micro-batches as virtual stages, 2 x 4 = 8, not 7" \
    pipeline --schedule dualpipev --stages 4 --micro-batches 7
bad_says "pipeline zbv chunks" "the zbv schedule runs exactly 2 model chunks per rank (a V), not 3" \
    pipeline --schedule zbv --stages 2 --micro-batches 4 --chunks 3
printf 'pipeline stages=2 chunks=1 micro_batches=1\nplacement v\nrank 0: F 0 0, SA 0 0, RG 0 0, B 0 0\nrank 1: RA 0 0, F 0 0, B 0 0, SG 0 0\n' >"$PIPEF"
bad_says "pipeline odd V" "line 2: pipeline placement v: 1 chunks per rank, but the V goes down the ranks and back up" \
    pipeline --file "$PIPEF"
printf 'pipeline stages=2 chunks=2 micro_batches=1\nplacement 0,0,0,1\nrank 0: F 0 0\n' >"$PIPEF"
bad_says "pipeline stage on two" "rank 0 holds 3 virtual stages, but every rank holds chunks = 2" pipeline --file "$PIPEF"
printf 'pipeline stages=2 chunks=2 micro_batches=1\nplacement 0,1,1\nrank 0: F 0 0\n' >"$PIPEF"
bad_says "pipeline stage without a rank" "placement lists 3 ranks for 2 x 2 = 4 virtual stages (the rest have no rank)" \
    pipeline --file "$PIPEF"
bad_says "pipeline file and schedule" "drop --schedule" pipeline --file "$PIPEF" --schedule 1f1b
bad_says "pipeline missing file" "No such file" pipeline --file /nonexistent/s.txt
rm -f "$PIPEF"

# plan and graph: the >>planner searches, their output and bad input
PLANF=$(mktemp)
printf 'devices: 8\ndevices_per_node: 4\nintra_node_bandwidth: 100G\ninter_node_bandwidth: 10G\nmemory_per_device: 16Gi\nflops_per_device: 1e14\n' >"$PLANF"
ok "plan" plan examples/configs/tiny.yaml "$PLANF" --top 2
has_match "plan top" '^ 1\. dp=[0-9]+ tp=[0-9]+ .* step +[0-9.e+-]+ s +memory +[0-9.e+-]+ MiB$'
has_match "plan cuts" '^considered [0-9]+ plans: [0-9]+ fit, 0 over memory, [0-9]+ not divisible'
bad_says "plan cap" "the smallest plan needs" plan examples/configs/tiny.yaml "$PLANF" --memory-cap 1000
# --recompute all searches the modes: under a cap only recomputation meets, every plan shown recomputes
ok "plan recompute" plan examples/configs/tiny.yaml "$PLANF" --recompute all --dtype bf16 --top 64 --memory-cap 600000
has_match "plan bf16" '^model: .* batch [0-9]+, bf16$'
has_match "plan recomputes" '^ 1\. dp=.* recompute=(selective|full) bf16 +step'
if printf '%s\n' "$OUT" | grep -E '^ *[0-9]+\. dp=' | grep -vq ' recompute='; then fail "plan recompute: a plan without recomputation fits 600000 bytes: $OUT"; else pass; fi
bad_says "plan recompute mode" "--recompute (or all): unknown recompute mode 'block' (expected none, selective or full)" \
    plan examples/configs/tiny.yaml "$PLANF" --recompute block
bad_says "plan dtype" "--dtype i32: a model trains in f32, bf16 or f16" plan examples/configs/tiny.yaml "$PLANF" --dtype i32
# --dtype f32,bf16 searches both: under a cap only mixed precision meets, every plan shown is bf16 (f16 not searched)
ok "plan dtypes" plan examples/configs/tiny.yaml "$PLANF" --dtype f32,bf16 --top 64 --memory-cap 700000
has_match "plan dtypes bf16" '^ 1\. dp=.* bf16 +step'
if printf '%s\n' "$OUT" | grep -E '^ *[0-9]+\. dp=' | grep -Evq ' bf16 +step'; then fail "plan dtypes: a plan not in bf16 fits 700000 bytes: $OUT"; else pass; fi
bad_says "plan dtype list" "--dtype (f32, bf16, f16, a comma list, or all)" plan examples/configs/tiny.yaml "$PLANF" --dtype f32,bf17
# every search input as a flag: the model from flags (tiny.yaml's shape written out) gives the same
# top plan as the file; a flag overrides the file's value
TINY_FLAGS=(--layers 2 --hidden 64 --heads 4 --kv-heads 2 --ffn 172 --vocab 256 --seq 64 --global-batch 8)
TINY_MODEL="model: 2 layers, hidden 64, 4 heads (2 kv), ffn 172, vocab 256, seq 64, batch 8, f32"
ok "plan file form" plan --model examples/configs/tiny.yaml --cluster "$PLANF" --top 1
has_match "plan file form top" '^ 1\. dp=[0-9]+ tp=[0-9]+ '
FILE_TOP=$(printf '%s\n' "$OUT" | grep -E '^ 1\. ')
ok "plan flags form" plan --cluster "$PLANF" "${TINY_FLAGS[@]}" --top 1
has_line "plan flags model" "$TINY_MODEL"
same "plan flags top = file top" "$(printf '%s\n' "$OUT" | grep -E '^ 1\. ')" "$FILE_TOP"
# one leading file with the model in flags is the cluster
ok "plan flags + leading cluster" plan "$PLANF" "${TINY_FLAGS[@]}" --top 1
same "plan leading cluster top" "$(printf '%s\n' "$OUT" | grep -E '^ 1\. ')" "$FILE_TOP"
ok "plan overrides" plan examples/configs/tiny.yaml "$PLANF" --layers 4 --global-batch 16 --top 1
has_line "plan overrides model" "model: 4 layers, hidden 64, 4 heads (2 kv), ffn 172, vocab 256, seq 64, batch 16, f32"

# plan_lines: the numbered plan lines of the last output.
plan_lines() { printf '%s\n' "$OUT" | grep -E '^ *[0-9]+\. dp='; }
# every_plan NAME ERE: there are plans, and each plan line (filtered by the optional ERE $3) matches ERE.
every_plan() {
    local lines
    lines=$(plan_lines | grep -E -- "${3:-.}")
    if [ -z "$lines" ]; then fail "$1: no plan lines${3:+ matching /$3/}:"$'\n'"$OUT"
    elif printf '%s\n' "$lines" | grep -vqE -- "$2"; then fail "$1: a plan not matching /$2/:"$'\n'"$OUT"
    else pass; fi
}
# some_plan_not NAME ERE: a plan line does not match (the unconstrained search, so the check above can fail).
some_plan_not() { if plan_lines | grep -vqE -- "$2"; then pass; else fail "$1: every plan matches /$2/ already"; fi; }

ok "plan unconstrained" plan examples/configs/tiny.yaml "$PLANF" --top 64
some_plan_not "plan unconstrained tp" ' tp=2 '
some_plan_not "plan unconstrained m" ' m=1 '
if plan_lines | grep -q ' pp=[0-9]* gpipe '; then pass; else fail "plan unconstrained: no gpipe plan in the top 64"; fi
ok "plan fix tp" plan examples/configs/tiny.yaml "$PLANF" --fix tp=2 --top 64
every_plan "plan fix tp=2" ' tp=2 '
ok "plan fix dp pp" plan --model examples/configs/tiny.yaml --cluster "$PLANF" --fix dp=2,pp=2 --search-mode sharding_propagation --top 64
every_plan "plan fix dp=2,pp=2" '^ *[0-9]+\. dp=2 .* pp=2 '
ok "plan schedule" plan examples/configs/tiny.yaml "$PLANF" --schedule 1f1b --top 64
every_plan "plan schedule 1f1b" ' pp=[0-9]+ 1f1b ' ' pp='
# interleaved runs 2 chunks a rank: 4 layers for 2 stages
ok "plan schedule interleaved" plan examples/configs/tiny.yaml "$PLANF" --layers 4 --schedule interleaved --fix pp=2 --top 64
every_plan "plan schedule interleaved" ' pp=2 interleaved '
ok "plan max micro-batches" plan examples/configs/tiny.yaml "$PLANF" --max-micro-batches 1 --top 64
every_plan "plan max micro-batches 1" ' m=1 '
ok "plan search mode" plan examples/configs/tiny.yaml "$PLANF" --search-mode recursive_programming --top 1
has_match "plan search mode top" '^ 1\. dp='

# --json: one object a plan a line, then the cuts; the first plan is the table's
ok "plan table for json" plan examples/configs/tiny.yaml "$PLANF" --top 3
TABLE_TOP=$(printf '%s\n' "$OUT" | sed -nE 's/^ 1\. dp=([0-9]+) tp=([0-9]+) .*/dp=\1 tp=\2/p')
TABLE_CUTS=$(printf '%s\n' "$OUT" | sed -nE 's/^considered ([0-9]+) plans: ([0-9]+) fit,.*/\1 \2/p')
ok "plan json" plan examples/configs/tiny.yaml "$PLANF" --top 3 --json
has_match "plan json keys" '^\{"rank":1,"dp":[0-9]+,"tp":[0-9]+,"pp":[0-9]+,"cp":[0-9]+,"sp":(true|false),"cp_algo":("[a-z]+"|null),"schedule":("[a-z0-9-]+"|null),"chunks":[0-9]+,"zero":[0-2],"micro_batches":[0-9]+,"micro_batch_size":[0-9]+,"recompute":"none","dtype":"f32","step_s":[0-9.e+-]+,"memory_bytes":[0-9.e+]+,"model_flops":[0-9.e+]+,"hardware_flops":[0-9.e+]+,"model_tflops_per_device":[0-9.e+-]+,"hardware_tflops_per_device":[0-9.e+-]+,"time":\{"compute":[^}]*"bubble":[0-9.e+-]+\},"memory":\{"weights":[^}]*"activations":[0-9.e+]+,"boundaries":[0-9.e+]+\}\}$'
has_match "plan json cuts" '^\{"considered":[0-9]+,"fit":[0-9]+,"shown":3,'
same "plan json dp tp" "$(printf '%s\n' "$OUT" | sed -nE 's/^\{"rank":1,"dp":([0-9]+),"tp":([0-9]+),.*/dp=\1 tp=\2/p')" "$TABLE_TOP"
same "plan json cuts = table" "$(printf '%s\n' "$OUT" | sed -nE 's/^\{"considered":([0-9]+),"fit":([0-9]+),.*/\1 \2/p')" "$TABLE_CUTS"
if [ -x /usr/bin/python3 ]; then
    # every line parses; 3 plans + the cuts; each plan's micro-batch size x dp x micro-batches is the batch (8)
    JSON_CHECK=$(printf '%s\n' "$OUT" | /usr/bin/python3 -c 'import json,sys
L = [json.loads(l) for l in sys.stdin]
print(len(L), ",".join(L[0]), ",".join(L[0]["time"]), ",".join(L[0]["memory"]),
      all(p["micro_batch_size"] * p["dp"] * p["micro_batches"] == 8 for p in L[:-1]), "rank" not in L[-1])' 2>&1)
    same "plan json parses" "$JSON_CHECK" "4 rank,dp,tp,pp,cp,sp,cp_algo,schedule,chunks,zero,micro_batches,micro_batch_size,recompute,dtype,step_s,memory_bytes,model_flops,hardware_flops,model_tflops_per_device,hardware_tflops_per_device,time,memory compute,tp_comm,cp_comm,pp_comm,dp_comm,critical,shared,bubble weights,grads,optimizer,activations,boundaries True True"
fi

bad_says "plan fix value" "--fix dp=x: 'x' is not an integer in [1, " plan examples/configs/tiny.yaml "$PLANF" --fix dp=x
bad_says "plan fix name" "--fix ep=2: unknown degree (dp, tp, cp, pp)" plan examples/configs/tiny.yaml "$PLANF" --fix ep=2
bad_says "plan fix form" "--fix tp: expected NAME=N (dp, tp, cp, pp)" plan examples/configs/tiny.yaml "$PLANF" --fix tp
bad_says "plan fix twice" "--fix tp: given twice" plan examples/configs/tiny.yaml "$PLANF" --fix tp=2,tp=2
bad_says "plan fix divides" "--fix tp=3: 3 does not divide the cluster's 8 devices" plan examples/configs/tiny.yaml "$PLANF" --fix tp=3
bad_says "plan fix product" "the fixed degrees multiply to 16, which does not divide the cluster's 8 devices" \
    plan examples/configs/tiny.yaml "$PLANF" --fix dp=4,tp=4
bad_says "plan fix mode" "--fix: fixed degrees need --search-mode sharding_propagation" \
    plan examples/configs/tiny.yaml "$PLANF" --fix tp=2 --search-mode dynamic_programming
bad_says "plan layers" "--layers: '0' is not an integer in [1, " \
    plan --cluster "$PLANF" --layers 0 --hidden 64 --heads 4 --kv-heads 2 --ffn 172 --vocab 256 --seq 64 --global-batch 8
bad_says "plan layers over file" "--layers: '0' is not an integer in [1, " plan examples/configs/tiny.yaml "$PLANF" --layers 0
bad_says "plan model flag missing" "missing --kv-heads, --global-batch (or give --model FILE)" \
    plan --cluster "$PLANF" --layers 2 --hidden 64 --heads 4 --ffn 172 --vocab 256 --seq 64
bad_says "plan model divides" "model: hidden (64) must divide by heads (4) and heads by kv_heads (3)" \
    plan --cluster "$PLANF" --layers 2 --hidden 64 --heads 4 --kv-heads 3 --ffn 172 --vocab 256 --seq 64 --global-batch 8
bad_says "plan no cluster" "plan: no cluster: give --cluster FILE" plan --model examples/configs/tiny.yaml
bad_says "plan files twice" "and --model names one again" plan examples/configs/tiny.yaml "$PLANF" --model examples/configs/tiny.yaml
bad_says "plan schedule" 'pipeline schedule "dualpipe" is unknown; accepted: gpipe, 1f1b, interleaved' \
    plan examples/configs/tiny.yaml "$PLANF" --schedule dualpipe
bad_says "plan schedule empty" "--schedule: empty entry in '1f1b,'" plan examples/configs/tiny.yaml "$PLANF" --schedule 1f1b,
bad_says "plan max micro-batches" "--max-micro-batches: '0' is not an integer in [1, 65536]" \
    plan examples/configs/tiny.yaml "$PLANF" --max-micro-batches 0
bad_says "plan search mode" "--search-mode: unknown search_mode 'greedy'" plan examples/configs/tiny.yaml "$PLANF" --search-mode greedy
bad_says "plan json value" "option --json takes no value" plan examples/configs/tiny.yaml "$PLANF" --json=1

# docs/validation.md: published runs against the planner (Narayanan et al. 2021, "Efficient Large-Scale
# Language Model Training on GPU Clusters Using Megatron-LM", SC21, Table 1: achieved teraFLOP/s per
# A100 80GB GPU). Each run's configuration fits 80 GiB, its predicted TFLOP/s (Megatron's count, with
# the recomputation: hardware_tflops_per_device) is within 25% of the published figure, and the
# planner's free pick is not predicted slower.
json_field() { printf '%s\n' "$OUT" | head -1 | sed -nE "s/.*\"$1\":([0-9.e+-]+).*/\1/p"; }
validate_run() { # NAME PUBLISHED_TFLOPS DEVICES FIX MODEL...
    local name=$1 published=$2 devices=$3 fix=$4 tf mem step pick
    shift 4
    ok "validation $name" plan --cluster examples/clusters/a100-80gb.yaml --devices "$devices" "$@" --dtype bf16 \
        --recompute full --max-zero 0 --no-sp --fix "$fix" --micro-batch-size 1 --schedule 1f1b --top 1 --json
    tf=$(json_field hardware_tflops_per_device) mem=$(json_field memory_bytes) step=$(json_field step_s)
    if awk -v t="$tf" -v p="$published" -v m="$mem" 'BEGIN { e = t / p - 1; exit !(t != "" && e <= 0.25 && e >= -0.25 && m > 0 && m <= 80 * 2^30) }'; then
        pass; else fail "validation $name: predicted $tf TFLOP/s against $published published, $mem bytes (cap 80 GiB)"; fi
    ok "validation $name pick" plan --cluster examples/clusters/a100-80gb.yaml --devices "$devices" "$@" --dtype bf16 \
        --recompute all --schedule all --max-micro-batches 512 --top 1 --json
    pick=$(json_field step_s)
    if awk -v a="$pick" -v b="$step" 'BEGIN { exit !(a != "" && a <= b) }'; then pass; else
        fail "validation $name: the pick's step $pick s is slower than the run's $step s"; fi
}
GPT=(--vocab 51200 --seq 2048) # GPT's MLP as SwiGLU of the same weights: ffn = 8h/3 rounded up to 64
validate_run 18B 135 256 dp=32,tp=8,pp=1 --layers 40 --hidden 6144 --heads 48 --kv-heads 48 --ffn 16384 "${GPT[@]}" --global-batch 1024
validate_run 530B 163 2520 dp=9,tp=8,pp=35 --layers 105 --hidden 20480 --heads 128 --kv-heads 128 --ffn 54656 "${GPT[@]}" --global-batch 2520
validate_run 1T 163 3072 dp=6,tp=8,pp=64 --layers 128 --hidden 25600 --heads 160 --kv-heads 160 --ffn 68288 "${GPT[@]}" --global-batch 3072
# the pipeline's buffers of the 1T run: 64 micro-batches in flight on the first stage, not its 512 (4 a
# micro-batch: input, output, their gradients; 2048 tokens x 25600 in bf16)
ok "validation 1T buffers" plan --cluster examples/clusters/a100-80gb.yaml --layers 128 --hidden 25600 --heads 160 \
    --kv-heads 160 --ffn 68288 "${GPT[@]}" --global-batch 3072 --dtype bf16 --recompute full --max-zero 0 --no-sp \
    --fix dp=6,tp=8,pp=64 --micro-batch-size 1 --schedule 1f1b --top 1 --json
same "validation 1T buffers bytes" "$(json_field boundaries)" "$((64 * 4 * 2048 * 25600 * 2))"
# Two more reports (docs/validation.md), each run's own flags in RUN, its model in MODEL. FIELD step_s:
# PUBLISHED is the run's seconds a step (throughput error = published / predicted - 1); else TFLOP/s.
validate_report() { # NAME CLUSTER DEVICES FIELD PUBLISHED
    local name=$1 cluster=$2 devices=$3 field=$4 published=$5 got mem step pick
    ok "validation $name" plan --cluster "$cluster" --devices "$devices" "${MODEL[@]}" --dtype bf16 "${RUN[@]}" --top 1 --json
    got=$(json_field "$field") mem=$(json_field memory_bytes) step=$(json_field step_s)
    if awk -v t="$got" -v p="$published" -v f="$field" -v m="$mem" 'BEGIN { if (t == "" || t <= 0) exit 1
        e = f == "step_s" ? p / t - 1 : t / p - 1; exit !(e <= 0.25 && e >= -0.25 && m > 0 && m <= 80 * 2^30) }'; then
        pass; else fail "validation $name: predicted $field $got against $published published, $mem bytes (cap 80 GiB)"; fi
    ok "validation $name pick" plan --cluster "$cluster" --devices "$devices" "${MODEL[@]}" --dtype bf16 \
        --recompute all --schedule all --max-micro-batches 512 --top 1 --json
    pick=$(json_field step_s)
    if awk -v a="$pick" -v b="$step" 'BEGIN { exit !(a != "" && a <= b) }'; then pass; else
        fail "validation $name: the pick's step $pick s is slower than the run's $step s"; fi
}
# Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models" (MLSys 2023,
# arXiv:2205.05198), Table 5: GPT-3 175B on 64 A100 80GB, tp 8, pp 8, batch 64, sequence parallel and
# selective recomputation, 13.75 s an iteration end to end (the table's figure as calculon-ai/calculon's
# calculon/llm/validation.py quotes it); interleaved over 3 chunks as calculon's validation/175B_seqsel.json
MODEL=(--layers 96 --hidden 12288 --heads 96 --kv-heads 96 --ffn 32768 "${GPT[@]}" --global-batch 64)
RUN=(--recompute selective --max-zero 0 --fix dp=1,tp=8,pp=8 --micro-batch-size 1 --schedule interleaved --chunks 3)
validate_report "Korthikanti 175B" examples/clusters/a100-80gb.yaml 64 step_s 13.75
# BLOOM-176B (BigScience; bigscience-workshop/bigscience train/tr11-176B-ml: the slurm script's tp 4, pp 12,
# micro-batch 2, batch 2048, bf16, activation checkpointing, the BF16 optimizer's own ZeRO-1, 48 nodes of 8;
# the README's log line at iteration 85376: 104.70 s, "TFLOPs: 149.77", Megatron's count with recomputation).
# 70 layers + the tied embedding counted as a block on the first and the last stage (the run's
# 'type:transformer|embedding' partition: 6 units a stage) = 72 layers of 12 stages.
MODEL=(--layers 72 --hidden 14336 --heads 112 --kv-heads 112 --ffn 38272 --vocab 250880 --seq 2048 --global-batch 2048)
RUN=(--recompute full --max-zero 1 --no-sp --fix dp=8,tp=4,pp=12 --micro-batch-size 2 --schedule 1f1b)
validate_report "BLOOM-176B" examples/clusters/jean-zay-a100-80gb.yaml 384 hardware_tflops_per_device 149.77
# the searched kinds: zb1p (and looped_bfs) over 2 to 4 chunks, or the given --chunks; zbv over 2 (GPT-3 175B)
G175=(--layers 96 --hidden 12288 --heads 96 --kv-heads 96 --ffn 32768 "${GPT[@]}")
ok "plan zb1p" plan --cluster examples/clusters/a100-80gb.yaml --devices 64 "${G175[@]}" --global-batch 64 --dtype bf16 \
    --fix dp=1,tp=8,pp=8 --schedule zb1p --max-micro-batches 64 --top 3 --json
if printf '%s\n' "$OUT" | grep '"rank"' | grep -vq '"schedule":"zb1p","chunks":[234],'; then fail "plan --schedule zb1p: $OUT"
elif ! printf '%s\n' "$OUT" | grep -q '"rank"'; then fail "plan --schedule zb1p: no plan"; else pass; fi
ok "plan zb1p chunks 3" plan --cluster examples/clusters/a100-80gb.yaml --devices 64 "${G175[@]}" --global-batch 64 \
    --dtype bf16 --recompute all --fix dp=1,tp=8,pp=8 --schedule zb1p,looped_bfs --chunks 3 --max-micro-batches 64 --top 64 --json
if printf '%s\n' "$OUT" | grep '"rank"' | grep -Evq '"schedule":"(zb1p|looped_bfs)","chunks":3,'; then fail "plan --chunks 3: $OUT"
elif ! printf '%s\n' "$OUT" | grep -q '"schedule":"looped_bfs"'; then fail "plan --chunks 3: no looped_bfs plan"; else pass; fi
ok "plan zbv" plan --cluster examples/clusters/a100-80gb.yaml --devices 64 "${G175[@]}" --global-batch 64 --dtype bf16 \
    --fix dp=1,tp=8,pp=8 --schedule zbv --max-micro-batches 64 --top 3 --json
if printf '%s\n' "$OUT" | grep '"rank"' | grep -vq '"schedule":"zbv","chunks":2,'; then fail "plan --schedule zbv: $OUT"
elif ! printf '%s\n' "$OUT" | grep -q '"rank"'; then fail "plan --schedule zbv: no plan"; else pass; fi
bad_says "plan chunks" "--chunks: '1' is not an integer in [2, 64]" plan examples/configs/tiny.yaml "$PLANF" --chunks 1
bad_says "plan devices" "--devices: cluster: devices_per_node is 8; it must divide devices (12)" \
    plan --cluster examples/clusters/a100-80gb.yaml --devices 12 "${TINY_FLAGS[@]}"
bad_says "plan micro-batch size" "micro-batches of 3 samples" plan examples/configs/tiny.yaml "$PLANF" --micro-batch-size 3
bad_says "plan max zero" "--max-zero: '3' is not an integer in [0, 2]" plan examples/configs/tiny.yaml "$PLANF" --max-zero 3
ok "plan no sp max zero" plan examples/configs/tiny.yaml "$PLANF" --no-sp --max-zero 0 --top 64
every_plan "plan no sp, zero 0" ' m=[0-9]+ zero=0'
if plan_lines | grep -q ' sp '; then fail "plan --no-sp: a plan with sp"; else pass; fi
ok "plan micro-batch size 2" plan examples/configs/tiny.yaml "$PLANF" --micro-batch-size 2 --top 64 --json
if printf '%s\n' "$OUT" | grep '"rank"' | grep -vq '"micro_batch_size":2,'; then fail "plan --micro-batch-size 2: $OUT"; else pass; fi
printf 'devices: 8\ndevices_per_node: 3\nintra_node_bandwidth: 100G\nmemory_per_device: 16Gi\nflops_per_device: 1e14\n' >"$PLANF"
bad_says "plan cluster" "devices_per_node is 3; it must divide devices (8)" plan examples/configs/tiny.yaml "$PLANF"
printf 'devices 4\nop up matmul [16,8] [8,32] params=1\nop down matmul [16,32] [32,8] params=1\nedge up -> down.0\n' >"$PLANF"
ok "graph" graph "$PLANF" --search-mode sharding_propagation
has_match "graph total" '^total cost=.* memory=[0-9]+B per device$'
bad_says "graph mode" "unknown search_mode 'greedy'" graph "$PLANF" --search-mode greedy
printf 'devices 4\nop a softmax [4,4]\nop b softmax [4,4]\nedge a -> b.0\nedge b -> a.0\n' >"$PLANF"
bad_says "graph cycle" "cycle through op" graph "$PLANF"
printf 'devices 4\nop a softmax [4,4]\nedge a -> c.0\n' >"$PLANF"
bad_says "graph dangling" "dangling edge a -> c.0: no op 'c'" graph "$PLANF"
ok "calibrate" calibrate --ranks 2 --gemm 64
has_match "calibrate devices" '^devices: 2$'
has_match "calibrate flops" '^flops_per_device: [0-9.e+]+$'
has_match "calibrate attention" '^attention_rate: [0-9.e+]+$'
has_match "calibrate cores" '^node_parallelism: [0-9]+$'
printf '%s\n' "$OUT" >"$PLANF"
ok "plan from a calibration" plan examples/configs/tiny.yaml "$PLANF" --top 1
bad_says "calibrate ranks" "is not an integer in [1, 256]" calibrate --ranks 0
bad_says "calibrate head dim" "is not an integer in [1, 256]" calibrate --head-dim 512
ok "calibrate for a model" calibrate --ranks 2 --model examples/configs/tiny.yaml
has_match "calibrate for a model devices" '^devices: 2$'
printf 'model:\n  model_config:\n    hidden_size: 0\n' >"$PLANF"
bad_says "calibrate model" "num_layers is missing" calibrate --model "$PLANF"
rm -f "$PLANF"

NASTY_CLUSTER=$(mktemp)
printf 'devices: 8\nintra_node_bandwidth: 100G\nmemory_per_device: 16Gi\nflops_per_device: 1e14\n' >"$NASTY_CLUSTER"
nasty=("" "-1" "99999999999999999999" "((" "None" "[-1,-1] partial=" "1e400"
       "$(printf '%0300d' 7)" "((((((((((((((((((((((((((((((((((((((((" "8x0" $'1\n2')
commands=(
    'layout --mesh 2,4 --shape 8,16 --map [1,0] --dtype f32'
    'strategy --op matmul --devices 8 --shapes 16x32,32x64 --strategy ((2,1),(1,4)) --param 1'
    'strategy --op reshape --devices 4 --shapes 8x16 --strategy ((4,1),) --out-shape 8,4,4'
    'strategy --op reduce_mean --devices 4 --shapes 8x16 --strategy ((1,4),) --axes 1 --keep-dims'
    'strategies --op batch_matmul --devices 4 --shapes 2x8x16,2x16x8'
    'redistribute --mesh 2,4 --shape 8,16 --from [1,-1] --to [-1,0] --latency 0=1,1=2 --bandwidth 1'
    'redistribute --mesh tp=4 --shape 2,8,32 --from [None,None,tp] --to [None,None,tp,None] --to-shape 2,8,4,8'
    'pipeline --schedule interleaved --stages 2 --micro-batches 4 --chunks 2'
    "plan --cluster $NASTY_CLUSTER --layers 2 --hidden 64 --heads 4 --kv-heads 2 --ffn 172 --vocab 256 --seq 64 --global-batch 8 --fix tp=2 --schedule 1f1b,gpipe --max-micro-batches 4 --top 2"
)
for c in "${commands[@]}"; do
    read -r -a argv <<<"$c"
    bad_runs=""
    for ((i = 2; i < ${#argv[@]}; i++)); do
        [[ "${argv[i - 1]}" == --* ]] || continue
        for v in "${nasty[@]}"; do
            mutated=("${argv[@]}")
            mutated[i]=$v
            run "${mutated[@]}"
            if ! { [ "$RC" -eq 0 ] && [ -z "$ERR" ]; } &&
                ! { [ "$RC" -eq 2 ] && [[ "$ERR" == error:\ ?* && "$ERR" != *$'\n'* ]]; }; then
                bad_runs+=" [${mutated[*]}: exit $RC, stderr ${ERR:0:200}]"
            fi
        done
    done
    if [ -z "$bad_runs" ]; then pass; else fail "nasty values in '$c':$bad_runs"; fi
done

rm -f "$NASTY_CLUSTER"

echo "cli: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
