"""PyTorch's own device-generic test files, run on ember from a PyTorch source tree.

Each file runs in a child `python -m pytest DIR/test/<file> -q -p no:cacheprovider
-p torch_ember.upstream.plugin [-k EXPR]` with PYTORCH_TESTING_DEVICE_ONLY_FOR=privateuse1 and
cwd DIR/test, so instantiate_device_type_tests makes only the ember variants (TestFooPRIVATEUSE1::
test_bar_ember_float32). The plugin logs every test as it starts and ends; from that log:

  passed, failed, skipped   as pytest reports them (a setup/teardown error counts as failed)
  crash                     the process died (a signal, or an exit) inside the test
  hang                      nothing was logged for --per-test-timeout seconds; the child is killed
  not run                   the --budget ran out first, or pytest never got to it

After a crash or hang a new child carries on, skipping every test that already has a result, so
one bad test costs itself, not the file. Then every failed, crashed or hung test's CPU twin
(TestFooCPU::test_bar_cpu_float32) runs in one child with PYTORCH_TESTING_DEVICE_ONLY_FOR=cpu: a
failure is "ember's" when the CPU version passes, "also fails on CPU" when it fails there too
(an environment or test problem, not ember), "no CPU counterpart" when there is none to run.

  python -m torch_ember.cli upstream --pytorch-src ~/pytorch --files test_view_ops.py \\
      --out /tmp/upstream                        # writes upstream.json, upstream.md, logs/
  python -m torch_ember.cli upstream --pytorch-src ~/pytorch --budget 3600 -k "float32"

The summary groups failures by exception type and first message line (numbers and addresses
masked), counts skips by reason, and says how many tests the framework itself skipped because of
the device (onlyCUDA, XPU-only, test_compare_cpu, test_multiple_devices, ...). From Python,
`run(...)` returns the same dict that upstream.json holds.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from . import plugin

DEFAULT_FILES = ("test_ops.py", "test_nn.py", "test_torch.py", "test_autograd.py",
                 "test_binary_ufuncs.py", "test_unary_ufuncs.py", "test_reductions.py",
                 "test_indexing.py", "test_view_ops.py")
STATUSES = ("passed", "failed", "skipped", "crash", "hang", "not run")
FAILING = ("failed", "crash", "hang")
CONTROLS = ("ember's", "also fails on CPU", "no CPU counterpart", "not run")
DEFAULT_PER_TEST_TIMEOUT = 300.0
# Until pytest has collected, nothing is logged: importing test_ops.py and instantiating its tens
# of thousands of tests takes minutes on two cores, so collection gets its own, longer limit.
DEFAULT_COLLECT_TIMEOUT = 900.0
# With a budget and the CPU control on, the ember runs stop at this share of it, leaving the rest
# for the control run (which usually has far fewer tests to run).
EMBER_SHARE = 0.8
POLL_SECONDS = 0.2
TOP_GROUPS = 30

# Skips that say the framework left the test out because of the device, not because of ember.
DEVICE_SKIP = re.compile(r"onlycuda|onlycpu|only runs on|doesn't run on|does not run on|cuda|xpu"
                         r"|\bmps\b|test_compare_cpu|test_multiple_devices", re.I)
DEVICE_SKIP_TESTS = ("test_compare_cpu", "test_multiple_devices")  # gated by device count/type


# --------------------------------------------------------------------------- child processes

class _Events:
    """Reads the plugin's JSON lines as they are appended; a half-written last line waits."""

    def __init__(self, path: Path):
        self.path, self.offset, self.partial = path, 0, ""

    def read(self) -> list[dict]:
        try:
            with open(self.path, encoding="utf-8") as f:
                f.seek(self.offset)
                chunk = f.read()
                self.offset = f.tell()
        except FileNotFoundError:
            return []
        lines = (self.partial + chunk).split("\n")
        self.partial = lines.pop()
        out = []
        for line in lines:
            try:
                out.append(json.loads(line))
            except ValueError:
                continue  # not ours (nothing else should write here); skip rather than stop
        return out


def _kill(proc: subprocess.Popen) -> None:
    # The child leads its own process group, so tests' own subprocesses go with it.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.wait()


