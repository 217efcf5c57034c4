#!/usr/bin/python3
"""Generate the PyTorch reference fixtures of the trainer test (run once; the
outputs are committed so CI needs no torch). Needs Debian's python3-torch:

    /usr/bin/python3 tests/ref/make_ref.py

Writes into tests/ref/ (with the model of tests/ref/make_bias_ref.py, written
from the Hugging Face definition, without the q/k/v biases):
  gqa_data.txt             the byte stream (500 bytes: 31 samples of 16, so 10 steps
                           of batch 4 wrap around to the beginning)
  gqa_init.safetensors     initial weights, Hugging Face names (normal(0, 0.02), norms 1);
                           kept when present, so a rerun reproduces the committed files
  gqa_expected.txt         per-step lines "step S loss L gnorm G" (gnorm before clipping)
  gqa_final.safetensors    the weights after the 10 steps

The model and hyperparameters are examples/configs/gqa_ref.yaml's (GQA: 4 heads,
2 kv heads; clipping on).
"""
import os, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.exit(subprocess.run([sys.executable, os.path.join(HERE, 'make_bias_ref.py'), '--gqa']).returncode)
