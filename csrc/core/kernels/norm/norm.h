// Normalization kernels: row-wise over the last dimension (softmax, log_softmax, layer norm, the
// negative log-likelihood loss) and per channel (batch norm), with the backwards autograd needs.
//
// The row-wise kernels view every tensor as [rows, cols] (2-d TensorView; rows may have any stride, the last
// dimension must have stride 1 — the caller makes it so). Inputs may be float32, float64,
// bfloat16 or float16; arithmetic is done in float (double for float64) as PyTorch's CPU kernels
// do, and results are stored in the output's dtype. Rows are split across the thread pool.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "kernels/tensor_view.h"
#include "runtime/thread_pool.h"

namespace ember::kernels {

// out = softmax(in) (or log_softmax) along the last dimension.
Status softmax(const TensorView& out, const TensorView& in, bool log, runtime::ThreadPool* pool);

// grad_in = softmax backward: grad_out * out - out * sum(grad_out * out)
//           log_softmax backward: grad_out - exp(out) * sum(grad_out)
Status softmax_backward(const TensorView& grad_in, const TensorView& grad_out, const TensorView& out,
                        bool log, runtime::ThreadPool* pool);

// out = (in - mean) * rstd * weight + bias per row; mean and rstd ([rows], float32 or the
// input's dtype for float64) are written for the backward (skipped when data == nullptr).
// weight/bias: [cols] or data == nullptr.
Status layer_norm(const TensorView& out, const TensorView& mean, const TensorView& rstd,
                  const TensorView& in, const TensorView& weight, const TensorView& bias, double eps,
                  runtime::ThreadPool* pool);

// Gradients of layer_norm; any output with data == nullptr is skipped.
// grad_weight/grad_bias are [cols] sums over rows.
Status layer_norm_backward(const TensorView& grad_in, const TensorView& grad_weight,
                           const TensorView& grad_bias, const TensorView& grad_out,
                           const TensorView& in, const TensorView& mean, const TensorView& rstd,
                           const TensorView& weight, runtime::ThreadPool* pool);

// Batch norm over `in` viewed as [N, C, S] (S: the spatial dims flattened, stride 1; N and C any
// stride), per channel over N x S. Training: the batch mean and biased variance normalize, are
// written to save_mean / save_invstd (1 / sqrt(var + eps)), and update running_mean /
// running_var (unbiased variance) by `momentum` when those have data. Evaluation: running_mean
// and running_var (required) normalize. out = (x - mean) * invstd * weight + bias, computed as
// x * scale + shift; every [C] vector is optional (data == nullptr) except as noted and may be
// any floating dtype (statistics are kept in double).
Status batch_norm(const TensorView& out, const TensorView& save_mean, const TensorView& save_invstd,
                  const TensorView& in, const TensorView& weight, const TensorView& bias,
                  const TensorView& running_mean, const TensorView& running_var, bool training,
                  double momentum, double eps, runtime::ThreadPool* pool);

// Gradients of batch_norm given the mean and invstd it normalized with (the saved batch
// statistics in training, the running ones in evaluation): grad_bias = sum(g), grad_weight =
// sum(g * (x - mean)) * invstd, grad_in = invstd * w * (g - [training] (sum(g) + (x - mean) *
// invstd^2 * sum(g * (x - mean))) / (N*S)). Outputs with data == nullptr are skipped.
Status batch_norm_backward(const TensorView& grad_in, const TensorView& grad_weight, const TensorView& grad_bias,
                           const TensorView& grad_out, const TensorView& in, const TensorView& weight,
                           const TensorView& mean, const TensorView& invstd, bool training,
                           runtime::ThreadPool* pool);

// Negative log-likelihood over log-probabilities `logp` [rows, classes] and int64 `target`
// [rows]; rows whose target == ignore_index contribute nothing. `weight` is [classes] or
// data == nullptr. reduction: 0 none (out is [rows]), 1 mean (out is 0-d; divided by the sum of
// the weights of counted rows), 2 sum. total_weight (0-d) receives that sum.
// A target outside [0, classes) other than ignore_index is an error (kInvalidArgument
// naming the value), as PyTorch's "Target N is out of bounds"; targets are checked before
// anything is written. For reduction none total_weight receives 0, as in PyTorch; it may have
// data == nullptr (forward only).
Status nll_loss(const TensorView& out, const TensorView& total_weight, const TensorView& logp,
                const TensorView& target, const TensorView& weight, int64_t reduction,
                int64_t ignore_index, runtime::ThreadPool* pool);

// grad_logp[r, target[r]] = -weight[target[r]] * g (g = grad_out[r] for none, grad_out /
// total_weight for mean, grad_out for sum); every other element 0.
Status nll_loss_backward(const TensorView& grad_logp, const TensorView& grad_out,
                         const TensorView& target, const TensorView& weight,
                         const TensorView& total_weight, int64_t reduction, int64_t ignore_index,
                         runtime::ThreadPool* pool);

}  // namespace ember::kernels
