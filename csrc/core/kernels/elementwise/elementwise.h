// Elementwise kernels: out = f(in0, in1, ...) over operands of one broadcast shape.
//
// The caller (the torch glue, with PyTorch's TensorIterator) has already broadcast the shapes,
// chosen the common dtype and allocated the output; this engine only walks memory. Each
// operand has its own dtype and byte strides; values are converted on load to the compute
// type (float for float32/bfloat16/float16, double for float64, int64 for integers and bool)
// and on store to the output's dtype, as PyTorch's CPU kernels do. A 0-stride operand is a
// broadcast (including a scalar held in host-visible memory).
#pragma once

#include <cstdint>

#include "base/status.h"
#include "kernels/tensor_view.h"
#include "runtime/thread_pool.h"

namespace ember::kernels {

constexpr int kMaxOperands = 4;
// Dims of a loop after the caller coalesced them (TensorIterator merges every pair of dims it
// can, so real ops need few). Kept small so a queued loop stays a small allocation: the glue
// makes one per op call.
constexpr int kMaxLoopDims = 8;

struct ElementwiseLoop {
    int ndim = 0;                                // last dimension is the fastest moving
    int64_t shape[kMaxLoopDims] = {};
    int nops = 0;                                // operand 0 is the output
    char* data[kMaxOperands] = {};
    DType dtype[kMaxOperands] = {};
    int64_t strides[kMaxOperands][kMaxLoopDims] = {};  // bytes
};

enum class UnaryOp : int8_t {
    kNeg, kAbs, kReciprocal, kExp, kLog, kSqrt, kRsqrt, kSigmoid, kTanh, kSilu, kRelu, kSin, kCos,
    kErf, kLog1p, kExpm1,
    kGelu,      // x * Phi(x), the exact (erf) form
    kGeluTanh,  // gelu's tanh approximation
    kSoftplus,  // log(1 + exp(x)), linear above 20 (beta 1, threshold 20)
    kFloor, kCeil, kTrunc,
    kRound,     // half to even, as torch.round
    kSign,      // -1, 0 or 1; 0 for NaN
    kBitwiseNot,  // ~x for integers, logical not for bool
    kTan, kAsin, kAcos, kAtan, kSinh, kCosh, kAsinh, kAcosh, kAtanh,
    kLog2, kLog10, kExp2, kErfc,
    kErfinv,    // inverse of erf on (-1, 1): +-inf at +-1, NaN outside
    kLgamma,    // log |gamma(x)|
    kDigamma,   // psi(x) = d/dx lgamma(x); -inf at +0, +inf at -0, NaN at negative integers
    kTrigamma,  // psi'(x) (polygamma of order 1)
    kAngle,     // the argument of a real number: pi below 0, 0 otherwise, NaN kept
};

enum class BinaryOp : int8_t {
    kAdd,       // a + alpha * b
    kSub,       // a - alpha * b
    kMul, kDiv, kPow, kMaximum, kMinimum,
    kEq, kNe, kLt, kLe, kGt, kGe,  // produce 0/1, stored to the output's dtype (bool)
    // Activation backwards: a is the incoming gradient, b the saved output (sigmoid, tanh) or
    // input (gelu, softplus, silu).
    kSigmoidBackward, kTanhBackward, kGeluBackward, kGeluTanhBackward, kSoftplusBackward, kSiluBackward,
    kAtan2,  // atan2(a, b)
    kHypot,  // sqrt(a^2 + b^2), without overflow in the squares
    // The next representable value after a toward b, in the compute type: float32 and float64
    // only (a half type widened to float would step in float's representation).
    kNextafter,
    kBitwiseAnd, kBitwiseOr, kBitwiseXor,  // integers and bool only
    // a << b and a >> b (arithmetic for signed types), PyTorch's rule for a shift outside
    // [0, bits): 0 to the left, the sign to the right.
    kShiftLeft, kShiftRight,
    // Greatest common divisor (nonnegative; gcd(0, 0) = 0) and least common multiple
    // (|a / gcd * b|, 0 if either is 0), integers only, PyTorch's formulas.
    kGcd, kLcm,
    // Python's division family, PyTorch's formulas: floor division and remainder take the sign of
    // the divisor, trunc division and fmod that of the dividend. An integer division by zero
    // fails the kernel with "ZeroDivisionError", as on CPU.
    kFloorDivide, kTruncDivide, kRemainder, kFmod,
};

enum class TernaryOp : int8_t {
    kWhere,    // in0 != 0 ? in1 : in2
    kAddcmul,  // in0 + value * in1 * in2
    kAddcdiv,  // in0 + value * in1 / in2
    kLerp,     // in0 + in2 * (in1 - in0), PyTorch's two-sided formula for accuracy
};

const char* op_name(UnaryOp op);
const char* op_name(BinaryOp op);
const char* op_name(TernaryOp op);

// `compute` is the common dtype the op is evaluated in (PyTorch's iter.common_dtype()).
Status unary(UnaryOp op, const ElementwiseLoop& loop, DType compute, runtime::ThreadPool* pool);
Status binary(BinaryOp op, const ElementwiseLoop& loop, DType compute, const Scalar& alpha,
              runtime::ThreadPool* pool);
Status ternary(TernaryOp op, const ElementwiseLoop& loop, DType compute, const Scalar& value,
               runtime::ThreadPool* pool);

}  // namespace ember::kernels
