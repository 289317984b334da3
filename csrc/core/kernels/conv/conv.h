// Convolution (1-3 spatial dims, groups, dilation, transposed), forward and backward, the entry
// point for convolution_overrideable. As with GEMM, the arithmetic is a tuned library's, reached
// through a provider the host registers at start-up (oneDNN inside libtorch on this host), called
// on a stream worker; core owns the interface, its checks and the split of the work: a batch of
// two or more samples is divided over the device's pool, one single-threaded provider call per
// part (the weight and bias gradients of the parts summed after), so the library never starts a
// thread team of its own to compete with the pool's threads for the cores.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "kernels/tensor_view.h"
#include "runtime/thread_pool.h"

namespace ember::kernels {

struct ConvParams {
    int spatial = 2;  // number of spatial dims (1, 2 or 3)
    int64_t stride[3] = {1, 1, 1};
    int64_t padding[3] = {0, 0, 0};
    int64_t dilation[3] = {1, 1, 1};
    int64_t output_padding[3] = {0, 0, 0};
    bool transposed = false;
    int64_t groups = 1;
};

struct ConvArgs {
    TensorView input;   // [N, C_in, *spatial]
    TensorView weight;  // [C_out, C_in / groups, *kernel] ([C_in, C_out / groups, ...] transposed)
    TensorView bias;    // [C_out] or data == nullptr
    TensorView out;     // [N, C_out, *out_spatial], preallocated
    ConvParams params;
    int threads = 0;    // for the provider: 0 = its own choice of threads, 1 = run single-threaded
};

struct ConvBackwardArgs {
    TensorView grad_out, input, weight;
    TensorView grad_input, grad_weight, grad_bias;  // each optional (data == nullptr: skip)
    ConvParams params;
    int threads = 0;  // as ConvArgs::threads
};

using ConvProvider = Status (*)(const ConvArgs&);
using ConvBackwardProvider = Status (*)(const ConvBackwardArgs&);

void set_conv_provider(ConvProvider forward, ConvBackwardProvider backward, const char* name);
const char* conv_provider_name();

Status conv(const ConvArgs& args, runtime::ThreadPool* pool);
Status conv_backward(const ConvBackwardArgs& args, runtime::ThreadPool* pool);

}  // namespace ember::kernels
