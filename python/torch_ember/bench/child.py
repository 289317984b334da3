"""One (workload, dtype, mode) of `ember bench train`, in its own process so that its time to
first step starts at a fresh interpreter, a compile cache is exactly as cold or warm as the
parent made it, and a crash or hang costs only this run. Prints one JSON record on the last
line of stdout.

  python -m torch_ember.bench.child demo float32 ember_compiled --steps 8 --t0 <parent's time.time()>

Modes: cpu_eager (PyTorch on the CPU), inductor (torch.compile with Inductor on the CPU),
ember_eager, ember_compiled (torch.compile(backend="ember"), strict; cold or warm is the
parent's EMBER_CACHE_DIR). The compiled function is forward + loss (backward follows from it);
zero_grad and AdamW run eagerly in every mode."""
from __future__ import annotations

import time

_START = time.time()  # before any heavy import: the child's own start

import argparse  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import traceback  # noqa: E402

MODES = ("cpu_eager", "inductor", "ember_eager", "ember_compiled")


def _timed_steps(times: list) -> list:
    """The steps that count as steady: after the first (preparation) and, when there are enough,
    the second too (a compiled graph's second call may still settle: guards, allocations)."""
    return times[2:] if len(times) >= 4 else times[1:] or times


def execution(times: list, per_step: int, unit: str) -> dict:
    rates = sorted(per_step / t for t in _timed_steps(times))
    median = statistics.median(rates)
    q = statistics.quantiles(rates, n=4, method="inclusive") if len(rates) >= 2 else [median, median, median]
    return {"unit": unit, "per_s": round(median, 2), "per_s_min": round(rates[0], 2),
            "per_s_max": round(rates[-1], 2), "per_s_q1": round(q[0], 2), "per_s_q3": round(q[2], 2),
            # (max - min) / median: how far apart the fastest and slowest steady steps were
            "spread_pct": round(100 * (rates[-1] - rates[0]) / median, 1) if median else None,
            "step_ms_median": round(1e3 * per_step / median, 2) if median else None,
            "timed_steps": len(rates)}


def run(workload: str, dtype: str, mode: str, steps: int, seed: int, t0: float) -> dict:
    import torch

    from .workloads import WORKLOADS

    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}")
    wl = WORKLOADS[workload]
    device = torch.device("ember" if mode.startswith("ember") else "cpu")
    backend = None
    if device.type == "ember":
        import torch_ember as backend

        backend.set_fallback_mode("silent")  # counted and reported, not warned about one by one
    if workload != "resnet":
        import transformers  # noqa: F401 - its import is part of preparation
    t_import = time.time()

    torch.manual_seed(seed)
    model = wl.build().to(device)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    autocast = (torch.autocast(device_type=device.type, dtype=torch.bfloat16) if dtype == "bfloat16"
                else contextlib.nullcontext())

    def loss_fn(x, y):
        with autocast:
            return wl.loss(model, x, y)

    if mode == "ember_compiled":
        loss_fn = torch.compile(loss_fn, backend="ember")
    elif mode == "inductor":
        loss_fn = torch.compile(loss_fn)

    def sync():
        if device.type != "cpu":
            torch.accelerator.synchronize()

    if backend is not None:
        backend.reset_fallback_stats()
        backend.reset_compile_stats()
    batches = wl.batches(seed)
    t_setup = time.time()
    times, losses, t_first = [], [], None
    for _ in range(steps):
        x, y = next(batches)
        sync()
        s0 = time.perf_counter()
        loss = loss_fn(x.to(device), y.to(device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sync()
        losses.append(loss.item())
        times.append(time.perf_counter() - s0)
        if t_first is None:
            t_first = time.time()

    steady = statistics.median(_timed_steps(times))
    prep = {"first_step_s": round(t_first - t0, 3),  # process start -> end of the first step
            "startup_s": round(_START - t0, 3),  # interpreter start-up, importing torch and torch_ember
            "import_s": round(t_import - _START, 3),
            "setup_s": round(t_setup - t_import, 3),  # build, move to the device, optimizer
            "first_step_call_s": round(times[0], 3)}
    if mode in ("ember_compiled", "inductor"):
        # The first step's excess over a steady one: compiling (or loading from the cache).
        prep["compile_s"] = round(max(times[0] - steady, 0.0), 3)
    completion = {"finished": True, "steps": len(losses), "losses": losses,
                  "finite": all(l == l and abs(l) != float("inf") for l in losses)}
    fallback = {}
    if backend is not None:
        report = backend.fallback_report()
        fallback = {r.op: r.calls for r in report}
        completion["fallback_calls"] = report.total_calls
        completion["compiled_eager_ops"] = dict(report.compiled_eager_ops)
        if mode == "ember_compiled":
            stats = backend.compile_stats()
            prep["ember_compile_ms"] = round(sum(r["total_ms"] for r in stats), 1)
            prep["graphs"] = len(stats)
            prep["cache_hits"] = sum(bool(r["cache_hit"]) for r in stats)
    completion["fallback_ops"] = fallback
    return {"preparation": prep, "execution": execution(times, wl.per_step, wl.unit), "completion": completion}


def _first_line(e: BaseException) -> str:
    from ..sweep.model_check import _first_line as first

    return first(e)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("workload")
    p.add_argument("dtype", choices=("float32", "bfloat16"))
    p.add_argument("mode", choices=MODES)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--t0", type=float, default=None, help="the parent's time.time() when it started this process")
    args = p.parse_args(argv)
    try:
        rec = run(args.workload, args.dtype, args.mode, max(args.steps, 1), args.seed, args.t0 or _START)
    except BaseException as e:  # noqa: BLE001 - one record whatever happened
        rec = {"error": _first_line(e), "traceback": traceback.format_exc()[-2000:]}
    sys.stdout.flush()
    print("\n" + json.dumps(rec, default=str), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
