#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/elementwise/simd.h"
#include "kernels/norm/norm.h"
#include "kernels/norm/row_io.h"

namespace ember::kernels {
namespace {

using namespace detail::norm;

// Two passes over the row (it is already in cache) rather than one-pass moments: the variance
// of a row far from zero keeps its precision. y = (x - mean) * rstd * w + b: subtracting first
// makes a constant row exactly 0, as on CPU (x * rstd - mean * rstd cancels inexactly);
// w = 1 and b = 0 when absent give the same results as skipping them.
template <typename T>
EMBER_NORM_INLINE void layer_norm_row(T* y, T* mean_out, T* rstd_out, const T* x, const T* w,
                                      const T* b, T eps, int64_t n) {
    // The sums in double: in float, a row of a million values near 10 lost its mean's fourth
    // digit (the CPU's cascaded sums keep it).
    const T mean = static_cast<T>(lane_sum<double>(n, [&](int64_t i) { return static_cast<double>(x[i]); }) /
                                  static_cast<double>(n));
    const T var = static_cast<T>(lane_sum<double>(n, [&](int64_t i) {
        const double d = static_cast<double>(x[i] - mean);
        return d * d;
    }) / static_cast<double>(n));
    const T rstd = T(1) / std::sqrt(var + eps);
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * rstd * w[i] + b[i];
    *mean_out = mean;
    *rstd_out = rstd;
}

// Backward sums accumulate in double whatever T is, over a row as across rows.
// dx = rstd * (g*w - mean(g*w) - xhat * mean(g*w*xhat)).
template <typename T>
EMBER_NORM_INLINE void layer_norm_dx_row(T* dx, const T* g, const T* x, const T* w, T mean, T rstd,
                                         int64_t n) {
    const double s1 = lane_sum<double>(n, [&](int64_t i) { return static_cast<double>(g[i] * w[i]); });
    const double s2 = lane_sum<double>(n, [&](int64_t i) {
        return static_cast<double>(g[i] * w[i] * ((x[i] - mean) * rstd));
    });
    const T m1 = static_cast<T>(s1 / static_cast<double>(n));
    const T m2 = static_cast<T>(s2 / static_cast<double>(n));
    for (int64_t i = 0; i < n; ++i) dx[i] = rstd * (g[i] * w[i] - m1 - (x[i] - mean) * rstd * m2);
}

template <typename T>
EMBER_NORM_INLINE void layer_norm_param_row(double* dw, double* db, const T* g, const T* x, T mean,
                                            T rstd, int64_t n) {
    if (dw != nullptr)
        for (int64_t i = 0; i < n; ++i) dw[i] += static_cast<double>(g[i] * ((x[i] - mean) * rstd));
    if (db != nullptr)
        for (int64_t i = 0; i < n; ++i) db[i] += static_cast<double>(g[i]);
}

#define EMBER_LAYER_NORM_CLONES(T, suffix)                                                          \
    EMBER_SIMD_CLONES void forward_##suffix(T* y, T* mean, T* rstd, const T* x, const T* w,          \
                                            const T* b, T eps, int64_t n) {                         \
        layer_norm_row(y, mean, rstd, x, w, b, eps, n);                                             \
    }                                                                                               \
    EMBER_SIMD_CLONES void dx_##suffix(T* dx, const T* g, const T* x, const T* w, T mean, T rstd,   \
                                       int64_t n) {                                                 \
        layer_norm_dx_row(dx, g, x, w, mean, rstd, n);                                              \
    }                                                                                               \
    EMBER_SIMD_CLONES void param_##suffix(double* dw, double* db, const T* g, const T* x, T mean,   \
                                          T rstd, int64_t n) {                                      \
        layer_norm_param_row(dw, db, g, x, mean, rstd, n);                                          \
    }                                                                                               \
    void forward_kernel(T* y, T* mean, T* rstd, const T* x, const T* w, const T* b, T eps,          \
                        int64_t n) {                                                                \
        forward_##suffix(y, mean, rstd, x, w, b, eps, n);                                           \
    }                                                                                               \
    void dx_kernel(T* dx, const T* g, const T* x, const T* w, T mean, T rstd, int64_t n) {          \
        dx_##suffix(dx, g, x, w, mean, rstd, n);                                                    \
    }                                                                                               \
    void param_kernel(double* dw, double* db, const T* g, const T* x, T mean, T rstd, int64_t n) {  \
        param_##suffix(dw, db, g, x, mean, rstd, n);                                                \
    }
