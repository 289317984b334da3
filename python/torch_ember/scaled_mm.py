"""`torch._scaled_mm`, the float8 matrix product of float8 training (torchao's Float8Linear) and
inference, composed from native ops the way the CPU computes it when it has no AMX: each float8
operand widened to float32 exactly and multiplied by its scale (one scale per tensor, or one per
row of A and per column of B), a float32 product, the bias added in float32, a division by
`scale_result` for a float8 result, and one rounding to the output dtype.

Arguments the CPU kernel would refuse return NotImplemented, so the CPU fallback raises its
own error.
"""
import torch

_FLOAT8 = (torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz)


def _scales(a, b, scale_a, scale_b):
    """The scales shaped to broadcast against A (m, k) and B (k, n), or None when the pair is
    neither both per-tensor nor both per-row/per-column (the CPU's two accepted recipes)."""
    if scale_a.dtype != torch.float32 or scale_b.dtype != torch.float32:
        return None
    if scale_a.numel() == 1 and scale_b.numel() == 1:
        return scale_a.reshape(()), scale_b.reshape(())
    m, n = a.shape[0], b.shape[1]
    rowwise = (scale_a.dim() == 2 and tuple(scale_a.shape) == (m, 1) and scale_a.is_contiguous()
               and scale_b.dim() == 2 and tuple(scale_b.shape) == (1, n) and scale_b.t().is_contiguous())
    return (scale_a, scale_b) if rowwise else None


def _scaled_mm(self, mat2, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None,
               use_fast_accum=False):
    if (self.dim() != 2 or mat2.dim() != 2 or self.dtype not in _FLOAT8 or mat2.dtype not in _FLOAT8
            or self.shape[1] != mat2.shape[0]):
        return NotImplemented
    scales = _scales(self, mat2, scale_a, scale_b)
    if scales is None or (bias is not None and bias.numel() != mat2.shape[1]):
        return NotImplemented
    if scale_result is not None and (scale_result.numel() != 1 or scale_result.dtype != torch.float32):
        return NotImplemented
    if any(t is not None and t.device != self.device for t in (mat2, scale_a, scale_b, bias, scale_result)):
        return NotImplemented
    dtype = out_dtype if out_dtype is not None else self.dtype
    out = torch.mm(self.to(torch.float32) * scales[0], mat2.to(torch.float32) * scales[1])
    if bias is not None:
        out = out + bias.reshape(-1).to(torch.float32)
    if scale_result is not None and dtype in _FLOAT8:
        out = out * torch.reciprocal(scale_result.reshape(()))
    return out.to(dtype)


def _scaled_mm_out(self, mat2, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None,
                   use_fast_accum=False, *, out=None):
    """The out= form. The registration asks for the result alone first (out=None) and leaves an
    out= tensor of another dtype to the CPU, which decides whether to refuse it."""
    result = _scaled_mm(self, mat2, scale_a, scale_b, bias, scale_result, out_dtype, use_fast_accum)
    if out is None or result is NotImplemented:
        return result
    out.resize_(result.shape)
    return out.copy_(result)


OPS = {"_scaled_mm": _scaled_mm, "_scaled_mm.out": _scaled_mm_out}
