// Elementwise ops on core's engine: arithmetic, comparisons and activations, each in its
// functional, in-place and out= form. Complex arithmetic is composed from real kernels on the
// parts (complex_parts.h); a dtype neither serves (bool for arithmetic other than add and mul,
// complex32) goes to the visible CPU fallback, so every result matches CPU.
#include <ATen/Operators.h>
#include <ATen/ScalarOps.h>
#include <ATen/native/BinaryOps.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include <limits>

#include "../fallback.h"
#include "complex_parts.h"
#include "elementwise_iter.h"
#include "glue.h"

namespace ember::torch_glue {
namespace {

using kernels::BinaryOp;
using kernels::UnaryOp;
using at::TensorIterator;

at::Tensor scalar_tensor(const c10::Scalar& s) {
    at::Tensor t = c10::scalar_to_tensor(s);
    t.unsafeGetTensorImpl()->set_wrapped_number(true);
    return t;
}

// ---- add / sub: out = self +- alpha * other. bool + bool into a bool result is logical or (0/1
// sums stored as bools); bool - bool is refused, by the CPU fallback's check ------------------

template <BinaryOp kOp>
void check_alpha(const at::TensorIteratorBase& iter, const at::Tensor& self, const at::Tensor& other,
                 const c10::Scalar& alpha) {
    if (kOp == BinaryOp::kSub) at::native::sub_check(self, other);
    at::native::alpha_check(iter.dtype(), alpha);
}

#define EMBER_ALPHA_OP(name, kOp)                                                                      \
    at::Tensor name##_tensor(const at::Tensor& self, const at::Tensor& other, const c10::Scalar& alpha) { \
        if (auto r = complex_add(self, other, alpha, kOp == BinaryOp::kSub)) return *r;               \
        at::Tensor out;                                                                                \
        auto iter = TensorIterator::binary_op(out, self, other);                                       \
        if (!native_compute(iter, true, kOp == BinaryOp::kAdd && iter.dtype(0) == at::kBool)) return cpu<ATEN_OP2(name, Tensor)>(self, other, alpha);       \
        check_alpha<kOp>(iter, self, other, alpha);                                                    \
        queue_binary(kOp, iter, alpha);                                                                \
        return iter.output();                                                                          \
    }                                                                                                  \
    at::Tensor& name##__tensor(at::Tensor& self, const at::Tensor& other, const c10::Scalar& alpha) {    \
        if (complex_on_device(self) && !self.is_conj()) {                                              \
            if (!writable_in_place(self, other)) {                                                     \
                /* an operand overlapping self: the real engine on the (re, im) views, in memory     \
                   order as for real tensors */                                                        \
                if (other.scalar_type() == self.scalar_type() && other.device() == self.device() &&    \
                    !other.is_conj() && !alpha.isComplex()) {                                          \
                    at::Tensor real = at::view_as_real(self);                                          \
                    real.name##_(at::view_as_real(other).expand(real.sizes()), alpha);                  \
                    return self;                                                                       \
                }                                                                                      \
            } else if (auto r = complex_add(self, other, alpha, kOp == BinaryOp::kSub);                \
                       r && r->scalar_type() == self.scalar_type() && r->sizes() == self.sizes()) {    \
                return write_out(self, *r);                                                            \
            }                                                                                          \
        }                                                                                              \
        auto iter = TensorIterator::binary_op(self, self, other);                                      \
        if (!native_compute(iter, true, kOp == BinaryOp::kAdd && iter.dtype(0) == at::kBool)) return cpu<ATEN_OP2(name##_, Tensor)>(self, other, alpha);    \
        check_alpha<kOp>(iter, self, other, alpha);                                                    \
        queue_binary(kOp, iter, alpha);                                                                \
        return self;                                                                                   \
    }                                                                                                  \
    at::Tensor& name##_out(const at::Tensor& self, const at::Tensor& other, const c10::Scalar& alpha,   \
                           at::Tensor& out) {                                                          \
        if (out.is_complex() && out.is_privateuseone())                                                \
            if (auto r = complex_add(self, other, alpha, kOp == BinaryOp::kSub);                      \
                r && r->scalar_type() == out.scalar_type())                                            \
                return write_out(out, *r);                                                             \
        auto iter = TensorIterator::binary_op(out, self, other);                                       \
        if (!native_compute(iter, true, kOp == BinaryOp::kAdd && iter.dtype(0) == at::kBool)) return cpu<ATEN_OP2(name, out)>(self, other, alpha, out);     \
        check_alpha<kOp>(iter, self, other, alpha);                                                    \
        queue_binary(kOp, iter, alpha);                                                                \
        return out;                                                                                    \
    }

EMBER_ALPHA_OP(add, BinaryOp::kAdd)
EMBER_ALPHA_OP(sub, BinaryOp::kSub)
#undef EMBER_ALPHA_OP

// ---- mul, div, maximum, minimum -------------------------------------------------------------
// `make` is the TensorIterator builder: binary_op, or binary_float_op where integers promote.

