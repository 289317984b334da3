// Pairwise distances between the rows of one matrix (torch.pdist / torch.nn.functional.pdist):
// out[k] = ||x_i - x_j||_p for each pair i < j, pairs in row-major order (k runs over j first).
// Contrastive and metric-learning losses and point-cloud models use it.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "kernels/tensor_view.h"
#include "runtime/thread_pool.h"

namespace ember::kernels {

// x: contiguous [n, m]; out: contiguous [n (n - 1) / 2]; float32 or float64, one dtype; p >= 0
// (p = inf is the largest absolute difference). The cases PyTorch's CPU kernel distinguishes
// (p = 0, 1, 2, inf, below 2, other) use its formulas; p = 2 accumulates in the input's type as
// the CPU does, the others in double.
Status pdist_forward(const TensorView& out, const TensorView& x, double p, runtime::ThreadPool* pool);

// grad_x[i] = sum over the pairs containing row i of grad[k] * d dist_k / d x_i, PyTorch's
// formulas (0 where a distance is 0, and for p = 0). dist is pdist_forward's result. Each row
// is computed whole by one thread, so nothing is accumulated across threads.
Status pdist_backward(const TensorView& grad_x, const TensorView& grad, const TensorView& x, double p,
                      const TensorView& dist, runtime::ThreadPool* pool);

}  // namespace ember::kernels
