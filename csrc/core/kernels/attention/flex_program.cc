#include "kernels/attention/flex_program.h"

#include <cmath>
#include <string>

#include "kernels/dispatch.h"
#include "kernels/elementwise/simd.h"

namespace ember::kernels::flex {
namespace {

int arity(Op op) {
    switch (op) {
        case Op::kScore: case Op::kGrad: case Op::kBatch: case Op::kHead: case Op::kQuery: case Op::kKey:
        case Op::kConst:
            return 0;
        case Op::kNeg: case Op::kAbs: case Op::kExp: case Op::kLog: case Op::kTanh: case Op::kSigmoid:
        case Op::kSqrt: case Op::kRsqrt: case Op::kNot: case Op::kFloor: case Op::kCeil: case Op::kTrunc:
        case Op::kRound: case Op::kToBool: case Op::kToInt: case Op::kLoad: case Op::kExp2: case Op::kLog2:
        case Op::kReciprocal: case Op::kSin: case Op::kCos:
            return 1;
        case Op::kWhere:
            return 3;
        default:
            return 2;
    }
}

// Python's floor division and modulo on integer-valued doubles (torch's // and % on ints).
inline double floor_divide(double a, double b) { return std::floor(a / b); }
inline double remainder(double a, double b) {
    const double r = std::fmod(a, b);
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

// One elementwise op over n lanes. The switch sits outside the loops, so each loop vectorizes.
EMBER_SIMD_CLONES void apply(Op op, double* y, const double* a, const double* b, const double* c, int64_t n) {
    switch (op) {
        case Op::kAdd: for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i]; break;
        case Op::kSub: for (int64_t i = 0; i < n; ++i) y[i] = a[i] - b[i]; break;
        case Op::kMul: for (int64_t i = 0; i < n; ++i) y[i] = a[i] * b[i]; break;
        case Op::kDiv: for (int64_t i = 0; i < n; ++i) y[i] = a[i] / b[i]; break;
        case Op::kNeg: for (int64_t i = 0; i < n; ++i) y[i] = -a[i]; break;
        case Op::kAbs: for (int64_t i = 0; i < n; ++i) y[i] = std::fabs(a[i]); break;
        case Op::kExp: for (int64_t i = 0; i < n; ++i) y[i] = std::exp(a[i]); break;
        case Op::kLog: for (int64_t i = 0; i < n; ++i) y[i] = std::log(a[i]); break;
        case Op::kTanh: for (int64_t i = 0; i < n; ++i) y[i] = std::tanh(a[i]); break;
        case Op::kSigmoid: for (int64_t i = 0; i < n; ++i) y[i] = 1.0 / (1.0 + std::exp(-a[i])); break;
        case Op::kSqrt: for (int64_t i = 0; i < n; ++i) y[i] = std::sqrt(a[i]); break;
        case Op::kRsqrt: for (int64_t i = 0; i < n; ++i) y[i] = 1.0 / std::sqrt(a[i]); break;
        case Op::kPow: for (int64_t i = 0; i < n; ++i) y[i] = std::pow(a[i], b[i]); break;
        // NaN-propagating, as torch.maximum and torch.minimum
        case Op::kMaximum: for (int64_t i = 0; i < n; ++i) y[i] = a[i] != a[i] || a[i] > b[i] ? a[i] : b[i]; break;
        case Op::kMinimum: for (int64_t i = 0; i < n; ++i) y[i] = a[i] != a[i] || a[i] < b[i] ? a[i] : b[i]; break;
        case Op::kEq: for (int64_t i = 0; i < n; ++i) y[i] = a[i] == b[i]; break;
        case Op::kNe: for (int64_t i = 0; i < n; ++i) y[i] = a[i] != b[i]; break;
        case Op::kLt: for (int64_t i = 0; i < n; ++i) y[i] = a[i] < b[i]; break;
        case Op::kLe: for (int64_t i = 0; i < n; ++i) y[i] = a[i] <= b[i]; break;
        case Op::kGt: for (int64_t i = 0; i < n; ++i) y[i] = a[i] > b[i]; break;
        case Op::kGe: for (int64_t i = 0; i < n; ++i) y[i] = a[i] >= b[i]; break;
        case Op::kAnd: for (int64_t i = 0; i < n; ++i) y[i] = (a[i] != 0) && (b[i] != 0); break;
        case Op::kOr: for (int64_t i = 0; i < n; ++i) y[i] = (a[i] != 0) || (b[i] != 0); break;
        case Op::kXor: for (int64_t i = 0; i < n; ++i) y[i] = (a[i] != 0) != (b[i] != 0); break;
        case Op::kNot: for (int64_t i = 0; i < n; ++i) y[i] = a[i] == 0; break;
        case Op::kWhere: for (int64_t i = 0; i < n; ++i) y[i] = a[i] != 0 ? b[i] : c[i]; break;
        case Op::kFloorDivide: for (int64_t i = 0; i < n; ++i) y[i] = floor_divide(a[i], b[i]); break;
        case Op::kRemainder: for (int64_t i = 0; i < n; ++i) y[i] = remainder(a[i], b[i]); break;
        case Op::kFloor: for (int64_t i = 0; i < n; ++i) y[i] = std::floor(a[i]); break;
        case Op::kCeil: for (int64_t i = 0; i < n; ++i) y[i] = std::ceil(a[i]); break;
        case Op::kTrunc: case Op::kToInt: for (int64_t i = 0; i < n; ++i) y[i] = std::trunc(a[i]); break;
        case Op::kRound: for (int64_t i = 0; i < n; ++i) y[i] = std::nearbyint(a[i]); break;
        case Op::kToBool: for (int64_t i = 0; i < n; ++i) y[i] = a[i] != 0; break;
        case Op::kTanhBackward: for (int64_t i = 0; i < n; ++i) y[i] = a[i] * (1.0 - b[i] * b[i]); break;
        case Op::kSigmoidBackward: for (int64_t i = 0; i < n; ++i) y[i] = a[i] * b[i] * (1.0 - b[i]); break;
        case Op::kExp2: for (int64_t i = 0; i < n; ++i) y[i] = std::exp2(a[i]); break;
        case Op::kLog2: for (int64_t i = 0; i < n; ++i) y[i] = std::log2(a[i]); break;
        case Op::kReciprocal: for (int64_t i = 0; i < n; ++i) y[i] = 1.0 / a[i]; break;
        case Op::kSin: for (int64_t i = 0; i < n; ++i) y[i] = std::sin(a[i]); break;
        case Op::kCos: for (int64_t i = 0; i < n; ++i) y[i] = std::cos(a[i]); break;
        default: break;
    }
}

EMBER_SIMD_CLONES void round_to_f32(double* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = static_cast<double>(static_cast<float>(y[i]));
}

EMBER_SIMD_CLONES void fill(double* y, double v, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = v;
}

EMBER_SIMD_CLONES void widen(double* y, const float* x, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i];
}

// base + 0, 1, 2, ...: an add per lane (converting each lane's integer would not vectorize
// before AVX-512).
struct Iota {
    double v[kFlexLanes];
    Iota() {
        for (int64_t i = 0; i < kFlexLanes; ++i) v[i] = static_cast<double>(i);
    }
};
const Iota kIota;

EMBER_SIMD_CLONES void iota(double* y, double base, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = base + kIota.v[i];
}

}  // namespace

