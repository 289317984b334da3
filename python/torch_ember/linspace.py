"""torch.linspace's values as the CPU kernel computes them, from native ops on the device (eager
mode's linspace.out and compiled graphs' linspace).

The CPU computes the first half of the points as start + step * i and the second as
end - step * (steps - 1 - i), in the output's own type:
- float32: `step` rounded to float32, each point one fused multiply-add (the kernel is built
  with FMA contraction), reproduced here in float64, where the product is exact;
- float16/bfloat16: c10's 16-bit arithmetic rounds after every operation, `step` and the index
  included.
torch._decomp's form rounds differently and was 1 ulp off the CPU for about a third of the
points. Other dtypes return None (the caller keeps its decomposition). The scalars are rounded
in Python, so a compiled graph's trace reads no tensor values.
"""
import math
import struct

import torch


def _round(x: float, dtype) -> float:
    """x (a Python float, double) rounded to nearest even in dtype, as C++'s conversions do."""
    if dtype == torch.float16:
        return struct.unpack("e", struct.pack("e", x))[0] if abs(x) < 65520 else float("inf") * x
    f = struct.unpack("f", struct.pack("f", x))[0]  # double -> float first, as c10 converts
    if dtype == torch.float32 or f != f:
        return f
    bits = struct.unpack("I", struct.pack("f", f))[0]
    bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return struct.unpack("f", struct.pack("I", bits & 0xFFFFFFFF))[0]


def linspace_like_cpu(start, end, steps, dtype, device):
    if dtype not in (torch.float32, torch.bfloat16, torch.float16) or steps < 2:
        return None
    if any(isinstance(v, torch.Tensor) for v in (start, end)):
        return None
    limit = torch.finfo(dtype).max
    for v in (float(start), float(end)):  # the CPU's checked conversion of the two ends
        if math.isfinite(v) and abs(v) > limit:
            name = {torch.float32: "float", torch.bfloat16: "c10::BFloat16", torch.float16: "c10::Half"}[dtype]
            raise RuntimeError(f"value cannot be converted to type {name} without overflow")
    s, e = _round(float(start), dtype), _round(float(end), dtype)
    i = torch.arange(steps, device=device, dtype=torch.float64 if dtype == torch.float32 else torch.float32)
    back = (steps - 1) - i
    step = _round(_round(e - s, dtype) / _round(float(steps - 1), dtype), dtype)
    if dtype == torch.float32:
        lo, hi = (s + step * i).float(), (e - step * back).float()
    else:
        def r(t):
            return t.to(dtype).float()
        lo, hi = r(s + r(step * r(i))), r(e - r(step * r(back)))
    return torch.where(i < steps // 2, lo, hi).to(dtype)


def linspace(start, end, steps, *, dtype=None, layout=None, device=None, pin_memory=None):
    """aten.linspace for compiled graphs: the values above, or NotImplemented (the caller's
    decomposition)."""
    dtype = dtype or torch.get_default_dtype()
    if layout not in (None, torch.strided):
        return NotImplemented
    values = linspace_like_cpu(start, end, steps, dtype, device or torch.device("cpu"))
    return NotImplemented if values is None else values
