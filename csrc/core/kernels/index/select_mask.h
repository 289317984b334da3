// Selections whose output size depends on the data: count_nonzero, nonzero, masked_select. The
// caller sizes the output from count_nonzero (of in, or of the broadcast mask), then fills it.
//
// Positions are visited in row-major order of the input's sizes whatever its strides, so the
// results are torch.nonzero's and torch.masked_select's. Large inputs split across the pool into
// a few contiguous ranges of positions: each range is counted, the counts give each range its
// output offset, and the ranges are then written independently, so the order is unchanged.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "kernels/tensor_view.h"
#include "runtime/thread_pool.h"

namespace ember::kernels {

// Elements of in (any dtype, any strides, zero strides included) that are not zero; NaN counts,
// -0.0 does not, a complex value counts when either part is nonzero.
StatusOr<int64_t> count_nonzero(const TensorView& in, runtime::ThreadPool* pool);

// out[r, :] = the coordinates of the r-th nonzero element of in: out is int64 [count, in.ndim]
// with any strides. A count other than count_nonzero(in) fails with kInvalidArgument before
// anything is written.
Status nonzero(const TensorView& out, const TensorView& in, runtime::ThreadPool* pool);

// out = the elements of in where mask is true, in row-major order. in and mask have the same
// sizes (broadcast by the caller: zero strides are fine); mask is bool; out is 1-d of in's dtype,
// any stride, with exactly count_nonzero(mask) elements, else kInvalidArgument and no write.
Status masked_select(const TensorView& out, const TensorView& in, const TensorView& mask,
                     runtime::ThreadPool* pool);

}  // namespace ember::kernels
