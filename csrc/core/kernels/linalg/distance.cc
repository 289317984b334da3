#include "kernels/linalg/distance.h"

#include "kernels/elementwise/simd.h"

#include <cmath>
#include <vector>
#include <algorithm>

namespace ember::kernels {
namespace {

// Index of pair (i, j), i < j, among the n (n - 1) / 2 pairs in row-major order.
inline int64_t pair_index(int64_t i, int64_t j, int64_t n) { return i * n - i * (i + 1) / 2 + (j - i - 1); }

// p = 2, the common case, in the input's type as the CPU's kernel does, with independent
// partial sums so that the compiler vectorizes it (a floating-point sum is only reassociated by
// hand), compiled for AVX-512, AVX2 and baseline x86-64.
#define EMBER_PDIST_P2(T, suffix)                                                                   \
    EMBER_SIMD_CLONES T squared_##suffix(const T* a, const T* b, int64_t m) {                        \
        constexpr int kLanes = 16;                                                                  \
        T part[kLanes] = {};                                                                        \
        int64_t c = 0;                                                                              \
        for (; c + kLanes <= m; c += kLanes)                                                        \
            for (int l = 0; l < kLanes; ++l) {                                                      \
                const T d = a[c + l] - b[c + l];                                                    \
                part[l] += d * d;                                                                   \
            }                                                                                       \
        for (; c < m; ++c) {                                                                        \
            const T d = a[c] - b[c];                                                                \
            part[0] += d * d;                                                                       \
        }                                                                                           \
        T agg = 0;                                                                                  \
        for (T v : part) agg += v;                                                                  \
        return agg;                                                                                 \
    }                                                                                               \
    /* acc += w * (xi - xj): one pair's share of row i's gradient */                               \
    EMBER_SIMD_CLONES void add_scaled_diff_##suffix(T* acc, T w, const T* xi, const T* xj, int64_t m) { \
        for (int64_t c = 0; c < m; ++c) acc[c] += w * (xi[c] - xj[c]);                              \
    }
EMBER_PDIST_P2(float, f32)
EMBER_PDIST_P2(double, f64)
#undef EMBER_PDIST_P2

inline double euclidean(const float* a, const float* b, int64_t m) { return std::sqrt(static_cast<double>(squared_f32(a, b, m))); }
inline double euclidean(const double* a, const double* b, int64_t m) { return std::sqrt(squared_f64(a, b, m)); }
inline void add_scaled_diff(float* acc, float w, const float* xi, const float* xj, int64_t m) {
    add_scaled_diff_f32(acc, w, xi, xj, m);
}
inline void add_scaled_diff(double* acc, double w, const double* xi, const double* xj, int64_t m) {
    add_scaled_diff_f64(acc, w, xi, xj, m);
}

template <typename T>
double distance(const T* a, const T* b, int64_t m, double p) {
    if (p == 2) return euclidean(a, b, m);
    const bool inf = std::isinf(p);
    double agg = 0;
    for (int64_t c = 0; c < m; ++c) {
        // The difference in T, as the CPU takes it (p = inf's backward compares it with dist).
        const double d = std::abs(static_cast<double>(static_cast<T>(a[c] - b[c])));
        if (p == 0) agg += d != d ? d : (d == 0 ? 0 : 1);  // min(ceil(|d|), 1), NaN kept
        else if (p == 1) agg += d;
        else if (p == 2) agg += d * d;
        else if (inf) agg = (d > agg || d != d) ? d : agg;
        else agg += std::pow(d, p);
    }
    if (p == 0 || p == 1 || inf) return agg;
    if (p == 2) return std::sqrt(agg);
    return std::pow(agg, 1.0 / p);
}

// d dist / d a for one coordinate, with diff = a - b, PyTorch's backward formulas.
inline double slope(double diff, double dist, double p) {
    const double s = diff > 0 ? 1 : diff < 0 ? -1 : 0;
    if (p == 0) return 0;
    if (p == 1) return s;
    if (p == 2) return dist == 0 ? 0 : diff / dist;
    if (std::isinf(p)) return s * (std::abs(diff) == dist ? 1 : 0);
    if (p < 2) return (dist == 0 || (diff == 0 && p < 1)) ? 0 : s * std::pow(std::abs(diff), p - 1) / std::pow(dist, p - 1);
    return dist == 0 ? 0 : diff * std::pow(std::abs(diff), p - 2) / std::pow(dist, p - 1);
}

