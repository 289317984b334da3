// 2-d max, average, adaptive-average and adaptive-max pooling with their backwards, on kernels/pool. Shapes
// and argument checks are PyTorch's (pooling_output_shape and its shape check); 3-d and
// channels-last inputs are made contiguous NCHW first; other dtypes take the CPU fallback.
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Pool.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "../context.h"
#include "../fallback.h"
#include "kernels/pool/pool.h"
#include "glue.h"

namespace ember::torch_glue {
namespace {

// A float tensor of 3 or 4 dims that is not empty, or is empty only by a batch of 0 (which the
// CPU pools into an empty result; other empty dims get its error through the fallback).
bool pool_dtype(const at::Tensor& t) {
    const bool empty_batch = t.dim() == 4 && t.size(0) == 0 && t.size(1) > 0 && t.size(2) > 0 && t.size(3) > 0;
    return (t.scalar_type() == at::kFloat || t.scalar_type() == at::kDouble || t.scalar_type() == at::kBFloat16) &&
           (t.dim() == 3 || t.dim() == 4) && (t.numel() > 0 || empty_batch);
}

int64_t pick(c10::IntArrayRef v, int i, int64_t dflt) {
    return v.empty() ? dflt : v[v.size() == 1 ? 0 : i];
}

// [P, H, W] planes of a contiguous NCHW (or CHW) tensor.
kernels::TensorView planes(const at::Tensor& t, bool writable = true) {
    int64_t h = t.size(-2), w = t.size(-1);
    at::Tensor v = t.view({-1, h, w});
    return writable ? view_of(v) : view_in(v);
}

std::vector<int64_t> with_spatial(const at::Tensor& x, int64_t oh, int64_t ow) {
    std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end() - 2);
    shape.push_back(oh);
    shape.push_back(ow);
    return shape;
}

kernels::Pool2dParams params(c10::IntArrayRef kernel, c10::IntArrayRef stride, c10::IntArrayRef padding,
                             c10::IntArrayRef dilation) {
    kernels::Pool2dParams p;
    for (int i = 0; i < 2; ++i) {
        p.kernel[i] = pick(kernel, i, 1);
        p.stride[i] = pick(stride, i, p.kernel[i]);
        p.padding[i] = pick(padding, i, 0);
        p.dilation[i] = pick(dilation, i, 1);
    }
    return p;
}

// ---- max pooling ------------------------------------------------------------------------------

std::tuple<at::Tensor, at::Tensor> max_pool2d(const at::Tensor& self, c10::IntArrayRef kernel, c10::IntArrayRef stride,
                                              c10::IntArrayRef padding, c10::IntArrayRef dilation, bool ceil_mode) {
    if (!pool_dtype(self) || kernel.empty()) {
        return cpu<ATEN_OP(max_pool2d_with_indices)>(self, kernel, stride, padding, dilation, ceil_mode);
    }
    kernels::Pool2dParams p = params(kernel, stride, padding, dilation);
    int64_t H = self.size(-2), W = self.size(-1);
    int64_t OH = at::native::pooling_output_shape<int64_t>(H, p.kernel[0], p.padding[0], p.stride[0], p.dilation[0], ceil_mode);
    int64_t OW = at::native::pooling_output_shape<int64_t>(W, p.kernel[1], p.padding[1], p.stride[1], p.dilation[1], ceil_mode);
    at::native::pool2d_shape_check(self, p.kernel[0], p.kernel[1], p.stride[0], p.stride[1], p.padding[0], p.padding[1],
                                   p.dilation[0], p.dilation[1], self.size(-3), H, W, OH, OW, self.suggest_memory_format());
    at::Tensor x = self.contiguous();
    at::Tensor out = at::empty(with_spatial(x, OH, OW), x.options());
    at::Tensor idx = at::empty(with_spatial(x, OH, OW), x.options().dtype(at::kLong));
    if (out.numel() == 0) return {out, idx};
    kernels::TensorView o = planes(out), i = planes(idx), xv = planes(x, false);
    queue(x, "max_pool2d", [o, i, xv, p](runtime::ThreadPool* pool) { return kernels::max_pool2d(o, i, xv, p, pool); });
    return {out, idx};
}

// The gradient of a max pooling (plain or adaptive): each output's gradient added at the input
// position its index names (h * W + w in the plane).
at::Tensor scatter_to_max(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& indices, const char* name) {
    at::Tensor g = grad.contiguous(), idx = indices.contiguous();
    at::Tensor gi = at::empty(self.sizes(), self.options().memory_format(at::MemoryFormat::Contiguous));
    if (gi.numel() == 0) return gi;
    kernels::TensorView giv = planes(gi), gv = planes(g, false), iv = planes(idx, false);
    queue(gi, name, [giv, gv, iv](runtime::ThreadPool* pool) { return kernels::max_pool2d_backward(giv, gv, iv, pool); });
    return gi;
}

at::Tensor max_pool2d_backward(const at::Tensor& grad, const at::Tensor& self, c10::IntArrayRef kernel,
                               c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation,
                               bool ceil_mode, const at::Tensor& indices) {
    if (!pool_dtype(self) || grad.scalar_type() != self.scalar_type() || !on_device(self.device(), grad) ||
        !on_device(self.device(), indices)) {
        return cpu<ATEN_OP(max_pool2d_with_indices_backward)>(grad, self, kernel, stride, padding, dilation, ceil_mode, indices);
    }
    return scatter_to_max(grad, self, indices, "max_pool2d_backward");
}

// ---- average pooling --------------------------------------------------------------------------

at::Tensor avg_pool2d(const at::Tensor& self, c10::IntArrayRef kernel, c10::IntArrayRef stride, c10::IntArrayRef padding,
                      bool ceil_mode, bool count_include_pad, std::optional<int64_t> divisor_override) {
    if (!pool_dtype(self) || kernel.empty() || (divisor_override && *divisor_override == 0)) {
        return cpu<ATEN_OP(avg_pool2d)>(self, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override);
    }
    kernels::Pool2dParams p = params(kernel, stride, padding, {});
    p.count_include_pad = count_include_pad;
    p.divisor_override = divisor_override.value_or(0);
    int64_t H = self.size(-2), W = self.size(-1);
    int64_t OH = at::native::pooling_output_shape<int64_t>(H, p.kernel[0], p.padding[0], p.stride[0], 1, ceil_mode);
    int64_t OW = at::native::pooling_output_shape<int64_t>(W, p.kernel[1], p.padding[1], p.stride[1], 1, ceil_mode);
    at::native::pool2d_shape_check(self, p.kernel[0], p.kernel[1], p.stride[0], p.stride[1], p.padding[0], p.padding[1],
                                   1, 1, self.size(-3), H, W, OH, OW, self.suggest_memory_format());
    at::Tensor x = self.contiguous();
    at::Tensor out = at::empty(with_spatial(x, OH, OW), x.options());
    if (out.numel() == 0) return out;
    kernels::TensorView o = planes(out), xv = planes(x, false);
    queue(x, "avg_pool2d", [o, xv, p](runtime::ThreadPool* pool) { return kernels::avg_pool2d(o, xv, p, pool); });
    return out;
}

at::Tensor avg_pool2d_backward(const at::Tensor& grad, const at::Tensor& self, c10::IntArrayRef kernel,
                               c10::IntArrayRef stride, c10::IntArrayRef padding, bool ceil_mode,
                               bool count_include_pad, std::optional<int64_t> divisor_override) {
    if (!pool_dtype(self) || grad.scalar_type() != self.scalar_type() || (divisor_override && *divisor_override == 0) ||
        !on_device(self.device(), grad)) {
        return cpu<ATEN_OP(avg_pool2d_backward)>(grad, self, kernel, stride, padding, ceil_mode, count_include_pad,
                                                 divisor_override);
    }
    kernels::Pool2dParams p = params(kernel, stride, padding, {});
    p.count_include_pad = count_include_pad;
    p.divisor_override = divisor_override.value_or(0);
    at::Tensor g = grad.contiguous();
    at::Tensor gi = at::empty(self.sizes(), self.options().memory_format(at::MemoryFormat::Contiguous));
    if (gi.numel() == 0) return gi;
    kernels::TensorView giv = planes(gi), gv = planes(g, false);
    queue(gi, "avg_pool2d_backward", [giv, gv, p](runtime::ThreadPool* pool) {
        return kernels::avg_pool2d_backward(giv, gv, p, pool);
    });
    return gi;
}

// ---- adaptive average pooling -----------------------------------------------------------------

at::Tensor adaptive_avg_pool2d(const at::Tensor& self, c10::SymIntArrayRef output_size) {
    if (!pool_dtype(self) || output_size.size() != 2) {
        return cpu_symint<ATEN_OP(_adaptive_avg_pool2d)>(self, output_size);
    }
    int64_t OH = output_size[0].expect_int(), OW = output_size[1].expect_int();
    TORCH_CHECK(OH >= 0 && OW >= 0, "adaptive_avg_pool2d: output size must be non-negative");
    at::Tensor x = self.contiguous();
    at::Tensor out = at::empty(with_spatial(x, OH, OW), x.options());
    if (out.numel() == 0) return out;
    kernels::TensorView o = planes(out), xv = planes(x, false);
    queue(x, "adaptive_avg_pool2d", [o, xv](runtime::ThreadPool* pool) { return kernels::adaptive_avg_pool2d(o, xv, pool); });
    return out;
}

at::Tensor adaptive_avg_pool2d_backward(const at::Tensor& grad, const at::Tensor& self) {
    if (!pool_dtype(self) || grad.scalar_type() != self.scalar_type() || !on_device(self.device(), grad)) {
        return cpu<ATEN_OP(_adaptive_avg_pool2d_backward)>(grad, self);
    }
    at::Tensor g = grad.contiguous();
    at::Tensor gi = at::empty(self.sizes(), self.options().memory_format(at::MemoryFormat::Contiguous));
    if (gi.numel() == 0) return gi;
    kernels::TensorView giv = planes(gi), gv = planes(g, false);
    queue(gi, "adaptive_avg_pool2d_backward", [giv, gv](runtime::ThreadPool* pool) {
        return kernels::adaptive_avg_pool2d_backward(giv, gv, pool);
    });
    return gi;
}

// ---- adaptive max pooling ---------------------------------------------------------------------

std::tuple<at::Tensor, at::Tensor> adaptive_max_pool2d(const at::Tensor& self, c10::IntArrayRef output_size) {
    bool ok = pool_dtype(self) && output_size.size() == 2 && output_size[0] > 0 && output_size[1] > 0;
    for (int64_t d = 1; ok && d < self.dim(); ++d) ok = self.size(d) > 0;
    if (!ok) return cpu<ATEN_OP(adaptive_max_pool2d)>(self, output_size);
    at::Tensor x = self.contiguous();
    at::Tensor out = at::empty(with_spatial(x, output_size[0], output_size[1]), x.options());
    at::Tensor idx = at::empty(out.sizes(), x.options().dtype(at::kLong));
    if (out.numel() == 0) return {out, idx};
    kernels::TensorView o = planes(out), i = planes(idx), xv = planes(x, false);
    queue(x, "adaptive_max_pool2d", [o, i, xv](runtime::ThreadPool* pool) {
        return kernels::adaptive_max_pool2d(o, i, xv, pool);
    });
    return {out, idx};
}

// Its indices address the input plane as max pooling's do: the same scatter of the gradient.
at::Tensor adaptive_max_pool2d_backward(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& indices) {
    if (!pool_dtype(self) || grad.scalar_type() != self.scalar_type() || !on_device(self.device(), grad) ||
        !on_device(self.device(), indices) || indices.scalar_type() != at::kLong || !grad.sizes().equals(indices.sizes())) {
        return cpu<ATEN_OP(adaptive_max_pool2d_backward)>(grad, self, indices);
    }
    return scatter_to_max(grad, self, indices, "adaptive_max_pool2d_backward");
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("max_pool2d_with_indices", max_pool2d);
    m.impl("max_pool2d_with_indices_backward", max_pool2d_backward);
    m.impl("avg_pool2d", avg_pool2d);
    m.impl("avg_pool2d_backward", avg_pool2d_backward);
    m.impl("_adaptive_avg_pool2d", adaptive_avg_pool2d);
    m.impl("_adaptive_avg_pool2d_backward", adaptive_avg_pool2d_backward);
    m.impl("adaptive_max_pool2d", adaptive_max_pool2d);
    m.impl("adaptive_max_pool2d_backward", adaptive_max_pool2d_backward);
}

}  // namespace ember::torch_glue
