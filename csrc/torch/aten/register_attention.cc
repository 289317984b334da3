// scaled_dot_product_attention through PyTorch's overrideable fused-attention path: ember's
// _fused_sdp_choice picks it for what kernels::attention handles (float32/bfloat16/float16,
// no dropout, bool or additive masks that need no gradient, grouped-query heads), and the
// forward/backward run there; anything else takes PyTorch's math path, built from ember ops.
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/SDPBackend.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <numeric>

#include <cmath>

#include "../context.h"
#include "kernels/attention/attention.h"

namespace ember::torch_glue {

int64_t fused_sdp_choice(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const std::optional<at::Tensor>& mask, double dropout_p, bool is_causal,
                         std::optional<double> scale, bool enable_gqa);

namespace {

bool attention_dtype(const at::Tensor& t) {
    return t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16 || t.scalar_type() == at::kHalf;
}

}  // namespace

int64_t fused_sdp_choice(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const std::optional<at::Tensor>& mask, double dropout_p, bool is_causal,
                         std::optional<double> scale, bool enable_gqa) {
    // Symbolic sizes (a graph traced with dynamic shapes) are compared as relations, never read
    // as numbers: reading one would specialize the graph to this call's sizes.
    auto sz = [](const at::Tensor& t, int64_t d) { return t.sym_size(d); };
    bool ok = dropout_p == 0.0 && q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && attention_dtype(q) &&
              k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type() &&
              sz(q, 0) == sz(k, 0) && sz(k, 0) == sz(v, 0) && sz(k, 1) == sz(v, 1) &&
              sz(k, 2) == sz(v, 2) && sz(q, 3) == sz(k, 3) && sz(k, 1) > 0 &&
              (sz(q, 1) == sz(k, 1) || (enable_gqa && sz(q, 1) % sz(k, 1) == 0)) &&
              on_device(q.device(), k) && on_device(q.device(), v) && on_device(q.device(), mask);
    // Under torch.func.vmap the fused op has no batching rule; the math path's ops do. In
    // vmap(grad(f)) the batched tensor hides under grad's wrapper, which the key set does not
    // tell from grad(f) alone: every torch.func transform takes the math path.
    const c10::DispatchKeySet functorch({c10::DispatchKey::FuncTorchBatched, c10::DispatchKey::FuncTorchGradWrapper});
    for (const at::Tensor* t : {&q, &k, &v})
        if (t->key_set().has_any(functorch)) ok = false;
    if (mask && mask->defined() && mask->key_set().has_any(functorch)) ok = false;  // vmap over masks alone
    if (ok && mask && mask->defined()) {
        const at::Tensor& m = *mask;
        ok = !m.requires_grad() && m.dim() <= 4 &&
             (m.scalar_type() == at::kBool || m.scalar_type() == q.scalar_type() || m.scalar_type() == at::kFloat);
    }
    // torch.nn.attention.sdpa_kernel([MATH]) (or torch.backends.cuda.enable_math_sdp alone)
    // switches the fused path off, as on the CPU and CUDA: the math composition runs, with its checks.
    if (!at::globalContext().userEnabledOverrideableSDP()) ok = false;
    return static_cast<int64_t>(ok ? at::SDPBackend::overrideable : at::SDPBackend::math);
}

namespace {

// Last dim contiguous, as the kernel requires.
at::Tensor rows(const at::Tensor& t) { return t.stride(-1) == 1 ? t : t.contiguous(); }

// The mask broadcast to [B, Hq, Lq, Lk] as a view (0 strides on broadcast dims).
kernels::TensorView mask_view(const std::optional<at::Tensor>& mask, const at::Tensor& q, int64_t lk) {
    if (!mask || !mask->defined()) return {};
    return view_in(mask->expand({q.size(0), q.size(1), q.size(2), lk}));
}

double softmax_scale(std::optional<double> scale, const at::Tensor& q) {
    return scale.value_or(1.0 / std::sqrt(static_cast<double>(q.size(-1))));
}

// The output layout PyTorch's meta function promises (alloc_with_matching_layout): query's dim
// order. Graphs traced with meta tensors view the output with those strides, so eager must match.
at::Tensor output_like_query(const at::Tensor& query, c10::IntArrayRef shape) {
    if (query.sizes() == shape) return at::empty_like(query);
    std::vector<int64_t> order(query.dim());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return query.stride(a) > query.stride(b); });
    std::vector<int64_t> strides(query.dim());
    int64_t stride = 1;
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
        strides[*it] = stride;
        stride *= shape[*it];
    }
    return at::empty_strided(shape, strides, query.options());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt, at::Tensor, at::Tensor, at::Tensor>
