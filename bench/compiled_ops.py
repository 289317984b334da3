"""Compiled building blocks of a training step, forward and backward, one run: Ember compiled
(torch.compile(backend="ember") on ember tensors) against Inductor (torch.compile() on CPU
tensors, what a user would pick instead) and against Ember eager. JSON with the median time of
each and the ratios inductor_us / ember_us and eager_us / ember_us (> 1 means Ember compiled is
faster). The machine (CPU, flags, load average) is recorded with the numbers.

    python bench/compiled_ops.py [--no-inductor] [case ...]
"""
import json
import sys

import torch
import torch.nn.functional as F
import torch_ember
from torch_ember.bench.machine import describe

from ops import timed  # bench/ops.py: the same timing loop

N, C, V = 4096, 1024, 8192  # rows, width, classes


def inputs(device):
    g = torch.Generator().manual_seed(0)
    t = {"x": torch.randn(N, C, generator=g), "w": torch.randn(C, generator=g), "b": torch.randn(C, generator=g),
         "logits": torch.randn(N, V, generator=g), "target": torch.randint(0, V, (N,), generator=g),
         "up": torch.randn(C, 2 * C, generator=g) * C ** -0.5}
    return {k: v.to(device).requires_grad_(v.is_floating_point()) for k, v in t.items()}


CASES = {
    "layer_norm": lambda t: F.layer_norm(t["x"], (C,), t["w"], t["b"]),
    "rms_norm": lambda t: F.rms_norm(t["x"], (C,), t["w"]),
    "rms_norm_by_hand": lambda t: t["x"] * torch.rsqrt(t["x"].pow(2).mean(-1, keepdim=True) + 1e-6) * t["w"],
    "softmax": lambda t: F.softmax(t["x"], -1),
    "cross_entropy": lambda t: F.cross_entropy(t["logits"], t["target"]),
    "gelu_tanh": lambda t: F.gelu(t["x"], approximate="tanh"),
    "swiglu": lambda t: (lambda h: F.silu(h[:, :C]) * h[:, C:])(t["x"] @ t["up"]),
    "bias_gelu_residual": lambda t: t["x"] + F.gelu(t["x"] * t["w"] + t["b"]),
}


def step(fn, t):
    def run():
        out = fn(t)
        out.backward(torch.ones_like(out))
    return run


def measure(name, fn, with_inductor):
    ember_t, cpu_t = inputs("ember"), inputs("cpu")
    sync = torch.ember.synchronize
    eager = timed(step(fn, ember_t), sync)
    ember = timed(step(torch.compile(fn, backend="ember"), ember_t), sync)
    row = {"case": name, "ember_compiled_us": round(ember * 1e6, 1), "ember_eager_us": round(eager * 1e6, 1),
           "ratio_vs_ember_eager": round(eager / ember, 3)}
    if with_inductor:
        inductor = timed(step(torch.compile(fn), cpu_t), lambda: None)
        row.update(inductor_us=round(inductor * 1e6, 1), ratio_vs_inductor=round(inductor / ember, 3))
    return row


if __name__ == "__main__":
    args = sys.argv[1:]
    with_inductor = "--no-inductor" not in args
    names = [a for a in args if not a.startswith("--")] or list(CASES)
    results = [measure(n, CASES[n], with_inductor) for n in names]
    print(json.dumps({"bench": "compiled_ops", "what": "forward + backward", "shapes": {"x": [N, C], "logits": [N, V]},
                      "baseline": "Inductor (CPU tensors) and Ember eager", "machine": describe(),
                      "fallback_ops": sorted(r.op for r in torch_ember.fallback_report()), "results": results},
                     indent=2))
