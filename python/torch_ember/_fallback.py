"""The CPU-fallback report: which ops left the device, how often, and what it cost."""
from __future__ import annotations

from dataclasses import dataclass

from . import _C


@dataclass(frozen=True)
class FallbackOp:
    op: str
    calls: int
    bytes_to_host: int
    bytes_to_device: int
    seconds: float


def _fmt_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


class FallbackReport(list):
    """A list of FallbackOp, most-called first, that prints as a table."""

    @property
    def total_calls(self) -> int:
        return sum(r.calls for r in self)

    @property
    def bytes_to_host(self) -> int:
        return sum(r.bytes_to_host for r in self)

    @property
    def bytes_to_device(self) -> int:
        return sum(r.bytes_to_device for r in self)

    def to_dict(self) -> dict:
        return {r.op: {"calls": r.calls, "bytes_to_host": r.bytes_to_host,
                       "bytes_to_device": r.bytes_to_device, "seconds": r.seconds} for r in self}

    # Ops without an ember kernel that compiled graphs run through the CPU fallback
    # (torch.compile options={"fallback": "eager"}), by op, counted once per compiled graph.
    compiled_eager_ops: dict = {}

    def __str__(self) -> str:
        text = self._cpu_text()
        if self.compiled_eager_ops:
            ops = ", ".join(f"{op} ({n})" for op, n in sorted(self.compiled_eager_ops.items()))
            text += f"\nops compiled graphs run through the CPU fallback (per graph): {ops}"
        return text

    def _cpu_text(self) -> str:
        if not self:
            return "ember fallback report: no op fell back to the CPU"
        width = max(len("op"), *(len(r.op) for r in self))
        lines = [f"ember fallback report: {len(self)} ops, {self.total_calls} calls ran on the CPU",
                 f"{'op':<{width}}  {'calls':>8}  {'to host':>10}  {'to device':>10}  {'time':>9}"]
        for r in self:
            lines.append(f"{r.op:<{width}}  {r.calls:>8}  {_fmt_bytes(r.bytes_to_host):>10}  "
                         f"{_fmt_bytes(r.bytes_to_device):>10}  {r.seconds * 1e3:>7.1f}ms")
        return "\n".join(lines)

    __repr__ = __str__


def fallback_report() -> FallbackReport:
    """Every op that ran on the CPU instead of the device since start or the last reset."""
    ops = [FallbackOp(*rec) for rec in _C._fallback_records()]
    report = FallbackReport(sorted(ops, key=lambda r: (-r.calls, r.op)))
    from .compile import fallback_count

    report.compiled_eager_ops = fallback_count.counts()
    return report


def reset_fallback_stats() -> None:
    _C._reset_fallback_records()
    from .compile import fallback_count

    fallback_count.reset()


def set_fallback_mode(mode: str) -> str:
    """'warn' (once per op), 'silent' (count only) or 'error' (refuse); returns the old mode."""
    old = _C._get_fallback_mode()
    _C._set_fallback_mode(mode)
    return old