def _watch(proc, events: _Events, on_event, per_test_timeout: float, collect_timeout: float,
           deadline: float | None) -> str:
    """Follow one child until it exits ('exit'), logs nothing for too long ('hang') or runs past
    `deadline` ('budget'); the last two kill it."""
    last, collected = time.monotonic(), False
    while True:
        exited = proc.poll() is not None
        new = events.read()  # after poll: what an exiting child wrote is read before we stop
        now = time.monotonic()
        if new:
            last = now
        for event in new:
            collected |= event.get("event") == "collected"
            on_event(event)
        if exited:
            return "exit"
        if now - last > (per_test_timeout if collected else collect_timeout):
            _kill(proc)
            return "hang"
        if deadline is not None and now >= deadline:
            _kill(proc)
            return "budget"
        time.sleep(POLL_SECONDS)


def _death(returncode: int, log_path: Path, log_start: int) -> str:
    """Why a child ended, with the most telling line it printed since it started."""
    if returncode < 0:
        try:
            why = f"process crashed ({signal.Signals(-returncode).name})"
        except ValueError:
            why = f"process crashed (signal {-returncode})"
    else:
        why = f"process exited with status {returncode}"
    try:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            f.seek(log_start)
            lines = [ln.strip() for ln in f.read().splitlines() if ln.strip()]
    except OSError:
        lines = []
    # faulthandler's "Fatal Python error: Aborted" (after pytest's progress dots on the same line)
    # and the innermost frame under it say more than whatever was printed last.
    marker = re.compile(r"(Fatal Python error: .*|Segmentation fault.*|terminate called .*)")
    hits = [(i, m.group(1)) for i, ln in enumerate(lines) if (m := marker.search(ln))]
    if not hits:
        return why + (": " + lines[-1][:300] if lines else "")
    at, text = hits[-1]
    # Other threads' stacks come first; the crashing one is under "Current thread".
    at = next((i for i in range(at, len(lines)) if lines[i].startswith("Current thread")), at)
    for ln in lines[at + 1:at + 4]:
        frame = re.match(r'File "(.+)", line (\d+) in (\S+)', ln)
        if frame:
            text += f" at {Path(frame.group(1)).name}:{frame.group(2)} in {frame.group(3)}"
            break
    return f"{why}: {text[:300]}"


def _fold(nodeid: str, phases: list[dict]) -> dict:
    """One result from a test's setup/call/teardown reports: the first failure decides."""
    rec = {"nodeid": nodeid, "status": "passed",
           "seconds": round(sum(p.get("duration", 0.0) for p in phases), 3)}
    for p in phases:
        if p.get("outcome") in ("failed", "error"):
            rec.update(status="failed", when=p.get("when", "call"), type=p.get("type") or "",
                       message=p.get("message", ""))
            return rec
        if p.get("outcome") == "skipped":
            rec.update(status="skipped", reason=p.get("reason", ""))
    return rec


def _phase(phases: list[dict]) -> str:
    """The phase a test was in when its process stopped: the one after the last reported."""
    done = [p.get("when") for p in phases]
    return "teardown" if "call" in done else "call" if "setup" in done else "setup"


