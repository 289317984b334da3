"""Activation checkpointing with random ops under torch.compile: the RNG-state operators.

When AOTAutograd recomputes a checkpointed region that draws random numbers (dropout), it wraps
the forward draw in `run_and_save_rng_state` (the device's RNG state is saved with the result)
and the recomputation in `run_with_rng_state` (the saved state is restored around it), so the
backward sees the same mask. Both pick an implementation per device type from a fixed table
(cuda, cpu, hpu, xpu) and failed with "Backend not supported for ember". Each gains an ember
implementation on the PrivateUse1 key and a device-selection step that routes ember tensors to
it; every other device keeps the original path.
"""
import torch
from torch._C import DispatchKey


def _ember_index(args, kwargs) -> int | None:
    device = kwargs.get("device")
    if device is not None:
        device = torch.device(device)
        return (device.index or 0) if device.type == "ember" else None
    for a in args:
        if isinstance(a, torch.Tensor):
            return (a.device.index or 0) if a.device.type == "ember" else None
    return None


def _run_and_save(op, *args, **kwargs):
    index = _ember_index(args, kwargs) or 0
    return torch.ember.get_rng_state(index), op(*args, **kwargs)


def _run_with(rng_state, op, *args, **kwargs):
    index = _ember_index(args, kwargs) or 0
    current = torch.ember.get_rng_state(index)
    torch.ember.set_rng_state(rng_state.cpu(), index)
    try:
        return op(*args, **kwargs)
    finally:
        torch.ember.set_rng_state(current, index)


def _route(hop, ember_impl, takes_state: bool) -> None:
    original = hop.py_kernels[DispatchKey.BackendSelect]

    def backend_select(*all_args, **kwargs):
        args = all_args[2:] if takes_state else all_args[1:]
        if _ember_index(args, kwargs) is not None:
            return ember_impl(*all_args, **kwargs)
        return original(*all_args, **kwargs)

    hop.py_kernels[DispatchKey.BackendSelect] = backend_select
    if DispatchKey.PrivateUse1 not in hop.py_kernels:
        hop.py_impl(DispatchKey.PrivateUse1)(ember_impl)
    hop._dispatch_cache.clear()


def patch_rng_state_ops(module) -> None:
    _route(module.run_and_save_rng_state, _run_and_save, takes_state=False)
    _route(module.run_with_rng_state, _run_with, takes_state=True)
