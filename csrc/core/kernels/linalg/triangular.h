// Triangular solves (torch.linalg.solve_triangular): X with A X = B, A triangular, by forward or
// back substitution. The chunked linear-attention layers of hybrid models (Qwen3-Next's gated
// delta rule) solve small triangular systems every step.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "kernels/tensor_view.h"
#include "runtime/thread_pool.h"

namespace ember::kernels {

// x, b: contiguous [batch, n, k]; a: contiguous [batch, n, n] (batch 1 broadcasts), float32 or
// float64, all one dtype. Solves A x = B for each batch with A lower or upper triangular (only
// that triangle is read; `unit` takes its diagonal as ones). With `transpose_a` the system is
// A^T x = B instead (a right-side solve X A = B is A^T X^T = B^T). x may be b itself.
Status solve_triangular(const TensorView& x, const TensorView& a, const TensorView& b, bool upper, bool unit,
                        bool transpose_a, runtime::ThreadPool* pool);

}  // namespace ember::kernels
