"""Core ATen -> Ember IR: one entry per ATen overload that the compiler can express.

Each lowering is `fn(b, node, *args, **kwargs)`: `b` is the Builder, `node` the FX node (for its
meta: output sizes and dtype), args the node's arguments with FX nodes replaced by `Val`s. It
returns a Val, or a tuple for multi-output ops, or raises Unsupported for a call it cannot
express (that node then fails the compile, or runs eagerly under fallback="eager").

Composite nn ops (norms, losses, embedding, attention, activation backwards) are in
lowering_nn.py; both fill the same table."""
import math

import torch

from .builder import Val, check_fits
from .errors import Unsupported

aten = torch.ops.aten
prims = torch.ops.prims
LOWERINGS: dict = {}


def lowers(*targets):
    def reg(fn):
        for t in targets:
            LOWERINGS[t] = fn
        return fn
    return reg


def meta(node):
    return node.meta["val"]


def _dim(d, rank):
    return d + rank if d < 0 else d


# --- elementwise -----------------------------------------------------------------------------
_UNARY = {
    aten.neg.default: "neg", aten.abs.default: "abs", aten.exp.default: "exp", aten.log.default: "log",
    aten.sqrt.default: "sqrt", aten.rsqrt.default: "rsqrt", aten.reciprocal.default: "reciprocal",
    aten.sigmoid.default: "sigmoid", aten.tanh.default: "tanh", aten.relu.default: "relu",
    aten.silu.default: "silu", aten.sin.default: "sin", aten.cos.default: "cos", aten.erf.default: "erf",
    aten.logical_not.default: "logical_not",
}
for _t, _name in _UNARY.items():
    LOWERINGS[_t] = (lambda name: lambda b, node, x: b.unary(name, x))(_name)

_BINARY = {
    aten.mul.Tensor: "mul", aten.mul.Scalar: "mul", aten.div.Tensor: "div", aten.div.Scalar: "div",
    aten.maximum.default: "maximum", aten.minimum.default: "minimum",
    aten.eq.Tensor: "eq", aten.eq.Scalar: "eq", aten.ne.Tensor: "ne", aten.ne.Scalar: "ne",
    aten.lt.Tensor: "lt", aten.lt.Scalar: "lt", aten.le.Tensor: "le", aten.le.Scalar: "le",
    aten.gt.Tensor: "gt", aten.gt.Scalar: "gt", aten.ge.Tensor: "ge", aten.ge.Scalar: "ge",
    aten.logical_and.default: "logical_and", aten.logical_or.default: "logical_or",
}
def _zero_dim_cast(b, name, x, y):
    """The operands with a 0-dim tensor of another dtype than the computation's cast to it
    first, as eager mode and the CPU cast their inputs: a 0-dim tensor does not promote, so
    int8 < tensor(300) compares with 44 and bfloat16 + tensor(1.001) adds 1.0 (the IR would
    compute both at the wider dtype). mul and div keep a float operand's full value, as the CPU
    does for a 0-dim operand."""
    if not (isinstance(x, Val) and isinstance(y, Val)) or b.dtype(x) == b.dtype(y):
        return x, y
    if bool(b.sizes(x)) == bool(b.sizes(y)):
        return x, y
    common = torch.result_type(*(torch.empty([1] * len(b.sizes(v)), dtype=b.dtype(v), device="meta") if b.sizes(v)
                                 else torch.empty((), dtype=b.dtype(v), device="meta") for v in (x, y)))
    narrow_int = common in (torch.uint8, torch.int8, torch.int16, torch.int32)
    half = common in (torch.float16, torch.bfloat16) and name not in ("mul", "div")
    if not (narrow_int or half):
        return x, y
    return tuple(b.cast(v, common) if not b.sizes(v) and b.dtype(v) != common else v for v in (x, y))


def _binary_lowering(name):
    def lower(b, node, x, y):
        return b.binary(name, *_zero_dim_cast(b, name, x, y))
    return lower


for _t, _name in _BINARY.items():
    LOWERINGS[_t] = _binary_lowering(_name)


@lowers(aten.sign.default)
def _sign(b, node, x):
    dt = b.dtype(x)
    return b.sub(b.cast(b.binary("gt", x, 0), dt), b.cast(b.binary("lt", x, 0), dt))


