// decompose: rewrites composite ops into the fused vocabulary. softmax(x, d) becomes
// amax -> sub -> exp -> sum -> exp * (1 / sum) over dim d (the max shift keeps exp from
// overflowing; one reciprocal per row and a multiply per element, as PyTorch's CPU kernel rounds);
// log_softmax becomes (x - max) - log(sum(exp(x - max))). The fuse pass turns either into one
// kernel with three loops per row, computing in f32 for f16/bf16 inputs as PyTorch does.
//
// A reduction with few outputs and many inputs per output (a loss's mean over a whole batch, a
// norm) would run as one kernel row per output, on one thread each. It is split in two: a first
// reduction keeps enough of the reduced extent (leading reduced dims, or the last one cut into
// equal chunks) to give the threads work, and a second one folds those partial results. The split
// depends only on the shapes, so results do not change with the thread count.
#include <algorithm>
#include <unordered_map>

#include "compiler/passes/passes.h"

namespace ember::compiler {

namespace {

constexpr int64_t kFewOutputs = 16;     // below this many outputs, a reduction is split
constexpr int64_t kSplitFrom = 1 << 16;  // ... when each output folds at least this many inputs
constexpr int64_t kPartials = 64;        // partial results the first reduction aims for
constexpr int64_t kMinChunk = 2048;      // inputs folded per partial result, at least

// The largest chunk size in [kMinChunk, size / parts] that divides `size`, or 0.
int64_t chunk_of(int64_t size, int64_t parts) {
    for (int64_t c = std::min<int64_t>(size / parts, 1 << 16); c >= kMinChunk; --c)
        if (size % c == 0) return c;
    return 0;
}

int reshape(Graph& out, int x, std::vector<int64_t> sizes, const std::string& source) {
    Attrs a;
    a.ints = std::move(sizes);
    return out.add(Op::kReshape, {x}, std::move(a), source);
}

// Returns the split form of reduction node `n` (input `x` in `out`), or -1 to keep it whole.
int split_reduction(Graph& out, const Node& n, int x) {
    if (n.op != Op::kSum && n.op != Op::kMean && n.op != Op::kAmax && n.op != Op::kAmin) return -1;
    const std::vector<int64_t> sizes = out.node(x).sizes;
    const int rank = static_cast<int>(sizes.size());
    const std::vector<int> dims = reduce_dims(n, rank);
    int64_t outputs = 1, folded = 1;
    for (int d = 0; d < rank; ++d)
        (std::find(dims.begin(), dims.end(), d) != dims.end() ? folded : outputs) *= sizes[d];
    if (outputs >= kFewOutputs || folded < kSplitFrom || dims.empty()) return -1;

    // Keep leading reduced dims while the partial results are too few.
    int64_t kept = outputs, rest = folded;
    size_t k = 0;
    while (k + 1 < dims.size() && kept < kPartials && rest / sizes[dims[k]] >= kMinChunk) {
        kept *= sizes[dims[k]];
        rest /= sizes[dims[k]];
        ++k;
    }
    const int last = dims.back();
    const int64_t chunk = kept < kPartials ? chunk_of(sizes[last], (kPartials + kept - 1) / kept) : 0;
    if (chunk == 0 && kept < kFewOutputs) return -1;  // no split gives the threads more work

    // Partial results keep float32 for 16-bit floats; integer sums are exact in int64.
    int y = x;
    const DType t = out.node(y).dtype;
    if (t == DType::kFloat16 || t == DType::kBFloat16) y = out.cast(y, DType::kFloat32, n.source);
    std::vector<int64_t> first(dims.begin() + static_cast<long>(k), dims.end());  // folded first
    if (chunk > 0) {
        // Cut the last reduced dim into [size / chunk, chunk] (a view) and keep the first part.
        std::vector<int64_t> cut(sizes.begin(), sizes.begin() + last);
        cut.push_back(sizes[last] / chunk);
        cut.push_back(chunk);
        cut.insert(cut.end(), sizes.begin() + last + 1, sizes.end());
        y = reshape(out, y, cut, n.source);
        for (int64_t& d : first) d += d >= last ? 1 : 0;
    }
    int part = out.reduce(n.op, y, first, true, n.source);
    if (chunk > 0) {  // back to the input's rank: the chunk dim folded to 1, the cut dim kept
        std::vector<int64_t> merged = out.node(part).sizes;
        merged.erase(merged.begin() + last + 1);
        part = reshape(out, part, merged, n.source);
    }
    int id = out.reduce(n.op, part, {dims.begin(), dims.end()}, reduce_keepdim(n), n.source);
    if (out.node(id).dtype != n.dtype) id = out.cast(id, n.dtype, n.source);
    return id;
}

}  // namespace

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
                id = out.add(Op::kMul, {e, out.add(Op::kReciprocal, {z}, {}, src)}, {}, src);
            } else {
                const int lz = out.add(Op::kLog, {z}, {}, src);
                id = out.add(Op::kSub, {s, lz}, {}, src);
            }
            if (out.node(id).dtype != n.dtype) id = out.cast(id, n.dtype, src);
        } else if (op_kind(n.op) == OpKind::kReduce && n.inputs.size() == 1) {
            id = split_reduction(out, n, ins[0]);
            if (id < 0) id = out.add(n.op, ins, n.attrs, n.dtype, n.sizes, n.source);
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
