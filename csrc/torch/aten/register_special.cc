// torch.special's long tail on core's special-function kernels (kernels/elementwise/special.h):
// Bessel functions, erfcx, ndtri, Hurwitz zeta, the incomplete gamma functions and the orthogonal
// polynomials, each in its functional and out= form (and in-place where ATen has one); and the
// gradient of Gamma samples, which torch.distributions' rsample reaches.
// TensorIterator does broadcasting, type promotion and the out= checks as for CPU. Where the CPU
// has no kernel for a dtype (most of these refuse float16/bfloat16), the call goes to the CPU
// fallback, which raises the CPU's own error; complex does too.
#include <ATen/Operators.h>
#include <torch/library.h>

#include "../fallback.h"
#include "elementwise_iter.h"
#include "glue.h"

namespace ember::torch_glue {
namespace {

using kernels::SpecialOp;
using at::TensorIterator;

// The compute dtypes served natively: float32 and float64, and the half types where the CPU
// computes them too (`halves`).
bool special_native(const at::TensorIteratorBase& iter, bool halves) {
    const auto t = iter.common_dtype();
    if (t == at::kFloat || t == at::kDouble) return native_compute(iter, false);
    return halves && (t == at::kHalf || t == at::kBFloat16) && native_compute(iter, false);
}

// Unary functions: the iterator promotes integer and bool inputs to the default float dtype.
#define EMBER_SPECIAL_UNARY(name, kOp, halves)                                                  \
    at::Tensor name##_fn(const at::Tensor& self) {                                              \
        at::Tensor out;                                                                         \
        auto iter = TensorIterator::unary_float_op(out, self);                                  \
        if (!special_native(iter, halves)) return cpu<ATEN_OP(name)>(self);                    \
        queue_special(kOp, iter);                                                               \
        return iter.output();                                                                   \
    }                                                                                           \
    at::Tensor& name##_out(const at::Tensor& self, at::Tensor& out) {                           \
        if (self.is_complex() || out.is_complex()) return cpu<ATEN_OP2(name, out)>(self, out); \
        auto iter = TensorIterator::unary_float_op(out, self);                                  \
        if (!special_native(iter, halves)) return cpu<ATEN_OP2(name, out)>(self, out);         \
        queue_special(kOp, iter);                                                               \
        return out;                                                                             \
    }

EMBER_SPECIAL_UNARY(i0, SpecialOp::kI0, true)
EMBER_SPECIAL_UNARY(special_i0e, SpecialOp::kI0e, true)
EMBER_SPECIAL_UNARY(special_i1, SpecialOp::kI1, true)
EMBER_SPECIAL_UNARY(special_i1e, SpecialOp::kI1e, true)
EMBER_SPECIAL_UNARY(special_modified_bessel_i0, SpecialOp::kI0, false)
EMBER_SPECIAL_UNARY(special_modified_bessel_i1, SpecialOp::kI1, false)
EMBER_SPECIAL_UNARY(special_modified_bessel_k0, SpecialOp::kK0, false)
EMBER_SPECIAL_UNARY(special_modified_bessel_k1, SpecialOp::kK1, false)
EMBER_SPECIAL_UNARY(special_scaled_modified_bessel_k0, SpecialOp::kK0e, false)
EMBER_SPECIAL_UNARY(special_scaled_modified_bessel_k1, SpecialOp::kK1e, false)
EMBER_SPECIAL_UNARY(special_bessel_j0, SpecialOp::kJ0, false)
EMBER_SPECIAL_UNARY(special_bessel_j1, SpecialOp::kJ1, false)
EMBER_SPECIAL_UNARY(special_bessel_y0, SpecialOp::kY0, false)
EMBER_SPECIAL_UNARY(special_bessel_y1, SpecialOp::kY1, false)
EMBER_SPECIAL_UNARY(special_spherical_bessel_j0, SpecialOp::kSphericalJ0, false)
EMBER_SPECIAL_UNARY(special_airy_ai, SpecialOp::kAiryAi, false)
EMBER_SPECIAL_UNARY(special_erfcx, SpecialOp::kErfcx, false)
EMBER_SPECIAL_UNARY(special_ndtri, SpecialOp::kNdtri, false)
#undef EMBER_SPECIAL_UNARY