@lowers(aten.gelu.default)
def _gelu(b, node, x, approximate="none"):
    return b.unary("gelu_tanh" if approximate == "tanh" else "gelu", x)


def _in_dtype(value, node):
    """A Python number as a float16/bfloat16 op takes it: the CPU's add, sub, rsub and pow kernels
    round a scalar operand (and add's alpha) to the tensor's dtype first, while mul and div use it
    exactly. Other dtypes and tensors pass through."""
    dtype = meta(node).dtype
    if isinstance(value, (int, float)) and not isinstance(value, bool) and dtype in (torch.float16, torch.bfloat16):
        return float(torch.tensor(value, dtype=dtype))
    return value


@lowers(aten.add.Tensor, aten.add.Scalar, aten.sub.Tensor, aten.sub.Scalar)
def _add_sub(b, node, x, y, alpha=1):
    y, alpha = _in_dtype(y, node), _in_dtype(alpha, node)
    x, y = _zero_dim_cast(b, "add", x, y)
    if alpha != 1:
        y = b.mul(y, alpha) if isinstance(y, Val) else _in_dtype(y * alpha, node)
    return b.binary("add" if node.target in (aten.add.Tensor, aten.add.Scalar) else "sub", x, y)


@lowers(aten.rsub.Scalar, aten.rsub.Tensor)
def _rsub(b, node, x, y, alpha=1):
    y, alpha = _in_dtype(y, node), _in_dtype(alpha, node)
    x, y = _zero_dim_cast(b, "sub", x, y)
    if alpha != 1:
        x = b.mul(x, alpha)
    return b.binary("sub", y, x)


@lowers(aten.div.Tensor_mode, aten.div.Scalar_mode)
def _div_mode(b, node, x, y, rounding_mode=None):
    if rounding_mode is not None:
        raise Unsupported(f"rounding_mode={rounding_mode!r}")
    return b.binary("div", x, y)


@lowers(aten.pow.Tensor_Scalar)
def _pow_scalar(b, node, x, e):
    e = _in_dtype(e, node)
    if not meta(node).dtype.is_floating_point and e not in (1, 2):
        # The generated pow is floating; integer powers wrap on the CPU (5 ** 200 in uint8).
        raise Unsupported("pow of an integer tensor")
    if e == 2:
        return b.mul(x, x)  # what eager computes, exactly
    if e == 1:
        return x
    if e == 0.5 and meta(node).dtype != torch.float16:  # float16 roots follow std::pow, as on the CPU
        return b.unary("sqrt", x)
    if e == -1:
        return b.unary("reciprocal", x)
    return b.binary("pow", x, e)


@lowers(aten.pow.Tensor_Tensor)
def _pow(b, node, x, e):
    if not meta(node).dtype.is_floating_point:
        raise Unsupported("pow of integer tensors")
    return b.binary("pow", x, e)


@lowers(aten.pow.Scalar)
def _pow_base(b, node, base, e):
    if not meta(node).dtype.is_floating_point:
        raise Unsupported("pow of integer tensors")
    return b.binary("pow", b.scalar(base, e), e)


@lowers(aten.clamp.default, aten.clamp_min.default, aten.clamp_max.default)
def _clamp(b, node, x, lo=None, hi=None):
    if node.target == aten.clamp_max.default:
        lo, hi = None, lo
    for bound in (lo, hi):
        check_fits(bound, b.dtype(x))
    if lo is not None:
        x = b.binary("maximum", x, lo)
    if hi is not None:
        x = b.binary("minimum", x, hi)
    return x


@lowers(aten.where.self)
def _where(b, node, c, x, y):
    return b.where(c, *_zero_dim_cast(b, "where", x, y))


