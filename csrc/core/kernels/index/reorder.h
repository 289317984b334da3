// Reordering copies: flip and roll. out and in have the same shape and dtype (any dtype copy()
// handles for itself, complex included) and any strides; out must not overlap in. Both are
// copies from a rearranged view of in, so they split across the pool as copy() does.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "kernels/tensor_view.h"
#include "runtime/thread_pool.h"

namespace ember::kernels {

// out = in reversed along every dim d whose bit (1 << d) is set in dims_mask.
// Bits at or above in.ndim fail with kInvalidArgument.
Status flip(const TensorView& out, const TensorView& in, uint64_t dims_mask, runtime::ThreadPool* pool);

// out[..., (i + shift) mod n, ...] = in[..., i, ...] along `dim` (n = in.sizes[dim]); shift may
// be negative or larger than n. A roll over several dims is several calls (through a temporary).
Status roll(const TensorView& out, const TensorView& in, int dim, int64_t shift, runtime::ThreadPool* pool);

}  // namespace ember::kernels
