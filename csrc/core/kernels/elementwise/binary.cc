#include <atomic>
#include <cmath>

#include "kernels/elementwise/block_io.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/elementwise/simd.h"
#include "torch_ember/vec_math.h"

namespace ember::kernels {
namespace {

// Activation backwards with PyTorch's CPU formulas (gelu: aten/src/ATen/native/cpu/Activation.cpp).
template <typename T>
inline T gelu_backward(T g, T x) {
    const T cdf = T(0.5) * (T(1) + vmath::erf(x * T(M_SQRT1_2)));
    const T pdf = vmath::exp(T(-0.5) * x * x) * T(M_2_SQRTPI * M_SQRT1_2 * 0.5);
    return g * (cdf + x * pdf);
}
template <typename T>
inline T gelu_tanh_backward(T g, T x) {
    const T beta = T(M_SQRT2 * M_2_SQRTPI * 0.5), kappa = T(0.044715);
    const T x2 = x * x, inner = beta * (x + kappa * x2 * x), t = vmath::tanh(inner);
    const T left = T(0.5) * x, right = T(1) + t;
    const T dleft = T(0.5) * right, dright = left * (T(1) - t * t) * beta * (T(1) + T(3) * kappa * x2);
    return g * (dleft + dright);
}
template <typename T>
inline T softplus_backward(T g, T x) {
    if (x > T(20)) return g;
    const T z = vmath::exp(x);
    return g * z / (z + T(1));
}

// silu's backward, PyTorch's formula: g * s * (1 + x * (1 - s)) with s = sigmoid(x). The float
// exp is the vectorizable one, so the loop stays in SIMD lanes.
template <typename T>
inline T silu_backward(T g, T x) {
    const T s = T(1) / (T(1) + vmath::exp(-x));
    return g * s * (T(1) + x * (T(1) - s));
}

// PyTorch's div_floor_floating: floor of the true quotient, computed from fmod so that it is
// exact where the quotient is an integer.
template <typename T>
inline T floor_divide(T a, T b) {
    if (b == T(0)) return a / b;
    const T mod = std::fmod(a, b);
    T div = (a - mod) / b;
    if (mod != T(0) && (b < T(0)) != (mod < T(0))) div -= T(1);
    if (div == T(0)) return std::copysign(T(0), a / b);
    T floordiv = std::floor(div);
    if (div - floordiv > T(0.5)) floordiv += T(1);
    return floordiv;
}
template <typename T>
inline T remainder(T a, T b) {
    T mod = std::fmod(a, b);
    if (mod != T(0) && (b < T(0)) != (mod < T(0))) mod += b;
    return mod;
}

// NaN propagates through maximum/minimum, as in torch.maximum; between equal values (-0 and +0)
// the first operand is kept, as on the CPU (clamp(-0.0, min=0) is -0.0).
#define EMBER_BINARY_FLOAT_BODY(T)                                                              \
    switch (op) {                                                                               \
        case BinaryOp::kAdd: for (int64_t i = 0; i < n; ++i) y[i] = a[i] + alpha * b[i]; break; \
        case BinaryOp::kSub: for (int64_t i = 0; i < n; ++i) y[i] = a[i] - alpha * b[i]; break; \
        case BinaryOp::kMul: for (int64_t i = 0; i < n; ++i) y[i] = a[i] * b[i]; break;         \
        case BinaryOp::kDiv: for (int64_t i = 0; i < n; ++i) y[i] = a[i] / b[i]; break;         \
        case BinaryOp::kPow: for (int64_t i = 0; i < n; ++i) y[i] = std::pow(a[i], b[i]); break; \
        case BinaryOp::kMaximum:                                                                \
            for (int64_t i = 0; i < n; ++i)                                                     \
                y[i] = (a[i] != a[i] || b[i] != b[i]) ? a[i] + b[i] : (b[i] > a[i] ? b[i] : a[i]); \
            break;                                                                              \
        case BinaryOp::kMinimum:                                                                \
            for (int64_t i = 0; i < n; ++i)                                                     \
                y[i] = (a[i] != a[i] || b[i] != b[i]) ? a[i] + b[i] : (b[i] < a[i] ? b[i] : a[i]); \
            break;                                                                              \
        case BinaryOp::kEq: for (int64_t i = 0; i < n; ++i) y[i] = a[i] == b[i]; break;         \
        case BinaryOp::kNe: for (int64_t i = 0; i < n; ++i) y[i] = a[i] != b[i]; break;         \
        case BinaryOp::kLt: for (int64_t i = 0; i < n; ++i) y[i] = a[i] < b[i]; break;          \
        case BinaryOp::kLe: for (int64_t i = 0; i < n; ++i) y[i] = a[i] <= b[i]; break;         \
        case BinaryOp::kGt: for (int64_t i = 0; i < n; ++i) y[i] = a[i] > b[i]; break;          \
        case BinaryOp::kGe: for (int64_t i = 0; i < n; ++i) y[i] = a[i] >= b[i]; break;         \
        case BinaryOp::kSigmoidBackward:                                                        \
            for (int64_t i = 0; i < n; ++i) y[i] = a[i] * (T(1) - b[i]) * b[i];                 \
            break;                                                                              \
        case BinaryOp::kTanhBackward:                                                           \
            for (int64_t i = 0; i < n; ++i) y[i] = a[i] * (T(1) - b[i] * b[i]);                 \
            break;                                                                              \
        case BinaryOp::kGeluBackward:                                                           \
            for (int64_t i = 0; i < n; ++i) y[i] = gelu_backward(a[i], b[i]);                   \
            break;                                                                              \
        case BinaryOp::kGeluTanhBackward:                                                       \
            for (int64_t i = 0; i < n; ++i) y[i] = gelu_tanh_backward(a[i], b[i]);              \
            break;                                                                              \
        case BinaryOp::kSoftplusBackward:                                                       \
            for (int64_t i = 0; i < n; ++i) y[i] = softplus_backward(a[i], b[i]);               \
            break;                                                                              \
        case BinaryOp::kSiluBackward:                                                           \
            for (int64_t i = 0; i < n; ++i) y[i] = silu_backward(a[i], b[i]);                   \
            break;                                                                              \
        case BinaryOp::kFloorDivide: for (int64_t i = 0; i < n; ++i) y[i] = floor_divide(a[i], b[i]); break; \
        case BinaryOp::kTruncDivide: for (int64_t i = 0; i < n; ++i) y[i] = std::trunc(a[i] / b[i]); break;  \
        case BinaryOp::kRemainder: for (int64_t i = 0; i < n; ++i) y[i] = remainder(a[i], b[i]); break;      \
        case BinaryOp::kFmod: for (int64_t i = 0; i < n; ++i) y[i] = std::fmod(a[i], b[i]); break;           \
        case BinaryOp::kAtan2: for (int64_t i = 0; i < n; ++i) y[i] = std::atan2(a[i], b[i]); break;         \
        case BinaryOp::kHypot: for (int64_t i = 0; i < n; ++i) y[i] = std::hypot(a[i], b[i]); break;         \
        case BinaryOp::kNextafter: for (int64_t i = 0; i < n; ++i) y[i] = std::nextafter(a[i], b[i]); break; \
        default: break; /* bitwise ops: integers only, refused by binary() */                  \
    }

EMBER_SIMD_CLONES void binary_f32(BinaryOp op, float* y, const float* a, const float* b, float alpha,
                                  int64_t n) { EMBER_BINARY_FLOAT_BODY(float) }
EMBER_SIMD_CLONES void binary_f64(BinaryOp op, double* y, const double* a, const double* b,
                                  double alpha, int64_t n) { EMBER_BINARY_FLOAT_BODY(double) }
#undef EMBER_BINARY_FLOAT_BODY

// PyTorch's integer power: squaring with wrap-around; a negative exponent gives 1 for a base
// of 1, +-1 for -1 (by the exponent's parity) and 0 otherwise. Narrow types arrive widened and
// leave truncated, which keeps the same low bits as computing in their own width.
inline int64_t power_i64(int64_t base, int64_t e) {
    if (e < 0) return base == 1 ? 1 : base == -1 ? ((e & 1) ? -1 : 1) : 0;
    uint64_t result = 1, a = static_cast<uint64_t>(base);
    for (uint64_t k = static_cast<uint64_t>(e); k != 0; k >>= 1) {
        if (k & 1) result *= a;
        a *= a;
    }
    return static_cast<int64_t>(result);
}

// gcd and lcm reproduce PyTorch's formulas in the operands' own width `bits` (8, 16, 32, or 64
// for int64 and uint8, whose values need no wrapping): calc_gcd takes std::abs of each operand
// stored back into its type (so -128 stays -128 in int8) and runs Euclid with C++'s signed
// remainder; lcm is |a / g * b|, multiplied in int for types narrower than int and in the type's
// own width otherwise.
inline int64_t wrap_to(int64_t v, int bits) {
    if (bits >= 64) return v;
    const int s = 64 - bits;
    return static_cast<int64_t>(static_cast<uint64_t>(v) << s) >> s;
}
inline int64_t abs_in(int64_t v, int bits) {
    return wrap_to(v < 0 ? static_cast<int64_t>(0 - static_cast<uint64_t>(v)) : v, bits);
}
inline int64_t gcd_in(int64_t x, int64_t y, int bits) {
    int64_t a = abs_in(x, bits), b = abs_in(y, bits);
    while (a != 0) {
        const int64_t c = a;
        a = a == -1 ? 0 : b % a;  // (INT64_MIN % -1 would trap; the remainder is 0)
        b = c;
    }
    return b;
}
inline int64_t lcm_in(int64_t a, int64_t b, int bits) {
    const int64_t g = gcd_in(a, b, bits);
    if (g == 0) return 0;
    const int64_t q = g == -1 ? static_cast<int64_t>(0 - static_cast<uint64_t>(a)) : a / g;
    const int w = bits >= 32 ? bits : 64;
    return abs_in(wrap_to(static_cast<int64_t>(static_cast<uint64_t>(q) * static_cast<uint64_t>(b)), w), w);
}

// Integers wrap on overflow as in PyTorch (computed in unsigned arithmetic to stay defined).
// `bits` is the operands' width for gcd and lcm (see gcd_in).
EMBER_SIMD_CLONES void binary_i64(BinaryOp op, int64_t* y, const int64_t* a, const int64_t* b,
                                  int64_t alpha, int64_t n, int bits) {
    auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
    switch (op) {
        case BinaryOp::kAdd: for (int64_t i = 0; i < n; ++i) y[i] = static_cast<int64_t>(u(a[i]) + u(alpha) * u(b[i])); break;
        case BinaryOp::kSub: for (int64_t i = 0; i < n; ++i) y[i] = static_cast<int64_t>(u(a[i]) - u(alpha) * u(b[i])); break;
        case BinaryOp::kMul: for (int64_t i = 0; i < n; ++i) y[i] = static_cast<int64_t>(u(a[i]) * u(b[i])); break;
        case BinaryOp::kPow: for (int64_t i = 0; i < n; ++i) y[i] = power_i64(a[i], b[i]); break;
        case BinaryOp::kMaximum: for (int64_t i = 0; i < n; ++i) y[i] = a[i] > b[i] ? a[i] : b[i]; break;
        case BinaryOp::kMinimum: for (int64_t i = 0; i < n; ++i) y[i] = a[i] < b[i] ? a[i] : b[i]; break;
        case BinaryOp::kEq: for (int64_t i = 0; i < n; ++i) y[i] = a[i] == b[i]; break;
        case BinaryOp::kNe: for (int64_t i = 0; i < n; ++i) y[i] = a[i] != b[i]; break;
        case BinaryOp::kLt: for (int64_t i = 0; i < n; ++i) y[i] = a[i] < b[i]; break;
        case BinaryOp::kLe: for (int64_t i = 0; i < n; ++i) y[i] = a[i] <= b[i]; break;
        case BinaryOp::kGt: for (int64_t i = 0; i < n; ++i) y[i] = a[i] > b[i]; break;
        case BinaryOp::kGe: for (int64_t i = 0; i < n; ++i) y[i] = a[i] >= b[i]; break;
        case BinaryOp::kBitwiseAnd: for (int64_t i = 0; i < n; ++i) y[i] = a[i] & b[i]; break;
        case BinaryOp::kBitwiseOr: for (int64_t i = 0; i < n; ++i) y[i] = a[i] | b[i]; break;
        case BinaryOp::kBitwiseXor: for (int64_t i = 0; i < n; ++i) y[i] = a[i] ^ b[i]; break;
        // Narrow types arrive widened (sign- or zero-extended) and leave truncated: a shift by
        // at least their width gives 0 (left) or the sign (right) either way.
        case BinaryOp::kShiftLeft:
            for (int64_t i = 0; i < n; ++i) y[i] = (b[i] < 0 || b[i] >= 64) ? 0 : static_cast<int64_t>(u(a[i]) << b[i]);
            break;
        case BinaryOp::kShiftRight:
            for (int64_t i = 0; i < n; ++i) y[i] = a[i] >> ((b[i] < 0 || b[i] >= 64) ? 63 : b[i]);
            break;
        case BinaryOp::kGcd: for (int64_t i = 0; i < n; ++i) y[i] = gcd_in(a[i], b[i], bits); break;
        case BinaryOp::kLcm: for (int64_t i = 0; i < n; ++i) y[i] = lcm_in(a[i], b[i], bits); break;
        default: break;  // div and the float-only backwards are not routed here
    }
}

// The integer division family (not vectorized: one division per element anyway). Returns false
// on a division by zero. INT64_MIN / -1 wraps, as two's complement arithmetic does.
bool divide_i64(BinaryOp op, int64_t* y, const int64_t* a, const int64_t* b, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const int64_t x = a[i], d = b[i];
        if (d == 0) return false;
        const int64_t q = d == -1 ? static_cast<int64_t>(0 - static_cast<uint64_t>(x)) : x / d;
        const int64_t r = d == -1 ? 0 : x % d;
        switch (op) {
            case BinaryOp::kFloorDivide: y[i] = (r != 0 && ((r < 0) != (d < 0))) ? q - 1 : q; break;
            case BinaryOp::kTruncDivide: y[i] = q; break;
            case BinaryOp::kRemainder: y[i] = (r != 0 && ((r < 0) != (d < 0))) ? r + d : r; break;
            case BinaryOp::kFmod: y[i] = r; break;
            default: break;
        }
    }
    return true;
}

bool division_op(BinaryOp op) { return op >= BinaryOp::kFloorDivide; }

bool bitwise_op(BinaryOp op) { return op >= BinaryOp::kBitwiseAnd && op <= BinaryOp::kShiftRight; }
bool integer_only_op(BinaryOp op) { return bitwise_op(op) || op == BinaryOp::kGcd || op == BinaryOp::kLcm; }
bool float_only_op(BinaryOp op) {
    return op == BinaryOp::kDiv ||
           (op >= BinaryOp::kSigmoidBackward && op < BinaryOp::kBitwiseAnd);
}
bool integer_op(BinaryOp op) { return !float_only_op(op); }

// Short rows in which an input is broadcast along the row (x * scale[..., None] over a head dim
// of 32): computed a row at a time, each row pays the whole per-call cost for a few elements.
// When the output and the other input hold C with consecutive rows adjacent, several rows are
// computed as one span instead: the broadcast input's value per row is repeated into a block.
template <typename C, typename F>
bool run_short_broadcast_rows(const ElementwiseLoop& loop, runtime::ThreadPool* pool, F& compute) {
    const int nd = loop.ndim;
    if (nd < 2) return false;
    const int64_t inner = loop.shape[nd - 1];
    if (inner <= 0 || inner > detail::kBlock / 4) return false;
    const auto dense = [&](int k) {
        return loop.dtype[k] == detail::dtype_of<C>() && loop.strides[k][nd - 1] == static_cast<int64_t>(sizeof(C)) &&
               loop.strides[k][nd - 2] == inner * static_cast<int64_t>(sizeof(C));
    };
    bool broadcast[3] = {false, false, false};
    if (!dense(0)) return false;
    int broadcasts = 0;
    for (int k = 1; k < 3; ++k) {
        broadcast[k] = loop.strides[k][nd - 1] == 0;
        if (broadcast[k]) ++broadcasts;
        else if (!dense(k)) return false;
    }
    if (broadcasts == 0) return false;
    // Iterate the loop without its last dim; each index is one short row.
    ElementwiseLoop rows = loop;
    rows.ndim = nd - 1;
    constexpr int64_t kSpan = 4 * detail::kBlock;
    const int64_t per_block = kSpan / inner;
    detail::for_each_row(rows, pool, [&](char** p, const int64_t* s, int64_t n) {
        alignas(64) C buf[2][kSpan];
        for (int64_t r = 0; r < n; r += per_block) {
            const int64_t q = std::min(per_block, n - r);
            const C* in[2];
            for (int k = 1; k < 3; ++k) {
                const char* base = p[k] + r * s[k];
                if (!broadcast[k]) {
                    in[k - 1] = reinterpret_cast<const C*>(base);
                    continue;
                }
                C* b = buf[k - 1];
                C values[kSpan];  // one per row, converted in one call
                detail::load_block(values, base, s[k], loop.dtype[k], q);
                for (int64_t j = 0; j < q; ++j)
                    for (int64_t i = 0; i < inner; ++i) b[j * inner + i] = values[j];
                in[k - 1] = b;
            }
            compute(reinterpret_cast<C*>(p[0] + r * s[0]), in[0], in[1], q * inner);
        }
    }, inner);
    return true;
}

template <typename C, typename F>
void run(const ElementwiseLoop& loop, runtime::ThreadPool* pool, F compute) {
    if (run_short_broadcast_rows<C>(loop, pool, compute)) return;
    detail::for_each_row(loop, pool, [&](char** p, const int64_t* s, int64_t n) {
        if (detail::direct_row<C>(loop, s)) {
            compute(reinterpret_cast<C*>(p[0]), reinterpret_cast<const C*>(p[1]),
                    reinterpret_cast<const C*>(p[2]), n);
            return;
        }
        // Operands already in the compute type are used in place; the rest go through blocks.
        alignas(64) C a[detail::kBlock], b[detail::kBlock], out[detail::kBlock];
        detail::RowInput<C> ra(a, p[1], s[1], loop.dtype[1]), rb(b, p[2], s[2], loop.dtype[2]);
        for (int64_t j = 0; j < n; j += detail::kBlock) {
            int64_t m = std::min(detail::kBlock, n - j);
            const C* pa = ra.block(j, m);
            const C* pb = rb.block(j, m);
            C* po = detail::output_block(out, p[0] + j * s[0], s[0], loop.dtype[0]);
            compute(po, pa, pb, m);
            detail::flush_block(po, out, p[0] + j * s[0], s[0], loop.dtype[0], m);
        }
    });
}

}  // namespace

