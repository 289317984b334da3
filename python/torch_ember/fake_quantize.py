"""Quantization-aware training's fake quantization composed from native ops, with the CPU
kernels' float32 arithmetic: per tensor, per channel, with tensor qparams (FakeQuantize), the
learnable scale and zero point of LSQ (_fake_quantize_learnable_*), forward and backward, and
the default QAT qconfig's fused observer (_fused_moving_avg_obs_fq_helper)."""
import math
import struct

import torch


def _fake_quantize(x, inv_scale, scale, zero_point, quant_min, quant_max):
    """The CPU kernel's float arithmetic: q = zero_point + round_half_even(x * inv_scale) in
    float, the output (clamp(q) - zero_point) * scale, the mask whether q was in range."""
    q = _nan_below(torch.round(x * inv_scale) + zero_point)
    mask = (q >= quant_min) & (q <= quant_max)
    return (q.clamp(quant_min, quant_max) - zero_point) * scale, mask


def _nan_below(q):
    """The CPU kernels convert q to an integer before clamping it, which turns NaN into the
    lowest int64: a NaN input comes out as quant_min, out of range (no gradient), and LSQ counts
    it below the range. The same here, instead of a NaN that would reach the learned scale."""
    return torch.where(torch.isnan(q), -math.inf, q)


def _check_zero_points(zero_point, quant_min, quant_max):
    """The CPU's range check of per-channel zero points, on the device: reported at the next
    synchronizing call (as a failing kernel is), without reading the values back now."""
    inside = ((zero_point >= quant_min) & (zero_point <= quant_max)).all()
    torch._assert_async(inside, "`zero_point` must be between `quant_min` and `quant_max`.")


def _float32(v: float) -> float:
    """v rounded to float32, in plain Python: a compiled graph traces torch.tensor(v).item()
    into a non-functional lift_fresh_copy."""
    try:
        return struct.unpack("f", struct.pack("f", v))[0]
    except OverflowError:  # finite but beyond float32's range: the CPU's float32 tensor holds inf
        return math.copysign(math.inf, v)


def _float32_reciprocal(v: float) -> float:
    # 1/v in double rounded to float32 is the float32 quotient itself (double has more than
    # twice float32's precision, so the double rounding is exact for division).
    return _float32(1.0 / v)


def _fake_quantize_per_tensor(self, scale, zero_point, quant_min, quant_max):
    """Quantization-aware training's fake quantization (QAT), one scale for the tensor."""
    if self.dtype != torch.float32 or scale <= 0 or quant_min > quant_max or not quant_min <= zero_point <= quant_max:
        return NotImplemented  # the CPU's dtype rule and errors
    scale32 = _float32(scale)
    return _fake_quantize(self, _float32_reciprocal(scale32), scale32, zero_point, quant_min, quant_max)


def _fake_quantize_tensor_qparams(self, scale, zero_point, fake_quant_enabled, quant_min, quant_max):
    """FakeQuantize's form: scale and zero point as 1-element tensors, and a switch tensor that
    passes the input through (mask all true) when it is 0; read on the device, no sync."""
    if self.dtype != torch.float32 or zero_point.is_floating_point() or quant_min > quant_max:
        return NotImplemented
    s = scale.to(torch.float32).reshape(())
    out, mask = _fake_quantize(self, 1.0 / s, s, zero_point.reshape(()), quant_min, quant_max)
    on = fake_quant_enabled.reshape(()) != 0
    return torch.where(on, out, self), torch.where(on, mask, True)


def _fake_quantize_per_channel(self, scale, zero_point, axis, quant_min, quant_max):
    """Fake quantization with a scale and integer zero point per slice along `axis`."""
    if self.dtype != torch.float32 or zero_point.is_floating_point() or quant_min > quant_max or \
            scale.dim() != 1 or zero_point.shape != scale.shape or not -self.dim() <= axis < self.dim() or \
            self.shape[axis] != scale.numel():
        return NotImplemented
    _check_zero_points(zero_point, quant_min, quant_max)
    shape = [1] * self.dim()
    shape[axis] = -1
    s = scale.to(torch.float32).reshape(shape)
    return _fake_quantize(self, 1.0 / s, s, zero_point.reshape(shape), quant_min, quant_max)


