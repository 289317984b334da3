"""Ember's own compositions from native ops, for ops that torch._decomp has no decomposition for
(or whose reference form calls the op itself): eager_decompositions.py registers each of OWN as
the op's ember kernel, and compiled graphs use the same functions (compile/decompositions.py),
except the EAGER_ONLY ones.

Each function returns NotImplemented for arguments it does not serve the way the CPU kernel
would; the caller then takes the visible CPU fallback.
"""
import math

import torch

from .resample_aa import ops as _resample_aa_ops
from .fake_quantize import EAGER_ONLY as _FAKE_QUANTIZE_EAGER_ONLY, OPS as _fake_quantize_ops
from .float_bits import _frexp, _ldexp, _ldexp_, _signbit
from .fused_optim import EAGER_ONLY as _FUSED_OPTIM_EAGER_ONLY, OPS as _fused_optim_ops
from .jagged import OPS as _jagged_ops
from .linspace import linspace_like_cpu
from .padding import ops as _padding_ops
from .scaled_mm import OPS as _scaled_mm_ops
from .segment_reduce import EAGER_ONLY as _SEGMENT_EAGER_ONLY, OPS as _segment_ops
from .order_stats import _kthvalue, _median, _median_dim, _mode, _nanmedian, _nanmedian_dim
from .unique_ops import _unique, _unique2, _unique_consecutive, _unique_dim


def _shrink_backward(grad, self, lambd):
    return torch.where(self.abs() > lambd, grad, torch.zeros((), dtype=grad.dtype, device=grad.device))


def _masked_scatter_(self, mask, source):
    """self's positions where `mask` (broadcast to self) is true, in row-major order, take
    source's first elements (masked_select's backward runs this)."""
    if mask.dtype != torch.bool or source.dtype != self.dtype or source.device != self.device:
        return NotImplemented
    positions = mask.expand(self.shape).reshape(-1).nonzero().squeeze(1)  # waits for the count
    n = positions.numel()
    if source.numel() < n:
        raise RuntimeError("masked_scatter: expected source to have at least as many elements as ones in mask")
    values = source.reshape(-1)[:n]
    if self.is_contiguous():
        self.view(-1).index_put_((positions,), values)
        return self
    dense = self.contiguous()
    dense.view(-1).index_put_((positions,), values)
    return self.copy_(dense)


def _bernoulli_tensor_(self, p, generator=None):
    """self = (U < p) per element with U uniform on [0, 1): a draw from Bernoulli(p) (a different
    stream of random numbers than the CPU's, as with every ember random op)."""
    if p.is_complex() or p.device != self.device:
        return NotImplemented
    torch._assert_async(((p >= 0) & (p <= 1)).all(), "bernoulli_: p must be in [0, 1]")
    u = torch.empty(self.shape, dtype=p.dtype if p.is_floating_point() else torch.float32,
                    device=self.device).uniform_(generator=generator)
    return self.copy_(u < p)


def _searchsorted(sorted_sequence, values, *, out_int32=False, right=False, side=None, sorter=None):
    """One sorted boundary vector: searchsorted is bucketize with the arguments swapped. One per
    row (NeRF's hierarchical sampling): each position counts its row's boundaries b with
    not (v <= b) (left) or not (v < b) (right), the CPU's binary-search tests, so a NaN value
    lands at the end as there."""
    if side is not None and (side not in ("left", "right") or (right and side == "left")):
        return NotImplemented  # the CPU's error: a misspelled side must not search from the left
    right = right or side == "right"
    if values.dtype != sorted_sequence.dtype:
        return NotImplemented
    if sorter is not None:
        # The sorter's order is the sorted sequence (positions count in that order); the CPU
        # words the errors of a sorter of the wrong shape, dtype or device.
        if (sorter.dtype != torch.int64 or sorter.shape != sorted_sequence.shape
                or sorter.device != sorted_sequence.device):
            return NotImplemented
        # The CPU's "sorter index out of range", raised at the call: a host read, so in eager mode
        # only (a traced graph has no values to read; there the gather checks on the device).
        m = sorted_sequence.shape[-1]
        if type(sorter) is torch.Tensor and sorter.numel() and bool(((sorter < 0) | (sorter >= m)).any()):
            return NotImplemented
        sorted_sequence = sorted_sequence.gather(-1, sorter) if sorter.numel() else sorted_sequence
    if sorted_sequence.numel() == 0:
        if sorted_sequence.dim() != 1:
            return NotImplemented  # the CPU's shape checks
        return torch.zeros(values.shape, dtype=torch.int32 if out_int32 else torch.int64, device=values.device)
    if sorted_sequence.dim() == 1:
        return torch.bucketize(values, sorted_sequence, out_int32=out_int32, right=right)
    rows, m = sorted_sequence.shape[:-1], sorted_sequence.shape[-1]
    if values.dim() != sorted_sequence.dim() or values.shape[:-1] != rows or values.numel() * m > 1 << 27:
        return NotImplemented  # the CPU's error, or a comparison table too large to build
    seq, v = sorted_sequence.unsqueeze(-2), values.unsqueeze(-1)
    below = ((v < seq) if right else (v <= seq)).logical_not()  # functional: compiled graphs use it too
    return below.sum(-1, dtype=torch.int32 if out_int32 else torch.int64)



