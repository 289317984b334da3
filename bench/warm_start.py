"""Warm start end to end: process start to the end of the first training step (forward,
backward, SGD step) of the demo model, in a new process over caches a previous process filled.
Configurations: Ember eager, Ember compiled with EMBER_PRECOMPILE=1 (warm), Ember compiled
without it (warm: kernel cache only) and Inductor on the CPU (warm). Each is timed `--repeat`
times (after one cold run that fills the caches); prints one JSON object with the medians.
Usage: python bench/warm_start.py [--repeat 3] [--batch 8] [--seq 64]"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

T0 = time.perf_counter()


def worker(mode: str, batch: int, seq: int) -> dict:
    import torch
    import torch.nn.functional as F

    device = "cpu" if mode == "inductor" else "ember"
    if device == "ember":
        import torch_ember

        torch_ember.set_fallback_mode("silent")
    from torch_ember.demo.train_lm import build_model, get_batch, load_corpus

    torch.manual_seed(0)
    model = build_model(seq).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)

    def loss_fn(x, y):
        logits = model(input_ids=x).logits
        return F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.reshape(-1))

    if mode.startswith("ember_compiled"):
        loss_fn = torch.compile(loss_fn, backend="ember")
    elif mode == "inductor":
        loss_fn = torch.compile(loss_fn)
    else:
        import torch._dynamo  # noqa: F401  (eager pays the same import, as a compiled run does)
    data, gen = load_corpus(), torch.Generator().manual_seed(0)
    x, y = get_batch(data, batch, seq, gen)
    loss = loss_fn(x.to(device), y.to(device))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    value = loss.item()  # synchronizes
    end = time.perf_counter() - T0
    loaded = 0
    if "torch._dynamo" in sys.modules:
        from torch._dynamo.utils import counters
        loaded = counters["dynamo_cache"]["ember_loaded"]
    return {"end_s": end, "loss": value, "packages_loaded": loaded}


def run(mode, args, env):
    t = time.perf_counter()
    p = subprocess.run([sys.executable, __file__, "--worker", mode, "--batch", str(args.batch),
                        "--seq", str(args.seq)], env=env, capture_output=True, text=True, check=True)
    out = json.loads(p.stdout.strip().splitlines()[-1])
    out["wall_s"] = time.perf_counter() - t  # includes interpreter start
    return out


def cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--worker", default=None)
    args = p.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.batch, args.seq)))
        return
    modes = {"eager": {}, "ember_compiled_precompile": {"EMBER_PRECOMPILE": "1"},
             "ember_compiled_kernel_cache_only": {"EMBER_PRECOMPILE": "0"}, "inductor": {}}
    res = {"cpu": cpu_model(), "cores": os.cpu_count(), "torch_threads_env": os.environ.get("OMP_NUM_THREADS"),
           "repeat": args.repeat, "metric": "median seconds from process start to the end of the first step "
           "(warm: a previous process filled the caches)", "modes": {}}
    for mode, extra in modes.items():
        with tempfile.TemporaryDirectory() as d:
            env = {**os.environ, "EMBER_CACHE_DIR": os.path.join(d, "ember"),
                   "TORCHINDUCTOR_CACHE_DIR": os.path.join(d, "torch"), **extra}
            cold = run(mode, args, env)
            warm = [run(mode, args, env) for _ in range(args.repeat)]
        res["modes"][mode] = {"cold_end_s": round(cold["end_s"], 3),
                              "warm_end_s": round(statistics.median(w["end_s"] for w in warm), 3),
                              "warm_end_all_s": [round(w["end_s"], 3) for w in warm],
                              "loss_cold": cold["loss"], "loss_warm": warm[-1]["loss"],
                              "packages_loaded_warm": warm[-1]["packages_loaded"]}
    base = res["modes"]["eager"]["warm_end_s"]
    for m in res["modes"].values():
        m["over_eager_s"] = round(m["warm_end_s"] - base, 3)
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
