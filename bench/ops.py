"""Eager op speed on ember vs PyTorch CPU eager, same machine, one run: JSON with the median time
of each case and the ratio cpu_time / ember_time (> 1 means ember is faster)."""
import json
import os
import statistics
import time

import torch
import torch.nn.functional as F
import torch_ember


def timed(fn, sync, reps=7, min_time=0.05):
    fn()
    sync()
    n = 1
    while True:  # enough calls per repetition to be measurable
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        sync()
        if time.perf_counter() - t0 > min_time / 4 or n > 100000:
            break
        n *= 4
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        sync()
        times.append((time.perf_counter() - t0) / n)
    return statistics.median(times)


def compare(name, make):
    """make(device) returns a zero-argument callable running the op on that device."""
    cpu = timed(make("cpu"), lambda: None)
    ember = timed(make("ember"), torch.ember.synchronize)
    return {"case": name, "cpu_us": round(cpu * 1e6, 2), "ember_us": round(ember * 1e6, 2),
            "ratio_vs_cpu": round(cpu / ember, 3)}


def tensors(shape, device, dtype=torch.float32, n=2):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(shape, generator=g).to(dtype).to(device) for _ in range(n)]


def case_add(numel):
    def make(device):
        a, b = tensors((numel,), device)
        return lambda: a + b
    return make


def case_unary(fn, numel):
    def make(device):
        (a,) = tensors((numel,), device, n=1)
        return lambda: fn(a)
    return make


def case_sum(shape, dim):
    def make(device):
        (a,) = tensors(shape, device, n=1)
        return lambda: a.sum(dim)
    return make


def case_mm(size, dtype):
    def make(device):
        a, b = tensors((size, size), device, dtype)
        return lambda: a @ b
    return make


def case_softmax(shape):
    def make(device):
        (a,) = tensors(shape, device, n=1)
        return lambda: torch.softmax(a, -1)
    return make


def case_layer_norm(shape):
    def make(device):
        (a,) = tensors(shape, device, n=1)
        w, b = tensors(shape[-1:], device)
        return lambda: F.layer_norm(a, shape[-1:], w, b)
    return make


def case_sdpa(b, h, t, d):
    def make(device):
        q, k, v = tensors((b, h, t, d), device, n=3)
        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return make


def case_embedding(vocab, dim, tokens):
    def make(device):
        (w,) = tensors((vocab, dim), device, n=1)
        idx = torch.randint(0, vocab, (tokens,), generator=torch.Generator().manual_seed(1)).to(device)
        return lambda: F.embedding(idx, w)
    return make


def case_pad(shape, padding, mode, backward=False):
    def make(device):
        (a,) = tensors(shape, device, n=1)
        if not backward:
            return lambda: F.pad(a, padding, mode=mode)
        op = {"reflect": torch.ops.aten.reflection_pad2d_backward,
              "replicate": torch.ops.aten.replication_pad2d_backward}[mode]
        (g,) = tensors(F.pad(a, padding, mode=mode).shape, device, n=1)
        return lambda: op(g, a, list(padding))
    return make


def case_grid_sample(shape, mode):
    def make(device):
        (a,) = tensors(shape, device, n=1)
        theta = torch.tensor([[0.9, 0.1, 0.05], [-0.1, 0.95, 0.0]]).expand(shape[0], 2, 3).to(device)
        grid = F.affine_grid(theta, list(shape), align_corners=False)
        return lambda: F.grid_sample(a, grid, mode=mode, align_corners=False)
    return make


def case_adamw(numel, count, **options):
    """options: foreach=False (the per-tensor loop, CPU's default), or fused=True on both."""
    def make(device):
        params = [p.requires_grad_() for p in tensors((numel,), device, n=count)]
        for p, g in zip(params, tensors((numel,), device, n=count)):
            p.grad = g
        opt = torch.optim.AdamW(params, lr=1e-3, **options)
        return opt.step
    return make


if __name__ == "__main__":
    torch_ember.set_fallback_mode("silent")
    torch_ember.reset_fallback_stats()
    cases = [
        ("add 1K", case_add(1 << 10)),
        ("add 16M", case_add(1 << 24)),
        ("exp 16M", case_unary(torch.exp, 1 << 24)),
        ("sigmoid 1M", case_unary(torch.sigmoid, 1 << 20)),
        ("sum rows 4096x4096", case_sum((4096, 4096), 1)),
        ("sum cols 4096x4096", case_sum((4096, 4096), 0)),
        ("mm 512 f32", case_mm(512, torch.float32)),
        ("mm 2048 f32", case_mm(2048, torch.float32)),
        ("mm 512 bf16", case_mm(512, torch.bfloat16)),
        ("mm 2048 bf16", case_mm(2048, torch.bfloat16)),
        ("softmax 4096x1024", case_softmax((4096, 1024))),
        ("layer_norm 4096x1024", case_layer_norm((4096, 1024))),
        ("sdpa causal 8x8x256x64", case_sdpa(8, 8, 256, 64)),
        ("embedding 32000x512 x 4096", case_embedding(32000, 512, 4096)),
        ("reflect pad 8x32x64x64 by 3", case_pad((8, 32, 64, 64), (3, 3, 3, 3), "reflect")),
        ("reflect pad backward 8x32x64x64 by 3", case_pad((8, 32, 64, 64), (3, 3, 3, 3), "reflect", True)),
        ("replicate pad 8x32x64x64 by 3", case_pad((8, 32, 64, 64), (3, 3, 3, 3), "replicate")),
        ("replicate pad backward 8x32x64x64 by 3", case_pad((8, 32, 64, 64), (3, 3, 3, 3), "replicate", True)),
        ("grid_sample bilinear 8x16x64x64", case_grid_sample((8, 16, 64, 64), "bilinear")),
        ("adamw step 24 x 64K", case_adamw(1 << 16, 24, foreach=False)),
        ("adamw fused step 24 x 64K", case_adamw(1 << 16, 24, fused=True)),
    ]
    results = [compare(name, make) for name, make in cases]
    report = torch_ember.fallback_report()
    print(json.dumps({"bench": "ops", "baseline": "PyTorch CPU eager", "threads": torch.get_num_threads(),
                      "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
                      "fallback_ops": sorted(r.op for r in report), "results": results}, indent=2))
