// Resampling, forward and backward: nearest, nearest-exact and linear (1d, bilinear 2d,
// trilinear 3d) upsampling, composed from index_select / index_add_ along one spatial axis at a
// time with source indices and weights worked out on the host in the CPU kernels' arithmetic, so
// rounding at cell edges agrees; and grid_sampler_2d from gathers and scatter-adds. Integer
// inputs and other forms take the CPU fallback.
#include <algorithm>
#include <array>
#include <utility>
#include <cmath>
#include <optional>
#include <cstring>
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
// A table of source indices or weights on the device, copied there by a queued task that owns
// the values: no synchronizing upload, so the ops stay asynchronous and can be captured in a
// graph (each replay copies the same table, which depends only on the sizes).
template <typename T>
at::Tensor device_table(std::vector<T> values, at::ScalarType type, c10::Device dev) {
    at::Tensor t = at::empty({static_cast<int64_t>(values.size())}, at::TensorOptions().dtype(type).device(dev));
    if (values.empty()) return t;
    void* d = t.data_ptr();
    queue(t, "upload_table", [d, v = std::move(values)](runtime::ThreadPool*) {
        std::memcpy(d, v.data(), v.size() * sizeof(T));
        return Status();
    });
    return t;
}

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
    return device_table(std::move(idx), at::kLong, dev);
}

// The forward also takes uint8 images, as the CPU kernel does (it copies values).
bool nearest_native(const at::Tensor& t, size_t spatial, bool forward = false) {
    return (at::isFloatingType(t.scalar_type()) || (forward && t.scalar_type() == at::kByte)) &&
           t.dim() == static_cast<int64_t>(spatial) + 2;
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
        if (!nearest_native(self, n, true)) return cpu<ATEN_OP(name)>(self, out_size, __VA_ARGS__);                    \
        return nearest_forward(self, out_size, {__VA_ARGS__}, exact);                                                 \
    }                                                                                                                 \
    at::Tensor& name##_out(const at::Tensor& self, at::IntArrayRef out_size, SCALE_PARAMS, at::Tensor& out) {         \
        if (!nearest_native(self, n, true) || out.scalar_type() != self.scalar_type())                                 \
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
        a.l0 = device_table(std::move(l0), at::kDouble, opts.device());
        a.l1 = device_table(std::move(l1), at::kDouble, opts.device());
    } else {
        std::vector<float> l0, l1;
        linear_source<float>(in, out, align_corners, scale, i0, i1, l0, l1);
        a.l0 = device_table(std::move(l0), at::kFloat, opts.device());
        a.l1 = device_table(std::move(l1), at::kFloat, opts.device());
    }
    a.l0 = a.l0.view(shape);
    a.l1 = a.l1.view(shape);
    a.i0 = device_table(std::move(i0), at::kLong, opts.device());
    a.i1 = device_table(std::move(i1), at::kLong, opts.device());
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

// ---- grid_sampler_2d/3d (F.grid_sample, spatial transformers, deformable attention, 3-d image
// registration): bilinear/trilinear and nearest sampling with zeros, border and reflection padding, as gathers from the flattened
// input and scatter-adds into its gradient. The coordinate arithmetic is the CPU kernel's
// (GridSampler.h): unnormalize, then clip or reflect, each with its derivative for the grid's
// gradient; a corner outside the input contributes nothing, NaN weights included. Bicubic (2-d)
// takes 16 taps with Keys' cubic weights (A = -0.75), the padding applied to each tap's position
// and the grid's gradient through the weights alone, as the CPU kernel computes it. Other dtypes
// than float/double take the CPU fallback.

enum class GridPad { kZeros = 0, kBorder = 1, kReflection = 2 };
constexpr int64_t kGridBilinear = 0, kGridNearest = 1, kGridBicubic = 2;

// `d` spatial dims: 2 (input [N, C, H, W], grid [N, Ho, Wo, 2]) or 3 (input [N, C, D, H, W],
// grid [N, Do, Ho, Wo, 3]); grid[..., 0] indexes the last input dim (x), [..., 1] the one before.
bool grid_native(const at::Tensor& input, const at::Tensor& grid, int64_t mode, int64_t d) {
    auto t = input.scalar_type();
    return (mode == kGridBilinear || mode == kGridNearest || (mode == kGridBicubic && d == 2)) &&
           (t == at::kFloat || t == at::kDouble) &&
           grid.scalar_type() == t && input.is_privateuseone() && grid.is_privateuseone() && input.dim() == d + 2 &&
           grid.dim() == d + 2 && grid.size(-1) == d && input.size(0) == grid.size(0) && input.numel() > 0;
}

