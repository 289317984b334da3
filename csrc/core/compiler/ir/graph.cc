#include "compiler/ir/graph.h"

#include <algorithm>
#include <cstring>
#include <sstream>

namespace ember::compiler {
namespace {

struct OpInfo {
    const char* name;
    OpKind kind;
    Lowering lowering;
};

constexpr OpInfo kOps[] = {
#define EMBER_OP(e, name, kind, lowering) {name, OpKind::k##kind, Lowering::k##lowering},
#include "compiler/ir/ops.def"
};

int category(DType t) {
    if (t == DType::kBool) return 0;
    if (t == DType::kFloat16 || t == DType::kBFloat16 || t == DType::kFloat32 || t == DType::kFloat64 ||
        kernels::is_float8(t))
        return 2;
    if (kernels::is_complex(t)) return 3;
    return 1;
}

// PyTorch's promotion, simplified to the types the compiler generates code for. A 0-d constant
// is "weak": it only decides the result when it is of a higher category (int tensor * 0.5).
DType promote(const Node& a, const Node& b) {
    const bool wa = a.is_scalar_constant(), wb = b.is_scalar_constant();
    if (wa != wb) {
        const Node& strong = wa ? b : a;
        const Node& weak = wa ? a : b;
        if (category(weak.dtype) <= category(strong.dtype)) return strong.dtype;
        return category(weak.dtype) == 2 ? DType::kFloat32 : DType::kInt64;
    }
    if (a.dtype == b.dtype) return a.dtype;
    if ((a.dtype == DType::kFloat16 && b.dtype == DType::kBFloat16) ||
        (a.dtype == DType::kBFloat16 && b.dtype == DType::kFloat16))
        return DType::kFloat32;
    if (category(a.dtype) != category(b.dtype)) return category(a.dtype) > category(b.dtype) ? a.dtype : b.dtype;
    if (category(a.dtype) == 2) {
        auto rank = [](DType t) {
            return t == DType::kFloat64 ? 3 : t == DType::kFloat32 ? 2 : kernels::is_float8(t) ? 0 : 1;
        };
        return rank(a.dtype) >= rank(b.dtype) ? a.dtype : b.dtype;
    }
    return static_cast<int>(a.dtype) >= static_cast<int>(b.dtype) ? a.dtype : b.dtype;
}

bool keeps_int(Op op) { return op == Op::kNeg || op == Op::kAbs || op == Op::kRelu; }

Status bad(const Node& n, const std::string& why) {
    return invalid_argument(std::string("op '") + op_name(n.op) + "'" +
                            (n.source.empty() ? "" : " at " + n.source) + ": " + why);
}

std::string shape_str(const std::vector<int64_t>& s) {
    std::string r = "[";
    for (size_t i = 0; i < s.size(); ++i) r += (i ? "," : "") + std::to_string(s[i]);
    return r + "]";
}

Status normalize_dim(const Node& n, int64_t& d, int64_t rank) {
    if (d < 0) d += rank;
    if (d < 0 || d >= std::max<int64_t>(rank, 1)) return bad(n, "dim out of range");
    return {};
}

Status infer_view(const Graph& g, Node& n) {
    const Node& x = g.node(n.inputs[0]);
    const auto& in = x.sizes;
    const int64_t rank = static_cast<int64_t>(in.size());
    n.dtype = x.dtype;
    std::vector<int64_t> out;
    switch (n.op) {
        case Op::kPad: {
            const auto& p = n.attrs.ints;
            if (p.size() != 3 * in.size() || n.attrs.floats.size() != 1) return bad(n, "needs {lo, hi, step} per dim and a value");
            for (size_t d = 0; d < in.size(); ++d) {
                const int64_t lo = p[3 * d], hi = p[3 * d + 1], step = p[3 * d + 2];
                if (lo < 0 || hi < 0 || step < 1) return bad(n, "pads must be >= 0 and steps >= 1");
                out.push_back(in[d] == 0 ? lo + hi : lo + (in[d] - 1) * step + 1 + hi);
            }
            break;
        }
        case Op::kExpand: {
            const auto& t = n.attrs.ints;
            if (t.size() < in.size()) return bad(n, "expand to fewer dims");
            const size_t lead = t.size() - in.size();
            for (size_t i = 0; i < t.size(); ++i) {
                int64_t s = t[i];
                if (i >= lead) {
                    int64_t is = in[i - lead];
                    if (s == -1) s = is;
                    if (is != s && is != 1) return bad(n, "cannot expand " + shape_str(in) + " to " + shape_str(t));
                } else if (s < 0) {
                    return bad(n, "-1 in a new leading dim");
                }
                out.push_back(s);
            }
            break;
        }
        case Op::kReshape: {
            out = n.attrs.ints;
            int64_t known = 1, infer = -1;
            for (size_t i = 0; i < out.size(); ++i) {
                if (out[i] == -1) {
                    if (infer >= 0) return bad(n, "two -1 sizes");
                    infer = static_cast<int64_t>(i);
                } else {
                    known *= out[i];
                }
            }
            if (infer >= 0) out[static_cast<size_t>(infer)] = known ? x.numel() / known : 0;
            if (numel_of(out) != x.numel()) return bad(n, "cannot reshape " + shape_str(in) + " to " + shape_str(out));
            break;
        }
        case Op::kPermute: {
            const auto& p = n.attrs.ints;
            if (static_cast<int64_t>(p.size()) != rank) return bad(n, "permutation rank");
            std::vector<bool> seen(in.size());
            for (int64_t d : p) {
                if (d < 0) d += rank;
                if (d < 0 || d >= rank || seen[d]) return bad(n, "not a permutation");
                seen[d] = true;
                out.push_back(in[d]);
            }
            break;
        }
        case Op::kTranspose: {
            if (n.attrs.ints.size() != 2) return bad(n, "transpose needs two dims");
            int64_t a = n.attrs.ints[0], b = n.attrs.ints[1];
            EMBER_RETURN_IF_ERROR(normalize_dim(n, a, rank));
            EMBER_RETURN_IF_ERROR(normalize_dim(n, b, rank));
            out = in;
            if (rank) std::swap(out[a], out[b]);
            break;
        }
        case Op::kSlice: {
            if (n.attrs.ints.size() != 4) return bad(n, "slice needs {dim, start, end, step}");
            int64_t d = n.attrs.ints[0];
            EMBER_RETURN_IF_ERROR(normalize_dim(n, d, rank));
            int64_t size = in[d], start = n.attrs.ints[1], end = n.attrs.ints[2], step = n.attrs.ints[3];
            if (step <= 0) return bad(n, "slice step must be positive");
            if (start < 0) start += size;
            if (end < 0) end += size;
            start = std::clamp<int64_t>(start, 0, size);
            end = std::clamp<int64_t>(end, start, size);
            out = in;
            out[d] = (end - start + step - 1) / step;
            break;
        }
        case Op::kSqueeze: {
            std::vector<bool> drop(in.size(), false);
            if (n.attrs.ints.empty()) {
                for (size_t i = 0; i < in.size(); ++i) drop[i] = in[i] == 1;
            }
            for (int64_t d : n.attrs.ints) {
                EMBER_RETURN_IF_ERROR(normalize_dim(n, d, rank));
                if (rank) drop[d] = in[d] == 1;
            }
            for (size_t i = 0; i < in.size(); ++i)
                if (!drop[i]) out.push_back(in[i]);
            break;
        }
        case Op::kUnsqueeze: {
            if (n.attrs.ints.size() != 1) return bad(n, "unsqueeze needs one dim");
            int64_t d = n.attrs.ints[0];
            EMBER_RETURN_IF_ERROR(normalize_dim(n, d, rank + 1));
            out = in;
            out.insert(out.begin() + d, 1);
            break;
        }
        default: return bad(n, "not a view");
    }
    n.sizes = out;
    return {};
}

Status infer_library(const Graph& g, Node& n) {
    auto in = [&](size_t i) -> const Node& { return g.node(n.inputs[i]); };
    switch (n.op) {
        case Op::kMm:
        case Op::kBmm: {
            if (n.inputs.size() != 2) return bad(n, "needs two operands");
            const auto &a = in(0).sizes, &b = in(1).sizes;
            const size_t r = n.op == Op::kMm ? 2 : 3;
            if (a.size() != r || b.size() != r || a[r - 1] != b[r - 2] || (r == 3 && a[0] != b[0]))
                return bad(n, "shapes " + shape_str(a) + " and " + shape_str(b) + " do not multiply");
            n.sizes = a;
            n.sizes[r - 1] = b[r - 1];
            n.dtype = in(0).dtype;
            return {};
        }
        case Op::kAddmm: {
            if (n.inputs.size() != 3) return bad(n, "needs (bias, a, b)");
            const auto &a = in(1).sizes, &b = in(2).sizes;
            if (a.size() != 2 || b.size() != 2 || a[1] != b[0]) return bad(n, "shapes do not multiply");
            n.sizes = {a[0], b[1]};
            auto bs = broadcast_shapes(in(0).sizes, n.sizes);
            if (!bs.ok() || bs.value() != n.sizes) return bad(n, "bias does not broadcast to the product");
            n.dtype = in(1).dtype;
            return {};
        }
        case Op::kAttention: {
            if (n.inputs.size() < 3 || n.inputs.size() > 4) return bad(n, "needs q, k, v [, mask]");
            const auto &q = in(0).sizes, &v = in(2).sizes;
            if (q.size() != 4 || v.size() != 4 || in(1).sizes.size() != 4) return bad(n, "q, k, v must be 4-d");
            n.sizes = {q[0], q[1], q[2], v[3]};
            n.dtype = in(0).dtype;
            return {};
        }
        default: return bad(n, "not a library op");
    }
}

}  // namespace

const char* op_name(Op op) { return kOps[static_cast<int>(op)].name; }
OpKind op_kind(Op op) { return kOps[static_cast<int>(op)].kind; }
Lowering op_lowering(Op op) { return kOps[static_cast<int>(op)].lowering; }

int64_t numel_of(const std::vector<int64_t>& sizes) {
    int64_t n = 1;
    for (int64_t s : sizes) n *= s;
    return n;
}

int64_t Node::numel() const { return numel_of(sizes); }

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& sizes) {
    std::vector<int64_t> st(sizes.size());
    int64_t s = 1;
    for (size_t i = sizes.size(); i-- > 0;) {
        st[i] = s;
        s *= std::max<int64_t>(sizes[i], 1);
    }
    return st;
}

