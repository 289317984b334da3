"""Chrome trace export (chrome://tracing, https://ui.perfetto.dev) of tracer records.

Layout of the trace (the schema of the input records is in ``_schema.py``):

- process ``host`` (pid 1): one track per host thread (tid = OS thread id) with host-op spans
  (cat ``host_op``), ``synchronize``, ``fallback``, ``compile`` and synchronous ``copy`` spans,
  a zero-length ``enqueue <kernel>`` slice at each enqueue (where flows start), and instants for
  event record/wait and named instants;
- process ``ember:N`` (pid 1000 + N): one track per stream (tid = stream + 1, named
  ``stream S``) with the kernel spans (cat ``kernel``; ``copy`` when a copy record names the
  work), a ``memory`` track (tid 0) with PyTorch-style ``[memory]`` instants, and counters
  ``Memory allocated`` (and ``Memory reserved`` when known) in bytes;
- flows (``s``/``f`` with ``"bp": "e"``): enqueue → the kernel it queued (cat ``enqueue``), and
  the kernel an event was recorded after → the work that waited for it (cat ``event``). A flow
  whose other end is not in the records is left out, never emitted half.

Timestamps are µs floats (``ts_ns / 1000``), as the format requires. Spans on one track always
nest or follow each other: a span that would cross another on its thread goes to an extra
track (``host thread T (overlap 1)``) instead of producing a trace viewers misdraw.
"""

from __future__ import annotations

import json
import os
from typing import Any, Iterable

from ._schema import Index, end_ns, normalize

HOST_PID = 1
_DEVICE_PID_BASE = 1000
_MEMORY_TID = 0
_LANE_STRIDE = 1 << 32  # tid offset of overflow tracks: above any OS thread id or stream id


def device_pid(device: int) -> int:
    return _DEVICE_PID_BASE + device


def stream_tid(stream: int) -> int:
    return stream + 1  # tid 0 is the device's memory track


def _us(ns: int) -> float:
    return ns / 1000.0


class _Span:
    __slots__ = ("pid", "tid", "ts", "dur", "name", "cat", "args", "order")

    def __init__(self, pid, tid, ts, dur, name, cat, args, order):
        self.pid, self.tid, self.ts, self.dur = pid, tid, ts, dur
        self.name, self.cat, self.args, self.order = name, cat, args, order

    @property
    def end(self) -> int:
        return self.ts + self.dur


def _assign_lanes(spans: list[_Span]) -> set[tuple[int, int, int]]:
    """Moves spans that would cross another on their track to overflow tracks, so that every
    track is properly nested. Returns the (pid, base tid, lane) triples used."""
    by_track: dict[tuple[int, int], list[_Span]] = {}
    for s in spans:
        by_track.setdefault((s.pid, s.tid), []).append(s)
    used = set()
    for (pid, tid), track in by_track.items():
        track.sort(key=lambda s: (s.ts, -s.dur, s.order))
        lanes: list[list[_Span]] = []  # a stack of open spans per lane
        for s in track:
            for lane, stack in enumerate(lanes):
                while stack and stack[-1].end <= s.ts:
                    stack.pop()
                if not stack or stack[-1].end >= s.end:
                    stack.append(s)
                    break
            else:
                lane = len(lanes)
                lanes.append([s])
            s.tid = tid + lane * _LANE_STRIDE
            used.add((pid, tid, lane))
    return used


