// Batch norm over an input viewed as [N, C, S]: per-channel statistics over N x S, then
// y = x * scale + shift per channel. One task per channel range does both passes over its
// channel (statistics, then normalization), so a channel's data is read while still in cache;
// the backward does the same with its two sums and the input gradient.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/elementwise/simd.h"
#include "kernels/norm/norm.h"
#include "kernels/norm/row_io.h"

namespace ember::kernels {
namespace {

using namespace detail::norm;

// Row (n, c) of an [N, C, S] view: S contiguous elements.
inline char* row_ptr(const TensorView& v, int64_t n, int64_t c) {
    return static_cast<char*>(v.data) + (n * v.strides[0] + c * v.strides[1]) * element_size(v.dtype);
}

template <typename C>
const C* load_nc(const TensorView& v, int64_t n, int64_t c, int64_t s, C* buf) {
    return load_span(row_ptr(v, n, c), v.dtype, s, buf);
}

template <typename C>
C* dest_nc(const TensorView& v, int64_t n, int64_t c, C* buf) {
    return dest_span(row_ptr(v, n, c), v.dtype, buf);
}

template <typename C>
void store_nc(const TensorView& v, int64_t n, int64_t c, int64_t s, const C* buf) {
    store_span(row_ptr(v, n, c), v.dtype, s, buf);
}

// A row's mean and sum of squared deviations, two passes over the row (it is in cache): the
// variance of values far from zero keeps its precision.
template <typename C>
EMBER_NORM_INLINE void row_moments(const C* x, int64_t s, double* mean, double* m2) {
    const C m = lane_sum<C>(s, [&](int64_t i) { return x[i]; }) / static_cast<C>(s);
    *mean = static_cast<double>(m);
    *m2 = static_cast<double>(lane_sum<C>(s, [&](int64_t i) { return (x[i] - m) * (x[i] - m); }));
}

template <typename C>
EMBER_NORM_INLINE void row_affine(C* y, const C* x, C scale, C shift, int64_t s) {
    for (int64_t i = 0; i < s; ++i) y[i] = x[i] * scale + shift;
}

// Sums of g and of g * (x - mean) over a row, in double.
template <typename C>
EMBER_NORM_INLINE void row_grad_sums(const C* g, const C* x, C mean, double* sg, double* sgx, int64_t s) {
    *sg += lane_sum<double>(s, [&](int64_t i) { return static_cast<double>(g[i]); });
    *sgx += lane_sum<double>(s, [&](int64_t i) { return static_cast<double>(g[i] * (x[i] - mean)); });
}

// dx = a * g + b * (x - mean) + d: the training formula's per-channel terms. Subtracting the
// mean first keeps a tight channel (large invstd) from cancelling b * x against b * mean.
template <typename C>
EMBER_NORM_INLINE void row_grad_input(C* dx, const C* g, const C* x, C mean, C a, C b, C d, int64_t s) {
    for (int64_t i = 0; i < s; ++i) dx[i] = a * g[i] + b * (x[i] - mean) + d;
}

#define EMBER_BATCH_NORM_CLONES(T, suffix)                                                          \
    EMBER_SIMD_CLONES void moments_##suffix(const T* x, int64_t s, double* mean, double* m2) {      \
        row_moments(x, s, mean, m2);                                                                \
    }                                                                                               \
    EMBER_SIMD_CLONES void affine_##suffix(T* y, const T* x, T scale, T shift, int64_t s) {         \
        row_affine(y, x, scale, shift, s);                                                          \
    }                                                                                               \
    EMBER_SIMD_CLONES void grad_sums_##suffix(const T* g, const T* x, T mean, double* sg,           \
                                              double* sgx, int64_t s) {                             \
        row_grad_sums(g, x, mean, sg, sgx, s);                                                      \
    }                                                                                               \
    EMBER_SIMD_CLONES void grad_input_##suffix(T* dx, const T* g, const T* x, T mean, T a, T b,     \
                                               T d, int64_t s) {                                    \
        row_grad_input(dx, g, x, mean, a, b, d, s);                                                 \
    }                                                                                               \
    void moments_kernel(const T* x, int64_t s, double* mean, double* m2) { moments_##suffix(x, s, mean, m2); } \
    void affine_kernel(T* y, const T* x, T scale, T shift, int64_t s) { affine_##suffix(y, x, scale, shift, s); } \
    void grad_sums_kernel(const T* g, const T* x, T mean, double* sg, double* sgx, int64_t s) {     \
        grad_sums_##suffix(g, x, mean, sg, sgx, s);                                                 \
    }                                                                                               \
    void grad_input_kernel(T* dx, const T* g, const T* x, T mean, T a, T b, T d, int64_t s) {       \
        grad_input_##suffix(dx, g, x, mean, a, b, d, s);                                            \
    }
EMBER_BATCH_NORM_CLONES(float, f32)
EMBER_BATCH_NORM_CLONES(double, f64)
#undef EMBER_BATCH_NORM_CLONES

// Splits channels over the pool, each task holding about kParallelGrain elements.
template <typename F>
void parallel_channels(runtime::ThreadPool* pool, int64_t channels, int64_t per_channel, const F& fn) {
    const int64_t grain = std::max<int64_t>(1, runtime::kParallelGrain / std::max<int64_t>(1, per_channel));
    if (pool == nullptr || channels <= grain) fn(0, channels);
    else pool->parallel_for(channels, grain, fn);
}

template <typename C>
void run_forward(const TensorView& out, const TensorView& save_mean, const TensorView& save_invstd,
                 const TensorView& in, const TensorView& weight, const TensorView& bias,
                 const TensorView& running_mean, const TensorView& running_var, bool training,
                 double momentum, double eps, runtime::ThreadPool* pool) {
    const int64_t batch = in.sizes[0], channels = in.sizes[1], s = in.sizes[2];
    const double count = static_cast<double>(batch * s);
    parallel_channels(pool, channels, batch * s, [&](int64_t begin, int64_t end) {
        std::vector<C> xbuf(s), ybuf(s);
        for (int64_t c = begin; c < end; ++c) {
            double mean = 0, var = 0;
            if (training) {
                // Chan's combination of the rows' (mean, M2): equal counts per row.
                double m2 = 0;
                for (int64_t n = 0; n < batch; ++n) {
                    double rm, rm2;
                    moments_kernel(load_nc(in, n, c, s, xbuf.data()), s, &rm, &rm2);
                    const double delta = rm - mean, seen = static_cast<double>(n * s);
                    mean += delta * static_cast<double>(s) / (seen + static_cast<double>(s));
                    m2 += rm2 + delta * delta * seen * static_cast<double>(s) / (seen + static_cast<double>(s));
                }
                var = m2 / count;
                if (running_mean.data != nullptr)
                    store(running_mean, c, (1 - momentum) * load<double>(running_mean, c) + momentum * mean);
                if (running_var.data != nullptr) {
                    const double unbiased = count > 1 ? m2 / (count - 1) : NAN;
                    store(running_var, c, (1 - momentum) * load<double>(running_var, c) + momentum * unbiased);
                }
            } else {
                mean = load<double>(running_mean, c);
                var = load<double>(running_var, c);
            }
            const double invstd = 1.0 / std::sqrt(var + eps);
            if (save_mean.data != nullptr) store(save_mean, c, mean);
            if (save_invstd.data != nullptr) store(save_invstd, c, invstd);
            const double w = weight.data != nullptr ? load<double>(weight, c) : 1.0;
            const double b = bias.data != nullptr ? load<double>(bias, c) : 0.0;
            const C scale = static_cast<C>(invstd * w), shift = static_cast<C>(b - mean * invstd * w);
            for (int64_t n = 0; n < batch; ++n) {
                const C* x = load_nc(in, n, c, s, xbuf.data());
                C* y = dest_nc(out, n, c, ybuf.data());
                affine_kernel(y, x, scale, shift, s);
                store_nc(out, n, c, s, y);
            }
        }
    });
}

template <typename C>
void run_backward(const TensorView& grad_in, const TensorView& grad_weight, const TensorView& grad_bias,
                  const TensorView& grad_out, const TensorView& in, const TensorView& weight,
                  const TensorView& mean, const TensorView& invstd, bool training, runtime::ThreadPool* pool) {
    const int64_t batch = in.sizes[0], channels = in.sizes[1], s = in.sizes[2];
    const double count = static_cast<double>(batch * s);
    parallel_channels(pool, channels, batch * s, [&](int64_t begin, int64_t end) {
        std::vector<C> gbuf(s), xbuf(s), dbuf(s);
        for (int64_t c = begin; c < end; ++c) {
            const double m = load<double>(mean, c), is = load<double>(invstd, c);
            double sg = 0, sgx = 0;
            for (int64_t n = 0; n < batch; ++n)
                grad_sums_kernel(load_nc(grad_out, n, c, s, gbuf.data()), load_nc(in, n, c, s, xbuf.data()),
                                 static_cast<C>(m), &sg, &sgx, s);
            if (grad_weight.data != nullptr) store(grad_weight, c, sgx * is);
            if (grad_bias.data != nullptr) store(grad_bias, c, sg);
            if (grad_in.data == nullptr) continue;
            const double a = is * (weight.data != nullptr ? load<double>(weight, c) : 1.0);
            // Training: dx = a*g - a*sg/count - a*is^2*sgx/count * (x - mean).
            const double b = training ? -a * is * is * sgx / count : 0.0;
            const double d = training ? -a * sg / count : 0.0;
            for (int64_t n = 0; n < batch; ++n) {
                const C* g = load_nc(grad_out, n, c, s, gbuf.data());
                const C* x = load_nc(in, n, c, s, xbuf.data());
                C* dx = dest_nc(grad_in, n, c, dbuf.data());
                grad_input_kernel(dx, g, x, static_cast<C>(m), static_cast<C>(a), static_cast<C>(b),
                                  static_cast<C>(d), s);
                store_nc(grad_in, n, c, s, dx);
            }
        }
    });
}

Status check_ncs(const char* op, const char* name, const TensorView& v, const TensorView& like) {
    std::string what = std::string(op) + ": " + name;
    if (v.data == nullptr && like.numel() > 0) return invalid_argument(what + " has no data");
    if (!is_floating(v.dtype)) return invalid_argument(what + " must be floating point, got " + dtype_name(v.dtype));
    if (v.ndim != 3 || v.sizes[0] != like.sizes[0] || v.sizes[1] != like.sizes[1] || v.sizes[2] != like.sizes[2])
        return invalid_argument(what + " must be [N, C, S] like the input");
    if (v.sizes[2] > 1 && v.strides[2] != 1) return invalid_argument(what + ": the spatial run must have stride 1");
    return Status();
}

Status check_optional_vector(const char* op, const char* name, const TensorView& v, int64_t n) {
    return v.data == nullptr ? Status() : check_vector(op, name, v, n);
}

}  // namespace

Status batch_norm(const TensorView& out, const TensorView& save_mean, const TensorView& save_invstd,
                  const TensorView& in, const TensorView& weight, const TensorView& bias,
                  const TensorView& running_mean, const TensorView& running_var, bool training,
                  double momentum, double eps, runtime::ThreadPool* pool) {
    const char* op = "batch_norm";
    if (in.ndim != 3) return invalid_argument("batch_norm: input must be viewed as [N, C, S]");
    EMBER_RETURN_IF_ERROR(check_ncs(op, "input", in, in));
    EMBER_RETURN_IF_ERROR(check_ncs(op, "output", out, in));
    const int64_t channels = in.sizes[1];
    if (training && in.sizes[0] * in.sizes[2] < 1) return invalid_argument("batch_norm: no values per channel");
    if (!training && (running_mean.data == nullptr || running_var.data == nullptr))
        return invalid_argument("batch_norm: evaluation needs running_mean and running_var");
    for (auto [name, v] : {std::pair{"save_mean", &save_mean}, {"save_invstd", &save_invstd}, {"weight", &weight},
                           {"bias", &bias}, {"running_mean", &running_mean}, {"running_var", &running_var}})
        EMBER_RETURN_IF_ERROR(check_optional_vector(op, name, *v, channels));
    if (in.dtype == DType::kFloat64)
        run_forward<double>(out, save_mean, save_invstd, in, weight, bias, running_mean, running_var, training,
                            momentum, eps, pool);
    else
        run_forward<float>(out, save_mean, save_invstd, in, weight, bias, running_mean, running_var, training,
                           momentum, eps, pool);
    return Status();
}

Status batch_norm_backward(const TensorView& grad_in, const TensorView& grad_weight, const TensorView& grad_bias,
                           const TensorView& grad_out, const TensorView& in, const TensorView& weight,
                           const TensorView& mean, const TensorView& invstd, bool training,
                           runtime::ThreadPool* pool) {
    const char* op = "batch_norm_backward";
    if (in.ndim != 3) return invalid_argument("batch_norm_backward: input must be viewed as [N, C, S]");
    EMBER_RETURN_IF_ERROR(check_ncs(op, "input", in, in));
    EMBER_RETURN_IF_ERROR(check_ncs(op, "grad_output", grad_out, in));
    if (grad_in.data != nullptr) EMBER_RETURN_IF_ERROR(check_ncs(op, "grad_input", grad_in, in));
    const int64_t channels = in.sizes[1];
    EMBER_RETURN_IF_ERROR(check_vector(op, "mean", mean, channels));
    EMBER_RETURN_IF_ERROR(check_vector(op, "invstd", invstd, channels));
    for (auto [name, v] : {std::pair{"weight", &weight}, {"grad_weight", &grad_weight}, {"grad_bias", &grad_bias}})
        EMBER_RETURN_IF_ERROR(check_optional_vector(op, name, *v, channels));
    if (in.dtype == DType::kFloat64)
        run_backward<double>(grad_in, grad_weight, grad_bias, grad_out, in, weight, mean, invstd, training, pool);
    else
        run_backward<float>(grad_in, grad_weight, grad_bias, grad_out, in, weight, mean, invstd, training, pool);
    return Status();
}

}  // namespace ember::kernels
