"""The compiled half of conformance: an OpInfo sample through torch.compile(backend="ember"),
strictly (fullgraph=True, no fallback option), so that compiled coverage can be checked against
eager coverage op by op.

Each call starts from a fresh Dynamo cache: the harness calls many ops through one wrapper, and
a full cache would make Dynamo run the op eagerly without saying so. A call that Dynamo hands
no graph for is not a compiled result either; both are reported, never counted as passes."""
import torch

import torch_ember


class CompileFailure(RuntimeError):
    """Ember refused or failed to compile the graph (BackendCompilerFailed)."""


class NotCapturable(RuntimeError):
    """Dynamo could not capture the call in one graph (data-dependent output, graph break), or
    handed no graph to the backend: nothing about ember is tested."""


def _compiled(op, backend):
    return torch.compile(lambda i, a, k: op(i, *a, **k), backend=backend, fullgraph=True, dynamic=False)


def _fails_without_ember(op, inp, args, kwargs) -> bool:
    """The control run: the same call, on the same ember tensors, through PyTorch's own compile
    stack (aot_eager: Dynamo and AOTAutograd, then eager kernels). When that fails too, Ember's
    compiler is not where the failure is."""
    torch._dynamo.reset()
    try:
        _compiled(op, "aot_eager")(inp, args, kwargs)
    except Exception:
        return True
    return False


def call(op, inp, args, kwargs):
    import torch._dynamo

    torch._dynamo.reset()
    before = len(torch_ember.compile_stats())
    try:
        out = _compiled(op, "ember")(inp, args, kwargs)
    except torch._dynamo.exc.BackendCompilerFailed as e:
        inner = getattr(e, "inner_exception", None) or e
        # A failure inside AOTAutograd's trace (not Ember's refusal) may be PyTorch's own.
        if not isinstance(inner, torch_ember.CompileError) and _fails_without_ember(op, inp, args, kwargs):
            raise NotCapturable("PyTorch's compile stack fails on it too (aot_eager)") from None
        raise CompileFailure(f"{type(inner).__name__}: {inner}") from None
    except (torch._dynamo.exc.Unsupported, torch._dynamo.exc.UserError) as e:
        raise NotCapturable(f"Dynamo cannot capture it in one graph ({type(e).__name__})") from None
    except torch_ember.CompileError:
        raise
    except Exception:
        if _fails_without_ember(op, inp, args, kwargs):
            raise NotCapturable("PyTorch's compile stack fails on it too (aot_eager)") from None
        raise
    if len(torch_ember.compile_stats()) == before:
        raise NotCapturable("Dynamo handed no graph to the backend")
    return out


def wrap(op):
    """`op` as a callable that runs compiled, for code that calls op(input, *args, **kwargs)."""
    return lambda inp, *args, **kwargs: call(op, inp, args, kwargs)


# Result classes of a compiled run, in report order.
CLASSES = ("compiled-pass", "compile-error", "wrong", "crash", "skipped")


def classify(res: dict) -> dict:
    """Maps an eager-style result (native-pass / fallback-pass / fail / skipped) to the compiled
    classes: a pass is a compiled pass, a failure is a compile error, a wrong result or a crash."""
    status = res.get("status")
    if status in ("native-pass", "fallback-pass"):
        return {**res, "status": "compiled-pass"}
    if status == "fail":
        if res.get("crash"):
            return {**res, "status": "crash"}
        kind = "compile-error" if res.get("message", "").startswith("compile error") else "wrong"
        return {**res, "status": kind}
    return res
