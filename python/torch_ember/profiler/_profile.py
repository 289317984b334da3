"""``torch_ember.profiler.profile``: record what the host and the ember devices did.

    with torch_ember.profiler.profile(record_shapes=True, with_stack=True) as prof:
        train_step()
    prof.export_chrome_trace("trace.json")   # Perfetto / chrome://tracing
    print(prof.key_averages().table(row_limit=15))
    print(prof.summary())                     # kernels, fallbacks, idle gaps, memory

Entering waits for queued device work, so the trace starts from an idle device; leaving waits
again, so every kernel enqueued inside the block appears with its execution. Stored device
errors are left for the program's next synchronizing call.
"""

from __future__ import annotations

from typing import Optional

from ._export import save_chrome_trace
from ._summary import KeyAverage, Summary, summary
from ._table import cell, grid


class KeyAverages(list):
    """Rows of ``KeyAverage``; ``table()`` prints them as PyTorch's ``key_averages().table()``."""

    def table(self, sort_by: str = "device_time_total", row_limit: int = 20) -> str:
        keys = {"device_time_total", "self_device_time_total", "cpu_time_total",
                "self_cpu_time_total", "count"}
        if sort_by not in keys:
            raise ValueError(f"sort_by must be one of {sorted(keys)}, got {sort_by!r}")
        rows = sorted(self, key=lambda r: -getattr(r, sort_by))[:row_limit]
        headers = ["Name", "Device", "Calls", "CPU total", "Self CPU", "Device total", "Self device"]
        cells = [[cell(r.key), r.device_type, str(r.count), _us(r.cpu_time_total), _us(r.self_cpu_time_total),
                  _us(r.device_time_total), _us(r.self_device_time_total)] for r in rows]
        return "\n".join(grid(headers, cells, indent=""))


def _us(us: float) -> str:
    return f"{us / 1e3:.3f}ms" if us >= 1e3 else f"{us:.1f}us"


class profile:
    """Context manager that traces ember activity; see the module docstring."""

    def __init__(self, record_shapes: bool = False, with_stack: bool = False, enabled: bool = True):
        self.record_shapes = record_shapes
        self.with_stack = with_stack
        self.enabled = enabled
        self.records: list[dict] = []
        self._summary: Optional[Summary] = None
        self._running = False

    def start(self) -> None:
        from .. import _C

        if self.enabled:
            _C._profiler_start(self.record_shapes, self.with_stack, True)
            self._running = True

    def stop(self) -> None:
        from .. import _C

        if self._running:
            self._running = False
            self.records = _C._profiler_stop()
            self._summary = None

    def __enter__(self) -> "profile":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def summary(self) -> Summary:
        """Kernels by device time, fallback share, device idle gaps (and what the host did during
        them), copies and peak memory."""
        if self._summary is None:
            self._summary = summary(self.records)
        return self._summary

    def key_averages(self) -> KeyAverages:
        return KeyAverages(self.summary().key_averages())

    def export_chrome_trace(self, path: str) -> None:
        save_chrome_trace(self.records, path)

    def table(self, top: int = 10) -> str:
        return self.summary().table(top=top)

    def __str__(self) -> str:
        return self.table()


__all__ = ["KeyAverage", "KeyAverages", "profile"]
