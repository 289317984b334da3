"""Triton kernels on ember tensors: a Triton backend (compiler + driver) that compiles
`@triton.jit` kernels for the host in process.

`kernel[grid](ember_tensor, ...)` works once both `torch_ember` and `triton` are imported, in
either order: importing torch_ember arranges for `register()` to run right after Triton's
`triton.backends` module loads (or at once if it already has), so `import torch_ember` costs
nothing when triton is absent or unused. The pieces: registration.py (adding the backend and
choosing the active driver), compiler.py (Triton's stages), codegen.py (TTIR → C++), cache.py
(the C++ build and its on-disk cache), driver.py (device, stream, load, launch).
"""
from .registration import activate, register

__all__ = ["activate", "register"]
