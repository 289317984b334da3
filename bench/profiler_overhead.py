"""Profiler overhead on the demo model's eager training step, one run, JSON: tokens/s with the
profiler off (after a profile ran, so the hooks were installed and removed), and with
torch_ember.profiler.profile on (default options; and with shapes and source lines), each as an
overhead against the step before any profile ran. The configurations are measured in
interleaved rounds so that drift in machine load hits them alike. Targets: off < 1 %, on < 15 %."""
import contextlib
import io
import json
import statistics

import torch
import torch_ember
from torch_ember.demo import train_lm
from torch_ember.profiler import profile


def tokens_per_s(steps=8):
    with contextlib.redirect_stdout(io.StringIO()):
        return train_lm.train(device="ember", steps=steps, quiet=True)["tokens_per_s"]


def profiled(**kw):
    with profile(**kw):
        return tokens_per_s()


if __name__ == "__main__":
    tokens_per_s()  # warm-up: kernels, allocator, libraries
    baseline = statistics.median(tokens_per_s() for _ in range(3))  # no profile has run yet
    rounds = {"off": [], "on": [], "on_full": []}
    for _ in range(5):
        rounds["on"].append(profiled())
        rounds["off"].append(tokens_per_s())
        rounds["on_full"].append(profiled(record_shapes=True, with_stack=True))
        rounds["off"].append(tokens_per_s())
    off, on, on_full = (statistics.median(rounds[k]) for k in ("off", "on", "on_full"))
    result = {
        "bench": "profiler_overhead", "workload": "demo Qwen3 training step, eager, float32",
        "baseline_tokens_per_s": round(baseline),
        "profiler_off": {"tokens_per_s": round(off), "overhead": round(1 - off / baseline, 4)},
        # "on" against the interleaved "off" rounds as well: the fairer comparison under drift.
        "profiler_on": {"tokens_per_s": round(on), "overhead": round(1 - on / baseline, 4),
                        "overhead_vs_off_rounds": round(1 - on / off, 4)},
        "profiler_on_shapes_and_stack": {"tokens_per_s": round(on_full),
                                         "overhead": round(1 - on_full / baseline, 4),
                                         "overhead_vs_off_rounds": round(1 - on_full / off, 4)},
        "targets": {"off": "< 0.01", "on": "< 0.15"},
    }
    print(json.dumps(result, indent=2))
    _ = torch, torch_ember
