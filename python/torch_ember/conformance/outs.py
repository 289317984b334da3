"""The out= property of an OpInfo sample, the cases test_ops.py's test_out and test_out_warning
make, each run on the CPU and on ember with the same kind of out= tensor:

  filled         right shape and dtype, full of NaN (or the largest integer): the old values must
                 not leak into the result; the result is the out= tensor, its strides and storage
                 are kept
  noncontiguous  right shape and dtype, strided: strides and storage kept, values right
  wrong size     one element too many in the last dim: resized, with the same result, and the
                 CPU's warning about resizing a non-empty out= on ember too
  empty          no elements: resized without a warning
  wrong dtype    long for floating results, bool for integer ones, float32 for bool ones:
                 raises where the CPU raises, casts like the CPU where it does not
  wrong device   a CPU out= with ember inputs: must raise RuntimeError, as CUDA does for a CPU
                 out= (the CPU cannot be the referee here; a factory call without a device
                 argument may write anywhere)

Every case but the last is differential: ember must raise, warn and keep the layout where the
CPU does with the same out=, so a failure is ember's own. Values are compared with the plain
call's result on the CPU, as test_out does (the CPU's own out= path is not always right: gelu
into a strided out= writes NaN), a cast into another dtype with the CPU's out=. The ember out=
tensors are made on ember, not copied there: a copy would not keep a noncontiguous layout."""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import torch
from torch.testing._internal.common_utils import noncontiguous_like
from torch.utils import _pytree as pytree

import torch_ember

from . import check

RESIZE_WARNING = "An output with one or more elements"


def _fill(dtype: torch.dtype):
    if dtype.is_floating_point or dtype.is_complex:
        return math.nan
    if dtype == torch.bool:
        return True
    return torch.iinfo(dtype).max


def _wrong_shape(shape) -> list[int]:
    return [2] if not shape else [*shape[:-1], shape[-1] + 1]


def _wrong_dtype(dtype: torch.dtype) -> torch.dtype:
    if dtype.is_floating_point or dtype.is_complex:
        return torch.long
    return torch.float32 if dtype == torch.bool else torch.bool


def _filled(t, device):
    return torch.full(t.shape, _fill(t.dtype), dtype=t.dtype, device=device)


# name -> (make the out= tensor like result tensor `t` on `device`, whether its layout must stay)
CASES = {
    "filled": (_filled, True),
    "noncontiguous": (lambda t, device: noncontiguous_like(_filled(t, device)), True),
    "wrong size": (lambda t, device: torch.full(_wrong_shape(t.shape), _fill(t.dtype), dtype=t.dtype,
                                                device=device), False),
    "empty": (lambda t, device: torch.empty((0,), dtype=t.dtype, device=device), False),
    "wrong dtype": (lambda t, device: torch.zeros(t.shape, dtype=_wrong_dtype(t.dtype), device=device),
                    False),
}


def _outs_like(expected, make, device):
    """The out= argument for a result: one tensor, or a tuple with one per result tensor."""
    if isinstance(expected, torch.Tensor):
        return make(expected, device)
    return tuple(make(t, device) for t in expected)


def _layout(out):
    return [(t.stride(), t.data_ptr()) for t in pytree.tree_leaves(out)]


def _is_out(ret, out) -> bool:
    """The call returned the out= tensors themselves."""
    got, want = pytree.tree_leaves(ret), pytree.tree_leaves(out)
    return len(got) == len(want) and all(a is b for a, b in zip(got, want))


@dataclass
class _Run:
    error: BaseException | None
    returned_out: bool = False
    kept_layout: bool = False
    warned: bool = False


def _attempt(call, out, on_ember: bool) -> _Run:
    before = _layout(out)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            ret = call(out)
            if on_ember:
                torch.ember.synchronize()  # kernel errors are asynchronous
        except Exception as e:
            if on_ember:
                check._sync_quietly()
            return _Run(e)
    return _Run(None, _is_out(ret, out), _layout(out) == before,
                any(RESIZE_WARNING in str(w.message) for w in caught))


