"""torch.segment_reduce and its backward (torch_geometric's `segment` over CSR pointers, global
pooling with `ptr`) composed from native ops, with the CPU kernel's semantics: reductions sum,
mean, max/amax, min/amin and prod over consecutive segments along dim 0, given by 1-d
`lengths` or `offsets`; `initial` takes part in every segment (an empty one gives it, or the
reduction's identity, and NaN for a mean); NaN propagates through max and min. The backward
splits a max/min gradient evenly among the elements equal to the result (NaN matching NaN),
and gives a zero or NaN element of a product the product of the others.

Segments along another dim, n-d lengths and `indices` take the CPU fallback. Validation reads
the lengths back (as the CPU's immediate errors need), so these run eagerly, and as library
steps in compiled graphs.
"""
import torch

_REDUCE = {"sum": "sum", "mean": "mean", "max": "amax", "amax": "amax", "min": "amin", "amin": "amin", "prod": "prod"}


def _lengths_of(data, lengths, offsets, axis, unsafe):
    """The 1-d lengths along dim 0, checked as the CPU checks them, or None (not served here)."""
    if axis != 0 or data.dim() < 1 or (lengths is None) == (offsets is None):
        return None
    if lengths is None:
        if offsets.dim() != 1 or offsets.numel() < 1:
            return None
        lengths = offsets[1:] - offsets[:-1]
    if lengths.dim() != 1 or lengths.is_floating_point() or lengths.device != data.device:
        return None
    if not unsafe:
        if bool((lengths < 0).any()):
            raise RuntimeError("lengths contains negative value!")
        if int(lengths.sum()) != data.shape[0]:
            raise RuntimeError("Expected all rows of lengths along axis to sum to data.size(lengths.dim()-1) "
                               "when !unsafe.")
    return lengths.long()


def _segment_ids(lengths, n):
    """Each row's segment: the number of segment ends at or before it. With unsafe=True the
    lengths may cover fewer rows than there are: those rows get the id len(lengths), the extra
    segment that _with_rest adds."""
    return torch.searchsorted(lengths.cumsum(0), torch.arange(n, device=lengths.device), right=True)


def _with_rest(t, fill):
    """A per-segment tensor with one more segment at the end, holding `fill`: the rows no segment
    covers (unsafe=True) land there and are dropped."""
    return torch.cat([t, torch.full((1,) + tuple(t.shape[1:]), fill, dtype=t.dtype, device=t.device)])


def _per_row(t, data):
    """A per-segment (or per-row) 1-d tensor shaped to broadcast along data's other dims."""
    return t.view((-1,) + (1,) * (data.dim() - 1))


def _spread(ids, t, data):
    """Index by segment along dim 0 and broadcast to data's shape."""
    return t.index_select(0, ids).expand_as(data)


def _segment_reduce(data, reduce, *, lengths=None, indices=None, offsets=None, axis=0, unsafe=False,
                    initial=None):
    kind = _REDUCE.get(reduce)
    if kind is None or indices is not None or not data.is_floating_point():
        return NotImplemented
    lengths = _lengths_of(data, lengths, offsets, axis, unsafe)
    if lengths is None:
        return NotImplemented
    segments = lengths.numel()
    shape = (segments + 1,) + tuple(data.shape[1:])
    identity = {"sum": 0.0, "mean": 0.0, "prod": 1.0, "amax": -float("inf"), "amin": float("inf")}[kind]
    out = torch.full(shape, identity if initial is None else initial, dtype=data.dtype, device=data.device)
    ids = _segment_ids(lengths, data.shape[0])
    index = _per_row(ids, data).expand_as(data)
    out.scatter_reduce_(0, index, data, "sum" if kind == "mean" else kind, include_self=True)
    out = out[:segments]
    if kind == "mean":
        count = _per_row(lengths, data).to(data.dtype)
        empty = torch.full((), float("nan") if initial is None else initial, dtype=data.dtype, device=data.device)
        out = torch.where(count > 0, out / count.clamp(min=1), empty)
    return out


def _segment_reduce_backward(grad, output, data, reduce, *, lengths=None, offsets=None, axis=0, initial=None):
    kind = _REDUCE.get(reduce)
    if kind is None or not data.is_floating_point():
        return NotImplemented
    lengths = _lengths_of(data, lengths, offsets, axis, unsafe=True)
    if lengths is None:
        return NotImplemented
    ids = _segment_ids(lengths, data.shape[0])
    covered = _per_row(ids < lengths.numel(), data)
    grad, output, lengths = _with_rest(grad, 0), _with_rest(output, 0), _with_rest(lengths, 1)
    g, out = _spread(ids, grad, data), _spread(ids, output, data)
    zero = torch.zeros((), dtype=data.dtype, device=data.device)
    if kind == "sum":
        return g.clone()
    if kind == "mean":
        count = _per_row(lengths, data).to(data.dtype).clamp(min=1)
        return _spread(ids, grad / count, data).clone()
    index = _per_row(ids, data).expand_as(data)
    per_segment = torch.zeros_like(output)
    if kind in ("amax", "amin"):
        hit = (data == out) | (data.isnan() & out.isnan())
        counts = per_segment.scatter_add(0, index, hit.to(data.dtype))
        return torch.where(hit, g / _spread(ids, counts, data), zero)
    special = (data == 0) | data.isnan()  # prod: these get the product of the others
    rest = torch.full_like(output, 1.0 if initial is None else initial)
    rest = rest.scatter_reduce(0, index, torch.where(special, torch.ones_like(data), data), "prod")
    nans = per_segment.scatter_add(0, index, data.isnan().to(data.dtype))
    zeros = per_segment.scatter_add(0, index, (data == 0).to(data.dtype))
    other_nan = _spread(ids, nans, data) - data.isnan().to(data.dtype) > 0
    other_zero = _spread(ids, zeros, data) - (data == 0).to(data.dtype) > 0
    factor = torch.where(other_nan, torch.full_like(data, float("nan")), torch.where(other_zero, zero, zero + 1))
    return torch.where(covered, torch.where(special, g * _spread(ids, rest, data) * factor, g * out / data), zero)


OPS = {"segment_reduce": _segment_reduce, "_segment_reduce_backward": _segment_reduce_backward}
EAGER_ONLY = frozenset(OPS)
