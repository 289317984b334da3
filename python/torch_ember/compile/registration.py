"""Makes backend="ember" and the "ember" Dynamo device interface known to Dynamo without
importing Dynamo at `import torch_ember` time.

If Dynamo is already loaded, registration happens at once. Otherwise a one-shot import hook
waits for `torch._dynamo` to finish importing (torch.compile imports it) and registers then.
Installed packages also list the backend under the `torch_dynamo_backends` entry point, which
Dynamo consults for names it does not know."""
import importlib.abc
import importlib.util
import sys

_done = False


def _register() -> None:
    global _done
    if _done:
        return
    _done = True
    from torch._dynamo.backends.registry import _COMPILER_FNS, register_backend
    from torch._dynamo.device_interface import register_interface_for_device

    from .backend import ember_backend
    from .device_interface import EmberInterface

    if "ember" not in _COMPILER_FNS:
        register_backend(ember_backend, name="ember")
    register_interface_for_device("ember", EmberInterface)
    _register_device_context()
    _keep_string_frames()
    from . import background, warm

    background.install()

    if warm.enabled():
        warm.install()


def _register_device_context() -> None:
    """`with torch.ember.device(d):` inside a compiled function (Liger-Kernel's ops wrap their
    launches in one): Dynamo traces the device context managers it has a variable class for and
    breaks the graph at any other. Ember's switches the current device through the accelerator
    hooks, as torch.accelerator.device_index does."""
    try:
        from torch._dynamo.variables import get_device_context_manager, register_device_context_manager
        from torch._dynamo.variables.ctx_manager import GenericDeviceVariable
    except ImportError:  # an older Dynamo without the registry
        return
    import torch

    from ..ember.device import _device_index

    if get_device_context_manager(torch.ember.device) is not None:
        return

    class EmberDeviceVariable(GenericDeviceVariable):
        _exchange_fn = staticmethod(torch._C._accelerator_exchangeDevice)
        _maybe_exchange_fn = staticmethod(torch._C._accelerator_maybeExchangeDevice)
        _get_device_index_fn = staticmethod(_device_index)

        def module_name(self) -> str:
            return "torch.ember"

        def python_type(self) -> type:
            return torch.ember.device

    register_device_context_manager(torch.ember.device, EmberDeviceVariable)


def _keep_string_frames() -> None:
    """Dynamo drops frames whose file is "<string>" from the stack trace it records per node (it
    lists "<string>" among the files of no interest), so code run by `python -c` or exec() would
    reach compile errors and the profiler as "<unknown>". Those frames are the user's code: the
    graph builder's copy of that list, and only it, leaves them in."""
    try:
        from torch._dynamo import output_graph
    except ImportError:
        return
    files = getattr(output_graph, "uninteresting_files", None)
    if files is None or getattr(files, "_ember_keeps_string", False):
        return

    def uninteresting_files():
        return files() - {"<string>"}

    uninteresting_files._ember_keeps_string = True
    output_graph.uninteresting_files = uninteresting_files


class _AfterDynamoImport(importlib.abc.MetaPathFinder):
    """Wraps the loader of `torch._dynamo` so that registration runs right after it executes."""

    def find_spec(self, name, path, target=None):
        if name != "torch._dynamo":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_register(module):
            exec_module(module)
            _register()

        spec.loader.exec_module = exec_then_register
        return spec


def install() -> None:
    if "torch._dynamo" in sys.modules:
        _register()
    elif not any(isinstance(f, _AfterDynamoImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterDynamoImport())
