// FlexAttention's score_mod and mask_mod (and the gradient of score_mod) as small programs that
// core evaluates a row at a time: the scores of one query against a block of keys. A register
// holds a whole row (kFlexLanes values), and each instruction applies one op to every lane, so
// the per-instruction dispatch is paid once per row and the lane loops vectorize. No code is
// generated, so a new score_mod costs nothing to "compile".
//
// Values are doubles: integers (indices, int tensors) are exact in them, and an instruction whose
// result is float32 in the traced graph rounds to float32 (`round_f32`), which gives exactly the
// float32 result for + - * / and sqrt. Buffers (captured tensors: bias tables, document ids) are
// read through strided views; an index outside a buffer fails the kernel with a message naming it.
//
// The Python side (torch_ember/flex/program.py) builds programs from the traced FX graphs and
// falls back to PyTorch's dense implementation for any op without an opcode here.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "kernels/tensor_view.h"

namespace ember::kernels::flex {

constexpr int64_t kFlexLanes = 128;

// Keep in step with torch_ember/flex/program.py (OPCODES).
enum class Op : int32_t {
    kScore = 0,  // dst = the score row
    kGrad,       // dst = the incoming gradient row (the gradient program of score_mod)
    kBatch,      // dst = b
    kHead,       // dst = h
    kQuery,      // dst = the query index of the row
    kKey,        // dst = the key index of each lane
    kConst,      // dst = constants[c]
    kAdd, kSub, kMul, kDiv, kNeg, kAbs, kExp, kLog, kTanh, kSigmoid, kSqrt, kRsqrt, kPow,
    kMaximum, kMinimum, kEq, kNe, kLt, kLe, kGt, kGe, kAnd, kOr, kXor, kNot,
    kWhere,      // dst = a ? b : c
    kFloorDivide, kRemainder, kFloor, kCeil, kTrunc, kRound,
    kToBool,     // a != 0
    kToInt,      // truncation toward zero, as a float -> int cast
    kLoad,       // dst = buffers[c][reg a, reg b, reg d, reg e] (as many indices as the buffer has dims)
    kTanhBackward,     // a * (1 - b^2), b = tanh(x)
    kSigmoidBackward,  // a * b * (1 - b), b = sigmoid(x)
    kExp2, kLog2, kReciprocal, kSin, kCos,
    kCount
};

struct Instr {
    Op op = Op::kConst;
    int32_t dst = 0;
    int32_t a = -1, b = -1, c = -1;  // operand registers (kConst: c = constant index; kLoad: c = buffer)
    int32_t d = -1, e = -1;          // more index registers of kLoad
    bool round_f32 = false;          // the traced result is float32
};

// A gradient program's contribution to the gradient of a captured tensor (a learned bias table):
// every lane adds register `value` at [reg idx[0], ...] of gradient `grad` (the captured tensor's
// shape, float32, contiguous; see Evaluator::scatter).
struct Scatter {
    int32_t grad = 0;
    int32_t idx[4] = {-1, -1, -1, -1};
    int32_t value = 0;
};

struct Program {
    std::vector<Instr> code;
    std::vector<double> constants;
    std::vector<TensorView> buffers;  // real dtypes, any strides
    std::vector<Scatter> scatters;    // gradient programs only
    std::vector<TensorView> grads;    // the gradients the scatters add to (their shapes)
    int32_t num_regs = 0;
    int32_t result = 0;  // the register holding the output row

    bool empty() const { return code.empty(); }
};

// Validates register, constant and buffer references (once, before a kernel runs it).
Status validate(const Program& p, const char* what);

// Where a row sits: batch, head, query index and the keys [kv0, kv0 + n), n <= kFlexLanes.
struct RowPos {
    int64_t b = 0, h = 0, q = 0, kv0 = 0, n = 0;
};

// Per-thread register file for one program.
class Evaluator {
  public:
    explicit Evaluator(const Program& p);
    // Runs the program over one row; `score` and `grad` (either may be null when the program does
    // not read it) hold n values. *result points at the output row, valid until the next call.
    Status run(const RowPos& pos, const float* score, const float* grad, const double** result);
    // After run(): adds each scatter's value lanes into `grads[s.grad]` (float32, contiguous,
    // the shapes of p.grads; the caller's own copies, so no other thread writes them).
    Status scatter(int64_t n, float* const* grads);

  private:
    const Program& p_;
    std::vector<double> regs_;
};

}  // namespace ember::kernels::flex
