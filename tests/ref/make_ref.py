#!/usr/bin/python3
"""Generate the PyTorch reference fixtures of the trainer test (run once; the
outputs are committed so CI needs no torch). Needs Debian's python3-torch:

    /usr/bin/python3 tests/ref/make_ref.py [--torch-llama ../shared/bench/torch_llama.py]

Writes into tests/ref/:
  gqa_data.txt             the byte stream (500 bytes: 31 samples of 16, so 10 steps
                           of batch 4 wrap around to the beginning)
  gqa_init.safetensors     initial weights, Hugging Face names (normal(0, 0.02), norms 1)
  gqa_expected.txt         torch_llama.py's per-step lines "step S loss L gnorm G"
  gqa_final.safetensors    torch_llama.py's weights after the 10 steps

The model and hyperparameters are examples/configs/gqa_ref.yaml's (GQA: 4 heads,
2 kv heads; clipping on). `--check-load FILE` instead loads FILE (e.g. a --save
output of build/train) into torch_llama.py's model with strict names and shapes.
"""
import argparse, importlib.util, os, random, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = ['--dim', '32', '--layers', '2', '--heads', '4', '--kv', '2', '--hidden', '88', '--seq', '16',
         '--batch', '4', '--vocab', '256']
OPTIM = ['--lr', '1e-3', '--beta1', '0.9', '--beta2', '0.95', '--adam_eps', '1e-8', '--wd', '0.1', '--clip', '1.0',
         '--eps', '1e-5', '--theta', '10000']
STEPS = 10


def load_module(path):
    spec = importlib.util.spec_from_file_location('torch_llama', path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def make_data(path):
    words = ('the layout of a tensor says which device dims split each of its dims and over which the values '
             'are partial sums a plan moves data between layouts with the fewest bytes').split()
    rng = random.Random(7)
    text = ''
    while len(text) < 500:
        text += ' '.join(rng.choice(words) for _ in range(rng.randint(4, 11))) + '.\n'
    with open(path, 'wb') as f:
        f.write(text[:500].encode())


def make_init(tl, path):
    import torch
    g = torch.Generator().manual_seed(1234)
    args = argparse.Namespace(vocab=256, dim=32, layers=2, heads=4, kv=2, hidden=88, seq=16, eps=1e-5, theta=10000.0)
    model = tl.Llama(args)
    tensors = {}
    for name, p in model.state_dict().items():
        if p.dim() >= 2:
            tensors[name] = torch.randn(p.shape, generator=g) * 0.02
        else:
            tensors[name] = torch.ones(p.shape)
    tl.st_save(path, tensors)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--torch-llama', default=os.path.join(HERE, '..', '..', '..', 'shared', 'bench', 'torch_llama.py'))
    ap.add_argument('--check-load')
    a = ap.parse_args()
    tl = load_module(a.torch_llama)
    if a.check_load:
        import torch
        args = argparse.Namespace(vocab=256, dim=32, layers=2, heads=4, kv=2, hidden=88, seq=16, eps=1e-5,
                                  theta=10000.0)
        sd = tl.st_load(a.check_load)
        tl.Llama(args).load_state_dict(sd, strict=True)
        print(f'{a.check_load}: loads into torch_llama.py ({len(sd)} tensors, strict)')
        return
    data = os.path.join(HERE, 'gqa_data.txt')
    init = os.path.join(HERE, 'gqa_init.safetensors')
    final = os.path.join(HERE, 'gqa_final.safetensors')
    make_data(data)
    make_init(tl, init)
    out = subprocess.run([sys.executable, a.torch_llama, 'train', '--init', init, '--data', data, '--steps',
                          str(STEPS), '--save', final, '--threads', '1'] + MODEL + OPTIM,
                         check=True, capture_output=True, text=True).stdout
    with open(os.path.join(HERE, 'gqa_expected.txt'), 'w') as f:
        f.write(out)
    sys.stdout.write(out)


if __name__ == '__main__':
    main()
