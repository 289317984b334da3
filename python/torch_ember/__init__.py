"""Ember: a PyTorch backend for the ember accelerator (`torch.device("ember")`)."""


def _autoload():
    """PyTorch's device-backend autoload entry point: importing the package registers it.
    Defined before `import torch` because `import torch_ember` first imports torch, whose
    autoload then looks this name up on the partly imported package."""


import torch  # noqa: E402

# Loading the extension registers the device guard, hooks, allocator, kernels and fallback.
from . import _C  # noqa: E402,F401

if torch._C._get_privateuse1_backend_name() != "ember":
    torch.utils.rename_privateuse1_backend("ember")
    from . import ember as _device_module

    torch._register_device_module("ember", _device_module)
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
    )

from .ember.amp import install_autocast_for_higher_order_ops  # noqa: E402

install_autocast_for_higher_order_ops()
from ._fallback import fallback_report, reset_fallback_stats, set_fallback_mode  # noqa: E402
from . import eager_decompositions as _eager_decompositions  # noqa: E402

_eager_decompositions.install()
from . import _sparse  # noqa: E402

_sparse.install()
from . import _exit  # noqa: E402,F401
from . import integrations as _integrations  # noqa: E402

_integrations.install()

# The "ember" c10d backend for torch.distributed; its process group loads with the first group.
from . import distributed as _distributed  # noqa: E402

_distributed.register()

# Compiled mode's public names; Dynamo itself loads only when torch.compile first runs.
from .compile.errors import CompileError  # noqa: E402
from .compile.stats import compile_stats, reset_compile_stats  # noqa: E402
from .compile import registration as _compile_registration  # noqa: E402

_compile_registration.install()

__version__ = "0.1.0"
__all__ = ["CompileError", "compile_stats", "fallback_report", "get_include", "reset_compile_stats",
           "reset_fallback_stats", "set_fallback_mode"]


def get_include() -> str:
    """The directory holding <torch_ember/extension.h>, for C++ extensions that add ember kernels
    (pass it to torch.utils.cpp_extension as an include path)."""
    import os

    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "include")
from . import profiler  # noqa: E402,F401
