#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/elementwise/simd.h"
#include "torch_ember/vec_math.h"
#include "kernels/norm/norm.h"
#include "kernels/norm/row_io.h"

namespace ember::kernels {
namespace {

using namespace detail::norm;

// exp over float from vec_math.h, so the loops that use it vectorize; exp is most of softmax's
// time. double keeps std::exp.
EMBER_NORM_INLINE float exp_(float x) { return vmath::exp(x); }
inline double exp_(double x) { return std::exp(x); }

// NaN needs no special care here: a NaN element makes its exp term, and so the row's sum and
// every output of the row, NaN, as in PyTorch. A row of -inf gives max -inf, x - max = NaN,
// and therefore a NaN row, also as PyTorch does.
template <typename T>
EMBER_NORM_INLINE T row_max(const T* x, int64_t n) {
    constexpr int kLanes = 16;
    T acc[kLanes];
    for (int j = 0; j < kLanes; ++j) acc[j] = -std::numeric_limits<T>::infinity();
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes)
        for (int j = 0; j < kLanes; ++j) acc[j] = x[i + j] > acc[j] ? x[i + j] : acc[j];
    T m = acc[0];
    for (int j = 1; j < kLanes; ++j) m = acc[j] > m ? acc[j] : m;
    for (; i < n; ++i) m = x[i] > m ? x[i] : m;
    return m;
}

// PyTorch's order of operations: softmax = exp(x - max) * (1 / sum),
// log_softmax = x - max - log(sum). log_softmax stages the exponentials in `tmp` (y may alias
// x) so that the exp loop vectorizes on its own.
template <typename T>
EMBER_NORM_INLINE void softmax_row(T* y, const T* x, T* tmp, int64_t n, bool log) {
    const T max = row_max(x, n);
    if (log) {
        for (int64_t i = 0; i < n; ++i) tmp[i] = exp_(x[i] - max);
        const T lse = std::log(lane_sum<T>(n, [&](int64_t i) { return tmp[i]; }));
        for (int64_t i = 0; i < n; ++i) y[i] = x[i] - max - lse;
        return;
    }
    for (int64_t i = 0; i < n; ++i) y[i] = exp_(x[i] - max);
    const T inv = T(1) / lane_sum<T>(n, [&](int64_t i) { return y[i]; });
    for (int64_t i = 0; i < n; ++i) y[i] *= inv;
}

// softmax: out * (g - sum(g * out)); log_softmax: g - exp(out) * sum(g).
template <typename T>
EMBER_NORM_INLINE void softmax_backward_row(T* gi, const T* g, const T* y, int64_t n, bool log) {
    if (log) {
        const T s = lane_sum<T>(n, [&](int64_t i) { return g[i]; });
        for (int64_t i = 0; i < n; ++i) gi[i] = g[i] - exp_(y[i]) * s;
        return;
    }
    const T s = lane_sum<T>(n, [&](int64_t i) { return g[i] * y[i]; });
    for (int64_t i = 0; i < n; ++i) gi[i] = (g[i] - s) * y[i];
}

EMBER_SIMD_CLONES void softmax_f32(float* y, const float* x, float* tmp, int64_t n, bool log) {
    softmax_row(y, x, tmp, n, log);
}
EMBER_SIMD_CLONES void softmax_f64(double* y, const double* x, double* tmp, int64_t n, bool log) {
    softmax_row(y, x, tmp, n, log);
}
EMBER_SIMD_CLONES void softmax_backward_f32(float* gi, const float* g, const float* y, int64_t n, bool log) {
    softmax_backward_row(gi, g, y, n, log);
}
EMBER_SIMD_CLONES void softmax_backward_f64(double* gi, const double* g, const double* y, int64_t n, bool log) {
    softmax_backward_row(gi, g, y, n, log);
}

void softmax_kernel(float* y, const float* x, float* tmp, int64_t n, bool log) { softmax_f32(y, x, tmp, n, log); }
void softmax_kernel(double* y, const double* x, double* tmp, int64_t n, bool log) { softmax_f64(y, x, tmp, n, log); }
void softmax_backward_kernel(float* gi, const float* g, const float* y, int64_t n, bool log) {
    softmax_backward_f32(gi, g, y, n, log);
}
void softmax_backward_kernel(double* gi, const double* g, const double* y, int64_t n, bool log) {
    softmax_backward_f64(gi, g, y, n, log);
}

template <typename C>
void run_softmax(const TensorView& out, const TensorView& in, bool log, runtime::ThreadPool* pool) {
    const int64_t rows = in.sizes[0], cols = in.sizes[1];
    parallel_rows(pool, rows, cols, [&](int64_t begin, int64_t end) {
        std::vector<C> xbuf(cols), ybuf(cols), tmp(log ? cols : 0);
        for (int64_t r = begin; r < end; ++r) {
            const C* x = load_row(in, r, cols, xbuf.data());
            C* y = dest_row(out, r, ybuf.data());
            softmax_kernel(y, x, tmp.data(), cols, log);
            store_row(out, r, cols, y);
        }
    });
}

template <typename C>
void run_softmax_backward(const TensorView& grad_in, const TensorView& grad_out,
                          const TensorView& out, bool log, runtime::ThreadPool* pool) {
    const int64_t rows = out.sizes[0], cols = out.sizes[1];
    parallel_rows(pool, rows, cols, [&](int64_t begin, int64_t end) {
        std::vector<C> gbuf(cols), ybuf(cols), dbuf(cols);
        for (int64_t r = begin; r < end; ++r) {
            const C* g = load_row(grad_out, r, cols, gbuf.data());
            const C* y = load_row(out, r, cols, ybuf.data());
            C* d = dest_row(grad_in, r, dbuf.data());
            softmax_backward_kernel(d, g, y, cols, log);
            store_row(grad_in, r, cols, d);
        }
    });
}

}  // namespace

Status softmax(const TensorView& out, const TensorView& in, bool log, runtime::ThreadPool* pool) {
    const char* op = log ? "log_softmax" : "softmax";
    if (in.ndim != 2) return invalid_argument(std::string(op) + ": input must be 2-d [rows, cols]");
    const int64_t rows = in.sizes[0], cols = in.sizes[1];
    EMBER_RETURN_IF_ERROR(check_matrix(op, "input", in, rows, cols));
    EMBER_RETURN_IF_ERROR(check_matrix(op, "output", out, rows, cols));
    if (in.dtype == DType::kFloat64) run_softmax<double>(out, in, log, pool);
    else run_softmax<float>(out, in, log, pool);
    return Status();
}

Status softmax_backward(const TensorView& grad_in, const TensorView& grad_out, const TensorView& out,
                        bool log, runtime::ThreadPool* pool) {
    const char* op = log ? "log_softmax_backward" : "softmax_backward";
    if (out.ndim != 2) return invalid_argument(std::string(op) + ": output must be 2-d [rows, cols]");
    const int64_t rows = out.sizes[0], cols = out.sizes[1];
    EMBER_RETURN_IF_ERROR(check_matrix(op, "output", out, rows, cols));
    EMBER_RETURN_IF_ERROR(check_matrix(op, "grad_output", grad_out, rows, cols));
    EMBER_RETURN_IF_ERROR(check_matrix(op, "grad_input", grad_in, rows, cols));
    if (out.dtype == DType::kFloat64) run_softmax_backward<double>(grad_in, grad_out, out, log, pool);
    else run_softmax_backward<float>(grad_in, grad_out, out, log, pool);
    return Status();
}

}  // namespace ember::kernels
