"""Keeps shared (tied) parameters shared when a module moves between CPU and ember.

nn.Module._apply swaps a parameter's data in place only when PyTorch considers the two tensor
types "shallow-copy compatible", which it does for CPU and CUDA but not for PrivateUse1
devices (pytorch/pytorch#116255). Otherwise it wraps the converted tensor in a new Parameter
per module slot, so a parameter shared by two modules (a language model's tied input and
output embeddings) becomes two independent parameters on ember and trains differently from
CPU. This wrapper restores the sharing after the conversion: slots that held one Parameter
object before hold one Parameter object after.
"""
import threading

import torch

_state = threading.local()
_original_apply = torch.nn.Module._apply


def _apply(self, fn, recurse=True):
    if getattr(_state, "active", False):  # nested call from the outer conversion
        return _original_apply(self, fn, recurse)
    slots = [(m, k, p) for m in (self.modules() if recurse else [self])
             for k, p in m._parameters.items() if p is not None]
    _state.active = True
    try:
        result = _original_apply(self, fn, recurse)
    finally:
        _state.active = False
    converted = {}
    for module, key, old in slots:
        new = module._parameters[key]
        first = converted.setdefault(id(old), new)
        if new is not first:
            module._parameters[key] = first
    return result


def install():
    if torch.nn.Module._apply is not _apply:
        torch.nn.Module._apply = _apply
