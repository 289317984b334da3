"""Compiled mode: `torch.compile(model, backend="ember")`.

Importing this package is cheap: Dynamo (over a second to import) is touched only when
torch.compile runs; `registration.install()` hooks the "ember" backend name and the Dynamo
device interface in as Dynamo loads. The backend itself is `backend.ember_backend`."""
from .errors import CompileError
from .stats import compile_stats, reset_compile_stats

__all__ = ["CompileError", "compile_stats", "reset_compile_stats"]
