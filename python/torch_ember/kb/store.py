"""The knowledge base's database: the SQLite schema, the machine description stored with each
run, the conversion of each runner's JSON (sweep, conformance, bench, upstream) into rows, and
the queries behind `ember kb list`, `search` and `show`.

One run is one row of `runs` (kind, times, versions, CPU, settings, the runner's own meta and
summary, item counts); each model, (op, dtype, pass), benchmark workload or test is one row of
`items` (name, status pass/fail/skip, the runner's own status text, sub-checks, ops that fell
back, numeric metrics as JSON); each failure message is a row of `failures` with the
explanation explain.py matched. `docs` indexes runs, items and failures for search: an FTS5
table where SQLite has FTS5, a plain table searched with LIKE-style matching where it does not.
"""
from __future__ import annotations

import datetime as _dt
import functools
import hashlib
import json
import os
import platform
import re
import sqlite3
import subprocess
from pathlib import Path

from .explain import explain

SCHEMA_VERSION = 1
KINDS = ("sweep-models", "sweep-flex", "conformance", "conformance-compiled", "conformance-modules",
         "conformance-properties", "bench", "bench-train", "upstream")
STATUSES = ("pass", "fail", "skip")
DEFAULT_PATH = Path("~/.cache/torch_ember/kb.sqlite")
# Thread and BLAS settings change every timing, so they are stored with each run.
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OPENBLAS_CORETYPE")
CPU_FLAG = re.compile(r"^(avx512\w*|amx\w*|avx2|fma)$")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL,
    created TEXT NOT NULL,      -- when the run happened, local time YYYY-MM-DD HH:MM:SS
    recorded TEXT NOT NULL,     -- when it was stored
    source TEXT NOT NULL,       -- 'live', or the file it was imported from
    label TEXT,
    digest TEXT,                -- of the runner's JSON: the same output is not imported twice
    ember TEXT, torch TEXT, transformers TEXT, llvm TEXT, os TEXT, python TEXT,
    cpu TEXT, cpu_flags TEXT,
    settings TEXT,              -- JSON: EMBER_* and thread variables
    meta TEXT, summary TEXT,    -- JSON: the runner's own
    n_items INTEGER, n_pass INTEGER, n_fail INTEGER, n_skip INTEGER, n_fallback INTEGER
);
CREATE TABLE IF NOT EXISTS items (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    status TEXT NOT NULL,       -- pass | fail | skip
    detail TEXT,                -- the runner's own words: native-pass, eager pass / compiled fail
    checks TEXT,                -- JSON {check: status}: sub-results compared one by one
    fallback TEXT,              -- JSON list of aten ops that ran on the CPU fallback
    metrics TEXT,               -- JSON {name: number}
    info TEXT                   -- JSON {name: text}
);
CREATE INDEX IF NOT EXISTS items_by_run ON items(run_id, name);
CREATE TABLE IF NOT EXISTS failures (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    item_id INTEGER REFERENCES items(id) ON DELETE CASCADE,
    item TEXT NOT NULL,
    category TEXT,
    message TEXT,
    explain_key TEXT, explanation TEXT, advice TEXT
);
CREATE INDEX IF NOT EXISTS failures_by_run ON failures(run_id);
"""
_DOCS_FTS = ("CREATE VIRTUAL TABLE IF NOT EXISTS docs USING fts5("
             "run_id UNINDEXED, ref UNINDEXED, what UNINDEXED, name, body)")
_DOCS_PLAIN = ("CREATE TABLE IF NOT EXISTS docs (run_id INTEGER, ref INTEGER, what TEXT, name TEXT, "
               "body TEXT)")


# --------------------------------------------------------------------------- the database

def db_path(path=None) -> Path | None:
    """The database file: `path`, else $EMBER_KB, else ~/.cache/torch_ember/kb.sqlite; None when
    EMBER_KB=off (recording and the kb commands are disabled)."""
    value = str(path) if path else os.environ.get("EMBER_KB", "")
    if value.strip().lower() == "off":
        return None
    return Path(value or DEFAULT_PATH).expanduser()


@functools.lru_cache(maxsize=None)
def fts5_available() -> bool:
    try:
        sqlite3.connect(":memory:").execute("CREATE VIRTUAL TABLE t USING fts5(x)")
        return True
    except sqlite3.Error:
        return False


def connect(path=None) -> sqlite3.Connection:
    """Open (creating it and its folder if needed) the knowledge base."""
    p = db_path(path)
    if p is None:
        raise RuntimeError("EMBER_KB=off: the knowledge base is disabled")
    p.parent.mkdir(parents=True, exist_ok=True)
    # A sweep and a conformance run may finish at once: wait for the other writer.
    conn = sqlite3.connect(str(p), timeout=30)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA foreign_keys = ON")
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise RuntimeError(f"{p} has schema {version}; this torch_ember knows {SCHEMA_VERSION}")
    with conn:
        conn.executescript(_SCHEMA)
        if not _has_docs(conn):
            conn.execute(_DOCS_FTS if fts5_available() else _DOCS_PLAIN)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    return conn


def _has_docs(conn) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'docs'").fetchone() is not None


def uses_fts(conn) -> bool:
    row = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'docs'").fetchone()
    return bool(row) and "fts5" in (row[0] or "").lower()


# --------------------------------------------------------------------------- the machine

def _now() -> str:
    return _dt.datetime.now().strftime("%Y-%m-%d %H:%M:%S")


@functools.lru_cache(maxsize=None)
def llvm_version() -> str:
    try:
        r = subprocess.run(["llvm-config-19", "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return r.stdout.strip() if r.returncode == 0 and r.stdout.strip() else "unknown"


def _package_version(name: str) -> str:
    from importlib import metadata
    try:  # metadata, not import: importing transformers takes seconds
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def _os_name() -> str:
    pretty = ""
    try:
        with open("/etc/os-release") as f:
            pretty = next((ln.split("=", 1)[1].strip().strip('"') for ln in f
                           if ln.startswith("PRETTY_NAME=")), "")
    except OSError:
        pass
    kernel = f"{platform.system()} {platform.release()} {platform.machine()}"
    return f"{pretty} ({kernel})" if pretty else kernel


@functools.lru_cache(maxsize=None)
def cpu_info() -> tuple[str, str]:
    """(model name, space-separated flags among avx2, fma, avx512*, amx*)."""
    model, flags = None, None
    try:
        with open("/proc/cpuinfo") as f:
            for ln in f:  # the first core's lines say it for all
                key, _, value = ln.partition(":")
                key = key.strip()
                if key == "model name" and model is None:
                    model = value.strip()
                elif key == "flags" and flags is None:
                    flags = sorted(fl for fl in value.split() if CPU_FLAG.match(fl))
    except OSError:
        pass
    return model or platform.processor() or "unknown CPU", " ".join(flags or [])


def settings() -> dict:
    """Every EMBER_* variable, the thread/BLAS variables, and the thread count torch uses."""
    env = {k: v for k, v in sorted(os.environ.items()) if k.startswith("EMBER_") or k in THREAD_VARS}
    try:
        import torch
        env["torch.get_num_threads()"] = str(torch.get_num_threads())
    except Exception:  # noqa: BLE001 - the description is best effort
        pass
    env["os.cpu_count()"] = str(os.cpu_count())
    return env


def environment() -> dict:
    """The versions, CPU and settings stored with a run."""
    try:
        import torch_ember
        ember = torch_ember.__version__
    except Exception:  # noqa: BLE001
        ember = _package_version("torch_ember")
    try:
        import torch
        torch_version = torch.__version__
    except Exception:  # noqa: BLE001
        torch_version = _package_version("torch")
    cpu, flags = cpu_info()
    return {"ember": ember, "torch": torch_version, "transformers": _package_version("transformers"),
            "llvm": llvm_version(), "os": _os_name(), "python": platform.python_version(),
            "cpu": cpu, "cpu_flags": flags, "settings": settings()}


# --------------------------------------------------------------------------- runner JSON -> rows

def detect_kind(data) -> str:
    """The kind of a runner's JSON output, from its shape."""
    if isinstance(data, dict):
        if data.get("sweep") == "flex":
            return "sweep-flex"  # `ember sweep flex`
        if "records" in data:
            return "sweep-models"
        results = data.get("results")
        if isinstance(results, list) and results and isinstance(results[0], dict):
            meta = data.get("meta", {})
            if meta.get("suite") in ("modules", "properties") and "op" in results[0]:
                return f"conformance-{meta['suite']}"  # `ember conformance --modules/--properties`
            if "op" in results[0] and "forward" in results[0]:
                return "conformance-compiled" if meta.get("compiled") else "conformance"
            if "nodeid" in results[0]:
                return "upstream"
        if "files" in data and "results" in data:
            return "upstream"
    if isinstance(data, dict) and data.get("bench") == "train" and isinstance(data.get("results"), list):
        return "bench-train"  # `ember bench train`
    if isinstance(data, list) or (isinstance(data, dict) and "bench" in data):
        return "bench"
    raise ValueError("cannot tell which runner wrote this JSON; pass --kind")


