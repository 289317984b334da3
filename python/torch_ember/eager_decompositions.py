"""Eager kernels from PyTorch's own decompositions.

Many ops have no ember kernel but a decomposition in `torch._decomp` into ops that do: the
activations hardswish, hardsigmoid, leaky_relu, mish, elu, glu, the shrinks and threshold;
reflection and replication padding; the smooth-L1, Huber, BCE and margin losses; logaddexp,
xlogy, logit, sinc and more. Compiled graphs already run these ops as their decompositions.
This module does the same in eager mode. Each op below gets a PrivateUse1 kernel that calls
its decomposition, and every piece of that is a native ember op. Before, eager mode copied
the inputs to the CPU and the results back, and eager and compiled numerics could drift apart.

A call that the decomposition does not serve the way the CPU kernel would goes through the
ordinary visible CPU fallback (`_C._cpu_fallback`: counted, warned, refused under
EMBER_FALLBACK=error), so results and errors stay exactly the CPU's. That means a complex
tensor, a non-float first input (CPU kernels refuse or compute integers their own way), a
tensor on another device, the op calling itself again, or a decomposition that declines the
arguments (returns NotImplemented). A decomposition that disagrees with the CPU kernel is not
listed (compile/decompositions.py DISAGREEING).

Autograd is unaffected: these kernels sit below the Autograd key, so each op keeps its own
derivative formula (whose backward ops are often in the list too). The kernels are registered
at `import torch_ember` with a small stub each. `torch._decomp` is looked up only when an op
first runs.
"""
from __future__ import annotations

import threading

import torch