def run_pytest(paths, test_dir: Path, *, device: str, log_path: Path, k: str | None = None,
               select=None, extra_args=(), per_test_timeout: float = DEFAULT_PER_TEST_TIMEOUT,
               collect_timeout: float = DEFAULT_COLLECT_TIMEOUT, deadline: float | None = None,
               on_collected=None, on_result=None, on_note=None) -> dict:
    """Run the tests in `paths` under pytest in child processes until each has a result,
    restarting after every crash or hang. `device` is PYTORCH_TESTING_DEVICE_ONLY_FOR; `select`
    (node ids) restricts the run; `deadline` is a time.monotonic() value. Returns {"results":
    [record, ...] in collection order, "collected": n or None, "notes": [...], "children": n}."""
    results: dict[str, dict] = {}
    order: list[str] | None = None
    notes: list[str] = []

    def note(text: str) -> None:
        notes.append(text)
        if on_note:
            on_note(text)

    stop_reason = "pytest did not run it"
    children = 0
    with tempfile.TemporaryDirectory(prefix="ember-upstream-") as tmp:
        tmp = Path(tmp)
        env = dict(os.environ, PYTORCH_TESTING_DEVICE_ONLY_FOR=device)
        env.pop(plugin.SELECT_ENV, None)
        env.pop(plugin.DESELECT_ENV, None)
        if select is not None:
            (tmp / "select.txt").write_text("".join(f"{n}\n" for n in select))
            env[plugin.SELECT_ENV] = str(tmp / "select.txt")
        while True:
            if deadline is not None and time.monotonic() >= deadline:
                stop_reason = "time budget"
                break
            children += 1
            events_path = tmp / f"events-{children}.jsonl"
            env[plugin.EVENTS_ENV] = str(events_path)
            if results:
                (tmp / "deselect.txt").write_text("".join(f"{n}\n" for n in results))
                env[plugin.DESELECT_ENV] = str(tmp / "deselect.txt")
            state = {"current": None, "phases": [], "collected": None, "session": False,
                     "done": False, "collect_errors": []}

            def on_event(ev, state=state):
                nonlocal order
                kind = ev.get("event")
                if kind == "session":
                    state["session"] = True
                elif kind == "collected":
                    state["collected"] = ev["nodeids"]
                    if order is None:
                        order = list(ev["nodeids"])
                        if on_collected:
                            on_collected(len(order))
                    else:  # a restart collects what is left; keep any id it adds
                        known = set(order)
                        order.extend(n for n in ev["nodeids"] if n not in known)
                elif kind == "started":
                    state["current"], state["phases"] = ev["nodeid"], []
                elif kind == "report":
                    state["phases"].append(ev)
                elif kind == "finished":
                    rec = _fold(ev["nodeid"], state["phases"])
                    results[rec["nodeid"]] = rec
                    state["current"] = None
                    if on_result:
                        on_result(rec)
                elif kind == "collect-error":
                    state["collect_errors"].append(f"{ev.get('nodeid')}: {ev.get('message')}")
                elif kind == "done":
                    state["done"] = True

            cmd = [sys.executable, "-m", "pytest", *map(str, paths), "-q", "-p", "no:cacheprovider",
                   "-p", "torch_ember.upstream.plugin", *extra_args]
            if k:
                cmd += ["-k", k]
            before = len(results)
            with open(log_path, "a", encoding="utf-8") as log:
                log.write(f"\n===== child {children}: PYTORCH_TESTING_DEVICE_ONLY_FOR={device} "
                          f"{' '.join(cmd[1:])} ({len(results)} already done)\n")
                log.flush()
                log_start = log.tell()
                proc = subprocess.Popen(cmd, cwd=test_dir, env=env, stdin=subprocess.DEVNULL,
                                        stdout=log, stderr=subprocess.STDOUT,
                                        start_new_session=True)
                try:
                    ended = _watch(proc, _Events(events_path), on_event, per_test_timeout,
                                   collect_timeout, deadline)
                except BaseException:  # Ctrl-C: the child has its own session and won't get it
                    _kill(proc)
                    raise
            why = _death(proc.returncode, log_path, log_start)
            for err in state["collect_errors"]:
                note(f"collection error: {err}")
            current = state["current"]
            if current is not None:  # started, never finished: this test stopped the process
                rec = {"nodeid": current, "when": _phase(state["phases"]), "seconds": None}
                if ended == "hang":
                    rec.update(status="hang", type="hang",
                               message=f"no output for {per_test_timeout:g} seconds: killed")
                elif ended == "budget":
                    rec.update(status="not run", reason="time budget (stopped while running)")
                else:
                    rec.update(status="crash", type="crash", message=why)
                results[current] = rec
                if on_result:
                    on_result(rec)
                if rec["status"] != "not run":
                    note(f"{rec['status']}: {current} ({rec['message']})")
            elif ended == "hang":
                note(f"no output for {per_test_timeout:g} seconds outside any test: killed")
            if state["collected"] is None:
                what = ("hung" if ended == "hang" else "stopped by the time budget"
                        if ended == "budget" else "failed")
                if ended == "exit" and not state["session"]:
                    what += f" before pytest started ({why})"
                elif ended == "exit":
                    what += f" ({why})"
                note(f"collection {what}; see {log_path.name}")
                stop_reason = f"collection {what.split(' ')[0]}"
                break
            remaining = [n for n in order if n not in results]
            if not remaining:
                if ended == "exit" and proc.returncode not in (0, 1, 5) and current is None:
                    note(f"after its last test: {why}")
                break
            if ended == "budget":
                stop_reason = "time budget"
                break
            if len(results) == before:  # nothing new: restarting would only repeat this
                stop_reason = f"child ended without running it: {why}"
                note(f"{len(remaining)} tests left unrun: {why}")
                break
            if ended == "exit" and state["done"]:  # pytest finished but left some out
                stop_reason = "pytest did not run it"
                break
    ordered = [results.pop(n) for n in (order or []) if n in results] + list(results.values())
    done = {rec["nodeid"] for rec in ordered}
    unrun = [n for n in order or [] if n not in done]
    ordered += [{"nodeid": n, "status": "not run", "reason": stop_reason, "seconds": None}
                for n in unrun]
    if unrun and stop_reason == "time budget":
        note(f"time budget: {len(unrun)} tests not run")
    return {"results": ordered, "collected": None if order is None else len(order),
            "notes": notes, "children": children, "stop": stop_reason}


