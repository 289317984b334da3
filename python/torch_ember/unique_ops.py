"""torch.unique and unique_consecutive composed from native ops (eager compositions: each reads
its group count back from the device, a sync, as the CPU's result size needs)."""
import torch


def _group_counts(starts):
    """The length of each run that `starts` (true where a run begins) marks."""
    first = starts.nonzero().view(-1)
    return torch.diff(first, append=torch.tensor([starts.numel()], device=starts.device))


def _unique2(self, sorted=True, return_inverse=False, return_counts=False):
    """torch.unique over the flattened input by a stable sort: a value starts a group where it
    differs from its predecessor (so each NaN is its own group, as on the CPU). The output is
    sorted whatever `sorted` says, as the CPU's is. Reads the group count back (a sync)."""
    if self.dtype == torch.bool:  # sorted as bytes, every non-zero byte one
        values, inverse, counts = _unique2((self != 0).view(torch.uint8), sorted, return_inverse, return_counts)
        return values.view(torch.bool), inverse, counts
    dev = self.device
    flat = self.reshape(-1)
    n = flat.numel()
    none = torch.empty(0, dtype=torch.long, device=dev)
    if n == 0:
        return flat.clone(), none.reshape(self.shape) if return_inverse else none, none
    ordered, perm = torch.sort(flat, stable=True)
    starts = torch.ones(n, dtype=torch.bool, device=dev)
    starts[1:] = ordered[1:] != ordered[:-1]
    values = ordered[starts]
    inverse = counts = none
    if return_inverse:
        inverse = torch.empty(n, dtype=torch.long, device=dev)
        inverse[perm] = starts.cumsum(0) - 1
        inverse = inverse.reshape(self.shape)
    if return_counts:
        counts = _group_counts(starts)
    return values, inverse, counts


def _unique(self, sorted=True, return_inverse=False):
    """torch.unique's older overload (index_fill's backward reaches it): _unique2 without counts."""
    result = _unique2(self, sorted, return_inverse, False)
    return result if result is NotImplemented else result[:2]


def _unique_consecutive(self, return_inverse=False, return_counts=False, dim=None):
    """Runs of equal neighbours collapse to one (each NaN is its own run, as on the CPU): over the
    flattened input, or over whole slices along `dim`. Reads the run count back (a sync)."""
    if self.is_complex() or (dim is not None and (self.dim() == 0 or self.shape[dim] == 0)):
        return NotImplemented  # the CPU's errors and empty-slice rules
    dev = self.device
    none = torch.empty(0, dtype=torch.long, device=dev)
    if dim == 0 and self.dim() == 1:
        dim = None  # the CPU's own shortcut (dim=-1 takes the slice path)
    if dim is None:
        x = self.reshape(-1)
        rows = x.unsqueeze(1)
    else:
        x = self.movedim(dim, 0)
        rows = x.reshape(x.shape[0], -1)
    n = x.shape[0]
    if n == 0:
        return x.clone(), none.reshape(self.shape) if return_inverse else none, none
    starts = torch.ones(n, dtype=torch.bool, device=dev)
    starts[1:] = (rows[1:] != rows[:-1]).any(1)
    if dim is not None:  # the CPU gives both whatever the flags ask
        return x[starts].movedim(0, dim).contiguous(), starts.cumsum(0) - 1, _group_counts(starts)
    inverse = (starts.cumsum(0) - 1).reshape(self.shape) if return_inverse else none
    return x[starts], inverse, _group_counts(starts) if return_counts else none


def _unique_dim(self, dim, sorted=True, return_inverse=False, return_counts=False):
    """torch.unique(x, dim=d): the distinct slices along `d` in lexicographic order (whatever
    `sorted` says, as on the CPU), by stable sorts of the slices' elements from the last to the
    first (deduplicating edge lists: unique(edge_index, dim=1)). Empty inputs, NaN (which never
    equals itself) and complex values take the CPU's path."""
    if self.is_complex() or self.dim() == 0 or self.numel() == 0:
        return NotImplemented
    if self.is_floating_point() and bool(self.isnan().any()):
        return NotImplemented
    x = self.movedim(dim, 0)
    rows = x.reshape(x.shape[0], -1)
    keys = (rows != 0).view(torch.uint8) if rows.dtype == torch.bool else rows
    perm = torch.arange(rows.shape[0], device=self.device)
    for col in range(keys.shape[1] - 1, -1, -1):
        perm = perm[torch.sort(keys[perm, col], stable=True).indices]
    ordered = rows[perm]
    starts = torch.ones(rows.shape[0], dtype=torch.bool, device=self.device)
    starts[1:] = (ordered[1:] != ordered[:-1]).any(1)
    inverse = torch.empty(rows.shape[0], dtype=torch.long, device=self.device)
    inverse[perm] = starts.cumsum(0) - 1
    values = x[perm[starts]].movedim(0, dim).contiguous()
    return values, inverse, _group_counts(starts)
