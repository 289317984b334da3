"""Preparation and steady speed of the demo model's training step (forward + backward compiled,
AdamW eager) under torch.compile(backend="ember"), against Ember eager, PyTorch CPU eager and
torch.compile with Inductor on the CPU. Prints one JSON object.

Each configuration runs in a fresh process, so that "cold" means an empty compile cache and
"warm" a new process over the cache the cold run filled:
  prep_s     time of the first training step, compile included (cold and warm)
  tokens_s   median tokens/s over the steady steps that follow
Background compilation (options={"background": True}, cold cache) runs until the compiled graph
has taken over and then `steps` more; it reports its first step (prep_s), how many steps ran
eagerly meanwhile, the wall time until the first compiled step ended (to_compiled_s) and how
long the foreground compile takes to reach the same step count (its first step plus steady
ones). `dynamo_floor` is Dynamo's own
tracing (backend="eager" on ember tensors), which every compiled first step includes.
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
    elif mode == "ember_background":
        loss_fn = torch.compile(loss_fn, backend="ember", options={"background": True})
    elif mode == "dynamo_floor":
        loss_fn = torch.compile(loss_fn, backend="eager")
    elif mode == "inductor":
        loss_fn = torch.compile(loss_fn)
    data, gen = load_corpus(), torch.Generator().manual_seed(0)

    def sync():
        if device == "ember":
            torch.ember.synchronize()

    pending = lambda: False  # noqa: E731
    if mode == "ember_background":
        from torch_ember.compile.background import pending

    times, losses, eager_steps = [], [], None
    limit = steps + 1
    while len(times) < limit:
        if mode == "ember_background" and eager_steps is None and len(times) and not pending():
            eager_steps = len(times)  # the next step runs compiled
            limit = eager_steps + steps + 1
        elif mode == "ember_background" and eager_steps is None:
            limit = len(times) + 2  # until the compiled graph takes over
        x, y = get_batch(data, batch, seq, gen)
        sync()
        t0 = time.perf_counter()
        loss = loss_fn(x.to(device), y.to(device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())  # synchronizes
        times.append(time.perf_counter() - t0)
    steady = times[eager_steps + 1:] if eager_steps else (times[2:] or times[1:])
    out = {"prep_s": times[0], "tokens_s": batch * seq / statistics.median(steady),
           "first_loss": losses[0], "last_loss": losses[-1], "losses": losses}
    if eager_steps:
        out |= {"eager_steps": eager_steps, "to_compiled_s": sum(times[:eager_steps + 1])}
    if mode in ("ember_compiled", "ember_background"):
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
            "ember_background_cold": run("ember_background", args, {**env, "EMBER_CACHE": "0"}),
            "dynamo_floor": run("dynamo_floor", args, {}),
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
    bg = res["ember_background_cold"]
    n = bg.get("eager_steps")
    # The foreground compile's time to the same number of steps: its first step, then steady ones.
    fg_same = ec["prep_s"] + n * args.batch * args.seq / ec["tokens_s"] if n and "tokens_s" in ec else None
    res["ratios"] = {
        "background_first_step_s": bg.get("prep_s"),
        "background_first_step_minus_dynamo_floor_s": (round(bg["prep_s"] - res["dynamo_floor"]["prep_s"], 3)
                                                        if "prep_s" in bg and "prep_s" in res["dynamo_floor"] else None),
        "eager_first_step_s": ee.get("prep_s"),
        "background_to_compiled_over_foreground_same_steps": ratio(bg.get("to_compiled_s"), fg_same),
        "cold_prep_ember_over_inductor": ratio(ec.get("prep_s"), ind.get("prep_s")),
        "warm_prep_ember_s": ew.get("prep_s"),
        "tokens_s_ember_compiled_over_ember_eager": ratio(ec.get("tokens_s"), ee.get("tokens_s")),
        "tokens_s_ember_compiled_over_inductor": ratio(ec.get("tokens_s"), ind.get("tokens_s")),
        "tokens_s_ember_compiled_over_cpu_eager": ratio(ec.get("tokens_s"), res["cpu_eager"].get("tokens_s")),
    }
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