#define EMBER_BINARY_OP(name, kOp, make, integers, bools)                                                  \
    at::Tensor name##_tensor(const at::Tensor& self, const at::Tensor& other) {                     \
        at::Tensor out;                                                                             \
        auto iter = TensorIterator::make(out, self, other);                                         \
        if (!native_compute(iter, integers, bools)) return cpu<ATEN_OP2(name, Tensor)>(self, other);      \
        queue_binary(kOp, iter);                                                                    \
        return iter.output();                                                                       \
    }                                                                                               \
    at::Tensor& name##__tensor(at::Tensor& self, const at::Tensor& other) {                         \
        auto iter = TensorIterator::make(self, self, other);                                        \
        if (!native_compute(iter, integers, bools)) return cpu<ATEN_OP2(name##_, Tensor)>(self, other);   \
        queue_binary(kOp, iter);                                                                    \
        return self;                                                                                \
    }                                                                                               \
    at::Tensor& name##_out(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {      \
        auto iter = TensorIterator::make(out, self, other);                                         \
        if (!native_compute(iter, integers, bools)) return cpu<ATEN_OP2(name, out)>(self, other, out);    \
        queue_binary(kOp, iter);                                                                    \
        return out;                                                                                 \
    }

// bool * bool is logical and: 0/1 products, stored back as bools.
EMBER_BINARY_OP(mul, BinaryOp::kMul, binary_op, true, true)
EMBER_BINARY_OP(div, BinaryOp::kDiv, binary_float_op, false, false)
#undef EMBER_BINARY_OP

// ---- complex multiply and polar, composed from real kernels on the parts (complex_parts.h) ----

at::Tensor mul_complex_aware(const at::Tensor& self, const at::Tensor& other);
at::Tensor& mul_out_complex_aware(const at::Tensor& self, const at::Tensor& other, at::Tensor& out);

at::Tensor div_complex_aware(const at::Tensor& self, const at::Tensor& other) {
    if (auto r = complex_div(self, other)) return *r;
    return div_tensor(self, other);
}

at::Tensor& div_out_complex_aware(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {
    if (out.is_complex() && out.is_privateuseone())
        if (auto r = complex_div(self, other); r && r->scalar_type() == out.scalar_type()) return write_out(out, *r);
    return div_out(self, other, out);
}

at::Tensor& div__complex_aware(at::Tensor& self, const at::Tensor& other) {
    if (complex_on_device(self) && !self.is_conj() && writable_in_place(self, other))
        if (auto r = complex_div(self, other); r && r->scalar_type() == self.scalar_type() && r->sizes() == self.sizes())
            return write_out(self, *r);
    return div__tensor(self, other);
}

at::Tensor mul_complex_aware(const at::Tensor& self, const at::Tensor& other) {
    if (auto r = complex_mul(self, other)) return *r;
    return mul_tensor(self, other);
}

at::Tensor& mul_out_complex_aware(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {
    if (out.is_complex() && out.is_privateuseone())
        if (auto r = complex_mul(self, other); r && r->scalar_type() == out.scalar_type()) return write_out(out, *r);
    return mul_out(self, other, out);
}

at::Tensor& mul__complex_aware(at::Tensor& self, const at::Tensor& other) {
    if (complex_on_device(self) && !self.is_conj() && writable_in_place(self, other))
        if (auto r = complex_mul(self, other); r && r->scalar_type() == self.scalar_type() && r->sizes() == self.sizes())
            return write_out(self, *r);
    return mul__tensor(self, other);
}

// polar(abs, angle) = abs cos(angle) + i abs sin(angle)
at::Tensor& polar_out(const at::Tensor& abs, const at::Tensor& angle, at::Tensor& out) {
    bool ok = abs.scalar_type() == angle.scalar_type() && (abs.scalar_type() == at::kFloat || abs.scalar_type() == at::kDouble) &&
              out.scalar_type() == c10::toComplexType(abs.scalar_type()) && out.is_privateuseone() && !out.is_conj();
    if (!ok) return cpu<ATEN_OP2(polar, out)>(abs, angle, out);
    return write_out(out, from_parts(at::mul(abs, at::cos(angle)), at::mul(abs, at::sin(angle))));
}

// complex(real, imag) from two real tensors of one floating type.
at::Tensor& complex_out(const at::Tensor& real, const at::Tensor& imag, at::Tensor& out) {
    const auto t = real.scalar_type();
    bool ok = (t == at::kFloat || t == at::kDouble) && imag.scalar_type() == t && real.is_privateuseone() &&
              imag.device() == real.device() && out.device() == real.device() && out.scalar_type() == c10::toComplexType(t);
    if (!ok) return cpu<ATEN_OP2(complex, out)>(real, imag, out);
    return write_out(out, from_parts(real, imag));
}

// bool operands too: the larger of two bools is their or, the smaller their and.
#define EMBER_MINMAX_OP(name, kOp)                                                               \
    at::Tensor name##_fn(const at::Tensor& self, const at::Tensor& other) {                      \
        at::Tensor out;                                                                          \
        auto iter = TensorIterator::binary_op(out, self, other);                                 \
        if (!native_compute(iter, true, true)) return cpu<ATEN_OP(name)>(self, other);          \
        queue_binary(kOp, iter);                                                                 \
        return iter.output();                                                                    \
    }                                                                                            \
    at::Tensor& name##_out(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {   \
        auto iter = TensorIterator::binary_op(out, self, other);                                 \
        if (!native_compute(iter, true, true)) return cpu<ATEN_OP2(name, out)>(self, other, out); \
        queue_binary(kOp, iter);                                                                 \
        return out;                                                                              \
    }

