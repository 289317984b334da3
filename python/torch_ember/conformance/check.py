"""One OpInfo sample, run on the CPU and on ember, compared: the per-sample half of the harness."""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field

import torch
from torch.testing._comparison import default_tolerances
from torch.testing._utils import freeze_rng_state
from torch.utils import _pytree as pytree

import torch_ember

DEVICE = "ember"
MESSAGE_LIMIT = 400
# set_compiled(True): the ember side of every check runs through torch.compile (compiled.py).
_COMPILED = False


def set_compiled(on: bool) -> None:
    global _COMPILED
    _COMPILED = on


def _ember_op(op):
    if not _COMPILED:
        return op
    from . import compiled
    return compiled.wrap(op)

# Per-dtype (rtol, atol) where assert_close's own defaults are too tight for a second backend,
# whose kernels accumulate in another order: composite ops (attention, say) drift by ~1e-5
# relative in float32, and bf16/fp16 intermediates round differently. Still tight enough that
# an error of a few float32 ulps beyond that shows.
_LOOSE = {torch.float32: (1e-5, 1e-5), torch.bfloat16: (1.6e-2, 1e-2),
          torch.float16: (1.6e-2, 1e-2)}

# The OpInfo tests whose tolerance overrides describe "same op, another device or layout";
# those are the conventions that apply to ember against the CPU.
_TOLERANCE_TESTS = frozenset({"test_compare_cpu", "test_noncontiguous_samples",
                              "test_variant_consistency_eager"})
# Floor (rtol, atol) for float32 gradients, which accumulate the rounding of several kernels.
GRAD_TOL = (1e-4, 1e-4)

# Positional arguments PyTorch requires on the CPU whatever the device of the other tensors
# (tensor_split's tensor of split indices); they are not moved to ember.
CPU_ARGS = {"tensor_split": (0,)}


@dataclass
class Outcome:
    """What one sample did: 'pass', 'fail' or 'skip', and the ops that fell back while ember ran."""
    status: str
    fallback: list[str] = field(default_factory=list)
    message: str = ""


def truncate(text: str, limit: int = MESSAGE_LIMIT) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def error_text(e: BaseException) -> str:
    return truncate(f"{type(e).__name__}: {e}")


def tolerances(op, dtype: torch.dtype, tests=_TOLERANCE_TESTS) -> dict[torch.dtype, tuple[float, float]]:
    """{dtype: (rtol, atol)}: the largest tolerance override the OpInfo (or ModuleInfo) declares
    for `dtype` in one of `tests`, the cross-device ones by default (empty if none); comparisons
    take the larger of it and the defaults."""
    from torch.testing._internal.common_device_type import toleranceOverride

    found = {}
    for info in op.decorators or ():
        if getattr(info, "test_name", None) not in tests:
            continue
        if info.dtypes is not None and dtype not in info.dtypes:
            continue
        for dec in info.decorators:
            prec = dec.d.get(dtype) if isinstance(dec, toleranceOverride) else None
            if prec is not None:
                rtol, atol = found.get(dtype, (0.0, 0.0))
                found[dtype] = (max(rtol, prec.rtol), max(atol, prec.atol))
    return found


def _tol_for(out_dtype: torch.dtype, overrides) -> tuple[float, float] | None:
    """None means exact (integers, bools); floats get defaults merged with the overrides."""
    if not (out_dtype.is_floating_point or out_dtype.is_complex):
        return None
    rtol, atol = _LOOSE.get(out_dtype) or default_tolerances(out_dtype)
    o_rtol, o_atol = overrides.get(out_dtype, (0.0, 0.0))
    return max(rtol, o_rtol), max(atol, o_atol)