template <typename T>
Status forward(const TensorView& out, const TensorView& x, double p, runtime::ThreadPool* pool) {
    const int64_t n = x.sizes[0], m = x.sizes[1];
    const T* xp = static_cast<const T*>(x.data);
    T* op = static_cast<T*>(out.data);
    auto rows = [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i)
            for (int64_t j = i + 1; j < n; ++j) op[pair_index(i, j, n)] = static_cast<T>(distance(xp + i * m, xp + j * m, m, p));
    };
    // Row i has n - 1 - i pairs: small grains keep the triangle's rows balanced.
    if (pool && n > 16) pool->parallel_for(n, 4, rows);
    else rows(0, n);
    return Status();
}

template <typename T>
Status backward(const TensorView& grad_x, const TensorView& grad, const TensorView& x, double p, const TensorView& dist,
                runtime::ThreadPool* pool) {
    const int64_t n = x.sizes[0], m = x.sizes[1];
    const T* xp = static_cast<const T*>(x.data);
    const T* gp = static_cast<const T*>(grad.data);
    const T* dp = static_cast<const T*>(dist.data);
    T* out = static_cast<T*>(grad_x.data);
    auto rows = [&](int64_t begin, int64_t end) {
        std::vector<double> acc(static_cast<size_t>(m));
        std::vector<T> acc2(static_cast<size_t>(m));  // p = 2: in T, as the CPU
        for (int64_t i = begin; i < end; ++i) {
            std::fill(acc.begin(), acc.end(), 0.0);
            std::fill(acc2.begin(), acc2.end(), T(0));
            for (int64_t j = 0; j < n; ++j) {
                if (j == i) continue;
                // Each slope is odd in diff, so row i's share of pair (j, i) is the slope of x_i - x_j.
                const int64_t k = i < j ? pair_index(i, j, n) : pair_index(j, i, n);
                const double g = gp[k], d = dp[k];
                const T* xi = xp + i * m;
                const T* xj = xp + j * m;
                if (p == 2) {  // slope = diff / dist: one weight per pair, a vectorizable row update
                    add_scaled_diff(acc2.data(), d == 0 ? T(0) : static_cast<T>(g / d), xi, xj, m);
                    continue;
                }
                for (int64_t c = 0; c < m; ++c) {
                    const double diff = static_cast<double>(static_cast<T>(xp[i * m + c] - xp[j * m + c]));
                    acc[static_cast<size_t>(c)] += g * slope(diff, d, p);
                }
            }
            for (int64_t c = 0; c < m; ++c)
                out[i * m + c] = p == 2 ? acc2[static_cast<size_t>(c)] : static_cast<T>(acc[static_cast<size_t>(c)]);
        }
    };
    if (pool && n > 16) pool->parallel_for(n, 4, rows);
    else rows(0, n);
    return Status();
}

Status check(const TensorView& x, const TensorView& pairs, double p) {
    if (x.ndim != 2 || pairs.ndim != 1) return invalid_argument("pdist: expects a 2-d input and a 1-d pair vector");
    if (!x.is_contiguous()) return invalid_argument("pdist: expects a contiguous input");
    const int64_t n = x.sizes[0];
    if (pairs.sizes[0] != n * (n - 1) / 2) return invalid_argument("pdist: pair vector size does not match the input");
    if (!(p >= 0)) return invalid_argument("pdist only supports non-negative p values");
    if (pairs.dtype != x.dtype) return invalid_argument("pdist: dtypes differ");
    return Status();
}

}  // namespace

Status pdist_forward(const TensorView& out, const TensorView& x, double p, runtime::ThreadPool* pool) {
    if (Status st = check(x, out, p); !st.ok()) return st;
    switch (x.dtype) {
        case DType::kFloat32: return forward<float>(out, x, p, pool);
        case DType::kFloat64: return forward<double>(out, x, p, pool);
        default: return unimplemented("pdist: only float32 and float64");
    }
}

Status pdist_backward(const TensorView& grad_x, const TensorView& grad, const TensorView& x, double p,
                      const TensorView& dist, runtime::ThreadPool* pool) {
    if (Status st = check(x, grad, p); !st.ok()) return st;
    if (Status st = check(x, dist, p); !st.ok()) return st;
    if (!grad.is_contiguous() || !dist.is_contiguous() || !grad_x.is_contiguous() || grad_x.dtype != x.dtype)
        return invalid_argument("pdist backward: expects contiguous tensors of the input's dtype");
    switch (x.dtype) {
        case DType::kFloat32: return backward<float>(grad_x, grad, x, p, dist, pool);
        case DType::kFloat64: return backward<double>(grad_x, grad, x, p, dist, pool);
        default: return unimplemented("pdist: only float32 and float64");
    }
}

}  // namespace ember::kernels
