"""Make training libraries (and PyTorch's own device allowlists) treat ember like the
accelerators they know.

Hugging Face accelerate/Trainer and Lightning choose devices and allow mixed precision from
hard-coded device lists; PyTorch's FlexAttention admits a fixed set of device types, and
nn.TransformerEncoder's and nn.MultiheadAttention's inference fast paths assume nested-tensor
and fused-attention kernels, and AOTAutograd's
RNG-state operators for checkpointed dropout know a fixed list of devices, as does the optimizers'
graph-capture check. Importing torch_ember
installs narrow patches for them: each runs
when its library is first imported (or at once if it already is), changes one decision for
ember devices only, and leaves every other device's path untouched. docs/integrations.md says
what each patch changes and why. The same hook adds Ember's Triton backend to Triton's registry
when `triton.backends` loads (torch_ember/triton/registration.py).

The one process-wide setting: unless the user set it, `ACCELERATE_TORCH_DEVICE=ember`, which is
how both accelerate and transformers' TrainingArguments are told which device to use when no
CUDA device exists (with CUDA present, they keep choosing it).
"""
import importlib
import importlib.abc
import os
import sys
import threading

import torch

# module name -> "torch_ember.integrations.<file>:<function>" run once after it is imported
_PATCHES = {
    "accelerate.state": ("_accelerate", "patch_state"),
    "accelerate.accelerator": ("_accelerate", "patch_accelerator"),
    "accelerate.utils.dataclasses": ("_accelerate", "add_dynamo_backend"),
    "accelerate.utils.modeling": ("_device_map", "patch_get_max_memory"),
    "accelerate.checkpointing": ("_rng_checkpoints", "patch_accelerate"),
    "transformers.trainer": ("_rng_checkpoints", "patch_trainer"),
    "safetensors": ("_safetensors", "patch_safe_open"),
    "transformers.training_args": ("_transformers", "patch_training_args"),
    "transformers.utils.import_utils": ("_transformers", "patch_is_tracing"),
    "transformers.integrations.flex_attention": ("_transformers", "patch_flex_attention"),
    "lightning.pytorch.trainer.connectors.accelerator_connector": ("_lightning", "patch_connector"),
    "lightning.pytorch.accelerators": ("_lightning", "register_accelerator"),
    "pytorch_lightning.trainer.connectors.accelerator_connector": ("_lightning", "patch_connector"),
    "pytorch_lightning.accelerators": ("_lightning", "register_accelerator"),
    "lightning.fabric.connector": ("_lightning", "patch_fabric_connector"),
    "lightning.fabric.accelerators": ("_lightning", "register_accelerator"),
    "torch.nn.attention.flex_attention": ("_flex_attention", "patch_flex_attention"),
    "torch._higher_order_ops.flex_attention": ("_flex_attention", "register_kernels"),
    "torch.nn.modules.transformer": ("_transformer", "patch_encoder"),
    "torch.nn.modules.activation": ("_transformer", "patch_multihead_attention"),
    "torch.nested._internal.ops": ("_nested_attention", "patch_jagged_attention"),
    "torch._prims.rng_prims": ("_rng_prims", "patch_rng_state_ops"),
    "torch.optim.optimizer": ("_optim", "patch_capture_check"),
    "torch._dynamo.variables.optimizer": ("_optim", "patch_dynamo_capturable"),
    "torch.multiprocessing.reductions": ("_multiprocessing", "patch_reductions"),
    "torch.nn.parallel.comm": ("_data_parallel", "patch_comm"),
    "triton.backends": ("_triton", "register_backend"),
    "torchao.optim.adam": ("_torchao", "route_optimizer_compile"),
}
_done = set()
_lock = threading.Lock()


def _apply(name: str) -> None:
    with _lock:
        if name in _done:
            return
        _done.add(name)
    file, fn = _PATCHES[name]
    module = importlib.import_module(f"{__name__}.{file}")
    getattr(module, fn)(sys.modules[name])


class _Loader(importlib.abc.Loader):
    def __init__(self, inner):
        self.inner = inner

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        self.inner.exec_module(module)
        _apply(module.__name__)


class _Finder(importlib.abc.MetaPathFinder):
    """Wraps the loader of the patched modules so the patch runs right after they execute."""

    def find_spec(self, name, path, target=None):
        if name not in _PATCHES or name in _done:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader)
                return spec
        return None


# The value install() gives ACCELERATE_TORCH_DEVICE when the user has not set it.
DEFAULT_DEVICE = "ember"
_set_by_us = False


def device_is_our_default() -> bool:
    """Whether ACCELERATE_TORCH_DEVICE holds the default install() set (not the user's choice)."""
    return _set_by_us and os.environ.get("ACCELERATE_TORCH_DEVICE") == DEFAULT_DEVICE


def ember_is_the_accelerator() -> bool:
    """Whether integer device indices mean ember here (`torch.device(0)` is `ember:0`)."""
    return torch.accelerator.is_available() and torch.accelerator.current_accelerator().type == "ember"


def rebind(original, replacement, modules, attrs) -> None:
    """Points `attrs` of the already-imported `modules` that still hold `original` (they bound it
    with `from ... import` before the patch ran) at `replacement`."""
    for name in modules:
        module = sys.modules.get(name)
        for attr in attrs:
            if module is not None and getattr(module, attr, None) is original:
                setattr(module, attr, replacement)


# Patched modules that were still executing when torch_ember was imported: `import accelerate`
# imports torch (which loads torch_ember through its device-backend entry point) from inside
# accelerate/accelerator.py, before that module defines anything. Patching it then would
# re-enter accelerate's own import cycle and fail the torch import. They are patched at the
# first import after they finish (an audit hook sees every import).
_pending: set = set()
_hooked = False


def _initializing(module) -> bool:
    return bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


def _retry_pending(event, args) -> None:
    if event != "import" or not _pending:
        return
    for name in list(_pending):
        module = sys.modules.get(name)
        if module is None or _initializing(module):
            continue
        _pending.discard(name)
        try:
            _apply(name)
        except Exception as e:  # never break the user's import over a patch
            import warnings

            warnings.warn(f"torch_ember: could not adapt {name} for ember devices: {e}", stacklevel=2)


def install() -> None:
    global _set_by_us, _hooked
    if not torch.cuda.is_available() and "ACCELERATE_TORCH_DEVICE" not in os.environ:
        os.environ["ACCELERATE_TORCH_DEVICE"] = DEFAULT_DEVICE
        _set_by_us = True
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
    for name in _PATCHES:
        module = sys.modules.get(name)
        if module is None:
            continue
        if _initializing(module):
            _pending.add(name)
        else:
            _apply(name)
    if _pending and not _hooked:
        _hooked = True
        sys.addaudithook(_retry_pending)
