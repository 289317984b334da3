"""Op properties beyond "same values as the CPU", the ones test_ops.py checks for every OpInfo,
each classified on its own (native-pass / fallback-pass / fail / skipped) per op and dtype:

  out            out= semantics (outs.py): old values ignored, layout kept, resized when the
                 size is wrong, the CPU's dtype errors, and a CPU out= refused
  noncontiguous  the sample with every tensor made noncontiguous on ember (test_ops.py's
                 `noncontiguous_like`: each element strided by two, the gaps filled with NaN or
                 12), forward and, for float32, gradients against noncontiguous output
                 gradients; compared with the same noncontiguous sample on the CPU
  variants       the method, in-place and operator variants and the aliases on ember: each
                 matches the same variant on the CPU (raising where it raises, writing its
                 input and returning it where it does) and the function on ember; float32
                 also compares the gradient of the input through each variant. An in-place
                 call whose result is bigger than its input must raise RuntimeError, as
                 test_variant_consistency_eager requires, whatever the CPU does
  bool_bytes     bool tensors whose True bytes are 2..255 (a uint8 tensor `.view(torch.bool)`):
                 the result must be the one for standard bools. test_ops.py runs it at dtype
                 bool; here every dtype's samples with a bool tensor (a where condition, an
                 attention mask) count too. A sample on which the CPU's own result changes is
                 skipped, as not ember's

The CPU is the referee throughout, so a failure is one the CPU does not have; and a property
that PyTorch's own OpInfo marks as an expected failure (or a skip) on the CPU or CUDA is skipped
for that op and dtype, as test_ops.py itself would."""
from __future__ import annotations

import time

import torch
from torch.testing._internal.common_utils import clone_input_helper, noncontiguous_like
from torch.utils import _pytree as pytree

import torch_ember

from . import check, outs
from .opdb import RANDOM_OPS, dtype_name, full_name, skip_before_running, waived
from .samples import run_samples, skipped

PROPERTIES = ("out", "noncontiguous", "variants", "bool_bytes")
# The test_ops.py test of each property: where an OpInfo marks it an expected failure or a skip
# on the CPU or CUDA, PyTorch does not hold the property either and the property is skipped.
TESTS = {"out": "test_out", "noncontiguous": "test_noncontiguous_samples",
         "variants": "test_variant_consistency_eager", "bool_bytes": "test_non_standard_bool_values"}


def parse_properties(names) -> tuple:
    chosen = tuple(PROPERTIES if not names else names)
    unknown = set(chosen) - set(PROPERTIES)
    if unknown:
        raise ValueError(f"unknown properties: {', '.join(sorted(unknown))} "
                         f"(one of {', '.join(PROPERTIES)})")
    return chosen


def passes(dtype, opts) -> tuple:
    """The properties a row has (the same at every dtype: a float32 sample may carry a bool
    mask, which bool_bytes checks too)."""
    chosen = opts.get("properties") or PROPERTIES
    return tuple(p for p in PROPERTIES if p in chosen)


def _float_leaves(tree):
    return [x for x in pytree.tree_leaves(tree) if isinstance(x, torch.Tensor)
            and x.is_floating_point() and x.requires_grad]


def _loose(overrides):
    return {d: (max(r, check.GRAD_TOL[0]), max(a, check.GRAD_TOL[1])) for d, (r, a) in
            {torch.float32: (0.0, 0.0), **overrides}.items()}


# --- noncontiguous ------------------------------------------------------------------------------

def _forward_grads(op, s, grad: bool):
    """(processed output, gradients of the floating inputs) for one (noncontiguous) sample; the
    output gradients are noncontiguous too, as in test_noncontiguous_samples."""
    out = s.output_process_fn_grad(check.dense(op(s.input, *s.args, **s.kwargs)))
    if not grad:
        return out, None
    leaves, outs_ = _float_leaves((s.input, s.args, s.kwargs)), _float_leaves(out)
    if not leaves or not outs_:
        return out, None
    ones = [noncontiguous_like(torch.ones_like(o)) for o in outs_]
    return out, list(torch.autograd.grad(outs_, leaves, ones, allow_unused=True))


def check_noncontiguous(op, sample, overrides, shape_only: bool, grad: bool) -> check.Outcome:
    if check.non_strided((sample.input, sample.args, sample.kwargs)):
        return check.Outcome("skip", message="sparse layout")
    e_in, e_args, e_kwargs = check.move_sample(op, sample, keep_grad=grad)
    if not check._on_ember((e_in, e_args, e_kwargs)):
        return check.Outcome("skip", message="no tensor or device to move")
    from torch.testing._internal.opinfo.core import SampleInput

    # Made noncontiguous where they live: a copy to another device would be contiguous again.
    e_sample = SampleInput(e_in, args=e_args, kwargs=e_kwargs,
                           output_process_fn_grad=sample.output_process_fn_grad).noncontiguous()
    cpu_sample = sample.noncontiguous()
    expected, cpu_err, random = check._cpu_call(lambda: _forward_grads(op, cpu_sample, grad))
    if isinstance(cpu_err, check.SparseOutput):
        return check.Outcome("skip", message="sparse layout")
    actual, ember_err, fallback = check._ember_call(lambda: _forward_grads(op, e_sample, grad))

    def diff():
        d = check.compare_outputs(op, cpu_sample, actual[0], expected[0], overrides, shape_only or random)
        if d:
            return d
        if random or expected[1] is None:
            return None
        d = check._compare_grads(actual[1], expected[1], _loose(overrides))
        return d and "gradients: " + d

    return check._verdict(cpu_err, ember_err, fallback, diff)


