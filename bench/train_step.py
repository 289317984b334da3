"""The demo model's training step (forward, backward, AdamW) in tokens/s on ember vs PyTorch CPU
eager, float32 and bf16 autocast, one run: JSON with ratios (> 1 means ember is faster)."""
import json
import statistics

import torch
import torch_ember
from torch_ember.demo import train_lm


def tokens_per_s(device, dtype, runs=3, steps=12):
    rates = [train_lm.train(device=device, steps=steps, dtype=dtype, quiet=True)["tokens_per_s"]
             for _ in range(runs)]
    return statistics.median(rates)


if __name__ == "__main__":
    import contextlib
    import io

    results = []
    for dtype in ("float32", "bfloat16"):
        with contextlib.redirect_stdout(io.StringIO()):  # the demo's own report lines
            cpu = tokens_per_s("cpu", dtype)
            ember = tokens_per_s("ember", dtype)
            fallbacks = torch_ember.fallback_report().total_calls
        results.append({"dtype": dtype, "cpu_tokens_per_s": round(cpu), "ember_tokens_per_s": round(ember),
                        "ratio_vs_cpu": round(ember / cpu, 3), "ember_fallback_calls": fallbacks})
    print(json.dumps({"bench": "train_step", "model": "demo Qwen3 (2 layers, hidden 128)",
                      "batch_x_seq": "8x64", "baseline": "PyTorch CPU eager", "results": results}, indent=2))
