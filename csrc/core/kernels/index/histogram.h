// histc: counts of values in `bins` equal-width bins over [lo, hi], as torch.histc computes them
// (a value equal to hi lands in the last bin; values outside [lo, hi] and NaN are not counted).
// Integer inputs are counted too, as CUDA counts them (the CPU refuses them).
#pragma once

#include <cstdint>

#include "base/status.h"
#include "kernels/tensor_view.h"
#include "runtime/thread_pool.h"

namespace ember::kernels {

// out: contiguous 1-d of `bins` elements, any real dtype (the counts are written converted);
// in: contiguous, any real dtype. Needs lo < hi.
Status histc(const TensorView& out, const TensorView& in, int64_t bins, double lo, double hi,
             runtime::ThreadPool* pool);

}  // namespace ember::kernels
