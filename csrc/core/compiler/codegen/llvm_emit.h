// LLVM backend: turns the plan's kernels into one optimized object file for the host CPU.
//
// Each Kernel becomes `void <name>(char** buffers, int64_t begin, int64_t end)`, running outer
// iterations [begin, end) so that the Executable can split the range across its thread pool.
// buffers[i] is the base address of plan.buffers[i]. Loops are emitted plainly, in f32 for
// f16/bf16/f32 data (converted on load and store), f64 for f64 and i64 for integers, and left to
// LLVM's O2 pipeline (loop and SLP vectorizers) tuned for the host's CPU and features.
// Transcendentals (exp, log, tanh, erf and what derives from them) are emitted as inlinable IR
// rather than libm calls, which would keep loops scalar.
//
// Thread-safety: emit_object may run on several threads at once (each call has its own LLVM
// context and target machine). Only built when EMBER_WITH_LLVM is on.
#pragma once

#include <string>

#include "base/status.h"
#include "compiler/plan.h"

namespace ember::compiler::codegen {

struct ObjectCode {
    std::string object;   // ELF relocatable object
    std::string ir_text;  // optimized LLVM IR, only when asked for (EMBER_DUMP_IR=llvm)
    double emit_ms = 0;   // building the IR
    double opt_ms = 0;    // the O2 pipeline
    double mc_ms = 0;     // machine code
};

StatusOr<ObjectCode> emit_object(const Plan& plan, bool want_ir_text);

}  // namespace ember::compiler::codegen