# Overloads that fall back in eager mode on ember and have a decomposition in torch._decomp.
# Ops that only other backends call (cudnn_*, miopen_*, the CPU flash-attention entry) are
# left out. `tests/python/test_eager_decompositions.py` checks each one against the CPU.
OPS = (
    "_prelu_kernel", "_prelu_kernel_backward",
    "_log_softmax_backward_data.out", "_softmax_backward_data.out",
    "all.all_out", "all.out", "aminmax", "aminmax.out",
    "baddbmm.dtype", "baddbmm.dtype_out",
    "binary_cross_entropy", "binary_cross_entropy.out", "binary_cross_entropy_backward",
    "binary_cross_entropy_backward.grad_input",
    "channel_shuffle", "count_nonzero.dim_IntList", "dot", "vdot",
    "elu_", "elu_backward", "elu_backward.grad_input",
    "frac", "frac.out", "frac_",
    "glu", "glu.out", "glu_backward", "glu_backward.grad_input",
    "hardshrink", "hardshrink.out",
    "hardsigmoid", "hardsigmoid.out", "hardsigmoid_", "hardsigmoid_backward", "hardsigmoid_backward.grad_input",
    "hardswish", "hardswish.out", "hardswish_", "hardswish_backward",
    "heaviside", "heaviside.out", "heaviside_",
    "huber_loss", "huber_loss.out", "huber_loss_backward.out",
    "index_fill_.int_Scalar", "index_fill_.int_Tensor",
    "leaky_relu_", "leaky_relu_backward", "leaky_relu_backward.grad_input",
    "linalg_cross", "linalg_cross.out",
    "log_sigmoid_backward.grad_input", "log_sigmoid_forward.output",
    "logaddexp", "logaddexp.out", "logaddexp2", "logaddexp2.out",
    "logit", "logit.out", "logit_", "logit_backward",
    "max_unpool2d", "max_unpool2d.out", "max_unpool3d", "max_unpool3d.out",
    "mish", "mish.out", "mish_",
    "multi_margin_loss", "multi_margin_loss.out",
    "nansum", "nansum.out",
    "nll_loss2d_backward.grad_input", "nll_loss2d_forward.output",
    "nll_loss_backward.grad_input", "nll_loss_forward.output",
    "reflection_pad1d", "reflection_pad1d.out", "reflection_pad1d_backward", "reflection_pad1d_backward.grad_input",
    "reflection_pad2d", "reflection_pad2d.out", "reflection_pad2d_backward", "reflection_pad2d_backward.grad_input",
    "reflection_pad3d", "reflection_pad3d.out", "reflection_pad3d_backward", "reflection_pad3d_backward.grad_input",
    "renorm", "renorm.out", "renorm_",
    "replication_pad1d", "replication_pad1d.out", "replication_pad2d", "replication_pad2d.out",
    "replication_pad3d", "replication_pad3d.out",
    "rsub.Tensor",
    "sinc", "sinc.out", "sinc_",
    "smooth_l1_loss", "smooth_l1_loss.out", "smooth_l1_loss_backward.grad_input",
    "softshrink", "softshrink.out",
    "special_entr", "special_entr.out", "special_log_ndtr", "special_log_ndtr.out",
    "special_xlog1py", "special_xlog1py.out",
    "std.correction_out", "take", "take.out",
    "threshold", "threshold.out", "threshold_",
    "trace", "unfold_backward",
    "xlogy.OutTensor", "xlogy.Tensor", "xlogy_.Tensor",
    "elu", "elu.out", "leaky_relu", "leaky_relu.out",
    "adaptive_max_pool2d.out", "adaptive_max_pool3d", "adaptive_max_pool3d.out",
    "max_pool2d_with_indices.out", "max_pool2d_with_indices_backward.grad_input",
    "max_pool3d_with_indices", "max_pool3d_with_indices.out",
    "addmm.dtype", "addmm.dtype_out", "addbmm_",
    "_addmm_activation", "_addmm_activation.out", "any.all_out", "any.out",
    "copysign.Tensor", "copysign.out", "copysign_.Tensor",
    "fmax", "fmax.out", "fmin", "fmin.out",
    "isin.Scalar_Tensor", "isin.Scalar_Tensor_out", "isin.Tensor_Scalar", "isin.Tensor_Scalar_out",
    "isin.Tensor_Tensor", "isin.Tensor_Tensor_out",
    "remainder.Scalar_Tensor", "round.decimals", "round.decimals_out", "round_.decimals",
    "signbit", "signbit.out", "var.correction_out", "nan_to_num.out",
    "upsample_bicubic2d", "upsample_bicubic2d.out",
    "bucketize.Tensor", "bucketize.Tensor_out",
    "linspace.out", "logspace.out", "addmv", "addmv.out", "mv", "mv.out", "exponential_",
    # Ember's own decompositions (OWN, below): ops torch._decomp has none for.
    "masked_scatter_", "bernoulli_.Tensor", "searchsorted.Tensor", "searchsorted.Tensor_out", "multinomial",
    "_cdist_forward", "_cdist_backward", "_transformer_encoder_layer_fwd",
    "equal", "_unique2", "_unique", "unique_consecutive", "unique_dim", "nonzero_static", "repeat_interleave.Tensor",
    "normal.Tensor_Tensor", "normal.Tensor_float",
    "normal.float_Tensor", "max_pool3d_with_indices_backward", "max_pool3d_with_indices_backward.grad_input",
    "adaptive_max_pool3d_backward", "adaptive_max_pool3d_backward.grad_input", "put_", "median", "nanmedian",
    "median.dim", "median.dim_values", "nanmedian.dim", "nanmedian.dim_values", "kthvalue", "kthvalue.values",
    "mode", "mode.values", "frexp.Tensor", "frexp.Tensor_out", "ldexp.Tensor", "ldexp.out", "ldexp_",
    "replication_pad1d_backward", "replication_pad1d_backward.grad_input",
    "replication_pad2d_backward", "replication_pad2d_backward.grad_input",
    "replication_pad3d_backward", "replication_pad3d_backward.grad_input",
    "softshrink_backward", "softshrink_backward.grad_input",
    "hardshrink_backward", "hardshrink_backward.grad_input",
    "cauchy_", "log_normal_", "geometric_", "addbmm", "addbmm.out",
    "upsample_bicubic2d_backward", "upsample_bicubic2d_backward.grad_input",
    "fake_quantize_per_tensor_affine_cachemask", "_fake_quantize_per_tensor_affine_cachemask_tensor_qparams",
    "fake_quantize_per_channel_affine_cachemask", "_fake_quantize_learnable_per_tensor_affine",
    "_fake_quantize_learnable_per_tensor_affine_backward", "_fake_quantize_learnable_per_channel_affine",
    "_fake_quantize_learnable_per_channel_affine_backward", "_fused_moving_avg_obs_fq_helper", "is_set_to",
    "linalg_matrix_exp",
    "tril_indices", "triu_indices", "rrelu_with_noise", "rrelu_with_noise_", "rrelu_with_noise_backward",
    "_jagged_to_padded_dense_forward", "_padded_dense_to_jagged_forward", "_int_mm", "_int_mm.out",
    "_scaled_mm", "_scaled_mm.out", "segment_reduce", "_segment_reduce_backward",
    "glu_jvp", "glu_backward_jvp", "_fused_sgd_", "_fused_sgd_.tensor_lr", "_fused_adagrad_",
    "_fused_adagrad_.tensor_lr",
    *(f"_upsample_{mode}2d_aa{suffix}" for mode in ("bilinear", "bicubic")
      for suffix in ("", ".out", "_backward", "_backward.grad_input")),
)