# --------------------------------------------------------------------------- CPU control

def cpu_nodeid(nodeid: str, backend: str = "ember") -> str | None:
    """The CPU twin of a device-generic test id, or None when it is not device-generic:
    `f.py::TestFooPRIVATEUSE1::test_bar_ember_float32` -> `f.py::TestFooCPU::test_bar_cpu_float32`
    (the device is named `privateuse1` in the test name too before the backend is renamed)."""
    parts = nodeid.split("::")
    if len(parts) < 3:
        return None  # a module-level test function: not instantiated per device
    cls, name = parts[-2], parts[-1]
    base = next((cls[:-len(s)] for s in ("PRIVATEUSE1", backend.upper())
                 if cls.endswith(s) and len(cls) > len(s)), None)
    # The device sits after the test's name and parametrization, before any dtype suffix.
    found = list(re.finditer(rf"_(?:privateuse1|{re.escape(backend)})(?=_|$)", name))
    if base is None or not found:
        return None
    m = found[-1]
    return "::".join([*parts[:-2], base + "CPU", name[:m.start()] + "_cpu" + name[m.end():]])


def _backend_name() -> str:
    import torch

    return torch._C._get_privateuse1_backend_name()


def run_control(results: list[dict], test_dir: Path, *, log_path: Path, deadline=None,
                per_test_timeout: float = DEFAULT_PER_TEST_TIMEOUT,
                collect_timeout: float = DEFAULT_COLLECT_TIMEOUT, on_collected=None, on_result=None,
                on_note=None) -> dict:
    """Run the CPU twins of the failing results in one child (restarted like the ember runs) and
    set each failing record's "control" (and cpu_nodeid, cpu_status, cpu_message)."""
    backend = _backend_name()
    want: dict[str, list[dict]] = {}
    for rec in results:
        if rec["status"] not in FAILING:
            continue
        twin = cpu_nodeid(rec["nodeid"], backend)
        if twin is None:
            rec["control"] = "no CPU counterpart"
        else:
            rec["cpu_nodeid"] = twin
            want.setdefault(twin, []).append(rec)
    info = {"tests": len(want), "notes": []}
    if not want:
        return info
    if deadline is not None and time.monotonic() >= deadline:
        for recs in want.values():
            for rec in recs:
                rec.update(control="not run", cpu_status="not run")
        info["notes"].append("time budget: CPU control not run")
        return info
    files = sorted({rec["file"] for recs in want.values() for rec in recs})
    job = run_pytest([test_dir / f for f in files], test_dir, device="cpu", log_path=log_path,
                     select=set(want), per_test_timeout=per_test_timeout,
                     collect_timeout=collect_timeout, deadline=deadline, on_note=on_note,
                     on_collected=on_collected, on_result=on_result,
                     # one file that fails to import must not stop the others' controls
                     extra_args=["--continue-on-collection-errors"])
    cpu = {r["nodeid"]: r for r in job["results"]}
    collected = job["collected"] is not None
    for twin, recs in want.items():
        res = cpu.get(twin)
        if res is None:
            control, status, msg = ("no CPU counterpart" if collected else "not run",
                                    "not collected" if collected else "not run", "")
        elif res["status"] == "passed":
            control, status, msg = "ember's", "passed", ""
        elif res["status"] in FAILING:
            control, status, msg = "also fails on CPU", res["status"], res.get("message", "")
        elif res["status"] == "skipped":
            control, status, msg = "no CPU counterpart", "skipped", res.get("reason", "")
        else:
            control, status, msg = "not run", "not run", res.get("reason", "")
        for rec in recs:
            rec.update(control=control, cpu_status=status)
            if msg:
                rec["cpu_message"] = msg
    info.update(notes=job["notes"], children=job["children"], collected=job["collected"])
    return info


# --------------------------------------------------------------------------- summary

