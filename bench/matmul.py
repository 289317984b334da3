"""torch.mm and conv2d on ember vs PyTorch CPU eager in float32, bfloat16 and float16: JSON with
GFLOP/s and ratios (> 1: ember is faster). Records the CPU and whether it has the 16-bit dot
instructions (without them ember widens 16-bit products to float32; PyTorch's CPU path does not)."""
import json
import statistics
import time

import torch
import torch.nn.functional as F
import torch_ember
from torch_ember.bench.machine import describe


def seconds(fn, budget=3.0, reps=7):
    """Median time of one call; fewer repetitions when one call is slow (PyTorch's 16-bit CPU
    products without AVX512-BF16 take seconds)."""
    fn()
    times = []
    start = time.perf_counter()
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        if time.perf_counter() - start > budget:
            break
    return statistics.median(times)


def entry(name, dtype, flops, cpu_fn, ember_fn):
    cpu = flops / seconds(cpu_fn) / 1e9
    ember = flops / seconds(lambda: (ember_fn(), torch.ember.synchronize())) / 1e9
    return {"case": name, "dtype": str(dtype).replace("torch.", ""), "cpu_gflops": round(cpu, 1),
            "ember_gflops": round(ember, 1), "ratio_vs_cpu": round(ember / cpu, 3)}


def mm_case(size, dtype):
    a, b = torch.randn(size, size).to(dtype), torch.randn(size, size).to(dtype)
    ae, be = a.to("ember"), b.to("ember")
    return entry(f"mm {size}", dtype, 2 * size**3, lambda: torch.mm(a, b), lambda: torch.mm(ae, be))


def conv_case(dtype):
    x, w = torch.randn(8, 64, 32, 32).to(dtype), torch.randn(64, 64, 3, 3).to(dtype)
    xe, we = x.to("ember"), w.to("ember")
    flops = 2 * 8 * 64 * 32 * 32 * 64 * 9
    return entry("conv2d 8x64x32x32 k3", dtype, flops, lambda: F.conv2d(x, w, padding=1),
                 lambda: F.conv2d(xe, we, padding=1))


if __name__ == "__main__":
    machine = describe()
    flags = machine["cpu_flags"]
    dtypes = (torch.float32, torch.bfloat16, torch.float16)
    # 2048 only in float32: PyTorch's 16-bit CPU product without the instructions takes a minute.
    sizes = {torch.float32: (512, 2048), torch.bfloat16: (512, 1024), torch.float16: (512, 1024)}
    results = [mm_case(s, d) for d in dtypes for s in sizes[d]] + [conv_case(d) for d in dtypes]
    print(json.dumps({"bench": "matmul", "machine": machine,
                      "bf16_instructions": flags["avx512_bf16"] or flags["amx_bf16"],
                      "fp16_instructions": flags["avx512_fp16"], "results": results}, indent=2))
