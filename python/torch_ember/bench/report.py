"""What `ember bench train` shows and writes: the table printed at the end, the ratios against
PyTorch CPU eager and Inductor, DIR/train.json, DIR/train.md and two SVG plots (throughput and
time to first step per mode), drawn with the knowledge-base report's bar chart."""
from __future__ import annotations

import html
import json
import os
import re

from ..kb.report import COLD, WARM, hbar_chart
from . import machine

THROUGHPUT = "#2e9d5b"


def _per_s(rec):
    return (rec.get("execution") or {}).get("per_s") if rec.get("status") == "ok" else None


def _first(rec):
    return (rec.get("preparation") or {}).get("first_step_s") if rec.get("status") == "ok" else None


def _groups(results):
    out = {}
    for r in results:
        out.setdefault(f"{r['workload']} {r['dtype']}", {})[r["mode"]] = r
    return out


def ratios(results) -> dict:
    """Per 'workload dtype': each mode's steady throughput over PyTorch CPU eager's and over
    Inductor's, and its time to first step over Inductor's (> 1: slower to start)."""
    out = {}
    for key, by_mode in _groups(results).items():
        entry = {}
        for base in ("cpu_eager", "inductor"):
            b = _per_s(by_mode.get(base, {}))
            if b:
                entry[f"throughput_vs_{base}"] = {m: round(_per_s(r) / b, 3) for m, r in by_mode.items()
                                                  if m != base and _per_s(r)}
        b = _first(by_mode.get("inductor", {}))
        if b:
            entry["first_step_vs_inductor"] = {m: round(_first(r) / b, 3) for m, r in by_mode.items()
                                               if m != "inductor" and _first(r)}
        out[key] = entry
    return out


def summary(results, seconds) -> dict:
    ran = [r for r in results if r["status"] != "skip"]
    pars = [(r.get("completion") or {}).get("loss_parity") for r in ran]
    pars = [p for p in pars if p]
    return {"runs": len(ran), "finished": sum(r["status"] == "ok" for r in ran),
            "failed": sum(r["status"] in ("error", "crash", "timeout") for r in ran),
            "skipped": len(results) - len(ran), "parity_checked": len(pars), "parity_ok": sum(p["ok"] for p in pars),
            "with_fallbacks": sum(bool(r.get("fallback_ops")) for r in ran), "seconds": round(seconds, 1),
            "loadavg_end": machine.loadavg()}


def one_line(rec) -> str:
    if rec["status"] != "ok":
        return f"{rec['status']}: {rec.get('error') or rec.get('reason', '')}"
    p, e = rec["preparation"], rec["execution"]
    comp = f", compile {p['compile_s']:.1f} s" if "compile_s" in p else ""
    return (f"first step {p['first_step_s']:.1f} s{comp}; {e['per_s']:.0f} {e['unit']}/s "
            f"(spread {e['spread_pct']}%)")


def _fmt(v, spec):
    return "" if v is None else format(v, spec)


def rows(data):
    """The table: one row per (workload, dtype, mode)."""
    head = ["workload", "dtype", "mode", "status", "first step s", "compile s", "per s (median)", "min-max",
            "fallback calls", "loss max rel diff", "parity"]
    body = []
    for r in data["results"]:
        p, e, c = r.get("preparation") or {}, r.get("execution") or {}, r.get("completion") or {}
        par = c.get("loss_parity")
        body.append([r["workload"], r["dtype"], r["mode"], r["status"], _fmt(p.get("first_step_s"), ".1f"),
                     _fmt(p.get("compile_s"), ".1f"),
                     f"{e['per_s']:.0f} {e['unit']}/s" if e else "",
                     f"{e['per_s_min']:.0f}-{e['per_s_max']:.0f}" if e else "",
                     "" if r["status"] != "ok" or r["mode"] in ("cpu_eager", "inductor")
                     else str(c.get("fallback_calls", 0)),
                     "reference" if r["mode"] == "cpu_eager" and r["status"] == "ok" else
                     (f"{par['max_rel_diff']:.2e}" if par else ""),
                     ("ok" if par["ok"] else "FAIL") if par else ""])
    return head, body


def _ratio_lines(data):
    lines = []
    for key, entry in data.get("ratios", {}).items():
        for what, vals in entry.items():
            if vals:
                lines.append(f"{key}: {what.replace('_', ' ')}: " +
                             ", ".join(f"{m} {v:.2f}x" for m, v in vals.items()))
    return lines


