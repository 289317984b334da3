"""`ember sweep flex`: the FlexAttention variants researchers write (noop, causal, sliding window,
prefix LM, documents, ALiBi, relative position, head bias, tanh softcap, GQA, a 2-D neighbourhood,
fully masked rows, a learned bias table) over a small shape grid, eager and compiled
(torch.compile(backend="ember")), forward and backward, each against a dense float64 reference on
the CPU (flex_check.py says how, and the tolerances).

Cases run one after another in a worker process, started again after a crash; a case with no
answer within --time-limit seconds is recorded as a timeout and its worker killed. Ember's on-disk
compile cache is off in the worker and Dynamo is reset before each case, so compile times are cold.

  ember sweep flex --out /tmp/flex                        # every case
  ember sweep flex --only causal,alibi --modes compiled   # some variants, compiled only
  ember sweep flex --list                                 # the case names

Writes DIR/flex.json ({"sweep": "flex", "meta", "summary", "records"}) and DIR/flex.md, prints a
progress line per case and a summary line: N of M passed, median and largest compile time.
"""
import argparse
import json
import os
import selectors
import statistics
import subprocess
import sys
import tempfile
import time

from . import flex_check, results

CATEGORIES = ("wrong values", "error", "crash", "timeout")


class _Worker:
    """A `python -m torch_ember.sweep.flex_check --worker` child: case names in, JSON records out."""

    def __init__(self, start_limit):
        self.err = tempfile.TemporaryFile(mode="w+")
        env = {**os.environ, "PYTHONWARNINGS": "ignore", "EMBER_CACHE": "0", "EMBER_FALLBACK": "silent"}
        self.proc = subprocess.Popen([sys.executable, "-m", "torch_ember.sweep.flex_check", "--worker"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err,
                                     text=True, bufsize=1, env=env)
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.proc.stdout, selectors.EVENT_READ)
        if self._answer(start_limit) is None:
            raise RuntimeError(f"the flex worker did not start: {self.stderr_tail()}")

    def _answer(self, limit):
        """The next record the worker prints, None on timeout or exit."""
        deadline = time.monotonic() + limit
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not self.sel.select(left):
                return None
            line = self.proc.stdout.readline()
            if not line:
                return None
            if line.startswith(flex_check.MARK):
                return json.loads(line[len(flex_check.MARK):])

    def ask(self, name, limit):
        self.proc.stdin.write(name + "\n")
        self.proc.stdin.flush()
        return self._answer(limit)

    def alive(self):
        return self.proc.poll() is None

    def stderr_tail(self):
        self.err.seek(0)
        lines = [ln.strip() for ln in self.err.read().splitlines() if ln.strip()]
        return lines[-1][:300] if lines else ""

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.sel.close()
        self.err.close()


def _run_case(worker_box, name, time_limit):
    base = {"case": name, "variant": name.split()[0], "shape": name.split()[1], "mode": name.split()[2]}
    if worker_box[0] is None:  # its start (imports) is not charged to the case
        worker_box[0] = _Worker(start_limit=max(120.0, time_limit))
    t0 = time.monotonic()
    w = worker_box[0]
    rec = w.ask(name, time_limit)
    if rec is None:
        crashed = not w.alive()
        w.close()
        worker_box[0] = None
        if crashed:
            code = w.proc.returncode
            why = f"worker exited with {code}" + (f" (signal {-code})" if code < 0 else "")
            return {**base, "status": "crash", "category": "crash", "failure": f"{why}: {w.stderr_tail()}",
                    "seconds": round(time.monotonic() - t0, 1)}
        return {**base, "status": "timeout", "category": "timeout",
                "failure": f"no result within {time_limit:g} s", "seconds": round(time.monotonic() - t0, 1)}
    rec["seconds"] = round(time.monotonic() - t0, 2)
    return rec


def summarize(records) -> dict:
    passed = sum(r["status"] == "pass" for r in records)
    compiled = [r["compile_seconds"] for r in records if r.get("mode") == "compiled" and "compile_seconds" in r]
    by = {}
    for key in ("variant", "mode"):
        groups = {}
        for r in records:
            g = groups.setdefault(r.get(key, "?"), [0, 0])
            g[0] += r["status"] == "pass"
            g[1] += 1
        by[key] = {k: f"{p}/{n}" for k, (p, n) in groups.items()}
    return {"cases": len(records), "passed": passed, "failed": len(records) - passed,
            "failures": {c: sum(r.get("category") == c for r in records if r["status"] != "pass") for c in CATEGORIES},
            "compile_median_seconds": round(statistics.median(compiled), 3) if compiled else None,
            "compile_max_seconds": round(max(compiled), 3) if compiled else None,
            "with_fallbacks": sum(bool(r.get("fallback_ops")) for r in records),
            # Cases whose forward and backward both ran the fused kernels (not the dense fallback).
            "fused": sum(r.get("kernels") == {"forward": "fused", "backward": "fused"} for r in records),
            # Ops a compiled graph ran as whole library steps (unfused), over all compiled cases.
            "library_steps": sorted({op for r in records for op in r.get("library_steps") or ()}),
            "by_variant": by["variant"], "by_mode": by["mode"]}