def _remainder_scalar_tensor(self, other):
    """remainder(Scalar, Tensor) as the CPU computes it: the scalar first rounded to the result's
    dtype. PyTorch's reference decomposition computes float16/bfloat16 in float32 from the
    unrounded scalar, which was up to 3% off the CPU's result."""
    return torch.remainder(torch.full((), self, dtype=torch.result_type(self, other), device=other.device), other)


def _int_mm(self, mat2):
    """int8 x int8 -> int32 (torchao's dynamic int8 quantization): the int32 product is exact
    and wraps as the CPU kernel's int32 accumulation does."""
    if self.dtype != torch.int8 or mat2.dtype != torch.int8 or self.dim() != 2 or mat2.dim() != 2:
        return NotImplemented  # the CPU's error
    return torch.mm(self.to(torch.int32), mat2.to(torch.int32))


def _cdist_forward(x1, x2, p, compute_mode):
    """Pairwise p-norm distances of x1 [.., P, M] and x2 [.., R, M]. For p = 2 the CPU's choice
    of form: through a matrix product when compute_mode asks for it (or, by default, past 25
    rows), directly from the differences otherwise."""
    if x1.dim() < 2 or x2.dim() < 2 or x1.shape[-1] != x2.shape[-1] or x2.dtype != x1.dtype or p < 0:
        return NotImplemented
    batch = torch.broadcast_shapes(x1.shape[:-2], x2.shape[:-2])
    a, b = x1.expand(*batch, *x1.shape[-2:]), x2.expand(*batch, *x2.shape[-2:])
    if p == 2 and (compute_mode == 1 or (compute_mode in (None, 0) and (a.shape[-2] > 25 or b.shape[-2] > 25))):
        an, bn = a.square().sum(-1, keepdim=True), b.square().sum(-1, keepdim=True)
        lhs = torch.cat([a * -2, an, torch.ones_like(an)], -1)
        rhs = torch.cat([b, torch.ones_like(bn), bn], -1)
        return (lhs @ rhs.transpose(-2, -1)).clamp_min(1e-30).sqrt()
    diff = (a[..., :, None, :] - b[..., None, :, :]).abs()
    if p == 0:
        return (diff != 0).sum(-1).to(x1.dtype)
    if p == float("inf"):
        return diff.amax(-1) if diff.shape[-1] else diff.sum(-1)
    if p == 1:
        return diff.sum(-1)
    if p == 2:
        return diff.square().sum(-1).sqrt()
    return diff.pow(p).sum(-1).pow(1 / p)


def _cdist_backward(grad, x1, x2, p, cdist):
    """The gradient for x1 of _cdist_forward (autograd asks for x2's with the roles swapped)."""
    if x1.dim() < 2 or x2.dim() < 2 or p < 0:
        return NotImplemented
    batch = cdist.shape[:-2]
    a, b = x1.expand(*batch, *x1.shape[-2:]), x2.expand(*batch, *x2.shape[-2:])
    diff = a[..., :, None, :] - b[..., None, :, :]
    g, d = grad[..., None], cdist[..., None]
    zero = torch.zeros((), dtype=diff.dtype, device=diff.device)
    if p == 0:
        return torch.zeros_like(x1)
    if p == 1:
        terms = g * diff.sign()
    elif p == 2:
        terms = torch.where(d == 0, zero, g * diff / d)
    elif p == float("inf"):
        terms = g * diff.sign() * (diff.abs() == d)
    elif p < 2:
        terms = torch.where((d == 0) | (diff == 0), zero, g * diff.sign() * diff.abs().pow(p - 1) / d.pow(p - 1))
    else:
        terms = torch.where(d == 0, zero, g * diff * diff.abs().pow(p - 2) / d.pow(p - 1))
    return terms.sum(-2).sum_to_size(x1.shape)


def _bucketize(self, boundaries, *, out_int32=False, right=False):
    """torch._decomp's bucketize, except over no boundaries (it returns the input's dtype there;
    the CPU returns indices)."""
    if boundaries.numel() == 0 or self.dtype == torch.bool or boundaries.dtype == torch.bool:
        return NotImplemented
    if self.dim() == 0:  # one element as a vector: its 0-d positions would index as Python ints (.item())
        return _bucketize(self.reshape(1), boundaries, out_int32=out_int32, right=right).reshape(())
    from torch._decomp import decomposition_table

    return decomposition_table[torch.ops.aten.bucketize.Tensor](self, boundaries, out_int32=out_int32, right=right)


