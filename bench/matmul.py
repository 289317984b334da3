"""torch.mm on ember vs PyTorch CPU eager, float32 and bfloat16: JSON with GFLOP/s and ratios."""
import json
import os
import statistics
import time

import torch
import torch_ember


def gflops(fn, n, flops, reps=7):
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        times.append((time.perf_counter() - t0) / n)
    return flops / statistics.median(times) / 1e9


def case(size, dtype):
    a = torch.randn(size, size).to(dtype)
    b = torch.randn(size, size).to(dtype)
    ae, be = a.to("ember"), b.to("ember")
    n = max(1, int(2e9 // (2 * size**3)))
    flops = 2 * size**3
    cpu = gflops(lambda: torch.mm(a, b), n, flops)
    ember = gflops(lambda: (torch.mm(ae, be), torch.ember.synchronize()), n, flops)
    return {"size": size, "dtype": str(dtype).replace("torch.", ""), "cpu_gflops": round(cpu, 1),
            "ember_gflops": round(ember, 1), "ratio_vs_cpu": round(ember / cpu, 3)}


if __name__ == "__main__":
    results = [case(s, d) for d in (torch.float32, torch.bfloat16) for s in (512, 2048)]
    print(json.dumps({"bench": "matmul", "gemm_provider": "libtorch",
                      "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
                      "threads": torch.get_num_threads(), "results": results}, indent=2))
