#include "compiler/ir/verifier.h"

#include <string>

namespace ember::compiler {
namespace {

bool supported_dtype(DType t) { return !kernels::is_complex(t); }

bool library_dtype(DType t) {
    return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kBFloat16 || t == DType::kFloat16;
}

std::string where(const Node& n) {
    return std::string("op '") + (n.op == Op::kOpaque ? n.attrs.str : op_name(n.op)) + "' at " +
           (n.source.empty() ? "<unknown>" : n.source);
}

}  // namespace

Status verify(const Graph& g) {
    std::string unsupported;
    int count = 0;
    auto reject = [&](const Node& n, const std::string& why) {
        unsupported += (count++ ? "; " : "") + where(n) + (why.empty() ? "" : " (" + why + ")");
    };
    const int nn = static_cast<int>(g.nodes().size());
    for (int v = 0; v < nn; ++v) {
        const Node& n = g.node(v);
        for (int in : n.inputs)
            if (in < 0 || in >= v) return invalid_argument(where(n) + ": operand %" + std::to_string(in) + " is not an earlier value");
        if (op_lowering(n.op) == Lowering::kNone) {
            reject(n, "");
            continue;
        }
        if (!supported_dtype(n.dtype)) {
            reject(n, std::string("dtype ") + kernels::dtype_name(n.dtype));
            continue;
        }
        if (op_kind(n.op) == OpKind::kLibrary) {
            bool ok = library_dtype(n.dtype);
            for (int in : n.inputs) ok = ok && (library_dtype(g.node(in).dtype) || g.node(in).dtype == DType::kBool);
            if (!ok) {
                reject(n, std::string("dtype ") + kernels::dtype_name(n.dtype));
                continue;
            }
        }
        if (n.op == Op::kInput && n.strides.size() != n.sizes.size())
            return invalid_argument(where(n) + ": strides and sizes differ in rank");
        if (n.op == Op::kConstant && !n.data.empty() &&
            static_cast<int64_t>(n.data.size()) < n.numel() * kernels::element_size(n.dtype))
            return invalid_argument(where(n) + ": constant data too short");
        if (!n.inferred_ok || op_kind(n.op) != OpKind::kLeaf) {
            Node check = n;
            Status st = infer_node(g, check);
            if (!st.ok()) return st;
            if (check.sizes != n.sizes || check.dtype != n.dtype)
                return invalid_argument(where(n) + ": declared " + kernels::dtype_name(n.dtype) +
                                        " shape does not match the op's rules (expected " +
                                        kernels::dtype_name(check.dtype) + ")");
        }
        for (int64_t s : n.sizes)
            if (s < 0) return invalid_argument(where(n) + ": negative size");
    }
    if (count) return unimplemented("ember compiler cannot translate " + std::to_string(count) + " op(s): " + unsupported);
    if (g.outputs().empty()) return invalid_argument("graph has no outputs");
    for (const Output& o : g.outputs()) {
        if (o.value < 0 || o.value >= nn) return invalid_argument("output names no value");
        if (o.alias_input >= 0) {
            int iv = g.input_value(o.alias_input);
            if (iv < 0) return invalid_argument("in-place output names no input");
            const Node &in = g.node(iv), &val = g.node(o.value);
            if (in.sizes != val.sizes || in.dtype != val.dtype)
                return invalid_argument("in-place output differs from its input in shape or dtype");
        }
    }
    return {};
}

}  // namespace ember::compiler