# Ops whose first tensor argument may be an integer or bool tensor and still be served by the
# decomposition exactly as the CPU does (indices, counts, masks).
_ANY_DTYPE = frozenset({"count_nonzero.dim_IntList", "all.all_out", "all.out", "any.all_out", "any.out", "take",
                        "take.out", "index_fill_.int_Scalar",
                        "index_fill_.int_Tensor", "channel_shuffle", "trace", "unfold_backward",
                        "isin.Scalar_Tensor", "isin.Scalar_Tensor_out", "isin.Tensor_Scalar",
                        "isin.Tensor_Scalar_out", "isin.Tensor_Tensor", "isin.Tensor_Tensor_out", "signbit",
                        "signbit.out", "equal", "_unique2", "_unique", "unique_consecutive", "unique_dim", "nonzero_static",
                        "repeat_interleave.Tensor", "bucketize.Tensor",
                        "bucketize.Tensor_out", "searchsorted.Tensor", "searchsorted.Tensor_out", "put_", "median",
                        "nanmedian", "median.dim", "median.dim_values", "nanmedian.dim", "nanmedian.dim_values",
                        "kthvalue", "kthvalue.values", "mode", "mode.values", "geometric_", "ldexp.Tensor", "ldexp.out", "ldexp_", "is_set_to",
                        # integer and bool inputs promote or keep their dtype exactly as on CPU
                        "copysign.Tensor", "copysign.out", "copysign_.Tensor", "fmax", "fmax.out", "fmin",
                        "fmin.out", "heaviside", "heaviside.out", "heaviside_", "nan_to_num.out", "sinc",
                        "sinc.out", "xlogy.Tensor", "xlogy.OutTensor", "logit", "logit.out", "rsub.Tensor",
                        "special_xlog1py", "special_xlog1py.out", "special_entr", "special_entr.out",
                        "special_log_ndtr", "special_log_ndtr.out", "nansum", "nansum.out", "aminmax",
                        "aminmax.out", "masked_scatter_",
                        # float8 operands (the composition checks the dtypes itself)
                        "_scaled_mm", "_scaled_mm.out",
                        # a nested tensor's packed values, of any dtype, and its offsets
                        "_jagged_to_padded_dense_forward", "_padded_dense_to_jagged_forward",
                        "_int_mm", "_int_mm.out"})

# Ops served for integer inputs but not bool ones, which their CPU kernels refuse (the
# decomposition would compute them). linspace/logspace are not here: with fractional endpoints
# the CPU's integer steps differ from the decomposition's.
_INTEGERS_NOT_BOOL = frozenset({"addmv", "addmv.out", "mv", "mv.out", "dot", "vdot", "threshold",
                                "threshold.out", "linalg_cross", "linalg_cross.out", "remainder.Scalar_Tensor"})

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_INTEGERS = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


# Ember's own compositions (compositions.py), for ops torch._decomp leaves out.
from ._untraced import untraced_function  # noqa: E402
from .compositions import EAGER_ONLY, OWN, REPLACING  # noqa: E402

_active = threading.local()
_lib = None


def _overload(qualified: str):
    base, _, overload = qualified.partition(".")
    return getattr(getattr(torch.ops.aten, base), overload or "default")


def _tensors(x, out):
    if isinstance(x, torch.Tensor):
        out.append(x)
    elif isinstance(x, (list, tuple)):
        for y in x:
            _tensors(y, out)
    return out


# In-place ops whose CPU kernel refuses a written-to tensor with overlapping elements (expanded)
# and sources that share its memory: the decomposition would write through the overlap.
_NO_OVERLAP = frozenset({"put_"})


def _dense(t) -> bool:
    """Non-overlapping and dense: some permutation of t's dims is contiguous (the case in which the
    CPU decides overlap exactly; others are too hard to tell and allowed)."""
    expect = 1
    for stride, size in sorted((s, n) for n, s in zip(t.shape, t.stride()) if n != 1):
        if stride != expect:
            return False
        expect *= size
    return True


