// fill: every element of dst (any strides, any dtype except complex) becomes `value` converted
// to dst's type, as Tensor.fill_ does.
#pragma once

#include "base/status.h"
#include "kernels/tensor_view.h"
#include "runtime/thread_pool.h"

namespace ember::kernels {

Status fill(const TensorView& dst, const Scalar& value, runtime::ThreadPool* pool);

// arange: dst[i] = start + i * step for a 1-d dst, computed in double for floating dtypes and
// in int64 for integers (start and step then taken from the integer fields), as PyTorch's CPU.
Status arange(const TensorView& dst, const Scalar& start, const Scalar& step, runtime::ThreadPool* pool);

}  // namespace ember::kernels
