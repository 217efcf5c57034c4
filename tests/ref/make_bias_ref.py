#!/usr/bin/python3
"""The PyTorch reference of the q/k/v biases (Qwen2's qkv_has_bias): run once,
the outputs are committed so the test needs no torch. Needs Debian's
python3-torch (nothing else: the safetensors files are read and written here).

    /usr/bin/python3 tests/ref/make_bias_ref.py
    /usr/bin/python3 tests/ref/make_bias_ref.py --validate   # this model without biases
        reproduces make_ref.py's gqa_expected.txt and gqa_final.safetensors (writes nothing)
    /usr/bin/python3 tests/ref/make_bias_ref.py --gqa
        the bias-free fixtures instead (what tests/ref/make_ref.py runs): gqa_data.txt,
        gqa_expected.txt and gqa_final.safetensors from gqa_init.safetensors (drawn
        when absent: normal(0, 0.02) matrices, norms 1, generator seed 1234)
    /usr/bin/python3 tests/ref/make_bias_ref.py time --dim D --layers L --heads H --kv K
            --hidden F --seq T --batch B [--vocab V] [--threads N] [--steps S]
        tokens per second of this model's training steps on random tokens (the median
        of steps 1..S; step 0 warms up): "tokens_per_s X" (bench/bench_train.c)
    /usr/bin/python3 tests/ref/make_bias_ref.py --next-step FILE.safetensors
        one step of AdamW from FILE's weights (Hugging Face Llama names, with or without
        the q/k/v biases; any other or missing tensor is an error) on the first batch of
        gqa_data.txt: prints "step 0 loss L gnorm G" (writes nothing). tests/llama/
        test_train.c checks the trainer's consolidated export with it.

Self-contained on purpose: the model is written out below from the Hugging
Face Qwen2 definition (RMSNorm; q/k/v nn.Linear with bias=True, o/gate/up/down
and lm_head without; rotate-half RoPE applied after the biases; GQA causal
softmax attention; SwiGLU; mean next-token cross-entropy), not from the
trainer's code, so a shared misreading cannot hide. The optimizer is
torch.optim.AdamW with weight decay on the tensors of rank >= 2 only (the
trainer's rule: norms and biases undecayed), clip_grad_norm_ before it.

Writes into tests/ref/ (the data is gqa_data.txt, made by make_ref.py):
  qkvb_init.safetensors    initial weights, Hugging Face Qwen2 names: normal(0, 0.02)
                           matrices, norms 1, biases uniform(-0.5, 0.5) (large, so
                           a bias that is dropped, mis-split or decayed shows)
  qkvb_expected.txt        per-step lines "step S loss L gnorm G" (gnorm before clipping)
  qkvb_final.safetensors   the weights after the 10 steps

The model and hyperparameters are examples/configs/gqa_ref.yaml's with
model.model_config.qkv_has_bias=true.
"""
import json, math, os, struct, sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
VOCAB, DIM, LAYERS, HEADS, KV, FFN, SEQ, BATCH = 256, 32, 2, 4, 2, 88, 16, 4
EPS, THETA, LR, BETAS, ADAM_EPS, WD, CLIP, STEPS = 1e-5, 10000.0, 1e-3, (0.9, 0.95), 1e-8, 0.1, 1.0, 10
HD = DIM // HEADS


def st_save(path, tensors):
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().to(torch.float32)
        raw = t.numpy().tobytes() if hasattr(t, 'numpy') else bytes(t.untyped_storage())
        header[name] = {'dtype': 'F32', 'shape': list(t.shape), 'data_offsets': [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(',', ':')).encode()
    h += b' ' * (-len(h) % 8)
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(h)) + h + b''.join(blobs))


