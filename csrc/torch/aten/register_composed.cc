// Ops composed from other native ember ops (each call below dispatches to an ember kernel): logical
// ops, hardtanh, log-sigmoid, sgn of real tensors, a scalar raised to a tensor, one-sided clamps,
// autograd's efficient zeros.
// Each matches PyTorch's CPU results; forms these compositions do not cover (complex, an out= of
// another dtype) take the visible CPU fallback.
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <torch/library.h>

#include "glue.h"

namespace ember::torch_glue {
namespace {

// ---- logical_and/or/xor, logical_not: truth values (x != 0) combined as bools, written in out's
// dtype (bool unless an out= says otherwise).

at::Tensor truth(const at::Tensor& t) { return t.scalar_type() == at::kBool ? t : at::ne(t, 0); }

bool logical_ok(const at::Tensor& a, const at::Tensor& out) {
    return !at::isComplexType(a.scalar_type()) && plain_dtype(out.scalar_type()) && out.is_privateuseone();
}

#define EMBER_LOGICAL(name, combine)                                                                  \
    at::Tensor& name##_out(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {        \
        if (!logical_ok(self, out) || at::isComplexType(other.scalar_type()))                         \
            return cpu<ATEN_OP2(name, out)>(self, other, out);                                        \
        at::Tensor a = truth(self), b = truth(other);                                                 \
        at::Tensor r = combine;                                                                       \
        resize_out(out, r.sizes());                                                                   \
        return out.copy_(r);                                                                          \
    }

EMBER_LOGICAL(logical_and, at::bitwise_and(a, b))
EMBER_LOGICAL(logical_or, at::bitwise_or(a, b))
EMBER_LOGICAL(logical_xor, at::ne(a, b))
#undef EMBER_LOGICAL

at::Tensor& logical_not_out(const at::Tensor& self, at::Tensor& out) {
    if (!logical_ok(self, out)) return cpu<ATEN_OP2(logical_not, out)>(self, out);
    at::Tensor r = at::eq(self, 0);
    resize_out(out, r.sizes());
    return out.copy_(r);
}

// ---- hardtanh = clamp(x, lo, hi); its gradient passes where lo < x < hi ----------------------

bool real_float(const at::Tensor& t) { return at::isFloatingType(t.scalar_type()) && t.is_privateuseone(); }

at::Tensor& hardtanh_out(const at::Tensor& self, const c10::Scalar& lo, const c10::Scalar& hi, at::Tensor& out) {
    if (!real_float(self) || out.scalar_type() != self.scalar_type())
        return cpu<ATEN_OP2(hardtanh, out)>(self, lo, hi, out);
    return at::clamp_out(out, self, lo, hi);
}

at::Tensor hardtanh(const at::Tensor& self, const c10::Scalar& lo, const c10::Scalar& hi) {
    if (!real_float(self)) return cpu<ATEN_OP(hardtanh)>(self, lo, hi);
    return at::clamp(self, lo, hi);
}

at::Tensor& hardtanh_(at::Tensor& self, const c10::Scalar& lo, const c10::Scalar& hi) {
    if (!real_float(self)) return cpu<ATEN_OP(hardtanh_)>(self, lo, hi);
    return self.clamp_(lo, hi);
}

at::Tensor& hardtanh_backward_out(const at::Tensor& grad, const at::Tensor& self, const c10::Scalar& lo,
                                  const c10::Scalar& hi, at::Tensor& grad_input) {
    if (!real_float(self) || !real_float(grad) || grad_input.scalar_type() != grad.scalar_type())
        return cpu<ATEN_OP2(hardtanh_backward, grad_input)>(grad, self, lo, hi, grad_input);
    at::Tensor pass = at::logical_and(at::gt(self, lo), at::lt(self, hi));
    at::Tensor r = at::where(pass, grad, at::zeros({}, grad.options()));
    resize_out(grad_input, r.sizes());
    return grad_input.copy_(r);
}

at::Tensor hardtanh_backward(const at::Tensor& grad, const at::Tensor& self, const c10::Scalar& lo,
                             const c10::Scalar& hi) {
    at::Tensor out = at::empty({0}, grad.options());
    return hardtanh_backward_out(grad, self, lo, hi, out);
}

// ---- log_sigmoid(x) = -softplus(-x); its gradient is sigmoid(-x) ----------------------------
// (CPU returns a buffer for its backward; CUDA returns an empty one, as here.)

std::tuple<at::Tensor, at::Tensor> log_sigmoid_forward(const at::Tensor& self) {
    if (!real_float(self)) return cpu<ATEN_OP(log_sigmoid_forward)>(self);
    return {at::neg(at::softplus(at::neg(self))), at::empty({0}, self.options())};
}

at::Tensor log_sigmoid_backward(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& buffer) {
    if (!real_float(self) || !real_float(grad)) return cpu<ATEN_OP(log_sigmoid_backward)>(grad, self, buffer);
    return at::mul(grad, at::sigmoid(at::neg(self)));
}

// ---- sgn of a real tensor is its sign ---------------------------------------------------------

at::Tensor& sgn_out(const at::Tensor& self, at::Tensor& out) {
    if (self.is_complex() || out.scalar_type() != self.scalar_type() || !self.is_privateuseone())
        return cpu<ATEN_OP2(sgn, out)>(self, out);
    return at::sign_out(out, self);
}

// ---- scalar ** tensor (rotary frequencies: 10000 ** (arange(d) / d)) -------------------------

at::Tensor& pow_scalar_out(const c10::Scalar& base, const at::Tensor& exponent, at::Tensor& out) {
    if (base.isComplex() || exponent.is_complex() || !exponent.is_privateuseone())
        return cpu<ATEN_OP2(pow, Scalar_out)>(base, exponent, out);
    if (base.equal(1.0)) {  // as CPU: ones, whatever the exponent
        resize_out(out, exponent.sizes());
        return out.fill_(1);
    }
    at::Tensor b = c10::scalar_to_tensor(base);
    b.unsafeGetTensorImpl()->set_wrapped_number(true);
    return at::pow_out(out, b, exponent);
}

// ---- clamp_min / clamp_max with a scalar bound --------------------------------------------------

at::Tensor& clamp_min_out(const at::Tensor& self, const c10::Scalar& lo, at::Tensor& out) {
    return at::clamp_out(out, self, lo, std::nullopt);
}

at::Tensor& clamp_max_out(const at::Tensor& self, const c10::Scalar& hi, at::Tensor& out) {
    return at::clamp_out(out, self, std::nullopt, hi);
}

// ---- conj_physical: negate the imaginary part in place (real tensors are their own conjugate) --

at::Tensor& conj_physical_inplace(at::Tensor& self) {
    if (!self.is_complex()) return self;
    at::view_as_real(self).select(-1, 1).neg_();
    return self;
}

at::Tensor& conj_physical_out(const at::Tensor& self, at::Tensor& out) {
    if (!self.is_complex() || out.scalar_type() != self.scalar_type() || !out.is_privateuseone() || self.is_conj())
        return cpu<ATEN_OP2(conj_physical, out)>(self, out);
    resize_out(out, self.sizes(), {});
    if (!out.is_same(self)) at::view_as_real(out).copy_(at::view_as_real(self));
    return conj_physical_inplace(out);
}

// ---- _efficientzerotensor: autograd's "zero gradient" (sgn, torch.func) -------------------------
// CUDA returns a ZeroTensor that owns no memory; ember returns real zeros, which every op reads
// the same way (at the cost of the memory).
at::Tensor efficientzerotensor(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory) {
    return at::zeros(size, at::TensorOptions().dtype(dtype).layout(layout).device(device).pinned_memory(pin_memory));
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("_efficientzerotensor", efficientzerotensor);
    m.impl("conj_physical_", conj_physical_inplace);
    m.impl("conj_physical.out", conj_physical_out);
    m.impl("logical_and.out", logical_and_out);
    m.impl("logical_or.out", logical_or_out);
    m.impl("logical_xor.out", logical_xor_out);
    m.impl("logical_not.out", logical_not_out);
    m.impl("hardtanh", hardtanh);
    m.impl("hardtanh.out", hardtanh_out);
    m.impl("hardtanh_", hardtanh_);
    m.impl("hardtanh_backward", hardtanh_backward);
    m.impl("hardtanh_backward.grad_input", hardtanh_backward_out);
    m.impl("log_sigmoid_forward", log_sigmoid_forward);
    m.impl("log_sigmoid_backward", log_sigmoid_backward);
    m.impl("sgn.out", sgn_out);
    m.impl("pow.Scalar_out", pow_scalar_out);
    m.impl("clamp_min.out", clamp_min_out);
    m.impl("clamp_max.out", clamp_max_out);
}

}  // namespace ember::torch_glue
