// The column form of a generated kernel: the choice codegen makes between running a kernel's
// inner loops innermost (the row form) and running blocks of consecutive values of its last
// outer var innermost (the column form: sums over leading dims, a bias gradient, a norm's weight
// gradient), where every row of the block is read as one contiguous stretch and each lane keeps
// its own accumulator. No LLVM here: the planner sizes thread chunks by it too.
#pragma once

#include <cstdint>

#include "compiler/plan.h"

namespace ember::compiler::codegen {

// Lanes per block at most. A block reads kColumnLanes consecutive values of every row it walks;
// at 64 the rows' 256-byte pieces each sat on a new 4 KiB page, beyond the hardware prefetcher,
// and a sum over dim 0 of exp(x) ran 2.6x slower than over dim 1 (4096 x 1024 float32, one
// thread); at 1024 both take the same time. The accumulators stay in L1 (4-8 KiB each).
constexpr int64_t kColumnLanes = 1024;

// Coefficient of var v in index i when i is affine in v; -1 when v sits under a div or mod.
int64_t coef(const Kernel& k, int i, size_t v);

// Lanes per block of `k`'s column form, or 0 when the row form suits it better.
int64_t column_lanes(const Kernel& k);

}  // namespace ember::compiler::codegen
