"""Antialiased bilinear and bicubic resizing (`interpolate(..., antialias=True)`) from native
GEMMs. The CPU kernel's separable filter (PIL's: a triangle, or Keys' cubic with a = -0.5,
widened by the downscale factor, each output's taps normalised to sum to 1) is written as one
dense [out, in] weight matrix per spatial dim, so the pass along the width and then along the
height are matrix products, and the backward is the same products transposed. compositions.OWN
registers these as the ops' ember kernels; compiled graphs use them too.

float32 and float64 only: the CPU computes half types in their own precision, so those return
NotImplemented and take the visible CPU fallback, as do empty inputs (the CPU's errors)."""
import math

import torch


def _scale(in_size: int, out_size: int, align_corners: bool, scale) -> float:
    # ATen's area_pixel_compute_scale: the source step per output index.
    if align_corners:
        return (in_size - 1) / (out_size - 1) if out_size > 1 else 0.0
    return 1.0 / scale if scale is not None and scale > 0 else in_size / out_size


def _filter(x: torch.Tensor, cubic: bool) -> torch.Tensor:
    """The triangle, or Keys' cubic with a = -0.5, of |x|."""
    x = x.abs()
    if not cubic:
        return (1.0 - x).clamp(min=0.0)
    a = -0.5
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return torch.where(x < 1.0, near, torch.where(x < 2.0, far, torch.zeros_like(x)))


def _weights(in_size, out_size, align_corners, scale, cubic, like: torch.Tensor) -> torch.Tensor:
    """[out_size, in_size]: row i holds output i's weights over the input positions, as the CPU
    kernel's _compute_indices_min_size_weights_aa picks them (support, first tap, tap count,
    normalisation). Built with device ops in float64, so a compiled graph traces it as ops rather
    than as a constant."""
    s = _scale(int(in_size), int(out_size), bool(align_corners), scale)
    half = 2.0 if cubic else 1.0  # interp_size / 2
    support = half * s if s >= 1.0 else half
    invscale = 1.0 / s if s >= 1.0 else 1.0
    max_taps = math.ceil(support) * 2 + 1
    f64 = dict(dtype=torch.float64, device=like.device)
    center = (torch.arange(out_size, **f64) + 0.5) * s
    first = (center - support + 0.5).trunc().clamp(min=0.0)  # C++'s int64 cast truncates
    last = (center + support + 0.5).trunc().clamp(max=float(in_size))
    count = (last - first).clamp(0.0, float(max_taps))
    pos = torch.arange(in_size, **f64)
    taps = (pos >= first[:, None]) & (pos < (first + count)[:, None])
    w = torch.where(taps, _filter((pos - center[:, None] + 0.5) * invscale, cubic), torch.zeros((), **f64))
    total = w.sum(1, keepdim=True)
    w = torch.where(total != 0.0, w / torch.where(total != 0.0, total, torch.ones((), **f64)), w)
    return w.to(like.dtype)


def _layout(t: torch.Tensor):
    # ATen's suggest_memory_format for a 4-d tensor: the CPU's result keeps channels-last inputs so.
    cl = t.is_contiguous(memory_format=torch.channels_last) and not t.is_contiguous()
    return torch.channels_last if cl else torch.contiguous_format


def _served(t: torch.Tensor, sizes) -> bool:
    return t.dtype in (torch.float32, torch.float64) and t.dim() == 4 and t.numel() > 0 and all(s > 0 for s in sizes)


def _forward(cubic: bool):
    def run(x, output_size, align_corners, scales_h=None, scales_w=None):
        oh, ow = output_size
        if not _served(x, (oh, ow)):
            return NotImplemented
        ih, iw = x.shape[-2:]
        wh = _weights(ih, oh, align_corners, scales_h, cubic, x)
        ww = _weights(iw, ow, align_corners, scales_w, cubic, x)
        out = torch.matmul(wh, torch.matmul(x, ww.t()))
        return out.contiguous(memory_format=_layout(x))
    return run


def _backward(cubic: bool):
    def run(grad_output, output_size, input_size, align_corners, scales_h=None, scales_w=None):
        oh, ow = output_size
        _, _, ih, iw = input_size
        if not _served(grad_output, (ih, iw)) or tuple(grad_output.shape[-2:]) != (oh, ow):
            return NotImplemented
        wh = _weights(ih, oh, align_corners, scales_h, cubic, grad_output)
        ww = _weights(iw, ow, align_corners, scales_w, cubic, grad_output)
        return torch.matmul(wh.t(), torch.matmul(grad_output, ww)).contiguous(
            memory_format=_layout(grad_output))
    return run


def ops(with_out) -> dict:
    """{overload name: composition} for compositions.OWN; `with_out` wraps a functional form
    into its out= overload."""
    table = {}
    for mode, cubic in (("bilinear", False), ("bicubic", True)):
        fwd, bwd = _forward(cubic), _backward(cubic)
        table[f"_upsample_{mode}2d_aa"] = fwd
        table[f"_upsample_{mode}2d_aa.out"] = with_out(fwd, "out")
        table[f"_upsample_{mode}2d_aa_backward"] = bwd
        table[f"_upsample_{mode}2d_aa_backward.grad_input"] = with_out(bwd)
    return table
