"""A tiled Triton matmul (tl.dot) on ember against torch.mm on ember, float32 and bfloat16, at a
few block shapes: GFLOP/s and the ratio to torch.mm in one JSON object. tl.dot of large tiles runs
on the device's float32 block product (16-bit tiles widened); the rest of the kernel (pointer
tiles, masked loads) is translated code. Needs the optional extra: pip install -e .[triton].
Usage: python bench/triton_matmul.py [--size 1024]"""
import argparse
import json
import statistics
import sys
import time

import torch
import torch_ember  # noqa: F401
from torch_ember.bench.machine import cpu_model

try:
    import triton
    import triton.language as tl
except ImportError:
    print(json.dumps({"bench": "triton_matmul", "skipped": "triton is not installed (pip install -e .[triton])"}))
    sys.exit(0)


@triton.jit
def _mm(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
        BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    # The layout of Triton's matmul tutorial: rows and columns wrap modulo M and N, so loads need
    # a mask only along K.
    rm = (tl.program_id(0) * BM + tl.arange(0, BM)) % M
    rn = (tl.program_id(1) * BN + tl.arange(0, BN)) % N
    rk = tl.arange(0, BK)
    pa = a_ptr + rm[:, None] * sam + rk[None, :] * sak
    pb = b_ptr + rk[:, None] * sbk + rn[None, :] * sbn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        a = tl.load(pa, mask=rk[None, :] < K - k * BK, other=0.0)
        b = tl.load(pb, mask=rk[:, None] < K - k * BK, other=0.0)
        acc += tl.dot(a, b)
        pa += BK * sak
        pb += BK * sbk
    cm = tl.program_id(0) * BM + tl.arange(0, BM)
    cn = tl.program_id(1) * BN + tl.arange(0, BN)
    tl.store(c_ptr + cm[:, None] * scm + cn[None, :] * scn, acc, mask=(cm[:, None] < M) & (cn[None, :] < N))


def _seconds(fn, reps=7):
    fn()
    torch.ember.synchronize()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        torch.ember.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=1024)
    n = ap.parse_args().size
    results = []
    for dtype in (torch.float32, torch.bfloat16):
        a = torch.randn(n, n, device="ember", dtype=dtype)
        b = torch.randn(n, n, device="ember", dtype=dtype)
        c = torch.empty(n, n, device="ember")
        want = a.float() @ b.float()
        t_mm = _seconds(lambda: torch.mm(a, b))
        for bm, bn, bk in ((64, 64, 32), (128, 128, 64)):
            def run():
                _mm[(triton.cdiv(n, bm), triton.cdiv(n, bn))](
                    a, b, c, n, n, n, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                    BM=bm, BN=bn, BK=bk)
            t = _seconds(run)
            torch.testing.assert_close(c, want, atol=1e-2, rtol=1e-3)
            results.append({"dtype": str(dtype).replace("torch.", ""), "blocks": [bm, bn, bk],
                            "triton_gflops": round(2 * n ** 3 / t / 1e9, 1),
                            "mm_gflops": round(2 * n ** 3 / t_mm / 1e9, 1), "vs_mm": round(t_mm / t, 3)})
    print(json.dumps({"bench": "triton_matmul", "cpu": cpu_model(), "size": n, "results": results}, indent=2))


if __name__ == "__main__":
    main()
