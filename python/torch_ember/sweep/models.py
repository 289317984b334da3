"""`ember sweep models`: every Hugging Face architecture for causal LM, masked LM, seq2seq and
image classification, built from a reduced config with random weights (no downloads), run
forward + backward on the CPU, on ember eagerly and on ember compiled (strict), one child
process per model so a crash or a hang is recorded, not fatal.

  ember sweep models --limit 20 --out /tmp/sweep          # the first 20 architectures
  ember sweep models --only llama,bert,t5 --out /tmp/sweep
  ember sweep models --resume --out /tmp/sweep             # continue where a run stopped

Writes DIR/models.json ({"meta", "summary", "records"}) and DIR/models.md, and prints a summary
line: N built, eager pass %, compiled pass %, parity %, models with fallbacks.
"""
import argparse
import json
import os
import subprocess
import sys
import time

from . import model_check, results

CATEGORIES = ("unsupported op", "compile error", "wrong values", "error", "crash", "timeout", "could not build")


def _child(model_type, task, time_limit, compiled) -> dict:
    cmd = [sys.executable, "-m", "torch_ember.sweep.model_check", model_type, task]
    if not compiled:
        cmd.append("--no-compile")
    base = {"model": model_type, "task": task, "built": False, "eager": "skip", "compiled": "skip"}
    t0 = time.monotonic()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=time_limit,
                           env={**os.environ, "PYTHONWARNINGS": "ignore"})
    except subprocess.TimeoutExpired:
        return {**base, "failure": f"no result within {time_limit:.0f} s", "category": "timeout",
                "seconds": round(time.monotonic() - t0, 1)}
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if r.returncode != 0 or not lines:
        tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or [""]
        why = f"process exited with {r.returncode}" + (f" (signal {-r.returncode})" if r.returncode < 0 else "")
        return {**base, "failure": f"{why}: {tail[0][:300]}", "category": "crash",
                "seconds": round(time.monotonic() - t0, 1)}
    rec = json.loads(lines[-1])
    rec["seconds"] = round(time.monotonic() - t0, 1)
    return rec


def summarize(records) -> dict:
    built = [r for r in records if r.get("built")]
    n = len(built) or 1
    eager = sum(r["eager"] == "pass" for r in built)
    comp = sum(r["compiled"] == "pass" for r in built)
    parity = sum(bool(r.get("eager_parity", {}).get("ok")) and r["compiled"] in ("pass", "skip") for r in built)
    cats = {c: sum(r.get("category") == c for r in records) for c in CATEGORIES}
    return {"models": len(records), "built": len(built), "eager_pass": eager, "compiled_pass": comp,
            "parity_pass": parity, "with_fallbacks": sum(bool(r.get("fallback_ops")) for r in built),
            "eager_pass_pct": round(100 * eager / n, 1), "compiled_pass_pct": round(100 * comp / n, 1),
            "parity_pct": round(100 * parity / n, 1), "failures": cats}


def summary_line(s) -> str:
    return (f"{s['built']} of {s['models']} built; eager pass {s['eager_pass_pct']}%, compiled pass "
            f"{s['compiled_pass_pct']}%, parity {s['parity_pct']}%; {s['with_fallbacks']} models with fallbacks")


