"""`ember kb`: a SQLite knowledge base of Ember's evaluation runs (model sweeps, OpInfo
conformance eager and compiled, benchmarks, PyTorch's upstream tests), so that runs can be
listed, searched, compared and rendered as a static HTML report.

The sweep and conformance runners call `record_run` at the end of every run; `import_file`
(`ember kb add`) stores a JSON output written earlier. The database is $EMBER_KB, default
~/.cache/torch_ember/kb.sqlite; EMBER_KB=off turns recording off.

    from torch_ember import kb
    kb.record_run("sweep-models", data)          # -> run id
    kb.compare("prev", "last", kind="sweep-models", threshold=0.10)
"""
from __future__ import annotations

import os
import re

from . import store
from .explain import Explanation
from .explain import explain as explain_failure  # the name `explain` stays the module's
from .store import KINDS, connect, db_path

__all__ = ["Explanation", "KINDS", "compare", "connect", "db_path", "explain_failure", "import_file", "list_runs",
           "record_run", "search", "write_report"]

DEFAULT_THRESHOLD = 0.10
# Times in seconds that moved by less than this are not news whatever the ratio: a first eager
# call of 10 ms that takes 20 ms is the scheduler, not a regression.
DEFAULT_MIN_SECONDS = 0.05

# Which metrics `compare` reports, and which way is better. Throughput-like names first, since
# "tokens_s" also ends in "_s". The bare "seconds" is a runner's wall time for the item,
# process start and imports included: too noisy to be news.
_HIGHER = re.compile(r"(per_s|tokens_s|gflops|gbps|ratio_vs_\w+|throughput)$", re.IGNORECASE)
_LOWER = re.compile(r"(_seconds|_s|_us|_ms)$", re.IGNORECASE)
_SECONDS = re.compile(r"(_seconds|_s)$", re.IGNORECASE)


def metric_direction(name: str) -> int:
    """+1 when larger is better (throughput), -1 when smaller is (times), 0 when not compared."""
    if _HIGHER.search(name):
        return 1
    if _LOWER.search(name):
        return -1
    return 0


def record_run(kind: str, data, *, source: str = "live", label: str | None = None, path=None) -> int | None:
    """Store a run's JSON (the dict the runner returns); returns the run id, or None when
    recording is off (EMBER_KB=off, or under pytest without EMBER_KB set: test suites run the
    runners many times and must not fill the user's knowledge base)."""
    if path is None and db_path() is None:
        return None
    if path is None and "PYTEST_CURRENT_TEST" in os.environ and "EMBER_KB" not in os.environ:
        return None
    conn = connect(path)
    try:
        return store.record(conn, kind, data, source=source, label=label)
    finally:
        conn.close()


def import_file(file, kind: str | None = None, label: str | None = None, path=None, force: bool = False):
    """Import a runner's JSON output; returns (run id, newly stored)."""
    conn = connect(path)
    try:
        return store.import_file(conn, file, kind, label, force)
    finally:
        conn.close()


def list_runs(kind: str | None = None, limit: int | None = None, path=None) -> list[dict]:
    conn = connect(path)
    try:
        return store.runs(conn, kind, limit)
    finally:
        conn.close()


def search(text: str, kind: str | None = None, limit: int = 50, path=None) -> list[dict]:
    conn = connect(path)
    try:
        return store.search(conn, text, kind, limit)
    finally:
        conn.close()


def write_report(out_dir, runs: int = 20, path=None):
    from . import report

    conn = connect(path)
    try:
        return report.write(conn, out_dir, runs)
    finally:
        conn.close()


def _failing(status) -> bool:
    return status in ("fail", "compile-error", "wrong", "crash")


def _first_failure(item) -> dict:
    f = (item.get("failures") or [{}])[0]
    return {"message": f.get("message") or "", "explanation": f.get("explanation") or "",
            "advice": f.get("advice") or ""}


