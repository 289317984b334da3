#include <cmath>
#include <limits>

#include "kernels/elementwise/block_io.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/elementwise/simd.h"
#include "torch_ember/vec_math.h"

namespace ember::kernels {
namespace {

// exp and tanh: the vectorizable float versions, <cmath> for double (vec_math.h).
template <typename T>
inline T ex(T x) { return vmath::exp(x); }
template <typename T>
inline T th(T x) { return vmath::tanh(x); }

// The constants PyTorch's CPU kernels use, so results round the same way.
template <typename T>
inline T gelu(T x) { return T(0.5) * x * (T(1) + vmath::erf(x * T(M_SQRT1_2))); }
template <typename T>
inline T gelu_tanh(T x) {
    const T beta = T(M_SQRT2 * M_2_SQRTPI * 0.5), kappa = T(0.044715);
    return T(0.5) * x * (T(1) + th(beta * (x + kappa * x * x * x)));
}
template <typename T>
inline T softplus(T x) { return x > T(20) ? x : vmath::log1p(ex(x)); }
template <typename T>
inline T sign(T x) { return static_cast<T>((T(0) < x) - (x < T(0))); }

// erfinv: Giles' single-precision approximation ("Approximating the erfinv function", 2010)
// as the start, then Newton steps in double: two on erf(x) = y for |y| < 0.5, which reach double
// precision; above, four on log erfc(|x|) = log(1 - |y|), where erf(x) - y would cancel (1 - |y|
// is exact there, erfc keeps its relative precision in the tail, and the logarithm is nearly
// linear in x, so the steps converge from the start's poorer tail, 1 - |y| below 1e-7).
inline double erfinv(double y) {
    if (!(y > -1.0 && y < 1.0)) {
        if (y == 1.0) return std::numeric_limits<double>::infinity();
        if (y == -1.0) return -std::numeric_limits<double>::infinity();
        return std::numeric_limits<double>::quiet_NaN();
    }
    double w = -std::log((1.0 - y) * (1.0 + y)), p;
    if (w < 5.0) {
        w -= 2.5;
        p = 2.81022636e-08;
        for (double c : {3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503,
                         -0.00417768164, 0.246640727, 1.50140941})
            p = c + p * w;
    } else {
        w = std::sqrt(w) - 3.0;
        p = -0.000200214257;
        for (double c : {0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613,
                         0.00943887047, 1.00167406, 2.83297682})
            p = c + p * w;
    }
    double x = p * y;
    if (std::fabs(y) < 0.5) {
        for (int k = 0; k < 2; ++k) x -= (std::erf(x) - y) / (M_2_SQRTPI * std::exp(-x * x));
        return x;
    }
    const double log_tail = std::log(1.0 - std::fabs(y));
    double a = std::fabs(x);
    for (int k = 0; k < 4; ++k) {
        const double c = std::erfc(a);
        a += (std::log(c) - log_tail) * c / (M_2_SQRTPI * std::exp(-a * a));
    }
    return y < 0 ? -a : a;
}

// lgamma through the reentrant forms: plain lgamma writes the global signgam from every thread.
inline float lgam(float x) {
    int sign;
    return lgammaf_r(x, &sign);
}
inline double lgam(double x) {
    int sign;
    return lgamma_r(x, &sign);
}

// digamma (psi): reflection psi(x) = psi(1 - x) - pi / tan(pi x) below zero, the recurrence
// psi(x) = psi(x + 1) - 1/x up to x >= 10, then the asymptotic series in 1/x^2 (Bernoulli
// numbers B2k / 2k). Poles (0, negative integers) as PyTorch: -inf at +0, +inf at -0, NaN below.
inline double digamma(double x) {
    if (x == 0) return std::copysign(std::numeric_limits<double>::infinity(), -x);
    if (x < 0) {
        if (x == std::trunc(x)) return std::numeric_limits<double>::quiet_NaN();
        return digamma(1 - x) - M_PI / std::tan(M_PI * (x - std::trunc(x)));
    }
    double acc = 0;
    for (; x < 10; x += 1) acc -= 1 / x;
    if (x == 10) return acc + 2.25175258906672110764;  // psi(10), exactly
    if (x >= 1e17) return acc + std::log(x);
    const double z = 1 / (x * x);
    const double series =
        z * (1.0 / 12 - z * (1.0 / 120 - z * (1.0 / 252 - z * (1.0 / 240 - z * (1.0 / 132 - z * (691.0 / 32760 - z / 12))))));
    return acc + std::log(x) - 0.5 / x - series;
}

// trigamma (psi'): reflection below 1/2, six recurrence steps, then the asymptotic series, in
// the input's precision as PyTorch computes it (near the poles the result is rounding noise,
// and matching the CPU's noise is what keeps float results comparable).
template <typename T>
inline T trigamma(T x) {
    const T pi = static_cast<T>(M_PI);
    T sign = 1, acc = 0;
    if (x < T(0.5)) {
        const T s = std::sin(pi * x);
        sign = -1;
        acc -= pi * pi / (s * s);
        x = 1 - x;
    }
    for (int i = 0; i < 6; ++i, x += 1) acc += 1 / (x * x);
    const T ixx = 1 / (x * x);
    acc += (1 + 1 / (2 * x) + ixx * (T(1) / 6 - ixx * (T(1) / 30 - ixx * (T(1) / 42)))) / x;
    return sign * acc;
}

// One body for float and double: the math is the same, the precision follows the type.
#define EMBER_UNARY_BODY(T)                                                        \
    switch (op) {                                                                  \
        case UnaryOp::kNeg: for (int64_t i = 0; i < n; ++i) y[i] = -x[i]; break;  \
        case UnaryOp::kAbs: for (int64_t i = 0; i < n; ++i) y[i] = std::fabs(x[i]); break; \
        case UnaryOp::kReciprocal: for (int64_t i = 0; i < n; ++i) y[i] = T(1) / x[i]; break; \
        case UnaryOp::kExp: for (int64_t i = 0; i < n; ++i) y[i] = ex(x[i]); break; \
        case UnaryOp::kLog: for (int64_t i = 0; i < n; ++i) y[i] = vmath::log(x[i]); break; \
        case UnaryOp::kSqrt: for (int64_t i = 0; i < n; ++i) y[i] = std::sqrt(x[i]); break; \
        case UnaryOp::kRsqrt: for (int64_t i = 0; i < n; ++i) y[i] = T(1) / std::sqrt(x[i]); break; \
        case UnaryOp::kSigmoid:                                                    \
            for (int64_t i = 0; i < n; ++i) y[i] = T(1) / (T(1) + ex(-x[i])); \
            break;                                                                 \
        case UnaryOp::kTanh: for (int64_t i = 0; i < n; ++i) y[i] = th(x[i]); break; \
        case UnaryOp::kSilu:                                                       \
            for (int64_t i = 0; i < n; ++i) y[i] = x[i] / (T(1) + ex(-x[i])); \
            break;                                                                 \
        /* x < 0 is false for NaN, so NaN propagates as in torch.relu */          \
        case UnaryOp::kRelu: for (int64_t i = 0; i < n; ++i) y[i] = x[i] < T(0) ? T(0) : x[i]; break; \
        case UnaryOp::kSin: for (int64_t i = 0; i < n; ++i) y[i] = std::sin(x[i]); break; \
        case UnaryOp::kCos: for (int64_t i = 0; i < n; ++i) y[i] = std::cos(x[i]); break; \
        case UnaryOp::kErf: for (int64_t i = 0; i < n; ++i) y[i] = vmath::erf(x[i]); break; \
        case UnaryOp::kLog1p: for (int64_t i = 0; i < n; ++i) y[i] = vmath::log1p(x[i]); break; \
        case UnaryOp::kExpm1: for (int64_t i = 0; i < n; ++i) y[i] = std::expm1(x[i]); break; \
        case UnaryOp::kGelu: for (int64_t i = 0; i < n; ++i) y[i] = gelu(x[i]); break; \
        case UnaryOp::kGeluTanh: for (int64_t i = 0; i < n; ++i) y[i] = gelu_tanh(x[i]); break; \
        case UnaryOp::kSoftplus: for (int64_t i = 0; i < n; ++i) y[i] = softplus(x[i]); break; \
        case UnaryOp::kFloor: for (int64_t i = 0; i < n; ++i) y[i] = std::floor(x[i]); break; \
        case UnaryOp::kCeil: for (int64_t i = 0; i < n; ++i) y[i] = std::ceil(x[i]); break; \
        case UnaryOp::kTrunc: for (int64_t i = 0; i < n; ++i) y[i] = std::trunc(x[i]); break; \
        case UnaryOp::kRound: for (int64_t i = 0; i < n; ++i) y[i] = std::nearbyint(x[i]); break; \
        case UnaryOp::kSign: for (int64_t i = 0; i < n; ++i) y[i] = sign(x[i]); break; \
        case UnaryOp::kBitwiseNot: break; /* integers only; unary() refuses floats */ \
        case UnaryOp::kTan: for (int64_t i = 0; i < n; ++i) y[i] = std::tan(x[i]); break; \
        case UnaryOp::kAsin: for (int64_t i = 0; i < n; ++i) y[i] = std::asin(x[i]); break; \
        case UnaryOp::kAcos: for (int64_t i = 0; i < n; ++i) y[i] = std::acos(x[i]); break; \
        case UnaryOp::kAtan: for (int64_t i = 0; i < n; ++i) y[i] = std::atan(x[i]); break; \
        case UnaryOp::kSinh: for (int64_t i = 0; i < n; ++i) y[i] = std::sinh(x[i]); break; \
        case UnaryOp::kCosh: for (int64_t i = 0; i < n; ++i) y[i] = std::cosh(x[i]); break; \
        case UnaryOp::kAsinh: for (int64_t i = 0; i < n; ++i) y[i] = std::asinh(x[i]); break; \
        case UnaryOp::kAcosh: for (int64_t i = 0; i < n; ++i) y[i] = std::acosh(x[i]); break; \
        case UnaryOp::kAtanh: for (int64_t i = 0; i < n; ++i) y[i] = std::atanh(x[i]); break; \
        case UnaryOp::kLog2: for (int64_t i = 0; i < n; ++i) y[i] = std::log2(x[i]); break; \
        case UnaryOp::kLog10: for (int64_t i = 0; i < n; ++i) y[i] = std::log10(x[i]); break; \
        case UnaryOp::kExp2: for (int64_t i = 0; i < n; ++i) y[i] = std::exp2(x[i]); break; \
        case UnaryOp::kErfc: for (int64_t i = 0; i < n; ++i) y[i] = std::erfc(x[i]); break; \
        case UnaryOp::kErfinv: for (int64_t i = 0; i < n; ++i) y[i] = static_cast<T>(erfinv(x[i])); break; \
        case UnaryOp::kLgamma: for (int64_t i = 0; i < n; ++i) y[i] = lgam(x[i]); break; \
        case UnaryOp::kDigamma: for (int64_t i = 0; i < n; ++i) y[i] = static_cast<T>(digamma(x[i])); break; \
        case UnaryOp::kTrigamma: for (int64_t i = 0; i < n; ++i) y[i] = trigamma<T>(x[i]); break; \
        case UnaryOp::kAngle:                                                      \
            for (int64_t i = 0; i < n; ++i) y[i] = x[i] != x[i] ? x[i] : (x[i] < T(0) ? T(M_PI) : T(0)); \
            break;                                                                 \
    }

EMBER_SIMD_CLONES void unary_f32(UnaryOp op, float* y, const float* x, int64_t n) { EMBER_UNARY_BODY(float) }
EMBER_SIMD_CLONES void unary_f64(UnaryOp op, double* y, const double* x, int64_t n) { EMBER_UNARY_BODY(double) }
#undef EMBER_UNARY_BODY

void unary_i64(UnaryOp op, int64_t* y, const int64_t* x, int64_t n) {
    switch (op) {
        case UnaryOp::kNeg: for (int64_t i = 0; i < n; ++i) y[i] = static_cast<int64_t>(0ULL - static_cast<uint64_t>(x[i])); break;
        case UnaryOp::kAbs: for (int64_t i = 0; i < n; ++i) y[i] = x[i] < 0 ? static_cast<int64_t>(0ULL - static_cast<uint64_t>(x[i])) : x[i]; break;
        case UnaryOp::kRelu: for (int64_t i = 0; i < n; ++i) y[i] = x[i] < 0 ? 0 : x[i]; break;
        case UnaryOp::kFloor: case UnaryOp::kCeil: case UnaryOp::kTrunc: case UnaryOp::kRound:
            for (int64_t i = 0; i < n; ++i) y[i] = x[i];
            break;
        case UnaryOp::kSign: for (int64_t i = 0; i < n; ++i) y[i] = (0 < x[i]) - (x[i] < 0); break;
        case UnaryOp::kBitwiseNot: for (int64_t i = 0; i < n; ++i) y[i] = ~x[i]; break;
        default: break;  // float-only ops never reach here: the caller promotes integers
    }
}

bool integer_op(UnaryOp op) {
    switch (op) {
        case UnaryOp::kNeg: case UnaryOp::kAbs: case UnaryOp::kRelu: case UnaryOp::kFloor:
        case UnaryOp::kCeil: case UnaryOp::kTrunc: case UnaryOp::kRound: case UnaryOp::kSign:
        case UnaryOp::kBitwiseNot:
            return true;
        default:
            return false;
    }
}

// How many elements of a plain arithmetic op one element of `op` costs, roughly: transcendental
// ops (a polynomial, a division, an exp) are split over the pool at a quarter of the size, so a
// 64K-element GELU or sigmoid uses every thread, as the CPU's kernels do.
int64_t cost_weight(UnaryOp op) {
    switch (op) {
        case UnaryOp::kNeg: case UnaryOp::kAbs: case UnaryOp::kRelu: case UnaryOp::kFloor:
        case UnaryOp::kCeil: case UnaryOp::kTrunc: case UnaryOp::kRound: case UnaryOp::kSign:
        case UnaryOp::kBitwiseNot: case UnaryOp::kReciprocal: case UnaryOp::kSqrt: case UnaryOp::kRsqrt:
            return 1;
        default:
            return 4;
    }
}

template <typename C, typename F>
void run(const ElementwiseLoop& loop, runtime::ThreadPool* pool, F compute, int64_t weight = 1) {
    detail::for_each_row(loop, pool, [&](char** p, const int64_t* s, int64_t n) {
        if (detail::direct_row<C>(loop, s)) {
            compute(reinterpret_cast<C*>(p[0]), reinterpret_cast<const C*>(p[1]), n);
            return;
        }
        alignas(64) C in[detail::kBlock], out[detail::kBlock];
        for (int64_t j = 0; j < n; j += detail::kBlock) {
            int64_t m = std::min(detail::kBlock, n - j);
            const C* px = detail::input_block(in, p[1] + j * s[1], s[1], loop.dtype[1], m);
            C* po = detail::output_block(out, p[0] + j * s[0], s[0], loop.dtype[0]);
            compute(po, px, m);
            detail::flush_block(po, out, p[0] + j * s[0], s[0], loop.dtype[0], m);
        }
    }, weight);
}

}  // namespace

const char* op_name(UnaryOp op) {
    static const char* names[] = {"neg", "abs", "reciprocal", "exp", "log", "sqrt", "rsqrt",
                                  "sigmoid", "tanh", "silu", "relu", "sin", "cos", "erf",
                                  "log1p", "expm1", "gelu", "gelu_tanh", "softplus", "floor",
                                  "ceil", "trunc", "round", "sign", "bitwise_not", "tan", "asin",
                                  "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "log2",
                                  "log10", "exp2", "erfc", "erfinv", "lgamma", "digamma", "trigamma",
                                  "angle"};
    return names[static_cast<int>(op)];
}

Status unary(UnaryOp op, const ElementwiseLoop& loop, DType compute, runtime::ThreadPool* pool) {
    if (!detail::real_operands(loop)) return unimplemented(std::string(op_name(op)) + " with a complex operand");
    if (loop.nops != 2) return invalid_argument("unary: expected one input and one output");
    if (op == UnaryOp::kBitwiseNot && compute == DType::kBool) {
        // ~ on a bool is logical not; bools load as 0/1 and store as (value != 0).
        run<int64_t>(loop, pool, [](int64_t* y, const int64_t* x, int64_t n) {
            for (int64_t i = 0; i < n; ++i) y[i] = x[i] == 0;
        });
        return Status();
    }
    switch (compute) {
        case DType::kFloat32: case DType::kBFloat16: case DType::kFloat16:
            if (op == UnaryOp::kBitwiseNot) return invalid_argument("bitwise_not needs an integer or bool tensor");
            run<float>(loop, pool, [op](float* y, const float* x, int64_t n) { unary_f32(op, y, x, n); }, cost_weight(op));
            return Status();
        case DType::kFloat64:
            if (op == UnaryOp::kBitwiseNot) return invalid_argument("bitwise_not needs an integer or bool tensor");
            run<double>(loop, pool, [op](double* y, const double* x, int64_t n) { unary_f64(op, y, x, n); },
                        cost_weight(op));
            return Status();
        case DType::kComplex64: case DType::kComplex128:
            return unimplemented(std::string(op_name(op)) + " for complex tensors");
        default:
            if (!integer_op(op)) {
                return invalid_argument(std::string(op_name(op)) + " needs a floating-point compute type");
            }
            run<int64_t>(loop, pool, [op](int64_t* y, const int64_t* x, int64_t n) { unary_i64(op, y, x, n); });
            return Status();
    }
}

}  // namespace ember::kernels