def _byte_span(t):
    """[first, last + 1) of the bytes t addresses."""
    lo = t.untyped_storage().data_ptr() + t.storage_offset() * t.element_size()
    return lo, lo + (sum((n - 1) * s for n, s in zip(t.shape, t.stride())) + 1) * t.element_size()


def _check_overlap(args) -> None:
    self, others = args[0], _tensors(list(args[1:]), [])
    if torch._debug_has_internal_overlap(self) == 1:
        raise RuntimeError("unsupported operation: more than one element of the written-to tensor refers to a "
                           "single memory location. Please clone() the tensor before performing the operation.")
    lo, hi = _byte_span(self)
    for t in others:
        if t.numel() == 0 or self.numel() == 0 or t.untyped_storage().data_ptr() != self.untyped_storage().data_ptr():
            continue
        t_lo, t_hi = _byte_span(t)
        if t_lo < hi and lo < t_hi and _dense(self) and _dense(t):
            raise RuntimeError("unsupported operation: some elements of the input tensor and the written-to tensor "
                               "refer to a single memory location. Please clone() the tensor before performing the "
                               "operation.")


# Ops whose decomposition skips the argument checks of the CPU kernel, where PyTorch's meta kernel
# has them (with the CPU's messages): reflect padding as wide as the input would wrap around,
# and negative replicate padding would crop to nothing, where the CPU raises; 3-d max pooling
# of an input too small for its window.
_META_CHECKED = frozenset(f"{kind}_pad{n}d{suffix}" for kind in ("reflection", "replication")
                          for n in (1, 2, 3) for suffix in ("", ".out")) | frozenset(
    # pooling's shape checks (an empty or too small input), which the decompositions reach as
    # reshape or unpacking errors
    f"{op}{suffix}" for op in ("max_pool3d_with_indices", "adaptive_max_pool3d") for suffix in ("", ".out"))


def _check_on_meta(op, args, kwargs) -> None:
    def meta(v):
        if isinstance(v, torch.Tensor):
            return torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device="meta")
        return v

    op(*[meta(a) for a in args], **{k: meta(v) for k, v in kwargs.items()})


def _check_smooth_l1(args, kwargs) -> None:
    beta = args[3] if len(args) > 3 else kwargs.get("beta", 1.0)
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")


def _check_multi_margin(args, kwargs) -> None:
    x, target = args[0], args[1]
    frames = 1 if x.dim() <= 1 else x.shape[0]
    if target.dim() > 1 or target.numel() != frames:
        raise RuntimeError("multi_margin_loss: target tensor should be 1-D with size equal to the number of input "
                           f"samples (batch size). Expected target size [{frames}], but got {list(target.shape)}. "
                           f"Input has shape {list(x.shape)}.")


# Checks the CPU kernel makes that neither the decomposition nor the meta kernel does (or with
# the CPU's own wording).
_ARGUMENT_CHECKS = {"smooth_l1_loss": _check_smooth_l1, "smooth_l1_loss.out": _check_smooth_l1,
                    "multi_margin_loss": _check_multi_margin, "multi_margin_loss.out": _check_multi_margin}


# Dtypes the CPU kernel refuses (its "not implemented for" error) but the decomposition would
# compute.
_HALVES = (torch.float16, torch.bfloat16)
_CPU_REFUSES = {
    "_cdist_forward": _HALVES, "multi_margin_loss": _HALVES, "multi_margin_loss.out": _HALVES,
    "special_log_ndtr": _HALVES, "special_log_ndtr.out": _HALVES, "trace": (torch.bool,),
    **{n: (torch.bool,) for n in ("isin.Scalar_Tensor", "isin.Scalar_Tensor_out", "isin.Tensor_Scalar",
                                  "isin.Tensor_Scalar_out", "isin.Tensor_Tensor", "isin.Tensor_Tensor_out")},
}

# Ops whose CPU kernel refuses operands of different dtypes (the reference form would promote).
_SAME_DTYPES = frozenset({"heaviside", "heaviside.out", "heaviside_"})


# Factories with no tensor argument: the decomposition serves the index dtypes the CPU accepts.
_FACTORIES = frozenset({"tril_indices", "triu_indices"})


# Ops whose decomposition serves complex64/complex128 operands: it calls only ops that ember
# composes for complex values (complex_parts.h).
_COMPLEX_OK = frozenset({"rsub.Tensor", "dot", "vdot"})