// Clip to [0, size - 1]; d(out)/d(in) is 1 strictly inside, 0 where clipped (CPU's convention).
// A NaN coordinate (an infinite one after reflection) clips to 0, as the CPU's and CUDA's
// max(x, 0) make it: it samples the border instead of vanishing.
std::pair<at::Tensor, at::Tensor> clip_coordinates(const at::Tensor& in, int64_t size) {
    const double limit = static_cast<double>(size - 1);
    at::Tensor grad = in.gt(0).logical_and(in.lt(limit)).to(in.scalar_type());
    return {at::nan_to_num(in, 0.0).clamp(0, limit), grad};
}

// Reflect into [twice_low / 2, twice_high / 2] by folding, with the sign of each fold.
std::pair<at::Tensor, at::Tensor> reflect_coordinates(const at::Tensor& in, int64_t twice_low, int64_t twice_high) {
    if (twice_low == twice_high) return {at::zeros_like(in), at::zeros_like(in)};
    const double lo = twice_low / 2.0, span = (twice_high - twice_low) / 2.0;
    at::Tensor x = in.sub(lo);
    at::Tensor sign = at::where(x.lt(0), at::scalar_tensor(-1.0, x.options()), at::scalar_tensor(1.0, x.options()));
    x = x.abs();
    at::Tensor extra = at::fmod(x, span);
    at::Tensor odd = at::fmod(at::floor(x.div(span)), 2).ne(0);
    at::Tensor out = at::where(odd, extra.neg().add(span + lo), extra.add(lo));
    return {out, at::where(odd, sign.neg(), sign)};
}

// Input coordinates from grid values in [-1, 1] along an axis of `size`, and d(coord)/d(grid).
std::pair<at::Tensor, at::Tensor> source_coordinates(const at::Tensor& g, int64_t size, GridPad pad, bool align) {
    at::Tensor coord = align ? g.add(1).mul((size - 1) / 2.0) : g.add(1).mul(size).sub(1).div(2);
    at::Tensor grad = at::full_like(g, align ? (size - 1) / 2.0 : size / 2.0);
    if (pad == GridPad::kBorder) {
        auto [c, dc] = clip_coordinates(coord, size);
        return {c, grad.mul(dc)};
    }
    if (pad == GridPad::kReflection) {
        auto [r, dr] = align ? reflect_coordinates(coord, 0, 2 * (size - 1)) : reflect_coordinates(coord, -1, 2 * size - 1);
        auto [c, dc] = clip_coordinates(r, size);
        return {c, grad.mul(dr).mul(dc)};
    }
    return {coord, grad};
}

struct GridCorner {
    at::Tensor lin;    // int64 [N, 1, L]: flat input index (0 where outside), broadcast over C
    at::Tensor valid;  // bool [N, 1, L]
    at::Tensor weight;  // [N, 1, L]
    std::vector<at::Tensor> dw;  // d(weight)/d(coordinate) per axis, x first (linear modes)
};

struct GridSample {
    int64_t n = 0, c = 0, L = 0;  // L: output points per batch entry
    int64_t spatial = 1;          // input points per channel
    std::vector<at::Tensor> mult;  // d(coordinate)/d(grid) per axis, x first, [N, 1, L]
    std::vector<GridCorner> corners;
};

// Keys' cubic convolution weights of the four taps at offsets -1, 0, 1, 2 from floor(x), for
// t = x - floor(x), and their derivatives d/dt.
std::pair<std::array<at::Tensor, 4>, std::array<at::Tensor, 4>> cubic_weights(const at::Tensor& t) {
    constexpr double A = -0.75;
    auto near = [](const at::Tensor& x) { return x.mul(A + 2).sub(A + 3).mul(x).mul(x).add(1); };  // |x| <= 1
    auto far = [](const at::Tensor& x) { return x.mul(A).sub(5 * A).mul(x).add(8 * A).mul(x).sub(4 * A); };  // 1 < |x| < 2
    auto d_near = [](const at::Tensor& x) { return x.mul(3 * (A + 2)).sub(2 * (A + 3)).mul(x); };
    auto d_far = [](const at::Tensor& x) { return x.mul(3 * A).sub(10 * A).mul(x).add(8 * A); };
    at::Tensor t1 = t.add(1), u = t.neg().add(1), u1 = t.neg().add(2);
    return {{far(t1), near(t), near(u), far(u1)}, {d_far(t1), d_near(t), d_near(u).neg(), d_far(u1).neg()}};
}

