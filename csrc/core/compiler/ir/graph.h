// Graph: the compiler's input IR. A DAG of values in which every value is produced by one node
// (inputs and constants are nodes too) and a value is named by its node's index. Nodes are
// appended in topological order: a node's inputs always have smaller indices.
//
// Shapes are static: every size is known when the graph is built (the frontend recompiles for
// new shapes, as Dynamo does). Strides exist only on inputs (in elements, any layout, 0 for
// broadcast); everything the compiler creates is contiguous row-major.
//
// Building: the frontend calls input()/constant()/add(...) in order, then mark_output(). add()
// with dtype and sizes records what the frontend believes (FX meta); the verifier re-derives
// both from the op and reports a mismatch instead of miscompiling. add() without them infers.
//
// Thread-safety: a Graph is a plain value; build it on one thread, then compile() only reads it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "kernels/dtype.h"

namespace ember::compiler {

using kernels::DType;

enum class Op : uint8_t {
#define EMBER_OP(e, name, kind, lowering) k##e,
#include "compiler/ir/ops.def"
};

enum class OpKind : uint8_t { kLeaf, kUnary, kBinary, kCompare, kWhere, kCast, kFull, kReduce, kView,
                              kLibrary, kComposite, kOpaque };
enum class Lowering : uint8_t { kFused, kLibrary, kDecompose, kNone };

const char* op_name(Op op);
OpKind op_kind(Op op);
Lowering op_lowering(Op op);

struct Attrs {
    std::vector<int64_t> ints;
    std::vector<double> floats;
    std::string str;
};

struct Node {
    Op op = Op::kOpaque;
    std::vector<int> inputs;
    Attrs attrs;
    DType dtype = DType::kFloat32;
    std::vector<int64_t> sizes;
    std::vector<int64_t> strides;  // inputs only (elements)
    std::vector<uint8_t> data;     // tensor constants only: row-major bytes
    int input_index = -1;          // inputs only: position in Executable::run's inputs
    std::string source;            // the user's "file:line", for error messages
    bool inferred_ok = true;       // false when add() could not infer dtype/sizes

    int64_t numel() const;
    bool is_scalar_constant() const { return op == Op::kConstant && data.empty(); }
};

// Output `value`; when alias_input >= 0 the output is an in-place update of that graph input:
// the executable writes the result into the input's memory and run() ignores outputs[i].
struct Output {
    int value = -1;
    int alias_input = -1;
};

class Graph {
  public:
    // A runtime input; strides default to contiguous. Returns its value id.
    int input(DType dtype, std::vector<int64_t> sizes, std::vector<int64_t> strides = {},
              std::string source = {});
    // 0-d constants, folded into the generated code.
    int scalar(double value, DType dtype = DType::kFloat32);
    int scalar_int(int64_t value, DType dtype = DType::kInt64);
    // A small tensor constant; `data` (row-major, numel * element_size bytes) is copied.
    int constant(DType dtype, std::vector<int64_t> sizes, const void* data);

    // Infers dtype and sizes from the op (see ops.def); Cast and Full need the explicit form.
    int add(Op op, std::vector<int> inputs, Attrs attrs = {}, std::string source = {});
    // Records the frontend's dtype and sizes; the verifier checks them.
    int add(Op op, std::vector<int> inputs, Attrs attrs, DType dtype, std::vector<int64_t> sizes,
            std::string source = {});
    // An op the frontend cannot map (e.g. "aten.nonzero"); compile() then fails naming it.
    int add_opaque(std::string name, std::vector<int> inputs, DType dtype, std::vector<int64_t> sizes,
                   std::string source = {});

    // Conveniences over add().
    int cast(int x, DType dtype, std::string source = {});
    int full(std::vector<int64_t> sizes, double value, DType dtype, std::string source = {});
    int reduce(Op op, int x, std::vector<int64_t> dims, bool keepdim, std::string source = {});

    void mark_output(int value) { outputs_.push_back({value, -1}); }
    void mark_output_alias(int value, int input_index) { outputs_.push_back({value, input_index}); }

    const std::vector<Node>& nodes() const { return nodes_; }
    const Node& node(int v) const { return nodes_[static_cast<size_t>(v)]; }
    const std::vector<Output>& outputs() const { return outputs_; }
    int num_inputs() const { return num_inputs_; }
    // The value id of the i-th input.
    int input_value(int i) const;

    // Canonical bytes of everything that determines the compiled code (not source lines): the
    // cache key hashes this.
    std::string serialize() const;
    // Human-readable listing (EMBER_DUMP_IR).
    std::string to_string() const;

  private:
    int push(Node n);
    std::vector<Node> nodes_;
    std::vector<Output> outputs_;
    int num_inputs_ = 0;
};

// Shape and dtype rules (graph.cc): fills n.dtype/n.sizes from the op, its inputs and attrs.
// Cast and Full keep n.dtype. Used by add() and by the verifier.
Status infer_node(const Graph& g, Node& n);

// Broadcast two shapes numpy-style.
StatusOr<std::vector<int64_t>> broadcast_shapes(const std::vector<int64_t>& a,
                                                const std::vector<int64_t>& b);
std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& sizes);
int64_t numel_of(const std::vector<int64_t>& sizes);
// Normalized, sorted reduced dims of a Reduce node over an input of rank `rank`.
std::vector<int> reduce_dims(const Node& n, int rank);
bool reduce_keepdim(const Node& n);

}  // namespace ember::compiler
