"""Registers Ember's Triton backend as soon as Triton's backend registry exists, and lets Dynamo
see user-defined Triton kernels on a host that has no GPU.

Dynamo recognizes a `@triton.jit` kernel (or an autotuned one) called from a compiled function,
and puts it in the graph as a `triton_kernel_wrapper_*` node, only when
`torch.utils._triton.has_triton()` is true; that asks for a CUDA, XPU or MTIA device or Triton's
own "cpu" backend, so without a GPU Dynamo would trace into Triton's launcher and break the graph.
The patch makes it true as well when Ember's driver is Triton's active one. Code that imported
`has_triton` before the patch keeps the original (the question it asks is then about GPUs).
"""
import functools


def register_backend(module) -> None:
    from torch_ember.triton.registration import register
    register(module)
    patch_has_triton()


def _ember_is_triton_driver() -> bool:
    try:
        from triton.runtime.driver import driver

        from torch_ember.triton.driver import EmberDriver
        return isinstance(driver.active, EmberDriver)
    except Exception:
        return False


def patch_has_triton() -> None:
    import torch.utils._triton as ut
    original = ut.has_triton
    if getattr(original, "_ember", False):
        return

    @functools.wraps(original)
    def has_triton() -> bool:
        return original() or _ember_is_triton_driver()

    has_triton._ember = True
    ut.has_triton = has_triton