def _numbers(d: dict, prefix: str = "") -> dict:
    """The numeric leaves of `d` (nested dicts flattened with '_'); bools are not metrics."""
    out = {}
    for k, v in d.items():
        if isinstance(v, bool):
            continue
        if isinstance(v, (int, float)):
            out[prefix + str(k)] = v
        elif isinstance(v, dict):
            out.update(_numbers(v, f"{prefix}{k}_"))
    return out


def _item(name, status, detail="", checks=None, fallback=(), metrics=None, info=None, failures=()):
    return {"name": name, "status": status, "detail": detail, "checks": checks or {},
            "fallback": sorted(fallback), "metrics": metrics or {}, "info": info or {},
            "failures": [f for f in failures if f.get("message") or f.get("category")]}


def _sweep_items(data) -> list[dict]:
    out = []
    for r in data.get("records", []):
        eager, compiled = r.get("eager", "skip"), r.get("compiled", "skip")
        built = bool(r.get("built"))
        if not built or "fail" in (eager, compiled):
            status = "fail"
        elif eager == "pass" and compiled in ("pass", "skip"):
            status = "pass"
        else:
            status = "skip"
        metrics = {k: v for k, v in r.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        for which in ("eager", "compiled"):
            par = r.get(f"{which}_parity") or {}
            metrics.update({f"{which}_{k}": v for k, v in par.items()
                            if k in ("loss_rel", "grad_rel") and isinstance(v, (int, float))})
        fallback = r.get("fallback_ops") or {}
        if isinstance(fallback, dict):
            metrics["fallback_calls"] = sum(v for v in fallback.values() if isinstance(v, (int, float)))
        info = {k: str(r[k]) for k in ("task", "category") if r.get(k)}
        if r.get("library_steps"):
            info["library_steps"] = ", ".join(map(str, r["library_steps"]))
        fails = [{"category": r.get("category", ""), "message": r.get("failure", "")}]
        if r.get("compiled_failure"):
            fails.append({"category": "compiled", "message": "compiled: " + r["compiled_failure"]})
        detail = f"eager {eager}, compiled {compiled}" if built else "not built"
        out.append(_item(r.get("model", "?"), status, detail,
                         {"built": "pass" if built else "fail", "eager": eager, "compiled": compiled},
                         fallback, metrics, info, fails))
    return out


def _flex_items(data) -> list[dict]:
    """`ember sweep flex`: one item per case (variant, shape, eager or compiled); a timeout or a
    crash is a failure."""
    out = []
    for r in data.get("records", []):
        raw = r.get("status", "fail")
        metrics = {k: v for k, v in r.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        metrics.update({f"error_{k}": v for k, v in (r.get("errors") or {}).items() if isinstance(v, (int, float))})
        fallback = r.get("fallback_ops") or {}
        if isinstance(fallback, dict):
            metrics["fallback_calls"] = sum(v for v in fallback.values() if isinstance(v, (int, float)))
        info = {k: str(r[k]) for k in ("variant", "shape", "mode", "category") if r.get(k)}
        fails = [{"category": r.get("category", ""), "message": r.get("failure", "")}] if raw != "pass" else ()
        out.append(_item(r.get("case", "?"), "pass" if raw == "pass" else "fail", raw, {}, fallback,
                         metrics, info, fails))
    return out


# Conformance classes (eager and compiled) to pass / fail / skip.
_CONFORMANCE = {"native-pass": "pass", "fallback-pass": "pass", "compiled-pass": "pass",
                "fail": "fail", "compile-error": "fail", "wrong": "fail", "crash": "fail",
                "skipped": "skip"}


def _conformance_items(data) -> list[dict]:
    out = []
    for row in data.get("results", []):
        # forward and backward, or one result per property (`--properties`)
        for which in [k for k, v in row.items() if isinstance(v, dict) and "status" in v]:
            res = row[which]
            raw = res.get("status", "skipped")
            status = _CONFORMANCE.get(raw, "fail")
            detail = f"skipped ({res.get('reason', '')})" if raw == "skipped" else raw
            info = {k: str(res[k]) for k in ("reason", "note", "sample", "native", "crash") if k in res}
            fails = []
            if status == "fail":
                fails.append({"category": "crash" if res.get("crash") else raw,
                              "message": res.get("message", "")})
            out.append(_item(f"{row.get('op')} {row.get('dtype')} {which}", status, detail, {},
                             res.get("fallback_ops") or (), _numbers(res), info, fails))
    return out


_UPSTREAM = {"passed": "pass", "failed": "fail", "crash": "fail", "hang": "fail", "skipped": "skip",
             "not run": "skip"}


def _upstream_items(data) -> list[dict]:
    out = []
    for r in data.get("results", []):
        raw = r.get("status", "not run")
        status = _UPSTREAM.get(raw, "fail")
        info = {k: str(r[k]) for k in ("reason", "control", "when", "type") if r.get(k)}
        fails = []
        if status == "fail":
            kind, message = r.get("type") or "", r.get("message") or ""
            if kind and not message.startswith(kind):
                message = f"{kind}: {message}"
            fails.append({"category": raw if raw in ("crash", "hang") else kind or raw,
                          "message": message + (f" [CPU control: {r['control']}]" if r.get("control") else "")})
        out.append(_item(r.get("nodeid", "?"), status, raw, {}, (), _numbers(r), info, fails))
    return out


_NAME_KEYS = ("case", "name", "workload", "model")
_META_KEYS = ("config", "meta", "targets", "ratios")


def _bench_items(data) -> list[dict]:
    """Benchmark JSON is free-form: each element of a `results` list is a workload (named by its
    case/name field, else its text fields: '2048 bfloat16'); each nested dict of the top level
    is a workload too ('ember_compiled_cold', 'copy'); top-level numbers make one more."""
    out = []
    for bench in data if isinstance(data, list) else [data]:
        if not isinstance(bench, dict):
            continue
        title = str(bench.get("bench", "bench"))

        def add(name, rec):
            err = rec.get("error") or rec.get("failure")
            fallback = rec.get("fallback_ops") if isinstance(rec.get("fallback_ops"), list) else ()
            info = {k: str(v) for k, v in rec.items() if isinstance(v, str) and k not in ("error", "failure")}
            skipped = rec.get("status") == "skip" and not err  # a run the benchmark left out
            out.append(_item(f"{title}: {name}", "fail" if err else "skip" if skipped else "pass",
                             "error" if err else "skipped" if skipped else "ok", {},
                             fallback, _numbers(rec), info,
                             [{"category": "error", "message": str(err)}] if err else ()))

        results = bench.get("results")
        for i, rec in enumerate(results if isinstance(results, list) else []):
            if isinstance(rec, dict):
                name = next((str(rec[k]) for k in _NAME_KEYS if k in rec), None)
                name = name or " ".join(str(v) for k, v in rec.items()
                                        if isinstance(v, str) or k in ("size", "n", "batch", "seq")) or str(i)
                add(name, rec)
        for key, value in bench.items():
            if isinstance(value, dict) and key not in _META_KEYS and key != "summary":
                add(key, value)
        # Top-level numbers other than the thread counts (settings, not results) are one more.
        top = {k: v for k, v in bench.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
               and k not in ("threads", "ember_threads")}
        if top:
            add("overall", top)
    return out


_ITEMS = {"sweep-models": _sweep_items, "sweep-flex": _flex_items, "conformance": _conformance_items,
          "conformance-compiled": _conformance_items, "conformance-modules": _conformance_items,
          "conformance-properties": _conformance_items, "upstream": _upstream_items, "bench": _bench_items,
          "bench-train": _bench_items}


def items_from(kind: str, data) -> list[dict]:
    if kind not in _ITEMS:
        raise ValueError(f"unknown kind {kind!r}; one of {', '.join(KINDS)}")
    return _ITEMS[kind](data)


# --------------------------------------------------------------------------- writes

def digest(data) -> str:
    blob = json.dumps(data, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:20]


def _meta_of(kind, data) -> tuple[dict, dict]:
    if isinstance(data, dict):
        meta = {k: v for k, v in (data.get("meta") or {}).items()}
        if kind in ("bench", "bench-train"):
            meta.update({k: v for k, v in data.items() if k != "results" and not isinstance(v, dict)})
            meta.update({k: data[k] for k in _META_KEYS if isinstance(data.get(k), dict)})
        return meta, data.get("summary") or {}
    return {"benches": [b.get("bench") for b in data if isinstance(b, dict)]}, {}


def _run_doc(run_id, kind, label, source, env) -> str:
    parts = [kind, label or "", source, f"ember {env['ember']}", f"torch {env['torch']}",
             f"transformers {env['transformers']}", f"llvm {env['llvm']}", env["os"],
             f"python {env['python']}", env["cpu"], env["cpu_flags"]]
    parts += [f"{k}={v}" for k, v in env["settings"].items()]
    return " ".join(p for p in parts if p)


def record(conn, kind: str, data, *, source: str = "live", label: str | None = None,
           created: str | None = None, env: dict | None = None) -> int:
    """Store one run of `kind` from its runner's JSON; returns the run id."""
    items = items_from(kind, data)
    meta, summary = _meta_of(kind, data)
    env = {**environment(), **(env or {})}
    # When the run started (the sweep says so), else when it is stored.
    if created is None and isinstance(meta.get("started"), str):
        created = meta["started"]
    counts = {s: sum(it["status"] == s for it in items) for s in STATUSES}
    with conn:
        cur = conn.execute(
            "INSERT INTO runs (kind, created, recorded, source, label, digest, ember, torch, transformers, "
            "llvm, os, python, cpu, cpu_flags, settings, meta, summary, n_items, n_pass, n_fail, n_skip, "
            "n_fallback) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (kind, created or _now(), _now(), source, label, digest(data), env["ember"], env["torch"],
             env["transformers"], env["llvm"], env["os"], env["python"], env["cpu"], env["cpu_flags"],
             json.dumps(env["settings"]), json.dumps(meta, default=str), json.dumps(summary, default=str),
             len(items), counts["pass"], counts["fail"], counts["skip"], sum(bool(it["fallback"]) for it in items)))
        run_id = cur.lastrowid
        conn.execute("INSERT INTO docs (run_id, ref, what, name, body) VALUES (?,?,?,?,?)",
                     (run_id, run_id, "run", f"run {run_id}", _run_doc(run_id, kind, label, source, env)))
        for it in items:
            cur = conn.execute(
                "INSERT INTO items (run_id, name, status, detail, checks, fallback, metrics, info) "
                "VALUES (?,?,?,?,?,?,?,?)",
                (run_id, it["name"], it["status"], it["detail"], json.dumps(it["checks"]),
                 json.dumps(it["fallback"]), json.dumps(it["metrics"], default=str), json.dumps(it["info"])))
            item_id = cur.lastrowid
            body = " ".join([it["status"], it["detail"], *it["fallback"], *it["info"].values()])
            conn.execute("INSERT INTO docs (run_id, ref, what, name, body) VALUES (?,?,?,?,?)",
                         (run_id, item_id, "item", it["name"], body))
            for f in it["failures"]:
                ex = explain(f.get("message"), f.get("category"))
                cur = conn.execute(
                    "INSERT INTO failures (run_id, item_id, item, category, message, explain_key, explanation, "
                    "advice) VALUES (?,?,?,?,?,?,?,?)",
                    (run_id, item_id, it["name"], f.get("category", ""), f.get("message", ""),
                     ex.key if ex else None, ex.explanation if ex else None, ex.advice if ex else None))
                body = " ".join(x for x in (f.get("category"), f.get("message"), ex and ex.key,
                                            ex and ex.explanation, ex and ex.advice) if x)
                conn.execute("INSERT INTO docs (run_id, ref, what, name, body) VALUES (?,?,?,?,?)",
                             (run_id, cur.lastrowid, "failure", it["name"], body))
    return run_id


def find_digest(conn, data) -> int | None:
    row = conn.execute("SELECT id FROM runs WHERE digest = ? ORDER BY id DESC", (digest(data),)).fetchone()
    return row[0] if row else None


def import_file(conn, path, kind: str | None = None, label: str | None = None, force: bool = False):
    """Import a runner's JSON file; returns (run id, True when newly stored / False when that
    output was already in the knowledge base)."""
    path = Path(path)
    data = json.loads(path.read_text())
    kind = kind or detect_kind(data)
    if not force:
        old = find_digest(conn, data)
        if old is not None:
            return old, False
    meta = data.get("meta", {}) if isinstance(data, dict) else {}
    created = None if isinstance(meta.get("started"), str) else (  # else the file's time
        _dt.datetime.fromtimestamp(path.stat().st_mtime).strftime("%Y-%m-%d %H:%M:%S"))
    # Versions the runner wrote beat this machine's: the file may come from another checkout.
    env = {k: str(meta[m]) for k, m in (("torch", "torch"), ("transformers", "transformers"),
                                         ("ember", "torch_ember"), ("python", "python"), ("cpu", "cpu"))
           if meta.get(m)}
    return record(conn, kind, data, source=str(path.resolve()), label=label, created=created, env=env), True


def delete_run(conn, run_id: int) -> bool:
    with conn:
        conn.execute("DELETE FROM docs WHERE run_id = ?", (run_id,))
        return conn.execute("DELETE FROM runs WHERE id = ?", (run_id,)).rowcount > 0


# --------------------------------------------------------------------------- reads

def _run_dict(row) -> dict:
    d = dict(row)
    for k in ("settings", "meta", "summary"):
        d[k] = json.loads(d[k] or "{}")
    ran = d["n_pass"] + d["n_fail"]
    d["pass_rate"] = round(100 * d["n_pass"] / ran, 1) if ran else None
    return d


def runs(conn, kind: str | None = None, limit: int | None = None) -> list[dict]:
    """Runs, newest first."""
    sql, args = "SELECT * FROM runs", []
    if kind:
        sql, args = sql + " WHERE kind = ?", [kind]
    sql += " ORDER BY id DESC"
    if limit:
        sql, args = sql + " LIMIT ?", args + [int(limit)]
    return [_run_dict(r) for r in conn.execute(sql, args)]


def get_run(conn, run_id: int) -> dict | None:
    row = conn.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
    return _run_dict(row) if row else None


def items(conn, run_id: int) -> dict[str, dict]:
    """A run's items by name, each with its failures (message, explanation) attached."""
    out = {}
    for row in conn.execute("SELECT * FROM items WHERE run_id = ? ORDER BY id", (run_id,)):
        d = dict(row)
        for k in ("checks", "fallback", "metrics", "info"):
            d[k] = json.loads(d[k] or ("[]" if k == "fallback" else "{}"))
        d["failures"] = []
        out[d["name"]] = d
    by_id = {d["id"]: d for d in out.values()}
    for row in conn.execute("SELECT * FROM failures WHERE run_id = ? ORDER BY id", (run_id,)):
        if row["item_id"] in by_id:
            by_id[row["item_id"]]["failures"].append(dict(row))
    return out


def failures(conn, run_id: int) -> list[dict]:
    return [dict(r) for r in conn.execute("SELECT * FROM failures WHERE run_id = ? ORDER BY id", (run_id,))]


def resolve(conn, selector, kind: str | None = None) -> int:
    """A run id from `selector`: a number, or last / prev (the newest / the one before, of
    `kind` when given, else of the newest run's kind); 'last:KIND' names the kind inline."""
    text = str(selector).strip()
    if text.isdigit():
        if get_run(conn, int(text)) is None:
            raise ValueError(f"no run {text}")
        return int(text)
    word, _, inline = text.partition(":")
    kind = inline or kind
    if word not in ("last", "prev"):
        raise ValueError(f"not a run: {selector!r} (a run id, last, prev, or last:KIND)")
    if kind is None:
        newest = runs(conn, limit=1)
        if not newest:
            raise ValueError("the knowledge base has no runs")
        kind = newest[0]["kind"]
    ids = [r["id"] for r in conn.execute("SELECT id FROM runs WHERE kind = ? ORDER BY id DESC LIMIT 2", (kind,))]
    index = 0 if word == "last" else 1
    if len(ids) <= index:
        raise ValueError(f"no {'previous' if index else ''} run of kind {kind}".replace("  ", " "))
    return ids[index]


def _fts_query(text: str) -> str:
    """Words of `text` as quoted prefix terms, all required: 'aten::_foo cannot' searches
    "aten"* "_foo"* "cannot"*, so FTS5's operators and punctuation never reach its parser."""
    words = re.findall(r"\w+", text)
    return " ".join('"' + w.replace('"', '""') + '"*' for w in words)


def _snippet(body: str, text: str, width: int = 160) -> str:
    low = body.lower()
    hits = [low.find(w.lower()) for w in re.findall(r"\w+", text)]
    hits = [h for h in hits if h >= 0]
    start = max(0, min(hits) - width // 3) if hits else 0
    out = body[start:start + width]
    return ("…" if start else "") + out + ("…" if start + width < len(body) else "")


def search(conn, text: str, kind: str | None = None, limit: int = 50) -> list[dict]:
    """Runs, items and failures matching `text` (every word, as a prefix), best first; each
    failure hit carries its explanation. FTS5 when the table is one; otherwise every word must
    appear in the name or text (case-insensitive)."""
    rows = None
    query = _fts_query(text)
    if uses_fts(conn) and query:
        sql = ("SELECT docs.run_id, docs.ref, docs.what, docs.name, docs.body FROM docs JOIN runs "
               "ON runs.id = docs.run_id WHERE docs MATCH ?" + (" AND runs.kind = ?" if kind else "") +
               " ORDER BY bm25(docs), docs.run_id DESC LIMIT ?")
        try:
            rows = conn.execute(sql, [query, *([kind] if kind else []), limit]).fetchall()
        except sqlite3.OperationalError:
            rows = None  # a query FTS5 still rejects: match it the plain way
    if rows is None:
        words = text.lower().split() or [""]
        cond = " AND ".join("instr(lower(docs.name || ' ' || docs.body), ?) > 0" for _ in words)
        sql = ("SELECT docs.run_id, docs.ref, docs.what, docs.name, docs.body FROM docs JOIN runs "
               f"ON runs.id = docs.run_id WHERE {cond}" + (" AND runs.kind = ?" if kind else "") +
               " ORDER BY docs.run_id DESC, docs.rowid LIMIT ?")
        rows = conn.execute(sql, [*words, *([kind] if kind else []), limit]).fetchall()
    out = []
    for r in rows:
        run = conn.execute("SELECT kind, created FROM runs WHERE id = ?", (r["run_id"],)).fetchone()
        hit = {"run_id": r["run_id"], "kind": run["kind"], "created": run["created"], "what": r["what"],
               "name": r["name"], "text": _snippet(r["body"], text), "status": None, "explanation": None,
               "advice": None}
        if r["what"] == "failure":
            f = conn.execute("SELECT * FROM failures WHERE id = ?", (r["ref"],)).fetchone()
            if f:
                hit.update(text=_snippet(f["message"] or f["category"] or "", text) or hit["text"],
                           explanation=f["explanation"], advice=f["advice"], explain_key=f["explain_key"])
        elif r["what"] == "item":
            it = conn.execute("SELECT status FROM items WHERE id = ?", (r["ref"],)).fetchone()
            f = conn.execute("SELECT explanation, advice FROM failures WHERE item_id = ? AND explanation IS NOT NULL",
                             (r["ref"],)).fetchone()
            hit.update(status=it["status"] if it else None,
                       explanation=f["explanation"] if f else None, advice=f["advice"] if f else None)
        out.append(hit)
    return out
