"""`ember bench train`: training throughput of Ember against PyTorch on the CPU, with
preparation, execution and completion reported separately, never merged into one number.

Workloads (see torch_ember.bench.workloads): demo, qwen3-s, qwen3-m, resnet; float32 and
bfloat16 autocast. Modes, side by side in one run, each (workload, dtype, mode) in its own
child process with a time limit (a crash or timeout is recorded, not fatal):

  cpu_eager            PyTorch eager on the CPU: the reference for loss parity
  inductor             torch.compile (Inductor) on the CPU, fresh Inductor cache
  ember_eager          Ember eager
  ember_compiled_cold  torch.compile(backend="ember"), fresh EMBER_CACHE_DIR
  ember_compiled_warm  the same in a new process over the cache the cold run filled

Per run:
  preparation  first_step_s: process start to the end of the first training step (imports,
               model build, first step with its compile); compile_s: the first step's excess
               over a steady one (compiled modes)
  execution    steady tokens/s (images/s for the ResNet): median, min/max, quartiles and
               spread over the steps after the first two
  completion   finished?, fallback ops (op -> calls), loss parity: the largest relative
               difference of the per-step losses from the CPU eager run's

  ember bench train --quick --out /tmp/bench        # ~2 minutes: see QUICK below
  ember bench train --only demo,qwen3-s --dtypes float32 --steps 10 --out /tmp/bench
  ember bench train --only resnet --modes cpu_eager,ember_eager --steps 4

--quick runs demo and resnet in float32 for 6 steps (4 of them timed); demo in all five modes, resnet without
Inductor (its cold compile alone takes ~40 s on 2 cores). Writes DIR/train.json,
DIR/train.md, DIR/throughput.svg and DIR/first_step.svg, and stores the run in the knowledge
base (`ember kb list`; EMBER_KB=off turns that off)."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from . import machine, report
from .workloads import DTYPES, WORKLOADS

MODES = ("cpu_eager", "inductor", "ember_eager", "ember_compiled_cold", "ember_compiled_warm")
REFERENCE = "cpu_eager"
# Loss parity against the CPU eager run: the largest relative difference of a step's loss.
# Kernels accumulate in other orders, and over steps AdamW carries the difference on.
TOLERANCE = {"float32": 2e-3, "bfloat16": 5e-2}
QUICK = {"workloads": ("demo", "resnet"), "dtypes": ("float32",), "steps": 6,
         "leave_out": {("resnet", "inductor"): "left out by --quick: Inductor's cold compile of the ResNet "
                                               "takes longer than the rest of the quick run"}}
DEFAULT_STEPS = 8


def _child_mode(mode: str) -> str:
    return "ember_compiled" if mode.startswith("ember_compiled") else mode


def run_one(workload, dtype, mode, steps, seed, time_limit, env) -> dict:
    """One child process; its record, or a record of how it failed."""
    cmd = [sys.executable, "-m", "torch_ember.bench.child", workload, dtype, _child_mode(mode),
           "--steps", str(steps), "--seed", str(seed)]
    base = {"name": f"{workload} {dtype} {mode}", "workload": workload, "dtype": dtype, "mode": mode}
    t0 = time.time()
    try:
        r = subprocess.run(cmd + ["--t0", repr(t0)], capture_output=True, text=True, timeout=time_limit,
                           env={**os.environ, "PYTHONWARNINGS": "ignore", **env})
    except subprocess.TimeoutExpired:
        return {**base, "status": "timeout", "error": f"no result within {time_limit:.0f} s",
                "completion": {"finished": False}, "seconds": round(time.time() - t0, 1)}
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if r.returncode != 0 or not lines:
        tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or [""]
        why = f"process exited with {r.returncode}" + (f" (signal {-r.returncode})" if r.returncode < 0 else "")
        return {**base, "status": "crash", "error": f"{why}: {tail[0][:300]}", "completion": {"finished": False},
                "seconds": round(time.time() - t0, 1)}
    rec = {**base, **json.loads(lines[-1]), "seconds": round(time.time() - t0, 1)}
    if "error" in rec:
        rec["status"] = "error"
        rec.setdefault("completion", {"finished": False})
    else:
        rec["status"] = "ok"
    return rec


def parity(rec, ref, tolerance) -> dict | None:
    """Loss parity of `rec` against the reference run over the steps both finished."""
    got = (rec.get("completion") or {}).get("losses")
    want = (ref or {}).get("completion", {}).get("losses") if ref else None
    if not got or not want:
        return None
    n = min(len(got), len(want))
    diffs = [abs(a - b) / max(abs(b), 1e-12) for a, b in zip(got[:n], want[:n])]
    worst = max(diffs)
    finite = worst == worst and worst != float("inf")
    return {"reference": REFERENCE, "steps": n, "max_rel_diff": worst, "tolerance": tolerance,
            "ok": bool(finite and worst <= tolerance)}


def plan(workloads, dtypes, modes, quick):
    """(workload, dtype, [modes to run], {mode: why left out})."""
    modes = list(modes)
    if "ember_compiled_warm" in modes and "ember_compiled_cold" not in modes:
        # warm means "over the cache a cold run filled": the cold run comes first, and is reported
        modes.insert(modes.index("ember_compiled_warm"), "ember_compiled_cold")
    out = []
    for w in workloads:
        for d in dtypes:
            skipped = {m: why for (wl, m), why in QUICK["leave_out"].items() if quick and wl == w and m in modes}
            out.append((w, d, [m for m in MODES if m in modes and m not in skipped], skipped))
    return out


def run(workloads=None, dtypes=None, modes=None, steps=None, quick=False, seed=0, time_limit=600.0,
        out=None, progress=True) -> dict:
    workloads = list(workloads or (QUICK["workloads"] if quick else WORKLOADS))
    dtypes = list(dtypes or (QUICK["dtypes"] if quick else DTYPES))
    modes = list(modes or MODES)
    steps = steps or (QUICK["steps"] if quick else DEFAULT_STEPS)
    for name, given, known in (("workload", workloads, WORKLOADS), ("dtype", dtypes, DTYPES), ("mode", modes, MODES)):
        unknown = [x for x in given if x not in known]
        if unknown:
            raise ValueError(f"unknown {name} {', '.join(unknown)}; one of {', '.join(known)}")
    todo = plan(workloads, dtypes, modes, quick)
    total = sum(len(ms) for *_, ms, _ in todo)
    data = {"bench": "train", "meta": machine.describe(),
            "config": {"workloads": {w: WORKLOADS[w].describe for w in workloads}, "dtypes": dtypes,
                       "modes": modes, "steps": steps, "quick": quick, "seed": seed, "time_limit_s": time_limit,
                       "parity_reference": REFERENCE, "parity_tolerance": {d: TOLERANCE[d] for d in dtypes},
                       "compiled": "forward + loss (backward follows); zero_grad and AdamW eager",
                       "timed_steps": "steps after the first two (after the first when fewer than 4)"},
            "results": []}
    done = 0
    t_start = time.time()
    for workload, dtype, run_modes, skipped in todo:
        with tempfile.TemporaryDirectory(prefix="ember-bench-") as tmp:
            env = {"EMBER_CACHE": "1", "EMBER_CACHE_DIR": os.path.join(tmp, "ember"),
                   "TORCHINDUCTOR_CACHE_DIR": os.path.join(tmp, "inductor")}
            recs = {}
            for mode in run_modes:
                if progress:
                    print(f"[{done + 1}/{total}] {workload} {dtype} {mode} ...", file=sys.stderr, flush=True)
                recs[mode] = rec = run_one(workload, dtype, mode, steps, seed, time_limit, env)
                done += 1
                if progress:
                    print(f"    {report.one_line(rec)}", file=sys.stderr, flush=True)
            for mode, why in skipped.items():
                recs[mode] = {"name": f"{workload} {dtype} {mode}", "workload": workload, "dtype": dtype,
                              "mode": mode, "status": "skip", "reason": why}
        for mode in MODES:
            rec = recs.get(mode)
            if rec is None:
                continue
            if rec["status"] == "ok" and mode != REFERENCE:
                par = parity(rec, recs.get(REFERENCE), TOLERANCE[dtype])
                rec["completion"]["loss_parity"] = par
                if par and not par["ok"]:
                    rec["failure"] = (f"loss differs from {REFERENCE}: max relative difference "
                                      f"{par['max_rel_diff']:.3g} over {par['steps']} steps > {par['tolerance']}")
            # the knowledge base reads a list of op names here; the counts stay in completion
            rec["fallback_ops"] = sorted((rec.get("completion") or {}).get("fallback_ops") or {})
            data["results"].append(rec)
    data["ratios"] = report.ratios(data["results"])
    data["summary"] = report.summary(data["results"], time.time() - t_start)
    if out:
        report.write(out, data)
    try:  # the knowledge base is a by-product: failing to record must never break the run
        from ..kb import record_run
        data["kb_run"] = record_run("bench-train", data)  # None when EMBER_KB=off
    except Exception as e:  # noqa: BLE001
        print(f"warning: ember kb: run not recorded: {e!r}", file=sys.stderr)
    if out:  # again, now with the run id
        with open(os.path.join(out, "train.json"), "w") as f:
            json.dump(data, f, indent=1, default=str)
    return data


def _names(text):
    return [x.strip() for x in text.split(",") if x.strip()] if text else None


def main(argv=None, prog=None) -> int:
    p = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="demo and resnet, float32, 6 steps (see above)")
    p.add_argument("--only", metavar="W1,W2", help=f"workloads (of {', '.join(WORKLOADS)})")
    p.add_argument("--dtypes", metavar="D1,D2", help="float32, bfloat16 (default both; --quick: float32)")
    p.add_argument("--modes", metavar="M1,M2", help=f"of {', '.join(MODES)} (default all)")
    p.add_argument("--steps", type=int, help=f"training steps per run (default {DEFAULT_STEPS}; --quick: "
                                             f"{QUICK['steps']})")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--time-limit", type=float, default=600.0, metavar="S", help="seconds per child (default 600)")
    p.add_argument("--out", metavar="DIR", help="write DIR/train.json, DIR/train.md and the plots")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    try:
        data = run(_names(args.only), _names(args.dtypes), _names(args.modes), args.steps, args.quick, args.seed,
                   args.time_limit, args.out, not args.no_progress)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(report.text(data))
    if args.out:
        print(f"wrote {os.path.join(args.out, 'train.json')}, train.md, throughput.svg, first_step.svg")
    if data.get("kb_run"):
        print(f"stored in the knowledge base as run {data['kb_run']} (ember kb list)")
    return 0
