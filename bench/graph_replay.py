"""A training step (forward, backward, AdamW) replayed from a captured ember graph, against the
same step in PyTorch CPU eager and in ember eager: JSON with ms per step and ratios (> 1 means
the graph replay is faster). One run; the machine it ran on is recorded.

    .venv/bin/python bench/graph_replay.py [--workload demo|qwen3-s|resnet] [--steps 20]
"""
import argparse
import copy
import json
import statistics
import time

import torch
import torch_ember  # noqa: F401
from torch_ember.bench.machine import describe
from torch_ember.bench.workloads import WORKLOADS


def _eager_step(model, opt, loss_fn):
    def step(x, y):
        opt.zero_grad(set_to_none=False)
        loss = loss_fn(model, x, y)
        loss.backward()
        opt.step()
        return loss
    return step


def _ms_per_step(run, steps, sync):
    times = []
    for _ in range(3):
        t = time.perf_counter()
        for i in range(steps):
            run(i)
        sync()
        times.append((time.perf_counter() - t) / steps * 1e3)
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--workload", default="demo", choices=sorted(WORKLOADS))
    p.add_argument("--steps", type=int, default=20)
    a = p.parse_args()
    w = WORKLOADS[a.workload]
    torch.manual_seed(0)
    base = w.build()
    gen = w.batches(0)
    data = [next(gen) for _ in range(4)]

    cpu_model = copy.deepcopy(base)
    cpu_step = _eager_step(cpu_model, torch.optim.AdamW(cpu_model.parameters(), lr=1e-3), w.loss)
    cpu_step(*data[0])
    cpu_ms = _ms_per_step(lambda i: cpu_step(*data[i % 4]), a.steps, lambda: None)

    eager_model = copy.deepcopy(base).to("ember")
    eager_step = _eager_step(eager_model, torch.optim.AdamW(eager_model.parameters(), lr=1e-3), w.loss)
    ember_data = [(x.to("ember"), y.to("ember")) for x, y in data]
    eager_step(*ember_data[0]).item()
    eager_ms = _ms_per_step(lambda i: eager_step(*ember_data[i % 4]), a.steps, torch.ember.synchronize)

    graph_model = copy.deepcopy(base).to("ember")
    opt = torch.optim.AdamW(graph_model.parameters(), lr=1e-3, capturable=True)
    step = _eager_step(graph_model, opt, w.loss)
    static_x, static_y = (t.clone() for t in ember_data[0])
    step(static_x, static_y).item()  # warm-up: gradients and optimizer state exist
    g = torch.ember.EmberGraph()
    t0 = time.perf_counter()
    with torch.ember.graph(g):
        step(static_x, static_y)
    capture_ms = (time.perf_counter() - t0) * 1e3

    def replay(i):
        x, y = ember_data[i % 4]
        static_x.copy_(x)
        static_y.copy_(y)
        g.replay()

    graph_ms = _ms_per_step(replay, a.steps, torch.ember.synchronize)
    print(json.dumps({
        "bench": "graph_replay", "workload": w.describe, "machine": describe(),
        "baseline": "PyTorch CPU eager (and ember eager)", "kernels_per_step": g.num_kernels(),
        "capture_ms": round(capture_ms, 1), "cpu_eager_ms": round(cpu_ms, 2), "ember_eager_ms": round(eager_ms, 2),
        "ember_graph_ms": round(graph_ms, 2), "graph_vs_cpu": round(cpu_ms / graph_ms, 3),
        "graph_vs_ember_eager": round(eager_ms / graph_ms, 3), "ember_eager_vs_cpu": round(cpu_ms / eager_ms, 3),
    }, indent=2))


if __name__ == "__main__":
    main()
