#!/usr/bin/env bash
# tests/cuda/one_gpu_mesh.sh - the GPU checks of many ranks as threads on one GPU
# (par_run_cuda_threads, build/train_cuda --backend cuda-threads), in one call:
#
#   1. build/test_cuda_threads: the comm suite on 2, 4 and 8 ranks on the GPU,
#      reductions bitwise the CPU threads backend, failures, refusals;
#   2. the equivalence table through the GPU trainer (LLAMA_TEST_ONLY=gpu-table):
#      every row against one device on the GPU, five rows against the CPU trainer
#      (per-step loss within 1e-5 relative);
#   3. compute-sanitizer memcheck and racecheck on a tp2 x cp2 row (2 steps),
#      which must report no error.
#
# Run from the repository root on the GPU machine, with the programs built
# beforehand (where mpicc and libyaml exist; -arch for the GPU, e.g. sm_90 for
# H100/H200):
#   make NVCC_ARCH=-arch=sm_90 build/test_cuda_threads build/train_cuda build/train build/llama_test_train
# Libraries the GPU machine lacks (OpenMPI's, libyaml) may be put in build/libs/.
# Each step has a time bound (STEP_TIMEOUT seconds, default 400); the last line
# is "one_gpu_mesh: N passed, N failed" over the steps.
set -u
cd "$(dirname "$0")/../.."
[ -d build/libs ] && export LD_LIBRARY_PATH="$PWD/build/libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
T=${STEP_TIMEOUT:-400}
passed=0 failed=0

step() { # step NAME CMD...: run, show the tail, count
    local name=$1 rc
    shift
    echo "== $name"
    timeout "$T" "$@" >"build/one_gpu_$name.log" 2>&1
    rc=$?
    tail -n 40 "build/one_gpu_$name.log"
    if [ $rc -eq 0 ]; then passed=$((passed + 1)); echo "-- $name: ok"
    else failed=$((failed + 1)); echo "-- $name: FAILED (exit status $rc)"; fi
}

nvidia-smi -L || true
step test_cuda_threads build/test_cuda_threads
step gpu_table env LLAMA_TEST_ONLY=gpu-table TRAIN="build/train_cuda --backend cuda-threads" TRAIN_CPU=build/train \
    build/llama_test_train

# tp2 x cp2 on 4 GPU threads (cp_base of tests/llama/test_train.c), 2 steps
ROW=(--backend cuda-threads --config examples/configs/tiny.yaml --data tests/data/train.txt --quiet --steps 2
     --set model.model_config.num_heads=8 --set model.model_config.n_kv_heads=2
     --set parallel_config.model_parallel=2 --set parallel_config.context_parallel=2
     --set parallel_config.use_seq_parallel=true)
if command -v compute-sanitizer >/dev/null 2>&1; then
    step memcheck compute-sanitizer --tool memcheck --error-exitcode 3 build/train_cuda "${ROW[@]}"
    step racecheck compute-sanitizer --tool racecheck --error-exitcode 3 build/train_cuda "${ROW[@]}"
else
    echo "memcheck, racecheck: skipped (no compute-sanitizer on PATH)"
fi
echo "one_gpu_mesh: $passed passed, $failed failed"
[ $failed -eq 0 ]
