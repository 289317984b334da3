"""OpInfo conformance harness: PyTorch's op_db run on ember and compared with the CPU, and with
--modules / --properties its module_db and the op properties test_ops.py checks (out=,
noncontiguous inputs, variants, non-standard bools). `torch_ember.conformance.run` says what is
checked; `run.run(...)` runs it from Python."""
from .run import main

__all__ = ["main"]