// The 16 bicubic taps of each output point (2-d), as corners of `s`: positions floor(x) - 1 ..
// floor(x) + 2 per axis, each padded (clipped or reflected) on its own; the grid's gradient
// goes through the weights only (d(coordinate)/d(grid) is the unnormalization's factor).
template <typename AddCorner>
void add_bicubic_taps(const at::Tensor& grid, const std::vector<int64_t>& size, GridPad pad, bool align,
                      GridSample& s, AddCorner&& corner) {
    std::array<std::array<at::Tensor, 4>, 2> pos, w, dw;
    s.mult.resize(2);
    for (int64_t a = 0; a < 2; ++a) {
        at::Tensor g = grid.select(-1, a).reshape({s.n, 1, s.L});
        at::Tensor coord = align ? g.add(1).mul((size[a] - 1) / 2.0) : g.add(1).mul(size[a]).sub(1).div(2);
        s.mult[a] = at::full_like(g, align ? (size[a] - 1) / 2.0 : size[a] / 2.0);
        // Far-out or NaN coordinates become a fixed far-out value, so that floor and the int64
        // conversion stay defined (every tap there is outside or padded to the border).
        at::Tensor tamed = at::where(coord.isnan(), at::scalar_tensor(-1e9, coord.options()), coord).clamp(-1e9, 1e9);
        at::Tensor base = at::floor(tamed);
        auto [weights, derivs] = cubic_weights(coord.sub(base));
        w[a] = weights;
        dw[a] = derivs;
        for (int64_t i = 0; i < 4; ++i) {
            at::Tensor p = base.add(static_cast<double>(i - 1));
            if (pad == GridPad::kBorder) p = clip_coordinates(p, size[a]).first;
            if (pad == GridPad::kReflection) {
                p = (align ? reflect_coordinates(p, 0, 2 * (size[a] - 1))
                           : reflect_coordinates(p, -1, 2 * size[a] - 1)).first;
                p = clip_coordinates(p, size[a]).first;
            }
            pos[a][i] = p;
        }
    }
    for (int64_t j = 0; j < 4; ++j)      // y
        for (int64_t i = 0; i < 4; ++i)  // x
            corner({pos[0][i], pos[1][j]}, w[0][i].mul(w[1][j]), {dw[0][i].mul(w[1][j]), w[0][i].mul(dw[1][j])});
}