def chrome_trace(records: Iterable[dict]) -> dict:
    """Records (see ``_schema``) → a Chrome trace event JSON object (``json.dump`` it)."""
    recs = normalize(records)
    idx = Index(recs)
    spans: list[_Span] = []
    instants: list[dict] = []
    counters: list[dict] = []
    host_threads: set[int] = set()
    devices: dict[int, set[int]] = {}  # device -> streams seen
    span_of: dict[int, _Span] = {}  # id(record) -> its span, for flow ends

    def add_span(r, pid, tid, name, cat, args):
        s = _Span(pid, tid, r["ts_ns"], r["dur_ns"], name, cat, args, len(spans))
        spans.append(s)
        span_of[id(r)] = s
        return s

    def add_instant(r, pid, tid, name, cat, args):
        instants.append({"ph": "i", "s": "t", "pid": pid, "tid": tid, "ts": _us(r["ts_ns"]),
                         "name": name, "cat": cat, "args": args})

    copies_on_kernels: dict[int, dict] = {}  # id(kernel) -> copy record naming it
    for r in recs:
        if r["kind"] == "copy" and r["seq"] > 0:
            k = idx.kernel((r["device"], r["stream"], r["seq"]), r["ts_ns"])
            if k is not None:
                copies_on_kernels[id(k)] = r

    for r in recs:
        kind, thread = r["kind"], r["thread"]
        if kind == "kernel":
            devices.setdefault(r["device"], set()).add(r["stream"])
            args: dict[str, Any] = {"stream": r["stream"], "seq": r["seq"]}
            e = idx.enqueue_of.get(id(r))
            if e is not None:
                ops = idx.open_ops(e)
                if ops:
                    args["host_op"] = ops[-1]["name"]
            cat = "kernel"
            c = copies_on_kernels.get(id(r))
            if c is not None:
                cat = "copy"
                args.update(copy_kind=c["copy_kind"], bytes=c["bytes"])
            add_span(r, device_pid(r["device"]), stream_tid(r["stream"]), r["name"], cat, args)
            continue
        if kind == "step":  # inside its compiled graph's kernel span, on the same track
            label = r["name"]
            source = label.split(" @ ", 1)[1] if " @ " in label else ""
            add_span(r, device_pid(r["device"]), stream_tid(r["stream"]), label, "step",
                     {"seq": r["seq"], "source": source})
            continue
        if kind in ("alloc", "free"):
            continue  # memory is handled per device below
        host_threads.add(thread)
        if kind == "enqueue":
            devices.setdefault(r["device"], set()).add(r["stream"])
            add_span(r, HOST_PID, thread, f"enqueue {r['name']}", "enqueue",
                     {"device": r["device"], "stream": r["stream"], "seq": r["seq"]})
        elif kind == "host_op":
            args = {}
            if r["shapes"]:
                args["shapes"] = r["shapes"]
            if r["source"]:
                args["source"] = r["source"]
            add_span(r, HOST_PID, thread, r["name"], "host_op", args)
        elif kind == "synchronize":
            add_span(r, HOST_PID, thread, "synchronize", "sync",
                     {"device": "all" if r["device"] < 0 else r["device"]})
        elif kind == "fallback":
            add_span(r, HOST_PID, thread, f"fallback {r['name']}", "fallback",
                     {"op": r["name"], "bytes_to_host": r["bytes"],
                      "bytes_to_device": r["bytes_to_device"]})
        elif kind == "compile":
            add_span(r, HOST_PID, thread, f"compile {r['name']}", "compile",
                     {"phase": r["name"], "cache_hit": bool(r["cache_hit"])})
        elif kind == "copy":
            args = {"copy_kind": r["copy_kind"], "bytes": r["bytes"], "device": r["device"]}
            if r["seq"] > 0:
                args.update(stream=r["stream"], seq=r["seq"])
            name = f"copy {r['copy_kind']}".strip()
            if r["dur_ns"] > 0:
                add_span(r, HOST_PID, thread, name, "copy", args)
            else:
                add_instant(r, HOST_PID, thread, name, "copy", args)
        elif kind in ("event_record", "event_wait"):
            add_instant(r, HOST_PID, thread, f"{kind} {r['event_id']}", "event",
                        {"event_id": r["event_id"], "device": r["device"],
                         "stream": r["stream"], "seq": r["seq"]})
        elif kind == "instant":
            add_instant(r, HOST_PID, thread, r["name"], "instant", {})

    mem_devices = _memory_events(recs, instants, counters, devices)
    lanes = _assign_lanes(spans)
    flows, dropped = _flows(recs, idx, span_of)

    events: list[dict] = _metadata(host_threads, devices, mem_devices, lanes)
    body = [
        {"ph": "X", "pid": s.pid, "tid": s.tid, "ts": _us(s.ts), "dur": _us(s.dur),
         "name": s.name, "cat": s.cat, "args": s.args}
        for s in sorted(spans, key=lambda s: (s.ts, -s.dur, s.order))
    ]
    body += instants + counters + flows
    body.sort(key=lambda e: e["ts"])  # stable: a span stays before what starts with it
    events += body
    return {
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": {"producer": "torch_ember.profiler", "clock": "steady ns since start",
                      "dropped_flows": dropped},
    }