def st_load(path):
    with open(path, 'rb') as f:
        data = f.read()
    n = struct.unpack('<Q', data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, d in header.items():
        if name == '__metadata__':
            continue
        assert d['dtype'] in ('F32', 'BF16'), (name, d['dtype'])
        a, b = d['data_offsets']
        buf = data[8 + n + a:8 + n + b]
        if d['dtype'] == 'BF16':  # a bf16 is the top half of an f32: widen exactly
            buf = struct.pack('<%dI' % (len(buf) // 2), *(h << 16 for h in struct.unpack('<%dH' % (len(buf) // 2), buf)))
        vals = struct.unpack('<%df' % (len(buf) // 4), buf)
        out[name] = torch.tensor(vals, dtype=torch.float32).reshape(d['shape'])
    return out


def names():
    out = {'model.embed_tokens.weight': (VOCAB, DIM), 'model.norm.weight': (DIM,), 'lm_head.weight': (VOCAB, DIM)}
    for l in range(LAYERS):
        p = 'model.layers.%d.' % l
        out.update({p + 'input_layernorm.weight': (DIM,), p + 'post_attention_layernorm.weight': (DIM,),
                    p + 'self_attn.q_proj.weight': (HEADS * HD, DIM), p + 'self_attn.q_proj.bias': (HEADS * HD,),
                    p + 'self_attn.k_proj.weight': (KV * HD, DIM), p + 'self_attn.k_proj.bias': (KV * HD,),
                    p + 'self_attn.v_proj.weight': (KV * HD, DIM), p + 'self_attn.v_proj.bias': (KV * HD,),
                    p + 'self_attn.o_proj.weight': (DIM, HEADS * HD), p + 'mlp.gate_proj.weight': (FFN, DIM),
                    p + 'mlp.up_proj.weight': (FFN, DIM), p + 'mlp.down_proj.weight': (DIM, FFN)})
    return out


def rmsnorm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w


def rope(x):  # x [B, T, H, HD]: Hugging Face rotate_half with positions 0..T-1
    inv = 1.0 / (THETA ** (torch.arange(0, HD, 2, dtype=torch.float32) / HD))
    ang = torch.outer(torch.arange(x.shape[1], dtype=torch.float32), inv)
    emb = torch.cat([ang, ang], -1)
    cos, sin = emb.cos()[None, :, None, :], emb.sin()[None, :, None, :]
    x1, x2 = x[..., :HD // 2], x[..., HD // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def forward(p, ids, tgt):
    B, T = ids.shape
    x = p['model.embed_tokens.weight'][ids]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(LAYERS):
        q_ = 'model.layers.%d.' % l
        h = rmsnorm(x, p[q_ + 'input_layernorm.weight'])
        lin = lambda n: h @ p[q_ + 'self_attn.%s_proj.weight' % n].t() + p.get(q_ + 'self_attn.%s_proj.bias' % n, 0.0)
        q = rope(lin('q').view(B, T, HEADS, HD)).transpose(1, 2)
        k = rope(lin('k').view(B, T, KV, HD)).transpose(1, 2)
        v = lin('v').view(B, T, KV, HD).transpose(1, 2)
        k = k.repeat_interleave(HEADS // KV, dim=1)  # query head h reads kv head h // (HEADS / KV)
        v = v.repeat_interleave(HEADS // KV, dim=1)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(HD)
        a = torch.softmax(s.masked_fill(~mask, float('-inf')), -1) @ v
        x = x + a.transpose(1, 2).reshape(B, T, HEADS * HD) @ p[q_ + 'self_attn.o_proj.weight'].t()
        h = rmsnorm(x, p[q_ + 'post_attention_layernorm.weight'])
        g = h @ p[q_ + 'mlp.gate_proj.weight'].t()
        u = h @ p[q_ + 'mlp.up_proj.weight'].t()
        x = x + (torch.nn.functional.silu(g) * u) @ p[q_ + 'mlp.down_proj.weight'].t()
    logits = rmsnorm(x, p['model.norm.weight']) @ p['lm_head.weight'].t()
    return torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), tgt.reshape(-1))


def make_data(path):
    """500 bytes: 31 samples of 16, so 10 steps of batch 4 wrap around to the beginning."""
    import random
    words = ('the layout of a tensor says which device dims split each of its dims and over which the values '
             'are partial sums a plan moves data between layouts with the fewest bytes').split()
    rng = random.Random(7)
    text = ''
    while len(text) < 500:
        text += ' '.join(rng.choice(words) for _ in range(rng.randint(4, 11))) + '.\n'
    with open(path, 'wb') as f:
        f.write(text[:500].encode())


def time_steps(argv):
    """The `time` mode: this model at another shape, random init and tokens."""
    import argparse, time
    global VOCAB, DIM, LAYERS, HEADS, KV, FFN, SEQ, BATCH, HD
    ap = argparse.ArgumentParser(prog='make_bias_ref.py time')
    for k, d in (('dim', 32), ('layers', 2), ('heads', 4), ('kv', 2), ('hidden', 88), ('seq', 16), ('batch', 4),
                 ('vocab', 256), ('threads', 1), ('steps', 4)):
        ap.add_argument('--' + k, type=int, default=d)
    a = ap.parse_args(argv)
    if min(a.dim, a.layers, a.heads, a.kv, a.hidden, a.seq, a.batch, a.vocab, a.threads) < 1 or a.steps < 2 or \
            a.dim % a.heads or a.heads % a.kv or (a.dim // a.heads) % 2:
        sys.exit('make_bias_ref.py time: positive sizes, steps >= 2, dim divisible by heads (even head dim), '
                 'heads by kv')
    VOCAB, DIM, LAYERS, HEADS, KV, FFN, SEQ, BATCH = a.vocab, a.dim, a.layers, a.heads, a.kv, a.hidden, a.seq, a.batch
    HD = DIM // HEADS
    torch.set_num_threads(a.threads)
    g = torch.Generator().manual_seed(1)
    p = {n: (torch.randn(s, generator=g) * 0.02 if len(s) == 2 else torch.ones(s)).requires_grad_(True)
         for n, s in names().items() if not n.endswith('.bias')}
    opt = torch.optim.AdamW(list(p.values()), lr=LR, betas=BETAS, eps=ADAM_EPS, weight_decay=WD)
    rates = []
    for step in range(a.steps):
        ids = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=g)
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = forward(p, ids[:, :-1], ids[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(p.values()), CLIP)
        opt.step()
        rates.append(BATCH * SEQ / (time.perf_counter() - t0))
    after = sorted(rates[1:])
    print('tokens_per_s %.1f' % after[len(after) // 2])


def main():
    if sys.argv[1:2] == ['time']:
        return time_steps(sys.argv[2:])
    torch.set_num_threads(1)
    validate = sys.argv[1:] == ['--validate']
    gqa = sys.argv[1:] == ['--gqa']
    next_step = len(sys.argv) == 3 and sys.argv[1] == '--next-step'
    if not (validate or gqa or next_step or len(sys.argv) == 1):
        sys.exit('usage: make_bias_ref.py [--validate | --gqa | --next-step FILE.safetensors | time ...]')
    if next_step:  # strict names: exactly this model's tensors, biases optional
        init = st_load(sys.argv[2])
        want = {n: s for n, s in names().items() if not (n.endswith('.bias') and n not in init)}
        extra, missing = sorted(set(init) - set(want)), sorted(set(want) - set(init))
        bad = [n for n in want if n in init and tuple(init[n].shape) != want[n]]
        if extra or missing or bad:
            sys.exit('%s: unexpected %s, missing %s, other shapes %s' % (sys.argv[2], extra, missing, bad))
    elif validate:  # this script's model without biases must reproduce make_ref.py's fixtures
        init = st_load(os.path.join(HERE, 'gqa_init.safetensors'))
    elif gqa:  # the bias-free fixtures: the committed init is kept, so a rerun reproduces the committed files
        make_data(os.path.join(HERE, 'gqa_data.txt'))
        path = os.path.join(HERE, 'gqa_init.safetensors')
        if not os.path.exists(path):
            g = torch.Generator().manual_seed(1234)
            st_save(path, {n: torch.randn(s, generator=g) * 0.02 if len(s) == 2 else torch.ones(s)
                           for n, s in sorted(names().items()) if not n.endswith('.bias')})
        init = st_load(path)
    else:
        g = torch.Generator().manual_seed(4321)
        init = {}
        for name, shape in sorted(names().items()):
            if name.endswith('.bias'):
                init[name] = torch.rand(shape, generator=g) - 0.5
            elif len(shape) == 2:
                init[name] = torch.randn(shape, generator=g) * 0.02
            else:
                init[name] = torch.ones(shape)
        st_save(os.path.join(HERE, 'qkvb_init.safetensors'), init)
    with open(os.path.join(HERE, 'gqa_data.txt'), 'rb') as f:
        data = torch.tensor(list(f.read()), dtype=torch.long)
    samples = (len(data) - 1) // SEQ
    p = {n: t.clone().requires_grad_(True) for n, t in init.items()}
    decay = [t for n, t in sorted(p.items()) if t.dim() >= 2]
    rest = [t for n, t in sorted(p.items()) if t.dim() < 2]
    opt = torch.optim.AdamW([{'params': decay, 'weight_decay': WD}, {'params': rest, 'weight_decay': 0.0}], lr=LR,
                            betas=BETAS, eps=ADAM_EPS)
    lines = []
    for step in range(1 if next_step else STEPS):
        idx = [(step * BATCH + j) % samples for j in range(BATCH)]  # the trainer's order, no shuffle
        ids = torch.stack([data[i * SEQ:i * SEQ + SEQ] for i in idx])
        tgt = torch.stack([data[i * SEQ + 1:i * SEQ + SEQ + 1] for i in idx])
        opt.zero_grad()
        loss = forward(p, ids, tgt)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(list(p.values()), CLIP)
        opt.step()
        lines.append('step %d loss %.6f gnorm %.6f\n' % (step, loss.item(), gnorm.item()))
        sys.stdout.write(lines[-1])
    if next_step:
        return
    if gqa:
        with open(os.path.join(HERE, 'gqa_expected.txt'), 'w') as f:
            f.writelines(lines)
        st_save(os.path.join(HERE, 'gqa_final.safetensors'), p)
        return
    if validate:
        with open(os.path.join(HERE, 'gqa_expected.txt')) as f:
            want = [[float(w) for w in l.split()[3::2]] for l in f]
        got = [[float(w) for w in l.split()[3::2]] for l in lines]
        rel = max(abs(a - b) / abs(b) for gw, ww in zip(got, want) for a, b in zip(gw, ww))
        final = st_load(os.path.join(HERE, 'gqa_final.safetensors'))
        wdiff = max((p[n].detach() - final[n]).abs().max().item() for n in final)
        print('validate: losses and grad norms within %.2e relative of gqa_expected.txt, weights within %.2e of '
              'gqa_final.safetensors' % (rel, wdiff))
        sys.exit(0 if rel <= 1e-5 and wdiff <= 1e-5 else 1)
    with open(os.path.join(HERE, 'qkvb_expected.txt'), 'w') as f:
        f.writelines(lines)
    st_save(os.path.join(HERE, 'qkvb_final.safetensors'), p)


if __name__ == '__main__':
    main()