EMBER_LAYER_NORM_CLONES(float, f32)
EMBER_LAYER_NORM_CLONES(double, f64)
#undef EMBER_LAYER_NORM_CLONES

template <typename C>
void run_forward(const TensorView& out, const TensorView& mean, const TensorView& rstd,
                 const TensorView& in, const TensorView& weight, const TensorView& bias, double eps,
                 runtime::ThreadPool* pool) {
    const int64_t rows = in.sizes[0], cols = in.sizes[1];
    const std::vector<C> w = load_vector<C>(weight, cols, C(1));
    const std::vector<C> b = load_vector<C>(bias, cols, C(0));
    parallel_rows(pool, rows, cols, [&](int64_t begin, int64_t end) {
        std::vector<C> xbuf(cols), ybuf(cols);
        for (int64_t r = begin; r < end; ++r) {
            const C* x = load_row(in, r, cols, xbuf.data());
            C* y = dest_row(out, r, ybuf.data());
            C m, s;
            forward_kernel(y, &m, &s, x, w.data(), b.data(), static_cast<C>(eps), cols);
            store_row(out, r, cols, y);
            if (mean.data != nullptr) store(mean, r, m);
            if (rstd.data != nullptr) store(rstd, r, s);
        }
    });
}

// Rows are split into one block per thread; each block sums its grad_weight/grad_bias terms
// into its own slice of dw/db, and the slices are added in block order afterwards, so no two
// threads ever write the same accumulator.
template <typename C>
void run_backward(const TensorView& grad_in, const TensorView& grad_weight,
                  const TensorView& grad_bias, const TensorView& grad_out, const TensorView& in,
                  const TensorView& mean, const TensorView& rstd, const TensorView& weight,
                  runtime::ThreadPool* pool) {
    const int64_t rows = in.sizes[0], cols = in.sizes[1];
    const bool want_dx = grad_in.data != nullptr;
    const bool want_dw = grad_weight.data != nullptr, want_db = grad_bias.data != nullptr;
    const std::vector<C> w = load_vector<C>(weight, cols, C(1));

    int64_t blocks = 1;
    if (pool != nullptr && rows * cols >= runtime::kParallelGrain) {
        // Bounds the partial sums to about 64 MiB when rows are very long.
        const int64_t by_memory = std::max<int64_t>(1, (int64_t{64} << 20) / (16 * std::max<int64_t>(1, cols)));
        blocks = std::min<int64_t>({pool->num_threads(), rows, by_memory});
    }
    const size_t slice = static_cast<size_t>(cols);
    std::vector<double> dw(want_dw ? slice * blocks : 0), db(want_db ? slice * blocks : 0);

    auto run_rows = [&](int64_t begin, int64_t end, double* pw, double* pb) {
        std::vector<C> gbuf(cols), xbuf(cols), dbuf(cols);
        for (int64_t r = begin; r < end; ++r) {
            const C* g = load_row(grad_out, r, cols, gbuf.data());
            const C* x = load_row(in, r, cols, xbuf.data());
            const C m = load<C>(mean, r), s = load<C>(rstd, r);
            // Parameter terms first: grad_in may overwrite grad_out or input in place.
            if (pw != nullptr || pb != nullptr) param_kernel(pw, pb, g, x, m, s, cols);
            if (want_dx) {
                C* d = dest_row(grad_in, r, dbuf.data());
                dx_kernel(d, g, x, w.data(), m, s, cols);
                store_row(grad_in, r, cols, d);
            }
        }
    };
    if (!want_dw && !want_db) {
        if (want_dx) parallel_rows(pool, rows, cols, [&](int64_t b, int64_t e) { run_rows(b, e, nullptr, nullptr); });
        return;
    }
    auto run_block = [&](int64_t k) {
        run_rows(rows * k / blocks, rows * (k + 1) / blocks, want_dw ? dw.data() + k * slice : nullptr,
                 want_db ? db.data() + k * slice : nullptr);
    };
    if (blocks == 1) run_block(0);
    else pool->parallel_for(blocks, 1, [&](int64_t b, int64_t e) { for (int64_t k = b; k < e; ++k) run_block(k); });

    auto finish = [&](const TensorView& dst, const std::vector<double>& partial) {
        for (int64_t j = 0; j < cols; ++j) {
            double s = 0;
            for (int64_t k = 0; k < blocks; ++k) s += partial[k * slice + j];
            store(dst, j, s);
        }
    };
    if (want_dw) finish(grad_weight, dw);
    if (want_db) finish(grad_bias, db);
}

}  // namespace