EMBER_MINMAX_OP(maximum, BinaryOp::kMaximum)
EMBER_MINMAX_OP(minimum, BinaryOp::kMinimum)
#undef EMBER_MINMAX_OP

// ---- comparisons: bool results, Tensor and Scalar right-hand sides --------------------------

#define EMBER_COMPARE_OP(name, kOp)                                                                   \
    at::Tensor name##_tensor(const at::Tensor& self, const at::Tensor& other) {                       \
        if (kOp == BinaryOp::kEq || kOp == BinaryOp::kNe)                                             \
            if (auto r = complex_equal(self, other, kOp == BinaryOp::kNe)) return *r;                 \
        at::Tensor out;                                                                               \
        auto iter = TensorIterator::comparison_op(out, self, other);                                  \
        if (!native_compute(iter, true, true)) return cpu<ATEN_OP2(name, Tensor)>(self, other);      \
        queue_binary(kOp, iter);                                                                      \
        return iter.output();                                                                         \
    }                                                                                                 \
    at::Tensor& name##_tensor_out(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) { \
        if ((kOp == BinaryOp::kEq || kOp == BinaryOp::kNe) && out.scalar_type() == at::kBool &&         \
            out.is_privateuseone())                                                                   \
            if (auto r = complex_equal(self, other, kOp == BinaryOp::kNe)) return write_out(out, *r);  \
        auto iter = TensorIterator::comparison_op(out, self, other);                                  \
        if (!native_compute(iter, true, true)) return cpu<ATEN_OP2(name, Tensor_out)>(self, other, out); \
        queue_binary(kOp, iter);                                                                      \
        return out;                                                                                   \
    }                                                                                                 \
    at::Tensor& name##__tensor(at::Tensor& self, const at::Tensor& other) {                           \
        auto iter = TensorIterator::comparison_op(self, self, other);                                 \
        if (!native_compute(iter, true, true)) return cpu<ATEN_OP2(name##_, Tensor)>(self, other);   \
        queue_binary(kOp, iter);                                                                      \
        return self;                                                                                  \
    }                                                                                                 \
    at::Tensor name##_scalar(const at::Tensor& self, const c10::Scalar& other) {                      \
        return name##_tensor(self, scalar_tensor(other));                                             \
    }                                                                                                 \
    at::Tensor& name##_scalar_out(const at::Tensor& self, const c10::Scalar& other, at::Tensor& out) { \
        return name##_tensor_out(self, scalar_tensor(other), out);                                    \
    }                                                                                                 \
    at::Tensor& name##__scalar(at::Tensor& self, const c10::Scalar& other) {                          \
        return name##__tensor(self, scalar_tensor(other));                                            \
    }

EMBER_COMPARE_OP(eq, BinaryOp::kEq)
EMBER_COMPARE_OP(ne, BinaryOp::kNe)
EMBER_COMPARE_OP(lt, BinaryOp::kLt)
EMBER_COMPARE_OP(le, BinaryOp::kLe)
EMBER_COMPARE_OP(gt, BinaryOp::kGt)
EMBER_COMPARE_OP(ge, BinaryOp::kGe)
#undef EMBER_COMPARE_OP

// ---- pow --------------------------------------------------------------------------------------

at::Tensor& pow_tensor_tensor_out(const at::Tensor& self, const at::Tensor& exponent, at::Tensor& out) {
    auto iter = TensorIterator::binary_op(out, self, exponent);
    if (!native_compute(iter, true)) return cpu<ATEN_OP2(pow, Tensor_Tensor_out)>(self, exponent, out);
    queue_binary(BinaryOp::kPow, iter);
    return out;
}

at::Tensor pow_tensor_tensor(const at::Tensor& self, const at::Tensor& exponent) {
    at::Tensor out;
    auto iter = TensorIterator::binary_op(out, self, exponent);
    if (!native_compute(iter, true)) return cpu<ATEN_OP2(pow, Tensor_Tensor)>(self, exponent);
    queue_binary(BinaryOp::kPow, iter);
    return iter.output();
}

at::Tensor& pow__tensor(at::Tensor& self, const at::Tensor& exponent) {
    return pow_tensor_tensor_out(self, exponent, self);
}

