#include "kernels/conv/conv.h"

#include <string>

namespace ember::kernels {
namespace {
ConvProvider g_forward = nullptr;
ConvBackwardProvider g_backward = nullptr;
const char* g_name = "none";

Status check(const TensorView& input, const TensorView& weight, const ConvParams& p) {
    if (p.spatial < 1 || p.spatial > 3) return invalid_argument("conv: 1 to 3 spatial dims");
    if (input.ndim != p.spatial + 2 || weight.ndim != p.spatial + 2) {
        return invalid_argument("conv: input and weight need " + std::to_string(p.spatial + 2) + " dims");
    }
    if (input.dtype != weight.dtype) return invalid_argument("conv: input and weight dtypes differ");
    if (p.groups < 1) return invalid_argument("conv: groups must be positive");
    return Status();
}
}  // namespace

void set_conv_provider(ConvProvider forward, ConvBackwardProvider backward, const char* name) {
    g_forward = forward;
    g_backward = backward;
    g_name = name;
}

const char* conv_provider_name() { return g_name; }

Status conv(const ConvArgs& args) {
    EMBER_RETURN_IF_ERROR(check(args.input, args.weight, args.params));
    if (g_forward == nullptr) return internal_error("conv: no convolution provider registered");
    return g_forward(args);
}

Status conv_backward(const ConvBackwardArgs& args) {
    EMBER_RETURN_IF_ERROR(check(args.input, args.weight, args.params));
    if (g_backward == nullptr) return internal_error("conv: no convolution provider registered");
    return g_backward(args);
}

}  // namespace ember::kernels
