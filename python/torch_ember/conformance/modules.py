"""module_db conformance: every nn.Module PyTorch's test_modules.py covers (layers, losses, norms),
built from its ModuleInfo's sample inputs in training mode and run forward and backward on ember
against the same module on the CPU, the way test_cpu_gpu_parity does for CUDA.

Each sample builds the module once on the CPU and moves a deep copy to ember, so both start from
the same parameters and buffers. The forward pass compares the outputs, the buffers afterwards
(batch norm's running statistics move in training mode) and the inputs afterwards (in-place
modules write into them); the backward pass compares the gradients of every parameter and
floating input, of the sum of all floating outputs. Lazy modules see one input on each side
first (so their initialisation on ember is exercised), then take the CPU module's parameters.
A sample whose CPU forward draws random numbers (dropout, FractionalMaxPool without fixed
samples) is compared by shape and dtype only, and its gradients are skipped."""
from __future__ import annotations

import copy
import time

import torch
from torch.utils import _pytree as pytree

from . import check
from .opdb import ensure_expecttest
from .samples import run_samples, skipped

DEVICE = check.DEVICE
# test_modules.py tests whose tolerance overrides describe "the same module elsewhere".
MODULE_TESTS = frozenset({"test_cpu_gpu_parity", "test_forward", "test_non_contiguous_tensors"})


def load_module_db():
    ensure_expecttest()
    from torch.testing._internal.common_modules import module_db

    return module_db


def module_name(info) -> str:
    return info.name  # "nn.Linear"


def select_modules(module_db, names=None):
    """All of module_db, or the listed modules ("nn.Linear" or "Linear")."""
    if not names:
        return list(module_db)
    wanted = {n if n.startswith("nn.") else f"nn.{n}" for n in names}
    chosen = [m for m in module_db if m.name in wanted]
    unknown = wanted - {m.name for m in chosen}
    if unknown:
        raise ValueError(f"not in module_db: {', '.join(sorted(unknown))}")
    return chosen


def _brief(tree) -> str:
    def one(x):
        if isinstance(x, torch.Tensor):
            return f"Tensor[{tuple(x.shape)}, {str(x.dtype).removeprefix('torch.')}]"
        return repr(x) if not callable(x) else getattr(x, "__name__", type(x).__name__)
    leaves, spec = pytree.tree_flatten(tree)
    return str(pytree.tree_unflatten([one(x) for x in leaves], spec))


def describe(info, mi) -> str:
    """One line that identifies the sample: constructor arguments, forward inputs, description."""
    ctor = mi.constructor_input
    fwd = mi.forward_input
    inputs = _brief((fwd.args, fwd.kwargs)) if fwd is not None else "none"
    desc = f" [{mi.desc}]" if mi.desc else ""
    return f"{info.name}{_brief((ctor.args, ctor.kwargs))}{desc} forward{inputs}"


def _inputs(info, dtype, requires_grad):
    return info.module_inputs_func(info, device="cpu", dtype=dtype, requires_grad=requires_grad,
                                   training=True)


def _build(info, mi, dtype, e_args, e_kwargs):
    """(CPU module, ember module) with the same parameters and buffers, in training mode, or the
    Outcome of a build that failed: skipped when the CPU cannot build it, failed when ember
    cannot take the copy."""
    ctor = mi.constructor_input
    try:
        cpu = info.module_cls(*ctor.args, **ctor.kwargs).to(dtype)
    except Exception as e:
        return check.Outcome("skip", message="the module cannot be built: " + check.error_text(e))
    cpu.train(True)
    try:
        ember = copy.deepcopy(cpu).to(DEVICE)
        if info.is_lazy:
            # Initialisation draws random numbers on each side's generator: materialise both,
            # then give ember the CPU's values.
            fwd = mi.forward_input
            with torch.no_grad():
                cpu(*fwd.args, **fwd.kwargs)
                ember(*e_args, **e_kwargs)
            ember.load_state_dict(cpu.state_dict())
    except Exception as e:
        return check.Outcome("fail", check.fallback_ops(), "moving the module to ember: " + check.error_text(e))
    return cpu, ember


def _state(module, args, kwargs):
    """What a forward leaves behind besides its output: buffers, and the inputs themselves."""
    return ({name: b for name, b in module.named_buffers()}, (args, kwargs))


def _compare_named(actual: dict, expected: dict, what: str, overrides) -> str | None:
    for name, e in expected.items():
        a = actual.get(name)
        if a is None and e is None:
            continue
        if a is None or e is None:  # an unused input (None) and a zero gradient agree
            a = torch.zeros_like(e) if a is None else a
            e = torch.zeros_like(a) if e is None else e
        diff = check.compare(a, e, overrides)
        if diff:
            return f"{what}{name}: {diff}"
    return None