def normalize(message: str) -> str:
    """A failure's first line with numbers and addresses masked, for grouping like failures."""
    text = re.sub(r"0x[0-9a-fA-F]+", "0x?", message)
    # Numbers, but not digits in names: float32, conv2d, aten::_foo2 and 3D stay as they are.
    text = re.sub(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![A-Za-z_\d])", "N", text)
    return text[:200]


def _device_skip(rec: dict) -> bool:
    name = rec["nodeid"].rsplit("::", 1)[-1]
    return bool(DEVICE_SKIP.search(rec.get("reason", ""))) or name.startswith(DEVICE_SKIP_TESTS)


def summarize(results: list[dict]) -> dict:
    totals = Counter(r["status"] for r in results)
    ran = sum(totals[s] for s in ("passed", "failed", "crash", "hang"))
    groups: dict[tuple, dict] = {}
    for r in results:
        if r["status"] not in FAILING:
            continue
        kind = r.get("type") or "unknown"
        message = r.get("message", "")
        if kind not in ("crash", "hang") and message.startswith(kind + ":"):
            message = message[len(kind) + 1:].strip()  # the type is in the key already
        key = (kind, normalize(message))
        g = groups.setdefault(key, {"type": kind, "message": key[1], "count": 0, "examples": [],
                                    "control": Counter()})
        g["count"] += 1
        if len(g["examples"]) < 3:
            g["examples"].append(r["nodeid"])
        g["control"][r.get("control", "not run")] += 1
    ranked = sorted(groups.values(), key=lambda g: (-g["count"], g["type"], g["message"]))
    skipped = [r for r in results if r["status"] == "skipped"]
    return {
        "totals": {s: totals[s] for s in STATUSES},
        "tests": len(results),
        "ran": ran,
        "pass_rate": round(totals["passed"] / ran, 4) if ran else None,
        "failure_groups": [{**g, "control": dict(g["control"])} for g in ranked[:TOP_GROUPS]],
        "failure_group_count": len(ranked),
        "skip_reasons": dict(Counter(r.get("reason", "") for r in skipped).most_common()),
        "device_skipped": sum(_device_skip(r) for r in skipped),
        "control": dict(Counter(r.get("control", "not run") for r in results
                                if r["status"] in FAILING)),
        "crashes": [{k: r.get(k) for k in ("nodeid", "status", "when", "message", "control")}
                    for r in results if r["status"] in ("crash", "hang")],
    }


def _pct(rate) -> str:
    return "n/a" if rate is None else f"{100 * rate:.1f}%"


def _control_text(control: dict) -> str:
    return ", ".join(f"{k}: {v}" for k, v in sorted(control.items(), key=lambda kv: -kv[1]))


def format_summary(data: dict) -> str:
    """The summary as plain text (used when rich is not installed, and by the markdown)."""
    s, meta = data["summary"], data["meta"]
    lines = [f"ember upstream: {len(meta['files'])} files, {s['tests']} tests, {meta['seconds']}s"]
    lines.append("  ".join(f"{k}={v}" for k, v in s["totals"].items())
                 + f"  pass rate (of {s['ran']} that ran): {_pct(s['pass_rate'])}")
    for name, f in data["files"].items():
        lines.append(f"  {name}: {f['status']}" + (f" - {'; '.join(f['notes'])}" if f["notes"] else ""))
    lines.append(f"skipped by the framework because of the device: {s['device_skipped']}")
    if s["control"]:
        lines.append(f"CPU control of failures: {_control_text(s['control'])}")
    lines.append(f"\nfailure groups: {s['failure_group_count']} (top {TOP_GROUPS})")
    for g in s["failure_groups"]:
        lines.append(f"  {g['count']:5d}  {g['type']}: {g['message'][:150]}  [{_control_text(g['control'])}]")
        lines += [f"         {e}" for e in g["examples"]]
    lines.append("\ncrashes and hangs: " + str(len(s["crashes"])))
    lines += [f"  {c['status']}: {c['nodeid']} ({c['message']})" for c in s["crashes"]]
    lines.append("\nskip reasons:")
    lines += [f"  {n:5d}  {r[:150]}" for r, n in list(s["skip_reasons"].items())[:15]]
    return "\n".join(lines)


