"""The _foreach_* ops of the optimizers (torch.compile(opt.step)) lowered tensor by tensor.

A foreach op over N tensors is N independent elementwise ops; each is lowered through the
single-tensor op's own lowering, so the optimizer's whole update becomes fused loops (one
per parameter) instead of N library calls per op. Scalars, scalar lists, 0-d tensors and
tensor lists are paired with the tensors as PyTorch's foreach kernels pair them."""
import torch

from .builder import Val
from .errors import Unsupported

aten = torch.ops.aten


class _Each:
    """What a single-tensor lowering reads of its node, for tensor i of a foreach node."""

    def __init__(self, target, node, i):
        self.target = target
        vals = node.meta.get("val")
        self.meta = {"val": vals[i] if isinstance(vals, (list, tuple)) else vals}


def _nth(x, i):
    return x[i] if isinstance(x, (list, tuple)) else x


def _per_tensor(single):
    def lower(b, node, *args, **kwargs):
        from .lowering import LOWERINGS

        fn = LOWERINGS[single]
        lists = [a for a in args if isinstance(a, (list, tuple))]
        if not lists:
            raise Unsupported("foreach op without a tensor list")
        n = len(lists[0])
        return tuple(fn(b, _Each(single, node, i), *[_nth(a, i) for a in args],
                        **{k: _nth(v, i) for k, v in kwargs.items()}) for i in range(n))
    return lower


def _pointwise(fn):
    """fn(b, i, *args): tensor i's result from the i-th elements of the arguments."""
    def lower(b, node, *args, **kwargs):
        n = len(next(a for a in args if isinstance(a, (list, tuple))))
        return tuple(fn(b, *[_nth(a, i) for a in args], **{k: _nth(v, i) for k, v in kwargs.items()})
                     for i in range(n))
    return lower


def _addc(op):
    def one(b, x, t1, t2, value=1):
        prod = b.binary(op, t1, t2)
        if isinstance(value, Val) or value != 1:
            prod = b.mul(prod, value)
        return b.add(x, prod)
    return one


def _lerp(b, x, end, weight):
    # PyTorch's formula, which is exact at both ends.
    if isinstance(weight, Val):
        raise Unsupported("lerp with a tensor weight")
    diff = b.sub(end, x)
    return b.add(x, b.mul(diff, weight)) if abs(weight) < 0.5 else b.sub(end, b.mul(diff, 1 - weight))


def register(LOWERINGS) -> None:
    binary = {"add": aten.add.Tensor, "sub": aten.sub.Tensor, "mul": aten.mul.Tensor, "div": aten.div.Tensor,
              "maximum": aten.maximum.default, "minimum": aten.minimum.default,
              "clamp_min": aten.clamp_min.default, "clamp_max": aten.clamp_max.default}
    for name, single in binary.items():
        packet = getattr(aten, f"_foreach_{name}")
        for overload in ("Scalar", "List", "ScalarList", "Tensor"):
            op = getattr(packet, overload, None)
            if op is not None:
                LOWERINGS[op] = _per_tensor(single)
    unary = ("sqrt", "neg", "reciprocal", "exp", "abs", "sigmoid", "tanh", "log", "sin", "cos", "rsqrt", "erf")
    for name in unary:
        op = getattr(getattr(aten, f"_foreach_{name}", None), "default", None)
        if op is not None:
            LOWERINGS[op] = _per_tensor(getattr(aten, name).default)
    LOWERINGS[aten._foreach_pow.Scalar] = _per_tensor(aten.pow.Tensor_Scalar)
    LOWERINGS[aten._foreach_pow.List] = _per_tensor(aten.pow.Tensor_Tensor)
    LOWERINGS[aten._foreach_pow.ScalarList] = _per_tensor(aten.pow.Tensor_Scalar)
    LOWERINGS[aten._foreach_pow.ScalarAndTensor] = _per_tensor(aten.pow.Scalar)
    # (not the .Tensor overloads: their scalars arrive as one 1-d tensor, one value per tensor)
    for overload in ("Scalar", "ScalarList"):
        LOWERINGS[getattr(aten._foreach_addcmul, overload)] = _pointwise(_addc("mul"))
        LOWERINGS[getattr(aten._foreach_addcdiv, overload)] = _pointwise(_addc("div"))
    LOWERINGS[aten._foreach_lerp.Scalar] = _pointwise(_lerp)
    LOWERINGS[aten._foreach_copy.default] = _pointwise(
        lambda b, dst, src, non_blocking=False: b.expand(b.cast(src, b.dtype(dst)), b.sizes(dst)))
