// 2-d max, average, adaptive-average and adaptive-max pooling with their backwards, on kernels/pool,
// and 3-d average pooling (plain and adaptive) composed from the 2-d kernels. Shapes
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
bool float_dtype(at::ScalarType t) {
    return t == at::kFloat || t == at::kDouble || t == at::kBFloat16 || t == at::kHalf;
}

bool pool_dtype(const at::Tensor& t) {
    const bool empty_batch = t.dim() == 4 && t.size(0) == 0 && t.size(1) > 0 && t.size(2) > 0 && t.size(3) > 0;
    return float_dtype(t.scalar_type()) &&
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

// PyTorch's 2-d pooling keeps a channels-last input's layout in its results and in the input's
// gradient, on every device (and the shapes compiled graphs are traced with say so); the kernels
// here work on contiguous planes, so such results are copied into that layout.
at::Tensor in_layout_of(const at::Tensor& like, const at::Tensor& t) {
    if (like.dim() != 4 || like.suggest_memory_format() != at::MemoryFormat::ChannelsLast) return t;
    return t.contiguous(at::MemoryFormat::ChannelsLast);
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
    if (out.numel() == 0) return {in_layout_of(self, out), in_layout_of(self, idx)};
    kernels::TensorView o = planes(out), i = planes(idx), xv = planes(x, false);
    queue(x, "max_pool2d", [o, i, xv, p](runtime::ThreadPool* pool) { return kernels::max_pool2d(o, i, xv, p, pool); });
    return {in_layout_of(self, out), in_layout_of(self, idx)};
}

// The gradient of a max pooling (plain or adaptive): each output's gradient added at the input
// position its index names (h * W + w in the plane).
at::Tensor scatter_to_max(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& indices, const char* name) {
    at::Tensor g = grad.contiguous(), idx = indices.contiguous();
    at::Tensor gi = at::empty(self.sizes(), self.options().memory_format(at::MemoryFormat::Contiguous));
    if (gi.numel() == 0) return in_layout_of(self, gi);
    kernels::TensorView giv = planes(gi), gv = planes(g, false), iv = planes(idx, false);
    queue(gi, name, [giv, gv, iv](runtime::ThreadPool* pool) { return kernels::max_pool2d_backward(giv, gv, iv, pool); });
    return in_layout_of(self, gi);
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
    if (out.numel() == 0) return in_layout_of(self, out);
    kernels::TensorView o = planes(out), xv = planes(x, false);
    queue(x, "avg_pool2d", [o, xv, p](runtime::ThreadPool* pool) { return kernels::avg_pool2d(o, xv, p, pool); });
    return in_layout_of(self, out);
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
    if (gi.numel() == 0) return in_layout_of(self, gi);
    kernels::TensorView giv = planes(gi), gv = planes(g, false);
    queue(gi, "avg_pool2d_backward", [giv, gv, p](runtime::ThreadPool* pool) {
        return kernels::avg_pool2d_backward(giv, gv, p, pool);
    });
    return in_layout_of(self, gi);
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
    if (out.numel() == 0) return in_layout_of(self, out);
    kernels::TensorView o = planes(out), xv = planes(x, false);
    queue(x, "adaptive_avg_pool2d", [o, xv](runtime::ThreadPool* pool) { return kernels::adaptive_avg_pool2d(o, xv, pool); });
    return in_layout_of(self, out);
}

at::Tensor adaptive_avg_pool2d_backward(const at::Tensor& grad, const at::Tensor& self) {
    if (!pool_dtype(self) || grad.scalar_type() != self.scalar_type() || !on_device(self.device(), grad)) {
        return cpu<ATEN_OP(_adaptive_avg_pool2d_backward)>(grad, self);
    }
    at::Tensor g = grad.contiguous();
    at::Tensor gi = at::empty(self.sizes(), self.options().memory_format(at::MemoryFormat::Contiguous));
    if (gi.numel() == 0) return in_layout_of(self, gi);
    kernels::TensorView giv = planes(gi), gv = planes(g, false);
    queue(gi, "adaptive_avg_pool2d_backward", [giv, gv](runtime::ThreadPool* pool) {
        return kernels::adaptive_avg_pool2d_backward(giv, gv, pool);
    });
    return in_layout_of(self, gi);
}

// ---- adaptive max pooling ---------------------------------------------------------------------

std::tuple<at::Tensor, at::Tensor> adaptive_max_pool2d(const at::Tensor& self, c10::IntArrayRef output_size) {
    bool ok = pool_dtype(self) && output_size.size() == 2 && output_size[0] > 0 && output_size[1] > 0;
    for (int64_t d = 1; ok && d < self.dim(); ++d) ok = self.size(d) > 0;
    if (!ok) return cpu<ATEN_OP(adaptive_max_pool2d)>(self, output_size);
    at::Tensor x = self.contiguous();
    at::Tensor out = at::empty(with_spatial(x, output_size[0], output_size[1]), x.options());
    at::Tensor idx = at::empty(out.sizes(), x.options().dtype(at::kLong));
    if (out.numel() == 0) return {in_layout_of(self, out), in_layout_of(self, idx)};
    kernels::TensorView o = planes(out), i = planes(idx), xv = planes(x, false);
    queue(x, "adaptive_max_pool2d", [o, i, xv](runtime::ThreadPool* pool) {
        return kernels::adaptive_max_pool2d(o, i, xv, pool);
    });
    return {in_layout_of(self, out), in_layout_of(self, idx)};
}

// Its indices address the input plane as max pooling's do: the same scatter of the gradient.
at::Tensor adaptive_max_pool2d_backward(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& indices) {
    if (!pool_dtype(self) || grad.scalar_type() != self.scalar_type() || !on_device(self.device(), grad) ||
        !on_device(self.device(), indices) || indices.scalar_type() != at::kLong || !grad.sizes().equals(indices.sizes())) {
        return cpu<ATEN_OP(adaptive_max_pool2d_backward)>(grad, self, indices);
    }
    return scatter_to_max(grad, self, indices, "adaptive_max_pool2d_backward");
}

// ---- 3-d average pooling, as two 2-d poolings -------------------------------------------------
// A box average is separable: each depth slice's (H, W) plane is pooled first, then the depth
// axis, as a 2-d pooling of [depth, H'*W'] planes with a (kD, 1) window. A window's divisor (the
// whole window, or its part inside the input or the padding) is the product of the per-axis
// ones, so the result is the CPU's up to rounding; half types are pooled in float and rounded
// once. A divisor_override pools sums and divides at the end.

struct Pool3d {
    int64_t k[3], s[3], p[3];
    int64_t N, C, D, H, W;  // a 4-d input has N = 1
};

// As pool_dtype, for 4 or 5 dims.
bool pool3d_dtype(const at::Tensor& t) {
    bool empty_batch = t.dim() == 5 && t.size(0) == 0;
    for (int64_t d = 1; empty_batch && d < 5; ++d) empty_batch = t.size(d) > 0;
    return float_dtype(t.scalar_type()) &&
           (t.dim() == 4 || t.dim() == 5) && (t.numel() > 0 || empty_batch);
}

bool pool3d_args(c10::IntArrayRef kernel, c10::IntArrayRef stride, c10::IntArrayRef padding) {
    auto one_or_three = [](c10::IntArrayRef v) { return v.size() == 1 || v.size() == 3; };
    return one_or_three(kernel) && (stride.empty() || one_or_three(stride)) && one_or_three(padding);
}

Pool3d pool3d_shape(const at::Tensor& self, c10::IntArrayRef kernel, c10::IntArrayRef stride,
                    c10::IntArrayRef padding) {
    Pool3d g;
    for (int i = 0; i < 3; ++i) {
        g.k[i] = pick(kernel, i, 1);
        g.s[i] = pick(stride, i, g.k[i]);
        g.p[i] = pick(padding, i, 0);
    }
    g.N = self.dim() == 5 ? self.size(0) : 1;
    g.C = self.size(-4), g.D = self.size(-3), g.H = self.size(-2), g.W = self.size(-1);
    return g;
}

at::Tensor in_float(const at::Tensor& t) { return half_float(t.scalar_type()) ? t.to(at::kFloat) : t; }

at::Tensor& avg_pool3d_out(const at::Tensor& self, c10::IntArrayRef kernel, c10::IntArrayRef stride,
                           c10::IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                           std::optional<int64_t> divisor_override, at::Tensor& out) {
    // The CPU's avg_pool3d has no bfloat16 or float16 kernel; CUDA's (whose autocast policy keeps the op
    // in 16 bits) pools in float and rounds once, as this does.
    if (!pool3d_dtype(self) || !pool3d_args(kernel, stride, padding) ||
        (divisor_override && *divisor_override == 0) || out.scalar_type() != self.scalar_type()) {
        return cpu<ATEN_OP2(avg_pool3d, out)>(self, kernel, stride, padding, ceil_mode, count_include_pad,
                                              divisor_override, out);
    }
    Pool3d g = pool3d_shape(self, kernel, stride, padding);
    int64_t o[3];
    const int64_t in[3] = {g.D, g.H, g.W};
    for (int i = 0; i < 3; ++i) o[i] = at::native::pooling_output_shape<int64_t>(in[i], g.k[i], g.p[i], g.s[i], 1, ceil_mode);
    at::native::pool3d_shape_check(self, g.C, g.k[0], g.k[1], g.k[2], g.s[0], g.s[1], g.s[2], g.p[0], g.p[1], g.p[2],
                                   1, 1, 1, g.D, g.H, g.W, o[0], o[1], o[2], "avg_pool3d()");
    std::vector<int64_t> shape(self.sizes().begin(), self.sizes().end() - 3);
    shape.insert(shape.end(), {o[0], o[1], o[2]});
    resize_out(out, shape);
    if (out.numel() == 0) return out;
    const std::optional<int64_t> sum = divisor_override ? std::optional<int64_t>(1) : std::nullopt;
    at::Tensor x = in_float(self).reshape({g.N * g.C * g.D, g.H, g.W});
    at::Tensor y = at::avg_pool2d(x, {g.k[1], g.k[2]}, {g.s[1], g.s[2]}, {g.p[1], g.p[2]}, ceil_mode,
                                  count_include_pad, sum)
                       .view({g.N * g.C, 1, g.D, o[1] * o[2]});
    y = at::avg_pool2d(y, {g.k[0], 1}, {g.s[0], 1}, {g.p[0], 0}, ceil_mode, count_include_pad, sum);
    if (divisor_override) y = y.div(*divisor_override);
    return out.copy_(y.view(shape));
}

at::Tensor avg_pool3d(const at::Tensor& self, c10::IntArrayRef kernel, c10::IntArrayRef stride,
                      c10::IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                      std::optional<int64_t> divisor_override) {
    at::Tensor out = at::empty({0}, self.options());
    return avg_pool3d_out(self, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override, out);
}

// The adjoint of the two passes, in reverse order (the 2-d backwards read only their inputs' shapes).
at::Tensor& avg_pool3d_backward_out(const at::Tensor& grad, const at::Tensor& self, c10::IntArrayRef kernel,
                                    c10::IntArrayRef stride, c10::IntArrayRef padding, bool ceil_mode,
                                    bool count_include_pad, std::optional<int64_t> divisor_override,
                                    at::Tensor& grad_input) {
    if (!pool3d_dtype(self) || !pool3d_args(kernel, stride, padding) ||
        (divisor_override && *divisor_override == 0) || grad.scalar_type() != self.scalar_type() || grad.dim() != self.dim() || !on_device(self.device(), grad) ||
        grad_input.scalar_type() != self.scalar_type()) {
        return cpu<ATEN_OP2(avg_pool3d_backward, grad_input)>(grad, self, kernel, stride, padding, ceil_mode,
                                                               count_include_pad, divisor_override, grad_input);
    }
    Pool3d g = pool3d_shape(self, kernel, stride, padding);
    const int64_t OD = grad.size(-3), OH = grad.size(-2), OW = grad.size(-1);
    at::native::avg_pool3d_backward_shape_check(self, grad, g.C, g.k[0], g.k[1], g.k[2], g.s[0], g.s[1], g.s[2],
                                                g.p[0], g.p[1], g.p[2], g.D, g.H, g.W, OD, OH, OW,
                                                "avg_pool3d_backward()");
    resize_out(grad_input, self.sizes());
    if (grad_input.numel() == 0) return grad_input;
    const std::optional<int64_t> sum = divisor_override ? std::optional<int64_t>(1) : std::nullopt;
    at::Tensor gy = in_float(grad).reshape({g.N * g.C, 1, OD, OH * OW});
    if (divisor_override) gy = gy.div(*divisor_override);
    at::TensorOptions opts = gy.options();
    at::Tensor gd = at::avg_pool2d_backward(gy, at::empty({g.N * g.C, 1, g.D, OH * OW}, opts), {g.k[0], 1},
                                            {g.s[0], 1}, {g.p[0], 0}, ceil_mode, count_include_pad, sum);
    at::Tensor gx = at::avg_pool2d_backward(gd.view({g.N * g.C * g.D, OH, OW}),
                                            at::empty({g.N * g.C * g.D, g.H, g.W}, opts), {g.k[1], g.k[2]},
                                            {g.s[1], g.s[2]}, {g.p[1], g.p[2]}, ceil_mode, count_include_pad, sum);
    return grad_input.copy_(gx.view(self.sizes()));
}

at::Tensor avg_pool3d_backward(const at::Tensor& grad, const at::Tensor& self, c10::IntArrayRef kernel,
                               c10::IntArrayRef stride, c10::IntArrayRef padding, bool ceil_mode,
                               bool count_include_pad, std::optional<int64_t> divisor_override) {
    at::Tensor gi = at::empty({0}, self.options());
    return avg_pool3d_backward_out(grad, self, kernel, stride, padding, ceil_mode, count_include_pad,
                                   divisor_override, gi);
}

// Adaptive windows are separable the same way: planes first, then depth.
at::Tensor adaptive_avg_pool3d(const at::Tensor& self, c10::SymIntArrayRef output_size) {
    if (!pool3d_dtype(self) || output_size.size() != 3) return cpu_symint<ATEN_OP(_adaptive_avg_pool3d)>(self, output_size);
    const int64_t OD = output_size[0].expect_int(), OH = output_size[1].expect_int(), OW = output_size[2].expect_int();
    if (OD <= 0 || OH <= 0 || OW <= 0) return cpu_symint<ATEN_OP(_adaptive_avg_pool3d)>(self, output_size);
    Pool3d g = pool3d_shape(self, {}, {}, {});
    std::vector<int64_t> shape(self.sizes().begin(), self.sizes().end() - 3);
    shape.insert(shape.end(), {OD, OH, OW});
    if (self.numel() == 0) return at::empty(shape, self.options());
    at::Tensor y = at::_adaptive_avg_pool2d(in_float(self).reshape({g.N * g.C * g.D, g.H, g.W}), {OH, OW})
                       .view({g.N * g.C, 1, g.D, OH * OW});
    y = at::_adaptive_avg_pool2d(y, {OD, OH * OW});
    return y.view(shape).to(self.scalar_type());
}

at::Tensor adaptive_avg_pool3d_backward(const at::Tensor& grad, const at::Tensor& self) {
    if (!pool3d_dtype(self) || grad.scalar_type() != self.scalar_type() || grad.dim() != self.dim() ||
        !on_device(self.device(), grad)) {
        return cpu<ATEN_OP(_adaptive_avg_pool3d_backward)>(grad, self);
    }
    if (self.numel() == 0) return at::empty(self.sizes(), self.options());
    Pool3d g = pool3d_shape(self, {}, {}, {});
    const int64_t OD = grad.size(-3), OH = grad.size(-2), OW = grad.size(-1);
    at::Tensor gy = in_float(grad).reshape({g.N * g.C, 1, OD, OH * OW});
    at::Tensor gd = at::_adaptive_avg_pool2d_backward(gy, at::empty({g.N * g.C, 1, g.D, OH * OW}, gy.options()));
    at::Tensor gx = at::_adaptive_avg_pool2d_backward(gd.view({g.N * g.C * g.D, OH, OW}),
                                                      at::empty({g.N * g.C * g.D, g.H, g.W}, gy.options()));
    return gx.view(self.sizes()).to(self.scalar_type());
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("avg_pool3d", avg_pool3d);
    m.impl("avg_pool3d.out", avg_pool3d_out);
    m.impl("avg_pool3d_backward", avg_pool3d_backward);
    m.impl("avg_pool3d_backward.grad_input", avg_pool3d_backward_out);
    m.impl("_adaptive_avg_pool3d", adaptive_avg_pool3d);
    m.impl("_adaptive_avg_pool3d_backward", adaptive_avg_pool3d_backward);
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
