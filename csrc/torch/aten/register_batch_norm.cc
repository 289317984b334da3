// Batch norm (forward and backward) for CNNs with the same formulas and outputs as PyTorch's CPU
// kernel. Inputs whose spatial dims form one stride-1 run (NCHW-contiguous and the like) run
// core's per-channel kernel (kernels/norm: two passes per channel, statistics in double); other
// layouts (channels-last) are composed from ember's native reductions and elementwise kernels.
// Either way: biased batch
// variance for normalizing, unbiased for the running estimate, save_mean/save_invstd for the
// backward in training and empty in evaluation. bfloat16/float16 inputs compute in float (with
// float parameters too: autocast's mixed form); other mixes take the CPU fallback. Also the
// functional batch-norm forms the compiler and torch.export emit, and GroupNorm (forward for any
// memory format, backward).
#include <utility>

#include <ATen/ATen.h>
#include <ATen/ops/native_group_norm_native.h>
#include <ATen/Operators.h>
#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include "../fallback.h"
#include "glue.h"
#include "kernels/norm/norm.h"

namespace ember::torch_glue {
namespace {

// The dtype batch norm computes in, or nullopt for the CPU fallback: float32 and float64 inputs
// with parameters of the same dtype; bfloat16 and float16 inputs in float, with parameters of the
// input's dtype or float (autocast's mixed form), as the CPU kernel does.
std::optional<at::ScalarType> bn_compute_type(const at::Tensor& x,
                                              std::initializer_list<const std::optional<at::Tensor>*> params) {
    const at::ScalarType t = x.scalar_type();
    const bool reduced = t == at::kBFloat16 || t == at::kHalf;
    if (!reduced && t != at::kFloat && t != at::kDouble) return std::nullopt;
    std::optional<at::ScalarType> p;
    for (const auto* o : params) {
        if (!o->has_value() || !(*o)->defined()) continue;
        const at::ScalarType pt = (*o)->scalar_type();
        if (p && *p != pt) return std::nullopt;
        p = pt;
    }
    if (p && *p != t && !(reduced && *p == at::kFloat)) return std::nullopt;
    return reduced ? at::kFloat : t;
}

// The dtype of save_mean / save_invstd (and of the parameters' gradients): the parameters'.
at::ScalarType bn_param_type(const at::Tensor& x, std::initializer_list<const std::optional<at::Tensor>*> params) {
    for (const auto* o : params)
        if (o->has_value() && (*o)->defined()) return (*o)->scalar_type();
    return x.scalar_type();
}

bool same_float(const at::Tensor& x, const std::optional<at::Tensor>& t) {
    return !t || !t->defined() || t->scalar_type() == x.scalar_type();
}

std::vector<int64_t> reduce_dims(const at::Tensor& x) {
    std::vector<int64_t> dims = {0};
    for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
    return dims;
}

// Per-channel sums and statistics over every dim but 1. A contiguous NC... tensor is reduced
// over its contiguous spatial run first ([N, C, HW] -> [N, C]) and then over N, which the
// reduction kernels do far faster than one strided pass over (0, 2, 3); the variance combines the
// [N, C] groups exactly (equal counts: var = mean(var_nc) + mean((mean_nc - mean)^2)).
bool spatial_contiguous(const at::Tensor& t) { return t.dim() >= 3 && t.is_contiguous(); }

at::Tensor channel_sum(const at::Tensor& t) {
    if (spatial_contiguous(t)) return t.view({t.size(0), t.size(1), -1}).sum(-1).sum(0);
    return t.sum(reduce_dims(t));
}

std::pair<at::Tensor, at::Tensor> channel_mean_var(const at::Tensor& t) {
    if (spatial_contiguous(t)) {
        at::Tensor v = t.view({t.size(0), t.size(1), -1});
        // Two passes of plain means (the squared deviations from the group mean) run several
        // times faster than the Welford variance kernel, with the same accuracy.
        at::Tensor mean_nc = v.mean(-1);
        at::Tensor var_nc = (v - mean_nc.unsqueeze(-1)).square().mean(-1);
        at::Tensor mean = mean_nc.mean(0);
        return {mean, var_nc.mean(0) + (mean_nc - mean).square().mean(0)};
    }
    auto dims = reduce_dims(t);
    return {t.mean(dims), t.var(dims, /*correction=*/0)};
}

// A per-channel [C] tensor shaped to broadcast against x: [1, C, 1, ...].
at::Tensor per_channel(const at::Tensor& t, const at::Tensor& x) {
    std::vector<int64_t> shape(x.dim(), 1);
    shape[1] = x.size(1);
    return t.view(shape);
}

// ---- the native kernel ------------------------------------------------------------------------

// x's dims past the first two form one stride-1 run, so x is viewable as [N, C, S].
bool spatial_run(const at::Tensor& x) {
    int64_t expected = 1;
    for (int64_t d = x.dim() - 1; d >= 2; --d) {
        if (x.size(d) != 1 && x.stride(d) != expected) return false;
        expected *= x.size(d);
    }
    return true;
}

// A [C] vector on x's device, or absent.
bool channel_vector(const at::Tensor& x, const std::optional<at::Tensor>& t) {
    return !t || !t->defined() || (t->dim() == 1 && t->size(0) == x.size(1) && t->device() == x.device());
}

kernels::TensorView optional_view(const std::optional<at::Tensor>& t, bool writable = false) {
    if (!t || !t->defined()) return {};
    return writable ? view_of(*t) : view_in(*t);
}

bool native_ok(const at::Tensor& x, std::initializer_list<const std::optional<at::Tensor>*> vectors) {
    if (x.dim() < 2 || x.numel() == 0 || !spatial_run(x)) return false;
    for (const auto* v : vectors)
        if (!channel_vector(x, *v)) return false;
    return true;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_batch_norm_forward(
    const at::Tensor& x, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var, bool training,
    double momentum, double eps, at::ScalarType ptype) {
    at::Tensor out = at::empty(x.sizes(), x.options());
    at::Tensor save_mean = at::empty({training ? x.size(1) : 0}, x.options().dtype(ptype));
    at::Tensor save_invstd = at::empty_like(save_mean);
    kernels::TensorView o = fold3(out, 1), xv = fold3(x, 1, false);
    kernels::TensorView smv = training ? view_of(save_mean) : kernels::TensorView{};
    kernels::TensorView siv = training ? view_of(save_invstd) : kernels::TensorView{};
    kernels::TensorView wv = optional_view(weight), bv = optional_view(bias);
    kernels::TensorView rmv = optional_view(running_mean, training), rvv = optional_view(running_var, training);
    queue(x, "batch_norm", [=](runtime::ThreadPool* p) {
        return kernels::batch_norm(o, smv, siv, xv, wv, bv, rmv, rvv, training, momentum, eps, p);
    });
    return {out, save_mean, save_invstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_batch_norm_backward(
    const at::Tensor& grad, const at::Tensor& x, const std::optional<at::Tensor>& weight, const at::Tensor& mean,
    const at::Tensor& invstd, bool train, std::array<bool, 3> mask, at::ScalarType ptype) {
    at::Tensor gi = mask[0] ? at::empty(x.sizes(), x.options()) : at::Tensor();
    at::Tensor gw = mask[1] ? at::empty({x.size(1)}, x.options().dtype(ptype)) : at::Tensor();
    at::Tensor gb = mask[2] ? at::empty({x.size(1)}, x.options().dtype(ptype)) : at::Tensor();
    kernels::TensorView giv = gi.defined() ? fold3(gi, 1) : kernels::TensorView{};
    kernels::TensorView gwv = gw.defined() ? view_of(gw) : kernels::TensorView{};
    kernels::TensorView gbv = gb.defined() ? view_of(gb) : kernels::TensorView{};
    kernels::TensorView gv = fold3(grad, 1, false), xv = fold3(x, 1, false);
    kernels::TensorView wv = optional_view(weight), mv = view_in(mean), iv = view_in(invstd);
    queue(x, "batch_norm_backward", [=](runtime::ThreadPool* p) {
        return kernels::batch_norm_backward(giv, gwv, gbv, gv, xv, wv, mv, iv, train, p);
    });
    return {gi, gw, gb};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm(
    const at::Tensor& x, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var, bool training,
    double momentum, double eps) {
    auto acc = bn_compute_type(x, {&weight, &bias, &running_mean, &running_var});
    if (!acc || x.dim() < 2 || x.numel() == 0 || (!training && (!running_mean || !running_mean->defined()))) {
        return cpu<ATEN_OP(native_batch_norm)>(x, weight, bias, running_mean, running_var, training, momentum, eps);
    }
    const at::ScalarType ptype = bn_param_type(x, {&weight, &bias, &running_mean, &running_var});
    TORCH_CHECK(!training || x.numel() / x.size(1) > 1,
                "Expected more than 1 value per channel when training, got input size ", x.sizes());
    if (native_ok(x, {&weight, &bias, &running_mean, &running_var})) {
        return native_batch_norm_forward(x, weight, bias, running_mean, running_var, training, momentum, eps, ptype);
    }
    at::Tensor xc = x.to(*acc);
    at::Tensor mean, invstd;
    if (training) {
        int64_t n = x.numel() / x.size(1);
        auto [m, var] = channel_mean_var(xc);
        mean = m;
        invstd = (var + eps).rsqrt();
        at::NoGradGuard no_grad;
        if (running_mean && running_mean->defined()) running_mean->mul_(1 - momentum).add_(mean, momentum);
        if (running_var && running_var->defined()) {
            running_var->mul_(1 - momentum).add_(var, momentum * static_cast<double>(n) / static_cast<double>(n - 1));
        }
    } else {
        mean = running_mean->to(*acc);
        invstd = (running_var->to(*acc) + eps).rsqrt();
    }
    // out = x * scale + shift per channel, with scale = invstd * w and shift = b - mean * scale
    // (the CPU kernel's own linear form): one pass over x instead of four.
    at::Tensor scale = weight && weight->defined() ? invstd * weight->to(*acc) : invstd;
    at::Tensor shift = -(mean * scale);
    if (bias && bias->defined()) shift = shift + bias->to(*acc);
    at::Tensor out = at::addcmul(per_channel(shift, x), xc, per_channel(scale, x)).to(x.scalar_type());
    if (!training) {
        at::Tensor empty = at::empty({0}, x.options().dtype(ptype));
        return {out, empty, empty};
    }
    return {out, mean.to(ptype), invstd.to(ptype)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_backward(
    const at::Tensor& grad, const at::Tensor& x, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var,
    const std::optional<at::Tensor>& save_mean, const std::optional<at::Tensor>& save_invstd, bool train, double eps,
    std::array<bool, 3> mask) {
    auto acc = bn_compute_type(x, {&weight, &running_mean, &running_var});
    bool ok = acc && grad.scalar_type() == x.scalar_type() && x.numel() > 0 &&
              (train ? (save_mean && save_mean->defined() && save_mean->numel() > 0)
                     : (running_mean && running_mean->defined() && running_var && running_var->defined()));
    if (!ok) {
        return cpu<ATEN_OP(native_batch_norm_backward)>(grad, x, weight, running_mean, running_var, save_mean,
                                                        save_invstd, train, eps, mask);
    }
    const at::ScalarType ptype = bn_param_type(x, {&weight, &running_mean, &running_var});
    const std::optional<at::Tensor> none;
    if (native_ok(x, {&weight, &running_mean, &running_var, train ? &save_mean : &none, train ? &save_invstd : &none}) &&
        spatial_run(grad) && grad.sizes().equals(x.sizes()) && grad.device() == x.device()) {
        at::Tensor mean = train ? *save_mean : *running_mean;
        at::Tensor invstd = train ? *save_invstd : (running_var->to(*acc) + eps).rsqrt();
        return native_batch_norm_backward(grad, x, weight, mean, invstd, train, mask, ptype);
    }
    at::Tensor g = grad.to(*acc), xc = x.to(*acc);
    at::Tensor mean = train ? save_mean->to(*acc) : running_mean->to(*acc);
    at::Tensor invstd = train ? save_invstd->to(*acc) : (running_var->to(*acc) + eps).rsqrt();
    // Per channel, with xmu = x - mean, a = invstd * w and n values:
    //   grad_bias = sum(g), grad_weight = sum(g * xmu) * invstd,
    //   grad_input = a * g - a * sum(g) / n - a * invstd^2 * sum(g * xmu) / n * xmu   (training)
    // as two fused multiply-adds over the tensor instead of the textbook form's five passes.
    at::Tensor xmu = xc - per_channel(mean, x);
    at::Tensor grad_bias = channel_sum(g);
    at::Tensor dotp = channel_sum(g * xmu);
    at::Tensor grad_weight = dotp * invstd;
    at::Tensor grad_input;
    if (mask[0]) {
        at::Tensor a = weight && weight->defined() ? invstd * weight->to(*acc) : invstd;
        if (train) {
            const double n = static_cast<double>(x.numel() / x.size(1));
            at::Tensor b = -(a * invstd * invstd * dotp) / n;
            at::Tensor c = -(a * grad_bias) / n;
            grad_input = at::addcmul(at::addcmul(per_channel(c, x), g, per_channel(a, x)), xmu, per_channel(b, x));
        } else {
            grad_input = g * per_channel(a, x);
        }
        grad_input = grad_input.to(x.scalar_type());
    }
    return {grad_input, mask[1] ? grad_weight.to(ptype) : at::Tensor(), mask[2] ? grad_bias.to(ptype) : at::Tensor()};
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

// GroupNorm's forward is PyTorch's composition of native ops (math_group_norm), which views the
// input flat: a channels-last input goes in as a contiguous copy, and the output takes the
// input's memory format back, as the CPU kernel returns it.
std::tuple<at::Tensor, at::Tensor, at::Tensor> group_norm_forward(
    const at::Tensor& x, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias, int64_t N,
    int64_t C, int64_t HxW, int64_t group, double eps) {
    const c10::ScalarType dt = x.scalar_type();
    if (dt == at::kBFloat16 || dt == at::kHalf) {
        // In float, rounded once at the end, as the CPU kernel computes half types: the
        // composition run in bfloat16 rounds the normalized values before the affine step.
        auto widen = [](const std::optional<at::Tensor>& t) {
            return t && t->defined() ? std::optional<at::Tensor>(t->to(at::kFloat)) : t;
        };
        auto [out, mean, rstd] = at::native::math_group_norm(x.contiguous().to(at::kFloat), widen(weight), widen(bias),
                                                             N, C, HxW, group, eps);
        // The statistics come in the parameters' dtype (float32 weights with a bfloat16 input
        // give float32 statistics), as on the CPU.
        const c10::ScalarType stat = weight && weight->defined() ? weight->scalar_type() : dt;
        out = out.to(dt);
        const auto format = x.suggest_memory_format();
        if (format != c10::MemoryFormat::Contiguous) out = out.contiguous(format);
        return {out, mean.to(stat), rstd.to(stat)};
    }
    auto [out, mean, rstd] = at::native::math_group_norm(x.contiguous(), weight, bias, N, C, HxW, group, eps);
    const auto format = x.suggest_memory_format();
    if (format != c10::MemoryFormat::Contiguous) out = out.contiguous(format);
    return {out, mean, rstd};
}

// GroupNorm's backward. Per (sample, group)
// of M = C/G * HxW elements with xhat = (x - mean) * rstd and g = dy * weight:
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)).
std::tuple<at::Tensor, at::Tensor, at::Tensor> group_norm_backward(
    const at::Tensor& grad, const at::Tensor& x, const at::Tensor& mean, const at::Tensor& rstd,
    const std::optional<at::Tensor>& weight, int64_t N, int64_t C, int64_t HxW, int64_t group,
    std::array<bool, 3> mask) {
    const c10::ScalarType dt = x.scalar_type();
    if ((dt == at::kBFloat16 || dt == at::kHalf) && grad.scalar_type() == dt && x.numel() > 0) {
        // In float, rounded once at the end, as the forward (and the CPU kernel) computes them;
        // the parameters' gradients come in the parameters' dtype.
        auto widen = [](const at::Tensor& t) { return t.to(at::kFloat); };
        std::optional<at::Tensor> w;
        if (weight && weight->defined()) w = widen(*weight);
        auto [gi, gw, gb] = group_norm_backward(widen(grad), widen(x), widen(mean), widen(rstd), w, N, C, HxW,
                                                group, mask);
        const c10::ScalarType pt = weight && weight->defined() ? weight->scalar_type() : dt;
        return {gi.defined() ? gi.to(dt) : gi, gw.defined() ? gw.to(pt) : gw, gb.defined() ? gb.to(pt) : gb};
    }
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
    m.impl("native_group_norm", group_norm_forward);
    m.impl("native_group_norm_backward", group_norm_backward);
    m.impl("native_batch_norm", batch_norm);
    m.impl("native_batch_norm_backward", batch_norm_backward);
}

}  // namespace ember::torch_glue
