#include "kernels/gemm/gemm.h"

#include <algorithm>
#include <string>
#include <vector>


namespace ember::kernels {
namespace {
GemmProvider g_provider = nullptr;
const char* g_provider_name = "none";

bool float_dtype(DType t) {
    return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kBFloat16 ||
           t == DType::kFloat16;
}

bool integer_dtype(DType t) {
    return t == DType::kUInt8 || t == DType::kInt8 || t == DType::kInt16 || t == DType::kInt32 ||
           t == DType::kInt64;
}

// Integer products, which no BLAS offers: a plain i-k-j loop in uint64, so overflow wraps modulo
// 2^bits exactly as the CPU's same-type accumulation does, with alpha and beta as integers.
template <typename T>
void integer_gemm_typed(const GemmArgs& g) {
    const TensorView &a = g.a, &b = g.b, &c = g.c;
    const int64_t batch = a.sizes[0], m = a.sizes[1], k = a.sizes[2], n = b.sizes[2];
    const auto alpha = static_cast<uint64_t>(g.int_alpha);
    const auto beta = static_cast<uint64_t>(g.int_beta);
    const T* pa = static_cast<const T*>(a.data);
    const T* pb = static_cast<const T*>(b.data);
    T* pc = static_cast<T*>(c.data);
    std::vector<uint64_t> row(static_cast<size_t>(n));
    for (int64_t z = 0; z < batch; ++z) {
        for (int64_t i = 0; i < m; ++i) {
            std::fill(row.begin(), row.end(), 0);
            for (int64_t p = 0; p < k; ++p) {
                const auto x = static_cast<uint64_t>(static_cast<int64_t>(
                    pa[z * a.strides[0] + i * a.strides[1] + p * a.strides[2]]));
                if (x == 0) continue;
                const T* brow = pb + z * b.strides[0] + p * b.strides[1];
                for (int64_t j = 0; j < n; ++j) row[j] += x * static_cast<uint64_t>(static_cast<int64_t>(brow[j * b.strides[2]]));
            }
            T* crow = pc + z * c.strides[0] + i * c.strides[1];
            for (int64_t j = 0; j < n; ++j) {
                uint64_t v = alpha * row[j];
                if (g.int_beta != 0) v += beta * static_cast<uint64_t>(static_cast<int64_t>(crow[j * c.strides[2]]));
                crow[j * c.strides[2]] = static_cast<T>(v);
            }
        }
    }
}

Status integer_gemm(const GemmArgs& args) {
    switch (args.a.dtype) {
        case DType::kUInt8: integer_gemm_typed<uint8_t>(args); break;
        case DType::kInt8: integer_gemm_typed<int8_t>(args); break;
        case DType::kInt16: integer_gemm_typed<int16_t>(args); break;
        case DType::kInt32: integer_gemm_typed<int32_t>(args); break;
        case DType::kInt64: integer_gemm_typed<int64_t>(args); break;
        default: return unimplemented(std::string("gemm for dtype ") + dtype_name(args.a.dtype));
    }
    return Status();
}

// The function that computes a (part of a) product of this dtype.
GemmProvider runner(DType t) { return integer_dtype(t) ? integer_gemm : g_provider; }
}  // namespace

namespace {
BlockSgemm g_block_sgemm = nullptr;
}  // namespace

void set_block_sgemm(BlockSgemm fn) { g_block_sgemm = fn; }
BlockSgemm block_sgemm() { return g_block_sgemm; }

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
    if (a.dtype != b.dtype || a.dtype != c.dtype || !(float_dtype(a.dtype) || integer_dtype(a.dtype))) {
        return unimplemented(std::string("gemm for dtype ") + dtype_name(a.dtype));
    }
    if (float_dtype(a.dtype) && g_provider == nullptr) return internal_error("gemm: no GEMM provider registered");
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
    return runner(args.a.dtype)(args);
}

Status gemm(const GemmArgs& args, runtime::ThreadPool* pool) {
    EMBER_RETURN_IF_ERROR(check(args));
    const GemmProvider run = runner(args.a.dtype);
    const int64_t batch = args.a.sizes[0], m = args.a.sizes[1], k = args.a.sizes[2], n = args.b.sizes[2];
    const int threads = pool ? pool->num_threads() : 1;
    const double flops = 2.0 * static_cast<double>(batch) * m * n * k;
    const bool by_batch = batch >= threads;
    if (threads < 2 || flops < kSplitFlops || (!by_batch && m < 2 * kMinRows)) return run(args);
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
        return run(part);
    });
}

}  // namespace ember::kernels
