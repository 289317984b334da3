// Reductions over any set of dimensions: sum, mean, prod, amax/amin, max/min with indices,
// argmax/argmin, p-norms, any/all, var/std.
//
// The caller orders the input's dimensions so that the kept ones come first (a permuted view,
// no copy): dims [0, kept) are kept, [kept, ndim) are reduced. `out` has the kept shape and any
// strides; its dtype is the result dtype. Floating inputs accumulate in double, integers and
// bool in int64, and the result is converted to out's dtype, so float32 and bfloat16 results
// are at least as accurate as PyTorch's CPU ones. NaN propagates through amax/amin/max/min and
// counts as the largest value for argmax (PyTorch's rule); ties take the first index.
// Large reductions split across the pool, over outputs or, when there are few outputs, over
// the reduced elements.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "kernels/tensor_view.h"
#include "runtime/thread_pool.h"

namespace ember::kernels {

enum class ReduceOp : int8_t {
    kSum, kMean, kProd, kAmax, kAmin,
    kMax, kMin,        // values to out, int64 positions to indices
    kArgmax, kArgmin,  // int64 positions to out
    kNorm,             // (sum |x|^p)^(1/p); p = 0 counts nonzeros, p = +-inf is max/min |x|
    kAny, kAll,
    kVar, kStd,        // with `correction` (1 = unbiased)
};

struct ReduceArgs {
    TensorView in;
    int kept = 0;
    TensorView out;
    TensorView indices;  // kMax/kMin only
    double p = 2.0;
    double correction = 1.0;
};

const char* op_name(ReduceOp op);
Status reduce(ReduceOp op, const ReduceArgs& args, runtime::ThreadPool* pool);

}  // namespace ember::kernels
