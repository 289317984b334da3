"""Lowerings of composite nn ops as Ember IR math: activation and softmax backwards, layer norm
and attention (the library kernel, forward only; trained attention is a library step).

Embedding and NLL loss are library steps (decompositions.KEPT_WHOLE), not lowered here: their
eager kernels check every index, and a one-hot form can do neither that (an index past the
table selects nothing and gives zeros) nor keep a non-finite row to itself (0 * inf is NaN in a
one-hot GEMM)."""
import math

import torch

from .errors import Unsupported
from .lowering import _dim, lowers, meta

aten = torch.ops.aten


@lowers(aten.threshold_backward.default)
def _threshold_backward(b, node, grad, x, threshold):
    return b.where(b.binary("le", x, threshold), 0.0, grad)


@lowers(aten.sigmoid_backward.default)
def _sigmoid_backward(b, node, grad, y):
    return b.mul(grad, b.mul(y, b.sub(1.0, y)))


@lowers(aten.tanh_backward.default)
def _tanh_backward(b, node, grad, y):
    return b.mul(grad, b.sub(1.0, b.mul(y, y)))


@lowers(aten.silu_backward.default)
def _silu_backward(b, node, grad, x):
    s = b.unary("sigmoid", x)
    return b.mul(grad, b.mul(s, b.add(1.0, b.mul(x, b.sub(1.0, s)))))


@lowers(aten.gelu_backward.default)
def _gelu_backward(b, node, grad, x, approximate="none"):
    if approximate == "tanh":
        k_beta = math.sqrt(2.0) * (2.0 / math.sqrt(math.pi)) * 0.5
        k_kappa = 0.044715
        x_sq = b.mul(x, x)
        inner = b.mul(k_beta, b.add(x, b.mul(k_kappa, b.mul(x_sq, x))))
        t = b.unary("tanh", inner)
        left = b.mul(0.5, x)
        right = b.add(1.0, t)
        left_d = b.mul(0.5, right)
        t_d = b.sub(1.0, b.mul(t, t))
        inner_d = b.mul(k_beta, b.add(1.0, b.mul(3.0 * k_kappa, x_sq)))
        return b.mul(grad, b.add(left_d, b.mul(left, b.mul(t_d, inner_d))))
    cdf = b.mul(0.5, b.add(1.0, b.unary("erf", b.mul(x, 1.0 / math.sqrt(2.0)))))
    pdf = b.mul(1.0 / math.sqrt(2.0 * math.pi), b.unary("exp", b.mul(-0.5, b.mul(x, x))))
    return b.mul(grad, b.add(cdf, b.mul(x, pdf)))


@lowers(aten._softmax_backward_data.default)
def _softmax_backward(b, node, grad, out, dim, input_dtype):
    if not b.sizes(out):  # 0-d: one element, the gradient through its softmax is 0
        return b.reshape(_softmax_backward(b, node, b.reshape(grad, [1]), b.reshape(out, [1]), 0, input_dtype), [])
    dim = _dim(dim, len(b.sizes(out)))
    go = b.mul(grad, out)
    return b.cast(b.sub(go, b.mul(out, b.reduce("sum", go, [dim], True))), input_dtype)


@lowers(aten._log_softmax_backward_data.default)
def _log_softmax_backward(b, node, grad, out, dim, input_dtype):
    if not b.sizes(out):
        return b.reshape(_log_softmax_backward(b, node, b.reshape(grad, [1]), b.reshape(out, [1]), 0, input_dtype),
                         [])
    dim = _dim(dim, len(b.sizes(out)))
    s = b.reduce("sum", grad, [dim], True)
    return b.cast(b.sub(grad, b.mul(b.unary("exp", out), s)), input_dtype)


@lowers(aten.native_layer_norm.default)
def _layer_norm(b, node, x, normalized_shape, weight, bias, eps):
    out_dtype = b.dtype(x)
    acc = torch.float32 if out_dtype in (torch.float16, torch.bfloat16) else out_dtype
    xf = b.cast(x, acc)
    rank = len(b.sizes(x))
    dims = list(range(rank - len(normalized_shape), rank))
    # The row mean in float64, rounded once, as eager mode and the CPU form it: a float32 mean of
    # a constant row is off by an ulp, and rstd (1/sqrt(eps) there) magnified that to 0.04.
    mean = b.reduce("mean", b.cast(xf, torch.float64), dims, True) if acc == torch.float32 \
        else b.reduce("mean", xf, dims, True)
    mean = b.cast(mean, acc)
    d = b.sub(xf, mean)
    var = b.reduce("mean", b.mul(d, d), dims, True)
    rstd = b.unary("rsqrt", b.add(var, float(eps)))
    y = b.mul(d, rstd)
    if weight is not None:
        y = b.mul(y, weight)
    if bias is not None:
        y = b.add(y, bias)
    stat_dtype = meta(node)[1].dtype
    return b.cast(y, out_dtype), b.cast(mean, stat_dtype), b.cast(rstd, stat_dtype)


@lowers(aten._scaled_dot_product_fused_attention_overrideable.default)
def _sdpa(b, node, q, k, v, attn_bias=None, dropout_p=0.0, is_causal=False, return_debug_mask=False,
          scale=None):
    # The IR's attention op returns the output only; a graph that keeps the logsumexp (training)
    # runs the op as a library step instead: eager mode's fused kernel, whose backward uses it.
    users = {u.args[1] for u in node.users if u.target.__name__ == "getitem"}
    if users - {0} or any(u.target.__name__ != "getitem" for u in node.users):
        raise Unsupported("attention outputs other than the result (training) are not lowered")
    if dropout_p:
        raise Unsupported("attention dropout")
    hq, hk = b.sizes(q)[1], b.sizes(k)[1]
    if hq != hk:  # grouped-query: repeat each kv head for its query group
        rep = hq // hk
        def repeat(t):
            s = b.sizes(t)
            return b.reshape(b.expand(b.unsqueeze(t, 2), [s[0], s[1], rep, s[2], s[3]]),
                             [s[0], s[1] * rep, s[2], s[3]])
        k, v = repeat(k), repeat(v)
    inputs = [q, k, v] + ([attn_bias] if attn_bias is not None else [])
    floats = [scale] if scale is not None else []
    out = b.op("scaled_dot_product_attention", inputs, ints=[1 if is_causal else 0], floats=floats)
    return (out,) + (None,) * 8
