// Resampling: nearest, nearest-exact and linear (1d, bilinear 2d, trilinear 3d) upsampling,
// forward and backward, composed from index_select / index_add_ along one spatial axis at a time
// with source indices and weights worked out on the host in the CPU kernels' arithmetic, so
// rounding at cell edges agrees. Integer inputs and other forms take the CPU fallback.
#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <torch/library.h>

#include "glue.h"

namespace ember::torch_glue {
namespace {

// ---- nearest upsampling ------------------------------------------------------------------------

// Source index of each output position along one axis, in the float arithmetic PyTorch's CPU
// kernels use (so rounding at the cell edges agrees): nearest floors dst * scale (with shortcuts
// for equal and doubled sizes), nearest-exact floors (dst + 0.5) * scale.
at::Tensor nearest_source(int64_t in, int64_t out, std::optional<double> scale, bool exact, c10::Device dev) {
    const float s = (scale && *scale > 0) ? static_cast<float>(1.0 / *scale)
                                          : static_cast<float>(in) / static_cast<float>(out);
    std::vector<int64_t> idx(static_cast<size_t>(out));
    for (int64_t i = 0; i < out; ++i) {
        int64_t src;
        if (!exact && out == in) src = i;
        else if (!exact && out == 2 * in) src = i >> 1;
        else if (exact) src = static_cast<int64_t>(std::floor(static_cast<float>((static_cast<double>(i) + 0.5) * s)));
        else src = static_cast<int64_t>(std::floor(static_cast<float>(i) * s));
        idx[static_cast<size_t>(i)] = std::min(src, in - 1);
    }
    return at::tensor(idx, at::kLong).to(dev);
}

bool nearest_native(const at::Tensor& t, size_t spatial) {
    return at::isFloatingType(t.scalar_type()) && t.dim() == static_cast<int64_t>(spatial) + 2;
}

// Each spatial axis gathered by its source indices; the backward adds each output gradient back
// into its source cell, axis by axis in reverse.
at::Tensor nearest_forward(const at::Tensor& x, at::IntArrayRef out_size, const std::vector<std::optional<double>>& scales,
                           bool exact) {
    TORCH_CHECK(out_size.size() == scales.size(), "upsample: expected ", scales.size(), " output sizes, got ", out_size.size());
    at::Tensor y = x;
    for (size_t a = 0; a < scales.size(); ++a) {
        const int64_t d = static_cast<int64_t>(a) + 2;
        TORCH_CHECK(x.size(d) > 0 && out_size[a] > 0, "upsample: input and output sizes should be greater than 0, but got input ",
                    x.sizes(), " and output ", out_size);
        y = y.index_select(d, nearest_source(x.size(d), out_size[a], scales[a], exact, x.device()));
    }
    return y.contiguous(x.suggest_memory_format());
}

at::Tensor nearest_backward(const at::Tensor& grad, at::IntArrayRef out_size, at::IntArrayRef in_size,
                            const std::vector<std::optional<double>>& scales, bool exact) {
    at::Tensor g = grad;
    for (size_t a = scales.size(); a-- > 0;) {
        const int64_t d = static_cast<int64_t>(a) + 2;
        std::vector<int64_t> shape(g.sizes().begin(), g.sizes().end());
        shape[static_cast<size_t>(d)] = in_size[static_cast<size_t>(d)];
        g = at::zeros(shape, grad.options()).index_add_(d, nearest_source(in_size[d], out_size[a], scales[a], exact, grad.device()), g);
    }
    return g;
}

#define EMBER_NEAREST(name, exact, n, SCALE_PARAMS, ...)                                                          \
    at::Tensor name(const at::Tensor& self, at::IntArrayRef out_size, SCALE_PARAMS) {                                 \
        if (!nearest_native(self, n)) return cpu<ATEN_OP(name)>(self, out_size, __VA_ARGS__);                          \
        return nearest_forward(self, out_size, {__VA_ARGS__}, exact);                                                 \
    }                                                                                                                 \
    at::Tensor& name##_out(const at::Tensor& self, at::IntArrayRef out_size, SCALE_PARAMS, at::Tensor& out) {         \
        if (!nearest_native(self, n) || out.scalar_type() != self.scalar_type())                                       \
            return cpu<ATEN_OP2(name, out)>(self, out_size, __VA_ARGS__, out);                                         \
        at::Tensor r = nearest_forward(self, out_size, {__VA_ARGS__}, exact);                                         \
        resize_out(out, r.sizes(), {&self});                                                                          \
        return out.copy_(r);                                                                                          \
    }                                                                                                                 \
    at::Tensor name##_backward(const at::Tensor& grad, at::IntArrayRef out_size, at::IntArrayRef in_size,             \
                               SCALE_PARAMS) {                                                                        \
        if (!nearest_native(grad, n)) return cpu<ATEN_OP(name##_backward)>(grad, out_size, in_size, __VA_ARGS__);      \
        return nearest_backward(grad, out_size, in_size, {__VA_ARGS__}, exact);                                       \
    }                                                                                                                 \
    at::Tensor& name##_backward_out(const at::Tensor& grad, at::IntArrayRef out_size, at::IntArrayRef in_size,        \
                                    SCALE_PARAMS, at::Tensor& grad_input) {                                           \
        if (!nearest_native(grad, n) || grad_input.scalar_type() != grad.scalar_type())                                \
            return cpu<ATEN_OP2(name##_backward, grad_input)>(grad, out_size, in_size, __VA_ARGS__, grad_input);       \
        at::Tensor r = nearest_backward(grad, out_size, in_size, {__VA_ARGS__}, exact);                               \
        resize_out(grad_input, r.sizes(), {&grad});                                                                   \
        return grad_input.copy_(r);                                                                                   \
    }

#define EMBER_P(x) std::optional<double> x
#define COMMA ,
EMBER_NEAREST(upsample_nearest1d, false, 1, EMBER_P(sw), sw)
EMBER_NEAREST(_upsample_nearest_exact1d, true, 1, EMBER_P(sw), sw)
EMBER_NEAREST(upsample_nearest2d, false, 2, EMBER_P(sh) COMMA EMBER_P(sw), sh, sw)
EMBER_NEAREST(_upsample_nearest_exact2d, true, 2, EMBER_P(sh) COMMA EMBER_P(sw), sh, sw)
EMBER_NEAREST(upsample_nearest3d, false, 3, EMBER_P(sd) COMMA EMBER_P(sh) COMMA EMBER_P(sw), sd, sh, sw)
EMBER_NEAREST(_upsample_nearest_exact3d, true, 3, EMBER_P(sd) COMMA EMBER_P(sh) COMMA EMBER_P(sw), sd, sh, sw)
#undef EMBER_P
#undef COMMA
#undef EMBER_NEAREST

// ---- linear upsampling (linear1d, bilinear2d, trilinear3d) --------------------------------------

// Per output position along one axis: the two source cells and their weights, in the arithmetic
// of PyTorch's CPU kernels (float, or double for double tensors): the scale is (in-1)/(out-1)
// with align_corners, else 1/scale_factor or in/out; the source is scale*dst, or
// scale*(dst+0.5)-0.5 clamped at 0; the upper cell is clamped to the last one.
template <typename T>
void linear_source(int64_t in, int64_t out, bool align_corners, std::optional<double> scale, std::vector<int64_t>& i0,
                   std::vector<int64_t>& i1, std::vector<T>& l0, std::vector<T>& l1) {
    T s;
    if (align_corners) s = out > 1 ? static_cast<T>(in - 1) / static_cast<T>(out - 1) : T(0);
    else s = (scale && *scale > 0) ? static_cast<T>(1.0 / *scale) : static_cast<T>(in) / static_cast<T>(out);
    for (int64_t d = 0; d < out; ++d) {
        T src = align_corners ? s * static_cast<T>(d) : s * (static_cast<T>(d) + T(0.5)) - T(0.5);
        if (!align_corners && src < T(0)) src = T(0);
        const int64_t lo = std::min(static_cast<int64_t>(std::floor(src)), in - 1);
        const T lambda = std::min(std::max(src - static_cast<T>(lo), T(0)), T(1));
        i0.push_back(lo);
        i1.push_back(lo + (lo < in - 1 ? 1 : 0));
        l0.push_back(T(1) - lambda);
        l1.push_back(lambda);
    }
}

struct LinearAxis {
    at::Tensor i0, i1, l0, l1;  // indices int64 [out]; weights [1, .., out, .., 1] broadcasting along the axis
};

LinearAxis linear_axis(int64_t in, int64_t out, bool align_corners, std::optional<double> scale, int64_t dim,
                       int64_t ndim, const at::TensorOptions& opts) {
    std::vector<int64_t> i0, i1;
    std::vector<int64_t> shape(static_cast<size_t>(ndim), 1);
    shape[static_cast<size_t>(dim)] = out;
    LinearAxis a;
    if (opts.dtype() == at::kDouble) {
        std::vector<double> l0, l1;
        linear_source<double>(in, out, align_corners, scale, i0, i1, l0, l1);
        a.l0 = at::tensor(l0, at::kDouble);
        a.l1 = at::tensor(l1, at::kDouble);
    } else {
        std::vector<float> l0, l1;
        linear_source<float>(in, out, align_corners, scale, i0, i1, l0, l1);
        a.l0 = at::tensor(l0, at::kFloat);
        a.l1 = at::tensor(l1, at::kFloat);
    }
    a.l0 = a.l0.to(opts.device()).view(shape);
    a.l1 = a.l1.to(opts.device()).view(shape);
    a.i0 = at::tensor(i0, at::kLong).to(opts.device());
    a.i1 = at::tensor(i1, at::kLong).to(opts.device());
    return a;
}

// Low-precision tensors interpolate in float and round once, as the CPU kernels do.
at::ScalarType linear_acc(const at::Tensor& t) {
    return t.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

// Separable: the last axis first, then the ones before it, which is the order of the CPU's
// sums (h0 * (w0 * x00 + w1 * x01) + h1 * (...)).
at::Tensor linear_forward(const at::Tensor& x, at::IntArrayRef out_size, bool align_corners,
                          const std::vector<std::optional<double>>& scales) {
    TORCH_CHECK(out_size.size() == scales.size(), "upsample: expected ", scales.size(), " output sizes, got ",
                out_size.size());
    at::Tensor y = x.to(linear_acc(x));
    for (size_t a = scales.size(); a-- > 0;) {
        const int64_t d = static_cast<int64_t>(a) + 2;
        TORCH_CHECK(x.size(d) > 0 && out_size[a] > 0, "upsample: input and output sizes should be greater than 0, but got input ",
                    x.sizes(), " and output ", out_size);
        LinearAxis ax = linear_axis(x.size(d), out_size[a], align_corners, scales[a], d, x.dim(), y.options());
        y = y.index_select(d, ax.i0).mul(ax.l0).add_(y.index_select(d, ax.i1).mul(ax.l1));
    }
    return y.to(x.scalar_type()).contiguous(x.suggest_memory_format());
}

// The adjoint, axis by axis in the reverse order: each output gradient goes back to its two
// source cells, weighted.
at::Tensor linear_backward(const at::Tensor& grad, at::IntArrayRef out_size, at::IntArrayRef in_size,
                           bool align_corners, const std::vector<std::optional<double>>& scales) {
    TORCH_CHECK(in_size.size() == scales.size() + 2, "upsample backward: expected input_size with ", scales.size() + 2,
                " elements, got ", in_size.size());
    at::Tensor g = grad.to(linear_acc(grad));
    for (size_t a = 0; a < scales.size(); ++a) {
        const int64_t d = static_cast<int64_t>(a) + 2;
        LinearAxis ax = linear_axis(in_size[d], out_size[a], align_corners, scales[a], d, grad.dim(), g.options());
        std::vector<int64_t> shape(g.sizes().begin(), g.sizes().end());
        shape[static_cast<size_t>(d)] = in_size[static_cast<size_t>(d)];
        g = at::zeros(shape, g.options()).index_add_(d, ax.i0, g.mul(ax.l0)).index_add_(d, ax.i1, g.mul(ax.l1));
    }
    return g.to(grad.scalar_type());
}

#define EMBER_LINEAR(name, n, SCALE_PARAMS, ...)                                                                  \
    at::Tensor name(const at::Tensor& self, at::IntArrayRef out_size, bool align_corners, SCALE_PARAMS) {            \
        if (!nearest_native(self, n)) return cpu<ATEN_OP(name)>(self, out_size, align_corners, __VA_ARGS__);          \
        return linear_forward(self, out_size, align_corners, {__VA_ARGS__});                                         \
    }                                                                                                                \
    at::Tensor& name##_out(const at::Tensor& self, at::IntArrayRef out_size, bool align_corners, SCALE_PARAMS,       \
                           at::Tensor& out) {                                                                        \
        if (!nearest_native(self, n) || out.scalar_type() != self.scalar_type())                                      \
            return cpu<ATEN_OP2(name, out)>(self, out_size, align_corners, __VA_ARGS__, out);                         \
        at::Tensor r = linear_forward(self, out_size, align_corners, {__VA_ARGS__});                                 \
        resize_out(out, r.sizes(), {&self});                                                                         \
        return out.copy_(r);                                                                                         \
    }                                                                                                                \
    at::Tensor name##_backward(const at::Tensor& grad, at::IntArrayRef out_size, at::IntArrayRef in_size,            \
                               bool align_corners, SCALE_PARAMS) {                                                   \
        if (!nearest_native(grad, n))                                                                                \
            return cpu<ATEN_OP(name##_backward)>(grad, out_size, in_size, align_corners, __VA_ARGS__);                \
        return linear_backward(grad, out_size, in_size, align_corners, {__VA_ARGS__});                               \
    }                                                                                                                \
    at::Tensor& name##_backward_out(const at::Tensor& grad, at::IntArrayRef out_size, at::IntArrayRef in_size,       \
                                    bool align_corners, SCALE_PARAMS, at::Tensor& grad_input) {                      \
        if (!nearest_native(grad, n) || grad_input.scalar_type() != grad.scalar_type())                               \
            return cpu<ATEN_OP2(name##_backward, grad_input)>(grad, out_size, in_size, align_corners, __VA_ARGS__,    \
                                                               grad_input);                                          \
        at::Tensor r = linear_backward(grad, out_size, in_size, align_corners, {__VA_ARGS__});                       \
        resize_out(grad_input, r.sizes(), {&grad});                                                                  \
        return grad_input.copy_(r);                                                                                  \
    }

