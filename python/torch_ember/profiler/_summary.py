"""The summary of a profile: where device time went, how much work fell back to the CPU, when
each stream sat idle and what the host was doing meanwhile, memory peaks, copies, compiles.

``summary(records)`` takes the record dicts described in ``_schema.py``. Times are ns in the
dataclasses, except ``KeyAverage``, which mirrors PyTorch's ``key_averages()`` rows in µs.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Iterable

from ._schema import Index, end_ns, is_host_span, normalize


@dataclass
class KernelStat:
    name: str
    count: int
    total_ns: int
    mean_ns: float
    share: float  # of all kernel time in the profile


@dataclass
class KeyAverage:
    """A row of ``key_averages()``, named as PyTorch's ``FunctionEventAvg`` (times in µs).

    Host ops (``device_type == "CPU"``) get the device time of the kernels they enqueued
    (``device_time_total``: while the op or any op inside it was running; ``self_...``: only
    those it enqueued directly). Kernels (``device_type == "ember"``) are rows of their own.
    """

    key: str
    device_type: str
    count: int = 0
    cpu_time_total: float = 0.0
    self_cpu_time_total: float = 0.0
    device_time_total: float = 0.0
    self_device_time_total: float = 0.0

    @property
    def cpu_time(self) -> float:
        return self.cpu_time_total / self.count if self.count else 0.0

    @property
    def device_time(self) -> float:
        return self.device_time_total / self.count if self.count else 0.0


@dataclass
class HostActivity:
    """A host span that overlapped an idle gap: what the host was doing."""

    name: str
    kind: str  # "host_op", "synchronize", "fallback", "compile", "copy"
    overlap_ns: int
    thread: int
    source: str = ""


@dataclass
class Gap:
    device: int
    stream: int
    start_ns: int
    dur_ns: int
    after: str | None  # the kernel before the gap; None: the profile's start
    before: str | None  # the kernel after the gap; None: the profile's end
    host: list[HostActivity] = field(default_factory=list)  # most overlap first

    @property
    def end_ns(self) -> int:
        return self.start_ns + self.dur_ns

    @property
    def interior(self) -> bool:
        """Between two kernels: the stream had work queued after it, so the gap delayed it."""
        return self.after is not None and self.before is not None


@dataclass
class StreamIdle:
    device: int
    stream: int
    kernels: int
    busy_ns: int
    idle_ns: int  # of the profiled region
    gaps: list[Gap]  # the biggest, biggest first

    @property
    def idle_share(self) -> float:
        total = self.busy_ns + self.idle_ns
        return self.idle_ns / total if total else 0.0


@dataclass
class FallbackStat:
    name: str
    count: int
    total_ns: int
    bytes_to_host: int
    bytes_to_device: int
    share: float  # of the profiled region's duration


@dataclass
class CopyStat:
    kind: str
    count: int
    bytes: int
    device_ns: int  # time of the stream work that performed the copies
    host_ns: int  # time of synchronous copies on the host


@dataclass
class MemoryStat:
    device: int
    peak_allocated: int
    peak_reserved: int  # -1 when the records do not report reserved memory
    start_allocated: int  # before the first event
    end_allocated: int
    allocs: int
    frees: int


@dataclass
class CompileStat:
    name: str
    count: int
    total_ns: int
    cache_hits: int


class Summary:
    """What a profile says, computed once from the records. ``str(summary)`` is the table."""

    def __init__(self, records: Iterable[dict], *, gaps_per_stream: int = 5,
                 host_per_gap: int = 3):
        recs = normalize(records)
        self._recs = recs
        self._idx = Index(recs)
        self.start_ns = recs[0]["ts_ns"] if recs else 0
        self.end_ns = max((end_ns(r) for r in recs), default=0)
        self.duration_ns = self.end_ns - self.start_ns
        self.kernels = self._kernels()
        self.device_time_ns = sum(r["dur_ns"] for r in self._recs if r["kind"] == "kernel")
        self.fallbacks = self._fallbacks()
        self.fallback_ns = sum(f.total_ns for f in self.fallbacks)
        self.fallback_share = self.fallback_ns / self.duration_ns if self.duration_ns else 0.0
        self.streams = self._streams(gaps_per_stream, host_per_gap)
        self.memory = self._memory()
        self.copies = self._copies()
        self.compile = self._compile()

    # --- queries ---------------------------------------------------------------------------

    @property
    def peak_allocated(self) -> dict[int, int]:
        """Peak allocated bytes per device."""
        return {m.device: m.peak_allocated for m in self.memory}

    def biggest_gaps(self, n: int = 5, interior_only: bool = False) -> list[Gap]:
        """The longest idle gaps over all streams (of each stream's ``gaps_per_stream``
        longest); ``interior_only`` skips idle before a stream's first or after its last kernel.
        """
        gaps = [g for s in self.streams for g in s.gaps if g.interior or not interior_only]
        return sorted(gaps, key=lambda g: -g.dur_ns)[:n]

    def key_averages(self) -> list[KeyAverage]:
        """Rows per host op name and per kernel name, by device time then CPU time."""
        rows: dict[tuple[str, str], KeyAverage] = {}

        def row(key, device_type):
            r = rows.get((key, device_type))
            if r is None:
                r = rows[(key, device_type)] = KeyAverage(key, device_type)
            return r

        for op, children_ns in _host_op_children(self._recs):
            r = row(op["name"], "CPU")
            r.count += 1
            r.cpu_time_total += op["dur_ns"] / 1e3
            r.self_cpu_time_total += (op["dur_ns"] - children_ns) / 1e3
        for r in self._recs:
            if r["kind"] != "kernel":
                continue
            us = r["dur_ns"] / 1e3
            k = row(r["name"], "ember")
            k.count += 1
            k.device_time_total += us
            k.self_device_time_total += us
            e = self._idx.enqueue_of.get(id(r))
            ops = self._idx.open_ops(e) if e is not None else ()
            for op in ops:
                row(op["name"], "CPU").device_time_total += us
            if ops:
                row(ops[-1]["name"], "CPU").self_device_time_total += us
        return sorted(rows.values(), key=lambda r: (-r.device_time_total, -r.cpu_time_total,
                                                    r.key))

    def to_dict(self) -> dict:
        return {
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "duration_ns": self.duration_ns,
            "device_time_ns": self.device_time_ns,
            "kernels": [asdict(k) for k in self.kernels],
            "fallback_ns": self.fallback_ns,
            "fallback_share": self.fallback_share,
            "fallbacks": [asdict(f) for f in self.fallbacks],
            "streams": [asdict(s) for s in self.streams],
            "memory": [asdict(m) for m in self.memory],
            "copies": [asdict(c) for c in self.copies],
            "compile": [asdict(c) for c in self.compile],
        }

    # --- construction ----------------------------------------------------------------------

    def _kernels(self) -> list[KernelStat]:
        """Kernels by name; a compiled graph's steps are listed too (they are the graph
        kernel's time broken down, so shares are of kernel time excluding steps)."""
        count: dict[str, int] = defaultdict(int)
        total: dict[str, int] = defaultdict(int)
        steps: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for r in self._recs:
            if r["kind"] == "step":
                steps[r["name"]][0] += 1
                steps[r["name"]][1] += r["dur_ns"]
            if r["kind"] == "kernel":
                count[r["name"]] += 1
                total[r["name"]] += r["dur_ns"]
        all_ns = sum(total.values())
        out = [KernelStat(n, count[n], total[n], total[n] / count[n],
                          total[n] / all_ns if all_ns else 0.0) for n in count]
        out += [KernelStat(f"  {n}", c, t, t / c, t / all_ns if all_ns else 0.0)
                for n, (c, t) in steps.items()]
        return sorted(out, key=lambda k: (-k.total_ns, k.name))

    def _fallbacks(self) -> list[FallbackStat]:
        acc: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
        for r in self._recs:
            if r["kind"] == "fallback":
                a = acc[r["name"]]
                a[0] += 1
                a[1] += r["dur_ns"]
                a[2] += r["bytes"]
                a[3] += r["bytes_to_device"]
        d = self.duration_ns
        out = [FallbackStat(n, a[0], a[1], a[2], a[3], a[1] / d if d else 0.0)
               for n, a in acc.items()]
        return sorted(out, key=lambda f: (-f.total_ns, f.name))

    def _streams(self, gaps_per_stream: int, host_per_gap: int) -> list[StreamIdle]:
        host = _HostSpans(self._recs)
        out = []
        for (device, stream), ks in sorted(self._idx.by_stream.items()):
            ks = sorted(ks, key=lambda k: k["ts_ns"])
            gaps = []
            busy = 0
            prev_end, prev_name = self.start_ns, None
            for k in ks:
                busy += k["dur_ns"]
                if k["ts_ns"] > prev_end:
                    gaps.append(Gap(device, stream, prev_end, k["ts_ns"] - prev_end, prev_name,
                                    k["name"]))
                if end_ns(k) >= prev_end:
                    prev_end, prev_name = end_ns(k), k["name"]
            if self.end_ns > prev_end:
                gaps.append(Gap(device, stream, prev_end, self.end_ns - prev_end, prev_name, None))
            idle = sum(g.dur_ns for g in gaps)
            gaps.sort(key=lambda g: (-g.dur_ns, g.start_ns))
            gaps = gaps[:gaps_per_stream]
            for g in gaps:
                g.host = host.during(g.start_ns, g.end_ns)[:host_per_gap]
            out.append(StreamIdle(device, stream, len(ks), busy, idle, gaps))
        return out

    def _memory(self) -> list[MemoryStat]:
        out = []
        by_device: dict[int, list[dict]] = defaultdict(list)
        for r in self._recs:
            if r["kind"] in ("alloc", "free"):
                by_device[r["device"]].append(r)
        for d, mem in sorted(by_device.items()):
            first = mem[0]
            start = first["allocated"] - (first["bytes"] if first["kind"] == "alloc"
                                          else -first["bytes"])
            out.append(MemoryStat(
                device=d,
                peak_allocated=max([start] + [r["allocated"] for r in mem]),
                peak_reserved=max(r["reserved"] for r in mem),
                start_allocated=start,
                end_allocated=mem[-1]["allocated"],
                allocs=sum(r["kind"] == "alloc" for r in mem),
                frees=sum(r["kind"] == "free" for r in mem),
            ))
        return out

    def _copies(self) -> list[CopyStat]:
        acc: dict[str, CopyStat] = {}
        for r in self._recs:
            if r["kind"] != "copy":
                continue
            kind = r["copy_kind"] or "?"
            c = acc.setdefault(kind, CopyStat(kind, 0, 0, 0, 0))
            c.count += 1
            c.bytes += r["bytes"]
            c.host_ns += r["dur_ns"]
            if r["seq"] > 0:
                k = self._idx.kernel((r["device"], r["stream"], r["seq"]), r["ts_ns"])
                if k is not None:
                    c.device_ns += k["dur_ns"]
        return sorted(acc.values(), key=lambda c: c.kind)

    def _compile(self) -> list[CompileStat]:
        acc: dict[str, CompileStat] = {}
        for r in self._recs:
            if r["kind"] == "compile":
                c = acc.setdefault(r["name"], CompileStat(r["name"], 0, 0, 0))
                c.count += 1
                c.total_ns += r["dur_ns"]
                c.cache_hits += bool(r["cache_hit"])
        return sorted(acc.values(), key=lambda c: -c.total_ns)

    # --- text ------------------------------------------------------------------------------

    def table(self, top: int = 10) -> str:
        """A printable report; ``top`` rows per section."""
        from ._table import render

        return render(self, top)

    def __str__(self) -> str:
        return self.table()

    def __repr__(self) -> str:
        return (f"Summary(duration={self.duration_ns} ns, kernels={len(self.kernels)}, "
                f"fallback_share={self.fallback_share:.3f}, streams={len(self.streams)})")


