// Convolution reaches a PrivateUse1 backend through the "overrideable" entry points, which have
// no CPU kernel for the boxed fallback to call. Until Ember has native convolution kernels they
// run PyTorch's CPU convolution explicitly, counted and reported like any other fallback.
#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "../fallback.h"

namespace ember::torch_glue {
namespace {

at::Tensor cpu_of(const at::Tensor& t) { return t.defined() ? t.to(c10::kCPU) : t; }

at::Tensor wrapper_convolution(const at::Tensor& input, const at::Tensor& weight,
                               const std::optional<at::Tensor>& bias, c10::IntArrayRef stride,
                               c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
                               c10::IntArrayRef output_padding, int64_t groups) {
    FallbackScope scope("aten::convolution_overrideable");
    c10::DeviceGuard guard(input.device());
    std::optional<at::Tensor> cpu_bias;
    if (bias && bias->defined()) cpu_bias = cpu_of(*bias);
    at::Tensor out = at::convolution(cpu_of(input), cpu_of(weight), cpu_bias, stride, padding,
                                     dilation, transposed, output_padding, groups);
    return out.to(input.device());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> wrapper_convolution_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
    c10::IntArrayRef output_padding, int64_t groups, std::array<bool, 3> output_mask) {
    FallbackScope scope("aten::convolution_backward_overrideable");
    c10::DeviceGuard guard(input.device());
    std::vector<int64_t> bias_sizes = {weight.size(transposed ? 1 : 0) * (transposed ? groups : 1)};
    auto [gi, gw, gb] = at::convolution_backward(cpu_of(grad_output), cpu_of(input), cpu_of(weight),
                                                 bias_sizes, stride, padding, dilation, transposed,
                                                 output_padding, groups, output_mask);
    auto back = [&](const at::Tensor& t) { return t.defined() ? t.to(input.device()) : t; };
    return {back(gi), back(gw), back(gb)};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("convolution_overrideable", wrapper_convolution);
    m.impl("convolution_backward_overrideable", wrapper_convolution_backward);
}

}  // namespace ember::torch_glue