def _decomposable(name: str, args, kwargs) -> bool:
    if name in _FACTORIES:
        return kwargs.get("dtype") in (None, torch.int32, torch.int64) and kwargs.get("layout") in (None, torch.strided)
    tensors = _tensors(list(args) + list(kwargs.values()), [])
    if not tensors or any(t.device.type != "ember" for t in tensors):
        return False
    if any(t.is_complex() for t in tensors):
        return name in _COMPLEX_OK and all(t.dtype in (torch.complex64, torch.complex128, torch.float32, torch.float64)
                                           for t in tensors)
    if name in _SAME_DTYPES and len({t.dtype for t in tensors}) > 1:
        return False  # the CPU's error
    if any(t.dtype in _CPU_REFUSES.get(name, ()) for t in tensors):
        return False  # the CPU's error
    first = tensors[0].dtype
    return (name in _ANY_DTYPE or first in _FLOATS
            or (name in _INTEGERS_NOT_BOOL and first in _INTEGERS))


# Ops PyTorch does not tag pointwise whose value operand may be a 0-dim CPU tensor, as on CUDA.
_SCALAR_VALUE = frozenset({"index_fill", "index_fill_", "masked_fill", "masked_fill_", "rsub"})


def _pointwise(op, base: str) -> bool:
    """Tagged pointwise, or the in-place form of an op that is (PyTorch tags some in-place
    overloads, copysign_ and heaviside_ among them, and not others)."""
    if torch.Tag.pointwise in op.tags:
        return True
    packet = getattr(torch.ops.aten, base[:-1], None) if base.endswith("_") else None
    return packet is not None and any(torch.Tag.pointwise in getattr(packet, o).tags for o in packet.overloads())


def _device_scalars(args, kwargs, out_names):
    """0-dim CPU tensors among an ember op's operands moved to its device: pointwise ops accept
    them beside device tensors (as CUDA's do, reading the value), and promote them as 0-dim
    tensors wherever they live. Without this the op would run on the CPU fallback. An out=
    tensor stays where it is: a CPU one is an error, as on the CPU and CUDA."""
    device = next((t.device for t in _tensors(list(args) + list(kwargs.values()), []) if t.device.type == "ember"),
                  None)
    if device is None:
        return args, kwargs

    def move(v):
        if not (isinstance(v, torch.Tensor) and v.device.type == "cpu" and v.dim() == 0):
            return v
        if v.requires_grad:
            return v.to(device)
        return torch.full((), v.item(), dtype=v.dtype, device=device)  # no wait for the device

    return [move(a) for a in args], {k: v if k in out_names else move(v) for k, v in kwargs.items()}


def _wrapped_scalars(op, args, kwargs):
    """The arguments with Python numbers where the schema has a Tensor turned back into 0-dim
    tensors: the dispatcher hands a Python kernel a wrapped scalar (xlog1py(x, 1.5)) as a
    number, and the boxed fallback wants the schema's types. A 0-dim tensor takes part in type
    promotion as the wrapped number did."""
    schema = op._schema.arguments

    def fix(value, arg):
        return torch.tensor(value) if isinstance(value, (bool, int, float)) and str(arg.type) == "Tensor" else value

    by_name = {a.name: a for a in schema}
    return ([fix(v, a) for v, a in zip(args, schema)],
            {k: fix(v, by_name[k]) if k in by_name else v for k, v in kwargs.items()})


def _cpu(op, base: str, overload: str, args, kwargs):
    from . import _C

    args, kwargs = _wrapped_scalars(op, args, kwargs)
    return _C._cpu_fallback("aten::" + base, overload, *args, **kwargs)