def _compare_leaf(a, e, overrides, shape_only: bool) -> None:
    if isinstance(e, torch.Tensor) or isinstance(a, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(e, torch.Tensor)):
            raise AssertionError(f"type {type(a).__name__} != expected {type(e).__name__}")
        if a.dtype != e.dtype or a.shape != e.shape:
            raise AssertionError(f"got {a.dtype}{list(a.shape)}, expected {e.dtype}{list(e.shape)}")
        if shape_only:
            return
        tol = _tol_for(e.dtype, overrides)
        rtol, atol = tol if tol is not None else (0.0, 0.0)
        torch.testing.assert_close(a, e, rtol=rtol, atol=atol, equal_nan=True, check_dtype=True,
                                   check_stride=False, check_device=False, check_layout=False)
    elif isinstance(e, float) and isinstance(a, float):
        if not (shape_only or math.isclose(a, e, rel_tol=1e-5, abs_tol=1e-5)
                or (math.isnan(a) and math.isnan(e))):
            raise AssertionError(f"scalar {a!r} != expected {e!r}")
    elif not shape_only and a != e:
        raise AssertionError(f"value {a!r} != expected {e!r}")


def compare(actual, expected, overrides, shape_only: bool = False) -> str | None:
    """None if `actual` (already on the CPU) matches `expected`, else why not. Leaves are compared
    one by one so each gets the tolerance of its own dtype (ops change dtypes: int -> float)."""
    a_leaves, a_spec = pytree.tree_flatten(actual)
    e_leaves, e_spec = pytree.tree_flatten(expected)
    if len(a_leaves) != len(e_leaves):
        return f"output structure differs: {a_spec} vs expected {e_spec}"
    for i, (a, e) in enumerate(zip(a_leaves, e_leaves)):
        try:
            _compare_leaf(a, e, overrides, shape_only)
        except AssertionError as err:
            where = f"output[{i}]: " if len(e_leaves) > 1 else ""
            return truncate(where + str(err))
    return None


def _to_device(x):
    # Factory ops carry device="cpu" in their kwargs; point those at ember too.
    if isinstance(x, torch.device) and x.type == "cpu":
        return torch.device(DEVICE)
    if isinstance(x, str) and x == "cpu":
        return DEVICE
    return x


def to_ember(tree, keep_grad: bool = False):
    """Copy every tensor in `tree` to ember (as fresh leaves when `keep_grad`); keep the rest.
    A tensor that appears twice is copied once: samples pass one tensor as two arguments
    (KLDivLoss's input and target), and its gradient is the sum over both uses."""
    moved: dict[int, torch.Tensor] = {}

    def move(x):
        if isinstance(x, torch.Tensor):
            if id(x) not in moved:
                moved[id(x)] = (x.detach().to(DEVICE).requires_grad_(x.requires_grad) if keep_grad
                                else x.to(DEVICE))
            return moved[id(x)]
        return _to_device(x)
    return pytree.tree_map(move, tree)


def to_cpu(tree):
    return pytree.tree_map(lambda x: x.cpu() if isinstance(x, torch.Tensor) else x, tree)


def off_device(tree) -> str | None:
    """Why an ember result is not where it should be: a tensor left on another device."""
    for x in pytree.tree_leaves(tree):
        if isinstance(x, torch.Tensor) and x.device.type != DEVICE:
            return f"ember call returned a tensor on {x.device}"
    return None


def non_strided(tree) -> bool:
    return any(isinstance(x, torch.Tensor) and x.layout != torch.strided
               for x in pytree.tree_leaves(tree))


def _sync_quietly():
    # A failed kernel reports at the next synchronize; drain it so the next sample starts clean.
    try:
        torch.ember.synchronize()
    except Exception:
        pass


def fallback_ops() -> list[str]:
    return [r.op for r in torch_ember.fallback_report()]


def move_sample(op, sample, keep_grad: bool = False):
    """(input, args, kwargs) on ember, except the arguments PyTorch wants on the CPU."""
    inp, args, kwargs = to_ember((sample.input, sample.args, sample.kwargs), keep_grad)
    keep = CPU_ARGS.get(op.name, ())
    return inp, tuple(sample.args[i] if i in keep else a for i, a in enumerate(args)), kwargs