def _learnable_zero_point(zero_point, quant_min, quant_max, forward):
    """The CPU's integer zero point from the float parameter: rounded half to even in the
    forward, +0.5 and truncated in the backward, clamped to the range (reads it back: a sync)."""
    z = zero_point.reshape(-1)[0].to(torch.float32)
    z = torch.round(z) if forward else z + 0.5
    return int(z.clamp(quant_min, quant_max).item())


def _learnable_per_tensor(self, scale, zero_point, quant_min, quant_max, grad_factor=1.0):
    """LSQ's forward: per-tensor fake quantization by the current scale and zero point."""
    if self.dtype != torch.float32 or scale.numel() < 1 or zero_point.numel() < 1:
        return NotImplemented
    r = _fake_quantize_per_tensor(self, scale.reshape(-1)[0].item(),
                                  _learnable_zero_point(zero_point, quant_min, quant_max, True), quant_min, quant_max)
    return r if r is NotImplemented else r[0]


def _lsq_gradients(grad, x, s, inv, z, quant_min, quant_max, grad_factor):
    """Per element, as the CPU kernels compute them in float32 (scale s, its reciprocal inv and
    the rounded zero point z: numbers for one tensor, tensors per channel): the input's gradient
    passes where the quantized value is in range; the scale's is (q - x) / s inside the range and
    the range end minus the zero point outside; the zero point's is -s outside."""
    factor = _float32(grad_factor)
    q = _nan_below(torch.round(z + x * inv))  # the kernels add the zero point before rounding here
    below, above = q < quant_min, q > quant_max
    inside = ~(below | above)
    fq = (q.clamp(quant_min, quant_max) - z) * s
    d_scale = torch.where(inside, grad * (fq - x) * inv,
                          grad * torch.where(below, quant_min - z, quant_max - z)) * factor
    d_zero = torch.where(inside, 0.0, grad * -1.0 * s * factor)
    return grad * inside, d_scale, d_zero


def _learnable_per_tensor_backward(grad, self, scale, zero_point, quant_min, quant_max, grad_factor=1.0):
    """LSQ's gradients (_lsq_gradients), the scale's and zero point's summed over the tensor."""
    if (grad.dtype, self.dtype, scale.dtype, zero_point.dtype) != (torch.float32,) * 4 or \
            grad.numel() != self.numel() or not quant_min <= 0 <= quant_max or self.numel() == 0:
        return NotImplemented  # the CPU's checks
    s = _float32(scale.reshape(-1)[0].item())
    z = _learnable_zero_point(zero_point, quant_min, quant_max, False)
    dx, d_scale, d_zero = _lsq_gradients(grad, self, s, _float32_reciprocal(s), z, quant_min, quant_max, grad_factor)
    return dx, d_scale.sum().reshape(1), d_zero.sum().reshape(1)


def _learnable_per_channel(self, scale, zero_point, axis, quant_min, quant_max, grad_factor=1.0):
    """LSQ per channel: the zero points rounded half to even and clamped, then per-channel fake
    quantization (no read-back)."""
    if self.dtype != torch.float32 or scale.dtype != torch.float32:
        return NotImplemented
    z = zero_point.round().clamp(quant_min, quant_max).to(torch.int32)
    return torch.fake_quantize_per_channel_affine(self, scale, z, axis, quant_min, quant_max)


def _learnable_per_channel_backward(grad, self, scale, zero_point, axis, quant_min, quant_max, grad_factor=1.0):
    """LSQ's gradients with each channel's scale and rounded zero point, the scale's and zero
    point's summed over every dim but the channel's."""
    if (grad.dtype, self.dtype, scale.dtype, zero_point.dtype) != (torch.float32,) * 4 or \
            grad.shape != self.shape or not quant_min <= 0 <= quant_max or scale.dim() != 1 or \
            zero_point.shape != scale.shape or not 0 <= axis < self.dim() or \
            scale.numel() != self.shape[axis] or self.numel() == 0:
        return NotImplemented  # the CPU's checks
    shape = [1] * self.dim()
    shape[axis] = -1
    s = scale.reshape(shape)
    z = zero_point.round().clamp(quant_min, quant_max).reshape(shape)
    dx, d_scale, d_zero = _lsq_gradients(grad, self, s, 1.0 / s, z, quant_min, quant_max, grad_factor)
    others = [d for d in range(self.dim()) if d != axis]
    return dx, d_scale.sum(others), d_zero.sum(others)