GridSample grid_corners(const at::Tensor& input, const at::Tensor& grid, int64_t mode, GridPad pad, bool align) {
    const int64_t d = grid.size(-1);
    GridSample s;
    s.n = input.size(0);
    s.c = input.size(1);
    s.L = grid.numel() / (s.n * d);
    std::vector<int64_t> size(d);  // per axis, x first
    for (int64_t a = 0; a < d; ++a) size[a] = input.size(input.dim() - 1 - a);
    for (int64_t a = 0; a < d; ++a) s.spatial *= size[a];
    // Far-out coordinates become a fixed far-out value, so that floor and the int64 conversion
    // stay defined; every corner there is outside, whatever the weights.
    auto tame = [](const at::Tensor& v, int64_t n) {
        return at::where(v.isnan(), at::scalar_tensor(-10.0, v.options()), v).clamp(-10, static_cast<double>(n + 10));
    };
    std::vector<at::Tensor> coord(d), tamed(d);
    for (int64_t a = 0; a < d && mode != kGridBicubic; ++a) {
        auto [ic, m] = source_coordinates(grid.select(-1, a).reshape({s.n, 1, s.L}), size[a], pad, align);
        coord[a] = ic;
        tamed[a] = tame(ic, size[a]);
        s.mult.push_back(m);
    }
    // A corner at integer positions `at` (one per axis) with its weight and per-axis derivatives.
    auto corner = [&](const std::vector<at::Tensor>& at_, at::Tensor weight, std::vector<at::Tensor> dw) {
        at::Tensor valid, lin;
        for (int64_t a = d - 1; a >= 0; --a) {  // row-major: the last axis (x) varies fastest
            at::Tensor i = at_[a].to(at::kLong);
            at::Tensor ok = i.ge(0).logical_and(i.lt(size[a]));
            valid = valid.defined() ? valid.logical_and(ok) : ok;
            lin = lin.defined() ? lin.mul(size[a]).add(i) : i;
        }
        lin = at::where(valid, lin, at::scalar_tensor(0, lin.options()));
        s.corners.push_back({lin, valid, std::move(weight), std::move(dw)});
    };
    if (mode == kGridBicubic) {
        add_bicubic_taps(grid, size, pad, align, s, corner);
        return s;
    }
    if (mode == kGridNearest) {
        std::vector<at::Tensor> r(d);
        for (int64_t a = 0; a < d; ++a) r[a] = at::round(tamed[a]);  // half to even, like nearbyint
        corner(r, at::ones_like(coord[0]), {});
        return s;
    }
    // Per axis: the low and high neighbours and the distances to the far side (the low corner's
    // factor is high - c, the high corner's c - low; d/dc is -1 and +1).
    std::vector<at::Tensor> lo(d), hi(d), f_lo(d), f_hi(d);
    for (int64_t a = 0; a < d; ++a) {
        lo[a] = at::floor(tamed[a]);
        hi[a] = lo[a].add(1);
        f_lo[a] = hi[a].sub(coord[a]);
        f_hi[a] = coord[a].sub(lo[a]);
    }
    for (int64_t bits = 0; bits < (int64_t{1} << d); ++bits) {  // x's bit is the lowest: nw, ne, sw, se, ...
        std::vector<at::Tensor> at_(d), factor(d);
        for (int64_t a = 0; a < d; ++a) {
            const bool high = (bits >> a) & 1;
            at_[a] = high ? hi[a] : lo[a];
            factor[a] = high ? f_hi[a] : f_lo[a];
        }
        at::Tensor weight = factor[0];
        for (int64_t a = 1; a < d; ++a) weight = weight.mul(factor[a]);
        std::vector<at::Tensor> dw(d);
        for (int64_t a = 0; a < d; ++a) {
            at::Tensor others;
            for (int64_t b = 0; b < d; ++b)
                if (b != a) others = others.defined() ? others.mul(factor[b]) : factor[b];
            dw[a] = ((bits >> a) & 1) ? others : others.neg();
        }
        corner(at_, std::move(weight), std::move(dw));
    }
    return s;
}

at::Tensor grid_sample_forward(const at::Tensor& input, const at::Tensor& grid, int64_t mode, int64_t padding_mode,
                               bool align_corners) {
    GridSample s = grid_corners(input, grid, mode, static_cast<GridPad>(padding_mode), align_corners);
    at::Tensor flat = input.reshape({s.n, s.c, s.spatial});
    at::Tensor out = at::zeros({s.n, s.c, s.L}, input.options());
    for (const GridCorner& k : s.corners) {
        at::Tensor v = flat.gather(2, k.lin.expand({s.n, s.c, s.L}));
        out.add_(at::where(k.valid, v.mul(k.weight), at::scalar_tensor(0.0, v.options())));
    }
    std::vector<int64_t> shape{s.n, s.c};
    for (int64_t a = 1; a + 1 < grid.dim(); ++a) shape.push_back(grid.size(a));
    return out.view(shape);
}

std::tuple<at::Tensor, at::Tensor> grid_sample_backward(const at::Tensor& grad_output, const at::Tensor& input,
                                                        const at::Tensor& grid, int64_t mode, int64_t padding_mode,
                                                        bool align_corners, std::array<bool, 2> output_mask) {
    GridSample s = grid_corners(input, grid, mode, static_cast<GridPad>(padding_mode), align_corners);
    const int64_t d = grid.size(-1);
    at::Tensor go = grad_output.reshape({s.n, s.c, s.L});
    at::Tensor zero = at::scalar_tensor(0.0, go.options());
    at::Tensor grad_input, grad_grid;
    if (output_mask[0]) {
        at::Tensor gflat = at::zeros({s.n, s.c, s.spatial}, input.options());
        for (const GridCorner& k : s.corners)
            gflat.scatter_add_(2, k.lin.expand({s.n, s.c, s.L}), at::where(k.valid, go.mul(k.weight), zero));
        grad_input = gflat.view(input.sizes());
    }
    if (output_mask[1]) {
        std::vector<at::Tensor> gi(d);
        for (int64_t a = 0; a < d; ++a) gi[a] = at::zeros({s.n, 1, s.L}, go.options());
        if (mode == kGridBilinear || mode == kGridBicubic) {
            at::Tensor flat = input.reshape({s.n, s.c, s.spatial});
            for (const GridCorner& k : s.corners) {
                at::Tensor v = at::where(k.valid, flat.gather(2, k.lin.expand({s.n, s.c, s.L})), zero);
                at::Tensor vg = v.mul(go).sum(1, /*keepdim=*/true);
                for (int64_t a = 0; a < d; ++a) gi[a].add_(vg.mul(k.dw[a]));
            }
        }
        std::vector<at::Tensor> parts(d);
        for (int64_t a = 0; a < d; ++a) parts[a] = gi[a].mul(s.mult[a]);
        grad_grid = at::stack(parts, -1).view(grid.sizes());
    }
    return {grad_input, grad_grid};
}

