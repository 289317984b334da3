// Special functions on the elementwise engine: Bessel functions, the scaled complementary error
// function, the normal quantile, Hurwitz zeta, polygamma of any order, the regularized incomplete
// gamma functions and the classical orthogonal polynomials — torch.special's long tail.
//
// Every element is evaluated in double precision (kernels/special/special_math.h) and rounded
// once to the output's dtype, whatever the compute dtype, so float32, bfloat16 and float16
// results are at least as close to the exact value as the CPU's float evaluation. The glue has
// already promoted integer inputs to a floating compute dtype.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "kernels/elementwise/elementwise.h"
#include "runtime/thread_pool.h"

namespace ember::kernels {

enum class SpecialOp : int8_t {
    // one input: loop operands (out, x)
    kI0, kI0e, kI1, kI1e,      // modified Bessel functions of the first kind, and exp(-|x|) times them
    kK0, kK0e, kK1, kK1e,      // of the second kind, and exp(x) times them
    kJ0, kJ1, kY0, kY1,        // Bessel functions of the first and second kind
    kSphericalJ0, kAiryAi,
    kErfcx,                    // exp(x^2) erfc(x)
    kNdtri,                    // the standard normal quantile
    kPolygamma,                // psi^(n)(x); n is the `order` argument
    // two inputs: loop operands (out, a, b)
    kZeta,                     // Hurwitz zeta(a, b)
    kIgamma, kIgammac,         // regularized lower / upper incomplete gamma P(a, b), Q(a, b)
    // polynomials of degree b (truncated to an integer) at a
    kChebyshevT, kChebyshevU, kChebyshevV, kChebyshevW,
    kShiftedChebyshevT, kShiftedChebyshevU, kShiftedChebyshevV, kShiftedChebyshevW,
    kHermiteH, kHermiteHe, kLaguerreL, kLegendreP,
    kStandardGammaGrad,        // d x / d alpha of a Gamma(alpha, 1) sample x: (a, b) = (alpha, x)
};

const char* op_name(SpecialOp op);
int special_arity(SpecialOp op);  // 1 or 2 inputs

// `compute` is the iterator's common dtype (floating); `order` is polygamma's n.
Status special(SpecialOp op, const ElementwiseLoop& loop, DType compute, int64_t order, runtime::ThreadPool* pool);

}  // namespace ember::kernels
