"""`ember kb`: the knowledge base of evaluation runs ($EMBER_KB, default
~/.cache/torch_ember/kb.sqlite). `ember sweep models` and `ember conformance` record every run;
older JSON outputs can be imported.

  ember kb list [--kind K] [--limit N]          runs, newest first, with counts
  ember kb show RUN [--all]                      one run: versions, settings, failing items
  ember kb search TEXT [--kind K]                runs, items and failures (FTS5), with explanations
  ember kb compare A B [--kind K] [--threshold PCT] [--min-seconds S] [--json]
                                                 what newly fails, passes, falls back, moved
  ember kb report --out DIR [--runs N]           DIR/index.html: a static page
  ember kb add FILE [--kind K] [--label L]       import models.json, conformance JSON, upstream.json,
                                                 a bench JSON
  ember kb rm RUN                                delete a run

A run is its id, `last` or `prev` (of --kind, else of the newest run's kind), or `last:KIND`:

  ember kb compare prev last --kind sweep-models --threshold 15
  ember kb search "cannot translate"

`compare` exits with 1 when an item newly fails (for CI). EMBER_KB=off disables recording and
these commands; --db PATH uses another database.
"""
from __future__ import annotations

import argparse
import json
import sys

from . import DEFAULT_MIN_SECONDS, DEFAULT_THRESHOLD, compare, store
from .store import KINDS


def _console():
    try:
        from rich.console import Console
    except ImportError:
        return None
    return Console(width=None if sys.stdout.isatty() else 160, highlight=False)


def _print_table(console, title, header, rows, numeric=()):
    """A rich table when rich is installed, else aligned plain text."""
    rows = [[("" if c is None else str(c)) for c in r] for r in rows]
    if console is not None:
        from rich.table import Table
        t = Table(title=title, title_justify="left")
        for i, h in enumerate(header):
            t.add_column(h, justify="right" if i in numeric else "left", overflow="fold")
        for r in rows:
            t.add_row(*(_rich_escape(c) for c in r))
        console.print(t)
        return
    print(title)
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]
    for r in [header, *rows]:
        print("  ".join(c.rjust(w) if i in numeric else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))))


def _rich_escape(text: str) -> str:
    from rich.markup import escape
    return escape(text)


def _say(console, text):
    if console is not None:
        console.print(_rich_escape(text))
    else:
        print(text)


def _pct(v) -> str:
    return "" if v is None else f"{v:.1f}%"


def cmd_list(conn, args, console) -> int:
    runs = store.runs(conn, args.kind, args.limit)
    if not runs:
        _say(console, f"no runs in {store.db_path(args.db)}")
        return 0
    rows = [[r["id"], r["kind"], r["created"], r["label"] or ("live" if r["source"] == "live" else "imported"),
             r["n_items"], r["n_pass"], r["n_fail"], r["n_skip"], r["n_fallback"], _pct(r["pass_rate"])]
            for r in runs]
    _print_table(console, f"ember kb: {len(runs)} runs in {store.db_path(args.db)}",
                 ["run", "kind", "time", "source", "items", "pass", "fail", "skip", "fallback", "pass rate"],
                 rows, numeric=(0, 4, 5, 6, 7, 8, 9))
    return 0


def cmd_show(conn, args, console) -> int:
    run = store.get_run(conn, store.resolve(conn, args.run, args.kind))
    _say(console, f"run {run['id']}: {run['kind']}, {run['created']} ({run['source']})")
    for k in ("ember", "torch", "transformers", "llvm", "os", "python", "cpu", "cpu_flags"):
        _say(console, f"  {k}: {run[k]}")
    _say(console, "  settings: " + " ".join(f"{k}={v}" for k, v in run["settings"].items()))
    _say(console, f"  {run['n_items']} items: {run['n_pass']} pass, {run['n_fail']} fail, {run['n_skip']} skip, "
                  f"{run['n_fallback']} with fallbacks; pass rate {_pct(run['pass_rate'])}")
    its = store.items(conn, run["id"]).values()
    shown = [it for it in its if args.all or it["status"] == "fail" or it["fallback"]]
    rows = []
    for it in shown:
        f = (it["failures"] or [{}])[0]
        row = [it["name"], it["status"], it["detail"], ", ".join(it["fallback"]), (f.get("message") or "")[:160],
               f.get("explanation") or ""]
        if args.all:  # the numbers too: a bench run's items are nothing but
            row.append(" ".join(f"{k}={v:g}" for k, v in it["metrics"].items() if isinstance(v, (int, float))))
        rows.append(row)
    if rows:
        header = ["item", "status", "detail", "fallback", "failure", "explanation"] + (["metrics"] if args.all else [])
        _print_table(console, "items" if args.all else "failing items and items with fallbacks", header, rows)
    return 0