StatusOr<std::vector<int64_t>> broadcast_shapes(const std::vector<int64_t>& a,
                                                const std::vector<int64_t>& b) {
    const size_t r = std::max(a.size(), b.size());
    std::vector<int64_t> out(r);
    for (size_t i = 0; i < r; ++i) {
        int64_t x = i < r - a.size() ? 1 : a[i - (r - a.size())];
        int64_t y = i < r - b.size() ? 1 : b[i - (r - b.size())];
        if (x != y && x != 1 && y != 1)
            return invalid_argument("shapes " + shape_str(a) + " and " + shape_str(b) + " do not broadcast");
        out[i] = x == 1 ? y : x;
    }
    return out;
}

bool reduce_keepdim(const Node& n) { return !n.attrs.ints.empty() && n.attrs.ints[0] != 0; }

std::vector<int> reduce_dims(const Node& n, int rank) {
    std::vector<int> dims;
    for (size_t i = 1; i < n.attrs.ints.size(); ++i) {
        int64_t d = n.attrs.ints[i];
        if (d < 0) d += rank;
        if (d >= 0 && d < rank && std::find(dims.begin(), dims.end(), d) == dims.end())
            dims.push_back(static_cast<int>(d));
    }
    if (n.attrs.ints.size() <= 1)
        for (int d = 0; d < rank; ++d) dims.push_back(d);
    std::sort(dims.begin(), dims.end());
    return dims;
}

