"""Reflect and replicate padding (F.pad's "reflect" and "replicate", Conv's padding_mode) and their
backward, composed dim by dim from slices, flips, concatenation and slice_scatter: copies at
memory speed. torch._decomp's forms gather through broadcast index tensors and scatter-add the
backward, some 40 to 70 times slower than the CPU's kernels on a conv net's feature maps.

`padding` lists (left, right) pairs from the last dim, as F.pad does. Negative padding (cropping)
takes torch._decomp's form where it has one, else the CPU kernel. The argument checks (padding narrower than the input for reflect)
are the meta kernel's, run first by eager_decompositions.py."""
import torch
from torch._prims_common import suggest_memory_format


def _dims(ndim, padding):
    for k in range(len(padding) // 2):
        yield ndim - 1 - k, padding[2 * k], padding[2 * k + 1]


def _decomposed(name, *args):
    from torch._decomp import decomposition_table

    decomposition = decomposition_table.get(getattr(torch.ops.aten, name).default)
    return NotImplemented if decomposition is None else decomposition(*args)  # the CPU kernel then


def _shares_memory(a, b) -> bool:
    # A kernel runs below autograd, where views carry no _base: the storages are compared.
    try:
        return a.untyped_storage()._cdata == b.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError):  # traced tensors: aliasing is the tracer's concern
        return False


def _fresh(result, source, like=None):
    """`result` in the memory format the CPU kernel gives (`like`'s), and never a view of `source`
    (no padding along some dims leaves one)."""
    fmt = suggest_memory_format(source if like is None else like)
    strides = torch.empty(result.shape, device="meta", memory_format=fmt).stride()
    if _shares_memory(result, source) or result.stride() != strides:
        return result.clone(memory_format=fmt)
    return result


def _edge(x, dim, start, count, reflect):
    """The `count` cells padding one side: mirrored about the edge cell, or the edge cell repeated."""
    if reflect:
        return x.narrow(dim, start, count).flip(dim)
    shape = list(x.shape)
    shape[dim] = count
    return x.narrow(dim, start, 1).expand(shape)


def _pad(reflect):
    name = "reflection_pad" if reflect else "replication_pad"

    def pad(self, padding):
        if any(p < 0 for p in padding):
            return _decomposed(f"{name}{len(padding) // 2}d", self, padding)
        x = self
        for dim, left, right in _dims(self.dim(), padding):
            n = x.shape[dim]
            parts = [_edge(x, dim, 1 if reflect else 0, left, reflect)] if left else []
            parts.append(x)
            if right:
                parts.append(_edge(x, dim, n - 1 - right if reflect else n - 1, right, reflect))
            x = torch.cat(parts, dim)
        return _fresh(x, self)

    return pad


def _pad_backward(reflect):
    name = "reflection_pad" if reflect else "replication_pad"

    def backward(grad, self, padding):
        if any(p < 0 for p in padding):
            return _decomposed(f"{name}{len(padding) // 2}d_backward", grad, self, padding)
        g = grad
        # Each dim's padding is a separate linear map, so their adjoints apply in any order.
        for dim, left, right in _dims(self.dim(), padding):
            n = self.shape[dim]
            inner = g.narrow(dim, left, n)
            # Where each side's padded cells came from: cells 1..left mirrored (reflect) or
            # cell 0 (replicate), and likewise at the far end.
            for count, src, dst in ((left, 0, 1), (right, left + n, n - 1 - right)):
                if not count:
                    continue
                if reflect:
                    inner = inner.slice_scatter(inner.narrow(dim, dst, count) + g.narrow(dim, src, count).flip(dim),
                                                dim, dst, dst + count)
                else:
                    edge = 0 if src == 0 else n - 1
                    total = g.narrow(dim, src, count).sum(dim, keepdim=True)
                    inner = inner.slice_scatter(inner.narrow(dim, edge, 1) + total, dim, edge, edge + 1)
            g = inner
        return _fresh(g, grad, self)

    return backward


def ops(with_out) -> dict:
    table = {}
    for reflect, name in ((True, "reflection_pad"), (False, "replication_pad")):
        forward, backward = _pad(reflect), _pad_backward(reflect)
        for n in (1, 2, 3):
            table[f"{name}{n}d"] = forward
            table[f"{name}{n}d.out"] = with_out(forward, "out")
            table[f"{name}{n}d_backward"] = backward
            table[f"{name}{n}d_backward.grad_input"] = with_out(backward)
    return table
