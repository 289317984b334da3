// Convolution reaches a PrivateUse1 backend through the "overrideable" entry points. They queue
// kernels::conv (a library convolution behind core's provider interface) on the stream; dtypes
// the provider does not take go to PyTorch's CPU convolution, counted as a fallback.
#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "../context.h"
#include "../fallback.h"
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
    return t.scalar_type() == at::kFloat || t.scalar_type() == at::kDouble || t.scalar_type() == at::kBFloat16;
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
    enqueue(current_stream_of(x), "convolution", [args] { return kernels::conv(args); });
    return out;
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
    enqueue(current_stream_of(x), "convolution_backward",
            [args] { return kernels::conv_backward(args); });
    return {gi, gw, gb};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("convolution_overrideable", wrapper_convolution);
    m.impl("convolution_backward_overrideable", wrapper_convolution_backward);
}

}  // namespace ember::torch_glue