// x ** e for a Python-number exponent, with PyTorch's exact special cases: e == 2 is x * x,
// 0.5 is sqrt, -0.5 rsqrt, -1 reciprocal (each once rounded, as on CPU).
at::Tensor& pow_tensor_scalar_out(const at::Tensor& self, const c10::Scalar& exponent, at::Tensor& out) {
    // A complex square is the complex product z * z, z ** 1 is z (its backward asks for it);
    // other complex powers take the CPU path.
    if (complex_on_device(self) && !exponent.isComplex() && out.scalar_type() == self.scalar_type() &&
        out.is_privateuseone()) {
        if (exponent.toDouble() == 2.0) return write_out(out, at::mul(self, self));
        if (exponent.toDouble() == 1.0) return write_out(out, self.resolve_conj());
    }
    at::ScalarType result = at::result_type(self, exponent);
    bool floating = at::isFloatingType(result);
    if (!floating && at::isIntegralType(result, /*includeBool=*/false) && exponent.isIntegral(false) &&
        (exponent.equal(2) || exponent.equal(3)) && out.scalar_type() == result) {
        // Integer squares and cubes (positions squared in a distance table) as exact products.
        at::Tensor base = self.to(result);
        at::Tensor prod = exponent.equal(2) ? base.mul(base) : base.mul(base).mul_(base);
        resize_out(out, prod.sizes());
        return out.copy_(prod);
    }
    // Other integer powers by squaring, wrapping as on the CPU (a negative one is its error).
    if (!floating && at::isIntegralType(result, false) && exponent.isIntegral(false) && exponent.toDouble() >= 0) {
        check_scalar_fits(exponent, result);
        auto iter = TensorIterator::binary_op(out, self, scalar_tensor(exponent));
        if (native_compute(iter, true)) { queue_binary(BinaryOp::kPow, iter); return out; }
    }
    if (!floating || exponent.isComplex()) {
        return cpu<ATEN_OP2(pow, Tensor_Scalar_out)>(self, exponent, out);
    }
    if (exponent.equal(0.0) || exponent.equal(1.0)) {  // as on CPU: ones, or a copy
        resize_out(out, self.sizes());
        TORCH_CHECK(at::canCast(result, out.scalar_type()), "result type ", result,
                    " can't be cast to the desired output type ", out.scalar_type());
        return exponent.equal(0.0) ? out.fill_(1) : out.copy_(self);
    }
    at::Tensor exp_t = scalar_tensor(exponent);
    if ((exponent.equal(3.0) || exponent.equal(-2.0)) && (result == at::kFloat || result == at::kDouble) &&
        out.scalar_type() == result && self.scalar_type() == result) {
        // The CPU's cube, (x * x) * x, and inverse square, 1 / (x * x): products in that order
        // (std::pow rounds differently).
        at::Tensor square = at::mul(self, self);
        at::Tensor r = exponent.equal(3.0) ? at::mul(square, self) : at::reciprocal(square);
        resize_out(out, r.sizes());
        return out.copy_(r);
    }
    if (exponent.equal(2.0)) {
        auto iter = TensorIterator::binary_op(out, self, self);
        if (native_compute(iter, false)) {
            queue_binary(BinaryOp::kMul, iter);
            return out;
        }
    } else if (((exponent.equal(0.5) || exponent.equal(-0.5)) && result != at::kHalf) || exponent.equal(-1.0)) {
        // (float16 takes std::pow for the roots, as on the CPU: (-0) ** 0.5 is +0, (-inf) ** 0.5 +inf.)
        auto iter = TensorIterator::unary_float_op(out, self);
        if (native_compute(iter, false)) {
            queue_unary(exponent.equal(0.5) ? UnaryOp::kSqrt
                        : exponent.equal(-0.5) ? UnaryOp::kRsqrt : UnaryOp::kReciprocal, iter);
            return out;
        }
    } else {
        auto iter = TensorIterator::binary_op(out, self, exp_t);
        if (native_compute(iter, false)) {
            queue_binary(BinaryOp::kPow, iter);
            return out;
        }
    }
    return cpu<ATEN_OP2(pow, Tensor_Scalar_out)>(self, exponent, out);
}

at::Tensor pow_tensor_scalar(const at::Tensor& self, const c10::Scalar& exponent) {
    at::ScalarType result = at::result_type(self, exponent);
    // Laid out like self (channels_last stays channels_last), as the CPU's TensorIterator does.
    at::Tensor out = at::empty_like(self, self.options().dtype(result), at::MemoryFormat::Preserve);
    return pow_tensor_scalar_out(self, exponent, out);
}

at::Tensor& pow__scalar(at::Tensor& self, const c10::Scalar& exponent) {
    return pow_tensor_scalar_out(self, exponent, self);
}

// ---- activations with parameters, their backwards, and the bitwise family -----------------
// Only the structured out= forms are registered: PyTorch derives the functional and in-place
// forms from them for every backend.

at::Tensor& gelu_out(const at::Tensor& self, c10::string_view approximate, at::Tensor& out) {
    TORCH_CHECK(approximate == "none" || approximate == "tanh", "approximate argument must be either none or tanh.");
    auto iter = TensorIterator::unary_op(out, self);
    if (!native_compute(iter, false)) return cpu<ATEN_OP2(gelu, out)>(self, approximate, out);
    queue_unary(approximate == "tanh" ? UnaryOp::kGeluTanh : UnaryOp::kGelu, iter);
    return out;
}