def check_forward(info, mi, dtype, overrides) -> check.Outcome:
    if mi.forward_input is None:
        return check.Outcome("skip", message="no forward input")
    fwd = mi.forward_input
    # Copied before the CPU runs: in-place modules write into their inputs.
    e_args, e_kwargs = check.to_ember((fwd.args, fwd.kwargs))
    built = _build(info, mi, dtype, e_args, e_kwargs)
    if isinstance(built, check.Outcome):
        return built
    cpu, ember = built
    expected, cpu_err, random = check._cpu_call(
        lambda: (cpu(*fwd.args, **fwd.kwargs), *_state(cpu, fwd.args, fwd.kwargs)))
    actual, ember_err, fallback = check._ember_call(
        lambda: (ember(*e_args, **e_kwargs), *_state(ember, e_args, e_kwargs)))

    def diff():
        out = check.compare(actual[0], expected[0], overrides, shape_only=random)
        if out:
            return out
        if random:  # buffers and inputs after a random forward differ as the outputs do
            return None
        buffers = _compare_named(actual[1], expected[1], "buffer ", overrides)
        if buffers:
            return buffers
        inputs = check.compare(actual[2], expected[2], overrides)
        return inputs and "inputs after the call: " + inputs

    return check._verdict(cpu_err, ember_err, fallback, diff)


def _grads(module, args, kwargs):
    """{name: gradient} of the sum of all floating outputs, for every parameter and floating
    input that requires grad; None when no output is differentiable."""
    out = module(*args, **kwargs)
    outs = [o for o in pytree.tree_leaves(out)
            if isinstance(o, torch.Tensor) and o.is_floating_point() and o.requires_grad]
    if not outs:
        return None
    targets = [(f"grad of {name}", p) for name, p in module.named_parameters() if p.requires_grad]
    targets += [(f"grad of input[{i}]", x) for i, x in enumerate(pytree.tree_leaves((args, kwargs)))
                if isinstance(x, torch.Tensor) and x.is_floating_point() and x.requires_grad]
    if not targets:
        return None
    # Ones as output gradients: the gradient of the sum, without a sum run on the device.
    grads = torch.autograd.grad(outs, [t for _, t in targets], [torch.ones_like(o) for o in outs],
                                allow_unused=True)
    return {name: g for (name, _), g in zip(targets, grads)}


def check_backward(info, mi, dtype, overrides) -> check.Outcome:
    if mi.forward_input is None:
        return check.Outcome("skip", message="no forward input")
    fwd = mi.forward_input
    e_args, e_kwargs = check.to_ember((fwd.args, fwd.kwargs), keep_grad=True)
    built = _build(info, mi, dtype, e_args, e_kwargs)
    if isinstance(built, check.Outcome):
        return built
    cpu, ember = built
    expected, cpu_err, random = check._cpu_call(lambda: _grads(cpu, fwd.args, fwd.kwargs))
    if cpu_err is None and expected is None:
        return check.Outcome("skip", message="no differentiable output")
    if random:
        return check.Outcome("skip", message="random output")
    actual, ember_err, fallback = check._ember_call(lambda: _grads(ember, e_args, e_kwargs))
    loose = {d: (max(r, check.GRAD_TOL[0]), max(a, check.GRAD_TOL[1])) for d, (r, a) in
             {torch.float32: (0.0, 0.0), **overrides}.items()}

    def diff():
        if actual is None:
            return "ember produced no differentiable output"
        return _compare_named(actual, expected, "", loose)

    return check._verdict(cpu_err, ember_err, fallback, diff)


def passes(dtype, opts) -> tuple:
    return ("forward", "backward") if opts.get("backward", True) else ("forward",)


def check_module_dtype(info, dtype, *, max_samples, op_time_limit, end, backward=True, trace=None,
                       **_) -> dict:
    """One result row for `info` at `dtype`: forward, and backward unless `backward` is off."""
    trace = trace or (lambda kind, index, summary, result=None: None)
    name = module_name(info)
    rec = {"op": name, "dtype": str(dtype).removeprefix("torch.")}
    kinds = passes(dtype, {"backward": backward})
    if time.monotonic() >= end:
        return {**rec, **{k: skipped("time budget") for k in kinds}}
    if dtype not in info.supported_dtypes("cpu"):
        return {**rec, **{k: skipped("dtype unsupported") for k in kinds}}
    overrides = check.tolerances(info, dtype, MODULE_TESTS)
    for kind, fn, grad in (("forward", check_forward, False), ("backward", check_backward, True)):
        if kind not in kinds:
            continue
        if time.monotonic() >= end:
            rec[kind] = skipped("time budget")
        else:
            deadline = min(time.monotonic() + op_time_limit, end)
            rec[kind] = run_samples(
                lambda grad=grad: _inputs(info, dtype, grad),
                lambda mi, fn=fn: fn(info, mi, dtype, overrides),
                max_samples, deadline, lambda i, s, kind=kind: trace(kind, i, s),
                describe=lambda mi: describe(info, mi))
        trace(kind, None, None, rec[kind])
    return rec
