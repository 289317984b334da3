"""Host copies of ember tensors for the Gloo transport.

Gloo reads and writes only CPU tensors. Before a collective, the ember device is synchronized
(so every kernel queued before the call has finished writing its inputs) and each tensor is
copied into a contiguous host tensor; after it, results are copied back into the caller's ember
tensors in place and the device is synchronized again, so the host buffers may be dropped and
later work sees the results. CPU tensors that are already contiguous are handed to Gloo as they
are, as ProcessGroupGloo itself would.
"""
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


def to_host(t: torch.Tensor, copy: bool = False) -> torch.Tensor:
    """A contiguous CPU tensor with t's values: t itself when it already is one (and not `copy`)."""
    if t.device.type == "cpu" and t.is_contiguous() and not copy:
        return t
    host = torch.empty(t.shape, dtype=t.dtype, device="cpu")
    host.copy_(t.detach())
    return host


def host_buffer(t: torch.Tensor) -> torch.Tensor:
    """A contiguous CPU tensor Gloo may write t's result into (t itself where possible)."""
    if t.device.type == "cpu" and t.is_contiguous():
        return t
    return torch.empty(t.shape, dtype=t.dtype, device="cpu")


def copy_back(dsts: Sequence[torch.Tensor], srcs: Sequence[torch.Tensor]) -> None:
    for dst, src in zip(dsts, srcs):
        if dst is not src:
            with torch.no_grad():
                dst.copy_(src)
    if dsts:
        synchronize(dsts[0].device)


def flat(lists: Sequence[Sequence[torch.Tensor]]) -> List[torch.Tensor]:
    return [t for group in lists for t in group]
