// compile(): Graph -> Executable, through the named passes in order:
//
//   verify -> [cache lookup] -> decompose -> fuse -> plan_buffers -> llvm (codegen) -> jit
//
// The cache key is the SHA-256 of the verified graph (with its source lines, which label the
// plan's steps for profilers), kCompilerVersion and the JIT's host
// fingerprint. On a hit the passes and codegen are skipped: the stored plan is deserialized and
// the stored object linked. A corrupt entry is reported in stats (cache_corrupt, warning), then
// recompiled and replaced; it is never used.
//
// Debugging: EMBER_DUMP_IR=<pass>[,<pass>...] or =all prints the IR after each named pass to
// stderr (graph = the input, decompose, fuse, plan_buffers, llvm = optimized LLVM IR);
// EMBER_VERIFY_IR=1 re-verifies the graph after decompose. Options override the environment.
//
// Errors: a graph with untranslatable ops fails with kUnimplemented naming each op and its
// source line (see verifier.h); built without LLVM, compile() fails with kUnimplemented.
// Thread-safety: compile() may run concurrently on many threads; each call is independent.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "compiler/executable.h"
#include "compiler/ir/graph.h"

namespace ember::compiler {

// Bumped whenever generated code or the plan format changes, so old cache entries miss.
inline constexpr const char* kCompilerVersion = "ember-compiler 3";

struct CompileOptions {
    std::string cache_dir;    // empty: no persistent cache
    bool use_cache = true;    // the glue maps EMBER_CACHE=0 to false
    std::string dump_ir;      // empty: read EMBER_DUMP_IR
    bool verify_each_pass = false;  // or EMBER_VERIFY_IR=1
};

struct CompileStats {
    double verify_ms = 0;    // verifier
    double lower_ms = 0;     // decompose
    double optimize_ms = 0;  // fuse + plan_buffers
    double codegen_ms = 0;   // LLVM IR emission, O2, machine code (split below)
    double codegen_opt_ms = 0;  // of which the O2 pipeline
    double codegen_mc_ms = 0;   // of which machine code emission
    double jit_ms = 0;       // linking the object and resolving kernels
    double load_ms = 0;      // cache read, checksum and plan deserialization
    double total_ms = 0;
    int nodes = 0;           // graph nodes
    int nodes_fused = 0;     // elementwise, view and reduction nodes folded into kernels
    int kernels = 0;         // generated kernels
    int library_calls = 0;   // GEMM and attention steps
    int64_t object_bytes = 0;
    int64_t scratch_bytes = 0;
    bool cache_hit = false;
    bool cache_corrupt = false;  // an entry existed but failed its checks; it was replaced
    std::string cache_key;
    std::string warning;  // set when the cache was corrupt or could not be written
    std::string to_string() const;  // one line for the compile log
};

// Whether this build has the LLVM backend (EMBER_WITH_LLVM).
bool llvm_available();

StatusOr<std::shared_ptr<const Executable>> compile(const Graph& graph, const CompileOptions& options,
                                                    CompileStats* stats = nullptr);

}  // namespace ember::compiler