@contextlib.contextmanager
def _watch_rng(drew: list):
    """Appends to `drew` when the code inside draws from the CPU's random generator. OpInfos of
    random ops call `wrapper_set_seed`, which seeds with 42 and restores the generator around the
    op (so the output is deterministic per device, yet ember's generator is not the CPU's); it is
    a module global looked up at call time, so a copy that also watches the generator stands in."""
    from torch.testing._internal import common_methods_invocations as cmi

    pinned = cmi.wrapper_set_seed

    def wrapper_set_seed(op, *args, **kwargs):
        with freeze_rng_state():
            torch.manual_seed(42)
            state = torch.get_rng_state()
            out = op(*args, **kwargs)
            if not torch.equal(state, torch.get_rng_state()):
                drew.append(op)
            return out

    cmi.wrapper_set_seed = wrapper_set_seed
    state = torch.get_rng_state()
    try:
        yield
    finally:
        cmi.wrapper_set_seed = pinned
        if not torch.equal(state, torch.get_rng_state()):
            drew.append(None)


def _cpu_call(fn):
    """(result, error, random): `fn` on the CPU, and whether it drew random numbers (a dropout
    argument, say): ember's generator cannot reproduce those, so only shapes are compared."""
    drew: list = []
    try:
        with _watch_rng(drew):
            out = fn()
    except Exception as e:
        return None, e, False
    return out, None, bool(drew)


def _ember_call(fn, fresh: bool = True):
    """Run `fn` on ember under fresh fallback counters: (result on the CPU, error, fallen back).
    `fresh=False` keeps counting from the caller's reset, for checks that make several calls
    per sample and report everything that fell back in any of them."""
    if fresh:
        torch_ember.reset_fallback_stats()
    try:
        out = fn()
        torch.ember.synchronize()  # kernel errors are asynchronous: surface them here
        bad = off_device(out)
        result, err = (None, AssertionError(bad)) if bad else (to_cpu(out), None)
    except Exception as e:
        _sync_quietly()
        result, err = None, e
    return result, err, fallback_ops()


def _verdict(cpu_err, ember_err, fallback, diff_fn) -> Outcome:
    if cpu_err is not None:
        if ember_err is not None:
            return Outcome("pass", fallback)  # both refuse the input: conforming
        return Outcome("fail", fallback, f"cpu raised {error_text(cpu_err)}; ember did not")
    if ember_err is not None:
        from .compiled import CompileFailure, NotCapturable
        if isinstance(ember_err, NotCapturable):
            return Outcome("skip", fallback, str(ember_err))
        if isinstance(ember_err, (CompileFailure, torch_ember.CompileError)):  # backward: compiled at first use
            return Outcome("fail", fallback, "compile error: " + error_text(ember_err))
        return Outcome("fail", fallback, "ember raised " + error_text(ember_err))
    diff = diff_fn()
    return Outcome("fail", fallback, diff) if diff else Outcome("pass", fallback)


def _on_ember(tree) -> bool:
    return any(isinstance(x, torch.Tensor) and x.device.type == DEVICE or
               isinstance(x, (str, torch.device)) and str(x) == DEVICE
               for x in pytree.tree_leaves(tree))


# Ops whose index output orders equal elements as the implementation likes unless stable=True:
# PyTorch's own CPU unstable sort differs from its stable sort. Their indices are checked by
# what they select, not by position.
TIE_ORDER_OPS = {"sort", "argsort", "topk"}
# Reductions to one element per row that also return its index: among equal values (a tie,
# or NaN) which index is reported is the kernel's choice. Value: the position of dim in args.
REDUCED_TIE_OPS = {"kthvalue": 1, "median": 0, "nanmedian": 0, "mode": 0}


def _arg(sample, name, pos, default):
    args = sample.args
    return sample.kwargs.get(name, args[pos] if len(args) > pos and isinstance(args[pos], (int, bool)) else default)


