"""FlexAttention on ember: PyTorch 2.13's flex_attention() admits only cuda, cpu, xpu, hpu and mps
inputs (`_validate_device`), although the higher-order op beneath has no device check and its
device-generic math implementation runs on any device. This wrapper admits ember inputs, forward
and backward (the CPU's refusal of backward does not apply: ember runs it), and leaves every
other device to PyTorch's own check.

`create_block_mask(..., _compile=True)` (transformers passes it) wraps itself in `torch.compile`
with the default backend, Inductor, which has no code generator for ember tensors; for an ember
device the mask is built eagerly instead, on the device.

The higher-order ops themselves get ember kernels (torch_ember/flex/hop.py): fused kernels for
the mods they can express, PyTorch's dense implementation for the rest."""
import functools

import torch


def patch_flex_attention(module) -> None:
    original = getattr(module, "_validate_device", None)
    if original is None or getattr(original, "_ember", False):
        return

    @functools.wraps(original)
    def _validate_device(query, key, value):
        if query.device.type == "ember":
            return
        return original(query, key, value)

    _validate_device._ember = True
    module._validate_device = _validate_device

    create = getattr(module, "create_block_mask", None)
    if create is None or getattr(create, "_ember", False):
        return

    @functools.wraps(create)
    def create_block_mask(*args, **kwargs):
        device = kwargs.get("device", args[5] if len(args) > 5 else None)
        if kwargs.get("_compile") and device is not None and torch.device(device).type == "ember":
            kwargs["_compile"] = False
        return create(*args, **kwargs)

    create_block_mask._ember = True
    module.create_block_mask = create_block_mask


def register_kernels(module) -> None:
    from ..flex import hop

    hop.register()