def print_summary(data: dict) -> None:
    """Rich tables on stdout when rich is installed, otherwise format_summary's text."""
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(format_summary(data))
        return
    s, meta = data["summary"], data["meta"]
    console = Console(width=None if sys.stdout.isatty() else 160)
    totals = Table(title=f"ember upstream: {s['tests']} tests in {meta['seconds']}s")
    for col in ("file", "status", *STATUSES):
        totals.add_column(col, justify="left" if col in ("file", "status") else "right")
    for name, f in data["files"].items():
        totals.add_row(name, f["status"], *(str(f["counts"].get(st, 0)) for st in STATUSES))
    totals.add_row("total", "", *(str(s["totals"][st]) for st in STATUSES), style="bold")
    console.print(totals)
    console.print(f"pass rate of the {s['ran']} tests that ran: {_pct(s['pass_rate'])}; "
                  f"skipped by the framework because of the device: {s['device_skipped']}")
    if s["control"]:
        console.print(f"CPU control of failures: {_control_text(s['control'])}")
    for name, f in data["files"].items():
        for text in f["notes"]:
            console.print(f"[dim]{name}: {text}[/dim]", highlight=False)
    if s["failure_groups"]:
        groups = Table(title=f"failure groups (top {TOP_GROUPS} of {s['failure_group_count']})")
        for col in ("n", "type", "message", "CPU control", "examples"):
            groups.add_column(col, justify="right" if col == "n" else "left")
        for g in s["failure_groups"]:
            groups.add_row(str(g["count"]), g["type"], g["message"][:120],
                           _control_text(g["control"]), "\n".join(g["examples"]))
        console.print(groups)
    if s["skip_reasons"]:
        skips = Table(title="skip reasons (top 15)")
        skips.add_column("n", justify="right")
        skips.add_column("reason")
        for reason, n in list(s["skip_reasons"].items())[:15]:
            skips.add_row(str(n), reason[:140])
        console.print(skips)


def _md(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def write_markdown(data: dict, path) -> None:
    s, meta = data["summary"], data["meta"]
    out = ["# ember upstream: PyTorch's device-generic tests on ember", "",
           f"PyTorch tree `{meta['pytorch_src']}`, torch {meta['torch']}, {meta['seconds']}s"
           + (f", -k `{meta['k']}`" if meta["k"] else "") + ".", "",
           "| file | status | " + " | ".join(STATUSES) + " | notes |",
           "|---|---|" + "---:|" * len(STATUSES) + "---|"]
    for name, f in data["files"].items():
        out.append(f"| {name} | {f['status']} | " + " | ".join(str(f["counts"].get(st, 0))
                                                               for st in STATUSES)
                   + f" | {_md('; '.join(f['notes']))} |")
    out.append("| **total** | | " + " | ".join(str(s["totals"][st]) for st in STATUSES) + " | |")
    out += ["", f"Pass rate of the {s['ran']} tests that ran: {_pct(s['pass_rate'])}. "
            f"Skipped by the framework because of the device: {s['device_skipped']}. "
            f"CPU control of failures: {_control_text(s['control']) or 'none'}.", "",
            f"## Failure groups (top {TOP_GROUPS} of {s['failure_group_count']})", "",
            "| n | type | first message line | CPU control | examples |", "|---:|---|---|---|---|"]
    for g in s["failure_groups"]:
        out.append(f"| {g['count']} | {_md(g['type'])} | {_md(g['message'])} | "
                   f"{_control_text(g['control'])} | {'<br>'.join(_md(e) for e in g['examples'])} |")
    out += ["", f"## Crashes and hangs ({len(s['crashes'])})", ""]
    out += [f"- {c['status']}: `{c['nodeid']}` ({_md(c['message'])}; CPU control: {c['control']})"
            for c in s["crashes"]]
    mine = [r for r in data["results"] if r.get("control") == "ember's"]
    out += ["", f"## Failures that pass on the CPU ({len(mine)})", ""]
    out += [f"- `{r['nodeid']}`: {_md(r.get('message', ''))}" for r in mine[:500]]
    out += ["", "## Skip reasons", "", "| n | reason |", "|---:|---|"]
    out += [f"| {n} | {_md(r)} |" for r, n in s["skip_reasons"].items()]
    Path(path).write_text("\n".join(out) + "\n")


# --------------------------------------------------------------------------- the run

class _Progress:
    """A rich progress bar on a terminal; otherwise, on stderr, a line when a file starts and
    ends, one per batch of tests (every 200 tests or 30 s) and one per crash, hang or note."""

    BATCH, BATCH_SECONDS = 200, 30.0

    def __init__(self, enabled: bool):
        self.enabled, self.bar, self.task = enabled, None, None
        self.counts, self.name, self.total, self.last = Counter(), "", None, time.monotonic()
        if enabled and sys.stderr.isatty():
            try:
                from rich.console import Console
                from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                           TimeElapsedColumn)
            except ImportError:
                return
            self.bar = Progress(TextColumn("{task.description:<28}"), BarColumn(),
                                MofNCompleteColumn(), TextColumn("{task.fields[counts]}"),
                                TimeElapsedColumn(), console=Console(stderr=True))

    def __enter__(self):
        if self.bar is not None:
            self.bar.start()
        return self

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.stop()

    def line(self, text: str) -> None:
        if self.bar is not None:
            self.bar.console.print(text, highlight=False, markup=False)
        elif self.enabled:
            print(text, file=sys.stderr, flush=True)

    def _counts(self) -> str:
        return " ".join(f"{k}={self.counts[k]}" for k in STATUSES if self.counts[k])

    def start(self, name: str) -> None:
        self.name, self.counts, self.total, self.last = name, Counter(), None, time.monotonic()
        if self.bar is not None:
            self.task = self.bar.add_task(name, total=None, counts="collecting")
        else:
            self.line(f"[{name}] collecting")

    def collected(self, n: int) -> None:
        self.total = n
        if self.bar is not None:
            self.bar.update(self.task, total=n, counts="")
        else:
            self.line(f"[{self.name}] {n} tests")

    def add(self, rec: dict) -> None:
        self.counts[rec["status"]] += 1
        done = sum(self.counts.values())
        if self.bar is not None:
            self.bar.update(self.task, completed=done, counts=self._counts())
        elif done % self.BATCH == 0 or time.monotonic() - self.last > self.BATCH_SECONDS:
            self.last = time.monotonic()
            self.line(f"[{self.name}] {done}/{self.total or '?'} {self._counts()}")

    def note(self, text: str) -> None:
        self.line(f"[{self.name}] {text}")

    def end(self, seconds: float) -> None:
        if self.bar is None:
            self.line(f"[{self.name}] done in {seconds:.0f}s: {self._counts() or 'no tests'}")