# --- variants -----------------------------------------------------------------------------------

def variants(op) -> list[tuple[str, object]]:
    """(name, callable) of every variant test_variant_consistency_eager compares."""
    found = [("method", op.method_variant), ("in-place", op.inplace_variant),
             ("operator", op.operator_variant), ("in-place operator", op.inplace_operator_variant)]
    for alias in op.aliases:
        found += [(f"alias {alias.name}", alias.op), (f"alias {alias.name} method", alias.method_variant),
                  (f"alias {alias.name} in-place", alias.inplace_variant)]
    return [(name, fn) for name, fn in found if fn is not None]


def _first_tensor(inp):
    return inp if isinstance(inp, torch.Tensor) else inp[0]


def _variant_run(op, fn, inplace: bool, inp, args, kwargs, post, grad: bool):
    """(output, input after the call or None, shares storage with the input, input gradient)."""
    target = clone_input_helper(inp) if inplace else inp
    before = _first_tensor(target).data_ptr() if inplace else None
    out = check.dense(fn(target, *args, **kwargs))
    shares = inplace and isinstance(out, torch.Tensor) and out.data_ptr() == before
    g = None
    leaf = _first_tensor(inp)
    processed = post(out)
    if (grad and isinstance(processed, torch.Tensor) and processed.is_floating_point()
            and processed.requires_grad and leaf.requires_grad
            and (not inplace or op.supports_inplace_autograd)):
        (g,) = torch.autograd.grad(processed, leaf, torch.ones_like(processed), allow_unused=True)
    return processed, (target if inplace else None), shares, g


def _variant_diff(name, cpu, ember, cpu_fn, ember_fn, values, must_raise: bool) -> str | None:
    """What the variant did differently on ember; `values(got, want, what)` compares results.
    `must_raise`: an in-place call whose result would need a bigger input (broadcasts_input):
    test_variant_consistency_eager requires a RuntimeError, whatever the CPU does."""
    (c, c_err, _), (e, e_err, _) = cpu, ember
    if must_raise and isinstance(e_err, RuntimeError):
        return None
    if c_err is not None:
        return None if e_err is not None else f"{name}: the CPU raised {check.error_text(c_err)}; ember did not"
    if e_err is not None:
        return f"{name}: ember raised {check.error_text(e_err)}"
    for what, want, got in (("", c[0], e[0]), ("input after the call: ", c[1], e[1]),
                            ("input gradient: ", c[3], e[3])):
        d = values(got, want, what)
        if d:
            return f"{name}: {what}{d}"
    if c[2] and not e[2]:
        return f"{name}: the result does not share the input's storage"
    # The CPU's variant agrees with its function: ember's must agree with ember's function.
    (cf, cf_err, _), (ef, ef_err, _) = cpu_fn, ember_fn
    if cf_err is None and ef_err is None and values(c[0], cf[0], "") is None:
        d = values(e[0], ef[0], "")
        if d:
            return f"{name} differs from the function on ember: {d}"
    return None


def check_variants(op, sample, found, overrides, shape_only: bool, grad: bool) -> check.Outcome:
    if check.non_strided((sample.input, sample.args, sample.kwargs)):
        return check.Outcome("skip", message="sparse layout")
    e_in, e_args, e_kwargs = check.move_sample(op, sample, keep_grad=grad)
    if not check._on_ember((e_in, e_args, e_kwargs)):
        return check.Outcome("skip", message="no tensor or device to move")
    post = sample.output_process_fn_grad
    todo = [("function", op.op, False)] + [
        (name, fn, "in-place" in name) for name, fn in found
        if not (name.endswith("operator") and sample.kwargs)]  # operators take no keywords

    def cpu_run(fn, inplace):
        return check._cpu_call(lambda: _variant_run(op, fn, inplace, sample.input, sample.args,
                                                    sample.kwargs, post, grad))

    def ember_run(fn, inplace):  # every variant's fallbacks count, from one reset per sample
        return check._ember_call(lambda: _variant_run(op, fn, inplace, e_in, e_args, e_kwargs, post,
                                                      grad), fresh=False)
    torch_ember.reset_fallback_stats()
    results = [(name, inplace, cpu_run(fn, inplace), ember_run(fn, inplace))
               for name, fn, inplace in todo]
    fallback = check.fallback_ops()
    if isinstance(results[0][2][1], check.SparseOutput):
        return check.Outcome("skip", message="sparse layout")
    if len(results) == 1:
        return check.Outcome("skip", message="operator variants only, and the sample has keywords")
    (_, _, cpu_fn, ember_fn), grad_tol = results[0], _loose(overrides)
    for name, inplace, cpu, ember in results[1:]:
        def values(got, want, what, random=shape_only or cpu[2]):
            tol = grad_tol if what == "input gradient: " else overrides
            return check.compare_outputs(op, sample, got, want, tol, random)
        d = _variant_diff(name, cpu, ember, cpu_fn, ember_fn, values,
                          inplace and sample.broadcasts_input)
        if d:
            return check.Outcome("fail", fallback, check.truncate(d))
    return check.Outcome("pass", fallback)


