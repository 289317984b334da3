"""The reductions Gloo lacks, emulated around a Gloo SUM.

FSDP2 reduces gradients with ReduceOp.AVG, or PREMUL_SUM when a gradient divide factor is set
(TorchTitan does), and Gloo rejects both. AVG is a SUM whose result is divided by the group
size; PREMUL_SUM(f) multiplies each rank's input by f (in the input's dtype, as NCCL does) and
sums. Every other op is handed to Gloo unchanged.
"""
from dataclasses import dataclass
from typing import Optional, Union

import torch
import torch.distributed as dist

from .staging import DistributedError, host_view

_NATIVE = ("SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR")


@dataclass
class Plan:
    gloo_op: "dist.ReduceOp"
    premul: Optional[Union[float, torch.Tensor]] = None  # scale inputs before the SUM
    divide: Optional[int] = None  # divide the result after the SUM
    name: str = "SUM"

    def needs_input_copy(self) -> bool:
        return self.premul is not None

    def before(self, host: torch.Tensor) -> None:
        if self.premul is not None:
            f = self.premul
            if isinstance(f, torch.Tensor):
                # read through a host view: an ember copy would queue behind the caller's stream
                f = host_view(f.detach()).to(host.dtype if host.is_floating_point() else torch.float64)
            host.mul_(f)

    def after(self, host: torch.Tensor) -> None:
        if self.divide is not None:
            host.div_(self.divide)


def plan(op: str, reduce_op: "dist.ReduceOp", group_size: int, dtype: torch.dtype) -> Plan:
    for name in _NATIVE:
        if reduce_op == getattr(dist.ReduceOp, name):
            return Plan(dist.ReduceOp(getattr(dist.ReduceOp, name)), name=name)
    floating = dtype.is_floating_point or dtype.is_complex
    if reduce_op == dist.ReduceOp.AVG:
        if not floating:
            raise DistributedError(f"ember {op}: ReduceOp.AVG needs a floating-point tensor, got {dtype}")
        return Plan(dist.ReduceOp(dist.ReduceOp.SUM), divide=group_size, name="AVG")
    if reduce_op == dist.ReduceOp.PREMUL_SUM:
        if not floating:
            raise DistributedError(
                f"ember {op}: ReduceOp.PREMUL_SUM needs a floating-point tensor, got {dtype}")
        return Plan(dist.ReduceOp(dist.ReduceOp.SUM), premul=reduce_op.factor, name="PREMUL_SUM")
    raise DistributedError(f"ember {op}: unsupported reduce op {reduce_op}")