@lowers(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def _masked_fill(b, node, x, mask, value):
    check_fits(value, b.dtype(x))
    return b.where(mask, value, x)


@lowers(aten.bitwise_and.Tensor, aten.bitwise_or.Tensor, aten.bitwise_not.default)
def _bitwise(b, node, x, y=None):
    if meta(node).dtype != torch.bool:
        raise Unsupported("bitwise ops on integers")
    name = {aten.bitwise_and.Tensor: "logical_and", aten.bitwise_or.Tensor: "logical_or"}.get(node.target)
    return b.op("logical_not", [x]) if name is None else b.binary(name, x, y)


# --- dtype, copies, creation -----------------------------------------------------------------
@lowers(prims.convert_element_type.default)
def _convert(b, node, x, dtype):
    return b.cast(x, dtype)


@lowers(aten._to_copy.default)
def _to_copy(b, node, x, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False,
             memory_format=None):
    if device is not None and torch.device(device).type != "ember":
        raise Unsupported(f"copy to device {device}")
    return b.cast(x, dtype or b.dtype(x))


@lowers(aten.clone.default, aten.alias.default, aten.lift_fresh_copy.default, aten.detach.default,
        aten.contiguous.default)
def _identity(b, node, x, *rest, **kw):
    return x


@lowers(aten.copy.default)
def _copy(b, node, dst, src, non_blocking=False):
    return b.expand(b.cast(src, b.dtype(dst)), b.sizes(dst))


@lowers(aten.full.default, aten.scalar_tensor.default, aten.zeros.default, aten.ones.default)
def _full(b, node, *args, **kw):
    m = meta(node)
    if node.target == aten.full.default:
        value = args[1]
    elif node.target == aten.scalar_tensor.default:
        value = args[0]
    else:
        value = 0 if node.target == aten.zeros.default else 1
    return b.full(list(m.shape), value, m.dtype)


@lowers(aten.empty.memory_format, aten.empty_permuted.default, aten.empty_strided.default,
        aten.empty_like.default, aten.new_empty.default, aten.new_empty_strided.default)
def _empty(b, node, *args, **kw):
    # Uninitialized memory may hold anything; zeros are the cheapest "anything".
    m = meta(node)
    return b.full(list(m.shape), 0, m.dtype)


@lowers(aten.full_like.default, aten.zeros_like.default, aten.ones_like.default)
def _full_like(b, node, x, *args, **kw):
    m = meta(node)
    value = args[0] if node.target == aten.full_like.default else \
        (0 if node.target == aten.zeros_like.default else 1)
    return b.full(list(m.shape), value, m.dtype)


@lowers(aten.arange.start_step, aten.arange.default, aten.arange.start, prims.iota.default)
def _arange(b, node, *args, **kw):
    # Static shapes make this a constant: evaluate it once on the host.
    m = meta(node)
    if m.numel() > (1 << 16):
        raise Unsupported("arange too large to embed")
    return b.constant(_eval_on_cpu(node, args, kw))


def _eval_on_cpu(node, args, kw):
    kw = dict(kw, device="cpu")
    return node.target(*args, **kw)


# --- views -----------------------------------------------------------------------------------
@lowers(aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.view_copy.default)
def _reshape(b, node, x, sizes):
    return b.reshape(x, list(meta(node).shape))


@lowers(aten.expand.default, aten.expand_copy.default)
def _expand(b, node, x, sizes, implicit=False):
    return b.expand(x, list(meta(node).shape))


@lowers(aten.permute.default, aten.permute_copy.default)
def _permute(b, node, x, perm):
    rank = len(b.sizes(x))
    return b.permute(x, [_dim(p, rank) for p in perm])


@lowers(aten.t.default)
def _t(b, node, x):
    return x if len(b.sizes(x)) < 2 else b.op("transpose", [x], ints=[0, 1])


@lowers(aten.transpose.int)
def _transpose(b, node, x, d0, d1):
    rank = len(b.sizes(x))
    d0, d1 = _dim(d0, rank), _dim(d1, rank)
    return x if d0 == d1 else b.op("transpose", [x], ints=[d0, d1])


def _norm_slice(size, start, end, step):
    start = 0 if start is None else start
    end = size if end is None else end
    start = max(0, min(size, start + size if start < 0 else start))
    end = max(start, min(size, end + size if end < 0 else end))
    return start, end, step


@lowers(aten.slice.Tensor, aten.slice_copy.Tensor)
def _slice(b, node, x, dim=0, start=None, end=None, step=1):
    sizes = b.sizes(x)
    dim = _dim(dim, len(sizes))
    start, end, step = _norm_slice(sizes[dim], start, end, step)
    if (start, end, step) == (0, sizes[dim], 1):
        return x
    return b.slice(x, dim, start, end, step)


@lowers(aten.select.int, aten.select_copy.int)
def _select(b, node, x, dim, index):
    sizes = b.sizes(x)
    dim = _dim(dim, len(sizes))
    index = index + sizes[dim] if index < 0 else index
    return b.op("squeeze", [b.slice(x, dim, index, index + 1, 1)], ints=[dim])


@lowers(aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, aten.squeeze_copy.dims)
def _squeeze(b, node, x, dims=None):
    return b.reshape(x, list(meta(node).shape))


@lowers(aten.unsqueeze.default, aten.unsqueeze_copy.default)
def _unsqueeze(b, node, x, dim):
    return b.unsqueeze(x, _dim(dim, len(b.sizes(x)) + 1))


@lowers(aten.split.Tensor, aten.split_with_sizes.default)
def _split(b, node, x, split, dim=0):
    sizes = b.sizes(x)
    dim = _dim(dim, len(sizes))
    if isinstance(split, int):
        # A dim of size 0 splits into one empty piece, as eagerly.
        split = [min(split, sizes[dim] - s) for s in range(0, sizes[dim], split)] or [0]
    out, start = [], 0
    for n in split:
        out.append(b.slice(x, dim, start, start + n, 1))
        start += n
    return tuple(out)


@lowers(aten.unbind.int)
def _unbind(b, node, x, dim=0):
    sizes = b.sizes(x)
    dim = _dim(dim, len(sizes))
    return tuple(b.op("squeeze", [b.slice(x, dim, i, i + 1, 1)], ints=[dim]) for i in range(sizes[dim]))


@lowers(aten.cat.default)
def _cat(b, node, tensors, dim=0):
    # Each piece is placed in the result by a pad (an index map with masked loads, fused), and a
    # chain of selects takes, at every position, the piece that covers it.
    dt = meta(node).dtype
    ref = next((t for t in tensors if b.sizes(t) != [0]), None)  # legacy empty 1-d pieces skip
    if ref is None:
        return b.full(list(meta(node).shape), 0, dt)
    dim = _dim(dim, len(b.sizes(ref)))
    tensors = [b.cast(t, dt) for t in tensors if b.sizes(t) != [0] and b.sizes(t)[dim] > 0]
    if not tensors:
        return b.full(list(meta(node).shape), 0, dt)
    if len(tensors) == 1:
        return tensors[0]
    total = sum(b.sizes(t)[dim] for t in tensors)
    offsets, off = [], 0
    for t in tensors:
        offsets.append(off)
        off += b.sizes(t)[dim]
    out, _ = b.placed(tensors[-1], dim, total, offsets[-1])
    for t, start in zip(reversed(tensors[:-1]), reversed(offsets[:-1])):
        piece, mask = b.placed(t, dim, total, start)
        out = b.where(mask, piece, out)
    return out


@lowers(aten.constant_pad_nd.default)
def _constant_pad_nd(b, node, x, pad, value=0):
    sizes = b.sizes(x)
    rank = len(sizes)
    if len(pad) % 2 or len(pad) // 2 > rank:
        raise Unsupported("pad list")
    spec = [[0, 0, 1] for _ in range(rank)]
    for i in range(len(pad) // 2):  # pairs from the last dim backwards
        d = rank - 1 - i
        lo, hi = pad[2 * i], pad[2 * i + 1]
        if lo < 0 or hi < 0:  # negative padding crops
            size = b.sizes(x)[d]
            x = b.slice(x, d, max(0, -lo), max(max(0, -lo), size - max(0, -hi)), 1)
        spec[d] = [max(lo, 0), max(hi, 0), 1]
    return b.pad(x, spec, value)


@lowers(aten.slice_scatter.default)
def _slice_scatter(b, node, x, src, dim=0, start=None, end=None, step=1):
    sizes = b.sizes(x)
    dim = _dim(dim, len(sizes))
    start, end, step = _norm_slice(sizes[dim], start, end, step)
    if b.sizes(src)[dim] == 0:
        return x
    piece, mask = b.placed(b.cast(src, b.dtype(x)), dim, sizes[dim], start, step)
    return b.where(mask, piece, x)


@lowers(aten.select_scatter.default)
def _select_scatter(b, node, x, src, dim, index):
    sizes = b.sizes(x)
    dim = _dim(dim, len(sizes))
    index = index + sizes[dim] if index < 0 else index
    piece, mask = b.placed(b.cast(b.unsqueeze(src, dim), b.dtype(x)), dim, sizes[dim], index)
    return b.where(mask, piece, x)


@lowers(aten.stack.default)
def _stack(b, node, tensors, dim=0):
    rank = len(b.sizes(tensors[0])) + 1
    dim = _dim(dim, rank)
    return _cat(b, node, [b.unsqueeze(t, dim) for t in tensors], dim)


# --- reductions ------------------------------------------------------------------------------
def _dims(b, x, dims):
    rank = len(b.sizes(x))
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return list(range(rank))
    if isinstance(dims, int):
        dims = [dims]
    return [_dim(d, rank) for d in dims]


def _reduction(name):
    def lower(b, node, x, dims=None, keepdim=False, dtype=None):
        if dtype is not None:
            x = b.cast(x, dtype)
        if not b.sizes(x):  # 0-d: reducing nothing
            return x
        return b.reduce(name, x, _dims(b, x, dims), keepdim)
    return lower


for _t, _name in {aten.sum.dim_IntList: "sum", aten.mean.dim: "mean", aten.amax.default: "amax",
                  aten.amin.default: "amin", aten.prod.dim_int: "prod"}.items():
    LOWERINGS[_t] = _reduction(_name)


@lowers(aten.sum.default, aten.mean.default, aten.prod.default)
def _reduce_all(b, node, x, dtype=None):
    name = {aten.sum.default: "sum", aten.mean.default: "mean", aten.prod.default: "prod"}[node.target]
    return _reduction(name)(b, node, x, None, False, dtype)


def _var(b, x, dims, correction, keepdim):
    if not b.sizes(x):
        raise Unsupported("variance of a 0-d tensor")  # the eager kernel's NaN
    dims = _dims(b, x, dims)
    n = math.prod(b.sizes(x)[d] for d in dims)
    # In double, as the eager kernel's and the CPU's Welford accumulators are: the float32 sum of
    # squared deviations overflows (inf) for values past ~1e18 whose variance float32 holds.
    dtype = b.dtype(x)
    wide = dtype in (torch.float32, torch.float16, torch.bfloat16)
    if wide:
        x = b.cast(x, torch.float64)
    mean = b.reduce("mean", x, dims, True)
    d = b.sub(x, mean)
    var = b.div(b.reduce("sum", b.mul(d, d), dims, keepdim), max(n - correction, 0))
    if not keepdim:
        mean = b.reshape(mean, [s for i, s in enumerate(b.sizes(x)) if i not in dims])
    return (b.cast(var, dtype), b.cast(mean, dtype)) if wide else (var, mean)


@lowers(aten.var.correction, aten.var.dim)
def _var_lower(b, node, x, dims=None, *args, correction=None, keepdim=False, unbiased=None):
    if node.target == aten.var.dim:
        unbiased = args[0] if args else True
        keepdim = args[1] if len(args) > 1 else keepdim
        correction = 1 if unbiased else 0
    return _var(b, x, dims, 1 if correction is None else correction, keepdim)[0]


@lowers(aten.var_mean.correction)
def _var_mean(b, node, x, dims=None, correction=None, keepdim=False):
    return _var(b, x, dims, 1 if correction is None else correction, keepdim)


# --- matmul ----------------------------------------------------------------------------------
@lowers(aten.mm.default)
def _mm(b, node, x, y):
    return b.op("mm", [x, y])


@lowers(aten.bmm.default)
def _bmm(b, node, x, y):
    return b.op("bmm", [x, y])


@lowers(aten.addmm.default)
def _addmm(b, node, bias, x, y, beta=1, alpha=1):
    return b.op("addmm", [bias, x, y], floats=[beta, alpha])


# --- softmax ---------------------------------------------------------------------------------
@lowers(aten._softmax.default, aten._log_softmax.default)
def _softmax(b, node, x, dim, half_to_float):
    if half_to_float:
        x = b.cast(x, torch.float32)
    name = "softmax" if node.target == aten._softmax.default else "log_softmax"
    if not b.sizes(x):  # a 0-d tensor is softmaxed as one element along its only (implicit) dim
        return b.reshape(b.op(name, [b.reshape(x, [1])], ints=[0]), [])
    return b.op(name, [x], ints=[_dim(dim, len(b.sizes(x)))])


from . import lowering_nn  # noqa: E402,F401  (fills LOWERINGS with the composite nn ops)
from . import lowering_foreach  # noqa: E402

lowering_foreach.register(LOWERINGS)
