"""CompileError: what `torch.compile(..., backend="ember")` raises when a graph cannot be
compiled (an op with no lowering, symbolic shapes). Dynamo wraps it in BackendCompilerFailed;
the original stays reachable as that exception's `inner_exception` and `__cause__`."""


class CompileError(RuntimeError):
    pass


class Unsupported(Exception):
    """Raised by a lowering that cannot express this particular call (an attribute or dtype it
    does not handle): the node is then untranslatable, as if it had no lowering at all."""
