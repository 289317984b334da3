"""Preparation and steady speed of the demo model's training step (forward + backward compiled,
AdamW eager) under torch.compile(backend="ember"), against Ember eager, PyTorch CPU eager and
torch.compile with Inductor on the CPU. Prints one JSON object.

Each configuration runs in a fresh process, so that "cold" means an empty compile cache and
"warm" a new process over the cache the cold run filled:
  prep_s     time of the first training step, compile included (cold and warm)
  tokens_s   median tokens/s over the steady steps that follow
Usage: python bench/compile_train_step.py [--steps 10] [--batch 8] [--seq 64]"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def worker(mode: str, steps: int, batch: int, seq: int) -> dict:
    import torch
    import torch.nn.functional as F

    device = "cpu" if mode in ("cpu_eager", "inductor") else "ember"
    if device == "ember":
        import torch_ember

        torch_ember.set_fallback_mode("silent")
    from torch_ember.demo.train_lm import build_model, get_batch, load_corpus

    torch.manual_seed(0)
    model = build_model(seq).to(device)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)

    def loss_fn(x, y):
        logits = model(input_ids=x).logits
        return F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.reshape(-1))

    if mode == "ember_compiled":
        loss_fn = torch.compile(loss_fn, backend="ember")
    elif mode == "inductor":
        loss_fn = torch.compile(loss_fn)
    data, gen = load_corpus(), torch.Generator().manual_seed(0)

    def sync():
        if device == "ember":
            torch.ember.synchronize()

    times, losses = [], []
    for _ in range(steps + 1):
        x, y = get_batch(data, batch, seq, gen)
        sync()
        t0 = time.perf_counter()
        loss = loss_fn(x.to(device), y.to(device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())  # synchronizes
        times.append(time.perf_counter() - t0)
    out = {"prep_s": times[0], "tokens_s": batch * seq / statistics.median(times[2:] or times[1:]),
           "first_loss": losses[0], "last_loss": losses[-1]}
    if mode == "ember_compiled":
        recs = torch_ember.compile_stats()
        out["graphs"] = [{k: r[k] for k in ("kind", "total_ms", "capture_ms", "compile_ms", "kernels",
                                           "library_calls", "cache_hit")} | {"eager_ops": len(r["eager_ops"])}
                         for r in recs]
    return out


def run(mode, args, env):
    cmd = [sys.executable, __file__, "--worker", mode, "--steps", str(args.steps), "--batch", str(args.batch),
           "--seq", str(args.seq)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env}, timeout=900)
    if proc.returncode:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "failed"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--worker", default=None)
    args = p.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.steps, args.batch, args.seq)))
        return
    with tempfile.TemporaryDirectory() as ember_cache, tempfile.TemporaryDirectory() as inductor_cache:
        env = {"EMBER_CACHE_DIR": ember_cache, "EMBER_CACHE": "1"}
        res = {
            "config": {"model": "demo Qwen3 (train_lm.build_model)", "batch": args.batch, "seq": args.seq,
                       "steps": args.steps, "compiled": "forward+loss+backward; AdamW eager",
                       "cpus": os.cpu_count()},
            "ember_compiled_cold": run("ember_compiled", args, env),
            "ember_compiled_warm": run("ember_compiled", args, env),
            "ember_eager": run("ember_eager", args, {}),
            "cpu_eager": run("cpu_eager", args, {}),
            "inductor_cold": run("inductor", args, {"TORCHINDUCTOR_CACHE_DIR": inductor_cache}),
        }
    def ratio(a, b):
        try:
            return round(a / b, 3)
        except (KeyError, TypeError, ZeroDivisionError):
            return None
    ec, ew, ee, ind = (res[k] for k in ("ember_compiled_cold", "ember_compiled_warm", "ember_eager",
                                        "inductor_cold"))
    res["ratios"] = {
        "cold_prep_ember_over_inductor": ratio(ec.get("prep_s"), ind.get("prep_s")),
        "warm_prep_ember_s": ew.get("prep_s"),
        "tokens_s_ember_compiled_over_ember_eager": ratio(ec.get("tokens_s"), ee.get("tokens_s")),
        "tokens_s_ember_compiled_over_inductor": ratio(ec.get("tokens_s"), ind.get("tokens_s")),
        "tokens_s_ember_compiled_over_cpu_eager": ratio(ec.get("tokens_s"), res["cpu_eager"].get("tokens_s")),
    }
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
