// torch.autocast(device_type="ember"): CUDA's policy, op for op (plus the CPU's float32 FFTs and
// cross-entropy). Matmuls, convolutions and attention run in the low-precision dtype; reductions,
// norms, losses and pointwise math that loses accuracy run in float32; mixed-dtype ops promote.
// Everything else passes through.
#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace ember::torch_glue {

// The policy macros name ATen types unqualified, as in ATen's own autocast_mode.cpp.
using at::IntArrayRef;
using at::Scalar;
using at::ScalarType;
using at::Tensor;

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
    m.fallback(torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
#define EMBER_LOW_PRECISION(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define EMBER_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define EMBER_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define EMBER_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
    AT_FORALL_LOWER_PRECISION_FP(EMBER_LOW_PRECISION)
    AT_FORALL_FP32(EMBER_FP32)
    AT_FORALL_FP32_SET_OPT_DTYPE(EMBER_FP32_SET_OPT_DTYPE)
    AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
    AT_FORALL_PROMOTE(EMBER_PROMOTE)
    // Fourier transforms and cross-entropy in float32, as the CPU's autocast runs them. CUDA's
    // list leaves the transforms out (a bfloat16 input then fails), and its cross-entropy takes
    // the log-softmax in the input's 16-bit type (the loss 3-10x further from float32's). So a
    // long-convolution model (Hyena, FNO) and a language model's loss behave under
    // torch.autocast("ember") as under torch.autocast("cpu").
#define EMBER_CPU_FP32(_) _(fft_fft) _(fft_ifft) _(fft_fft2) _(fft_ifft2) _(fft_fftn) _(fft_ifftn) _(fft_rfft) \
    _(fft_irfft) _(fft_rfft2) _(fft_irfft2) _(fft_rfftn) _(fft_irfftn) _(fft_hfft) _(fft_ihfft) _(cross_entropy_loss)
    EMBER_CPU_FP32(EMBER_FP32)
#undef EMBER_CPU_FP32
#undef EMBER_LOW_PRECISION
#undef EMBER_FP32
#undef EMBER_FP32_SET_OPT_DTYPE
#undef EMBER_PROMOTE
}

}  // namespace ember::torch_glue