def _memory_events(recs, instants, counters, devices) -> set[int]:
    """``[memory]`` instants and allocated/reserved counters per device; a first sample holds
    the value before the first event, so the counter starts at the baseline."""
    by_device: dict[int, list[dict]] = {}
    for r in recs:
        if r["kind"] in ("alloc", "free"):
            by_device.setdefault(r["device"], []).append(r)
    t0 = recs[0]["ts_ns"] if recs else 0
    for d, mem in by_device.items():
        devices.setdefault(d, set())
        pid = device_pid(d)
        first = mem[0]
        delta = first["bytes"] if first["kind"] == "alloc" else -first["bytes"]
        base = {"Memory allocated": first["allocated"] - delta}
        if first["reserved"] >= 0:
            base["Memory reserved"] = first["reserved"]
        for name, v in base.items():
            counters.append({"ph": "C", "pid": pid, "tid": _MEMORY_TID, "ts": _us(t0),
                             "name": name, "cat": "memory", "args": {"bytes": v}})
        for r in mem:
            signed = r["bytes"] if r["kind"] == "alloc" else -r["bytes"]
            args = {"Device Id": d, "Addr": r["ptr"], "Bytes": signed,
                    "Total Allocated": r["allocated"]}
            if r["reserved"] >= 0:
                args["Total Reserved"] = r["reserved"]
            instants.append({"ph": "i", "s": "t", "pid": pid, "tid": _MEMORY_TID,
                             "ts": _us(r["ts_ns"]), "name": "[memory]", "cat": "memory",
                             "args": args})
            ts = _us(r["ts_ns"])
            counters.append({"ph": "C", "pid": pid, "tid": _MEMORY_TID, "ts": ts,
                             "name": "Memory allocated", "cat": "memory",
                             "args": {"bytes": r["allocated"]}})
            if r["reserved"] >= 0:
                counters.append({"ph": "C", "pid": pid, "tid": _MEMORY_TID, "ts": ts,
                                 "name": "Memory reserved", "cat": "memory",
                                 "args": {"bytes": r["reserved"]}})
    return set(by_device)


def _flows(recs, idx: Index, span_of) -> tuple[list[dict], int]:
    flows: list[dict] = []
    dropped = 0

    def flow(cat, name, src: _Span, src_ns: int, dst: _Span, dst_ns: int):
        fid = len(flows) // 2 + 1
        flows.append({"ph": "s", "id": fid, "pid": src.pid, "tid": src.tid, "ts": _us(src_ns),
                      "name": name, "cat": cat})
        flows.append({"ph": "f", "bp": "e", "id": fid, "pid": dst.pid, "tid": dst.tid,
                      "ts": _us(dst_ns), "name": name, "cat": cat})

    for r in recs:
        if r["kind"] != "enqueue":
            continue
        k = idx.kernel_of.get(id(r))
        if k is None:
            dropped += 1  # the kernel ran after stop(), or never
            continue
        flow("enqueue", "enqueue", span_of[id(r)], r["ts_ns"], span_of[id(k)], k["ts_ns"])

    latest_record: dict[int, dict] = {}
    for r in recs:
        if r["kind"] == "event_record":
            latest_record[r["event_id"]] = r
        elif r["kind"] == "event_wait":
            rec = latest_record.get(r["event_id"])
            src = None
            if rec is not None and rec["seq"] > 0:
                src = idx.kernel((rec["device"], rec["stream"], rec["seq"]), rec["ts_ns"])
            dst = _waiting_kernel(idx, r)
            if src is None or dst is None:
                dropped += 1
                continue
            # From the source's end to where the wait was satisfied: the end of the wait's own
            # work, else the start of the work that followed it. 1 ns inside a slice's end, so
            # the flow binds to that slice.
            src_ns = max(src["ts_ns"], end_ns(src) - 1)
            dst_ns = dst["ts_ns"]
            if r["seq"] > 0 or dst["name"] == "event_wait":
                dst_ns = max(dst_ns, end_ns(dst) - 1)
            flow("event", f"event {r['event_id']}", span_of[id(src)], src_ns, span_of[id(dst)],
                 dst_ns)
    return flows, dropped


