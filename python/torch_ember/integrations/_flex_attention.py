"""FlexAttention on ember: PyTorch 2.13's flex_attention() admits only cuda, cpu, xpu, hpu and mps
inputs (`_validate_device`), although the higher-order op beneath has no device check and its
device-generic math implementation runs on any device. This wrapper admits ember inputs, forward
and backward (the CPU's refusal of backward does not apply: ember runs it), and leaves every
other device to PyTorch's own check."""
import functools


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
