"""Devices: count, current device, synchronize."""
from typing import Any

import torch

from .. import _C


def _device_index(dev: Any = None, optional: bool = True) -> int:
    """The ember device index named by an int, a string, a torch.device or None (current)."""
    if dev is None:
        if not optional:
            raise ValueError("an ember device is required")
        return _C._get_device()
    if isinstance(dev, str):
        dev = torch.device(dev)
    if isinstance(dev, torch.device):
        if dev.type != "ember":
            raise ValueError(f"expected an ember device, got {dev}")
        return _C._get_device() if dev.index is None else dev.index
    if isinstance(dev, int):
        return dev
    raise TypeError(f"cannot interpret {dev!r} as an ember device")


def is_available() -> bool:
    return _C._device_count() > 0


def device_count() -> int:
    return _C._device_count()


def is_initialized() -> bool:
    return True  # the runtime starts when the extension loads


def init() -> None:
    pass


def _lazy_init() -> None:
    pass


def _is_in_bad_fork() -> bool:
    """True in a process forked after its parent used the device (only 'spawn' children can)."""
    return _C._is_in_bad_fork()


def current_device() -> int:
    return _C._get_device()


def set_device(device: Any) -> None:
    if isinstance(device, int) and device < 0:
        return  # as torch.cuda.set_device: a negative index leaves the current device
    _C._set_device(_device_index(device))


def synchronize(device: Any = None) -> None:
    """Wait for all work on the device; raises the first error a queued kernel hit."""
    _C._synchronize(_device_index(device))


class device:
    """Context manager that makes `dev` the current ember device."""

    def __init__(self, dev: Any):
        self.idx = -1 if dev is None else _device_index(dev)
        self.prev = -1

    def __enter__(self):
        self.prev = _C._get_device()
        if self.idx >= 0:
            _C._set_device(self.idx)
        return self

    def __exit__(self, *exc):
        if self.idx >= 0:
            _C._set_device(self.prev)
        return False


class device_of(device):
    """Context manager that makes the device of tensor `obj` current (no-op for CPU tensors)."""

    def __init__(self, obj: torch.Tensor):
        super().__init__(obj.device if obj.device.type == "ember" else None)


def can_device_access_peer(device: Any, peer_device: Any) -> bool:
    """Every ember device's memory is host memory, so each can read every other's."""
    count = _C._device_count()
    return 0 <= _device_index(device) < count and 0 <= _device_index(peer_device) < count
