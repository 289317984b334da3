"""Conformance checks in child processes: an op that crashes the interpreter (a segfault, a stack
overflow) or hangs it becomes that op's failure, and a fresh child carries on with the rest."""
from __future__ import annotations

import json
import math
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time

# Child -> parent lines start with this; anything else an op prints to stdout is ignored.
MARK = "@@ember-conformance "
# A child that reports nothing for this long (each sample is announced) is taken to hang.
HANG_SECONDS = 120.0


def _worker() -> None:
    """Child side: read {"suite", "units", "opts", "deadline"} from stdin, report on stdout as it
    goes."""
    cfg = json.loads(sys.stdin.readline())
    from . import run as R

    suite = R.suite(cfg.get("suite", "ops"))
    by_name = {suite.item_name(x): x for x in suite.load()}
    units = [(by_name[name], R.parse_dtype(dtype)) for name, dtype in cfg["units"]]
    # The deadline is wall-clock time, shared with the parent; checks run on a monotonic clock.
    end = time.monotonic() + cfg["deadline"] - time.time() if cfg["deadline"] else math.inf

    def emit(**msg):
        sys.stdout.write(MARK + json.dumps(msg) + "\n")
        sys.stdout.flush()

    def trace(kind, index, summary, result=None):
        if result is None:
            emit(at=[kind, index, summary[:600]])
        else:
            emit(result=[kind, result])

    R.check_all(units, cfg["opts"], end, lambda row: emit(row=row), trace, check_fn=suite.check)


def _read_lines(stream, lines: queue.Queue) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


def _death(proc, stderr_file) -> str:
    rc = proc.returncode
    if rc is not None and rc < 0:
        try:
            why = f"process crashed ({signal.Signals(-rc).name})"
        except ValueError:
            why = f"process crashed (signal {-rc})"
    else:
        why = f"process exited with status {rc}"
    stderr_file.seek(0)
    tail = [ln.strip() for ln in stderr_file.read().splitlines() if ln.strip()][-1:]
    return why + (": " + tail[0][:300] if tail else "")


def _crashed_row(unit, at, partial: dict, why: str, passes) -> dict:
    """The row of the unit a child died in: the pass it was in fails, with the sample it was on;
    the passes before it keep their results, those after it are skipped."""
    name, dtype = unit
    kind, index, summary = at or (passes[0], None, "")
    fail = {"status": "fail", "message": why, "crash": True, "native": False,
            "samples": index or 0, "fallback_ops": [], "sample_index": index, "sample": summary,
            "sample_fallback": []}
    row = {"op": name, "dtype": dtype}
    for p in passes:
        if p in partial:
            row[p] = partial[p]
        elif p == kind:
            row[p] = fail
        else:
            row[p] = {"status": "skipped", "reason": f"{kind} crashed the process"}
    return row


def _one_child(units: list, opts: dict, deadline, add, hang_seconds: float, suite_name: str) -> list:
    """Run `units` in one child until it finishes or dies; returns the units still to do."""
    from . import run as R

    units = list(units)
    passes = lambda dtype: R.suite(suite_name).passes(R.parse_dtype(dtype), opts)  # noqa: E731
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([sys.executable, "-m", "torch_ember.conformance.isolate"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                text=True)
        proc.stdin.write(json.dumps({"suite": suite_name, "units": units, "opts": opts,
                                     "deadline": deadline}) + "\n")
        proc.stdin.close()
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=_read_lines, args=(proc.stdout, lines), daemon=True).start()
        at, partial, heard, hung = None, {}, False, False
        while units:
            try:
                line = lines.get(timeout=hang_seconds)
            except queue.Empty:
                proc.kill()
                hung = True
                break
            if line is None:
                break
            if not line.startswith(MARK):
                continue
            msg, heard = json.loads(line[len(MARK):]), True
            if "at" in msg:
                at = msg["at"]
            elif "result" in msg:
                partial[msg["result"][0]] = msg["result"][1]
            elif "row" in msg:
                add(msg["row"])
                units.pop(0)
                at, partial = None, {}
        proc.wait()
        if not units:
            return units
        why = f"hung: no progress for {hang_seconds:.0f}s" if hung else _death(proc, err)
        if not heard and not hung:
            # Died before checking anything: the harness itself is broken, not an op.
            raise RuntimeError(f"conformance worker failed to start: {why}")
        unit = units.pop(0)
        add(_crashed_row(unit, at, partial, why, passes(unit[1])))
    return units


def run_isolated(names, dtypes, opts: dict, deadline, add, hang_seconds: float = HANG_SECONDS,
                 suite_name: str = "ops"):
    """Check every (name, dtype) of the suite in child processes, passing each row to `add` in
    order. `deadline` is a time.time() value or None; units not started by then are skipped."""
    from . import run as R

    units = [(name, R.dtype_name(d)) for name in names for d in dtypes]
    passes = R.suite(suite_name).passes
    while units:
        if deadline is not None and time.time() >= deadline:
            for name, dtype in units:
                d = R.parse_dtype(dtype)
                add(R.skipped_row(name, d, "time budget", passes(d, opts)))
            return
        units = _one_child(units, opts, deadline, add, hang_seconds, suite_name)


if __name__ == "__main__":
    _worker()
