// Strided copy with type conversion: dst[i] = convert(src[i]) for every index of dst.
//
// src and dst have the same shape (a broadcast source arrives with zero strides); they may
// have any strides and any of the real dtypes, and may not overlap partially. Complex dtypes
// copy only to the same dtype. Large copies split across the device's thread pool.
#pragma once

#include "base/status.h"
#include "kernels/tensor_view.h"
#include "runtime/thread_pool.h"

namespace ember::kernels {

Status copy(const TensorView& dst, const TensorView& src, runtime::ThreadPool* pool);

// Whether copy() handles this pair of types (all real types both ways; complex to itself).
bool copy_supports(DType dst, DType src);

}  // namespace ember::kernels