Status infer_node(const Graph& g, Node& n) {
    for (int v : n.inputs)
        if (v < 0 || v >= static_cast<int>(g.nodes().size())) return bad(n, "input value out of range");
    auto in = [&](size_t i) -> const Node& { return g.node(n.inputs[i]); };
    auto arity = [&](size_t k) { return n.inputs.size() == k ? Status{} : bad(n, "wrong number of operands"); };
    switch (op_kind(n.op)) {
        case OpKind::kLeaf:
        case OpKind::kOpaque:
        case OpKind::kFull: return {};
        case OpKind::kUnary:
            EMBER_RETURN_IF_ERROR(arity(1));
            n.sizes = in(0).sizes;
            n.dtype = n.op == Op::kNot ? DType::kBool
                      : (category(in(0).dtype) < 2 && !keeps_int(n.op)) ? DType::kFloat32
                                                                        : in(0).dtype;
            return {};
        case OpKind::kBinary:
        case OpKind::kCompare: {
            EMBER_RETURN_IF_ERROR(arity(2));
            auto s = broadcast_shapes(in(0).sizes, in(1).sizes);
            if (!s.ok()) return bad(n, s.status().message());
            n.sizes = s.value();
            DType t = promote(in(0), in(1));
            if (n.op == Op::kDiv && category(t) < 2) t = DType::kFloat32;  // true division
            n.dtype = op_kind(n.op) == OpKind::kCompare ? DType::kBool : t;
            return {};
        }
        case OpKind::kWhere: {
            EMBER_RETURN_IF_ERROR(arity(3));
            auto s = broadcast_shapes(in(0).sizes, in(1).sizes);
            if (s.ok()) s = broadcast_shapes(s.value(), in(2).sizes);
            if (!s.ok()) return bad(n, s.status().message());
            n.sizes = s.value();
            n.dtype = promote(in(1), in(2));
            return {};
        }
        case OpKind::kCast:
            EMBER_RETURN_IF_ERROR(arity(1));
            n.sizes = in(0).sizes;
            return {};
        case OpKind::kReduce: {
            EMBER_RETURN_IF_ERROR(arity(1));
            const auto& s = in(0).sizes;
            const int rank = static_cast<int>(s.size());
            for (size_t i = 1; i < n.attrs.ints.size(); ++i) {
                int64_t d = n.attrs.ints[i];
                EMBER_RETURN_IF_ERROR(normalize_dim(n, d, rank));
            }
            std::vector<int> dims = reduce_dims(n, rank);
            n.sizes.clear();
            for (int d = 0; d < rank; ++d) {
                bool r = std::find(dims.begin(), dims.end(), d) != dims.end();
                if (!r) n.sizes.push_back(s[d]);
                else if (reduce_keepdim(n)) n.sizes.push_back(1);
            }
            n.dtype = in(0).dtype;
            if ((n.op == Op::kSum || n.op == Op::kProd) && category(n.dtype) < 2) n.dtype = DType::kInt64;
            if (n.op == Op::kMean && category(n.dtype) != 2) return bad(n, "mean needs a floating input");
            return {};
        }
        case OpKind::kView:
            EMBER_RETURN_IF_ERROR(arity(1));
            return infer_view(g, n);
        case OpKind::kLibrary: return infer_library(g, n);
        case OpKind::kComposite: {
            EMBER_RETURN_IF_ERROR(arity(1));
            if (n.attrs.ints.size() != 1) return bad(n, "needs {dim}");
            int64_t d = n.attrs.ints[0];
            EMBER_RETURN_IF_ERROR(normalize_dim(n, d, static_cast<int64_t>(in(0).sizes.size())));
            n.sizes = in(0).sizes;
            n.dtype = in(0).dtype;
            return {};
        }
    }
    return bad(n, "unknown op");
}

