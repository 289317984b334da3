// Sorting along one dimension: sort and topk. Every view is [outer, n, inner] with n the sorted
// dimension (the caller folds the other dims in; any strides); indices are int64 views of the
// values' shape. All real dtypes.
//
// The order is PyTorch CPU's: NaN compares larger than every number (NaNs equal each other),
// -0.0 equals 0.0, bool/Half/BFloat16 compare by value. Equal elements keep their input order in
// both directions (a stable sort), so values and indices are fully determined by the input and a
// pool changes only the speed. For topk among equal values that means the lowest indices; the
// CPU's partial sort picks among ties in no documented order (PyTorch leaves it unspecified), so
// topk's indices may differ from the CPU's there while its values agree. Slices [o, :, k] split across the pool; one slice is never split,
// so a single long sort runs on one thread.
//
// Errors: views that are not 3-d, shape or dtype mismatches and indices that are not int64 are
// kInvalidArgument; complex inputs are kUnimplemented. Nothing is written on error.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "kernels/tensor_view.h"
#include "runtime/thread_pool.h"

namespace ember::kernels {

// values_out[o, r, k] = the r-th smallest (largest if descending) of in[o, :, k];
// indices_out[o, r, k] = its position in that slice. values_out may be `in` itself (sort_ in
// place): each slice is read before it is written. `stable` is accepted for PyTorch's signature;
// the sort is always stable.
Status sort(const TensorView& values_out, const TensorView& indices_out, const TensorView& in,
            bool descending, bool stable, runtime::ThreadPool* pool);

// The k largest (smallest unless `largest`) of each slice: outputs are [outer, k, inner].
// NaN is the largest value. Among equal values the lower index is taken first. With `sorted`
// the results are in order (largest first when `largest`); otherwise in an unspecified but
// deterministic order. k outside [0, n] fails with "selected index k out of range".
Status topk(const TensorView& values_out, const TensorView& indices_out, const TensorView& in,
            int64_t k, bool largest, bool sorted, runtime::ThreadPool* pool);

}  // namespace ember::kernels