Status validate(const Program& p, const char* what) {
    auto reg_ok = [&](int32_t r) { return r >= 0 && r < p.num_regs; };
    if (!reg_ok(p.result)) return invalid_argument(std::string(what) + ": bad result register");
    for (const Instr& in : p.code) {
        if (static_cast<int32_t>(in.op) < 0 || in.op >= Op::kCount || !reg_ok(in.dst))
            return invalid_argument(std::string(what) + ": bad instruction");
        const int n = arity(in.op);
        const int32_t ops[3] = {in.a, in.b, in.c};
        for (int k = 0; k < n && in.op != Op::kLoad; ++k)
            if (!reg_ok(ops[k])) return invalid_argument(std::string(what) + ": bad operand register");
        if (in.op == Op::kConst && (in.c < 0 || in.c >= static_cast<int32_t>(p.constants.size())))
            return invalid_argument(std::string(what) + ": bad constant");
        if (in.op == Op::kLoad) {
            if (in.c < 0 || in.c >= static_cast<int32_t>(p.buffers.size()))
                return invalid_argument(std::string(what) + ": bad buffer");
            const int32_t idx[4] = {in.a, in.b, in.d, in.e};
            const int dims = p.buffers[static_cast<size_t>(in.c)].ndim;
            if (dims < 1 || dims > 4) return invalid_argument(std::string(what) + ": buffers of 1 to 4 dims");
            for (int k = 0; k < dims; ++k)
                if (!reg_ok(idx[k])) return invalid_argument(std::string(what) + ": bad index register");
            if (is_complex(p.buffers[static_cast<size_t>(in.c)].dtype))
                return unimplemented(std::string(what) + ": complex buffers");
        }
    }
    for (const Scatter& sc : p.scatters) {
        if (sc.grad < 0 || sc.grad >= static_cast<int32_t>(p.grads.size()) || !reg_ok(sc.value))
            return invalid_argument(std::string(what) + ": bad scatter");
        const TensorView& g = p.grads[static_cast<size_t>(sc.grad)];
        if (g.ndim < 1 || g.ndim > 4) return invalid_argument(std::string(what) + ": gradients of 1 to 4 dims");
        for (int k = 0; k < g.ndim; ++k)
            if (!reg_ok(sc.idx[k])) return invalid_argument(std::string(what) + ": bad scatter index");
    }
    return Status();
}

