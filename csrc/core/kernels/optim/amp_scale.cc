#include "kernels/optim/amp_scale.h"

#include <atomic>
#include <cmath>

#include "kernels/dispatch.h"  // detail::as_double / from_double
#include "kernels/elementwise/simd.h"

namespace ember::kernels {
namespace {

// Returns whether any element was not finite. The multiply happens whatever the values (inf and
// NaN stay inf and NaN), as PyTorch's kernel does; the step is skipped by the caller anyway.
template <typename T>
EMBER_SIMD_CLONES bool unscale_range(T* __restrict__ g, int64_t n, float inv) {
    bool bad = false;
    for (int64_t i = 0; i < n; ++i) {
        const float v = static_cast<float>(detail::as_double(g[i]));
        bad |= !std::isfinite(v);
        g[i] = detail::from_double<T>(static_cast<double>(v * inv));
    }
    return bad;
}

template <>
EMBER_SIMD_CLONES bool unscale_range(float* __restrict__ g, int64_t n, float inv) {
    // Inf and NaN are the values whose exponent bits are all ones; testing v - v != 0 lets the
    // loop vectorize (it is NaN exactly for inf and NaN).
    int bad = 0;
    for (int64_t i = 0; i < n; ++i) {
        const float v = g[i];
        bad |= (v - v) != 0.f;
        g[i] = v * inv;
    }
    return bad != 0;
}

template <>
EMBER_SIMD_CLONES bool unscale_range(double* __restrict__ g, int64_t n, float inv) {
    int bad = 0;
    for (int64_t i = 0; i < n; ++i) {
        const double v = g[i];
        bad |= (v - v) != 0.0;
        g[i] = v * static_cast<double>(inv);
    }
    return bad != 0;
}

}  // namespace

StatusOr<bool> unscale_check_finite(const TensorView& grad, float inv, runtime::ThreadPool* pool) {
    if (!grad.is_contiguous()) return invalid_argument("unscale_check_finite: expects a contiguous gradient");
    const int64_t n = grad.numel();
    std::atomic<bool> bad{false};
    auto run = [&](auto* data) {
        auto body = [&](int64_t b, int64_t e) {
            if (unscale_range(data + b, e - b, inv)) bad.store(true, std::memory_order_relaxed);
        };
        if (pool) pool->parallel_for(n, runtime::kParallelGrain, body);
        else body(0, n);
    };
    switch (grad.dtype) {
        case DType::kFloat32: run(static_cast<float*>(grad.data)); break;
        case DType::kFloat64: run(static_cast<double*>(grad.data)); break;
        case DType::kFloat16: run(static_cast<Half*>(grad.data)); break;
        case DType::kBFloat16: run(static_cast<BFloat16*>(grad.data)); break;
        default: return invalid_argument("unscale_check_finite: expects a floating-point gradient");
    }
    return bad.load();
}

void update_scale(float* scale, int32_t* growth_tracker, const float* found_inf, double growth_factor,
                  double backoff_factor, int64_t growth_interval) {
    if (*found_inf != 0.f) {
        *scale = static_cast<float>(*scale * backoff_factor);
        *growth_tracker = 0;
        return;
    }
    const int64_t successful = static_cast<int64_t>(*growth_tracker) + 1;
    if (successful == growth_interval) {
        const float grown = static_cast<float>(*scale * growth_factor);
        if (std::isfinite(grown)) *scale = grown;
        *growth_tracker = 0;
    } else {
        *growth_tracker = static_cast<int32_t>(successful);
    }
}

}  // namespace ember::kernels