def compare_items(a: dict, b: dict, threshold: float = DEFAULT_THRESHOLD,
                  min_seconds: float = DEFAULT_MIN_SECONDS) -> dict:
    """What changed from items `a` to items `b` (store.items' {name: item}): items that newly fail
    or newly pass (the item or any of its checks: a model whose eager half breaks while its
    compiled half already failed still newly fails), other status changes, fallback changes,
    and tracked metrics that moved by more than `threshold` (a fraction: 0.10 is 10 %) and, for
    times in seconds, by more than `min_seconds`."""
    out = {k: [] for k in ("newly_failing", "newly_passing", "status_changes", "newly_fallback",
                           "stopped_fallback", "fallback_changed", "metric_changes")}
    out["only_in_a"] = sorted(set(a) - set(b))
    out["only_in_b"] = sorted(set(b) - set(a))
    for name in (n for n in b if n in a):
        x, y = a[name], b[name]
        checks = [(c, x["checks"].get(c), y["checks"].get(c)) for c in y["checks"]
                  if x["checks"].get(c) != y["checks"].get(c)]
        changes = [f"{c} {before} -> {after}" for c, before, after in checks]
        broke = [c for c, before, after in checks if _failing(after) and not _failing(before)]
        row = {"name": name, "before": x["status"], "after": y["status"], "detail_before": x["detail"],
               "detail_after": y["detail"], "changes": changes}
        if (y["status"] == "fail" and x["status"] != "fail") or (y["status"] == "fail" and broke):
            out["newly_failing"].append({**row, **_first_failure(y)})
        elif x["status"] == "fail" and y["status"] == "pass":
            out["newly_passing"].append(row)
        elif x["status"] != y["status"] or changes or (x["detail"] != y["detail"] and y["status"] == "fail"):
            # fail -> skip, compile-error -> wrong, ...; native-pass -> fallback-pass is a fallback change
            out["status_changes"].append(row)
        fa, fb = set(x["fallback"]), set(y["fallback"])
        if fb and not fa:
            out["newly_fallback"].append({"name": name, "ops": sorted(fb)})
        elif fa and not fb:
            out["stopped_fallback"].append({"name": name, "ops": sorted(fa)})
        elif fa != fb:
            out["fallback_changed"].append({"name": name, "added": sorted(fb - fa), "removed": sorted(fa - fb)})
        for metric, after in y["metrics"].items():
            before = x["metrics"].get(metric)
            direction = metric_direction(metric)
            if not direction or not isinstance(before, (int, float)) or not isinstance(after, (int, float)):
                continue
            if before == 0:  # no scale to be relative to
                continue
            change = (after - before) / abs(before)
            small = _SECONDS.search(metric) and abs(after - before) < min_seconds
            if abs(change) > threshold and not small:
                out["metric_changes"].append({"name": name, "metric": metric, "before": before, "after": after,
                                              "change_pct": round(100 * change, 1),
                                              "better": (change > 0) == (direction > 0)})
    out["metric_changes"].sort(key=lambda m: -abs(m["change_pct"]))
    return out


def compare(a, b, kind: str | None = None, threshold: float = DEFAULT_THRESHOLD,
            min_seconds: float = DEFAULT_MIN_SECONDS, path=None, conn=None) -> dict:
    """Compare run `a` with run `b` (ids, or last / prev of `kind`, as store.resolve takes).
    Returns {"a": run, "b": run, "threshold", "newly_failing", "newly_passing", ...}."""
    own = conn is None
    conn = conn or connect(path)
    try:
        # An id fixes the kind that last/prev on the other side refer to.
        for sel in (a, b):
            if kind is None and str(sel).strip().isdigit():
                run = store.get_run(conn, int(sel))
                kind = run["kind"] if run else None
        ia, ib = store.resolve(conn, a, kind), store.resolve(conn, b, kind)
        ra, rb = store.get_run(conn, ia), store.get_run(conn, ib)
        result = compare_items(store.items(conn, ia), store.items(conn, ib), threshold, min_seconds)
        return {"a": ra, "b": rb, "threshold": threshold, "min_seconds": min_seconds, **result}
    finally:
        if own:
            conn.close()