const char* op_name(BinaryOp op) {
    static const char* names[] = {"add", "sub", "mul", "div", "pow", "maximum", "minimum",
                                  "eq", "ne", "lt", "le", "gt", "ge", "sigmoid_backward",
                                  "tanh_backward", "gelu_backward", "gelu_tanh_backward",
                                  "softplus_backward", "silu_backward", "atan2", "hypot", "nextafter", "bitwise_and", "bitwise_or",
                                  "bitwise_xor", "bitwise_left_shift", "bitwise_right_shift", "gcd", "lcm", "floor_divide", "trunc_divide", "remainder", "fmod"};
    return names[static_cast<int>(op)];
}

Status binary(BinaryOp op, const ElementwiseLoop& loop, DType compute, const Scalar& alpha,
              runtime::ThreadPool* pool) {
    if (!detail::real_operands(loop)) return unimplemented(std::string(op_name(op)) + " with a complex operand");
    if (loop.nops != 3) return invalid_argument("binary: expected two inputs and one output");
    const bool floating = compute == DType::kFloat32 || compute == DType::kBFloat16 ||
                          compute == DType::kFloat16 || compute == DType::kFloat64;
    if (integer_only_op(op) && floating) {
        return invalid_argument(std::string(op_name(op)) + " needs integer or bool tensors");
    }
    if (op == BinaryOp::kNextafter && compute != DType::kFloat32 && compute != DType::kFloat64) {
        return invalid_argument("nextafter is computed for float32 and float64 only");
    }
    switch (compute) {
        case DType::kFloat32: case DType::kBFloat16: case DType::kFloat16: {
            float al = alpha.kind == Scalar::Kind::kFloat ? static_cast<float>(alpha.f) : static_cast<float>(alpha.i);
            run<float>(loop, pool, [=](float* y, const float* a, const float* b, int64_t n) { binary_f32(op, y, a, b, al, n); });
            return Status();
        }
        case DType::kFloat64: {
            double al = alpha.kind == Scalar::Kind::kFloat ? alpha.f : static_cast<double>(alpha.i);
            run<double>(loop, pool, [=](double* y, const double* a, const double* b, int64_t n) { binary_f64(op, y, a, b, al, n); });
            return Status();
        }
        case DType::kComplex64: case DType::kComplex128:
            return unimplemented(std::string(op_name(op)) + " for complex tensors");
        default: {
            if (!integer_op(op)) return invalid_argument(std::string(op_name(op)) + " on integers");
            if (division_op(op)) {
                std::atomic<bool> by_zero{false};
                run<int64_t>(loop, pool, [&](int64_t* y, const int64_t* a, const int64_t* b, int64_t n) {
                    if (!divide_i64(op, y, a, b, n)) by_zero.store(true, std::memory_order_relaxed);
                });
                if (by_zero.load()) return invalid_argument("ZeroDivisionError");
                return Status();
            }
            int64_t al = alpha.kind == Scalar::Kind::kFloat ? static_cast<int64_t>(alpha.f) : alpha.i;
            const int bits = compute == DType::kInt8 ? 8 : compute == DType::kInt16 ? 16
                           : compute == DType::kInt32 ? 32 : 64;
            run<int64_t>(loop, pool, [=](int64_t* y, const int64_t* a, const int64_t* b, int64_t n) { binary_i64(op, y, a, b, al, n, bits); });
            return Status();
        }
    }
}

}  // namespace ember::kernels
