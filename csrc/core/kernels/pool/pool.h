// 2-d pooling for CNNs, forward and backward, over contiguous planes: input [P, H, W] where P is
// N * C (the caller makes the tensor contiguous), output [P, OH, OW]. Planes split across the
// pool, so backwards (which scatter into the input gradient) never race.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "kernels/tensor_view.h"
#include "runtime/thread_pool.h"

namespace ember::kernels {

struct Pool2dParams {
    int64_t kernel[2] = {1, 1};
    int64_t stride[2] = {1, 1};
    int64_t padding[2] = {0, 0};
    int64_t dilation[2] = {1, 1};
    bool count_include_pad = true;  // avg only
    int64_t divisor_override = 0;   // avg only; 0 = none
};

// out = max over each window; indices (int64) = h * W + w of the maximum in its plane. NaN wins,
// the first maximum wins ties (PyTorch's rule).
Status max_pool2d(const TensorView& out, const TensorView& indices, const TensorView& in, const Pool2dParams& p,
                  runtime::ThreadPool* pool);
// grad_in (zeroed here) [index] += grad_out.
Status max_pool2d_backward(const TensorView& grad_in, const TensorView& grad_out, const TensorView& indices,
                           runtime::ThreadPool* pool);

// PyTorch's avg_pool2d window and divisor rules (padding, count_include_pad, divisor_override).
Status avg_pool2d(const TensorView& out, const TensorView& in, const Pool2dParams& p, runtime::ThreadPool* pool);
Status avg_pool2d_backward(const TensorView& grad_in, const TensorView& grad_out, const Pool2dParams& p,
                           runtime::ThreadPool* pool);

// Adaptive average pooling: output cell (i, j) averages rows [floor(i*H/OH), ceil((i+1)*H/OH)).
Status adaptive_avg_pool2d(const TensorView& out, const TensorView& in, runtime::ThreadPool* pool);
// Adaptive max pooling over the same cells; indices as max_pool2d's (h * W + w in the plane), so
// max_pool2d_backward is its backward too.
Status adaptive_max_pool2d(const TensorView& out, const TensorView& indices, const TensorView& in,
                           runtime::ThreadPool* pool);
Status adaptive_avg_pool2d_backward(const TensorView& grad_in, const TensorView& grad_out, runtime::ThreadPool* pool);

}  // namespace ember::kernels
