"""Runtime costs of the ember device, as JSON ratios against the host baselines:
enqueue of an empty kernel vs a tiny CPU op, allocator alloc+free vs torch.empty on CPU,
and host<->device copy bandwidth vs memcpy (numpy.copyto)."""
import json
import os
import statistics
import time

import numpy as np
import torch
import torch_ember

REPS = 7


def median_time(fn, reps=REPS):
    fn()  # warm-up
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def enqueue_cost():
    n = 20000
    t = median_time(lambda: (torch_ember._C._enqueue_empty(0, n), torch.ember.synchronize()))
    ember_us = t / n * 1e6
    a = torch.ones(1)
    cpu_op_us = median_time(lambda: [torch.add(a, a) for _ in range(n)]) / n * 1e6
    return {"ember_enqueue_empty_us": round(ember_us, 3), "cpu_tiny_add_us": round(cpu_op_us, 3),
            "ratio_vs_cpu_tiny_op": round(cpu_op_us / ember_us, 2)}


def empty_loop(numel, device, n):
    for _ in range(n):
        torch.empty(numel, device=device)  # freed at once: one alloc+free pair per iteration


def alloc_cost():
    n = 20000
    out = {}
    for size in (4096, 1 << 20):
        core_ns = statistics.median(torch_ember._C._bench_alloc_free(0, size, n) for _ in range(REPS))
        numel = size // 4
        ember_ns = median_time(lambda: empty_loop(numel, "ember", n)) / n * 1e9
        cpu_ns = median_time(lambda: empty_loop(numel, "cpu", n)) / n * 1e9
        out[f"{size}B"] = {"core_alloc_free_ns": round(core_ns, 1),
                           "torch_empty_ember_ns": round(ember_ns, 1),
                           "torch_empty_cpu_ns": round(cpu_ns, 1),
                           "ratio_vs_cpu": round(cpu_ns / ember_ns, 2)}
    return out


def copy_bandwidth():
    nbytes = 256 << 20
    n = nbytes // 4
    host = torch.randn(n)
    pinned = host.pin_memory()
    dev = torch.empty(n, device="ember")
    back = torch.empty(n)
    dev2 = torch.empty(n, device="ember")
    src_np, dst_np = host.numpy(), np.empty_like(host.numpy())
    memcpy_s = median_time(lambda: np.copyto(dst_np, src_np))

    def gbps(seconds):
        return round(nbytes / seconds / 1e9, 2)

    results = {"memcpy_GBps": gbps(memcpy_s)}
    cases = {
        "h2d_pageable": lambda: (dev.copy_(host), torch.ember.synchronize()),
        "h2d_pinned_async": lambda: (dev.copy_(pinned, non_blocking=True), torch.ember.synchronize()),
        "d2h_pageable": lambda: back.copy_(dev),
        "d2h_pinned_async": lambda: (pinned.copy_(dev, non_blocking=True), torch.ember.synchronize()),
        "d2d": lambda: (dev.copy_(dev2), torch.ember.synchronize()),
    }
    for name, fn in cases.items():
        s = median_time(fn, reps=5)
        results[name + "_GBps"] = gbps(s)
        results[name + "_ratio_vs_memcpy"] = round(memcpy_s / s, 2)
    return results


if __name__ == "__main__":
    torch_ember.set_fallback_mode("silent")
    report = {
        "bench": "runtime",
        "threads": torch.get_num_threads(),
        "ember_threads": torch_ember._C._num_threads(0),
        "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
        "enqueue": enqueue_cost(),
        "alloc_free": alloc_cost(),
        "copy": copy_bandwidth(),
    }
    print(json.dumps(report, indent=2))
