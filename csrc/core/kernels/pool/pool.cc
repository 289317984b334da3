#include "kernels/pool/pool.h"

#include <algorithm>
#include <vector>

#include "kernels/dispatch.h"

namespace ember::kernels {
namespace {

Status check_planes(const TensorView& a, const TensorView& b) {
    if (a.ndim != 3 || b.ndim != 3 || a.sizes[0] != b.sizes[0]) return invalid_argument("pool: expected [P, H, W] planes");
    if (!a.is_contiguous() || !b.is_contiguous()) return invalid_argument("pool: planes must be contiguous");
    return Status();
}

template <typename F>
void for_planes(int64_t planes, int64_t work_per_plane, runtime::ThreadPool* pool, F&& f) {
    auto body = [&](int64_t b, int64_t e) {
        for (int64_t p = b; p < e; ++p) f(p);
    };
    int64_t grain = std::max<int64_t>(1, runtime::kParallelGrain / std::max<int64_t>(1, work_per_plane));
    if (pool) pool->parallel_for(planes, grain, body);
    else body(0, planes);
}

// [start, end) of adaptive pooling cell i of n over a length-`len` axis.
inline int64_t adaptive_start(int64_t i, int64_t n, int64_t len) { return (i * len) / n; }
inline int64_t adaptive_end(int64_t i, int64_t n, int64_t len) { return ((i + 1) * len + n - 1) / n; }

}  // namespace

Status max_pool2d(const TensorView& out, const TensorView& indices, const TensorView& in, const Pool2dParams& p,
                  runtime::ThreadPool* pool) {
    EMBER_RETURN_IF_ERROR(check_planes(out, in));
    if (indices.dtype != DType::kInt64 || !indices.is_contiguous()) return invalid_argument("max_pool2d: int64 indices");
    const int64_t H = in.sizes[1], W = in.sizes[2], OH = out.sizes[1], OW = out.sizes[2];
    EMBER_DISPATCH_REAL(in.dtype, {
        const auto* x = static_cast<const scalar_t*>(in.data);
        auto* y = static_cast<scalar_t*>(out.data);
        auto* idx = static_cast<int64_t*>(indices.data);
        for_planes(in.sizes[0], OH * OW * p.kernel[0] * p.kernel[1], pool, [&](int64_t pl) {
            const scalar_t* xp = x + pl * H * W;
            for (int64_t oh = 0; oh < OH; ++oh) {
                for (int64_t ow = 0; ow < OW; ++ow) {
                    int64_t best = -1;
                    double best_v = 0;
                    for (int64_t kh = 0; kh < p.kernel[0]; ++kh) {
                        int64_t h = oh * p.stride[0] - p.padding[0] + kh * p.dilation[0];
                        if (h < 0 || h >= H) continue;
                        for (int64_t kw = 0; kw < p.kernel[1]; ++kw) {
                            int64_t w = ow * p.stride[1] - p.padding[1] + kw * p.dilation[1];
                            if (w < 0 || w >= W) continue;
                            double v = detail::as_double(xp[h * W + w]);
                            if (best < 0 || v > best_v || v != v) {
                                best = h * W + w;
                                best_v = v;
                                if (v != v) goto done;
                            }
                        }
                    }
                done:
                    y[(pl * OH + oh) * OW + ow] = detail::from_double<scalar_t>(best_v);
                    idx[(pl * OH + oh) * OW + ow] = best;
                }
            }
        });
    });
    return Status();
}

Status max_pool2d_backward(const TensorView& grad_in, const TensorView& grad_out, const TensorView& indices,
                           runtime::ThreadPool* pool) {
    EMBER_RETURN_IF_ERROR(check_planes(grad_in, grad_out));
    const int64_t HW = grad_in.sizes[1] * grad_in.sizes[2], OHW = grad_out.sizes[1] * grad_out.sizes[2];
    EMBER_DISPATCH_REAL(grad_in.dtype, {
        auto* gi = static_cast<scalar_t*>(grad_in.data);
        const auto* go = static_cast<const scalar_t*>(grad_out.data);
        const auto* idx = static_cast<const int64_t*>(indices.data);
        for_planes(grad_in.sizes[0], HW + OHW, pool, [&](int64_t pl) {
            std::vector<double> acc(static_cast<size_t>(HW), 0.0);
            for (int64_t o = 0; o < OHW; ++o) {
                int64_t i = idx[pl * OHW + o];
                if (i >= 0) acc[i] += detail::as_double(go[pl * OHW + o]);
            }
            for (int64_t i = 0; i < HW; ++i) gi[pl * HW + i] = detail::from_double<scalar_t>(acc[i]);
        });
    });
    return Status();
}

namespace {
// The window of output (oh, ow) clipped to the input, and its divisor, as PyTorch's avg_pool2d.
struct AvgWindow {
    int64_t h0, h1, w0, w1, divisor;
};
AvgWindow avg_window(int64_t oh, int64_t ow, int64_t H, int64_t W, const Pool2dParams& p) {
    int64_t h0 = oh * p.stride[0] - p.padding[0], w0 = ow * p.stride[1] - p.padding[1];
    int64_t h1 = std::min(h0 + p.kernel[0], H + p.padding[0]), w1 = std::min(w0 + p.kernel[1], W + p.padding[1]);
    int64_t pool_size = (h1 - h0) * (w1 - w0);
    h0 = std::max<int64_t>(h0, 0);
    w0 = std::max<int64_t>(w0, 0);
    h1 = std::min(h1, H);
    w1 = std::min(w1, W);
    int64_t divisor = p.divisor_override ? p.divisor_override : (p.count_include_pad ? pool_size : (h1 - h0) * (w1 - w0));
    return {h0, h1, w0, w1, divisor};
}
}  // namespace

Status avg_pool2d(const TensorView& out, const TensorView& in, const Pool2dParams& p, runtime::ThreadPool* pool) {
    EMBER_RETURN_IF_ERROR(check_planes(out, in));
    const int64_t H = in.sizes[1], W = in.sizes[2], OH = out.sizes[1], OW = out.sizes[2];
    EMBER_DISPATCH_REAL(in.dtype, {
        const auto* x = static_cast<const scalar_t*>(in.data);
        auto* y = static_cast<scalar_t*>(out.data);
        for_planes(in.sizes[0], OH * OW * p.kernel[0] * p.kernel[1], pool, [&](int64_t pl) {
            for (int64_t oh = 0; oh < OH; ++oh) {
                for (int64_t ow = 0; ow < OW; ++ow) {
                    AvgWindow win = avg_window(oh, ow, H, W, p);
                    double sum = 0;
                    for (int64_t h = win.h0; h < win.h1; ++h)
                        for (int64_t w = win.w0; w < win.w1; ++w) sum += detail::as_double(x[(pl * H + h) * W + w]);
                    y[(pl * OH + oh) * OW + ow] = detail::from_double<scalar_t>(sum / static_cast<double>(win.divisor));
                }
            }
        });
    });
    return Status();
}

Status avg_pool2d_backward(const TensorView& grad_in, const TensorView& grad_out, const Pool2dParams& p,
                           runtime::ThreadPool* pool) {
    EMBER_RETURN_IF_ERROR(check_planes(grad_in, grad_out));
    const int64_t H = grad_in.sizes[1], W = grad_in.sizes[2], OH = grad_out.sizes[1], OW = grad_out.sizes[2];
    EMBER_DISPATCH_REAL(grad_in.dtype, {
        auto* gi = static_cast<scalar_t*>(grad_in.data);
        const auto* go = static_cast<const scalar_t*>(grad_out.data);
        for_planes(grad_in.sizes[0], H * W + OH * OW * p.kernel[0] * p.kernel[1], pool, [&](int64_t pl) {
            std::vector<double> acc(static_cast<size_t>(H * W), 0.0);
            for (int64_t oh = 0; oh < OH; ++oh) {
                for (int64_t ow = 0; ow < OW; ++ow) {
                    AvgWindow win = avg_window(oh, ow, H, W, p);
                    double g = detail::as_double(go[(pl * OH + oh) * OW + ow]) / static_cast<double>(win.divisor);
                    for (int64_t h = win.h0; h < win.h1; ++h)
                        for (int64_t w = win.w0; w < win.w1; ++w) acc[h * W + w] += g;
                }
            }
            for (int64_t i = 0; i < H * W; ++i) gi[pl * H * W + i] = detail::from_double<scalar_t>(acc[i]);
        });
    });
    return Status();
}

Status adaptive_avg_pool2d(const TensorView& out, const TensorView& in, runtime::ThreadPool* pool) {
    EMBER_RETURN_IF_ERROR(check_planes(out, in));
    const int64_t H = in.sizes[1], W = in.sizes[2], OH = out.sizes[1], OW = out.sizes[2];
    EMBER_DISPATCH_REAL(in.dtype, {
        const auto* x = static_cast<const scalar_t*>(in.data);
        auto* y = static_cast<scalar_t*>(out.data);
        for_planes(in.sizes[0], H * W + OH * OW, pool, [&](int64_t pl) {
            for (int64_t oh = 0; oh < OH; ++oh) {
                int64_t h0 = adaptive_start(oh, OH, H), h1 = adaptive_end(oh, OH, H);
                for (int64_t ow = 0; ow < OW; ++ow) {
                    int64_t w0 = adaptive_start(ow, OW, W), w1 = adaptive_end(ow, OW, W);
                    double sum = 0;
                    for (int64_t h = h0; h < h1; ++h)
                        for (int64_t w = w0; w < w1; ++w) sum += detail::as_double(x[(pl * H + h) * W + w]);
                    y[(pl * OH + oh) * OW + ow] = detail::from_double<scalar_t>(sum / static_cast<double>((h1 - h0) * (w1 - w0)));
                }
            }
        });
    });
    return Status();
}

Status adaptive_avg_pool2d_backward(const TensorView& grad_in, const TensorView& grad_out, runtime::ThreadPool* pool) {
    EMBER_RETURN_IF_ERROR(check_planes(grad_in, grad_out));
    const int64_t H = grad_in.sizes[1], W = grad_in.sizes[2], OH = grad_out.sizes[1], OW = grad_out.sizes[2];
    EMBER_DISPATCH_REAL(grad_in.dtype, {
        auto* gi = static_cast<scalar_t*>(grad_in.data);
        const auto* go = static_cast<const scalar_t*>(grad_out.data);
        for_planes(grad_in.sizes[0], H * W + OH * OW, pool, [&](int64_t pl) {
            std::vector<double> acc(static_cast<size_t>(H * W), 0.0);
            for (int64_t oh = 0; oh < OH; ++oh) {
                int64_t h0 = adaptive_start(oh, OH, H), h1 = adaptive_end(oh, OH, H);
                for (int64_t ow = 0; ow < OW; ++ow) {
                    int64_t w0 = adaptive_start(ow, OW, W), w1 = adaptive_end(ow, OW, W);
                    double g = detail::as_double(go[(pl * OH + oh) * OW + ow]) / static_cast<double>((h1 - h0) * (w1 - w0));
                    for (int64_t h = h0; h < h1; ++h)
                        for (int64_t w = w0; w < w1; ++w) acc[h * W + w] += g;
                }
            }
            for (int64_t i = 0; i < H * W; ++i) gi[pl * H * W + i] = detail::from_double<scalar_t>(acc[i]);
        });
    });
    return Status();
}

Status adaptive_max_pool2d(const TensorView& out, const TensorView& indices, const TensorView& in,
                           runtime::ThreadPool* pool) {
    EMBER_RETURN_IF_ERROR(check_planes(out, in));
    if (indices.dtype != DType::kInt64 || !indices.is_contiguous() || indices.numel() != out.numel())
        return invalid_argument("adaptive_max_pool2d: int64 indices shaped like the output");
    const int64_t H = in.sizes[1], W = in.sizes[2], OH = out.sizes[1], OW = out.sizes[2];
    EMBER_DISPATCH_REAL(in.dtype, {
        const auto* x = static_cast<const scalar_t*>(in.data);
        auto* y = static_cast<scalar_t*>(out.data);
        auto* idx = static_cast<int64_t*>(indices.data);
        for_planes(in.sizes[0], H * W + OH * OW, pool, [&](int64_t pl) {
            const scalar_t* xp = x + pl * H * W;
            for (int64_t oh = 0; oh < OH; ++oh) {
                const int64_t h0 = adaptive_start(oh, OH, H), h1 = adaptive_end(oh, OH, H);
                for (int64_t ow = 0; ow < OW; ++ow) {
                    const int64_t w0 = adaptive_start(ow, OW, W), w1 = adaptive_end(ow, OW, W);
                    // PyTorch's rule: NaN wins, the first maximum wins ties.
                    int64_t best = h0 * W + w0;
                    double best_v = detail::as_double(xp[best]);
                    for (int64_t h = h0; h < h1 && best_v == best_v; ++h)
                        for (int64_t w = w0; w < w1; ++w) {
                            const double v = detail::as_double(xp[h * W + w]);
                            if (v > best_v || v != v) {
                                best = h * W + w;
                                best_v = v;
                                if (v != v) break;
                            }
                        }
                    y[(pl * OH + oh) * OW + ow] = detail::from_double<scalar_t>(best_v);
                    idx[(pl * OH + oh) * OW + ow] = best;
                }
            }
        });
    });
    return Status();
}

}  // namespace ember::kernels
