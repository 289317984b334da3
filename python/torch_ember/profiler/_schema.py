"""The trace record: one dict per thing the tracer saw, mirroring C++ `ember::profiler::Record`
(csrc/core/profiler/record.h) field for field. The exporters take a plain list of these dicts, so
they can be fed by the bindings, by a saved file, or by tests with synthetic records.

Keys (only ``kind`` and ``ts_ns`` are required; a missing key takes the default shown):

=================  =======  ========================================================================
key                default  meaning
=================  =======  ========================================================================
kind               —        one of KINDS below
ts_ns              —        steady-clock ns since the tracer started; a span's start
dur_ns             0        span length in ns; 0 for instants
device             -1       device index; -1 for host-only records (synchronize: -1 = all devices)
stream             -1       stream id within ``device``
seq                0        the stream's sequence number of the work (0 = unknown)
name               ""       kernel / op / phase / instant name
thread             0        OS thread id of the thread that produced the record
ptr                0        alloc/free: block address
bytes              0        alloc/free: block size; copy: size; fallback: bytes copied to host
bytes_to_device    0        fallback: bytes copied back to the device
allocated          0        alloc/free: device bytes allocated after the event
reserved           -1       alloc/free: device bytes reserved after the event (-1 = not known)
shapes             ""       host_op: input shapes, as the glue formats them
source             ""       host_op: Python source location ("file.py:12")
event_id           0        event_record/event_wait: the event's id
cache_hit          False    compile: whether the phase was served from the compile cache
copy_kind          ""       copy: "H2D", "D2H" or "D2D"
=================  =======  ========================================================================

Kinds, and who produces them:

- ``enqueue`` (instant, host thread): work queued on (device, stream) as ``seq``, named ``name``.
- ``kernel`` (span, stream worker): that work ran; matches its enqueue on (device, stream, seq).
- ``alloc`` / ``free`` (instant): a caching-allocator block handed out / returned.
- ``host_op`` (span, host thread): an op call, with ``shapes`` and ``source``; spans nest.
- ``copy``: a transfer of ``bytes``; ``seq`` > 0 ties it to the kernel that performs it; with
  ``dur_ns`` > 0 it is also a host span (a synchronous copy).
- ``fallback`` (span, host thread): op ``name`` ran on the CPU.
- ``event_record`` (instant): event ``event_id`` marks (device, stream) after work ``seq``.
- ``event_wait`` (instant): (device, stream) waits for ``event_id``; ``seq`` is the queued wait's
  own number when known, else 0.
- ``synchronize`` (span, host thread): the host blocked on ``device``.
- ``compile`` (span, host thread): compile phase ``name``; ``cache_hit``.
- ``instant`` (instant, host thread): a named point.
- ``step`` (span, stream worker): a step inside kernel (device, stream, seq), for a compiled
  graph's fused kernels and library calls; ``name`` is its label, which ends with the user's
  source lines ("ember_k3 mul+add @ model.py:12"). Nested in that kernel's span.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable

KINDS = frozenset(
    {
        "enqueue",
        "kernel",
        "alloc",
        "free",
        "host_op",
        "copy",
        "fallback",
        "event_record",
        "event_wait",
        "synchronize",
        "compile",
        "instant",
        "step",
    }
)

DEFAULTS: dict[str, Any] = {
    "dur_ns": 0,
    "device": -1,
    "stream": -1,
    "seq": 0,
    "name": "",
    "thread": 0,
    "ptr": 0,
    "bytes": 0,
    "bytes_to_device": 0,
    "allocated": 0,
    "reserved": -1,
    "shapes": "",
    "source": "",
    "event_id": 0,
    "cache_hit": False,
    "copy_kind": "",
}

# Host-thread spans: what "the host was doing" at a given time.
HOST_SPAN_KINDS = frozenset({"host_op", "synchronize", "fallback", "compile"})

Key = tuple[int, int, int]  # (device, stream, seq)


def normalize(records: Iterable[dict]) -> list[dict]:
    """Copies of ``records`` with every key present, sorted by ``ts_ns`` (stable)."""
    out = []
    for i, r in enumerate(records):
        if "kind" not in r or "ts_ns" not in r:
            raise ValueError(f"record {i} needs 'kind' and 'ts_ns': {r!r}")
        if r["kind"] not in KINDS:
            raise ValueError(f"record {i} has unknown kind {r['kind']!r}")
        full = {**DEFAULTS, **r}
        if full["dur_ns"] < 0:
            raise ValueError(f"record {i} has negative dur_ns: {r!r}")
        out.append(full)
    out.sort(key=lambda r: r["ts_ns"])
    return out


def end_ns(r: dict) -> int:
    return r["ts_ns"] + r["dur_ns"]


def is_host_span(r: dict) -> bool:
    return r["kind"] in HOST_SPAN_KINDS or (r["kind"] == "copy" and r["dur_ns"] > 0)


class Index:
    """Lookups shared by the exporter and the summary, built once over normalized records.

    - enqueue ↔ kernel pairs on (device, stream, seq). A key normally occurs once; if a stream id
      was reused, each enqueue takes the first unused kernel with that key that ended after it.
    - for each enqueue, the host ops (on its thread) that were open when it happened.
    """

    def __init__(self, recs: list[dict]):
        self.recs = recs
        self.kernels: dict[Key, list[dict]] = defaultdict(list)
        self.by_stream: dict[tuple[int, int], list[dict]] = defaultdict(list)
        enqueues = []
        for r in recs:
            if r["kind"] == "kernel":
                self.kernels[_key(r)].append(r)
                self.by_stream[(r["device"], r["stream"])].append(r)
            elif r["kind"] == "enqueue":
                enqueues.append(r)
        self.kernel_of: dict[int, dict] = {}   # id(enqueue) -> kernel
        self.enqueue_of: dict[int, dict] = {}  # id(kernel) -> enqueue
        for e in enqueues:
            for k in self.kernels.get(_key(e), ()):
                if id(k) not in self.enqueue_of and end_ns(k) >= e["ts_ns"]:
                    self.kernel_of[id(e)] = k
                    self.enqueue_of[id(k)] = e
                    break
        self._open_ops = _open_host_ops(recs, enqueues)

    def kernel(self, key: Key, at_ns: int) -> dict | None:
        """The kernel with ``key`` that was the current one at ``at_ns`` (the latest enqueued
        or started by then), else the first with that key."""
        found = self.kernels.get(key)
        if not found:
            return None
        best = None
        for k in found:
            e = self.enqueue_of.get(id(k))
            t = min(k["ts_ns"], e["ts_ns"]) if e else k["ts_ns"]
            if t <= at_ns:
                best = k
        return best or found[0]

    def open_ops(self, enqueue: dict) -> tuple[dict, ...]:
        """Host ops on the enqueue's thread that were open when it happened, outermost first."""
        return self._open_ops.get(id(enqueue), ())