def _transformer_encoder_layer_fwd(src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias,
                                   use_gelu, norm_first, eps, norm_weight_1, norm_bias_1, norm_weight_2, norm_bias_2,
                                   ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2, mask=None, mask_type=None):
    """nn.TransformerEncoderLayer's inference fast path: self-attention, residual, norm and the
    feed-forward block, in PyTorch's order. Its attention reads the (merged) mask as the CPU
    kernel does: any nonzero entry masks a key out; type 1 is a [B, L] key padding mask."""
    import torch.nn.functional as F

    if src.dim() != 3 or src.is_nested or (mask is not None and mask.dim() not in (2, 3, 4)):
        return NotImplemented
    if src.numel() == 0:
        return src.clone()
    b, length, e = src.shape
    heads = num_heads
    norm = lambda t, w, bias: F.layer_norm(t, (embed_dim,), w, bias, eps)  # noqa: E731
    x = norm(src, norm_weight_1, norm_bias_1) if norm_first else src
    q, k, v = F.linear(x, qkv_weight, qkv_bias).view(b, length, 3, heads, e // heads).permute(2, 0, 3, 1, 4)
    keep = None
    if mask is not None:
        masked = mask if mask.dtype == torch.bool else mask != 0
        if mask_type == 1 or (mask.dim() == 2 and mask.shape == (b, length) and mask_type != 0):
            masked = masked.view(b, 1, 1, length)
        keep = masked.logical_not()
    att = F.scaled_dot_product_attention(q, k, v, attn_mask=keep).transpose(1, 2).reshape(b, length, e)
    x = F.linear(att, proj_weight, proj_bias) + src
    if not norm_first:
        x = norm(x, norm_weight_1, norm_bias_1)
    h = norm(x, norm_weight_2, norm_bias_2) if norm_first else x
    h = torch.ops.aten._addmm_activation(ffn_bias_1, h.reshape(b * length, e), ffn_weight_1.t(), use_gelu=use_gelu)
    x = F.linear(h.view(b, length, -1), ffn_weight_2, ffn_bias_2) + x
    return x if norm_first else norm(x, norm_weight_2, norm_bias_2)


def _exponential_(self, lambd=1.0, *, generator=None):
    """-log(1 - U) / lambd with U uniform on [0, 1) (PyTorch's reference form rejects a
    generator argument), computed in double and rounded once, so a bfloat16 or float16 result
    keeps the distribution's tail instead of stopping where U runs out of bits."""
    if lambd <= 0:
        return NotImplemented  # the CPU's error
    u = torch.empty(self.shape, dtype=torch.float64, device=self.device).uniform_(generator=generator)
    return self.copy_(u.neg_().log1p_().div_(-lambd))


def _uniform_double(self, generator):
    return torch.empty(self.shape, dtype=torch.float64, device=self.device).uniform_(generator=generator)


def _cauchy_(self, median=0.0, sigma=1.0, *, generator=None):
    """median + sigma * tan(pi * (U - 1/2)), in double and rounded once."""
    if not self.is_floating_point() or sigma <= 0:
        return NotImplemented  # the CPU's error
    u = _uniform_double(self, generator)
    return self.copy_(u.sub_(0.5).mul_(math.pi).tan_().mul_(sigma).add_(median))


def _log_normal_(self, mean=1.0, std=2.0, *, generator=None):
    """exp(mean + std * N(0, 1)), in double and rounded once."""
    if not self.is_floating_point() or std <= 0:
        return NotImplemented
    n = torch.empty(self.shape, dtype=torch.float64, device=self.device).normal_(generator=generator)
    return self.copy_(n.mul_(std).add_(mean).exp_())


def _geometric_(self, p, *, generator=None):
    """The number of Bernoulli(p) trials up to the first success: ceil(log(1 - U) / log(1 - p)),
    at least 1."""
    if not 0 < p < 1 or self.dtype == torch.bool:
        return NotImplemented
    u = _uniform_double(self, generator)
    return self.copy_(u.neg_().log1p_().div_(math.log1p(-p)).ceil_().clamp_(min=1))


def _addbmm(self, batch1, batch2, *, beta=1, alpha=1):
    """beta * self + alpha * sum_b batch1[b] @ batch2[b], as one addmm of batch1 laid out as
    [n, b*m] with batch2 as [b*m, p]. beta = 0 ignores self (NaN included), as on the CPU."""
    if not batch1.is_floating_point() or batch1.dim() != 3 or batch2.dim() != 3 or \
            batch1.shape[0] != batch2.shape[0] or batch1.shape[2] != batch2.shape[1] or \
            batch1.dtype != batch2.dtype or self.dtype != batch1.dtype:
        return NotImplemented  # the CPU's errors
    b, n, m = batch1.shape
    # addmm scales and adds in the product's float accumulator and rounds once, as the CPU does.
    return torch.addmm(self, batch1.permute(1, 0, 2).reshape(n, b * m), batch2.reshape(b * m, batch2.shape[2]),
                       beta=beta, alpha=alpha)


def _multinomial(self, num_samples, replacement=False, *, generator=None):
    """Draws by inverse CDF (with replacement, or one draw) and by the exponential-race form of
    the Gumbel top-k trick (without replacement: the k largest p_i / E_i, E_i ~ Exp(1), are an
    exact weighted draw without replacement). Invalid distributions fail at the next
    synchronize, as CUDA's device-side checks do; the CPU fails at once."""
    if self.dim() not in (1, 2) or num_samples <= 0 or self.shape[-1] == 0:
        return NotImplemented  # the CPU's errors
    k = self.shape[-1]
    if k > 2**24:
        raise RuntimeError("number of categories cannot exceed 2^24")
    if not replacement and num_samples > k:
        raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without replacement")
    p = self if self.dim() == 2 else self[None]
    p = p.float() if p.dtype in (torch.float16, torch.bfloat16) else p
    torch._assert_async(((p >= 0) & torch.isfinite(p)).all(),
                        "probability tensor contains either `inf`, `nan` or element < 0")
    total = p.sum(-1, keepdim=True)
    torch._assert_async((total > 0).all(), "invalid multinomial distribution (sum of probabilities <= 0)")
    if replacement or num_samples == 1:
        cdf = (p / total).cumsum(-1)
        u = torch.empty(p.shape[0], num_samples, dtype=p.dtype, device=p.device).uniform_(generator=generator)
        idx = torch.searchsorted(cdf, u, right=True)  # how many cdf values are <= u
        # Rounding can leave cdf[-1] just under u: take the last category with mass instead.
        last = torch.where(p > 0, torch.arange(k, device=p.device), 0).amax(-1, keepdim=True)
        idx = torch.minimum(idx, last)
    else:
        race = p / _exponential_(torch.empty_like(p), generator=generator)
        idx = race.topk(num_samples, -1).indices
    return idx if self.dim() == 2 else idx[0]


def _equal(self, other):
    """torch.equal: same shape and every element equal after type promotion, as the CPU compares
    (NaN never is)."""
    if self.shape != other.shape:
        return False
    return self.numel() == 0 or bool((self == other).all())


def _nonzero_static(self, *, size, fill_value=-1):
    """nonzero's first `size` rows, padded with fill_value. Reads the count back (a sync)."""
    found = self.nonzero()
    if found.shape[0] >= size:
        return found[:size].clone()
    pad = torch.full((size - found.shape[0], found.shape[1]), fill_value, dtype=torch.long, device=self.device)
    return torch.cat([found, pad])


def _repeat_interleave_tensor(repeats, *, output_size=None):
    """The indices 0..len(repeats)-1, index i repeated repeats[i] times: position p belongs to
    the first i whose running total exceeds p. Reads the total back (a sync)."""
    if repeats.dim() != 1 or repeats.dtype not in (torch.int32, torch.int64):
        return NotImplemented  # the CPU's errors
    if repeats.numel() and bool((repeats < 0).any()):
        raise RuntimeError("repeats can not be negative")
    totals = repeats.cumsum(0)
    total = int(totals[-1]) if repeats.numel() else 0
    if output_size is not None and output_size != total:
        raise RuntimeError("allocated size does not match required size")
    if total == 0:
        return torch.empty(0, dtype=repeats.dtype, device=repeats.device)
    positions = torch.arange(total, device=repeats.device)
    return torch.searchsorted(totals, positions, right=True).to(repeats.dtype)


def _normal(mean, std, shape, dtype, generator):
    """mean + std * N(0, 1), the draws in `dtype` from the device's generator."""
    if isinstance(std, torch.Tensor):
        if std.numel() and not bool((std >= 0).all()):
            raise RuntimeError("normal expects all elements of std >= 0.0")
    elif std < 0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
    dev = (mean if isinstance(mean, torch.Tensor) else std).device
    z = torch.empty(shape, dtype=dtype, device=dev).normal_(generator=generator)
    return z.mul_(std).add_(mean)


def _normal_tensor_tensor(mean, std, *, generator=None):
    if not (mean.dtype.is_floating_point and std.dtype.is_floating_point):
        return NotImplemented
    return _normal(mean, std, torch.broadcast_shapes(mean.shape, std.shape),
                   torch.promote_types(mean.dtype, std.dtype), generator)


def _normal_tensor_float(mean, std=1.0, *, generator=None):
    return _normal(mean, std, mean.shape, mean.dtype, generator)


def _normal_float_tensor(mean, std, *, generator=None):
    return _normal(mean, std, std.shape, std.dtype, generator)


def _max_pool_backward(grad, self, indices):
    """The gradient of a max pooling with indices (3-d, plain or adaptive): each output's
    gradient added at the input position its index names, within its (N, C) plane, in output
    order as the CPU kernel adds them."""
    if grad.dim() not in (4, 5) or self.dim() != grad.dim() or indices.shape != grad.shape:
        return NotImplemented
    planes = self.shape[:-3]
    out = torch.zeros(planes + (self.shape[-3] * self.shape[-2] * self.shape[-1],), dtype=grad.dtype,
                      device=grad.device)
    # Functional: compiled graphs trace this decomposition too, and their graphs must be.
    out = out.scatter_add(-1, indices.reshape(planes + (-1,)), grad.reshape(planes + (-1,)))
    return out.reshape(self.shape)


def _max_pool3d_backward(grad, self, kernel_size, stride, padding, dilation, ceil_mode, indices):
    return _max_pool_backward(grad, self, indices)


def _put_(self, index, source, accumulate=False):
    """put_ as index_put_ on the flattened tensor (negative indices count from the end)."""
    if not self.is_contiguous() or index.dtype != torch.long or source.dtype != self.dtype:
        return NotImplemented
    n = self.numel()
    if index.numel() and bool(((index < -n) | (index >= n)).any()):
        bad = index[(index < -n) | (index >= n)][0].item()
        raise IndexError(f"out of range: tried to access index {bad} on a tensor of {n} elements.")
    self.view(-1).index_put_((index.reshape(-1),), source.reshape(-1), accumulate=accumulate)
    return self


def _nan_ignoring(pick):
    """fmax / fmin: the other value where one is NaN, else maximum / minimum (PyTorch's prims
    forms call the op itself again)."""
    def run(a, b, *, out=None):
        if not isinstance(b, torch.Tensor):
            return NotImplemented
        return torch.where(torch.isnan(b), a, torch.where(torch.isnan(a), b, pick(a, b)))
    return run


def _with_outs(fn, names=("values", "indices")):
    """The out= form of an op with two results (values=/indices=, mantissa=/exponent=); the CPU
    decides any out of another dtype than the result's."""
    def run(*args, **kwargs):
        outs = [kwargs.pop(n, None) for n in names]
        r = fn(*args, **kwargs)
        if r is NotImplemented or outs[0] is None:
            return r
        if any(o.dtype != res.dtype for o, res in zip(outs, r)):
            return NotImplemented
        for out, res in zip(outs, r):
            out.resize_(res.shape)
            out.copy_(res)
        return tuple(outs)
    return run


def _cubic_taps(in_size, out_size, align_corners, scale, device, dtype):
    """Per output position along one axis: the 4 clamped source indices and cubic weights
    (A = -0.75) of PyTorch's bicubic upsampling."""
    if align_corners:
        ratio = (in_size - 1) / (out_size - 1) if out_size > 1 else 0.0
        x = torch.arange(out_size, device=device, dtype=dtype) * ratio
    else:
        ratio = 1.0 / scale if scale is not None and scale > 0 else in_size / out_size
        x = (torch.arange(out_size, device=device, dtype=dtype) + 0.5) * ratio - 0.5
    x0 = torch.floor(x)
    t = x - x0
    a = -0.75

    def near(v):  # |v| <= 1
        return ((a + 2) * v - (a + 3)) * v * v + 1

    def far(v):  # 1 < |v| < 2
        return ((a * v - 5 * a) * v + 8 * a) * v - 4 * a

    weights = (far(t + 1), near(t), near(1 - t), far(2 - t))
    base = x0.long()
    taps = [(base - 1 + k).clamp_(0, in_size - 1) for k in range(4)]
    return taps, weights


def _upsample_bicubic2d_backward(grad_output, output_size, input_size, align_corners, scales_h=None,
                                 scales_w=None):
    """The adjoint of bicubic upsampling (ViT position-embedding interpolation): each output's
    gradient goes back to its 4 x 4 source taps with the same weights, along the width and then
    along the height (the weights are separable), summed with index_add."""
    if not grad_output.is_floating_point() or grad_output.dim() != 4:
        return NotImplemented
    n, c, ih, iw = input_size
    oh, ow = output_size
    acc = grad_output.dtype if grad_output.dtype in (torch.float32, torch.float64) else torch.float32
    g = grad_output.to(acc)
    xs, wx = _cubic_taps(iw, ow, align_corners, scales_w, g.device, acc)
    ys, wy = _cubic_taps(ih, oh, align_corners, scales_h, g.device, acc)
    rows = torch.zeros(n, c, oh, iw, device=g.device, dtype=acc)
    for idx, w in zip(xs, wx):
        rows.index_add_(3, idx, g * w)
    grad_input = torch.zeros(n, c, ih, iw, device=g.device, dtype=acc)
    for idx, w in zip(ys, wy):
        grad_input.index_add_(2, idx, rows * w[:, None])
    return grad_input.to(grad_output.dtype)


def _into_range_out(values, out):
    """A linspace/logspace result into out=: an out= that already holds `steps` elements keeps
    its shape and strides and is filled in row-major order, as on the CPU; another is resized."""
    if out.numel() != values.numel():
        out.resize_(values.shape)
    return out.copy_(values.view(out.shape))


def _range_out(op):
    """linspace.out / logspace.out from torch._decomp's functional form of `op`."""
    def run(start, end, steps, *rest, out):
        from torch._decomp import decomposition_table

        start, end = (int(v) if isinstance(v, bool) else v for v in (start, end))  # bool ends count as 0/1
        if any(isinstance(v, torch.Tensor) for v in (start, end)):
            return NotImplemented
        values = linspace_like_cpu(start, end, steps, out.dtype, out.device) if op is torch.ops.aten.linspace.default \
            else None
        if values is None:
            values = decomposition_table[op](start, end, steps, *rest, dtype=out.dtype, device=out.device)
        return _into_range_out(values, out)
    return run


def _multi_margin_loss(self, target, p=1, margin=1, weight=None, reduction=1):
    """torch._decomp's form, with the CPU's shape for a 0-d target and reduction="none": 0-d."""
    from torch._decomp import decomposition_table

    loss = decomposition_table[torch.ops.aten.multi_margin_loss.default](self, target, p, margin, weight, reduction)
    return loss.reshape(()) if reduction == 0 and target.dim() == 0 else loss


def _glu_halves(x, dim):
    dim = dim % x.dim()
    n = x.shape[dim] // 2
    return x.narrow(dim, 0, n), x.narrow(dim, n, n), dim


def _glu_jvp(glu, x, dx, dim):
    """Forward-mode derivative of glu(x) = a * sigmoid(b) along dx = (da, db)."""
    _, b, dim = _glu_halves(x, dim)
    da, db, _ = _glu_halves(dx, dim)
    s = torch.sigmoid(b)
    return da * s + glu * (1 - s) * db


def _glu_backward_jvp(grad_x, grad_glu, x, dgrad_glu, dx, dim):
    """Forward-mode derivative of glu's backward, (g s, g a s (1 - s)), along (dgrad_glu, dx)."""
    a, b, dim = _glu_halves(x, dim)
    da, db, _ = _glu_halves(dx, dim)
    s = torch.sigmoid(b)
    ds = s * (1 - s)
    d_first = dgrad_glu * s + grad_glu * ds * db
    d_second = (dgrad_glu * a + grad_glu * da) * ds + grad_glu * a * ds * (1 - 2 * s) * db
    return torch.cat([d_first, d_second], dim)


def _index_fill_(op):
    """index_fill_ also through broadcast (stride-0) dims of self, as the CPU allows with a
    deprecation warning: the fill runs on the view with those dims collapsed, where each memory
    element appears once (filled whole along `dim` when `dim` itself is one of them)."""
    def run(self, dim, index, value):
        from torch._decomp import decomposition_table

        if not self.is_complex() and (isinstance(value, complex) or (isinstance(value, torch.Tensor) and value.is_complex())):
            raise RuntimeError("index_fill_(): Converting complex Scalar to non-complex type is not supported")
        shared = [d for d in range(self.dim()) if self.stride(d) == 0 and self.shape[d] > 1]
        if not shared:
            return decomposition_table[op](self, dim, index, value)
        import warnings

        warnings.warn("Use of index_fill_ on expanded tensors is deprecated. Please clone() the tensor before "
                      "performing this operation. This also applies to advanced indexing e.g. tensor[mask] = scalar")
        dim = dim % self.dim()
        n = self.shape[dim]
        base = self.as_strided([1 if d in shared else s for d, s in enumerate(self.shape)], self.stride(),
                               self.storage_offset())
        if dim in shared:
            torch._assert_async(((index >= -n) & (index < n)).all(), "index_fill_(): index out of range")
            index = torch.zeros_like(index)
        decomposition_table[op](base, dim, index, value)
        return self
    return run


def _is_set_to(self, tensor):
    """Same storage, offset, sizes and strides (the CPU fallback would compare copies)."""
    return (self.device == tensor.device and self.untyped_storage().data_ptr() == tensor.untyped_storage().data_ptr()
            and self.storage_offset() == tensor.storage_offset() and self.shape == tensor.shape
            and self.stride() == tensor.stride())


def _refusing_negative_slope_from_result(op, name, slope_index, flag_index):
    """leaky_relu_ / elu_ (celu_) backward from the result: with a negative slope the result does
    not tell which side of 0 the input was on, so the CPU's meta function refuses it, where
    torch._decomp's formula (used otherwise) would return a wrong gradient."""
    def run(*args, **kwargs):
        from torch._decomp import decomposition_table

        slope, from_result = args[slope_index], args[flag_index]
        if from_result and float(slope) < 0:
            # The CPU's wording, which code and tests match on.
            raise RuntimeError(f"In-place {name} backward calculation is triggered with a negative slope which is "
                               "not supported. This is caused by calling in-place forward function with a "
                               "negative slope, please call out-of-place version instead.")
        return decomposition_table[op](*args, **kwargs)
    return run


# Higham's [13/13] Pade approximant to exp: numerator sum b_k A^k, denominator sum (-1)^k b_k A^k,
# accurate to double precision for 1-norms up to theta_13.
_PADE13 = (64764752532480000.0, 32382376266240000.0, 7771770303897600.0, 1187353796428800.0, 129060195264000.0,
           10559470521600.0, 670442572800.0, 33522128640.0, 1323241920.0, 40840800.0, 960960.0, 16380.0, 182.0, 1.0)
_THETA13 = 5.371920351148152


def _matrix_exp(self):
    """exp of each square matrix (torch.linalg.matrix_exp; the orthogonal parametrization and its
    backward use it) by scaling and squaring: each matrix is divided by 2^s so that its 1-norm is
    at most theta_13, the Pade approximant is one solve, and the result is squared s times (s per
    matrix, read back to the host: a sync). Non-finite inputs take the CPU's path."""
    if self.dim() < 2 or self.shape[-1] != self.shape[-2] or self.numel() == 0 or \
            self.dtype not in (torch.float32, torch.float64):
        return NotImplemented
    norms = self.abs().sum(-2).amax(-1)
    if not bool(torch.isfinite(norms).all()):
        return NotImplemented
    s = torch.ceil(torch.log2(norms / _THETA13)).clamp_(min=0)
    a = self / torch.exp2(s)[..., None, None]
    b = _PADE13
    eye = torch.eye(self.shape[-1], dtype=self.dtype, device=self.device).expand_as(a)
    a2 = a @ a
    a4 = a2 @ a2
    a6 = a4 @ a2
    u = a @ (a6 @ (b[13] * a6 + b[11] * a4 + b[9] * a2) + b[7] * a6 + b[5] * a4 + b[3] * a2 + b[1] * eye)
    v = a6 @ (b[12] * a6 + b[10] * a4 + b[8] * a2) + b[6] * a6 + b[4] * a4 + b[2] * a2 + b[0] * eye
    x = torch.linalg.solve(v - u, v + u)
    squarings = s[..., None, None]
    for k in range(int(s.max())):
        x = torch.where(squarings > k, x @ x, x)
    # exp(0) is exactly the identity (the solve leaves rounding noise of 1e-16 where the CPU's
    # low-degree approximant for small norms gives I itself).
    return torch.where((norms == 0)[..., None, None], eye, x)


def _rrelu_with_noise(self, noise, lower=0.125, upper=1.0 / 3.0, training=False, generator=None):
    """Randomized leaky ReLU: in training each element at or below 0 is scaled by a slope drawn
    uniformly from [lower, upper] (kept in `noise` for the backward; 1 elsewhere), in evaluation
    by their mean, as leaky_relu. The draws are ember's own stream, as with every random op."""
    if not training:
        return torch.nn.functional.leaky_relu(self, (float(lower) + float(upper)) / 2)
    slopes = torch.empty_like(self).uniform_(float(lower), float(upper), generator=generator)
    noise.copy_(torch.where(self <= 0, slopes, torch.ones((), dtype=self.dtype, device=self.device)))
    return self * noise


def _rrelu_with_noise_(self, noise, lower=0.125, upper=1.0 / 3.0, training=False, generator=None):
    return self.copy_(_rrelu_with_noise(self, noise, lower, upper, training, generator))


def _binary_cross_entropy(self, target, weight=None, reduction=1):
    """torch._decomp's binary cross-entropy with the CPU kernel's range checks, run on the device
    as CUDA's are (a probability outside [0, 1], NaN included, is reported at the next
    synchronization instead of giving a NaN loss)."""
    from torch._decomp import decomposition_table

    torch._assert_async(((self >= 0) & (self <= 1)).all(), "all elements of input should be between 0 and 1")
    torch._assert_async(((target >= 0) & (target <= 1)).all(), "all elements of target should be between 0 and 1")
    return decomposition_table[torch.ops.aten.binary_cross_entropy.default](self, target, weight, reduction)


def _with_out(fn, out_name="grad_input"):
    """The out= form of `fn` (its out tensor named `out_name`); out=None asks for the result alone,
    as the registration does first to compare dtypes."""
    def run(*args, **kwargs):
        out = kwargs.pop(out_name)
        r = fn(*args, **kwargs)
        if r is NotImplemented or out is None:
            return r
        out.resize_(r.shape)
        return out.copy_(r)
    return run


def _take(self, index):
    """PyTorch's reference (self.reshape(-1)[index]) with the index made 1-d first: a 0-dim
    integer tensor there is basic indexing, which returned a view of self where take copies."""
    return self.reshape(-1)[index.reshape(-1)].view(index.shape)


OWN = {
    **_padding_ops(_with_out),
    "take": _take, "take.out": _with_out(_take, "out"),
    "softshrink_backward": _shrink_backward, "softshrink_backward.grad_input": _with_out(_shrink_backward),
    "hardshrink_backward": _shrink_backward, "hardshrink_backward.grad_input": _with_out(_shrink_backward),
    "masked_scatter_": _masked_scatter_, "bernoulli_.Tensor": _bernoulli_tensor_,
    "searchsorted.Tensor": _searchsorted, "searchsorted.Tensor_out": _with_out(_searchsorted, "out"),
    "multinomial": _multinomial, "exponential_": _exponential_,
    "_cdist_forward": _cdist_forward, "_cdist_backward": _cdist_backward,
    "bucketize.Tensor": _bucketize, "_transformer_encoder_layer_fwd": _transformer_encoder_layer_fwd,
    "equal": _equal, "_unique2": _unique2, "_unique": _unique, "unique_consecutive": _unique_consecutive,
    "unique_dim": _unique_dim,
    "nonzero_static": _nonzero_static, "repeat_interleave.Tensor": _repeat_interleave_tensor,
    "normal.Tensor_Tensor": _normal_tensor_tensor, "normal.Tensor_float": _normal_tensor_float,
    "normal.float_Tensor": _normal_float_tensor,
    "max_pool3d_with_indices_backward": _max_pool3d_backward,
    "max_pool3d_with_indices_backward.grad_input": _with_out(_max_pool3d_backward),
    "adaptive_max_pool3d_backward": _max_pool_backward,
    "adaptive_max_pool3d_backward.grad_input": _with_out(_max_pool_backward),
    "put_": _put_,
    "fmax": _nan_ignoring(torch.maximum), "fmax.out": _nan_ignoring(torch.maximum),
    "fmin": _nan_ignoring(torch.minimum), "fmin.out": _nan_ignoring(torch.minimum),
    "signbit": _signbit, "signbit.out": _signbit, "remainder.Scalar_Tensor": _remainder_scalar_tensor,
    "frexp.Tensor": _frexp, "frexp.Tensor_out": _with_outs(_frexp, ("mantissa", "exponent")),
    "ldexp.Tensor": _ldexp, "ldexp.out": _with_out(_ldexp, "out"), "ldexp_": _ldexp_,
    "median": _median, "nanmedian": _nanmedian,
    "median.dim": _median_dim, "median.dim_values": _with_outs(_median_dim),
    "nanmedian.dim": _nanmedian_dim, "nanmedian.dim_values": _with_outs(_nanmedian_dim),
    "kthvalue": _kthvalue, "kthvalue.values": _with_outs(_kthvalue),
    "mode": _mode, "mode.values": _with_outs(_mode),
    "cauchy_": _cauchy_, "log_normal_": _log_normal_, "geometric_": _geometric_,
    "addbmm": _addbmm, "addbmm.out": _with_out(_addbmm, "out"),
    "upsample_bicubic2d_backward": _upsample_bicubic2d_backward,
    "linspace.out": _range_out(torch.ops.aten.linspace.default),
    "logspace.out": _range_out(torch.ops.aten.logspace.default), "multi_margin_loss": _multi_margin_loss,
    "is_set_to": _is_set_to, "linalg_matrix_exp": _matrix_exp,
    "glu_jvp": _glu_jvp, "glu_backward_jvp": _glu_backward_jvp,
    **{name: _index_fill_(op) for name, op in (("index_fill_.int_Scalar", torch.ops.aten.index_fill_.int_Scalar),
                                                ("index_fill_.int_Tensor", torch.ops.aten.index_fill_.int_Tensor))},
    "rrelu_with_noise": _rrelu_with_noise, "rrelu_with_noise_": _rrelu_with_noise_,
    "binary_cross_entropy": _binary_cross_entropy,
    "_int_mm": _int_mm, "_int_mm.out": _with_out(_int_mm, "out"),
    "binary_cross_entropy.out": _with_out(_binary_cross_entropy, "out"),
    **_fake_quantize_ops,
    **_fused_optim_ops,
    **_scaled_mm_ops,
    **_segment_ops,
    **_jagged_ops,
    "upsample_bicubic2d_backward.grad_input": _with_out(_upsample_bicubic2d_backward),
    **{name: _refusing_negative_slope_from_result(op, "leakyReLu", 2, 3) for name, op in (
        ("leaky_relu_backward", torch.ops.aten.leaky_relu_backward.default),
        ("leaky_relu_backward.grad_input", torch.ops.aten.leaky_relu_backward.grad_input))},
    **{name: _refusing_negative_slope_from_result(op, "elu", 1, 4) for name, op in (
        ("elu_backward", torch.ops.aten.elu_backward.default),
        ("elu_backward.grad_input", torch.ops.aten.elu_backward.grad_input))},
    **_resample_aa_ops(_with_out),
}
# Compositions that replace torch._decomp's form of the op, in eager and compiled mode alike
# (the others serve only ops torch._decomp has no decomposition for): padding's, which copy
# where torch._decomp's gather and scatter-add.
REPLACING = frozenset(name for name in _padding_ops(_with_out))
# Eager-mode compositions only: a compiled graph keeps these ops whole (as library steps), since
# their compositions read a count back from the device (masked_scatter_, linalg_matrix_exp's number
# of squarings) or mutate in place (rrelu's noise).
EAGER_ONLY = frozenset({"masked_scatter_", "bernoulli_.Tensor", "multinomial", "equal", "_unique2", "_unique", "put_",
                        "unique_consecutive", "unique_dim", "nonzero_static",
                        "repeat_interleave.Tensor", "normal.Tensor_Tensor", "normal.Tensor_float",
                        "normal.float_Tensor", "cauchy_", "log_normal_", "geometric_", "is_set_to",
                        "linalg_matrix_exp", "rrelu_with_noise", "rrelu_with_noise_", "binary_cross_entropy",
                        "binary_cross_entropy.out"}) | (
    _FAKE_QUANTIZE_EAGER_ONLY | _FUSED_OPTIM_EAGER_ONLY | _SEGMENT_EAGER_ONLY)