def _same_selection(op, sample, actual, expected) -> bool:
    if op.name not in TIE_ORDER_OPS and op.name not in REDUCED_TIE_OPS or sample.kwargs.get("stable", False):
        return False
    x = sample.input
    if not isinstance(x, torch.Tensor) or x.dim() == 0:
        return False
    reduced = op.name in REDUCED_TIE_OPS
    dim_pos = REDUCED_TIE_OPS[op.name] if reduced else (1 if op.name == "topk" else 0)  # topk(k, dim), sort(dim)
    dim = _arg(sample, "dim", dim_pos, -1)
    if reduced:
        if op.name in ("median", "nanmedian") and len(sample.args) <= dim_pos and "dim" not in sample.kwargs:
            return False  # median of all elements: one index, no tie to speak of
        dim = dim % x.dim()
        keepdim = _arg(sample, "keepdim", dim_pos + 1, False)
        got, want = pytree.tree_leaves(actual), pytree.tree_leaves(expected)
        if len(got) != 2 or len(want) != 2 or compare(got[0], want[0], {}, False) is not None:
            return False
        a, e = got[1].cpu(), want[1]
        if not keepdim:
            a, e = a.unsqueeze(dim), e.unsqueeze(dim)
        return a.shape == e.shape and compare(x.gather(dim, a), x.gather(dim, e), {}, False) is None
    got, want = pytree.tree_leaves(actual), pytree.tree_leaves(expected)
    if len(got) != len(want) or len(got) not in (1, 2):
        return False
    # (values, indices) from sort/topk, indices alone from argsort.
    if len(got) == 2 and compare(got[0], want[0], {}, False) is not None:
        return False
    a, e = got[-1].cpu(), want[-1]
    if e.dtype != torch.int64 or a.shape != e.shape or a.dim() != x.dim():
        return False
    return compare(x.gather(dim, a), x.gather(dim, e), {}, False) is None


# Ops whose output dtypes PyTorch defines per device: the CPU keeps the input's dtype where other
# devices compute in float32 (PyTorch's fake implementation, which compiled graphs are traced
# with, says so for every device but the CPU). Ember follows the accelerator rule; its outputs
# are compared in the CPU's dtype.
DEVICE_DTYPE_OPS = frozenset({"native_layer_norm"})


def _as_cpu_dtypes(actual, expected):
    a_leaves, spec = pytree.tree_flatten(actual)
    e_leaves = pytree.tree_leaves(expected)
    if len(a_leaves) != len(e_leaves):
        return actual
    cast = [a.to(e.dtype) if isinstance(a, torch.Tensor) and isinstance(e, torch.Tensor) else a
            for a, e in zip(a_leaves, e_leaves)]
    return pytree.tree_unflatten(cast, spec)


def compare_outputs(op, sample, actual, expected, overrides, shape_only: bool = False) -> str | None:
    """compare() for an op's outputs, with the op's own conventions: outputs in the CPU's dtype
    for DEVICE_DTYPE_OPS, and sort indices of equal elements checked by what they select."""
    got = _as_cpu_dtypes(actual, expected) if op.name in DEVICE_DTYPE_OPS else actual
    d = compare(got, expected, overrides, shape_only)
    return None if d is not None and _same_selection(op, sample, actual, expected) else d


class SparseOutput(Exception):
    """Raised by a check's call when the op returned a sparse tensor: out of scope, skipped."""


def dense(out):
    if non_strided(out):
        raise SparseOutput()
    return out