Evaluator::Evaluator(const Program& p) : p_(p), regs_(static_cast<size_t>(p.num_regs) * kFlexLanes) {}

Status Evaluator::run(const RowPos& pos, const float* score, const float* grad, const double** result) {
    const int64_t n = pos.n;
    auto reg = [&](int32_t r) { return regs_.data() + static_cast<int64_t>(r) * kFlexLanes; };
    for (const Instr& in : p_.code) {
        double* y = reg(in.dst);
        switch (in.op) {
            case Op::kScore: widen(y, score, n); break;
            case Op::kGrad: widen(y, grad, n); break;
            case Op::kBatch: fill(y, static_cast<double>(pos.b), n); break;
            case Op::kHead: fill(y, static_cast<double>(pos.h), n); break;
            case Op::kQuery: fill(y, static_cast<double>(pos.q), n); break;
            case Op::kKey: iota(y, static_cast<double>(pos.kv0), n); break;
            case Op::kConst: fill(y, p_.constants[static_cast<size_t>(in.c)], n); break;
            case Op::kLoad: {
                const TensorView& buf = p_.buffers[static_cast<size_t>(in.c)];
                const double* idx[4] = {reg(in.a), buf.ndim > 1 ? reg(in.b) : nullptr,
                                        buf.ndim > 2 ? reg(in.d) : nullptr, buf.ndim > 3 ? reg(in.e) : nullptr};
                const char* base = static_cast<const char*>(buf.data);
                const int64_t es = element_size(buf.dtype);
                Status bad;
                EMBER_DISPATCH_REAL(buf.dtype, {
                    for (int64_t i = 0; i < n; ++i) {
                        int64_t off = 0;
                        for (int k = 0; k < buf.ndim; ++k) {
                            int64_t j = static_cast<int64_t>(idx[k][i]);
                            if (j < 0) j += buf.sizes[k];  // Python's negative indexing
                            if (j < 0 || j >= buf.sizes[k]) {
                                bad = invalid_argument("flex_attention: index " + std::to_string(static_cast<int64_t>(idx[k][i])) +
                                                       " is out of bounds for dimension " + std::to_string(k) +
                                                       " with size " + std::to_string(buf.sizes[k]) +
                                                       " of a tensor the score_mod or mask_mod reads");
                                break;
                            }
                            off += j * buf.strides[k];
                        }
                        if (!bad.ok()) break;
                        y[i] = detail::as_double(*reinterpret_cast<const scalar_t*>(base + off * es));
                    }
                });
                if (!bad.ok()) return bad;
                break;
            }
            default: {
                const double* a = in.a >= 0 ? reg(in.a) : nullptr;
                const double* b = in.b >= 0 ? reg(in.b) : nullptr;
                const double* c = in.c >= 0 ? reg(in.c) : nullptr;
                apply(in.op, y, a, b, c, n);
            }
        }
        if (in.round_f32) round_to_f32(y, n);
    }
    *result = reg(p_.result);
    return Status();
}

Status Evaluator::scatter(int64_t n, float* const* grads) {
    auto reg = [&](int32_t r) { return regs_.data() + static_cast<int64_t>(r) * kFlexLanes; };
    for (const Scatter& sc : p_.scatters) {
        const TensorView& g = p_.grads[static_cast<size_t>(sc.grad)];
        float* out = grads[sc.grad];
        const double* v = reg(sc.value);
        for (int64_t i = 0; i < n; ++i) {
            if (v[i] == 0) continue;  // masked and unreached scores add nothing
            int64_t off = 0, stride = 1;
            for (int k = g.ndim - 1; k >= 0; --k) {
                int64_t j = static_cast<int64_t>(reg(sc.idx[k])[i]);
                if (j < 0) j += g.sizes[k];
                if (j < 0 || j >= g.sizes[k])
                    return invalid_argument("flex_attention backward: index " + std::to_string(j) +
                                            " is out of bounds for dimension " + std::to_string(k) + " with size " +
                                            std::to_string(g.sizes[k]) + " of a captured tensor's gradient");
                off += j * stride;
                stride *= g.sizes[k];
            }
            out[off] += static_cast<float>(v[i]);
        }
    }
    return Status();
}

}  // namespace ember::kernels::flex
