// Convolution reaches a PrivateUse1 backend through the "overrideable" entry points. They queue
// kernels::conv (a library convolution behind core's provider interface) on the stream; dtypes
// the provider does not take go to PyTorch's CPU convolution, counted as a fallback. im2col and
// col2im (unfold / fold) are composed from native pad, strided copy and add.
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "../context.h"
#include "../fallback.h"
#include "glue.h"
#include "kernels/conv/conv.h"

namespace ember::torch_glue {
namespace {

at::Tensor cpu_of(const at::Tensor& t) { return t.defined() ? t.to(c10::kCPU) : t; }

void check_devices(const at::Tensor& input, const at::Tensor& other, const char* name) {
    TORCH_CHECK(on_device(input.device(), other), "Expected all tensors to be on the same device, but found at "
                "least two devices, ", input.device(), " and ", other.device(), "! (when checking argument '",
                name, "' of aten::convolution_overrideable)");
}

bool conv_dtype(const at::Tensor& t) {
    const at::ScalarType s = t.scalar_type();
    return s == at::kFloat || s == at::kDouble || s == at::kBFloat16 || s == at::kHalf;
}

kernels::ConvParams params_of(int64_t spatial, c10::IntArrayRef stride, c10::IntArrayRef padding,
                              c10::IntArrayRef dilation, bool transposed, c10::IntArrayRef output_padding,
                              int64_t groups) {
    kernels::ConvParams p;
    p.spatial = static_cast<int>(spatial);
    auto fill = [&](int64_t* dst, c10::IntArrayRef src, int64_t dflt) {
        for (int64_t i = 0; i < spatial; ++i) dst[i] = src.empty() ? dflt : src[src.size() == 1 ? 0 : i];
    };
    fill(p.stride, stride, 1);
    fill(p.padding, padding, 0);
    fill(p.dilation, dilation, 1);
    fill(p.output_padding, output_padding, 0);
    p.transposed = transposed;
    p.groups = groups;
    return p;
}

// Output spatial size, as PyTorch computes it.
std::vector<int64_t> out_shape(const at::Tensor& input, const at::Tensor& weight, const kernels::ConvParams& p) {
    std::vector<int64_t> shape = {input.size(0), p.transposed ? weight.size(1) * p.groups : weight.size(0)};
    for (int i = 0; i < p.spatial; ++i) {
        int64_t in = input.size(2 + i), k = weight.size(2 + i);
        int64_t o = p.transposed
                        ? (in - 1) * p.stride[i] - 2 * p.padding[i] + p.dilation[i] * (k - 1) + p.output_padding[i] + 1
                        : (in + 2 * p.padding[i] - p.dilation[i] * (k - 1) - 1) / p.stride[i] + 1;
        shape.push_back(o);
    }
    return shape;
}

// The layout PyTorch's CPU convolution gives its output and gradients: channels-last when the
// input or the weight is (model.to(memory_format=torch.channels_last)), so that code which
// permutes a conv's output to NHWC and calls .view() works as on the CPU. The kernels compute in
// the contiguous layout; the results are laid out afterwards.
c10::MemoryFormat conv_format(const at::Tensor& input, const at::Tensor& weight) {
    const auto last = input.dim() == 4 ? c10::MemoryFormat::ChannelsLast
                      : input.dim() == 5 ? c10::MemoryFormat::ChannelsLast3d
                                         : c10::MemoryFormat::Contiguous;
    if (last != c10::MemoryFormat::Contiguous &&
        (input.suggest_memory_format() == last || weight.suggest_memory_format() == last))
        return last;
    return c10::MemoryFormat::Contiguous;
}

at::Tensor laid_out(const at::Tensor& t, c10::MemoryFormat format) {
    return t.defined() && format != c10::MemoryFormat::Contiguous ? t.contiguous(format) : t;
}

at::Tensor wrapper_convolution(const at::Tensor& input, const at::Tensor& weight,
                               const std::optional<at::Tensor>& bias, c10::IntArrayRef stride,
                               c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
                               c10::IntArrayRef output_padding, int64_t groups) {
    c10::DeviceGuard guard(input.device());
    check_devices(input, weight, "weight");
    if (bias) check_devices(input, *bias, "bias");
    bool native = conv_dtype(input) && weight.scalar_type() == input.scalar_type() && input.dim() >= 3 &&
                  input.dim() <= 5 && (!bias || !bias->defined() || bias->scalar_type() == input.scalar_type()) &&
                  on_device(input.device(), weight) && on_device(input.device(), bias);
    if (!native) {
        FallbackScope scope("aten::convolution_overrideable");
        std::optional<at::Tensor> cpu_bias;
        if (bias && bias->defined()) cpu_bias = cpu_of(*bias);
        return at::convolution(cpu_of(input), cpu_of(weight), cpu_bias, stride, padding, dilation, transposed,
                               output_padding, groups)
            .to(input.device());
    }
    kernels::ConvParams p = params_of(input.dim() - 2, stride, padding, dilation, transposed, output_padding, groups);
    at::Tensor x = input.contiguous(), w = weight.contiguous();
    at::Tensor b = bias && bias->defined() ? bias->contiguous() : at::Tensor();
    at::Tensor out = at::empty(out_shape(x, w, p), x.options());
    kernels::ConvArgs args{view_in(x), view_in(w), b.defined() ? view_in(b) : kernels::TensorView{}, view_of(out), p};
    queue(x, "convolution", [args](runtime::ThreadPool* pool) { return kernels::conv(args, pool); });
    return laid_out(out, conv_format(input, weight));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> wrapper_convolution_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
    c10::IntArrayRef output_padding, int64_t groups, std::array<bool, 3> output_mask) {
    c10::DeviceGuard guard(input.device());
    check_devices(input, weight, "weight");
    check_devices(input, grad_output, "grad_output");
    int64_t bias_size = transposed ? weight.size(1) * groups : weight.size(0);
    bool native = conv_dtype(input) && weight.scalar_type() == input.scalar_type() &&
                  grad_output.scalar_type() == input.scalar_type() && input.dim() >= 3 && input.dim() <= 5 &&
                  on_device(input.device(), weight) && on_device(input.device(), grad_output);
    if (!native) {
        FallbackScope scope("aten::convolution_backward_overrideable");
        auto [gi, gw, gb] = at::convolution_backward(cpu_of(grad_output), cpu_of(input), cpu_of(weight),
                                                     std::vector<int64_t>{bias_size}, stride, padding, dilation,
                                                     transposed, output_padding, groups, output_mask);
        auto back = [&](const at::Tensor& t) { return t.defined() ? t.to(input.device()) : t; };
        return {back(gi), back(gw), back(gb)};
    }
    kernels::ConvParams p = params_of(input.dim() - 2, stride, padding, dilation, transposed, output_padding, groups);
    at::Tensor go = grad_output.contiguous(), x = input.contiguous(), w = weight.contiguous();
    at::Tensor gi = output_mask[0] ? at::empty_like(x) : at::Tensor();
    at::Tensor gw = output_mask[1] ? at::empty_like(w) : at::Tensor();
    at::Tensor gb = output_mask[2] ? at::empty({bias_size}, x.options()) : at::Tensor();
    auto opt = [](const at::Tensor& t) { return t.defined() ? view_of(t) : kernels::TensorView{}; };
    kernels::ConvBackwardArgs args{view_in(go), view_in(x), view_in(w), opt(gi), opt(gw), opt(gb), p};
    queue(x, "convolution_backward",
          [args](runtime::ThreadPool* pool) { return kernels::conv_backward(args, pool); });
    const c10::MemoryFormat format = conv_format(input, weight);
    return {laid_out(gi, format), laid_out(gw, format), gb};
}

// ---- im2col / col2im (F.unfold / F.fold): sliding blocks as a strided view of the padded
// input, copied out; col2im adds each kernel offset's columns back into a strided slice of a
// padded output, offsets in the CPU kernel's order, then crops the padding. Each is the other's
// gradient.

struct Blocks {
    int64_t kh, kw, dh, dw, ph, pw, sh, sw, oh, ow;
};

Blocks blocks(at::IntArrayRef kernel, at::IntArrayRef dilation, at::IntArrayRef padding, at::IntArrayRef stride,
              int64_t h, int64_t w, const char* op) {
    TORCH_CHECK(kernel.size() == 2 && dilation.size() == 2 && padding.size() == 2 && stride.size() == 2, op,
                ": kernel_size, dilation, padding and stride must each have 2 elements");
    Blocks b{kernel[0], kernel[1], dilation[0], dilation[1], padding[0], padding[1], stride[0], stride[1], 0, 0};
    TORCH_CHECK(b.kh > 0 && b.kw > 0, op, ": kernel size should be greater than zero, but got kernel_height: ", b.kh,
                " kernel_width: ", b.kw);
    TORCH_CHECK(b.dh > 0 && b.dw > 0, op, ": dilation should be greater than zero, but got dilation_height: ", b.dh,
                " dilation_width: ", b.dw);
    TORCH_CHECK(b.sh > 0 && b.sw > 0, op, ": stride should be greater than zero, but got dH: ", b.sh, " dW: ", b.sw);
    TORCH_CHECK(b.ph >= 0 && b.pw >= 0, op, ": padding should be non-negative, but got pad_height: ", b.ph,
                " pad_width: ", b.pw);
    b.oh = (h + 2 * b.ph - (b.dh * (b.kh - 1) + 1)) / b.sh + 1;
    b.ow = (w + 2 * b.pw - (b.dw * (b.kw - 1) + 1)) / b.sw + 1;
    TORCH_CHECK(b.oh >= 1 && b.ow >= 1, "Given input with spatial size (", h, ", ", w, "), kernel_size=", kernel,
                ", dilation=", dilation, ", padding=", padding, ", calculated shape of the array of sliding blocks as (",
                b.oh, ", ", b.ow, "), but its components must be at least one.");
    return b;
}

// im2col copies (bool too, as the CPU's does); col2im adds, so floating types only. A zero
// batch runs here; any other zero dim is the CPU kernel's error.
bool fold_native(const at::Tensor& t, bool copies_only) {
    const at::ScalarType s = t.scalar_type();
    const int64_t batched_rank = copies_only ? 4 : 3;  // (N, C, H, W) images, (N, C*kh*kw, L) columns
    bool dims_ok = t.dim() > 1;
    for (int64_t d = t.dim() == batched_rank ? 1 : 0; d < t.dim(); ++d) dims_ok = dims_ok && t.size(d) > 0;
    return t.is_privateuseone() && dims_ok && has_dtype(s) &&
           (at::isFloatingType(s) || (copies_only && s == at::kBool));
}

at::Tensor im2col(const at::Tensor& self, at::IntArrayRef kernel, at::IntArrayRef dilation, at::IntArrayRef padding,
                  at::IntArrayRef stride) {
    if (!fold_native(self, true) || (self.dim() != 3 && self.dim() != 4))
        return cpu<ATEN_OP(im2col)>(self, kernel, dilation, padding, stride);
    at::Tensor x = self.dim() == 3 ? self.unsqueeze(0) : self;
    const int64_t n = x.size(0), c = x.size(1);
    Blocks b = blocks(kernel, dilation, padding, stride, x.size(2), x.size(3), "im2col");
    at::Tensor xp = at::constant_pad_nd(x, {b.pw, b.pw, b.ph, b.ph}, 0).contiguous();
    const int64_t sH = xp.stride(2), sW = xp.stride(3);
    at::Tensor cols = xp.as_strided({n, c, b.kh, b.kw, b.oh, b.ow},
                                    {xp.stride(0), xp.stride(1), b.dh * sH, b.dw * sW, b.sh * sH, b.sw * sW})
                          .reshape({n, c * b.kh * b.kw, b.oh * b.ow});
    return self.dim() == 3 ? cols.squeeze(0) : cols;
}

at::Tensor col2im(const at::Tensor& self, at::IntArrayRef output_size, at::IntArrayRef kernel, at::IntArrayRef dilation,
                  at::IntArrayRef padding, at::IntArrayRef stride) {
    if (!fold_native(self, false) || (self.dim() != 2 && self.dim() != 3) || output_size.size() != 2)
        return cpu<ATEN_OP(col2im)>(self, output_size, kernel, dilation, padding, stride);
    at::Tensor cols = self.dim() == 2 ? self.unsqueeze(0) : self;
    const int64_t h = output_size[0], w = output_size[1];
    Blocks b = blocks(kernel, dilation, padding, stride, h, w, "col2im");
    const int64_t n = cols.size(0), per = b.kh * b.kw;
    TORCH_CHECK(cols.size(1) % per == 0, "Expected size of input's dimension 1 to be divisible by the product of "
                "kernel_size, but got input.size(1)=", cols.size(1), " and kernel_size=", kernel);
    TORCH_CHECK(cols.size(2) == b.oh * b.ow, "Given output_size=", output_size, ", kernel_size=", kernel,
                ", dilation=", dilation, ", padding=", padding, ", stride=", stride,
                ", expected size of input's dimension 2 to match the calculated number of sliding blocks ", b.oh,
                " * ", b.ow, " = ", b.oh * b.ow, ", but got input.size(2)=", cols.size(2), ".");
    const int64_t c = cols.size(1) / per;
    at::Tensor v = cols.reshape({n, c, b.kh, b.kw, b.oh, b.ow});
    at::Tensor out = at::zeros({n, c, h + 2 * b.ph, w + 2 * b.pw}, self.options());
    for (int64_t i = 0; i < b.kh; ++i) {
        for (int64_t j = 0; j < b.kw; ++j) {
            at::Tensor dst = out.slice(2, i * b.dh, i * b.dh + b.sh * (b.oh - 1) + 1, b.sh)
                                 .slice(3, j * b.dw, j * b.dw + b.sw * (b.ow - 1) + 1, b.sw);
            dst.add_(v.select(3, j).select(2, i));
        }
    }
    out = out.slice(2, b.ph, b.ph + h).slice(3, b.pw, b.pw + w).contiguous();
    return self.dim() == 2 ? out.squeeze(0) : out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("convolution_overrideable", wrapper_convolution);
    m.impl("convolution_backward_overrideable", wrapper_convolution_backward);
    m.impl("im2col", im2col);
    m.impl("col2im", col2im);
}

}  // namespace ember::torch_glue