at::Tensor& gelu_backward_out(const at::Tensor& grad, const at::Tensor& self, c10::string_view approximate,
                              at::Tensor& grad_input) {
    auto iter = TensorIterator::binary_op(grad_input, grad, self);
    if (!native_compute(iter, false))
        return cpu<ATEN_OP2(gelu_backward, grad_input)>(grad, self, approximate, grad_input);
    queue_binary(approximate == "tanh" ? BinaryOp::kGeluTanhBackward : BinaryOp::kGeluBackward, iter);
    return grad_input;
}

// softplus has a kernel for its defaults (beta 1, threshold 20), which is what most models use.
bool softplus_defaults(const c10::Scalar& beta, const c10::Scalar& threshold) {
    return beta.toDouble() == 1.0 && threshold.toDouble() == 20.0;
}

// Other beta and threshold values (smoother or sharper softplus, as in some normalizing flows and
// positive-variance heads) are composed from native ops with the CPU kernel's formula,
// (x * beta > threshold) ? x : log1p(exp(x * beta)) / beta, in float for reduced-precision inputs
// as the CPU computes them.
at::Tensor softplus_composed(const at::Tensor& self, double beta, double threshold) {
    const bool low = self.scalar_type() == at::kHalf || self.scalar_type() == at::kBFloat16;
    at::Tensor x = low ? self.to(at::kFloat) : self;
    at::Tensor bx = x * beta;
    return at::where(bx > threshold, x, at::log1p(at::exp(bx)) / beta).to(self.scalar_type());
}

at::Tensor softplus_backward_composed(const at::Tensor& grad, const at::Tensor& self, double beta,
                                      double threshold) {
    const auto t = at::result_type(grad, self);
    const bool low = t == at::kHalf || t == at::kBFloat16;
    at::Tensor g = low ? grad.to(at::kFloat) : grad, x = low ? self.to(at::kFloat) : self;
    at::Tensor bx = x * beta, z = at::exp(bx);
    return at::where(bx > threshold, g, g * z / (z + 1)).to(t);
}

at::Tensor& softplus_out(const at::Tensor& self, const c10::Scalar& beta, const c10::Scalar& threshold,
                         at::Tensor& out) {
    auto iter = TensorIterator::unary_op(out, self);
    if (!native_compute(iter, false)) return cpu<ATEN_OP2(softplus, out)>(self, beta, threshold, out);
    if (!softplus_defaults(beta, threshold)) {
        if (out.scalar_type() != self.scalar_type())
            return cpu<ATEN_OP2(softplus, out)>(self, beta, threshold, out);
        at::Tensor r = softplus_composed(self, beta.toDouble(), threshold.toDouble());
        at::native::resize_output(out, r.sizes());
        return out.copy_(r);
    }
    queue_unary(UnaryOp::kSoftplus, iter);
    return out;
}

at::Tensor& softplus_backward_out(const at::Tensor& grad, const at::Tensor& self, const c10::Scalar& beta,
                                  const c10::Scalar& threshold, at::Tensor& grad_input) {
    auto iter = TensorIterator::binary_op(grad_input, grad, self);
    if (!native_compute(iter, false))
        return cpu<ATEN_OP2(softplus_backward, grad_input)>(grad, self, beta, threshold, grad_input);
    if (!softplus_defaults(beta, threshold)) {
        at::Tensor r = softplus_backward_composed(grad, self, beta.toDouble(), threshold.toDouble());
        if (grad_input.scalar_type() != r.scalar_type())
            return cpu<ATEN_OP2(softplus_backward, grad_input)>(grad, self, beta, threshold, grad_input);
        at::native::resize_output(grad_input, r.sizes());
        return grad_input.copy_(r);
    }
    queue_binary(BinaryOp::kSoftplusBackward, iter);
    return grad_input;
}

at::Tensor& silu_backward_out(const at::Tensor& grad, const at::Tensor& self, at::Tensor& grad_input) {
    auto iter = TensorIterator::binary_op(grad_input, grad, self);
    if (!native_compute(iter, false)) return cpu<ATEN_OP2(silu_backward, grad_input)>(grad, self, grad_input);
    queue_binary(BinaryOp::kSiluBackward, iter);
    return grad_input;
}

// silu_backward also has a CompositeImplicitAutograd kernel (sigmoid and three muls), which
// backends without their own functional form get; this one makes it a single kernel.
at::Tensor silu_backward(const at::Tensor& grad, const at::Tensor& self) {
    at::Tensor out = at::empty({0}, grad.options().dtype(at::result_type(grad, self)));
    return silu_backward_out(grad, self, out);
}

#define EMBER_OUTPUT_BACKWARD(name, kOp)                                                         \
    at::Tensor& name##_out(const at::Tensor& grad, const at::Tensor& output, at::Tensor& grad_input) { \
        auto iter = TensorIterator::binary_op(grad_input, grad, output);                          \
        if (!native_compute(iter, false))                                                         \
            return cpu<ATEN_OP2(name, grad_input)>(grad, output, grad_input);                    \
        queue_binary(kOp, iter);                                                                  \
        return grad_input;                                                                        \
    }
