"""bench/bench_cuda_torch.py - PyTorch's scaled_dot_product_attention (and a
matmul) on the same GPU and shapes as build/bench_cuda, for the side-by-side
ratio `make bench-cuda` prints. Causal, batch 1, 32 query heads, 8 kv heads
(expanded to 32 for SDPA, which is how GQA reaches it), head dim 128.
Median of `reps` timed calls after two warm-ups, CUDA events.
Prints JSON lines {"bench":"cuda_torch",...}."""
import json, sys
import torch
import torch.nn.functional as F

reps = int(sys.argv[1]) if len(sys.argv) > 1 else 10

def median_ms(fn):
    fn(); fn(); torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record(); fn(); e1.record(); e1.synchronize()
        times.append(e0.elapsed_time(e1))
    times.sort()
    return times[len(times) // 2]

def attention(seq, dtype, name):
    q = (torch.rand(1, 32, seq, 128, device='cuda', dtype=dtype) - 0.5).requires_grad_()
    k = (torch.rand(1, 8, seq, 128, device='cuda', dtype=dtype) - 0.5)
    v = (torch.rand(1, 8, seq, 128, device='cuda', dtype=dtype) - 0.5)
    k = k.repeat_interleave(4, dim=1).requires_grad_()
    v = v.repeat_interleave(4, dim=1).requires_grad_()
    fwd = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)
    o = fwd()
    do = torch.rand_like(o) - 0.5
    fwd_ms = median_ms(fwd)
    o = fwd()
    bwd_ms = median_ms(lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True))
    flop = 4.0 * seq * seq / 2 * 32 * 128
    print(json.dumps({"bench": "cuda_torch", "op": "attention", "dtype": name, "seq": seq,
                      "fwd_ms": round(fwd_ms, 4), "fwd_tflops": round(flop / fwd_ms / 1e9, 2),
                      "bwd_ms": round(bwd_ms, 4), "bwd_tflops": round(2.5 * flop / bwd_ms / 1e9, 2)}), flush=True)

def gemm(n, dtype, name, tf32):
    torch.backends.cuda.matmul.allow_tf32 = tf32
    a = torch.rand(n, n, device='cuda', dtype=dtype) - 0.5
    b = torch.rand(n, n, device='cuda', dtype=dtype) - 0.5
    ms = median_ms(lambda: a @ b)
    print(json.dumps({"bench": "cuda_torch", "op": "gemm", "variant": name, "n": n, "ms": round(ms, 4),
                      "tflops": round(2.0 * n ** 3 / ms / 1e9, 2)}), flush=True)

print("torch", torch.__version__, torch.cuda.get_device_name(0), file=sys.stderr)
gemm(4096, torch.float32, "f32", False)
gemm(4096, torch.float32, "f32-tf32", True)
gemm(4096, torch.bfloat16, "bf16", False)
gemm(8192, torch.bfloat16, "bf16", False)
gemm(8192, torch.float16, "f16", False)
for seq in (1024, 4096, 16384):
    attention(seq, torch.bfloat16, "bf16")
attention(4096, torch.float32, "f32")