def _waiting_kernel(idx: Index, wait: dict) -> dict | None:
    """The stream work that implements ``wait``: its seq when known; else the ``event_wait``
    work on that stream enqueued nearest the wait; else the first work enqueued after it."""
    key = (wait["device"], wait["stream"])
    if wait["seq"] > 0:
        return idx.kernel((*key, wait["seq"]), wait["ts_ns"])
    best, best_d, after = None, None, None
    for k in idx.by_stream.get(key, ()):
        e = idx.enqueue_of.get(id(k))
        t = e["ts_ns"] if e is not None else k["ts_ns"]
        if k["name"] == "event_wait":
            d = abs(t - wait["ts_ns"])
            if best_d is None or d < best_d:
                best, best_d = k, d
        elif after is None and t >= wait["ts_ns"]:
            after = k
    return best or after


def _metadata(host_threads, devices, mem_devices, lanes) -> list[dict]:
    meta = [
        {"ph": "M", "pid": HOST_PID, "tid": 0, "name": "process_name", "args": {"name": "host"}},
        {"ph": "M", "pid": HOST_PID, "tid": 0, "name": "process_sort_index",
         "args": {"sort_index": 0}},
    ]
    for d in sorted(devices):
        pid = device_pid(d)
        meta.append({"ph": "M", "pid": pid, "tid": 0, "name": "process_name",
                     "args": {"name": f"ember:{d}"}})
        meta.append({"ph": "M", "pid": pid, "tid": 0, "name": "process_sort_index",
                     "args": {"sort_index": 1 + d}})
        if d in mem_devices:
            meta += _thread_name(pid, _MEMORY_TID, "memory", 0)
    names: dict[tuple[int, int], tuple[str, int]] = {}
    for t in sorted(host_threads):
        names[(HOST_PID, t)] = (f"host thread {t}", 0)
    for d, streams in devices.items():
        for s in streams:
            names[(device_pid(d), stream_tid(s))] = (f"stream {s}", 1 + s)
    for pid, tid, lane in lanes:
        base, order = names.get((pid, tid), (f"track {tid}", 0))
        if lane:
            names[(pid, tid + lane * _LANE_STRIDE)] = (f"{base} (overlap {lane})", order)
    for (pid, tid), (name, order) in sorted(names.items()):
        meta += _thread_name(pid, tid, name, order)
    return meta


def _thread_name(pid, tid, name, order) -> list[dict]:
    return [
        {"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": name}},
        {"ph": "M", "pid": pid, "tid": tid, "name": "thread_sort_index",
         "args": {"sort_index": order}},
    ]


def save_chrome_trace(records: Iterable[dict], path: str | os.PathLike) -> dict:
    """Writes ``chrome_trace(records)`` to ``path`` as JSON; returns the trace."""
    trace = chrome_trace(records)
    with open(path, "w") as f:
        json.dump(trace, f)
    return trace


# The other halves of the export API, so that ``_export`` alone gives everything.
from ._summary import Summary, summary  # noqa: E402,F401
from ._validate import validate_chrome_trace  # noqa: E402,F401
