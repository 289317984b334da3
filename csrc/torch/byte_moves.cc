#include "byte_moves.h"

#include <ATen/ATen.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ember::torch_glue {
namespace {

// The integer type whose elements have the same bits: uint8 for float8, int64 for complex64
// (complex128 has no 16-byte integer peer). Undefined for every other dtype.
std::optional<c10::ScalarType> bits_type(c10::ScalarType t) {
    if (t == at::kFloat8_e4m3fn || t == at::kFloat8_e5m2) return at::kByte;
    if (t == at::kComplexFloat) return at::kLong;
    return std::nullopt;
}

// Element moves: each output element is one input element's bits (or an index/condition picks
// which). index_put with accumulate=True adds, so it is checked separately below.
bool moves_elements(const std::string& name) {
    static const char* const kOps[] = {"aten::cat", "aten::stack", "aten::index", "aten::index_select",
                                       "aten::flip", "aten::roll", "aten::where", "aten::index_put",
                                       "aten::index_put_", "aten::_index_put_impl_", "aten::gather",
                                       "aten::masked_select", "aten::take", "aten::tril", "aten::triu"};
    for (const char* op : kOps)
        if (name == op) return true;
    return false;
}

// Arguments holding the moved values; the others (indices, conditions, dims) are left as they are.
bool holds_data(const std::string& arg) {
    return arg == "self" || arg == "tensors" || arg == "other" || arg == "values" || arg == "out";
}

}  // namespace

bool run_moves_as_bits(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
    const auto& schema = op.schema();
    if (!moves_elements(schema.name())) return false;
    const auto& args = schema.arguments();
    const size_t begin = stack->size() - args.size();
    std::optional<c10::ScalarType> dtype;
    bool same_kind = true;  // every data tensor of one dtype with a bits type, and no lazy conj/neg
    auto check = [&](const at::Tensor& t) {
        if (!t.defined()) return;
        if (!bits_type(t.scalar_type()) || (dtype && *dtype != t.scalar_type()) || t.is_conj() || t.is_neg())
            same_kind = false;
        dtype = t.scalar_type();
    };
    for (size_t i = 0; i < args.size(); ++i) {
        const c10::IValue& v = (*stack)[begin + i];
        if (args[i].name() == "accumulate" && v.isBool() && v.toBool()) return false;
        if (!holds_data(args[i].name())) continue;
        if (v.isTensor()) check(v.toTensor());
        else if (v.isTensorList()) for (const at::Tensor& t : v.toTensorVector()) check(t);
        else if (!v.isNone()) return false;
    }
    if (!dtype || !same_kind) return false;
    const c10::ScalarType bits = *bits_type(*dtype);

    std::vector<std::pair<at::Tensor, at::Tensor>> byte_views;  // (integer view, caller's tensor)
    for (size_t i = 0; i < args.size(); ++i) {
        if (!holds_data(args[i].name())) continue;
        c10::IValue& v = (*stack)[begin + i];
        if (v.isTensor()) {
            const at::Tensor t = v.toTensor();
            byte_views.emplace_back(t.view(bits), t);
            v = c10::IValue(byte_views.back().first);
        } else if (v.isTensorList()) {
            std::vector<at::Tensor> ts = v.toTensorVector();
            for (auto& t : ts) t = t.view(bits);
            v = c10::IValue(c10::List<at::Tensor>(ts));
        }
    }
    // Below autograd, as the fallback itself runs: ember's own kernels for the integer views.
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), stack);

    // A kernel that resized an out= view gave the view new storage: the caller's tensor takes it.
    for (const auto& [bytes, caller] : byte_views) {
        if (bytes.sizes() == caller.sizes() && bytes.strides() == caller.strides() &&
            bytes.storage().is_alias_of(caller.storage()) && bytes.storage_offset() == caller.storage_offset())
            continue;
        c10::TensorImpl* impl = caller.unsafeGetTensorImpl();
        impl->set_storage_keep_dtype(bytes.storage());
        impl->set_sizes_and_strides(bytes.sizes(), bytes.strides(), bytes.storage_offset());
    }
    const size_t rbegin = stack->size() - schema.returns().size();
    for (size_t j = rbegin; j < stack->size(); ++j) {
        c10::IValue& r = (*stack)[j];
        if (!r.isTensor()) continue;
        const at::Tensor t = r.toTensor();
        // In-place and out= results are the caller's own tensors; new ones are viewed back.
        at::Tensor result = t.view(*dtype);
        for (const auto& [bytes, caller] : byte_views)
            if (t.is_same(bytes)) result = caller;
        r = c10::IValue(result);
    }
    return true;
}

}  // namespace ember::torch_glue
