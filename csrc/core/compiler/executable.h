// Executable: one compiled graph, ready to run many times from many threads.
//
// run(inputs, outputs, pool) takes the data pointers of the graph's inputs (in input order, laid
// out with the sizes and strides the graph declared) and of its outputs (allocated by the caller
// with output(i)'s dtype, sizes and strides: contiguous). For an in-place output
// (output(i).alias_input >= 0) the result is written into that input's memory and outputs[i] is
// ignored (may be null). Steps run in order on the calling thread; fused kernels whose outer range
// is large enough are split across `pool` (may be null: then everything runs on the caller).
// GEMMs go through kernels::gemm (its registered provider), attention through
// kernels::attention_forward.
//
// Memory: intermediates live in one scratch arena per run, allocated with aligned_alloc at the
// start of run() and freed at its end (the plan reuses bytes between buffers whose lives do not
// overlap, so the arena is the peak of the live intermediates, not their sum). A per-run arena
// is what makes concurrent runs safe without locks.
//
// Thread-safety: run() is const and may be called concurrently. The executable keeps its code
// (JIT dylib) alive; dropping the last shared_ptr frees it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/status.h"
#include "compiler/plan.h"
#include "runtime/thread_pool.h"

namespace ember::compiler {

using KernelFn = void (*)(char** buffers, int64_t begin, int64_t end);

class Executable {
  public:
    // `kernels[i]` implements plan.kernel_names[i]; `code` keeps them alive.
    Executable(Plan plan, std::vector<KernelFn> kernels, std::shared_ptr<void> code);

    Status run(void* const* inputs, void* const* outputs, runtime::ThreadPool* pool) const;

    int num_inputs() const { return plan_.num_inputs; }
    int num_outputs() const { return static_cast<int>(plan_.outputs.size()); }
    const OutputInfo& output(int i) const { return plan_.outputs[static_cast<size_t>(i)]; }
    int num_kernels() const { return static_cast<int>(kernels_.size()); }
    int num_steps() const { return static_cast<int>(plan_.steps.size()); }
    int64_t scratch_bytes() const { return plan_.scratch_bytes; }
    const Plan& plan() const { return plan_; }

  private:
    Plan plan_;
    std::vector<KernelFn> kernels_;
    std::shared_ptr<void> code_;
};

}  // namespace ember::compiler
