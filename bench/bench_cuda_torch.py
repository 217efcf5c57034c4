"""bench/bench_cuda_torch.py - PyTorch's scaled_dot_product_attention (and a
matmul) on the same GPU and shapes as build/bench_cuda, for the side-by-side
ratio `make bench-cuda` prints. Causal, batch 1, 32 query heads, 8 kv heads
(expanded to 32 for SDPA, which is how GQA reaches it), head dim 128.
Median of `reps` timed calls after two warm-ups, CUDA events.
Then a Llama training step (RMSNorm, RoPE, GQA through SDPA, SwiGLU, cross-entropy,
AdamW; written here, eager mode, no torch.compile) on the two shapes `make bench-cuda`
trains build/train_cuda on, in f32 and in bf16 autocast (f32 master weights): the
median tokens/s of steps 2.. -- what a PyTorch user gets on this GPU.
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

def llama_step_rate(dim, layers, heads, kv, ffn, seq, batch, vocab, autocast_bf16, steps=12):
    """tokens/s of eager training steps of a Llama of this shape (random tokens)."""
    hd = dim // heads
    dev = 'cuda'
    g = torch.Generator(device=dev).manual_seed(1)
    def mat(o, i): return (torch.randn(o, i, device=dev, generator=g) * 0.02).requires_grad_()
    def ones(n): return torch.ones(n, device=dev).requires_grad_()
    p = {'emb': mat(vocab, dim), 'head': mat(vocab, dim), 'norm': ones(dim)}
    for l in range(layers):
        p.update({f'{l}.n1': ones(dim), f'{l}.n2': ones(dim), f'{l}.q': mat(heads * hd, dim),
                  f'{l}.k': mat(kv * hd, dim), f'{l}.v': mat(kv * hd, dim), f'{l}.o': mat(dim, heads * hd),
                  f'{l}.gate': mat(ffn, dim), f'{l}.up': mat(ffn, dim), f'{l}.down': mat(dim, ffn)})
    opt = torch.optim.AdamW(list(p.values()), lr=1e-3, fused=True)
    inv = 1.0 / (10000.0 ** (torch.arange(0, hd, 2, device=dev).float() / hd))
    ang = torch.outer(torch.arange(seq, device=dev).float(), inv)
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
    def rms(x, w): return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5).to(x.dtype) * w
    def rope(x): return x * cos + torch.cat([-x[..., hd // 2:], x[..., :hd // 2]], -1) * sin
    def forward(ids, tgt):
        x = p['emb'][ids]
        for l in range(layers):
            h = rms(x, p[f'{l}.n1'])
            q = (h @ p[f'{l}.q'].t()).view(batch, seq, heads, hd).transpose(1, 2)
            k = (h @ p[f'{l}.k'].t()).view(batch, seq, kv, hd).transpose(1, 2)
            v = (h @ p[f'{l}.v'].t()).view(batch, seq, kv, hd).transpose(1, 2)
            q, k = rope(q), rope(k)
            k, v = k.repeat_interleave(heads // kv, 1), v.repeat_interleave(heads // kv, 1)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(batch, seq, dim)
            x = x + a @ p[f'{l}.o'].t()
            h = rms(x, p[f'{l}.n2'])
            x = x + (F.silu(h @ p[f'{l}.gate'].t()) * (h @ p[f'{l}.up'].t())) @ p[f'{l}.down'].t()
        logits = rms(x, p['norm']) @ p['head'].t()
        return F.cross_entropy(logits.float().view(-1, vocab), tgt.reshape(-1))
    times = []
    for step in range(steps):
        ids = torch.randint(0, vocab, (batch, seq + 1), device=dev, generator=g)
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        opt.zero_grad(set_to_none=True)
        with torch.autocast('cuda', dtype=torch.bfloat16, enabled=autocast_bf16):
            loss = forward(ids[:, :-1], ids[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(p.values()), 1.0)
        opt.step()
        e1.record(); e1.synchronize()
        times.append(e0.elapsed_time(e1))
    after = sorted(times[2:])
    return batch * seq / (after[len(after) // 2] / 1e3)

def train(name, dim, layers, heads, kv, ffn, seq, batch, vocab=256):
    for dt, bf16 in (("f32", False), ("bf16", True)):
        torch.backends.cuda.matmul.allow_tf32 = False
        rate = llama_step_rate(dim, layers, heads, kv, ffn, seq, batch, vocab, bf16)
        print(json.dumps({"bench": "cuda_torch", "op": "train", "model": name, "dtype": dt,
                          "tokens_per_s": round(rate, 1)}), flush=True)

print("torch", torch.__version__, torch.cuda.get_device_name(0), file=sys.stderr)
gemm(4096, torch.float32, "f32", False)
gemm(4096, torch.float32, "f32-tf32", True)
gemm(4096, torch.bfloat16, "bf16", False)
gemm(8192, torch.bfloat16, "bf16", False)
gemm(8192, torch.float16, "f16", False)
for seq in (1024, 4096, 16384):
    attention(seq, torch.bfloat16, "bf16")
attention(4096, torch.float32, "f32")
train("bench", 256, 4, 8, 4, 688, 256, 8)
train("large", 1024, 8, 16, 4, 2816, 1024, 8)