def run(pytorch_src, files=None, budget: float | None = None,
        per_test_timeout: float = DEFAULT_PER_TEST_TIMEOUT, k: str | None = None, out=None,
        control: bool = True, progress: bool = True,
        collect_timeout: float = DEFAULT_COLLECT_TIMEOUT) -> dict:
    """Run the test files of `pytorch_src`/test on ember (and the CPU control); returns
    {"meta", "files", "results", "control", "summary"}, also written to `out`/upstream.json and
    upstream.md (child logs in `out`/logs) when `out` is given. `budget` is in seconds."""
    import torch

    src = Path(pytorch_src).expanduser().resolve()
    test_dir = src / "test"
    if not test_dir.is_dir():
        raise ValueError(f"{test_dir} is not a directory: --pytorch-src must be a PyTorch "
                         "source tree (with test/test_ops.py and the rest)")
    files = list(files or DEFAULT_FILES)
    present = [f for f in files if (test_dir / f).is_file()]
    if not present:
        raise ValueError(f"none of {', '.join(files)} is in {test_dir}")
    started = time.monotonic()
    end = started + budget if budget is not None else None
    ember_end = started + budget * EMBER_SHARE if budget is not None and control else end
    out_dir = Path(out) if out else None
    scratch = tempfile.TemporaryDirectory(prefix="ember-upstream-logs-")
    logs = out_dir / "logs" if out_dir else Path(scratch.name)
    logs.mkdir(parents=True, exist_ok=True)
    timeouts = dict(per_test_timeout=per_test_timeout, collect_timeout=collect_timeout)
    file_info: dict[str, dict] = {}
    results: list[dict] = []
    with scratch, _Progress(progress) as bar:
        for name in files:
            info = file_info[name] = {"status": "", "counts": {}, "notes": [], "collected": None}
            if name not in present:
                info.update(status="missing", notes=[f"not in {test_dir}: skipped"])
                bar.line(f"[{name}] not in {test_dir}: skipped")
                continue
            if ember_end is not None and time.monotonic() >= ember_end:
                info.update(status="not run", notes=["time budget"])
                bar.line(f"[{name}] not run: time budget")
                continue
            bar.start(name)
            t0 = time.monotonic()
            log_path = logs / f"{name.replace('/', '_')}.log"
            log_path.write_text("")  # children append to it; a rerun into --out starts afresh
            job = run_pytest([test_dir / name], test_dir, device="privateuse1", k=k,
                             log_path=log_path, deadline=ember_end, on_collected=bar.collected,
                             on_result=bar.add, on_note=bar.note, **timeouts)
            for rec in job["results"]:
                rec["file"] = name
            results += job["results"]
            # A file that fails to import still ends pytest's collection, with nothing in it.
            import_failed = not job["collected"] and any(n.startswith("collection error") for n in job["notes"])
            status = ("error" if import_failed else "ran" if job["collected"] is not None else
                      "not run" if job["stop"] == "time budget" else "error")
            info.update(status=status,
                        counts=dict(Counter(r["status"] for r in job["results"])),
                        notes=job["notes"], collected=job["collected"],
                        children=job["children"], seconds=round(time.monotonic() - t0, 1))
            if out_dir:
                info["log"] = str(log_path)
            bar.end(time.monotonic() - t0)
        control_info = {"tests": 0, "notes": ["--no-control"]}
        if control:
            failing = sum(r["status"] in FAILING for r in results)
            t0 = time.monotonic()
            if failing:
                bar.start("CPU control")
                bar.note(f"the CPU versions of {failing} failures")
            (logs / "cpu-control.log").write_text("")
            control_info = run_control(results, test_dir, log_path=logs / "cpu-control.log",
                                       deadline=end, on_collected=bar.collected,
                                       on_result=bar.add, on_note=bar.note, **timeouts)
            if failing:
                bar.end(time.monotonic() - t0)
    data = {
        "meta": {"pytorch_src": str(src), "files": files, "k": k, "budget": budget,
                 "per_test_timeout": per_test_timeout, "control": control,
                 "torch": torch.__version__, "python": sys.version.split()[0],
                 "seconds": round(time.monotonic() - started, 1)},
        "files": file_info,
        "control": control_info,
        "results": results,
    }
    data["summary"] = summarize(results)
    if out_dir:
        (out_dir / "upstream.json").write_text(json.dumps(data, indent=1) + "\n")
        write_markdown(data, out_dir / "upstream.md")
    return data


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pytorch-src", required=True, metavar="DIR",
                        help="a PyTorch source tree (its test/ folder is used)")
    parser.add_argument("--files", default=",".join(DEFAULT_FILES),
                        help="comma-separated files in DIR/test (default: %(default)s)")
    parser.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                        help="total time; tests not reached are recorded as not run "
                             "(default: none)")
    parser.add_argument("--per-test-timeout", type=float, default=DEFAULT_PER_TEST_TIMEOUT,
                        metavar="S", help="a test that logs nothing for this long is a hang "
                        "(default: %(default)s)")
    parser.add_argument("--collect-timeout", type=float, default=DEFAULT_COLLECT_TIMEOUT,
                        metavar="S", help="the same, for pytest's collection of a file "
                        "(default: %(default)s)")
    parser.add_argument("-k", dest="k", metavar="EXPR", help="pytest -k expression (ember run)")
    parser.add_argument("--out", metavar="DIR",
                        help="write DIR/upstream.json, DIR/upstream.md and DIR/logs/")
    parser.add_argument("--no-control", action="store_true",
                        help="do not rerun failures on the CPU")
    parser.add_argument("--no-progress", action="store_true", help="no progress output")
    return parser


def main(argv=None, prog: str | None = None) -> int:
    """Command line entry; exit status 0 unless the runner itself failed (2: bad arguments, 1:
    no file could be collected at all)."""
    args = build_parser(prog).parse_args(argv)
    try:
        data = run(args.pytorch_src, files=[f.strip() for f in args.files.split(",") if f.strip()],
                   budget=args.budget, per_test_timeout=args.per_test_timeout, k=args.k,
                   out=args.out, control=not args.no_control, progress=not args.no_progress,
                   collect_timeout=args.collect_timeout)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print_summary(data)
    if args.out:
        print(f"\nwrote {Path(args.out) / 'upstream.json'} and {Path(args.out) / 'upstream.md'}")
    statuses = {f["status"] for f in data["files"].values()}
    return 1 if "error" in statuses and "ran" not in statuses else 0


if __name__ == "__main__":
    raise SystemExit(main())