attention_forward(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                  const std::optional<at::Tensor>& attn_bias, double dropout_p, bool is_causal,
                  bool return_debug_mask, std::optional<double> scale) {
    TORCH_CHECK(dropout_p == 0.0, "ember: fused attention does not support dropout; use the math path");
    TORCH_CHECK(!return_debug_mask, "ember: fused attention has no debug mask");
    c10::DeviceGuard guard(query.device());
    at::Tensor q = rows(query), k = rows(key), v = rows(value);
    std::optional<at::Tensor> mask = attn_bias;
    at::Tensor out = at::empty({q.size(0), q.size(1), q.size(2), v.size(3)}, q.options());
    at::Tensor lse = at::empty({q.size(0), q.size(1), q.size(2)}, q.options().dtype(at::kFloat));
    kernels::AttentionArgs args;
    args.q = view_in(q);
    args.k = view_in(k);
    args.v = view_in(v);
    args.mask = mask_view(mask, q, k.size(2));
    args.causal = is_causal;
    args.scale = softmax_scale(scale, q);
    args.out = view_of(out);
    args.lse = view_of(lse);
    runtime::Device& dev = tensor_device(q);
    runtime::ThreadPool* pool = &dev.pool();
    enqueue(dev.current_stream(), "scaled_dot_product_attention",
            [args, pool] { return kernels::attention_forward(args, pool); });
    at::Tensor empty = at::empty({0}, q.options().dtype(at::kLong));
    std::vector<int64_t> shape = query.sizes().vec();
    shape.back() = value.size(-1);
    at::Tensor result = output_like_query(query, shape);
    if (result.is_contiguous() && result.dim() == 4) result = out;  // the kernel's layout already
    else result.copy_(out.view(shape));
    return {result, lse, empty, empty, c10::SymInt(q.size(2)), c10::SymInt(k.size(2)), empty, empty, at::Tensor()};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> attention_backward(
    const at::Tensor& grad_out, const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const at::Tensor& attn_bias, std::array<bool, 4> mask, const at::Tensor& out, const at::Tensor& logsumexp,
    const at::Tensor&, const at::Tensor&, c10::SymInt, c10::SymInt, double dropout_p, bool is_causal,
    const at::Tensor&, const at::Tensor&, std::optional<double> scale) {
    TORCH_CHECK(dropout_p == 0.0, "ember: fused attention does not support dropout");
    TORCH_CHECK(!mask[3], "ember: fused attention does not compute a gradient for the attention mask");
    c10::DeviceGuard guard(query.device());
    at::Tensor q = rows(query), k = rows(key), v = rows(value), o = rows(out), go = rows(grad_out);
    at::Tensor lse = logsumexp.contiguous();
    at::Tensor gq = at::empty_like(q), gk = at::empty_like(k), gv = at::empty_like(v);
    std::optional<at::Tensor> bias;
    if (attn_bias.defined()) bias = attn_bias;
    kernels::AttentionBackwardArgs args;
    args.grad_out = view_in(go);
    args.q = view_in(q);
    args.k = view_in(k);
    args.v = view_in(v);
    args.out = view_in(o);
    args.lse = view_in(lse);
    args.mask = mask_view(bias, q, k.size(2));
    args.causal = is_causal;
    args.scale = softmax_scale(scale, q);
    args.grad_q = view_of(gq);
    args.grad_k = view_of(gk);
    args.grad_v = view_of(gv);
    runtime::Device& dev = tensor_device(q);
    runtime::ThreadPool* pool = &dev.pool();
    enqueue(dev.current_stream(), "scaled_dot_product_attention_backward",
            [args, pool] {
                return kernels::attention_backward(args, pool);
            });
    return {mask[0] ? gq : at::Tensor(), mask[1] ? gk : at::Tensor(), mask[2] ? gv : at::Tensor(), at::Tensor()};
}

// nn.TransformerEncoder's inference fast path packs padded batches into nested tensors when
// torch._nested_tensor_from_mask_left_aligned says the padding sits at the end. Ember has no
// nested-tensor kernels, so it answers "not left-aligned", and the encoder takes its padded
// path: the same result, computed over the padding too.
bool nested_tensor_from_mask_left_aligned(const at::Tensor&, const at::Tensor&) { return false; }

at::Tensor nested_tensor_from_mask(const at::Tensor&, const at::Tensor&, bool) {
    TORCH_CHECK_NOT_IMPLEMENTED(false, "nested tensors are not supported on ember; build nn.TransformerEncoder with "
                                       "enable_nested_tensor=False (or keep mask_check=True)");
}

}  // namespace

// scaled_dot_product_attention asks this stub, not the _fused_sdp_choice op, which backend to use.
}  // namespace ember::torch_glue

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &ember::torch_glue::fused_sdp_choice)
}  // namespace at::native

namespace ember::torch_glue {

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("_fused_sdp_choice", fused_sdp_choice);
    m.impl("_scaled_dot_product_fused_attention_overrideable", attention_forward);
    m.impl("_scaled_dot_product_fused_attention_overrideable_backward", attention_backward);
    m.impl("_nested_tensor_from_mask_left_aligned", nested_tensor_from_mask_left_aligned);
    m.impl("_nested_tensor_from_mask", nested_tensor_from_mask);
}

}  // namespace ember::torch_glue
