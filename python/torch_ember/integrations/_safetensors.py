"""safetensors: `load_file(path, device="ember")` and `safe_open(..., device="ember:1")`.

safetensors parses the device name in its compiled core, which knows cpu, cuda, mps, npu, xpu
and a few more, and rejects "ember" ("device ember is invalid"). A bare integer is accepted and
means the current accelerator's device of that index. While ember is the current accelerator,
ember device names are passed on as their index, so tensors load straight onto ember.
"""
import functools

import torch

from . import ember_is_the_accelerator, rebind


def _as_index(device):
    if isinstance(device, (str, torch.device)):
        try:
            parsed = torch.device(device)
        except (RuntimeError, TypeError):
            return device
        if parsed.type == "ember" and ember_is_the_accelerator():
            return parsed.index if parsed.index is not None else torch.ember.current_device()
    return device


def patch_safe_open(module) -> None:
    original = module.safe_open
    if getattr(original, "_ember_wrapper", False):
        return

    @functools.wraps(original)
    def safe_open(filename, framework, device="cpu", *args, **kwargs):
        return original(filename, framework, _as_index(device), *args, **kwargs)

    safe_open._ember_wrapper = True
    module.safe_open = safe_open
    # Modules that did `from safetensors import safe_open` before this ran.
    rebind(original, safe_open, ("safetensors.torch", "transformers.modeling_utils"), ("safe_open",))
