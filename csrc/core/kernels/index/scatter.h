// Scattering into an existing tensor: torch.scatter/scatter_add/scatter_reduce by a full index
// tensor, and index_put_ by one int64 index vector along one dimension. The caller has filled
// `out` with self; these kernels only update it in place. All real dtypes; any strides.
//
// Indices are all checked before anything is written, so a bad index leaves out untouched (the
// error surfaces at the next sync). Updates to one output element happen in index order on one
// thread, so sums, products and "last write wins" are deterministic with or without a pool.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "kernels/tensor_view.h"
#include "runtime/thread_pool.h"

namespace ember::kernels {

// How a scattered value combines with the element already in out. Sum and product are computed
// in the type's own arithmetic (wrapping for integers, or/and for bool), as PyTorch's CPU
// kernels; Half and BFloat16 reductions accumulate in a float copy of out, rounded back once at
// the end, as the CPU's scatter kernels do. Amax/amin propagate NaN from either side.
enum class ScatterReduce : int8_t { kAssign, kSum, kProd, kAmax, kAmin };

// For every position p of index: out[p with coordinate `dim` replaced by index[p]] op= src[p].
// out, index and src have the same rank; index may be smaller than out in the dims other than
// `dim` and no larger than src in any (a scalar src arrives as a view with index's sizes and
// zero strides). out and src have the same dtype, index is int64. An index outside
// [0, out.sizes[dim]) fails with "index out of bounds". Work splits over the lines along `dim`
// (positions differing only in `dim`), whose writes never meet: their other coordinates differ.
Status scatter(const TensorView& out, const TensorView& index, const TensorView& src, int dim,
               ScatterReduce reduce, runtime::ThreadPool* pool);

// How index_put_rows reads its indices: index_put_ counts negative ones from the end; index_add
// and index_copy refuse them, and their errors name the dim (`dim` >= 0) after a prefix, as the
// CPU's do ("index_copy_(): index -1 is out of bounds for dimension 0 with size 3").
struct RowIndexRule {
    bool wrap_negative = true;
    int64_t dim = -1;
    const char* prefix = "";
};

// out[o, index[i], k] = values[o, i, k] (+= with `accumulate`) for out viewed [outer, n, inner],
// index 1-d int64 of length m and values [outer, m, inner] of out's dtype (zero strides for a
// broadcast). Indices outside [0, n) (after the rule's wrapping) fail with "index X is out of
// bounds for dimension with size N", before anything is written. Duplicates apply in index order: they
// add up with `accumulate`, otherwise the last one wins. Work splits over (o, k) columns.
// Half/BFloat16 sums round after every update (the CPU's index_put_ and 1-d index_add), or with
// `float_accumulate` accumulate in float and round once (its index_add of rows, which runs as a
// scatter_add).
Status index_put_rows(const TensorView& out, const TensorView& index, const TensorView& values,
                      bool accumulate, runtime::ThreadPool* pool, bool float_accumulate = false,
                      const RowIndexRule& rule = {});

}  // namespace ember::kernels
