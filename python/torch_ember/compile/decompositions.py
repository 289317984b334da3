"""The decomposition table handed to AOTAutograd: PyTorch's core ATen table, minus the ops that
Ember lowers whole (softmax, GELU, SiLU, layer norm, embedding and its backward, NLL loss...:
one fused or library op beats their decomposition), plus attention as math when it is trained.

Attention: the library kernel is forward-only and returns no logsumexp, so a training graph
would leave attention to eager kernels in both directions. Under grad mode the fused attention
op and its backward are decomposed into GEMMs, exp and reductions instead (the backward
recomputes the probabilities from the logsumexp, as flash attention does), which the compiler
fuses like any other math; graphs traced without grad keep the library kernel."""
import functools
import math

import torch

aten = torch.ops.aten


def _repeat_kv(t, heads):
    b, hk, s, e = t.shape
    if hk == heads:
        return t
    return t[:, :, None].expand(b, hk, heads // hk, s, e).reshape(b, heads, s, e)


def _scores(q, k, attn_bias, is_causal, scale):
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = torch.matmul(q, _repeat_kv(k, q.shape[1]).transpose(-2, -1)) * scale
    if is_causal:
        lq, lk = q.shape[-2], k.shape[-2]
        keep = torch.arange(lq, device=q.device)[:, None] >= torch.arange(lk, device=q.device)[None, :]
        s = s.masked_fill(~keep, float("-inf"))
    if attn_bias is not None:
        s = s.masked_fill(~attn_bias, float("-inf")) if attn_bias.dtype == torch.bool else s + attn_bias
    return s, scale


def _sdpa_fwd(q, k, v, attn_bias=None, dropout_p=0.0, is_causal=False, return_debug_mask=False, scale=None):
    if dropout_p or not torch.is_grad_enabled() or q.dim() != 4:
        return NotImplemented
    s, _ = _scores(q, k, attn_bias, is_causal, scale)
    sf = s.float()
    m = sf.amax(-1, keepdim=True)
    lse = (m + (sf - m).exp().sum(-1, keepdim=True).log()).squeeze(-1)
    p = (sf - lse[..., None]).exp().to(q.dtype)
    out = torch.matmul(p, _repeat_kv(v, q.shape[1]))
    seed = torch.zeros((), dtype=torch.long, device=q.device)
    return (out, lse, None, None, q.shape[2], k.shape[2], seed, seed, None)


def _sdpa_bwd(grad_out, q, k, v, attn_bias, grad_input_mask, out, lse, cum_seq_q, cum_seq_k, max_q, max_k,
              dropout_p, is_causal, philox_seed, philox_offset, *, scale=None):
    if dropout_p or q.dim() != 4 or (attn_bias is not None and grad_input_mask[3]):
        return NotImplemented
    heads = q.shape[1]
    s, scale = _scores(q, k, attn_bias, is_causal, scale)
    p = (s.float() - lse[..., None]).exp().to(q.dtype)
    ke, ve = _repeat_kv(k, heads), _repeat_kv(v, heads)
    grad_v = torch.matmul(p.transpose(-2, -1), grad_out)
    dp = torch.matmul(grad_out, ve.transpose(-2, -1))
    delta = (grad_out * out).sum(-1, keepdim=True)
    ds = p * (dp - delta)
    grad_q = torch.matmul(ds, ke) * scale
    grad_k = torch.matmul(ds.transpose(-2, -1), q) * scale

    def fold(g, like):  # sum each kv head's query group
        b, hk, n, e = like.shape
        return g if hk == heads else g.reshape(b, hk, heads // hk, n, e).sum(2)

    return grad_q, fold(grad_k, k), fold(grad_v, v), None


# multilabel_margin_loss_forward's decomposition mixes up the batch and class dims of a 2-d
# input (torch 2.13): its loss differs from the CPU kernel's, which is the definition.
DISAGREEING = (aten.multilabel_margin_loss_forward.default, aten.multilabel_margin_loss_forward.output)


@functools.cache
def decomposition_table() -> dict:
    from torch._decomp import core_aten_decompositions

    from .lowering import LOWERINGS

    table = dict(core_aten_decompositions().items())
    for op in LOWERINGS:
        table.pop(op, None)
    # Python decompositions that read a tensor's value as a Python int: with that value unknown
    # at trace time (a split given as a tensor) they fail the trace, where the op's own C++
    # composite traces fine.
    for op in (aten.tensor_split.tensor_indices_or_sections,):
        table.pop(op, None)
    # Decompositions that disagree with PyTorch's own CPU kernel (DISAGREEING) are dropped,
    # both from this table and as the Python Autograd kernels torch._decomp installs for tracing,
    # which would otherwise apply them to any traced graph (Inductor's included).
    for op in DISAGREEING:
        table.pop(op, None)
        if torch._C.DispatchKey.Autograd in op.py_kernels:
            del op.py_kernels[torch._C.DispatchKey.Autograd]
            op._dispatch_cache.clear()
    # Backward ops torch._decomp has no decomposition for, decomposed as eager mode runs them.
    from ..eager_decompositions import OWN

    for name, fn in OWN.items():
        base, _, overload = name.partition(".")
        table.setdefault(getattr(getattr(aten, base), overload or "default"), fn)
    table[aten._scaled_dot_product_fused_attention_overrideable.default] = _sdpa_fwd
    table[aten._scaled_dot_product_fused_attention_overrideable_backward.default] = _sdpa_bwd
    return table
