#include "kernels/gemm/gemm.h"

#include <string>

namespace ember::kernels {
namespace {
GemmProvider g_provider = nullptr;
const char* g_provider_name = "none";

bool gemm_dtype(DType t) {
    return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kBFloat16 ||
           t == DType::kFloat16;
}
}  // namespace

void set_gemm_provider(GemmProvider provider, const char* name) {
    g_provider = provider;
    g_provider_name = name;
}

const char* gemm_provider_name() { return g_provider_name; }

Status gemm(const GemmArgs& args) {
    const TensorView &a = args.a, &b = args.b, &c = args.c;
    if (a.ndim != 3 || b.ndim != 3 || c.ndim != 3) return invalid_argument("gemm: operands must be 3-d");
    if (a.sizes[0] != b.sizes[0] || a.sizes[0] != c.sizes[0] || a.sizes[2] != b.sizes[1] ||
        c.sizes[1] != a.sizes[1] || c.sizes[2] != b.sizes[2]) {
        return invalid_argument("gemm: shape mismatch");
    }
    if (a.dtype != b.dtype || a.dtype != c.dtype || !gemm_dtype(a.dtype)) {
        return unimplemented(std::string("gemm for dtype ") + dtype_name(a.dtype));
    }
    if (g_provider == nullptr) return internal_error("gemm: no GEMM provider registered");
    return g_provider(args);
}

}  // namespace ember::kernels