int Graph::push(Node n) {
    nodes_.push_back(std::move(n));
    return static_cast<int>(nodes_.size()) - 1;
}

int Graph::input(DType dtype, std::vector<int64_t> sizes, std::vector<int64_t> strides, std::string source) {
    Node n;
    n.op = Op::kInput;
    n.dtype = dtype;
    n.strides = strides.empty() ? contiguous_strides(sizes) : std::move(strides);
    n.sizes = std::move(sizes);
    n.input_index = num_inputs_++;
    n.source = std::move(source);
    return push(std::move(n));
}

int Graph::input_value(int i) const {
    for (size_t v = 0; v < nodes_.size(); ++v)
        if (nodes_[v].op == Op::kInput && nodes_[v].input_index == i) return static_cast<int>(v);
    return -1;
}

int Graph::scalar(double value, DType dtype) {
    Node n;
    n.op = Op::kConstant;
    n.dtype = dtype;
    n.attrs.floats = {value};
    n.attrs.ints = {static_cast<int64_t>(value)};
    return push(std::move(n));
}

int Graph::scalar_int(int64_t value, DType dtype) {
    Node n;
    n.op = Op::kConstant;
    n.dtype = dtype;
    n.attrs.floats = {static_cast<double>(value)};
    n.attrs.ints = {value};
    return push(std::move(n));
}

int Graph::constant(DType dtype, std::vector<int64_t> sizes, const void* data) {
    Node n;
    n.op = Op::kConstant;
    n.dtype = dtype;
    n.sizes = std::move(sizes);
    n.data.resize(static_cast<size_t>(n.numel() * kernels::element_size(dtype)));
    if (!n.data.empty()) std::memcpy(n.data.data(), data, n.data.size());
    if (n.data.empty()) n.data.resize(1);  // keep it a tensor constant even when empty
    return push(std::move(n));
}

