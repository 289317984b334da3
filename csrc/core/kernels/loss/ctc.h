// Connectionist temporal classification loss (torch.nn.functional.ctc_loss; speech and
// handwriting models, Hugging Face's *ForCTC heads): the negative log-likelihood of each target
// sequence summed over all its alignments to the input frames, by the forward (alpha) and
// backward (beta) recursions in log space over the target extended with blanks
// (blank, l1, blank, l2, ..., blank: 2 * target_length + 1 states).
//
// The formulas, the order of the log-additions and the results at the edges (an empty input,
// an empty target, an impossible alignment giving an infinite loss) are PyTorch's CPU kernel's,
// computed in the input's type as it does. Each sample is computed whole by one thread.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "kernels/tensor_view.h"
#include "runtime/thread_pool.h"

namespace ember::kernels {

// Where each sample's labels are and how long its sequences are; lengths are already checked
// (0 <= input_length <= frames, 0 <= target_length, labels addressable).
struct CtcBatch {
    std::vector<int64_t> input_lengths, target_lengths;
    std::vector<int64_t> target_offsets;  // element offset of sample b's first label in `targets`
    int64_t target_stride = 1;            // elements between a sample's consecutive labels
    int64_t blank = 0;
};

// log_probs [frames, batch, classes] (float32 or float64, any strides); targets int32/int64
// (any layout the offsets and stride describe). Writes nll [batch] and log_alpha contiguous
// [batch, frames, states >= 2 * max target_length + 1] (-inf where no state is reachable).
// A label outside [0, classes) is an error.
Status ctc_loss_forward(const TensorView& nll, const TensorView& log_alpha, const TensorView& log_probs,
                        const TensorView& targets, const CtcBatch& batch, runtime::ThreadPool* pool);

// grad_log_probs: contiguous [frames, batch, classes], the gradient for log_probs given the
// gradient of each sample's loss (grad_nll [batch], any stride) and the forward's nll and
// log_alpha. Frames at or past a sample's input length get 0; with zero_infinity so does every
// frame of a sample whose loss is infinite.
Status ctc_loss_backward(const TensorView& grad_log_probs, const TensorView& grad_nll, const TensorView& log_probs,
                         const TensorView& targets, const TensorView& nll, const TensorView& log_alpha,
                         const CtcBatch& batch, bool zero_infinity, runtime::ThreadPool* pool);

}  // namespace ember::kernels