def check_forward(op, sample, overrides, shape_only: bool) -> Outcome:
    if non_strided((sample.input, sample.args, sample.kwargs)):
        return Outcome("skip", message="sparse layout")
    # Copied before the CPU call: some ops write into their inputs.
    e_in, e_args, e_kwargs = move_sample(op, sample)
    if not _on_ember((e_in, e_args, e_kwargs)):
        # A factory call without a device (torch.arange(2)) makes CPU tensors either way.
        return Outcome("skip", message="no tensor or device to move")
    raw, cpu_err, random = _cpu_call(lambda: op(sample.input, *sample.args, **sample.kwargs))
    if cpu_err is None and non_strided(raw):  # checked before output_process_fn_grad densifies
        return Outcome("skip", message="sparse layout")
    expected = sample.output_process_fn_grad(raw) if cpu_err is None else None
    ember_op = _ember_op(op)
    actual, ember_err, fallback = _ember_call(
        lambda: sample.output_process_fn_grad(ember_op(e_in, *e_args, **e_kwargs)))

    def diff():
        d = compare_outputs(op, sample, actual, expected, overrides, shape_only or random)
        return None if d is not None and _closer_to_exact(op, sample, actual, expected) else d
    return _verdict(cpu_err, ember_err, fallback, diff)


_HALF = (torch.bfloat16, torch.float16)


def _max_abs(t) -> float:
    return t.abs().max().item() if t.numel() else 0.0


def _mpmath_reference():
    import mpmath

    def real(f):
        def g(x):
            v = f(mpmath.mpf(x))
            return float(v) if isinstance(v, mpmath.mpf) else float("nan")  # complex off the domain
        return g
    return {
        "special.bessel_j0": real(lambda x: mpmath.besselj(0, x)),
        "special.bessel_j1": real(lambda x: mpmath.besselj(1, x)),
        "special.bessel_y0": real(lambda x: mpmath.bessely(0, x) if x > 0 else (-mpmath.inf if x == 0 else 1j)),
        "special.bessel_y1": real(lambda x: mpmath.bessely(1, x) if x > 0 else (-mpmath.inf if x == 0 else 1j)),
        "special.airy_ai": real(mpmath.airyai),
    }


# Unary float64 functions whose CPU kernels are polynomial fits good to about 1e-7 around their
# zeros (x = 5-10), where ember evaluates them to a few ulps: checked against mpmath instead.
_EXACT_FLOAT64 = ("special.bessel_j0", "special.bessel_j1", "special.bessel_y0", "special.bessel_y1",
                  "special.airy_ai")


# float32 ops whose CPU kernels compute their weights in float32 (antialiased resizing: centres,
# supports and tap bounds), ~6e-6 off where ember's weights, built in float64, are ~2e-7 off:
# judged against the float64 result, as half-precision samples are.
_FLOAT32_VIA_FLOAT64 = ("_upsample_bilinear2d_aa",)


def _exact_result(op, sample):
    """The sample's result computed exactly enough to judge a float32/half/float64 difference:
    float64 for half-precision inputs (and the float32 ops above), mpmath for the float64
    functions above; None otherwise."""
    args = (sample.input, sample.args, sample.kwargs)
    leaves = pytree.tree_leaves(args)
    narrow = _HALF + ((torch.float32,) if op.name in _FLOAT32_VIA_FLOAT64 else ())
    if any(isinstance(t, torch.Tensor) and t.dtype in narrow for t in leaves):
        wide = pytree.tree_map(lambda t: t.double() if isinstance(t, torch.Tensor) and t.dtype in narrow else t,
                               args)
        with freeze_rng_state():
            return sample.output_process_fn_grad(op(wide[0], *wide[1], **wide[2]))
    x = sample.input
    if op.name in _EXACT_FLOAT64 and isinstance(x, torch.Tensor) and x.dtype == torch.float64 \
            and not sample.args and not sample.kwargs:
        f = _mpmath_reference()[op.name]
        return torch.tensor([f(v) for v in x.flatten().tolist()], dtype=torch.float64).reshape(x.shape)
    return None


