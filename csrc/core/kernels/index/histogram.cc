#include "kernels/index/histogram.h"

#include <cmath>
#include <mutex>
#include <vector>

#include "kernels/dispatch.h"

namespace ember::kernels {

namespace {

// torch.linspace(lo, hi, bins + 1) in T: from the start for the first half, from the end for
// the rest, as PyTorch computes it.
template <typename T>
std::vector<T> bin_edges(int64_t bins, double lo, double hi) {
    std::vector<T> e(static_cast<size_t>(bins + 1));
    const T start = static_cast<T>(lo), end = static_cast<T>(hi);
    const T step = (end - start) / static_cast<T>(bins);
    const int64_t half = (bins + 1) / 2;
    for (int64_t i = 0; i <= bins; ++i)
        e[static_cast<size_t>(i)] = i < half ? start + step * static_cast<T>(i) : end - step * static_cast<T>(bins - i);
    return e;
}

// The CPU's placement: a first guess from the formula, then moved to the bin whose edges hold v.
template <typename T>
int64_t bin_of(T v, const std::vector<T>& e, int64_t bins) {
    const T lo = e.front(), hi = e.back();
    auto pos = static_cast<int64_t>((v - lo) * static_cast<T>(bins) / (hi - lo));
    if (pos > bins) pos = bins;
    if (pos < 0) pos = 0;
    if (pos < bins && v < e[static_cast<size_t>(pos)]) pos -= 1;
    else if (pos < bins && v >= e[static_cast<size_t>(pos + 1)]) pos += 1;
    return pos >= bins ? bins - 1 : (pos < 0 ? 0 : pos);
}

template <typename T, typename S>
void count(std::vector<int64_t>& total, const S* x, int64_t n, int64_t bins, double lo, double hi,
           runtime::ThreadPool* pool) {
    const std::vector<T> e = bin_edges<T>(bins, lo, hi);
    std::mutex mu;
    auto body = [&](int64_t begin, int64_t end) {
        std::vector<int64_t> local(static_cast<size_t>(bins), 0);
        for (int64_t i = begin; i < end; ++i) {
            const T v = static_cast<T>(detail::as_double(x[i]));
            if (!(v >= e.front() && v <= e.back())) continue;  // outside, or NaN
            local[static_cast<size_t>(bin_of(v, e, bins))] += 1;
        }
        std::lock_guard<std::mutex> lock(mu);
        for (int64_t b = 0; b < bins; ++b) total[static_cast<size_t>(b)] += local[static_cast<size_t>(b)];
    };
    if (pool) pool->parallel_for(n, runtime::kParallelGrain, body);
    else body(0, n);
}

}  // namespace

Status histc(const TensorView& out, const TensorView& in, int64_t bins, double lo, double hi,
             runtime::ThreadPool* pool) {
    if (bins <= 0) return invalid_argument("histc: bins must be > 0");
    if (!(lo < hi)) return invalid_argument("histc: needs min < max");
    if (out.ndim != 1 || out.sizes[0] != bins || !out.is_contiguous())
        return invalid_argument("histc: out must be a contiguous 1-d tensor of `bins` elements");
    if (!in.is_contiguous()) return invalid_argument("histc: expects a contiguous input");
    if (in.dtype == DType::kFloat16 || in.dtype == DType::kBFloat16)
        return unimplemented("histc: float16/bfloat16 inputs (bin edges are computed in that precision)");
    std::vector<int64_t> total(static_cast<size_t>(bins), 0);
    const int64_t n = in.numel();
    EMBER_DISPATCH_REAL(in.dtype, {
        const auto* x = static_cast<const scalar_t*>(in.data);
        if constexpr (std::is_same_v<scalar_t, float>) count<float>(total, x, n, bins, lo, hi, pool);
        else count<double>(total, x, n, bins, lo, hi, pool);
    });
    EMBER_DISPATCH_REAL(out.dtype, {
        auto* o = static_cast<scalar_t*>(out.data);
        for (int64_t i = 0; i < bins; ++i) o[i] = detail::convert<scalar_t>(total[static_cast<size_t>(i)]);
    });
    return Status();
}

}  // namespace ember::kernels