def _fused_moving_avg_obs_fq_helper(self, observer_on, fake_quant_on, running_min, running_max, scale, zero_point,
                                    averaging_const, quant_min, quant_max, ch_axis, per_row_fake_quant=False,
                                    symmetric_quant=False):
    """The observer and fake quantization of the default QAT qconfig (FusedMovingAvgObsFakeQuantize).
    The input's minimum and maximum (per row with per_row_fake_quant) are found on the device;
    the running statistics, scale and zero point are updated by the CPU kernel itself from a
    tensor holding just those extremes (it finds the same minimum and maximum there, so its float
    arithmetic and its choice of quantization parameters are reproduced exactly, with a few
    numbers copied instead of the activations); then the input is fake-quantized on the device."""
    state = (running_min, running_max, scale, zero_point)
    if self.dtype != torch.float32 or self.numel() == 0 or any(t.dtype != torch.float32 for t in state[:3]) or \
            (per_row_fake_quant and not (0 <= ch_axis < self.dim() and (self.dim() != 2 or ch_axis == 0))):
        return NotImplemented
    if per_row_fake_quant:
        y = self if self.dim() == 2 else self.movedim(ch_axis, 0).flatten(1)
        extremes = torch.stack(torch.aminmax(y, dim=1), 1)  # (rows, 2): the CPU kernel's rows
    else:
        extremes = torch.stack(torch.aminmax(self))
    host = [t.cpu() for t in state]
    torch.ops.aten._fused_moving_avg_obs_fq_helper(extremes.cpu(), observer_on.cpu(), fake_quant_on.cpu(), *host,
                                          averaging_const, quant_min, quant_max, 0 if per_row_fake_quant else ch_axis,
                                          per_row_fake_quant, symmetric_quant)
    for t, h in zip(state, host):
        if t.shape != h.shape:
            t.resize_(h.shape)
        t.copy_(h)
    if not int(fake_quant_on.reshape(-1)[0].item()):
        return self.clone(), torch.ones_like(self, dtype=torch.bool)
    if per_row_fake_quant:
        return torch.ops.aten.fake_quantize_per_channel_affine_cachemask(self, scale, zero_point, ch_axis, quant_min,
                                                                         quant_max)
    on = torch.ones(1, dtype=torch.long, device=self.device)
    return torch.ops.aten._fake_quantize_per_tensor_affine_cachemask_tensor_qparams(self, scale, zero_point, on,
                                                                                     quant_min, quant_max)


OPS = {
    "_fused_moving_avg_obs_fq_helper": _fused_moving_avg_obs_fq_helper,
    "fake_quantize_per_tensor_affine_cachemask": _fake_quantize_per_tensor,
    "_fake_quantize_per_tensor_affine_cachemask_tensor_qparams": _fake_quantize_tensor_qparams,
    "fake_quantize_per_channel_affine_cachemask": _fake_quantize_per_channel,
    "_fake_quantize_learnable_per_tensor_affine": _learnable_per_tensor,
    "_fake_quantize_learnable_per_tensor_affine_backward": _learnable_per_tensor_backward,
    "_fake_quantize_learnable_per_channel_affine": _learnable_per_channel,
    "_fake_quantize_learnable_per_channel_affine_backward": _learnable_per_channel_backward,
}
# Read the scale and zero point back from the device (the CPU kernel does too).
EAGER_ONLY = frozenset({"_fake_quantize_learnable_per_tensor_affine",
                        "_fake_quantize_learnable_per_tensor_affine_backward", "_fused_moving_avg_obs_fq_helper"})
# The per-channel forms read nothing back, so compiled graphs use them as they are.