def _open_host_ops(recs: list[dict], points: list[dict]) -> dict[int, tuple[dict, ...]]:
    """For each record in ``points``, the host ops open on its thread at its time: one sweep per
    thread over spans sorted by (start, longest first) with a stack, so O(n log n) overall."""
    spans_by_thread: dict[int, list[dict]] = defaultdict(list)
    for r in recs:
        if r["kind"] == "host_op":
            spans_by_thread[r["thread"]].append(r)
    points_by_thread: dict[int, list[dict]] = defaultdict(list)
    for p in points:
        points_by_thread[p["thread"]].append(p)
    out: dict[int, tuple[dict, ...]] = {}
    for thread, pts in points_by_thread.items():
        spans = sorted(spans_by_thread.get(thread, ()), key=lambda r: (r["ts_ns"], -r["dur_ns"]))
        pts.sort(key=lambda r: r["ts_ns"])
        stack: list[dict] = []
        i = 0
        for p in pts:
            t = p["ts_ns"]
            while i < len(spans) and spans[i]["ts_ns"] <= t:
                while stack and end_ns(stack[-1]) < spans[i]["ts_ns"]:
                    stack.pop()
                stack.append(spans[i])
                i += 1
            while stack and end_ns(stack[-1]) < t:
                stack.pop()
            out[id(p)] = tuple(s for s in stack if end_ns(s) >= t)
    return out


def _key(r: dict) -> Key:
    return (r["device"], r["stream"], r["seq"])