def cmd_search(conn, args, console) -> int:
    hits = store.search(conn, args.text, args.kind, args.limit)
    if not hits:
        _say(console, f"nothing matches {args.text!r}")
        return 1
    rows = [[h["run_id"], h["kind"], h["what"], h["name"], h["status"] or "", h["text"],
             (h["explanation"] or "") + (f" ({h['advice']})" if h.get("advice") else "")] for h in hits]
    mode = "FTS5" if store.uses_fts(conn) else "plain matching"
    _print_table(console, f"{len(hits)} matches for {args.text!r} ({mode})",
                 ["run", "kind", "what", "name", "status", "text", "explanation"], rows, numeric=(0,))
    return 0


def _print_compare(c, console) -> None:
    a, b = c["a"], c["b"]
    _say(console, f"run {a['id']} ({a['kind']}, {a['created']}) -> run {b['id']} ({b['kind']}, {b['created']}); "
                  f"pass rate {_pct(a['pass_rate'])} -> {_pct(b['pass_rate'])}")
    if a["kind"] != b["kind"]:
        _say(console, "note: the runs are of different kinds; only items with the same name are compared")
    if c["newly_failing"]:
        _print_table(console, f"newly failing: {len(c['newly_failing'])}",
                     ["item", "before", "after", "changes", "failure", "explanation"],
                     [[x["name"], x["before"], x["after"], "; ".join(x["changes"]), x["message"][:160],
                       x["explanation"]] for x in c["newly_failing"]])
    if c["newly_passing"]:
        _print_table(console, f"newly passing: {len(c['newly_passing'])}", ["item", "before", "after", "changes"],
                     [[x["name"], x["before"], x["after"], "; ".join(x["changes"])] for x in c["newly_passing"]])
    if c["status_changes"]:
        _print_table(console, f"other status changes: {len(c['status_changes'])}",
                     ["item", "before", "after", "detail"],
                     [[x["name"], x["before"], x["after"],
                       "; ".join(x["changes"]) or f"{x['detail_before']} -> {x['detail_after']}"]
                      for x in c["status_changes"]])
    for key, title in (("newly_fallback", "newly falling back"), ("stopped_fallback", "no longer falling back")):
        if c[key]:
            _print_table(console, f"{title}: {len(c[key])}", ["item", "ops"],
                         [[x["name"], ", ".join(x["ops"])] for x in c[key]])
    if c["fallback_changed"]:
        _print_table(console, f"fallback ops changed: {len(c['fallback_changed'])}", ["item", "added", "removed"],
                     [[x["name"], ", ".join(x["added"]), ", ".join(x["removed"])] for x in c["fallback_changed"]])
    if c["metric_changes"]:
        _print_table(console, f"metrics that moved more than {100 * c['threshold']:g} % (times: and more than "
                              f"{c['min_seconds']:g} s): {len(c['metric_changes'])}",
                     ["item", "metric", "before", "after", "change", ""],
                     [[m["name"], m["metric"], f"{m['before']:g}", f"{m['after']:g}", f"{m['change_pct']:+.1f} %",
                       "better" if m["better"] else "worse"] for m in c["metric_changes"]], numeric=(2, 3, 4))
    if c["only_in_a"] or c["only_in_b"]:
        _say(console, f"only in run {a['id']}: {len(c['only_in_a'])} items; only in run {b['id']}: "
                      f"{len(c['only_in_b'])} items")
    keys = ("newly_failing", "newly_passing", "status_changes", "newly_fallback", "stopped_fallback",
            "fallback_changed", "metric_changes")
    if not any(c[k] for k in keys):
        _say(console, f"no changes (metrics within {100 * c['threshold']:g} %)")


