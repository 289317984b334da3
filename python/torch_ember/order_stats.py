"""Order statistics composed from a stable sort (median, nanmedian, kthvalue, mode): every
value and index is read from the sorted order, so ties resolve the same way on every call."""
import torch


def _select_sorted(self, dim, keepdim, position):
    """(values, indices) at `position` (an int, or a tensor of positions per row) along `dim`
    of a stable ascending sort: NaN sorts last, and ties keep their order, which is the index
    the CPU's median reports."""
    if self.dim() == 0:
        return self.clone(), torch.zeros((), dtype=torch.long, device=self.device)
    ordered = torch.sort(self, dim=dim, stable=True)
    if isinstance(position, int):
        # Copies: an op that is not a view returns tensors of their own, not views of the sort's.
        values, indices = ordered.values.select(dim, position).clone(), ordered.indices.select(dim, position).clone()
    else:
        pos = position.unsqueeze(dim)
        values = ordered.values.gather(dim, pos).squeeze(dim)
        indices = ordered.indices.gather(dim, pos).squeeze(dim)
    if keepdim:
        values, indices = values.unsqueeze(dim), indices.unsqueeze(dim)
    return values, indices


def _reducible(self, dim):
    return self.dtype != torch.bool and self.numel() > 0 and (self.dim() == 0 or self.size(dim) > 0)


def _median_dim(self, dim, keepdim=False):
    """torch.median along a dim: the lower middle of each row, NaN (at its first index) in a
    row holding one."""
    if not _reducible(self, dim):
        return NotImplemented  # the CPU's error
    n = self.size(dim) if self.dim() else 1
    values, indices = _select_sorted(self, dim, keepdim, (n - 1) // 2)
    if self.is_floating_point() and self.dim():
        nan = torch.isnan(self)
        first_nan = nan.to(torch.uint8).argmax(dim, keepdim=keepdim)
        has_nan = nan.any(dim, keepdim=keepdim)
        values = torch.where(has_nan, torch.full_like(values, float("nan")), values)
        indices = torch.where(has_nan, first_nan, indices)
    return values, indices


def _nanmedian_dim(self, dim, keepdim=False):
    """torch.nanmedian along a dim: the lower middle of each row's values that are not NaN
    (NaN sorts after them); NaN at index 0 for a row of NaN only."""
    if not self.is_floating_point():
        return _median_dim(self, dim, keepdim)
    if not _reducible(self, dim):
        return NotImplemented
    if self.dim() == 0:
        return _select_sorted(self, dim, keepdim, 0)
    count = (~torch.isnan(self)).sum(dim)
    return _select_sorted(self, dim, keepdim, (count - 1).clamp(min=0) // 2)


def _kthvalue(self, k, dim=-1, keepdim=False):
    """torch.kthvalue: the k-th smallest of each row (NaN counts as the largest). Among equal
    values the index is the first in sorted order, one of those the CPU may report."""
    n = self.size(dim) if self.dim() else 1
    if not _reducible(self, dim) or not 1 <= k <= n:
        return NotImplemented
    return _select_sorted(self, dim, keepdim, k - 1)


def _median(self):
    """torch.median of all elements: the median of the flattened tensor along its one dim."""
    r = _median_dim(self.reshape(-1), 0)
    return r if r is NotImplemented else r[0]


def _nanmedian(self):
    """torch.nanmedian of all elements, likewise."""
    r = _nanmedian_dim(self.reshape(-1), 0)
    return r if r is NotImplemented else r[0]


def _mode(self, dim=-1, keepdim=False):
    """torch.mode: each row's most frequent value, the smallest among equally frequent ones, and
    the last index holding it. A value's count is the length of its run in the stable sort; NaN
    differs from itself, so each NaN counts once (the CPU's count of NaN depends on where its
    unstable sort happens to leave them)."""
    if self.dim() and self.size(dim) == 0:
        return NotImplemented  # the CPU's error
    if self.dim() == 0 or self.numel() == 0:
        return _select_sorted(self, dim, keepdim, 0) if self.dim() == 0 else NotImplemented
    if self.dtype == torch.bool:  # sorted and compared as bytes, every non-zero byte one
        values, indices = _mode((self != 0).view(torch.uint8), dim, keepdim)
        return values.view(torch.bool), indices
    ordered, perm = torch.sort(self, dim=dim, stable=True)
    n = self.size(dim)
    # Functional (no in-place writes): compiled graphs use this composition too.
    starts = torch.cat([torch.ones_like(ordered.narrow(dim, 0, 1), dtype=torch.bool),
                        ordered.narrow(dim, 1, n - 1) != ordered.narrow(dim, 0, n - 1)], dim)
    shape = [1] * self.dim()
    shape[dim] = n
    pos = torch.arange(n, device=self.device).view(shape)
    run_start = torch.where(starts, pos, 0).cummax(dim).values
    # The count so far reaches the largest count first at the end of the smallest value's run.
    end = (pos - run_start).argmax(dim, keepdim=True)
    values, indices = ordered.gather(dim, end), perm.gather(dim, end)
    if not keepdim:
        values, indices = values.squeeze(dim), indices.squeeze(dim)
    return values, indices
