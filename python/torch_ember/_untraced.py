"""Code Dynamo must never trace: Python that PyTorch's C++ calls back into (kernels registered for
the device, ProcessGroup/Work trampolines). Entered while a compiled function runs (after a graph
break, or from C++ inside a step), such a frame is one Dynamo would otherwise try to compile, and
it stopped at the first host read or C++ object it met. Marking the code objects through
torch._C._dynamo (recursively: what they call is skipped too) needs no torch._dynamo import, so a
process that never compiles never pays for it."""


def untraced_function(fn):
    """Dynamo never traces `fn` (every closure sharing its code), nor what it calls."""
    from torch._C._dynamo.eval_frame import _FrameAction, _FrameExecStrategy, set_code_exec_strategy

    set_code_exec_strategy(fn.__code__, _FrameExecStrategy(_FrameAction.SKIP, _FrameAction.SKIP))
    return fn


def untraced(cls):
    """Class decorator: Dynamo never traces the class's methods, nor what they call."""
    for value in vars(cls).values():
        if getattr(value, "__code__", None) is not None:
            untraced_function(value)
    return cls
