// decompose: rewrites composite ops into the fused vocabulary. softmax(x, d) becomes
// amax -> sub -> exp -> sum -> div over dim d (the max shift keeps exp from overflowing);
// log_softmax becomes (x - max) - log(sum(exp(x - max))). The fuse pass turns either into one
// kernel with three loops per row, computing in f32 for f16/bf16 inputs as PyTorch does.
#include <unordered_map>

#include "compiler/passes/passes.h"

namespace ember::compiler {

StatusOr<Graph> decompose(const Graph& g) {
    Graph out;
    std::vector<int> map(g.nodes().size(), -1);
    for (size_t v = 0; v < g.nodes().size(); ++v) {
        const Node& n = g.node(static_cast<int>(v));
        std::vector<int> ins;
        for (int i : n.inputs) ins.push_back(map[static_cast<size_t>(i)]);
        int id;
        if (n.op == Op::kInput) {
            id = out.input(n.dtype, n.sizes, n.strides, n.source);
        } else if (n.op == Op::kConstant && !n.data.empty()) {
            id = out.constant(n.dtype, n.sizes, n.data.data());
        } else if (n.op == Op::kSoftmax || n.op == Op::kLogSoftmax) {
            const int x = ins[0];
            const int64_t d = n.attrs.ints.at(0);
            const std::string& src = n.source;
            const int m = out.reduce(Op::kAmax, x, {d}, true, src);
            const int s = out.add(Op::kSub, {x, m}, {}, src);
            const int e = out.add(Op::kExp, {s}, {}, src);
            const int z = out.reduce(Op::kSum, e, {d}, true, src);
            if (n.op == Op::kSoftmax) {
                id = out.add(Op::kDiv, {e, z}, {}, src);
            } else {
                const int lz = out.add(Op::kLog, {z}, {}, src);
                id = out.add(Op::kSub, {s, lz}, {}, src);
            }
            if (out.node(id).dtype != n.dtype) id = out.cast(id, n.dtype, src);
        } else {
            id = out.add(n.op, ins, n.attrs, n.dtype, n.sizes, n.source);
        }
        map[v] = id;
    }
    for (const Output& o : g.outputs()) {
        if (o.alias_input >= 0) out.mark_output_alias(map[static_cast<size_t>(o.value)], o.alias_input);
        else out.mark_output(map[static_cast<size_t>(o.value)]);
    }
    return out;
}

}  // namespace ember::compiler