EMBER_OUTPUT_BACKWARD(sigmoid_backward, BinaryOp::kSigmoidBackward)
EMBER_OUTPUT_BACKWARD(tanh_backward, BinaryOp::kTanhBackward)
#undef EMBER_OUTPUT_BACKWARD

// Functional forms of the ops above that ember registers as out= kernels: without them PyTorch's
// functional kernel calls the out= one through the dispatcher, which costs a second dispatch
// and shows in a profile as aten::gelu inside aten::gelu (each call counted twice).
at::Tensor gelu_fn(const at::Tensor& self, c10::string_view approximate) {
    at::Tensor out = at::empty({0}, self.options());
    return gelu_out(self, approximate, out);
}
at::Tensor gelu_backward_fn(const at::Tensor& grad, const at::Tensor& self, c10::string_view approximate) {
    at::Tensor out = at::empty({0}, grad.options().dtype(at::result_type(grad, self)));
    return gelu_backward_out(grad, self, approximate, out);
}
at::Tensor softplus_fn(const at::Tensor& self, const c10::Scalar& beta, const c10::Scalar& threshold) {
    at::Tensor out = at::empty({0}, self.options());
    return softplus_out(self, beta, threshold, out);
}
at::Tensor softplus_backward_fn(const at::Tensor& grad, const at::Tensor& self, const c10::Scalar& beta,
                                const c10::Scalar& threshold) {
    at::Tensor out = at::empty({0}, grad.options().dtype(at::result_type(grad, self)));
    return softplus_backward_out(grad, self, beta, threshold, out);
}
at::Tensor sigmoid_backward_fn(const at::Tensor& grad, const at::Tensor& output) {
    at::Tensor out = at::empty({0}, grad.options().dtype(at::result_type(grad, output)));
    return sigmoid_backward_out(grad, output, out);
}
at::Tensor tanh_backward_fn(const at::Tensor& grad, const at::Tensor& output) {
    at::Tensor out = at::empty({0}, grad.options().dtype(at::result_type(grad, output)));
    return tanh_backward_out(grad, output, out);
}

// Floating inputs go to the CPU path, which raises PyTorch's own error for them.
bool native_bitwise(const at::TensorIteratorBase& iter) {
    return at::isIntegralType(iter.common_dtype(), /*includeBool=*/true) && native_compute(iter, true, true);
}

at::Tensor& bitwise_not_out(const at::Tensor& self, at::Tensor& out) {
    auto iter = TensorIterator::unary_op(out, self);
    if (!native_bitwise(iter)) return cpu<ATEN_OP2(bitwise_not, out)>(self, out);
    queue_unary(UnaryOp::kBitwiseNot, iter);
    return out;
}

#define EMBER_BITWISE_OP(name, kOp)                                                              \
    at::Tensor& name##_out(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {   \
        auto iter = TensorIterator::binary_op(out, self, other);                                 \
        if (!native_bitwise(iter))                                                               \
            return cpu<ATEN_OP2(name, Tensor_out)>(self, other, out);                            \
        queue_binary(kOp, iter);                                                                 \
        return out;                                                                              \
    }
EMBER_BITWISE_OP(bitwise_and, BinaryOp::kBitwiseAnd)
EMBER_BITWISE_OP(bitwise_or, BinaryOp::kBitwiseOr)
EMBER_BITWISE_OP(bitwise_xor, BinaryOp::kBitwiseXor)
#undef EMBER_BITWISE_OP

// Shifts: integers only (bool keeps the CPU's error). The operator forms (x << 2, x <<= t) are
// kernels of their own in PyTorch, with a Python number wrapped as a 0-d tensor.
#define EMBER_SHIFT_OP(name, dunder, kOp)                                                        \
    at::Tensor& name##_out(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {   \
        auto iter = TensorIterator::binary_op(out, self, other);                                 \
        if (iter.common_dtype() == at::kBool || !native_bitwise(iter))                           \
            return cpu<ATEN_OP2(name, Tensor_out)>(self, other, out);                            \
        queue_binary(kOp, iter);                                                                 \
        return out;                                                                              \
    }                                                                                            \
    at::Tensor dunder##_tensor(const at::Tensor& self, const at::Tensor& other) {                \
        return at::name(self, other);                                                            \
    }                                                                                            \
    at::Tensor dunder##_scalar(const at::Tensor& self, const c10::Scalar& other) {               \
        return at::name(self, at::native::wrapped_scalar_tensor(other));                         \
    }                                                                                            \
    at::Tensor& i##dunder##_tensor(at::Tensor& self, const at::Tensor& other) {                  \
        return at::name##_out(self, self, other);                                                \
    }                                                                                            \
    at::Tensor& i##dunder##_scalar(at::Tensor& self, const c10::Scalar& other) {                 \
        return at::name##_out(self, self, at::native::wrapped_scalar_tensor(other));             \
    }