// The 2-d and 3-d entry points (the CPU has no bicubic in 3-d; it takes the fallback in 2-d).
// bfloat16/float16 sampling is computed in float and rounded once, bicubic's fallback included
// (the CPU's own 16-bit bicubic does its arithmetic in 16 bits, 35x less accurately).
bool grid_half(const at::Tensor& input, const at::Tensor& grid) {
    return half_float(input.scalar_type()) && grid.scalar_type() == input.scalar_type();
}

#define EMBER_GRID_SAMPLER(D)                                                                           \
    at::Tensor grid_sampler_##D##d(const at::Tensor& input, const at::Tensor& grid, int64_t mode,         \
                                   int64_t padding_mode, bool align_corners) {                           \
        if (grid_half(input, grid)) {                                                                    \
            at::Tensor x = input.to(at::kFloat), g = grid.to(at::kFloat);                                 \
            return (grid_native(x, g, mode, D)                                                            \
                        ? grid_sample_forward(x, g, mode, padding_mode, align_corners)                    \
                        : cpu<ATEN_OP(grid_sampler_##D##d)>(x, g, mode, padding_mode, align_corners))     \
                .to(input.scalar_type());                                                                 \
        }                                                                                                 \
        if (!grid_native(input, grid, mode, D))                                                           \
            return cpu<ATEN_OP(grid_sampler_##D##d)>(input, grid, mode, padding_mode, align_corners);     \
        return grid_sample_forward(input, grid, mode, padding_mode, align_corners);                       \
    }                                                                                                     \
    std::tuple<at::Tensor, at::Tensor> grid_sampler_##D##d_backward(                                      \
        const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& grid, int64_t mode,     \
        int64_t padding_mode, bool align_corners, std::array<bool, 2> output_mask) {                      \
        if (grid_half(input, grid) && grad_output.scalar_type() == input.scalar_type()) {                \
            at::Tensor x = input.to(at::kFloat), g = grid.to(at::kFloat), go = grad_output.to(at::kFloat); \
            auto [gi, gg] = grid_native(x, g, mode, D)                                                    \
                                ? grid_sample_backward(go, x, g, mode, padding_mode, align_corners, output_mask) \
                                : cpu<ATEN_OP(grid_sampler_##D##d_backward)>(go, x, g, mode, padding_mode,  \
                                                                             align_corners, output_mask); \
            return {gi.defined() ? gi.to(input.scalar_type()) : gi,                                       \
                    gg.defined() ? gg.to(grid.scalar_type()) : gg};                                       \
        }                                                                                                 \
        if (!grid_native(input, grid, mode, D) || grad_output.scalar_type() != input.scalar_type())       \
            return cpu<ATEN_OP(grid_sampler_##D##d_backward)>(grad_output, input, grid, mode, padding_mode, \
                                                              align_corners, output_mask);                \
        return grid_sample_backward(grad_output, input, grid, mode, padding_mode, align_corners, output_mask); \
    }

EMBER_GRID_SAMPLER(2)
EMBER_GRID_SAMPLER(3)
#undef EMBER_GRID_SAMPLER

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("grid_sampler_2d", grid_sampler_2d);
    m.impl("grid_sampler_2d_backward", grid_sampler_2d_backward);
    m.impl("grid_sampler_3d", grid_sampler_3d);
    m.impl("grid_sampler_3d_backward", grid_sampler_3d_backward);
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
