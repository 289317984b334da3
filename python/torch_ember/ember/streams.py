"""Streams and events: torch.Stream and torch.Event objects on ember devices."""
from typing import Any, Optional

import torch

from .. import _C
from .device import _device_index


def _device(dev: Any = None) -> torch.device:
    return torch.device("ember", _device_index(dev))


class _EmberKind(type):
    """isinstance(x, torch.ember.Stream) holds for any torch.Stream on an ember device."""

    base: type = object

    def __instancecheck__(cls, obj):
        return isinstance(obj, cls.base) and obj.device.type == "ember"


class Stream(metaclass=_EmberKind):
    """An in-order queue of work on an ember device, as a torch.Stream (so torch.accelerator
    and device-generic code take it). Each stream has its own worker on the host executor."""

    base = torch.Stream

    def __new__(cls, device: Any = None, priority: int = 0) -> torch.Stream:
        return torch.Stream(device=_device(device), priority=priority)


class Event(metaclass=_EmberKind):
    """A marker on a stream, as a torch.Event: record, wait, query, synchronize, elapsed_time."""

    base = torch.Event

    def __new__(cls, enable_timing: bool = False, blocking: bool = False,
                interprocess: bool = False) -> torch.Event:
        return torch.Event(device=_device(), enable_timing=enable_timing, blocking=blocking,
                           interprocess=interprocess)


def current_stream(device: Any = None) -> torch.Stream:
    return torch.accelerator.current_stream(_device_index(device))


def default_stream(device: Any = None) -> torch.Stream:
    idx = _device_index(device)
    return torch.Stream(stream_id=0, device_index=idx, device_type=current_stream(idx).device_type)


def set_stream(stream: torch.Stream) -> None:
    torch.accelerator.set_stream(stream)


class StreamContext:
    """Makes `stream` current for the block (None: no change), as torch.cuda.stream: setting a
    stream also makes its device current, and both are restored on exit."""

    def __init__(self, stream: Optional[torch.Stream]):
        self.stream = stream
        self.prev_device = -1
        self.prev_src: Optional[torch.Stream] = None
        self.prev_dst: Optional[torch.Stream] = None

    def __enter__(self):
        if self.stream is not None:
            self.prev_device = _C._get_device()
            self.prev_src = torch.accelerator.current_stream(self.prev_device)
            self.prev_dst = torch.accelerator.current_stream(self.stream.device_index)
            torch.accelerator.set_stream(self.stream)
        return self.stream

    def __exit__(self, *exc):
        if self.stream is not None:
            torch.accelerator.set_stream(self.prev_dst)
            torch.accelerator.set_stream(self.prev_src)
            _C._set_device(self.prev_device)
        return False


def stream(stream: Optional[torch.Stream]) -> StreamContext:
    return StreamContext(stream)


def _sleep(ms: float, device: Any = None) -> None:
    """Queue a kernel that keeps the current stream busy for `ms` milliseconds."""
    _C._sleep(_device_index(device), float(ms))
