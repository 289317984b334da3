// Plan: what the passes produce from a Graph and what the backend and the Executable consume.
//
// Two levels live here:
//  - the loop IR of each fused kernel (Kernel: a domain, index expressions, expression DAG,
//    phases of loops). Codegen turns it into LLVM IR; it is not needed after that, so it is not
//    part of the serialized plan.
//  - the runtime plan (buffers, steps, outputs, constants): what the Executable needs to run
//    the compiled object code. It is serialized next to the object file in the compile cache.
//
// Kernel model. A kernel iterates a domain: `outer` dims (linearized, split across threads as
// [begin, end) by the Executable) and `inner` dims (a loop nest run for every outer index). A
// kernel is a list of phases; each phase is one inner loop nest that evaluates stores and
// reductions, followed by `post` stores evaluated once per outer index (reduction results and
// values over the outer dims only). A later phase may use the results of earlier phases' reductions
// (softmax: max; sum of exp; write exp/sum). Every store of a phase is evaluated before any of
// them is written, so an in-place update reads the old value.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "compiler/ir/graph.h"

namespace ember::compiler {

// The register type an expression computes in: f32 for f16/bf16/f32 (converted on load and
// store), f64, i64 for every integer type, i1 for bool.
enum class Cls : uint8_t { kBool, kI64, kF32, kF64 };
Cls value_class(DType t);
inline bool is_float_cls(Cls c) { return c == Cls::kF32 || c == Cls::kF64; }

// Index expression over the domain variables. Vars 0..outer-1 are the outer dims, then inner.
struct Idx {
    // kShift: clamp(a - b, 0, c), the source index of a padded dim (clamped so that a masked-off
    // element still addresses memory inside the buffer).
    enum Kind : uint8_t { kVar, kConst, kAdd, kMul, kDiv, kMod, kShift } kind = kConst;
    int64_t a = 0;   // kVar: var; kConst: value; others: operand idx id
    int64_t b = 0;   // kAdd: operand idx id; kMul/kDiv/kMod: constant; kShift: the shift
    int64_t hi = 1;  // exclusive upper bound of the value (for simplification)
    int64_t c = 0;   // kShift: the clamp's upper bound (inclusive)
};

struct Expr {
    // kInRange: idx `addr` lies in [lo, hi) on the grid lo + k * step (a padded dim's real part).
    enum Kind : uint8_t { kLoad, kConst, kOp, kReduced, kInRange } kind = kConst;
    Op op = Op::kAdd;
    Cls cls = Cls::kF32;
    int args[3] = {-1, -1, -1};
    int buffer = -1;                // kLoad
    DType dtype = DType::kFloat32;  // kLoad: element type in memory; kOp kCast: target type; kPow: result type
    int addr = -1;                  // kLoad: idx id of the element offset
    double f = 0;                   // kConst
    int64_t i = 0;                  // kConst (integer classes)
    int reduction = -1;             // kReduced
    int64_t lo = 0, hi = 0, step = 1;  // kInRange
};

struct Store {
    int buffer = -1;
    DType dtype = DType::kFloat32;
    int addr = -1;  // idx id
    int expr = -1;
};

struct Reduction {
    Op op = Op::kSum;  // kSum, kMean, kAmax, kAmin, kProd
    int expr = -1;
    Cls acc = Cls::kF32;
    int64_t count = 1;  // elements reduced (for mean)
};

struct Phase {
    std::vector<Store> stores;    // evaluated in the inner loop nest
    std::vector<int> reductions;  // indices into Kernel::reductions
    std::vector<Store> post;      // evaluated once per outer index, after the loop
};

struct Kernel {
    std::string name;
    std::vector<int64_t> outer;
    std::vector<int64_t> inner;
    // When > 0, the innermost loop covers a chunk of a long last dim whose full size is `tail`:
    // it runs min(inner.back(), tail - chunk * inner.back()) times, chunk = the last outer var.
    int64_t tail = 0;
    std::vector<Idx> idx;
    std::vector<Expr> exprs;
    std::vector<Reduction> reductions;
    std::vector<Phase> phases;
    int64_t outer_count() const;
};

// A strided view of a buffer, for library calls.
struct TensorRef {
    int buffer = -1;
    int64_t offset = 0;  // elements
    DType dtype = DType::kFloat32;
    std::vector<int64_t> sizes, strides;
};

struct Buffer {
    enum Kind : uint8_t { kInput, kOutput, kScratch, kConstant } kind = kScratch;
    int index = -1;  // input / output / constant index
    DType dtype = DType::kFloat32;
    std::vector<int64_t> sizes, strides;
    int64_t offset = 0;  // kScratch: byte offset in the run's arena
    int64_t bytes() const;
};

struct Step {
    enum Kind : uint8_t { kKernel, kGemm, kAttention } kind = kKernel;
    int kernel = -1;      // kKernel: index into kernel_names
    int64_t range = 0;    // kKernel: outer iterations
    int64_t grain = 1;    // kKernel: outer iterations per thread chunk, at least
    std::vector<TensorRef> refs;  // kGemm: a, b, c; kAttention: q, k, v, out, lse [, mask]
    double f0 = 0, f1 = 0;        // kGemm: alpha, beta; kAttention: scale
    int64_t i0 = 0;               // kAttention: causal
    std::string label;            // for profilers: what the step computes and the source lines
    // Buffers read and written, for liveness (not serialized).
    std::vector<int> reads, writes;
};

struct OutputInfo {
    DType dtype = DType::kFloat32;
    std::vector<int64_t> sizes, strides;
    int alias_input = -1;
};

struct Plan {
    std::vector<Kernel> kernels;  // codegen input; empty after deserialize()
    std::vector<std::string> kernel_names;
    std::vector<Buffer> buffers;
    std::vector<Step> steps;
    std::vector<std::vector<uint8_t>> constants;
    std::vector<OutputInfo> outputs;
    int num_inputs = 0;
    int64_t scratch_bytes = 0;
    int nodes_fused = 0;

    std::string serialize() const;
    static StatusOr<Plan> deserialize(std::string_view bytes);
    std::string to_string() const;  // EMBER_DUMP_IR
};

}  // namespace ember::compiler
