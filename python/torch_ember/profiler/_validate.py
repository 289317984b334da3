"""Checks a Chrome trace for the mistakes that make viewers misdraw it or mislead a reader.

Used by the tests on every exported trace; also handy on a trace from elsewhere. Each problem is
one human-readable line; an empty list means the trace is clean.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from typing import Any

_EPS_US = 1e-3  # 1 ns: exported times are ns / 1000, so sums may differ in the last bit
_PHASES = {"X", "B", "E", "i", "I", "C", "s", "t", "f", "M"}


def validate_chrome_trace(trace: Any) -> list[str]:
    """Problems in ``trace`` (a dict with ``traceEvents``, or the event list):

    - malformed events (unknown phase, missing pid/tid/ts, negative duration);
    - spans (``X``) on one track (pid, tid) that overlap without nesting;
    - flows (``s``/``f`` by cat and id) without exactly one start and one end, or whose end
      does not land on a span of its track;
    - a track with events but no ``thread_name``;
    - an ``allocated`` memory counter that does not end at its first value although the
      ``[memory]`` events of that process free every address they allocate.
    """
    events = trace.get("traceEvents") if isinstance(trace, dict) else trace
    if not isinstance(events, list):
        return ["no traceEvents list"]
    problems: list[str] = []
    spans: dict[tuple, list[dict]] = defaultdict(list)
    flows: dict[tuple, list[dict]] = defaultdict(list)
    named: set[tuple] = set()
    tracks: set[tuple] = set()
    memory: dict[Any, list[dict]] = defaultdict(list)
    counters: dict[tuple, list[dict]] = defaultdict(list)

    for i, e in enumerate(events):
        ph = e.get("ph") if isinstance(e, dict) else None
        if ph not in _PHASES:
            problems.append(f"event {i}: unknown phase {ph!r}")
            continue
        if ph == "M":
            if e.get("name") == "thread_name":
                named.add((e.get("pid"), e.get("tid")))
            continue
        if "pid" not in e or not isinstance(e.get("ts"), (int, float)):
            problems.append(f"event {i} ({e.get('name')!r}): missing pid or numeric ts")
            continue
        if ph == "C":
            counters[(e["pid"], e.get("name"))].append(e)
            continue
        if "tid" not in e:
            problems.append(f"event {i} ({e.get('name')!r}): missing tid")
            continue
        track = (e["pid"], e["tid"])
        tracks.add(track)
        if ph == "X":
            dur = e.get("dur")
            if not isinstance(dur, (int, float)) or dur < 0:
                problems.append(f"event {i} ({e.get('name')!r}): bad dur {dur!r}")
                continue
            spans[track].append(e)
        elif ph in ("s", "t", "f"):
            flows[(e.get("cat"), e.get("id"))].append(e)
        elif ph in ("i", "I") and e.get("name") == "[memory]":
            memory[e["pid"]].append(e)

    for track in sorted(tracks - named, key=str):
        problems.append(f"track pid={track[0]} tid={track[1]} has no thread_name")
    for track, track_spans in spans.items():
        problems += _nesting(track, track_spans)
    problems += _flow_problems(flows, spans)
    problems += _memory_problems(memory, counters)
    return problems


def _nesting(track, track_spans: list[dict]) -> list[str]:
    out = []
    stack: list[dict] = []
    for s in sorted(track_spans, key=lambda e: (e["ts"], -e["dur"])):
        while stack and _end(stack[-1]) <= s["ts"] + _EPS_US:
            stack.pop()
        if stack and _end(stack[-1]) + _EPS_US < _end(s):
            top = stack[-1]
            out.append(
                f"track pid={track[0]} tid={track[1]}: {top.get('name')!r} "
                f"[{top['ts']:.3f}, {_end(top):.3f}] and {s.get('name')!r} "
                f"[{s['ts']:.3f}, {_end(s):.3f}] overlap without nesting"
            )
            continue
        stack.append(s)
    return out


def _flow_problems(flows, spans) -> list[str]:
    out = []
    lookup = {track: _SpanLookup(track_spans) for track, track_spans in spans.items()}
    empty = _SpanLookup([])
    for (cat, fid), evs in flows.items():
        starts = [e for e in evs if e["ph"] == "s"]
        ends = [e for e in evs if e["ph"] == "f"]
        if len(starts) != 1 or len(ends) != 1:
            out.append(f"flow cat={cat!r} id={fid!r}: {len(starts)} start(s) and "
                       f"{len(ends)} end(s), want one of each")
            continue
        for e, enclosing in ((starts[0], True), (ends[0], ends[0].get("bp") == "e")):
            if not lookup.get((e["pid"], e["tid"]), empty).binds(e["ts"], enclosing):
                out.append(f"flow cat={cat!r} id={fid!r}: {e['ph']!r} at {e['ts']:.3f} on "
                           f"pid={e['pid']} tid={e['tid']} is on no span")
    return out


class _SpanLookup:
    """Is there a span on this track at time t? Sorted starts plus a running maximum of ends,
    so each question is a binary search."""

    def __init__(self, track_spans):
        ordered = sorted(track_spans, key=lambda e: e["ts"])
        self.starts = [e["ts"] for e in ordered]
        self.max_end = []
        m = float("-inf")
        for e in ordered:
            m = max(m, _end(e))
            self.max_end.append(m)

    def binds(self, t: float, enclosing: bool) -> bool:
        hi = bisect.bisect_right(self.starts, t + _EPS_US)
        if hi > 0 and self.max_end[hi - 1] >= t - _EPS_US:
            return True
        # "f" without "bp": "e" binds to the next slice that starts after it.
        return not enclosing and hi < len(self.starts)


def _memory_problems(memory, counters) -> list[str]:
    out = []
    for pid, evs in memory.items():
        balance: dict[Any, int] = defaultdict(int)
        for e in evs:
            args = e.get("args", {})
            balance[args.get("Addr")] += int(args.get("Bytes", 0))
        if any(balance.values()):
            continue  # something is still allocated at the end: no expectation
        for (cpid, name), cevs in counters.items():
            if cpid != pid or "allocated" not in str(name).lower():
                continue
            cevs = sorted(cevs, key=lambda e: e["ts"])
            first, last = _value(cevs[0]), _value(cevs[-1])
            if first != last:
                out.append(f"counter {name!r} of pid={pid} ends at {last} but started at "
                           f"{first}, although every allocation was freed")
    return out


def _value(counter_event) -> float:
    args = counter_event.get("args", {})
    return sum(v for v in args.values() if isinstance(v, (int, float)))


def _end(e) -> float:
    return e["ts"] + e["dur"]
