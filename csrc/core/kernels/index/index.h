// Indexing kernels: gathering and scattering whole slices by an int64 index vector, and the
// triangular masks (scans are in reduce/scan.h). Views are [outer, n, inner] with n the indexed
// dimension (the caller folds the other dims in, any strides); indices are a 1-d int64 TensorView.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "kernels/tensor_view.h"
#include "runtime/thread_pool.h"

namespace ember::kernels {

// out[o, i, k] = in[o, index[i], k]. An index outside [0, in_n) fails with
// "index out of range in self"; index_select takes no negative indices, as on CPU.
Status index_select(const TensorView& out, const TensorView& in, const TensorView& index,
                    runtime::ThreadPool* pool);

// out[p] = in[p with coordinate `dim` replaced by index[p]] for every position p of index
// (torch.gather): out and index have the same shape; in has the same rank and may be larger in
// the other dims. An index outside [0, in.sizes[dim]) fails with "index out of bounds".
Status gather(const TensorView& out, const TensorView& in, const TensorView& index, int dim,
              runtime::ThreadPool* pool);

// out[index[i], k] += src[i, k] for 2-d out [n, inner] and src [count, inner], skipping rows
// whose index equals `skip` (embedding's padding_idx; pass -1 for none). Accumulation order
// per element is the order of `index`, so results are deterministic; work splits over columns.
Status index_add_rows(const TensorView& out, const TensorView& src, const TensorView& index,
                      int64_t skip, runtime::ThreadPool* pool);

// Triangular part of the last two dims ([batch, rows, cols]): out = in where
// (col - row <= diagonal) for lower, (col - row >= diagonal) for upper, else 0.
Status triangle(const TensorView& out, const TensorView& in, int64_t diagonal, bool lower,
                runtime::ThreadPool* pool);

}  // namespace ember::kernels
