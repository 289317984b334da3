"""OpInfo conformance harness: PyTorch's op_db run on ember and compared with the CPU.
`torch_ember.conformance.run` says what is checked; `run.run(...)` runs it from Python."""
from .run import main

__all__ = ["main"]
