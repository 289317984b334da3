// fill: every element of dst (any strides, any dtype except complex) becomes `value` converted
// to dst's type, as Tensor.fill_ does.
#pragma once

#include "base/status.h"
#include "kernels/tensor_view.h"
#include "runtime/thread_pool.h"

namespace ember::kernels {

Status fill(const TensorView& dst, const Scalar& value, runtime::ThreadPool* pool);

}  // namespace ember::kernels