# --- non-standard bool bytes --------------------------------------------------------------------

def check_bool_bytes(op, sample, overrides, shape_only: bool) -> check.Outcome:
    leaves, spec = pytree.tree_flatten((sample.input, sample.args, sample.kwargs))
    where = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor) and x.dtype == torch.bool]
    if not where:
        return check.Outcome("skip", message="no bool tensor")
    if not any(leaves[i].any() for i in where):  # nothing to store as an unusual byte
        return check.Outcome("skip", message="no True element")
    # True as a random byte in 2..255, False as 0 (test_non_standard_bool_values).
    raw = {i: torch.where(leaves[i], torch.randint(2, 256, leaves[i].shape, dtype=torch.uint8),
                          torch.zeros((), dtype=torch.uint8)) for i in where}
    odd = list(leaves)
    for i in where:
        odd[i] = raw[i].view(torch.bool)
    e_leaves, _ = pytree.tree_flatten(check.move_sample(op, sample))
    for i in where:  # the bytes go to ember as uint8, so nothing on the way can normalise them
        e_leaves[i] = raw[i].to(check.DEVICE).view(torch.bool)

    def call(flat):
        inp, args, kwargs = pytree.tree_unflatten(flat, spec)
        return sample.output_process_fn_grad(check.dense(op(inp, *args, **kwargs)))

    def values(actual, expected):
        return check.compare_outputs(op, sample, actual, expected, overrides, shape_only or random)
    expected, cpu_err, random = check._cpu_call(lambda: call(leaves))
    if isinstance(cpu_err, check.SparseOutput):
        return check.Outcome("skip", message="sparse layout")
    control, control_err, _ = check._cpu_call(lambda: call(odd))
    if cpu_err is None and (control_err is not None or values(control, expected)):
        return check.Outcome("skip", message="the CPU's result changes with non-standard bools too")
    actual, ember_err, fallback = check._ember_call(lambda: call(e_leaves))
    return check._verdict(cpu_err, ember_err, fallback, lambda: values(actual, expected))


# --- the row for one op and dtype ---------------------------------------------------------------

def _not_applicable(op, kind, found, dtype) -> str | None:
    if kind == "out" and not op.supports_out:
        return "no out= variant"
    if kind == "variants" and not found:
        return "no method, in-place or operator variant"
    if waived(op, TESTS[kind], dtype):
        return f"PyTorch's OpInfo expects {TESTS[kind]} to fail"
    return None


def check_properties(op, dtype, *, max_samples, op_time_limit, end, properties=PROPERTIES,
                     trace=None, **_) -> dict:
    """One result row: a class for each property of `op` at `dtype`."""
    trace = trace or (lambda kind, index, summary, result=None: None)
    kinds = passes(dtype, {"properties": properties})
    rec = {"op": full_name(op), "dtype": dtype_name(dtype)}
    skip = skip_before_running(op, dtype, end)
    if skip:
        return {**rec, **{k: skipped(skip) for k in kinds}}
    # test_out's overrides too: an out= kernel may accumulate in another order (addbmm).
    overrides = check.tolerances(op, dtype, check._TOLERANCE_TESTS | {"test_out"})
    shape_only = op.name in RANDOM_OPS
    grad = (dtype == torch.float32 and op.supports_autograd and not shape_only
            and dtype in op.supported_backward_dtypes("cpu"))
    found = variants(op)
    checks = {
        "out": (False, lambda s: outs.check_out(op, s, overrides, shape_only,
                                                not waived(op, "test_out_warning", dtype))),
        "noncontiguous": (grad, lambda s: check_noncontiguous(op, s, overrides, shape_only, grad)),
        "variants": (grad, lambda s: check_variants(op, s, found, overrides, shape_only, grad)),
        "bool_bytes": (False, lambda s: check_bool_bytes(op, s, overrides, shape_only)),
    }
    for kind in kinds:
        reason = "time budget" if time.monotonic() >= end else _not_applicable(op, kind, found, dtype)
        if reason:
            rec[kind] = skipped(reason)
        else:
            requires_grad, fn = checks[kind]
            deadline = min(time.monotonic() + op_time_limit, end)
            rec[kind] = run_samples(
                lambda g=requires_grad: op.sample_inputs("cpu", dtype, requires_grad=g), fn,
                max_samples, deadline, lambda i, s, kind=kind: trace(kind, i, s))
        trace(kind, None, None, rec[kind])  # a crash later in the row keeps this result
    return rec
