// Batch norm (forward and backward) for CNNs, composed from ember's native reductions and
// elementwise kernels with the same formulas and outputs as PyTorch's CPU kernel: biased batch
// variance for normalizing, unbiased for the running estimate, save_mean/save_invstd for the
// backward in training and empty in evaluation. Mixed dtypes take the CPU fallback. Also the
// functional batch-norm forms the compiler and torch.export emit, and GroupNorm's backward.
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include "../fallback.h"
#include "glue.h"

namespace ember::torch_glue {
namespace {

bool same_float(const at::Tensor& x, const std::optional<at::Tensor>& t) {
    return !t || !t->defined() || t->scalar_type() == x.scalar_type();
}

std::vector<int64_t> reduce_dims(const at::Tensor& x) {
    std::vector<int64_t> dims = {0};
    for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
    return dims;
}

// A per-channel [C] tensor shaped to broadcast against x: [1, C, 1, ...].
at::Tensor per_channel(const at::Tensor& t, const at::Tensor& x) {
    std::vector<int64_t> shape(x.dim(), 1);
    shape[1] = x.size(1);
    return t.view(shape);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm(
    const at::Tensor& x, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var, bool training,
    double momentum, double eps) {
    bool ok = (x.scalar_type() == at::kFloat || x.scalar_type() == at::kDouble) && x.dim() >= 2 && x.numel() > 0 &&
              same_float(x, weight) && same_float(x, bias) && same_float(x, running_mean) && same_float(x, running_var);
    if (!ok || (!training && (!running_mean || !running_mean->defined()))) {
        return cpu<ATEN_OP(native_batch_norm)>(x, weight, bias, running_mean, running_var, training, momentum, eps);
    }
    at::Tensor mean, invstd;
    if (training) {
        auto dims = reduce_dims(x);
        int64_t n = x.numel() / x.size(1);
        TORCH_CHECK(n > 1, "Expected more than 1 value per channel when training, got input size ", x.sizes());
        mean = x.mean(dims);
        at::Tensor var = x.var(dims, /*correction=*/0);
        invstd = (var + eps).rsqrt();
        at::NoGradGuard no_grad;
        if (running_mean && running_mean->defined()) running_mean->mul_(1 - momentum).add_(mean, momentum);
        if (running_var && running_var->defined()) {
            running_var->mul_(1 - momentum).add_(var, momentum * static_cast<double>(n) / static_cast<double>(n - 1));
        }
    } else {
        mean = *running_mean;
        invstd = (*running_var + eps).rsqrt();
    }
    at::Tensor out = (x - per_channel(mean, x)) * per_channel(invstd, x);
    if (weight && weight->defined()) out.mul_(per_channel(*weight, x));
    if (bias && bias->defined()) out.add_(per_channel(*bias, x));
    if (!training) {
        at::Tensor empty = at::empty({0}, x.options());
        return {out, empty, empty};
    }
    return {out, mean, invstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_backward(
    const at::Tensor& grad, const at::Tensor& x, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var,
    const std::optional<at::Tensor>& save_mean, const std::optional<at::Tensor>& save_invstd, bool train, double eps,
    std::array<bool, 3> mask) {
    bool ok = (x.scalar_type() == at::kFloat || x.scalar_type() == at::kDouble) && grad.scalar_type() == x.scalar_type() &&
              same_float(x, weight) && x.numel() > 0 &&
              (train ? (save_mean && save_mean->defined() && save_mean->numel() > 0)
                     : (running_mean && running_mean->defined() && running_var && running_var->defined()));
    if (!ok) {
        return cpu<ATEN_OP(native_batch_norm_backward)>(grad, x, weight, running_mean, running_var, save_mean,
                                                        save_invstd, train, eps, mask);
    }
    auto dims = reduce_dims(x);
    at::Tensor mean = train ? *save_mean : *running_mean;
    at::Tensor invstd = train ? *save_invstd : (*running_var + eps).rsqrt();
    at::Tensor xhat = (x - per_channel(mean, x)) * per_channel(invstd, x);
    at::Tensor grad_bias = grad.sum(dims);
    at::Tensor grad_weight = (grad * xhat).sum(dims);
    at::Tensor grad_input;
    if (mask[0]) {
        at::Tensor scale = per_channel(invstd, x);
        if (weight && weight->defined()) scale = scale * per_channel(*weight, x);
        if (train) {
            double n = static_cast<double>(x.numel() / x.size(1));
            grad_input = (grad - per_channel(grad_bias, x) / n - xhat * per_channel(grad_weight, x) / n) * scale;
        } else {
            grad_input = grad * scale;
        }
    }
    return {grad_input, mask[1] ? grad_weight : at::Tensor(), mask[2] ? grad_bias : at::Tensor()};
}

// The functional forms the compiler's decompositions and torch.export use; each is the same batch
// norm with the running statistics given, absent, or updated.
std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_legit(
    const at::Tensor& x, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    at::Tensor& running_mean, at::Tensor& running_var, bool training, double momentum, double eps) {
    return batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_legit_no_stats(
    const at::Tensor& x, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    bool training, double momentum, double eps) {
    return batch_norm(x, weight, bias, std::nullopt, std::nullopt, training, momentum, eps);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> batch_norm_with_update(
    const at::Tensor& x, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    at::Tensor& running_mean, at::Tensor& running_var, double momentum, double eps) {
    auto [out, mean, invstd] = batch_norm(x, weight, bias, running_mean, running_var, true, momentum, eps);
    return {out, mean, invstd, at::empty({0}, x.options().dtype(at::kByte))};  // no reserve space
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_backward_reserve(
    const at::Tensor& grad, const at::Tensor& x, const at::Tensor& weight,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var,
    const std::optional<at::Tensor>& save_mean, const std::optional<at::Tensor>& save_var, bool update, double eps,
    std::array<bool, 3> mask, const at::Tensor& /*reserve*/) {
    return batch_norm_backward(grad, x, weight, running_mean, running_var, save_mean, save_var, update, eps, mask);
}

// GroupNorm's backward (its forward is PyTorch's composition of native ops). Per (sample, group)
// of M = C/G * HxW elements with xhat = (x - mean) * rstd and g = dy * weight:
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)).
std::tuple<at::Tensor, at::Tensor, at::Tensor> group_norm_backward(
    const at::Tensor& grad, const at::Tensor& x, const at::Tensor& mean, const at::Tensor& rstd,
    const std::optional<at::Tensor>& weight, int64_t N, int64_t C, int64_t HxW, int64_t group,
    std::array<bool, 3> mask) {
    bool ok = (x.scalar_type() == at::kFloat || x.scalar_type() == at::kDouble) && grad.scalar_type() == x.scalar_type() &&
              mean.scalar_type() == x.scalar_type() && same_float(x, weight) && x.numel() > 0 && group > 0 && C % group == 0;
    if (!ok) {
        return cpu<ATEN_OP(native_group_norm_backward)>(grad, x, mean, rstd, weight, N, C, HxW, group, mask);
    }
    const std::vector<int64_t> per_channel_shape = {N, C, HxW}, per_group_shape = {N, group, (C / group) * HxW};
    at::Tensor dy = grad.reshape(per_channel_shape), xs = x.reshape(per_channel_shape);
    at::Tensor m = mean.reshape({N, group, 1}), r = rstd.reshape({N, group, 1});
    at::Tensor xhat = ((xs.reshape(per_group_shape) - m) * r).reshape(per_channel_shape);
    at::Tensor grad_input, grad_weight, grad_bias;
    if (mask[0]) {
        at::Tensor g = (weight && weight->defined()) ? dy * weight->reshape({1, C, 1}) : dy;
        at::Tensor gg = g.reshape(per_group_shape), xg = xhat.reshape(per_group_shape);
        grad_input = (r * (gg - gg.mean({2}, true) - xg * (gg * xg).mean({2}, true))).reshape(x.sizes());
    }
    if (mask[1]) grad_weight = (dy * xhat).sum({0, 2});
    if (mask[2]) grad_bias = dy.sum({0, 2});
    return {grad_input, grad_weight, grad_bias};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("_native_batch_norm_legit", batch_norm_legit);
    m.impl("_native_batch_norm_legit.no_stats", batch_norm_legit_no_stats);
    m.impl("_batch_norm_with_update", batch_norm_with_update);
    m.impl("batch_norm_backward", batch_norm_backward_reserve);
    m.impl("native_group_norm_backward", group_norm_backward);
    m.impl("native_batch_norm", batch_norm);
    m.impl("native_batch_norm_backward", batch_norm_backward);
}

}  // namespace ember::torch_glue
