#!/usr/bin/python3
"""The PyTorch reference of mixed-precision training (bf16 under CPU autocast,
f16 with dynamic loss scaling): run once, the outputs are committed so the
test needs no torch. Needs Debian's python3-torch only.

    /usr/bin/python3 tests/ref/make_lowp_ref.py          # writes the fixtures below
    /usr/bin/python3 tests/ref/make_lowp_ref.py --check  # recomputes, compares, writes nothing

The model, data and hyperparameters are make_bias_ref.py's bias-free Llama
(examples/configs/gqa_ref.yaml, tests/ref/gqa_init.safetensors,
tests/ref/gqa_data.txt), trained 50 steps instead of 10:

  lowp_f32_expected.txt   f32 throughout: the yardstick of how far 16-bit
                          rounding moves the losses
  lowp_bf16_expected.txt  torch.autocast("cpu", torch.bfloat16): the linears
                          are autocast's bf16 GEMMs (f32 accumulation, bf16
                          output; their weight gradients bf16, cast to f32 for
                          the masters), every other tensor stored in bf16 as
                          Megatron's --bf16 keeps it, computed in f32 from
                          the widened bf16 values and rounded once
  lowp_f16_expected.txt   the same in f16, Megatron's --fp16 way: CPU
                          autocast has no f16 in this torch, so the GEMMs are
                          written out as f32 products of f16-rounded operands,
                          rounded once, and every weight's gradient reaches
                          its f32 master in f32 (Megatron's main_grad,
                          gradient_accumulation_fusion: an f16 weight gradient
                          would overflow where the activations' do not), with
                          torch.cuda.amp.GradScaler's rule written out (this
                          torch has no CPU _amp_update_scale_): initial scale
                          2^24, growth 2 every 4 good steps, backoff 0.5; a
                          step whose gradients hold an inf or nan is skipped
                          (weights and AdamW state untouched, the step count
                          not advanced) and the scale backs off

Each line is "step S loss L gnorm G scale K skipped X" (gnorm before clipping,
of the unscaled gradients; K the scale the step ran with). The f32 masters
and AdamW are torch.optim.AdamW exactly as make_bias_ref.py; clip_grad_norm_
on the unscaled gradients.

Written from the math (Hugging Face Llama, the precision rules above), not from
the trainer's code, so a shared misreading cannot hide.
"""
import math, os, sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_bias_ref as ref  # noqa: E402  the model's sizes, the safetensors reader, the tensor names

HERE = ref.HERE
STEPS = 50
F = torch.nn.functional


