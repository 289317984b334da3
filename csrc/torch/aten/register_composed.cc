// Ops composed from other native ember ops (each call below dispatches to an ember kernel): logical
// ops, hardtanh, log-sigmoid, sgn of real tensors, a scalar raised to a tensor, one-sided clamps,
// autograd's efficient zeros, the fused LSTM and GRU cells.
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

// ---- fused LSTM / GRU cells -------------------------------------------------------------------
// nn.LSTM / nn.GRU on an accelerator call these per time step (the CPU has no kernel for them).
// The gates come precomputed by two matmuls; the cell applies the activations. The workspace
// keeps what the backward needs, shaped as PyTorch's meta functions say: LSTM (B, 4H) activated
// gates [i f g o]; GRU (B, 5H) [r z n hx hidden_n].

at::Tensor with_biases(at::Tensor gates, const std::optional<at::Tensor>& a, const std::optional<at::Tensor>& b) {
    if (a.has_value() && a->defined()) gates = gates + *a;
    if (b.has_value() && b->defined()) gates = gates + *b;
    return gates;
}

void check_cell(const at::Tensor& ig, const at::Tensor& hg, const at::Tensor& prev, int64_t factor,
                const char* name) {
    TORCH_CHECK(ig.dim() == 2 && ig.sizes() == hg.sizes(), name, ": input_gates ", ig.sizes(),
                " and hidden_gates ", hg.sizes(), " must be equal 2-d shapes");
    TORCH_CHECK(prev.dim() == 2 && prev.size(0) == ig.size(0) && prev.size(1) * factor == ig.size(1), name,
                ": state ", prev.sizes(), " does not match gates ", ig.sizes());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell(const at::Tensor& input_gates,
                                                         const at::Tensor& hidden_gates, const at::Tensor& cx,
                                                         const std::optional<at::Tensor>& input_bias,
                                                         const std::optional<at::Tensor>& hidden_bias) {
    check_cell(input_gates, hidden_gates, cx, 4, "_thnn_fused_lstm_cell");
    at::Tensor gates = with_biases(input_gates + hidden_gates, input_bias, hidden_bias);
    auto c = gates.chunk(4, 1);
    at::Tensor i = c[0].sigmoid(), f = c[1].sigmoid(), g = c[2].tanh(), o = c[3].sigmoid();
    at::Tensor cy = f * cx + i * g;
    at::Tensor hy = o * cy.tanh();
    return {hy, cy, at::cat({i, f, g, o}, 1)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell_backward(const std::optional<at::Tensor>& grad_hy,
                                                                  const std::optional<at::Tensor>& grad_cy,
                                                                  const at::Tensor& cx, const at::Tensor& cy,
                                                                  const at::Tensor& workspace, bool has_bias) {
    const bool ghy = grad_hy.has_value() && grad_hy->defined(), gcy = grad_cy.has_value() && grad_cy->defined();
    if (!ghy && !gcy) return {at::Tensor(), at::Tensor(), at::Tensor()};
    auto w = workspace.chunk(4, 1);
    const at::Tensor &i = w[0], &f = w[1], &g = w[2], &o = w[3];
    at::Tensor tcy = cy.tanh();
    at::Tensor dc = gcy ? grad_cy->clone() : at::zeros_like(cy);
    at::Tensor go = at::zeros_like(o);
    if (ghy) {
        dc = dc + *grad_hy * o * (1 - tcy * tcy);
        go = *grad_hy * tcy;
    }
    at::Tensor gi = dc * g * i * (1 - i);
    at::Tensor gf = dc * cx * f * (1 - f);
    at::Tensor gg = dc * i * (1 - g * g);
    go = go * o * (1 - o);
    at::Tensor grad_gates = at::cat({gi, gf, gg, go}, 1);
    at::Tensor grad_bias = has_bias ? grad_gates.sum(0) : at::Tensor();
    return {grad_gates, dc * f, grad_bias};
}

std::tuple<at::Tensor, at::Tensor> gru_cell(const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                                            const at::Tensor& hx, const std::optional<at::Tensor>& input_bias,
                                            const std::optional<at::Tensor>& hidden_bias) {
    check_cell(input_gates, hidden_gates, hx, 3, "_thnn_fused_gru_cell");
    auto ic = with_biases(input_gates, input_bias, std::nullopt).chunk(3, 1);
    auto hc = with_biases(hidden_gates, hidden_bias, std::nullopt).chunk(3, 1);
    at::Tensor r = (ic[0] + hc[0]).sigmoid(), z = (ic[1] + hc[1]).sigmoid();
    at::Tensor n = (ic[2] + r * hc[2]).tanh();
    at::Tensor hy = n + z * (hx - n);
    return {hy, at::cat({r, z, n, hx, hc[2]}, 1)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> gru_cell_backward(
    const at::Tensor& grad_hy, const at::Tensor& workspace, bool has_bias) {
    auto w = workspace.chunk(5, 1);
    const at::Tensor &r = w[0], &z = w[1], &n = w[2], &hx = w[3], &hn = w[4];
    at::Tensor gn = grad_hy * (1 - z) * (1 - n * n);
    at::Tensor gz = grad_hy * (hx - n) * z * (1 - z);
    at::Tensor gr = gn * hn * r * (1 - r);
    at::Tensor grad_input = at::cat({gr, gz, gn}, 1);
    at::Tensor grad_hidden = at::cat({gr, gz, gn * r}, 1);
    at::Tensor gib = has_bias ? grad_input.sum(0) : at::Tensor();
    at::Tensor ghb = has_bias ? grad_hidden.sum(0) : at::Tensor();
    return {grad_input, grad_hidden, grad_hy * z, gib, ghb};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("_thnn_fused_lstm_cell", lstm_cell);
    m.impl("_thnn_fused_lstm_cell_backward_impl", lstm_cell_backward);
    m.impl("_thnn_fused_gru_cell", gru_cell);
    m.impl("_thnn_fused_gru_cell_backward", gru_cell_backward);
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
