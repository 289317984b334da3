"""The decomposition table handed to AOTAutograd: PyTorch's core ATen table, minus the ops that
Ember lowers whole (softmax, GELU, SiLU, layer norm...: one fused or library op beats their
decomposition) and those it runs whole as library steps (KEPT_WHOLE).

Attention is never decomposed. An inference graph lowers it to the attention op of Ember IR; a
training graph, which needs the logsumexp and the backward, runs the fused attention kernels
of eager mode (forward with logsumexp, and its backward) as library steps. Decomposing it into
GEMMs and softmax math instead materializes every [Lq, Lk] score matrix in both directions: a
causal attention layer's training step (batch 8, 256 tokens, 8 heads) took 2.5x as long that way."""
import functools

import torch

aten = torch.ops.aten


# multilabel_margin_loss_forward's decomposition mixes up the batch and class dims of a 2-d
# input (torch 2.13): its loss differs from the CPU kernel's, which is the definition.
DISAGREEING = (aten.multilabel_margin_loss_forward.default, aten.multilabel_margin_loss_forward.output)


# Ops kept whole with no lowering: the graph runs their eager kernel as a library step. Embedding
# and NLL loss check their indices there (an index out of range raises, as eagerly), and a row
# holding inf or NaN stays in its own outputs. index_add and index_copy refuse negative indices,
# which their decomposition (index_put) would count from the end; binary cross-entropy checks
# that its probabilities lie in [0, 1].
KEPT_WHOLE = (aten.embedding.default, aten.embedding_dense_backward.default,
              aten.nll_loss_forward.default, aten.nll_loss_backward.default,
              aten.index_add.default, aten.index_copy.default, aten.binary_cross_entropy.default)


# Ops kept whole that a graph folds to constants with the CPU's own kernel. eye's decomposition
# builds its index ranges in the smallest unsigned dtype that holds n (uint16 from n = 256),
# which no CPU kernel computes when the graph folds it (peft's DoRA builds torch.eye(in_features)).
FOLDED_WHOLE = (aten.eye.default, aten.eye.m)


@functools.cache
def decomposition_table() -> dict:
    from torch._decomp import core_aten_decompositions

    from .lowering import LOWERINGS

    table = dict(core_aten_decompositions().items())
    for op in (*LOWERINGS, *KEPT_WHOLE, *FOLDED_WHOLE):
        table.pop(op, None)
    # Python decompositions that read a tensor's value as a Python int: with that value unknown
    # at trace time (a split given as a tensor) they fail the trace, where the op's own C++
    # composite traces fine.
    for op in (aten.tensor_split.tensor_indices_or_sections,):
        table.pop(op, None)
    # take's (flat[index]) reads a 0-d index as a Python int; indexing by the flattened index
    # keeps it a tensor (negative indices still wrap, out-of-range ones still raise).
    table[aten.take.default] = _take
    # Decompositions that disagree with PyTorch's own CPU kernel (DISAGREEING) are dropped,
    # both from this table and as the Python Autograd kernels torch._decomp installs for tracing,
    # which would otherwise apply them to any traced graph (Inductor's included).
    for op in DISAGREEING:
        table.pop(op, None)
        if torch._C.DispatchKey.Autograd in op.py_kernels:
            del op.py_kernels[torch._C.DispatchKey.Autograd]
            op._dispatch_cache.clear()
    # Ops torch._decomp has no decomposition for, decomposed as eager mode runs them.
    from ..eager_decompositions import EAGER_ONLY, OWN, REPLACING

    for name, fn in OWN.items():
        if name in EAGER_ONLY:
            continue
        base, _, overload = name.partition(".")
        op = getattr(getattr(aten, base), overload or "default")
        if name in REPLACING:
            table[op] = fn
        else:
            table.setdefault(op, fn)
    # linspace's values as eager mode (and the CPU) computes them, where the dtype allows.
    from ..linspace import linspace

    table[aten.linspace.default] = _first_of(linspace, table.get(aten.linspace.default))
    for op, declines in _DECLINE.items():
        if op in table:
            table[op] = _unless(declines, table[op])
    # The CPU kernel's argument checks that the decomposition lacks, as eager mode makes them.
    from ..eager_decompositions import _ARGUMENT_CHECKS

    for name, check in _ARGUMENT_CHECKS.items():
        base, _, overload = name.partition(".")
        op = getattr(getattr(aten, base), overload or "default")
        if op in table:
            table[op] = _checked(check, table[op])
    return table


def _checked(check, decomposition):
    def run(*args, **kwargs):
        check(args, kwargs)
        return decomposition(*args, **kwargs)
    return run


def _take(self, index):
    return self.reshape(-1)[index.reshape(-1)].reshape(index.shape)


def _first_of(preferred, otherwise):
    """preferred's result, or otherwise's where preferred returns NotImplemented."""
    def run(*args, **kwargs):
        r = preferred(*args, **kwargs)
        return otherwise(*args, **kwargs) if r is NotImplemented and otherwise is not None else r
    return run


def _unless(declines, decomposition):
    """The decomposition, except for the arguments `declines` names: for those the op stays whole
    (a library step, whose eager kernel computes what the CPU does)."""
    def run(*args, **kwargs):
        return NotImplemented if declines(*args, **kwargs) else decomposition(*args, **kwargs)
    return run


def _integer(t) -> bool:
    return isinstance(t, torch.Tensor) and not t.dtype.is_floating_point and not t.dtype.is_complex


# Arguments torch._refs refuses or computes in another dtype than the CPU kernel: an integer
# addcmul with a float `value` (the reference raises; the CPU truncates the value; an integer
# addcdiv raises the CPU's own error from the eager step), and
# index_add into bool (alpha * source becomes an integer the accumulation refuses).
_DECLINE = {
    aten.addcmul.default: lambda x, *a, value=1: _integer(x) and isinstance(value, float),
    aten.addcdiv.default: lambda x, *a, value=1: _integer(x) and isinstance(value, float),
    aten.index_add.default: lambda x, *a, **k: isinstance(x, torch.Tensor) and x.dtype == torch.bool,
}
