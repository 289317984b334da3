#include "kernels/reduce/scan.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

#include "kernels/dispatch.h"

namespace ember::kernels {
namespace {

char* at3(const TensorView& v, int64_t a, int64_t b, int64_t c) {
    const int64_t es = element_size(v.dtype);
    return static_cast<char*>(v.data) + (a * v.strides[0] + b * v.strides[1] + c * v.strides[2]) * es;
}

// PyTorch's _log_add_exp_helper (aten/src/ATen/native/ReduceOps.cpp), in double.
double log_add_exp(double acc, double x) {
    const double lo = std::isnan(x) ? x : std::min(acc, x);
    const double hi = std::isnan(x) ? x : std::max(acc, x);
    if (lo != hi || std::isfinite(lo)) return std::log1p(std::exp(lo - hi)) + hi;
    return acc;  // both the same infinity
}

template <typename T, typename Acc>
void scan_line(ScanOp op, const TensorView& out, const TensorView& indices, const TensorView& in,
               int64_t o, int64_t k) {
    const int64_t n = in.sizes[1];
    const DType odt = out.dtype;
    auto store = [&](int64_t i, Acc v) {
        char* dst = at3(out, o, i, k);
        EMBER_DISPATCH_REAL(odt, { *reinterpret_cast<scalar_t*>(dst) = detail::convert<scalar_t>(v); });
    };
    auto load = [&](int64_t i) { return detail::convert<Acc>(*reinterpret_cast<const T*>(at3(in, o, i, k))); };
    switch (op) {
        case ScanOp::kSum: {
            Acc acc = 0;
            for (int64_t i = 0; i < n; ++i) store(i, acc += load(i));
            break;
        }
        case ScanOp::kProd: {
            Acc acc = 1;
            for (int64_t i = 0; i < n; ++i) {
                if constexpr (std::is_integral_v<Acc>) {
                    acc = static_cast<Acc>(static_cast<uint64_t>(acc) * static_cast<uint64_t>(load(i)));
                } else {
                    acc *= load(i);
                }
                store(i, acc);
            }
            break;
        }
        case ScanOp::kLogSumExp: {
            if constexpr (std::is_floating_point_v<Acc>) {
                Acc acc = -std::numeric_limits<Acc>::infinity();
                for (int64_t i = 0; i < n; ++i) store(i, acc = log_add_exp(acc, load(i)));
            }
            break;
        }
        case ScanOp::kMax:
        case ScanOp::kMin: {
            const bool is_max = op == ScanOp::kMax;
            Acc best = load(0);
            int64_t pos = 0;
            for (int64_t i = 0; i < n; ++i) {
                const Acc x = load(i);
                bool take;
                if constexpr (std::is_floating_point_v<Acc>) {
                    take = std::isnan(x) || (!std::isnan(best) && (is_max ? x >= best : x <= best));
                } else {
                    take = is_max ? x >= best : x <= best;
                }
                if (take) {
                    best = x;
                    pos = i;
                }
                store(i, best);
                *reinterpret_cast<int64_t*>(at3(indices, o, i, k)) = pos;
            }
            break;
        }
    }
}

}  // namespace

const char* op_name(ScanOp op) {
    static const char* names[] = {"cumsum", "logcumsumexp", "cummax", "cummin", "cumprod"};
    return names[static_cast<int>(op)];
}

Status scan(ScanOp op, const TensorView& out, const TensorView& indices, const TensorView& in,
            runtime::ThreadPool* pool) {
    if (in.ndim != 3 || out.ndim != 3) return invalid_argument(std::string(op_name(op)) + ": views must be 3-d");
    for (int d = 0; d < 3; ++d) {
        if (in.sizes[d] != out.sizes[d]) return invalid_argument(std::string(op_name(op)) + ": shape mismatch");
    }
    const bool extremes = op == ScanOp::kMax || op == ScanOp::kMin;
    if (extremes && (indices.ndim != 3 || indices.dtype != DType::kInt64)) {
        return invalid_argument(std::string(op_name(op)) + ": indices must be a 3-d int64 view");
    }
    const bool floating = in.dtype == DType::kFloat32 || in.dtype == DType::kFloat64 ||
                          in.dtype == DType::kBFloat16 || in.dtype == DType::kFloat16;
    if (op == ScanOp::kLogSumExp && !floating) {
        return invalid_argument("logcumsumexp needs a floating-point input");
    }
    if (is_complex(in.dtype)) return unimplemented(std::string(op_name(op)) + " for complex tensors");
    const int64_t outer = in.sizes[0], n = in.sizes[1], inner = in.sizes[2];
    if (n == 0 || outer * inner == 0) return Status();
    EMBER_DISPATCH_REAL(in.dtype, {
        using Acc = std::conditional_t<std::is_integral_v<scalar_t>, int64_t, double>;
        auto body = [&](int64_t b, int64_t e) {
            for (int64_t t = b; t < e; ++t) scan_line<scalar_t, Acc>(op, out, indices, in, t / inner, t % inner);
        };
        const int64_t grain = std::max<int64_t>(1, runtime::kParallelGrain / std::max<int64_t>(1, n));
        if (pool) pool->parallel_for(outer * inner, grain, body);
        else body(0, outer * inner);
        return Status();
    });
    return unimplemented(std::string(op_name(op)) + " for dtype " + dtype_name(in.dtype));
}

}  // namespace ember::kernels
