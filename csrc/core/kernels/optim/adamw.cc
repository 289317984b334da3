#include "kernels/optim/adamw.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/dtype.h"
#include "kernels/elementwise/simd.h"

namespace ember::kernels {
namespace {

struct Coeffs {
    float sign;       // -1 with maximize
    float decay_p;    // AdamW: lr * weight_decay, taken off the parameter
    float decay_g;    // Adam: weight_decay, added to the gradient
    float beta1, beta2, eps, step_size, bc2_sqrt;
    // 1 - beta formed in double and rounded once, as PyTorch does: 1 - float(0.999) is 1.3e-5 off
    // 0.001, an error in every second-moment update that grows as beta2 nears 1.
    float one_minus_beta1, one_minus_beta2;
};

// The loop the compiler vectorizes: the mode flags are folded into coefficients (maximize into a
// sign, Adam/AdamW into which decay term is zero), amsgrad into the template, so the body has no
// branches; the five arrays are distinct tensors (restrict), so no alias checks are needed.
template <bool kAmsgrad>
EMBER_SIMD_CLONES void adam_range(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                                  float* __restrict__ v, float* __restrict__ vmax, int64_t n, Coeffs c) {
    for (int64_t i = 0; i < n; ++i) {
        const float param0 = p[i];
        const float grad = c.sign * g[i] + c.decay_g * param0;
        const float param = param0 - param0 * c.decay_p;
        const float mi = m[i] + c.one_minus_beta1 * (grad - m[i]);
        const float vi = c.beta2 * v[i] + c.one_minus_beta2 * grad * grad;
        m[i] = mi;
        v[i] = vi;
        float second = vi;
        if constexpr (kAmsgrad) {
            second = vmax[i] > vi ? vmax[i] : vi;
            vmax[i] = second;
        }
        const float denom = std::sqrt(second) / c.bc2_sqrt + c.eps;
        p[i] = param - c.step_size * mi / denom;
    }
}

EMBER_SIMD_CLONES void unscale_range(float* __restrict__ g, int64_t n, float scale) {
    for (int64_t i = 0; i < n; ++i) g[i] = g[i] / scale;
}

bool plain(const TensorView& v, int64_t n, DType dtype) {
    return v.data != nullptr && v.dtype == dtype && v.is_contiguous() && v.numel() == n;
}

template <typename T>
T narrow(float x) {
    if constexpr (std::is_same_v<T, BFloat16>) return to_bfloat16(x);
    else return to_half(x);
}

// 16-bit tensors, as PyTorch's fused kernels update them: each chunk widened to float, run
// through the float loop, and rounded once when stored. The parameter's update reads the
// moments before they are rounded; an unscaled gradient is written back rounded and used unrounded.
template <typename T>
void adam_half_range(T* p, T* g, T* m, T* v, T* vmax, int64_t n, const Coeffs& c, const float* grad_scale) {
    constexpr int64_t kChunk = 256;
    float fp[kChunk], fg[kChunk], fm[kChunk], fv[kChunk], fx[kChunk];
    for (int64_t b = 0; b < n; b += kChunk) {
        const int64_t k = std::min(kChunk, n - b);
        for (int64_t i = 0; i < k; ++i) {
            fp[i] = to_float(p[b + i]);
            fg[i] = to_float(g[b + i]);
            fm[i] = to_float(m[b + i]);
            fv[i] = to_float(v[b + i]);
            if (vmax) fx[i] = to_float(vmax[b + i]);
        }
        if (grad_scale) {
            unscale_range(fg, k, *grad_scale);
            for (int64_t i = 0; i < k; ++i) g[b + i] = narrow<T>(fg[i]);
        }
        if (vmax) adam_range<true>(fp, fg, fm, fv, fx, k, c);
        else adam_range<false>(fp, fg, fm, fv, nullptr, k, c);
        for (int64_t i = 0; i < k; ++i) {
            p[b + i] = narrow<T>(fp[i]);
            m[b + i] = narrow<T>(fm[i]);
            v[b + i] = narrow<T>(fv[i]);
            if (vmax) vmax[b + i] = narrow<T>(fx[i]);
        }
    }
}

}  // namespace

Status adam_step(const TensorView& param, const TensorView& grad, const TensorView& exp_avg,
                 const TensorView& exp_avg_sq, const TensorView& max_exp_avg_sq, const AdamArgs& args,
                 runtime::ThreadPool* pool) {
    const int64_t n = param.numel();
    const DType dt = param.dtype;
    if (dt != DType::kFloat32 && dt != DType::kBFloat16 && dt != DType::kFloat16) {
        return invalid_argument("adam_step: expects float32, bfloat16 or float16 tensors");
    }
    if (!plain(param, n, dt) || !plain(grad, n, dt) || !plain(exp_avg, n, dt) || !plain(exp_avg_sq, n, dt) ||
        (args.amsgrad && !plain(max_exp_avg_sq, n, dt))) {
        return invalid_argument("adam_step: expects contiguous tensors of one size and dtype");
    }
    if (args.step == nullptr) return invalid_argument("adam_step: no step count");
    if (args.found_inf != nullptr && *args.found_inf == 1.f) return Status();
    const double step = *args.step;
    const double lr = args.lr_ptr ? static_cast<double>(*args.lr_ptr) : args.lr;
    const double bc1 = 1.0 - std::pow(args.beta1, step);
    const double bc2 = 1.0 - std::pow(args.beta2, step);
    const float wd = static_cast<float>(args.weight_decay);
    Coeffs c{args.maximize ? -1.f : 1.f,
             args.decoupled ? static_cast<float>(lr) * wd : 0.f,
             args.decoupled ? 0.f : wd,
             static_cast<float>(args.beta1), static_cast<float>(args.beta2), static_cast<float>(args.eps),
             static_cast<float>(lr / bc1), static_cast<float>(std::sqrt(bc2)),
             static_cast<float>(1.0 - args.beta1), static_cast<float>(1.0 - args.beta2)};
    const float* grad_scale = args.grad_scale;
    if (dt != DType::kFloat32) {
        auto half_body = [&](auto tag) {
            using T = decltype(tag);
            auto* hp = static_cast<T*>(param.data);
            auto* hg = static_cast<T*>(grad.data);
            auto* hm = static_cast<T*>(exp_avg.data);
            auto* hv = static_cast<T*>(exp_avg_sq.data);
            auto* hx = args.amsgrad ? static_cast<T*>(max_exp_avg_sq.data) : nullptr;
            auto body = [&](int64_t b, int64_t e) {
                adam_half_range<T>(hp + b, hg + b, hm + b, hv + b, hx ? hx + b : nullptr, e - b, c, grad_scale);
            };
            if (pool) pool->parallel_for(n, runtime::kParallelGrain, body);
            else body(0, n);
        };
        if (dt == DType::kBFloat16) half_body(BFloat16{});
        else half_body(Half{});
        return Status();
    }
    auto* p = static_cast<float*>(param.data);
    const auto* g = static_cast<const float*>(grad.data);
    auto* m = static_cast<float*>(exp_avg.data);
    auto* v = static_cast<float*>(exp_avg_sq.data);
    auto* vmax = args.amsgrad ? static_cast<float*>(max_exp_avg_sq.data) : nullptr;
    auto body = [&](int64_t b, int64_t e) {
        if (grad_scale) unscale_range(const_cast<float*>(g) + b, e - b, *grad_scale);
        if (vmax) adam_range<true>(p + b, g + b, m + b, v + b, vmax + b, e - b, c);
        else adam_range<false>(p + b, g + b, m + b, v + b, nullptr, e - b, c);
    };
    if (pool) pool->parallel_for(n, runtime::kParallelGrain, body);
    else body(0, n);
    return Status();
}

}  // namespace ember::kernels