int Graph::add(Op op, std::vector<int> inputs, Attrs attrs, std::string source) {
    Node n;
    n.op = op;
    n.inputs = std::move(inputs);
    n.attrs = std::move(attrs);
    n.source = std::move(source);
    n.inferred_ok = infer_node(*this, n).ok();
    return push(std::move(n));
}

int Graph::add(Op op, std::vector<int> inputs, Attrs attrs, DType dtype, std::vector<int64_t> sizes,
               std::string source) {
    Node n;
    n.op = op;
    n.inputs = std::move(inputs);
    n.attrs = std::move(attrs);
    n.dtype = dtype;
    n.sizes = std::move(sizes);
    n.source = std::move(source);
    return push(std::move(n));
}

int Graph::add_opaque(std::string name, std::vector<int> inputs, DType dtype, std::vector<int64_t> sizes,
                      std::string source) {
    Attrs a;
    a.str = std::move(name);
    return add(Op::kOpaque, std::move(inputs), std::move(a), dtype, std::move(sizes), std::move(source));
}

int Graph::cast(int x, DType dtype, std::string source) {
    return add(Op::kCast, {x}, {}, dtype, node(x).sizes, std::move(source));
}

int Graph::full(std::vector<int64_t> sizes, double value, DType dtype, std::string source) {
    Attrs a;
    a.floats = {value};
    return add(Op::kFull, {}, std::move(a), dtype, std::move(sizes), std::move(source));
}

int Graph::reduce(Op op, int x, std::vector<int64_t> dims, bool keepdim, std::string source) {
    Attrs a;
    a.ints.push_back(keepdim ? 1 : 0);
    a.ints.insert(a.ints.end(), dims.begin(), dims.end());
    return add(op, {x}, std::move(a), std::move(source));
}

namespace {
template <typename T>
void put(std::string& s, const T& v) {
    s.append(reinterpret_cast<const char*>(&v), sizeof(T));
}
template <typename T>
void put_vec(std::string& s, const std::vector<T>& v) {
    put(s, static_cast<uint64_t>(v.size()));
    if (!v.empty()) s.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}
}  // namespace

std::string Graph::serialize() const {
    std::string s;
    put(s, static_cast<uint64_t>(nodes_.size()));
    for (const Node& n : nodes_) {
        put(s, n.op);
        put(s, n.dtype);
        put_vec(s, n.inputs);
        put_vec(s, n.attrs.ints);
        put_vec(s, n.attrs.floats);
        put_vec(s, std::vector<char>(n.attrs.str.begin(), n.attrs.str.end()));
        put_vec(s, n.sizes);
        put_vec(s, n.strides);
        put_vec(s, n.data);
        put(s, n.input_index);
    }
    put(s, static_cast<uint64_t>(outputs_.size()));
    for (const Output& o : outputs_) {
        put(s, o.value);
        put(s, o.alias_input);
    }
    return s;
}

std::string Graph::to_string() const {
    std::ostringstream os;
    for (size_t v = 0; v < nodes_.size(); ++v) {
        const Node& n = nodes_[v];
        os << "  %" << v << " = " << (n.op == Op::kOpaque ? n.attrs.str : op_name(n.op));
        if (n.op == Op::kInput) os << "#" << n.input_index;
        os << "(";
        for (size_t i = 0; i < n.inputs.size(); ++i) os << (i ? ", %" : "%") << n.inputs[i];
        os << ")";
        if (!n.attrs.ints.empty()) os << " ints=" << shape_str(n.attrs.ints);
        if (!n.attrs.floats.empty()) {
            os << " floats=[";
            for (size_t i = 0; i < n.attrs.floats.size(); ++i) os << (i ? "," : "") << n.attrs.floats[i];
            os << "]";
        }
        os << " : " << kernels::dtype_name(n.dtype) << shape_str(n.sizes);
        if (n.op == Op::kInput) os << " strides=" << shape_str(n.strides);
        if (!n.source.empty()) os << "  # " << n.source;
        os << "\n";
    }
    for (size_t i = 0; i < outputs_.size(); ++i) {
        os << "  output " << i << " = %" << outputs_[i].value;
        if (outputs_[i].alias_input >= 0) os << " (in place into input #" << outputs_[i].alias_input << ")";
        os << "\n";
    }
    return os.str();
}

}  // namespace ember::compiler
