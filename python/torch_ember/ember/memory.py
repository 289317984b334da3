"""Memory statistics and cache control, with torch.cuda's names and keys."""
from collections import OrderedDict
from typing import Any

import torch

from .. import _C
from .device import _device_index


def memory_stats(device: Any = None) -> "OrderedDict[str, Any]":
    return torch.accelerator.memory_stats(_device_index(device))


def memory_allocated(device: Any = None) -> int:
    return torch.accelerator.memory_allocated(_device_index(device))


def max_memory_allocated(device: Any = None) -> int:
    return torch.accelerator.max_memory_allocated(_device_index(device))


def memory_reserved(device: Any = None) -> int:
    return torch.accelerator.memory_reserved(_device_index(device))


def max_memory_reserved(device: Any = None) -> int:
    return torch.accelerator.max_memory_reserved(_device_index(device))


def reset_peak_memory_stats(device: Any = None) -> None:
    torch.accelerator.reset_peak_memory_stats(_device_index(device))


def reset_accumulated_memory_stats(device: Any = None) -> None:
    torch.accelerator.reset_accumulated_memory_stats(_device_index(device))


def empty_cache() -> None:
    """Return cached, unused device memory to the system (waits for queued work first)."""
    torch.accelerator.empty_cache()


def mem_get_info(device: Any = None) -> tuple:
    """(free, total) bytes of the device's capacity (EMBER_DEVICE_MEMORY)."""
    idx = _device_index(device)
    total = _C._device_memory_capacity(idx)
    return total - memory_reserved(idx), total


def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    return _C._memory_summary(_device_index(device))


def device_memory_used(device: Any = None) -> int:
    """Bytes the device holds from its capacity (what nvidia-smi would show): the reserved bytes."""
    return memory_reserved(device)


def host_memory_stats() -> "OrderedDict[str, Any]":
    """Pinned host memory: bytes in use and bytes cached for reuse."""
    s = _C._host_memory_stats()
    return OrderedDict(allocated_bytes=s["allocated_bytes"], cached_bytes=s["cached_bytes"])


# torch.cuda's deprecated spellings, kept because older code still calls them.
def memory_cached(device: Any = None) -> int:
    return memory_reserved(device)


def max_memory_cached(device: Any = None) -> int:
    return max_memory_reserved(device)


def reset_max_memory_allocated(device: Any = None) -> None:
    reset_peak_memory_stats(device)


def reset_max_memory_cached(device: Any = None) -> None:
    reset_peak_memory_stats(device)
