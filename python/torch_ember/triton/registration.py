"""Adding the Ember backend to Triton's registry, and making Triton's active driver Ember's.

Triton lists backends in `triton.backends.backends`, found through the `triton.backends`
entry-point group when it is imported, and picks its active driver once, as the only backend
whose driver reports itself active. torch_ember declares that entry point (pyproject.toml), but
entry points are written into the install's metadata at install time — an editable install made
before it existed does not have it — and `TRITON_BACKENDS_IN_TREE=1` skips entry points
altogether. So torch_ember also adds its backend to that dictionary itself, from an import hook
on `triton.backends` (see torch_ember.integrations); whichever runs first wins, the other finds
"ember" registered. On a machine without CUDA/ROCm, Ember's driver
is then the only active one and becomes Triton's default; where a GPU is available, Triton keeps
the GPU and `activate()` selects Ember.
"""
from __future__ import annotations

import sys


def register(module=None) -> bool:
    """Add the "ember" backend to Triton's registry (idempotent). False when `triton.backends`
    is still being imported (its registry is not built yet)."""
    module = module or sys.modules.get("triton.backends")
    if module is None:
        import triton.backends as module  # noqa: F811
    backends = getattr(module, "backends", None)
    if backends is None:
        return False
    if "ember" not in backends:
        from . import compiler, driver
        backends["ember"] = module.Backend(compiler.EmberBackend, driver.EmberDriver)
    return True


def activate() -> None:
    """Make Ember Triton's active driver (needed only where a GPU driver is active too)."""
    register()
    from triton.runtime.driver import driver as config
    from .driver import EmberDriver
    if not isinstance(config._active, EmberDriver):
        config.set_active(EmberDriver())