def _kernel(name: str):
    op = _overload(name)
    base, _, overload = name.partition(".")
    decomposition = None
    # The out= argument's name: "out", or "grad_input" for the backward ops' out forms.
    out_name = next((a.name for a in op._schema.arguments if a.is_out), "out")
    # Every out= argument: a functional attempt must leave out all of them (aminmax's min= and
    # max=), since PyTorch's out wrapper refuses some set and some not.
    out_names = {a.name for a in op._schema.arguments if a.is_out} | {out_name}
    scalar_operands = _pointwise(op, base) or base in _SCALAR_VALUE

    def kernel(*args, **kwargs):
        nonlocal decomposition
        running = getattr(_active, "ops", None)
        if running is None:
            running = _active.ops = set()
        if scalar_operands:
            args, kwargs = _device_scalars(args, kwargs, out_names)
        if name in running or not _decomposable(name, args, kwargs):
            return _cpu(op, base, overload, args, kwargs)
        if name in _NO_OVERLAP:
            _check_overlap(args)
        if name in _META_CHECKED:
            _check_on_meta(op, args, kwargs)
        if name in _ARGUMENT_CHECKS:
            _ARGUMENT_CHECKS[name](args, kwargs)
        if decomposition is None:
            from torch._decomp import decomposition_table
            decomposition = OWN.get(name) or decomposition_table[op]
        if not _broadcast_fits(base, args):
            return _cpu(op, base, overload, args, kwargs)
        out = kwargs.get(out_name)
        # An out= dtype that differs from the result's is the CPU kernel's question (the
        # decomposition would cast where the kernel may refuse): the result is computed without
        # out= first, then compared. A factory's out= sets the dtype itself: nothing to compare.
        # Computing first also keeps out= the caller's tensor: a decomposition that computes
        # half-precision inputs in float (pw_cast_for_opmath) casts its out= argument too, and
        # would write the result into that float copy.
        functional = isinstance(out, torch.Tensor) and bool(_tensors(list(args), []))
        running.add(name)
        try:
            result = None
            if functional:
                plain = _functional_decomposition(base)
                try:
                    if plain is not None:
                        result = plain(*args, **{k: v for k, v in kwargs.items() if k not in out_names})
                    else:
                        result = decomposition(*args, **{**kwargs, **{k: None for k in out_names}})
                except TypeError:  # no functional form: the decomposition's own out= checks apply
                    pass
                outs = [kwargs.get(k) for k in sorted(out_names) if k in kwargs]
                if (isinstance(result, (tuple, list)) and len(outs) == len(result) > 1
                        and all(isinstance(o, torch.Tensor) for o in outs)):
                    # several out= tensors (aminmax's min= and max=), in schema order
                    order = [a.name for a in op._schema.arguments if a.is_out]
                    outs = [kwargs[k] for k in order]
                    if any(o.dtype != r.dtype for o, r in zip(outs, result)):
                        return _cpu(op, base, overload, args, kwargs)  # the CPU's dtype check
                    from torch._prims_common.wrappers import _maybe_resize_out

                    for o, r in zip(outs, result):
                        _maybe_resize_out(o, r.shape)
                        o.copy_(r)
                    return tuple(outs)
                functional = isinstance(result, torch.Tensor)
            if not functional and result is not NotImplemented:
                result = decomposition(*args, **kwargs)
        finally:
            running.discard(name)
        if result is NotImplemented:  # the decomposition declines these arguments
            return _cpu(op, base, overload, args, kwargs)
        if functional:
            if result.dtype != out.dtype:
                return _cpu(op, base, overload, args, kwargs)
            from torch._prims_common.wrappers import _maybe_resize_out

            _maybe_resize_out(out, result.shape)
            return out.copy_(result)
        return result

    return kernel


def _functional_decomposition(base: str):
    """The decomposition of an out= op's functional overload (huber_loss_backward for
    huber_loss_backward.out), when there is one: some out= decompositions cannot run without
    their out tensor."""
    from torch._decomp import decomposition_table

    if base in REPLACING:
        return OWN[base]
    packet = getattr(torch.ops.aten, base, None)
    default = getattr(packet, "default", None) if packet is not None else None
    return decomposition_table.get(default) if default is not None else None


# In-place ops whose tensor operands broadcast against self.
_BROADCASTING_IN_PLACE = frozenset({"heaviside_", "xlogy_", "copysign_", "ldexp_"})


def _broadcast_fits(base: str, args) -> bool:
    """False for an in-place op whose operands broadcast to more than self's shape: the
    decomposition would resize self, where the CPU kernel raises (so the CPU path decides)."""
    if base not in _BROADCASTING_IN_PLACE:
        return True
    try:
        return torch.broadcast_shapes(*[t.shape for t in _tensors(list(args), [])]) == args[0].shape
    except RuntimeError:
        return False


def install() -> None:
    """Registers the PrivateUse1 kernels (once). An op that already has an ember kernel keeps it."""
    global _lib
    from . import _C

    if _lib is not None or not hasattr(_C, "_cpu_fallback"):  # an extension built before this module
        return
    _lib = torch.library.Library("aten", "IMPL")
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    for name in OPS:
        qualified = "aten::" + name
        if not has(qualified, "PrivateUse1"):
            _lib.impl(name, untraced_function(_kernel(name)), "PrivateUse1")
            registered.add(name if "." in name else name + ".default")


# The overloads served here ("hardswish.default", "glu.out"), for the op table.
registered: set = set()
