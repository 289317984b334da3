#include "kernels/gemm/gemm.h"

#include <algorithm>
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

namespace {

Status check(const GemmArgs& args) {
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
    return Status();
}

// Rows [lo, hi) of dim `d` of a view.
TensorView slice(TensorView v, int d, int64_t lo, int64_t hi) {
    v.data = static_cast<char*>(v.data) + lo * v.strides[d] * static_cast<int64_t>(element_size(v.dtype));
    v.sizes[d] = hi - lo;
    return v;
}

// Below this many multiply-adds one thread is faster than splitting (bench/matmul.py).
constexpr double kSplitFlops = 1 << 22;
constexpr int64_t kMinRows = 16;

}  // namespace

Status gemm(const GemmArgs& args) {
    EMBER_RETURN_IF_ERROR(check(args));
    return g_provider(args);
}

Status gemm(const GemmArgs& args, runtime::ThreadPool* pool) {
    EMBER_RETURN_IF_ERROR(check(args));
    const int64_t batch = args.a.sizes[0], m = args.a.sizes[1], k = args.a.sizes[2], n = args.b.sizes[2];
    const int threads = pool ? pool->num_threads() : 1;
    const double flops = 2.0 * static_cast<double>(batch) * m * n * k;
    const bool by_batch = batch >= threads;
    if (threads < 2 || flops < kSplitFlops || (!by_batch && m < 2 * kMinRows)) return g_provider(args);
    const int64_t extent = by_batch ? batch : m;
    const int dim = by_batch ? 0 : 1;
    const int64_t chunks = by_batch ? threads : std::min<int64_t>(threads, m / kMinRows);
    const int64_t step = (extent + chunks - 1) / chunks;
    return pool->for_each_item(chunks, [&](int64_t i, runtime::ThreadPool*) {
        const int64_t r0 = i * step, r1 = std::min(extent, r0 + step);
        if (r0 >= r1) return Status();
        GemmArgs part = args;
        part.a = slice(args.a, dim, r0, r1);
        part.c = slice(args.c, dim, r0, r1);
        if (by_batch) part.b = slice(args.b, 0, r0, r1);
        return g_provider(part);
    });
}

}  // namespace ember::kernels