def lowp_forward(p, ids, tgt, dt):
    """The mixed-precision forward: r() is a store in the compute type dt."""
    B, T = ids.shape
    HD, EPS = ref.HD, ref.EPS
    r = lambda t: t.to(dt)
    f = lambda t: t.to(torch.float32)
    if dt == torch.bfloat16:
        wq = lambda w: f(r(w))  # the compute copy (its gradient through the cast, as autocast's)
        linear = lambda x, w: F.linear(x, w)  # autocast: bf16 operands, bf16 output
    else:
        wq = lambda w: w + (f(r(w)) - w).detach()  # the f16 copy's values, its gradient straight to the f32 master
        linear = lambda x, w: r(f(x) @ wq(w).t())

    def norm(x, w):
        x = f(x)
        return r(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * wq(w))

    def rope(x):
        inv = 1.0 / (ref.THETA ** (torch.arange(0, HD, 2, dtype=torch.float32) / HD))
        ang = torch.outer(torch.arange(T, dtype=torch.float32), inv)
        emb = torch.cat([ang, ang], -1)
        cos, sin = emb.cos()[None, :, None, :], emb.sin()[None, :, None, :]
        x = f(x)
        x1, x2 = x[..., :HD // 2], x[..., HD // 2:]
        return r(x * cos + torch.cat([-x2, x1], -1) * sin)

    mask = torch.ones(T, T, dtype=torch.bool).tril()
    x = r(wq(p['model.embed_tokens.weight'])[ids])
    for l in range(ref.LAYERS):
        q_ = 'model.layers.%d.' % l
        h = norm(x, p[q_ + 'input_layernorm.weight'])
        q = rope(linear(h, p[q_ + 'self_attn.q_proj.weight']).view(B, T, ref.HEADS, HD)).transpose(1, 2)
        k = rope(linear(h, p[q_ + 'self_attn.k_proj.weight']).view(B, T, ref.KV, HD)).transpose(1, 2)
        v = linear(h, p[q_ + 'self_attn.v_proj.weight']).view(B, T, ref.KV, HD).transpose(1, 2)
        k = k.repeat_interleave(ref.HEADS // ref.KV, dim=1)
        v = v.repeat_interleave(ref.HEADS // ref.KV, dim=1)
        s = (f(q) @ f(k).transpose(-1, -2)) / math.sqrt(HD)  # flash attention: f32 inside, o rounded once
        a = r(torch.softmax(s.masked_fill(~mask, float('-inf')), -1) @ f(v))
        x = r(f(x) + f(linear(a.transpose(1, 2).reshape(B, T, ref.HEADS * HD), p[q_ + 'self_attn.o_proj.weight'])))
        h = norm(x, p[q_ + 'post_attention_layernorm.weight'])
        g = linear(h, p[q_ + 'mlp.gate_proj.weight'])
        u = linear(h, p[q_ + 'mlp.up_proj.weight'])
        m = r(F.silu(f(g)) * f(u))
        x = r(f(x) + f(linear(m, p[q_ + 'mlp.down_proj.weight'])))
    logits = linear(norm(x, p['model.norm.weight']), p['lm_head.weight'])
    return F.cross_entropy(f(logits).reshape(-1, ref.VOCAB), tgt.reshape(-1))


def train(kind):
    init = ref.st_load(os.path.join(HERE, 'gqa_init.safetensors'))
    with open(os.path.join(HERE, 'gqa_data.txt'), 'rb') as fh:
        data = torch.tensor(list(fh.read()), dtype=torch.long)
    samples = (len(data) - 1) // ref.SEQ
    p = {n: t.clone().requires_grad_(True) for n, t in init.items()}
    decay = [t for n, t in sorted(p.items()) if t.dim() >= 2]
    rest = [t for n, t in sorted(p.items()) if t.dim() < 2]
    opt = torch.optim.AdamW([{'params': decay, 'weight_decay': ref.WD}, {'params': rest, 'weight_decay': 0.0}],
                            lr=ref.LR, betas=ref.BETAS, eps=ref.ADAM_EPS)
    scale, good = (2.0 ** 24, 0) if kind == 'f16' else (1.0, 0)
    lines = []
    for step in range(STEPS):
        idx = [(step * ref.BATCH + j) % samples for j in range(ref.BATCH)]  # the trainer's order
        ids = torch.stack([data[i * ref.SEQ:i * ref.SEQ + ref.SEQ] for i in idx])
        tgt = torch.stack([data[i * ref.SEQ + 1:i * ref.SEQ + ref.SEQ + 1] for i in idx])
        opt.zero_grad()
        if kind == 'f32':
            loss = ref.forward(p, ids, tgt)
        elif kind == 'bf16':
            with torch.autocast('cpu', dtype=torch.bfloat16):
                loss = lowp_forward(p, ids, tgt, torch.bfloat16)
        else:
            loss = lowp_forward(p, ids, tgt, torch.float16)
        (loss * scale).backward()
        grads = [t.grad for t in p.values()]
        skipped = 0
        if kind == 'f16':  # GradScaler: unscale, look for inf/nan, step or skip, update the scale
            for g in grads:
                g.mul_(1.0 / scale)
            skipped = int(any(not torch.isfinite(g).all() for g in grads))
        ran_with = scale
        if skipped:
            gnorm = float('inf')
            scale, good = scale * 0.5, 0
        else:
            gnorm = torch.nn.utils.clip_grad_norm_(list(p.values()), ref.CLIP).item()
            opt.step()
            if kind == 'f16':
                good += 1
                if good == 4:
                    scale, good = scale * 2.0, 0
        lines.append('step %d loss %.6f gnorm %.6f scale %.9g skipped %d\n' % (step, loss.item(), gnorm, ran_with,
                                                                              skipped))
    return lines


def main():
    check = sys.argv[1:] == ['--check']
    if sys.argv[1:] and not check:
        sys.exit('usage: make_lowp_ref.py [--check]')
    torch.set_num_threads(1)
    bad = 0
    for kind in ('f32', 'bf16', 'f16'):
        lines = train(kind)
        path = os.path.join(HERE, 'lowp_%s_expected.txt' % kind)
        if check:
            with open(path) as fh:
                same = fh.readlines() == lines
            print('%s: %s' % (path, 'same' if same else 'DIFFERENT'))
            bad += not same
        else:
            with open(path, 'w') as fh:
                fh.writelines(lines)
            sys.stdout.write('%s: %s' % (kind, lines[-1]))
    sys.exit(1 if bad else 0)


if __name__ == '__main__':
    main()