#define EMBER_P(x) std::optional<double> x
#define COMMA ,
EMBER_LINEAR(upsample_linear1d, 1, EMBER_P(sw), sw)
EMBER_LINEAR(upsample_bilinear2d, 2, EMBER_P(sh) COMMA EMBER_P(sw), sh, sw)
EMBER_LINEAR(upsample_trilinear3d, 3, EMBER_P(sd) COMMA EMBER_P(sh) COMMA EMBER_P(sw), sd, sh, sw)
#undef EMBER_P
#undef COMMA
#undef EMBER_LINEAR

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("upsample_nearest1d", upsample_nearest1d);
    m.impl("upsample_nearest1d.out", upsample_nearest1d_out);
    m.impl("upsample_nearest1d_backward", upsample_nearest1d_backward);
    m.impl("upsample_nearest1d_backward.grad_input", upsample_nearest1d_backward_out);
    m.impl("_upsample_nearest_exact1d", _upsample_nearest_exact1d);
    m.impl("_upsample_nearest_exact1d.out", _upsample_nearest_exact1d_out);
    m.impl("_upsample_nearest_exact1d_backward", _upsample_nearest_exact1d_backward);
    m.impl("_upsample_nearest_exact1d_backward.grad_input", _upsample_nearest_exact1d_backward_out);
    m.impl("upsample_nearest2d", upsample_nearest2d);
    m.impl("upsample_nearest2d.out", upsample_nearest2d_out);
    m.impl("upsample_nearest2d_backward", upsample_nearest2d_backward);
    m.impl("upsample_nearest2d_backward.grad_input", upsample_nearest2d_backward_out);
    m.impl("_upsample_nearest_exact2d", _upsample_nearest_exact2d);
    m.impl("_upsample_nearest_exact2d.out", _upsample_nearest_exact2d_out);
    m.impl("_upsample_nearest_exact2d_backward", _upsample_nearest_exact2d_backward);
    m.impl("_upsample_nearest_exact2d_backward.grad_input", _upsample_nearest_exact2d_backward_out);
    m.impl("upsample_nearest3d", upsample_nearest3d);
    m.impl("upsample_nearest3d.out", upsample_nearest3d_out);
    m.impl("upsample_nearest3d_backward", upsample_nearest3d_backward);
    m.impl("upsample_nearest3d_backward.grad_input", upsample_nearest3d_backward_out);
    m.impl("_upsample_nearest_exact3d", _upsample_nearest_exact3d);
    m.impl("_upsample_nearest_exact3d.out", _upsample_nearest_exact3d_out);
    m.impl("_upsample_nearest_exact3d_backward", _upsample_nearest_exact3d_backward);
    m.impl("_upsample_nearest_exact3d_backward.grad_input", _upsample_nearest_exact3d_backward_out);
    m.impl("upsample_linear1d", upsample_linear1d);
    m.impl("upsample_linear1d.out", upsample_linear1d_out);
    m.impl("upsample_linear1d_backward", upsample_linear1d_backward);
    m.impl("upsample_linear1d_backward.grad_input", upsample_linear1d_backward_out);
    m.impl("upsample_bilinear2d", upsample_bilinear2d);
    m.impl("upsample_bilinear2d.out", upsample_bilinear2d_out);
    m.impl("upsample_bilinear2d_backward", upsample_bilinear2d_backward);
    m.impl("upsample_bilinear2d_backward.grad_input", upsample_bilinear2d_backward_out);
    m.impl("upsample_trilinear3d", upsample_trilinear3d);
    m.impl("upsample_trilinear3d.out", upsample_trilinear3d_out);
    m.impl("upsample_trilinear3d_backward", upsample_trilinear3d_backward);
    m.impl("upsample_trilinear3d_backward.grad_input", upsample_trilinear3d_backward_out);
}

}  // namespace ember::torch_glue