def text(data) -> str:
    head, body = rows(data)
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]
    out = ["  ".join(str(x).ljust(w) for x, w in zip(row, widths)).rstrip() for row in [head, *body]]
    out.insert(1, "  ".join("-" * w for w in widths))
    for r in data["results"]:
        if r["status"] in ("error", "crash", "timeout") or r.get("failure"):
            out.append(f"{r['name']}: {r.get('error') or r.get('failure')}")
        p = r.get("preparation") or {}
        if r["mode"] == "ember_compiled_warm" and p.get("graphs") and p.get("cache_hits", 0) < p["graphs"]:
            out.append(f"{r['name']}: only {p.get('cache_hits', 0)} of {p['graphs']} graphs hit the cache the cold "
                       "run filled (was the extension rebuilt in between?)")
    fb = {op for r in data["results"] for op in r.get("fallback_ops", [])}
    out.append("fallback ops: " + (", ".join(sorted(fb)) if fb else "none"))
    out += _ratio_lines(data)
    s, m = data["summary"], data["meta"]
    out.append(f"{s['finished']} of {s['runs']} runs finished, {s['failed']} failed, {s['skipped']} left out; "
               f"loss parity {s['parity_ok']} of {s['parity_checked']}; {s['seconds']:.0f} s in all")
    if m.get("loadavg") and m["loadavg"][0] > 0.5 * (m.get("cpus") or 1):
        out.append(f"note: load average {m['loadavg'][0]:.1f} on {m['cpus']} CPUs when the run started: other work "
                   "shared the CPUs, so the times are noisy (PyTorch's OpenMP threads suffer most)")
    flags = " ".join(f for f, on in m["cpu_flags"].items() if on)
    out.append(f"{m['cpu']} ({m['cpus']} CPUs; {flags}); OPENBLAS_CORETYPE={m['OPENBLAS_CORETYPE'] or 'unset'}; "
               f"torch {m['torch']}, torch_ember {m['torch_ember']}, transformers {m['transformers']}")
    return "\n".join(out)


def markdown(data) -> str:
    head, body = rows(data)
    out = ["# ember bench train", "", f"{data['meta']['started']} · {data['meta']['cpu']} · torch "
           f"{data['meta']['torch']} · steps {data['config']['steps']}", "",
           "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(str(x).replace("|", "\\|") for x in row) + " |" for row in body]
    out += ["", *[f"- {ln}" for ln in _ratio_lines(data)], "", "![throughput](throughput.svg)",
            "", "![time to first step](first_step.svg)", ""]
    return "\n".join(out)


def _stack(title, charts) -> str:
    """One SVG of several charts, each under its own heading, one below the other."""
    parts, y, width = [], 28, 300
    for heading, svg in charts:
        w = int(re.search(r'width="(\d+)"', svg).group(1))
        h = int(re.search(r'height="(\d+)"', svg).group(1))
        parts.append(f'<text x="4" y="{y + 12}" font-size="12" font-weight="600">{html.escape(heading)}</text>')
        parts.append(svg.replace("<svg ", f'<svg x="0" y="{y + 16}" ', 1))
        y += 16 + h + 14
        width = max(width, w)
    if not charts:
        parts.append(f'<text x="4" y="{y + 12}" font-size="12">no finished runs</text>')
        y += 20
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{y}" viewBox="0 0 {width} {y}" '
            f'font-family="sans-serif"><rect width="100%" height="100%" fill="#fff"/>'
            f'<text x="4" y="16" font-size="14" font-weight="700">{html.escape(title)}</text>'
            + "".join(parts) + "</svg>\n")


def throughput_svg(data) -> str:
    charts = []
    for key, by_mode in _groups(data["results"]).items():
        done = [(m, r) for m, r in by_mode.items() if _per_s(r)]
        if done:
            unit = done[0][1]["execution"]["unit"]
            charts.append((f"{key}: steady {unit}/s (median)",
                           hbar_chart([(m, [round(_per_s(r))]) for m, r in done], [(f"{unit}/s", THROUGHPUT)],
                                      unit=f"{unit}/s")))
    return _stack("ember bench train: throughput per mode (higher is better)", charts)


def first_step_svg(data) -> str:
    charts = []
    for key, by_mode in _groups(data["results"]).items():
        done = [(m, r) for m, r in by_mode.items() if _first(r)]
        if done:
            charts.append((f"{key}: seconds from process start to the end of the first step",
                           hbar_chart([(m, [_first(r), r["preparation"].get("compile_s")]) for m, r in done],
                                      [("time to first step", COLD), ("of which compile", WARM)])))
    return _stack("ember bench train: time to first step per mode (lower is better)", charts)


def write(out, data) -> None:
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "train.json"), "w") as f:
        json.dump(data, f, indent=1, default=str)
    for name, content in (("train.md", markdown(data)), ("throughput.svg", throughput_svg(data)),
                          ("first_step.svg", first_step_svg(data))):
        with open(os.path.join(out, name), "w") as f:
            f.write(content)
