// Inclusive scans along dim 1 of [outer, n, inner] views (the caller folds the other dims in,
// any strides): cumsum, cumprod, logcumsumexp, cummax and cummin.
//
// Floating inputs accumulate in double (PyTorch's CPU accumulation type), integers and bool in
// int64 (products wrap as the CPU's do), and each prefix is converted to out's dtype. The rules
// are PyTorch's CPU ones:
//  - logcumsumexp adds log(1 + exp(min - max)) + max to the running value, starting at -inf;
//    two equal infinities give that infinity, and NaN propagates;
//  - cummax/cummin keep the latest position on ties (>= / <=), and a NaN replaces the running
//    value, so every later position reports the last NaN seen. `indices` (int64, same shape as
//    out) receives the positions; it is unused by the other scans.
// Work splits over the outer x inner lines.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "kernels/tensor_view.h"
#include "runtime/thread_pool.h"

namespace ember::kernels {

enum class ScanOp : int8_t { kSum, kLogSumExp, kMax, kMin, kProd };

const char* op_name(ScanOp op);
Status scan(ScanOp op, const TensorView& out, const TensorView& indices, const TensorView& in,
            runtime::ThreadPool* pool);

}  // namespace ember::kernels