EMBER_SHIFT_OP(bitwise_left_shift, lshift, BinaryOp::kShiftLeft)
EMBER_SHIFT_OP(bitwise_right_shift, rshift, BinaryOp::kShiftRight)
#undef EMBER_SHIFT_OP

// relu has no out= form and keeps integer dtypes.
at::Tensor relu_fn(const at::Tensor& self) {
    at::Tensor out;
    auto iter = TensorIterator::unary_op(out, self);
    if (!native_compute(iter, true)) return cpu<ATEN_OP(relu)>(self);
    queue_unary(UnaryOp::kRelu, iter);
    return iter.output();
}

at::Tensor& relu__fn(at::Tensor& self) {
    auto iter = TensorIterator::unary_op(self, self);
    if (!native_compute(iter, true)) return cpu<ATEN_OP(relu_)>(self);
    queue_unary(UnaryOp::kRelu, iter);
    return self;
}

// ---- isposinf / isneginf / isnan and clamp, composed from the kernels above ------------------------

// Integers and bools are never infinite: all false.
#define EMBER_IS_INF(name, value)                                                         \
    at::Tensor& name##_out(const at::Tensor& self, at::Tensor& out) {                      \
        const bool integral = at::isIntegralType(self.scalar_type(), true) && plain_dtype(self.scalar_type()); \
        if ((!at::isFloatingType(self.scalar_type()) && !integral) || out.scalar_type() != at::kBool) \
            return cpu<ATEN_OP2(name, out)>(self, out);                                    \
        if (integral) {                                                                    \
            resize_out(out, self.sizes(), {&self});                                        \
            return out.fill_(false);                                                       \
        }                                                                                  \
        return eq_tensor_out(self, scalar_tensor(value), out);                             \
    }                                                                                      \
    at::Tensor name##_fn(const at::Tensor& self) {                                         \
        if (at::isIntegralType(self.scalar_type(), true) && plain_dtype(self.scalar_type())) \
            return at::zeros(self.sizes(), self.options().dtype(at::kBool));              \
        if (!at::isFloatingType(self.scalar_type())) return cpu<ATEN_OP(name)>(self);     \
        return eq_tensor(self, scalar_tensor(value));                                      \
    }

EMBER_IS_INF(isposinf, std::numeric_limits<double>::infinity())
EMBER_IS_INF(isneginf, -std::numeric_limits<double>::infinity())
#undef EMBER_IS_INF

// isnan(x) = x != x, which is true exactly for NaN (complex included: either part NaN); integers
// and bools are never NaN.
at::Tensor isnan_fn(const at::Tensor& self) {
    if (!at::isFloatingType(self.scalar_type()) && !at::isComplexType(self.scalar_type()))
        return at::zeros(self.sizes(), self.options().dtype(at::kBool));
    return ne_tensor(self, self);
}

// clamp(x, lo, hi) = minimum(maximum(x, lo), hi): NaN in x or a bound propagates, and lo > hi
// gives hi, both as in PyTorch.
at::Tensor& clamp_out(const at::Tensor& self, const std::optional<c10::Scalar>& min,
                      const std::optional<c10::Scalar>& max, at::Tensor& out) {
    at::ScalarType rt = self.scalar_type();
    if (min) rt = at::result_type(scalar_tensor(*min), at::empty({0}, self.options().dtype(rt)));
    if (max) rt = at::result_type(scalar_tensor(*max), at::empty({0}, self.options().dtype(rt)));
    // An integer or bool tensor clamped by floating bounds: the CPU computes in the promoted
    // dtype, so the tensor is converted first.
    if ((min || max) && rt != self.scalar_type() && at::isFloatingType(rt) && out.scalar_type() == rt &&
        !at::isComplexType(self.scalar_type()) && has_dtype(rt))
        return clamp_out(self.to(rt), min, max, out);
    bool ok = (min || max) && rt == self.scalar_type() && out.scalar_type() == rt && rt != at::kBool &&
              !at::isComplexType(rt) && (!min || !min->isComplex()) && (!max || !max->isComplex());
    if (!ok) return cpu<ATEN_OP2(clamp, out)>(self, min, max, out);
    // As CPU does, the bounds are first converted to the tensor's dtype (wrapping for integers).
    auto bound = [&](const c10::Scalar& v) {
        check_scalar_fits(v, rt);
        at::Tensor t = c10::scalar_to_tensor(v).to(rt);
        t.unsafeGetTensorImpl()->set_wrapped_number(true);
        return t;
    };
    const at::Tensor* src = &self;
    if (min) {
        maximum_out(*src, bound(*min), out);
        src = &out;
    }
    if (max) minimum_out(*src, bound(*max), out);
    return out;
}

at::Tensor clamp_fn(const at::Tensor& self, const std::optional<c10::Scalar>& min,
                    const std::optional<c10::Scalar>& max) {
    at::Tensor out = at::empty({0}, self.options());
    at::ScalarType rt = self.scalar_type();
    if (min) rt = at::result_type(scalar_tensor(*min), at::empty({0}, self.options().dtype(rt)));
    if (max) rt = at::result_type(scalar_tensor(*max), at::empty({0}, self.options().dtype(rt)));
    if (rt != self.scalar_type()) {
        if (!at::isFloatingType(rt) || !has_dtype(rt)) return cpu<ATEN_OP(clamp)>(self, min, max);
        out = at::empty({0}, self.options().dtype(rt));
    }
    return clamp_out(self, min, max, out);
}

