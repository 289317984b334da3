"""Graph capture in the shape of torch.cuda's CUDAGraph and torch.cuda.graph.

    g = torch.ember.EmberGraph()
    with torch.ember.graph(g):          # records the step's kernels on the current stream
        loss = step(static_x, static_y)
    for x, y in batches:
        static_x.copy_(x); static_y.copy_(y)
        g.replay()                      # the same kernels on the same memory, no Python

A capture records kernels without running them; each replay runs all of them in order. Kernel
arguments were fixed when each op was called, so a replay reads the tensors the capture read and
writes the tensors it wrote: change inputs by copying into them, read outputs from the tensors
the capture returned. Memory the capture allocated stays the graph's until `reset()` (or the
graph is destroyed); keep the input tensors alive as long as the graph replays.

Refused during a capture, with an error naming the reason: anything that waits for the device
(`.item()`, `.cpu()`, printing, ops that run on the CPU fallback, data-dependent shapes), random
ops (each replay would repeat the capture's numbers), copies from CPU memory that must be
converted or staged (pinned memory of the same dtype with non_blocking=True is read at each
replay), work queued on another stream of the device, and optimizer steps whose state or
hyperparameters are CPU tensors (build them with `capturable=True`; keep a tensor lr on the
device). Python numbers are fixed at capture time, as in CUDA graphs: a float learning rate that
a scheduler changes between replays does not reach the graph. `torch.accelerator.Graph` works on
ember through the same implementation.
"""
import gc

import torch

from .. import _C


class EmberGraph:
    """A captured sequence of ember kernels (see the module docstring)."""

    def __init__(self, keep_graph: bool = False):
        self._graph = _C._CapturedGraph()

    def capture_begin(self, pool=None, capture_error_mode: str = "global") -> None:
        if pool is not None and tuple(pool) != (0, 0):  # (0, 0): pool() of any ember graph
            raise NotImplementedError("ember graphs do not share memory pools yet (pass pool=None)")
        self._graph.capture_begin(torch.ember.current_device())

    def capture_end(self) -> None:
        self._graph.capture_end()

    def instantiate(self) -> None:
        """Nothing to do: a captured graph is ready to replay."""

    def replay(self) -> None:
        self._graph.replay()

    def reset(self) -> None:
        self._graph.reset()

    def pool(self):
        return (0, 0)

    def num_kernels(self) -> int:
        """Kernels the capture recorded (each replay runs them all)."""
        return self._graph.num_kernels()


class graph:
    """Context manager: captures the enclosed work into `ember_graph` (torch.cuda.graph's shape).

    The device is synchronized first, so earlier work cannot be mistaken for captured work. With
    `stream`, the capture happens on that stream. An exception inside the block abandons the
    capture and leaves the graph empty."""

    def __init__(self, ember_graph: EmberGraph, pool=None, stream=None, capture_error_mode: str = "global"):
        self.ember_graph = ember_graph
        self.pool = pool
        self.stream_ctx = torch.ember.stream(stream) if stream is not None else None
        self.capture_error_mode = capture_error_mode

    def __enter__(self):
        if is_current_stream_capturing():
            raise RuntimeError("ember graph: another graph is capturing on this stream (captures do not nest)")
        torch.ember.synchronize()
        gc.collect()
        if self.stream_ctx is not None:
            self.stream_ctx.__enter__()
        self.ember_graph.capture_begin(self.pool, self.capture_error_mode)

    def __exit__(self, exc_type, exc, tb):
        try:
            if exc_type is None:
                self.ember_graph.capture_end()
            else:
                self.ember_graph.reset()
        finally:
            if self.stream_ctx is not None:
                self.stream_ctx.__exit__(exc_type, exc, tb)
        return False


def is_current_stream_capturing() -> bool:
    """Whether the current stream of the current device is capturing a graph."""
    return _C._is_capturing(torch.ember.current_device())
