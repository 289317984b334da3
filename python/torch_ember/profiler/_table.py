"""Text rendering of a Summary: plain fixed-width tables, no dependencies."""

from __future__ import annotations

import os
import re

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._summary import Gap, Summary


def fmt_ns(ns: float) -> str:
    if ns >= 1e9:
        return f"{ns / 1e9:.3f} s"
    if ns >= 1e6:
        return f"{ns / 1e6:.3f} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.1f} us"
    return f"{ns:.0f} ns"


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def grid(headers: list[str], rows: list[list[str]], indent: str = "  ") -> list[str]:
    """Columns padded to their widest cell; the first column left-aligned, the rest right."""
    widths = [max(len(str(c)) for c in col) for col in zip(headers, *rows)]

    def line(cells):
        parts = [str(c).ljust(w) if i == 0 else str(c).rjust(w)
                 for i, (c, w) in enumerate(zip(cells, widths))]
        return indent + "  ".join(parts).rstrip()

    return [line(headers), indent + "  ".join("-" * w for w in widths)] + [line(r) for r in rows]


def _gap_line(s: "Summary", g: "Gap") -> str:
    where = f"+{fmt_ns(g.start_ns - s.start_ns)}"
    around = f"after {g.after!r}" if g.after else "from the start"
    around += f", before {g.before!r}" if g.before else ", to the end"
    return f"    gap {fmt_ns(g.dur_ns)} at {where} ({around})"


_PATH = re.compile(r"(/[^\s,:@]+)(?=:\d+)")


def short_paths(text: str) -> str:
    """File paths in a label, as a reader wants them in a table: packages from their package
    directory ("transformers/models/qwen3/modeling_qwen3.py:82"), files under the working
    directory relative to it, anything else as is."""
    cwd = os.getcwd() + os.sep

    def short(m):
        path = m.group(1)
        if "site-packages/" in path:
            return path.split("site-packages/", 1)[1]
        if path.startswith(cwd):
            return path[len(cwd):]
        return path

    return _PATH.sub(short, text)


def cell(name: str, width: int = 110) -> str:
    """A name for a table cell: short paths, and cut to `width` characters."""
    name = short_paths(name)
    return name if len(name) <= width else name[: width - 3] + "..."


def render(s: "Summary", top: int = 10) -> str:
    out = [f"Ember profile: {fmt_ns(s.duration_ns)} profiled, "
           f"{fmt_ns(s.device_time_ns)} of kernel time on {len(s.streams)} stream(s)"]

    out += ["", "Top kernels by device time"]
    if s.kernels:
        out += grid(["Name", "Count", "Total", "Mean", "Share"],
                    [[cell(k.name), k.count, fmt_ns(k.total_ns), fmt_ns(k.mean_ns), _pct(k.share)]
                     for k in s.kernels[:top]])
    else:
        out.append("  (no kernels)")

    out += ["", f"CPU fallback: {fmt_ns(s.fallback_ns)} ({_pct(s.fallback_share)} of the "
                "profiled time)"]
    if s.fallbacks:
        out += grid(["Op", "Count", "Total", "Share", "To host", "To device"],
                    [[f.name, f.count, fmt_ns(f.total_ns), _pct(f.share),
                      fmt_bytes(f.bytes_to_host), fmt_bytes(f.bytes_to_device)]
                     for f in s.fallbacks[:top]])

    out += ["", "Device idle per stream (and what the host was doing)"]
    if not s.streams:
        out.append("  (no device work)")
    for st in s.streams:
        out.append(f"  ember:{st.device} stream {st.stream}: {st.kernels} kernels, busy "
                   f"{fmt_ns(st.busy_ns)}, idle {fmt_ns(st.idle_ns)} ({_pct(st.idle_share)})")
        for g in st.gaps[:top]:
            out.append(_gap_line(s, g))
            if not g.host:
                out.append("      host: no traced activity")
            for h in g.host:
                src = f" at {h.source}" if h.source else ""
                kind = "" if h.kind == "host_op" else f"{h.kind}: "
                out.append(f"      host: {kind}{h.name}{src} for {fmt_ns(h.overlap_ns)} "
                           f"(thread {h.thread})")

    if s.memory:
        out += ["", "Memory"]
        out += grid(["Device", "Peak allocated", "Peak reserved", "Start", "End", "Allocs",
                     "Frees"],
                    [[f"ember:{m.device}", fmt_bytes(m.peak_allocated),
                      fmt_bytes(m.peak_reserved) if m.peak_reserved >= 0 else "-",
                      fmt_bytes(m.start_allocated), fmt_bytes(m.end_allocated), m.allocs,
                      m.frees] for m in s.memory])
    if s.copies:
        out += ["", "Copies"]
        out += grid(["Kind", "Count", "Bytes", "Device time", "Host time"],
                    [[c.kind, c.count, fmt_bytes(c.bytes), fmt_ns(c.device_ns),
                      fmt_ns(c.host_ns)] for c in s.copies])
    if s.compile:
        out += ["", "Compile"]
        out += grid(["Phase", "Count", "Total", "Cache hits"],
                    [[c.name, c.count, fmt_ns(c.total_ns), c.cache_hits]
                     for c in s.compile[:top]])
    return "\n".join(out)
