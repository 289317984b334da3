"""Summaries of conformance results: counts, failure lists, JSON and markdown."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

CLASSES = ("native-pass", "fallback-pass", "fail", "skipped")
COMPILED_CLASSES = ("compiled-pass", "compile-error", "wrong", "crash", "skipped")
FAILING = ("fail", "compile-error", "wrong", "crash")
PASSES = ("forward", "backward")
# What each suite's rows are: the report's wording, not the checks.
TITLES = {"ops": "ember OpInfo conformance", "modules": "ember module_db conformance",
          "properties": "ember OpInfo property conformance"}
ENTRIES = {"ops": "OpInfos", "modules": "modules", "properties": "OpInfos"}


def classes(compiled: bool) -> tuple:
    return COMPILED_CLASSES if compiled else CLASSES


def _passes(row) -> list[str]:
    """The result columns of a row, in its order: forward/backward, or one per property."""
    return [k for k, v in row.items() if isinstance(v, dict) and "status" in v]


def _entries(results):
    """(row, pass name, result) for every result of every row."""
    for row in results:
        for kind in _passes(row):
            yield row, kind, row[kind]


def _replay(row, kind, res, compiled: bool, mode: str) -> str:
    """The harness on just this entry, dtype (and property); samples come out the same."""
    what = {"modules": f"--modules {row['op']}",
            "properties": f"--properties {kind} --ops {row['op']}"}.get(mode, f"--ops {row['op']}")
    return (f"python -m torch_ember.cli conformance {what} --dtypes {row['dtype']} --no-isolate "
            f"{'--compiled ' if compiled else ''}--max-samples {(res.get('sample_index') or 0) + 1}")


def failures(results, compiled: bool = False, mode: str = "ops") -> list[dict]:
    """Failures as flat dicts; `native` means the failing sample ran with no fallback at all,
    so an ember kernel computed the wrong thing; `crash` that it killed the process."""
    out = []
    for row, kind, res in _entries(results):
        if res["status"] in FAILING:
            out.append({"op": row["op"], "dtype": row["dtype"], "pass": kind,
                        "native": res.get("native", False), "crash": res.get("crash", False),
                        "message": res.get("message", ""), "status": res["status"],
                        "sample": res.get("sample", ""), "sample_index": res.get("sample_index"),
                        "failed_samples": res.get("failed_samples"), "samples": res.get("samples"),
                        "fallback_ops": res.get("sample_fallback", []),
                        "replay": _replay(row, kind, res, compiled, mode)})
    return out


def summarize(results, dtypes, compiled: bool = False, mode: str = "ops") -> dict:
    CLASSES = classes(compiled)
    counts: dict[str, dict[str, Counter]] = {}
    skip_reasons = Counter()
    fallback_ops = Counter()
    for row, kind, res in _entries(results):
        counts.setdefault(kind, {d: Counter() for d in dtypes})
        counts[kind].setdefault(row["dtype"], Counter())[res["status"]] += 1
        if res["status"] == "skipped":
            skip_reasons[res.get("reason", "")] += 1
        fallback_ops.update(res.get("fallback_ops", []))
    fails = failures(results, compiled, mode)
    table = lambda c: {k: c[k] for k in CLASSES}  # noqa: E731
    backward = sum(counts.get("backward", {}).values(), Counter())
    return {
        "classes": list(CLASSES),
        "mode": mode,
        # {pass: {dtype: {class: n}}}: forward and backward, or one entry per property.
        "counts": {k: {d: table(c) for d, c in by_dtype.items()} for k, by_dtype in counts.items()},
        "forward": {d: table(counts.get("forward", {}).get(d, Counter())) for d in dtypes},
        "backward": table(backward),
        "skip_reasons": dict(skip_reasons.most_common()),
        # How many (op, dtype, pass) results each aten op fell back in: the kernels worth writing.
        "fallback_ops": dict(fallback_ops.most_common()),
        "crashes": [f for f in fails if f["crash"]],
        "native_failures": [f for f in fails if f["native"] and not f["crash"]],
        "fallback_failures": [f for f in fails if not f["native"] and not f["crash"]],
    }


def _count_table(summary) -> list[list[str]]:
    CLASSES = summary.get("classes", classes(False))
    rows = [["", *CLASSES]]
    counts = summary.get("counts")
    if counts is None:  # a summary written before per-pass counts: forward by dtype, backward
        counts = {"forward": summary["forward"], "backward": {"float32": summary["backward"]}}
    for kind, by_dtype in counts.items():
        for d, n in by_dtype.items():
            if kind == "forward" or any(n.values()):
                label = d if kind == "forward" else f"{d} {kind}"
                rows.append([label, *(str(n[c]) for c in CLASSES)])
    total = [sum(int(r[i]) for r in rows[1:]) for i in range(1, len(CLASSES) + 1)]
    rows.append(["total", *map(str, total)])
    return rows


def _failure_line(f, limit=None) -> str:
    msg = f["message"] if limit is None else f["message"][:limit]
    return f"{f['op']} [{f['dtype']} {f['pass']}]: {msg}"


def format_summary(data, max_fallback_failures: int = 40) -> str:
    s, meta = data["summary"], data["meta"]
    table = _count_table(s)
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    mode = " (compiled: torch.compile(backend='ember', fullgraph=True))" if meta.get("compiled") else ""
    suite = meta.get("suite", "ops")
    lines = [f"{TITLES[suite]}{mode}: {meta['ops']} {ENTRIES[suite]}, {meta['seconds']}s"]
    lines += ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
              for r in table]
    if s["skip_reasons"]:
        lines.append("skipped: " + ", ".join(f"{r} ({n})" for r, n in s["skip_reasons"].items()))
    for title, key in (("crashes and hangs (the process died; no value compared)", "crashes"),
                       ("failures in native kernels (no fallback in the failing sample)",
                        "native_failures")):
        lines.append(f"\n{title}: {len(s[key])}")
        for f in s[key]:
            lines.append("  " + _failure_line(f))
            lines.append(f"      sample #{f['sample_index']}: {f['sample']}")
            lines.append(f"      replay: {f['replay']}")
    fb = s["fallback_failures"]
    lines.append(f"\nfailures involving CPU-fallback ops: {len(fb)}")
    for f in fb[:max_fallback_failures]:
        lines.append(f"  {_failure_line(f, 160)}  (fell back: {', '.join(f['fallback_ops'])})")
    if len(fb) > max_fallback_failures:
        lines.append(f"  ... {len(fb) - max_fallback_failures} more in the JSON/markdown report")
    return "\n".join(lines)


def write_json(data, path) -> None:
    Path(path).write_text(json.dumps(data, indent=1) + "\n")


def _md_escape(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _md_table(header, rows) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(_md_escape(c) for c in r) + " |" for r in rows]
    return out


def _status_cell(res) -> str:
    if res is None:
        return ""
    return f"skipped ({res.get('reason', '')})" if res["status"] == "skipped" else res["status"]


def _detail(res) -> str:
    if res is None:
        return ""
    if res["status"] in FAILING:
        return f"{res.get('message', '')}; sample #{res.get('sample_index')}: {res.get('sample')}"
    return res.get("note", "")


def to_markdown(data) -> str:
    s, meta = data["summary"], data["meta"]
    suite = meta.get("suite", "ops")
    title = TITLES[suite] + (", compiled" if meta.get("compiled") else "")
    out = [f"# {title}", "",
           f"torch {meta['torch']}, torch_ember {meta['torch_ember']}: {meta['ops']} {ENTRIES[suite]}, "
           f"dtypes {', '.join(meta['dtypes'])}, up to {meta['max_samples']} samples each, "
           f"{meta['seconds']} s.", ""]
    counts = _count_table(s)
    out += _md_table(counts[0], counts[1:])
    for title, fails in (("Crashes and hangs", s["crashes"]),
                         ("Failures in native kernels", s["native_failures"]),
                         ("Failures involving CPU-fallback ops", s["fallback_failures"])):
        out += ["", f"## {title} ({len(fails)})", ""]
        if fails:
            out += _md_table(["op", "dtype", "pass", "message", "sample", "fell back"],
                             [[f["op"], f["dtype"], f["pass"], f["message"],
                               f"#{f['sample_index']}: {f['sample']}", ", ".join(f["fallback_ops"])]
                              for f in fails])
    if s["fallback_ops"]:
        out += ["", "## Ops that ran on the CPU fallback", ""]
        out += _md_table(["aten op", "results"], [[k, v] for k, v in s["fallback_ops"].items()])
    out += ["", "## All results", ""]
    columns = list(PASSES) if suite != "properties" else \
        list(dict.fromkeys(k for row in data["results"] for k in _passes(row)))
    rows = []
    for row in data["results"]:
        res = [row.get(k) for k in columns]
        fell = sorted({op for r in res if r for op in r.get("fallback_ops", [])})
        detail = " / ".join(f"{k}: {_detail(r)}" if i or suite == "properties" else _detail(r)
                            for i, (k, r) in enumerate(zip(columns, res)) if _detail(r))
        rows.append([row["op"], row["dtype"], *map(_status_cell, res), ", ".join(fell), detail])
    name = "module" if suite == "modules" else "op"
    out += _md_table([name, "dtype", *columns, "fell back", "detail"], rows)
    return "\n".join(out) + "\n"


def write_markdown(data, path) -> None:
    Path(path).write_text(to_markdown(data))
