// Unary math (exp, log, trig and hyperbolic functions and their inverses, erf and its
// relatives, lgamma/digamma/trigamma, rounding, sign, angle) and two-argument math (atan2, hypot,
// nextafter, gcd, lcm) on core's elementwise engine,
// each in its functional, in-place and out= form. TensorIterator does broadcasting, type
// promotion and the out= checks as for CPU. Complex neg, abs, exp, log, sqrt, reciprocal and angle
// are composed from real kernels on the parts (complex_parts.h); other complex math goes to the
// visible CPU fallback.
#include <ATen/Operators.h>
#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include "../fallback.h"
#include "complex_parts.h"
#include "elementwise_iter.h"
#include "glue.h"

namespace ember::torch_glue {
namespace {

using kernels::BinaryOp;
using kernels::UnaryOp;
using at::TensorIterator;

// ---- unary ----------------------------------------------------------------------------------
// `make` is unary_op (dtype kept; integers allowed) or unary_float_op (integers promote).

#define EMBER_UNARY_OP(name, kOp, make, integers)                                       \
    at::Tensor name##_fn(const at::Tensor& self) {                                      \
        if (auto r = complex_unary(#name, self)) return *r;                             \
        at::Tensor out;                                                                 \
        auto iter = TensorIterator::make(out, self);                                    \
        if (!native_compute(iter, integers)) return cpu<ATEN_OP(name)>(self);          \
        queue_unary(kOp, iter);                                                         \
        return iter.output();                                                           \
    }                                                                                   \
    at::Tensor& name##__fn(at::Tensor& self) {                                          \
        if (!self.is_conj())                                                            \
            if (auto r = complex_unary(#name, self); r && r->scalar_type() == self.scalar_type()) \
                return write_out(self, *r);                                             \
        auto iter = TensorIterator::make(self, self);                                   \
        if (!native_compute(iter, integers)) return cpu<ATEN_OP(name##_)>(self);       \
        queue_unary(kOp, iter);                                                         \
        return self;                                                                    \
    }                                                                                   \
    at::Tensor& name##_out(const at::Tensor& self, at::Tensor& out) {                   \
        if (out.is_privateuseone())                                                     \
            if (auto r = complex_unary(#name, self); r && r->scalar_type() == out.scalar_type()) \
                return write_out(out, *r);                                              \
        /* other complex cases: the CPU's own rules */                                  \
        if (self.is_complex() || out.is_complex()) return cpu<ATEN_OP2(name, out)>(self, out); \
        auto iter = TensorIterator::make(out, self);                                    \
        if (!native_compute(iter, integers)) return cpu<ATEN_OP2(name, out)>(self, out); \
        queue_unary(kOp, iter);                                                         \
        return out;                                                                     \
    }

EMBER_UNARY_OP(neg, UnaryOp::kNeg, unary_op, true)
EMBER_UNARY_OP(abs, UnaryOp::kAbs, unary_op, true)
EMBER_UNARY_OP(reciprocal, UnaryOp::kReciprocal, unary_float_op, false)
EMBER_UNARY_OP(exp, UnaryOp::kExp, unary_float_op, false)
EMBER_UNARY_OP(log, UnaryOp::kLog, unary_float_op, false)
EMBER_UNARY_OP(sqrt, UnaryOp::kSqrt, unary_float_op, false)
EMBER_UNARY_OP(rsqrt, UnaryOp::kRsqrt, unary_float_op, false)
EMBER_UNARY_OP(sigmoid, UnaryOp::kSigmoid, unary_float_op, false)
EMBER_UNARY_OP(tanh, UnaryOp::kTanh, unary_float_op, false)
EMBER_UNARY_OP(sin, UnaryOp::kSin, unary_float_op, false)
EMBER_UNARY_OP(cos, UnaryOp::kCos, unary_float_op, false)
EMBER_UNARY_OP(silu, UnaryOp::kSilu, unary_op, false)
EMBER_UNARY_OP(erf, UnaryOp::kErf, unary_float_op, false)
EMBER_UNARY_OP(log1p, UnaryOp::kLog1p, unary_float_op, false)
EMBER_UNARY_OP(expm1, UnaryOp::kExpm1, unary_float_op, false)
EMBER_UNARY_OP(floor, UnaryOp::kFloor, unary_op, true)
EMBER_UNARY_OP(ceil, UnaryOp::kCeil, unary_op, true)
EMBER_UNARY_OP(trunc, UnaryOp::kTrunc, unary_op, true)
EMBER_UNARY_OP(round, UnaryOp::kRound, unary_op, true)
EMBER_UNARY_OP(sign, UnaryOp::kSign, unary_op, true)
EMBER_UNARY_OP(tan, UnaryOp::kTan, unary_float_op, false)
EMBER_UNARY_OP(asin, UnaryOp::kAsin, unary_float_op, false)
EMBER_UNARY_OP(acos, UnaryOp::kAcos, unary_float_op, false)
EMBER_UNARY_OP(atan, UnaryOp::kAtan, unary_float_op, false)
EMBER_UNARY_OP(sinh, UnaryOp::kSinh, unary_float_op, false)
EMBER_UNARY_OP(cosh, UnaryOp::kCosh, unary_float_op, false)
EMBER_UNARY_OP(asinh, UnaryOp::kAsinh, unary_float_op, false)
EMBER_UNARY_OP(acosh, UnaryOp::kAcosh, unary_float_op, false)
EMBER_UNARY_OP(atanh, UnaryOp::kAtanh, unary_float_op, false)
EMBER_UNARY_OP(log2, UnaryOp::kLog2, unary_float_op, false)
EMBER_UNARY_OP(log10, UnaryOp::kLog10, unary_float_op, false)
EMBER_UNARY_OP(exp2, UnaryOp::kExp2, unary_float_op, false)
EMBER_UNARY_OP(erfc, UnaryOp::kErfc, unary_float_op, false)
EMBER_UNARY_OP(erfinv, UnaryOp::kErfinv, unary_float_op, false)
EMBER_UNARY_OP(lgamma, UnaryOp::kLgamma, unary_float_op, false)
EMBER_UNARY_OP(digamma, UnaryOp::kDigamma, unary_float_op, false)
#undef EMBER_UNARY_OP

// The sign of a bool is the bool itself, as on the CPU.
at::Tensor sign_any(const at::Tensor& self) { return self.scalar_type() == at::kBool ? self.clone() : sign_fn(self); }
at::Tensor& sign_any_(at::Tensor& self) { return self.scalar_type() == at::kBool ? self : sign__fn(self); }
at::Tensor& sign_any_out(const at::Tensor& self, at::Tensor& out) {
    if (self.scalar_type() != at::kBool || out.scalar_type() != at::kBool) return sign_out(self, out);
    resize_out(out, self.sizes());
    return out.copy_(self);
}

}  // namespace

// register_special.cc: polygamma of order >= 2; false when the call is not served natively.
bool queue_polygamma(int64_t n, at::TensorIteratorBase& iter);

namespace {

// polygamma: order 0 is digamma and 1 trigamma; higher orders are special functions.
bool queue_polygamma_any(int64_t n, at::TensorIteratorBase& iter) {
    if (n == 0 || n == 1) {
        if (!native_compute(iter, false)) return false;
        queue_unary(n == 0 ? UnaryOp::kDigamma : UnaryOp::kTrigamma, iter);
        return true;
    }
    return queue_polygamma(n, iter);
}

at::Tensor& polygamma_out(int64_t n, const at::Tensor& self, at::Tensor& out) {
    auto iter = TensorIterator::unary_float_op(out, self);
    if (!queue_polygamma_any(n, iter)) return cpu<ATEN_OP2(polygamma, out)>(n, self, out);
    return out;
}

at::Tensor polygamma_fn(int64_t n, const at::Tensor& self) {
    at::Tensor out;
    auto iter = TensorIterator::unary_float_op(out, self);
    if (!queue_polygamma_any(n, iter)) return cpu<ATEN_OP(polygamma)>(n, self);
    return iter.output();
}

at::Tensor& polygamma__fn(at::Tensor& self, int64_t n) {
    auto iter = TensorIterator::unary_float_op(self, self);
    if (!queue_polygamma_any(n, iter)) return cpu<ATEN_OP(polygamma_)>(self, n);
    return self;
}

// ---- two-argument math: atan2 (integers promote to float), hypot (floating inputs only; the
// CPU fallback refuses the rest as the CPU does), nextafter (float32/float64 only: float16 and
// bfloat16 go to the CPU, which steps in their own representation), gcd and lcm (integers; the
// CPU refuses the rest, with its error) ----------------------------------------------------------

bool float_native(const at::TensorIteratorBase& iter) { return native_compute(iter, false); }
bool nextafter_native(const at::TensorIteratorBase& iter) {
    return (iter.common_dtype() == at::kFloat || iter.common_dtype() == at::kDouble) && native_compute(iter, false);
}
bool integer_native(const at::TensorIteratorBase& iter) {
    return at::isIntegralType(iter.common_dtype(), /*includeBool=*/false) && native_compute(iter, true);
}

#define EMBER_MATH2(name, kOp, make, accept)                                                      \
    at::Tensor name##_fn(const at::Tensor& self, const at::Tensor& other) {                       \
        at::Tensor out;                                                                           \
        auto iter = TensorIterator::make(out, self, other);                                       \
        if (!accept(iter)) return cpu<ATEN_OP(name)>(self, other);                                \
        queue_binary(kOp, iter);                                                                  \
        return iter.output();                                                                     \
    }                                                                                             \
    at::Tensor& name##__fn(at::Tensor& self, const at::Tensor& other) {                           \
        auto iter = TensorIterator::make(self, self, other);                                      \
        if (!accept(iter)) return cpu<ATEN_OP(name##_)>(self, other);                             \
        queue_binary(kOp, iter);                                                                  \
        return self;                                                                              \
    }                                                                                             \
    at::Tensor& name##_out(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {    \
        auto iter = TensorIterator::make(out, self, other);                                       \
        if (!accept(iter)) return cpu<ATEN_OP2(name, out)>(self, other, out);                     \
        queue_binary(kOp, iter);                                                                  \
        return out;                                                                               \
    }

EMBER_MATH2(atan2, BinaryOp::kAtan2, binary_float_op, float_native)
EMBER_MATH2(hypot, BinaryOp::kHypot, binary_op, float_native)
EMBER_MATH2(nextafter, BinaryOp::kNextafter, binary_op, nextafter_native)
EMBER_MATH2(gcd, BinaryOp::kGcd, binary_op, integer_native)
EMBER_MATH2(lcm, BinaryOp::kLcm, binary_op, integer_native)
#undef EMBER_MATH2

// angle of a real tensor (integers and bool promote to float); complex: atan2(im, re).
at::Tensor angle_fn(const at::Tensor& self) {
    if (auto r = complex_unary("angle", self)) return *r;
    if (self.is_complex()) return cpu<ATEN_OP(angle)>(self);
    at::Tensor out;
    auto iter = TensorIterator::unary_float_op(out, self);
    if (!native_compute(iter, false)) return cpu<ATEN_OP(angle)>(self);
    queue_unary(UnaryOp::kAngle, iter);
    return iter.output();
}
at::Tensor& angle_out(const at::Tensor& self, at::Tensor& out) {
    if (out.is_privateuseone())
        if (auto r = complex_unary("angle", self); r && r->scalar_type() == out.scalar_type()) return write_out(out, *r);
    if (self.is_complex() || out.is_complex()) return cpu<ATEN_OP2(angle, out)>(self, out);
    auto iter = TensorIterator::unary_float_op(out, self);
    if (!native_compute(iter, false)) return cpu<ATEN_OP2(angle, out)>(self, out);
    queue_unary(UnaryOp::kAngle, iter);
    return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
#define EMBER_REGISTER_UNARY(name)              \
    m.impl(#name, name##_fn);                  \
    m.impl(#name "_", name##__fn);             \
    m.impl(#name ".out", name##_out);
    EMBER_REGISTER_UNARY(neg)
    EMBER_REGISTER_UNARY(abs)
    EMBER_REGISTER_UNARY(reciprocal)
    EMBER_REGISTER_UNARY(exp)
    EMBER_REGISTER_UNARY(log)
    EMBER_REGISTER_UNARY(sqrt)
    EMBER_REGISTER_UNARY(rsqrt)
    EMBER_REGISTER_UNARY(sigmoid)
    EMBER_REGISTER_UNARY(tanh)
    EMBER_REGISTER_UNARY(sin)
    EMBER_REGISTER_UNARY(cos)
    EMBER_REGISTER_UNARY(silu)
    EMBER_REGISTER_UNARY(erf)
    EMBER_REGISTER_UNARY(log1p)
    EMBER_REGISTER_UNARY(expm1)
    EMBER_REGISTER_UNARY(floor)
    EMBER_REGISTER_UNARY(ceil)
    EMBER_REGISTER_UNARY(trunc)
    EMBER_REGISTER_UNARY(round)
    m.impl("sign", sign_any);
    m.impl("sign_", sign_any_);
    m.impl("sign.out", sign_any_out);
    EMBER_REGISTER_UNARY(tan)
    EMBER_REGISTER_UNARY(asin)
    EMBER_REGISTER_UNARY(acos)
    EMBER_REGISTER_UNARY(atan)
    EMBER_REGISTER_UNARY(sinh)
    EMBER_REGISTER_UNARY(cosh)
    EMBER_REGISTER_UNARY(asinh)
    EMBER_REGISTER_UNARY(acosh)
    EMBER_REGISTER_UNARY(atanh)
    EMBER_REGISTER_UNARY(log2)
    EMBER_REGISTER_UNARY(log10)
    EMBER_REGISTER_UNARY(exp2)
    EMBER_REGISTER_UNARY(erfc)
    EMBER_REGISTER_UNARY(erfinv)
    EMBER_REGISTER_UNARY(lgamma)
    EMBER_REGISTER_UNARY(digamma)
#undef EMBER_REGISTER_UNARY
    m.impl("polygamma", polygamma_fn);
    m.impl("polygamma_", polygamma__fn);
    m.impl("polygamma.out", polygamma_out);
    m.impl("atan2", atan2_fn);
    m.impl("atan2_", atan2__fn);
    m.impl("atan2.out", atan2_out);
    m.impl("hypot", hypot_fn);
    m.impl("hypot_", hypot__fn);
    m.impl("hypot.out", hypot_out);
    m.impl("nextafter", nextafter_fn);
    m.impl("nextafter_", nextafter__fn);
    m.impl("nextafter.out", nextafter_out);
    m.impl("gcd", gcd_fn);
    m.impl("gcd_", gcd__fn);
    m.impl("gcd.out", gcd_out);
    m.impl("lcm", lcm_fn);
    m.impl("lcm_", lcm__fn);
    m.impl("lcm.out", lcm_out);
    m.impl("angle", angle_fn);
    m.impl("angle.out", angle_out);
}

}  // namespace ember::torch_glue