at::Tensor& i0__fn(at::Tensor& self) {
    auto iter = TensorIterator::unary_float_op(self, self);
    if (!special_native(iter, true)) return cpu<ATEN_OP(i0_)>(self);
    queue_special(SpecialOp::kI0, iter);
    return self;
}

// Two-argument functions. `make` is binary_float_op (integers promote: zeta, the polynomials) or
// binary_op (igamma and igammac, which the CPU refuses for integers).
#define EMBER_SPECIAL_BINARY(name, kOp, make, halves)                                                    \
    at::Tensor name##_fn(const at::Tensor& self, const at::Tensor& other) {                              \
        at::Tensor out;                                                                                  \
        auto iter = TensorIterator::make(out, self, other);                                              \
        if (!special_native(iter, halves)) return cpu<ATEN_OP(name)>(self, other);                      \
        queue_special(kOp, iter);                                                                        \
        return iter.output();                                                                            \
    }                                                                                                    \
    at::Tensor& name##_out(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {           \
        if (self.is_complex() || other.is_complex() || out.is_complex())                                 \
            return cpu<ATEN_OP2(name, out)>(self, other, out);                                           \
        auto iter = TensorIterator::make(out, self, other);                                              \
        if (!special_native(iter, halves)) return cpu<ATEN_OP2(name, out)>(self, other, out);           \
        queue_special(kOp, iter);                                                                        \
        return out;                                                                                      \
    }

EMBER_SPECIAL_BINARY(special_zeta, SpecialOp::kZeta, binary_float_op, false)
EMBER_SPECIAL_BINARY(igamma, SpecialOp::kIgamma, binary_op, true)
EMBER_SPECIAL_BINARY(igammac, SpecialOp::kIgammac, binary_op, true)
EMBER_SPECIAL_BINARY(special_chebyshev_polynomial_t, SpecialOp::kChebyshevT, binary_float_op, false)
EMBER_SPECIAL_BINARY(special_chebyshev_polynomial_u, SpecialOp::kChebyshevU, binary_float_op, false)
EMBER_SPECIAL_BINARY(special_chebyshev_polynomial_v, SpecialOp::kChebyshevV, binary_float_op, false)
EMBER_SPECIAL_BINARY(special_chebyshev_polynomial_w, SpecialOp::kChebyshevW, binary_float_op, false)
EMBER_SPECIAL_BINARY(special_shifted_chebyshev_polynomial_t, SpecialOp::kShiftedChebyshevT, binary_float_op, false)
EMBER_SPECIAL_BINARY(special_shifted_chebyshev_polynomial_u, SpecialOp::kShiftedChebyshevU, binary_float_op, false)
EMBER_SPECIAL_BINARY(special_shifted_chebyshev_polynomial_v, SpecialOp::kShiftedChebyshevV, binary_float_op, false)
EMBER_SPECIAL_BINARY(special_shifted_chebyshev_polynomial_w, SpecialOp::kShiftedChebyshevW, binary_float_op, false)
EMBER_SPECIAL_BINARY(special_hermite_polynomial_h, SpecialOp::kHermiteH, binary_float_op, false)
EMBER_SPECIAL_BINARY(special_hermite_polynomial_he, SpecialOp::kHermiteHe, binary_float_op, false)
EMBER_SPECIAL_BINARY(special_laguerre_polynomial_l, SpecialOp::kLaguerreL, binary_float_op, false)
EMBER_SPECIAL_BINARY(special_legendre_polynomial_p, SpecialOp::kLegendreP, binary_float_op, false)
#undef EMBER_SPECIAL_BINARY

#define EMBER_SPECIAL_INPLACE(name, kOp)                                       \
    at::Tensor& name##__fn(at::Tensor& self, const at::Tensor& other) {        \
        auto iter = TensorIterator::binary_op(self, self, other);              \
        if (!special_native(iter, true)) return cpu<ATEN_OP(name##_)>(self, other); \
        queue_special(kOp, iter);                                              \
        return self;                                                           \
    }