at::Tensor& clamp__fn(at::Tensor& self, const std::optional<c10::Scalar>& min,
                      const std::optional<c10::Scalar>& max) {
    return clamp_out(self, min, max, self);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("isnan", isnan_fn);
    m.impl("isposinf", isposinf_fn);
    m.impl("isposinf.out", isposinf_out);
    m.impl("isneginf", isneginf_fn);
    m.impl("isneginf.out", isneginf_out);
    m.impl("clamp", clamp_fn);
    m.impl("clamp.out", clamp_out);
    m.impl("clamp_", clamp__fn);
    m.impl("add.Tensor", add_tensor);
    m.impl("add_.Tensor", add__tensor);
    m.impl("add.out", add_out);
    m.impl("sub.Tensor", sub_tensor);
    m.impl("sub_.Tensor", sub__tensor);
    m.impl("sub.out", sub_out);
    m.impl("mul.Tensor", mul_complex_aware);
    m.impl("mul_.Tensor", mul__complex_aware);
    m.impl("mul.out", mul_out_complex_aware);
    m.impl("polar.out", polar_out);
    m.impl("complex.out", complex_out);
    m.impl("div.Tensor", div_complex_aware);
    m.impl("div_.Tensor", div__complex_aware);
    m.impl("div.out", div_out_complex_aware);
    m.impl("maximum", maximum_fn);
    m.impl("maximum.out", maximum_out);
    m.impl("minimum", minimum_fn);
    m.impl("minimum.out", minimum_out);
#define EMBER_REGISTER_COMPARE(name)                     \
    m.impl(#name ".Tensor", name##_tensor);             \
    m.impl(#name ".Tensor_out", name##_tensor_out);     \
    m.impl(#name "_.Tensor", name##__tensor);           \
    m.impl(#name ".Scalar", name##_scalar);             \
    m.impl(#name ".Scalar_out", name##_scalar_out);     \
    m.impl(#name "_.Scalar", name##__scalar);
    EMBER_REGISTER_COMPARE(eq)
    EMBER_REGISTER_COMPARE(ne)
    EMBER_REGISTER_COMPARE(lt)
    EMBER_REGISTER_COMPARE(le)
    EMBER_REGISTER_COMPARE(gt)
    EMBER_REGISTER_COMPARE(ge)
#undef EMBER_REGISTER_COMPARE
    m.impl("pow.Tensor_Tensor", pow_tensor_tensor);
    m.impl("pow.Tensor_Tensor_out", pow_tensor_tensor_out);
    m.impl("pow_.Tensor", pow__tensor);
    m.impl("pow.Tensor_Scalar", pow_tensor_scalar);
    m.impl("pow.Tensor_Scalar_out", pow_tensor_scalar_out);
    m.impl("pow_.Scalar", pow__scalar);
    m.impl("gelu", gelu_fn);
    m.impl("gelu_backward", gelu_backward_fn);
    m.impl("softplus", softplus_fn);
    m.impl("softplus_backward", softplus_backward_fn);
    m.impl("sigmoid_backward", sigmoid_backward_fn);
    m.impl("tanh_backward", tanh_backward_fn);
    m.impl("gelu.out", gelu_out);
    m.impl("gelu_backward.grad_input", gelu_backward_out);
    m.impl("softplus.out", softplus_out);
    m.impl("softplus_backward.grad_input", softplus_backward_out);
    m.impl("sigmoid_backward.grad_input", sigmoid_backward_out);
    m.impl("silu_backward", silu_backward);
    m.impl("silu_backward.grad_input", silu_backward_out);
    m.impl("tanh_backward.grad_input", tanh_backward_out);
    m.impl("bitwise_not.out", bitwise_not_out);
    m.impl("bitwise_and.Tensor_out", bitwise_and_out);
    m.impl("bitwise_or.Tensor_out", bitwise_or_out);
    m.impl("bitwise_xor.Tensor_out", bitwise_xor_out);
    m.impl("bitwise_left_shift.Tensor_out", bitwise_left_shift_out);
    m.impl("bitwise_right_shift.Tensor_out", bitwise_right_shift_out);
    m.impl("__lshift__.Tensor", lshift_tensor);
    m.impl("__lshift__.Scalar", lshift_scalar);
    m.impl("__ilshift__.Tensor", ilshift_tensor);
    m.impl("__ilshift__.Scalar", ilshift_scalar);
    m.impl("__rshift__.Tensor", rshift_tensor);
    m.impl("__rshift__.Scalar", rshift_scalar);
    m.impl("__irshift__.Tensor", irshift_tensor);
    m.impl("__irshift__.Scalar", irshift_scalar);
    m.impl("relu", relu_fn);
    m.impl("relu_", relu__fn);
}

}  // namespace ember::torch_glue
