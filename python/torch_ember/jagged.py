"""Conversions between a jagged nested tensor's packed values and a padded batch, composed from
index ops: `nt.to_padded_tensor(...)`, `torch.nested.nested_tensor_from_padded`, and the autograd
formulas of both (each is the other's backward), eager and compiled.

`offsets` holds the B + 1 boundaries of the B sequences in the packed dimension 0 of `values`.
Only one ragged dimension exists today, as in PyTorch's own kernels."""
import torch


def _jagged_to_padded_dense(values, offsets, max_lengths, padding_value=0.0):
    """(total, *rest) -> (B, max_length, *rest): sequence b's rows first, then padding_value; a
    sequence longer than max_length is cut, as the CPU and CUDA kernels do."""
    if len(offsets) != 1 or len(max_lengths) != 1:
        return NotImplemented
    (off,), (length,) = offsets, max_lengths
    pos = torch.arange(length, device=values.device)
    keep = pos < (off[1:] - off[:-1])[:, None]  # (B, L)
    shape = (*keep.shape, *values.shape[1:])
    # The CPU kernel converts padding_value unchecked, as a copy would (-1.0 in uint8 is 255).
    fill = values.new_full((), padding_value, dtype=torch.float64).to(values.dtype)
    if values.shape[0] == 0:
        return fill.expand(shape).clone()
    rows = torch.where(keep, off[:-1, None] + pos, 0)
    padded = values.index_select(0, rows.reshape(-1)).reshape(shape)
    keep = keep.reshape(*keep.shape, *([1] * (values.dim() - 1)))
    return torch.where(keep, padded, fill)


def _padded_dense_to_jagged(padded, offsets, total_L=None):
    """(B, L, *rest) -> (total, *rest): row t of the result is position t - offsets[b] of the
    sequence b that holds it. Offsets that do not fit the padded batch or total_L raise, as on the
    CPU, at the next synchronizing call (checked on the device without waiting); the gather
    stays inside the batch meanwhile."""
    if len(offsets) != 1 or padded.dim() < 2:
        return NotImplemented
    (off,) = offsets
    if off.numel() > 1:
        torch._assert_async((off[1:] - off[:-1]).le(padded.shape[1]).all(),
                            "_padded_dense_to_jagged_forward(): found a batch item longer than the max length "
                            "of the padded input")
    if total_L is not None:
        torch._assert_async(off[-1].eq(total_L), "_padded_dense_to_jagged_forward(): final offset should match "
                            "total_L value")
    total = int(off[-1]) if total_L is None else total_L  # the CPU kernel also reads it back
    t = torch.arange(total, device=padded.device)
    seq = torch.searchsorted(off[1:], t, right=True).clamp(max=padded.shape[0] - 1)
    pos = (t - off.index_select(0, seq)).clamp(0, padded.shape[1] - 1)
    return padded.flatten(0, 1).index_select(0, seq * padded.shape[1] + pos)


OPS = {
    "_jagged_to_padded_dense_forward": _jagged_to_padded_dense,
    "_padded_dense_to_jagged_forward": _padded_dense_to_jagged,
}