def cmd_compare(conn, args, console) -> int:
    c = compare(args.a, args.b, kind=args.kind, threshold=args.threshold / 100, min_seconds=args.min_seconds,
                conn=conn)
    if args.json:
        print(json.dumps(c, indent=1, default=str))
    else:
        _print_compare(c, console)
    return 1 if c["newly_failing"] else 0


def cmd_report(conn, args, console) -> int:
    from . import report
    path = report.write(conn, args.out, args.runs)
    _say(console, f"wrote {path}")
    return 0


def cmd_add(conn, args, console) -> int:
    run_id, new = store.import_file(conn, args.file, args.kind, args.label, args.force)
    run = store.get_run(conn, run_id)
    if not new:
        _say(console, f"{args.file} is already run {run_id} ({run['kind']}); --force stores it again")
        return 0
    _say(console, f"recorded run {run_id}: {run['kind']}, {run['n_items']} items ({run['n_pass']} pass, "
                  f"{run['n_fail']} fail, {run['n_skip']} skip)")
    return 0


def cmd_rm(conn, args, console) -> int:
    run_id = store.resolve(conn, args.run, args.kind)
    store.delete_run(conn, run_id)
    _say(console, f"deleted run {run_id}")
    return 0


def build_parser(prog=None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", metavar="PATH", help="the database (default: $EMBER_KB or "
                        "~/.cache/torch_ember/kb.sqlite)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def add(name, fn, help_text):
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(fn=fn)
        return p

    kind_help = f"one of {', '.join(KINDS)}"
    p = add("list", cmd_list, "runs, newest first, with kind, time and counts")
    p.add_argument("--kind", choices=KINDS)
    p.add_argument("--limit", type=int, default=50, help="at most N runs (default %(default)s)")
    p = add("show", cmd_show, "one run: versions, settings, failing items and items with fallbacks")
    p.add_argument("run", help="run id, last, prev or last:KIND")
    p.add_argument("--kind", choices=KINDS, help="the kind last/prev refer to")
    p.add_argument("--all", action="store_true", help="every item, not only failing ones")
    p = add("search", cmd_search, "full-text search over runs, items, failure messages and explanations")
    p.add_argument("text")
    p.add_argument("--kind", choices=KINDS)
    p.add_argument("--limit", type=int, default=50)
    p = add("compare", cmd_compare, "compare run A with run B: newly failing/passing items, fallbacks, metrics")
    p.add_argument("a", help="the older run: id, last, prev or last:KIND")
    p.add_argument("b", help="the newer run")
    p.add_argument("--kind", choices=KINDS, help="the kind last/prev refer to")
    p.add_argument("--threshold", type=float, default=100 * DEFAULT_THRESHOLD, metavar="PCT",
                   help="report metrics that moved by more than PCT percent (default %(default)g)")
    p.add_argument("--min-seconds", type=float, default=DEFAULT_MIN_SECONDS, metavar="S",
                   help="and, for times in seconds, by more than S (default %(default)g)")
    p.add_argument("--json", action="store_true", help="the comparison as JSON")
    p = add("report", cmd_report, "write a static HTML report, DIR/index.html")
    p.add_argument("--out", required=True, metavar="DIR")
    p.add_argument("--runs", type=int, default=20, metavar="N", help="the newest N runs (default %(default)s)")
    p = add("add", cmd_add, "import a runner's JSON output (models.json, conformance, upstream.json, bench)")
    p.add_argument("file")
    p.add_argument("--kind", choices=KINDS, help=f"{kind_help} (default: told from the JSON)")
    p.add_argument("--label", help="a note stored with the run")
    p.add_argument("--force", action="store_true", help="store it even when that output is already stored")
    p = add("rm", cmd_rm, "delete a run")
    p.add_argument("run")
    p.add_argument("--kind", choices=KINDS)
    return parser


def main(argv=None, prog=None) -> int:
    args = build_parser(prog or "ember kb").parse_args(argv)
    if store.db_path(args.db) is None:
        print("error: EMBER_KB=off disables the knowledge base (use --db PATH for another one)", file=sys.stderr)
        return 2
    try:
        conn = store.connect(args.db)
    except Exception as e:  # noqa: BLE001 - a bad path, a newer schema, a corrupt file
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        return args.fn(conn, args, _console())
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        conn.close()


if __name__ == "__main__":
    raise SystemExit(main())
