#include "kernels/elementwise/block_io.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/elementwise/simd.h"

namespace ember::kernels {
namespace {

// Written as PyTorch's CPU kernels write them, so rounding matches: addcdiv is
// self + (value * t1) / t2; lerp takes the formula that is exact at whichever end is nearer.
#define EMBER_TERNARY_FLOAT_BODY(T)                                                            \
    switch (op) {                                                                              \
        case TernaryOp::kWhere: for (int64_t i = 0; i < n; ++i) y[i] = a[i] != T(0) ? b[i] : c[i]; break; \
        case TernaryOp::kAddcmul: for (int64_t i = 0; i < n; ++i) y[i] = a[i] + v * b[i] * c[i]; break; \
        case TernaryOp::kAddcdiv: for (int64_t i = 0; i < n; ++i) y[i] = a[i] + v * b[i] / c[i]; break; \
        case TernaryOp::kLerp:                                                                 \
            for (int64_t i = 0; i < n; ++i) {                                                  \
                T w = c[i], diff = b[i] - a[i];                                                \
                y[i] = std::abs(w) < T(0.5) ? a[i] + w * diff : b[i] - diff * (T(1) - w);      \
            }                                                                                  \
            break;                                                                             \
    }

EMBER_SIMD_CLONES void ternary_f32(TernaryOp op, float* y, const float* a, const float* b, const float* c,
                                   float v, int64_t n) { EMBER_TERNARY_FLOAT_BODY(float) }
EMBER_SIMD_CLONES void ternary_f64(TernaryOp op, double* y, const double* a, const double* b,
                                   const double* c, double v, int64_t n) { EMBER_TERNARY_FLOAT_BODY(double) }
#undef EMBER_TERNARY_FLOAT_BODY

void ternary_i64(TernaryOp op, int64_t* y, const int64_t* a, const int64_t* b, const int64_t* c, int64_t v,
                 int64_t n) {
    auto u = [](int64_t x) { return static_cast<uint64_t>(x); };
    switch (op) {
        case TernaryOp::kWhere: for (int64_t i = 0; i < n; ++i) y[i] = a[i] != 0 ? b[i] : c[i]; break;
        case TernaryOp::kAddcmul:
            for (int64_t i = 0; i < n; ++i) y[i] = static_cast<int64_t>(u(a[i]) + u(v) * u(b[i]) * u(c[i]));
            break;
        default: break;  // addcdiv and lerp are floating-point only
    }
}

template <typename C, typename F>
void run(const ElementwiseLoop& loop, runtime::ThreadPool* pool, F compute) {
    detail::for_each_row(loop, pool, [&](char** p, const int64_t* s, int64_t n) {
        if (detail::direct_row<C>(loop, s)) {
            compute(reinterpret_cast<C*>(p[0]), reinterpret_cast<const C*>(p[1]),
                    reinterpret_cast<const C*>(p[2]), reinterpret_cast<const C*>(p[3]), n);
            return;
        }
        alignas(64) C a[detail::kBlock], b[detail::kBlock], c[detail::kBlock], out[detail::kBlock];
        detail::RowInput<C> ra(a, p[1], s[1], loop.dtype[1]), rb(b, p[2], s[2], loop.dtype[2]),
            rc(c, p[3], s[3], loop.dtype[3]);
        for (int64_t j = 0; j < n; j += detail::kBlock) {
            int64_t m = std::min(detail::kBlock, n - j);
            const C* pa = ra.block(j, m);
            const C* pb = rb.block(j, m);
            const C* pc = rc.block(j, m);
            C* po = detail::output_block(out, p[0] + j * s[0], s[0], loop.dtype[0]);
            compute(po, pa, pb, pc, m);
            detail::flush_block(po, out, p[0] + j * s[0], s[0], loop.dtype[0], m);
        }
    });
}

double as_f(const Scalar& s) { return s.kind == Scalar::Kind::kFloat ? s.f : static_cast<double>(s.i); }

}  // namespace

const char* op_name(TernaryOp op) {
    static const char* names[] = {"where", "addcmul", "addcdiv", "lerp"};
    return names[static_cast<int>(op)];
}

Status ternary(TernaryOp op, const ElementwiseLoop& loop, DType compute, const Scalar& value,
               runtime::ThreadPool* pool) {
    if (!detail::real_operands(loop)) return unimplemented(std::string(op_name(op)) + " with a complex operand");
    if (loop.nops != 4) return invalid_argument("ternary: expected three inputs and one output");
    switch (compute) {
        case DType::kFloat32: case DType::kBFloat16: case DType::kFloat16: {
            float v = static_cast<float>(as_f(value));
            run<float>(loop, pool, [=](float* y, const float* a, const float* b, const float* c, int64_t n) {
                ternary_f32(op, y, a, b, c, v, n);
            });
            return Status();
        }
        case DType::kFloat64: {
            double v = as_f(value);
            run<double>(loop, pool, [=](double* y, const double* a, const double* b, const double* c, int64_t n) {
                ternary_f64(op, y, a, b, c, v, n);
            });
            return Status();
        }
        case DType::kComplex64: case DType::kComplex128:
            return unimplemented(std::string(op_name(op)) + " for complex tensors");
        default: {
            if (op != TernaryOp::kWhere && op != TernaryOp::kAddcmul) {
                return invalid_argument(std::string(op_name(op)) + " on integers");
            }
            int64_t v = value.kind == Scalar::Kind::kFloat ? static_cast<int64_t>(value.f) : value.i;
            run<int64_t>(loop, pool, [=](int64_t* y, const int64_t* a, const int64_t* b, const int64_t* c, int64_t n) {
                ternary_i64(op, y, a, b, c, v, n);
            });
            return Status();
        }
    }
}

}  // namespace ember::kernels
