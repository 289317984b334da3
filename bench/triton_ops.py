"""Liger-Kernel's fused Triton ops on ember against the same math composed from ops. Prints one
JSON object.

For each op (RMSNorm, SwiGLU, LayerNorm, RoPE), forward + backward at one shape:
  liger_ms       Liger's Triton kernels on ember (compiled by Ember's Triton backend)
  composed_ms    the same math written with PyTorch ops, on ember (Ember's eager kernels)
  cpu_ms         the composed math in PyTorch on the CPU
  vs_composed    composed_ms / liger_ms (how much the fusion buys on ember; > 1 is faster)
  vs_cpu         cpu_ms / liger_ms
  first_launch_s the first forward + backward with an empty kernel cache (compilation of every
                 kernel of the op included)
  cache_setup_s  before that, the one-time setup of the new cache (the runtime library and the
                 precompiled prelude every kernel shares)
Needs the optional extra: pip install -e .[triton]. The CPU (lscpu) is recorded.
Usage: python bench/triton_ops.py [--iters 20] [--tokens 4096] [--hidden 1024]"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def _cases(tokens: int, hidden: int):
    import torch
    import torch.nn.functional as F
    import liger_kernel.transformers.functional as LF

    def rms(x, w):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)) * w

    def rotate_half(x):
        h = x.shape[-1] // 2
        return torch.cat([-x[..., h:], x[..., :h]], -1)

    heads, dh = 8, 64
    seq = max(1, tokens // heads)
    inv = 1.0 / (10000 ** (torch.arange(0, dh, 2).float() / dh))
    emb = torch.outer(torch.arange(seq).float(), inv).repeat(1, 2)
    cos, sin = emb.cos()[None], emb.sin()[None]
    return {
        "rms_norm": ([(tokens, hidden), (hidden,)],
                     lambda x, w: LF.liger_rms_norm(x, w, 1e-6), rms),
        "swiglu": ([(tokens, hidden), (tokens, hidden)],
                   lambda a, b: LF.liger_swiglu(a, b), lambda a, b: F.silu(a) * b),
        "layer_norm": ([(tokens, hidden), (hidden,), (hidden,)],
                       lambda x, w, b: LF.liger_layer_norm(x, w, b, 1e-5),
                       lambda x, w, b: F.layer_norm(x, (hidden,), w, b, 1e-5)),
        "rope": ([(1, heads, seq, dh), (1, heads, seq, dh)],
                 lambda q, k: LF.liger_rope(q, k, cos.to(q.device), sin.to(q.device)),
                 lambda q, k: (q * cos[:, None].to(q.device) + rotate_half(q) * sin[:, None].to(q.device),
                               k * cos[:, None].to(q.device) + rotate_half(k) * sin[:, None].to(q.device))),
    }


def _step(fn, xs):
    outs = fn(*xs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    sum(o.float().sum() for o in outs).backward()


def _time(fn, shapes, device, iters: int) -> float:
    import torch

    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(s, generator=g).to(device).requires_grad_() for s in shapes]
    sync = torch.ember.synchronize if device == "ember" else (lambda: None)
    for _ in range(3):
        _step(fn, xs)
    sync()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        _step(fn, xs)
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _first_launch(name: str, tokens: int, hidden: int) -> tuple[float, float]:
    """Seconds for the first forward + backward of one op in a fresh process with an empty kernel
    cache, and before it the one-time setup of a new cache (building the runtime library and the
    precompiled prelude, shared by every kernel afterwards)."""
    code = (f"import sys, time; sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r}); "
            "import torch, torch_ember, triton_ops as b; "
            "from torch_ember.triton import cache; "
            f"shapes, fn, _ = b._cases({tokens}, {hidden})[{name!r}]; "
            "xs = [torch.randn(s).to('ember').requires_grad_() for s in shapes]; "
            "t0 = time.perf_counter(); cache.load_runtime(); cache._precompiled_prelude(cache.cache_dir()); "
            "t1 = time.perf_counter(); b._step(fn, xs); torch.ember.synchronize(); "
            "print(t1 - t0, time.perf_counter() - t1)")
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, EMBER_CACHE_DIR=d, TRITON_CACHE_DIR=os.path.join(d, "triton"),
                   PYTHONWARNINGS="ignore")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"first launch of {name} failed:\n{out.stderr[-2000:]}")
    setup, first = out.stdout.strip().splitlines()[-1].split()
    return float(setup), float(first)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--hidden", type=int, default=1024)
    args = ap.parse_args()
    import torch
    import torch_ember  # noqa: F401
    from torch_ember.bench.machine import cpu_model

    result = {"cpu": cpu_model(), "threads": torch.get_num_threads(), "tokens": args.tokens,
              "hidden": args.hidden, "ops": {}}
    for name, (shapes, liger, composed) in _cases(args.tokens, args.hidden).items():
        t_liger = _time(liger, shapes, "ember", args.iters)
        t_comp = _time(composed, shapes, "ember", args.iters)
        t_cpu = _time(composed, shapes, "cpu", args.iters)
        setup_s, first_s = _first_launch(name, args.tokens, args.hidden)
        result["ops"][name] = {"liger_ms": round(t_liger * 1e3, 3), "composed_ms": round(t_comp * 1e3, 3),
                               "cpu_ms": round(t_cpu * 1e3, 3), "vs_composed": round(t_comp / t_liger, 3),
                               "vs_cpu": round(t_cpu / t_liger, 3),
                               "first_launch_s": round(first_s, 3), "cache_setup_s": round(setup_s, 3)}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