def _closer_to_exact(op, sample, actual, expected) -> bool:
    """ember's outputs are no farther from the exact result (_exact_result) than the CPU's are:
    for half-precision samples ember computes in float32 where the CPU may round every step to
    the half type, and a few float64 special functions are more accurate on ember. That is a
    difference, not an error."""
    try:
        exact = _exact_result(op, sample)
    except Exception:
        return False
    if exact is None:
        return False
    got, want, ref = (pytree.tree_leaves(x) for x in (actual, expected, exact))
    if not len(got) == len(want) == len(ref):
        return False
    for a, e, r in zip(got, want, ref):
        if not all(isinstance(x, torch.Tensor) for x in (a, e, r)) or a.shape != e.shape or r.shape != e.shape:
            return False
        if not e.is_floating_point():
            if not torch.equal(a.cpu(), e):
                return False
            continue
        a, e, r = a.cpu().double(), e.double(), r.double()
        if not torch.equal(a.isnan(), e.isnan()):
            return False
        finite = torch.isfinite(r)
        if not torch.equal(a[~finite].nan_to_num(), e[~finite].nan_to_num()):
            return False
        if _max_abs(a[finite] - r[finite]) > _max_abs(e[finite] - r[finite]):
            return False
    return True


SPARSE = "sparse output"


def _grads(op, sample, leaves, spec, diff_idx, call=None):
    """Gradients of the sum of all floating outputs w.r.t. the floating inputs; None when no
    output depends differentiably on an input, SPARSE for sparse outputs (out of scope).
    `call` runs the op (default: op itself)."""
    inp, args, kwargs = pytree.tree_unflatten(leaves, spec)
    out = op.gradcheck_wrapper(call or op, inp, *args, **kwargs)
    if non_strided(out):
        return SPARSE
    out = sample.output_process_fn_grad(out)
    outs = [o for o in pytree.tree_leaves(out)
            if isinstance(o, torch.Tensor) and o.is_floating_point() and o.requires_grad]
    if not outs:
        return None
    # Ones as output gradients: the gradient of the sum, without running a sum on ember that
    # would be counted (and could fall back) as if the op had run it.
    ones = [torch.ones_like(o) for o in outs]
    return list(torch.autograd.grad(outs, [leaves[i] for i in diff_idx], ones, allow_unused=True))


def _compare_grads(actual, expected, overrides) -> str | None:
    if actual is None or expected is None:
        return None if actual is expected else "one side produced no differentiable output"
    # An unused input (None) and an all-zero gradient mean the same thing.
    pairs = [(torch.zeros_like(e) if a is None else a, torch.zeros_like(a) if e is None else e)
             for a, e in zip(actual, expected) if not (a is None and e is None)]
    return compare([a for a, _ in pairs], [e for _, e in pairs], overrides)


def check_backward(op, sample, overrides) -> Outcome:
    leaves, spec = pytree.tree_flatten((sample.input, sample.args, sample.kwargs))
    if non_strided(leaves):
        return Outcome("skip", message="sparse layout")
    diff_idx = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)
                and x.is_floating_point() and x.requires_grad]
    if not diff_idx:
        return Outcome("skip", message="no differentiable input")
    e_leaves = pytree.tree_leaves(move_sample(op, sample, keep_grad=True))
    expected, cpu_err, random = _cpu_call(lambda: _grads(op, sample, leaves, spec, diff_idx))
    if cpu_err is None and expected is None:
        return Outcome("skip", message="no differentiable output")
    if expected is SPARSE:
        return Outcome("skip", message="sparse layout")
    if random:
        return Outcome("skip", message="random output")
    actual, ember_err, fallback = _ember_call(lambda: _grads(op, sample, e_leaves, spec, diff_idx, _ember_op(op)))
    # A gradient runs through the forward's kernels and the backward's: rounding adds up.
    loose = {d: (max(r, GRAD_TOL[0]), max(a, GRAD_TOL[1])) for d, (r, a) in
             {torch.float32: (0.0, 0.0), **overrides}.items()}
    return _verdict(cpu_err, ember_err, fallback,
                    lambda: _compare_grads(actual, expected, loose))
