"""Host views of ember tensors for the Gloo transport.

Gloo reads and writes only CPU tensors. Ember's device memory is host memory (the host executor
runs the device), so an ember tensor's bytes can be handed to Gloo as a CPU tensor that aliases
them, with the same sizes and strides: no staging copy. What keeps that safe is ordering, not
copying: comm.py runs a collective only once the stream that produced its inputs has reached the
call, and makes later work wait for it to finish. Non-contiguous tensors get a contiguous host
temporary and are written back in place, as ProcessGroupGloo does for CPU tensors.
"""
import ctypes
from typing import Iterable, List, Sequence

import torch


class DistributedError(RuntimeError):
    """An ember collective refused its arguments or failed in the transport."""


def check_devices(op: str, tensors: Iterable[torch.Tensor]) -> torch.device:
    """The one device every tensor of a call is on; a clear error naming `op` otherwise."""
    device = None
    for t in tensors:
        if not isinstance(t, torch.Tensor):
            raise DistributedError(f"ember {op}: expected tensors, got {type(t).__name__}")
        if t.device.type not in ("ember", "cpu"):
            raise DistributedError(
                f"ember {op}: tensors must be on ember or cpu, got one on {t.device}")
        if device is None:
            device = t.device
        elif t.device != device:
            raise DistributedError(
                f"ember {op}: all tensors of one call must be on the same device, "
                f"got {device} and {t.device}")
    if device is None:
        raise DistributedError(f"ember {op}: no tensors given")
    return device


def synchronize(device: torch.device) -> None:
    if device.type == "ember":
        torch.ember.synchronize(device)


def host_view(t: torch.Tensor) -> torch.Tensor:
    """A CPU tensor sharing t's memory, sizes and strides (t itself when it is on the CPU). The
    view does not keep t's memory alive: the caller holds t until the transport is done."""
    if t.device.type != "ember":
        return t
    storage = t.untyped_storage()
    if storage.nbytes() == 0 or t.numel() == 0:
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype)
    raw = (ctypes.c_byte * storage.nbytes()).from_address(storage.data_ptr())
    flat_bytes = torch.frombuffer(raw, dtype=torch.uint8)
    # Whole elements only: a storage's byte count need not be a multiple of this dtype's size.
    whole = storage.nbytes() - storage.nbytes() % t.element_size()
    return flat_bytes[:whole].view(t.dtype).as_strided(t.shape, t.stride(), t.storage_offset())


def host_views(x):
    """host_view over a tensor, a list of tensors or a list of lists of tensors."""
    if isinstance(x, torch.Tensor):
        return host_view(x)
    return [host_views(item) for item in x]


def to_host(t: torch.Tensor, copy: bool = False) -> torch.Tensor:
    """A contiguous CPU tensor with the CPU tensor t's values: t itself unless it is strided or
    `copy` is asked for."""
    if t.is_contiguous() and not copy:
        return t
    return t.detach().contiguous() if not t.is_contiguous() else t.detach().clone()


def host_buffer(t: torch.Tensor) -> torch.Tensor:
    """A contiguous CPU tensor Gloo may write the CPU tensor t's result into (t where possible)."""
    if t.is_contiguous():
        return t
    return torch.empty(t.shape, dtype=t.dtype, device="cpu")


def copy_back(dsts: Sequence[torch.Tensor], srcs: Sequence[torch.Tensor]) -> None:
    for dst, src in zip(dsts, srcs):
        if dst is not src:
            with torch.no_grad():
                dst.copy_(src)


def flat(lists: Sequence[Sequence[torch.Tensor]]) -> List[torch.Tensor]:
    return [t for group in lists for t in group]