EMBER_SPECIAL_INPLACE(igamma, SpecialOp::kIgamma)
EMBER_SPECIAL_INPLACE(igammac, SpecialOp::kIgammac)
#undef EMBER_SPECIAL_INPLACE

// The reparameterized gradient of Gamma samples (Gamma.rsample's backward): as the CPU's kernel,
// for one floating dtype and the sample broadcasting to alpha's shape.
at::Tensor standard_gamma_grad_fn(const at::Tensor& self, const at::Tensor& output) {
    if (self.scalar_type() != output.scalar_type()) return cpu<ATEN_OP(_standard_gamma_grad)>(self, output);
    at::Tensor out = at::empty(self.sizes(), self.options());
    auto iter = TensorIterator::binary_op(out, self, output);
    if (!special_native(iter, false)) return cpu<ATEN_OP(_standard_gamma_grad)>(self, output);
    queue_special(SpecialOp::kStandardGammaGrad, iter);
    return out;
}

}  // namespace

// polygamma of order >= 2 (register_unary.cc serves orders 0 and 1 with digamma and trigamma).
bool queue_polygamma(int64_t n, at::TensorIteratorBase& iter) {
    if (n < 2 || !special_native(iter, true)) return false;
    queue_special(SpecialOp::kPolygamma, iter, n);
    return true;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
#define EMBER_REGISTER(name)                  \
    m.impl(#name, TORCH_FN(name##_fn));       \
    m.impl(#name ".out", TORCH_FN(name##_out));
    EMBER_REGISTER(i0)
    m.impl("i0_", TORCH_FN(i0__fn));
    EMBER_REGISTER(special_i0e)
    EMBER_REGISTER(special_i1)
    EMBER_REGISTER(special_i1e)
    EMBER_REGISTER(special_modified_bessel_i0)
    EMBER_REGISTER(special_modified_bessel_i1)
    EMBER_REGISTER(special_modified_bessel_k0)
    EMBER_REGISTER(special_modified_bessel_k1)
    EMBER_REGISTER(special_scaled_modified_bessel_k0)
    EMBER_REGISTER(special_scaled_modified_bessel_k1)
    EMBER_REGISTER(special_bessel_j0)
    EMBER_REGISTER(special_bessel_j1)
    EMBER_REGISTER(special_bessel_y0)
    EMBER_REGISTER(special_bessel_y1)
    EMBER_REGISTER(special_spherical_bessel_j0)
    EMBER_REGISTER(special_airy_ai)
    EMBER_REGISTER(special_erfcx)
    EMBER_REGISTER(special_ndtri)
    EMBER_REGISTER(special_zeta)
    EMBER_REGISTER(igamma)
    m.impl("igamma_", TORCH_FN(igamma__fn));
    EMBER_REGISTER(igammac)
    m.impl("igammac_", TORCH_FN(igammac__fn));
    EMBER_REGISTER(special_chebyshev_polynomial_t)
    EMBER_REGISTER(special_chebyshev_polynomial_u)
    EMBER_REGISTER(special_chebyshev_polynomial_v)
    EMBER_REGISTER(special_chebyshev_polynomial_w)
    EMBER_REGISTER(special_shifted_chebyshev_polynomial_t)
    EMBER_REGISTER(special_shifted_chebyshev_polynomial_u)
    EMBER_REGISTER(special_shifted_chebyshev_polynomial_v)
    EMBER_REGISTER(special_shifted_chebyshev_polynomial_w)
    EMBER_REGISTER(special_hermite_polynomial_h)
    EMBER_REGISTER(special_hermite_polynomial_he)
    EMBER_REGISTER(special_laguerre_polynomial_l)
    EMBER_REGISTER(special_legendre_polynomial_p)
    m.impl("_standard_gamma_grad", TORCH_FN(standard_gamma_grad_fn));
#undef EMBER_REGISTER
}

}  // namespace ember::torch_glue
