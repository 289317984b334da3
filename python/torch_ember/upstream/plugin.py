"""The pytest plugin `ember upstream` loads into its child processes (`-p torch_ember.upstream.plugin`).

It appends one JSON object a line to the file named by EMBER_UPSTREAM_EVENTS, flushed as each is
written, so that the parent can follow the run and still knows where a child was when it died:

  {"event": "session", "pid": 123}                       pytest started
  {"event": "collect-error", "nodeid": ..., "message": ...}
  {"event": "collected", "nodeids": [...]}               what will run, in order
  {"event": "started", "nodeid": ...}                    before a test's setup
  {"event": "report", "nodeid": ..., "when": "setup"|"call"|"teardown",
   "outcome": "passed"|"failed"|"skipped"|"error", "duration": 0.01,
   "reason": <skip reason>, "message": <first line of the failure>, "type": <exception type>}
  {"event": "finished", "nodeid": ...}                   all of its phases are done
  {"event": "done", "exitstatus": 1}

A test with "started" and no "finished" is the one that crashed or hung the process.

Two more variables narrow the run, each naming a file of node ids, one a line, matched exactly:
EMBER_UPSTREAM_SELECT keeps only those (the CPU control run), EMBER_UPSTREAM_DESELECT drops those
(a restart after a crash or hang skips what already has a result). pytest's own --deselect is not
used for that: it matches node id prefixes (dropping test_x_float8_e4m3fn would drop
test_x_float8_e4m3fnuz too), costs a comparison per prefix per test, and tens of thousands of ids
do not fit on a command line.
"""
from __future__ import annotations

import json
import os

import pytest

EVENTS_ENV = "EMBER_UPSTREAM_EVENTS"
SELECT_ENV = "EMBER_UPSTREAM_SELECT"
DESELECT_ENV = "EMBER_UPSTREAM_DESELECT"

_stream = None


def _emit(**msg) -> None:
    global _stream
    path = os.environ.get(EVENTS_ENV)
    if not path:
        return
    if _stream is None:
        # Line-buffered append: each event reaches the file before the next test can kill us.
        _stream = open(path, "a", buffering=1, encoding="utf-8")
    _stream.write(json.dumps(msg) + "\n")
    _stream.flush()


def _id_set(env: str):
    path = os.environ.get(env)
    if not path:
        return None
    with open(path, encoding="utf-8") as f:
        return {line.rstrip("\n") for line in f if line.strip()}


def first_line(text: str, limit: int = 300) -> str:
    for line in str(text).splitlines():
        if line.strip():
            return line.strip()[:limit]
    return ""


def _failure(report) -> tuple[str, str]:
    """(exception type, first line of its message) of a failed report."""
    crash = getattr(report.longrepr, "reprcrash", None)
    line = first_line(crash.message if crash is not None else str(report.longrepr))
    head, sep, _ = line.partition(":")
    head = head.strip()
    if line.startswith("assert "):  # a bare assert, as pytest's assertion rewriting shows it
        return "AssertionError", line
    # "RuntimeError: ..." or "torch._dynamo.exc.Unsupported: ...": a dotted identifier before ':'.
    if sep and head and head.replace(".", "").replace("_", "").isalnum():
        return head, line
    return "", line


def _skip_reason(report) -> str:
    if hasattr(report, "wasxfail"):
        return "xfail: " + (report.wasxfail or "expected failure")
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return reason.removeprefix("Skipped: ").strip()


def pytest_sessionstart(session) -> None:
    _emit(event="session", pid=os.getpid())


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items) -> None:
    # trylast: after -k and pytest's own deselection, so the ids below are the ones left.
    keep, drop = _id_set(SELECT_ENV), _id_set(DESELECT_ENV)
    if keep is None and not drop:
        return
    kept, dropped = [], []
    for item in items:
        wanted = (keep is None or item.nodeid in keep) and not (drop and item.nodeid in drop)
        (kept if wanted else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def pytest_collectreport(report) -> None:
    if report.failed:  # an import error in the test file, typically: nothing of it will run
        _emit(event="collect-error", nodeid=report.nodeid, message=_failure(report)[1])


def pytest_collection_finish(session) -> None:
    _emit(event="collected", nodeids=[item.nodeid for item in session.items])


def pytest_runtest_logstart(nodeid, location) -> None:
    _emit(event="started", nodeid=nodeid)


def pytest_runtest_logreport(report) -> None:
    msg = {"event": "report", "nodeid": report.nodeid, "when": report.when,
           "duration": round(report.duration, 4)}
    if report.skipped:
        msg.update(outcome="skipped", reason=_skip_reason(report)[:300])
    elif report.failed:
        kind, line = _failure(report)
        # A failure outside the test body (a fixture, setUpClass, tearDown) is an error.
        msg.update(outcome="failed" if report.when == "call" else "error", type=kind, message=line)
    else:
        msg["outcome"] = "passed"
    _emit(**msg)


def pytest_runtest_logfinish(nodeid, location) -> None:
    _emit(event="finished", nodeid=nodeid)


def pytest_sessionfinish(session, exitstatus) -> None:
    _emit(event="done", exitstatus=int(exitstatus))
