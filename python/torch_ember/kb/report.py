"""`ember kb report`: the knowledge base as one static, self-contained HTML page (DIR/index.html).

Inline CSS, bar charts as inline SVG drawn here, no scripts and nothing fetched from a network,
so the page can be attached to an issue, archived with a CI run or opened from a file system.
Sections: the runs table, pass-rate history per kind, the latest model sweep (compile times and
one row per model), what changed since the previous run of each kind, the failures of each
kind's latest run grouped by explanation, and the versions and settings of every run shown.
"""
from __future__ import annotations

import datetime as _dt
import html
from collections import defaultdict
from pathlib import Path

from . import store

PASS, FAIL, SKIP = "#2e9d5b", "#d1453b", "#b9bec7"
COLD, WARM = "#3565b8", "#9db7e6"
MAX_MODELS_CHARTED = 40
MAX_ROWS = 40

CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1d2330; margin: 0;
       background: #f5f6f8; }
main { max-width: 1280px; margin: 0 auto; padding: 18px 28px 60px; }
h1 { font-size: 24px; margin: 8px 0 2px; }
h2 { font-size: 18px; margin: 34px 0 8px; border-bottom: 2px solid #dde1e7; padding-bottom: 4px; }
h3 { font-size: 15px; margin: 18px 0 6px; }
.sub { color: #5b6473; margin: 0 0 10px; }
table { border-collapse: collapse; background: #fff; margin: 6px 0 12px; width: 100%;
        box-shadow: 0 1px 2px rgba(0,0,0,.06); }
th, td { border-bottom: 1px solid #e6e9ee; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #eef1f5; font-weight: 600; white-space: nowrap; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr:nth-child(even) td { background: #fafbfc; }
code, .mono { font: 12px/1.4 ui-monospace, "SFMono-Regular", Menlo, monospace; }
.chip { display: inline-block; padding: 0 7px; border-radius: 9px; font-size: 12px; color: #fff;
        white-space: nowrap; }
.pass { background: """ + PASS + """; } .fail { background: """ + FAIL + """; }
.skip { background: """ + SKIP + """; color: #222; }
.charts { display: flex; flex-wrap: wrap; gap: 14px; }
.chart { background: #fff; padding: 8px 10px; box-shadow: 0 1px 2px rgba(0,0,0,.06); }
.chart h3 { margin: 2px 0 4px; }
.muted { color: #6b7380; } .better { color: #1f7a45; } .worse { color: #b3261e; }
.explain { color: #37414f; } .advice { color: #5b6473; font-style: italic; }
.settings code { display: block; }
.scroll { overflow-x: auto; }
.why { min-width: 420px; }
"""


class Raw(str):
    """Cell text that is already HTML."""


def _e(x) -> str:
    return x if isinstance(x, Raw) else html.escape("" if x is None else str(x))


def chip(status) -> Raw:
    cls = status if status in ("pass", "fail", "skip") else "skip"
    return Raw(f'<span class="chip {cls}">{_e(status)}</span>')


def table(header, rows, numeric=()) -> str:
    """An HTML table; columns whose index is in `numeric` are right-aligned."""
    th = "".join(f'<th class="num">{_e(h)}</th>' if i in numeric else f"<th>{_e(h)}</th>"
                 for i, h in enumerate(header))
    body = []
    for r in rows:
        body.append("<tr>" + "".join(f'<td class="num">{_e(c)}</td>' if i in numeric else f"<td>{_e(c)}</td>"
                                     for i, c in enumerate(r)) + "</tr>")
    # Wide tables (the sweep's failure column) scroll inside the page instead of spilling out.
    return f'<div class="scroll"><table><thead><tr>{th}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'



def _fmt(v, digits=3) -> str:
    if v is None or v == "":
        return ""
    if isinstance(v, float):
        return f"{v:.2e}" if v and (abs(v) < 1e-3 or abs(v) >= 1e6) else f"{v:.{digits}g}"
    return str(v)


# --------------------------------------------------------------------------- charts

def pass_rate_chart(runs) -> str:
    """Vertical stacked bars, oldest run on the left: pass (green) and fail (red) as shares of
    the items that ran, the pass rate written above each bar."""
    runs = list(reversed(runs))  # oldest first
    bar, gap, left, top, plot_h = 26, 12, 36, 18, 120
    width = left + len(runs) * (bar + gap) + gap
    height = top + plot_h + 34
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" aria-label="pass rate per run">']
    for pct in (0, 50, 100):
        y = top + plot_h * (1 - pct / 100)
        out.append(f'<line x1="{left}" x2="{width}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e3e6eb"/>'
                   f'<text x="{left - 4}" y="{y + 4:.1f}" font-size="10" text-anchor="end" fill="#6b7380">'
                   f'{pct}%</text>')
    for i, r in enumerate(runs):
        x = left + gap + i * (bar + gap)
        ran = r["n_pass"] + r["n_fail"]
        tip = (f"run {r['id']} ({r['created']}): {r['n_pass']} pass, {r['n_fail']} fail, "
               f"{r['n_skip']} skip")
        out.append(f"<g><title>{_e(tip)}</title>")
        if ran:
            h_pass = plot_h * r["n_pass"] / ran
            out.append(f'<rect x="{x}" y="{top:.1f}" width="{bar}" height="{plot_h - h_pass:.1f}" fill="{FAIL}"/>')
            out.append(f'<rect x="{x}" y="{top + plot_h - h_pass:.1f}" width="{bar}" height="{h_pass:.1f}" '
                       f'fill="{PASS}"/>')
            label = f"{r['pass_rate']:.0f}%" if r["pass_rate"] is not None else ""
        else:
            out.append(f'<rect x="{x}" y="{top}" width="{bar}" height="{plot_h}" fill="{SKIP}"/>')
            label = "n/a"
        out.append(f'<text x="{x + bar / 2}" y="{top - 5}" font-size="10" text-anchor="middle">{label}</text>')
        out.append(f'<text x="{x + bar / 2}" y="{top + plot_h + 14}" font-size="10" text-anchor="middle" '
                   f'fill="#37414f">#{r["id"]}</text>')
        out.append(f'<text x="{x + bar / 2}" y="{top + plot_h + 27}" font-size="9" text-anchor="middle" '
                   f'fill="#6b7380">{_e(r["created"][5:10])}</text></g>')
    out.append("</svg>")
    return "".join(out)


def hbar_chart(rows, series, unit="s") -> str:
    """Horizontal grouped bars: rows [(label, [value per series])], series [(name, colour)]."""
    label_w, bar_h, group_gap, plot_w = 150, 9, 8, 520
    top = 22
    vmax = max((v for _, vals in rows for v in vals if v), default=1) or 1
    group_h = bar_h * len(series) + group_gap
    height = top + group_h * len(rows) + 8
    width = label_w + plot_w + 70
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" aria-label="bar chart">']
    x = label_w
    for name, colour in series:  # the legend
        out.append(f'<rect x="{x}" y="4" width="10" height="10" fill="{colour}"/>'
                   f'<text x="{x + 14}" y="13" font-size="11">{_e(name)}</text>')
        x += 16 + 7 * len(name) + 18
    for i, (label, vals) in enumerate(rows):
        y0 = top + i * group_h
        out.append(f'<text x="{label_w - 6}" y="{y0 + bar_h * len(series) / 2 + 4:.1f}" font-size="11" '
                   f'text-anchor="end">{_e(label[:24])}</text>')
        for j, ((name, colour), v) in enumerate(zip(series, vals)):
            if v is None:
                continue
            w = max(1.0, plot_w * v / vmax)
            y = y0 + j * bar_h
            out.append(f'<g><title>{_e(f"{label}: {name} {v} {unit}")}</title>'
                       f'<rect x="{label_w}" y="{y}" width="{w:.1f}" height="{bar_h - 1}" fill="{colour}"/>'
                       f'<text x="{label_w + w + 4:.1f}" y="{y + bar_h - 1.5}" font-size="9" fill="#37414f">'
                       f'{_fmt(v)}</text></g>')
    out.append("</svg>")
    return "".join(out)


# --------------------------------------------------------------------------- sections

def _runs_section(runs) -> str:
    rows = [[r["id"], r["kind"], r["created"], r["label"] or ("live" if r["source"] == "live" else "imported"),
             r["ember"], r["torch"], r["n_items"], r["n_pass"], r["n_fail"], r["n_skip"], r["n_fallback"],
             "" if r["pass_rate"] is None else f"{r['pass_rate']:.1f}%"] for r in runs]
    return ("<h2 id=\"runs\">Runs</h2><p class=\"sub\">newest first; pass rate = pass / (pass + fail)</p>" +
            table(["run", "kind", "time", "source", "ember", "torch", "items", "pass", "fail", "skip",
                   "fallback", "pass rate"], rows, numeric=(0, 6, 7, 8, 9, 10, 11)))


def _history_section(runs) -> str:
    by_kind = defaultdict(list)
    for r in runs:
        by_kind[r["kind"]].append(r)
    charts = "".join(f'<div class="chart"><h3>{_e(kind)}</h3>{pass_rate_chart(rs)}</div>'
                     for kind, rs in sorted(by_kind.items()))
    return f'<h2 id="history">Pass rate per kind</h2><div class="charts">{charts}</div>'


def _explained(item) -> Raw:
    parts = []
    for f in item.get("failures", []):
        text = f'<span class="mono">{_e((f["message"] or f["category"] or "")[:300])}</span>'
        if f.get("explanation"):
            text += (f'<br><span class="explain">{_e(f["explanation"])}</span> '
                     f'<span class="advice">{_e(f["advice"])}</span>')
        parts.append(text)
    return Raw(f'<div class="why">{"<br>".join(parts)}</div>' if parts else "")


def _sweep_section(conn, run) -> str:
    its = list(store.items(conn, run["id"]).values())
    s = run["summary"]
    line = (f"run {run['id']}, {run['created']}: {s.get('built', '?')} of {s.get('models', len(its))} built; "
            f"eager pass {s.get('eager_pass_pct', '?')}%, compiled pass {s.get('compiled_pass_pct', '?')}%, "
            f"parity {s.get('parity_pct', '?')}%; {s.get('with_fallbacks', '?')} models with fallbacks")
    timed = [it for it in its if it["metrics"].get("compile_cold_seconds") is not None]
    timed.sort(key=lambda it: -it["metrics"]["compile_cold_seconds"])
    chart = ""
    if timed:
        note = (f" (the {MAX_MODELS_CHARTED} slowest of {len(timed)})" if len(timed) > MAX_MODELS_CHARTED else "")
        chart = (f'<div class="chart"><h3>compile time, seconds{note}</h3>' +
                 hbar_chart([(it["name"], [it["metrics"].get("compile_cold_seconds"),
                                           it["metrics"].get("compile_warm_seconds")])
                             for it in timed[:MAX_MODELS_CHARTED]], [("cold", COLD), ("warm", WARM)]) + "</div>")
    rows = []
    for it in its:
        m, c = it["metrics"], it["checks"]
        fb = ", ".join(it["fallback"])
        rows.append([it["name"], it["info"].get("task", ""), chip(it["status"]), chip(c.get("eager", "skip")),
                     chip(c.get("compiled", "skip")), _fmt(m.get("eager_seconds")),
                     _fmt(m.get("compile_cold_seconds")), _fmt(m.get("compile_warm_seconds")),
                     _fmt(m.get("compiled_loss_rel", m.get("eager_loss_rel"))),
                     _fmt(m.get("compiled_grad_rel", m.get("eager_grad_rel"))), fb, _explained(it)])
    return (f'<h2 id="sweep">Latest model sweep</h2><p class="sub">{_e(line)}</p>{chart}' +
            table(["model", "task", "status", "eager", "compiled", "eager s", "compile cold s", "warm s",
                   "loss rel err", "grad rel err", "fallback ops", "failure and explanation"], rows,
                  numeric=(5, 6, 7, 8, 9)))


def _changes_section(conn, runs) -> str:
    from . import compare

    latest = {}
    for r in runs:  # newest first: the first of each kind is its latest
        latest.setdefault(r["kind"], r)
    parts = []
    for kind, r in sorted(latest.items()):
        try:
            c = compare("prev", "last", kind=kind, conn=conn)
        except ValueError:
            continue  # a single run of this kind: nothing to compare with
        head = (f"<h3>{_e(kind)}: run {c['a']['id']} → run {c['b']['id']}</h3>"
                f"<p class=\"sub\">{len(c['newly_failing'])} newly failing, {len(c['newly_passing'])} newly "
                f"passing, {len(c['newly_fallback'])} newly falling back, {len(c['stopped_fallback'])} no longer "
                f"falling back, {len(c['metric_changes'])} metrics moved more than "
                f"{100 * c['threshold']:.0f} %</p>")
        rows = [[chip("fail"), x["name"], f"{x['before']} → {x['after']}", "; ".join(x["changes"]),
                 x.get("message", "")[:200]] for x in c["newly_failing"][:MAX_ROWS]]
        rows += [[chip("pass"), x["name"], f"{x['before']} → {x['after']}", "; ".join(x["changes"]), ""]
                 for x in c["newly_passing"][:MAX_ROWS]]
        rows += [["falls back", x["name"], "", ", ".join(x["ops"]), ""] for x in c["newly_fallback"][:MAX_ROWS]]
        rows += [["native now", x["name"], "", ", ".join(x["ops"]), ""] for x in c["stopped_fallback"][:MAX_ROWS]]
        body = table(["change", "item", "status", "checks / ops", "message"], rows) if rows else ""
        mrows = [[m["name"], m["metric"], _fmt(m["before"]), _fmt(m["after"]),
                  Raw(f'<span class="{"better" if m["better"] else "worse"}">{m["change_pct"]:+.1f} %</span>')]
                 for m in c["metric_changes"][:MAX_ROWS]]
        if mrows:
            body += table(["item", "metric", "before", "after", "change"], mrows, numeric=(2, 3, 4))
        parts.append(head + body)
    if not parts:
        return ""
    return '<h2 id="changes">Changes since the previous run</h2>' + "".join(parts)


def _failures_section(conn, runs) -> str:
    latest = {}
    for r in runs:
        latest.setdefault(r["kind"], r)
    parts = []
    for kind, r in sorted(latest.items()):
        fails = store.failures(conn, r["id"])
        if not fails:
            continue
        groups = defaultdict(list)
        for f in fails:
            groups[f["explain_key"] or ""].append(f)
        rows = []
        for key, fs in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            f0 = fs[0]
            shown = [f'<b>{_e(f["item"])}</b>: <span class="mono">{_e((f["message"] or "")[:160])}</span>'
                     for f in fs[:4]]
            examples = Raw("<br>".join(shown) + (f"<br>… {len(fs) - 4} more" if len(fs) > 4 else ""))
            rows.append([key or "(no known pattern)", len(fs),
                         Raw(f'<span class="explain">{_e(f0["explanation"] or "")}</span>'),
                         Raw(f'<span class="advice">{_e(f0["advice"] or "")}</span>'), examples])
        parts.append(f"<h3>{_e(kind)}: run {r['id']}, {len(fails)} failures</h3>" +
                     table(["pattern", "n", "explanation", "what to do", "examples"], rows, numeric=(1,)))
    if not parts:
        return '<h2 id="failures">Failures explained</h2><p class="sub">no failures in the latest runs</p>'
    return '<h2 id="failures">Failures explained</h2><p class="sub">the latest run of each kind</p>' + "".join(parts)


def _versions_section(runs) -> str:
    """One row per distinct machine description; runs that share one are listed together, since
    a series of runs on one machine would otherwise repeat the same long row."""
    keys = ("ember", "torch", "transformers", "llvm", "os", "python", "cpu", "cpu_flags")
    groups: dict[tuple, list] = {}
    for r in runs:
        groups.setdefault(tuple(r[k] for k in keys) + (tuple(r["settings"].items()),), []).append(r)
    rows = []
    for rs in groups.values():
        r = rs[0]
        env = Raw("".join(f"<code>{_e(k)}={_e(v)}</code>" for k, v in r["settings"].items()))
        who = Raw("<br>".join(f"{x['id']} <span class=\"muted\">{_e(x['kind'])}</span>" for x in rs))
        rows.append([who, r["ember"], r["torch"], r["transformers"], r["llvm"], r["os"], r["python"], r["cpu"],
                     Raw(f'<span class="mono">{_e(r["cpu_flags"])}</span>'), env])
    return ('<h2 id="versions">Versions and settings</h2><p class="sub">runs with the same versions, CPU and '
            'settings share a row</p><div class="settings">' +
            table(["runs", "ember", "torch", "transformers", "LLVM", "OS", "Python", "CPU", "CPU flags",
                   "settings"], rows) + "</div>")


def render(conn, n_runs: int = 20) -> str:
    runs = store.runs(conn, limit=n_runs)
    now = _dt.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    db = conn.execute("PRAGMA database_list").fetchone()[2]
    parts = [f"<h1>Ember knowledge base</h1><p class=\"sub\">{_e(db)} · {len(runs)} newest runs · "
             f"generated {now}</p>"]
    if not runs:
        parts.append("<p>No runs recorded yet: run <code>ember sweep models</code> or "
                     "<code>ember conformance</code>, or import a JSON output with <code>ember kb add</code>.</p>")
    else:
        parts.append(_runs_section(runs))
        parts.append(_history_section(runs))
        sweep = next((r for r in runs if r["kind"] == "sweep-models"), None)
        if sweep:
            parts.append(_sweep_section(conn, sweep))
        parts.append(_changes_section(conn, runs))
        parts.append(_failures_section(conn, runs))
        parts.append(_versions_section(runs))
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>Ember knowledge base</title><style>{CSS}</style></head><body><main>"
            + "\n".join(p for p in parts if p) + "</main></body></html>\n")


def write(conn, out_dir, n_runs: int = 20) -> Path:
    """Write DIR/index.html; returns its path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "index.html"
    path.write_text(render(conn, n_runs), encoding="utf-8")
    return path