Status layer_norm(const TensorView& out, const TensorView& mean, const TensorView& rstd,
                  const TensorView& in, const TensorView& weight, const TensorView& bias, double eps,
                  runtime::ThreadPool* pool) {
    const char* op = "layer_norm";
    if (in.ndim != 2) return invalid_argument("layer_norm: input must be 2-d [rows, cols]");
    const int64_t rows = in.sizes[0], cols = in.sizes[1];
    EMBER_RETURN_IF_ERROR(check_matrix(op, "input", in, rows, cols));
    EMBER_RETURN_IF_ERROR(check_matrix(op, "output", out, rows, cols));
    if (mean.data != nullptr) EMBER_RETURN_IF_ERROR(check_vector(op, "mean", mean, rows));
    if (rstd.data != nullptr) EMBER_RETURN_IF_ERROR(check_vector(op, "rstd", rstd, rows));
    if (weight.data != nullptr) EMBER_RETURN_IF_ERROR(check_vector(op, "weight", weight, cols));
    if (bias.data != nullptr) EMBER_RETURN_IF_ERROR(check_vector(op, "bias", bias, cols));
    if (in.dtype == DType::kFloat64) run_forward<double>(out, mean, rstd, in, weight, bias, eps, pool);
    else run_forward<float>(out, mean, rstd, in, weight, bias, eps, pool);
    return Status();
}

Status layer_norm_backward(const TensorView& grad_in, const TensorView& grad_weight,
                           const TensorView& grad_bias, const TensorView& grad_out,
                           const TensorView& in, const TensorView& mean, const TensorView& rstd,
                           const TensorView& weight, runtime::ThreadPool* pool) {
    const char* op = "layer_norm_backward";
    if (in.ndim != 2) return invalid_argument("layer_norm_backward: input must be 2-d [rows, cols]");
    const int64_t rows = in.sizes[0], cols = in.sizes[1];
    EMBER_RETURN_IF_ERROR(check_matrix(op, "input", in, rows, cols));
    EMBER_RETURN_IF_ERROR(check_matrix(op, "grad_output", grad_out, rows, cols));
    EMBER_RETURN_IF_ERROR(check_vector(op, "mean", mean, rows));
    EMBER_RETURN_IF_ERROR(check_vector(op, "rstd", rstd, rows));
    if (weight.data != nullptr) EMBER_RETURN_IF_ERROR(check_vector(op, "weight", weight, cols));
    if (grad_in.data != nullptr) EMBER_RETURN_IF_ERROR(check_matrix(op, "grad_input", grad_in, rows, cols));
    if (grad_weight.data != nullptr) EMBER_RETURN_IF_ERROR(check_vector(op, "grad_weight", grad_weight, cols));
    if (grad_bias.data != nullptr) EMBER_RETURN_IF_ERROR(check_vector(op, "grad_bias", grad_bias, cols));
    if (in.dtype == DType::kFloat64)
        run_backward<double>(grad_in, grad_weight, grad_bias, grad_out, in, mean, rstd, weight, pool);
    else
        run_backward<float>(grad_in, grad_weight, grad_bias, grad_out, in, mean, rstd, weight, pool);
    return Status();
}

}  // namespace ember::kernels
