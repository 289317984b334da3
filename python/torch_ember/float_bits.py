"""Ops that read or build a floating-point number's bits: frexp, ldexp and signbit, each exact
as the CPU's is (no exp2/log2 rounding on the way)."""
import torch


# (integer view, mantissa bits, exponent bits) of each floating dtype.
_FLOAT_FIELDS = {torch.float64: (torch.int64, 52, 11), torch.float32: (torch.int32, 23, 8),
                 torch.bfloat16: (torch.int16, 7, 8), torch.float16: (torch.int16, 10, 5)}


def _frexp(self):
    """torch.frexp from the bits: the mantissa keeps sign and fraction with the exponent field
    set to put it in [0.5, 1). Subnormals are scaled into the normal range first; zero, inf and
    NaN come back as they are with exponent 0, as std::frexp gives on the CPU."""
    fields = _FLOAT_FIELDS.get(self.dtype)
    if fields is None:
        return NotImplemented  # the CPU's error for integer inputs
    ibits, m_bits, e_bits = fields
    half = (1 << (e_bits - 1)) - 2  # the exponent field of [0.5, 1)
    lift = m_bits + 1  # 2**lift takes the smallest subnormal to a normal number
    subnormal = (self != 0) & (self.abs() < torch.finfo(self.dtype).tiny)
    x = torch.where(subnormal, self * 2.0 ** lift, self)
    bits = x.view(ibits)
    field_mask = ((1 << e_bits) - 1) << m_bits
    exponent = ((bits & field_mask) >> m_bits).to(torch.int32) - half - torch.where(subnormal, lift, 0)
    mantissa = ((bits & ~field_mask) | (half << m_bits)).view(self.dtype)
    plain = (self == 0) | ~torch.isfinite(self)
    return (torch.where(plain, self, mantissa),
            torch.where(plain, torch.zeros_like(exponent), exponent).to(torch.int32))


def _pow2(k, dtype):
    """2**k exactly in `dtype`, for integer k from the smallest subnormal's exponent up to the
    largest finite one, built from the bits (exp2 of a float need not be exact)."""
    ibits, m_bits, e_bits = _FLOAT_FIELDS[dtype]
    bias = (1 << (e_bits - 1)) - 1
    k = k.to(ibits)
    normal = ((k + bias).clamp(min=1) << m_bits)
    subnormal = torch.ones_like(k) << (k + bias + m_bits - 1).clamp(0, m_bits - 1)
    return torch.where(k + bias >= 1, normal, subnormal).view(dtype)


def _ldexp(self, other):
    """torch.ldexp: self * 2**other. With a floating self and an integer exponent the CPU scales
    exactly (std::ldexp, rounded once); 2**other alone would overflow or vanish first (frexp's
    mantissa of a large number times 2**128 in float32). So self = m * 2**e (frexp), and m is
    scaled by 2**s, exactly, then by 2**t, rounding once, with s + t = e + other and 2**t
    representable. Other inputs keep the CPU's composite: self * pow(2, other)."""
    if not (self.dtype in _FLOAT_FIELDS and not other.dtype.is_floating_point and not other.is_complex()):
        return torch.mul(self, torch.pow(2.0, other))
    if other.dtype == torch.bool:
        return NotImplemented  # the CPU's error
    _, m_bits, e_bits = _FLOAT_FIELDS[self.dtype]
    highest = (1 << (e_bits - 1)) - 1  # the largest finite power of two's exponent (the bias)
    lowest = 1 - highest - m_bits  # the smallest subnormal's
    m, e = _frexp(self)
    # Beyond these bounds the result is 0 or inf whatever the exponent; clamping keeps s small.
    total = (e.to(torch.int64) + other.to(torch.int64)).clamp(lowest - m_bits - 2, highest + m_bits + 2)
    t = total.clamp(lowest, highest)
    return m * _pow2(total - t, self.dtype) * _pow2(t, self.dtype)


def _ldexp_(self, other):
    r = _ldexp(self, other)
    if r is NotImplemented or r.dtype != self.dtype:
        return NotImplemented
    return self.copy_(r)


def _signbit(a, *, out=None):
    """The sign bit itself, so -0.0 and a negative NaN count as negative, as on the CPU."""
    if a.dtype == torch.bool or a.dtype == torch.uint8:
        return torch.zeros(a.shape, dtype=torch.bool, device=a.device)
    if not a.dtype.is_floating_point:
        return a < 0
    bits = {torch.float64: torch.int64, torch.float32: torch.int32}.get(a.dtype, torch.int16)
    return a.view(bits) < 0