def _case_diff(name, keep_layout, cpu: _Run, ember: _Run, reference, e_out, values, warning: bool):
    """What ember did differently with this out=; `values(actual, expected)` compares results,
    `warning` whether the resize warning is part of the contract for this op."""
    if cpu.error is not None:
        return None if ember.error is not None else \
            f"{name} out=: the CPU raised {check.error_text(cpu.error)}; ember did not"
    if ember.error is not None:
        return f"{name} out=: ember raised {check.error_text(ember.error)}"
    if cpu.returned_out and not ember.returned_out:
        return f"{name} out=: the call did not return the out= tensor"
    if keep_layout and cpu.kept_layout and not ember.kept_layout:
        return f"{name} out=: the out= tensor's strides or storage changed"
    if warning and cpu.warned and not ember.warned:
        return f"{name} out=: no warning about resizing a non-empty out= (the CPU warns)"
    diff = values(check.to_cpu(e_out), reference)
    return f"{name} out=: {diff}" if diff else None


def _device_diff(op, sample, call, expected, baseline: _Run) -> str | None:
    """A CPU out= with ember inputs must raise RuntimeError (or what the CPU raises for a
    correct out=, when it refuses the call anyway)."""
    if op.is_factory_function and sample.kwargs.get("device") is None:
        return None
    out = _outs_like(expected, _filled, "cpu")
    run = _attempt(call, out, on_ember=True)
    if run.error is None:
        # 0-dim CPU tensors pass as wrapped scalars among the inputs; not as outputs
        zero_dim = "0-dim " if all(t.dim() == 0 for t in pytree.tree_leaves(out)) else ""
        return (f"wrong device out=: a {zero_dim}CPU out= with ember inputs was accepted "
                "(CUDA raises RuntimeError)")
    if isinstance(run.error, RuntimeError) or (baseline.error is not None
                                               and type(run.error) is type(baseline.error)):
        return None
    return f"wrong device out=: raised {check.error_text(run.error)}, not RuntimeError"


def check_out(op, sample, overrides, shape_only: bool, warning: bool = True) -> check.Outcome:
    """The cases above for one sample; `warning` is off where PyTorch's OpInfo waives
    test_out_warning (opdb.waived): the CPU itself resizes without warning there."""
    if check.non_strided((sample.input, sample.args, sample.kwargs)):
        return check.Outcome("skip", message="sparse layout")
    e_in, e_args, e_kwargs = check.move_sample(op, sample)
    if not check._on_ember((e_in, e_args, e_kwargs)):
        return check.Outcome("skip", message="no tensor or device to move")
    expected, cpu_err, random = check._cpu_call(lambda: op(sample.input, *sample.args, **sample.kwargs))
    if cpu_err is not None:
        return check.Outcome("skip", message="the CPU raises without out=")
    if not (isinstance(expected, torch.Tensor) or (
            isinstance(expected, (tuple, list)) and expected
            and all(isinstance(t, torch.Tensor) for t in expected))):
        return check.Outcome("skip", message="output is not a tensor or a tuple of tensors")
    if check.non_strided(expected):
        return check.Outcome("skip", message="sparse layout")
    shape_only = shape_only or random

    def cpu_call(out):
        return op(sample.input, *sample.args, out=out, **sample.kwargs)

    def ember_call(out):
        return op(e_in, *e_args, out=out, **e_kwargs)

    def values(actual, reference):
        return check.compare_outputs(op, sample, actual, reference, overrides, shape_only)

    # The ember out= tensors are made before counting starts: making them is not the op.
    e_outs = {name: _outs_like(expected, make, check.DEVICE) for name, (make, _) in CASES.items()}
    torch_ember.reset_fallback_stats()
    diffs, baseline = [], None
    for name, (make, keep_layout) in CASES.items():
        cpu_out = _outs_like(expected, make, "cpu")
        cpu_run = _attempt(cpu_call, cpu_out, on_ember=False)
        e_run = _attempt(ember_call, e_outs[name], on_ember=True)
        baseline = baseline or cpu_run
        # Values against the plain call's result, as test_out does (the CPU's own out= path has
        # bugs: gelu into a strided out= writes NaN); a cast into another dtype against the CPU's.
        reference = cpu_out if name == "wrong dtype" else expected
        diff = _case_diff(name, keep_layout, cpu_run, e_run, reference, e_outs[name], values, warning)
        if diff:
            diffs.append(diff)
    diff = _device_diff(op, sample, ember_call, expected, baseline)
    if diff:
        diffs.append(diff)
    fallback = check.fallback_ops()
    if not diffs:
        return check.Outcome("pass", fallback)
    more = f" (and {len(diffs) - 1} more cases)" if len(diffs) > 1 else ""
    return check.Outcome("fail", fallback, check.truncate(diffs[0] + more))
