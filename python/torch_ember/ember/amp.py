"""torch.ember.amp: the names torch.cuda.amp has, bound to the ember device.

Code written against torch.cuda.amp (or a library that looks up `torch.<device>.amp`) finds the
same autocast, GradScaler and custom_fwd/custom_bwd here. They are thin forms of torch.amp's.
"""
import functools

import torch

__all__ = ["GradScaler", "autocast", "custom_bwd", "custom_fwd"]


class autocast(torch.amp.autocast_mode.autocast):
    """`torch.autocast("ember", ...)`; float16 by default, as torch.cuda.amp.autocast."""

    def __init__(self, enabled: bool = True, dtype: torch.dtype = torch.float16,
                 cache_enabled: bool = True):
        super().__init__("ember", enabled=enabled, dtype=dtype, cache_enabled=cache_enabled)


class GradScaler(torch.amp.GradScaler):
    """`torch.amp.GradScaler("ember", ...)`."""

    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000, enabled: bool = True):
        super().__init__("ember", init_scale=init_scale, growth_factor=growth_factor,
                         backoff_factor=backoff_factor, growth_interval=growth_interval,
                         enabled=enabled)


custom_fwd = functools.partial(torch.amp.custom_fwd, device_type="ember")
custom_bwd = functools.partial(torch.amp.custom_bwd, device_type="ember")


def install_autocast_for_higher_order_ops() -> None:
    """Higher-order ops (cond, scan, while_loop, flex_attention, ...) let the CPU, CUDA and XPU
    autocast keys fall through to their implementations, which then autocast each op of their
    bodies. PyTorch's list of those keys leaves out PrivateUse1's, so under
    torch.autocast("ember") such an op found no kernel. Ops that exist get the fall-through
    here; ops created later take it from the list."""
    import torch._ops as ops

    key = torch._C.DispatchKey.AutocastPrivateUse1
    if key not in ops._HIGHER_ORDER_OP_DEFAULT_FALLTHROUGH_DISPATCH_KEYS:
        ops._HIGHER_ORDER_OP_DEFAULT_FALLTHROUGH_DISPATCH_KEYS.append(key)
    for op in list(ops._higher_order_ops.values()):
        op.fallthrough(key)