def summary_line(s) -> str:
    line = f"{s['passed']} of {s['cases']} passed"
    if s["compile_median_seconds"] is not None:
        line += (f"; compiled: median compile {s['compile_median_seconds']:.2f} s, "
                 f"largest {s['compile_max_seconds']:.2f} s (cold)")
    if "fused" in s:
        line += f"; {s['fused']} of {s['cases']} on the fused kernels, forward and backward"
    bad = ", ".join(f"{n} {c}" for c, n in s["failures"].items() if n)
    return line + (f"; {bad}" if bad else "") + (f"; {s['with_fallbacks']} with CPU fallbacks"
                                                 if s["with_fallbacks"] else "")


def to_markdown(data) -> str:
    s = data["summary"]
    m = data["meta"]
    out = ["# ember FlexAttention sweep", "", f"torch {m['torch']} · {m['cpu']} · started {m['started']}", "",
           summary_line(s), "",
           f"Against a float64 dense reference on the CPU; pass: error / largest |reference| ≤ "
           f"{flex_check.FWD_TOL:g} for out and lse, ≤ {flex_check.BWD_TOL:g} for each gradient.", "",
           f"Compiled graphs ran as library steps: {', '.join(s['library_steps']) or 'none'}.", "",
           "| variant | passed |", "|---|---|"]
    out += [f"| {v} | {p} |" for v, p in s["by_variant"].items()]
    out += ["", "| case | status | max error | compile s | first call s | warm call s | fallbacks | kernels | failure |",
            "|---|---|---|---|---|---|---|---|---|"]
    for r in data["records"]:
        err = r.get("max_error", "")
        err = f"{err:.1e}" if isinstance(err, float) else err
        fb = ", ".join(f"{k} ({v})" for k, v in (r.get("fallback_ops") or {}).items())
        fail = r.get("failure", "").replace("|", "\\|")[:200]
        k = r.get("kernels") or {}
        kernels = "fused" if k == {"forward": "fused", "backward": "fused"} else (
            f"forward {k.get('forward', '?')}, backward {k.get('backward', '?')}".replace("|", "\\|") if k else "")
        out.append(f"| {r['case']} | {r['status']} | {err} | {r.get('compile_seconds', '')} | "
                   f"{r.get('first_call_seconds', '')} | {r.get('warm_call_seconds', '')} | {fb} | {kernels} | {fail} |")
    return "\n".join(out) + "\n"


def _meta(time_limit) -> dict:
    import platform

    import torch

    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    return {"torch": torch.__version__, "python": platform.python_version(), "cpu": cpu,
            "started": time.strftime("%Y-%m-%d %H:%M:%S"), "time_limit_seconds": time_limit,
            "tolerance": {"forward": flex_check.FWD_TOL, "backward": flex_check.BWD_TOL},
            "shapes": [s.name for s in flex_check.SHAPES], "shape_order": "BxHxMxNxD"}


def select(only=None, modes=flex_check.MODES, limit=None) -> list:
    if only:
        unknown = [v for v in only if v not in flex_check.VARIANTS]
        if unknown:
            raise ValueError(f"unknown variant: {', '.join(unknown)}; one of {', '.join(flex_check.VARIANTS)}")
    bad = [m for m in modes if m not in flex_check.MODES]
    if bad:
        raise ValueError(f"unknown mode: {', '.join(bad)}; one of {', '.join(flex_check.MODES)}")
    names = flex_check.cases(only, modes=tuple(modes))
    return names[:limit] if limit else names


def run(only=None, limit=None, time_limit=60.0, out=None, modes=flex_check.MODES, progress=True) -> dict:
    names = select(only, modes, limit)
    meta = _meta(time_limit)
    records, box = [], [None]
    try:
        for i, name in enumerate(names, 1):
            rec = _run_case(box, name, time_limit)
            records.append(rec)
            if progress:
                err = rec.get("max_error")
                err = f"err {err:.1e}" if isinstance(err, float) else ""
                comp = f"compile {rec['compile_seconds']:.2f} s" if "compile_seconds" in rec else ""
                print(f"[{i}/{len(names)}] {name:<40} {rec['status']:<7} {err:<12} {comp:<18} "
                      f"{rec.get('failure', '')[:120]}", file=sys.stderr, flush=True)
            if out:
                _write(out, meta, records)
    finally:
        if box[0] is not None:
            box[0].close()
    data = {"sweep": "flex", "meta": meta, "summary": summarize(records), "records": records}
    if out:
        _write(out, meta, records)
    results.record("sweep-flex", data)
    return data


def _write(out, meta, records):
    data = {"sweep": "flex", "meta": meta, "summary": summarize(records), "records": records}
    results.write(out, "flex", data, to_markdown)


def main(argv=None, prog=None) -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", help=f"comma-separated variants: {', '.join(flex_check.VARIANTS)}")
    parser.add_argument("--modes", default=",".join(flex_check.MODES), help="eager,compiled (default both)")
    parser.add_argument("--limit", type=int, help="the first N cases only")
    parser.add_argument("--time-limit", type=float, default=60.0, metavar="S",
                        help="seconds per case, compile included (default 60); past it the case is a timeout")
    parser.add_argument("--out", metavar="DIR", help="write DIR/flex.json and DIR/flex.md")
    parser.add_argument("--list", action="store_true", help="print the case names and exit")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    only = [v.strip() for v in args.only.split(",") if v.strip()] if args.only else None
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    try:
        if args.list:
            print("\n".join(select(only, modes, args.limit)))
            return 0
        data = run(only, args.limit, args.time_limit, args.out, modes, not args.no_progress)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(summary_line(data["summary"]))
    return 0