def summary(records: Iterable[dict], **kwargs) -> Summary:
    """``Summary(records, **kwargs)``; see ``Summary`` for the options."""
    return Summary(records, **kwargs)


def _host_op_children(recs: list[dict]) -> list[tuple[dict, int]]:
    """Each host op with the total duration of the ops directly inside it (same thread)."""
    by_thread: dict[int, list[dict]] = defaultdict(list)
    for r in recs:
        if r["kind"] == "host_op":
            by_thread[r["thread"]].append(r)
    out = []
    for ops in by_thread.values():
        ops.sort(key=lambda r: (r["ts_ns"], -r["dur_ns"]))
        children = [0] * len(ops)
        stack: list[int] = []
        for i, op in enumerate(ops):
            while stack and end_ns(ops[stack[-1]]) <= op["ts_ns"]:
                stack.pop()
            if stack and end_ns(ops[stack[-1]]) >= end_ns(op):
                children[stack[-1]] += op["dur_ns"]
            stack.append(i)
        out += zip(ops, children)
    return out


class _HostSpans:
    """Host spans that overlap an interval: spans sorted by start, searched in the window of
    starts that can still reach the interval (the longest span bounds how far back)."""

    def __init__(self, recs: list[dict]):
        self.spans = sorted((r for r in recs if is_host_span(r)), key=lambda r: r["ts_ns"])
        self.starts = [r["ts_ns"] for r in self.spans]
        self.longest = max((r["dur_ns"] for r in self.spans), default=0)

    def during(self, start: int, end: int) -> list[HostActivity]:
        lo = bisect.bisect_left(self.starts, start - self.longest)
        hi = bisect.bisect_left(self.starts, end)
        found = []
        for r in self.spans[lo:hi]:
            overlap = min(end, end_ns(r)) - max(start, r["ts_ns"])
            if overlap > 0:
                found.append((r, overlap))
        # Most overlap first; among equals the later-starting, i.e. the innermost, op.
        found.sort(key=lambda x: (-x[1], -x[0]["ts_ns"]))
        return [HostActivity(r["name"] or r["kind"], r["kind"], ov, r["thread"], r["source"])
                for r, ov in found]