def to_markdown(data) -> str:
    s = data["summary"]
    out = ["# ember model sweep", "", f"{data['meta']['torch']} · transformers {data['meta']['transformers']} · "
           f"{data['meta']['cpu']}", "", summary_line(s), "",
           "| failure category | models |", "|---|---|"]
    out += [f"| {c} | {n} |" for c, n in s["failures"].items() if n]
    out += ["", "| model | task | built | eager | compiled | loss rel err | grad rel err | fallback ops | "
                "compile cold / warm s | failure |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in data["records"]:
        par = r.get("compiled_parity") or r.get("eager_parity") or {}
        fb = ", ".join(f"{k} ({v})" for k, v in (r.get("fallback_ops") or {}).items())
        cold, warm = r.get("compile_cold_seconds"), r.get("compile_warm_seconds")
        times = f"{cold} / {warm}" if cold is not None else ""
        fail = (r.get("category", "") + ": " + r.get("failure", "")).strip(": ").replace("|", "\\|")[:200]
        out.append(f"| {r['model']} | {r['task']} | {'yes' if r.get('built') else 'no'} | {r['eager']} | "
                   f"{r['compiled']} | {par.get('loss_rel', ''):.2e} | {par.get('grad_rel', ''):.2e} | {fb} | {times} | {fail} |"
                   if par else
                   f"| {r['model']} | {r['task']} | {'yes' if r.get('built') else 'no'} | {r['eager']} | "
                   f"{r['compiled']} |  |  | {fb} | {times} | {fail} |")
    return "\n".join(out) + "\n"


def _meta() -> dict:
    import platform

    import torch
    import transformers

    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    return {"torch": torch.__version__, "transformers": transformers.__version__, "python": platform.python_version(),
            "cpu": cpu, "started": time.strftime("%Y-%m-%d %H:%M:%S")}


class _Progress:
    def __init__(self, total):
        self.total, self.done, self.bar = total, 0, None
        if sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
            self.bar = Progress(TextColumn("{task.description:<28}"), BarColumn(), MofNCompleteColumn(),
                                TimeElapsedColumn(), console=Console(stderr=True))
            self.task = self.bar.add_task("sweep", total=total)
            self.bar.start()

    def start(self, name):
        if self.bar is not None:
            self.bar.update(self.task, description=name)

    def finish(self, rec):
        self.done += 1
        if self.bar is not None:
            self.bar.update(self.task, completed=self.done)
        else:
            print(f"[{self.done}/{self.total}] {rec['model']:<24} eager={rec['eager']:<5} compiled={rec['compiled']:<5} "
                  f"{rec.get('category', '')}", file=sys.stderr, flush=True)

    def close(self):
        if self.bar is not None:
            self.bar.stop()


def run(only=None, limit=None, time_limit=180.0, out=None, resume=False, compiled=True, progress=True) -> dict:
    from . import tiny_hf

    archs = tiny_hf.architectures()
    if only:
        known = {m for m, _ in archs}
        unknown = [m for m in only if m not in known]
        if unknown:
            raise ValueError(f"not a causal/masked/seq2seq/image-classification architecture: {', '.join(unknown)}")
        archs = [a for a in archs if a[0] in only]
    if limit:
        archs = archs[:limit]
    records, path = [], None
    if out:
        os.makedirs(out, exist_ok=True)
        path = os.path.join(out, "models.json")
        if resume and os.path.exists(path):
            with open(path) as f:
                records = json.load(f).get("records", [])
    done = {r["model"] for r in records}
    todo = [a for a in archs if a[0] not in done]
    bar = _Progress(len(todo)) if progress else None
    meta = _meta()
    try:
        for model_type, task in todo:
            if bar:
                bar.start(model_type)
            rec = _child(model_type, task, time_limit, compiled)
            records.append(rec)
            if bar:
                bar.finish(rec)
            if path:  # after every model, so an interrupted run can resume
                _write(out, meta, records)
    finally:
        if bar:
            bar.close()
    data = {"meta": meta, "summary": summarize(records), "records": records}
    if out:
        _write(out, meta, records)
    results.record("sweep-models", data)
    return data


def _write(out, meta, records):
    results.write(out, "models", {"meta": meta, "summary": summarize(records), "records": records}, to_markdown)


def main(argv=None, prog=None) -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", help="comma-separated model types (config model_type)")
    parser.add_argument("--limit", type=int, help="the first N architectures only")
    parser.add_argument("--time-limit", type=float, default=180.0, metavar="S", help="seconds per model (default 180)")
    parser.add_argument("--out", metavar="DIR", help="write DIR/models.json and DIR/models.md")
    parser.add_argument("--resume", action="store_true", help="skip models already recorded in DIR/models.json")
    parser.add_argument("--no-compile", action="store_true", help="eager only")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    only = [m.strip() for m in args.only.split(",") if m.strip()] if args.only else None
    try:
        data = run(only, args.limit, args.time_limit, args.out, args.resume, not args.no_compile,
                   not args.no_progress)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(summary_line(data["summary"]))
    return 0


_ = model_check  # the child's module, run with -m
