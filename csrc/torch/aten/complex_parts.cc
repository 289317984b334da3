#include "complex_parts.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/native/Resize.h>

#include <cmath>
#include <cstring>

namespace ember::torch_glue {
namespace {

bool complex_type(at::ScalarType t) { return t == at::kComplexFloat || t == at::kComplexDouble; }

// The result type of a binary op when ember composes it: complex64/128, every operand on the
// device or a 0-d number, at least one on the device.
std::optional<at::ScalarType> binary_type(const at::Tensor& a, const at::Tensor& b) {
    if (!a.is_complex() && !b.is_complex()) return std::nullopt;
    const at::ScalarType t = at::result_type(a, b);
    const bool placed = (a.is_privateuseone() || a.dim() == 0) && (b.is_privateuseone() || b.dim() == 0) &&
                        (a.is_privateuseone() || b.is_privateuseone());
    if (!complex_type(t) || !placed) return std::nullopt;
    return t;
}

// Both operands in the result's precision (a Python number kept as it was would promote:
// complex64 + 0.5 gave complex128). A CPU 0-d operand stays on the CPU when `cpu_scalars`: its
// parts then reach the real kernels as host scalars, passed by value, so a graph capture takes
// them (a copy to the device would be refused there); else it moves to the device.
std::pair<at::Tensor, at::Tensor> prepared(const at::Tensor& a, const at::Tensor& b, at::ScalarType type,
                                           bool cpu_scalars) {
    const c10::Device dev = a.is_privateuseone() ? a.device() : b.device();
    const at::ScalarType real = c10::toRealValueType(type);
    auto prepare = [&](const at::Tensor& t) {
        const bool host = cpu_scalars && t.dim() == 0 && t.is_cpu();
        return t.to(host ? t.device() : dev, t.is_complex() ? type : real);
    };
    return {prepare(a), prepare(b)};
}

// Both operands of a binary op with a complex result, as parts on the device: a0 + a1 i and
// b0 + b1 i (a1 or b1 undefined for a real operand); std::nullopt when ember does not compose it.
struct Operands {
    at::Tensor a0, a1, b0, b1;
};

std::optional<Operands> operand_parts(const at::Tensor& self, const at::Tensor& other, bool cpu_scalars = false) {
    const auto type = binary_type(self, other);
    if (!type) return std::nullopt;
    auto [a, b] = prepared(self, other, *type, cpu_scalars);
    auto [a0, a1] = re_im(a);
    auto [b0, b1] = re_im(b);
    return Operands{a0, a1, b0, b1};
}

}  // namespace

bool complex_on_device(const at::Tensor& t) { return complex_type(t.scalar_type()) && t.is_privateuseone(); }

std::pair<at::Tensor, at::Tensor> re_im(const at::Tensor& t) {
    if (!t.is_complex()) return {t, at::Tensor()};
    at::Tensor r = at::view_as_real(t.is_conj() ? t.conj() : t);
    at::Tensor im = r.select(-1, 1);
    return {r.select(-1, 0), t.is_conj() ? at::neg(im) : im};
}

at::Tensor from_parts(const at::Tensor& re_in, const at::Tensor& im_in) {
    at::Tensor re = re_in, im = im_in;
    if (re.sizes() != im.sizes()) {  // a real operand shaped only one part
        auto shape = at::infer_size(re.sizes(), im.sizes());
        re = re.expand(shape), im = im.expand(shape);
    }
    return at::view_as_complex(at::stack({re, im}, -1));
}

at::Tensor& write_out(at::Tensor& out, const at::Tensor& value) {
    at::native::resize_output(out, value.sizes());
    if (out.is_complex() && !out.is_conj()) {
        at::view_as_real(out).copy_(at::view_as_real(value));
    } else {
        out.copy_(value);
    }
    return out;
}

bool writable_in_place(const at::Tensor& self, const at::Tensor& other) {
    if (!other.defined() || !other.has_storage() || other.dim() == 0) return true;
    switch (at::get_overlap_status(self, other)) {
        case at::MemOverlapStatus::No: return true;
        case at::MemOverlapStatus::Full: return self.sizes() == other.sizes() && self.strides() == other.strides();
        default: return false;
    }
}

std::optional<at::Tensor> complex_add(const at::Tensor& self, const at::Tensor& other, const c10::Scalar& alpha,
                                      bool subtract) {
    if (alpha.isComplex()) return std::nullopt;
    auto parts = operand_parts(self, other, true);
    if (!parts) return std::nullopt;
    auto [a0, a1, b0, b1] = *parts;
    const double s = (subtract ? -1.0 : 1.0) * alpha.toDouble();
    if (!a1.defined()) a1 = at::zeros_like(a0);
    if (!b1.defined()) b1 = at::zeros_like(b0);
    // The CPU forms alpha * other as a complex product, (s + 0i)(b0 + b1 i): an infinite or NaN
    // part of other reaches both parts of the sum, as there.
    return from_parts(a0 + (b0 * s - b1 * 0.0), a1 + (b1 * s + b0 * 0.0));
}

std::optional<at::Tensor> complex_mul(const at::Tensor& self, const at::Tensor& other) {
    auto parts = operand_parts(self, other, true);
    if (!parts) return std::nullopt;
    auto [a0, a1, b0, b1] = *parts;
    if (!a1.defined()) return from_parts(a0 * b0, a0 * b1);  // real * complex
    if (!b1.defined()) return from_parts(a0 * b0, a1 * b0);  // complex * real
    return from_parts(a0 * b0 - a1 * b1, a0 * b1 + a1 * b0);
}

// (a + bi) / (c + di) by c10::complex's rule (the CPU's): divide through by the divisor's larger
// part so that no square overflows, and a zero divisor gives a / 0 and b / 0 (inf or NaN).
static at::Tensor divide_parts(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, const at::Tensor& d) {
    at::Tensor ac = c.abs(), ad = d.abs();
    at::Tensor by_c = ac.ge(ad);
    at::Tensor rat = at::where(by_c, d / c, c / d);
    at::Tensor scl = at::reciprocal(at::where(by_c, c + d * rat, d + c * rat));
    at::Tensor re = at::where(by_c, (a + b * rat) * scl, (a * rat + b) * scl);
    at::Tensor im = at::where(by_c, (b - a * rat) * scl, (b * rat - a) * scl);
    at::Tensor zero = at::logical_and(ac.eq(0), ad.eq(0));
    return from_parts(at::where(zero, a / ac, re), at::where(zero, b / ad, im));
}

std::optional<at::Tensor> complex_div(const at::Tensor& self, const at::Tensor& other) {
    auto parts = operand_parts(self, other);
    if (!parts) return std::nullopt;
    auto [a0, a1, b0, b1] = *parts;
    if (!a1.defined()) a1 = at::zeros_like(a0);
    if (!b1.defined()) b1 = at::zeros_like(b0);
    return divide_parts(a0, a1, b0, b1);
}

std::optional<at::Tensor> complex_unary(const char* name, const at::Tensor& self) {
    if (!complex_on_device(self)) return std::nullopt;
    auto [x, y] = re_im(self);
    auto is = [&](const char* n) { return std::strcmp(name, n) == 0; };
    if (is("abs")) return at::hypot(x, y);
    if (is("angle")) return at::atan2(y, x);
    if (is("neg")) return from_parts(at::neg(x), at::neg(y));
    if (is("exp")) {  // e^x (cos y + i sin y), with C's cexp edges: a real argument stays real,
                      // e^(+inf) with a non-finite angle is inf + i NaN, e^(-inf) anything is 0
        at::Tensor m = at::exp(x);
        at::Tensor re = m * at::cos(y), im = at::where(y.eq(0), y, m * at::sin(y));
        at::Tensor wild = at::logical_not(at::isfinite(y));
        at::Tensor pos_inf = at::logical_and(x.eq(INFINITY), wild), neg_inf = x.eq(-INFINITY);
        re = at::where(pos_inf, at::full_like(re, INFINITY), at::where(neg_inf, at::zeros_like(re), re));
        im = at::where(pos_inf, at::full_like(im, NAN), at::where(neg_inf, at::zeros_like(im), im));
        return from_parts(re, im);
    }
    if (is("log")) {  // log|z| from the parts scaled by the larger one, so |z| cannot overflow
        at::Tensor m = at::maximum(x.abs(), y.abs());
        at::Tensor safe = at::where(at::logical_and(m.gt(0), at::isfinite(m)), m, at::ones_like(m));
        at::Tensor scaled = at::log(m) + 0.5 * at::log(at::square(x / safe) + at::square(y / safe));
        at::Tensor log_abs = at::where(at::logical_and(m.gt(0), at::isfinite(m)), scaled, at::log(at::hypot(x, y)));
        return from_parts(log_abs, at::atan2(y, x));
    }
    if (is("sgn")) {  // z / |z|, and 0 at 0
        at::Tensor r = at::hypot(x, y);
        at::Tensor zero = r.eq(0);
        at::Tensor safe = at::where(zero, at::ones_like(r), r);
        return from_parts(at::where(zero, at::zeros_like(x), x / safe), at::where(zero, at::zeros_like(y), y / safe));
    }
    if (is("reciprocal")) return complex_div(at::ones({}, self.options()), self);
    if (is("sqrt")) {  // the principal root without cancellation: t = sqrt((|z| + |x|) / 2) is the
                       // larger part; C's csqrt edges: sqrt(0 + iy) = 0 + iy, an infinite y gives inf + iy
        // With the parts scaled by m = max(|x|, |y|) (finite and nonzero) nothing overflows:
        // t = sqrt(m) sqrt((|z / m| + |x / m|) / 2).
        at::Tensor r = at::hypot(x, y);
        at::Tensor m = at::maximum(x.abs(), y.abs());
        at::Tensor ok = at::logical_and(m.gt(0), at::isfinite(m));
        at::Tensor safe = at::where(ok, m, at::ones_like(m));
        at::Tensor t = at::where(ok, at::sqrt(safe) * at::sqrt((at::hypot(x / safe, y / safe) + x.abs() / safe) * 0.5),
                                 at::sqrt((r + x.abs()) * 0.5));
        at::Tensor pos = x.ge(0);
        at::Tensor re = at::where(pos, t, y.abs() / (t * 2)), im = at::where(pos, y / (t * 2), at::copysign(t, y));
        at::Tensor zero = r.eq(0), inf_y = at::isinf(y);
        re = at::where(inf_y, at::full_like(re, INFINITY), at::where(zero, at::zeros_like(re), re));
        im = at::where(at::logical_or(inf_y, zero), y, im);
        return from_parts(re, im);
    }
    return std::nullopt;
}

std::optional<at::Tensor> complex_matmul(const at::Tensor& a, const at::Tensor& b) {
    if (!complex_on_device(a) || !complex_on_device(b) || a.scalar_type() != b.scalar_type() ||
        a.device() != b.device() || a.dim() != b.dim() || (a.dim() != 2 && a.dim() != 3))
        return std::nullopt;
    auto [a0, a1] = re_im(a);
    auto [b0, b1] = re_im(b);
    auto mm = [&](const at::Tensor& x, const at::Tensor& y) {
        return x.dim() == 2 ? at::mm(x.contiguous(), y.contiguous()) : at::bmm(x.contiguous(), y.contiguous());
    };
    return from_parts(mm(a0, b0) - mm(a1, b1), mm(a0, b1) + mm(a1, b0));
}

std::optional<at::Tensor> complex_equal(const at::Tensor& self, const at::Tensor& other, bool ne) {
    auto parts = operand_parts(self, other);
    if (!parts) return std::nullopt;
    auto [a0, a1, b0, b1] = *parts;
    // A real operand's imaginary part is 0.
    at::Tensor eq_im = a1.defined() && b1.defined() ? at::eq(a1, b1) : at::eq(a1.defined() ? a1 : b1, 0);
    at::Tensor eq = at::logical_and(at::eq(a0, b0), eq_im);
    return ne ? at::logical_not(eq) : eq;
}

std::optional<at::Tensor> complex_reduce(const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim,
                                         std::optional<at::ScalarType> dtype, bool mean) {
    if (!complex_on_device(self) || (dtype && *dtype != self.scalar_type()) || self.is_conj()) return std::nullopt;
    if (self.dim() == 0) return self.clone();  // one element: its own sum and mean
    std::vector<int64_t> over;
    if (dims && !dims->empty()) {
        for (int64_t d : *dims) over.push_back(at::maybe_wrap_dim(d, self.dim()));
    } else {
        for (int64_t d = 0; d < self.dim(); ++d) over.push_back(d);
    }
    at::Tensor sum = at::sum(at::view_as_real(self), over, keepdim);
    if (!mean) return at::view_as_complex(sum.contiguous());
    // The CPU divides the complex sum by n as a complex number, (a + bi) / (n + 0i), by
    // c10::complex's rule: (a + b 0) and (b - a 0), times the reciprocal of n in the parts' type.
    // An inf or NaN part thus reaches the other one (mean of [nan, 1+2j] is nan+nanj there).
    int64_t n = 1;
    for (int64_t d : over) n *= self.size(d);
    const double inv = 1.0 / static_cast<double>(n);
    at::Tensor a = sum.select(-1, 0), b = sum.select(-1, 1);
    return from_parts((a + b * 0.0) * inv, (b - a * 0.0) * inv);
}

}  // namespace ember::torch_glue
